//! The `[skills]` config section: where skills live and what they may do.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// `[skills]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillsConfig {
    /// `false` turns skills off even when skill folders exist.
    #[serde(default = "d_true")]
    pub enabled: bool,
    /// Skill folders, user level first, project level last; a later folder's
    /// skill overrides an earlier one of the same name. `~` is the home
    /// directory; relative paths are relative to the working directory.
    #[serde(default = "d_dirs")]
    pub dirs: Vec<String>,
    /// Watch the folders and reload on change.
    #[serde(default = "d_true")]
    pub auto_reload: bool,
    /// Offer the executables under a skill's `scripts/` as tools.
    #[serde(default)]
    pub allow_scripts: bool,
    /// Time limit of one script run.
    #[serde(default = "d_script_timeout")]
    pub script_timeout_secs: f64,
    /// Largest file `read_skill_file` returns (and largest SKILL.md loaded).
    #[serde(default = "d_max_file")]
    pub max_file_bytes: u64,
    /// Bytes of a script's standard output kept as its result.
    #[serde(default = "d_max_output")]
    pub max_output_bytes: usize,
    /// The system-message section; `{skills}` is replaced by the list of
    /// skills. Default: `skills::prompt::DEFAULT_TEMPLATE`.
    #[serde(default)]
    pub prompt_template: Option<String>,
    /// Characters the skills section may take in the system message (it is
    /// sent with every upstream call). Beyond it descriptions are
    /// shortened, then only names are listed, and the model gets a
    /// `search_skills` tool. Default 16,000 (Claude Code's fallback budget).
    #[serde(default = "d_catalog_max")]
    pub catalog_max_chars: usize,
}

impl Default for SkillsConfig {
    fn default() -> Self {
        SkillsConfig {
            enabled: true,
            dirs: d_dirs(),
            auto_reload: true,
            allow_scripts: false,
            script_timeout_secs: d_script_timeout(),
            max_file_bytes: d_max_file(),
            max_output_bytes: d_max_output(),
            prompt_template: None,
            catalog_max_chars: d_catalog_max(),
        }
    }
}

/// Where a skill folder sits: a user's own skills, or the project's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    User,
    Project,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Project => "project",
        }
    }
}

/// One configured folder, resolved.
#[derive(Debug, Clone)]
pub struct SkillDir {
    pub path: PathBuf,
    pub scope: Scope,
}

impl SkillsConfig {
    pub fn script_timeout(&self) -> Duration {
        super::tools::secs(self.script_timeout_secs)
    }

    /// The folders in order, `~` expanded. A folder under the home directory
    /// (and not under the working directory) is user level, any other is
    /// project level.
    pub fn resolved_dirs(&self) -> Vec<SkillDir> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let cwd = std::env::current_dir().ok();
        self.dirs
            .iter()
            .map(|d| {
                let path = expand(d, home.as_deref());
                let joined = if path.is_absolute() {
                    path.clone()
                } else {
                    cwd.as_deref().map_or(path.clone(), |c| c.join(&path))
                };
                // `./skills` reads better as `<cwd>/skills` in logs and listings.
                let abs: PathBuf = joined.components().filter(|c| *c != std::path::Component::CurDir).collect();
                let under = |base: &Option<PathBuf>| base.as_deref().is_some_and(|b| abs.starts_with(b));
                let scope =
                    if d.starts_with('~') || (under(&home) && !under(&cwd)) { Scope::User } else { Scope::Project };
                SkillDir { path: abs, scope }
            })
            .collect()
    }
}

/// `~` and `~/…` against the home directory.
fn expand(dir: &str, home: Option<&Path>) -> PathBuf {
    match (dir.strip_prefix('~'), home) {
        (Some(rest), Some(h)) if rest.is_empty() || rest.starts_with('/') => h.join(rest.trim_start_matches('/')),
        _ => PathBuf::from(dir),
    }
}

fn d_true() -> bool {
    true
}
fn d_dirs() -> Vec<String> {
    vec!["~/.modelshim/skills".into(), "./skills".into()]
}
fn d_script_timeout() -> f64 {
    30.0
}
fn d_max_file() -> u64 {
    256 * 1024
}
fn d_catalog_max() -> usize {
    16_000
}
fn d_max_output() -> usize {
    64 * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tilde_expands_and_sets_the_scope() {
        assert_eq!(expand("~/.x/skills", Some(Path::new("/home/a"))), PathBuf::from("/home/a/.x/skills"));
        assert_eq!(expand("~", Some(Path::new("/home/a"))), PathBuf::from("/home/a/"));
        assert_eq!(expand("~bob/x", Some(Path::new("/home/a"))), PathBuf::from("~bob/x"));
        let c = SkillsConfig { dirs: vec!["~/s".into(), "/opt/skills".into()], ..Default::default() };
        let d = c.resolved_dirs();
        assert_eq!(d[0].scope, Scope::User);
        assert_eq!(d[1].scope, Scope::Project);
    }
}
