//! PLACEHOLDER: hunyuan_a13b is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct HunyuanA13b;

impl Format for HunyuanA13b {
    fn name(&self) -> &'static str {
        "hunyuan_a13b"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<tool_calls>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
