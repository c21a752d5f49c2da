//! Prometheus metrics: one process-wide recorder (the `metrics` facade with
//! `metrics-exporter-prometheus`), rendered by `GET /metrics`. Every metric
//! name lives here so the exposition stays one documented list; other
//! modules call the small functions below.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock, RwLock};
use std::time::Duration;

use metrics::{
    Counter, Gauge, Histogram, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Requests by provider, model and HTTP status.
pub const REQUESTS: &str = "modelshim_requests_total";
/// Whole request duration (to the end of the stream).
pub const DURATION: &str = "modelshim_request_duration_seconds";
/// Time from the request to the upstream's first stream event or answer.
pub const TTFT: &str = "modelshim_time_to_first_token_seconds";
/// Tokens reported by upstream usage, by kind (prompt/completion).
pub const TOKENS: &str = "modelshim_tokens_total";
/// Tool calls recovered from text, by format.
pub const TOOL_CALLS_RECOVERED: &str = "modelshim_tool_calls_recovered_total";
/// Upstream retries by provider and reason.
pub const RETRIES: &str = "modelshim_upstream_retries_total";
/// Fallbacks from one provider of a chain to the next.
pub const FALLBACKS: &str = "modelshim_upstream_fallbacks_total";
/// Circuit breaker state by provider: 0 closed, 1 half-open, 2 open.
pub const CIRCUIT: &str = "modelshim_circuit_state";
/// A provider's API keys by position (never value): 1 while the key
/// rests after a 429 or a refusal, 0 while it is healthy.
pub const KEY_RESTING: &str = "modelshim_upstream_key_resting";
/// Rests of a provider's API keys by position and reason.
pub const KEY_RESTS: &str = "modelshim_upstream_key_rests_total";
/// Requests refused by the proxy itself (auth, limits, rate), by reason.
pub const REFUSED: &str = "modelshim_refused_total";
/// Requests being served now.
pub const IN_FLIGHT: &str = "modelshim_in_flight_requests";
/// Agent-loop iterations (incremented by the server-side tool loop).
pub const LOOP_ITERATIONS: &str = "modelshim_agent_loop_iterations_total";
/// Tokens of answers by proxy key, provider, model and kind (input,
/// cached_input, output, reasoning; input includes cached_input, output
/// includes reasoning).
pub const KEY_TOKENS: &str = "modelshim_key_tokens_total";
/// Cost of answers by proxy key, provider, model and currency, in
/// nano-units (1e-9) of the currency: integers, so sums are exact.
pub const COST: &str = "modelshim_cost_nanos_total";
/// State backend errors by backend and operation.
pub const STATE_ERRORS: &str = "modelshim_state_errors_total";
/// 1 while the state backend answers, 0 while it is down (degraded).
pub const STATE_UP: &str = "modelshim_state_backend_up";
/// Upstream answers whose usage was beyond `[limits] max_usage_tokens`.
pub const USAGE_IMPLAUSIBLE: &str = "modelshim_usage_implausible_total";

/// The `model` label of every model the config and profiles do not know
/// (`Provider::metric_model`).
pub const OTHER_MODEL: &str = "other";

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the recorder once per process (tests start many servers) and
/// returns the handle that renders the exposition; `None` when another
/// recorder was installed first (metrics then go there).
pub fn init() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Suffix("_seconds".into()),
                    &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0],
                )
                .ok()?;
            let handle = builder.install_recorder().ok()?;
            describe();
            // Histogram samples are buffered until drained; without a scrape
            // they would pile up, so drain them on a timer.
            let h = handle.clone();
            let _ = std::thread::Builder::new().name("metrics-upkeep".into()).spawn(move || {
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(5));
                    h.run_upkeep();
                }
            });
            Some(handle)
        })
        .clone()
}

fn describe() {
    describe_counter!(REQUESTS, "Chat requests by provider, model and HTTP status");
    describe_histogram!(DURATION, metrics::Unit::Seconds, "Request duration, to the end of the stream");
    describe_histogram!(TTFT, metrics::Unit::Seconds, "Time to the upstream's first event");
    describe_counter!(TOKENS, "Tokens reported by upstream usage");
    describe_counter!(TOOL_CALLS_RECOVERED, "Tool calls recovered from text, by format");
    describe_counter!(RETRIES, "Upstream retries by provider and reason");
    describe_counter!(FALLBACKS, "Fallbacks to the next provider of a chain");
    describe_gauge!(CIRCUIT, "Circuit breaker state: 0 closed, 1 half-open, 2 open");
    describe_gauge!(KEY_RESTING, "1 while a provider's API key (by position) rests");
    describe_counter!(KEY_RESTS, "Rests of a provider's API keys by position and reason");
    describe_counter!(REFUSED, "Requests refused by the proxy, by reason");
    describe_gauge!(IN_FLIGHT, "Requests being served");
    describe_counter!(LOOP_ITERATIONS, "Agent-loop iterations");
    describe_counter!(STATE_ERRORS, "State backend errors");
    describe_counter!(USAGE_IMPLAUSIBLE, "Upstream answers whose usage was implausible (estimated instead)");
    describe_counter!(KEY_TOKENS, "Tokens of upstream answers by proxy key, provider, model and kind");
    describe_counter!(COST, "Cost of upstream answers in nano-units (1e-9) of the currency");
    describe_gauge!(STATE_UP, "1 while the state backend answers");
    // Registered up front so dashboards see them before the first event.
    counter!(LOOP_ITERATIONS).increment(0);
    let in_flight = gauge!(IN_FLIGHT);
    in_flight.set(0.0);
    let _ = IN_FLIGHT_GAUGE.set(in_flight);
}

/// The in-flight gauge's handle, kept once the recorder is installed: two
/// updates per request would otherwise look it up in the registry.
static IN_FLIGHT_GAUGE: OnceLock<Gauge> = OnceLock::new();

/// The Prometheus text exposition.
pub fn render() -> String {
    init().map(|h| h.render()).unwrap_or_default()
}

/// Handles of the series every request of a provider and model touches.
/// Looking them up once saves building, hashing and comparing label sets for
/// five series per request, a visible share of a proxied request's CPU.
struct Series {
    ok: Counter,
    duration: Histogram,
    ttft: Histogram,
    prompt: Counter,
    completion: Counter,
}

impl Series {
    fn new(provider: &str, model: &str) -> Self {
        let (p, m) = (provider.to_string(), model.to_string());
        Series {
            ok: counter!(REQUESTS, "provider" => p.clone(), "model" => m.clone(), "status" => "200"),
            duration: histogram!(DURATION, "provider" => p.clone(), "model" => m.clone()),
            ttft: histogram!(TTFT, "provider" => p.clone(), "model" => m.clone()),
            prompt: counter!(TOKENS, "provider" => p.clone(), "model" => m.clone(), "kind" => "prompt"),
            completion: counter!(TOKENS, "provider" => p, "model" => m, "kind" => "completion"),
        }
    }
}

/// Model names come from clients: past this many (provider, model) pairs
/// the handles are built per call and not kept, so a flood of names cannot
/// grow the cache.
const MAX_SERIES: usize = 4096;

/// foldhash, not SipHash: two lookups per call, several calls per request,
/// and the map is capped ([`MAX_SERIES`]), so flooding it gains nothing.
type Hasher = foldhash::fast::RandomState;
type SeriesMap = HashMap<Box<str>, HashMap<Box<str>, Arc<Series>, Hasher>, Hasher>;
static SERIES: LazyLock<RwLock<SeriesMap>> = LazyLock::new(Default::default);

fn series(provider: &str, model: &str) -> Arc<Series> {
    if let Ok(map) = SERIES.read()
        && let Some(s) = map.get(provider).and_then(|m| m.get(model))
    {
        return s.clone();
    }
    let s = Arc::new(Series::new(provider, model));
    if let Ok(mut map) = SERIES.write()
        && map.values().map(HashMap::len).sum::<usize>() < MAX_SERIES
    {
        map.entry(provider.into()).or_default().insert(model.into(), s.clone());
    }
    s
}

/// One finished request.
pub fn request_done(provider: &str, model: &str, status: u16, elapsed: Duration) {
    let s = series(provider, model);
    if status == 200 {
        s.ok.increment(1);
    } else {
        counter!(REQUESTS, "provider" => provider.to_string(), "model" => model.to_string(), "status" => status.to_string())
            .increment(1);
    }
    s.duration.record(elapsed.as_secs_f64());
}

pub fn first_token(provider: &str, model: &str, elapsed: Duration) {
    series(provider, model).ttft.record(elapsed.as_secs_f64());
}

/// Token counts from an upstream `usage` object.
pub fn usage(provider: &str, model: &str, usage: &serde_json::Value) {
    let count = |field| usage.get(field).and_then(serde_json::Value::as_u64);
    tokens(provider, model, count("prompt_tokens"), count("completion_tokens"));
}

/// Token counts already read from a `usage` object.
pub fn tokens(provider: &str, model: &str, prompt: Option<u64>, completion: Option<u64>) {
    if prompt.is_none() && completion.is_none() {
        return;
    }
    let s = series(provider, model);
    for (n, counter) in [(prompt, &s.prompt), (completion, &s.completion)] {
        if let Some(n) = n {
            counter.increment(n);
        }
    }
}

/// The spend series of one key, provider, model and currency.
struct SpendSeries {
    /// input, cached_input, output, reasoning.
    tokens: [Counter; 4],
    /// None for an unpriced model (no empty `currency` series).
    cost: Option<Counter>,
}

const SPEND_KINDS: [&str; 4] = ["input", "cached_input", "output", "reasoning"];

type SpendMap = HashMap<Box<str>, Arc<SpendSeries>, Hasher>;
static SPEND: LazyLock<RwLock<SpendMap>> = LazyLock::new(Default::default);

fn spend_series(key: &str, provider: &str, model: &str, currency: &str) -> Arc<SpendSeries> {
    let id = [key, provider, model, currency].join("\0");
    if let Ok(map) = SPEND.read()
        && let Some(s) = map.get(id.as_str())
    {
        return s.clone();
    }
    let l = |k: &'static str, v: &str| (k, v.to_string());
    let tokens = SPEND_KINDS.map(|kind| {
        counter!(KEY_TOKENS, &[l("key", key), l("provider", provider), l("model", model), l("kind", kind)])
    });
    let cost = (!currency.is_empty())
        .then(|| counter!(COST, &[l("key", key), l("provider", provider), l("model", model), l("currency", currency)]));
    let s = Arc::new(SpendSeries { tokens, cost });
    if let Ok(mut map) = SPEND.write()
        && map.len() < MAX_SERIES
    {
        map.insert(id.into(), s.clone());
    }
    s
}

/// One request's spend on one upstream answer: tokens as input,
/// cached_input, output, reasoning; the cost in nano-units of `currency`
/// (none unpriced). Key names are the configured keys', models the metric
/// labels, so the series stay bounded.
pub fn spend(key: &str, provider: &str, model: &str, tokens: [u64; 4], cost: Option<(u64, &str)>) {
    let s = spend_series(key, provider, model, cost.map_or("", |(_, c)| c));
    for (counter, n) in s.tokens.iter().zip(tokens) {
        if n > 0 {
            counter.increment(n);
        }
    }
    if let (Some((nanos, _)), Some(c)) = (cost, &s.cost) {
        c.increment(nanos);
    }
}

/// Calls recovered from text by one response.
pub fn recovered(calls: &[crate::toolcall::Call]) {
    for c in calls {
        counter!(TOOL_CALLS_RECOVERED, "format" => c.format).increment(1);
    }
}

pub fn retry(provider: &str, reason: &'static str) {
    counter!(RETRIES, "provider" => provider.to_string(), "reason" => reason).increment(1);
}

pub fn fallback(from: &str, to: &str) {
    counter!(FALLBACKS, "from" => from.to_string(), "to" => to.to_string()).increment(1);
}

pub fn circuit(provider: &str, state: u8) {
    gauge!(CIRCUIT, "provider" => provider.to_string()).set(f64::from(state));
}

/// An upstream answer of `provider` reported implausible usage.
pub fn usage_implausible(provider: &str) {
    counter!(USAGE_IMPLAUSIBLE, "provider" => provider.to_string()).increment(1);
}

/// Input and cached input tokens of one proxy key, provider and model, as
/// this process counted them (`modelshim_key_tokens_total`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CacheHits {
    pub key: String,
    pub provider: String,
    pub model: String,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    /// `cached_input_tokens / input_tokens` (0 with no input).
    pub hit_share: f64,
}

/// The prompt-cache hit share per proxy key, provider and model since this
/// process started, read off the token counters.
pub fn cache_hits() -> Vec<CacheHits> {
    let label = |line: &str, name: &str| -> Option<String> {
        let start = line.find(&format!("{name}=\""))? + name.len() + 2;
        let end = line[start..].find('"')? + start;
        Some(line[start..end].to_string())
    };
    let prefix = format!("{KEY_TOKENS}{{");
    let mut by: std::collections::BTreeMap<(String, String, String), (u64, u64)> = Default::default();
    for line in render().lines().filter(|l| l.starts_with(&prefix)) {
        let (Some(key), Some(provider), Some(model), Some(kind)) =
            (label(line, "key"), label(line, "provider"), label(line, "model"), label(line, "kind"))
        else {
            continue;
        };
        let Some(n) = line.rsplit(' ').next().and_then(|n| n.parse::<f64>().ok()) else { continue };
        let e = by.entry((key, provider, model)).or_default();
        match kind.as_str() {
            "input" => e.0 += n as u64,
            "cached_input" => e.1 += n as u64,
            _ => {}
        }
    }
    by.into_iter()
        .filter(|(_, (input, _))| *input > 0)
        .map(|((key, provider, model), (input, cached))| CacheHits {
            key,
            provider,
            model,
            input_tokens: input,
            cached_input_tokens: cached,
            hit_share: cached as f64 / input as f64,
        })
        .collect()
}

pub fn key_state(provider: &str, position: usize, resting: u8) {
    gauge!(KEY_RESTING, "provider" => provider.to_string(), "key" => position.to_string()).set(f64::from(resting));
}

pub fn key_rest(provider: &str, position: usize, reason: &'static str) {
    counter!(KEY_RESTS, "provider" => provider.to_string(), "key" => position.to_string(), "reason" => reason)
        .increment(1);
}

pub fn refused(reason: &'static str) {
    counter!(REFUSED, "reason" => reason).increment(1);
}

pub fn in_flight(delta: f64) {
    match IN_FLIGHT_GAUGE.get() {
        Some(g) => g.increment(delta),
        None => gauge!(IN_FLIGHT).increment(delta),
    }
}

pub fn state_error(backend: &'static str, op: &'static str) {
    counter!(STATE_ERRORS, "backend" => backend, "op" => op).increment(1);
}

pub fn state_up(backend: &'static str, up: bool) {
    gauge!(STATE_UP, "backend" => backend).set(if up { 1.0 } else { 0.0 });
}
