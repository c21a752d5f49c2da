//! Server-side tools and the transparent agent loop, against a scripted
//! wiremock upstream (a "brain" that answers each request from what is in
//! its history), streamed and not. MCP tests run the real reference server
//! `@modelcontextprotocol/server-everything` (pinned, installed on first run).

use crate::common;
use crate::support::mcp_everything;
use crate::support::pyenv;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use modelshim::config::Config;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn calls(content: &str, list: &[(&str, &str, Value)]) -> Value {
    let calls: Vec<Value> = list
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    json!({"content": content, "tool_calls": calls})
}

/// The contents of the tool messages of an upstream request.
fn tool_results(req: &Value) -> Vec<String> {
    req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn last_user(req: &Value) -> String {
    let m = req["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "user").unwrap();
    m["content"].as_str().unwrap_or_default().to_string()
}

struct Setup {
    upstream: MockServer,
    proxy: Proxy,
    log: Log,
}

impl Setup {
    fn requests(&self) -> Vec<Value> {
        self.log.lock().unwrap().clone()
    }
    fn clear(&self) {
        self.log.lock().unwrap().clear();
    }
}

async fn setup(profile: &str, config: &str, brain: impl Fn(&Value) -> Value + Send + Sync + 'static) -> Setup {
    let upstream = MockServer::start().await;
    let log: Log = Arc::default();
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Script { brain: Arc::new(brain), log: log.clone() })
        .mount(&upstream)
        .await;
    let parsed: Config = toml::from_str(config).expect("test config parses");
    let proxy = proxy_with(profile, &upstream.uri(), |c| {
        c.tools = parsed.tools;
        c.mcp = parsed.mcp;
    })
    .await;
    Setup { upstream, proxy, log }
}

fn ask(q: &str) -> Value {
    json!({"model": "v/m", "messages": [{"role": "user", "content": q}]})
}

/// POSTs with extra headers; returns status and the raw body.
async fn post(p: &Proxy, body: &Value, headers: &[(&str, &str)]) -> (u16, String) {
    let mut rb = p.http.post(p.url("/v1/chat/completions")).json(body);
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let r = rb.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The client's view, streamed and not (both must agree; returned once).
async fn both(p: &Proxy, req: &Value) -> Value {
    let mut s = req.clone();
    s["stream"] = json!(true);
    let (st, text) = post(p, &s, &[]).await;
    assert_eq!(st, 200, "{text}");
    assert!(!text.contains("tool_trace"), "no trace without the header: {text}");
    let events = parse_sse(&text);
    assert_eq!(events.last(), Some(&json!("[DONE]")));
    let streamed = assemble(&events);
    let (st, text) = post(p, req, &[]).await;
    assert_eq!(st, 200, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert!(body.get("modelshim_trace").is_none());
    let whole = message_view(&body);
    assert_eq!(streamed, whole, "streamed and non-streamed views agree");
    whole
}

fn mcp_config() -> String {
    let script = mcp_everything::script();
    format!("[mcp.servers.everything]\ncommand = \"node\"\nargs = [{:?}]\n", script.display().to_string())
}

#[tokio::test]
async fn builtin_call_is_run_and_hidden_then_spliced_next_turn() {
    // `m` is a model the profile knows, so the metrics name it.
    let s = setup("models = [\"m\"]", "[tools]\nbuiltin = [\"current_time\"]\n", |req| {
        if last_user(req) == "thanks" {
            return say("You're welcome.");
        }
        match tool_results(req).first() {
            None => calls("Let me look.", &[("call_t1", "current_time", json!({}))]),
            Some(r) => say(&format!("Got it: {}", r.contains("datetime"))),
        }
    })
    .await;
    let view = both(&s.proxy, &ask("what time is it?")).await;
    assert_eq!(view["content"], "Let me look.\n\nGot it: true");
    assert_eq!(view["calls"], json!([]));
    assert_eq!(view["finish"], "stop");
    assert_eq!(view["usage"]["total_tokens"], 4, "usage summed over both iterations");
    let reqs = s.requests();
    assert_eq!(reqs.len(), 4);
    let offered: Vec<&str> =
        reqs[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(offered, ["current_time"]);

    // Next turn: the client sends back only what it saw; the upstream gets
    // the hidden exchange back in place.
    s.clear();
    let next = json!({"model": "v/m", "messages": [
        {"role": "user", "content": "what time is it?"},
        {"role": "assistant", "content": view["content"]},
        {"role": "user", "content": "thanks"}]});
    let (st, body) = s.proxy.chat(next).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "You're welcome.");
    let up = &s.requests()[0];
    let roles: Vec<&str> = up["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant", "user"]);
    assert_eq!(up["messages"][1]["tool_calls"][0]["function"]["name"], "current_time");
    assert_eq!(up["messages"][1]["content"], "Let me look.");
    assert_eq!(up["messages"][3]["content"], "Got it: true");
    // Requests served by the loop are counted under their provider and model.
    let m = s.proxy.http.get(s.proxy.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let counted = |l: &str| l.starts_with("modelshim_requests_total{") && l.contains("provider=\"v\",");
    assert!(m.lines().any(|l| counted(l) && l.contains("model=\"m\"")), "{m}");
}

#[tokio::test]
async fn text_embedded_server_call_counts_like_a_native_one() {
    let s = setup("", "[tools]\nbuiltin = [\"current_time\"]\n", |req| match tool_results(req).first() {
        None => say("<tool_call>\n{\"name\": \"current_time\", \"arguments\": {}}\n</tool_call>"),
        Some(r) => say(&format!("Time known: {}", r.contains("unix"))),
    })
    .await;
    let view = both(&s.proxy, &ask("time?")).await;
    assert_eq!(view["content"], "Time known: true");
    assert_eq!(view["calls"], json!([]));
    assert_eq!(view["finish"], "stop");
}

#[tokio::test]
async fn mixed_turn_returns_client_calls_and_splices_server_calls_back() {
    let s = setup("", "[tools]\nbuiltin = [\"current_time\"]\n", |req| {
        if tool_results(req).is_empty() {
            calls(
                "Checking.",
                &[("call_s1", "current_time", json!({})), ("call_c1", "get_weather", json!({"city": "Paris"}))],
            )
        } else {
            say("Sunny, and I know the time.")
        }
    })
    .await;
    let mut req = ask("weather and time?");
    req["tools"] = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let view = both(&s.proxy, &req).await;
    assert_eq!(view["content"], "Checking.");
    assert_eq!(view["calls"], json!([{"id": "call_c1", "name": "get_weather", "arguments": {"city": "Paris"}}]));
    assert_eq!(view["finish"], "tool_calls");
    assert_eq!(s.requests().len(), 2, "one upstream call per run: the client answers next");

    s.clear();
    let mut next = req.clone();
    next["messages"] = json!([
        {"role": "user", "content": "weather and time?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "call_c1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_c1", "content": "sunny"}]);
    let view = both(&s.proxy, &next).await;
    assert_eq!(view["content"], "Sunny, and I know the time.");
    for up in s.requests() {
        let m = up["messages"].as_array().unwrap();
        let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool"], "{up}");
        let ids: Vec<&str> = m[1]["tool_calls"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["call_s1", "call_c1"]);
        assert_eq!(m[2]["tool_call_id"], "call_s1");
        assert!(m[2]["content"].as_str().unwrap().contains("datetime"));
        assert_eq!(m[3]["tool_call_id"], "call_c1");
        assert_eq!(m[3]["content"], "sunny");
    }
}

#[tokio::test]
async fn unknown_names_never_run_and_client_tools_shadow_server_tools() {
    let s = setup("", "[tools]\nbuiltin = [\"current_time\"]\n", |_| {
        calls("", &[("call_a", "current_time", json!({})), ("call_b", "rm_rf", json!({"path": "/"}))])
    })
    .await;
    let mut req = ask("time?");
    req["tools"] = json!([{"type": "function", "function": {"name": "current_time", "description": "the client's own",
        "parameters": {"type": "object", "properties": {}}}}]);
    let view = both(&s.proxy, &req).await;
    let names: Vec<&str> = view["calls"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["current_time", "rm_rf"], "both go back to the client; nothing ran");
    let reqs = s.requests();
    assert_eq!(reqs.len(), 2, "no second iteration: no server tool ran");
    let tools = reqs[0]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["function"]["description"], "the client's own");
}

#[tokio::test]
async fn schema_invalid_call_gets_the_errors_as_its_result_and_trace() {
    let s = setup("", "[tools]\nbuiltin = [\"current_time\"]\n", |req| match tool_results(req).first() {
        None => calls("", &[("call_x", "current_time", json!({"utc_offset": 5}))]),
        Some(r) => say(r),
    })
    .await;
    let view = both(&s.proxy, &ask("time?")).await;
    let result = view["content"].as_str().unwrap();
    assert!(result.starts_with("Error: Invalid arguments for `current_time`"), "{result}");
    assert!(result.contains("/utc_offset"), "{result}");
    let (st, text) = post(&s.proxy, &ask("time?"), &[("x-modelshim-trace", "comments")]).await;
    assert_eq!(st, 200);
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["modelshim_trace"][0]["status"], "invalid_arguments", "{body}");
}

#[tokio::test]
async fn slow_tool_times_out_while_others_in_the_batch_finish() {
    let web = MockServer::start().await;
    Mock::given(path("/slow"))
        .respond_with(ResponseTemplate::new(200).set_body_string("late").set_delay(Duration::from_secs(5)))
        .mount(&web)
        .await;
    Mock::given(path("/ok")).respond_with(ResponseTemplate::new(200).set_body_string("hello")).mount(&web).await;
    let (slow, ok) = (format!("{}/slow", web.uri()), format!("{}/ok", web.uri()));
    let config = "[tools]\nbuiltin = [\"http_fetch\"]\ntimeout_secs = 1\n[tools.http_fetch]\nallow_private = true\n";
    let s = setup("", config, move |req| {
        let r = tool_results(req);
        if r.is_empty() {
            calls("", &[("call_1", "http_fetch", json!({"url": slow})), ("call_2", "http_fetch", json!({"url": ok}))])
        } else {
            say(&r.join(" | "))
        }
    })
    .await;
    let start = Instant::now();
    let view = both(&s.proxy, &ask("fetch")).await;
    assert!(start.elapsed() < Duration::from_secs(8), "both runs took {:?}", start.elapsed());
    let text = view["content"].as_str().unwrap();
    assert!(text.contains("did not finish within 1.0s"), "{text}");
    assert!(text.contains("HTTP 200") && text.contains("hello"), "{text}");
}

#[tokio::test]
async fn iteration_cap_ends_the_loop_with_a_clear_message() {
    let config = "[tools]\nbuiltin = [\"current_time\"]\nmax_iterations = 2\n";
    let s = setup("", config, |_| calls("Again.", &[("call_r", "current_time", json!({}))])).await;
    let view = both(&s.proxy, &ask("loop")).await;
    let text = view["content"].as_str().unwrap();
    assert!(text.starts_with("Again.\n\nAgain.\n\n[modelshim] Stopped:"), "{text}");
    assert!(text.contains("max_iterations = 2"), "{text}");
    assert_eq!(view["finish"], "length");
    assert_eq!(view["calls"], json!([]));
    assert_eq!(s.requests().len(), 4, "two upstream calls per run");
}

#[tokio::test]
async fn deadline_ends_the_loop_with_a_clear_message() {
    let web = MockServer::start().await;
    Mock::given(path("/slow"))
        .respond_with(ResponseTemplate::new(200).set_body_string("late").set_delay(Duration::from_secs(5)))
        .mount(&web)
        .await;
    let slow = format!("{}/slow", web.uri());
    let config = "[tools]\nbuiltin = [\"http_fetch\"]\ndeadline_secs = 1\n[tools.http_fetch]\nallow_private = true\n";
    let s = setup("", config, move |_| calls("", &[("call_1", "http_fetch", json!({"url": slow}))])).await;
    let start = Instant::now();
    let view = both(&s.proxy, &ask("fetch")).await;
    assert!(start.elapsed() < Duration::from_secs(8), "the 5 s fetch was cut at the deadline");
    assert!(view["content"].as_str().unwrap().contains("ran out of its time budget (1s)"), "{view}");
    assert_eq!(view["finish"], "length");
}

#[tokio::test]
async fn trace_is_opt_in_as_comments_events_or_a_field() {
    let s = setup("", "[tools]\nbuiltin = [\"current_time\"]\n", |req| match tool_results(req).first() {
        None => calls("", &[("call_t", "current_time", json!({}))]),
        Some(_) => say("ok"),
    })
    .await;
    let mut sreq = ask("time?");
    sreq["stream"] = json!(true);
    let (_, text) = post(&s.proxy, &sreq, &[("x-modelshim-trace", "comments")]).await;
    let line = text.lines().find(|l| l.starts_with(": tool_trace ")).unwrap_or_else(|| panic!("{text}"));
    let entry: Value = serde_json::from_str(line.trim_start_matches(": tool_trace ")).unwrap();
    assert_eq!(entry["tool"], "current_time");
    assert_eq!(entry["status"], "ok");
    assert!(entry["result"].as_str().unwrap().contains("datetime"));
    assert!(entry["duration_ms"].is_u64());
    assert_eq!(assemble(&parse_sse(&text))["content"], "ok");

    let (_, text) = post(&s.proxy, &sreq, &[("x-modelshim-trace", "events")]).await;
    assert!(text.contains("event: tool_trace\ndata: {"), "{text}");

    let (_, text) = post(&s.proxy, &ask("time?"), &[("x-modelshim-trace", "comments")]).await;
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["modelshim_trace"][0]["tool"], "current_time");
    assert_eq!(body["choices"][0]["message"]["content"], "ok");
}

#[tokio::test]
async fn mcp_stdio_tool_is_called_through_a_real_server() {
    let s = setup("", &mcp_config(), |req| match tool_results(req).first() {
        None => calls("", &[("call_e", "everything__echo", json!({"message": "hi there"}))]),
        Some(r) => say(r),
    })
    .await;
    let view = both(&s.proxy, &ask("echo")).await;
    assert_eq!(view["content"], "Echo: hi there");
    let offered: Vec<String> = s.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(offered.contains(&"everything__get-sum".to_string()), "{offered:?}");
    assert!(
        offered.iter().all(|n| n.len() <= 64 && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
    );
}

#[tokio::test]
async fn mcp_server_that_dies_is_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let sh = format!("echo $$ > {}; exec node {}", pidfile.display(), mcp_everything::script().display());
    let config = format!("[mcp.servers.everything]\ncommand = \"sh\"\nargs = [\"-c\", {sh:?}]\n");
    let s = setup("", &config, |req| match tool_results(req).first() {
        None => calls("", &[("call_e", "everything__echo", json!({"message": "again"}))]),
        Some(r) => say(r),
    })
    .await;
    let (st, body) = s.proxy.chat(ask("echo")).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Echo: again");
    let first = std::fs::read_to_string(&pidfile).unwrap().trim().to_string();
    std::process::Command::new("kill").args(["-9", &first]).status().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (st, body) = s.proxy.chat(ask("echo")).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Echo: again", "the call after the crash works");
    let second = std::fs::read_to_string(&pidfile).unwrap().trim().to_string();
    assert_ne!(first, second, "a new server process was started");
}

#[tokio::test]
async fn mcp_tool_list_changes_are_picked_up() {
    let script = mcp_everything::dynamic_script();
    let config = format!("[mcp.servers.dyn]\ncommand = \"node\"\nargs = [{:?}]\n", script.display().to_string());
    let s = setup("", &config, |req| {
        if last_user(req) == "add" && tool_results(req).is_empty() {
            calls("", &[("call_a", "dyn__add_tool", json!({}))])
        } else {
            say("ok")
        }
    })
    .await;
    let offered = |req: &Value| -> Vec<String> {
        req["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap().to_string()).collect()
    };
    let (st, body) = s.proxy.chat(ask("add")).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(offered(&s.requests()[0]), ["dyn__add_tool"]);
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        s.clear();
        let (st, _) = s.proxy.chat(ask("list")).await;
        assert_eq!(st, 200);
        if offered(&s.requests()[0]).contains(&"dyn__second".to_string()) {
            break;
        }
        assert!(Instant::now() < until, "the new tool was never offered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Kills the child when dropped.
struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// server-everything over Streamable HTTP on `port`, once it accepts. A
/// server that exits at start (the port held a moment by another test's
/// socket) is started again, within one bounded wait.
async fn http_everything(port: u16) -> Child {
    let log = tempfile::NamedTempFile::new().unwrap();
    // Node's start takes seconds on a loaded 2-core machine.
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let mut child = Child(
            std::process::Command::new("node")
                .arg(mcp_everything::script())
                .arg("streamableHttp")
                .env("PORT", port.to_string())
                .stdout(std::process::Stdio::null())
                .stderr(log.reopen().unwrap())
                .spawn()
                .unwrap(),
        );
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return child;
            }
            let exited = child.0.try_wait().unwrap().is_some();
            assert!(
                Instant::now() < until,
                "the MCP HTTP server did not start: {}",
                std::fs::read_to_string(log.path()).unwrap_or_default()
            );
            if exited {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test]
async fn mcp_streamable_http_tool_is_called_through_a_real_server() {
    let port = free_port();
    let _server = http_everything(port).await;
    let config = format!("[mcp.servers.remote]\nurl = \"http://127.0.0.1:{port}/mcp\"\n");
    let s = setup("", &config, |req| match tool_results(req).first() {
        None => calls("", &[("call_h", "remote__echo", json!({"message": "over http"}))]),
        Some(r) => say(r),
    })
    .await;
    let view = both(&s.proxy, &ask("echo")).await;
    assert_eq!(view["content"], "Echo: over http");
}

#[tokio::test]
async fn image_results_go_to_the_model_as_a_user_image_when_it_has_vision() {
    let brain = |req: &Value| match tool_results(req).first() {
        None => calls("", &[("call_i", "everything__get-tiny-image", json!({}))]),
        Some(_) => say("I see it."),
    };
    let s = setup("[tools]\nvision = true\n", &mcp_config(), brain).await;
    let view = both(&s.proxy, &ask("image")).await;
    assert_eq!(view["content"], "I see it.");
    let up = &s.requests()[1];
    let m = up["messages"].as_array().unwrap();
    let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "user"]);
    assert!(m[2]["content"].as_str().unwrap().contains("attached in the next user message"), "{}", m[2]);
    let parts = m[3]["content"].as_array().unwrap();
    let url = parts.iter().find(|p| p["type"] == "image_url").unwrap()["image_url"]["url"].as_str().unwrap();
    assert!(url.starts_with("data:image/png;base64,iVBOR"), "{url}");

    // Without vision the image is described, not sent.
    let s = setup("", &mcp_config(), brain).await;
    both(&s.proxy, &ask("image")).await;
    let up = &s.requests()[1];
    let m = up["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3);
    assert!(m[2]["content"].as_str().unwrap().contains("omitted: this model does not take images"), "{}", m[2]);
}

#[tokio::test]
async fn skill_tools_run_sequential_parallel_and_routing() {
    let config = format!(
        r#"
[tools]
builtin = ["current_time", "http_fetch"]

[tools.skill.seq]
description = "Echo, then the time, then a fetch"
mode = "sequential"
tools = ["everything__echo", "current_time", "http_fetch"]
parameters = {{ type = "object", properties = {{ message = {{ type = "string" }}, url = {{ type = "string" }} }}, required = ["message"] }}

[tools.skill.par]
description = "Sum and echo at once"
mode = "parallel"
tools = ["everything__get-sum", "everything__echo"]
parameters = {{ type = "object", properties = {{ a = {{ type = "number" }}, b = {{ type = "number" }}, message = {{ type = "string" }} }} }}

[tools.skill.pick]
description = "Sum or echo, by op"
mode = "routing"
route = {{ arg = "op", cases = {{ sum = ["everything__get-sum"], echo = ["everything__echo"] }} }}
parameters = {{ type = "object", properties = {{ op = {{ type = "string" }}, a = {{ type = "number" }}, b = {{ type = "number" }}, message = {{ type = "string" }} }}, required = ["op"] }}

{}"#,
        mcp_config()
    );
    let s = setup("", &config, |req| {
        let r = tool_results(req);
        if r.is_empty() {
            calls(
                "",
                &[
                    ("call_1", "seq", json!({"message": "hi", "url": "http://127.0.0.1:9/"})),
                    ("call_2", "par", json!({"a": 1, "b": 2, "message": "yo"})),
                    ("call_3", "pick", json!({"op": "sum", "a": 20, "b": 22, "message": "unused"})),
                    ("call_4", "pick", json!({"op": "nope"})),
                ],
            )
        } else {
            // The time changes between the streamed and the whole run.
            let stable: Vec<String> = r
                .iter()
                .map(|x| {
                    let lines = x.lines().map(|l| if l.starts_with("{\"datetime\"") { "<time>" } else { l });
                    lines.collect::<Vec<_>>().join("\n")
                })
                .collect();
            say(&serde_json::to_string(&stable).unwrap())
        }
    })
    .await;
    let view = both(&s.proxy, &ask("skills")).await;
    let r: Vec<String> = serde_json::from_str(view["content"].as_str().unwrap()).unwrap();
    let pos = |s: &str, what: &str| s.find(what).unwrap_or_else(|| panic!("{what:?} not in {s}"));
    // sequential: each tool's outcome in order, a failure does not stop the rest
    let (e, t, f) = (
        pos(&r[0], "[everything__echo] succeeded:"),
        pos(&r[0], "[current_time] succeeded:"),
        pos(&r[0], "[http_fetch] failed (error):"),
    );
    assert!(e < t && t < f, "{}", r[0]);
    assert!(r[0].contains("Echo: hi") && r[0].contains("<time>") && r[0].contains("non-public"), "{}", r[0]);
    // parallel: declared order
    assert!(pos(&r[1], "[everything__get-sum] succeeded:") < pos(&r[1], "[everything__echo] succeeded:"), "{}", r[1]);
    assert!(r[1].contains('3') && r[1].contains("Echo: yo"), "{}", r[1]);
    // routing
    assert!(
        r[2].contains("[everything__get-sum] succeeded:") && r[2].contains("42") && !r[2].contains("Echo"),
        "{}",
        r[2]
    );
    assert!(r[3].starts_with("Error: no route for op=\"nope\""), "{}", r[3]);
    let offered: Vec<String> = s.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    for name in ["seq", "par", "pick", "current_time", "http_fetch"] {
        assert!(offered.contains(&name.to_string()), "{name} offered: {offered:?}");
    }
    drop(s.upstream);
}

#[test]
fn check_lists_mcp_servers_and_fails_for_one_that_cannot_start() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, mcp_config()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_modelshim"))
        .args(["check", "--config"])
        .arg(&good)
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("ok   mcp server everything"), "{text}");
    assert!(text.contains("everything__echo"), "{text}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, format!("{}\n[mcp.servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n", mcp_config()))
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_modelshim"))
        .args(["check", "--config"])
        .arg(&bad)
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("FAIL mcp server broken"), "{text}");
    assert!(text.contains("could not start"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn official_python_sdk_sees_nothing_unusual_and_trace_when_asked() {
    let py = tokio::task::spawn_blocking(pyenv::python_env).await.unwrap();
    let s = setup("", "[tools]\nbuiltin = [\"current_time\"]\n", |req| match tool_results(req).first() {
        None => calls("Let me look.", &[("call_t1", "current_time", json!({}))]),
        Some(r) => say(&format!("Got it: {}", r.contains("datetime"))),
    })
    .await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/tools_trace.py");
    let base = s.proxy.url("/v1");
    let out = tokio::task::spawn_blocking(move || {
        pyenv::run(std::process::Command::new(py).arg(script).env("MODELSHIM_BASE_URL", base))
    })
    .await
    .unwrap();
    match out {
        Ok(text) => println!("{text}"),
        Err(text) => panic!("python SDK check failed:\n{text}"),
    }
}

/// Issue 25, item 2: key B sending a conversation that looks like key A's
/// (same question, same "Done.") gets none of A's hidden tool exchange;
/// A's own next turn still does.
#[tokio::test]
async fn a_hidden_exchange_never_reaches_another_key() {
    let upstream = MockServer::start().await;
    let log: Log = Arc::default();
    let brain = |req: &Value| {
        if last_user(req) != "Summarize my notes." {
            return say("Sure.");
        }
        match tool_results(req).first() {
            None => calls("", &[("call_a1", "current_time", json!({}))]),
            Some(_) => say("Done."),
        }
    };
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Script { brain: Arc::new(brain), log: log.clone() })
        .mount(&upstream)
        .await;
    let parsed: Config = toml::from_str("[tools]\nbuiltin = [\"current_time\"]\n").unwrap();
    let p = proxy_with("", &upstream.uri(), |c| {
        c.tools = parsed.tools;
        c.auth = Some(
            toml::from_str(
                r#"keys = [{ key = "sk-team-a-0001", name = "a" }, { key = "sk-team-b-0002", name = "b" }]"#,
            )
            .unwrap(),
        );
    })
    .await;
    let send = |key: &'static str, body: Value| {
        let p = &p;
        async move {
            let r = p.http.post(p.url("/v1/chat/completions")).bearer_auth(key).json(&body).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let first = send("sk-team-a-0001", ask("Summarize my notes.")).await;
    assert_eq!(first["choices"][0]["message"]["content"], "Done.");
    let next = json!({"model": "v/m", "messages": [
        {"role": "user", "content": "Summarize my notes."},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "And now?"}]});
    let hidden_in = |req: &Value| req["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool");
    log.lock().unwrap().clear();
    send("sk-team-b-0002", next.clone()).await;
    assert!(!hidden_in(&log.lock().unwrap()[0]), "B got A's hidden exchange: {}", log.lock().unwrap()[0]);
    log.lock().unwrap().clear();
    let mut other_system = next.clone();
    other_system["messages"].as_array_mut().unwrap().insert(0, json!({"role": "system", "content": "Another app."}));
    send("sk-team-a-0001", other_system).await;
    assert!(!hidden_in(&log.lock().unwrap()[0]), "another conversation of A's matched");
    log.lock().unwrap().clear();
    send("sk-team-a-0001", next).await;
    assert!(hidden_in(&log.lock().unwrap()[0]), "A's own next turn gets its exchange back");
}

/// Issue 26, item 2: a call the server may have received is not sent again
/// when the server dies during it (a tool that writes would run twice); its
/// result says so, and the next call reconnects.
#[tokio::test]
async fn a_call_whose_server_died_during_it_is_not_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let sh = format!("echo $$ > {}; exec node {}", pidfile.display(), mcp_everything::script().display());
    let config = format!("[mcp.servers.everything]\ncommand = \"sh\"\nargs = [\"-c\", {sh:?}]\n");
    let s = setup("", &config, |req| match (last_user(req).as_str(), tool_results(req).first()) {
        (_, Some(r)) => say(r),
        ("slow", None) => calls(
            "",
            &[("call_slow", "everything__trigger-long-running-operation", json!({"duration": 4, "steps": 4}))],
        ),
        _ => calls("", &[("call_e", "everything__echo", json!({"message": "up"}))]),
    })
    .await;
    assert_eq!(s.proxy.chat(ask("warm up")).await.1["choices"][0]["message"]["content"], "Echo: up");
    let first = std::fs::read_to_string(&pidfile).unwrap().trim().to_string();
    let killer = {
        let first = first.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1000)).await;
            std::process::Command::new("kill").args(["-9", &first]).status().unwrap();
        })
    };
    let (st, body) = s.proxy.chat(ask("slow")).await;
    killer.await.unwrap();
    assert_eq!(st, 200, "{body}");
    let text = body["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    assert!(text.contains("stopped during this call") && text.contains("not sent again"), "{text}");
    let now = std::fs::read_to_string(&pidfile).unwrap().trim().to_string();
    assert_eq!(now, first, "no new server was started to send the call again");
    assert_eq!(s.proxy.chat(ask("again")).await.1["choices"][0]["message"]["content"], "Echo: up", "reconnects");
    assert_ne!(std::fs::read_to_string(&pidfile).unwrap().trim(), first);
}

/// Issue 26, item 1: a Streamable HTTP server that restarted answers our
/// stale session id with a 400 (server-everything) rather than the spec's
/// 404; the next call starts a new session and goes through at once instead
/// of waiting out its timeout.
#[tokio::test]
async fn a_restarted_streamable_http_server_gets_a_new_session() {
    let port = free_port();
    let server = http_everything(port).await;
    let config = format!("[mcp.servers.remote]\nurl = \"http://127.0.0.1:{port}/mcp\"\ntimeout_secs = 8\n");
    let s = setup("", &config, |req| match tool_results(req).first() {
        None => calls("", &[("call_h", "remote__echo", json!({"message": last_user(req)}))]),
        Some(r) => say(r),
    })
    .await;
    assert_eq!(s.proxy.chat(ask("before")).await.1["choices"][0]["message"]["content"], "Echo: before");
    drop(server);
    let _server = http_everything(port).await;
    let (st, body) = s.proxy.chat(ask("after")).await;
    assert_eq!(st, 200, "{body}");
    // Before, the call waited out its timeout and its result said so.
    assert_eq!(body["choices"][0]["message"]["content"], "Echo: after", "{body}");
}

/// Whether a process runs (a zombie waiting to be reaped does not).
#[cfg(target_os = "linux")]
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
        .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

/// Whether a process that was sent SIGKILL still runs two seconds on.
#[cfg(target_os = "linux")]
fn still_running(pid: &str) -> bool {
    let start = Instant::now();
    while alive(pid) {
        if start.elapsed() > Duration::from_secs(2) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A stdio MCP server of the real binary sees none of the proxy's keys —
/// not in its environment, not through `/proc/$PPID/environ` (the proxy is
/// non-dumpable and its children cannot hold the capabilities that bypass
/// that, even as root) — and it and what it started end with the proxy.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn mcp_servers_get_no_keys_and_end_with_the_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let f = |n: &str| dir.path().join(n).display().to_string();
    let sh = format!(
        "env > {env}; cat /proc/$PPID/environ > {environ} 2>&1; sleep 300 & echo $! > {bg}; echo $$ > {pid}; exec node {script}",
        env = f("env"),
        environ = f("environ"),
        bg = f("bg"),
        pid = f("pid"),
        script = mcp_everything::script().display()
    );
    let config = format!(
        "[providers.v]\nprofile = \"vllm\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         [mcp.servers.everything]\ncommand = \"sh\"\nargs = [\"-c\", {sh:?}]\nenv = {{ GIVEN = \"by-config\" }}\n"
    );
    let secrets = [("FAKE_PROVIDER_API_KEY", "sk-fake-provider-secret"), ("MODELSHIM_KEYS", "msk-fake-proxy-key")];
    let mut p = serve_process(&config, &secrets).await;
    let read = |n: &str| std::fs::read_to_string(dir.path().join(n)).unwrap_or_default();
    let t = Instant::now();
    while read("pid").trim().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(30), "the MCP server did not start: {}", p.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (env, environ) = (read("env"), read("environ"));
    assert!(env.contains("PATH=") && env.contains("GIVEN=by-config"), "{env}");
    for (name, value) in secrets {
        assert!(!env.contains(name) && !env.contains(value), "{name} in the server's environment:\n{env}");
        assert!(!environ.contains(value), "{name} read from /proc/$PPID/environ:\n{environ}");
    }
    assert!(environ.contains("Permission denied"), "{environ}");
    let (pid, bg) = (read("pid"), read("bg"));
    assert!(alive(&pid) && alive(&bg));
    assert!(p.terminate().success(), "{}", p.log());
    assert!(!still_running(&pid), "the MCP server outlived the proxy");
    assert!(!still_running(&bg), "a process the MCP server started outlived the proxy");
}

/// With `HTTP_PROXY` in the proxy's environment, `http_fetch` still connects
/// only to the address it checked, never handing the host name to that
/// proxy (which would resolve it again).
#[tokio::test]
async fn http_fetch_ignores_proxies_from_the_environment() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The page, on loopback (allowed by allow_private), and a "proxy" that counts connections.
    let target = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target_port = target.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = target.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = c.read(&mut buf).await;
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nHELLO").await;
            });
        }
    });
    let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = proxy.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\nPROXIED").await;
        }
    });
    let upstream = MockServer::start().await;
    let log: Log = Arc::default();
    let url = format!("http://localhost:{target_port}/page");
    let brain = move |req: &Value| match tool_results(req).first() {
        None => calls("", &[("call_f", "http_fetch", json!({"url": url.clone()}))]),
        Some(r) => say(r),
    };
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Script { brain: Arc::new(brain), log: log.clone() })
        .mount(&upstream)
        .await;
    let config = format!(
        "[providers.v]\nprofile = \"vllm\"\nbase_url = \"{}/v1\"\n\
         [tools]\nbuiltin = [\"http_fetch\"]\n[tools.http_fetch]\nallow_private = true\n",
        upstream.uri()
    );
    // The upstream (127.0.0.1) is exempt; the fetched host name is not.
    let env = [
        ("HTTP_PROXY", proxy_url.as_str()),
        ("http_proxy", proxy_url.as_str()),
        ("ALL_PROXY", proxy_url.as_str()),
        ("NO_PROXY", "127.0.0.1"),
    ];
    let p = serve_process(&config, &env).await;
    let (st, body) = p.proxy.chat(ask("fetch it")).await;
    assert_eq!(st, 200, "{body}\n{}", p.log());
    let text = body["choices"][0]["message"]["content"].as_str().unwrap_or_default();
    assert!(text.contains("HELLO") && !text.contains("PROXIED"), "{text}");
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 0, "http_fetch went through the proxy");
}

/// Issue 26, item 4: MCP 2026-07-28's stateless start (`server/discover`, no
/// `initialize`), through rmcp's lifecycle modes. `auto` falls back to the
/// handshake with a server from before it (server-everything on SDK 1.x);
/// `discover` alone says plainly that such a server cannot be used.
#[tokio::test]
async fn mcp_lifecycle_auto_falls_back_and_discover_says_why() {
    let script = mcp_everything::script();
    let server = |lifecycle: &str| {
        format!(
            "[mcp.servers.everything]\ncommand = \"node\"\nargs = [{:?}]\nlifecycle = \"{lifecycle}\"\nstartup_timeout_secs = 20\n",
            script.display().to_string()
        )
    };
    let s = setup("", &server("auto"), |req| match tool_results(req).first() {
        None => calls("", &[("call_a", "everything__echo", json!({"message": "auto"}))]),
        Some(r) => say(r),
    })
    .await;
    assert_eq!(s.proxy.chat(ask("echo")).await.1["choices"][0]["message"]["content"], "Echo: auto");
    let s = setup("", &server("discover"), |req| match tool_results(req).first() {
        None => calls("", &[("call_d", "everything__echo", json!({"message": "discover"}))]),
        Some(r) => say(r),
    })
    .await;
    let (_, body) = s.proxy.chat(ask("echo")).await;
    let text = body.to_string();
    assert!(!text.contains("Echo: discover"), "a legacy server did not start in discover mode: {text}");
}

/// Issue 26, item 3, against the real server-filesystem: its text block is
/// the file and its structured content `{"content": …}` says the same, so the
/// model gets the file once (it got it twice).
#[tokio::test]
async fn server_filesystem_returns_a_file_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("notes.txt"), "alpha beta gamma").unwrap();
    let file = root.join("notes.txt").display().to_string();
    let config = format!(
        "[mcp.servers.fs]\ncommand = \"node\"\nargs = [{:?}, {:?}]\n",
        mcp_everything::filesystem_script().display().to_string(),
        root.display().to_string()
    );
    let s = setup("", &config, move |req| match tool_results(req).first() {
        None => calls("", &[("call_fs", "fs__read_text_file", json!({"path": file.clone()}))]),
        Some(r) => say(r),
    })
    .await;
    let (st, body) = s.proxy.chat(ask("read it")).await;
    assert_eq!(st, 200, "{body}");
    let text = body["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    assert_eq!(text.matches("alpha beta gamma").count(), 1, "{text}");
}
