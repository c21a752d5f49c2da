//! The provider profile: the data model of `providers/*.toml`. A profile is
//! data only; each field switches on code written once in
//! [`request`](super::request), [`crate::stream`] or [`errors`](super::errors).
//! Adding a vendor is adding one file.

use std::collections::BTreeMap;

use serde::Deserialize;

/// One vendor or server.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The profile id (the file name); filled in by the loader.
    #[serde(default)]
    pub id: String,
    /// Human-readable name.
    pub name: String,
    /// Default base URL, including the version path (`…/v1`).
    pub base_url: String,
    /// The environment variable that holds the API key (none for local servers).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Send the key as `Authorization: Bearer` (default) or in this header.
    #[serde(default)]
    pub auth_header: Option<String>,
    /// Models the vendor offers (listed on `/v1/models`).
    #[serde(default)]
    pub models: Vec<String>,
    /// Vendor documentation, for `modelshim providers`.
    #[serde(default)]
    pub docs: Option<String>,
    #[serde(default)]
    pub request: RequestQuirks,
    #[serde(default)]
    pub thinking: Thinking,
    #[serde(default)]
    pub response: ResponseQuirks,
    #[serde(default)]
    pub tools: ToolQuirks,
    #[serde(default)]
    pub errors: ErrorQuirks,
}

/// Request rewrites for parameters and messages the vendor rejects.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RequestQuirks {
    /// Top-level parameters removed before sending.
    #[serde(default)]
    pub drop: Vec<String>,
    /// Top-level parameters renamed (`max_completion_tokens = "max_tokens"`).
    /// A rename never overwrites a value the client set under the new name.
    #[serde(default)]
    pub rename: BTreeMap<String, String>,
    /// Numeric parameters clamped into `[min, max]`.
    #[serde(default)]
    pub clamp: BTreeMap<String, [f64; 2]>,
    /// Role the vendor uses instead of `developer` (usually `system`).
    #[serde(default)]
    pub developer_role: Option<String>,
    /// Several system messages are merged into one, placed first.
    #[serde(default)]
    pub merge_system: bool,
    /// Content-part arrays that are all text become one string.
    #[serde(default)]
    pub flatten_text_parts: bool,
    /// `name` on messages is removed.
    #[serde(default)]
    pub strip_message_name: bool,
    /// `json_schema` response formats become `json_object` plus the schema
    /// in the system prompt.
    #[serde(default)]
    pub json_schema_to_prompt: bool,
    /// Fields set on every request unless the client set them.
    #[serde(default)]
    pub defaults: serde_json::Map<String, serde_json::Value>,
}

/// How the vendor switches thinking on and off.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Thinking {
    /// How `reasoning_effort` from the client is expressed upstream.
    #[serde(default)]
    pub style: ThinkingStyle,
    /// Keep `reasoning_effort` next to the translated switch (vendors that
    /// take both, such as DeepSeek and GLM-5.2).
    #[serde(default)]
    pub keep_effort: bool,
    /// The vendor refuses thinking on non-streamed calls (DashScope open
    /// Qwen3): such calls are streamed upstream and assembled here.
    #[serde(default)]
    pub stream_only: bool,
}

#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingStyle {
    /// Pass `reasoning_effort` through unchanged.
    #[default]
    Effort,
    /// `thinking: {"type": "enabled" | "disabled"}` (DeepSeek, GLM, Kimi, Doubao).
    ThinkingType,
    /// `enable_thinking: bool` (DashScope, SiliconFlow).
    EnableThinking,
    /// `chat_template_kwargs: {"enable_thinking": bool}` (vLLM, SGLang).
    ChatTemplateKwargs,
    /// Ollama's `think: bool`.
    Think,
}

/// Fix-ups on what the vendor answers.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ResponseQuirks {
    /// Vendor `finish_reason` values mapped to OpenAI's (`sensitive =
    /// "content_filter"`). Common ones are mapped for every profile.
    #[serde(default)]
    pub finish_reason: BTreeMap<String, String>,
    /// The template opens `<think>` itself, so output starts in reasoning
    /// (DeepSeek-R1 served raw, Qwen3 thinking).
    #[serde(default)]
    pub starts_in_reasoning: bool,
}

/// Tool support.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ToolQuirks {
    /// Default mode when the provider config does not set one.
    #[serde(default)]
    pub mode: Option<ToolMode>,
    /// Text formats the models emit, by model glob (`"qwen3-coder*" =
    /// ["qwen3_coder_xml"]`); the longest matching glob wins, and models that
    /// match none use every format.
    #[serde(default)]
    pub formats: BTreeMap<String, Vec<String>>,
    /// `strict` is removed from function definitions.
    #[serde(default)]
    pub strip_strict: bool,
    /// Only `tool_choice: "auto"` is accepted: `none` drops the tools,
    /// forced choices become `auto` plus an instruction in the prompt.
    #[serde(default)]
    pub tool_choice_auto_only: bool,
    /// `parallel_tool_calls` is not accepted.
    #[serde(default)]
    pub drop_parallel_tool_calls: bool,
    /// The models take images: images returned by server-side tools are
    /// sent on in a `user` message after the tool results (else they are
    /// replaced by a text note).
    #[serde(default)]
    pub vision: bool,
}

/// `tool_calls` modes (DESIGN.md).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    /// Trust and repair native tool calls only.
    Native,
    /// Native plus recovery of calls written in the text, always.
    Text,
    /// Tools are described in a prompt (upstream takes none).
    Prompt,
    /// Native plus text recovery whenever the request declared tools.
    #[default]
    Auto,
}

/// How vendor error bodies map to OpenAI statuses.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ErrorQuirks {
    /// Vendor business codes (`"1113"`) to the HTTP status clients should see.
    #[serde(default)]
    pub codes: BTreeMap<String, u16>,
}

impl Profile {
    /// Parses a profile file; `id` is the file stem.
    pub fn parse(id: &str, text: &str) -> Result<Self, toml::de::Error> {
        let mut p: Profile = toml::from_str(text)?;
        p.id = id.to_string();
        Ok(p)
    }

    /// One line per quirk this profile switches on, for `modelshim providers`.
    pub fn fixes(&self) -> Vec<String> {
        let mut v = Vec::new();
        let r = &self.request;
        if !r.drop.is_empty() {
            v.push(format!("drops {}", r.drop.join(", ")));
        }
        for (a, b) in &r.rename {
            v.push(format!("renames {a} to {b}"));
        }
        for (k, [lo, hi]) in &r.clamp {
            v.push(format!("clamps {k} to [{lo}, {hi}]"));
        }
        if let Some(role) = &r.developer_role {
            v.push(format!("developer role sent as {role}"));
        }
        let flags = [
            (r.merge_system, "merges system messages"),
            (r.flatten_text_parts, "flattens text content parts"),
            (r.strip_message_name, "strips message names"),
            (r.json_schema_to_prompt, "json_schema downgraded to json_object + prompt"),
            (self.tools.strip_strict, "strips strict from tools"),
            (self.tools.tool_choice_auto_only, "tool_choice degraded to auto"),
            (self.tools.drop_parallel_tool_calls, "drops parallel_tool_calls"),
            (self.tools.vision, "tool-result images sent as user images"),
            (self.thinking.stream_only, "thinking calls streamed upstream"),
            (self.response.starts_in_reasoning, "output starts in <think>"),
        ];
        v.extend(flags.iter().filter(|(on, _)| *on).map(|(_, s)| s.to_string()));
        if self.thinking.style != ThinkingStyle::Effort {
            v.push(format!("reasoning_effort sent as {:?}", self.thinking.style));
        }
        for (k, f) in &self.tools.formats {
            v.push(format!("{k}: tool calls in text as {}", f.join("/")));
        }
        for (k, to) in &self.response.finish_reason {
            v.push(format!("finish_reason {k} -> {to}"));
        }
        for (k, s) in &self.errors.codes {
            v.push(format!("error code {k} -> HTTP {s}"));
        }
        v
    }
}
