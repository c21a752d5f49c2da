//! The vision bridge: for a route whose model cannot see, every image part
//! of the request is described by `[vision_bridge] model` and replaced by a
//! text part with the description (docs/vision.md). [`super::route::send`]
//! decides per route whether it sees and asks a [`Bridge`] for the
//! described request, once per send. Each description is a call of its own
//! along the bridge's route chain, through [`super::route::send`] with the
//! request's observer (so it is counted, billed to the key and shown in the
//! console), and is kept by the image's content hash in the state store.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures_util::future::BoxFuture;
use futures_util::{StreamExt, TryStreamExt};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::Core;
use super::context::RequestCtx;
use super::route::{Describer, Sent};
use crate::config::vision::VisionBridgeConfig;
use crate::error::ApiError;
use crate::openai::{ChatRequest, Chunk, Completion, Message};
use crate::provider::upstream::Reply;

/// The state store's namespace of descriptions.
const NS: &str = "vision";

/// What the bridge model is asked, with the image.
pub const PROMPT: &str = "Describe this image for someone who cannot see it and must act on it. Transcribe every piece of visible text exactly as written (code, terminal output, error messages, labels, numbers), in reading order. Then describe the layout, the UI state (selected items, open dialogs, focused fields, toggles, scroll position), any errors or warnings, charts or diagrams and what they show, and anything unusual. Be faithful: say what is there, do not guess at what is not visible, and do not answer questions about it.";

/// The most tokens one description may take.
const MAX_TOKENS: u64 = 4096;

/// A request's bridge: the core, the request's observer and the settings.
pub struct Bridge<'a> {
    s: &'a Core,
    ctx: &'a Arc<RequestCtx>,
    cfg: &'a VisionBridgeConfig,
}

/// One image part of a request: where it is and what it holds.
#[derive(Clone)]
struct Part {
    /// `messages[i].content[j]`, for errors and the console.
    path: String,
    at: (usize, usize),
    url: String,
}

/// An image's bytes, read from its data: URL or fetched.
struct Image {
    mime: String,
    bytes: Vec<u8>,
}

impl<'a> Bridge<'a> {
    pub fn new(s: &'a Core, ctx: &'a Arc<RequestCtx>, cfg: &'a VisionBridgeConfig) -> Self {
        Bridge { s, ctx, cfg }
    }

    /// `req` with every image part replaced by its description.
    async fn describe_all(&self, req: &ChatRequest) -> Result<ChatRequest, ApiError> {
        let _aside = self.ctx.aside();
        let parts = image_parts(req);
        let concurrency = self.cfg.concurrency.max(1);
        // The same image twice in a request (a screenshot on every turn) is
        // described once: equal URLs share a description.
        let mut unique: Vec<Part> = Vec::new();
        for p in &parts {
            if !unique.iter().any(|u| u.url == p.url) {
                unique.push(p.clone());
            }
        }
        let asks = unique.into_iter().map(|p| async move {
            let d = self.describe(&p).await?;
            Ok::<_, ApiError>((p.url, d))
        });
        let described: Vec<(String, String)> =
            futures_util::stream::iter(asks).buffered(concurrency).try_collect().await?;
        let mut out = req.clone();
        for p in &parts {
            let Some((_, text)) = described.iter().find(|(u, _)| *u == p.url) else { continue };
            if let Some(slot) = out.messages.get_mut(p.at.0).and_then(|m| m.content.get_mut(p.at.1)) {
                *slot = json!({"type": "text", "text": text});
            }
        }
        Ok(out)
    }

    /// One image's description, as the text part's text: from the cache, or
    /// from the bridge model.
    async fn describe(&self, part: &Part) -> Result<String, ApiError> {
        let image = self.load(part).await?;
        let key = cache_key(&self.cfg.model, self.cfg.prompt.as_deref(), &image.bytes);
        let store = self.s.store.as_ref();
        let started = Instant::now();
        let cached = match store.get(NS, &key).await {
            Ok(v) => v.and_then(|v| v.get("description").and_then(Value::as_str).map(str::to_string)),
            Err(e) => {
                tracing::warn!(error = %e, "vision cache unavailable; describing the image again");
                None
            }
        };
        let (description, fresh) = match cached {
            Some(d) => (d, false),
            None => {
                let d = self.ask(&image, part).await?;
                if let Err(e) = store.put(NS, &key, json!({"description": d}), self.cfg.cache_ttl()).await {
                    tracing::warn!(error = %e, "vision cache unavailable; the description is not kept");
                }
                (d, true)
            }
        };
        if let Some(c) = &self.ctx.shown {
            c.timeline(json!({"type": "image_described", "part": part.path, "bridge": self.cfg.model,
                "cached": !fresh, "bytes": image.bytes.len(), "duration_ms": started.elapsed().as_millis() as u64,
                "description": description}));
        }
        Ok(format!(
            "[Description of an image (the model answering cannot see images, so {} described it):]\n{description}",
            self.cfg.model
        ))
    }

    /// The image's bytes: a data: URL decoded, an http(s) URL fetched under
    /// `http_fetch`'s rules; anything else is a 400 naming the part.
    async fn load(&self, part: &Part) -> Result<Image, ApiError> {
        let bad = |why: String| ApiError::invalid_param(&part.path, format!("The image at {}: {why}", part.path));
        let max = self.cfg.max_image_bytes;
        if let Some(rest) = part.url.strip_prefix("data:") {
            let (head, data) = rest.split_once(',').ok_or_else(|| bad("the data: URL has no comma.".into()))?;
            let mime = head.strip_suffix(";base64").ok_or_else(|| bad("the data: URL is not base64.".into()))?;
            let mime = mime.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
            if !mime.starts_with("image/") {
                return Err(bad(format!("the data: URL is {mime:?}, not an image.")));
            }
            // Base64 is 4 characters for 3 bytes: too large before decoding.
            if data.len() / 4 * 3 > max + 3 {
                return Err(bad(format!("the image is larger than {max} bytes ([vision_bridge] max_image_bytes).")));
            }
            let bytes = decode(data).ok_or_else(|| bad("the data: URL's base64 does not decode.".into()))?;
            if bytes.is_empty() || bytes.len() > max {
                return Err(bad(format!("the image is empty or larger than {max} bytes.")));
            }
            return Ok(Image { mime, bytes });
        }
        let url = reqwest::Url::parse(&part.url).map_err(|e| bad(format!("not a URL ({e}).")))?;
        let rules = crate::tools::config::HttpFetchConfig {
            allow_hosts: self.cfg.allow_hosts.clone(),
            allow_private: self.cfg.allow_private,
            max_bytes: max,
            timeout_secs: self.cfg.fetch_timeout_secs,
        };
        let limit = Duration::from_secs_f64(self.cfg.fetch_timeout_secs.clamp(0.1, 600.0));
        let f = match tokio::time::timeout(limit, crate::tools::fetch::get(&rules, url)).await {
            Err(_) => return Err(bad(format!("fetching it took longer than {limit:?}."))),
            Ok(Err(why)) => return Err(bad(format!("it cannot be fetched: {why}."))),
            Ok(Ok(f)) => f,
        };
        let mime = f.mime.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        if !(200..300).contains(&f.status) {
            return Err(bad(format!("fetching it answered HTTP {}.", f.status)));
        }
        if !mime.starts_with("image/") {
            return Err(bad(format!("it is {mime:?}, not an image.")));
        }
        if f.truncated || f.body.is_empty() {
            return Err(bad(format!(
                "the image is empty or larger than {max} bytes ([vision_bridge] max_image_bytes)."
            )));
        }
        Ok(Image { mime, bytes: f.body })
    }

    /// The bridge model's description of one image: one non-streamed call
    /// along the bridge's routes, the one way to the upstream.
    async fn ask(&self, image: &Image, part: &Part) -> Result<String, ApiError> {
        let s = self.s;
        let routes = s.providers.routes(&self.cfg.model);
        if routes.is_empty() {
            return Err(super::route::not_routed(s, &self.cfg.model));
        }
        let data = base64::engine::general_purpose::STANDARD.encode(&image.bytes);
        let prompt = self.cfg.prompt.as_deref().unwrap_or(PROMPT);
        let content = json!([{"type": "text", "text": prompt},
            {"type": "image_url", "image_url": {"url": format!("data:{};base64,{data}", image.mime)}}]);
        let mut extra = Map::new();
        extra.insert("max_tokens".into(), json!(MAX_TOKENS));
        let req = ChatRequest {
            model: self.cfg.model.clone(),
            messages: vec![Message { role: "user".into(), content, extra: Map::new() }],
            stream: Some(false),
            tools: None,
            extra,
        };
        // No describer: the bridge itself must see (checked at startup).
        let Sent { route, reply, turn, meter, .. } = super::route::send(s, self.ctx, &routes, req, None).await?;
        let p = &route.provider;
        let label = p.metric_model(&route.model);
        let mut text = String::new();
        match reply {
            Reply::Json(body) => {
                let c: Completion = body.parse("a chat completion")?;
                if let Some(u) = c.usage.as_ref().filter(|u| u.is_object()) {
                    let fields = &p.profile.response.usage;
                    self.ctx.usage(&p.name, label, u, turn.as_deref().map(|t| (t, fields)));
                }
                if let Some(m) = c.choices.first() {
                    text.push_str(m.message.content.as_deref().unwrap_or_default());
                }
            }
            // A profile that streams upstream: usage is counted as it goes by.
            Reply::Events(mut events) => {
                while let Some(ev) = events.next().await {
                    let ev = ev?;
                    if let Some(m) = &meter {
                        m.event();
                    }
                    let Ok(c) = serde_json::from_slice::<Chunk>(ev.bytes()) else { continue };
                    if let Some(m) = &meter {
                        m.chunk(&c);
                    }
                    if let Some(d) = c.choices.first().and_then(|c| c.delta.content.as_deref()) {
                        text.push_str(d);
                    }
                    if text.len() > self.cfg.max_description_bytes {
                        break;
                    }
                }
            }
        }
        // A model that thinks in its text: the answer is after the thinking.
        let text = text.rsplit_once("</think>").map_or(text.as_str(), |(_, after)| after);
        if text.trim().is_empty() {
            return Err(ApiError::Upstream(crate::provider::UpstreamError::Protocol(format!(
                "the vision bridge {} gave no description of the image at {}",
                self.cfg.model, part.path
            ))));
        }
        Ok(cut(text.trim(), self.cfg.max_description_bytes))
    }
}

impl Describer for Bridge<'_> {
    fn described<'b>(&'b self, req: &'b ChatRequest) -> BoxFuture<'b, Result<ChatRequest, ApiError>> {
        Box::pin(self.describe_all(req))
    }
}

/// Every image part of the messages, in order.
fn image_parts(req: &ChatRequest) -> Vec<Part> {
    let mut out = Vec::new();
    for (i, m) in req.messages.iter().enumerate() {
        let Value::Array(parts) = &m.content else { continue };
        for (j, p) in parts.iter().enumerate() {
            if p.get("type").and_then(Value::as_str) != Some("image_url") {
                continue;
            }
            // `image_url` is an object with `url`, or (some clients) the URL itself.
            let url = p.get("image_url").and_then(|u| u.get("url").or(Some(u))).and_then(Value::as_str);
            out.push(Part {
                path: format!("messages[{i}].content[{j}]"),
                at: (i, j),
                url: url.unwrap_or_default().to_string(),
            });
        }
    }
    out
}

/// Base64 as clients write it: standard, URL-safe, padded or not, with
/// line breaks or not.
fn decode(data: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let clean: String;
    let data = if data.contains(|c: char| c.is_ascii_whitespace()) {
        clean = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        clean.as_str()
    } else {
        data
    };
    [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD].iter().find_map(|e| e.decode(data).ok())
}

/// The cache key: the image's SHA-256 with the bridge model and prompt, so
/// another bridge or prompt does not reuse a description.
fn cache_key(model: &str, prompt: Option<&str>, bytes: &[u8]) -> String {
    let image: [u8; 32] = Sha256::digest(bytes).into();
    let how: [u8; 32] = Sha256::digest(format!("{model}\n{}", prompt.unwrap_or(PROMPT))).into();
    format!("{}:{}", hex(&image), hex(&how[..8]))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(content: Value) -> ChatRequest {
        serde_json::from_value(json!({"model": "m", "messages": [{"role": "user", "content": content}]})).unwrap()
    }

    #[test]
    fn image_parts_are_found_in_both_forms() {
        let r = req(json!([{"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "image_url", "image_url": "https://x/y.png"}]));
        let parts = image_parts(&r);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].path, "messages[0].content[1]");
        assert_eq!(parts[1].url, "https://x/y.png");
        assert!(r.has_image());
        assert!(!req(json!("just text")).has_image());
    }

    #[test]
    fn base64_forms_decode_and_keys_follow_content() {
        assert_eq!(decode("aGVsbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(decode("aGVs\nbG8").as_deref(), Some(&b"hello"[..]));
        assert!(decode("not base64!").is_none());
        let a = cache_key("b/m", None, b"png");
        assert_eq!(a, cache_key("b/m", None, b"png"));
        assert_ne!(a, cache_key("b/m", None, b"gif"));
        assert_ne!(a, cache_key("b/other", None, b"png"));
        assert_eq!(cut("héllo", 2), "h");
    }
}
