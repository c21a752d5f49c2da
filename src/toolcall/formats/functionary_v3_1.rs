//! PLACEHOLDER: functionary_v3_1 is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct FunctionaryV31;

impl Format for FunctionaryV31 {
    fn name(&self) -> &'static str {
        "functionary_v3_1"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<function="]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
