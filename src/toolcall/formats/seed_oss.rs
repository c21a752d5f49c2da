//! ByteDance Seed-OSS (36B): the Qwen3-Coder body inside `<seed:tool_call>`:
//!
//! ```text
//! <seed:tool_call>
//! <function=NAME>
//! <parameter=KEY>VALUE</parameter>
//! </function>
//! </seed:tool_call>
//! ```
//!
//! One block per call. Reasoning in `<seed:think>…</seed:think>` is routed
//! by the engine before any marker is looked for.

use crate::toolcall::formats::xml;
use crate::toolcall::{Ctx, Format, Step};

pub struct SeedOss;

const OPEN: &str = "<seed:tool_call>";
const CLOSE: &str = "</seed:tool_call>";

impl Format for SeedOss {
    fn name(&self) -> &'static str {
        "seed_oss"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[OPEN]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        xml::qwen_block(region, OPEN, CLOSE, ctx)
    }
}
