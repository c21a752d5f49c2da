//! The declared tools of one request, as the name guard and schema typing
//! need them.

use serde_json::Value;

/// Declared tool names and their parameter schemas.
#[derive(Debug, Clone, Default)]
pub struct ToolIndex {
    tools: Vec<(String, Value)>,
    /// When true every name is accepted (the `extract` command without
    /// `--tools`). The proxy never builds an open index.
    open: bool,
}

impl ToolIndex {
    /// An index of `(name, parameters schema)` pairs.
    pub fn new(tools: impl IntoIterator<Item = (String, Value)>) -> Self {
        ToolIndex { tools: tools.into_iter().collect(), open: false }
    }

    /// An index that accepts any name (debugging without tool definitions).
    pub fn open() -> Self {
        ToolIndex { tools: Vec::new(), open: true }
    }

    /// Builds the index from OpenAI `tools` JSON (`[{type, function:{name, parameters}}]`).
    pub fn from_openai(tools: &[Value]) -> Self {
        Self::new(tools.iter().filter_map(|t| {
            let f = t.get("function").unwrap_or(t);
            let name = f.get("name")?.as_str()?.to_string();
            let params = f.get("parameters").cloned().unwrap_or(Value::Null);
            Some((name, params))
        }))
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty() && !self.open
    }

    pub fn is_open(&self) -> bool {
        self.open
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|(n, _)| n.as_str())
    }

    /// The declared spelling of `name`, tolerating case and `-`/`_`
    /// differences and stray whitespace. `None` when the tool was not declared.
    pub fn resolve<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        let name = super::scan::trim(name);
        if name.is_empty() {
            return None;
        }
        if self.open {
            // Without declarations, accept only what could be a function name
            // (OpenAI's `[A-Za-z0-9_-]{1,64}`, plus `.` for namespaced tools),
            // so placeholders like `...` in explained markup stay text.
            let ok = name.len() <= 64
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
                && name.bytes().any(|b| b.is_ascii_alphanumeric());
            return ok.then_some(name);
        }
        if let Some((n, _)) = self.tools.iter().find(|(n, _)| n == name) {
            return Some(n);
        }
        self.tools.iter().find(|(n, _)| loose_eq(n, name)).map(|(n, _)| n.as_str())
    }

    /// The parameters schema of a declared tool.
    pub fn schema(&self, name: &str) -> Option<&Value> {
        let declared = self.resolve(name)?;
        self.tools.iter().find(|(n, _)| n == declared).map(|(_, s)| s)
    }
}

fn loose_eq(a: &str, b: &str) -> bool {
    let norm = |c: char| if c == '-' { '_' } else { c.to_ascii_lowercase() };
    a.len() == b.len() && a.chars().map(norm).eq(b.chars().map(norm))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolves_loose_spellings_to_declared() {
        let idx = ToolIndex::new([("get_weather".to_string(), json!({}))]);
        assert_eq!(idx.resolve("get_weather"), Some("get_weather"));
        assert_eq!(idx.resolve("Get-Weather"), Some("get_weather"));
        assert_eq!(idx.resolve(" get_weather\n"), Some("get_weather"));
        assert_eq!(idx.resolve("get_weathers"), None);
        assert_eq!(ToolIndex::open().resolve("anything"), Some("anything"));
        assert_eq!(ToolIndex::open().resolve("..."), None);
        assert_eq!(ToolIndex::open().resolve("two words"), None);
        assert_eq!(ToolIndex::default().resolve("anything"), None);
    }
}
