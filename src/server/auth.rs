//! Proxy keys (`[auth]`): who may call the proxy, which models each key may
//! use, and each key's rate and concurrency limits. Keys are compared as
//! SHA-256 digests in constant time, so neither the content nor the length
//! of a configured key leaks through timing. Keys are never logged and never
//! forwarded: the upstream request is built fresh with the provider's key.

use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};
use tokio::sync::Semaphore;

pub use crate::config::auth::{AuthConfig, Budget, KeyConfig, KeySpec, Secret};
use crate::state::{RateDecision, StateStore};

/// One configured key, ready for the request path.
pub struct Key {
    digest: [u8; 32],
    /// The name used in logs and metrics; never the key itself.
    pub name: String,
    models: Option<globset::GlobSet>,
    /// Requests per minute, with the in-process limiter used when the state
    /// store keeps no shared counters (or Redis is down: degraded, per replica).
    rate: Option<(NonZeroU32, DefaultDirectRateLimiter)>,
    /// Concurrent requests of this key.
    pub concurrency: Option<Arc<Semaphore>>,
    /// Its token and cost budgets (its own over the `[auth]` defaults).
    pub budget: Budget,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Why a request is refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AuthError {
    #[error(
        "Missing bearer token. You need to provide your proxy key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
    )]
    Missing,
    #[error("Incorrect API key provided.")]
    Wrong,
    #[error("This key may not use the model `{0}`.")]
    ModelDenied(String),
    #[error("Rate limit reached for this key; retry after {}s.", .0.as_secs().max(1))]
    RateLimited(Duration),
}

/// The configured keys (none: the proxy is open).
#[derive(Debug, Default)]
pub struct Auth {
    keys: Vec<Arc<Key>>,
}

impl Auth {
    /// Builds the keys from the config and the environment.
    /// `default_concurrency` is `[limits] max_concurrent_per_key`.
    pub fn new(cfg: Option<&AuthConfig>, default_concurrency: Option<u32>) -> Result<Self, String> {
        let Some(cfg) = cfg else { return Ok(Auth::default()) };
        let specs = specs(cfg)?;
        let mut keys = Vec::new();
        for s in specs {
            if s.key.0.len() < 8 {
                return Err("[auth] keys must be at least 8 characters".into());
            }
            let digest: [u8; 32] = Sha256::digest(s.key.0.as_bytes()).into();
            let name = s.name.clone().unwrap_or_else(|| {
                let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
                format!("key-{hex}")
            });
            let models = match &s.models {
                Some(globs) => {
                    let mut b = globset::GlobSetBuilder::new();
                    for g in globs {
                        b.add(globset::Glob::new(g).map_err(|e| format!("[auth] key {name}: model glob {g:?}: {e}"))?);
                    }
                    Some(b.build().map_err(|e| format!("[auth] key {name}: {e}"))?)
                }
                None => None,
            };
            let rpm = s.requests_per_minute.or(cfg.requests_per_minute).and_then(NonZeroU32::new);
            let conc = s.max_concurrent.or(cfg.max_concurrent).or(default_concurrency).filter(|n| *n > 0);
            keys.push(Arc::new(Key {
                digest,
                name,
                models,
                rate: rpm.map(|n| (n, RateLimiter::direct(Quota::per_minute(n)))),
                concurrency: conc.map(|n| Arc::new(Semaphore::new(n as usize))),
                budget: s.budget().or(cfg.budget()),
            }));
        }
        if keys.is_empty() {
            return Err("[auth] is present but names no keys (keys or keys_env)".into());
        }
        // The name is the key's shared rate bucket: two keys with one name
        // would share a budget.
        let mut names = std::collections::HashSet::new();
        if let Some(k) = keys.iter().find(|k| !names.insert(k.name.as_str())) {
            return Err(format!("[auth] two keys are named {:?}", k.name));
        }
        Ok(Auth { keys })
    }

    /// The key of this name (names are unique).
    pub fn named(&self, name: &str) -> Option<Arc<Key>> {
        self.keys.iter().find(|k| k.name == name).cloned()
    }

    /// Whether keys are enforced.
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The key of an `Authorization` header value. Every configured key is
    /// compared, in constant time, whatever matches.
    pub fn authenticate(&self, header: Option<&[u8]>) -> Result<Arc<Key>, AuthError> {
        let token = header.and_then(bearer).ok_or(AuthError::Missing)?;
        self.authenticate_token(token)
    }

    /// The key of a raw token (an `x-api-key` header), compared as above.
    pub fn authenticate_token(&self, token: &[u8]) -> Result<Arc<Key>, AuthError> {
        let token = token.trim_ascii();
        if token.is_empty() {
            return Err(AuthError::Missing);
        }
        let digest: [u8; 32] = Sha256::digest(token).into();
        let mut found = subtle::Choice::from(0);
        let mut index = 0u32;
        for (i, k) in self.keys.iter().enumerate() {
            let m = k.digest.ct_eq(&digest);
            index = u32::conditional_select(&index, &(i as u32), m);
            found |= m;
        }
        if bool::from(found) {
            self.keys.get(index as usize).cloned().ok_or(AuthError::Wrong)
        } else {
            Err(AuthError::Wrong)
        }
    }
}

impl Key {
    /// Takes one request from the key's rate budget: the one shared by all
    /// replicas when the state store keeps shared counters (Redis), else (or
    /// while Redis is down) this process's own.
    pub async fn admit(&self, store: &dyn StateStore) -> Result<(), AuthError> {
        let Some((per_minute, local)) = &self.rate else { return Ok(()) };
        match store.take_rate(&self.name, *per_minute).await {
            Ok(RateDecision::Admitted) => Ok(()),
            Ok(RateDecision::Wait(d)) => Err(AuthError::RateLimited(d)),
            Ok(RateDecision::Local) | Err(_) => local.check().map_err(|not_until| {
                AuthError::RateLimited(
                    not_until.wait_time_from(governor::clock::Clock::now(&governor::clock::DefaultClock::default())),
                )
            }),
        }
    }

    /// Whether this key may use `model` (the name the client sent).
    pub fn allows(&self, model: &str) -> bool {
        self.models.as_ref().is_none_or(|g| g.is_match(model))
    }
}

/// Every configured key with its settings: `keys`, then `keys_env`'s.
fn specs(cfg: &AuthConfig) -> Result<Vec<KeyConfig>, String> {
    let mut specs: Vec<KeyConfig> = cfg
        .keys
        .iter()
        .map(|k| match k {
            KeySpec::Plain(s) => KeyConfig::plain(s.clone()),
            KeySpec::Detailed(c) => c.clone(),
        })
        .collect();
    if let Some(var) = &cfg.keys_env {
        let v = std::env::var(var).map_err(|_| format!("[auth] keys_env: {var} is not set"))?;
        for k in v.split(|c: char| c == ',' || c.is_whitespace()).filter(|k| !k.is_empty()) {
            specs.push(KeyConfig::plain(Secret(k.to_string())));
        }
    }
    Ok(specs)
}

/// Every proxy key as configured (for the redactor; [`Auth`] keeps digests only).
pub fn raw_keys(cfg: Option<&AuthConfig>) -> Vec<String> {
    cfg.and_then(|c| specs(c).ok()).unwrap_or_default().into_iter().map(|k| k.key.0).collect()
}

/// `Bearer TOKEN` → TOKEN (scheme case-insensitive, as RFC 6750 allows).
fn bearer(h: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = h.split_at_checked(7)?;
    (scheme.eq_ignore_ascii_case(b"bearer ") && !rest.is_empty()).then(|| rest.trim_ascii())
}

/// Refuses an open proxy on a non-loopback address unless explicitly
/// allowed: anyone on the network could spend the upstream keys.
pub fn check_bind(addr: &SocketAddr, auth_enabled: bool, allow_unauthenticated: bool) -> Result<(), String> {
    if auth_enabled || allow_unauthenticated || addr.ip().is_loopback() {
        return Ok(());
    }
    Err(format!(
        "refusing to listen on {addr} without proxy keys: anyone who can reach it could spend your upstream API keys. \
         Configure [auth] keys (or keys_env), listen on 127.0.0.1, or pass --allow-unauthenticated if the network \
         in front of it does the authentication (e.g. a sidecar reachable only from its pod)."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(toml_text: &str) -> Auth {
        let c: AuthConfig = toml::from_str(toml_text).unwrap();
        Auth::new(Some(&c), None).unwrap()
    }

    #[test]
    fn matches_the_right_key_only() {
        let a = auth(r#"keys = ["sk-first-key", { key = "sk-second-key", name = "two", models = ["v/*"] }]"#);
        assert_eq!(a.authenticate(None).unwrap_err(), AuthError::Missing);
        assert_eq!(a.authenticate(Some(b"Basic abc")).unwrap_err(), AuthError::Missing);
        assert_eq!(a.authenticate(Some(b"Bearer sk-wrong-key")).unwrap_err(), AuthError::Wrong);
        assert_eq!(a.authenticate(Some(b"Bearer sk-first-ke")).unwrap_err(), AuthError::Wrong);
        assert!(a.authenticate(Some(b"Bearer sk-first-key")).unwrap().name.starts_with("key-"));
        let two = a.authenticate(Some(b"bearer sk-second-key")).unwrap();
        assert_eq!(two.name, "two");
        assert!(two.allows("v/m") && !two.allows("w/m"));
    }

    #[test]
    fn key_names_are_unique() {
        let c: AuthConfig =
            toml::from_str(r#"keys = [{ key = "sk-first-key", name = "a" }, { key = "sk-other-key", name = "a" }]"#)
                .unwrap();
        assert!(Auth::new(Some(&c), None).unwrap_err().contains("two keys are named"));
    }

    #[test]
    fn secrets_do_not_show_in_debug() {
        let c: AuthConfig = toml::from_str(r#"keys = ["sk-very-secret", { key = "sk-also-secret" }]"#).unwrap();
        let dbg = format!("{c:?} {:?}", Auth::new(Some(&c), None).unwrap());
        assert!(!dbg.contains("secret"), "{dbg}");
    }

    #[test]
    fn rate_limit_per_key() {
        let a = auth(r#"keys = [{ key = "sk-limited-key", requests_per_minute = 2 }]"#);
        let k = a.authenticate(Some(b"Bearer sk-limited-key")).unwrap();
        let store = crate::state::MemoryStore::new(10);
        let admit = || futures_util::FutureExt::now_or_never(k.admit(&store)).unwrap();
        assert!(admit().is_ok() && admit().is_ok());
        assert!(matches!(admit(), Err(AuthError::RateLimited(_))));
    }

    #[test]
    fn open_proxy_only_on_loopback() {
        let lo: SocketAddr = "127.0.0.1:8787".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8787".parse().unwrap();
        assert!(check_bind(&lo, false, false).is_ok());
        assert!(check_bind(&any, false, false).unwrap_err().contains("--allow-unauthenticated"));
        assert!(check_bind(&any, false, true).is_ok());
        assert!(check_bind(&any, true, false).is_ok());
    }
}
