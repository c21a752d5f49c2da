//! The command line (DESIGN.md "Command line"). Each subcommand is a small
//! function over the library; `main.rs` only dispatches.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use serde_json::{Value, json};

use crate::config::{Config, ProviderConfig};
use crate::provider::{Profile, load_profiles};
use crate::server::AppState;
use crate::server::replay::Replay;
use crate::skills::{SkillSet, Status as SkillStatus};
use crate::toolcall::{FormatSet, ToolIndex, extract};

#[derive(Parser)]
#[command(
    name = "modelshim",
    version,
    about = "An OpenAI-compatible proxy that makes every vendor's models behave like OpenAI's."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the proxy.
    Serve {
        #[arg(long)]
        config: Option<PathBuf>,
        /// Address to listen on (default 127.0.0.1:8787).
        #[arg(long)]
        listen: Option<String>,
        /// Log as JSON lines.
        #[arg(long)]
        json_logs: bool,
        /// Also write every upstream exchange into DIR as a fixture file
        /// (API keys and auth headers redacted), for `modelshim replay`.
        #[arg(long, value_name = "DIR")]
        record: Option<PathBuf>,
        /// Serve without proxy keys on a non-loopback address.
        #[arg(long)]
        allow_unauthenticated: bool,
    },
    /// Serve recorded fixtures as an OpenAI-compatible upstream.
    Replay {
        dir: PathBuf,
        #[arg(long, default_value = "127.0.0.1:8788")]
        listen: String,
        /// Multiplier on recorded delays between stream events: 1 = recorded
        /// pace, 2 = twice as slow, 0 = as fast as possible.
        #[arg(long, default_value_t = 0.0)]
        speed: f64,
    },
    /// Recover tool calls from model text (FILE or stdin) and print them.
    Extract {
        /// A format name, or `auto` for every format.
        #[arg(long, default_value = "auto")]
        format: String,
        /// OpenAI tool definitions (a JSON array, or an object with `tools`).
        #[arg(long)]
        tools: Option<PathBuf>,
        file: Option<PathBuf>,
    },
    /// Validate the config, the profiles, the skills and the MCP servers;
    /// non-zero exit on any error.
    Check {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// List the skills: name, source (user/project), path, status.
    Skills {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// List provider profiles and what each one fixes.
    Providers {
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

pub async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Serve { config, listen, json_logs, record, allow_unauthenticated } => {
            serve(config, listen, json_logs, record, allow_unauthenticated).await
        }
        Command::Replay { dir, listen, speed } => replay(dir, listen, speed).await,
        Command::Extract { format, tools, file } => extract_cmd(&format, tools, file),
        Command::Check { config } => check(config).await,
        Command::Skills { config } => skills(config),
        Command::Providers { config } => providers(config),
    }
}

/// Logs to stderr (JSON or text), plus the OpenTelemetry exporter when
/// `[telemetry]` (or the OTEL_* environment) names a collector. Keep the
/// guard until exit: dropping it flushes the queued spans.
/// Keeps logging alive: dropping it flushes the log writer and the span
/// exporter (fields drop in order: spans first, then the lines).
struct Logging {
    _telemetry: crate::telemetry::Guard,
    _lines: tracing_appender::non_blocking::WorkerGuard,
}

fn init_logs(json: bool, telemetry: &crate::telemetry::TelemetryConfig) -> Result<Logging> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::Registry;
    use tracing_subscriber::filter::FilterExt;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    // Colours only on a terminal: escape codes in a log file are noise, and cost.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // Lines are written by a log thread through a buffer that is flushed
    // whenever the backlog is drained: one `write` per burst, not one per
    // request line on a serving thread. When stderr cannot keep up and
    // 8,192 lines are waiting, new lines are dropped rather than stalling
    // requests. (The queue is allocated whole: the default of 128k lines
    // would take megabytes of resident memory.)
    let (writer, lines) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(8192)
        .thread_name("modelshim-log")
        // Every known secret is redacted from each line, on the log thread.
        .finish(crate::redact::Writer(std::io::BufWriter::with_capacity(64 * 1024, std::io::stderr())));
    let filter = match filter {
        LogFilter::Targets(f) => FilterExt::<Registry>::boxed(*f),
        LogFilter::Env(f) => FilterExt::<Registry>::boxed(*f),
    };
    let fmt = tracing_subscriber::fmt::layer().with_writer(writer).with_ansi(ansi).with_timer(crate::logline::Clock);
    let fmt = if json {
        fmt.json().with_filter(filter).boxed()
    } else {
        fmt.fmt_fields(crate::logline::Fields).with_filter(filter).boxed()
    };
    // Spans are exported whatever RUST_LOG says about log lines.
    let (otel, guard) = crate::telemetry::layer(telemetry)?;
    let otel = otel.map(|l| l.with_filter(tracing_subscriber::filter::LevelFilter::INFO));
    tracing_subscriber::registry().with(fmt).with(otel).init();
    Ok(Logging { _telemetry: guard, _lines: lines })
}

enum LogFilter {
    Targets(Box<tracing_subscriber::filter::Targets>),
    Env(Box<tracing_subscriber::EnvFilter>),
}

/// `RUST_LOG` (unset: `info`) as a level per target when it says no more
/// than that, the common case: an `EnvFilter` takes a lock on every span
/// entered and left, which every request does many times. Span and field
/// directives (`[request{id=..}]=debug`) need the `EnvFilter`.
fn log_filter(var: Option<&str>) -> LogFilter {
    let spec = var.filter(|v| !v.trim().is_empty()).unwrap_or("info");
    // Targets would read a span directive as a target name: those go to the EnvFilter.
    let dynamic = spec.contains(['[', '{']);
    match spec.parse::<tracing_subscriber::filter::Targets>() {
        Ok(t) if !dynamic => LogFilter::Targets(Box::new(t)),
        _ => LogFilter::Env(Box::new(
            tracing_subscriber::EnvFilter::try_new(spec).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )),
    }
}

/// Loads the config and every profile.
fn load(flag: Option<PathBuf>) -> Result<(Config, std::collections::BTreeMap<String, Profile>)> {
    let (mut config, path) = Config::load(flag)?;
    if let Some(p) = &path {
        // Logging starts after the config is read (it configures telemetry).
        eprintln!("modelshim: config {}", p.display());
    }
    // No `[skills]` section: the default folders, when they exist.
    config.skills.get_or_insert_with(Default::default);
    let dir = config
        .providers_dir
        .clone()
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".modelshim/providers")));
    let profiles = load_profiles(dir.as_deref())?;
    Ok((config, profiles))
}

/// With no `[providers]` table every profile is a provider under its id.
fn default_providers(config: &mut Config, profiles: &std::collections::BTreeMap<String, Profile>) {
    if config.providers.is_empty() {
        for (id, _) in profiles.iter().filter(|(_, p)| !p.fallback) {
            config.providers.insert(id.clone(), ProviderConfig::default());
        }
    }
}

/// What `serve`, `check` and `providers` say of a provider that has no
/// profile of its own (DESIGN.md "Providers without a profile").
fn generic_note(name: &str, profile: &Profile) -> Option<String> {
    profile.fallback.then(|| format!("no profile named {name}: the generic OpenAI-compatible profile ({})", profile.id))
}

async fn serve(
    flag: Option<PathBuf>,
    listen: Option<String>,
    json_logs: bool,
    record: Option<PathBuf>,
    allow_open: bool,
) -> Result<()> {
    let (mut config, profiles) = load(flag)?;
    let _telemetry = init_logs(json_logs, &config.telemetry)?;
    default_providers(&mut config, &profiles);
    // The demo provider replays bundled fixtures from an in-process server.
    let demo = config.providers.iter_mut().find(|(n, p)| p.profile.as_deref().unwrap_or(n) == "demo");
    if let Some((_, pc)) = demo
        && pc.base_url.is_none()
    {
        let addr = crate::server::replay::spawn(Arc::new(Replay::demo()), "127.0.0.1:0").await?;
        pc.base_url = Some(format!("http://{addr}/v1"));
    }
    let state = AppState::build(&config, &profiles, record.as_deref())?;
    for p in state.providers.iter() {
        if let Some(note) = generic_note(&p.name, &p.profile) {
            tracing::info!(provider = %p.name, "{note}");
        }
    }
    if let Some(dir) = &record {
        tracing::info!("recording every upstream exchange into {}", dir.display());
    }
    if let Some(tools) = &state.tools {
        tools.ensure_started().await;
    }
    if let Some(skills) = state.tools.as_ref().and_then(|t| t.skills()) {
        let set = skills.current();
        let dirs: Vec<String> = skills.dirs().iter().map(|d| d.path.display().to_string()).collect();
        tracing::info!(skills = set.len(), invalid = set.invalid(), dirs = %dirs.join(", "), "skills loaded");
    }
    let addr = listen.or(config.listen.clone()).unwrap_or_else(|| "127.0.0.1:8787".into());
    let threads = config.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let listeners =
        crate::server::shutdown::bind(&addr, threads).with_context(|| format!("cannot listen on {addr}"))?;
    let local = listeners.first().context("no listener")?.local_addr()?;
    state.edge.browser.listening_on(&local);
    if let Err(why) = crate::server::auth::check_bind(&local, state.edge.auth.enabled(), allow_open) {
        bail!(why);
    }
    if let Err(why) = crate::server::console::check_bind(&local, &config.console) {
        bail!(why);
    }
    if state.console.is_some() {
        tracing::info!("console at http://{local}/console");
    }
    let names: Vec<String> = state.providers.iter().map(|p| p.name.clone()).collect();
    tracing::info!(providers = %names.join(","), auth = state.edge.auth.enabled(), state = state.store.kind(), threads = listeners.len(), "modelshim listening on http://{local}/v1");
    let grace = std::time::Duration::from_secs_f64(config.limits.shutdown_grace_secs.max(0.0));
    let tools = state.tools.clone();
    let served = crate::server::shutdown::serve_threads(listeners, state, shutdown_signal(), grace).await;
    // No child process outlives the proxy (stdio MCP servers and theirs).
    if let Some(tools) = tools {
        tools.shutdown().await;
    }
    served?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

async fn replay(dir: PathBuf, listen: String, speed: f64) -> Result<()> {
    let _telemetry = init_logs(false, &Default::default())?;
    let (replay, problems) = Replay::load_dir(&dir, speed)?;
    // A bad file is named and skipped; the others are still served.
    for p in &problems {
        tracing::error!("{p}");
    }
    if replay.is_empty() {
        bail!("no usable fixtures under {} ({} bad files)", dir.display(), problems.len());
    }
    let n = replay.len();
    let listener =
        tokio::net::TcpListener::bind(&listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    tracing::info!("replaying {n} recordings on http://{}/v1", listener.local_addr()?);
    axum::serve(crate::server::shutdown::nodelay(listener), crate::server::replay::router(Arc::new(replay)))
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(())
}

fn extract_cmd(format: &str, tools: Option<PathBuf>, file: Option<PathBuf>) -> Result<()> {
    let set = if format == "auto" {
        FormatSet::all()
    } else {
        FormatSet::named(&[format]).map_err(|n| {
            let known: Vec<&str> = crate::toolcall::formats::ALL.iter().map(|f| f.name()).collect();
            anyhow::anyhow!("unknown format {n:?}; known: auto, {}", known.join(", "))
        })?
    };
    let index = match tools {
        Some(p) => {
            let v: Value = serde_json::from_str(
                &std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?,
            )
            .with_context(|| format!("{} is not JSON", p.display()))?;
            let list = v.get("tools").cloned().unwrap_or(v);
            ToolIndex::from_openai(list.as_array().map(Vec::as_slice).unwrap_or_default())
        }
        None => ToolIndex::open(),
    };
    let mut text = String::new();
    match file {
        Some(p) => text = std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?,
        None => {
            std::io::stdin().read_to_string(&mut text)?;
        }
    }
    let x = extract(&text, &Arc::new(set), &Arc::new(index));
    let calls: Vec<Value> = x
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({"index": i, "id": c.id.clone().unwrap_or_else(crate::openai::new_call_id), "type": "function",
                   "function": {"name": c.name, "arguments": c.arguments}, "format": c.format})
        })
        .collect();
    let out = json!({"tool_calls": calls, "content": x.content, "reasoning_content": x.reasoning});
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

async fn check(flag: Option<PathBuf>) -> Result<()> {
    let (mut config, profiles) = load(flag)?;
    default_providers(&mut config, &profiles);
    let state = AppState::new(&config, &profiles)?;
    let mut warnings = 0;
    for p in state.providers.iter() {
        // The provider's own `api_key_env` overrides its profile's.
        let var = config.providers.get(&p.name).and_then(|pc| pc.api_key_env.clone());
        let key = match (var.or_else(|| p.profile.api_key_env.clone()), p.api_key()) {
            (Some(var), None) => {
                warnings += 1;
                format!("key: {var} not set")
            }
            (Some(var), Some(_)) => format!("key: {var} set"),
            (None, _) => "no key needed".into(),
        };
        let note = generic_note(&p.name, &p.profile).map(|n| format!("; {n}")).unwrap_or_default();
        println!("ok   provider {:<12} {} ({key}{note})", p.name, p.base_url);
    }
    let skills_invalid = match state.tools.as_ref().and_then(|t| t.skills()) {
        Some(skills) => check_skills(&skills.current()),
        None => 0,
    };
    let (mcp_failed, unbound) = match &state.tools {
        Some(tools) => (crate::tools::check(tools).await, check_skill_tools(tools)),
        None => (0, 0),
    };
    if mcp_failed > 0 {
        bail!("{mcp_failed} MCP server(s) could not start or list their tools");
    }
    if unbound > 0 {
        bail!("{unbound} skill tool binding(s) name a tool that does not exist (see above)");
    }
    if skills_invalid > 0 {
        bail!("{skills_invalid} skill(s) are invalid (see above; `modelshim skills` lists them all)");
    }
    println!("{} providers, {} profiles, {warnings} warnings", state.providers.iter().count(), profiles.len());
    Ok(())
}

/// Checks that every tool a `[tools.skill.NAME]` binds exists (after the
/// MCP servers listed theirs); prints a line per missing one, returns how many.
fn check_skill_tools(reg: &crate::tools::Registry) -> usize {
    let catalog = reg.catalog();
    let mut missing = 0;
    for (name, s) in &reg.config.skill {
        let route = s.route.iter().flat_map(|r| r.cases.values().flatten().chain(r.default.iter().flatten()));
        let mut bound: Vec<&String> = s.tools.iter().chain(route).collect();
        bound.sort();
        bound.dedup();
        for t in bound.into_iter().filter(|t| catalog.get(t).is_none()) {
            missing += 1;
            let known: Vec<&str> =
                catalog.entries().map(|e| e.spec.name.as_str()).filter(|n| *n != name.as_str()).collect();
            println!("FAIL skill tool {name:<15} binds `{t}`, which is not a tool (known: {})", known.join(", "));
        }
    }
    missing
}

/// Prints a line per skill folder for `check`; returns how many are invalid.
fn check_skills(set: &SkillSet) -> usize {
    for r in set.reports() {
        let path = r.path.display();
        match &r.status {
            SkillStatus::Ok => println!("ok   skill {:<20} {path} ({})", r.name, r.scope.as_str()),
            SkillStatus::Overridden(by) => {
                println!("note skill {:<20} {path} is overridden by {}", r.name, by.display())
            }
            SkillStatus::Invalid(why) => println!("FAIL skill {:<20} {path}: {why}", r.name),
        }
        for w in &r.warnings {
            println!("warn skill {:<20} {w}", r.name);
        }
    }
    set.invalid()
}

/// `modelshim skills`: every skill folder found, valid or not.
fn skills(flag: Option<PathBuf>) -> Result<()> {
    let (config, _) = Config::load(flag)?;
    let cfg = config.skills.unwrap_or_default();
    let dirs = cfg.resolved_dirs();
    let set = SkillSet::scan(&dirs, &cfg, 0);
    for d in &dirs {
        let state = if d.path.is_dir() { "" } else { " (missing)" };
        println!("# {} skills: {}{state}", d.scope.as_str(), d.path.display());
    }
    if !cfg.enabled {
        println!("# [skills] enabled = false: none of these is offered");
    }
    println!("{:<24} {:<8} {:<11} path", "name", "source", "status");
    for r in set.reports() {
        let (status, why) = match &r.status {
            SkillStatus::Ok => ("ok", None),
            SkillStatus::Overridden(by) => ("overridden", Some(format!("by {}", by.display()))),
            SkillStatus::Invalid(why) => ("invalid", Some(why.clone())),
        };
        println!("{:<24} {:<8} {:<11} {}", r.name, r.scope.as_str(), status, r.path.display());
        for line in why.iter().chain(&r.warnings) {
            println!("    {line}");
        }
    }
    println!("{} skills, {} invalid", set.len(), set.invalid());
    Ok(())
}

fn providers(flag: Option<PathBuf>) -> Result<()> {
    let (config, profiles) = load(flag)?;
    for p in profiles.values() {
        let key = p.api_key_env.as_deref().unwrap_or("-");
        let url = if p.base_url.is_empty() { "base_url from the provider table" } else { &p.base_url };
        println!("{:<12} {}  ({url})\n             key: {key}", p.id, p.name);
        for f in p.fixes() {
            println!("             - {f}");
        }
    }
    // The configured providers' profiles, when one is not the provider's own.
    for (name, pc) in &config.providers {
        let profile = crate::provider::profile_for(name, pc, &profiles)?;
        match generic_note(name, profile) {
            Some(note) => println!("provider {name}: {note}"),
            None if profile.id != *name => println!("provider {name}: profile {}", profile.id),
            None => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_per_target_take_the_lock_free_filter_and_span_directives_the_env_filter() {
        for plain in [None, Some(""), Some("info"), Some("modelshim=debug,hyper=warn"), Some("off")] {
            assert!(matches!(log_filter(plain), LogFilter::Targets(_)), "{plain:?}");
        }
        for dynamic in ["[request]=debug", "modelshim[upstream{provider=a}]=trace"] {
            assert!(matches!(log_filter(Some(dynamic)), LogFilter::Env(_)), "{dynamic}");
        }
    }
}
