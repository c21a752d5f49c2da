//! The pinned official OpenAI Python SDK (and, in a venv of its own, the
//! OpenAI Agents SDK, and the Anthropic SDK) in the machine's test cache
//! ([`sdk_dir`]), installed on first use (shared by the SDK conformance tests).

use std::path::{Path, PathBuf};
use std::process::Command;

pub const PYTHON_OPENAI: &str = "3.57.0";
/// The Agents SDK version (the newest that works with [`PYTHON_OPENAI`]).
pub const PYTHON_AGENTS: &str = "0.24.0";

/// Where pinned clients are installed: once per machine, not per checkout
/// or target dir, so a fresh clone reuses them (each install checks its pins
/// and runs under [`locked`]). `MODELSHIM_TEST_CACHE` moves it.
pub fn sdk_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("MODELSHIM_TEST_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|d| !d.is_empty()).map(|h| Path::new(&h).join(".cache")));
    match cache {
        Some(c) => c.join("modelshim-tests"),
        None => Path::new(env!("CARGO_TARGET_TMPDIR")).join("sdk"),
    }
}

/// Copies `source` to `dir/name` through a temp file renamed into place, so
/// concurrent tests (or checkouts sharing [`sdk_dir`]) never read half a file.
pub fn place(source: &Path, dir: &Path, name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let tmp = dir.join(format!(".{name}.{}.{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    std::fs::copy(source, &tmp).unwrap_or_else(|e| panic!("copy {}: {e}", source.display()));
    let target = dir.join(name);
    std::fs::rename(&tmp, &target).unwrap_or_else(|e| panic!("place {}: {e}", target.display()));
    target
}

/// Runs a command; its combined output, or an error with the output.
pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() { Ok(text) } else { Err(format!("{cmd:?} failed:\n{text}")) }
}

#[allow(dead_code)] // not every test binary runs the plain SDK
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

/// The official Anthropic Python SDK (tests/it/messages.rs), in a venv of its own.
#[allow(dead_code)]
pub const PYTHON_ANTHROPIC: &str = "2.15.0";

/// A venv with the pinned `anthropic` package; returns its python.
#[allow(dead_code)]
pub fn anthropic_env() -> PathBuf {
    let pins = [format!("anthropic=={PYTHON_ANTHROPIC}")];
    pinned_env("venv-anthropic", &pins, &pins_probe(&pins))
}

/// The client libraries of tests/it/clients.rs that work with [`PYTHON_OPENAI`]
/// (LangChain 1.x, LangGraph, litellm, pydantic-ai), pinned.
#[allow(dead_code)]
pub const PYTHON_CLIENTS: &[&str] = &[
    "langchain-openai==1.7.4",
    "langchain-core==1.8.3",
    "langgraph==1.2.24",
    "litellm==1.110.2",
    "pydantic-ai-slim[openai]==2.68.0",
];
/// LlamaIndex and instructor cap `openai` below 3 (instructor also conflicts
/// with [`PYTHON_OPENAI`]'s deps): a venv of their own with this `openai`.
#[allow(dead_code)]
pub const PYTHON_OPENAI_2: &str = "2.54.0";
#[allow(dead_code)]
pub const PYTHON_LLAMAINDEX: &[&str] = &[
    "llama-index-core==0.14.25",
    "llama-index-llms-openai==0.8.3",
    "llama-index-llms-openai-like==0.8.1",
    "instructor==1.17.0",
];

#[allow(dead_code)]
/// A probe that every `name==version` of `pins` is installed.
fn pins_probe(pins: &[String]) -> String {
    let pairs: Vec<String> = pins
        .iter()
        .map(|p| {
            let (name, version) = p.split_once("==").expect("exact pin");
            let name = name.split('[').next().unwrap_or(name);
            format!("({name:?}, {version:?})")
        })
        .collect();
    format!("import importlib.metadata as m, sys; sys.exit(any(m.version(n) != v for n, v in [{}]))", pairs.join(", "))
}

/// The venv of [`PYTHON_CLIENTS`] (with the pinned `openai`); its python.
#[allow(dead_code)]
pub fn clients_env() -> PathBuf {
    let mut pins = vec![format!("openai=={PYTHON_OPENAI}")];
    pins.extend(PYTHON_CLIENTS.iter().map(|p| p.to_string()));
    pinned_env("venv-clients", &pins, &pins_probe(&pins))
}

/// The venv of [`PYTHON_LLAMAINDEX`] (with [`PYTHON_OPENAI_2`]); its python.
#[allow(dead_code)]
pub fn llamaindex_env() -> PathBuf {
    let mut pins = vec![format!("openai=={PYTHON_OPENAI_2}")];
    pins.extend(PYTHON_LLAMAINDEX.iter().map(|p| p.to_string()));
    pinned_env("venv-llamaindex", &pins, &pins_probe(&pins))
}

/// A venv `name` under [`sdk_dir`] with `packages` installed, unless
/// `probe` (a Python snippet exiting 0) says it is already there.
fn pinned_env(name: &str, packages: &[String], probe: &str) -> PathBuf {
    let venv = sdk_dir().join(name);
    let py = venv.join("bin/python");
    locked(
        name,
        || run(Command::new(&py).args(["-c", probe])).is_ok(),
        || {
            run(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&venv))
                .and_then(|_| run(Command::new(&py).args(["-m", "pip", "install", "--quiet"]).args(packages)))
                .map(drop)
        },
    );
    py
}

/// Runs `install` unless `ready` says it is done, under a lock file
/// `name.lock` in [`sdk_dir`] so concurrent test binaries install once.
pub fn locked(name: &str, ready: impl Fn() -> bool, install: impl FnOnce() -> Result<(), String>) {
    std::fs::create_dir_all(sdk_dir()).expect("sdk dir");
    let lock = sdk_dir().join(format!("{name}.lock"));
    let mut install = Some(install);
    for _ in 0..1200 {
        if ready() {
            return;
        }
        // A lock left by a killed run is taken over after ten minutes.
        let stale = std::fs::metadata(&lock)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|e| e > std::time::Duration::from_secs(600)));
        if stale {
            let _ = std::fs::remove_file(&lock);
        }
        if std::fs::OpenOptions::new().write(true).create_new(true).open(&lock).is_ok() {
            let result = if ready() { Ok(()) } else { (install.take().expect("installed once"))() };
            let _ = std::fs::remove_file(&lock);
            result.unwrap_or_else(|e| panic!("installing {name}: {e}"));
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("timed out waiting for another test to install {name}");
}

/// Playwright for Python, pinned: its driver comes in the wheel; the browser is Debian's.
pub const PLAYWRIGHT: &str = "1.65.2";

/// The venv with the pinned Playwright for Python (its driver comes in the
/// wheel; the browser is Debian's).
pub fn playwright_env() -> PathBuf {
    let venv = sdk_dir().join("venv-playwright");
    let py = venv.join("bin/python");
    let probe = format!("import importlib.metadata as m, sys; sys.exit(m.version('playwright') != {PLAYWRIGHT:?})");
    locked(
        "venv-playwright",
        || run(Command::new(&py).args(["-c", &probe])).is_ok(),
        || {
            run(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&venv))
                .and_then(|_| {
                    run(Command::new(&py)
                        .args(["-m", "pip", "install", "--quiet"])
                        .arg(format!("playwright=={PLAYWRIGHT}")))
                })
                .map(drop)
        },
    );
    py
}
