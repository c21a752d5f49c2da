//! Agent Skills (agentskills.io): folders of instructions the model loads on
//! demand. This module owns the registry: the configured folders are scanned
//! (user level first, project level last; a later skill overrides an earlier
//! one of the same name) into an immutable [`SkillSet`], which [`Skills`]
//! swaps whole on reload, so a reader holds one version from start to end.
//!
//! The rest of the feature: [`frontmatter`] (SKILL.md parsing and
//! validation), [`prompt`] (the system-message section), [`gate`] (tools
//! offered only once their skill was read), [`watch`] (hot reload). The
//! tools that read skills and run their scripts are in `tools/`
//! (`skill_readers`, `skill_scripts`); the agent loop is what uses them.

pub use crate::config::skills as config;
pub mod frontmatter;
pub mod gate;
pub mod prompt;
mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

pub use config::{Scope, SkillDir, SkillsConfig};

/// The tools that disclose skills to the model (`tools::skill_readers`).
pub const READ_SKILL: &str = "read_skill";
pub const READ_SKILL_FILE: &str = "read_skill_file";
pub const SEARCH_SKILLS: &str = "search_skills";

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
    /// The skill's folder (canonical): where its SKILL.md is, which for a
    /// SKILL.md linked from another skills folder is the link's target's.
    pub dir: PathBuf,
    /// Its SKILL.md (canonical).
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
    /// The skill's name when valid, else the folder name.
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
        // A SKILL.md may be a link into another skill folder under any of these.
        let roots: Vec<PathBuf> = dirs.iter().filter_map(|d| d.path.canonicalize().ok()).collect();
        for d in dirs {
            for folder in skill_folders(&d.path) {
                let (report, skill) = load(&folder, d.scope, config, &roots);
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

/// The folders under a skills directory that have a SKILL.md (or
/// skill.md) entry of any kind — a dangling link too, so it is reported —
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

const SKILL_FILES: [&str; 2] = ["SKILL.md", "skill.md"];

/// A folder's SKILL.md entry, else its skill.md (not followed if a link).
fn skill_md(folder: &Path) -> Option<PathBuf> {
    SKILL_FILES.iter().map(|n| folder.join(n)).find(|p| std::fs::symlink_metadata(p).is_ok())
}

/// The skill's folder and its SKILL.md, both canonical. SKILL.md is
/// confined like every other file of the skill: it is in its folder, or it
/// is a link to a file named SKILL.md under one of the configured skills
/// folders (`roots`) — a linked collection — whose folder then is the
/// skill's folder (supporting files are listed and read from there). A
/// link anywhere else, and a dangling link, are refused with the reason.
fn resolve(entry: &Path, own: &Path, roots: &[PathBuf]) -> Result<(PathBuf, PathBuf), String> {
    let name = entry.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let is_link = std::fs::symlink_metadata(entry).is_ok_and(|m| m.file_type().is_symlink());
    let real = match entry.canonicalize() {
        Ok(r) => r,
        Err(_) if is_link => {
            let to = std::fs::read_link(entry).map(|t| t.display().to_string()).unwrap_or_default();
            return Err(format!("{name} is a dangling link (to {to})"));
        }
        Err(e) => return Err(format!("cannot read {name}: {e}")),
    };
    if real.starts_with(own) {
        return Ok((own.to_path_buf(), real));
    }
    let named = real.file_name().is_some_and(|n| SKILL_FILES.iter().any(|s| n == *s));
    if let Some(folder) = real.parent()
        && named
        && roots.iter().any(|r| folder.starts_with(r) && folder != r)
    {
        return Ok((folder.to_path_buf(), real));
    }
    Err(format!(
        "{name} is a link to {}, outside its folder and not the SKILL.md of a skill under a configured skills folder",
        real.display()
    ))
}

/// Why a capped read failed.
#[derive(Debug)]
pub enum ReadError {
    NotAFile,
    /// More than the cap was there.
    TooLarge,
    Io(std::io::Error),
}

/// Reads a regular file, at most `max` bytes: the cap is on what is read,
/// not on `stat` (a file in /proc says size 0 and can go on for gigabytes).
/// Opened non-blocking, so a FIFO swapped in after the check cannot hang.
pub fn read_capped(path: &Path, max: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut opts, libc::O_NONBLOCK);
    if !std::fs::metadata(path).map_err(ReadError::Io)?.is_file() {
        return Err(ReadError::NotAFile);
    }
    let file = opts.open(path).map_err(ReadError::Io)?;
    if !file.metadata().map_err(ReadError::Io)?.is_file() {
        return Err(ReadError::NotAFile);
    }
    let mut buf = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut buf).map_err(ReadError::Io)?;
    if buf.len() as u64 > max {
        return Err(ReadError::TooLarge);
    }
    Ok(buf)
}

/// Loads one skill folder.
fn load(folder: &Path, scope: Scope, config: &SkillsConfig, roots: &[PathBuf]) -> (Report, Option<Skill>) {
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
    let (Some(entry), Ok(own)) = (skill_md(folder), folder.canonicalize()) else {
        return invalid(report, "the folder cannot be read".into());
    };
    let (dir, file) = match resolve(&entry, &own, roots) {
        Ok(x) => x,
        Err(why) => return invalid(report, why),
    };
    let max = config.max_file_bytes;
    let text = match read_capped(&file, max) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(t) => t,
            Err(_) => return invalid(report, "SKILL.md is not UTF-8 text".into()),
        },
        Err(ReadError::TooLarge) => return invalid(report, format!("SKILL.md is larger than {max} bytes")),
        Err(ReadError::NotAFile) => return invalid(report, "SKILL.md is not a regular file".into()),
        Err(ReadError::Io(e)) => return invalid(report, format!("cannot read SKILL.md: {e}")),
    };
    let parsed = match frontmatter::parse(&text, &folder_name) {
        Ok(p) => p,
        Err(e) => return invalid(report, e.to_string()),
    };
    report.warnings = parsed.warnings;
    if dir != own {
        report.warnings.push(format!("SKILL.md links to {}; its files are read from there", dir.display()));
    }
    let m = parsed.meta;
    report.name = m.name.clone();
    let own_rel = file.strip_prefix(&dir).map(|r| r.to_string_lossy().replace('\\', "/")).unwrap_or_default();
    let mut files = Vec::new();
    list_files(&dir, &dir, 0, &mut files);
    files.retain(|f| *f != own_rel);
    let scripts = if config.allow_scripts { scripts(&dir) } else { Vec::new() };
    let skill = Skill {
        name: m.name,
        description: m.description,
        license: m.license,
        compatibility: m.compatibility,
        metadata: m.metadata,
        allowed_tools: m.allowed_tools,
        file,
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
        write(project.path(), "bad/SKILL.md", "---\nname: [Bad\ndescription: d\n---\n");
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
        assert!(matches!(st[3], ("bad", Status::Invalid(why)) if why.contains("not valid YAML")), "{st:?}");
        assert_eq!(set.invalid(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn a_skill_md_linked_out_of_its_folder_is_refused_and_a_dangling_one_reported() {
        use std::os::unix::fs::symlink;
        let root = tempfile::tempdir().unwrap();
        let skills = root.path().join("skills");
        write(root.path(), "secret.md", "---\nname: evil\ndescription: SECRET\n---\nSECRET");
        write(root.path(), "elsewhere/x/SKILL.md", "---\nname: far\ndescription: far\n---\n");
        write(root.path(), "elsewhere/x/private.txt", "PRIVATE");
        for (folder, target) in [
            ("evil", root.path().join("secret.md")),
            ("far", root.path().join("elsewhere/x/SKILL.md")),
            ("pagemap", "/proc/self/pagemap".into()),
            ("gone", root.path().join("missing/SKILL.md")),
        ] {
            std::fs::create_dir_all(skills.join(folder)).unwrap();
            symlink(target, skills.join(folder).join("SKILL.md")).unwrap();
        }
        let dirs = [SkillDir { path: skills.clone(), scope: Scope::Project }];
        let set = SkillSet::scan(&dirs, &SkillsConfig::default(), 1);
        assert!(set.is_empty(), "{:?}", set.iter().map(|s| &s.name).collect::<Vec<_>>());
        let why = |n: &str| match &set.reports().iter().find(|r| r.name == n).unwrap().status {
            Status::Invalid(w) => w.clone(),
            other => panic!("{n}: {other:?}"),
        };
        for n in ["evil", "far", "pagemap"] {
            assert!(why(n).contains("outside its folder"), "{n}: {}", why(n));
        }
        assert!(why("gone").contains("dangling link"), "{}", why("gone"));
        assert_eq!(set.invalid(), 4);
    }

    #[cfg(unix)]
    #[test]
    fn a_skill_md_linked_into_another_skills_folder_uses_the_linked_folders_files() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        write(b.path(), "pdf/SKILL.md", "---\nname: pdf\ndescription: PDFs\n---\nPDF BODY");
        write(b.path(), "pdf/references/forms.md", "FORMS");
        write(a.path(), "pdf/notes.md", "not the skill's");
        std::os::unix::fs::symlink(b.path().join("pdf/SKILL.md"), a.path().join("pdf/SKILL.md")).unwrap();
        // The linked collection first, so the link's skill is the one kept.
        let dirs = [
            SkillDir { path: b.path().into(), scope: Scope::User },
            SkillDir { path: a.path().into(), scope: Scope::Project },
        ];
        let set = SkillSet::scan(&dirs, &SkillsConfig::default(), 1);
        let s = set.get("pdf").unwrap();
        assert_eq!(s.scope, Scope::Project);
        assert_eq!(s.dir, b.path().join("pdf").canonicalize().unwrap());
        assert_eq!(s.body, "PDF BODY");
        assert_eq!(s.files, ["references/forms.md"]);
        assert!(set.reports()[1].warnings.iter().any(|w| w.contains("links to")), "{:?}", set.reports());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_are_capped_on_what_is_read_not_on_stat() {
        // Both say size 0; status has ~1.5 KB, pagemap gigabytes (read in 8-byte entries only).
        assert_eq!(std::fs::metadata("/proc/self/status").unwrap().len(), 0);
        assert!(matches!(read_capped(Path::new("/proc/self/status"), 100), Err(ReadError::TooLarge)));
        assert!(read_capped(Path::new("/proc/self/status"), 100_000).is_ok());
        assert!(read_capped(Path::new("/proc/self/pagemap"), 4096).is_err());
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "f", "12345");
        assert_eq!(read_capped(&d.path().join("f"), 5).unwrap(), b"12345");
        assert!(matches!(read_capped(&d.path().join("f"), 4), Err(ReadError::TooLarge)));
        let fifo = d.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert!(matches!(read_capped(&fifo, 10), Err(ReadError::NotAFile)));
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
