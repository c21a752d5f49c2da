//! SKILL.md: the YAML frontmatter between `---` lines and the Markdown body,
//! validated per the Agent Skills specification. Leniency follows the spec's
//! client guide: what a client can work around (a name that breaks the
//! spec's rules or differs from its folder, an over-long description,
//! unknown fields, an unquoted `: ` in a value, non-string metadata) is a
//! warning; what leaves the skill unusable (no frontmatter, YAML that does not
//! parse, a missing name or one that cannot be a tool argument, a missing
//! description) is an error.

use std::collections::BTreeMap;

use serde_json::Value;

/// Longest name and description the specification allows.
pub const MAX_NAME: usize = 64;
pub const MAX_DESCRIPTION: usize = 1024;
const MAX_COMPATIBILITY: usize = 500;
const KNOWN: &[&str] = &["name", "description", "license", "compatibility", "metadata", "allowed-tools"];

/// Why a SKILL.md cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontmatterError {
    #[error("no YAML frontmatter: the file must start with a `---` line and the frontmatter end with one")]
    Missing,
    #[error("the frontmatter is not valid YAML: {0}")]
    Yaml(String),
    #[error("the frontmatter is not a mapping of fields")]
    NotAMapping,
    #[error("`{0}` is missing or empty")]
    Required(&'static str),
    #[error("`{field}` must be text, not {found}")]
    NotText { field: &'static str, found: &'static str },
    #[error("invalid name {name:?}: {why}")]
    BadName { name: String, why: &'static str },
}

/// The frontmatter fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Frontmatter {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    pub compatibility: Option<String>,
    /// Client-specific extras, values as text.
    pub metadata: BTreeMap<String, String>,
    /// Tools the skill uses (`allowed-tools`: a string separated by spaces
    /// or commas, or a list).
    pub allowed_tools: Vec<String>,
}

/// A parsed SKILL.md.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub meta: Frontmatter,
    /// The Markdown after the frontmatter.
    pub body: String,
    /// What was tolerated.
    pub warnings: Vec<String>,
}

/// Parses and validates a SKILL.md whose folder is named `folder`.
pub fn parse(text: &str, folder: &str) -> Result<Parsed, FrontmatterError> {
    let (yaml, body) = split(text).ok_or(FrontmatterError::Missing)?;
    let mut warnings = Vec::new();
    let value = match yaml_value(yaml) {
        Ok(v) => v,
        Err(first) => {
            // The usual breakage: `description: Use when: …` unquoted.
            let quoted = quote_colon_values(yaml);
            match yaml_value(&quoted) {
                Ok(v) if quoted != yaml => {
                    warnings.push("a value containing `: ` was not quoted; read as plain text".to_string());
                    v
                }
                _ => return Err(FrontmatterError::Yaml(first_line(&first.to_string()))),
            }
        }
    };
    let Value::Object(map) = value else { return Err(FrontmatterError::NotAMapping) };
    for k in map.keys().filter(|k| !KNOWN.contains(&k.as_str())) {
        warnings.push(format!("unknown frontmatter field `{k}` (ignored)"));
    }
    let name = text_field(&map, "name")?.ok_or(FrontmatterError::Required("name"))?;
    usable_name(&name)?;
    // Real collections have Title-Case names and names that differ from
    // their folder; the client guide says load them under the name given.
    if let Err(e) = check_name(&name) {
        warnings.push(format!("{e} (loaded under this name)"));
    }
    if name != folder {
        warnings.push(format!("the name {name:?} differs from its folder name {folder:?} (loaded as {name:?})"));
    }
    let mut description = text_field(&map, "description")?.ok_or(FrontmatterError::Required("description"))?;
    if description.chars().count() > MAX_DESCRIPTION {
        warnings.push(format!(
            "the description has {} characters; truncated to {MAX_DESCRIPTION}",
            description.chars().count()
        ));
        description = description.chars().take(MAX_DESCRIPTION).collect();
    }
    let compatibility = text_field(&map, "compatibility").unwrap_or_else(|e| {
        warnings.push(format!("{e} (ignored)"));
        None
    });
    if let Some(c) = &compatibility
        && c.chars().count() > MAX_COMPATIBILITY
    {
        warnings.push(format!("`compatibility` is longer than {MAX_COMPATIBILITY} characters"));
    }
    let license = text_field(&map, "license").unwrap_or_else(|e| {
        warnings.push(format!("{e} (ignored)"));
        None
    });
    let metadata = match map.get("metadata") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), scalar_text(v))).collect(),
        Some(_) => {
            warnings.push("`metadata` must be a mapping (ignored)".into());
            BTreeMap::new()
        }
    };
    let allowed_tools = match map.get("allowed-tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => tool_list(s),
        Some(Value::Array(a)) => a.iter().flat_map(|v| tool_list(&scalar_text(v))).collect(),
        Some(_) => {
            warnings.push("`allowed-tools` must be a string or a list (ignored)".into());
            Vec::new()
        }
    };
    let meta = Frontmatter { name, description, license, compatibility, metadata, allowed_tools };
    Ok(Parsed { meta, body: body.to_string(), warnings })
}

/// The YAML as a JSON value. YAML 1.2 booleans only, so `y`, `no` or `on`
/// in a description or a tool list stay text.
fn yaml_value(yaml: &str) -> Result<Value, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(yaml, serde_saphyr::options! { strict_booleans: true })
}

/// `Read, Write Edit` or `Bash(git add:*) Read`: names separated by commas
/// or whitespace outside parentheses (Claude Code's patterns keep theirs).
fn tool_list(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0usize);
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && (c == ',' || c.is_whitespace()) {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// What a name needs to be usable at all: the model passes it back as
/// `read_skill`'s `skill_name`, which refuses paths, and it is listed in
/// the system message.
fn usable_name(name: &str) -> Result<(), FrontmatterError> {
    let bad = |why| Err(FrontmatterError::BadName { name: name.to_string(), why });
    if name.contains(['/', '\\']) || name.contains("..") {
        return bad("a skill name cannot contain `/`, `\\` or `..`");
    }
    if name.chars().any(char::is_control) {
        return bad("a skill name cannot contain control characters");
    }
    Ok(())
}

/// Checks a skill name against the specification: 1–64 characters,
/// lowercase letters, digits and hyphens, no hyphen at either end, no `--`.
pub fn check_name(name: &str) -> Result<(), FrontmatterError> {
    let bad = |why| Err(FrontmatterError::BadName { name: name.to_string(), why });
    if name.is_empty() || name.chars().count() > MAX_NAME {
        return bad("it must be 1 to 64 characters");
    }
    if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return bad("only lowercase letters, digits and hyphens are allowed");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return bad("it must not start or end with a hyphen");
    }
    if name.contains("--") {
        return bad("it must not contain consecutive hyphens");
    }
    Ok(())
}

/// The frontmatter text and the body, when the text starts with a `---` line
/// and a later `---` (or `...`) line closes the frontmatter.
fn split(text: &str) -> Option<(&str, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first_end = text.find('\n')?;
    if text[..first_end].trim_end() != "---" {
        return None;
    }
    let rest = &text[first_end + 1..];
    let mut pos = 0;
    for line in rest.split_inclusive('\n') {
        let t = line.trim_end();
        if t == "---" || t == "..." {
            let body = &rest[pos + line.len()..];
            return Some((&rest[..pos], body.trim_start_matches(['\r', '\n'])));
        }
        pos += line.len();
    }
    None
}

/// Top-level `key: value` lines whose plain value contains `: ` (invalid
/// YAML) with the value double-quoted.
fn quote_colon_values(yaml: &str) -> String {
    let mut out = String::with_capacity(yaml.len() + 16);
    for line in yaml.split_inclusive('\n') {
        let body = line.trim_end_matches(['\r', '\n']);
        let eol = &line[body.len()..];
        let fixed = body.split_once(": ").and_then(|(key, value)| {
            let plain_key = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            let v = value.trim();
            let plain_value = !v.is_empty() && !v.starts_with(['"', '\'', '|', '>', '[', '{', '&', '*', '!', '#']);
            (plain_key && plain_value && v.contains(": ")).then(|| format!("{key}: {}", Value::String(v.to_string())))
        });
        out.push_str(fixed.as_deref().unwrap_or(body));
        out.push_str(eol);
    }
    out
}

/// A text field: strings as they are, numbers and booleans as written,
/// absent or empty as `None`.
fn text_field(map: &serde_json::Map<String, Value>, field: &'static str) -> Result<Option<String>, FrontmatterError> {
    let s = match map.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => s.trim().to_string(),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
        Some(Value::Array(_)) => return Err(FrontmatterError::NotText { field, found: "a list" }),
        Some(Value::Object(_)) => return Err(FrontmatterError::NotText { field, found: "a mapping" }),
    };
    Ok((!s.is_empty()).then_some(s))
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(front: &str, body: &str) -> String {
        format!("---\n{front}---\n{body}")
    }

    #[test]
    fn parses_every_field_and_both_allowed_tools_forms() {
        let p = parse(
            &md(
                "name: pdf-tools\ndescription: Work with PDFs. Use when the user mentions PDF.\nlicense: MIT\n\
                 compatibility: needs python3\nmetadata:\n  author: me\n  version: 2\nallowed-tools: current_time  srv__echo\n",
                "\n# PDF\nDo things.\n",
            ),
            "pdf-tools",
        )
        .unwrap();
        assert_eq!(p.meta.name, "pdf-tools");
        assert_eq!(p.meta.license.as_deref(), Some("MIT"));
        assert_eq!(p.meta.metadata["version"], "2");
        assert_eq!(p.meta.allowed_tools, ["current_time", "srv__echo"]);
        assert_eq!(p.body, "# PDF\nDo things.\n");
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        let list = parse(&md("name: a\ndescription: d\nallowed-tools:\n  - x\n  - y\n", ""), "a").unwrap();
        assert_eq!(list.meta.allowed_tools, ["x", "y"]);
    }

    #[test]
    fn names_follow_the_spec() {
        for good in ["a", "pdf", "a-b-c", "x1", &"a".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "A", "a_b", "-a", "a-", "a--b", "a b", "é", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_off_the_spec_load_with_a_warning_unusable_ones_do_not() {
        let p = parse(&md("name: Systematic Debugging\ndescription: d\n", ""), "systematic-debugging").unwrap();
        assert_eq!(p.meta.name, "Systematic Debugging");
        assert!(p.warnings.iter().any(|w| w.contains("lowercase")), "{:?}", p.warnings);
        assert!(p.warnings.iter().any(|w| w.contains("differs from its folder")), "{:?}", p.warnings);
        let p = parse(&md("name: react-best-practices\ndescription: d\n", ""), "react").unwrap();
        assert_eq!((p.meta.name.as_str(), p.warnings.len()), ("react-best-practices", 1), "{:?}", p.warnings);
        for bad in ["../x", "a/b", "a\\\\b"] {
            let e = parse(&md(&format!("name: \"{bad}\"\ndescription: d\n"), ""), "x").unwrap_err();
            assert!(matches!(e, FrontmatterError::BadName { .. }), "{bad}: {e}");
        }
        assert_eq!(parse(&md("name: a\n", ""), "a").unwrap_err(), FrontmatterError::Required("description"));
    }

    #[test]
    fn allowed_tools_split_on_commas_and_spaces_keeping_patterns() {
        let tools = |v: &str| {
            parse(&md(&format!("name: a\ndescription: d\nallowed-tools: {v}\n"), ""), "a").unwrap().meta.allowed_tools
        };
        assert_eq!(tools("Read, Write, Edit"), ["Read", "Write", "Edit"]);
        assert_eq!(tools("current_time,srv__echo"), ["current_time", "srv__echo"]);
        assert_eq!(tools("\"Bash(git add:*), Read\""), ["Bash(git add:*)", "Read"]);
        assert_eq!(tools("[\"Read, Write\", Grep]"), ["Read", "Write", "Grep"]);
    }

    #[test]
    fn long_descriptions_are_truncated_with_a_warning() {
        let p = parse(&md(&format!("name: a\ndescription: {}\n", "x".repeat(1500)), ""), "a").unwrap();
        assert_eq!(p.meta.description.chars().count(), MAX_DESCRIPTION);
        assert!(p.warnings[0].contains("1500"), "{:?}", p.warnings);
    }

    #[test]
    fn broken_files_say_why() {
        assert_eq!(parse("# no frontmatter\n", "a").unwrap_err(), FrontmatterError::Missing);
        assert_eq!(parse("---\nname: a\n", "a").unwrap_err(), FrontmatterError::Missing);
        assert!(matches!(parse(&md("name: [a\n", ""), "a").unwrap_err(), FrontmatterError::Yaml(_)));
        assert_eq!(parse(&md("- a\n", ""), "a").unwrap_err(), FrontmatterError::NotAMapping);
        assert_eq!(parse(&md("name: a\n", ""), "a").unwrap_err(), FrontmatterError::Required("description"));
        assert_eq!(parse(&md("description: d\n", ""), "a").unwrap_err(), FrontmatterError::Required("name"));
    }

    #[test]
    fn lenient_where_the_client_guide_is() {
        let p = parse(&md("name: a\ndescription: Use when: the user asks\nextra: 1\n", "body"), "a").unwrap();
        assert_eq!(p.meta.description, "Use when: the user asks");
        assert_eq!(p.warnings.len(), 2, "{:?}", p.warnings);
        let crlf = parse("\u{feff}---\r\nname: a\r\ndescription: d\r\n---\r\nbody\r\n", "a").unwrap();
        assert_eq!(crlf.meta.description, "d");
        assert_eq!(crlf.body, "body\r\n");
    }
}
