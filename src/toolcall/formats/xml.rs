//! Helpers the XML-style formats share: peeking at the tag that must come
//! next (to reject prose early while streaming), reading `<function=NAME>`
//! names and `name="…"` attributes, the Qwen3-Coder function body (also used
//! by Seed-OSS), `<invoke name>`/`<parameter name>` blocks (MiniMax-M2,
//! DeepSeek-V3.2 DSML, Step-3) and `<arg_key>`/`<arg_value>` pairs (GLM,
//! Hunyuan-V3).
//!
//! Everything here works on complete text; the parsers decide what to wait
//! for.

use serde_json::Value;

use crate::toolcall::scan::{find, skip_ws, strip_one_newline};
use crate::toolcall::{Ctx, RawCall, Step, ToolIndex, Wait, typing};

/// How the text at a position relates to a set of expected tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peek {
    /// `s[at..]` starts with pattern number `i`.
    Is(usize),
    /// `s[at..]` is a proper prefix of a pattern: more text decides.
    Maybe,
    /// Nothing expected starts here.
    No,
}

/// Which of `pats` starts `s[at..]`.
pub fn peek(s: &str, at: usize, pats: &[&str]) -> Peek {
    let rest = s.as_bytes().get(at..).unwrap_or_default();
    if let Some(i) = pats.iter().position(|p| rest.starts_with(p.as_bytes())) {
        return Peek::Is(i);
    }
    if pats.iter().any(|p| p.as_bytes().starts_with(rest)) { Peek::Maybe } else { Peek::No }
}

/// The answer while a decision needs a few more bytes: wait for one more
/// (these waits are bounded by a tag or name length), or give up at the end.
pub fn more(region: &str, ctx: &Ctx<'_>) -> Step {
    if ctx.eof { Step::Reject } else { Step::Need(Wait::Len(region.len() + 1)) }
}

/// Longest tool name we wait for before deciding the text is prose.
const MAX_NAME: usize = 256;

fn is_name_byte(b: u8) -> bool {
    // Non-ASCII bytes are allowed (names in other scripts); only what would
    // make the name markup or prose is excluded.
    !(b.is_ascii_whitespace() || b"<>{}()[]\"'`,;=".contains(&b))
}

/// A name read from `NAME>` (as in `<function=NAME>`).
#[derive(Debug, PartialEq, Eq)]
pub enum Name<'a> {
    /// The name and the index just past `>`.
    Done(&'a str, usize),
    /// Only name bytes so far.
    More,
    /// Not a name: the text is prose.
    Bad,
}

/// Reads a tool name running from `at` to the next `>`.
pub fn name_until_gt(s: &str, at: usize) -> Name<'_> {
    let b = s.as_bytes();
    let mut i = at;
    while i < b.len() && i - at <= MAX_NAME {
        match b[i] {
            b'>' if i > at => return Name::Done(&s[at..i], i + 1),
            x if is_name_byte(x) => i += 1,
            _ => return Name::Bad,
        }
    }
    if i - at > MAX_NAME { Name::Bad } else { Name::More }
}

/// Whether `s` is a plausible tool name (no spaces or markup).
pub fn plausible_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME && s.bytes().all(is_name_byte)
}

/// The value of attribute `key` in an opening tag's text (`name="x"`,
/// `name='x'` or `name=x`).
pub fn attr<'a>(tag: &'a str, key: &str) -> Option<&'a str> {
    let b = tag.as_bytes();
    let mut from = 0;
    while let Some(k) = find(tag, key, from) {
        from = k + 1;
        let before_ok = k == 0 || b[k - 1].is_ascii_whitespace() || b[k - 1] == b'<';
        let eq = skip_ws(tag, k + key.len());
        if !before_ok || b.get(eq) != Some(&b'=') {
            continue;
        }
        let v = skip_ws(tag, eq + 1);
        return match b.get(v) {
            Some(&q @ (b'"' | b'\'')) => {
                let end = tag[v + 1..].find(q as char).map_or(tag.len(), |e| v + 1 + e);
                Some(&tag[v + 1..end])
            }
            Some(_) => {
                let end = tag[v..]
                    .find(|c: char| c.is_ascii_whitespace() || c == '>' || c == '/')
                    .map_or(tag.len(), |e| v + e);
                Some(&tag[v..end])
            }
            None => None,
        };
    }
    None
}

/// Index of the first `pat` at or after `from` whose following text (after
/// whitespace or literal `\n`) is the end of `s` or starts with one of `next`. Used to tell
/// closing tags from the same text inside a raw value.
pub fn structural(s: &str, pat: &str, from: usize, next: &[&str]) -> Option<usize> {
    let mut at = from;
    while let Some(p) = find(s, pat, at) {
        let after = skip_escaped_ws(s, p + pat.len());
        if after == s.len() || next.iter().any(|n| s[after..].starts_with(n)) {
            return Some(p);
        }
        at = p + 1;
    }
    None
}

/// Finds the `close` tag that ends a region: the first at or after `from`
/// for which `ok(index)` holds (the others may be text inside a value). At
/// the end of output the first `close` of all is taken; `Ok(None)` then
/// means there is none. `Err` is the step to answer while waiting.
pub fn find_close(
    region: &str,
    from: usize,
    close: &'static str,
    ctx: &Ctx<'_>,
    ok: impl Fn(usize) -> bool,
) -> Result<Option<usize>, Step> {
    let mut first = None;
    let mut at = from;
    while let Some(c) = find(region, close, at) {
        if ok(c) {
            return Ok(Some(c));
        }
        first = first.or(Some(c));
        at = c + 1;
    }
    if ctx.eof { Ok(first) } else { Err(Step::Need(Wait::Marker { marker: close, from: at })) }
}

// ---------------------------------------------------------------------------
// Qwen3-Coder body: `<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>`

pub const FUNCTION: &str = "<function=";
const FUNCTION_END: &str = "</function>";
const PARAM: &str = "<parameter=";
const PARAM_END: &str = "</parameter>";

/// Checks the opening of a Qwen3-Coder function at `at` while it streams in:
/// `<function=NAME>` followed by `<parameter=` or `</function>`. `None` means
/// it looks right so far and the caller may wait for its closing tag.
pub fn qwen_opening(region: &str, at: usize, ctx: &Ctx<'_>) -> Option<Step> {
    match peek(region, at, &[FUNCTION]) {
        Peek::Is(_) => {}
        Peek::Maybe => return Some(more(region, ctx)),
        Peek::No => return Some(Step::Reject),
    }
    let after = match name_until_gt(region, at + FUNCTION.len()) {
        Name::Done(_, after) => after,
        Name::More => return Some(more(region, ctx)),
        Name::Bad => return Some(Step::Reject),
    };
    match peek(region, skip_ws(region, after), &[PARAM, FUNCTION_END]) {
        Peek::Is(_) => None,
        Peek::Maybe => Some(more(region, ctx)),
        Peek::No => Some(Step::Reject),
    }
}

/// Parses the `<function=…>` blocks of a complete Qwen3-Coder body (the text
/// inside `<tool_call>…</tool_call>`). `None` when there is no function.
pub fn qwen_calls(body: &str, tools: &ToolIndex) -> Option<Vec<RawCall>> {
    let mut calls = Vec::new();
    let mut i = skip_ws(body, 0);
    while body[i..].starts_with(FUNCTION) {
        let Name::Done(name, open_end) = name_until_gt(body, i + FUNCTION.len()) else {
            break;
        };
        // `</function>` ends the call only when another call or the end of
        // the body follows; else the first one (the model left junk after).
        let end = structural(body, FUNCTION_END, open_end, &[FUNCTION]).or_else(|| find(body, FUNCTION_END, open_end));
        let inner = &body[open_end..end.unwrap_or(body.len())];
        let schema = tools.schema(name);
        let args = typing::object_from_pairs(schema, qwen_params(inner, schema));
        calls.push(RawCall::value(name, args));
        match end {
            Some(e) => i = skip_ws(body, e + FUNCTION_END.len()),
            None => break,
        }
    }
    (!calls.is_empty()).then_some(calls)
}

/// The `(key, value)` pairs of a function's inside. A `</parameter>` closes a
/// value only when the next parameter or the end follows; a missing one is
/// implied by the next `<parameter=` naming a parameter not seen yet (and
/// declared, when the schema lists properties).
fn qwen_params<'a>(inner: &'a str, schema: Option<&Value>) -> Vec<(&'a str, &'a str)> {
    let props = schema.and_then(|s| s.get("properties")).and_then(Value::as_object);
    let mut out: Vec<(&str, &str)> = Vec::new();
    let mut next = find(inner, PARAM, 0);
    while let Some(at) = next {
        let Some(gt) = find(inner, ">", at) else {
            break;
        };
        let key = inner[at + PARAM.len()..gt].trim();
        let start = gt + 1;
        let closed = param_close(inner, start, props).or_else(|| structural(inner, PARAM_END, start, &[PARAM]));
        let implied = implied_param(inner, start, &out, key, props);
        let (end, after) = match (closed, implied) {
            (Some(c), Some(p)) if p < c => (p, Some(p)),
            (Some(c), _) => (c, find(inner, PARAM, c)),
            (None, Some(p)) => (p, Some(p)),
            // Neither: the value runs to its first `</parameter>` or the end.
            (None, None) => (find(inner, PARAM_END, start).unwrap_or(inner.len()), None),
        };
        out.push((key, strip_one_newline(&inner[start..end])));
        next = after;
    }
    out
}

/// Most tags [`param_close`] walks inside one value before it leaves the
/// value to the plain structural reading.
const MAX_NESTED_TAGS: usize = 256;

/// The `</parameter>` that closes the value starting at `start`, when the
/// value holds Qwen markup as text (a file with a tool call in it):
/// `<parameter=…>`…`</parameter>` pairs inside it are skipped, and a close at
/// depth 0 counts when the end or a declared `<parameter=NAME>` follows.
/// `None` leaves it to the plain structural reading.
fn param_close(inner: &str, start: usize, props: Option<&serde_json::Map<String, Value>>) -> Option<usize> {
    let declared = |name: &str| props.is_none_or(|m| m.is_empty() || m.contains_key(name));
    let mut depth = 0usize;
    let mut open = find(inner, PARAM, start);
    let mut close = find(inner, PARAM_END, start);
    // Bounded, so text full of unclosed tags costs no more than before.
    for _ in 0..MAX_NESTED_TAGS {
        let c = close?;
        if let Some(o) = open.filter(|&o| o < c) {
            if matches!(name_until_gt(inner, o + PARAM.len()), Name::Done(..)) {
                depth += 1;
            }
            open = find(inner, PARAM, o + PARAM.len());
            continue;
        }
        let end = c + PARAM_END.len();
        close = find(inner, PARAM_END, end);
        if depth > 0 {
            depth -= 1;
            continue;
        }
        let after = skip_escaped_ws(inner, end);
        if after == inner.len() {
            return Some(c);
        }
        if inner[after..].starts_with(PARAM) {
            match name_until_gt(inner, after + PARAM.len()) {
                Name::Done(name, _) if !declared(name) => {}
                _ => return Some(c),
            }
        }
    }
    None
}

/// The next `<parameter=NAME>` after `from` that can start a new parameter.
fn implied_param(
    inner: &str,
    from: usize,
    seen: &[(&str, &str)],
    current: &str,
    props: Option<&serde_json::Map<String, Value>>,
) -> Option<usize> {
    let mut at = from;
    while let Some(p) = find(inner, PARAM, at) {
        at = p + 1;
        let Name::Done(name, _) = name_until_gt(inner, p + PARAM.len()) else {
            continue;
        };
        let unseen = name != current && seen.iter().all(|(k, _)| *k != name);
        if unseen && props.is_none_or(|m| m.is_empty() || m.contains_key(name)) {
            return Some(p);
        }
    }
    None
}

/// Drives a Qwen3-Coder body wrapped in `open`…`close` (`<tool_call>`,
/// `<seed:tool_call>`): waits for a `close` that follows `</function>` or
/// `</parameter>` (a bare one may sit inside a value); at the end of output
/// takes the first `close`, or an unclosed body that ends in `</function>`.
pub fn qwen_block(region: &str, open: &str, close: &'static str, ctx: &Ctx<'_>) -> Step {
    let body = skip_ws(region, open.len());
    if let Some(step) = qwen_opening(region, body, ctx) {
        return step;
    }
    // A `<tool_call>` inside the body is text in a value (a file holding a
    // call): the close that pairs with it is text too. Counted as the
    // candidates come, so the scan stays linear.
    let seen = std::cell::Cell::new((body, 0usize, 0usize));
    let closed = |c: usize| {
        let (from, mut opens, closes) = seen.get();
        opens += region[from.min(c)..c].matches(open).count();
        seen.set((c, opens, closes + 1));
        let before = region[body..c].trim_end();
        opens <= closes && (before.ends_with(FUNCTION_END) || before.ends_with(PARAM_END))
    };
    match find_close(region, body, close, ctx, closed) {
        Err(step) => step,
        Ok(Some(c)) => qwen_done(region, body, c, c + close.len(), ctx),
        Ok(None) if region.trim_end().ends_with(FUNCTION_END) => {
            qwen_done(region, body, region.len(), region.len(), ctx)
        }
        // Truncated: no call is made up from half a function.
        Ok(None) => Step::Reject,
    }
}

/// A finished region whose Qwen3-Coder body is `region[body..end]`.
pub fn qwen_done(region: &str, body: usize, end: usize, consumed: usize, ctx: &Ctx<'_>) -> Step {
    match qwen_calls(&region[body..end], ctx.tools) {
        Some(calls) => Step::Done(crate::toolcall::Parsed { consumed, calls, ..Default::default() }),
        None => Step::Reject,
    }
}

// ---------------------------------------------------------------------------
// `<invoke name="N"><parameter name="K">V</parameter></invoke>` (with a tag
// namespace such as `steptml:`).

/// One `<invoke>` block.
#[derive(Debug)]
pub struct Invoke<'a> {
    pub name: &'a str,
    /// The text between the opening tag and `</invoke>`.
    pub inner: &'a str,
}

/// One `<parameter>` of an invoke.
#[derive(Debug)]
pub struct Param<'a> {
    /// The opening tag's text, for other attributes (`string="true"`).
    pub tag: &'a str,
    pub name: &'a str,
    pub value: &'a str,
}

/// The complete `<{ns}invoke name=…>…</{ns}invoke>` blocks of `s`, and the
/// index just past the last one. A closing tag counts only when another
/// invoke or the end of `s` (after whitespace and `stop` tags) follows,
/// else the first closing tag is taken. An invoke that never closes ends the
/// list (truncated output).
pub fn invokes<'a>(s: &'a str, ns: &str, stop: &[&str]) -> (Vec<Invoke<'a>>, usize) {
    let open = format!("<{ns}invoke");
    let close = format!("</{ns}invoke>");
    let mut next: Vec<&str> = vec![open.as_str()];
    next.extend_from_slice(stop);
    let mut out = Vec::new();
    let mut end = 0;
    let mut at = skip_ws(s, 0);
    while s[at..].starts_with(&open) {
        let Some(gt) = find(s, ">", at) else { break };
        let tag = &s[at..gt];
        let Some(name) = attr(tag, "name") else { break };
        let Some(c) = structural(s, &close, gt + 1, &next).or_else(|| find(s, &close, gt + 1)) else {
            break;
        };
        out.push(Invoke { name: name.trim(), inner: &s[gt + 1..c] });
        end = c + close.len();
        at = skip_ws(s, end);
    }
    (out, end)
}

/// The `<{ns}parameter name=…>…</{ns}parameter>` entries of an invoke's
/// inside. Values are raw text; a closing tag counts only before the next
/// parameter or the end, and a missing one is implied by the next parameter.
pub fn params<'a>(inner: &'a str, ns: &str) -> Vec<Param<'a>> {
    let open = format!("<{ns}parameter");
    let close = format!("</{ns}parameter>");
    let mut out = Vec::new();
    let mut next = find(inner, &open, 0);
    while let Some(at) = next {
        let Some(gt) = find(inner, ">", at) else {
            break;
        };
        let tag = &inner[at..gt];
        let start = gt + 1;
        let closed = structural(inner, &close, start, &[open.as_str()]);
        let following = find(inner, &open, start);
        let (end, after, implied) = match (closed, following) {
            (Some(c), Some(f)) if f < c => (f, Some(f), true),
            (Some(c), _) => (c, find(inner, &open, c), false),
            (None, f) => match find(inner, &close, start) {
                Some(c) if f.is_none_or(|f| c < f) => (c, f, false),
                _ => (f.unwrap_or(inner.len()), f, true),
            },
        };
        // Templates write values inline, so a value keeps its newlines;
        // only a value whose closing tag is missing loses the layout
        // newline before the next tag.
        let value = &inner[start..end];
        let value = if implied { value.strip_suffix('\n').unwrap_or(value) } else { value };
        if let Some(name) = attr(tag, "name") {
            out.push(Param { tag, name: name.trim(), value });
        }
        next = after;
    }
    out
}

/// Arguments from an invoke's parameters, typed by the tool's schema.
pub fn invoke_args(inv: &Invoke<'_>, ns: &str, tools: &ToolIndex) -> Value {
    let ps = params(inv.inner, ns);
    typing::object_from_pairs(tools.schema(inv.name), ps.iter().map(|p| (p.name, p.value)))
}

// ---------------------------------------------------------------------------
// `<arg_key>K</arg_key><arg_value>V</arg_value>` pairs (GLM, Hunyuan-V3).

/// The spellings of the four pair tags (Hunyuan suffixes them).
pub struct PairTags<'t> {
    pub key: &'t str,
    pub key_end: &'t str,
    pub value: &'t str,
    pub value_end: &'t str,
}

pub const ARG_TAGS: PairTags<'static> =
    PairTags { key: "<arg_key>", key_end: "</arg_key>", value: "<arg_value>", value_end: "</arg_value>" };

/// The `(key, value)` pairs in `s`. A value closes at its `</arg_value>`
/// when the next key or the end follows (else at the first one); a value
/// with no closing tag runs to the next key or the end.
pub fn pairs<'a>(s: &'a str, t: &PairTags<'_>) -> Vec<(&'a str, &'a str)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(k) = find(s, t.key, at) {
        let ks = k + t.key.len();
        let Some(ke) = find(s, t.key_end, ks) else {
            break;
        };
        let key = &s[ks..ke];
        let mut i = ke + t.key_end.len();
        // Tolerate whitespace and literal `\n` between the tags.
        i = skip_escaped_ws(s, i);
        if !s[i..].starts_with(t.value) {
            at = i;
            continue;
        }
        let vs = i + t.value.len();
        let (ve, next) = match structural(s, t.value_end, vs, &[t.key]) {
            Some(e) => (e, e + t.value_end.len()),
            None => match (find(s, t.value_end, vs), find(s, t.key, vs)) {
                (Some(e), _) => (e, e + t.value_end.len()),
                (None, Some(n)) => (n, n),
                (None, None) => (s.len(), s.len()),
            },
        };
        out.push((key, &s[vs..ve]));
        at = next;
    }
    out
}

/// Skips whitespace and literal `\n` escapes (GLM sometimes writes the two
/// characters instead of a newline).
pub fn skip_escaped_ws(s: &str, mut i: usize) -> usize {
    loop {
        let j = skip_ws(s, i);
        if s[j..].starts_with("\\n") {
            i = j + 2;
        } else {
            return j;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peeks_and_names() {
        assert_eq!(peek("<func", 0, &[FUNCTION]), Peek::Maybe);
        assert_eq!(peek("<function=x", 0, &[PARAM, FUNCTION]), Peek::Is(1));
        assert_eq!(peek("hello", 0, &[FUNCTION]), Peek::No);
        assert_eq!(name_until_gt("get_weather>", 0), Name::Done("get_weather", 12));
        assert_eq!(name_until_gt("get_wea", 0), Name::More);
        assert_eq!(name_until_gt("a b>", 0), Name::Bad);
        assert_eq!(name_until_gt(">", 0), Name::Bad);
    }

    #[test]
    fn reads_attributes() {
        assert_eq!(attr(r#"<invoke name="get_weather""#, "name"), Some("get_weather"));
        assert_eq!(attr(r#"<p name='k' string="false""#, "string"), Some("false"));
        assert_eq!(attr(r#"<p rename="x" name=k"#, "name"), Some("k"));
        assert_eq!(attr("<p>", "name"), None);
    }

    #[test]
    fn qwen_parameter_structure() {
        let inner = "\n<parameter=code>\na</parameter>b\n</parameter>\n<parameter=n>\n1\n</parameter>\n";
        assert_eq!(qwen_params(inner, None), vec![("code", "a</parameter>b"), ("n", "1")]);
        // Qwen markup inside a value is text (vLLM test_qwen3_xml_coder_shared.py
        // test_content_with_param_like_lines / _full_nested_tool_call).
        let schema = serde_json::json!({"properties": {"path": {}, "content": {}}});
        let inner = "<parameter=content>\nT = \"\"\"\n</parameter>\n<parameter=new_string>\nx\n</parameter>\n\"\"\"\n</parameter>\n";
        assert_eq!(
            qwen_params(inner, Some(&schema)),
            vec![("content", "T = \"\"\"\n</parameter>\n<parameter=new_string>\nx\n</parameter>\n\"\"\"")]
        );
        let inner = "<parameter=path>\np\n</parameter>\n<parameter=content>\n<parameter=path>\nq\n</parameter>\n<parameter=content>\nhi\n</parameter>\nend\n</parameter>\n";
        assert_eq!(
            qwen_params(inner, Some(&schema)),
            vec![
                ("path", "p"),
                ("content", "<parameter=path>\nq\n</parameter>\n<parameter=content>\nhi\n</parameter>\nend")
            ]
        );
        // Missing `</parameter>`: the next unseen parameter ends the value.
        let inner = "<parameter=a>\nx\n<parameter=b>\ny\n</parameter>";
        assert_eq!(qwen_params(inner, None), vec![("a", "x"), ("b", "y")]);
    }

    #[test]
    fn invoke_blocks() {
        let s = "<invoke name=\"f\">\n<parameter name=\"a\">1</parameter>\n</invoke>\n<invoke name=\"g\"></invoke>";
        let (inv, end) = invokes(s, "", &[]);
        assert_eq!(end, s.len());
        assert_eq!(inv.len(), 2);
        let ps = params(inv[0].inner, "");
        assert_eq!((ps[0].name, ps[0].value), ("a", "1"));
        // An unclosed invoke is left out.
        let (inv, _) = invokes("<invoke name=\"f\"><parameter name=\"a\">1", "", &[]);
        assert!(inv.is_empty());
    }

    #[test]
    fn arg_pairs() {
        let s = "f\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\\n<arg_key>b</arg_key><arg_value>x</arg_value>";
        assert_eq!(pairs(s, &ARG_TAGS), vec![("a", "1"), ("b", "x")]);
    }
}
