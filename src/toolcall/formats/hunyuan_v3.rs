//! Tencent Hunyuan HY-V3 / HY3:
//!
//! ```text
//! <tool_calls>
//! <tool_call>NAME<tool_sep>
//! <arg_key>KEY</arg_key>
//! <arg_value>VALUE</arg_value>
//! </tool_call>
//! </tool_calls>
//! ```
//!
//! The shipping tokenizer suffixes every tag (`<tool_calls:opensource>`,
//! `<arg_key:opensource>` …); the suffix of the opening tag is applied to all
//! the others. Values are raw text typed by the tool's schema. `<tool_calls>`
//! also opens MiniMax-M1 JSON lines and Hunyuan-A13B JSON arrays, so this
//! parser takes only a `<tool_call` body.

use crate::toolcall::formats::xml::{self, PairTags, Peek};
use crate::toolcall::scan::{find, skip_ws};
use crate::toolcall::{Ctx, Format, Parsed, RawCall, Step, Wait, typing};

pub struct HunyuanV3;

const OPEN: &str = "<tool_calls";
/// The static part of the closing tag (the suffix follows it).
const CLOSE: &str = "</tool_calls";

impl Format for HunyuanV3 {
    fn name(&self) -> &'static str {
        "hunyuan_v3"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<tool_calls>", "<tool_calls:"]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        // The suffix: `` or `:opensource`.
        let Some(gt) = find(region, ">", OPEN.len()) else {
            return if region.len() > OPEN.len() + 64 { Step::Reject } else { xml::more(region, ctx) };
        };
        let sfx = &region[OPEN.len()..gt];
        if !sfx.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-:.".contains(&b)) {
            return Step::Reject;
        }
        let call_open = format!("<tool_call{sfx}>");
        let body = skip_ws(region, gt + 1);
        match xml::peek(region, body, &[&call_open]) {
            Peek::Is(_) => {}
            Peek::Maybe => return xml::more(region, ctx),
            Peek::No => return Step::Reject,
        }
        let tail = format!("{sfx}>");
        let mut from = body;
        loop {
            let Some(c) = find(region, CLOSE, from) else {
                if !ctx.eof {
                    return Step::Need(Wait::Marker { marker: CLOSE, from });
                }
                // Unclosed at the end: the calls must be complete.
                let call_close = format!("</tool_call{sfx}>");
                if !region.trim_end().ends_with(&call_close) {
                    return Step::Reject;
                }
                return done(&region[body..], sfx, region.len(), ctx);
            };
            match xml::peek(region, c + CLOSE.len(), &[&tail]) {
                Peek::Is(_) => {
                    return done(&region[body..c], sfx, c + CLOSE.len() + tail.len(), ctx);
                }
                Peek::Maybe => return xml::more(region, ctx),
                Peek::No => from = c + 1,
            }
        }
    }
}

/// The calls of a complete body.
fn done(body: &str, sfx: &str, consumed: usize, ctx: &Ctx<'_>) -> Step {
    let call_open = format!("<tool_call{sfx}>");
    let call_close = format!("</tool_call{sfx}>");
    let sep = format!("<tool_sep{sfx}>");
    let (key, key_end) = (format!("<arg_key{sfx}>"), format!("</arg_key{sfx}>"));
    let (value, value_end) = (format!("<arg_value{sfx}>"), format!("</arg_value{sfx}>"));
    let tags = PairTags { key: &key, key_end: &key_end, value: &value, value_end: &value_end };
    let mut calls = Vec::new();
    let mut at = skip_ws(body, 0);
    while body[at..].starts_with(&call_open) {
        let start = at + call_open.len();
        let end = xml::structural(body, &call_close, start, &[&call_open])
            .or_else(|| find(body, &call_close, start))
            .unwrap_or(body.len());
        let call = &body[start..end];
        let name_end = find(call, "<", 0).unwrap_or(call.len());
        let name = call[..name_end].trim();
        let args = call[name_end..].trim_start();
        let args = args.strip_prefix(sep.as_str()).unwrap_or(args);
        let schema = ctx.tools.schema(name);
        calls.push(RawCall::value(name, typing::object_from_pairs(schema, xml::pairs(args, &tags))));
        at = skip_ws(body, (end + call_close.len()).min(body.len()));
    }
    if calls.is_empty() {
        return Step::Reject;
    }
    Step::Done(Parsed { consumed, calls, ..Default::default() })
}
