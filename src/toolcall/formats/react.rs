//! ReAct, as any model writes it under a LangChain / LlamaIndex ReAct prompt:
//!
//! ```text
//! Thought: I should look it up.
//! Action: search_docs
//! Action Input: "safari season"
//! Observation: …
//! ```
//!
//! Labels may be numbered (`Action 1:` / `Action Input 1:`, LangChain's
//! `Action\s*\d*\s*:`). The input is JSON (`{…}`) or a plain string, stripped
//! of spaces and quotes and mapped onto the tool's single string parameter.
//! The model should stop before `Observation:`; one it hallucinates, and
//! everything after it, is dropped. The thought before an action stays
//! visible text; `Thought: …` followed by `Final Answer:` leaves only the
//! answer as content (the thought becomes reasoning).
//!
//! `Action` and `Thought:` are common words, so each step decides on a few
//! bytes or one line and rejects at once when the label does not follow.

use crate::toolcall::scan::{byte_at, find, python_end, skip_ws};
use crate::toolcall::{Args, Ctx, Format, Parsed, RawCall, Step, Wait};

pub struct React;

const THOUGHT: &str = "Thought:";
const ACTION: &str = "Action";
const FINAL: &str = "Final Answer:";
const OBSERVATION: &str = "Observation";

impl Format for React {
    fn name(&self) -> &'static str {
        "react"
    }

    fn markers(&self) -> &'static [&'static str] {
        &[THOUGHT, ACTION]
    }

    fn parse(&self, region: &str, ctx: &Ctx<'_>) -> Step {
        if region.starts_with(THOUGHT) {
            return match thought(region) {
                Step::Need(_) if ctx.eof => Step::Reject,
                s => s,
            };
        }
        match action(region) {
            Step::Need(_) if ctx.eof => eof(region),
            s => s,
        }
    }
}

/// The output ended while a step waited: only a plain-string input that runs
/// to the end, or JSON input, can still complete.
fn eof(region: &str) -> Step {
    match action_input(region) {
        Some(k) => input(region, k, true),
        None => Step::Reject,
    }
}

/// `Thought: …\nFinal Answer: ANSWER` → the answer streams on as content.
/// A thought followed by anything else is text (an action is its own region).
fn thought(region: &str) -> Step {
    let Some(nl) = find(region, "\n", THOUGHT.len()) else {
        return Step::Need(Wait::Marker { marker: "\n", from: THOUGHT.len() });
    };
    let next = skip_ws(region, nl + 1);
    let tail = &region[next..];
    if tail.is_empty() {
        return Step::Need(Wait::NonSpaceAfter { from: nl + 1 });
    }
    if !tail.starts_with(FINAL) {
        return if FINAL.starts_with(tail) { Step::Need(Wait::Len(next + FINAL.len())) } else { Step::Reject };
    }
    // Wait for the answer's first byte so the same spaces are cut however
    // the text is chunked (at the end of output `eof` takes what is there).
    let answer = skip_ws(region, next + FINAL.len());
    if answer == region.len() {
        return Step::Need(Wait::NonSpaceAfter { from: answer });
    }
    let reasoning = region[THOUGHT.len()..nl].trim().to_string();
    Step::Done(Parsed { consumed: answer, reasoning, ..Default::default() })
}

/// Matches `Action\s*\d*\s*:` (`input == false`) or
/// `Action\s*\d*\s*Input\s*\d*\s*:` at `i`: the index after the colon.
fn label(s: &str, i: usize, input: bool) -> Result<usize, bool> {
    let b = s.as_bytes();
    // Err(true): more text is needed; Err(false): no match.
    let word = |i: usize, w: &str| -> Result<usize, bool> {
        let t = &s[i.min(s.len())..];
        if t.starts_with(w) { Ok(i + w.len()) } else { Err(w.starts_with(t)) }
    };
    let num = |mut i: usize| {
        while matches!(b.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        while matches!(b.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        i
    };
    let mut i = num(word(i, ACTION)?);
    if input {
        i = num(word(i, "Input")?);
    }
    match byte_at(s, i) {
        Some(b':') => Ok(i + 1),
        Some(_) => Err(false),
        None => Err(true),
    }
}

/// `Action: NAME\nAction Input: INPUT`.
fn action(region: &str) -> Step {
    let name_at = match label(region, 0, false) {
        Ok(i) => i,
        Err(true) => return Step::Need(Wait::Len(region.len() + 1)),
        Err(false) => return Step::Reject,
    };
    let Some(nl) = find(region, "\n", name_at) else {
        return Step::Need(Wait::Marker { marker: "\n", from: name_at });
    };
    let name = region[name_at..nl].trim().trim_matches(['`', '"', '\'']);
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Step::Reject;
    }
    let next = skip_ws(region, nl + 1);
    match label(region, next, true) {
        Ok(k) => input(region, k, false),
        Err(true) => Step::Need(Wait::Len(region.len() + 1)),
        Err(false) => Step::Reject,
    }
}

/// Where the input starts, when the region holds a complete action header.
fn action_input(region: &str) -> Option<usize> {
    let name_at = label(region, 0, false).ok()?;
    let nl = find(region, "\n", name_at)?;
    label(region, skip_ws(region, nl + 1), true).ok()
}

fn action_name(region: &str) -> &str {
    let name_at = label(region, 0, false).unwrap_or(0);
    let nl = find(region, "\n", name_at).unwrap_or(region.len());
    region[name_at..nl].trim().trim_matches(['`', '"', '\''])
}

/// The input after `Action Input:` at `k`.
fn input(region: &str, k: usize, eof: bool) -> Step {
    let name = action_name(region).to_string();
    let start = skip_ws(region, k);
    let done = |consumed, args| {
        Step::Done(Parsed { consumed, calls: vec![RawCall { name, args, id: None }], ..Default::default() })
    };
    if byte_at(region, start) == Some(b'{') {
        let Some(end) = python_end(region, start) else {
            return if eof { Step::Reject } else { Step::Need(Wait::Balanced { from: start }) };
        };
        let args = Args::Json(region[start..end].to_string());
        let next = skip_ws(region, end);
        let tail = &region[next..];
        if tail.starts_with(OBSERVATION) {
            return if eof { done(region.len(), args) } else { Step::Need(Wait::Eof) };
        }
        if !eof && OBSERVATION.starts_with(tail) {
            return if tail.is_empty() {
                Step::Need(Wait::NonSpaceAfter { from: end })
            } else {
                Step::Need(Wait::Len(next + OBSERVATION.len()))
            };
        }
        return done(end, args);
    }
    // A plain string runs to the end of the output or a hallucinated
    // observation; the model stops after it, so waiting costs nothing.
    if !eof {
        return Step::Need(Wait::Eof);
    }
    let end = find(region, OBSERVATION, start).unwrap_or(region.len());
    let text = region[start..end].trim().trim_matches('"').trim();
    let args = if text.is_empty() { Args::Empty } else { Args::Text(text.to_string()) };
    done(region.len(), args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(label("Action: x", 0, false), Ok(7));
        assert_eq!(label("Action 1 : x", 0, false), Ok(10));
        assert_eq!(label("Action Input 2: x", 0, true), Ok(15));
        assert_eq!(label("Act", 0, false), Err(true));
        assert_eq!(label("Action In", 0, true), Err(true));
        assert_eq!(label("Actionable", 0, false), Err(false));
        assert_eq!(label("Action items:", 0, false), Err(false));
    }
}
