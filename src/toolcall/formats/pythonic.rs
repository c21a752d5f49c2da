//! PLACEHOLDER: pythonic is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct Pythonic;

impl Format for Pythonic {
    fn name(&self) -> &'static str {
        "pythonic"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<|python_start|>"]
    }

    fn start_bytes(&self) -> &'static [u8] {
        b"["
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
