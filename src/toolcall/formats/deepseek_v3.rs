//! PLACEHOLDER: deepseek_v3 is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct DeepseekV3;

impl Format for DeepseekV3 {
    fn name(&self) -> &'static str {
        "deepseek_v3"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<｜tool▁calls▁begin｜>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
