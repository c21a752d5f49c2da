//! Hermes / Qwen2.5 / Qwen3 / ERNIE-4.5: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`,
//! one block per call. The same tag also opens Qwen3-Coder XML, GLM and
//! Granite bodies; this parser takes only a JSON object body.

use crate::toolcall::scan::{byte_at, call_object_prefix, call_object_raw, find, json_end, skip_ws};
use crate::toolcall::{Args, Ctx, Format, Parsed, RawCall, Step, Wait};

pub struct Hermes;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

impl Format for Hermes {
    fn name(&self) -> &'static str {
        "hermes"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[OPEN]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let body = skip_ws(region, OPEN.len());
        match byte_at(region, body) {
            None if !ctx.eof => return Step::Need(Wait::Len(body + 1)),
            Some(b'{') => {}
            _ => return Step::Reject,
        }
        // Valid JSON, the common case: one pass reads the call and its end.
        if let Some((end, name, args)) = call_object_prefix(region, body)
            && let Some(close) = find(region, CLOSE, end)
        {
            let call = RawCall { name, args: args.map_or(Args::Empty, Args::Checked), id: None };
            return Step::Done(Parsed { consumed: close + CLOSE.len(), calls: vec![call], ..Default::default() });
        }
        // The call ends at the first closing tag after the object closes, so
        // a `</tool_call>` inside a string argument does not cut it short.
        if let Some(end) = json_end(region, body) {
            return match find(region, CLOSE, end) {
                Some(close) => one_call(region, body, end, close + CLOSE.len()),
                // Models that never close the tag: the object must end the output.
                None if ctx.eof && region[end..].trim().is_empty() => one_call(region, body, end, region.len()),
                None if ctx.eof => Step::Reject,
                None => Step::Need(Wait::Marker { marker: CLOSE, from: end }),
            };
        }
        // The object is not closed (yet, or never: damaged JSON). At the end
        // of output, a closed tag around damaged JSON is repaired; an open
        // one was truncated and is not a call.
        let first_close = find(region, CLOSE, body);
        match (first_close, ctx.eof) {
            (Some(close), true) => one_call(region, body, region[..close].trim_end().len(), close + CLOSE.len()),
            (None, true) => Step::Reject,
            (Some(close), false) => Step::Need(Wait::Marker { marker: CLOSE, from: close + 1 }),
            (None, false) => Step::Need(Wait::Marker { marker: CLOSE, from: body }),
        }
    }
}

fn one_call(region: &str, body: usize, end: usize, consumed: usize) -> Step {
    let text = &region[body..end];
    let call = match call_object_raw(text) {
        Some((name, args)) => RawCall { name, args: args.map_or(Args::Empty, Args::Checked), id: None },
        // Damaged JSON inside a closed tag: repair it, then read the shape.
        None => match crate::toolcall::args_repair_object(text).as_ref().and_then(crate::toolcall::scan::call_object) {
            Some((name, args)) => RawCall { name, args: args.map_or(Args::Empty, Args::Checked), id: None },
            None => return Step::Reject,
        },
    };
    Step::Done(Parsed { consumed, calls: vec![call], ..Default::default() })
}
