//! PLACEHOLDER: deepseek_v32_dsml is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct DeepseekV32Dsml;

impl Format for DeepseekV32Dsml {
    fn name(&self) -> &'static str {
        "deepseek_v32_dsml"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<｜DSML｜function_calls>", "<function_calls>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
