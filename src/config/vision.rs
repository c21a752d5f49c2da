//! The `[vision_bridge]` section: the model that describes images for models
//! that cannot see (docs/vision.md, `core::vision`).

/// Settings of the `[vision_bridge]` config section.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisionBridgeConfig {
    /// The model that describes images: `provider/model` or an alias (a
    /// chain falls back as any request's does). It must take images.
    pub model: String,
    /// The instruction sent with each image (the default asks for every
    /// visible text, the layout, UI state and errors).
    #[serde(default)]
    pub prompt: Option<String>,
    /// The largest image, in decoded bytes (a data: URL or a fetched one).
    #[serde(default = "d_max_image_bytes")]
    pub max_image_bytes: usize,
    /// The most images of one request described at once.
    #[serde(default = "d_concurrency")]
    pub concurrency: usize,
    /// How long a description is kept, by the image's content hash (in the
    /// `[state]` store: memory, or Redis shared by replicas).
    #[serde(default = "d_cache_ttl")]
    pub cache_ttl_secs: u64,
    /// The longest description kept, in bytes (the bridge's `max_tokens`
    /// bounds it upstream; this bounds what goes into the request).
    #[serde(default = "d_max_description")]
    pub max_description_bytes: usize,
    /// Image URLs (http, https) are fetched under `http_fetch`'s rules:
    /// hosts allowed (empty: any public host)…
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// …and non-public addresses only when this is set.
    #[serde(default)]
    pub allow_private: bool,
    /// The time limit of one image fetch.
    #[serde(default = "d_fetch_timeout")]
    pub fetch_timeout_secs: f64,
}

fn d_max_image_bytes() -> usize {
    20 << 20
}
fn d_concurrency() -> usize {
    4
}
fn d_cache_ttl() -> u64 {
    7 * 24 * 3600
}
fn d_max_description() -> usize {
    32 << 10
}
fn d_fetch_timeout() -> f64 {
    20.0
}

impl VisionBridgeConfig {
    /// A bridge to `model` with every other setting at its default.
    pub fn to(model: &str) -> Self {
        VisionBridgeConfig {
            model: model.to_string(),
            prompt: None,
            max_image_bytes: d_max_image_bytes(),
            concurrency: d_concurrency(),
            cache_ttl_secs: d_cache_ttl(),
            max_description_bytes: d_max_description(),
            allow_hosts: Vec::new(),
            allow_private: false,
            fetch_timeout_secs: d_fetch_timeout(),
        }
    }

    pub fn cache_ttl(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.cache_ttl_secs.max(1))
    }
}
