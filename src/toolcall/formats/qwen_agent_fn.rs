//! PLACEHOLDER: qwen_agent_fn is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct QwenAgentFn;

impl Format for QwenAgentFn {
    fn name(&self) -> &'static str {
        "qwen_agent_fn"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["✿FUNCTION✿"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
