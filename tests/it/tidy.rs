//! The module map stays a map: every `crate::` path in `src/` (outside test
//! modules and comments) must point down the layers below, so arrows between
//! top-level modules run one way and no two of them form a circle; and an API
//! front never names another front (ARCHITECTURE.md, "Layers").


use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level modules, highest first. A module may name only modules of a
/// lower layer (and its own submodules).
const LAYERS: &[&[&str]] = &[
    &["main", "lib", "cli"],
    &["server"],
    &["fronts"],
    &["core"],
    &["telemetry", "error"],
    &["tools"],
    &["skills"],
    &["provider"],
    &["spend"],
    &["stream"],
    &["state", "fixture"],
    &["metrics", "console"],
    &["toolcall"],
    &["openai"],
    &["config", "redact", "idle"],
];

/// Shared by the fronts: not a front.
const FRONT_COMMON: &[&str] = &["sse"];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its test module and comments.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a file names: `crate::a::b` as `["a", "b"]`, also inside
/// `use crate::{a::x, b}` groups.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        let preceded = rest[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_');
        if !preceded {
            if let Some(group) = after.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    out.push(segments(item.trim()));
                }
            } else {
                out.push(segments(after));
            }
        }
        rest = after;
    }
    out.retain(|p| !p.is_empty());
    out
}

fn segments(s: &str) -> Vec<String> {
    let path: String = s.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
    path.split("::").filter(|x| !x.is_empty()).map(str::to_string).collect()
}

#[test]
fn arrows_between_modules_run_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
        let from = parts[0].as_str();
        let from_rank = rank(from).unwrap_or_else(|| panic!("src/{} is in no layer: add it to LAYERS", rel.display()));
        let code = code(&std::fs::read_to_string(f).unwrap());
        if from == "fronts" && parts.len() > 2 {
            // `super` of a front's mod.rs is `fronts`, of its other files the front.
            let up = if parts[2] == "mod" { "super::" } else { "super::super::" };
            for name in code.split(up).skip(1).map(|s| segments(s).into_iter().next().unwrap_or_default()) {
                if name != parts[1] && !FRONT_COMMON.contains(&name.as_str()) && name != "super" {
                    wrong.entry(rel.display().to_string()).or_default().push(format!("{up}{name}"));
                }
            }
        }
        for path in crate_paths(&code) {
            let to = path[0].as_str();
            if to == from {
                // Within fronts: a front names the shared parts, never another front.
                if from == "fronts" && parts.len() > 2 {
                    let (mine, theirs) = (parts[1].as_str(), path.get(1).map(String::as_str).unwrap_or(""));
                    if theirs != mine && !FRONT_COMMON.contains(&theirs) {
                        wrong.entry(rel.display().to_string()).or_default().push(path.join("::"));
                    }
                }
                continue;
            }
            let Some(to_rank) = rank(to) else {
                panic!("src/{} names crate::{to}, which is in no layer: add it to LAYERS", rel.display());
            };
            if to_rank <= from_rank {
                wrong.entry(rel.display().to_string()).or_default().push(path.join("::"));
            }
        }
    }
    assert!(wrong.is_empty(), "arrows against the layers (see LAYERS and ARCHITECTURE.md): {wrong:#?}");
}

#[test]
fn the_checker_sees_every_kind_of_path() {
    let text = "use crate::a::b;\nuse crate::{c::d, e};\nfn f() { crate::g::h(); } // crate::comment\n#[cfg(test)]\nuse crate::t;";
    let got = crate_paths(&code(text));
    let got: Vec<String> = got.iter().map(|p| p.join("::")).collect();
    assert_eq!(got, ["a::b", "c::d", "e", "g::h"]);
}
