//! Tool names the vendor sees for Responses tools chat completions cannot
//! name as they are: the function tools of a `namespace` tool (Codex's
//! `{"type": "namespace", "name": "multi_agent_v1", "tools": [...]}`) and
//! `custom` (free-form input) tools. Each becomes one chat function under a
//! vendor-safe name (`^[a-zA-Z0-9_-]{1,64}$`): `<namespace>__<name>` when
//! that is safe and free, else a shortened form with a hash of the pair, so
//! the name is the same on every turn and never collides. A call to it goes
//! back to the client as the namespace and tool it declared.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

/// What the client declared behind a flattened name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub namespace: Option<String>,
    pub name: String,
    /// A `custom` tool: its one argument `input` is the call's raw input.
    pub custom: bool,
}

/// Flattened name ↔ declared tool, for one request.
#[derive(Debug, Clone, Default)]
pub struct Names {
    by_flat: BTreeMap<String, Target>,
    by_target: BTreeMap<(Option<String>, String), String>,
    /// Every name offered to the vendor (plain functions too).
    taken: BTreeSet<String>,
}

const MAX: usize = 64;

fn safe(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fn sanitize(s: &str) -> String {
    s.chars().map(|c| if safe(c) { c } else { '_' }).collect()
}

fn is_safe(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX && s.chars().all(safe)
}

/// The hashed form: a readable prefix and 10 hex digits of the pair.
fn hashed(namespace: Option<&str>, name: &str) -> String {
    let mut h = Sha256::new();
    h.update(namespace.unwrap_or("").as_bytes());
    h.update([0]);
    h.update(name.as_bytes());
    let hex: String = h.finalize().iter().take(5).map(|b| format!("{b:02x}")).collect();
    let plain = match namespace {
        Some(ns) => format!("{}__{}", sanitize(ns), sanitize(name)),
        None => sanitize(name),
    };
    let keep: String = plain.chars().take(MAX - 11).collect();
    format!("{keep}_{hex}")
}

/// The name a declared tool gets when nothing else is taken.
pub fn default_flat(namespace: Option<&str>, name: &str) -> String {
    let plain = match namespace {
        Some(ns) => format!("{ns}__{name}"),
        None => name.to_string(),
    };
    if is_safe(&plain) { plain } else { hashed(namespace, name) }
}

impl Names {
    /// A plain function tool, offered under its own name.
    pub fn plain(&mut self, name: &str) {
        self.taken.insert(name.to_string());
    }

    /// A tool that needs a flattened name; returns it. The same pair twice
    /// gets the same name.
    pub fn add(&mut self, namespace: Option<&str>, name: &str, custom: bool) -> String {
        let key = (namespace.map(str::to_string), name.to_string());
        if let Some(flat) = self.by_target.get(&key) {
            return flat.clone();
        }
        let mut flat = default_flat(namespace, name);
        if self.taken.contains(&flat) {
            flat = hashed(namespace, name);
        }
        // A hash collision within one request is not worth a name: number it.
        let mut n = 2;
        while self.taken.contains(&flat) {
            let base: String = hashed(namespace, name).chars().take(MAX - 4).collect();
            flat = format!("{base}_{n}");
            n += 1;
        }
        self.taken.insert(flat.clone());
        self.by_target.insert(key, flat.clone());
        self.by_flat
            .insert(flat.clone(), Target { namespace: namespace.map(str::to_string), name: name.into(), custom });
        flat
    }

    /// The declared tool behind a name the vendor called, if flattened.
    pub fn target(&self, flat: &str) -> Option<&Target> {
        self.by_flat.get(flat)
    }

    /// The name the vendor knows for a declared tool (a call in the
    /// history): the one offered in this request, else the default form.
    pub fn flat(&self, namespace: Option<&str>, name: &str) -> String {
        let key = (namespace.map(str::to_string), name.to_string());
        match self.by_target.get(&key) {
            Some(f) => f.clone(),
            None if namespace.is_none() => name.to_string(),
            None => default_flat(namespace, name),
        }
    }

    /// Like [`Names::flat`] for a custom tool (always offered flattened).
    pub fn flat_custom(&self, namespace: Option<&str>, name: &str) -> String {
        let key = (namespace.map(str::to_string), name.to_string());
        self.by_target.get(&key).cloned().unwrap_or_else(|| default_flat(namespace, name))
    }

    pub fn is_empty(&self) -> bool {
        self.by_flat.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vendor_safe(s: &str) -> bool {
        regex::Regex::new("^[a-zA-Z0-9_-]{1,64}$").unwrap().is_match(s)
    }

    #[test]
    fn namespace_tools_flatten_to_safe_stable_names() {
        let mut n = Names::default();
        n.plain("exec_command");
        let spawn = n.add(Some("multi_agent_v1"), "spawn_agent", false);
        assert_eq!(spawn, "multi_agent_v1__spawn_agent");
        assert_eq!(n.add(Some("multi_agent_v1"), "spawn_agent", false), spawn);
        assert_eq!(
            n.target(&spawn),
            Some(&Target { namespace: Some("multi_agent_v1".into()), name: "spawn_agent".into(), custom: false })
        );
        assert_eq!(n.target("exec_command"), None);
        // Unsafe characters and long names are hashed, still safe and stable.
        let odd = n.add(Some("mcp.server/x"), "tool.with.dots", false);
        assert!(vendor_safe(&odd), "{odd}");
        assert_eq!(odd, default_flat(Some("mcp.server/x"), "tool.with.dots"));
        let long = n.add(Some(&"n".repeat(60)), &"t".repeat(60), false);
        assert!(vendor_safe(&long) && long.len() <= 64, "{long}");
        let mut again = Names::default();
        assert_eq!(again.add(Some(&"n".repeat(60)), &"t".repeat(60), false), long);
    }

    #[test]
    fn collisions_get_distinct_names() {
        let mut n = Names::default();
        // A plain function already named like the flattened form.
        n.plain("a__b");
        let f = n.add(Some("a"), "b", false);
        assert_ne!(f, "a__b");
        assert!(vendor_safe(&f));
        // Two pairs that sanitize alike.
        let x = n.add(Some("x.y"), "z", false);
        let y = n.add(Some("x_y"), "z", false);
        assert_ne!(x, y);
        assert!(vendor_safe(&x) && vendor_safe(&y));
        assert_eq!(n.target(&x).unwrap().namespace.as_deref(), Some("x.y"));
        assert_eq!(n.target(&y).unwrap().namespace.as_deref(), Some("x_y"));
        // History lookups find the offered names.
        assert_eq!(n.flat(Some("a"), "b"), f);
        assert_eq!(n.flat(None, "exec_command"), "exec_command");
        assert_eq!(n.flat(Some("gone"), "tool"), "gone__tool");
    }
}
