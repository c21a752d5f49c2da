//! The skills section of the system message (progressive disclosure, tier
//! one): each skill's name, description and location, and how to load one.
//! It is merged into the client's own system message, or becomes the first
//! message when the client sent none.

use serde_json::{Value, json};

use super::SkillSet;
use crate::openai::Message;

/// The default section; `{skills}` is replaced by the list of skills.
pub const DEFAULT_TEMPLATE: &str = "\
## Skills

You have skills: folders of instructions and resources for specific tasks. \
Each skill below has a name, a description of when to use it, and its location.

{skills}

When a task matches a skill's description, call the `read_skill` tool with the skill's name \
before you start, then follow its instructions. Skill names are not tool names: never call a \
skill directly. Files the instructions mention (paths relative to the skill's folder) can be \
read with `read_skill_file`. Some tools become available only after you have read the skill \
that uses them.";

/// The section for `set`, from `template` (or the default); `None` without skills.
pub fn render(set: &SkillSet, template: Option<&str>) -> Option<String> {
    if set.is_empty() {
        return None;
    }
    let mut list = String::from("<available_skills>\n");
    for s in set.iter() {
        list.push_str(&format!(
            "<skill>\n<name>{}</name>\n<description>{}</description>\n<location>{}</location>\n</skill>\n",
            escape(&s.name),
            escape(&s.description),
            escape(&s.file.display().to_string())
        ));
    }
    list.push_str("</available_skills>");
    Some(template.unwrap_or(DEFAULT_TEMPLATE).replace("{skills}", &list))
}

/// Adds `section` to the first system message (after its text), or inserts a
/// system message first when there is none.
pub fn apply(messages: &mut Vec<Message>, section: &str) {
    if let Some(m) = messages.iter_mut().take_while(|m| m.role == "system" || m.role == "developer").last() {
        match &mut m.content {
            Value::String(s) if !s.trim().is_empty() => {
                s.push_str("\n\n");
                s.push_str(section);
            }
            Value::Array(parts) => parts.push(json!({"type": "text", "text": format!("\n\n{section}")})),
            other => *other = Value::String(section.to_string()),
        }
        return;
    }
    messages.insert(
        0,
        Message { role: "system".into(), content: Value::String(section.into()), extra: Default::default() },
    );
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, content: Value) -> Message {
        Message { role: role.into(), content, extra: Default::default() }
    }

    #[test]
    fn merges_into_the_clients_system_message_or_adds_one() {
        let mut m = vec![msg("system", json!("Be brief.")), msg("user", json!("hi"))];
        apply(&mut m, "SKILLS");
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].content, "Be brief.\n\nSKILLS");
        let mut m = vec![msg("user", json!("hi"))];
        apply(&mut m, "SKILLS");
        assert_eq!((m[0].role.as_str(), &m[0].content), ("system", &json!("SKILLS")));
        let mut m = vec![msg("system", json!([{"type": "text", "text": "A"}])), msg("user", json!("hi"))];
        apply(&mut m, "S");
        assert_eq!(m[0].content[1]["text"], "\n\nS");
    }

    #[test]
    fn nothing_without_skills_and_the_template_is_overridable() {
        assert!(render(&SkillSet::default(), None).is_none());
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/SKILL.md"), "---\nname: a\ndescription: x < y & z\n---\n").unwrap();
        let dirs = [crate::skills::SkillDir { path: dir.path().into(), scope: crate::skills::Scope::Project }];
        let set = SkillSet::scan(&dirs, &Default::default(), 1);
        let text = render(&set, Some("Skills here:\n{skills}\nEnd.")).unwrap();
        assert!(text.starts_with("Skills here:\n<available_skills>\n<skill>\n<name>a</name>"), "{text}");
        assert!(text.contains("<description>x &lt; y &amp; z</description>") && text.ends_with("End."), "{text}");
        assert!(render(&set, None).unwrap().contains("call the `read_skill` tool"));
    }
}
