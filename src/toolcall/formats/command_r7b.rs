//! PLACEHOLDER: command_r7b is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct CommandR7b;

impl Format for CommandR7b {
    fn name(&self) -> &'static str {
        "command_r7b"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<|START_ACTION|>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
