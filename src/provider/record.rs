//! `serve --record DIR`: writes every upstream exchange as a fixture file
//! (the format of [`crate::fixture`]) that `modelshim replay` serves back.
//!
//! Used only by `upstream.rs`, so handlers never know whether they are being
//! recorded. A streamed answer is tapped event by event as the client
//! receives it, with the time between events, and the file is written when
//! the stream ends; nothing is held back from the client. Credentials never
//! reach the disk: auth headers are replaced, and every configured secret
//! (all providers' API keys) is redacted from the whole file text.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::fixture::{Fixture, RecordedRequest, RecordedResponse, SseEvent};
use crate::redact::Redactor;

/// What replaces a credential.
pub use crate::redact::REDACTED;

/// Headers that carry credentials whatever their value.
const AUTH_HEADERS: &[&str] = &["authorization", "proxy-authorization", "api-key", "x-api-key", "cookie"];

/// Response headers that describe one transfer, not the answer.
const TRANSIENT_HEADERS: &[&str] =
    &["content-length", "transfer-encoding", "connection", "keep-alive", "date", "set-cookie"];

/// Why recording cannot start.
#[derive(Debug, thiserror::Error)]
#[error("cannot record into {}: {source}", .dir.display())]
pub struct RecordError {
    pub dir: PathBuf,
    pub source: std::io::Error,
}

/// Where exchanges are written and what must never be written.
#[derive(Debug)]
pub struct Recorder {
    dir: PathBuf,
    /// Every configured secret: the redactor of the app state, the one the
    /// other exits (error bodies, logs) use.
    secrets: Arc<Redactor>,
    /// Extra header names that carry a key (profiles' `auth_header`).
    auth_headers: Vec<String>,
}

impl Recorder {
    /// Creates `dir` if needed.
    pub fn new(
        dir: &Path,
        secrets: Arc<Redactor>,
        auth_headers: impl IntoIterator<Item = String>,
    ) -> Result<Self, RecordError> {
        // Fixtures hold whole prompts and answers: only the owner reads them.
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).map_err(|source| RecordError { dir: dir.into(), source })?;
        let auth_headers = auth_headers.into_iter().map(|h| h.to_ascii_lowercase()).collect();
        Ok(Recorder { dir: dir.into(), secrets, auth_headers })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts recording one exchange.
    pub fn start(
        self: &Arc<Self>,
        provider: &str,
        method: &str,
        path: &str,
        headers: &http::HeaderMap,
        body: Value,
    ) -> Recording {
        // `Host` names the upstream of this run (its port), not the request.
        let headers = headers
            .iter()
            .filter(|(k, _)| *k != http::header::HOST)
            .map(|(k, v)| {
                let name = k.as_str().to_ascii_lowercase();
                let value = if self.is_auth_header(&name) {
                    REDACTED.to_string()
                } else {
                    String::from_utf8_lossy(v.as_bytes()).into_owned()
                };
                (name, value)
            })
            .collect();
        let model = body.get("model").and_then(Value::as_str).map(str::to_string);
        let recorded_at = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).ok();
        let fx = Fixture {
            name: None,
            provider: Some(provider.to_string()),
            model,
            recorded_at,
            client_request: None,
            request: RecordedRequest { method: method.to_string(), path: path.to_string(), headers, body },
            response: RecordedResponse { status: 0, headers: BTreeMap::new(), body: None, text: None, sse: None },
        };
        Recording { recorder: self.clone(), fx, last: Instant::now() }
    }

    fn is_auth_header(&self, name: &str) -> bool {
        AUTH_HEADERS.contains(&name) || self.auth_headers.iter().any(|h| h == name)
    }

    /// Replaces every secret in `text`, raw and as escaped in JSON.
    fn redact(&self, text: &str) -> String {
        self.secrets.text(text).into_owned()
    }

    /// Writes one fixture; a second recording of the same request gets a
    /// numbered name, so repeated requests replay in order.
    fn write(&self, fx: &Fixture) -> std::io::Result<PathBuf> {
        let text = self.redact(&fx.to_pretty());
        let stem = fx.file_stem();
        for n in 1.. {
            let name = if n == 1 { format!("{stem}.json") } else { format!("{stem}-{n}.json") };
            let path = self.dir.join(name);
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            match options.open(&path) {
                Ok(mut f) => {
                    f.write_all(text.as_bytes())?;
                    return Ok(path);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("no free file name"))
    }
}

/// One exchange being recorded.
pub struct Recording {
    recorder: Arc<Recorder>,
    fx: Fixture,
    last: Instant,
}

impl Recording {
    /// The response status and headers (credentials and transfer headers
    /// left out).
    pub fn head(&mut self, status: u16, headers: &http::HeaderMap) {
        self.fx.response.status = status;
        for (k, v) in headers {
            let name = k.as_str().to_ascii_lowercase();
            if TRANSIENT_HEADERS.contains(&name.as_str()) || self.recorder.is_auth_header(&name) {
                continue;
            }
            self.fx.response.headers.insert(name, String::from_utf8_lossy(v.as_bytes()).into_owned());
        }
        self.last = Instant::now();
    }

    /// A whole body: JSON kept as JSON, anything else as text. Writes the file.
    pub fn body(mut self, bytes: &[u8]) {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(v) => self.fx.response.body = Some(v),
            Err(_) => self.fx.response.text = Some(String::from_utf8_lossy(bytes).into_owned()),
        }
        self.finish();
    }

    /// One SSE event, with the time since the previous one.
    pub fn event(&mut self, event: &str, data: &str) {
        let now = Instant::now();
        let delay_ms = now.duration_since(self.last).as_millis() as u64;
        self.last = now;
        let event = (!event.is_empty() && event != "message").then(|| event.to_string());
        self.fx.response.sse.get_or_insert_with(Vec::new).push(SseEvent { event, data: data.to_string(), delay_ms });
    }

    /// Writes the file. Failing to record never fails the request.
    pub fn finish(mut self) {
        // A key split over two events is found in the assembled stream.
        if let Some(sse) = self.fx.response.sse.as_mut() {
            let mut events: Vec<Value> =
                sse.iter().map(|e| serde_json::from_str(&e.data).unwrap_or(Value::Null)).collect();
            let changed = self.recorder.secrets.across(&mut events);
            for ((e, v), c) in sse.iter_mut().zip(events).zip(changed) {
                if c && !v.is_null() {
                    e.data = v.to_string();
                }
            }
        }
        match self.recorder.write(&self.fx) {
            Ok(path) => tracing::debug!("recorded {}", path.display()),
            Err(e) => tracing::warn!("cannot write a recording into {}: {e}", self.recorder.dir.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_raw_and_escaped() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = Arc::new(Redactor::new(["sk-abc\"def", "xy"]));
        let r = Recorder::new(dir.path(), secrets, []).unwrap();
        let out = r.redact(r#"{"k": "sk-abc\"def", "short": "xy"}"#);
        assert_eq!(out, r#"{"k": "[REDACTED]", "short": "xy"}"#);
    }
}
