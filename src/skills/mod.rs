//! Agent Skills (agentskills.io): folders of instructions the model loads on
//! demand. This module owns the registry: the configured folders are scanned
//! (user level first, project level last; a later skill overrides an earlier
//! one of the same name) into an immutable [`SkillSet`], which [`Skills`]
//! swaps whole on reload, so a reader holds one version from start to end.
//!
//! The rest of the feature: [`frontmatter`] (SKILL.md parsing and
//! validation), [`prompt`] (the system-message section), [`tools`]
//! (`read_skill`, `read_skill_file`), [`script`] (scripts as tools),
//! [`gate`] (tools offered only once their skill was read), [`watch`]
//! (hot reload). The agent loop (`agent/`) is what uses them.

pub mod config;
pub mod frontmatter;
pub mod gate;
pub mod prompt;
pub mod script;
pub mod tools;
mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

pub use config::{Scope, SkillDir, SkillsConfig};

/// Subfolders a scan never enters.
const SKIP: &[&str] = &["node_modules", "target", "__pycache__"];
/// Bounds of one scan: folders per skills directory, and files listed per skill.
const MAX_SKILL_DIRS: usize = 2000;
const MAX_LISTED: usize = 200;
const MAX_DEPTH: usize = 4;

/// A loaded, valid skill.
#[derive(Debug)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    pub compatibility: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub allowed_tools: Vec<String>,
    /// The skill's folder (canonical).
    pub dir: PathBuf,
    /// Its SKILL.md.
    pub file: PathBuf,
    pub scope: Scope,
    /// The Markdown body, read at load so one version is served whole.
    pub body: String,
    /// Supporting files, relative to `dir` (SKILL.md excluded).
    pub files: Vec<String>,
    /// Executables under `scripts/` (only with `allow_scripts`).
    pub scripts: Vec<PathBuf>,
}

/// What a scan found at one folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// Not loaded; the reason.
    Invalid(String),
    /// Valid, but a later folder has a skill of the same name (its path).
    Overridden(PathBuf),
}

/// One skill folder as `modelshim skills` lists it.
#[derive(Debug, Clone)]
pub struct Report {
    /// The folder name (the skill's name when valid).
    pub name: String,
    pub scope: Scope,
    pub path: PathBuf,
    pub status: Status,
    pub warnings: Vec<String>,
}

/// One immutable version of every skill.
#[derive(Debug, Default)]
pub struct SkillSet {
    /// Increases with every reload (catalogs built from an older set are stale).
    pub generation: u64,
    skills: BTreeMap<String, Arc<Skill>>,
    reports: Vec<Report>,
}

impl SkillSet {
    /// Scans `dirs` in order; never fails (problems are in the reports).
    pub fn scan(dirs: &[SkillDir], config: &SkillsConfig, generation: u64) -> SkillSet {
        let mut set = SkillSet { generation, ..SkillSet::default() };
        for d in dirs {
            for folder in skill_folders(&d.path) {
                let (report, skill) = load(&folder, d.scope, config);
                if let Some(skill) = skill {
                    for r in set.reports.iter_mut().filter(|r| r.name == skill.name && r.status == Status::Ok) {
                        r.status = Status::Overridden(folder.clone());
                    }
                    set.skills.insert(skill.name.clone(), Arc::new(skill));
                }
                set.reports.push(report);
            }
        }
        set
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Skill>> {
        self.skills.get(name)
    }

    /// The valid skills, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Skill>> {
        self.skills.values()
    }

    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// Every folder found, in scan order.
    pub fn reports(&self) -> &[Report] {
        &self.reports
    }

    /// How many folders hold a skill that could not be loaded.
    pub fn invalid(&self) -> usize {
        self.reports.iter().filter(|r| matches!(r.status, Status::Invalid(_))).count()
    }
}

/// The folders under a skills directory that hold a SKILL.md (or skill.md),
/// sorted by name. A missing directory has none.
fn skill_folders(dir: &Path) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = read
        .filter_map(Result::ok)
        .filter(|e| !skipped(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .filter(|p| p.is_dir() && skill_md(p).is_some())
        .take(MAX_SKILL_DIRS)
        .collect();
    out.sort();
    out
}

fn skipped(name: &str) -> bool {
    name.starts_with('.') || SKIP.contains(&name)
}

/// A folder's SKILL.md, else its skill.md.
fn skill_md(folder: &Path) -> Option<PathBuf> {
    ["SKILL.md", "skill.md"].iter().map(|n| folder.join(n)).find(|p| p.is_file())
}

/// Loads one skill folder.
fn load(folder: &Path, scope: Scope, config: &SkillsConfig) -> (Report, Option<Skill>) {
    let folder_name = folder.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut report = Report {
        name: folder_name.clone(),
        scope,
        path: folder.to_path_buf(),
        status: Status::Ok,
        warnings: Vec::new(),
    };
    let invalid = |mut r: Report, why: String| {
        r.status = Status::Invalid(why);
        (r, None)
    };
    let (Some(file), Ok(dir)) = (skill_md(folder), folder.canonicalize()) else {
        return invalid(report, "the folder cannot be read".into());
    };
    match std::fs::metadata(&file) {
        Ok(m) if m.len() > config.max_file_bytes => {
            return invalid(report, format!("SKILL.md is larger than {} bytes", config.max_file_bytes));
        }
        Ok(_) => {}
        Err(e) => return invalid(report, format!("cannot read SKILL.md: {e}")),
    }
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) => return invalid(report, format!("cannot read SKILL.md: {e}")),
    };
    let parsed = match frontmatter::parse(&text, &folder_name) {
        Ok(p) => p,
        Err(e) => return invalid(report, e.to_string()),
    };
    report.warnings = parsed.warnings;
    let m = parsed.meta;
    let file_name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut files = Vec::new();
    list_files(&dir, &dir, 0, &mut files);
    files.retain(|f| *f != file_name);
    let scripts = if config.allow_scripts { scripts(&dir) } else { Vec::new() };
    let skill = Skill {
        name: m.name,
        description: m.description,
        license: m.license,
        compatibility: m.compatibility,
        metadata: m.metadata,
        allowed_tools: m.allowed_tools,
        file: dir.join(&file_name),
        dir,
        scope,
        body: parsed.body,
        files,
        scripts,
    };
    (report, Some(skill))
}

/// Regular files under `dir` (no symlinks, no hidden entries), relative to
/// `root`, bounded in depth and count.
fn list_files(root: &Path, dir: &Path, depth: usize, out: &mut Vec<String>) {
    let Ok(read) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = read.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if out.len() >= MAX_LISTED {
            return;
        }
        if skipped(&e.file_name().to_string_lossy()) {
            continue;
        }
        let Ok(ft) = e.file_type() else { continue };
        let path = e.path();
        if ft.is_file() {
            if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        } else if ft.is_dir() && depth + 1 < MAX_DEPTH {
            list_files(root, &path, depth + 1, out);
        }
    }
}

/// The regular files directly under `dir/scripts`, sorted.
fn scripts(dir: &Path) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir.join("scripts")) else { return Vec::new() };
    let mut out: Vec<PathBuf> = read
        .filter_map(Result::ok)
        .filter(|e| !skipped(&e.file_name().to_string_lossy()) && e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// The skills of a running server: the current [`SkillSet`], swapped whole
/// on reload, and the folder watcher that triggers reloads.
pub struct Skills {
    pub config: SkillsConfig,
    dirs: Vec<SkillDir>,
    current: ArcSwap<SkillSet>,
    generation: AtomicU64,
    /// Serializes reloads so generations are stored in order.
    reloading: Mutex<()>,
    watcher: Mutex<Option<watch::Watcher>>,
}

impl Skills {
    /// Scans the configured folders (no watching yet, see [`Skills::watch`]).
    pub fn load(config: &SkillsConfig) -> Arc<Skills> {
        let dirs = config.resolved_dirs();
        let set = SkillSet::scan(&dirs, config, 1);
        log_reports(&set);
        Arc::new(Skills {
            config: config.clone(),
            dirs,
            current: ArcSwap::from_pointee(set),
            generation: AtomicU64::new(1),
            reloading: Mutex::new(()),
            watcher: Mutex::new(None),
        })
    }

    /// The current version of every skill.
    pub fn current(&self) -> Arc<SkillSet> {
        self.current.load_full()
    }

    /// The configured folders, resolved.
    pub fn dirs(&self) -> &[SkillDir] {
        &self.dirs
    }

    /// Scans again and swaps the new set in with one store.
    pub fn reload(&self) {
        let _serial = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let set = SkillSet::scan(&self.dirs, &self.config, generation);
        log_reports(&set);
        tracing::info!(skills = set.len(), invalid = set.invalid(), "skills reloaded");
        self.current.store(Arc::new(set));
    }

    /// Starts watching the folders that exist (when `auto_reload` is on).
    /// Idempotent; a watcher that cannot start is logged, not fatal.
    pub fn watch(self: &Arc<Self>) {
        if !self.config.auto_reload {
            return;
        }
        let Ok(mut slot) = self.watcher.lock() else { return };
        if slot.is_some() {
            return;
        }
        match watch::Watcher::start(Arc::downgrade(self), &self.dirs) {
            Ok(w) => *slot = Some(w),
            Err(e) => tracing::warn!("skill folders are not watched (restart to pick up changes): {e}"),
        }
    }
}

/// Logs what a scan could not load and what it tolerated.
fn log_reports(set: &SkillSet) {
    for r in set.reports() {
        if let Status::Invalid(why) = &r.status {
            tracing::warn!(skill = %r.name, path = %r.path.display(), "skill not loaded: {why}");
        }
        for w in &r.warnings {
            tracing::warn!(skill = %r.name, path = %r.path.display(), "{w}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn later_folders_override_and_bad_skills_are_reported() {
        let user = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        write(user.path(), "a/SKILL.md", "---\nname: a\ndescription: user a\n---\nbody");
        write(user.path(), "b/skill.md", "---\nname: b\ndescription: user b\n---\nbody b");
        write(user.path(), "b/references/x.md", "x");
        write(user.path(), "b/.hidden", "x");
        write(project.path(), "a/SKILL.md", "---\nname: a\ndescription: project a\n---\n");
        write(project.path(), "bad/SKILL.md", "---\nname: Bad\ndescription: d\n---\n");
        write(project.path(), "notes/README.md", "not a skill");
        let dirs = [
            SkillDir { path: user.path().into(), scope: Scope::User },
            SkillDir { path: project.path().into(), scope: Scope::Project },
            SkillDir { path: project.path().join("missing"), scope: Scope::Project },
        ];
        let set = SkillSet::scan(&dirs, &SkillsConfig::default(), 7);
        assert_eq!(set.generation, 7);
        assert_eq!(set.len(), 2);
        assert_eq!(set.get("a").unwrap().description, "project a");
        assert_eq!(set.get("a").unwrap().scope, Scope::Project);
        assert_eq!(set.get("b").unwrap().files, ["references/x.md"]);
        assert_eq!(set.get("b").unwrap().body, "body b");
        let st: Vec<(&str, &Status)> = set.reports().iter().map(|r| (r.name.as_str(), &r.status)).collect();
        assert!(matches!(st[0], ("a", Status::Overridden(_))), "{st:?}");
        assert!(matches!(st[2], ("a", Status::Ok)), "{st:?}");
        assert!(matches!(st[3], ("bad", Status::Invalid(why)) if why.contains("lowercase")), "{st:?}");
        assert_eq!(set.invalid(), 1);
    }

    #[test]
    fn reload_swaps_a_whole_new_set() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a/SKILL.md", "---\nname: a\ndescription: one\n---\n");
        let cfg =
            SkillsConfig { dirs: vec![dir.path().display().to_string()], auto_reload: false, ..Default::default() };
        let skills = Skills::load(&cfg);
        let before = skills.current();
        write(dir.path(), "a/SKILL.md", "---\nname: a\ndescription: two\n---\n");
        skills.reload();
        assert_eq!(before.get("a").unwrap().description, "one", "a held version never changes");
        let after = skills.current();
        assert_eq!(after.get("a").unwrap().description, "two");
        assert!(after.generation > before.generation);
    }
}
