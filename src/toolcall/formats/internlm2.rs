//! PLACEHOLDER: internlm2 is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct Internlm2;

impl Format for Internlm2 {
    fn name(&self) -> &'static str {
        "internlm2"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<|action_start|>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
