//! OpenAI Harmony (gpt-oss-20b / gpt-oss-120b). The output is a sequence of
//! messages:
//!
//! ```text
//! <|channel|>analysis<|message|>thinking…<|end|>
//! <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{json}<|call|>
//! <|start|>assistant<|channel|>final<|message|>answer<|return|>
//! ```
//!
//! One region is one message header, from `<|start|>` or `<|channel|>`.
//! The recipient `to=functions.NAME` (after the channel name, or before
//! `<|channel|>`; the `functions.` prefix may be missing) makes the message a
//! call on any channel, the analysis channel included; the constraint
//! (`<|constrain|>json`, a bare `json` or `code`) is ignored. A message ends at
//! `<|call|>`, `<|end|>` or `<|return|>` (or where the next one starts).
//! Without a recipient, `analysis` is reasoning and any other channel
//! (`final`, `commentary` preambles) is content: its header is dropped and
//! the body streams on as text, the end token being dropped on its own.

use super::json_calls::whole_json;
use crate::toolcall::scan::find;
use crate::toolcall::{Args, Ctx, Format, Parsed, RawCall, Step, Wait};

pub struct Harmony;

const START: &str = "<|start|>";
const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
const CONSTRAIN: &str = "<|constrain|>";
/// Tokens that end a message (consumed with it).
const ENDS: &[&str] = &["<|end|>", "<|call|>", "<|return|>"];
/// Longest header we accept between the opening token and `<|message|>`.
const HEADER_MAX: usize = 256;

impl Format for Harmony {
    fn name(&self) -> &'static str {
        "harmony"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[START, CHANNEL, "<|end|>", "<|call|>", "<|return|>"]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        // A lone end token closes a streamed `final` message: drop it.
        if let Some(end) = ENDS.iter().find(|e| region.starts_with(**e)) {
            return Step::Done(Parsed { consumed: end.len(), ..Default::default() });
        }
        let Some(msg) = find(region, MESSAGE, 0) else {
            return if ctx.eof { Step::Reject } else { Step::Need(Wait::Marker { marker: MESSAGE, from: 0 }) };
        };
        let Some(h) = Header::parse(&region[..msg]) else {
            return Step::Reject;
        };
        let body = msg + MESSAGE.len();
        let (recipient, analysis) = match (h.recipient, h.channel) {
            (Some(r), _) => (Some(r), false),
            (None, Some("analysis")) => (None, true),
            // Visible text: let it stream as ordinary text.
            (None, _) => {
                return Step::Done(Parsed { consumed: body, ..Default::default() });
            }
        };
        let (end, consumed) = match message_end(region, body) {
            End::At(end, consumed) => (end, consumed),
            End::Need(w) if !ctx.eof => return Step::Need(w),
            End::Need(_) => (region.len(), region.len()),
        };
        let text = &region[body..end];
        if analysis {
            return Step::Done(Parsed { consumed, reasoning: text.to_string(), ..Default::default() });
        }
        let text = if end == region.len() && consumed == end {
            // Truncated call: only whole JSON arguments make a call.
            match whole_json(text) {
                Some(t) => t,
                None => return Step::Reject,
            }
        } else {
            text.trim()
        };
        let name = recipient.unwrap_or_default();
        let name = name.strip_prefix("functions.").unwrap_or(name);
        let args = if text.starts_with('{') || text.is_empty() {
            Args::Json(text.to_string())
        } else {
            Args::Text(text.to_string())
        };
        let call = RawCall { name: name.to_string(), args, id: None };
        Step::Done(Parsed { consumed, calls: vec![call], ..Default::default() })
    }
}

/// The parts of a message header that matter.
struct Header<'a> {
    channel: Option<&'a str>,
    recipient: Option<&'a str>,
}

impl<'a> Header<'a> {
    /// Reads `<|start|>ROLE [to=R]<|channel|>CHANNEL [to=R] [<|constrain|>]TYPE`.
    fn parse(h: &'a str) -> Option<Self> {
        if h.len() > HEADER_MAX {
            return None;
        }
        let h = h.strip_prefix(START).unwrap_or(h);
        let (role, channel) = match h.split_once(CHANNEL) {
            Some((role, ch)) => (role, Some(ch)),
            None => (h, None),
        };
        let channel_words = channel.map(|c| c.split(CONSTRAIN).flat_map(str::split_whitespace));
        let mut recipient = None;
        let mut name = None;
        let words = role.split_whitespace().chain(channel_words.into_iter().flatten());
        for w in words {
            if w.contains("<|") {
                return None;
            }
            if let Some(r) = w.strip_prefix("to=") {
                recipient = Some(r);
            }
        }
        if let Some(c) = channel {
            name = c.split(CONSTRAIN).next().and_then(|c| c.split_whitespace().next());
            if name.is_none_or(|n| n.starts_with("to=")) {
                name = None;
            }
        }
        Some(Header { channel: name, recipient: recipient.filter(|r| !r.is_empty()) })
    }
}

enum End {
    /// Body ends at `.0`; the message (with its end token) at `.1`.
    At(usize, usize),
    Need(Wait),
}

/// Finds where the body that starts at `body` ends: an end token, or the
/// header of the next message (left for the next region). Every `<|` is
/// looked at once; other `<|…` text stays in the body.
fn message_end(region: &str, body: usize) -> End {
    let mut from = body;
    while let Some(p) = find(region, "<|", from) {
        let tail = &region[p..];
        if let Some(e) = ENDS.iter().find(|e| tail.starts_with(**e)) {
            return End::At(p, p + e.len());
        }
        if tail.starts_with(START) || tail.starts_with(CHANNEL) {
            return End::At(p, p);
        }
        if ENDS.iter().chain([START, CHANNEL].iter()).any(|t| t.len() > tail.len() && t.starts_with(tail)) {
            return End::Need(Wait::Len(region.len() + 1));
        }
        from = p + 2;
    }
    // A `<|` split across chunks may start at the last byte.
    End::Need(Wait::Marker { marker: "<|", from: region.len().saturating_sub(1).max(from) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_variants() {
        let h = Header::parse("<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json");
        assert!(h.is_some_and(|h| h.channel == Some("commentary") && h.recipient == Some("functions.f")));
        let h = Header::parse("<|start|>assistant to=functions.f<|channel|>commentary json");
        assert!(h.is_some_and(|h| h.channel == Some("commentary") && h.recipient == Some("functions.f")));
        let h = Header::parse("<|channel|>analysis");
        assert!(h.is_some_and(|h| h.channel == Some("analysis") && h.recipient.is_none()));
        assert!(Header::parse("<|channel|>final <|foo|>").is_none());
    }
}
