//! PLACEHOLDER: harmony is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct Harmony;

impl Format for Harmony {
    fn name(&self) -> &'static str {
        "harmony"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<|channel|>", "<|start|>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
