//! DeepSeek-V3.1 / V3.1-Terminus (non-thinking tool mode): the V3 tokens with
//! a bare body, no `function` type and no fences:
//!
//! ```text
//! <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>
//! ```
//!
//! Dispatch against `deepseek_v3` is on the body: the arguments must be a
//! JSON object right after the separator.

use super::deepseek_v3::{MARKERS, STRAYS, tokens};
use super::json_calls::{framed, whole_json};
use crate::toolcall::scan::{split_once, trim};
use crate::toolcall::{Args, Ctx, Format, RawCall, Step};

pub struct DeepseekV31;

impl Format for DeepseekV31 {
    fn name(&self) -> &'static str {
        "deepseek_v31"
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
        framed(region, ctx, &t.frame, |body, complete| call(body, t.sep, complete))
    }
}

fn call(body: &str, sep: &str, complete: bool) -> Option<RawCall> {
    let (name, args) = split_once(body, sep)?;
    let name = trim(name);
    let args = trim(args);
    if name.is_empty() || name.contains('\n') || !(args.is_empty() || args.starts_with('{')) {
        return None;
    }
    let args = if complete { args } else { whole_json(args)? };
    Some(RawCall { name: name.to_string(), args: Args::Json(args.to_string()), id: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_only_bare_bodies() {
        let sep = "<｜tool▁sep｜>";
        assert_eq!(call("f<｜tool▁sep｜>{\"a\": 1}", sep, true), Some(RawCall::json("f", "{\"a\": 1}")));
        assert_eq!(call("function<｜tool▁sep｜>f\n```json\n{}\n```", sep, true), None);
        assert_eq!(call("f<｜tool▁sep｜>{\"a\": \"Xia", sep, false), None);
    }
}
