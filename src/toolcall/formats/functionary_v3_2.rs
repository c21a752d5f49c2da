//! PLACEHOLDER: functionary_v3_2 is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct FunctionaryV32;

impl Format for FunctionaryV32 {
    fn name(&self) -> &'static str {
        "functionary_v3_2"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[">>>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
