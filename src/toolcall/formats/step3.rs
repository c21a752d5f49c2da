//! StepFun Step-3 (fullwidth bars, underscores, not `▁`):
//!
//! ```text
//! <｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="N">
//! <steptml:parameter name="k">v</steptml:parameter>
//! </steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>
//! ```
//!
//! Values are raw text typed by the tool's schema. Like SGLang, a block
//! without `<｜tool_calls_end｜>` is not a call: the output stays text.
//! As vLLM reads them: `function<｜tool_sep｜>` may be missing, the tool's
//! name may follow the separator before the invoke, and a stray
//! `<｜tool_sep｜>` may sit between two calls.

use crate::toolcall::formats::xml::{self, Peek};
use crate::toolcall::scan::{find, skip_ws};
use crate::toolcall::{Ctx, Format, Parsed, RawCall, Step, Wait};

pub struct Step3;

const OPEN: &str = "<｜tool_calls_begin｜>";
const CLOSE: &str = "<｜tool_calls_end｜>";
const CALL: &str = "<｜tool_call_begin｜>";
const CALL_END: &str = "<｜tool_call_end｜>";
const SEP: &str = "<｜tool_sep｜>";
const NS: &str = "steptml:";

impl Format for Step3 {
    fn name(&self) -> &'static str {
        "step3"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[OPEN]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let body = skip_ws(region, OPEN.len());
        match xml::peek(region, body, &[CALL]) {
            Peek::Is(_) => {}
            Peek::Maybe => return xml::more(region, ctx),
            Peek::No => return Step::Reject,
        }
        let Some(close) = find(region, CLOSE, body) else {
            if ctx.eof {
                return Step::Reject;
            }
            return Step::Need(Wait::Marker { marker: CLOSE, from: body });
        };
        let mut calls = Vec::new();
        let mut at = body;
        while region[at..close].starts_with(CALL) {
            let start = at + CALL.len();
            let end = find(&region[..close], CALL_END, start).unwrap_or(close);
            let call = &region[start..end];
            let Some(invoke) = invoke_part(call) else {
                return Step::Reject;
            };
            let (invokes, _) = xml::invokes(invoke, NS, &[]);
            calls.extend(invokes.iter().map(|inv| RawCall::value(inv.name, xml::invoke_args(inv, NS, ctx.tools))));
            at = skip_ws(region, (end + CALL_END.len()).min(close));
            if region[at..close].starts_with(SEP) {
                at = skip_ws(region, at + SEP.len());
            }
        }
        if calls.is_empty() {
            return Step::Reject;
        }
        Step::Done(Parsed { consumed: close + CLOSE.len(), calls, ..Default::default() })
    }
}

/// The `<steptml:invoke …>` part of one call: after `function<｜tool_sep｜>`
/// and an optional tool name, or the whole call when it has no separator.
/// `None` for a call of another type.
fn invoke_part(call: &str) -> Option<&str> {
    let Some(sep) = find(call, SEP, 0) else {
        return Some(call);
    };
    if call[..sep].trim() != "function" {
        return None;
    }
    let after = &call[sep + SEP.len()..];
    let lt = after.find('<').unwrap_or(after.len());
    let name = after[..lt].trim();
    (name.is_empty() || xml::plausible_name(name)).then(|| &after[lt..])
}
