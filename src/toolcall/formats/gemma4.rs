//! Google Gemma 4:
//!
//! ```text
//! <|tool_call>call:NAME{key:<|"|>text<|"|>,n:3,flag:true,obj:{a:[1,2]}}<tool_call|>
//! ```
//!
//! One block per call. Arguments are a JSON-like object with bare keys;
//! strings are delimited by `<|"|>` and hold any text (commas, braces,
//! quotes) unescaped. Bare scalars are typed by the parameter's schema when
//! there is one, else read as JSON literals (`3`, `true`, `null`), and stay
//! strings when they are not (`02139`).

use serde_json::{Map, Value};

use crate::toolcall::formats::xml::{self, Peek};
use crate::toolcall::scan::{find, skip_ws};
use crate::toolcall::{Ctx, Format, Parsed, RawCall, Step, Wait, typing};

pub struct Gemma4;

const OPEN: &str = "<|tool_call>";
const CLOSE: &str = "<tool_call|>";
const CALL: &str = "call:";
const QUOTE: &str = "<|\"|>";
const TURN_END: &str = "<turn|>";

impl Format for Gemma4 {
    fn name(&self) -> &'static str {
        "gemma4"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[OPEN]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let mut start = skip_ws(region, OPEN.len());
        // `<|tool_call>:call:…`: a stray colon after the token (vLLM's fallback).
        if region[start..].starts_with(':') {
            start = skip_ws(region, start + 1);
        }
        match xml::peek(region, start, &[CALL]) {
            Peek::Is(_) => {}
            Peek::Maybe => return xml::more(region, ctx),
            Peek::No => return Step::Reject,
        }
        let name_start = start + CALL.len();
        let Some(brace) = region[name_start..].find('{').map(|i| name_start + i) else {
            return if xml::plausible_name(&region[name_start..]) || region.len() == name_start {
                xml::more(region, ctx)
            } else {
                Step::Reject
            };
        };
        let name = region[name_start..brace].trim();
        if !xml::plausible_name(name) {
            return Step::Reject;
        }
        // The call ends at `<tool_call|>`, or at `<turn|>` (Gemma sometimes
        // closes the call with the end of its turn) when that comes first or
        // the output ends without the call's own close.
        let close = find(region, CLOSE, brace);
        let turn = find(region, TURN_END, brace);
        let end = match (close, turn) {
            (Some(c), Some(t)) if t < c => Some((t, TURN_END.len(), false)),
            (Some(c), _) => Some((c, CLOSE.len(), true)),
            (None, _) if !ctx.eof => return Step::Need(Wait::Marker { marker: CLOSE, from: brace }),
            (None, t) => t.map(|t| (t, TURN_END.len(), false)),
        };
        let body = &region[..end.map_or(region.len(), |(e, _, _)| e)];
        let schema = ctx.tools.schema(name);
        let mut p = Reader { s: body, i: brace };
        let Some(args) = p.value(schema) else {
            return Step::Reject;
        };
        // Without the call's own close nothing may follow the arguments.
        let consumed = match end {
            Some((e, len, true)) => e + len,
            _ if !body[p.i..].trim().is_empty() => return Step::Reject,
            Some((e, len, false)) => e + len,
            None => region.len(),
        };
        Step::Done(Parsed { consumed, calls: vec![RawCall::value(name, args)], ..Default::default() })
    }
}

/// A recursive reader of Gemma's argument syntax.
struct Reader<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Reader<'a> {
    fn rest(&self) -> &'a str {
        &self.s[self.i..]
    }

    fn skip(&mut self) {
        self.i = skip_ws(self.s, self.i);
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip();
        if self.rest().starts_with(c) {
            self.i += c.len_utf8();
            true
        } else {
            false
        }
    }

    fn value(&mut self, schema: Option<&Value>) -> Option<Value> {
        self.skip();
        if self.eat('{') {
            return self.object(schema);
        }
        if self.eat('[') {
            let items = schema.and_then(|s| s.get("items"));
            let mut out = Vec::new();
            while !self.eat(']') {
                out.push(self.value(items)?);
                if !self.eat(',') && !self.rest().trim_start().starts_with(']') {
                    return None;
                }
            }
            return Some(Value::Array(out));
        }
        if let Some(text) = self.string() {
            return Some(Value::String(text));
        }
        let raw = self.bare()?;
        Some(match schema {
            Some(_) => typing::coerce(raw, schema),
            None => untyped(raw),
        })
    }

    fn object(&mut self, schema: Option<&Value>) -> Option<Value> {
        let mut m = Map::new();
        while !self.eat('}') {
            let key = match self.string() {
                Some(k) => k,
                None => self.bare()?.to_string(),
            };
            if !self.eat(':') {
                return None;
            }
            let v = self.value(typing::param(schema, &key))?;
            m.insert(key, v);
            if !self.eat(',') && !self.rest().trim_start().starts_with('}') {
                return None;
            }
        }
        Some(Value::Object(m))
    }

    /// A `<|"|>…<|"|>` or JSON `"…"` string.
    fn string(&mut self) -> Option<String> {
        self.skip();
        if let Some(r) = self.rest().strip_prefix(QUOTE) {
            let end = r.find(QUOTE)?;
            let text = r[..end].to_string();
            self.i += QUOTE.len() + end + QUOTE.len();
            return Some(text);
        }
        if self.rest().starts_with('"') {
            let mut de = serde_json::Deserializer::from_str(self.rest()).into_iter::<String>();
            let text = de.next()?.ok()?;
            self.i += de.byte_offset();
            return Some(text);
        }
        None
    }

    /// A bare key or scalar: the text up to `,` `:` `}` `]`.
    fn bare(&mut self) -> Option<&'a str> {
        self.skip();
        let len = self.rest().find([',', ':', '}', ']', '{', '[']).unwrap_or(0);
        let raw = self.rest()[..len].trim();
        self.i += len;
        (!raw.is_empty()).then_some(raw)
    }
}

/// An untyped bare scalar: a JSON literal, or a number with a trailing dot
/// (`108.`, Python's float spelling), else the text.
fn untyped(raw: &str) -> Value {
    if let Ok(v) = serde_json::from_str(raw) {
        return v;
    }
    let num = raw.strip_suffix('.').filter(|n| {
        let d = n.strip_prefix('-').unwrap_or(n);
        !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
    });
    // `01.` stays text, as `01` does.
    if let Some(v) = num.and_then(|n| serde_json::from_str::<Value>(n).ok()) {
        return v;
    }
    Value::String(raw.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_nested_values() {
        let s = "{a:<|\"|>x, {y}<|\"|>,n:-2.5,l:[1,<|\"|>b<|\"|>],o:{k:null},z:02139}";
        let mut r = Reader { s, i: 0 };
        assert_eq!(
            r.value(None),
            Some(json!({"a": "x, {y}", "n": -2.5, "l": [1, "b"], "o": {"k": null}, "z": "02139"}))
        );
        assert_eq!(r.i, s.len());
        // vLLM test_gemma4_regex_and_bare_calls.py: `<turn|>` closes a call, a
        // stray colon may follow the opening token.
        let tools = crate::toolcall::ToolIndex::open();
        let ctx = Ctx { tools: &tools, eof: true, at_start: true };
        let s = "<|tool_call>:call:gdb{a:1}<turn|> after";
        let Step::Done(p) = Gemma4.parse(s, &ctx) else { panic!("no call") };
        assert_eq!((p.calls.len(), &s[p.consumed..]), (1, " after"));
        let Step::Done(p) = Gemma4.parse("<|tool_call>call:f{a:1}<turn|>x<tool_call|>", &Ctx { eof: false, ..ctx })
        else {
            panic!("no call")
        };
        assert_eq!(p.consumed, "<|tool_call>call:f{a:1}<turn|>".len());
        // vLLM test_gemma4_tool_parser.py::test_trailing_dot_float_partial_withheld
        assert_eq!(
            Reader { s: "{l:108.,r:-3.,z:01.}", i: 0 }.value(None),
            Some(json!({"l": 108, "r": -3, "z": "01."}))
        );
        assert_eq!(Reader { s: "{a:1", i: 0 }.value(None), None);
    }
}
