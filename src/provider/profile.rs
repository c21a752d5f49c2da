//! The provider profile: the data model of `providers/*.toml`. A profile is
//! data only; each field switches on code written once in
//! [`request`](super::request), [`tools`](super::tools),
//! [`prompt_tools`](super::prompt_tools), [`crate::stream`] or
//! [`errors`](super::errors).
//! Adding a vendor is adding one file.

use std::collections::BTreeMap;

use serde::Deserialize;

pub use crate::config::ToolMode;

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
    /// Follow the upstream's redirects (same origin only, at most 5). Off:
    /// a 3xx is an upstream error (502), so no body and no key is sent on.
    #[serde(default)]
    pub follow_redirects: bool,
    /// Vendor documentation, for `modelshim providers`.
    #[serde(default)]
    pub docs: Option<String>,
    /// The profile of a provider table that names no profile, has a
    /// `base_url`, and whose name is no profile's id (`providers/generic.toml`).
    /// Never a provider by itself when the config has no `[providers]`.
    #[serde(default)]
    pub fallback: bool,
    /// The output tokens a request without `max_tokens` reserves of a key's
    /// budget before it is sent (docs/spend.md); default 1024.
    #[serde(default)]
    pub reserve_output_tokens: Option<u64>,
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
    /// List prices by model glob (`[prices."deepseek-*"]`), each with its
    /// source and date; the longest matching glob wins (docs/spend.md).
    #[serde(default)]
    pub prices: BTreeMap<String, crate::config::prices::Price>,
    /// Models' context windows in tokens, by model glob (the longest
    /// matching glob wins): where an alias chain goes after a context
    /// overflow, and the "M maximum" of the Messages front's overflow error.
    #[serde(default)]
    pub context_windows: BTreeMap<String, u64>,
    /// Which models take images (docs/vision.md).
    #[serde(default)]
    pub vision: Vision,
}

/// `[vision]`: which models take images. A model that cannot see gets its
/// images described by `[vision_bridge]` (or the request is a 400).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Vision {
    /// Models that match no glob. Unset (and no `[tools] vision = true`):
    /// unknown, so images are sent on as the client sent them.
    #[serde(default)]
    pub default: Option<bool>,
    /// Model globs (lower-cased) to whether they take images; the longest
    /// matching glob wins.
    #[serde(default)]
    pub models: BTreeMap<String, bool>,
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
    /// Whether the vendor enforces `response_format: json_schema` itself
    /// (`native`) or modelshim does (`emulate`: `json_object` plus the schema
    /// in the system prompt, the answer extracted, validated, re-asked).
    #[serde(default)]
    pub structured_outputs: Option<crate::config::StructuredMode>,
    /// The older spelling of `structured_outputs = "emulate"`.
    #[serde(default)]
    pub json_schema_to_prompt: bool,
    /// Fields set on every request unless the client set them.
    #[serde(default)]
    pub defaults: serde_json::Map<String, serde_json::Value>,
    /// Explicit prompt-cache markers in content parts (DashScope): a system
    /// or user message on which an Anthropic-front `cache_control` marker
    /// ended gets `cache_control: {"type": "ephemeral"}` on its last text
    /// part (without `ttl`). Off: the markers are dropped.
    #[serde(default)]
    pub cache_control: bool,
}

impl RequestQuirks {
    /// The structured-outputs mode this profile says (`json_schema_to_prompt`
    /// is emulation).
    pub fn structured(&self) -> crate::config::StructuredMode {
        match self.structured_outputs {
            Some(m) => m,
            None if self.json_schema_to_prompt => crate::config::StructuredMode::Emulate,
            None => crate::config::StructuredMode::Native,
        }
    }
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
    /// The models think unless told not to (Kimi K2.5+, GLM-4.7+): a request
    /// that says nothing counts as thinking for `[tools] thinking_conflict`.
    #[serde(default)]
    pub on_by_default: bool,
    /// What the vendor expects of earlier assistant turns' reasoning in the
    /// history (DeepSeek thinking mode answers 400 without it on tool-call
    /// turns; the R1-era reasoner answers 400 with it).
    #[serde(default)]
    pub reasoning_replay: ReasoningReplay,
    /// When replay is required but nothing was captured (store expired,
    /// history from elsewhere): send an empty string (vendors that accept it)
    /// rather than nothing.
    #[serde(default)]
    pub replay_empty_fallback: bool,
    /// Per-model exceptions to `reasoning_replay`, by model glob; the longest
    /// matching glob wins.
    #[serde(default)]
    pub reasoning_replay_models: BTreeMap<String, ReasoningReplay>,
}

impl Thinking {
    /// The replay mode for one model.
    pub fn replay_for(&self, model: &str) -> ReasoningReplay {
        let model = model.to_ascii_lowercase();
        self.reasoning_replay_models
            .iter()
            .filter(|(g, _)| {
                globset::Glob::new(&g.to_ascii_lowercase()).is_ok_and(|g| g.compile_matcher().is_match(&model))
            })
            .max_by_key(|(g, _)| g.len())
            .map_or(self.reasoning_replay, |(_, m)| *m)
    }
}

/// How reasoning of earlier turns goes back upstream.
#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningReplay {
    /// Leave the history as the client sent it.
    #[default]
    Keep,
    /// Restore `reasoning_content` on assistant turns that made tool calls.
    Required,
    /// Remove `reasoning_content` from every assistant turn.
    Reject,
    /// Restore it as a `<think>…</think>` block at the start of `content`
    /// (MiniMax interleaved thinking).
    ThinkInContent,
}

#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingStyle {
    /// Pass `reasoning_effort` through unchanged (turned off with
    /// `reasoning_effort: "none"`).
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
    /// The vendor's usage fields → OpenAI's, as dotted paths
    /// (`"usage_x" = "prompt_tokens_details.cached_tokens"`); the common
    /// ones (DeepSeek's, Kimi's) are read for every profile.
    #[serde(default)]
    pub usage: BTreeMap<String, String>,
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
    /// The models take images: the older spelling of `[vision] default =
    /// true`. Without either, images returned by server-side tools are
    /// replaced by a note.
    #[serde(default)]
    pub vision: bool,
    /// Models (globs, lower-cased) that get prompt-mode tools even when the
    /// provider's mode is not `prompt`: for an upstream that serves some
    /// models without native tools.
    #[serde(default)]
    pub prompt_models: Vec<String>,
    /// The text format prompt mode asks the model to write calls in
    /// (`hermes`, the default, or `markdown_json_fence`).
    #[serde(default)]
    pub prompt_format: PromptFormat,
    /// JSON-schema keywords removed, at any depth, from tool parameter
    /// schemas (`["format", "additionalProperties", "$schema"]`). Property
    /// names that happen to equal a keyword are kept.
    #[serde(default)]
    pub strip_schema_keywords: Vec<String>,
    /// Fields removed from each tool's `function` object (`["input_schema"]`).
    #[serde(default)]
    pub drop_function_fields: Vec<String>,
    /// The characters a tool name may use, as a regex matching one character
    /// (`"[A-Za-z0-9_-]"`). Names with others are renamed upstream (other
    /// characters become `_`, plus a hash suffix) and mapped back in answers.
    #[serde(default)]
    pub name_chars: Option<String>,
    /// The longest tool name the vendor accepts; longer names are renamed
    /// like `name_chars` violations.
    #[serde(default)]
    pub name_max_len: Option<usize>,
    /// Tool-call ids are unique only within one turn (Kimi's
    /// `functions.x:0`) but must be unique in a request: later duplicates in
    /// the history get a stable rewritten id (the first occurrence is sent as
    /// is), and their `tool` results follow.
    #[serde(default)]
    pub dedupe_call_ids: bool,
    /// Tool-call ids must be exactly 9 ASCII letters or digits (Mistral):
    /// other ids in the history are mapped by hash, the same way every turn.
    #[serde(default)]
    pub call_id_alnum9: bool,
    /// What the vendor refuses while thinking is on: `"tools"` (any tools)
    /// or `"forced_choice"` (`tool_choice` required or named).
    #[serde(default)]
    pub thinking_conflict: Option<ThinkingConflict>,
    /// How such a turn is sent instead: `"disable_thinking"` (default) or
    /// `"prompt"` (prompt-mode tools, thinking kept).
    #[serde(default)]
    pub on_thinking_conflict: ConflictFallback,
    /// Text formats whose complete call blocks the models write into their
    /// reasoning instead of the answer (DeepSeek's DSML, Kimi's sections):
    /// when the request declared tools and the answer holds no call, such a
    /// block is recovered as a tool call and cut from the reasoning. Empty
    /// (the default): reasoning is never read for calls.
    #[serde(default)]
    pub from_reasoning: Vec<String>,
}

/// The prompt-mode output format (see [`crate::provider::prompt_tools`]).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum PromptFormat {
    /// `<tool_call>{"name": …, "arguments": {…}}</tool_call>` per call.
    #[default]
    Hermes,
    /// One ```` ```json ```` fence holding a call object or an array of them.
    MarkdownJsonFence,
}

/// What a vendor rejects together with thinking.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingConflict {
    /// Any request with tools.
    Tools,
    /// `tool_choice: "required"` or a named function.
    ForcedChoice,
}

/// The fallback for a [`ThinkingConflict`].
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum ConflictFallback {
    /// Thinking is switched off for that turn.
    #[default]
    DisableThinking,
    /// Tools are emulated by prompt for that turn; thinking stays on.
    Prompt,
}

/// How vendor error bodies map to OpenAI statuses.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ErrorQuirks {
    /// Vendor business codes (`"1113"`) to the HTTP status clients should see.
    #[serde(default)]
    pub codes: BTreeMap<String, u16>,
    /// The vendor's "context too long" errors: regexes on the error message
    /// (case-insensitive) that may capture `tokens` (the prompt's) and `max`
    /// (the window). A match becomes OpenAI's `context_length_exceeded`.
    #[serde(default)]
    pub context_overflow: Vec<String>,
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
            (
                r.structured() == crate::config::StructuredMode::Emulate,
                "json_schema emulated: json_object + prompt, answer validated",
            ),
            (r.cache_control, "Anthropic cache_control markers carried on content parts"),
            (self.tools.strip_strict, "strips strict from tools"),
            (self.tools.tool_choice_auto_only, "tool_choice degraded to auto"),
            (self.tools.drop_parallel_tool_calls, "drops parallel_tool_calls"),
            (self.tools.dedupe_call_ids, "de-duplicates turn-scoped tool-call ids"),
            (self.tools.call_id_alnum9, "maps tool-call ids to 9 alphanumerics"),
            (!self.tools.strip_schema_keywords.is_empty(), "strips unsupported schema keywords"),
            (self.tools.name_chars.is_some() || self.tools.name_max_len.is_some(), "renames tool names it rejects"),
            (self.thinking.stream_only, "thinking calls streamed upstream"),
            (self.response.starts_in_reasoning, "output starts in <think>"),
        ];
        v.extend(flags.iter().filter(|(on, _)| *on).map(|(_, s)| s.to_string()));
        if self.thinking.reasoning_replay != ReasoningReplay::Keep {
            v.push(format!("reasoning of tool-call turns replayed: {:?}", self.thinking.reasoning_replay));
        }
        if self.thinking.style != ThinkingStyle::Effort {
            v.push(format!("reasoning_effort sent as {:?}", self.thinking.style));
        }
        if let Some(c) = self.tools.thinking_conflict {
            v.push(format!("{c:?} with thinking: {:?}", self.tools.on_thinking_conflict));
        }
        let mut sees: Vec<&str> = self.vision.models.iter().filter(|(_, on)| **on).map(|(g, _)| g.as_str()).collect();
        if self.vision.default.unwrap_or(self.tools.vision) {
            sees.insert(0, "every model");
        }
        if !sees.is_empty() {
            v.push(format!("takes images: {}", sees.join(", ")));
        }
        if !self.tools.prompt_models.is_empty() {
            v.push(format!("prompt-mode tools for {}", self.tools.prompt_models.join(", ")));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_mode_per_model_glob() {
        let p = Profile::parse(
            "x",
            "name = \"x\"\nbase_url = \"u\"\n[thinking]\nreasoning_replay = \"required\"\nreasoning_replay_models = { \"deepseek-reasoner*\" = \"reject\", \"*\" = \"keep\", \"deepseek-*\" = \"required\" }\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.thinking.replay_for("deepseek-reasoner"), ReasoningReplay::Reject);
        assert_eq!(p.thinking.replay_for("DeepSeek-V4"), ReasoningReplay::Required);
        assert_eq!(p.thinking.replay_for("other"), ReasoningReplay::Keep);
    }
}
