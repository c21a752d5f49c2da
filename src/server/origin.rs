//! Browsers at the edge: which web pages may call the API, and which `Host`
//! a loopback listener answers.
//!
//! An open proxy on 127.0.0.1 was usable by any web page: a `no-cors`
//! `text/plain` POST needs no preflight, and the upstream was called on the
//! provider key. Browsers send `Origin` on every cross-origin POST (and
//! `Sec-Fetch-Site`); SDKs, agents and curl send neither. So an API request
//! with an `Origin` not in top-level `allowed_origins`, or with
//! `Sec-Fetch-Site: cross-site`, is refused before anything else runs; an
//! allowed origin gets CORS answers (the preflight too). And a page on a
//! rebinding name (`rebind.evil.example` resolving to 127.0.0.1) is the same
//! origin as the proxy to its browser: a loopback listener answers only a
//! loopback `Host` or one in `allowed_hosts`.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::{HeaderMap, HeaderValue, Method, Uri, header};

/// What the edge knows about browsers, from the config.
#[derive(Debug)]
pub struct Browser {
    /// `allowed_origins`, lowercased, without a trailing `/`.
    origins: Vec<String>,
    /// `allowed_hosts`, lowercased (a name, or a name with its port).
    hosts: Vec<String>,
    /// The listener is loopback: `Host` is checked.
    loopback: AtomicBool,
}

/// Where a request stands with [`Browser::check`].
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// No browser cross-site signal (SDKs, curl, same-origin pages).
    Plain,
    /// A page on an allowed origin: CORS answers for it.
    Allowed(HeaderValue),
    /// A page on another site: refused.
    Refused,
}

/// The request headers a preflight is granted when it names none.
const DEFAULT_ALLOW_HEADERS: &str =
    "authorization, content-type, x-api-key, anthropic-version, anthropic-beta, openai-beta, x-request-id";

impl Browser {
    /// `listen` is the configured address (the default is loopback); the
    /// serving command sets the real one once bound ([`Browser::listening_on`]).
    pub fn new(origins: &[String], hosts: &[String], listen: Option<&str>) -> Browser {
        let loopback = listen.is_none_or(|l| match l.parse::<SocketAddr>() {
            Ok(a) => a.ip().is_loopback(),
            Err(_) => l.split(':').next().is_some_and(is_loopback_name),
        });
        Browser {
            origins: origins.iter().map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase()).collect(),
            hosts: hosts.iter().map(|h| h.trim().to_ascii_lowercase()).collect(),
            loopback: AtomicBool::new(loopback),
        }
    }

    /// The address the server listens on (decides whether `Host` is checked).
    pub fn listening_on(&self, addr: &SocketAddr) {
        self.loopback.store(addr.ip().is_loopback(), Ordering::Relaxed);
    }

    /// Whether the request's `Host` may be answered: anything on a
    /// non-loopback listener; else a loopback name or address, or one of
    /// `allowed_hosts`. A request without one (HTTP/1.0) is no browser's.
    pub fn host_ok(&self, uri: &Uri, h: &HeaderMap) -> bool {
        if !self.loopback.load(Ordering::Relaxed) {
            return true;
        }
        let raw = match uri.authority() {
            Some(a) => a.as_str(),
            None => match h.get(header::HOST).map(|v| v.to_str()) {
                Some(Ok(v)) => v,
                Some(Err(_)) => return false,
                None => return true,
            },
        };
        let raw = raw.trim();
        // Every request passes here: no copy unless the name has capitals.
        let host: std::borrow::Cow<str> =
            if raw.bytes().any(|b| b.is_ascii_uppercase()) { raw.to_ascii_lowercase().into() } else { raw.into() };
        let host = host.as_ref();
        let name = strip_port(host);
        is_loopback_name(name) || self.hosts.iter().any(|a| *a == host || a == name)
    }

    /// Whether an API request comes from a page on another site.
    pub fn check(&self, h: &HeaderMap) -> Verdict {
        if let Some(o) = h.get(header::ORIGIN) {
            let allowed = o.to_str().is_ok_and(|o| {
                let o = o.trim_end_matches('/').to_ascii_lowercase();
                self.origins.contains(&o)
            });
            return if allowed { Verdict::Allowed(o.clone()) } else { Verdict::Refused };
        }
        match h.get("sec-fetch-site").map(HeaderValue::as_bytes) {
            Some(b"cross-site") => Verdict::Refused,
            _ => Verdict::Plain,
        }
    }

    /// A CORS preflight (`OPTIONS` with `Access-Control-Request-Method`).
    pub fn is_preflight(method: &Method, h: &HeaderMap) -> bool {
        method == Method::OPTIONS && h.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    }

    /// The preflight answer for an allowed origin: every method the API
    /// serves, the headers asked for (when they are header names), a
    /// ten-minute cache.
    pub fn preflight(origin: HeaderValue, h: &HeaderMap) -> axum::response::Response {
        let mut r = axum::response::Response::new(axum::body::Body::empty());
        *r.status_mut() = axum::http::StatusCode::NO_CONTENT;
        let asked = h
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .filter(|v| {
                v.len() <= 1024 && v.as_bytes().iter().all(|b| b.is_ascii_alphanumeric() || b"-_, ".contains(b))
            })
            .cloned()
            .unwrap_or(HeaderValue::from_static(DEFAULT_ALLOW_HEADERS));
        let out = r.headers_mut();
        out.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, DELETE, OPTIONS"));
        out.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
        out.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
        Self::allow(out, origin);
        r
    }

    /// The CORS headers of an allowed origin's answer.
    pub fn allow(out: &mut HeaderMap, origin: HeaderValue) {
        out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        out.append(header::VARY, HeaderValue::from_static("origin"));
        out.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static("x-request-id, retry-after"));
    }
}

/// `host:port`, `[v6]:port`, `[v6]` → the name or address alone.
fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// `localhost`, a name under `.localhost` (RFC 6761: always loopback), or a
/// loopback address.
fn is_loopback_name(name: &str) -> bool {
    let name = name.trim_end_matches('.');
    name == "localhost" || name.ends_with(".localhost") || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn hosts_on_a_loopback_listener() {
        let b = Browser::new(&[], &["shim.internal".into(), "box:9000".into()], None);
        let ok = |host: &'static str| b.host_ok(&Uri::from_static("/v1/models"), &headers(&[("host", host)]));
        for h in ["localhost", "localhost:8787", "127.0.0.1:1", "127.9.9.9", "[::1]:8787", "[::1]", "a.localhost"] {
            assert!(ok(h), "{h}");
        }
        for h in ["rebind.evil.example", "10.0.0.1:8787", "localhost.evil.example", "box", "box:9001"] {
            assert!(!ok(h), "{h}");
        }
        assert!(ok("shim.internal:8787") && ok("SHIM.internal") && ok("box:9000"));
        b.listening_on(&"0.0.0.0:8787".parse().unwrap());
        assert!(ok("rebind.evil.example"), "not checked off loopback");
        assert!(
            !Browser::new(&[], &[], Some("127.0.0.1:1"))
                .host_ok(&Uri::from_static("/"), &headers(&[("host", "x.example")]))
        );
        assert!(
            Browser::new(&[], &[], Some("0.0.0.0:1"))
                .host_ok(&Uri::from_static("/"), &headers(&[("host", "x.example")]))
        );
    }

    #[test]
    fn origins() {
        let b = Browser::new(&["https://App.example/".into()], &[], None);
        assert_eq!(b.check(&headers(&[])), Verdict::Plain);
        assert_eq!(b.check(&headers(&[("sec-fetch-site", "same-origin")])), Verdict::Plain);
        assert_eq!(b.check(&headers(&[("sec-fetch-site", "cross-site")])), Verdict::Refused);
        assert_eq!(b.check(&headers(&[("origin", "https://evil.example")])), Verdict::Refused);
        assert_eq!(b.check(&headers(&[("origin", "null")])), Verdict::Refused);
        assert!(matches!(b.check(&headers(&[("origin", "https://app.example")])), Verdict::Allowed(_)));
    }
}
