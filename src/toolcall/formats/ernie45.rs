//! PLACEHOLDER: ernie45 is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct Ernie45;

impl Format for Ernie45 {
    fn name(&self) -> &'static str {
        "ernie45"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<response>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
