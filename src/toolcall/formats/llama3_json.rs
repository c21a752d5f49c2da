//! PLACEHOLDER: llama3_json is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct Llama3Json;

impl Format for Llama3Json {
    fn name(&self) -> &'static str {
        "llama3_json"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<|python_tag|>"]
    }

    fn start_bytes(&self) -> &'static [u8] {
        &[b'{']
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
