//! DeepSeek-V4 DSML: V3.2's grammar in a `tool_calls` block (vLLM
//! `deepseek_v4`, smg `DeepSeekDsmlParser::v4`):
//!
//! ```text
//! <｜DSML｜tool_calls>
//! <｜DSML｜invoke name="NAME">
//! <｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>
//! </｜DSML｜invoke>
//! </｜DSML｜tool_calls>
//! ```
//!
//! The bars may be ASCII (`<|DSML|tool_calls>`), as DeepSeek writes the
//! block into its reasoning. The bare `<tool_calls>` spelling is MiniMax-M1's
//! and is not a marker here.

use super::deepseek_v32_dsml::block;
use crate::toolcall::{Ctx, Format, Step};

pub struct DeepseekV4Dsml;

impl Format for DeepseekV4Dsml {
    fn name(&self) -> &'static str {
        "deepseek_v4_dsml"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<｜DSML｜tool_calls>", "<|DSML|tool_calls>"]
    }

    fn strays(&self) -> &'static [&'static str] {
        &["</｜DSML｜tool_calls>", "</|DSML|tool_calls>", "<｜end▁of▁sentence｜>"]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        block(region, "tool_calls>", ctx)
    }
}
