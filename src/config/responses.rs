//! The `[responses]` section (the Responses front, see `fronts::responses`).

/// Settings of the `[responses]` config section.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponsesConfig {
    /// The environment variable holding the keys that seal reasoning into
    /// `encrypted_content`: comma-separated secrets of 32+ characters, the
    /// first seals, all open. Unset: a random key per process.
    #[serde(default = "d_keys_env")]
    pub reasoning_keys_env: String,
    /// Hosted tool kinds (type without date/`_preview` suffix) left out of
    /// what the vendor sees, with a warning, when no server-side tool serves
    /// them; any other unserved hosted tool is a 400.
    #[serde(default = "d_drop")]
    pub drop_hosted_tools: Vec<String>,
}

fn d_keys_env() -> String {
    "MODELSHIM_REASONING_KEYS".into()
}

fn d_drop() -> Vec<String> {
    ["web_search", "image_generation", "tool_search"].map(String::from).to_vec()
}

impl Default for ResponsesConfig {
    fn default() -> Self {
        ResponsesConfig { reasoning_keys_env: d_keys_env(), drop_hosted_tools: d_drop() }
    }
}
