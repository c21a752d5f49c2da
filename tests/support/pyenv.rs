//! The pinned official OpenAI Python SDK (and, in a venv of its own, the
//! OpenAI Agents SDK) under cargo's target tmp dir, installed on first use
//! (shared by the SDK conformance tests).

use std::path::{Path, PathBuf};
use std::process::Command;

pub const PYTHON_OPENAI: &str = "3.57.0";
/// The Agents SDK version (the newest that works with [`PYTHON_OPENAI`]).
pub const PYTHON_AGENTS: &str = "0.24.0";

pub fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdk")
}

/// Runs a command; its combined output, or an error with the output.
pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() { Ok(text) } else { Err(format!("{cmd:?} failed:\n{text}")) }
}

/// A venv with the pinned `openai` package; returns its python. A lock file
/// keeps concurrent test binaries from installing at once.
pub fn python_env() -> PathBuf {
    let probe = format!("import openai, sys; sys.exit(openai.__version__ != {PYTHON_OPENAI:?})");
    pinned_env("venv", &[format!("openai=={PYTHON_OPENAI}")], &probe)
}

/// The OpenAI Agents SDK, pinned, with the same pinned `openai`, in a venv
/// of its own so the plain SDK's venv stays exactly what it pins.
#[allow(dead_code)] // not every test binary runs the Agents SDK
pub fn agents_env() -> PathBuf {
    let probe = format!(
        "import importlib.metadata as m, sys; sys.exit(m.version('openai') != {PYTHON_OPENAI:?} or m.version('openai-agents') != {PYTHON_AGENTS:?})"
    );
    pinned_env("venv-agents", &[format!("openai=={PYTHON_OPENAI}"), format!("openai-agents=={PYTHON_AGENTS}")], &probe)
}

/// A venv `name` under [`sdk_dir`] with `packages` installed, unless
/// `probe` (a Python snippet exiting 0) says it is already there.
fn pinned_env(name: &str, packages: &[String], probe: &str) -> PathBuf {
    let venv = sdk_dir().join(name);
    let py = venv.join("bin/python");
    std::fs::create_dir_all(sdk_dir()).expect("sdk dir");
    let lock = sdk_dir().join(format!("{name}.lock"));
    for _ in 0..600 {
        if run(Command::new(&py).args(["-c", probe])).is_ok() {
            return py;
        }
        // A lock left by a killed run is taken over after ten minutes.
        let stale = std::fs::metadata(&lock)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|e| e > std::time::Duration::from_secs(600)));
        if stale {
            let _ = std::fs::remove_file(&lock);
        }
        if std::fs::OpenOptions::new().write(true).create_new(true).open(&lock).is_ok() {
            let result = run(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&venv))
                .and_then(|_| run(Command::new(&py).args(["-m", "pip", "install", "--quiet"]).args(packages)));
            let _ = std::fs::remove_file(&lock);
            result.unwrap_or_else(|e| panic!("installing {packages:?}: {e}"));
            return py;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("timed out waiting for another test to install {packages:?}");
}
