//! PLACEHOLDER: bare_json is being written; it rejects every region until then.

use crate::toolcall::{Ctx, Format, Step};

pub struct BareJson;

impl Format for BareJson {
    fn name(&self) -> &'static str {
        "bare_json"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[]
    }

    fn start_bytes(&self) -> &'static [u8] {
        b"{["
    }

    fn parse(&self, _region: &str, _ctx: &Ctx<'_>) -> Step {
        Step::Reject
    }
}
