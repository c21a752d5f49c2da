//! PLACEHOLDER: qwen3_coder_xml is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct Qwen3CoderXml;

impl Format for Qwen3CoderXml {
    fn name(&self) -> &'static str {
        "qwen3_coder_xml"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<tool_call>", "<function="]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
