//! PLACEHOLDER: markdown_json_fence is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct MarkdownJsonFence;

impl Format for MarkdownJsonFence {
    fn name(&self) -> &'static str {
        "markdown_json_fence"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["```"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
