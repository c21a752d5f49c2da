//! The reference MCP server `@modelcontextprotocol/server-everything`, pinned,
//! installed with npm in the machine's test cache on first use (tool names
//! changed between releases, hence the pin).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::pyenv::{locked, place, run, sdk_dir};

pub const VERSION: &str = "2026.8.31";

/// The reference filesystem server, pinned like server-everything.
pub const FILESYSTEM_VERSION: &str = "2026.8.31";

/// The server's entry script (`node <script>` runs it on stdio).
pub fn script() -> PathBuf {
    install("mcp-everything", "server-everything", VERSION)
}

/// `@modelcontextprotocol/server-filesystem`'s entry script (`node <script> DIR…`).
pub fn filesystem_script() -> PathBuf {
    install("mcp-filesystem", "server-filesystem", FILESYSTEM_VERSION)
}

/// Installs `@modelcontextprotocol/{package}@{version}` in the machine's test
/// cache once (under a lock, like the venvs); its `dist/index.js`.
fn install(folder: &str, package: &str, version: &str) -> PathBuf {
    let dir = sdk_dir().join(folder);
    let pkg = dir.join("node_modules/@modelcontextprotocol").join(package);
    let ready = || {
        std::fs::read_to_string(pkg.join("package.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|v| v["version"] == version)
    };
    locked(folder, ready, || {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("package.json"), r#"{"private": true}"#).map_err(|e| e.to_string())?;
        run(Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .arg(format!("@modelcontextprotocol/{package}@{version}"))
            .current_dir(&dir))
        .map(drop)
    });
    pkg.join("dist/index.js")
}

/// A small MCP server whose tool list changes (tests/support/mcp_dynamic.mjs),
/// copied next to the install so it finds the MCP SDK there.
pub fn dynamic_script() -> PathBuf {
    script(); // installs the SDK the server imports
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/mcp_dynamic.mjs");
    place(&source, &sdk_dir().join("mcp-everything"), "mcp_dynamic.mjs")
}
