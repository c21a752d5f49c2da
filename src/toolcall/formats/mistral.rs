//! Mistral `[TOOL_CALLS]`, both tokenizer generations (aliases
//! `mistral_pre_v11`, `mistral_v11`):
//!
//! * pre-v11 (Mistral-7B-v0.3, Nemo, Large-2407, Mixtral-8x22B):
//!   `[TOOL_CALLS] [{"name": …, "arguments": {…}, "id"?: "a1B2c3D4e"}, …]`,
//!   one array for all calls (single-quoted pseudo-JSON is repaired);
//! * v11+ (Mistral-Small-3.x, Magistral, Devstral, Ministral-3):
//!   `[TOOL_CALLS]name[ARGS]{…}` repeated per call, optionally with
//!   `[CALL_ID]id`; `[ARGS]` may be missing when the server strips special
//!   tokens, and the name then ends at the `{`.
//!
//! Text after a pre-v11 array is content (smg keeps it; vLLM drops it), and
//! a word of junk between `[TOOL_CALLS]` and the array is skipped (vLLM's
//! regex fallback). A v11 call ends its turn: text after it and before the
//! next `[TOOL_CALLS]` (or the end) is dropped, as vLLM does. `[THINK]`
//! blocks are routed by the engine.
//!
//! This file also holds small helpers the other JSON-bodied formats share
//! (arrays of call objects, one call object, optional closing tags, names).

use super::json_calls::{MAX_NAME, json_call, json_calls, name_end, need_balanced};
use crate::toolcall::scan::{byte_at, find, python_end, skip_ws};
use crate::toolcall::{Args, Ctx, Format, Parsed, RawCall, Step, Wait};

pub struct Mistral;

const MARKER: &str = "[TOOL_CALLS]";
const ARGS: &str = "[ARGS]";
const CALL_ID: &str = "[CALL_ID]";

impl Format for Mistral {
    fn name(&self) -> &'static str {
        "mistral"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[MARKER]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let body = skip_ws(region, MARKER.len());
        let (calls, end) = match byte_at(region, body) {
            None if ctx.eof => return Step::Reject,
            None => return Step::Need(Wait::Len(body + 1)),
            // pre-v11: one array (or, from some fine-tunes, one bare object).
            Some(b'[' | b'{') => return array(region, body, ctx),
            Some(_) => match junk_then_array(region, body, ctx) {
                Ok(Some(at)) => return array(region, at, ctx),
                Ok(None) => match v11_call(region, body, ctx) {
                    Ok(x) => x,
                    Err(step) => return step,
                },
                Err(step) => return step,
            },
        };
        // Drop what follows the call up to the next call or the end.
        let consumed = match find(region, MARKER, end) {
            Some(next) => next,
            None if ctx.eof => region.len(),
            None => {
                return Step::Need(Wait::Marker { marker: MARKER, from: end });
            }
        };
        Step::Done(Parsed { consumed, calls, ..Default::default() })
    }
}

/// The pre-v11 array (or one bare object) at `at`; what follows is text.
fn array(region: &str, at: usize, ctx: &Ctx<'_>) -> Step {
    let Some(end) = python_end(region, at) else {
        return need_balanced(at, ctx);
    };
    let text = &region[at..end];
    let calls = if text.starts_with('[') { json_calls(text) } else { json_call(text).map(|c| vec![c]) };
    match calls {
        Some(calls) => Step::Done(Parsed { consumed: end, calls, ..Default::default() }),
        None => Step::Reject,
    }
}

/// `[TOOL_CALLS]  junk [{…}]`: the start of the array after one word of
/// junk, `None` when the word is a v11 tool name instead.
fn junk_then_array(region: &str, at: usize, ctx: &Ctx<'_>) -> Result<Option<usize>, Step> {
    let word = name_end(region, at);
    if word == at || word - at > MAX_NAME {
        return Ok(None);
    }
    let open = skip_ws(region, word);
    let rest = &region[open..];
    if !rest.starts_with('[') || rest.starts_with(ARGS) || rest.starts_with(CALL_ID) {
        return Ok(None);
    }
    let first = skip_ws(region, open + 1);
    match byte_at(region, first) {
        Some(b'{') => Ok(Some(open)),
        None if !ctx.eof => Err(Step::Need(Wait::Len(first + 1))),
        _ => Ok(None),
    }
}

/// `name[CALL_ID]id[ARGS]{…}` from `at`: the call and the end of its arguments.
fn v11_call(region: &str, at: usize, ctx: &Ctx<'_>) -> Result<(Vec<RawCall>, usize), Step> {
    let after_name = name_end(region, at);
    let name = &region[at..after_name];
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(Step::Reject);
    }
    let mut id = None;
    let mut pos = after_name;
    loop {
        pos = skip_ws(region, pos);
        let rest = &region[pos..];
        if rest.starts_with('{') {
            break;
        } else if rest.starts_with(ARGS) {
            pos += ARGS.len();
        } else if rest.starts_with(CALL_ID) {
            let start = skip_ws(region, pos + CALL_ID.len());
            let end = name_end(region, start);
            id = Some(region[start..end].to_string()).filter(|s| !s.is_empty());
            pos = end;
        } else if !ctx.eof && [ARGS, CALL_ID].iter().any(|t| t.starts_with(rest)) {
            // Still typing the name, the id, or a tag (or nothing yet).
            if pos - at > MAX_NAME + 64 {
                return Err(Step::Reject);
            }
            return Err(Step::Need(Wait::Len(region.len() + 1)));
        } else {
            return Err(Step::Reject);
        }
    }
    let Some(end) = python_end(region, pos) else {
        return Err(need_balanced(pos, ctx));
    };
    let call = RawCall { name: name.to_string(), args: Args::Json(region[pos..end].to_string()), id };
    Ok((vec![call], end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolcall::ToolIndex;

    fn parse(text: &str, eof: bool) -> Step {
        let tools = ToolIndex::open();
        Mistral.parse(text, &Ctx { tools: &tools, eof, at_start: false })
    }

    #[test]
    fn v11_with_call_id() {
        let Step::Done(p) = parse(r#"[TOOL_CALLS]f[CALL_ID]a1B2c3D4e[ARGS]{"x": 1}"#, true) else { panic!("not done") };
        assert_eq!(p.calls[0].id.as_deref(), Some("a1B2c3D4e"));
        assert_eq!(p.calls[0].args, Args::Json(r#"{"x": 1}"#.into()));
    }

    #[test]
    fn waits_inside_the_name_and_rejects_prose() {
        assert!(matches!(parse("[TOOL_CALLS]get_wea", false), Step::Need(Wait::Len(_))));
        assert!(matches!(parse("[TOOL_CALLS]f[AR", false), Step::Need(Wait::Len(_))));
        assert!(matches!(parse("[TOOL_CALLS] is a token", false), Step::Reject));
        assert!(matches!(parse("[TOOL_CALLS] [1, 2]", true), Step::Reject));
    }

    #[test]
    fn repairs_arrays() {
        let one = json_calls("[{'name': 'f', 'arguments': {'a': 'x'}}]").unwrap_or_default();
        assert_eq!(one.len(), 1);
        let two = json_calls("[{'name': 'f', 'arguments': {}}, {'name': 'g', 'arguments': {},},]").unwrap_or_default();
        assert_eq!(two.len(), 2);
        assert!(json_calls("[1, 2]").is_none());
        assert!(json_calls("[]").is_none());
    }
}
