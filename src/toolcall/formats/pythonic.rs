//! Pythonic calls: Llama-4 Scout/Maverick (`llama4_pythonic`), Llama-3.2
//! 1B/3B under a pythonic prompt, ToolACE, OLMo-3, Granite pythonic:
//!
//! ```text
//! [get_weather(city="Quebec"), search_docs(query='maple syrup', limit=2, exact=True)]
//! ```
//!
//! A list of calls with keyword arguments that opens the output, or the same
//! (brackets optional) inside Llama 4's `<|python_start|>…<|python_end|>`.
//! Values are Python literals — single or double quoted strings, numbers,
//! `True`/`False`/`None` (and their JSON spellings), nested lists, tuples,
//! sets and dicts — and become JSON. Text after the list is content. A list
//! that is not all calls (`[1, 2, 3]`, a comprehension, `[link](url)`) is text.

use serde_json::{Map, Number, Value};

use crate::toolcall::scan::{byte_at, find, python_end, skip_ws};
use crate::toolcall::{Args, Ctx, Format, Parsed, RawCall, Step, Wait};

pub struct Pythonic;

const START: &str = "<|python_start|>";
const END: &str = "<|python_end|>";
/// Longest dotted name we wait for before giving up on the region.
const NAME_MAX: usize = 128;

impl Format for Pythonic {
    fn name(&self) -> &'static str {
        "pythonic"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[START]
    }

    fn start_bytes(&self) -> &'static [u8] {
        b"["
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        if !region.starts_with(START) {
            return list(region, 0, ctx);
        }
        let body = skip_ws(region, START.len());
        match byte_at(region, body) {
            None if ctx.eof => Step::Reject,
            None => Step::Need(Wait::Len(body + 1)),
            Some(b'[') => list(region, body, ctx),
            Some(_) => bare_calls(region, body, ctx),
        }
    }
}

/// `[call, …]` at `open`, then an optional `<|python_end|>`.
fn list(region: &str, open: usize, ctx: &Ctx<'_>) -> Step {
    let mut p = Py { s: region.as_bytes(), i: open + 1, depth: 0 };
    let calls = match p.calls(Some(b']')) {
        Ok(calls) => calls,
        Err(Fail::Bad) => return Step::Reject,
        Err(Fail::Eof) if ctx.eof => return salvage(region, open).map_or(Step::Reject, Step::Done),
        // Until the first `(` the region may still be prose: wait byte by
        // byte (bounded by NAME_MAX); after it, wait for the list to close.
        Err(Fail::Eof) if !region[open..].contains('(') => {
            return if region.len() - open > NAME_MAX { Step::Reject } else { Step::Need(Wait::Len(region.len() + 1)) };
        }
        Err(Fail::Eof) => {
            // The engine's bracket matcher agrees with `python_end`; if that
            // says closed while the parser wants more, it is not a call list.
            return if python_end(region, open).is_some() {
                Step::Reject
            } else {
                Step::Need(Wait::Balanced { from: open })
            };
        }
    };
    let end = p.i;
    let mut consumed = end;
    if region.starts_with(START) {
        let after = skip_ws(region, end);
        let tail = &region[after..];
        if tail.starts_with(END) {
            consumed = after + END.len();
        } else if !ctx.eof && END.starts_with(tail) {
            return Step::Need(Wait::Len(after + END.len()));
        }
    }
    Step::Done(Parsed { consumed, calls, ..Default::default() })
}

/// At the end of the output, a list that never closes because one element
/// broke its quotes (`[f(a=1), g(a='x 'y')]`): the calls that parse stand,
/// read call by call up to the `]` that ends the text or a line; the broken
/// element's markup goes with the list. The first element must be a call.
fn salvage(region: &str, open: usize) -> Option<Parsed> {
    let tail = region.trim_end();
    let close = if tail.ends_with(']') { tail.len() - 1 } else { find(region, "]\n", open)? };
    let body = &region.as_bytes()[..close];
    let mut p = Py { s: body, i: open + 1, depth: 0 };
    let mut calls = Vec::new();
    loop {
        let start = p.i;
        match p.call() {
            Ok(c) => {
                calls.push(c);
                match p.peek() {
                    Ok(b',') => p.i += 1,
                    Err(Fail::Eof) => break,
                    _ => p.i = next_call(body, p.i)?,
                }
            }
            Err(_) if calls.is_empty() => return None,
            Err(_) => match next_call(body, start + 1) {
                Some(k) => p.i = k,
                None => break,
            },
        }
    }
    Some(Parsed { consumed: close + 1, calls, ..Default::default() })
}

/// Just past the next `,` in `s` from `from` that a `name(` follows.
fn next_call(s: &[u8], from: usize) -> Option<usize> {
    (from..s.len())
        .find(|&k| {
            if s[k] != b',' {
                return false;
            }
            let mut j = k + 1;
            while j < s.len() && s[j].is_ascii_whitespace() {
                j += 1;
            }
            let name = j;
            while j < s.len() && (s[j].is_ascii_alphanumeric() || s[j] == b'_' || s[j] == b'.') {
                j += 1;
            }
            j > name && !s[name].is_ascii_digit() && s.get(j) == Some(&b'(')
        })
        .map(|k| k + 1)
}

/// `<|python_start|>f(a=1), g()<|python_end|>` without brackets.
fn bare_calls(region: &str, body: usize, ctx: &Ctx<'_>) -> Step {
    let (text, consumed) = match find(region, END, body) {
        Some(e) => (&region[body..e], e + END.len()),
        None if ctx.eof => (&region[body..], region.len()),
        None => {
            return Step::Need(Wait::Marker { marker: END, from: body });
        }
    };
    let mut p = Py { s: text.as_bytes(), i: 0, depth: 0 };
    match p.calls(None) {
        Ok(calls) if p.i == text.len() => Step::Done(Parsed { consumed, calls, ..Default::default() }),
        _ => Step::Reject,
    }
}

#[derive(Debug, PartialEq)]
enum Fail {
    /// The text ended before the expression did.
    Eof,
    /// Not a call expression.
    Bad,
}

type R<T> = Result<T, Fail>;

/// A small recursive-descent reader for Python call lists and literals.
struct Py<'a> {
    s: &'a [u8],
    i: usize,
    /// Open brackets around the current value: deeper than
    /// [`repair::MAX_DEPTH`](crate::toolcall::repair::MAX_DEPTH) is no call (and no stack overflow).
    depth: usize,
}

impl Py<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> R<u8> {
        self.ws();
        self.s.get(self.i).copied().ok_or(Fail::Eof)
    }

    fn eat(&mut self, b: u8) -> R<()> {
        if self.peek()? != b {
            return Err(Fail::Bad);
        }
        self.i += 1;
        Ok(())
    }

    /// Calls separated by commas, up to `close` (consumed) or, without one,
    /// to the end of the text.
    fn calls(&mut self, close: Option<u8>) -> R<Vec<RawCall>> {
        let mut out = Vec::new();
        loop {
            match (self.peek(), close) {
                (Err(Fail::Eof), None) if !out.is_empty() => return Ok(out),
                (Ok(b), Some(c)) if b == c && !out.is_empty() => {
                    self.i += 1;
                    return Ok(out);
                }
                (r, _) => {
                    r?;
                }
            }
            let start = self.i;
            match self.call() {
                Ok(c) => out.push(c),
                // In a list, one call whose arguments do not parse (`b'z'`)
                // is dropped; the others stand.
                Err(Fail::Bad) if close.is_some() => self.i = self.skip_call(start)?,
                Err(e) => return Err(e),
            }
            match (self.peek(), close) {
                (Ok(b','), _) => self.i += 1,
                (Ok(b), Some(c)) if b == c => {}
                (Err(Fail::Eof), None) => {}
                (r, _) => {
                    r?;
                    return Err(Fail::Bad);
                }
            }
        }
    }

    /// Past the `name(…)` that starts at `start`, brackets and quotes
    /// matched; `Bad` when it is no call (no `(` after a name).
    fn skip_call(&mut self, start: usize) -> R<usize> {
        self.i = start;
        self.dotted()?;
        self.eat(b'(')?;
        let (mut depth, mut i) = (1usize, self.i);
        while i < self.s.len() {
            match self.s[i] {
                q @ (b'"' | b'\'') => {
                    i += 1;
                    while i < self.s.len() && self.s[i] != q {
                        i += if self.s[i] == b'\\' { 2 } else { 1 };
                    }
                }
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(i + 1);
                    }
                }
                _ => {}
            }
            i += 1;
        }
        Err(Fail::Eof)
    }

    fn call(&mut self) -> R<RawCall> {
        let name = self.dotted()?;
        self.eat(b'(')?;
        let mut args = Map::new();
        loop {
            if self.peek()? == b')' {
                self.i += 1;
                return Ok(RawCall { name, args: Args::Value(Value::Object(args)), id: None });
            }
            let key = self.ident()?;
            self.eat(b'=')?;
            let v = self.value()?;
            args.insert(key, v);
            match self.peek()? {
                b',' => self.i += 1,
                b')' => {}
                _ => return Err(Fail::Bad),
            }
        }
    }

    fn ident(&mut self) -> R<String> {
        self.ws();
        let start = self.i;
        while self.i < self.s.len() && (self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == b'_') {
            self.i += 1;
        }
        if self.i == self.s.len() {
            return Err(Fail::Eof);
        }
        if self.i == start || self.s[start].is_ascii_digit() {
            return Err(Fail::Bad);
        }
        Ok(String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }

    /// `a.b.c` (vLLM accepts dotted tool names).
    fn dotted(&mut self) -> R<String> {
        let mut name = self.ident()?;
        while self.s.get(self.i) == Some(&b'.') {
            self.i += 1;
            name.push('.');
            name.push_str(&self.ident()?);
        }
        Ok(name)
    }

    fn value(&mut self) -> R<Value> {
        match self.peek()? {
            b'"' | b'\'' => self.string().map(Value::String),
            b'[' => self.nested(|p| p.seq(b']')).map(Value::Array),
            b'(' => self.nested(|p| p.seq(b')')).map(Value::Array),
            b'{' => self.nested(Self::dict),
            b'-' | b'+' | b'0'..=b'9' | b'.' => self.number(),
            _ => match self.ident()?.as_str() {
                "True" | "true" => Ok(Value::Bool(true)),
                "False" | "false" => Ok(Value::Bool(false)),
                "None" | "null" => Ok(Value::Null),
                _ => Err(Fail::Bad),
            },
        }
    }

    /// `read` one bracket deeper, within the limit.
    fn nested<T>(&mut self, read: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        if self.depth >= crate::toolcall::repair::MAX_DEPTH {
            return Err(Fail::Bad);
        }
        self.depth += 1;
        let r = read(self);
        self.depth -= 1;
        r
    }

    fn seq(&mut self, close: u8) -> R<Vec<Value>> {
        self.i += 1;
        let mut out = Vec::new();
        loop {
            if self.peek()? == close {
                self.i += 1;
                return Ok(out);
            }
            out.push(self.value()?);
            match self.peek()? {
                b',' => self.i += 1,
                b if b == close => {}
                _ => return Err(Fail::Bad),
            }
        }
    }

    /// A dict, or a set (read as a list).
    fn dict(&mut self) -> R<Value> {
        self.i += 1;
        let mut map = Map::new();
        let mut set = Vec::new();
        loop {
            if self.peek()? == b'}' {
                self.i += 1;
                return Ok(if set.is_empty() { Value::Object(map) } else { Value::Array(set) });
            }
            let k = self.value()?;
            if self.peek()? == b':' {
                if !set.is_empty() {
                    return Err(Fail::Bad);
                }
                self.i += 1;
                let key = match k {
                    Value::String(s) => s,
                    Value::Object(_) | Value::Array(_) => return Err(Fail::Bad),
                    other => other.to_string(),
                };
                map.insert(key, self.value()?);
            } else if map.is_empty() {
                set.push(k);
            } else {
                return Err(Fail::Bad);
            }
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {}
                _ => return Err(Fail::Bad),
            }
        }
    }

    fn number(&mut self) -> R<Value> {
        let start = self.i;
        while self.i < self.s.len() && matches!(self.s[self.i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-' | b'_') {
            self.i += 1;
        }
        if self.i == self.s.len() {
            return Err(Fail::Eof);
        }
        let t: String = self.s[start..self.i].iter().filter(|&&b| b != b'_').map(|&b| b as char).collect();
        let t = t.strip_prefix('+').unwrap_or(&t);
        if let Ok(n) = t.parse::<i64>() {
            return Ok(Value::from(n));
        }
        t.parse::<f64>().ok().and_then(Number::from_f64).map(Value::Number).ok_or(Fail::Bad)
    }

    /// A quoted string (single, double or triple quotes) with Python escapes.
    fn string(&mut self) -> R<String> {
        let q = self.s[self.i];
        let triple = self.s[self.i..].starts_with(&[q, q, q]);
        self.i += if triple { 3 } else { 1 };
        let mut out = Vec::new();
        loop {
            let Some(&b) = self.s.get(self.i) else {
                return Err(Fail::Eof);
            };
            if b == q && (!triple || self.s[self.i..].starts_with(&[q, q, q])) {
                self.i += if triple { 3 } else { 1 };
                return String::from_utf8(out).map_err(|_| Fail::Bad);
            }
            self.i += 1;
            if b != b'\\' {
                out.push(b);
                continue;
            }
            let Some(&e) = self.s.get(self.i) else {
                return Err(Fail::Eof);
            };
            self.i += 1;
            match e {
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'r' => out.push(b'\r'),
                b'0' => out.push(0),
                b'\n' => {}
                b'x' | b'u' | b'U' => {
                    let n = match e {
                        b'x' => 2,
                        b'u' => 4,
                        _ => 8,
                    };
                    let hex = self.s.get(self.i..self.i + n).ok_or(Fail::Eof)?;
                    let c = std::str::from_utf8(hex)
                        .ok()
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                        .and_then(char::from_u32)
                        .ok_or(Fail::Bad)?;
                    self.i += n;
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                b'\\' | b'\'' | b'"' => out.push(e),
                other => out.extend_from_slice(&[b'\\', other]),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(s: &str) -> R<Vec<(String, Value)>> {
        let mut p = Py { s: s.as_bytes(), i: 1, depth: 0 };
        let calls = p.calls(Some(b']'))?;
        Ok(calls
            .into_iter()
            .map(|c| match c.args {
                Args::Value(v) => (c.name, v),
                _ => (c.name, Value::Null),
            })
            .collect())
    }

    #[test]
    fn reads_python_literals() {
        let got = read(r#"[f(a='x\'y', b=-2.5, c=(1, 2), d={'k': None, 1: True}, e={3}, g="""q"""), h.i()]"#);
        assert_eq!(
            got,
            Ok(vec![
                (
                    "f".into(),
                    json!({"a": "x'y", "b": -2.5, "c": [1, 2], "d": {"k": null, "1": true}, "e": [3], "g": "q"})
                ),
                ("h.i".into(), json!({})),
            ])
        );
    }

    fn parse_eof(s: &str) -> Step {
        let tools = crate::toolcall::ToolIndex::open();
        Pythonic.parse(s, &Ctx { tools: &tools, eof: true, at_start: true })
    }

    #[test]
    fn salvages_calls_beside_a_broken_quote() {
        let Step::Done(p) = parse_eof("[f(a=1), g(a='x 'y', b='z'), h(c=2)]") else { panic!("no salvage") };
        let names: Vec<&str> = p.calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["f", "h"]);
        // Nothing parses: it stays text.
        assert!(matches!(parse_eof("[g(a='x 'y')]"), Step::Reject));
        assert!(matches!(parse_eof("[see 'it's here'] and f(a=1)"), Step::Reject));
    }

    #[test]
    fn rejects_non_calls() {
        assert_eq!(read("[1, 2, 3]").err(), Some(Fail::Bad));
        assert_eq!(read("[x * 2 for x in y]").err(), Some(Fail::Bad));
        assert_eq!(read("[link](url)").err(), Some(Fail::Bad));
        assert_eq!(read("[f(1)]").err(), Some(Fail::Bad));
        assert_eq!(read("[]").err(), Some(Fail::Bad));
        assert_eq!(read("[f(a=").err(), Some(Fail::Eof));
    }
}
