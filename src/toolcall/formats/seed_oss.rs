//! PLACEHOLDER: seed_oss is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct SeedOss;

impl Format for SeedOss {
    fn name(&self) -> &'static str {
        "seed_oss"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<seed:tool_call>"]
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
