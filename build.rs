//! Bundles every `providers/*.toml` profile and `fixtures/demo/*.json`
//! exchange into the binary, so adding a vendor is adding one file.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let out = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    bundle(&root, "providers", "toml", &Path::new(&out).join("bundled_profiles.rs"));
    bundle(&root, "fixtures/demo", "json", &Path::new(&out).join("bundled_demo.rs"));
}

fn bundle(root: &str, dir: &str, ext: &str, dest: &Path) {
    let dir_path = Path::new(root).join(dir);
    println!("cargo:rerun-if-changed={}", dir_path.display());
    let mut entries: Vec<_> =
        std::fs::read_dir(&dir_path).map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect()).unwrap_or_default();
    entries.retain(|p| p.extension().is_some_and(|e| e == ext));
    entries.sort();
    let mut code = String::from("&[\n");
    for p in entries {
        let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        println!("cargo:rerun-if-changed={}", p.display());
        let _ = writeln!(code, "    ({stem:?}, include_str!({:?})),", p.display().to_string());
    }
    code.push(']');
    if let Err(e) = std::fs::write(dest, code) {
        println!("cargo:warning=cannot write {}: {e}", dest.display());
    }
}
