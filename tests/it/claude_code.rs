//! Claude Code itself, headless (`claude -p`), through the Messages front
//! (issue #30): the pinned `@anthropic-ai/claude-code` from npm, installed
//! on first run under cargo's target tmp dir, offline but for loopback,
//! against a scripted DeepSeek-like upstream that writes its tool calls as
//! DSML text, thinks on every turn and answers 400 unless the reasoning of
//! earlier tool-call turns comes back (the profile does no store replay, so
//! only Claude Code's own history can bring it). The task needs Claude
//! Code's own tools: write a file, edit it, answer. A relay in front of the
//! proxy keeps what Claude Code sent, shown when a test fails.

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

/// The pinned Claude Code (npm `@anthropic-ai/claude-code`).
const CLAUDE_CODE: &str = "2.1.332";
const KEY: &str = "proxy-test-key-claude-0451";
/// The reasoning of each tool-call turn, which must come back.
const REASONING: [&str; 2] =
    ["I should create notes.txt with the Write tool.", "Now change draft to final with the Edit tool."];
const ANSWER: &str = "Done: notes.txt now says status: final.";

/// An npm folder with the pinned Claude Code; its `claude` binary.
fn claude_env() -> PathBuf {
    let dir = pyenv::sdk_dir().join("claude-code");
    let bin = dir.join("node_modules/.bin/claude");
    let ready = || {
        std::fs::read_to_string(dir.join("node_modules/@anthropic-ai/claude-code/package.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| v["version"] == CLAUDE_CODE)
            && pyenv::run(Command::new(&bin).arg("--version")).is_ok_and(|v| v.contains(CLAUDE_CODE))
    };
    pyenv::locked("claude-code", ready, || {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("package.json"), r#"{"private": true}"#).map_err(|e| e.to_string())?;
        pyenv::run(
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
                .arg(format!("@anthropic-ai/claude-code@{CLAUDE_CODE}"))
                .current_dir(&dir),
        )
        .map(drop)
    });
    bin
}

type Log = Arc<Mutex<Vec<Value>>>;

fn dsml(name: &str, params: &[(&str, &str)]) -> String {
    let mut s = format!("<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"{name}\">\n");
    for (k, v) in params {
        s.push_str(&format!("<｜DSML｜parameter name=\"{k}\" string=\"true\">{v}</｜DSML｜parameter>\n"));
    }
    s.push_str("</｜DSML｜invoke>\n</｜DSML｜function_calls>");
    s
}

fn err400(message: &str) -> ResponseTemplate {
    ResponseTemplate::new(400).set_body_json(
        json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}}),
    )
}

/// The upstream: `coder` is the DeepSeek-like main model, `small` the
/// haiku-class background model that only ever says a line of text.
struct Upstream {
    log: Log,
    notes: PathBuf,
    /// Calls as Hermes `<tool_call>` JSON (Qwen-like) instead of DSML.
    hermes: bool,
}

impl Upstream {
    fn call(&self, name: &str, params: &[(&str, &str)]) -> String {
        if !self.hermes {
            return dsml(name, params);
        }
        let args: serde_json::Map<String, Value> = params.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
        format!("<tool_call>\n{}\n</tool_call>", json!({"name": name, "arguments": args}))
    }
}

impl Respond for Upstream {
    fn respond(&self, r: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        self.log.lock().unwrap().push(body.clone());
        let msgs = body["messages"].as_array().cloned().unwrap_or_default();
        let (reasoning, content) = match body["model"].as_str().unwrap_or("") {
            "coder" if body.get("tools").is_some() => {
                // DeepSeek thinking mode: every earlier tool-call turn's reasoning back.
                let turns = msgs.iter().filter(|m| m["role"] == "assistant" && m.get("tool_calls").is_some());
                for (k, m) in turns.enumerate() {
                    if m["reasoning_content"].as_str() != REASONING.get(k).copied() {
                        return err400(&format!(
                            "Missing `reasoning_content` field in the assistant message (tool-call turn {k})"
                        ));
                    }
                }
                let notes = self.notes.display().to_string();
                match msgs.iter().filter(|m| m["role"] == "tool").count() {
                    0 => (
                        Some(REASONING[0]),
                        format!(
                            "I'll create the file.\n{}",
                            self.call("Write", &[("file_path", &notes), ("content", "status: draft\n")])
                        ),
                    ),
                    1 => (
                        Some(REASONING[1]),
                        self.call("Edit", &[("file_path", &notes), ("old_string", "draft"), ("new_string", "final")]),
                    ),
                    _ => (None, ANSWER.to_string()),
                }
            }
            _ => (None, "OK.".to_string()),
        };
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
        // The text in pieces of a few characters, cutting through the DSML tags.
        let chars: Vec<char> = content.chars().collect();
        for piece in chars.chunks(7) {
            chunks.push(chunk(json!({"content": piece.iter().collect::<String>()}), None));
        }
        chunks.push(chunk(json!({}), Some("stop")));
        chunks.push(json!({"id": "up-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
                           "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}));
        ResponseTemplate::new(200).set_body_raw(sse_body(&chunks), "text/event-stream")
    }
}

/// A loopback relay in front of the proxy that keeps every byte Claude
/// Code sent, to show its requests when the test fails.
async fn relay(to: std::net::SocketAddr) -> (String, Arc<Mutex<Vec<u8>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<u8>>> = Arc::default();
    let keep = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let keep = keep.clone();
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(to).await else { return };
                let (mut cr, mut cw) = client.split();
                let (mut sr, mut sw) = tokio::io::split(server);
                let up = async {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n @ 1..) = cr.read(&mut buf).await {
                        keep.lock().unwrap().extend_from_slice(&buf[..n]);
                        if sw.write_all(&buf[..n]).await.is_err() {
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

/// The requests in the bytes Claude Code sent: each request line and its
/// JSON body, if any (bodies framed by `content-length`).
fn requests_in(raw: &[u8]) -> Vec<(String, Option<Value>)> {
    let mut out = Vec::new();
    let mut rest = raw;
    while let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&rest[..end]).to_string();
        let len = head
            .lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")))
            .and_then(|(_, v)| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let body = &rest[end + 4..(end + 4 + len).min(rest.len())];
        out.push((head.lines().next().unwrap_or("").to_string(), serde_json::from_slice(body).ok()));
        rest = &rest[(end + 4 + len).min(rest.len())..];
    }
    out
}

/// What Claude Code sent, in short: each request line and, for JSON bodies,
/// the top-level keys, model, thinking, tool count and block types per message.
fn shapes(raw: &[u8]) -> String {
    let mut out = String::new();
    for (line, body) in requests_in(raw) {
        out.push_str(&line);
        out.push('\n');
        let Some(v) = body else { continue };
        let keys: Vec<&String> = v.as_object().map(|o| o.keys().collect()).unwrap_or_default();
        let blocks: Vec<String> = v["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .map(|m| {
                        let kinds: Vec<&str> = m["content"]
                            .as_array()
                            .map(|c| c.iter().filter_map(|b| b["type"].as_str()).collect())
                            .unwrap_or_else(|| vec!["string"]);
                        format!("{}:{}", m["role"].as_str().unwrap_or("?"), kinds.join("+"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push_str(&format!(
            "  keys {keys:?} model {} thinking {} tools {}\n  messages {blocks:?}\n",
            v["model"],
            v["thinking"],
            v["tools"].as_array().map_or(0, Vec::len)
        ));
    }
    out
}

/// A home and a project folder for one Claude Code run, in a temporary folder
/// that goes with the first value.
fn workdir() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let (home, cwd) = (work.path().join("home"), work.path().join("project"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    (work, home, cwd)
}

/// The proxy takes `extra`'s keys and model names, and passes the
/// upstream's first answer on (no retry, no breaker): what Claude Code does
/// with it is the test.
fn answers_once(c: &mut Config, extra: &Config) {
    c.upstream.breaker_failures = 0;
    c.upstream.retries = Some(0);
    c.auth = extra.auth.clone();
    c.models = extra.models.clone();
}

/// `claude -p prompt` in `cwd` against `base`, with only `tools` allowed
/// outright (root may not skip permissions), in an environment of its own:
/// its home, the proxy key, no traffic but the API, no retries.
fn claude_print(
    claude: &std::path::Path,
    home: &std::path::Path,
    cwd: &std::path::Path,
    base: &str,
    prompt: &str,
    tools: &str,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(claude);
    cmd.args(["-p", prompt])
        .args(["--permission-mode", "acceptEdits", "--allowedTools", tools])
        .args(["--no-session-persistence", "--max-budget-usd", "5"])
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
        .env("ANTHROPIC_BASE_URL", base)
        .env("ANTHROPIC_API_KEY", KEY)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// The command's output, within two minutes.
async fn finished(mut cmd: tokio::process::Command) -> std::process::Output {
    tokio::time::timeout(Duration::from_secs(120), cmd.output()).await.expect("claude -p finished").unwrap()
}

/// What a failing assertion prints: Claude Code's exit, output, what it sent
/// through the relay, and the upstream's requests by model and length.
fn account(out: &std::process::Output, seen: &Mutex<Vec<u8>>, requests: &[Value]) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}\nClaude Code sent:\n{}\nupstream got {} requests: {:#?}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        shapes(&seen.lock().unwrap()),
        requests.len(),
        requests.iter().map(|b| (b["model"].clone(), b["messages"].as_array().map(Vec::len))).collect::<Vec<_>>(),
    )
}

/// Runs `claude -p` on the task (with `--model` if given, in the output
/// format given) against a fresh proxy and upstream, and checks the file,
/// the answer and the reasoning round trip.
async fn write_then_edit(model: Option<&str>, format: &str, hermes: bool) {
    let claude = tokio::task::spawn_blocking(claude_env).await.unwrap();
    let (_work, home, cwd) = workdir();
    let notes = cwd.canonicalize().unwrap().join("notes.txt");

    let upstream = MockServer::start().await;
    let log: Log = Arc::default();
    Mock::given(method("POST"))
        .respond_with(Upstream { log: log.clone(), notes: notes.clone(), hermes })
        .mount(&upstream)
        .await;
    let extra: Config = toml::from_str(&format!(
        "[auth]\nkeys = [\"{KEY}\"]\n[models]\n\"claude-*\" = \"v/coder\"\n\"claude-*haiku*\" = \"v/small\"\n"
    ))
    .unwrap();
    // Reasoning is kept as the client sends it (no store replay), so it
    // reaches the upstream only if Claude Code's history carried it back.
    let profile = "[tools]\nformats = { \"*\" = [\"deepseek_v32_dsml\", \"hermes\"] }\n";
    let proxy = proxy_with(profile, &upstream.uri(), |c| {
        answers_once(c, &extra);
    })
    .await;
    let (base, seen) = relay(proxy.addr).await;

    let mut cmd = claude_print(
        &claude,
        &home,
        &cwd,
        &base,
        "Create notes.txt saying status: draft, then edit it to say final.",
        "Write Edit Read",
    );
    cmd.args(["--output-format", format])
        .args(Some("--verbose").filter(|_| format == "stream-json"))
        .args(model.map(|m| ["--model", m]).into_iter().flatten());
    let out = finished(cmd).await;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let report = || account(&out, &seen, &log.lock().unwrap());
    assert!(out.status.success(), "{}", report());
    // `json` prints the result; `stream-json` a line per event, the result last.
    let result: Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .rfind(|v| v["type"] == "result")
        .unwrap_or_else(|| panic!("no result: {}", report()));
    assert_eq!(result["result"], ANSWER, "{}", report());
    assert_eq!(std::fs::read_to_string(&notes).ok().as_deref(), Some("status: final\n"), "{}", report());
    // The last main-model request carried both turns' reasoning back.
    let requests = log.lock().unwrap().clone();
    let last = requests.iter().rev().find(|b| b["model"] == "coder").expect("the main model was asked");
    let back: Vec<&str> =
        last["messages"].as_array().unwrap().iter().filter_map(|m| m["reasoning_content"].as_str()).collect();
    assert_eq!(back, REASONING, "{}", report());
    // ... from the thinking blocks Claude Code kept in its history.
    let sent = requests_in(&seen.lock().unwrap());
    let thinking: Vec<String> = sent
        .iter()
        .filter_map(|(_, b)| b.as_ref())
        .rfind(|b| b.get("tools").is_some())
        .map(|b| {
            let blocks = b["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_array()).flatten();
            blocks
                .filter(|b| b["type"] == "thinking")
                .map(|b| b["thinking"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(thinking, REASONING, "{}", report());
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_headless_writes_and_edits_a_file_through_dsml_calls() {
    write_then_edit(Some("claude-sonnet-4-5"), "json", false).await;
}

/// The default model (opus-class: adaptive thinking, per-turn system
/// messages in the history), streamed JSON output, Hermes calls.
#[tokio::test(flavor = "multi_thread")]
async fn claude_code_default_model_stream_json_with_hermes_calls() {
    write_then_edit(None, "stream-json", true).await;
}

/// Main-model requests: the first writes a file (a Hermes call), the
/// second overflows (GLM's real words); after that a compaction gets
/// its summary and anything else the answer.
struct Overflowing {
    log: Log,
    notes: PathBuf,
    /// Which main-model request overflows (1-based).
    overflow_at: usize,
}

/// GLM's words and code 1261 (providers/zhipu.toml), which Claude Code does
/// not take for an overflow by itself (as it is, it compacts on OpenAI's
/// "maximum context length", Kimi's "exceeded model token limit" and
/// DashScope's "Range of input length" wordings too, and not on an
/// unrelated 400).
const OVERFLOW: &str = "Prompt exceeds max length";

impl Respond for Overflowing {
    fn respond(&self, r: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        let nth_main = {
            let mut log = self.log.lock().unwrap();
            log.push(body.clone());
            log.iter().filter(|b| b["model"] == "glm-4.7").count()
        };
        // Claude Code's compaction asks, in its last message, for a summary.
        let last = body["messages"].as_array().and_then(|m| m.last()).map(|m| m["content"].to_string());
        let summarizing = last.is_some_and(|m| m.contains("followed by a <summary> block"));
        let text = match (body["model"] == "glm-4.7", nth_main) {
            (true, n) if n == self.overflow_at => {
                return ResponseTemplate::new(400)
                    .set_body_json(json!({"error": {"code": "1261", "message": OVERFLOW}}));
            }
            (true, 1) => format!(
                "<tool_call>\n{}\n</tool_call>",
                json!({"name": "Write", "arguments": {"file_path": self.notes.display().to_string(), "content": "hello\n"}})
            ),
            (true, _) if summarizing => {
                "<summary>The user asked for notes.txt saying hello; it was written.</summary>".into()
            }
            (true, _) => "Done: notes.txt says hello.".into(),
            _ => "OK.".into(),
        };
        let m = json!({"role": "assistant", "content": text});
        if body["stream"] != true {
            return ResponseTemplate::new(200).set_body_json(completion(m, "stop"));
        }
        let chunks = vec![
            chunk(json!({"role": "assistant", "content": ""}), None),
            chunk(json!({"content": text}), None),
            chunk(json!({}), Some("stop")),
        ];
        ResponseTemplate::new(200).set_body_raw(sse_body(&chunks), "text/event-stream")
    }
}

/// Runs `claude -p prompt` against [`Overflowing`] behind the proxy (GLM's
/// profile data for errors, the main model `glm-4.7`); its stdout and the
/// upstream's requests, and a report for failures.
async fn overflowing(prompt: &str, overflow_at: usize) -> (String, Vec<Value>, String) {
    let claude = tokio::task::spawn_blocking(claude_env).await.unwrap();
    let (_work, home, cwd) = workdir();
    let notes = cwd.canonicalize().unwrap().join("notes.txt");
    let upstream = MockServer::start().await;
    let log: Log = Arc::default();
    Mock::given(method("POST"))
        .respond_with(Overflowing { log: log.clone(), notes, overflow_at })
        .mount(&upstream)
        .await;
    let extra: Config = toml::from_str(&format!(
        "[auth]\nkeys = [\"{KEY}\"]\n[models]\n\"claude-*\" = \"v/glm-4.7\"\n\"claude-*haiku*\" = \"v/small\"\n"
    ))
    .unwrap();
    // The test profile takes the bundled zhipu profile's overflow patterns
    // and windows.
    let profiles = modelshim::provider::load_profiles(None).unwrap();
    let zhipu = &profiles["zhipu"];
    let words = zhipu.errors.context_overflow.iter().map(|p| format!("'{p}'")).collect::<Vec<_>>();
    let windows = zhipu.context_windows.iter().map(|(g, w)| format!("{g:?} = {w}")).collect::<Vec<_>>();
    let profile = format!(
        "[tools]\nformats = {{ \"*\" = [\"hermes\"] }}\n[errors]\ncontext_overflow = [{}]\n[context_windows]\n{}\n",
        words.join(", "),
        windows.join("\n")
    );
    let proxy = proxy_with(&profile, &upstream.uri(), |c| {
        answers_once(c, &extra);
    })
    .await;
    let (base, seen) = relay(proxy.addr).await;
    let mut cmd = claude_print(&claude, &home, &cwd, &base, prompt, "Write Edit Read");
    cmd.args(["--output-format", "json", "--model", "claude-sonnet-4-5"]);
    let out = finished(cmd).await;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let requests = log.lock().unwrap().clone();
    let report = account(&out, &seen, &requests);
    (stdout, requests, report)
}

/// Claude Code reads the window and the prompt's size off the overflow
/// ("prompt is too long: N tokens > M maximum"): GLM's 1261 names neither,
/// the proxy fills in the model's window from the profile.
#[tokio::test(flavor = "multi_thread")]
async fn claude_code_reads_the_window_off_a_vendors_overflow() {
    let (stdout, _, report) = overflowing("Say hello.", 1).await;
    let result: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| panic!("{report}"));
    assert_eq!(result["terminal_reason"], "prompt_too_long", "{report}");
    let text = result["result"].as_str().unwrap_or("");
    assert!(text.contains("202751") && text.contains("202750"), "{report}");
}

/// Claude Code gets a vendor's context overflow as Anthropic's "prompt is
/// too long" and acts on it as on Anthropic's own: it compacts the
/// conversation and goes on. (Claude Code 2.1.332 also compacts on GLM's
/// own words; what it cannot get from them is the window, above.)
#[tokio::test(flavor = "multi_thread")]
async fn claude_code_compacts_on_a_vendors_context_overflow() {
    let (stdout, requests, report) = overflowing("Create notes.txt saying hello.", 2).await;
    let main: Vec<&Value> = requests.iter().filter(|b| b["model"] == "glm-4.7").collect();
    // After the overflow (the second main request) Claude Code asked for a
    // summary, then went on from a conversation that starts with it: it
    // compacted, and finished the task.
    assert!(main.len() >= 4, "{report}");
    let carried = |b: &&Value| {
        let users = b["messages"].as_array().into_iter().flatten().filter(|m| m["role"] == "user");
        users.into_iter().any(|m| m["content"].to_string().contains("The user asked for notes.txt saying hello"))
    };
    assert!(main[3..].iter().any(carried), "{report}");
    let result: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| panic!("{report}"));
    assert_eq!(
        (result["is_error"].as_bool(), result["result"].as_str()),
        (Some(false), Some("Done: notes.txt says hello.")),
        "{report}"
    );
}

/// A 1×1 PNG, the screenshot Claude Code reads.
const SHOT_PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
const SHOT_DESCRIPTION: &str = "A terminal. Visible text: `error[E0308]: mismatched types`.";
const SHOT_ANSWER: &str = "The screenshot shows error E0308, mismatched types.";

/// A text-only main model (DeepSeek's 400 on any image part) that reads the
/// screenshot with Claude Code's Read tool, and `vision-model`, the bridge.
struct TextOnlyReader {
    log: Log,
    shot: PathBuf,
}

impl Respond for TextOnlyReader {
    fn respond(&self, r: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        self.log.lock().unwrap().push(body.clone());
        let msgs = body["messages"].as_array().cloned().unwrap_or_default();
        let image = |m: &Value| m["content"].as_array().is_some_and(|c| c.iter().any(|p| p["type"] != "text"));
        let text = match body["model"].as_str().unwrap_or("") {
            "vision-model" => SHOT_DESCRIPTION.to_string(),
            "coder" if msgs.iter().any(image) => {
                return err400(
                    "Failed to deserialize the JSON body into the target type: messages[2]: unknown variant `image_url`, expected `text`",
                );
            }
            "coder" if body.get("tools").is_some() => {
                if !msgs.iter().any(|m| m["role"] == "tool") {
                    let args = json!({"file_path": self.shot.display().to_string()});
                    format!("<tool_call>\n{}\n</tool_call>", json!({"name": "Read", "arguments": args}))
                } else if body.to_string().contains("mismatched types") {
                    SHOT_ANSWER.to_string()
                } else {
                    "I received no description of the image.".to_string()
                }
            }
            _ => "OK.".to_string(),
        };
        let m = json!({"role": "assistant", "content": text});
        if body["stream"] != true {
            return ResponseTemplate::new(200).set_body_json(completion(m, "stop"));
        }
        let chunks = vec![
            chunk(json!({"role": "assistant", "content": ""}), None),
            chunk(json!({"content": text}), None),
            chunk(json!({}), Some("stop")),
        ];
        ResponseTemplate::new(200).set_body_raw(sse_body(&chunks), "text/event-stream")
    }
}

/// Claude Code reads a screenshot with its Read tool through a text-only
/// model (issue #46): the image is described by the vision bridge, the model
/// gets the description and never the image, and the task finishes.
#[tokio::test(flavor = "multi_thread")]
async fn claude_code_reads_a_screenshot_through_a_text_only_model() {
    let claude = tokio::task::spawn_blocking(claude_env).await.unwrap();
    let (_work, home, cwd) = workdir();
    let shot = cwd.canonicalize().unwrap().join("shot.png");
    let png = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, SHOT_PNG).unwrap();
    std::fs::write(&shot, png).unwrap();
    let upstream = MockServer::start().await;
    let log: Log = Arc::default();
    Mock::given(method("POST"))
        .respond_with(TextOnlyReader { log: log.clone(), shot: shot.clone() })
        .mount(&upstream)
        .await;
    let extra: Config = toml::from_str(&format!(
        "[auth]\nkeys = [\"{KEY}\"]\n[models]\n\"claude-*\" = \"v/coder\"\n\"claude-*haiku*\" = \"v/small\"\n[vision_bridge]\nmodel = \"eyes/vision-model\"\n"
    ))
    .unwrap();
    // `v` cannot see (its profile says so); `eyes`, on the same upstream, can.
    let profile = "[tools]\nformats = { \"*\" = [\"hermes\"] }\n[vision]\ndefault = false\n";
    let proxy = proxy_with(profile, &upstream.uri(), |c| {
        answers_once(c, &extra);
        c.vision_bridge = extra.vision_bridge;
        let mut eyes = c.providers["v"].clone();
        eyes.vision = Some(true);
        c.providers.insert("eyes".into(), eyes);
    })
    .await;
    let (base, seen) = relay(proxy.addr).await;
    let mut cmd =
        claude_print(&claude, &home, &cwd, &base, "Read shot.png and tell me what the error in it says.", "Read");
    cmd.args(["--output-format", "json", "--model", "claude-sonnet-4-5"]);
    let out = finished(cmd).await;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let requests = log.lock().unwrap().clone();
    let report = account(&out, &seen, &requests);
    assert!(out.status.success(), "{report}");
    let result: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| panic!("{report}"));
    assert_eq!(result["result"], SHOT_ANSWER, "{report}");
    // Claude Code sent the image (a tool_result image block) ...
    let sent = requests_in(&seen.lock().unwrap());
    assert!(
        sent.iter().filter_map(|(_, b)| b.as_ref()).any(|b| b.to_string().contains(SHOT_PNG)),
        "Claude Code sent the screenshot: {report}"
    );
    // ... the bridge described it, and the text model got only the description.
    let bridge: Vec<&Value> = requests.iter().filter(|b| b["model"] == "vision-model").collect();
    assert_eq!(bridge.len(), 1, "{report}");
    assert!(bridge[0].to_string().contains(SHOT_PNG), "{report}");
    let coder: Vec<&Value> = requests.iter().filter(|b| b["model"] == "coder").collect();
    assert!(coder.iter().all(|b| !b.to_string().contains("image_url")), "{report}");
    assert!(coder.last().unwrap().to_string().contains(SHOT_DESCRIPTION), "{report}");
}
