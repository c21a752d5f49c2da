//! MiniMax-M2 / M2.1 / M2.5:
//!
//! ```text
//! <minimax:tool_call>
//! <invoke name="NAME">
//! <parameter name="KEY">VALUE</parameter>
//! </invoke>
//! <invoke name="…">…</invoke>
//! </minimax:tool_call>
//! ```
//!
//! Several invokes per block (parallel calls). Values are raw text typed by
//! the tool's schema. When the output ends without `</minimax:tool_call>`,
//! the complete invokes are kept and an unfinished one stays text.

use crate::toolcall::formats::xml::{self, Peek};
use crate::toolcall::scan::skip_ws;
use crate::toolcall::{Ctx, Format, Parsed, RawCall, Step};

pub struct MinimaxM2;

const OPEN: &str = "<minimax:tool_call>";
const CLOSE: &str = "</minimax:tool_call>";

impl Format for MinimaxM2 {
    fn name(&self) -> &'static str {
        "minimax_m2"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[OPEN]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        let body = skip_ws(region, OPEN.len());
        match xml::peek(region, body, &["<invoke"]) {
            Peek::Is(_) => {}
            Peek::Maybe => return xml::more(region, ctx),
            Peek::No => return Step::Reject,
        }
        // A closing tag inside a value is text: the block ends after `</invoke>`.
        let closed = |c: usize| region[..c].trim_end().ends_with("</invoke>");
        let (text, consumed) = match xml::find_close(region, body, CLOSE, ctx, closed) {
            Err(step) => return step,
            Ok(Some(c)) => (&region[body..c], Some(c + CLOSE.len())),
            Ok(None) => (&region[body..], None),
        };
        let (invokes, end) = xml::invokes(text, "", &[]);
        let calls: Vec<RawCall> =
            invokes.iter().map(|inv| RawCall::value(inv.name, xml::invoke_args(inv, "", ctx.tools))).collect();
        if calls.is_empty() {
            return Step::Reject;
        }
        Step::Done(Parsed { consumed: consumed.unwrap_or(body + end), calls, ..Default::default() })
    }
}
