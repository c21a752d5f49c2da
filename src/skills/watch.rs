//! Hot reload: the skill folders are watched (recursively) and a burst of
//! changes triggers one rescan after a short quiet period. Reads are not
//! changes (the rescan itself opens every SKILL.md), so access events are
//! ignored. The rescan runs on the debouncer's own thread and ends in one
//! atomic swap (see [`super::Skills::reload`]), so requests never wait for it.

use std::sync::Weak;
use std::time::Duration;

use notify_debouncer_full::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};

use super::{SkillDir, Skills};

/// Quiet time after the last change before the rescan (editors write a file
/// in several steps).
const DEBOUNCE: Duration = Duration::from_millis(250);

/// A running watcher; dropping it stops watching.
pub(super) struct Watcher {
    _debouncer: Debouncer<RecommendedWatcher, RecommendedCache>,
}

impl Watcher {
    /// Watches every folder of `dirs` that exists; a missing folder is
    /// skipped (create it and restart to watch it).
    pub(super) fn start(skills: Weak<Skills>, dirs: &[SkillDir]) -> Result<Watcher, String> {
        let mut debouncer = new_debouncer(DEBOUNCE, None, move |res: DebounceEventResult| match res {
            Ok(events) => {
                if events.iter().any(|e| !e.kind.is_access())
                    && let Some(s) = skills.upgrade()
                {
                    s.reload();
                }
            }
            Err(errors) => {
                for e in errors {
                    tracing::warn!("skill folder watch error: {e}");
                }
            }
        })
        .map_err(|e| e.to_string())?;
        let mut watched = 0;
        for d in dirs.iter().filter(|d| d.path.is_dir()) {
            match debouncer.watch(&d.path, RecursiveMode::Recursive) {
                Ok(()) => watched += 1,
                Err(e) => tracing::warn!(path = %d.path.display(), "cannot watch skill folder: {e}"),
            }
        }
        tracing::debug!(folders = watched, "watching skill folders");
        Ok(Watcher { _debouncer: debouncer })
    }
}
