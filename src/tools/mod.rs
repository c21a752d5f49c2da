//! Server-side tools: one [`Tool`] trait over four sources — built-in tools
//! (`builtin/`), MCP servers ([`mcp`]), skill tools ([`skill`]) and the tools
//! of Agent Skills (`read_skill`, `read_skill_file`, scripts; see
//! [`crate::skills`]) — and the [`Registry`] that turns them into a
//! [`Catalog`]: the exposed names, the OpenAI definitions offered to the
//! model, the argument validators compiled once per catalog, and which tools
//! wait for a skill to be read. [`batch`] runs calls against a catalog.
//!
//! The catalog is rebuilt only when an MCP server's tool list changes (a
//! generation counter bumped on connect and on `tools/list_changed`) or the
//! skills were reloaded, so a request takes a snapshot (`Arc<Catalog>`)
//! without any work.

pub mod builtin;
pub use crate::config::tools as config;
pub mod batch;
pub mod fetch;
pub mod mcp;
mod mcp_session;
pub mod skill;
pub mod skill_readers;
pub mod skill_scripts;
mod tool;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use crate::skills::gate::Locks;
use crate::skills::{SkillSet, Skills};

pub use batch::{CallOutcome, CallRequest, Status};
pub use config::{McpConfig, McpServerConfig, SkillConfig, SkillMode, ToolsConfig};
pub use tool::{Content, Tool, ToolError, ToolOutput, ToolSpec, sanitize_name};

/// Where a catalog entry comes from (for logs, `check` and traces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Builtin,
    Skill,
    Mcp(String),
    /// `read_skill`, `read_skill_file` and skill scripts.
    AgentSkill,
}

/// One callable tool in a catalog.
pub struct Entry {
    /// The definition as offered to the model (exposed name).
    pub spec: ToolSpec,
    pub tool: Arc<dyn Tool>,
    pub source: Source,
    /// Offered to the model (MCP servers with `expose = false` are not).
    pub offered: bool,
    pub timeout: Duration,
    validator: Option<Arc<jsonschema::Validator>>,
}

/// A snapshot of every server-side tool, by exposed name.
#[derive(Default)]
pub struct Catalog {
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
    /// The system-message section listing the skills.
    pub skills_section: Option<String>,
    /// Tools offered only after a skill was read.
    pub locks: Locks,
}

impl Catalog {
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.by_name.get(name).map(|&i| &self.entries[i])
    }

    /// The tools offered to the model.
    pub fn offered(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.offered)
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn push(&mut self, spec: ToolSpec, tool: Arc<dyn Tool>, source: Source, offered: bool, timeout: Duration) {
        let validator = match jsonschema::validator_for(&spec.parameters) {
            Ok(v) => Some(Arc::new(v)),
            Err(e) => {
                tracing::warn!(tool = %spec.name, "argument schema does not compile, arguments are not checked: {e}");
                None
            }
        };
        self.by_name.insert(spec.name.clone(), self.entries.len());
        self.entries.push(Entry { spec, tool, source, offered, timeout, validator });
    }
}

/// `base` made unique against `taken` by a numeric suffix, staying within 64.
fn unique_name(base: &str, taken: &HashMap<String, usize>) -> String {
    if !taken.contains_key(base) {
        return base.to_string();
    }
    (2..)
        .map(|i| {
            let suffix = format!("_{i}");
            let mut b = base.to_string();
            b.truncate(64 - suffix.len());
            b + &suffix
        })
        .find(|n| !taken.contains_key(n))
        .unwrap_or_else(|| base.to_string())
}

struct StaticTool {
    tool: Arc<dyn Tool>,
    source: Source,
    timeout: Duration,
}

/// Every configured server-side tool; hands out catalog snapshots.
pub struct Registry {
    pub config: ToolsConfig,
    statics: Vec<StaticTool>,
    mcp: Arc<mcp::Manager>,
    skills: Option<Arc<Skills>>,
    /// The catalog and the (MCP, skills) generations it was built at.
    catalog: RwLock<((u64, u64), Arc<Catalog>)>,
    started: tokio::sync::OnceCell<()>,
    /// The MCP supervisor (reconnects servers that went away); aborted on drop.
    supervisor: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        if let Ok(mut g) = self.supervisor.lock()
            && let Some(h) = g.take()
        {
            h.abort();
        }
    }
}

impl Registry {
    /// Builds the registry from `[tools]`, `[mcp]` and the skills; `None`
    /// when none of them can offer a tool (requests then take the plain path).
    pub fn new(
        tools: Option<&ToolsConfig>,
        mcp: Option<&McpConfig>,
        skills: Option<Arc<Skills>>,
    ) -> Result<Option<Arc<Self>>, ToolError> {
        let config = tools.cloned().unwrap_or_default();
        let servers = mcp.map(|m| m.servers.clone()).unwrap_or_default();
        if config.builtin.is_empty()
            && config.skill.is_empty()
            && servers.values().all(|s| !s.enabled)
            && skills.is_none()
        {
            return Ok(None);
        }
        for (name, s) in &config.skill {
            skill::validate(name, s, &config.skill)?;
        }
        let unknown: Vec<&String> = config.builtin.iter().filter(|n| !builtin::NAMES.contains(&n.as_str())).collect();
        if !unknown.is_empty() {
            return Err(ToolError::Config(format!(
                "[tools] builtin: unknown tool(s) {unknown:?}; known: {}",
                builtin::NAMES.join(", ")
            )));
        }
        let manager = Arc::new(mcp::Manager::new(&servers, config.timeout())?);
        // Skill tools call their bound tools through the registry (which
        // owns them), hence the weak back reference.
        let reg = Arc::new_cyclic(|weak: &Weak<Registry>| {
            let mut statics: Vec<StaticTool> = config
                .builtin
                .iter()
                .filter_map(|name| builtin::make(name, &config))
                .map(|tool| StaticTool { tool, source: Source::Builtin, timeout: config.timeout() })
                .collect();
            for (name, s) in &config.skill {
                let timeout = s.timeout_secs.map_or(config.timeout(), config::secs);
                let tool: Arc<dyn Tool> = Arc::new(skill::SkillTool::new(name, s, weak.clone()));
                statics.push(StaticTool { tool, source: Source::Skill, timeout });
            }
            Registry {
                config: config.clone(),
                statics,
                mcp: manager,
                skills,
                catalog: RwLock::new(((u64::MAX, u64::MAX), Arc::new(Catalog::default()))),
                started: tokio::sync::OnceCell::new(),
                supervisor: std::sync::Mutex::new(None),
            }
        });
        Ok(Some(reg))
    }

    /// The configured MCP servers.
    pub fn mcp(&self) -> &Arc<mcp::Manager> {
        &self.mcp
    }

    /// Ends the stdio MCP servers and everything they started (at shutdown).
    pub async fn shutdown(&self) {
        if let Ok(mut g) = self.supervisor.lock()
            && let Some(h) = g.take()
        {
            h.abort();
        }
        self.mcp.shutdown().await;
    }

    /// The skills, when `[skills]` is on.
    pub fn skills(&self) -> Option<&Arc<Skills>> {
        self.skills.as_ref()
    }

    /// Whether a request should take the agent loop: some tool is
    /// configured, or at least one skill is loaded right now (skills may
    /// appear and disappear with hot reload).
    pub fn active(&self) -> bool {
        !self.statics.is_empty()
            || self.mcp.has_servers()
            || self.skills.as_ref().is_some_and(|s| !s.current().is_empty())
    }

    /// Connects every MCP server once (concurrently) and starts the
    /// supervisor that reconnects servers that went away. Idempotent; the
    /// first request awaits it when `serve` did not.
    pub async fn ensure_started(&self) {
        self.started
            .get_or_init(|| async {
                for (name, r) in self.mcp.connect_all().await {
                    match r {
                        Ok(n) => tracing::info!(server = %name, tools = n, "MCP server ready"),
                        Err(e) => tracing::warn!(server = %name, "MCP server not available (retrying): {e}"),
                    }
                }
                if self.mcp.has_servers()
                    && let Ok(mut g) = self.supervisor.lock()
                {
                    *g = Some(tokio::spawn(mcp::supervise(Arc::downgrade(&self.mcp))));
                }
            })
            .await;
    }

    /// The current catalog; rebuilt only when an MCP tool list changed or
    /// the skills were reloaded.
    pub fn catalog(&self) -> Arc<Catalog> {
        let set = self.skills.as_ref().map(|s| s.current());
        let generation = (self.mcp.generation(), set.as_ref().map_or(0, |s| s.generation));
        if let Ok(g) = self.catalog.read()
            && g.0 == generation
        {
            return g.1.clone();
        }
        let built = Arc::new(self.build(set));
        if let Ok(mut g) = self.catalog.write() {
            *g = (generation, built.clone());
        }
        built
    }

    fn build(&self, set: Option<Arc<SkillSet>>) -> Catalog {
        let mut c = Catalog::default();
        for s in &self.statics {
            let mut spec = s.tool.spec();
            spec.name = unique_name(&sanitize_name(&spec.name), &c.by_name);
            c.push(spec, s.tool.clone(), s.source.clone(), true, s.timeout);
        }
        for t in self.mcp.tools() {
            let mut spec = t.spec();
            let exposed = unique_name(&sanitize_name(&format!("{}__{}", t.server_name(), spec.name)), &c.by_name);
            spec.name = exposed;
            let source = Source::Mcp(t.server_name().to_string());
            let (offered, timeout) = (t.exposed(), t.timeout());
            c.push(spec, Arc::new(t), source, offered, timeout);
        }
        if let (Some(skills), Some(set)) = (&self.skills, set) {
            self.add_skills(&mut c, skills, set);
        }
        c
    }

    /// The tools of Agent Skills: `read_skill`, `read_skill_file`, the
    /// skills' scripts (when allowed), and the harmless built-ins a skill
    /// names in `allowed-tools` without `[tools]` enabling them; then the
    /// locks that keep a skill's tools back until it is read.
    fn add_skills(&self, c: &mut Catalog, skills: &Arc<Skills>, set: Arc<SkillSet>) {
        use self::{skill_readers as st, skill_scripts as script};
        if set.is_empty() {
            return;
        }
        let names: Vec<String> = set.iter().map(|s| s.name.clone()).collect();
        let mut scripts: HashMap<String, Vec<String>> = HashMap::new();
        let cfg = &skills.config;
        for s in set.iter() {
            for path in &s.scripts {
                let name = unique_name(&script::tool_name(&s.name, path), &c.by_name);
                let tool = script::ScriptTool {
                    name: name.clone(),
                    skill: s.name.clone(),
                    path: path.clone(),
                    dir: s.dir.clone(),
                    timeout: cfg.script_timeout(),
                    max_output: cfg.max_output_bytes,
                };
                c.push(tool.spec(), Arc::new(tool), Source::AgentSkill, true, cfg.script_timeout());
                scripts.entry(s.name.clone()).or_default().push(name);
            }
            for t in s.allowed_tools.iter().filter(|t| builtin::SAFE.contains(&t.as_str())) {
                if c.get(t).is_none()
                    && let Some(tool) = builtin::make(t, &self.config)
                {
                    c.push(tool.spec(), tool, Source::Builtin, true, self.config.timeout());
                }
            }
        }
        let section = crate::skills::prompt::render(&set, cfg.prompt_template.as_deref(), cfg.catalog_max_chars);
        let complete = section.as_ref().is_none_or(|s| s.complete);
        // A shortened catalog: no name enum (as long as the catalog), and a search.
        let names = if complete { names } else { Vec::new() };
        let read = st::ReadSkill { skills: skills.clone(), names: names.clone(), script_tools: scripts.clone() };
        let file = st::ReadSkillFile { skills: skills.clone(), names };
        let mut own: Vec<Arc<dyn Tool>> = vec![Arc::new(read), Arc::new(file)];
        if !complete {
            own.push(Arc::new(st::SearchSkills { skills: skills.clone() }));
        }
        for tool in own {
            let spec = tool.spec();
            if c.get(&spec.name).is_some() {
                tracing::warn!(tool = %spec.name, "a configured tool has the name of a skills tool; skills cannot be read");
                continue;
            }
            c.push(spec, tool, Source::AgentSkill, true, self.config.timeout());
        }
        c.locks = Locks::new(&set, &scripts);
        c.skills_section = section.map(|s| s.text);
    }
}

/// `modelshim check`: connects every MCP server, prints what each offers,
/// and returns how many failed.
pub async fn check(reg: &Registry) -> usize {
    let mut failed = 0;
    for (name, r) in reg.mcp.connect_all().await {
        let target = reg.mcp.servers().iter().find(|s| s.name == name).map(|s| s.target()).unwrap_or_default();
        match r {
            Ok(n) => println!("ok   mcp server {name:<12} {target} ({n} tools)"),
            Err(e) => {
                failed += 1;
                println!("FAIL mcp server {name:<12} {e}");
            }
        }
    }
    let catalog = reg.catalog();
    let names: Vec<&str> = catalog.offered().map(|e| e.spec.name.as_str()).collect();
    println!("ok   server-side tools: {}", if names.is_empty() { "(none)".to_string() } else { names.join(", ") });
    failed
}

/// Bumps a shared generation counter (catalogs built before are stale).
pub(crate) fn bump(generation: &AtomicU64) {
    generation.fetch_add(1, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitized_and_unique() {
        assert_eq!(sanitize_name("srv__get.time v2"), "srv__get_time_v2");
        assert_eq!(sanitize_name(&"x".repeat(80)).len(), 64);
        let mut taken = HashMap::new();
        taken.insert("a".to_string(), 0);
        taken.insert("a_2".to_string(), 1);
        assert_eq!(unique_name("a", &taken), "a_3");
        taken.insert("x".repeat(64), 2);
        assert_eq!(unique_name(&"x".repeat(64), &taken).len(), 64);
    }

    #[test]
    fn model_text_replaces_images_and_marks_errors() {
        let out = ToolOutput {
            content: vec![
                Content::Text("see".into()),
                Content::Image { mime: "image/png".into(), data: "AAAA".into() },
                Content::Link { uri: "file:///a".into(), name: "a".into(), mime: None, description: None },
            ],
            is_error: true,
        };
        assert_eq!(
            out.model_text(true),
            "Error: see\n[image 1 (image/png) is attached in the next user message]\n[resource link: a <file:///a>]"
        );
        assert!(out.model_text(false).contains("omitted"));
        assert_eq!(ToolOutput::default().model_text(false), "(no output)");
    }
}
