//! MeetKai Functionary v3.2 (and v2.x) "recipient" format. The generation
//! prompt ends with `>>>`, so the output opens with a recipient and every
//! later message is introduced by `>>>`:
//!
//! ```text
//! all
//! Let me check that.
//! >>>get_weather
//! {"city": "Denver"}>>>get_weather
//! {"city": "Boulder"}
//! ```
//!
//! `all` is the user-visible channel: its header is dropped and the text
//! streams on as content. Any other recipient is a tool name followed by a
//! JSON object on the next line; `python` carries raw code up to the next
//! `>>>` (or the end), mapped to the tool's string parameter (`code`).
//! The recipient must be a bare identifier alone on its line, so prose
//! (`Hello world`, a REPL's `>>> x = 1`) is rejected on its first bad byte.

use serde_json::{Map, Value};

use crate::toolcall::scan::{byte_at, find, python_end, skip_ws};
use crate::toolcall::typing::single_string_param;
use crate::toolcall::{Ctx, Format, Parsed, RawCall, Step, Wait};

pub struct FunctionaryV32;

const PROMPT: &str = ">>>";
/// Longest recipient name we wait for.
const NAME_MAX: usize = 64;

/// Bytes that may open a recipient at the very start of the output.
static IDENT_START: [u8; 53] = {
    let mut b = [b'_'; 53];
    let mut i = 0;
    while i < 26 {
        b[i] = b'a' + i as u8;
        b[26 + i] = b'A' + i as u8;
        i += 1;
    }
    b
};

impl Format for FunctionaryV32 {
    fn name(&self) -> &'static str {
        "functionary_v3_2"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[PROMPT]
    }

    fn start_bytes(&self) -> &'static [u8] {
        &IDENT_START
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let from = if region.starts_with(PROMPT) { PROMPT.len() } else { 0 };
        let name_len = region.as_bytes()[from..]
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')));
        let nl = match name_len {
            Some(n) if n > 0 && n <= NAME_MAX && region.as_bytes()[from + n] == b'\n' => from + n,
            Some(_) => return Step::Reject,
            None if ctx.eof || region.len() - from > NAME_MAX => return Step::Reject,
            None => return Step::Need(Wait::Len(region.len() + 1)),
        };
        let name = &region[from..nl];
        let body = nl + 1;
        match name {
            "all" => Step::Done(Parsed { consumed: body, ..Default::default() }),
            "python" => python(region, body, ctx),
            _ => json(region, name, body, ctx),
        }
    }
}

fn json(region: &str, name: &str, body: usize, ctx: &Ctx<'_>) -> Step {
    let start = skip_ws(region, body);
    match byte_at(region, start) {
        None if ctx.eof => return Step::Reject,
        None => return Step::Need(Wait::Len(start + 1)),
        Some(b'{') => {}
        Some(_) => return Step::Reject,
    }
    let Some(end) = python_end(region, start) else {
        return if ctx.eof { Step::Reject } else { Step::Need(Wait::Balanced { from: start }) };
    };
    let call = RawCall::json(name, &region[start..end]);
    Step::Done(Parsed { consumed: end, calls: vec![call], ..Default::default() })
}

fn python(region: &str, body: usize, ctx: &Ctx<'_>) -> Step {
    let end = match find(region, PROMPT, body) {
        Some(e) => e,
        None if ctx.eof => region.len(),
        None => {
            return Step::Need(Wait::Marker { marker: PROMPT, from: body });
        }
    };
    let code = region[body..end].trim_end();
    if code.trim().is_empty() {
        return Step::Reject;
    }
    let key = ctx.tools.schema("python").and_then(single_string_param).unwrap_or_else(|| "code".to_string());
    let mut args = Map::new();
    args.insert(key, Value::String(code.to_string()));
    let call = RawCall::value("python", Value::Object(args));
    Step::Done(Parsed { consumed: end, calls: vec![call], ..Default::default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_bytes_are_letters() {
        assert!(IDENT_START.contains(&b'z') && IDENT_START.contains(&b'Q') && IDENT_START.contains(&b'_'));
        assert!(!IDENT_START.contains(&b'['));
    }
}
