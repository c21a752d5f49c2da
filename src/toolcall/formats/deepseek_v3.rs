//! DeepSeek-V3 / V3-0324 / R1 / R1-0528 (and R1 distills):
//!
//! ```text
//! <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//! ```json
//! {"city": "Hangzhou"}
//! ```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>
//! ```
//!
//! The tokens use U+FF5C `｜` and U+2581 `▁`; re-tokenized output and distills
//! also spell `▁` as `_`, which is accepted too. Parallel calls repeat the
//! call block. DeepSeek-V3.1 shares the tokens with a different body
//! (`NAME<｜tool▁sep｜>{json}`, see `deepseek_v31`): this parser takes only
//! bodies that start with the `function` type.

use super::json_calls::{Frame, body_start, framed, whole_json};
use crate::toolcall::scan::split_once;
use crate::toolcall::{Args, Ctx, Format, RawCall, Step};

pub struct DeepseekV3;

/// One spelling of the DeepSeek tool tokens.
pub(super) struct Tokens {
    pub frame: Frame,
    pub sep: &'static str,
}

pub(super) static TOKENS: [Tokens; 2] = [
    Tokens {
        frame: Frame {
            section_begin: "<｜tool▁calls▁begin｜>",
            call_begin: "<｜tool▁call▁begin｜>",
            call_end: "<｜tool▁call▁end｜>",
            section_end: "<｜tool▁calls▁end｜>",
        },
        sep: "<｜tool▁sep｜>",
    },
    Tokens {
        frame: Frame {
            section_begin: "<｜tool_calls_begin｜>",
            call_begin: "<｜tool_call_begin｜>",
            call_end: "<｜tool_call_end｜>",
            section_end: "<｜tool_calls_end｜>",
        },
        sep: "<｜tool_sep｜>",
    },
];

/// Closing and end-of-sentence tokens that leak alone (after a call the
/// section was already closed, or the serving stack kept the EOS token).
/// The `_` spellings are Step-3's tokens too, whose unclosed block stays text.
pub(super) const STRAYS: &[&str] = &["<｜tool▁calls▁end｜>", "<｜tool▁call▁end｜>", "<｜end▁of▁sentence｜>"];

pub(super) const MARKERS: &[&str] =
    &["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool_calls_begin｜>", "<｜tool_call_begin｜>"];

/// The token spelling a region opens with.
pub(super) fn tokens(region: &str) -> Option<&'static Tokens> {
    TOKENS.iter().find(|t| region.starts_with(t.frame.section_begin) || region.starts_with(t.frame.call_begin))
}

impl Format for DeepseekV3 {
    fn name(&self) -> &'static str {
        "deepseek_v3"
    }

    fn markers(&self) -> &'static [&'static str] {
        MARKERS
    }

    fn strays(&self) -> &'static [&'static str] {
        STRAYS
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let Some(t) = tokens(region) else {
            return Step::Reject;
        };
        // V3.1 bodies (`NAME<｜tool▁sep｜>…`) share the tokens: reject them on
        // their first bytes rather than once their call is complete.
        if let Some(at) = body_start(region, &t.frame) {
            let head = region[at..].trim_start().as_bytes();
            if !KIND.as_bytes().starts_with(&head[..head.len().min(KIND.len())]) {
                return Step::Reject;
            }
        }
        framed(region, ctx, &t.frame, |body, complete| call(body, t.sep, complete))
    }
}

/// The call type every V3 body opens with.
const KIND: &str = "function";

/// `function<｜tool▁sep｜>NAME\n```json\n{…}\n```` → a call. The arguments are
/// cut at the call token, not at the first fence, so argument strings may
/// contain ```` ``` ````.
fn call(body: &str, sep: &str, complete: bool) -> Option<RawCall> {
    let (kind, rest) = split_once(body, sep)?;
    if kind.trim() != KIND {
        return None;
    }
    let (name, args) = rest.split_once('\n')?;
    let name = name.trim();
    if name.is_empty() {
        return None;
    }
    let args = args.trim();
    let args = args.strip_prefix("```json").or_else(|| args.strip_prefix("```")).unwrap_or(args);
    let args = args.strip_suffix("```").unwrap_or(args).trim();
    // Not JSON at all (Step-3's invoke after the same `_` tokens): not a V3 call.
    if !args.starts_with('{') {
        return None;
    }
    let args = if complete { args } else { whole_json(args)? };
    Some(RawCall { name: name.to_string(), args: Args::Json(args.to_string()), id: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fenced_body() {
        let c = call("function<｜tool▁sep｜>f\n```json\n{\"a\": \"```\"}\n```", "<｜tool▁sep｜>", true);
        assert_eq!(c, Some(RawCall::json("f", "{\"a\": \"```\"}")));
        assert_eq!(call("f<｜tool▁sep｜>{}", "<｜tool▁sep｜>", true), None);
        assert_eq!(call("function<｜tool▁sep｜>f\n```json\n{\"a\": ", "<｜tool▁sep｜>", false), None);
    }
}
