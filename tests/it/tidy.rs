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
    &["metrics", "recorder"],
    &["toolcall"],
    &["openai"],
    &["config", "redact", "idle", "logline"],
];

/// Shared by the fronts: not a front.
const FRONT_COMMON: &[&str] = &["sse", "drive"];

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
                let head = segments(after);
                let path_len: usize = after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .map(char::len_utf8)
                    .sum();
                // `crate::a::{b, c::d}`: one path per item.
                match after[path_len..].strip_prefix('{') {
                    Some(group) if !head.is_empty() => {
                        let end = group.find('}').unwrap_or(group.len());
                        for item in group[..end].split(',') {
                            let mut p = head.clone();
                            p.extend(segments(item.trim()));
                            out.push(p);
                        }
                    }
                    _ => out.push(head),
                }
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
    let text = "use crate::a::b;\nuse crate::{c::d, e};\nuse crate::x::{y, z::w};\nfn f() { crate::g::h(); } // crate::comment\n#[cfg(test)]\nuse crate::t;";
    let got = crate_paths(&code(text));
    let got: Vec<String> = got.iter().map(|p| p.join("::")).collect();
    assert_eq!(got, ["a::b", "c::d", "e", "x::y", "x::z::w", "g::h"]);
}

/// Folders whose files must form no circle among themselves (the folder's
/// `mod.rs` counts as a file; its `pub use` re-exports are resolved to the
/// file they come from).
const NO_FILE_CIRCLES: &[&str] = &["core", "provider", "toolcall", "stream", "spend", "state", "tools", "server"];

/// The files of `folder` (as module paths below it: `agent`, `agent::splice`,
/// `` for mod.rs) and, per file, the files of the same folder it names.
fn file_graph(folder: &str) -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(folder);
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let module = |f: &Path| -> Vec<String> {
        let rel = f.strip_prefix(&root).unwrap();
        let mut parts: Vec<String> =
            rel.iter().map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        parts
    };
    let modules: Vec<Vec<String>> = files.iter().map(|f| module(f)).collect();
    // Names re-exported by a mod.rs: `pub use a::{b, c}` makes `b` and `c` stand for `a`.
    let mut reexports: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
    for (f, m) in files.iter().zip(&modules) {
        if !f.ends_with("mod.rs") {
            continue;
        }
        let code = code(&std::fs::read_to_string(f).unwrap());
        for line in code.lines().map(str::trim).filter(|l| l.starts_with("pub use ")) {
            let body = line.trim_start_matches("pub use ").trim_end_matches(';');
            let body = body.strip_prefix("self::").unwrap_or(body);
            let (head, names) = match body.split_once("::{") {
                Some((h, rest)) => (h.to_string(), rest.trim_end_matches('}').to_string()),
                None => match body.rsplit_once("::") {
                    Some((h, n)) => (h.to_string(), n.to_string()),
                    None => continue,
                },
            };
            if head.starts_with("crate") || head.starts_with("super") {
                continue;
            }
            let mut target = m.clone();
            target.extend(head.split("::").map(str::to_string));
            for n in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                reexports.insert((m.clone(), n.to_string()), target.clone());
            }
        }
    }
    // The longest file module a path below the folder starts with.
    let resolve = |path: &[String]| -> Option<Vec<String>> {
        let mut best: Option<Vec<String>> = None;
        for m in &modules {
            if path.starts_with(m) && best.as_ref().is_none_or(|b| m.len() > b.len()) {
                best = Some(m.clone());
            }
        }
        let best = best?;
        if let Some(next) = path.get(best.len())
            && let Some(t) = reexports.get(&(best.clone(), next.clone()))
        {
            return Some(t.clone());
        }
        Some(best)
    };
    let mut graph = BTreeMap::new();
    for (f, m) in files.iter().zip(&modules) {
        let code = code(&std::fs::read_to_string(f).unwrap());
        let is_mod = f.ends_with("mod.rs");
        let mut to = std::collections::BTreeSet::new();
        let mut paths: Vec<Vec<String>> =
            crate_paths(&code).into_iter().filter(|p| p[0] == folder).map(|p| p[1..].to_vec()).collect();
        // `super::x` from a file is its parent module's `x`; `self::x` from mod.rs is its own.
        for (prefix, base) in [("super::", m.len().saturating_sub(1)), ("self::", m.len())] {
            let mut rest = code.as_str();
            while let Some(i) = rest.find(prefix) {
                let after = &rest[i + prefix.len()..];
                let preceded =
                    rest[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
                if !preceded {
                    let mut p: Vec<String> = m[..base.min(m.len())].to_vec();
                    let items: Vec<Vec<String>> = match after.strip_prefix('{') {
                        Some(g) => g[..g.find('}').unwrap_or(g.len())].split(',').map(|i| segments(i.trim())).collect(),
                        None => vec![segments(after)],
                    };
                    for item in items.into_iter().filter(|i| !i.is_empty() && i[0] != "super") {
                        p.truncate(base.min(m.len()));
                        p.extend(item);
                        paths.push(p.clone());
                    }
                }
                rest = after;
            }
        }
        for p in paths {
            if let Some(t) = resolve(&p).filter(|t| t != m) {
                // A parent module's re-export lines are not an arrow to its children.
                if is_mod && t.starts_with(m) && t.len() > m.len() && reexported_only(&code, &t[m.len()]) {
                    continue;
                }
                to.insert(t.join("::"));
            }
        }
        graph.insert(m.join("::"), to);
    }
    graph
}

/// Whether a mod.rs names its child `child` only in `mod`/`pub use` lines.
fn reexported_only(code: &str, child: &str) -> bool {
    code.lines().map(str::trim).filter(|l| l.contains(child)).all(|l| {
        l.starts_with("pub use ")
            || l.starts_with("pub mod ")
            || l.starts_with("mod ")
            || l.starts_with("pub(crate) mod ")
    })
}

/// The circles of a graph: its strongly connected components of two or more files.
fn circles(graph: &BTreeMap<String, std::collections::BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &str| {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(n) = todo.pop() {
            for t in graph.get(&n).into_iter().flatten() {
                if seen.insert(t.clone()) {
                    todo.push(t.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, std::collections::BTreeSet<String>> = graph.keys().map(|k| (k, reach(k))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for k in graph.keys() {
        let mut c: Vec<String> =
            graph.keys().filter(|o| *o != k && reached[k].contains(*o) && reached[*o].contains(k)).cloned().collect();
        if c.is_empty() {
            continue;
        }
        c.push(k.clone());
        c.sort();
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

#[test]
fn files_within_a_folder_form_no_circle() {
    let mut found = BTreeMap::new();
    for folder in NO_FILE_CIRCLES {
        let c = circles(&file_graph(folder));
        if !c.is_empty() {
            found.insert(*folder, c);
        }
    }
    assert!(found.is_empty(), "files that name each other in a circle (ARCHITECTURE.md, Layers): {found:#?}");
}

#[test]
fn the_file_checker_sees_a_circle() {
    let mut g: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    g.insert("a".into(), ["b".to_string()].into());
    g.insert("b".into(), ["c".to_string()].into());
    g.insert("c".into(), ["a".to_string()].into());
    g.insert("d".into(), ["a".to_string()].into());
    assert_eq!(circles(&g), vec![vec!["a".to_string(), "b".to_string(), "c".to_string()]]);
}

/// What happens to a request is told to its observer, passed down
/// (`core/context.rs`): no task-local carries request state, so every
/// function that reports or records takes what it reports to. (Thread-locals
/// hold per-thread connection pools, no request's state.)
#[test]
fn no_task_local_carries_a_request() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let found: Vec<String> = files
        .iter()
        .filter(|f| {
            let c = code(&std::fs::read_to_string(f).unwrap());
            c.contains("task_local!")
        })
        .map(|f| f.strip_prefix(&src).unwrap().display().to_string())
        .collect();
    assert!(found.is_empty(), "request state in task-locals: {found:?}");
}
