//! Agent Skills through the proxy, against a scripted wiremock upstream (a
//! "brain" that answers each request from what is in its history): the
//! skills section and `read_skill` on the first request, per-skill tools
//! offered only after the skill was read (also on a later turn, through the
//! splice), overrides, path safety, reports of bad skills, hot reload,
//! scripts, `modelshim skills` / `check`, and the bundled demo.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use modelshim::config::Config;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

fn calls(list: &[(&str, &str, Value)]) -> Value {
    let calls: Vec<Value> = list
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    json!({"content": null, "tool_calls": calls})
}

fn tool_results(req: &Value) -> Vec<String> {
    let msgs = req["messages"].as_array().unwrap();
    msgs.iter().filter(|m| m["role"] == "tool").map(|m| m["content"].as_str().unwrap_or_default().to_string()).collect()
}

fn last_user(req: &Value) -> String {
    let m = req["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "user").unwrap();
    m["content"].as_str().unwrap_or_default().to_string()
}

fn system(req: &Value) -> String {
    let first = &req["messages"][0];
    if first["role"] == "system" { first["content"].as_str().unwrap_or_default().to_string() } else { String::new() }
}

fn offered(req: &Value) -> Vec<String> {
    let tools = req["tools"].as_array().cloned().unwrap_or_default();
    let mut names: Vec<String> = tools.iter().map(|t| t["function"]["name"].as_str().unwrap().to_string()).collect();
    names.sort();
    names
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn skill_md(name: &str, description: &str, extra: &str, body: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n{extra}---\n{body}\n")
}

/// A user-level and a project-level skills folder.
struct Dirs {
    user: tempfile::TempDir,
    project: tempfile::TempDir,
}

impl Dirs {
    fn new() -> Self {
        Dirs { user: tempfile::tempdir().unwrap(), project: tempfile::tempdir().unwrap() }
    }
    fn skills_toml(&self, extra: &str) -> String {
        format!(
            "[skills]\ndirs = [{:?}, {:?}]\n{extra}\n",
            self.user.path().display().to_string(),
            self.project.path().display().to_string()
        )
    }
}

struct Setup {
    _upstream: MockServer,
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

async fn setup(config: &str, brain: impl Fn(&Value) -> Value + Send + Sync + 'static) -> Setup {
    let upstream = MockServer::start().await;
    let log: Log = Arc::default();
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Script { brain: Arc::new(brain), log: log.clone() })
        .mount(&upstream)
        .await;
    let parsed: Config = toml::from_str(config).expect("test config parses");
    let proxy = proxy_with("", &upstream.uri(), |c| {
        c.tools = parsed.tools;
        c.mcp = parsed.mcp;
        c.skills = parsed.skills;
    })
    .await;
    Setup { _upstream: upstream, proxy, log }
}

fn ask(q: &str) -> Value {
    json!({"model": "v/m", "messages": [{"role": "user", "content": q}]})
}

const CLOCK_BODY: &str = "# Clock\nCall current_time with the city's offset.";

/// A model that reads the `clock` skill, then calls the tool it unlocks,
/// then answers; "again" on a later turn is answered at once.
fn clock_brain(req: &Value) -> Value {
    if last_user(req) == "again" {
        return say("still here");
    }
    let results = tool_results(req);
    match results.len() {
        0 => calls(&[("call_r1", "read_skill", json!({"skill_name": "clock"}))]),
        1 => calls(&[("call_t1", "current_time", json!({}))]),
        _ => say(&format!("It is {}", results[1].contains("datetime"))),
    }
}

#[tokio::test]
async fn read_skill_unlocks_the_skills_tools_for_this_and_later_turns() {
    let dirs = Dirs::new();
    write(
        dirs.user.path(),
        "clock/SKILL.md",
        &skill_md("clock", "Tells the time.", "allowed-tools: current_time\n", CLOCK_BODY),
    );
    write(dirs.user.path(), "clock/references/zones.md", "UTC+1");
    let config = format!("[tools]\nbuiltin = [\"current_time\", \"http_fetch\"]\n{}", dirs.skills_toml(""));
    let s = setup(&config, clock_brain).await;

    let mut req = ask("what time is it in Paris?");
    req["messages"] = json!([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "what time is it in Paris?"}]);
    let (st, body) = s.proxy.chat(req).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "It is true");
    let reqs = s.requests();
    assert_eq!(reqs.len(), 3);
    // First request: the skills section merged into the client's system
    // message, read_skill offered, the skill's tool not yet.
    let sys = system(&reqs[0]);
    assert!(sys.starts_with("You are terse.\n\n## Skills"), "{sys}");
    assert!(sys.contains("<name>clock</name>") && sys.contains("<description>Tells the time.</description>"), "{sys}");
    assert!(sys.contains("clock/SKILL.md</location>"), "{sys}");
    assert_eq!(reqs[0]["messages"].as_array().unwrap().len(), 2, "merged, not added");
    assert_eq!(offered(&reqs[0]), ["http_fetch", "read_skill", "read_skill_file"]);
    let read_tool =
        reqs[0]["tools"].as_array().unwrap().iter().find(|t| t["function"]["name"] == "read_skill").unwrap();
    assert_eq!(read_tool["function"]["parameters"]["properties"]["skill_name"]["enum"], json!(["clock"]));
    // After read_skill: the body and the files come back, the tool is offered.
    let read = &tool_results(&reqs[1])[0];
    assert!(read.contains(CLOCK_BODY) && read.contains("references/zones.md"), "{read}");
    assert!(!read.contains("allowed-tools:"), "frontmatter stripped: {read}");
    assert_eq!(offered(&reqs[1]), ["current_time", "http_fetch", "read_skill", "read_skill_file"]);
    assert!(tool_results(&reqs[2])[1].contains("datetime"));

    // A later turn: the client sends only what it saw; the hidden read is
    // spliced back, so the skill's tool is still offered.
    s.clear();
    let next = json!({"model": "v/m", "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "what time is it in Paris?"},
        {"role": "assistant", "content": "It is true"},
        {"role": "user", "content": "again"}]});
    let (st, body) = s.proxy.chat(next).await;
    assert_eq!(st, 200, "{body}");
    let reqs = s.requests();
    assert_eq!(reqs.len(), 1);
    assert!(offered(&reqs[0]).contains(&"current_time".to_string()), "{:?}", offered(&reqs[0]));
    assert_eq!(system(&reqs[0]).matches("## Skills").count(), 1, "the section is added once");

    // A new conversation starts locked again.
    s.clear();
    let (st, _) = s.proxy.chat(ask("what time is it in Rome?")).await;
    assert_eq!(st, 200);
    assert!(!offered(&s.requests()[0]).contains(&"current_time".to_string()));
}

#[tokio::test]
async fn streamed_requests_unlock_the_same_way() {
    let dirs = Dirs::new();
    write(
        dirs.project.path(),
        "clock/SKILL.md",
        &skill_md("clock", "Tells the time.", "allowed-tools: [current_time]\n", CLOCK_BODY),
    );
    // No [tools]: a harmless built-in a skill names is provided for it.
    let s = setup(&dirs.skills_toml(""), clock_brain).await;
    let (st, events) = s.proxy.chat_stream(ask("time?")).await;
    assert_eq!(st, 200);
    let view = assemble(&events);
    assert_eq!(view["content"], "It is true", "{events:?}");
    let reqs = s.requests();
    assert_eq!(offered(&reqs[0]), ["read_skill", "read_skill_file"]);
    assert_eq!(offered(&reqs[1]), ["current_time", "read_skill", "read_skill_file"]);
}

#[tokio::test]
async fn a_locked_tool_called_early_gets_an_error_result() {
    let dirs = Dirs::new();
    write(
        dirs.user.path(),
        "clock/SKILL.md",
        &skill_md("clock", "Tells the time.", "allowed-tools: current_time\n", CLOCK_BODY),
    );
    let s = setup(&dirs.skills_toml(""), |req| match tool_results(req).first() {
        None => calls(&[("call_t1", "current_time", json!({}))]),
        Some(r) => say(r),
    })
    .await;
    let (st, body) = s.proxy.chat(ask("time?")).await;
    assert_eq!(st, 200, "{body}");
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.starts_with("Error:") && text.contains("after reading the skill `clock`"), "{text}");
    assert!(body["choices"][0]["message"]["tool_calls"].is_null(), "not handed to the client: {body}");
}

#[tokio::test]
async fn project_skills_override_user_skills() {
    let dirs = Dirs::new();
    write(dirs.user.path(), "style/SKILL.md", &skill_md("style", "User style guide.", "", "USER BODY"));
    write(dirs.project.path(), "style/SKILL.md", &skill_md("style", "Project style guide.", "", "PROJECT BODY"));
    write(dirs.user.path(), "only-user/SKILL.md", &skill_md("only-user", "Kept.", "", "x"));
    let s = setup(&dirs.skills_toml(""), |req| match tool_results(req).first() {
        None => calls(&[("call_r1", "read_skill", json!({"skill_name": "style"}))]),
        Some(r) => say(r),
    })
    .await;
    let (st, body) = s.proxy.chat(ask("style?")).await;
    assert_eq!(st, 200);
    let sys = system(&s.requests()[0]);
    assert!(sys.contains("Project style guide.") && !sys.contains("User style guide."), "{sys}");
    assert!(sys.contains("<name>only-user</name>"), "{sys}");
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.contains("PROJECT BODY") && !text.contains("USER BODY"), "{text}");
}

#[tokio::test]
async fn paths_and_unknown_names_get_an_error_and_no_file_content() {
    let dirs = Dirs::new();
    let root = dirs.project.path();
    write(root, "docs/SKILL.md", &skill_md("docs", "Docs.", "", "DOCS BODY"));
    write(root, "docs/references/ok.md", "FINE");
    write(root, "secret.txt", "TOPSECRET");
    write(root, "x/notes.txt", "TOPSECRET too");
    let secret = root.join("secret.txt").display().to_string();
    let s = setup(&dirs.skills_toml(""), move |req| {
        if tool_results(req).is_empty() {
            return calls(&[
                ("c1", "read_skill", json!({"skill_name": "../x"})),
                ("c2", "read_skill", json!({"skill_name": secret.clone()})),
                ("c3", "read_skill", json!({"skill_name": "nope"})),
                ("c4", "read_skill_file", json!({"skill_name": "docs", "path": "../secret.txt"})),
                ("c5", "read_skill_file", json!({"skill_name": "docs", "path": secret.clone()})),
                ("c6", "read_skill_file", json!({"skill_name": "../x", "path": "notes.txt"})),
                ("c7", "read_skill_file", json!({"skill_name": "docs", "path": "references/ok.md"})),
            ]);
        }
        say("done")
    })
    .await;
    let (st, _) = s.proxy.chat(ask("read")).await;
    assert_eq!(st, 200);
    let results = tool_results(&s.requests()[1]);
    assert_eq!(results.len(), 7);
    for r in &results[..6] {
        assert!(r.starts_with("Error:"), "{r}");
        assert!(!r.contains("TOPSECRET") && !r.contains("DOCS BODY"), "{r}");
    }
    assert_eq!(results[6], "FINE");
}

#[tokio::test]
async fn without_skills_nothing_is_added() {
    let dirs = Dirs::new();
    write(dirs.project.path(), "notes/README.md", "a folder without SKILL.md is not a skill");
    let s = setup(&dirs.skills_toml(""), |_| say("hi")).await;
    let (st, _) = s.proxy.chat(ask("hello")).await;
    assert_eq!(st, 200);
    let req = &s.requests()[0];
    assert!(req.get("tools").is_none(), "{req}");
    assert_eq!(req["messages"], json!([{"role": "user", "content": "hello"}]));
}

#[tokio::test]
async fn bad_skills_are_reported_and_the_good_ones_served() {
    let dirs = Dirs::new();
    let root = dirs.project.path();
    write(root, "broken/SKILL.md", "---\nname: [broken\ndescription: d\n---\nx");
    write(root, "Bad_Name/SKILL.md", &skill_md("Bad_Name", "d", "", "x"));
    write(root, "long/SKILL.md", &skill_md("long", &"d".repeat(1500), "", "x"));
    write(root, "good/SKILL.md", &skill_md("good", "Good.", "", "x"));
    let cfg: Config = toml::from_str(&dirs.skills_toml("auto_reload = false")).unwrap();
    let skills = modelshim::skills::Skills::load(cfg.skills.as_ref().unwrap());
    let set = skills.current();
    let status = |n: &str| set.reports().iter().find(|r| r.name == n).unwrap().clone();
    use modelshim::skills::Status;
    assert!(matches!(status("broken").status, Status::Invalid(why) if why.contains("not valid YAML")));
    // Off the spec but usable: loaded under its name, with a warning.
    assert_eq!(status("Bad_Name").status, Status::Ok);
    assert!(status("Bad_Name").warnings[0].contains("lowercase"), "{:?}", status("Bad_Name").warnings);
    assert_eq!(status("long").status, Status::Ok);
    assert!(status("long").warnings[0].contains("truncated to 1024"));
    assert_eq!(set.get("long").unwrap().description.len(), 1024);
    assert_eq!(set.len(), 3);

    let s = setup(&dirs.skills_toml(""), |_| say("hi")).await;
    let (st, _) = s.proxy.chat(ask("hello")).await;
    assert_eq!(st, 200, "bad skills never stop the server");
    let sys = system(&s.requests()[0]);
    assert!(
        sys.contains("<name>good</name>") && sys.contains("<name>Bad_Name</name>") && !sys.contains("broken"),
        "{sys}"
    );
}

/// Runs the binary with a config file and HOME in a temp dir.
fn run_bin(args: &[&str], config: &str, home: &Path) -> (bool, String) {
    let file = home.join("modelshim.toml");
    std::fs::write(&file, format!("[providers.v]\nprofile = \"vllm\"\nbase_url = \"http://127.0.0.1:9/v1\"\n{config}"))
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_modelshim"))
        .args(args)
        .arg("--config")
        .arg(&file)
        .env("HOME", home)
        .current_dir(home)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn skills_command_lists_them_and_check_fails_on_invalid_ones() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    write(h, ".modelshim/skills/mine/SKILL.md", &skill_md("mine", "Mine.", "", "x"));
    write(h, ".modelshim/skills/shared/SKILL.md", &skill_md("shared", "User version.", "", "x"));
    write(h, "skills/shared/SKILL.md", &skill_md("shared", "Project version.", "", "x"));
    // Defaults: ~/.modelshim/skills (user) and ./skills (project).
    let (ok, text) = run_bin(&["skills"], "", h);
    assert!(ok, "{text}");
    let line = |name: &str, source: &str| text.lines().any(|l| l.starts_with(name) && l.contains(source));
    assert!(line("mine", "user") && line("shared", "project"), "{text}");
    assert!(text.contains("overridden"), "{text}");
    let (ok, text) = run_bin(&["check"], "", h);
    assert!(ok, "{text}");
    assert!(text.contains("ok   skill mine"), "{text}");

    write(h, "skills/Bad_Name/SKILL.md", &skill_md("Bad_Name", "d", "", "x"));
    write(h, "skills/broken/SKILL.md", "no frontmatter here");
    write(h, "skills/long/SKILL.md", &skill_md("long", &"d".repeat(1100), "", "x"));
    let (ok, text) = run_bin(&["skills"], "", h);
    assert!(ok, "{text}");
    assert!(text.contains("invalid") && text.contains("lowercase letters"), "{text}");
    assert!(text.contains("no YAML frontmatter"), "{text}");
    assert!(text.contains("truncated to 1024"), "{text}");
    let (ok, text) = run_bin(&["check"], "", h);
    assert!(!ok, "{text}");
    assert!(text.contains("warn skill Bad_Name") && text.contains("FAIL skill broken"), "{text}");
    assert!(text.contains("1 skill(s) are invalid"), "{text}");
    let (ok, text) = run_bin(&["check"], "[skills]\nenabled = false\n", h);
    assert!(ok, "skills off: {text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn hot_reload_picks_up_an_edited_skill_md() {
    let dirs = Dirs::new();
    let file = dirs.project.path().join("notes/SKILL.md");
    write(dirs.project.path(), "notes/SKILL.md", &skill_md("notes", "First version.", "", "x"));
    let s = setup(&dirs.skills_toml("auto_reload = true"), |_| say("ok")).await;
    let (st, _) = s.proxy.chat(ask("hi")).await;
    assert_eq!(st, 200);
    assert!(system(&s.requests()[0]).contains("First version."));

    std::fs::write(&file, skill_md("notes", "Second version.", "", "x")).unwrap();
    write(dirs.project.path(), "added/SKILL.md", &skill_md("added", "Added later.", "", "x"));
    let start = Instant::now();
    loop {
        s.clear();
        let (st, _) = s.proxy.chat(ask("hi")).await;
        assert_eq!(st, 200);
        let sys = system(&s.requests()[0]);
        if sys.contains("Second version.") && sys.contains("Added later.") {
            assert!(!sys.contains("First version."), "{sys}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no reload within 10 s: {sys}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_is_triggered_by_changes_not_by_its_own_reads() {
    let dirs = Dirs::new();
    write(dirs.project.path(), "a/SKILL.md", &skill_md("a", "One.", "", "x"));
    let cfg: Config = toml::from_str(&dirs.skills_toml("auto_reload = true")).unwrap();
    let skills = modelshim::skills::Skills::load(cfg.skills.as_ref().unwrap());
    skills.watch();
    let first = skills.current().generation;
    write(dirs.project.path(), "a/SKILL.md", &skill_md("a", "Two.", "", "x"));
    let start = Instant::now();
    while skills.current().get("a").unwrap().description != "Two." {
        assert!(start.elapsed() < Duration::from_secs(10), "no reload within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = skills.current().generation;
    assert!(after > first);
    // The rescan opens every SKILL.md; those reads must not trigger another
    // rescan (a reload loop would bump the generation several times a second).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        skills.current().generation <= after + 1,
        "reloads keep coming: {after} -> {}",
        skills.current().generation
    );
}

#[cfg(unix)]
#[tokio::test]
async fn scripts_are_tools_only_when_allowed_and_after_reading() {
    let dirs = Dirs::new();
    write(
        dirs.project.path(),
        "shout/SKILL.md",
        &skill_md("shout", "Shouts.", "", "Call shout__upper with {\"text\"}."),
    );
    write(dirs.project.path(), "shout/scripts/upper.sh", "tr a-z A-Z");
    let brain = |req: &Value| {
        let results = tool_results(req);
        match results.len() {
            0 => calls(&[("c1", "read_skill", json!({"skill_name": "shout"}))]),
            1 => calls(&[("c2", "shout__upper", json!({"text": "hi"}))]),
            _ => say(&results[1]),
        }
    };
    let s = setup(&dirs.skills_toml("allow_scripts = true"), brain).await;
    let (st, body) = s.proxy.chat(ask("shout hi")).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "{\"TEXT\":\"HI\"}");
    let reqs = s.requests();
    assert!(!offered(&reqs[0]).contains(&"shout__upper".to_string()));
    assert!(offered(&reqs[1]).contains(&"shout__upper".to_string()));
    assert!(tool_results(&reqs[1])[0].contains("Tools for this skill: shout__upper"));

    let s = setup(&dirs.skills_toml(""), |_| say("ok")).await;
    let (st, _) = s.proxy.chat(ask("shout hi")).await;
    assert_eq!(st, 200);
    assert_eq!(offered(&s.requests()[0]), ["read_skill", "read_skill_file"], "no scripts unless allowed");
}

/// The README's demo: the bundled offline `demo` provider and the repository's
/// `skills/` folder; the scripted model reads `commit-message`, then answers.
#[tokio::test]
async fn the_demo_model_reads_a_bundled_skill_and_answers() {
    let replay = Arc::new(modelshim::server::replay::Replay::demo());
    let addr = modelshim::server::replay::spawn(replay.clone(), "127.0.0.1:0").await.unwrap();
    let profiles = modelshim::provider::load_profiles(None).unwrap();
    let mut config = Config::default();
    config.providers.insert(
        "demo".into(),
        modelshim::config::ProviderConfig { base_url: Some(format!("http://{addr}/v1")), ..Default::default() },
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
    let skills = modelshim::skills::SkillsConfig {
        dirs: vec![dir.display().to_string()],
        auto_reload: false,
        ..Default::default()
    };
    let set = modelshim::skills::Skills::load(&skills).current();
    assert_eq!(set.invalid(), 0, "{:?}", set.reports());
    assert!(set.get("commit-message").is_some() && set.get("world-clock").is_some());
    config.skills = Some(skills);
    let p = serve_state(modelshim::server::AppState::new(&config, &profiles).unwrap()).await;
    let q = json!({"model": "demo/skills", "messages": [{"role": "user", "content": "Write a commit message: …"}]});
    let (st, body) = p.chat(q.clone()).await;
    assert_eq!(st, 200, "{body}");
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.contains("Start with defaults when the config file is empty"), "{text}");
    assert_eq!(replay.served().0, 2, "read_skill, then the answer");
    let (st, events) = p.chat_stream(q).await;
    assert_eq!(st, 200);
    let view = assemble(&events);
    assert!(view["content"].as_str().unwrap().contains("Start with defaults"), "{view}");
    assert_eq!(view["calls"], json!([]));
}

/// Real public skills (tests/skills_real/NOTICE.md says whose and under which
/// license) load as their collections wrote them, and their files are served.
#[tokio::test]
async fn real_public_skills_load_and_serve_their_files() {
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/skills_real");
    let cfg = modelshim::skills::SkillsConfig {
        dirs: vec![real.display().to_string()],
        auto_reload: false,
        ..Default::default()
    };
    let set = modelshim::skills::Skills::load(&cfg).current();
    assert_eq!(set.invalid(), 0, "{:?}", set.reports());
    let names: Vec<&str> = set.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["internal-comms", "vercel-composition-patterns", "web-design-guidelines"]);
    let vercel = set.reports().iter().find(|r| r.name == "vercel-composition-patterns").unwrap();
    assert!(vercel.warnings.iter().any(|w| w.contains("differs from its folder")), "{:?}", vercel.warnings);
    assert!(set.get("vercel-composition-patterns").unwrap().description.starts_with("React composition patterns"));

    let config = format!("[skills]\ndirs = [{:?}]\n", real.display().to_string());
    let s = setup(&config, |req| match tool_results(req).len() {
        0 => calls(&[
            ("c1", "read_skill", json!({"skill_name": "vercel-composition-patterns"})),
            ("c2", "read_skill_file", json!({"skill_name": "internal-comms", "path": "examples/general-comms.md"})),
        ]),
        _ => say(&tool_results(req).join("\n=====\n")),
    })
    .await;
    let (st, body) = s.proxy.chat(ask("refactor my props")).await;
    assert_eq!(st, 200, "{body}");
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.contains("# React Composition Patterns"), "{text}");
    assert!(text.contains("doesn't fit into the standard formats"), "{text}");
    assert!(system(&s.requests()[0]).contains("<name>internal-comms</name>"));
}

/// `allowed-tools: current_time, http_fetch` (a comma list, as most real
/// skills write it) gates and unlocks those tools; a Title-Case name that
/// differs from its folder is loaded and read under that name.
#[tokio::test]
async fn comma_lists_and_title_case_names_work_as_written() {
    let dirs = Dirs::new();
    write(
        dirs.project.path(),
        "clock/SKILL.md",
        &skill_md("Clock Helper", "Tells the time.", "allowed-tools: current_time, http_fetch\n", CLOCK_BODY),
    );
    let config = format!("[tools]\nbuiltin = [\"current_time\", \"http_fetch\"]\n{}", dirs.skills_toml(""));
    let s = setup(&config, |req| {
        let results = tool_results(req);
        match results.len() {
            0 => calls(&[("call_r1", "read_skill", json!({"skill_name": "Clock Helper"}))]),
            1 => calls(&[("call_t1", "current_time", json!({}))]),
            _ => say(&format!("It is {}", results[1].contains("datetime"))),
        }
    })
    .await;
    let (st, body) = s.proxy.chat(ask("time?")).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "It is true");
    let reqs = s.requests();
    assert_eq!(offered(&reqs[0]), ["read_skill", "read_skill_file"], "both tools wait for the skill");
    assert!(tool_results(&reqs[1])[0].contains(CLOCK_BODY), "{:?}", tool_results(&reqs[1]));
    assert_eq!(offered(&reqs[1]), ["current_time", "http_fetch", "read_skill", "read_skill_file"]);
}

/// A SKILL.md linked from one configured collection into another is served
/// with the linked skill's own files; one linked out of every skills folder
/// is refused, its target never served.
#[cfg(unix)]
#[tokio::test]
async fn linked_skill_md_files_are_confined() {
    let dirs = Dirs::new();
    let outside = tempfile::tempdir().unwrap();
    write(dirs.user.path(), "pdf/SKILL.md", &skill_md("pdf", "PDF forms.", "", "PDF BODY"));
    write(dirs.user.path(), "pdf/references/forms.md", "FORMS GUIDE");
    std::fs::create_dir_all(dirs.project.path().join("pdf-tools")).unwrap();
    std::os::unix::fs::symlink(dirs.user.path().join("pdf/SKILL.md"), dirs.project.path().join("pdf-tools/SKILL.md"))
        .unwrap();
    write(outside.path(), "SKILL.md", &skill_md("stolen", "OUTSIDE DESCRIPTION", "", "OUTSIDE BODY"));
    std::fs::create_dir_all(dirs.project.path().join("stolen")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("SKILL.md"), dirs.project.path().join("stolen/SKILL.md")).unwrap();
    std::fs::create_dir_all(dirs.project.path().join("gone")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("nothing"), dirs.project.path().join("gone/SKILL.md")).unwrap();

    let cfg: Config = toml::from_str(&dirs.skills_toml("auto_reload = false")).unwrap();
    let set = modelshim::skills::Skills::load(cfg.skills.as_ref().unwrap()).current();
    use modelshim::skills::Status;
    let status = |n: &str| set.reports().iter().find(|r| r.path.ends_with(n)).unwrap().status.clone();
    assert!(matches!(status("stolen"), Status::Invalid(w) if w.contains("outside its folder")));
    assert!(matches!(status("gone"), Status::Invalid(w) if w.contains("dangling")));

    let s = setup(&dirs.skills_toml(""), |req| match tool_results(req).len() {
        0 => calls(&[
            ("c1", "read_skill_file", json!({"skill_name": "pdf", "path": "references/forms.md"})),
            ("c2", "read_skill", json!({"skill_name": "stolen"})),
        ]),
        _ => say(&tool_results(req).join("\n")),
    })
    .await;
    let (st, body) = s.proxy.chat(ask("fill the form")).await;
    assert_eq!(st, 200, "{body}");
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.starts_with("FORMS GUIDE\nError:"), "{text}");
    let sys = system(&s.requests()[0]);
    assert!(!sys.contains("OUTSIDE") && !text.contains("OUTSIDE"), "{sys}\n{text}");
}

/// 320 skills: the section stays within `catalog_max_chars`, the model gets
/// `search_skills`, finds a skill by the words of its description, and every
/// skill stays readable with `read_skill`.
#[tokio::test]
async fn a_large_catalog_stays_within_budget_and_every_skill_is_readable() {
    let dirs = Dirs::new();
    for i in 0..320 {
        let name = format!("skill-{i:03}");
        let desc = format!(
            "Handles the {} workflow number {i}: drafting, reviewing and publishing its documents. Use when the user \
             mentions topic{i} or asks about the {} pipeline.",
            ["billing", "search", "deploy", "audit"][i % 4],
            ["alpha", "beta", "gamma"][i % 3]
        );
        write(dirs.project.path(), &format!("{name}/SKILL.md"), &skill_md(&name, &desc, "", &format!("BODY {i}")));
    }
    let s = setup(&dirs.skills_toml("catalog_max_chars = 6000"), |req| match tool_results(req).len() {
        0 => calls(&[("c1", "search_skills", json!({"query": "topic217 workflow"}))]),
        1 => calls(&[("c2", "read_skill", json!({"skill_name": "skill-217"}))]),
        _ => say(&tool_results(req).join("\n=====\n")),
    })
    .await;
    let (st, body) = s.proxy.chat(ask("topic217 please")).await;
    assert_eq!(st, 200, "{body}");
    let reqs = s.requests();
    let sys = system(&reqs[0]);
    assert!(sys.chars().count() <= 6000, "{} chars", sys.chars().count());
    assert!(sys.contains("search_skills"), "{sys}");
    assert_eq!(offered(&reqs[0]), ["read_skill", "read_skill_file", "search_skills"]);
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    let (found, read) = text.split_once("\n=====\n").unwrap();
    assert!(found.starts_with("<skills>\n<skill><name>skill-217</name>"), "{found}");
    assert!(found.contains("mentions topic217"), "the whole description: {found}");
    assert!(read.contains("BODY 217"), "{read}");

    // Every skill, listed by name or not, is readable.
    let cfg: Config = toml::from_str(&dirs.skills_toml("auto_reload = false")).unwrap();
    let skills = modelshim::skills::Skills::load(cfg.skills.as_ref().unwrap());
    let read_skill = modelshim::tools::skill_readers::ReadSkill {
        skills: skills.clone(),
        names: Vec::new(),
        script_tools: Default::default(),
    };
    use modelshim::tools::Tool;
    for i in 0..320 {
        let out = read_skill.call(json!({"skill_name": format!("skill-{i:03}")})).await.unwrap();
        assert!(!out.is_error && out.model_text(false).contains(&format!("BODY {i}\n")), "skill-{i:03}");
    }
}

#[test]
fn check_fails_on_a_skill_tool_bound_to_no_tool_and_names_the_providers_key_variable() {
    let home = tempfile::tempdir().unwrap();
    let config = "api_key_env = \"MY_TEAM_VLLM_KEY\"\n\
                  [tools]\nbuiltin = [\"current_time\"]\n\
                  [tools.skill.brief]\ndescription = \"d\"\ntools = [\"current_time\", \"no_such_tool\"]\n";
    let (ok, text) = run_bin(&["check"], config, home.path());
    assert!(!ok, "{text}");
    assert!(text.contains("binds `no_such_tool`, which is not a tool"), "{text}");
    assert!(!text.contains("binds `current_time`"), "{text}");
    assert!(text.contains("key: MY_TEAM_VLLM_KEY not set"), "{text}");
}

/// A skill script of the real binary sees none of the proxy's keys: not in
/// its environment, not through `/proc/$PPID/environ`.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn scripts_cannot_read_the_proxys_keys() {
    let dirs = Dirs::new();
    write(dirs.project.path(), "peek/SKILL.md", &skill_md("peek", "Peeks.", "", "Call peek__look."));
    write(
        dirs.project.path(),
        "peek/scripts/look.sh",
        "cat /proc/$PPID/environ 2>&1 | tr '\\0' '\\n'; echo ---; env; echo ---; cat /proc/$PPID/cmdline | tr '\\0' ' '",
    );
    let upstream = MockServer::start().await;
    let log: Log = Arc::default();
    let brain = |req: &Value| match tool_results(req).len() {
        0 => calls(&[("c1", "read_skill", json!({"skill_name": "peek"}))]),
        1 => calls(&[("c2", "peek__look", json!({}))]),
        _ => say(&tool_results(req)[1]),
    };
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Script { brain: Arc::new(brain), log: log.clone() })
        .mount(&upstream)
        .await;
    let config = format!(
        "[providers.v]\nprofile = \"vllm\"\nbase_url = \"{}/v1\"\n{}",
        upstream.uri(),
        dirs.skills_toml("allow_scripts = true\nmax_output_bytes = 200000")
    );
    let secrets = [("FAKE_PROVIDER_API_KEY", "sk-fake-provider-secret"), ("MODELSHIM_KEYS", "msk-fake-proxy-key")];
    let p = serve_process(&config, &secrets).await;
    let (st, body) = p.proxy.chat(ask("peek")).await;
    assert_eq!(st, 200, "{body}");
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.contains("modelshim serve"), "the script's parent is the proxy: {text}");
    assert!(text.contains("Permission denied"), "{text}");
    for (name, value) in secrets {
        assert!(!text.contains(name) && !text.contains(value), "{name} reached the script:\n{text}");
    }
}
