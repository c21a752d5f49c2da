//! `http_fetch`: a guarded HTTP GET ([`crate::tools::fetch`]: public
//! addresses only, pinned connections, redirects checked hop by hop, the
//! body cut at `max_bytes`), the whole fetch cut at `timeout_secs`. Off
//! unless listed in `[tools] builtin`.

use std::time::Duration;

use futures_util::future::BoxFuture;
use reqwest::Url;
use serde_json::{Value, json};

use crate::tools::config::{HttpFetchConfig, secs};
use crate::tools::{Content, Tool, ToolError, ToolOutput, ToolSpec};

pub struct HttpFetch {
    config: HttpFetchConfig,
}

impl HttpFetch {
    pub fn new(config: HttpFetchConfig) -> Self {
        crate::provider::upstream::install_crypto_provider();
        HttpFetch { config }
    }

    async fn fetch(&self, url: Url) -> Result<ToolOutput, String> {
        let f = crate::tools::fetch::get(&self.config, url).await?;
        let head = format!(
            "HTTP {} from {} ({}, {} bytes{})",
            f.status,
            f.url,
            f.mime,
            f.body.len(),
            if f.truncated { ", truncated" } else { "" }
        );
        let ok = (200..300).contains(&f.status);
        let mut out = ToolOutput { content: vec![Content::Text(head)], is_error: !ok };
        if f.mime.starts_with("image/") && !f.truncated {
            let mime = f.mime.split(';').next().unwrap_or("image/png").trim().to_string();
            out.content.push(Content::Image { mime, data: base64(&f.body) });
        } else {
            out.content.push(Content::Text(String::from_utf8_lossy(&f.body).into_owned()));
        }
        Ok(out)
    }
}

impl Tool for HttpFetch {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "http_fetch".into(),
            description: "Fetch a public web page or file with HTTP GET and return its body (text, or the image)."
                .into(),
            parameters: json!({"type": "object", "properties": {
                "url": {"type": "string", "description": "An http or https URL"}},
                "required": ["url"], "additionalProperties": false}),
        }
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let raw = args.get("url").and_then(Value::as_str).unwrap_or_default();
            let url = match Url::parse(raw) {
                Ok(u) => u,
                Err(e) => return Ok(ToolOutput::error(format!("not a URL ({e}): {raw}"))),
            };
            let limit: Duration = secs(self.config.timeout_secs);
            match tokio::time::timeout(limit, self.fetch(url)).await {
                Err(_) => Ok(ToolOutput::error(format!("the fetch took longer than {limit:?}"))),
                Ok(Err(msg)) => Ok(ToolOutput::error(msg)),
                Ok(Ok(out)) => Ok(out),
            }
        })
    }
}

fn base64(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        s.push(T[(n >> 18) as usize & 63] as char);
        s.push(T[(n >> 12) as usize & 63] as char);
        s.push(if c.len() > 1 { T[(n >> 6) as usize & 63] as char } else { '=' });
        s.push(if c.len() > 2 { T[n as usize & 63] as char } else { '=' });
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_encodes() {
        assert_eq!(base64(b"hello"), "aGVsbG8=");
        assert_eq!(base64(b"hi!"), "aGkh");
    }

    #[tokio::test]
    async fn refuses_loopback_and_unlisted_hosts() {
        let f = HttpFetch::new(HttpFetchConfig::default());
        for url in [
            "http://127.0.0.1:9/x",
            "http://[::127.0.0.1]:9/",
            "http://[::ffff:0:7f00:1]:9/",
            "http://[2002:7f00:1::]:9/",
        ] {
            let out = f.call(json!({"url": url})).await.unwrap();
            assert!(out.is_error && out.model_text(false).contains("non-public"), "{url}: {out:?}");
        }
        let out = f.call(json!({"url": "file:///etc/passwd"})).await.unwrap();
        assert!(out.is_error, "{out:?}");
        let f = HttpFetch::new(HttpFetchConfig { allow_hosts: vec!["example.org".into()], ..Default::default() });
        let out = f.call(json!({"url": "http://localhost/"})).await.unwrap();
        assert!(out.model_text(false).contains("allow-list"), "{out:?}");
    }
}
