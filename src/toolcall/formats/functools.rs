//! PLACEHOLDER: functools is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct Functools;

impl Format for Functools {
    fn name(&self) -> &'static str {
        "functools"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["functools["]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
