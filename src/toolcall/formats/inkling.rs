//! Inkling TML (smg `InklingParser`, SGLang `inkling_detector`): typed
//! messages, a call being
//!
//! ```text
//! <|message_model|>NAME<|content_invoke_tool_json|>{"name": "NAME", "args": {…}}<|end_message|>
//! ```
//!
//! and visible text `<|message_model|><|content_text|>TEXT<|end_message|>`,
//! the turn ending with `<|content_model_end_sampling|>`. The framing tokens
//! are dropped from content, a `<|content_thinking|>` message is reasoning,
//! and a text-mode invocation (`<|content_invoke_tool_text|>`), which no JSON
//! call can carry, is dropped with its frame as smg does.

use serde_json::Value;
use serde_json::value::RawValue;

use crate::toolcall::scan::{find, json_end, skip_ws};
use crate::toolcall::{Args, Ctx, Format, Parsed, RawCall, Step, Wait};

pub struct Inkling;

const MESSAGE: &str = "<|message_model|>";
const JSON_CALL: &str = "<|content_invoke_tool_json|>";
const TEXT_CALL: &str = "<|content_invoke_tool_text|>";
const TEXT: &str = "<|content_text|>";
const THINKING: &str = "<|content_thinking|>";
const END: &str = "<|end_message|>";
const END_SAMPLING: &str = "<|content_model_end_sampling|>";
/// Longest header (the tool name) we wait for.
const MAX_HEADER: usize = 256;

impl Format for Inkling {
    fn name(&self) -> &'static str {
        "inkling"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[MESSAGE, JSON_CALL, TEXT_CALL]
    }

    fn strays(&self) -> &'static [&'static str] {
        &[END, END_SAMPLING, TEXT]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        if !region.starts_with(MESSAGE) {
            return payload(region, 0, ctx);
        }
        let head = MESSAGE.len();
        let rest = &region[head..];
        if rest.starts_with(TEXT) {
            // A text message: its tokens go, its text stays.
            return Step::Done(Parsed { consumed: head + TEXT.len(), ..Default::default() });
        }
        if rest.starts_with(THINKING) {
            let from = head + THINKING.len();
            return match find(region, END, from) {
                Some(e) => Step::Done(Parsed {
                    consumed: e + END.len(),
                    reasoning: region[from..e].to_string(),
                    ..Default::default()
                }),
                None if ctx.eof => Step::Done(Parsed {
                    consumed: region.len(),
                    reasoning: region[from..].to_string(),
                    ..Default::default()
                }),
                None => Step::Need(Wait::Marker { marker: END, from }),
            };
        }
        if !ctx.eof && (TEXT.starts_with(rest) || THINKING.starts_with(rest)) {
            return Step::Need(Wait::Len(head + THINKING.len()));
        }
        // `NAME<|content_invoke_tool_…|>`: the header is the name, no markup.
        let Some(lt) = find(region, "<", head) else {
            return if ctx.eof || rest.len() > MAX_HEADER {
                Step::Reject
            } else {
                Step::Need(Wait::Len(region.len() + 1))
            };
        };
        if lt - head > MAX_HEADER {
            return Step::Reject;
        }
        let tail = &region[lt..];
        if tail.starts_with(JSON_CALL) || tail.starts_with(TEXT_CALL) {
            return payload(region, lt, ctx);
        }
        if !ctx.eof && (JSON_CALL.starts_with(tail) || TEXT_CALL.starts_with(tail)) {
            return Step::Need(Wait::Len(lt + JSON_CALL.len().max(TEXT_CALL.len())));
        }
        Step::Reject
    }
}

/// The call at `at` (which holds a `content_invoke_tool_…` token).
fn payload(region: &str, at: usize, ctx: &Ctx<'_>) -> Step {
    if region[at..].starts_with(TEXT_CALL) {
        let from = at + TEXT_CALL.len();
        return match frame_end(region, from) {
            Some(end) => Step::Done(Parsed { consumed: end, ..Default::default() }),
            None if ctx.eof => Step::Done(Parsed { consumed: region.len(), ..Default::default() }),
            None => Step::Need(Wait::Marker { marker: END, from }),
        };
    }
    let body = skip_ws(region, at + JSON_CALL.len());
    match region.as_bytes().get(body) {
        None if !ctx.eof => return Step::Need(Wait::Len(body + 1)),
        Some(b'{') => {}
        _ => return Step::Reject,
    }
    let Some(end) = json_end(region, body) else {
        return if ctx.eof { Step::Reject } else { Step::Need(Wait::Balanced { from: body }) };
    };
    let Some(call) = call(&region[body..end]) else { return Step::Reject };
    let after = skip_ws(region, end);
    let rest = &region[after..];
    let consumed = if let Some(t) = [END, END_SAMPLING].into_iter().find(|t| rest.starts_with(*t)) {
        after + t.len()
    } else if !ctx.eof && (rest.is_empty() || END.starts_with(rest) || END_SAMPLING.starts_with(rest)) {
        return Step::Need(if rest.is_empty() {
            Wait::NonSpaceAfter { from: end }
        } else {
            Wait::Len(after + END_SAMPLING.len().max(END.len()))
        });
    } else {
        end
    };
    Step::Done(Parsed { consumed, calls: vec![call], ..Default::default() })
}

/// Past the first end token after `from`.
fn frame_end(region: &str, from: usize) -> Option<usize> {
    [END, END_SAMPLING].into_iter().filter_map(|t| find(region, t, from).map(|i| i + t.len())).min()
}

/// `{"name": …, "args": {…}}`; the arguments bytes are kept as written.
fn call(obj: &str) -> Option<RawCall> {
    #[derive(serde::Deserialize)]
    struct Shape<'a> {
        name: String,
        #[serde(borrow)]
        args: Option<&'a RawValue>,
    }
    let s: Shape<'_> = serde_json::from_str(obj).ok()?;
    let args = match s.args {
        Some(a) if a.get().trim_start().starts_with('{') => Args::Checked(a.get().to_string()),
        Some(_) => return None,
        None => match serde_json::from_str::<Value>(obj).ok()?.get("arguments") {
            Some(v @ Value::Object(_)) => Args::Checked(v.to_string()),
            _ => Args::Empty,
        },
    };
    Some(RawCall { name: s.name, args, id: None })
}
