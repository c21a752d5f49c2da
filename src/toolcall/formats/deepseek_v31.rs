//! PLACEHOLDER: deepseek_v31 is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct DeepseekV31;

impl Format for DeepseekV31 {
    fn name(&self) -> &'static str {
        "deepseek_v31"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<｜tool▁calls▁begin｜>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
