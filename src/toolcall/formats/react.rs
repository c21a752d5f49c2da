//! PLACEHOLDER: react is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct React;

impl Format for React {
    fn name(&self) -> &'static str {
        "react"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["Thought:", "Action"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
