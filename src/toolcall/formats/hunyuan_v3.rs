//! PLACEHOLDER: hunyuan_v3 is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct HunyuanV3;

impl Format for HunyuanV3 {
    fn name(&self) -> &'static str {
        "hunyuan_v3"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<tool_calls>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
