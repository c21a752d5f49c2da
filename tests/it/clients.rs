//! Real-client conformance (issue #27): the client libraries most apps are
//! built on — LangChain / LangGraph, LlamaIndex, litellm, pydantic-ai,
//! instructor and the Vercel AI SDK 6 and 7 — at pinned versions, against the
//! proxy in front of a scripted quirky upstream (the upstream model name
//! names the scenario). Each script under tests/clients/ asserts the exact
//! parsed result its client hands the app. The clients are installed on
//! first run under cargo's target tmp dir (venvs and npm folders, see
//! tests/it/support/pyenv.rs).
//!
//! Tests named `…_idless_…` need issue #27 item 1, `…_item_reference_…`
//! item 2 (and 3), `…_reasoning_summary` item 4, `…_trace_modes` item 5 and
//! `…_cached_usage_…` item 8.

use crate::common;
use crate::support::pyenv;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use modelshim::config::{Config, ProviderConfig};
use pyenv::{clients_env, llamaindex_env, run, sdk_dir};
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The reasoning of the DeepSeek-like `thinker` scenario, turn by turn.
const REASONING: [&str; 2] = ["The user wants Paris; call get_weather.", "22C in Paris; answer."];

fn err(status: u16, body: Value) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(body)
}

fn tool_results(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            // content parts (some clients send `[{"type": "text", …}]`)
            Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
            other => other.to_string(),
        })
        .collect()
}

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
}

/// What the upstream says.
#[derive(Default)]
struct Say {
    reasoning: Option<&'static str>,
    content: Option<String>,
    calls: Vec<Value>,
    /// Native calls with neither `index` nor `id` (each whole in its own
    /// delta when streamed).
    idless: bool,
    usage: Option<Value>,
}

impl Say {
    fn text(t: &str) -> Self {
        Say { content: Some(t.to_string()), ..Default::default() }
    }
    fn calls(calls: Vec<Value>) -> Self {
        Say { calls, ..Default::default() }
    }
}

const HERMES: &str =
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
const DEEPSEEK: &str = "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
const KIMI: &str = "Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>";

/// The upstream: answers by the scenario in the model name.
struct Script;

fn weather_answer(results: &[String]) -> Say {
    Say::text(&format!("It is {} in Paris.", results[0]))
}

impl Respond for Script {
    fn respond(&self, r: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        let results = tool_results(&body);
        let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
        let say = match body["model"].as_str().unwrap_or_default() {
            "plain" => Say::text("Hello from upstream."),
            "reason" => Say { reasoning: Some(REASONING[1]), ..Say::text("Paris is 22C.") },
            "weather" if results.is_empty() => {
                Say::calls(vec![call("call_w1", "get_weather", json!({"city": "Paris"}))])
            }
            "weather" | "hermes" | "deepseek" | "kimi" | "qwen3-32b" | "kimi-k2.6" | "deepseek-v3.1"
                if !results.is_empty() =>
            {
                weather_answer(&results)
            }
            "hermes" | "qwen3-32b" => Say::text(HERMES),
            // Kimi's format from a model the vllm profile maps to hermes only.
            "qwen3-kimi" => Say::text(KIMI),
            "deepseek" | "deepseek-v3.1" => Say::text(DEEPSEEK),
            "kimi" | "kimi-k2.6" => Say::text(KIMI),
            "parallel" | "idless" if results.is_empty() => Say {
                calls: vec![
                    call("call_p1", "get_weather", json!({"city": "Paris"})),
                    call("call_p2", "get_weather", json!({"city": "Rome"})),
                ],
                idless: body["model"] == "idless",
                ..Default::default()
            },
            "parallel" | "idless" => Say::text(&format!("Paris: {}; Rome: {}.", results[0], results[1])),
            "thinker" => {
                // DeepSeek thinking mode: every earlier tool-call turn must
                // carry its exact reasoning.
                for (i, m) in body["messages"].as_array().unwrap().iter().enumerate() {
                    if m["role"] == "assistant" && m["tool_calls"].as_array().is_some_and(|c| !c.is_empty()) {
                        let got = m.get("reasoning_content").and_then(Value::as_str);
                        if got != Some(REASONING[0]) {
                            return err(
                                400,
                                json!({"error": {"message": format!("Missing `reasoning_content` field in the assistant message at message index {i} (got {got:?})"), "type": "invalid_request_error"}}),
                            );
                        }
                    }
                }
                if results.is_empty() {
                    Say {
                        reasoning: Some(REASONING[0]),
                        calls: vec![call("call_ds_0", "get_weather", json!({"city": "Paris"}))],
                        ..Default::default()
                    }
                } else {
                    Say { reasoning: Some(REASONING[1]), ..weather_answer(&results) }
                }
            }
            // Structured output: the schema's tool when tools are offered
            // (function-calling modes), else the JSON as text.
            "person" if has_tools => {
                let named = body["tool_choice"]["function"]["name"].as_str();
                let name = named.or(body["tools"][0]["function"]["name"].as_str()).unwrap_or_default();
                Say::calls(vec![call("call_o1", name, json!({"name": "Ada Lovelace", "age": 36}))])
            }
            "person" => Say::text("{\"name\": \"Ada Lovelace\", \"age\": 36}"),
            // DeepSeek's cache-hit usage fields.
            "cached" => Say {
                usage: Some(json!({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                                   "prompt_cache_hit_tokens": 80, "prompt_cache_miss_tokens": 20,
                                   "completion_tokens_details": {"reasoning_tokens": 5}})),
                ..Say::text("Cached hello.")
            },
            // Vendor error bodies: Zhipu's business code, an OpenAI-style
            // 401, SiliconFlow's bare `{code, message}`.
            "err429" => return err(429, json!({"error": {"code": "1302", "message": "rate limit reached"}})),
            "err401" => {
                return err(
                    401,
                    json!({"error": {"message": "Incorrect API key provided", "type": "invalid_api_key"}}),
                );
            }
            "err400" => return err(400, json!({"code": 20015, "data": null, "message": "max_tokens is too large"})),
            other => {
                return err(
                    404,
                    json!({"error": {"message": format!("no scenario {other}"), "code": "model_not_found"}}),
                );
            }
        };
        respond(&body, say)
    }
}

fn respond(body: &Value, say: Say) -> ResponseTemplate {
    let usage = say.usage.unwrap_or_else(|| json!({"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}));
    let finish = if say.calls.is_empty() { "stop" } else { "tool_calls" };
    if body["stream"] == true {
        let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
        if let Some(r) = say.reasoning {
            let (a, b) = r.split_at(r.len() / 2);
            chunks.push(chunk(json!({"reasoning_content": a}), None));
            chunks.push(chunk(json!({"reasoning_content": b}), None));
        }
        if let Some(t) = &say.content {
            // Split in three, on char boundaries, so formats are cut mid-token.
            let cuts: Vec<usize> = t.char_indices().map(|(i, _)| i).collect();
            let n = cuts.len();
            let (a, b) = (cuts.get(n / 3).copied().unwrap_or(0), cuts.get(2 * n / 3).copied().unwrap_or(0));
            for piece in [&t[..a], &t[a..b], &t[b..]] {
                if !piece.is_empty() {
                    chunks.push(chunk(json!({"content": piece}), None));
                }
            }
        }
        for (i, c) in say.calls.iter().enumerate() {
            if say.idless {
                let whole = json!({"type": "function", "function": c["function"].clone()});
                chunks.push(chunk(json!({"tool_calls": [whole]}), None));
                continue;
            }
            let args = c["function"]["arguments"].as_str().unwrap();
            let (a, b) = args.split_at(args.len() / 2);
            let mut first = c.clone();
            first["index"] = json!(i);
            first["function"]["arguments"] = json!(a);
            chunks.push(chunk(json!({"tool_calls": [first]}), None));
            chunks.push(chunk(json!({"tool_calls": [{"index": i, "function": {"arguments": b}}]}), None));
        }
        chunks.push(chunk(json!({}), Some(finish)));
        if body["stream_options"]["include_usage"] == true {
            chunks.push(json!({"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                               "choices": [], "usage": usage}));
        }
        return ResponseTemplate::new(200).set_body_raw(sse_body(&chunks), "text/event-stream");
    }
    let mut msg = json!({"role": "assistant", "content": say.content});
    if let Some(r) = say.reasoning {
        msg["reasoning_content"] = json!(r);
    }
    if !say.calls.is_empty() {
        let calls: Vec<Value> = if say.idless {
            say.calls.iter().map(|c| json!({"type": "function", "function": c["function"].clone()})).collect()
        } else {
            say.calls
        };
        msg["tool_calls"] = Value::Array(calls);
    }
    let mut c = completion(msg, finish);
    c["usage"] = usage;
    ResponseTemplate::new(200).set_body_json(c)
}

/// The scripted upstream and the proxy in front of it: provider `v`, a
/// generic vendor that needs tool-call reasoning replayed and recovers every
/// text format; `moonshot` and `vllm`, the bundled profiles, whose model
/// globs pick the formats.
async fn start() -> (MockServer, Proxy) {
    let upstream = MockServer::start().await;
    Mock::given(method("POST")).respond_with(Script).mount(&upstream).await;
    let text = "name = \"test vendor\"\nbase_url = \"http://unused\"\n[thinking]\nreasoning_replay = \"required\"\n";
    let mut profiles = modelshim::provider::load_profiles(None).unwrap();
    profiles.insert("testvendor".into(), modelshim::provider::Profile::parse("testvendor", text).unwrap());
    let mut config = Config::default();
    for (name, profile) in [("v", "testvendor"), ("moonshot", "moonshot"), ("vllm", "vllm")] {
        let pc = ProviderConfig {
            profile: Some(profile.into()),
            base_url: Some(format!("{}/v1", upstream.uri())),
            api_key_env: Some("MODELSHIM_CLIENTS_TEST_NO_KEY".into()),
            ..Default::default()
        };
        config.providers.insert(name.into(), pc);
    }
    // The upstream fails on purpose: retries or a breaker would hide the
    // very errors under test.
    config.upstream.breaker_failures = 0;
    config.upstream.retries = Some(0);
    let p = serve_state(modelshim::server::AppState::new(&config, &profiles).unwrap()).await;
    (upstream, p)
}

/// The README's demo: the bundled offline `demo` provider with the
/// repository's skills.
async fn start_demo() -> Proxy {
    let replay = Arc::new(modelshim::server::replay::Replay::demo());
    let addr = modelshim::server::replay::spawn(replay, "127.0.0.1:0").await.unwrap();
    let profiles = modelshim::provider::load_profiles(None).unwrap();
    let mut config = Config::default();
    config
        .providers
        .insert("demo".into(), ProviderConfig { base_url: Some(format!("http://{addr}/v1")), ..Default::default() });
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
    config.skills = Some(modelshim::skills::SkillsConfig {
        dirs: vec![dir.display().to_string()],
        auto_reload: false,
        ..Default::default()
    });
    serve_state(modelshim::server::AppState::new(&config, &profiles).unwrap()).await
}

/// Runs `cmd` with a deadline; its combined output, or an error with it.
fn run_bounded(mut cmd: Command, limit: Duration) -> Result<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let (out, errp) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&errp).unwrap())
        .spawn()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = format!(
        "{}{}",
        std::fs::read_to_string(&out).unwrap_or_default(),
        std::fs::read_to_string(&errp).unwrap_or_default()
    );
    match status {
        Some(st) if st.success() => Ok(text),
        Some(st) => Err(format!("{cmd:?} exited with {st}:\n{text}")),
        None => Err(format!("{cmd:?} did not finish within {limit:?}:\n{text}")),
    }
}

/// The Vercel AI SDK, by major version, with both providers and zod.
const NODE_CLIENTS: [(u32, &[&str]); 2] = [
    (6, &["ai@6.0.326", "@ai-sdk/openai@3.0.141", "@ai-sdk/openai-compatible@2.0.92", "zod@4.6.7"]),
    (7, &["ai@7.0.173", "@ai-sdk/openai@4.0.118", "@ai-sdk/openai-compatible@3.0.92", "zod@4.6.7"]),
];

/// An npm folder per AI SDK major with its pinned packages (the pins are
/// written down beside them; a changed pin reinstalls). Locked like the
/// venvs, so concurrent tests install once.
fn node_clients_env(major: u32) -> PathBuf {
    let (_, pkgs) = NODE_CLIENTS.iter().find(|(m, _)| *m == major).expect("pinned major");
    let dir = sdk_dir().join(format!("node-clients-{major}"));
    let stamp = dir.join("pins.txt");
    let want = pkgs.join(" ");
    pyenv::locked(
        &format!("node-clients-{major}"),
        || std::fs::read_to_string(&stamp).is_ok_and(|t| t == want),
        || {
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            std::fs::write(dir.join("package.json"), r#"{"private": true, "type": "module"}"#)
                .map_err(|e| e.to_string())?;
            run(Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
                .args(*pkgs)
                .current_dir(&dir))?;
            std::fs::write(&stamp, &want).map_err(|e| e.to_string())
        },
    );
    dir
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients").join(name)
}

/// Runs the named checks of a client script against a fresh proxy; panics
/// with the script's report when any fails.
async fn run_checks(runner: Runner, file: &str, checks: &[&str]) {
    let (_upstream, p) = start().await;
    let demo = if checks.iter().any(|c| c.starts_with("demo")) { Some(start_demo().await) } else { None };
    run_with(&p, demo.as_ref(), runner, file, checks).await;
}

/// Runs the named checks of a client script against `p` (tests/it/structured.rs
/// runs its own upstream).
pub async fn run_script(p: &Proxy, runner: Runner, file: &str, checks: &[&str]) {
    run_with(p, None, runner, file, checks).await;
}

async fn run_with(p: &Proxy, demo: Option<&Proxy>, runner: Runner, file: &str, checks: &[&str]) {
    let mut cmd = match runner {
        Runner::Clients => Command::new(tokio::task::spawn_blocking(clients_env).await.unwrap()),
        Runner::LlamaIndex => Command::new(tokio::task::spawn_blocking(llamaindex_env).await.unwrap()),
        Runner::Node(major) => {
            let dir = tokio::task::spawn_blocking(move || node_clients_env(major)).await.unwrap();
            let mut c = Command::new("node");
            c.current_dir(dir);
            c
        }
    };
    let path = match runner {
        // ESM resolves packages from the script's folder: run a copy there
        // (renamed into place, so concurrent tests never read half a file).
        Runner::Node(major) => {
            let dir = sdk_dir().join(format!("node-clients-{major}"));
            pyenv::place(&script(file), &dir, file)
        }
        _ => script(file),
    };
    cmd.arg(path).args(checks).env("MODELSHIM_BASE_URL", p.url("/v1"));
    if let Some(d) = demo {
        cmd.env("MODELSHIM_DEMO_URL", d.url("/v1"));
    }
    // No telemetry, no network look-ups of model prices.
    cmd.env("LITELLM_LOCAL_MODEL_COST_MAP", "True").env("DO_NOT_TRACK", "1").env("OTEL_SDK_DISABLED", "true");
    let out = tokio::task::spawn_blocking(move || run_bounded(cmd, Duration::from_secs(120))).await.unwrap();
    match out {
        Ok(text) => println!("{text}"),
        Err(text) => panic!("{file} {checks:?} failed:\n{text}"),
    }
}

#[derive(Clone, Copy)]
pub enum Runner {
    Clients,
    LlamaIndex,
    Node(u32),
}

// ---- LangChain / LangGraph ----

#[tokio::test(flavor = "multi_thread")]
async fn langchain_chat_openai() {
    let checks = [
        "plain",
        "stream",
        "tools_streamed_chunks",
        "tools_invoke",
        "parallel",
        "structured_json_schema",
        "structured_function_calling",
        "text_formats",
        "text_formats_streamed",
        "profile_formats",
        "errors",
    ];
    run_checks(Runner::Clients, "langchain_client.py", &checks).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn langchain_idless_parallel_calls() {
    run_checks(Runner::Clients, "langchain_client.py", &["idless", "idless_streamed"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn langchain_cached_usage_metadata() {
    run_checks(Runner::Clients, "langchain_client.py", &["cached_usage"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn langgraph_react_agent() {
    run_checks(
        Runner::Clients,
        "langchain_client.py",
        &["react_agent", "react_agent_text_calls", "react_agent_reasoning", "demo_skills"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn langchain_demo_skills_trace_modes() {
    run_checks(Runner::Clients, "langchain_client.py", &["demo_skills_traced"]).await;
}

/// `ChatOpenAI(use_responses_api=True)`: text, tools and a ReAct loop.
#[tokio::test(flavor = "multi_thread")]
async fn langchain_responses_api() {
    run_checks(
        Runner::Clients,
        "langchain_client.py",
        &["responses_plain", "responses_tools", "responses_react_agent"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn langchain_responses_reasoning_summary() {
    run_checks(Runner::Clients, "langchain_client.py", &["responses_reasoning_summary"]).await;
}

// ---- LlamaIndex ----

#[tokio::test(flavor = "multi_thread")]
async fn llamaindex_openai_like() {
    let checks = ["plain", "stream", "function_agent", "function_agent_text_calls", "parallel", "errors"];
    run_checks(Runner::LlamaIndex, "llamaindex_client.py", &checks).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn llamaindex_idless_parallel_calls() {
    run_checks(Runner::LlamaIndex, "llamaindex_client.py", &["idless"]).await;
}

// ---- litellm ----

#[tokio::test(flavor = "multi_thread")]
async fn litellm_client() {
    let checks = [
        "plain",
        "stream",
        "tools",
        "tools_streamed",
        "parallel",
        "text_formats",
        "reasoning",
        "errors",
        "demo_skills",
    ];
    run_checks(Runner::Clients, "litellm_client.py", &checks).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn litellm_idless_parallel_calls() {
    run_checks(Runner::Clients, "litellm_client.py", &["idless", "idless_streamed"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn litellm_cached_usage_cost_fields() {
    run_checks(Runner::Clients, "litellm_client.py", &["cached_usage"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn litellm_demo_skills_trace_modes() {
    run_checks(Runner::Clients, "litellm_client.py", &["demo_skills_traced"]).await;
}

// ---- pydantic-ai ----

#[tokio::test(flavor = "multi_thread")]
async fn pydantic_ai_agent() {
    let checks =
        ["plain", "stream", "tool_loop", "tool_loop_text_calls", "parallel", "output_type", "thinking", "errors"];
    run_checks(Runner::Clients, "pydantic_ai_client.py", &checks).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pydantic_ai_idless_parallel_calls() {
    run_checks(Runner::Clients, "pydantic_ai_client.py", &["idless"]).await;
}

// ---- instructor ----

#[tokio::test(flavor = "multi_thread")]
async fn instructor_response_model() {
    run_checks(Runner::LlamaIndex, "instructor_client.py", &["tools_mode", "json_mode", "md_json_mode", "errors"])
        .await;
}

// ---- Vercel AI SDK ----

const VERCEL_COMPAT: [&str; 10] = [
    "compat_generate",
    "compat_stream",
    "compat_tool_loop",
    "compat_tool_loop_streamed",
    "compat_parallel",
    "compat_text_formats",
    "compat_profile_formats",
    "compat_reasoning",
    "compat_structured",
    "compat_errors",
];

#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai6_openai_compatible() {
    let mut checks = VERCEL_COMPAT.to_vec();
    checks.push("demo_skills");
    run_checks(Runner::Node(6), "vercel_ai.mjs", &checks).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai7_openai_compatible() {
    run_checks(Runner::Node(7), "vercel_ai.mjs", &VERCEL_COMPAT).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai6_idless_parallel_calls() {
    run_checks(Runner::Node(6), "vercel_ai.mjs", &["compat_idless", "compat_idless_streamed"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai7_idless_parallel_calls() {
    run_checks(Runner::Node(7), "vercel_ai.mjs", &["compat_idless", "compat_idless_streamed"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai6_demo_skills_trace_modes() {
    run_checks(Runner::Node(6), "vercel_ai.mjs", &["demo_skills_traced"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai7_demo_skills_trace_modes() {
    run_checks(Runner::Node(7), "vercel_ai.mjs", &["demo_skills_traced"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai6_cached_usage_token_details() {
    run_checks(Runner::Node(6), "vercel_ai.mjs", &["compat_cached_usage"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai7_cached_usage_token_details() {
    run_checks(Runner::Node(7), "vercel_ai.mjs", &["compat_cached_usage"]).await;
}

/// The default `@ai-sdk/openai` provider (Responses API) without a tool loop.
#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai6_openai_responses() {
    run_checks(
        Runner::Node(6),
        "vercel_ai.mjs",
        &["responses_generate", "responses_stream", "responses_tool_loop", "responses_errors"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai7_openai_responses() {
    run_checks(
        Runner::Node(7),
        "vercel_ai.mjs",
        &["responses_generate", "responses_stream", "responses_tool_loop", "responses_errors"],
    )
    .await;
}

/// Multi-step tool loops over Responses where the call came with prose: the
/// provider sends an `item_reference` for that message item (store on).
#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai6_openai_responses_item_reference_tool_loop() {
    run_checks(
        Runner::Node(6),
        "vercel_ai.mjs",
        &["responses_prose_call_loop_generate", "responses_prose_call_loop_stream"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai7_openai_responses_item_reference_tool_loop() {
    run_checks(
        Runner::Node(7),
        "vercel_ai.mjs",
        &["responses_prose_call_loop_generate", "responses_prose_call_loop_stream"],
    )
    .await;
}

/// Responses asked for a reasoning summary: the provider shows the
/// reasoning only from `summary`.
#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai6_openai_responses_reasoning_summary() {
    run_checks(Runner::Node(6), "vercel_ai.mjs", &["responses_reasoning_generate", "responses_reasoning_stream"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai7_openai_responses_reasoning_summary() {
    run_checks(Runner::Node(7), "vercel_ai.mjs", &["responses_reasoning_generate", "responses_reasoning_stream"]).await;
}

/// A DeepSeek-like thinker in a Responses tool loop: each call's reasoning
/// must reach the next turn (`item_reference`, and the non-streamed path's
/// reasoning memory).
#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai6_openai_responses_thinker_item_reference_loop() {
    run_checks(Runner::Node(6), "vercel_ai.mjs", &["responses_thinker_loop_generate", "responses_thinker_loop_stream"])
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai7_openai_responses_thinker_item_reference_loop() {
    run_checks(Runner::Node(7), "vercel_ai.mjs", &["responses_thinker_loop_generate", "responses_thinker_loop_stream"])
        .await;
}

/// The same loop with `store: false`: every item is sent inline, and the
/// reasoning of the call turn must still reach the upstream, on both paths.
#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai6_openai_responses_unstored_thinker_reasoning_memory() {
    let checks = ["responses_thinker_loop_unstored_generate", "responses_thinker_loop_unstored_stream"];
    run_checks(Runner::Node(6), "vercel_ai.mjs", &checks).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn vercel_ai7_openai_responses_unstored_thinker_reasoning_memory() {
    let checks = ["responses_thinker_loop_unstored_generate", "responses_thinker_loop_unstored_stream"];
    run_checks(Runner::Node(7), "vercel_ai.mjs", &checks).await;
}
