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

/// The system-message section and how much of the catalog it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub text: String,
    /// Every skill is listed with its whole description; when not, the
    /// model is told to find the rest with `search_skills`.
    pub complete: bool,
}

/// Descriptions are not cut shorter than this; below it only names are listed.
const MIN_DESCRIPTION: usize = 60;
const SEARCH_NOTE: &str = "Not every skill's full description fits here: call `search_skills` with words \
from the task to find the skills that match and read their descriptions.";

/// The section for `set`, from `template` (or the default), within
/// `max_chars` characters where it can be: every skill with its name,
/// description and location; if that is too long, names with descriptions
/// cut to what fits (no locations); if even that is too long, names only
/// (as many as fit). `None` without skills.
pub fn render(set: &SkillSet, template: Option<&str>, max_chars: usize) -> Option<Section> {
    if set.is_empty() {
        return None;
    }
    let template = template.unwrap_or(DEFAULT_TEMPLATE);
    let fixed = template.chars().count().saturating_sub("{skills}".len());
    let room = max_chars.saturating_sub(fixed);
    let (list, complete) = full(set)
        .filter(|l| l.chars().count() <= room)
        .map(|l| (l, true))
        .or_else(|| shortened(set, room).map(|l| (l, false)))
        .unwrap_or_else(|| (names_only(set, room), false));
    Some(Section { text: template.replace("{skills}", &list), complete })
}

fn full(set: &SkillSet) -> Option<String> {
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
    Some(list)
}

/// Names and descriptions cut to the longest length that fits `room`.
fn shortened(set: &SkillSet, room: usize) -> Option<String> {
    let build = |cut: usize| {
        let mut list = format!("{SEARCH_NOTE}\n<available_skills>\n");
        for s in set.iter() {
            let d: String = if s.description.chars().count() > cut {
                s.description.chars().take(cut.saturating_sub(1)).collect::<String>() + "…"
            } else {
                s.description.clone()
            };
            list.push_str(&format!(
                "<skill><name>{}</name><description>{}</description></skill>\n",
                escape(&s.name),
                escape(&d)
            ));
        }
        list.push_str("</available_skills>");
        list
    };
    let fits = |cut: usize| build(cut).chars().count() <= room;
    if !fits(MIN_DESCRIPTION) {
        return None;
    }
    // The longest cut that fits (the length grows with the cut).
    let (mut lo, mut hi) = (MIN_DESCRIPTION, super::frontmatter::MAX_DESCRIPTION);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid) { lo = mid } else { hi = mid - 1 }
    }
    Some(build(lo))
}

/// As many names as fit, and how many were left out.
fn names_only(set: &SkillSet, room: usize) -> String {
    let head = format!("{SEARCH_NOTE}\nSkill names:");
    let tail_room = 48; // "\n(and 12345 more: use search_skills)"
    let mut list = head.clone();
    let mut listed = 0;
    for s in set.iter() {
        let item = format!(" {},", escape(&s.name));
        if list.chars().count() + item.chars().count() + tail_room > room {
            break;
        }
        list.push_str(&item);
        listed += 1;
    }
    if list.ends_with(',') {
        list.pop();
    }
    let left = set.len() - listed;
    if left > 0 {
        list.push_str(&format!("\n(and {left} more: use search_skills)"));
    }
    list
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
        assert!(render(&SkillSet::default(), None, 16_000).is_none());
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/SKILL.md"), "---\nname: a\ndescription: x < y & z\n---\n").unwrap();
        let dirs = [crate::skills::SkillDir { path: dir.path().into(), scope: crate::skills::Scope::Project }];
        let set = SkillSet::scan(&dirs, &Default::default(), 1);
        let text = render(&set, Some("Skills here:\n{skills}\nEnd."), 16_000).unwrap().text;
        assert!(text.starts_with("Skills here:\n<available_skills>\n<skill>\n<name>a</name>"), "{text}");
        assert!(text.contains("<description>x &lt; y &amp; z</description>") && text.ends_with("End."), "{text}");
        assert!(render(&set, None, 16_000).unwrap().text.contains("call the `read_skill` tool"));
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;
    use crate::skills::{Scope, SkillDir, SkillsConfig};

    fn set_of(n: usize, description_len: usize) -> (tempfile::TempDir, SkillSet) {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..n {
            let name = format!("skill-{i:03}");
            std::fs::create_dir_all(dir.path().join(&name)).unwrap();
            let d = format!("Does task {i}. {}", "x".repeat(description_len));
            std::fs::write(
                dir.path().join(&name).join("SKILL.md"),
                format!("---\nname: {name}\ndescription: {d}\n---\n"),
            )
            .unwrap();
        }
        let dirs = [SkillDir { path: dir.path().into(), scope: Scope::Project }];
        let set = SkillSet::scan(&dirs, &SkillsConfig::default(), 1);
        assert_eq!(set.len(), n);
        (dir, set)
    }

    #[test]
    fn the_section_stays_within_the_budget_shortening_then_listing_names() {
        let (_d, few) = set_of(3, 100);
        let s = render(&few, None, 16_000).unwrap();
        assert!(s.complete && s.text.contains("<location>"), "{}", s.text);

        let (_d, many) = set_of(40, 300);
        let s = render(&many, None, 8_000).unwrap();
        assert!(!s.complete && s.text.chars().count() <= 8_000, "{}", s.text.chars().count());
        assert!(s.text.contains("search_skills") && s.text.contains("<name>skill-039</name>"), "{}", s.text);
        assert!(s.text.contains("…") && !s.text.contains("<location>"));

        let (_d, lots) = set_of(350, 300);
        for budget in [16_000, 4_000, 1_500] {
            let s = render(&lots, None, budget).unwrap();
            assert!(!s.complete);
            assert!(s.text.chars().count() <= budget, "{budget}: {}", s.text.chars().count());
            assert!(s.text.contains("search_skills"), "{budget}");
        }
        let s = render(&lots, None, 16_000).unwrap().text;
        assert!(s.contains("Skill names: skill-000, skill-001") && s.contains("skill-349"), "all names fit: {s}");
        let s = render(&lots, None, 4_000).unwrap().text;
        assert!(s.contains("more: use search_skills)"), "{s}");
    }
}
