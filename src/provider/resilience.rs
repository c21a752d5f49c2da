//! Upstream resilience around [`Upstream::post`]: retries with jittered
//! exponential backoff (honouring `Retry-After`) on 429, 5xx and connection
//! errors, and a circuit breaker per provider ([`Breaker`], owned by the provider). Everything here happens
//! before the first byte goes to the client: a stream is handed on only once
//! its first event arrived, so a connection dropped before that is retried
//! too. Fallback along an alias chain is one level up (`core/route.rs`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tracing::Instrument as _;

use super::keys;
use super::upstream::{Reply, Upstream};
use super::{Provider, UpstreamError};
use crate::config::UpstreamConfig;
use crate::openai::ErrorObject;
use crate::recorder::Shown;

/// Breaker states, as the `modelshim_circuit_state` gauge shows them.
#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Closed,
    /// Refusing calls until the instant.
    Open(Instant),
    /// One probe is in flight since the instant.
    HalfOpen(Instant),
}

#[derive(Debug)]
struct BreakerState {
    failures: u32,
    state: State,
    /// The state gauge was set once (at the first reported outcome).
    shown: bool,
}

/// A provider's circuit breaker; every [`Provider`] owns one. `clean` (a
/// closed circuit with no failure counted) is the state of nearly every call,
/// read and left without taking the lock: the serving threads share the
/// provider, and a lock written by both on every request would bounce its
/// cache line between them.
#[derive(Debug)]
pub struct Breaker {
    clean: AtomicBool,
    inner: Mutex<BreakerState>,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            clean: AtomicBool::new(false),
            inner: Mutex::new(BreakerState { failures: 0, state: State::Closed, shown: false }),
        }
    }
}

impl Breaker {
    /// The state and the failures counted, for the console: `closed`,
    /// `open` or `half_open`.
    pub fn view(&self) -> (&'static str, u32) {
        let Ok(b) = self.inner.lock() else { return ("closed", 0) };
        let state = match b.state {
            State::Closed => "closed",
            State::Open(until) if Instant::now() < until => "open",
            State::Open(_) | State::HalfOpen(_) => "half_open",
        };
        (state, b.failures)
    }

    /// Lets a call through, or says the circuit is open. After the open
    /// period one probe is let through; a probe that never reports (client
    /// gone) frees the slot after another open period.
    pub fn admit(&self, p: &Provider) -> Result<(), UpstreamError> {
        let cfg = &p.upstream;
        if cfg.breaker_failures == 0 || self.clean.load(Ordering::Acquire) {
            return Ok(());
        }
        let open_for = Duration::from_secs_f64(cfg.breaker_open_secs);
        let Ok(mut b) = self.inner.lock() else { return Ok(()) };
        let now = Instant::now();
        let retry_in = match b.state {
            State::Closed => return Ok(()),
            State::Open(until) if now >= until => None,
            State::Open(until) => Some(until - now),
            State::HalfOpen(since) if now >= since + open_for => None,
            State::HalfOpen(since) => Some(since + open_for - now),
        };
        match retry_in {
            None => {
                b.state = State::HalfOpen(now);
                crate::metrics::circuit(&p.name, 1);
                tracing::info!(provider = %p.name, "circuit half-open: probing");
                Ok(())
            }
            Some(wait) => Err(circuit_open(&p.name, wait)),
        }
    }

    /// Records the outcome of a call that was let through.
    pub fn record(&self, p: &Provider, outcome: Outcome) {
        let cfg = &p.upstream;
        if cfg.breaker_failures == 0 || outcome == Outcome::Neutral {
            return;
        }
        // The hot path: a success on a clean circuit changes nothing.
        if outcome == Outcome::Success && self.clean.load(Ordering::Acquire) {
            return;
        }
        let Ok(mut b) = self.inner.lock() else { return };
        if !b.shown {
            b.shown = true;
            crate::metrics::circuit(&p.name, 0);
        }
        match outcome {
            Outcome::Success => {
                if b.state != State::Closed {
                    tracing::info!(provider = %p.name, "circuit closed");
                    crate::metrics::circuit(&p.name, 0);
                }
                b.failures = 0;
                b.state = State::Closed;
            }
            Outcome::Failure => {
                b.failures = b.failures.saturating_add(1);
                let trip = matches!(b.state, State::HalfOpen(_))
                    || (b.state == State::Closed && b.failures >= cfg.breaker_failures);
                if trip {
                    b.state = State::Open(Instant::now() + Duration::from_secs_f64(cfg.breaker_open_secs));
                    crate::metrics::circuit(&p.name, 2);
                    tracing::warn!(provider = %p.name, failures = b.failures, "circuit open");
                }
            }
            Outcome::Neutral => {}
        }
        // Written under the lock, so it never disagrees with the state for long.
        self.clean.store(b.state == State::Closed && b.failures == 0, Ordering::Release);
    }
}

/// What a call says about the upstream's health.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    Success,
    Failure,
    /// Says nothing (a 429 is the upstream protecting itself).
    Neutral,
}

impl Outcome {
    pub fn of(e: &UpstreamError) -> Outcome {
        match e {
            UpstreamError::Connect(_)
            | UpstreamError::Timeout(_)
            | UpstreamError::Protocol(_)
            | UpstreamError::Incomplete(_) => Outcome::Failure,
            UpstreamError::Status { status, .. } if *status >= 500 => {
                // Our own circuit-open refusal is not news about the upstream.
                if is_circuit_open(e) { Outcome::Neutral } else { Outcome::Failure }
            }
            UpstreamError::Status { status: 429, .. } => Outcome::Neutral,
            // Any other 4xx: the upstream is up and judged the request.
            UpstreamError::Status { .. } => Outcome::Success,
        }
    }
}

fn circuit_open(provider: &str, wait: Duration) -> UpstreamError {
    let mut e = ErrorObject::new(
        "api_error",
        format!("Upstream {provider} is failing; its circuit breaker is open for {}s more.", wait.as_secs().max(1)),
    )
    .with_code("circuit_open");
    e.retry_after = Some(wait);
    UpstreamError::Status { status: 503, error: Box::new(e) }
}

pub fn is_circuit_open(e: &UpstreamError) -> bool {
    matches!(e, UpstreamError::Status { error, .. } if error.code.as_deref() == Some("circuit_open"))
}

/// Why an error is worth another attempt on the same upstream, if it is.
fn retry_reason(e: &UpstreamError) -> Option<&'static str> {
    match e {
        // A stream that ended before its first event is a dropped connection.
        UpstreamError::Connect(_) | UpstreamError::Incomplete(_) => Some("connect"),
        UpstreamError::Status { .. } if is_circuit_open(e) => None,
        // An empty balance (402, or a vendor code mapped to it) answers the
        // same way however often it is asked; another provider may not.
        UpstreamError::Status { error, .. } if error.kind == "insufficient_quota" => None,
        UpstreamError::Status { status: 429, .. } => Some("429"),
        UpstreamError::Status { status: 500 | 502 | 503 | 504 | 529, .. } => Some("5xx"),
        // A timeout already cost the whole timeout; the next provider of a
        // chain is a better bet than waiting again.
        _ => None,
    }
}

/// Whether the next provider of a fallback chain should be tried after `e`.
pub fn falls_back(e: &UpstreamError) -> bool {
    match e {
        UpstreamError::Connect(_)
        | UpstreamError::Timeout(_)
        | UpstreamError::Protocol(_)
        | UpstreamError::Incomplete(_) => true,
        // 401/403: this provider's key is wrong or out of credit; the
        // request itself may be fine elsewhere. 400/404/422 are the request's.
        UpstreamError::Status { status, .. } => matches!(status, 401 | 402 | 403 | 408 | 429) || *status >= 500,
    }
}

/// The wait before retry `attempt` (0-based): the upstream's `Retry-After`
/// when it gave one, else exponential backoff with equal jitter. `None` when
/// the upstream asks for longer than `retry_max_wait_secs`.
fn backoff(e: &UpstreamError, attempt: u32, cfg: &UpstreamConfig) -> Option<Duration> {
    let max = Duration::from_secs_f64(cfg.retry_max_wait_secs.max(0.0));
    if let UpstreamError::Status { error, .. } = e
        && let Some(ra) = error.retry_after
    {
        return (ra <= max).then_some(ra);
    }
    let exp = Duration::from_millis(cfg.retry_backoff_ms.saturating_mul(1u64 << attempt.min(16))).min(max);
    // Half fixed, half random: spread out, never near zero.
    let half = exp / 2;
    Some(half + half.mul_f64(fastrand::f64()))
}

/// POSTs through the breaker with retries, with the provider's first key.
/// A streamed reply is returned once its first event arrived (or the stream
/// ended cleanly).
pub async fn post(
    up: &Upstream,
    p: &Provider,
    path: &str,
    body: &(impl serde::Serialize + Sync),
    shown: Shown<'_>,
) -> Result<Reply, UpstreamError> {
    post_keyed(up, p, path, body, None, shown).await
}

/// [`post`] of a chat request, with a key of the provider's pool (the
/// conversation's own while it is healthy; rests shared through `store`).
/// An error that is the vendor's "context too long" comes back as OpenAI's
/// `context_length_exceeded` ([`super::context`]).
pub async fn post_chat(
    up: &Upstream,
    p: &Provider,
    req: &crate::openai::ChatRequest,
    store: &dyn crate::state::StateStore,
    owner: Option<&str>,
    shown: Shown<'_>,
) -> Result<Reply, UpstreamError> {
    let affinity = if p.keys.rotates() { keys::affinity(owner, req) } else { None };
    let pick = keys::Pick { store, affinity };
    post_keyed(up, p, "chat/completions", req, Some(&pick), shown)
        .await
        .map_err(|e| p.context.recognize(e, &req.model, req))
}

async fn post_keyed(
    up: &Upstream,
    p: &Provider,
    path: &str,
    body: &(impl serde::Serialize + Sync),
    pick: Option<&keys::Pick<'_>>,
    shown: Shown<'_>,
) -> Result<Reply, UpstreamError> {
    let retries = p.upstream.retries();
    let mut attempt = 0;
    let mut last: Option<UpstreamError> = None;
    // Moves to another key of the pool: at most one per key.
    let mut rotations = 0;
    loop {
        if let Err(open) = p.breaker.admit(p) {
            // Opened by this request's own retries: its client is better
            // served by the upstream's real error than by ours.
            return Err(last.unwrap_or(open));
        }
        let chosen = match p.keys.choose(pick).await {
            Ok(c) => c,
            Err(wait) => return Err(keys::all_resting(&p.name, p.keys.len(), wait)),
        };
        let span = tracing::info_span!("upstream", provider = %p.name, attempt, error = tracing::field::Empty);
        let result = async {
            match up.post_with(p, path, body, chosen.map(|c| c.key), shown).await {
                Ok(Reply::Events(events)) => first_event(events).await,
                other => other,
            }
        }
        .instrument(span.clone())
        .await;
        if let Err(e) = &result {
            span.record("error", tracing::field::display(e));
        }
        let e = match result {
            Ok(reply) => {
                p.breaker.record(p, Outcome::Success);
                return Ok(reply);
            }
            Err(e) => e,
        };
        p.breaker.record(p, Outcome::of(&e));
        // A pool key the vendor rate-limited or refused rests, and the next
        // key is tried at once, without waiting and outside the retry
        // budget (another key is another account's limit): at most once per
        // key, and only while one is healthy (else the 429 with the
        // shortest wait, from `choose`).
        if let (Some(c), Some(why)) = (chosen.filter(|_| p.keys.rotates()), key_fault(&e))
            && rotations < p.keys.len()
        {
            let ra = match &e {
                UpstreamError::Status { error, .. } => error.retry_after,
                _ => None,
            };
            p.keys.rest(c.index, why, ra, pick.map(|k| k.store)).await;
            rotations += 1;
            crate::metrics::retry(&p.name, "key");
            last = Some(e);
            continue;
        }
        let Some(reason) = retry_reason(&e) else { return Err(e) };
        if attempt >= retries {
            return Err(e);
        }
        let Some(wait) = backoff(&e, attempt, &p.upstream) else { return Err(e) };
        attempt += 1;
        crate::metrics::retry(&p.name, reason);
        if let Some(c) = shown {
            c.retry(&p.name, reason, &e.to_string());
        }
        tracing::warn!(provider = %p.name, attempt, wait_ms = wait.as_millis() as u64, error = %e, "retrying upstream");
        last = Some(e);
        tokio::time::sleep(wait).await;
    }
}

/// Whether `e` says the key, rather than the request, is at fault: its
/// rate limit (429), or a refusal (401/403, an empty balance).
fn key_fault(e: &UpstreamError) -> Option<keys::Why> {
    match e {
        UpstreamError::Status { .. } if is_circuit_open(e) => None,
        UpstreamError::Status { error, .. } if error.kind == "insufficient_quota" => Some(keys::Why::Refused),
        UpstreamError::Status { status: 401..=403, .. } => Some(keys::Why::Refused),
        UpstreamError::Status { status: 429, .. } => Some(keys::Why::RateLimited),
        _ => None,
    }
}

/// Waits for a stream's first event: an error before it is an error of the
/// call (retryable); after it, errors are the stream's.
async fn first_event(mut events: super::upstream::Events) -> Result<Reply, UpstreamError> {
    match events.next().await {
        Some(Err(e)) => Err(e),
        Some(Ok(first)) => Ok(Reply::Events(events.with_first(first))),
        None => Ok(Reply::Events(super::upstream::Events::empty())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(s: u16) -> UpstreamError {
        UpstreamError::Status { status: s, error: Box::new(ErrorObject::new("x", "y")) }
    }

    #[test]
    fn what_is_retried_and_what_falls_back() {
        assert_eq!(retry_reason(&status(429)), Some("429"));
        assert_eq!(retry_reason(&status(503)), Some("5xx"));
        assert_eq!(retry_reason(&status(400)), None);
        assert_eq!(retry_reason(&UpstreamError::Connect("x".into())), Some("connect"));
        assert_eq!(retry_reason(&UpstreamError::Timeout("x".into())), None);
        assert_eq!(retry_reason(&circuit_open("p", Duration::from_secs(1))), None);
        assert!(falls_back(&UpstreamError::Timeout("x".into())) && falls_back(&status(401)));
        assert!(!falls_back(&status(400)) && !falls_back(&status(422)));
        let quota = crate::provider::map_error(&Default::default(), 402, br#"{"error":{"message":"no balance"}}"#);
        assert!(retry_reason(&quota).is_none() && falls_back(&quota));
    }

    #[test]
    fn backoff_grows_with_jitter_and_honours_retry_after() {
        let cfg = UpstreamConfig { retry_backoff_ms: 100, retry_max_wait_secs: 1.0, ..Default::default() };
        for attempt in 0..6 {
            let w = backoff(&status(503), attempt, &cfg).unwrap();
            let exp = Duration::from_millis(100 << attempt).min(Duration::from_secs(1));
            assert!(w >= exp / 2 && w <= exp, "{attempt}: {w:?}");
        }
        let mut e = ErrorObject::new("x", "y");
        e.retry_after = Some(Duration::from_millis(700));
        let ra = UpstreamError::Status { status: 429, error: Box::new(e.clone()) };
        assert_eq!(backoff(&ra, 0, &cfg), Some(Duration::from_millis(700)));
        e.retry_after = Some(Duration::from_secs(5));
        let too_long = UpstreamError::Status { status: 429, error: Box::new(e) };
        assert_eq!(backoff(&too_long, 0, &cfg), None);
    }
}
