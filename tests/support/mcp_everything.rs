//! The reference MCP server `@modelcontextprotocol/server-everything`, pinned,
//! installed with npm under cargo's target tmp dir on first use (tool names
//! changed between releases, hence the pin).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

pub const VERSION: &str = "2026.8.31";

static INSTALL: Mutex<()> = Mutex::new(());

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

/// Installs `@modelcontextprotocol/{package}@{version}` under cargo's target
/// tmp dir once; its `dist/index.js`.
fn install(folder: &str, package: &str, version: &str) -> PathBuf {
    let _guard = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(folder);
    let pkg = dir.join("node_modules/@modelcontextprotocol").join(package);
    let installed = std::fs::read_to_string(pkg.join("package.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| v["version"] == version);
    if !installed {
        std::fs::create_dir_all(&dir).expect("mcp dir");
        std::fs::write(dir.join("package.json"), r#"{"private": true}"#).expect("package.json");
        let out = Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                &format!("@modelcontextprotocol/{package}@{version}"),
            ])
            .current_dir(&dir)
            .output()
            .expect("npm runs");
        assert!(out.status.success(), "npm install failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    pkg.join("dist/index.js")
}

/// A small MCP server whose tool list changes (tests/support/mcp_dynamic.mjs),
/// copied next to the install so it finds the MCP SDK there.
pub fn dynamic_script() -> PathBuf {
    script(); // installs the SDK the server imports
    let _guard = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-everything");
    let target = dir.join("mcp_dynamic.mjs");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/mcp_dynamic.mjs");
    std::fs::copy(source, &target).expect("copy mcp_dynamic.mjs");
    target
}
