//! MeetKai Functionary v3.1 (Llama-3.1 based):
//!
//! ```text
//! <function=NAME>{"key": "value"}</function>
//! <|python_tag|>print("code")
//! ```
//!
//! The JSON arguments pass through as written; `</function>` after them is
//! optional. `<|python_tag|>` followed by code (not JSON, which is Llama 3.x
//! JSON's) is a call of the `python` (or declared `ipython`) tool with the
//! code as its one string argument. `<function=` followed by `<parameter=` is
//! Qwen3-Coder's.

use serde_json::{Map, Value};

use crate::toolcall::formats::xml::{self, Name, Peek};
use crate::toolcall::scan::{byte_at, find, python_end, skip_ws};
use crate::toolcall::{Ctx, Format, Parsed, RawCall, Step, Wait, typing};

pub struct FunctionaryV31;

const FUNCTION: &str = "<function=";
const FUNCTION_END: &str = "</function>";
const PYTHON: &str = "<|python_tag|>";
const EOM: &str = "<|eom_id|>";

impl Format for FunctionaryV31 {
    fn name(&self) -> &'static str {
        "functionary_v3_1"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[FUNCTION, PYTHON]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        if region.starts_with(PYTHON) { python(region, ctx) } else { function(region, ctx) }
    }
}

fn function(region: &str, ctx: &Ctx<'_>) -> Step {
    let (name, after) = match xml::name_until_gt(region, FUNCTION.len()) {
        Name::Done(name, after) => (name, after),
        Name::More => return xml::more(region, ctx),
        Name::Bad => return Step::Reject,
    };
    let brace = skip_ws(region, after);
    match byte_at(region, brace) {
        Some(b'{') => {}
        None => return xml::more(region, ctx),
        Some(_) => return Step::Reject,
    }
    // Same bracket rules as the engine's `Balanced` wait.
    let Some(end) = python_end(region, brace) else {
        if ctx.eof {
            return Step::Reject;
        }
        return Step::Need(Wait::Balanced { from: brace });
    };
    let next = skip_ws(region, end);
    let consumed = match xml::peek(region, next, &[FUNCTION_END]) {
        Peek::Is(_) => next + FUNCTION_END.len(),
        Peek::Maybe if !ctx.eof => {
            if next == region.len() {
                return Step::Need(Wait::NonSpaceAfter { from: end });
            }
            return xml::more(region, ctx);
        }
        Peek::Maybe | Peek::No => end,
    };
    Step::Done(Parsed { consumed, calls: vec![RawCall::json(name, &region[brace..end])], ..Default::default() })
}

fn python(region: &str, ctx: &Ctx<'_>) -> Step {
    let start = skip_ws(region, PYTHON.len());
    match byte_at(region, start) {
        None if !ctx.eof => return Step::Need(Wait::NonSpaceAfter { from: PYTHON.len() }),
        None | Some(b'{' | b'[') => return Step::Reject,
        Some(_) => {}
    }
    // `name.call(` is Llama 3.1's built-in tool syntax (llama3_json's).
    let head = &region[start..];
    let ident = head.bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count();
    if head[ident..].starts_with(".call(") {
        return Step::Reject;
    }
    let (code, consumed) = match find(region, EOM, start) {
        Some(e) => (&region[start..e], e + EOM.len()),
        None if ctx.eof => (&region[start..], region.len()),
        None => {
            return Step::Need(Wait::Marker { marker: EOM, from: start });
        }
    };
    let tools = ctx.tools;
    let name =
        if tools.resolve("python").is_none() && tools.resolve("ipython").is_some() { "ipython" } else { "python" };
    let key = tools.schema(name).and_then(typing::single_string_param).unwrap_or_else(|| "code".to_string());
    let mut args = Map::new();
    args.insert(key, Value::String(code.trim_end().to_string()));
    Step::Done(Parsed { consumed, calls: vec![RawCall::value(name, Value::Object(args))], ..Default::default() })
}
