//! Schema-driven typing of raw text values (XML parameters, key/value
//! formats). The tool's JSON schema decides; without a schema a value stays a
//! string, so `"02139"` is never sniffed into a number.

use serde_json::{Map, Number, Value};

/// The schema of parameter `key` in a tool's parameters schema.
pub fn param<'a>(tool: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    tool?.get("properties")?.get(key)
}

/// The name of the tool's single string parameter (the only required one, or
/// the only property), used for plain-string arguments.
pub fn single_string_param(schema: &Value) -> Option<String> {
    let props = schema.get("properties")?.as_object()?;
    let is_str = |k: &str| props.get(k).is_some_and(|p| types(p).iter().any(|t| t == "string"));
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        let req: Vec<&str> = req.iter().filter_map(Value::as_str).collect();
        if req.len() == 1 && is_str(req[0]) {
            return Some(req[0].to_string());
        }
    }
    let strings: Vec<&String> = props.keys().filter(|k| is_str(k)).collect();
    (strings.len() == 1).then(|| strings[0].clone())
}

/// The type names a schema allows, looking through `anyOf`/`oneOf`, type
/// arrays and `enum`.
fn types(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match schema.get("type") {
        Some(Value::String(t)) => out.push(t.to_ascii_lowercase()),
        Some(Value::Array(ts)) => out.extend(ts.iter().filter_map(Value::as_str).map(str::to_ascii_lowercase)),
        _ => {}
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(alts)) = schema.get(key) {
            for a in alts {
                out.extend(types(a));
            }
        }
    }
    if out.is_empty() && schema.get("enum").is_some() {
        out.push("enum".into());
    }
    // Null allowed in OpenAPI's spelling, by an enum or const, or as the default.
    let nullable = schema.get("nullable") == Some(&Value::Bool(true))
        || schema.get("enum").and_then(Value::as_array).is_some_and(|e| e.contains(&Value::Null))
        || schema.get("const").is_some_and(Value::is_null)
        || schema.get("default").is_some_and(Value::is_null);
    if nullable {
        out.push("null".into());
    }
    out
}

/// Converts a raw text value by its parameter schema.
pub fn coerce(raw: &str, schema: Option<&Value>) -> Value {
    let Some(schema) = schema else {
        // Untyped: a string, except Python's `None`, which the Qwen/GLM/MiniMax
        // templates write for null (`| string`) and no one means as text.
        return if raw.trim() == "None" { Value::Null } else { Value::String(raw.to_string()) };
    };
    let ts = types(schema);
    let t = raw.trim();
    let is_null = t == "null" || t == "None";
    if ts.iter().any(|t| t == "null") && is_null {
        return Value::Null;
    }
    // An enum's own value when the text is one (`10` for `[10, 20]`).
    if let Some(v) = schema.get("enum").and_then(Value::as_array).and_then(|e| {
        e.iter().find(|v| match v {
            Value::String(s) => s == raw,
            other => serde_json::from_str::<Value>(t).is_ok_and(|p| p == **other),
        })
    }) {
        return v.clone();
    }
    for ty in &ts {
        let v = match ty.as_str() {
            "string" | "str" | "text" | "varchar" | "char" | "enum" => {
                return Value::String(raw.to_string());
            }
            // `int32`, `uint64`, `long` … (vLLM's prefix reading of type names).
            "integer" | "int" | "long" | "short" | "unsigned" => {
                t.parse::<i64>().ok().map(Value::from).or_else(|| float(t))
            }
            n if n.starts_with("int") || n.starts_with("uint") => {
                t.parse::<i64>().ok().map(Value::from).or_else(|| float(t))
            }
            "number" | "float" => float(t),
            "boolean" | "bool" => match t.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Some(Value::Bool(true)),
                "false" | "0" | "no" | "off" => Some(Value::Bool(false)),
                _ => None,
            },
            "object" | "array" | "dict" | "list" => container(t),
            _ => None,
        };
        if let Some(v) = v {
            return v;
        }
    }
    if is_null && !ts.iter().any(|t| matches!(t.as_str(), "string" | "str" | "text" | "varchar" | "char" | "enum")) {
        // The schema says no string: the model's null is not the word "null".
        return Value::Null;
    }
    if ts.is_empty() {
        // A schema with no type: JSON (or its Python spelling) if it is
        // JSON, else the string.
        return match t {
            "None" => Value::Null,
            "True" => Value::Bool(true),
            "False" => Value::Bool(false),
            _ => structured(t).unwrap_or_else(|| Value::String(raw.to_string())),
        };
    }
    Value::String(raw.to_string())
}

fn float(t: &str) -> Option<Value> {
    let f: f64 = t.parse().ok()?;
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        return Some(Value::from(f as i64));
    }
    Number::from_f64(f).map(Value::Number)
}

/// A value for an object/array parameter. A JSON string holding the
/// container (`"{'k': 'v'}"`, from templates that `json.dumps(str(dict))`)
/// is read one level down.
fn container(t: &str) -> Option<Value> {
    match structured(t)? {
        Value::String(inner) => {
            Some(structured(inner.trim()).filter(|v| v.is_object() || v.is_array()).unwrap_or(Value::String(inner)))
        }
        v => Some(v),
    }
}

/// JSON, then JSON written with its quotes escaped (`[{\"id\": 1}]`, as GLM
/// writes it into an `<arg_value>`), then a repaired/Python-literal reading
/// (`{'a': True}`).
fn structured(t: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(t) {
        return Some(v);
    }
    if !(t.starts_with('{') || t.starts_with('[')) {
        return None;
    }
    if t.contains("\\\"") {
        // Read as the body of a JSON string: one level of escapes comes off.
        let unescaped = serde_json::from_str::<String>(&format!("\"{t}\"")).ok();
        if let Some(v) = unescaped.and_then(|u| serde_json::from_str::<Value>(&u).ok()) {
            return Some(v);
        }
    }
    super::repair::loads(t)
}

/// Builds an arguments object from raw key/value pairs typed by the tool's
/// schema.
pub fn object_from_pairs<'a>(tool: Option<&Value>, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Value {
    let mut m = Map::new();
    for (k, v) in pairs {
        let k = k.trim();
        m.insert(k.to_string(), coerce(v, param(tool, k)));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // smg tests/tool_parser_{qwen_xml,glm4_moe,minimax_m2,step3}.rs *python_literals;
    // vLLM test_hy_v4_tool_parser.py (uint32).
    #[test]
    fn untyped_values_and_type_aliases() {
        assert_eq!(coerce("None", None), json!(null));
        assert_eq!(coerce("\nNone\n", None), json!(null));
        assert_eq!(coerce("True", None), json!("True"));
        assert_eq!(coerce("None", Some(&json!({"type": "string"}))), json!("None"));
        assert_eq!(coerce("None", Some(&json!({"description": "any"}))), json!(null));
        assert_eq!(coerce("True", Some(&json!({}))), json!(true));
        assert_eq!(coerce("5", Some(&json!({}))), json!(5));
        assert_eq!(coerce("42", Some(&json!({"type": "uint32"}))), json!(42));
    }

    #[test]
    fn strings_are_never_sniffed() {
        assert_eq!(coerce("02139", Some(&json!({"type": "string"}))), json!("02139"));
        assert_eq!(coerce("02139", None), json!("02139"));
        assert_eq!(coerce("5", Some(&json!({"type": "integer"}))), json!(5));
        assert_eq!(coerce("2.0", Some(&json!({"type": "number"}))), json!(2));
        assert_eq!(coerce("True", Some(&json!({"type": "boolean"}))), json!(true));
        assert_eq!(coerce("None", Some(&json!({"type": ["string", "null"]}))), json!(null));
        assert_eq!(coerce("{'a': 1}", Some(&json!({"type": "object"}))), json!({"a": 1}));
        assert_eq!(coerce("x", Some(&json!({"anyOf": [{"type": "integer"}, {"type": "string"}]}))), json!("x"));
    }

    #[test]
    fn escaped_json_for_a_structured_parameter() {
        let array = json!({"type": "array"});
        assert_eq!(
            coerce(r#"[{\"id\": \"1\", \"p\": \"C:\\\\U\"}]"#, Some(&array)),
            json!([{"id": "1", "p": "C:\\U"}])
        );
        assert_eq!(coerce(r#"{\"a\": [1]}"#, Some(&json!({"type": "object"}))), json!({"a": [1]}));
        // vLLM test_qwen3_xml_coder_shared.py::test_double_encoded_object_param_nonstreaming
        let object = json!({"type": "object"});
        assert_eq!(coerce(r#""{'key': 'value', 'n': 1}""#, Some(&object)), json!({"key": "value", "n": 1}));
        assert_eq!(coerce(r#""[1, 2]""#, Some(&array)), json!([1, 2]));
        assert_eq!(coerce(r#""plain""#, Some(&object)), json!("plain"));
        // A string parameter keeps the text as written.
        assert_eq!(coerce(r#"[{\"id\": 1}]"#, Some(&json!({"type": "string"}))), json!(r#"[{\"id\": 1}]"#));
    }
}

#[cfg(test)]
mod null_tests {
    use super::*;
    use serde_json::json;

    // MiniMax-M2 writes `<parameter name="limit">null</parameter>` for a
    // nullable integer (issue 45): JSON null, never the string "null".
    #[test]
    fn null_for_a_nullable_parameter_is_json_null() {
        for schema in [
            json!({"type": ["integer", "null"]}),
            json!({"anyOf": [{"type": "integer"}, {"type": "null"}]}),
            json!({"type": "integer", "nullable": true}),
            json!({"enum": [10, 20, null]}),
            json!({"type": "integer", "default": null}),
            json!({"anyOf": [{"$ref": "#/$defs/Limit"}, {"type": "null"}]}),
        ] {
            assert_eq!(coerce("null", Some(&schema)), json!(null), "{schema}");
            assert_eq!(coerce(" None ", Some(&schema)), json!(null), "{schema}");
        }
        // A string parameter keeps the word; an enum's values keep their type.
        assert_eq!(coerce("null", Some(&json!({"type": "string"}))), json!("null"));
        assert_eq!(coerce("null", Some(&json!({"type": "integer"}))), json!(null));
        assert_eq!(coerce("20", Some(&json!({"enum": [10, 20, null]}))), json!(20));
        assert_eq!(coerce("dev", Some(&json!({"enum": ["dev", "ops"]}))), json!("dev"));
    }

    #[test]
    fn a_recovered_minimax_call_types_null_by_the_schema() {
        let tools = crate::toolcall::ToolIndex::from_openai(&[json!({"type": "function", "function": {
            "name": "search", "parameters": {"type": "object", "properties": {
                "q": {"type": "string"}, "limit": {"type": ["integer", "null"]},
                "page": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": null}}}}})]);
        let text = "<minimax:tool_call>\n<invoke name=\"search\">\n<parameter name=\"q\">rust</parameter>\n<parameter name=\"limit\">null</parameter>\n<parameter name=\"page\">null</parameter>\n</invoke>\n</minimax:tool_call>";
        let set = std::sync::Arc::new(crate::toolcall::FormatSet::all());
        let got = crate::toolcall::extract(text, &set, &std::sync::Arc::new(tools));
        let args: serde_json::Value = serde_json::from_str(&got.calls[0].arguments).unwrap_or_default();
        assert_eq!(args, json!({"q": "rust", "limit": null, "page": null}));
    }
}
