//! Codex CLI itself, headless (`codex exec`), through the Responses front
//! (issue #31): the pinned `@openai/codex` from npm, installed on first run
//! under cargo's target tmp dir, HOME a temp dir whose config points a
//! `[model_providers]` entry (`wire_api = "responses"`) at the proxy, and
//! nothing but loopback reachable. The task, in a temp git repo, needs
//! Codex's own `exec_command` tool: create a file, read it back, answer;
//! first the model calls a tool of Codex's `multi_agent_v1` namespace.
//! The scripted chat-completions upstream writes its tool calls as Hermes
//! `<tool_call>` text. In the DeepSeek-like variant it thinks on every turn
//! and answers 400 unless every earlier tool-call turn's reasoning comes
//! back; Codex sends `store: false`, and a relay in front of the proxy
//! strips the readable reasoning from what Codex sends back, so it can come
//! only through the proxy's `encrypted_content`. A third run uses a model
//! name Codex knows, for which it sends other tools (an `additional_tools`
//! item, its JavaScript code-mode `exec` as a `custom` tool). The relay also
//! keeps what Codex sent, shown when a test fails.

use crate::common;
use crate::support::pyenv;

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use modelshim::config::Config;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The pinned Codex CLI (npm `@openai/codex`).
const CODEX: &str = "0.171.0";
const KEY: &str = "proxy-test-key-codex-0171";
/// The reasoning of each tool-call turn, which must come back.
const REASONING: [&str; 3] = [
    "First close the stale helper agent.",
    "I should create notes.txt with a shell command.",
    "Now read notes.txt back to check it.",
];
const ANSWER: &str = "notes.txt says: status: draft";

/// An npm folder with the pinned Codex; its `codex` launcher.
fn codex_env() -> PathBuf {
    let dir = pyenv::sdk_dir().join("codex");
    let bin = dir.join("node_modules/.bin/codex");
    let ready = || {
        std::fs::read_to_string(dir.join("node_modules/@openai/codex/package.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| v["version"] == CODEX)
            && pyenv::run(Command::new(&bin).arg("--version")).is_ok_and(|v| v.contains(CODEX))
    };
    pyenv::locked("codex", ready, || {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("package.json"), r#"{"private": true}"#).map_err(|e| e.to_string())?;
        pyenv::run(
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
                .arg(format!("@openai/codex@{CODEX}"))
                .current_dir(&dir),
        )
        .map(drop)
    });
    bin
}

type Log = Arc<Mutex<Vec<Value>>>;

fn err400(message: &str) -> ResponseTemplate {
    ResponseTemplate::new(400).set_body_json(
        json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}}),
    )
}

fn hermes(name: &str, args: Value) -> String {
    format!("<tool_call>\n{}\n</tool_call>", json!({"name": name, "arguments": args}))
}

/// The upstream: `coder` calls a tool of Codex's `multi_agent_v1`
/// namespace (by its flattened name), writes a file, reads it back, and
/// answers with what the read returned; anything else (a request without
/// tools) says a line.
struct Upstream {
    log: Log,
    mode: Mode,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Plain,
    /// Thinks on every turn and wants the reasoning back (DeepSeek).
    Thinks,
    /// Codex for a model it knows (`gpt-*`): its only tool is the `exec`
    /// code-mode tool (JavaScript, a `custom` tool in the `functions`
    /// namespace), whose script runs `exec_command`.
    Code,
    /// Reports a full context after the first call, so Codex compacts: a
    /// request without tools summarized, then the task goes on from the
    /// summary.
    Compact,
}

/// What the upstream answers Codex's compaction request with.
const SUMMARY: &str = "SUMMARY: notes.txt was created with status: draft.";

/// The script the code-mode model writes: one shell command through the
/// nested `exec_command`, its result as the output.
const SCRIPT: &str = "const r = await tools.exec_command({cmd: \"printf 'status: draft\\\\n' > notes.txt && cat notes.txt\"});\ntext(r);";

impl Respond for Upstream {
    fn respond(&self, r: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        self.log.lock().unwrap().push(body.clone());
        let msgs = body["messages"].as_array().cloned().unwrap_or_default();
        let outputs: Vec<&str> =
            msgs.iter().filter(|m| m["role"] == "tool").filter_map(|m| m["content"].as_str()).collect();
        let users: Vec<&str> =
            msgs.iter().filter(|m| m["role"] == "user").filter_map(|m| m["content"].as_str()).collect();
        let mut tokens = 120;
        let (reasoning, content) = if self.mode == Mode::Compact {
            if body.get("tools").is_none() {
                ("", SUMMARY.to_string())
            } else if users.iter().any(|u| u.contains(SUMMARY)) {
                ("", ANSWER.to_string())
            } else if outputs.is_empty() {
                tokens = 50_000;
                ("", hermes("exec_command", json!({"cmd": "printf 'status: draft\\n' > notes.txt"})))
            } else {
                ("", "NOT COMPACTED".to_string())
            }
        } else if self.mode == Mode::Code && body.get("tools").is_some() {
            match outputs.first() {
                None => ("", hermes("functions__exec", json!({"input": SCRIPT}))),
                Some(o) if o.contains("status: draft") => ("", ANSWER.to_string()),
                Some(o) => ("", format!("READ FAILED: {o}")),
            }
        } else if body["model"] == "coder" && body.get("tools").is_some() {
            if self.mode == Mode::Thinks {
                let turns = msgs.iter().filter(|m| m["role"] == "assistant" && m.get("tool_calls").is_some());
                for (k, m) in turns.enumerate() {
                    if m["reasoning_content"].as_str() != REASONING.get(k).copied() {
                        return err400(&format!(
                            "Missing `reasoning_content` field in the assistant message (tool-call turn {k})"
                        ));
                    }
                }
            }
            match outputs.len() {
                0 => (REASONING[0], hermes("multi_agent_v1__close_agent", json!({"target": "stale-helper"}))),
                1 => (
                    REASONING[1],
                    format!(
                        "I'll create the file.\n{}",
                        hermes("exec_command", json!({"cmd": "printf 'status: draft\\n' > notes.txt"}))
                    ),
                ),
                2 => (REASONING[2], hermes("exec_command", json!({"cmd": "cat notes.txt"}))),
                _ if outputs[2].contains("status: draft") => ("", ANSWER.to_string()),
                _ => ("", format!("READ FAILED: {}", outputs[2])),
            }
        } else {
            ("", "OK.".to_string())
        };
        let reasoning = Some(reasoning).filter(|r| self.mode == Mode::Thinks && !r.is_empty());
        if body["stream"] != true {
            let mut m = json!({"role": "assistant", "content": content});
            if let Some(r) = reasoning {
                m["reasoning_content"] = json!(r);
            }
            return ResponseTemplate::new(200).set_body_json(completion(m, "stop"));
        }
        let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
        if let Some(r) = reasoning {
            let (a, b) = r.split_at(r.len() / 2);
            chunks.extend([chunk(json!({"reasoning_content": a}), None), chunk(json!({"reasoning_content": b}), None)]);
        }
        // The text in pieces of a few characters, cutting through the tags.
        let chars: Vec<char> = content.chars().collect();
        for piece in chars.chunks(7) {
            chunks.push(chunk(json!({"content": piece.iter().collect::<String>()}), None));
        }
        chunks.push(chunk(json!({}), Some("stop")));
        chunks.push(json!({"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
                           "usage": {"prompt_tokens": tokens - 20, "completion_tokens": 20, "total_tokens": tokens}}));
        ResponseTemplate::new(200).set_body_raw(sse_body(&chunks), "text/event-stream")
    }
}

/// The readable reasoning taken out of the reasoning items of a request
/// body (their `encrypted_content` stays); other bodies unchanged.
fn strip_reasoning(body: &[u8]) -> Vec<u8> {
    let Ok(mut v) = serde_json::from_slice::<Value>(body) else { return body.to_vec() };
    for it in v["input"].as_array_mut().into_iter().flatten() {
        if it["type"] == "reasoning"
            && let Some(o) = it.as_object_mut()
        {
            o.remove("content");
            o.insert("summary".into(), json!([]));
        }
    }
    serde_json::to_vec(&v).unwrap()
}

/// A loopback HTTP/1.1 relay in front of the proxy: requests framed by
/// `content-length`, each kept (to show what Codex sent) and, with
/// `strip`, its reasoning made unreadable but for `encrypted_content`.
async fn relay(to: std::net::SocketAddr, strip: bool) -> (String, Arc<Mutex<Vec<(String, Value)>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let keep = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let keep = keep.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(to).await else { return };
                let (mut cr, mut cw) = client.split();
                let (mut sr, mut sw) = tokio::io::split(server);
                let up = async {
                    let mut buf = Vec::new();
                    let mut chunk = vec![0u8; 64 * 1024];
                    loop {
                        let end = loop {
                            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                break Some(p);
                            }
                            match cr.read(&mut chunk).await {
                                Ok(n @ 1..) => buf.extend_from_slice(&chunk[..n]),
                                _ => break None,
                            }
                        };
                        let Some(end) = end else { break };
                        let head = String::from_utf8_lossy(&buf[..end]).to_string();
                        let len = head
                            .lines()
                            .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")))
                            .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        while buf.len() < end + 4 + len {
                            match cr.read(&mut chunk).await {
                                Ok(n @ 1..) => buf.extend_from_slice(&chunk[..n]),
                                _ => return,
                            }
                        }
                        let body: Vec<u8> = buf[end + 4..end + 4 + len].to_vec();
                        buf.drain(..end + 4 + len);
                        let body = if strip { strip_reasoning(&body) } else { body };
                        let head: Vec<String> = head
                            .lines()
                            .map(|l| match l.split_once(':') {
                                Some((k, _)) if k.eq_ignore_ascii_case("content-length") => {
                                    format!("content-length: {}", body.len())
                                }
                                _ => l.to_string(),
                            })
                            .collect();
                        let line = head.first().cloned().unwrap_or_default();
                        keep.lock().unwrap().push((line, serde_json::from_slice(&body).unwrap_or(Value::Null)));
                        let out = format!("{}\r\n\r\n", head.join("\r\n"));
                        if sw.write_all(out.as_bytes()).await.is_err() || sw.write_all(&body).await.is_err() {
                            break;
                        }
                    }
                    let _ = sw.shutdown().await;
                };
                let down = async {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                    let _ = cw.shutdown().await;
                };
                tokio::join!(up, down);
            });
        }
    });
    (url, seen)
}

/// What Codex sent, in short: each request line and, for JSON bodies, the
/// top-level keys, tool types and input item types.
fn shapes(seen: &[(String, Value)]) -> String {
    let mut out = String::new();
    for (line, v) in seen {
        out.push_str(&format!("{line}\n"));
        let keys: Vec<&String> = v.as_object().map(|o| o.keys().collect()).unwrap_or_default();
        let kinds = |k: &str| -> Vec<String> {
            v[k].as_array()
                .map(|a| a.iter().map(|t| t["type"].as_str().unwrap_or("?").to_string()).collect())
                .unwrap_or_default()
        };
        out.push_str(&format!("  keys {keys:?}\n  tools {:?}\n  input {:?}\n", kinds("tools"), kinds("input")));
    }
    out
}

/// One `codex exec` run and what it left.
struct Run {
    out: std::process::Output,
    log: Log,
    seen: Arc<Mutex<Vec<(String, Value)>>>,
    notes: PathBuf,
    _work: tempfile::TempDir,
}

impl Run {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).to_string()
    }

    fn report(&self) -> String {
        let requests = self.log.lock().unwrap().clone();
        format!(
            "exit {:?}\nstdout:\n{}\nstderr:\n{}\nCodex sent:\n{}\nupstream got {} requests: {:#?}",
            self.out.status,
            self.stdout(),
            String::from_utf8_lossy(&self.out.stderr),
            shapes(&self.seen.lock().unwrap()),
            requests.len(),
            requests.iter().map(|b| (b["model"].clone(), b["messages"].as_array().map(Vec::len))).collect::<Vec<_>>(),
        )
    }

    /// Codex succeeded, wrote the file and printed the answer.
    fn check_task(&self) {
        assert!(self.out.status.success(), "{}", self.report());
        assert_eq!(self.stdout().trim(), ANSWER, "{}", self.report());
        assert_eq!(std::fs::read_to_string(&self.notes).ok().as_deref(), Some("status: draft\n"), "{}", self.report());
    }
}

/// Runs `codex exec` on the task (Codex's `model` routed to the upstream's
/// `coder`) against a fresh proxy and upstream.
async fn run_codex(model: &str, mode: Mode, settings: &str) -> Run {
    let codex = tokio::task::spawn_blocking(codex_env).await.unwrap();
    // Under cargo's target tmp, not /tmp (Codex will not put its helper
    // binaries under a temp dir, and says so).
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (home, cwd) = (work.path().join("home"), work.path().join("project"));
    std::fs::create_dir_all(home.join(".codex")).unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    pyenv::run(Command::new("git").args(["init", "-q"]).current_dir(&cwd)).unwrap();
    let notes = cwd.join("notes.txt");

    let upstream = MockServer::start().await;
    let log: Log = Arc::default();
    Mock::given(method("POST")).respond_with(Upstream { log: log.clone(), mode }).mount(&upstream).await;
    let extra: Config =
        toml::from_str(&format!("[auth]\nkeys = [\"{KEY}\"]\n[models]\n\"{model}\" = \"v/coder\"\n")).unwrap();
    // No store replay: reasoning reaches the upstream only if Codex's own
    // history brought it back.
    let profile = "[tools]\nformats = { \"*\" = [\"hermes\"] }\n";
    let proxy = proxy_with(profile, &upstream.uri(), |c| {
        c.upstream.breaker_failures = 0;
        c.upstream.retries = Some(0);
        c.auth = extra.auth;
        c.models = extra.models;
    })
    .await;
    let (base, seen) = relay(proxy.addr, mode == Mode::Thinks).await;
    std::fs::write(
        home.join(".codex/config.toml"),
        format!(
            r#"model = "{model}"
model_provider = "modelshim"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
{settings}

[analytics]
enabled = false

[history]
persistence = "none"

[model_providers.modelshim]
name = "modelshim"
base_url = "{base}/v1"
wire_api = "responses"
env_key = "MODELSHIM_API_KEY"
request_max_retries = 0
stream_max_retries = 0
"#
        ),
    )
    .unwrap();

    let mut cmd = tokio::process::Command::new(&codex);
    cmd.args(["exec", "Create notes.txt saying status: draft, then read it back and tell me what it says."])
        .current_dir(&cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("CODEX_HOME", home.join(".codex"))
        .env("MODELSHIM_API_KEY", KEY)
        // Anything but loopback goes to a closed port.
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("HTTP_PROXY", "http://127.0.0.1:9")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("RUST_LOG", "error")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output()).await.expect("codex exec finished").unwrap();
    Run { out, log, seen, notes, _work: work }
}

/// The task with a vendor model name, and (thinking) the reasoning round trip.
async fn create_then_read(mode: Mode) {
    let run = run_codex("coder", mode, "").await;
    run.check_task();
    let (log, seen, out) = (&run.log, &run.seen, &run.out);
    let report = || run.report();
    // The namespace tool was offered flattened, web_search not at all.
    let requests = log.lock().unwrap().clone();
    let first = requests.iter().find(|b| b.get("tools").is_some()).expect("the model was asked");
    let names: Vec<&str> =
        first["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert!(names.contains(&"exec_command") && names.contains(&"multi_agent_v1__spawn_agent"), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("web_search")), "{names:?}");
    // Codex ran the namespaced call: it came back with `namespace` (without
    // it Codex answers "unsupported call: close_agent").
    let last = requests.iter().rev().find(|b| b.get("tools").is_some()).unwrap();
    let outputs: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(outputs[0].contains("invalid agent id stale-helper"), "{outputs:?}\n{}", report());
    let sent = seen.lock().unwrap().clone();
    let (_, body) = sent.iter().rev().find(|(l, _)| l.starts_with("POST /v1/responses ")).unwrap();
    let call = body["input"].as_array().unwrap().iter().find(|i| i["type"] == "function_call").unwrap();
    assert_eq!((call["namespace"].as_str(), call["name"].as_str()), (Some("multi_agent_v1"), Some("close_agent")));
    if mode != Mode::Thinks {
        return;
    }
    // The last request carried every turn's reasoning back ...
    let back: Vec<&str> =
        last["messages"].as_array().unwrap().iter().filter_map(|m| m["reasoning_content"].as_str()).collect();
    assert_eq!(back, REASONING, "{}", report());
    // ... from reasoning items Codex sent with only the proxy's sealed text.
    assert_eq!(body["store"], false);
    let sealed: Vec<&str> = body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "reasoning")
        .filter_map(|i| i["encrypted_content"].as_str())
        .collect();
    assert_eq!(sealed.len(), 3, "{}", report());
    assert!(sealed.iter().all(|s| s.starts_with("msr1.") && !s.contains("notes")), "{sealed:?}");
    // Codex showed the reasoning: the summary was filled.
    assert!(String::from_utf8_lossy(&out.stderr).contains(REASONING[1]), "{}", report());
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_exec_creates_and_reads_a_file_through_hermes_text_calls() {
    create_then_read(Mode::Plain).await;
}

/// A DeepSeek-like thinker: the reasoning comes back only sealed.
#[tokio::test(flavor = "multi_thread")]
async fn codex_exec_on_a_thinker_brings_its_reasoning_back_encrypted() {
    create_then_read(Mode::Thinks).await;
}

/// A `gpt-*` name Codex knows (routed to the vendor by a `[models]` alias):
/// its tools come in an `additional_tools` item, the only one the model
/// needs is the `custom` code-mode tool `exec` of the `functions`
/// namespace; the call comes back as a `custom_tool_call` Codex runs.
#[tokio::test(flavor = "multi_thread")]
async fn codex_exec_for_a_model_it_knows_runs_its_code_mode_tool() {
    let run = run_codex("gpt-6.2-sol", Mode::Code, "").await;
    run.check_task();
    let requests = run.log.lock().unwrap().clone();
    let first = requests.iter().find(|b| b.get("tools").is_some()).expect("the model was asked");
    let exec = first["tools"].as_array().unwrap().iter().find(|t| t["function"]["name"] == "functions__exec");
    assert_eq!(exec.unwrap()["function"]["parameters"]["required"], json!(["input"]), "{}", run.report());
    let sent = run.seen.lock().unwrap().clone();
    let (_, body) = sent.iter().rev().find(|(l, _)| l.starts_with("POST /v1/responses ")).unwrap();
    let input = body["input"].as_array().unwrap();
    assert!(input.iter().any(|i| i["type"] == "additional_tools"), "{}", run.report());
    let call = input.iter().find(|i| i["type"] == "custom_tool_call").unwrap();
    assert_eq!((call["namespace"].as_str(), call["name"].as_str()), (Some("functions"), Some("exec")));
    assert_eq!(call["input"], SCRIPT);
}

/// When its context fills, Codex 0.171 with a custom provider compacts with
/// a plain `/v1/responses` turn (`tools: []`, its summary prompt), not
/// `/v1/responses/compact`, then goes on from the summary.
#[tokio::test(flavor = "multi_thread")]
async fn codex_exec_compacts_its_context_through_a_plain_turn() {
    let run =
        run_codex("coder", Mode::Compact, "model_context_window = 100000\nmodel_auto_compact_token_limit = 1000").await;
    run.check_task();
    let requests = run.log.lock().unwrap().clone();
    let compaction = requests.iter().find(|b| b.get("tools").is_none()).expect("a compaction turn");
    let last = compaction["messages"].as_array().unwrap().last().unwrap();
    assert!(last["content"].as_str().unwrap().contains("COMPACTION"), "{}", run.report());
    let sent = run.seen.lock().unwrap().clone();
    assert!(sent.iter().all(|(l, _)| l.starts_with("POST /v1/responses ")), "{}", run.report());
}
