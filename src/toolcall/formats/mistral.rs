//! PLACEHOLDER: mistral is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct Mistral;

impl Format for Mistral {
    fn name(&self) -> &'static str {
        "mistral"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["[TOOL_CALLS]"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
