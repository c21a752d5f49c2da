//! Per-skill tools (the "grouped tools" of agent frameworks' skills interceptors): a tool
//! named in some skill's `allowed-tools`, and a skill's own scripts, are
//! offered to the model only once it has read that skill in this
//! conversation. Whether it has is read off the history — the client resends
//! it with every request, and hidden exchanges are spliced back first — so
//! no session state is needed. Tools no skill names are always offered.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::Value;

use super::SkillSet;
use super::{READ_SKILL, READ_SKILL_FILE, SEARCH_SKILLS};
use crate::openai::Message;

/// Which tools wait for which skills.
#[derive(Debug, Default, Clone)]
pub struct Locks {
    by_tool: HashMap<String, Vec<String>>,
}

impl Locks {
    /// The locks of `set`: each skill's `allowed-tools` and script tools
    /// (`scripts` maps a skill to its exposed script tool names).
    pub fn new(set: &SkillSet, scripts: &HashMap<String, Vec<String>>) -> Locks {
        let mut by_tool: HashMap<String, Vec<String>> = HashMap::new();
        for s in set.iter() {
            let own = scripts.get(&s.name).into_iter().flatten();
            for t in s.allowed_tools.iter().chain(own) {
                if ![READ_SKILL, READ_SKILL_FILE, SEARCH_SKILLS].contains(&t.as_str()) {
                    by_tool.entry(t.clone()).or_default().push(s.name.clone());
                }
            }
        }
        Locks { by_tool }
    }

    /// The skills `tool` waits for, when none of them was read yet.
    pub fn waiting_for(&self, tool: &str, read: &BTreeSet<String>) -> Option<&[String]> {
        self.by_tool.get(tool).filter(|skills| !skills.iter().any(|s| read.contains(s))).map(Vec::as_slice)
    }

    pub fn is_empty(&self) -> bool {
        self.by_tool.is_empty()
    }
}

/// The skills the history shows were read: an assistant call of `read_skill`
/// whose tool result is not an error.
pub fn read_skills(history: &[Message]) -> BTreeSet<String> {
    let mut asked: HashMap<&str, String> = HashMap::new();
    for m in history.iter().filter(|m| m.role == "assistant") {
        for c in m.extra.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let f = &c["function"];
            if f["name"].as_str() != Some(READ_SKILL) {
                continue;
            }
            let args: Value = match &f["arguments"] {
                Value::String(s) => serde_json::from_str(s).unwrap_or(Value::Null),
                other => other.clone(),
            };
            if let (Some(id), Some(name)) = (c["id"].as_str(), args["skill_name"].as_str()) {
                asked.insert(id, name.to_string());
            }
        }
    }
    let mut ok = HashSet::new();
    for m in history.iter().filter(|m| m.role == "tool") {
        let Some(id) = m.extra.get("tool_call_id").and_then(Value::as_str) else { continue };
        let text = match &m.content {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
            _ => String::new(),
        };
        if !text.trim_start().starts_with("Error:") {
            ok.insert(id);
        }
    }
    asked.into_iter().filter(|(id, _)| ok.contains(id)).map(|(_, name)| name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m(v: Value) -> Message {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_successful_reads_count() {
        let call = |id: &str, skill: &str| {
            json!({"id": id, "type": "function",
                   "function": {"name": "read_skill", "arguments": json!({"skill_name": skill}).to_string()}})
        };
        let history = vec![
            m(json!({"role": "user", "content": "hi"})),
            m(json!({"role": "assistant", "content": null, "tool_calls": [call("c1", "a"), call("c2", "b")]})),
            m(json!({"role": "tool", "tool_call_id": "c1", "content": "<skill_content name=\"a\">…"})),
            m(json!({"role": "tool", "tool_call_id": "c2", "content": "Error: no skill named b"})),
            m(json!({"role": "assistant", "content": null, "tool_calls": [call("c3", "c")]})),
        ];
        assert_eq!(read_skills(&history), BTreeSet::from(["a".to_string()]));
    }
}
