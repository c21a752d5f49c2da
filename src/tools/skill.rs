//! Skill tools: one function offered to the model, bound to several tools
//! (`[tools.skill.NAME]`). Modes, after KMatrix's skill orchestration:
//!
//! * `sequential` — the bound tools run one after the other with the same
//!   arguments; the result concatenates each tool's result under a header
//!   that says whether it succeeded or failed;
//! * `parallel` — the same, all at once, results in declared order;
//! * `routing` — `route.arg` of the arguments picks a case (its tools run in
//!   order); values with no case use `route.default`, else the call fails.
//!
//! Each bound tool receives the arguments its own schema declares (all of
//! them when the schema lists no properties), so one skill can combine tools
//! with different parameters. Bound tools are checked and run like any call
//! (schema check, their own time limit); a skill cannot bind a skill.

use std::collections::BTreeMap;
use std::sync::Weak;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::config::{RouteConfig, SkillConfig, SkillMode};
use super::{Catalog, Content, Registry, Status, Tool, ToolError, ToolOutput, ToolSpec};

/// Checks a skill definition at startup.
pub fn validate(name: &str, s: &SkillConfig, all: &BTreeMap<String, SkillConfig>) -> Result<(), ToolError> {
    let bad = |msg: String| Err(ToolError::Config(format!("[tools.skill.{name}]: {msg}")));
    if let Some(p) = &s.parameters
        && !p.is_object()
    {
        return bad("`parameters` must be a JSON schema object".into());
    }
    let mut bound: Vec<&String> = s.tools.iter().collect();
    match (&s.mode, &s.route) {
        (SkillMode::Routing, None) => return bad("mode \"routing\" needs a `route = { arg, cases }`".into()),
        (SkillMode::Routing, Some(r)) => {
            if r.cases.is_empty() {
                return bad("`route.cases` is empty".into());
            }
            bound.extend(r.cases.values().flatten());
            bound.extend(r.default.iter().flatten());
        }
        (_, _) if s.tools.is_empty() => return bad("`tools` is empty".into()),
        _ => {}
    }
    if let Some(t) = bound.iter().find(|t| all.contains_key(t.as_str())) {
        return bad(format!("binds the skill `{t}`; a skill can bind only built-in and MCP tools"));
    }
    Ok(())
}

pub struct SkillTool {
    name: String,
    description: String,
    parameters: Value,
    mode: SkillMode,
    tools: Vec<String>,
    route: Option<RouteConfig>,
    registry: Weak<Registry>,
}

impl SkillTool {
    pub fn new(name: &str, s: &SkillConfig, registry: Weak<Registry>) -> Self {
        SkillTool {
            name: name.to_string(),
            description: s.description.clone(),
            parameters: s.parameters.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            mode: s.mode,
            tools: s.tools.clone(),
            route: s.route.clone(),
            registry,
        }
    }

    /// The tools to run for these arguments.
    fn pick(&self, args: &Value) -> Result<Vec<String>, String> {
        let Some(route) = self.route.as_ref().filter(|_| self.mode == SkillMode::Routing) else {
            return Ok(self.tools.clone());
        };
        let value = match args.get(&route.arg) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(v) => v.to_string(),
        };
        if let Some(t) = route.cases.get(&value) {
            return Ok(t.clone());
        }
        route.default.clone().ok_or_else(|| {
            let known: Vec<&str> = route.cases.keys().map(String::as_str).collect();
            format!("no route for {}={value:?}; expected one of: {}", route.arg, known.join(", "))
        })
    }
}

/// The arguments a bound tool declares.
fn args_for(catalog: &Catalog, tool: &str, args: &Value) -> String {
    let declared = catalog.get(tool).and_then(|e| e.spec.parameters.get("properties")).and_then(Value::as_object);
    match (declared, args.as_object()) {
        (Some(props), Some(obj)) if !props.is_empty() => {
            let picked: Map<String, Value> =
                obj.iter().filter(|(k, _)| props.contains_key(*k)).map(|(k, v)| (k.clone(), v.clone())).collect();
            Value::Object(picked).to_string()
        }
        _ => args.to_string(),
    }
}

impl Tool for SkillTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: self.name.clone(), description: self.description.clone(), parameters: self.parameters.clone() }
    }

    fn call(&self, args: Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let registry =
                self.registry.upgrade().ok_or_else(|| ToolError::Unavailable("the tool registry is gone".into()))?;
            let catalog = registry.catalog();
            let tools = match self.pick(&args) {
                Ok(t) => t,
                Err(msg) => return Ok(ToolOutput::error(msg)),
            };
            let calls = tools.iter().map(|t| {
                let a = args_for(&catalog, t, &args);
                let catalog = catalog.clone();
                async move {
                    if catalog.get(t).is_some_and(|e| e.source == super::Source::Skill) {
                        return (ToolOutput::error("a skill cannot call a skill"), Status::Error);
                    }
                    catalog.call(t, &a, None).await
                }
            });
            let results: Vec<(ToolOutput, Status)> = match self.mode {
                SkillMode::Parallel => futures_util::future::join_all(calls).await,
                SkillMode::Sequential | SkillMode::Routing => {
                    let mut v = Vec::new();
                    for c in calls {
                        v.push(c.await);
                    }
                    v
                }
            };
            let mut out = ToolOutput::default();
            for (t, (r, status)) in tools.iter().zip(&results) {
                let head = match status {
                    Status::Ok => format!("[{t}] succeeded:"),
                    s => format!("[{t}] failed ({}):", s.as_str()),
                };
                out.content.push(Content::Text(head));
                out.content.extend(r.content.iter().cloned());
            }
            out.is_error = !results.is_empty() && results.iter().all(|(_, s)| *s != Status::Ok);
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> BTreeMap<String, SkillConfig> {
        #[derive(serde::Deserialize)]
        struct W {
            skill: BTreeMap<String, SkillConfig>,
        }
        toml::from_str::<W>(text).unwrap().skill
    }

    #[test]
    fn validates_definitions() {
        let all = cfg(r#"
[skill.a]
description = "x"
tools = ["current_time"]
[skill.b]
description = "x"
mode = "routing"
[skill.c]
description = "x"
tools = ["a"]
[skill.d]
description = "x"
mode = "routing"
route = { arg = "k", cases = { t = ["current_time"] } }
"#);
        assert!(validate("a", &all["a"], &all).is_ok());
        assert!(validate("b", &all["b"], &all).is_err());
        assert!(validate("c", &all["c"], &all).is_err());
        assert!(validate("d", &all["d"], &all).is_ok());
        let t = SkillTool::new("d", &all["d"], Weak::new());
        assert_eq!(t.pick(&json!({"k": "t"})).unwrap(), ["current_time"]);
        assert!(t.pick(&json!({"k": "zz"})).unwrap_err().contains("expected one of: t"));
    }
}
