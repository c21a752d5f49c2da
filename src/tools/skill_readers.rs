//! The tools that disclose skills to the model: `read_skill` (tier two: the
//! SKILL.md body and the list of the skill's files) and `read_skill_file`
//! (tier three: one supporting file, confined to the skill's folder). Both
//! look the skill up in the current [`SkillSet`] once per call, so a
//! call served during a reload sees one version whole.

use std::path::{Component, Path};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::skills::{ReadError, Skill, SkillSet, Skills, read_capped};
use crate::tools::{Tool, ToolError, ToolOutput, ToolSpec};

pub use crate::skills::{READ_SKILL, READ_SKILL_FILE, SEARCH_SKILLS};
/// Skills one search returns at most.
const SEARCH_RESULTS: usize = 10;

/// The skill named by `args.skill_name` in `set`, or the error to return.
fn lookup(set: &SkillSet, args: &Value) -> Result<Arc<Skill>, String> {
    let Some(name) = args.get("skill_name").and_then(Value::as_str) else {
        return Err("`skill_name` is required: the name of one of the available skills".into());
    };
    if name.contains(['/', '\\']) || name.contains("..") || Path::new(name).is_absolute() {
        return Err(format!("`skill_name` must be the name of a skill, not a path (got {name:?})"));
    }
    set.get(name).cloned().ok_or_else(|| {
        let known: Vec<&str> = set.iter().map(|s| s.name.as_str()).collect();
        format!("there is no skill named {name:?}; available: {}", known.join(", "))
    })
}

/// The `skill_name` parameter: an enum of the names while the catalog lists
/// every skill whole (a long catalog's names would make the schema as long).
fn name_param(names: &[String]) -> Value {
    let description = "The exact name of the skill, as listed in the system message or by search_skills";
    if names.is_empty() {
        json!({"type": "string", "description": description})
    } else {
        json!({"type": "string", "enum": names, "description": description})
    }
}

/// `read_skill(skill_name)`.
pub struct ReadSkill {
    pub skills: Arc<Skills>,
    /// The names known when the catalog was built (the schema's enum;
    /// empty for none).
    pub names: Vec<String>,
    /// The skill's own tools by skill name (script tools), to name them.
    pub script_tools: std::collections::HashMap<String, Vec<String>>,
}

impl Tool for ReadSkill {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: READ_SKILL.into(),
            description: "Loads a skill: returns its instructions (SKILL.md) and the list of its supporting files. \
                          Call it before a task that matches a skill's description."
                .into(),
            parameters: json!({"type": "object", "properties": {"skill_name": name_param(&self.names)},
                               "required": ["skill_name"], "additionalProperties": false}),
        }
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let skill = match lookup(&self.skills.current(), &args) {
                Ok(s) => s,
                Err(e) => return Ok(ToolOutput::error(e)),
            };
            let mut out = format!(
                "<skill_content name=\"{}\">\n<directory>{}</directory>\n\n{}\n",
                skill.name,
                skill.dir.display(),
                skill.body.trim_end()
            );
            if !skill.files.is_empty() {
                out.push_str("\n<skill_files>\n");
                for f in &skill.files {
                    out.push_str(f);
                    out.push('\n');
                }
                out.push_str("</skill_files>\nRead one with `read_skill_file`.\n");
            }
            let own = self.script_tools.get(&skill.name).into_iter().flatten();
            let tools: Vec<&str> = skill.allowed_tools.iter().chain(own).map(String::as_str).collect();
            if !tools.is_empty() {
                out.push_str(&format!("\nTools for this skill: {}\n", tools.join(", ")));
            }
            out.push_str("</skill_content>");
            Ok(ToolOutput::text(out))
        })
    }
}

/// `read_skill_file(skill_name, path)`.
pub struct ReadSkillFile {
    pub skills: Arc<Skills>,
    pub names: Vec<String>,
}

impl Tool for ReadSkillFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: READ_SKILL_FILE.into(),
            description: "Reads a text file of a skill (a reference, template or script its instructions mention), \
                          by its path relative to the skill's folder."
                .into(),
            parameters: json!({"type": "object", "properties": {
                "skill_name": name_param(&self.names),
                "path": {"type": "string", "description": "Relative to the skill's folder, e.g. references/guide.md"}},
                "required": ["skill_name", "path"], "additionalProperties": false}),
        }
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let skill = match lookup(&self.skills.current(), &args) {
                Ok(s) => s,
                Err(e) => return Ok(ToolOutput::error(e)),
            };
            let rel = args.get("path").and_then(Value::as_str).unwrap_or_default();
            Ok(match read_inside(&skill, rel, self.skills.config.max_file_bytes).await {
                Ok(text) => ToolOutput::text(text),
                Err(e) => ToolOutput::error(e),
            })
        })
    }
}

/// `search_skills(query)`: the skills whose name or description has the
/// query's words, best first, with their whole descriptions. Offered when
/// the catalog in the system message is shortened.
pub struct SearchSkills {
    pub skills: Arc<Skills>,
}

impl Tool for SearchSkills {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: SEARCH_SKILLS.into(),
            description: "Finds skills by words of the task (e.g. \"pdf form fill\"): returns the matching skills' \
                          names and full descriptions, best first. Then load one with read_skill."
                .into(),
            parameters: json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "Words describing the task or the skill"}},
                "required": ["query"], "additionalProperties": false}),
        }
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let query = args.get("query").and_then(Value::as_str).unwrap_or_default();
            Ok(match search(&self.skills.current(), query) {
                Ok(text) => ToolOutput::text(text),
                Err(e) => ToolOutput::error(e),
            })
        })
    }
}

/// The search behind `search_skills`: each query word found in a name
/// counts 3, in a description 1; the whole name asked for counts most.
pub fn search(set: &SkillSet, query: &str) -> Result<String, String> {
    let lower = query.to_lowercase();
    let mut words: Vec<&str> = lower.split(|c: char| !c.is_alphanumeric()).filter(|w| w.len() > 1).collect();
    words.sort_unstable();
    words.dedup();
    if words.is_empty() {
        return Err("`query` needs at least one word, e.g. the task's subject".into());
    }
    let mut scored: Vec<(usize, &Arc<Skill>)> = set
        .iter()
        .map(|s| {
            let (name, desc) = (s.name.to_lowercase(), s.description.to_lowercase());
            let exact = if name == lower.trim() { 100 } else { 0 };
            let score =
                words.iter().map(|w| 3 * usize::from(name.contains(w)) + usize::from(desc.contains(w))).sum::<usize>();
            (exact + score, s)
        })
        .filter(|(score, _)| *score > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    if scored.is_empty() {
        return Ok(format!("No skill matches {query:?}; try other words."));
    }
    let mut out = String::from("<skills>\n");
    for (_, s) in scored.iter().take(SEARCH_RESULTS) {
        out.push_str(&format!("<skill><name>{}</name><description>{}</description></skill>\n", s.name, s.description));
    }
    out.push_str("</skills>\n");
    if scored.len() > SEARCH_RESULTS {
        out.push_str(&format!("({} more match; add words to narrow the search)\n", scored.len() - SEARCH_RESULTS));
    }
    out.push_str("Load one with `read_skill`.");
    Ok(out)
}

/// The text of `rel` inside the skill's folder: relative, no `..`, no
/// symlink leading out, a regular file of which at most `max` bytes are
/// read (more is refused), UTF-8.
pub async fn read_inside(skill: &Skill, rel: &str, max: u64) -> Result<String, String> {
    let p = Path::new(rel);
    if rel.trim().is_empty() {
        return Err("`path` is required, relative to the skill's folder".into());
    }
    if p.is_absolute() || rel.starts_with(['/', '\\']) || p.components().any(|c| matches!(c, Component::Prefix(_))) {
        return Err(format!("`path` must be relative to the skill's folder (got {rel:?})"));
    }
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(format!("`path` must stay inside the skill's folder (got {rel:?})"));
    }
    let missing = || format!("the skill {:?} has no file {rel:?}; its files: {}", skill.name, skill.files.join(", "));
    let real = tokio::fs::canonicalize(skill.dir.join(p)).await.map_err(|_| missing())?;
    if !real.starts_with(&skill.dir) {
        return Err(format!("`path` must stay inside the skill's folder ({rel:?} leads outside)"));
    }
    let read = tokio::task::spawn_blocking(move || read_capped(&real, max)).await;
    let bytes = match read {
        Ok(Ok(b)) => b,
        Ok(Err(ReadError::NotAFile)) => return Err(format!("{rel:?} is not a file")),
        Ok(Err(ReadError::TooLarge)) => {
            return Err(format!("{rel:?} is larger than {max} bytes; larger files are not read"));
        }
        Ok(Err(ReadError::Io(e))) => return Err(format!("cannot read {rel:?}: {e}")),
        Err(e) => return Err(format!("cannot read {rel:?}: {e}")),
    };
    String::from_utf8(bytes).map_err(|_| format!("{rel:?} is not a UTF-8 text file"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skills::SkillsConfig;

    #[tokio::test]
    async fn files_stay_inside_the_skill_folder() {
        let root = tempfile::tempdir().unwrap();
        let d = root.path().join("skills/a");
        std::fs::create_dir_all(d.join("references")).unwrap();
        std::fs::write(d.join("SKILL.md"), "---\nname: a\ndescription: d\n---\nBODY").unwrap();
        std::fs::write(d.join("references/r.md"), "REF").unwrap();
        std::fs::write(d.join("bin.dat"), [0xff, 0xfe, 0x00]).unwrap();
        std::fs::write(d.join("big.txt"), "x".repeat(100)).unwrap();
        std::fs::write(root.path().join("secret.txt"), "SECRET").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(root.path().join("secret.txt"), d.join("escape.txt")).unwrap();
        let cfg = SkillsConfig {
            dirs: vec![root.path().join("skills").display().to_string()],
            auto_reload: false,
            max_file_bytes: 50,
            ..Default::default()
        };
        let skills = Skills::load(&cfg);
        let skill = skills.current().get("a").unwrap().clone();
        assert_eq!(read_inside(&skill, "references/r.md", 50).await.unwrap(), "REF");
        for (rel, why) in [
            ("../../secret.txt", "inside"),
            ("references/../../../secret.txt", "inside"),
            ("/etc/passwd", "relative"),
            ("escape.txt", "leads outside"),
            ("bin.dat", "UTF-8"),
            ("big.txt", "larger"),
            ("nope.md", "has no file"),
            ("references", "not a file"),
            ("", "required"),
        ] {
            if rel == "escape.txt" && cfg!(not(unix)) {
                continue;
            }
            let e = read_inside(&skill, rel, 50).await.unwrap_err();
            assert!(e.contains(why), "{rel}: {e}");
            assert!(!e.contains("SECRET"));
        }
        let t = ReadSkillFile { skills: skills.clone(), names: vec!["a".into()] };
        let out = t.call(json!({"skill_name": "../a", "path": "SKILL.md"})).await.unwrap();
        assert!(out.is_error && !out.model_text(false).contains("BODY"));
        let r = ReadSkill { skills, names: vec!["a".into()], script_tools: Default::default() };
        let out = r.call(json!({"skill_name": "a"})).await.unwrap();
        let text = out.model_text(false);
        assert!(text.contains("BODY") && text.contains("references/r.md") && !text.contains("SKILL.md\n"), "{text}");
        for bad in ["/tmp/a", "../a", "zz"] {
            let out = r.call(json!({"skill_name": bad})).await.unwrap();
            assert!(out.is_error && !out.model_text(false).contains("BODY"), "{bad}");
        }
    }
}
