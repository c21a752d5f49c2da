//! GigaChat 3.5 (Sber; vLLM `gigachat35`, SGLang `gigachat35_detector`):
//! DeepSeek's DSML grammar with the `｜GCML｜` prefix:
//!
//! ```text
//! <｜GCML｜tool_calls>
//! <｜GCML｜invoke name="NAME">
//! <｜GCML｜parameter name="K" string="true|false">V</｜GCML｜parameter>
//! </｜GCML｜invoke>
//! </｜GCML｜tool_calls>
//! ```

use super::deepseek_v32_dsml::block_with;
use crate::toolcall::{Ctx, Format, Step};

pub struct Gigachat35;

impl Format for Gigachat35 {
    fn name(&self) -> &'static str {
        "gigachat35"
    }

    fn markers(&self) -> &'static [&'static str] {
        &["<｜GCML｜tool_calls>"]
    }

    fn strays(&self) -> &'static [&'static str] {
        &["</｜GCML｜tool_calls>"]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        block_with(region, "tool_calls>", &["｜GCML｜"], &["<｜GCML｜invoke", "<invoke"], ctx)
    }
}
