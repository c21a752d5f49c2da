//! The vendor regression suite: every `fixtures/<vendor>/*.json` exchange is
//! replayed as the upstream of the real proxy (with the bundled
//! `providers/<vendor>.toml` profile), asked streamed or not as recorded, and
//! what the client sees is compared with a committed insta snapshot, next to
//! the request the proxy sent upstream.
//!
//! Adding a case is adding one file (see `Fixture::chat` for a builder), then
//! `INSTA_UPDATE=always cargo test --test fixtures` and reviewing the new
//! `tests/snapshots/fixtures__*.snap`. A fixture's `request.body` must be what
//! the proxy sends; `FIXTURES_BLESS_REQUESTS=1` rewrites it from the run.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use modelshim::config::{Config, ProviderConfig};
use modelshim::fixture::Fixture;
use modelshim::provider::load_profiles;
use modelshim::server::AppState;
use modelshim::server::replay::Replay;
use serde_json::{Value, json};

/// Folders under fixtures/ that are not recorded exchanges.
const NOT_EXCHANGES: &[&str] = &["toolcall"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// Every exchange fixture: (vendor, file stem, path).
fn exchange_files() -> Vec<(String, String, PathBuf)> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(root().join("fixtures")).unwrap() {
        let dir = dir.unwrap().path();
        let vendor = dir.file_name().unwrap().to_string_lossy().into_owned();
        if !dir.is_dir() || NOT_EXCHANGES.contains(&vendor.as_str()) {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|e| e == "json") {
                out.push((vendor.clone(), p.file_stem().unwrap().to_string_lossy().into_owned(), p));
            }
        }
    }
    out.sort();
    out
}

fn profile_ids() -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(root().join("providers"))
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            (p.extension()? == "toml").then(|| p.file_stem().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    ids.sort();
    ids
}

/// Masks what changes from run to run: generated ids and timestamps.
fn redact(v: Value) -> Value {
    let ids = regex::Regex::new(r"call_[0-9a-f]{24}|chatcmpl-[0-9a-f]{16}").unwrap();
    fn walk(v: &mut Value, ids: &regex::Regex) {
        match v {
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    if k == "created" && x.is_number() {
                        *x = json!("[timestamp]");
                    } else {
                        walk(x, ids);
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, ids)),
            Value::String(s) if ids.is_match(s) => {
                *s = ids.replace_all(s, "[generated id]").into_owned();
            }
            _ => {}
        }
    }
    let mut v = v;
    walk(&mut v, &ids);
    v
}

/// The request a client sends for a fixture: its `client_request`, else the
/// recorded upstream body with the `vendor/` model prefix.
fn client_request(vendor: &str, fx: &Fixture) -> Value {
    if let Some(c) = &fx.client_request {
        return c.clone();
    }
    let mut b = fx.request.body.clone();
    let model = b["model"].as_str().unwrap_or_default().to_string();
    b["model"] = json!(format!("{vendor}/{model}"));
    b
}

struct Outcome {
    view: Value,
    exact: bool,
    upstream_request: Value,
}

/// Runs one fixture through the proxy with its vendor's bundled profile.
/// The real proxy, with `vendor`'s bundled profile, in front of a replay
/// server that serves the one fixture `text`; `tweak` may change the config.
async fn replayed(
    vendor: &str,
    source: &str,
    text: &str,
    rec: Option<&Path>,
    tweak: impl FnOnce(&mut Config),
) -> (Proxy, Arc<Replay>) {
    let (replay, problems) = Replay::new([(source.to_string(), text.to_string())], 0.0);
    assert!(problems.is_empty(), "{problems:?}");
    let replay = Arc::new(replay);
    let addr = modelshim::server::replay::spawn(replay.clone(), "127.0.0.1:0").await.unwrap();
    let profiles = load_profiles(None).unwrap();
    assert!(profiles.contains_key(vendor), "fixtures/{vendor}/ has no providers/{vendor}.toml");
    let mut config = Config::default();
    config.providers.insert(
        vendor.to_string(),
        ProviderConfig { base_url: Some(format!("http://{addr}/v1")), ..Default::default() },
    );
    tweak(&mut config);
    (serve_state(AppState::build(&config, &profiles, rec).unwrap()).await, replay)
}

async fn run(vendor: &str, source: &str, text: &str) -> Outcome {
    let fx = Fixture::parse(source, text).unwrap();
    // The proxy records what it sends upstream, to snapshot it too.
    let rec = tempfile::tempdir().unwrap();
    let (p, replay) = replayed(vendor, source, text, Some(rec.path()), |_| {}).await;

    let req = client_request(vendor, &fx);
    let streamed = req["stream"].as_bool().unwrap_or(false);
    let r = p.http.post(p.url("/v1/chat/completions")).json(&req).send().await.unwrap();
    let status = r.status().as_u16();
    let content_type = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let text = r.text().await.unwrap();
    let client = if content_type.starts_with("text/event-stream") {
        Value::Array(parse_sse(&text))
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    if status == 200 {
        assert_eq!(content_type.starts_with("text/event-stream"), streamed, "{source}: SSE iff the client streamed");
    }
    let mut recorded = std::fs::read_dir(rec.path()).unwrap();
    let upstream_request = match recorded.next() {
        Some(f) => {
            let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
            serde_json::from_str::<Fixture>(&text).unwrap().request.body
        }
        None => Value::Null,
    };
    let (served, exact) = replay.served();
    assert_eq!(served, 1, "{source}: the upstream was called once");
    let view = json!({
        "fixture": fx.name,
        "client_request": req,
        "upstream_request": upstream_request,
        "status": status,
        "client": client,
    });
    Outcome { view: redact(view), exact: exact == 1, upstream_request }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_fixture_through_the_proxy_matches_its_snapshot() {
    let bless = std::env::var_os("FIXTURES_BLESS_REQUESTS").is_some();
    let files = exchange_files();
    assert!(files.len() >= 54, "only {} fixtures", files.len());
    // Each fixture gets its own replay server and proxy; they run at once
    // and are compared in file order.
    let runs: Vec<_> = files
        .into_iter()
        .map(|(vendor, stem, path)| {
            tokio::spawn(async move {
                let text = std::fs::read_to_string(&path).unwrap();
                let source = format!("fixtures/{vendor}/{stem}.json");
                let out = run(&vendor, &source, &text).await;
                (vendor, stem, path, text, source, out)
            })
        })
        .collect();
    let mut inexact = Vec::new();
    for r in runs {
        let (vendor, stem, path, text, source, out) = r.await.unwrap();
        if !out.exact {
            if bless {
                let mut v: Value = serde_json::from_str(&text).unwrap();
                v["request"]["body"] = out.upstream_request.clone();
                std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap() + "\n").unwrap();
            } else {
                inexact.push(source.clone());
            }
        }
        insta::with_settings!({ description => source.clone(), omit_expression => true }, {
            insta::assert_json_snapshot!(format!("{vendor}__{stem}"), out.view);
        });
    }
    assert!(
        inexact.is_empty(),
        "request.body differs from what the proxy sends (run with FIXTURES_BLESS_REQUESTS=1 to update): {inexact:?}"
    );
}

/// Kimi's recorded stream carries its usage inside the last chunk's choice:
/// the key is billed those tokens, not an estimate.
#[tokio::test]
async fn a_recorded_kimi_stream_bills_the_usage_in_its_choice() {
    let source = "fixtures/moonshot/chat_stream.json";
    let text = std::fs::read_to_string(root().join(source)).unwrap();
    let fx = Fixture::parse(source, &text).unwrap();
    let auth: modelshim::config::auth::AuthConfig =
        toml::from_str("keys = [{ key = \"sk-kimi-key\", name = \"kimi\" }]\n").unwrap();
    let (p, _replay) = replayed("moonshot", source, &text, None, move |c| c.auth = Some(auth)).await;
    let req = client_request("moonshot", &fx);
    assert_eq!(req["stream"], true, "{req}");
    let r = p.http.post(p.url("/v1/chat/completions")).bearer_auth("sk-kimi-key").json(&req).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("[DONE]"));
    let start = std::time::Instant::now();
    loop {
        let r = p.http.get(p.url("/v1/usage")).bearer_auth("sk-kimi-key").send().await.unwrap();
        let u: Value = r.json().await.unwrap();
        // 12 prompt and 15 completion tokens, as recorded.
        if u["today"]["tokens"] == 27 {
            break;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(3), "billed otherwise: {u}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[test]
fn every_profile_has_a_streamed_and_a_non_streamed_fixture() {
    let mut seen: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (vendor, stem, path) in exchange_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let fx = Fixture::parse(&format!("{vendor}/{stem}"), &text).unwrap();
        let e = seen.entry(vendor).or_default();
        match (&fx.response.sse, fx.response.status) {
            (Some(_), _) => e.0 += 1,
            (None, 200) => e.1 += 1,
            _ => {}
        }
    }
    let profiles = profile_ids();
    assert_eq!(profiles.len(), 19, "{profiles:?}");
    let mut missing = Vec::new();
    for id in &profiles {
        let (s, j) = seen.get(id).copied().unwrap_or_default();
        if s == 0 || j == 0 {
            missing.push(format!("{id}: {s} streamed, {j} non-streamed"));
        }
    }
    assert!(missing.is_empty(), "profiles without both kinds of fixture: {missing:?}");
    let strays: Vec<&String> = seen.keys().filter(|v| !profiles.contains(v)).collect();
    assert!(strays.is_empty(), "fixture folders with no profile: {strays:?}");
}

#[test]
fn every_regression_row_has_a_fixture() {
    let mut rows: Vec<u32> = exchange_files()
        .iter()
        .filter_map(|(_, stem, _)| stem.strip_prefix("regression_")?.get(..2)?.parse().ok())
        .collect();
    rows.sort();
    rows.dedup();
    assert_eq!(rows, (1..=20).collect::<Vec<_>>(), "vendors.md regression table rows 1-20");
}
