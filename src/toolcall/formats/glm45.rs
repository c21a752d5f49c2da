//! PLACEHOLDER: glm45 is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct Glm45;

impl Format for Glm45 {
    fn name(&self) -> &'static str {
        "glm45"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<tool_call>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
