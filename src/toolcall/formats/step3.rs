//! PLACEHOLDER: step3 is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct Step3;

impl Format for Step3 {
    fn name(&self) -> &'static str {
        "step3"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<｜tool_calls_begin｜>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
