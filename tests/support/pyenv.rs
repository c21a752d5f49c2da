//! The pinned official OpenAI Python SDK in a venv under cargo's target tmp
//! dir, installed on first use (shared by the SDK conformance tests).

use std::path::{Path, PathBuf};
use std::process::Command;

pub const PYTHON_OPENAI: &str = "3.57.0";

pub fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdk")
}

pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() { Ok(text) } else { Err(format!("{cmd:?} failed:\n{text}")) }
}

/// A venv with the pinned `openai` package; returns its python.
pub fn python_env() -> PathBuf {
    let venv = sdk_dir().join("venv");
    let py = venv.join("bin/python");
    let probe = format!("import openai, sys; sys.exit(openai.__version__ != {PYTHON_OPENAI:?})");
    if run(Command::new(&py).args(["-c", &probe])).is_ok() {
        return py;
    }
    std::fs::create_dir_all(sdk_dir()).expect("sdk dir");
    run(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&venv)).expect("python3 -m venv");
    run(Command::new(&py).args(["-m", "pip", "install", "--quiet", &format!("openai=={PYTHON_OPENAI}")]))
        .expect("pip install openai");
    py
}
