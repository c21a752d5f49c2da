//! Hermes / Qwen2.5 / Qwen3 / ERNIE-4.5: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`,
//! one block per call. The same tag also opens Qwen3-Coder XML, GLM and
//! Granite bodies; this parser takes only a JSON object body.

use crate::toolcall::scan::{byte_at, call_object_raw, find, json_end, skip_ws};
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
        let Some(close) = find(region, CLOSE, body) else {
            if ctx.eof {
                // Truncated (or a model that never closes): accept only a
                // complete object followed by nothing else.
                return match json_end(region, body) {
                    Some(end) if region[end..].trim().is_empty() => {
                        one_call(region, body, end, region.len())
                    }
                    _ => Step::Reject,
                };
            }
            return Step::Need(Wait::Marker {
                marker: CLOSE,
                from: body,
            });
        };
        let end = region[..close].trim_end().len();
        one_call(region, body, end, close + CLOSE.len())
    }
}

fn one_call(region: &str, body: usize, end: usize, consumed: usize) -> Step {
    let text = &region[body..end];
    let call = match call_object_raw(text) {
        Some((name, args)) => RawCall {
            name,
            args: args.map_or(Args::Empty, Args::Json),
            id: None,
        },
        // Damaged JSON inside a closed tag: repair it, then read the shape.
        None => match crate::toolcall::args_repair_object(text)
            .as_ref()
            .and_then(crate::toolcall::scan::call_object)
        {
            Some((name, args)) => RawCall {
                name,
                args: args.map_or(Args::Empty, Args::Json),
                id: None,
            },
            None => return Step::Reject,
        },
    };
    Step::Done(Parsed {
        consumed,
        calls: vec![call],
        ..Default::default()
    })
}
