//! The streaming extractor: one pass over the text, however it is chunked.
//!
//! States: plain text, a reasoning block, or a candidate tool-call region.
//! In text, one Aho-Corasick automaton finds every start marker of the active
//! formats plus the reasoning openers (a marker within a few bytes of a long
//! text is found by a plain scan first); text that cannot start a marker is
//! emitted at once and only a suffix that is a proper prefix of a marker is
//! held back. In a region, each candidate format says what it waits for
//! ([`Wait`]); the engine tracks those conditions incrementally and calls the
//! parser again only when one holds, so no chunk re-parses the whole buffer.

use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};
use memchr::memmem;

use super::{Ctx, Event, Format, Step, ToolIndex, Wait, args, formats, scan};

/// Reasoning blocks that are routed to `reasoning_content` and never scanned
/// for tool calls.
const REASONING: &[(&str, &str)] = &[
    ("<think>", "</think>"),
    ("<seed:think>", "</seed:think>"),
    ("[THINK]", "[/THINK]"),
    ("<|START_THINKING|>", "<|END_THINKING|>"),
];

/// A region larger than this is given up on and released as text, so one
/// unterminated marker cannot make the proxy buffer without bound.
pub const MAX_REGION: usize = 8 << 20;

/// How many leading bytes of each pattern the automaton searches for; a hit
/// is then checked against the whole patterns with that first byte.
const LEAD: usize = 8;

/// A pattern's first [`WORDS`] × 8 bytes as masked words, so a candidate
/// position is checked against a pattern with a few compares and no `memcmp`
/// call: the markers of one format share their first eight bytes or more
/// (`<|tool_call_begin|>`, `<|tool_call_end|>`).
#[derive(Clone, Copy)]
struct Prefix {
    words: [u64; WORDS],
    masks: [u64; WORDS],
    len: usize,
    pattern: usize,
}

/// Words per [`Prefix`]: every marker shipped today fits in 32 bytes.
const WORDS: usize = 4;

impl Prefix {
    fn new(b: &[u8], pattern: usize) -> Prefix {
        let (mut words, mut masks) = ([0; WORDS], [0; WORDS]);
        for k in 0..WORDS {
            let part = b.get(8 * k..).unwrap_or_default();
            words[k] = word(part);
            masks[k] = mask(part.len());
        }
        Prefix { words, masks, len: b.len(), pattern }
    }

    /// Whether `rest` begins with the pattern (`pattern` is its text).
    #[inline(always)]
    fn matches(&self, first: u64, rest: &[u8], pattern: &[u8]) -> bool {
        if first & self.masks[0] != self.words[0] || rest.len() < self.len {
            return false;
        }
        let mut k = 1;
        while 8 * k < self.len.min(8 * WORDS) {
            if word(&rest[8 * k..]) & self.masks[k] != self.words[k] {
                return false;
            }
            k += 1;
        }
        self.len <= 8 * WORDS || rest[8 * WORDS..self.len] == pattern[8 * WORDS..]
    }
}

/// The mask of a word's first `n` bytes (all of it from 8 on).
fn mask(n: usize) -> u64 {
    if n >= 8 { u64::MAX } else { (1u64 << (8 * n)) - 1 }
}

/// The patterns that begin with one byte, as [`FormatSet::at`] reads them: a
/// small decision tree on the byte at the offset that tells them apart best
/// (`<|tool_call_begin|>` and `<|tool_call_end|>` first differ at byte 12),
/// so a position is checked against the one or two patterns that can match.
struct Lookup {
    /// The offset read; unused in a leaf (no `children`).
    at: usize,
    /// Byte at `at` → index into `children`, plus one (0: none); empty in a
    /// leaf (most of the 256 trees are one, and a table is 512 bytes).
    slot: Box<[u16]>,
    children: Vec<Lookup>,
    /// Checked when the walk stops here, longest first: in a leaf all its
    /// patterns, else those too short to have a byte at `at`; then the
    /// ancestors' (shorter still), so one list is read and no path is kept.
    checks: Vec<Prefix>,
}

impl Lookup {
    /// Depth of the tree at most (bounds [`FormatSet::at`]'s walk).
    const DEPTH: usize = 4;
    /// Lists this short are checked one by one.
    const LEAF: usize = 2;

    /// `list` is longest first, and so is every list the tree keeps;
    /// `above` is what the ancestors check.
    fn new(list: &[Prefix], patterns: &[(&'static str, Pattern)], depth: usize, above: &[Prefix]) -> Lookup {
        let leaf = |list: &[Prefix]| Lookup {
            at: 0,
            slot: Box::default(),
            children: Vec::new(),
            checks: list.iter().chain(above).copied().collect(),
        };
        if list.len() <= Lookup::LEAF || depth + 1 >= Lookup::DEPTH {
            return leaf(list);
        }
        let Some(at) = Lookup::best_offset(list, patterns) else { return leaf(list) };
        let mut slot = vec![0u16; 256].into_boxed_slice();
        let (mut groups, mut checks): (Vec<Vec<Prefix>>, Vec<Prefix>) = (Vec::new(), Vec::new());
        for p in list {
            match patterns[p.pattern].0.as_bytes().get(at) {
                Some(c) => {
                    if slot[*c as usize] == 0 {
                        groups.push(Vec::new());
                        // At most 256 groups: one per byte value.
                        slot[*c as usize] = groups.len() as u16;
                    }
                    groups[slot[*c as usize] as usize - 1].push(*p);
                }
                None => checks.push(*p),
            }
        }
        checks.extend_from_slice(above);
        let children = groups.iter().map(|g| Lookup::new(g, patterns, depth + 1, &checks)).collect();
        Lookup { at, slot, children, checks }
    }

    /// The offset that leaves the fewest patterns to check at worst (the
    /// largest group sharing its byte there, plus those too short to have
    /// one), if that is fewer than all of them.
    fn best_offset(list: &[Prefix], patterns: &[(&'static str, Pattern)]) -> Option<usize> {
        let longest = list.iter().map(|p| p.len).max().unwrap_or(0);
        let mut best = (None, list.len());
        for at in 1..longest {
            let mut count = [0usize; 256];
            let mut short = 0;
            for p in list {
                match patterns[p.pattern].0.as_bytes().get(at) {
                    Some(c) => count[*c as usize] += 1,
                    None => short += 1,
                }
            }
            let cost = count.iter().max().unwrap_or(&0) + short;
            if cost < best.1 {
                best = (Some(at), cost);
            }
        }
        best.0
    }

    /// The longest pattern `rest` begins with (`rest` begins with this
    /// tree's byte); `hit` checks one.
    #[inline(always)]
    fn find(&self, rest: &[u8], hit: impl Fn(&Prefix) -> bool) -> Option<&Prefix> {
        let mut node = self;
        // The tree is at most DEPTH deep, so this walk is too.
        while !node.children.is_empty() {
            let Some(c) = rest.get(node.at) else { break };
            let child = node.slot.get(*c as usize).and_then(|s| node.children.get(usize::from(*s).checked_sub(1)?));
            let Some(child) = child else { break };
            node = child;
        }
        node.checks.iter().find(|p| hit(p))
    }
}

/// Up to eight bytes of `b` as a little-endian word, zero-padded.
#[inline]
fn word(b: &[u8]) -> u64 {
    if let Some(w) = b.first_chunk::<8>() {
        return u64::from_le_bytes(*w);
    }
    let mut w = [0u8; 8];
    w[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(w)
}

enum Pattern {
    Reasoning {
        close: &'static str,
    },
    Marker {
        formats: Vec<usize>,
    },
    /// A special token that is never prose: dropped.
    Stray,
}

/// The formats one route uses, compiled once: build it at config time and
/// share it; every response gets a cheap [`Extractor`] from it.
pub struct FormatSet {
    formats: Vec<&'static dyn Format>,
    patterns: Vec<(&'static str, Pattern)>,
    /// Searches for the patterns' leads (first [`LEAD`] bytes, deduplicated),
    /// not the patterns: the lead set stays small enough for the automaton's
    /// packed SIMD prefilter, which it drops past 64 patterns.
    ac: Option<AhoCorasick>,
    max_len: usize,
    first_byte: [bool; 256],
    /// The patterns by first byte, longest first.
    by_first: Vec<Vec<Prefix>>,
    /// Where [`FormatSet::at`] looks, by first byte.
    lookup: Vec<Lookup>,
    start_byte: [bool; 256],
    /// Tokens that end an unclosed reasoning block ([`Format::ends_reasoning`]).
    reasoning_breaks: Vec<&'static str>,
}

impl std::fmt::Debug for FormatSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.formats.iter().map(|p| p.name())).finish()
    }
}

impl FormatSet {
    /// Every registered format (auto mode).
    pub fn all() -> Self {
        Self::build(formats::ALL.to_vec())
    }

    /// No tool formats: only reasoning blocks are split off.
    pub fn none() -> Self {
        Self::build(Vec::new())
    }

    /// The named formats, in registry order. Unknown names are returned as
    /// the error so config validation can report them.
    pub fn named<S: AsRef<str>>(names: &[S]) -> Result<Self, String> {
        let mut picked = Vec::new();
        for n in names {
            let f = formats::by_name(n.as_ref()).ok_or_else(|| n.as_ref().to_string())?;
            picked.push(f);
        }
        picked.sort_by_key(|f| formats::ALL.iter().position(|g| g.name() == f.name()));
        picked.dedup_by_key(|f| f.name());
        Ok(Self::build(picked))
    }

    fn build(formats: Vec<&'static dyn Format>) -> Self {
        let mut patterns: Vec<(&'static str, Pattern)> =
            REASONING.iter().map(|(open, close)| (*open, Pattern::Reasoning { close })).collect();
        let mut start_byte = [false; 256];
        let names: Vec<&str> = formats.iter().map(|f| f.name()).collect();
        for (i, f) in formats.iter().enumerate() {
            let deferred = |m: &str| f.defers().iter().any(|(d, owner)| *d == m && names.contains(owner));
            for m in f.markers().iter().filter(|m| !deferred(m)) {
                match patterns.iter_mut().find(|(p, _)| p == m) {
                    Some((_, Pattern::Marker { formats })) => formats.push(i),
                    Some((_, Pattern::Reasoning { .. } | Pattern::Stray)) => {}
                    None => patterns.push((m, Pattern::Marker { formats: vec![i] })),
                }
            }
            for b in f.start_bytes() {
                start_byte[*b as usize] = true;
            }
        }
        for f in &formats {
            for m in f.strays() {
                if !patterns.iter().any(|(p, _)| p == m) {
                    patterns.push((m, Pattern::Stray));
                }
            }
        }
        let mut reasoning_breaks: Vec<&'static str> =
            formats.iter().flat_map(|f| f.ends_reasoning()).copied().collect();
        reasoning_breaks.sort_unstable();
        reasoning_breaks.dedup();
        let mut first_byte = [false; 256];
        for (p, _) in &patterns {
            if let Some(b) = p.as_bytes().first() {
                first_byte[*b as usize] = true;
            }
        }
        let mut by_first = vec![Vec::new(); 256];
        for (pattern, (p, _)) in patterns.iter().enumerate() {
            let b = p.as_bytes();
            if let Some(first) = b.first() {
                by_first[*first as usize].push(Prefix::new(b, pattern));
            }
        }
        for list in &mut by_first {
            list.sort_by_key(|p| std::cmp::Reverse(p.len));
        }
        let lookup = by_first.iter().map(|list| Lookup::new(list, &patterns, 0, &[])).collect();
        let max_len = patterns.iter().map(|(p, _)| p.len()).max().unwrap_or(1);
        let mut leads: Vec<&[u8]> = patterns.iter().map(|(p, _)| &p.as_bytes()[..p.len().min(LEAD)]).collect();
        leads.sort_unstable();
        leads.dedup();
        let ac = AhoCorasick::builder().match_kind(MatchKind::LeftmostFirst).build(leads).ok();
        FormatSet { formats, patterns, ac, max_len, first_byte, by_first, lookup, start_byte, reasoning_breaks }
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.formats.iter().map(|f| f.name()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.formats.is_empty()
    }

    /// The leftmost-longest pattern in `text`: (start, length, pattern).
    /// In a long text with calls close together the next marker is usually
    /// a few bytes away, where a plain scan is cheaper than setting up the
    /// automaton's SIMD search; past that window (and in short texts, where
    /// the automaton is as cheap) the automaton searches.
    fn find(&self, text: &str) -> Option<(usize, usize, usize)> {
        const NEAR: usize = 64;
        let ac = self.ac.as_ref()?;
        let b = text.as_bytes();
        let mut from = 0;
        if b.len() > 2 * NEAR {
            for (i, x) in b[..NEAR].iter().enumerate() {
                if self.first_byte[*x as usize]
                    && let Some(p) = self.at(b, i)
                {
                    return Some((i, p.len, p.pattern));
                }
            }
            from = NEAR;
        }
        loop {
            let m = ac.find(aho_corasick::Input::new(b).span(from..b.len()))?;
            if let Some(p) = self.at(b, m.start()) {
                return Some((m.start(), p.len, p.pattern));
            }
            from = m.start() + 1;
        }
    }

    /// The longest pattern that starts at `b[i]`.
    #[inline]
    fn at(&self, b: &[u8], i: usize) -> Option<&Prefix> {
        let rest = b.get(i..)?;
        let w = word(rest);
        self.lookup[*rest.first()? as usize].find(rest, |p| p.matches(w, rest, self.patterns[p.pattern].0.as_bytes()))
    }

    /// Whether `tail` (shorter than the pattern) is how the pattern begins.
    #[inline]
    fn begins(&self, p: &Prefix, tail: &[u8]) -> bool {
        let mask = mask(tail.len());
        word(tail) & mask == p.words[0] & mask
            && (tail.len() <= 8 || self.patterns[p.pattern].0.as_bytes()[8..].starts_with(&tail[8..]))
    }

    /// Length of the longest suffix of `buf` that is a proper prefix of a
    /// pattern (the part that must be held back).
    fn partial_suffix(&self, buf: &str) -> usize {
        let b = buf.as_bytes();
        let lo = b.len().saturating_sub(self.max_len - 1);
        for i in lo..b.len() {
            if self.first_byte[b[i] as usize] && buf.is_char_boundary(i) {
                let tail = &b[i..];
                if self.by_first[b[i] as usize].iter().any(|p| p.len > tail.len() && self.begins(p, tail)) {
                    return b.len() - i;
                }
            }
        }
        0
    }

    /// True when a pattern longer than the match could still match at `start`
    /// once more text arrives (`<tool_call>` vs `<tool_calls>`).
    fn could_grow(&self, buf: &str, start: usize, matched: usize) -> bool {
        let tail = &buf.as_bytes()[start..];
        if tail.len() >= self.max_len {
            return false;
        }
        let Some(first) = tail.first() else { return false };
        self.by_first[*first as usize].iter().any(|p| p.len > matched && p.len > tail.len() && self.begins(p, tail))
    }
}

/// Per-candidate progress on its [`Wait`], so conditions are checked
/// incrementally.
#[derive(Debug, Clone, Copy)]
struct Cand {
    format: usize,
    wait: Wait,
    /// Marker / NonSpaceAfter: bytes already searched. Balanced: scan position.
    pos: usize,
    bal: Balance,
}

#[derive(Debug, Clone, Copy, Default)]
struct Balance {
    depth: u32,
    quote: Option<u8>,
    escape: bool,
    done: bool,
}

enum State {
    Text,
    Reasoning { close: &'static str },
    Region { cands: Vec<Cand>, marker_len: usize },
}

/// What [`Extractor::pass`] emitted: `lead`, then the first `keep` bytes of
/// the text.
#[derive(Debug, PartialEq, Eq)]
pub struct Passed {
    /// Whitespace held back from earlier pieces, released now.
    pub lead: Lead,
    pub keep: usize,
}

/// Whitespace released ahead of a piece ([`Passed::lead`]), held inline:
/// it is nearly always a space or a line break, and text that passes is
/// the streaming hot path, where an allocation per piece shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lead(LeadRepr);

#[derive(Debug, Clone, PartialEq, Eq)]
enum LeadRepr {
    Inline { len: u8, buf: [u8; LEAD_INLINE] },
    Heap(Box<str>),
}

const LEAD_INLINE: usize = 22;

impl Lead {
    pub fn new(s: &str) -> Self {
        let mut buf = [0; LEAD_INLINE];
        match s.as_bytes() {
            [] => {}
            // Nearly always one space or line break: no copy loop.
            [b] => buf[0] = *b,
            b if b.len() <= LEAD_INLINE => buf[..b.len()].copy_from_slice(b),
            _ => return Lead(LeadRepr::Heap(s.into())),
        }
        Lead(LeadRepr::Inline { len: s.len() as u8, buf })
    }

    pub fn as_str(&self) -> &str {
        match &self.0 {
            // A whole `str` was copied in, so this never fails.
            LeadRepr::Inline { .. } => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            LeadRepr::Heap(s) => s,
        }
    }

    /// The text's bytes (UTF-8), without checking them again.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            LeadRepr::Inline { len, buf } => &buf[..usize::from(*len)],
            LeadRepr::Heap(s) => s.as_bytes(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.as_bytes().is_empty()
    }
}

impl std::fmt::Display for Lead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Options that change how the output starts.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// The model's template opened `<think>` already (DeepSeek-R1, Qwen3
    /// thinking): text up to the first `</think>` is reasoning.
    pub starts_in_reasoning: bool,
}

/// The incremental extractor for one model output.
pub struct Extractor {
    /// Held text; `buf[head..]` is still undecided. Consuming text only moves
    /// `head`, and the consumed prefix is dropped once per `feed`, so a chunk
    /// that holds many calls is not shifted once per call. With nothing held,
    /// a piece is read in place and only its undecided tail lands here.
    buf: String,
    /// Everything else: a separate struct so the steps borrow it mutably
    /// while reading `buf`.
    run: Run,
}

struct Run {
    set: Arc<FormatSet>,
    tools: Arc<ToolIndex>,
    head: usize,
    state: State,
    at_start: bool,
    finished: bool,
    /// Trailing whitespace of the text so far, held until we know whether
    /// prose or a call follows (template newlines around calls are dropped).
    ws: String,
    /// A call or a reasoning block just ended: leading whitespace is dropped
    /// (`ws` then holds the one separator the call's removal leaves).
    trim_next: bool,
    /// Prose before a call had no whitespace before it: the separator is
    /// taken from the whitespace after the call, if any.
    sep_after: bool,
    /// A marker was found to be text: the closing tokens of that block stay
    /// text with it (a rejected block is shown verbatim), until a call parses.
    rejected: bool,
    /// An empty candidate list with capacity, reused by the next region.
    spare: Vec<Cand>,
    /// The calls of the region being finished (empty between regions).
    calls: Vec<super::Call>,
    /// Reasoning is held from a token that may end it unclosed.
    broken: Option<Broken>,
}

/// A reasoning block held from an [`Format::ends_reasoning`] token.
#[derive(Clone, Copy)]
struct Broken {
    /// Bytes of the held text already searched for the block's close.
    scanned: usize,
}

impl Extractor {
    pub fn new(set: Arc<FormatSet>, tools: Arc<ToolIndex>) -> Self {
        Self::with_options(set, tools, Options::default())
    }

    pub fn with_options(set: Arc<FormatSet>, tools: Arc<ToolIndex>, opts: Options) -> Self {
        let state = if opts.starts_in_reasoning { State::Reasoning { close: "</think>" } } else { State::Text };
        let run = Run {
            set,
            tools,
            head: 0,
            state,
            at_start: true,
            finished: false,
            ws: String::new(),
            trim_next: false,
            sep_after: false,
            rejected: false,
            spare: Vec::new(),
            calls: Vec::new(),
            broken: None,
        };
        Extractor { buf: String::new(), run }
    }

    /// Feeds the next piece of model text; complete events are appended.
    pub fn feed(&mut self, chunk: &str, out: &mut Vec<Event>) {
        if self.run.finished || chunk.is_empty() {
            return;
        }
        if self.run.head == self.buf.len() {
            // Nothing held: the piece is read where it is and only what
            // stays undecided is copied (a whole response is not copied).
            self.buf.clear();
            self.run.head = 0;
            self.run.pump(chunk, false, out);
            self.buf.push_str(&chunk[self.run.head..]);
            self.run.head = 0;
            return;
        }
        // Held text waiting for more (a call's arguments) is not moved.
        if self.run.head > 0 {
            self.buf.drain(..self.run.head);
            self.run.head = 0;
        }
        self.buf.push_str(chunk);
        self.run.pump(&self.buf, false, out);
    }

    /// The fast path for plain text: when [`feed`](Self::feed) would emit
    /// `text` as visible text without looking for anything in it (plain
    /// text, nothing undecided from earlier pieces, no marker or marker
    /// prefix in `text`), takes it and says what was emitted: the whitespace
    /// held from earlier pieces, then `text[..keep]`; its trailing whitespace
    /// is held, as `feed` does. With `reshape` false it only takes text that
    /// comes out exactly as it went in. `None`: nothing changed, feed it.
    pub fn pass(&mut self, text: &str, reshape: bool) -> Option<Passed> {
        let b = text.as_bytes();
        let first = *b.first()?;
        let clean = !self.run.finished
            && matches!(self.run.state, State::Text)
            && self.run.head == self.buf.len()
            && !self.run.trim_next
            && !(self.run.at_start && (first.is_ascii_whitespace() || self.run.set.start_byte[first as usize]));
        if !clean {
            return None;
        }
        let keep = scan::trim_end(text).len();
        if keep == 0 || (!reshape && (keep < text.len() || !self.run.ws.is_empty())) {
            return None;
        }
        // The common case, no byte that opens any pattern, is one table scan.
        let quiet = !b.iter().any(|x| self.run.set.first_byte[*x as usize])
            || (self.run.set.find(text).is_none() && self.run.set.partial_suffix(text) == 0);
        if !quiet {
            return None;
        }
        self.run.at_start = false;
        // Copied out, not taken: the held buffer keeps its room for the next piece.
        let lead = Lead::new(&self.run.ws);
        self.run.ws.clear();
        self.run.ws.push_str(&text[keep..]);
        Some(Passed { lead, keep })
    }

    /// Ends the output: every held byte is decided and emitted.
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        if self.run.finished {
            return;
        }
        self.run.pump(&self.buf, true, out);
        if !self.run.trim_next {
            let ws = std::mem::take(&mut self.run.ws);
            emit(out, Event::Text(ws));
        }
        self.run.finished = true;
    }
}

impl Run {
    /// Decides what it can of `text[head..]`; `text` is the held buffer, or
    /// the fed piece itself when nothing was held.
    fn pump(&mut self, text: &str, eof: bool, out: &mut Vec<Event>) {
        loop {
            let progressed = match &mut self.state {
                State::Text => self.step_text(text, eof, out),
                State::Reasoning { close } => {
                    let close = *close;
                    self.step_reasoning(text, close, eof, out)
                }
                State::Region { .. } => self.step_region(text, eof, out),
            };
            if !progressed {
                return;
            }
        }
    }

    fn step_text(&mut self, text: &str, eof: bool, out: &mut Vec<Event>) -> bool {
        if undecided(text, self.head).is_empty() {
            return false;
        }
        if self.at_start {
            let first = undecided(text, self.head).bytes().position(|b| !b.is_ascii_whitespace());
            match first {
                None => {
                    self.emit_text_to(text, undecided(text, self.head).len(), out);
                    return false;
                }
                // A marker or reasoning opener at the start (`[TOOL_CALLS]`,
                // `[THINK]`) wins over a start byte; wait while it may be one.
                Some(i) if self.set.start_byte[undecided(text, self.head).as_bytes()[i] as usize] => {
                    let rest = &undecided(text, self.head).as_bytes()[i..];
                    let marker = self.set.patterns.iter().any(|(p, _)| rest.starts_with(p.as_bytes()));
                    if !marker && !eof && self.set.patterns.iter().any(|(p, _)| p.as_bytes().starts_with(rest)) {
                        return false;
                    }
                    if !marker {
                        self.emit_text_to(text, i, out);
                        let byte = undecided(text, self.head).as_bytes()[0];
                        let mut cands = std::mem::take(&mut self.spare);
                        cands.extend(
                            (0..self.set.formats.len())
                                .filter(|f| self.set.formats[*f].start_bytes().contains(&byte))
                                .map(new_cand),
                        );
                        self.state = State::Region { cands, marker_len: 1 };
                        return true;
                    }
                }
                Some(_) => {}
            }
        }
        if let Some((start, len, pattern)) = self.set.find(undecided(text, self.head)) {
            if !eof && self.set.could_grow(undecided(text, self.head), start, len) {
                self.emit_text_to(text, start, out);
                return false;
            }
            self.emit_text_to(text, start, out);
            match &self.set.patterns[pattern].1 {
                Pattern::Reasoning { close } => {
                    self.head += len;
                    self.state = State::Reasoning { close };
                }
                Pattern::Marker { formats } => {
                    let mut cands = std::mem::take(&mut self.spare);
                    cands.extend(formats.iter().copied().map(new_cand));
                    self.state = State::Region { cands, marker_len: len };
                }
                Pattern::Stray if !self.rejected => self.head += len,
                Pattern::Stray => self.emit_text_to(text, len, out),
            }
            return true;
        }
        let hold = if eof { 0 } else { self.set.partial_suffix(undecided(text, self.head)) };
        self.emit_text_to(text, undecided(text, self.head).len() - hold, out);
        false
    }

    fn step_reasoning(&mut self, text: &str, close: &'static str, eof: bool, out: &mut Vec<Event>) -> bool {
        let rest = undecided(text, self.head).as_bytes();
        let from = self.broken.map_or(0, |b| b.scanned.min(rest.len()));
        if let Some(pos) = memmem::find(&rest[from..], close.as_bytes()).map(|p| p + from) {
            // Closed after all: a breaking token before it was reasoning text.
            self.broken = None;
            self.emit_reasoning_to(text, pos, out);
            self.head += close.len();
            self.state = State::Text;
            self.ws.clear();
            self.trim_next = true;
            self.sep_after = false;
            return true;
        }
        if self.broken.is_none()
            && let Some(b) = self.set.reasoning_breaks.iter().filter_map(|t| memmem::find(rest, t.as_bytes())).min()
        {
            self.emit_reasoning_to(text, b, out);
            self.broken = Some(Broken { scanned: 0 });
        }
        if self.broken.is_some() {
            // Held from the token on: calls if the reasoning never closes,
            // reasoning if `close` still comes (or the hold grows too big).
            let len = undecided(text, self.head).len();
            if eof {
                self.broken = None;
                self.state = State::Text;
                self.ws.clear();
                self.trim_next = true;
                self.sep_after = false;
                return true;
            }
            if len > MAX_REGION {
                self.broken = None;
                self.emit_reasoning_to(text, len, out);
            } else {
                self.broken = Some(Broken { scanned: len.saturating_sub(close.len() - 1) });
            }
            return false;
        }
        let hold = if eof {
            0
        } else {
            let breaks = self.set.reasoning_breaks.iter().map(|b| suffix_prefix_len(undecided(text, self.head), b));
            breaks.fold(suffix_prefix_len(undecided(text, self.head), close), usize::max)
        };
        self.emit_reasoning_to(text, undecided(text, self.head).len() - hold, out);
        false
    }

    fn step_region(&mut self, text: &str, eof: bool, out: &mut Vec<Event>) -> bool {
        let State::Region { cands, marker_len } = &mut self.state else {
            return false;
        };
        let marker_len = *marker_len;
        let buf = &text[self.head..];
        let ctx = Ctx { tools: &self.tools, eof, at_start: self.at_start };
        let mut done: Option<args::Finished> = None;
        let mut i = 0;
        while i < cands.len() {
            let c = &mut cands[i];
            if !eof && !satisfied(c, buf) {
                i += 1;
                continue;
            }
            let format = self.set.formats[c.format];
            match format.parse(buf, &ctx) {
                Step::Done(p) => match args::finish(p, format.name(), &self.tools, &mut self.calls) {
                    Some(p) if p.consumed > 0 && p.consumed <= buf.len() => {
                        done = Some(p);
                        break;
                    }
                    _ => {
                        cands.remove(i);
                    }
                },
                Step::Need(w) if !eof && buf.len() <= MAX_REGION => {
                    if w != c.wait {
                        *c = Cand { wait: w, ..new_cand(c.format) };
                    }
                    // Re-check at once: the condition may already hold.
                    if satisfied(c, buf) {
                        continue;
                    }
                    i += 1;
                }
                Step::Need(_) | Step::Reject => {
                    cands.remove(i);
                }
            }
        }
        if let Some(p) = done {
            self.rejected = false;
            self.head += p.consumed;
            self.leave_region();
            emit(out, Event::Reasoning(p.reasoning));
            push_text(&mut self.ws, &mut self.trim_next, &mut self.sep_after, &mut self.at_start, &p.content, out);
            if !self.calls.is_empty() {
                // Prose on both sides of a removed call keeps one whitespace
                // between them (`one <call> two` is `one two`), not `onetwo`.
                if !self.at_start && !self.trim_next {
                    let sep = separator(&self.ws);
                    self.sep_after = sep.is_empty();
                    if self.ws != sep {
                        self.ws.clear();
                        self.ws.push_str(sep);
                    }
                }
                if self.at_start {
                    self.ws.clear();
                }
                self.trim_next = true;
            }
            out.extend(self.calls.drain(..).map(Event::Call));
            return true;
        }
        if cands.is_empty() || buf.len() > MAX_REGION {
            // Not a call after all: the marker is text; scan on after it.
            let cut = ceil_char_boundary(buf, marker_len);
            // A start byte that opened no call is no block to keep verbatim.
            self.rejected |= marker_len > 1;
            self.leave_region();
            self.emit_text_to(text, cut, out);
            return true;
        }
        false
    }

    /// Back to text; the candidate list is kept for the next region (one
    /// allocation per response instead of one per call).
    fn leave_region(&mut self) {
        if let State::Region { mut cands, .. } = std::mem::replace(&mut self.state, State::Text) {
            cands.clear();
            self.spare = cands;
        }
    }

    /// Emits the next `end` undecided bytes (a char boundary) as text.
    fn emit_text_to(&mut self, text: &str, end: usize, out: &mut Vec<Event>) {
        if end == 0 {
            return;
        }
        let start = self.head;
        self.head += end;
        push_text(
            &mut self.ws,
            &mut self.trim_next,
            &mut self.sep_after,
            &mut self.at_start,
            &text[start..self.head],
            out,
        );
    }

    /// Emits the next `end` undecided bytes as reasoning.
    fn emit_reasoning_to(&mut self, text: &str, end: usize, out: &mut Vec<Event>) {
        if end == 0 {
            return;
        }
        let start = self.head;
        self.head += end;
        let r = &text[start..self.head];
        match out.last_mut() {
            Some(Event::Reasoning(prev)) => prev.push_str(r),
            _ => out.push(Event::Reasoning(r.to_string())),
        }
    }
}

/// The undecided text.
#[inline]
fn undecided(text: &str, head: usize) -> &str {
    &text[head..]
}

/// Emits visible text, holding trailing whitespace back (see `Extractor::ws`).
/// The text is copied once: into the previous text event, or a new one.
fn push_text(
    ws: &mut String,
    trim_next: &mut bool,
    sep_after: &mut bool,
    at_start: &mut bool,
    t: &str,
    out: &mut Vec<Event>,
) {
    let mut t = t;
    if *trim_next {
        let body = scan::trim_start(t);
        if *sep_after && body.len() < t.len() {
            ws.push_str(separator(&t[..t.len() - body.len()]));
            *sep_after = false;
        }
        t = body;
        if t.is_empty() {
            return;
        }
        *trim_next = false;
        *sep_after = false;
    }
    let body = scan::trim_end(t);
    if body.is_empty() {
        ws.push_str(t);
        return;
    }
    *at_start = false;
    match out.last_mut() {
        Some(Event::Text(prev)) => {
            prev.push_str(ws);
            prev.push_str(body);
        }
        _ => {
            let mut s = String::with_capacity(ws.len() + body.len());
            s.push_str(ws);
            s.push_str(body);
            out.push(Event::Text(s));
        }
    }
    ws.clear();
    ws.push_str(&t[body.len()..]);
}

/// The one whitespace that stands for `ws` between two pieces of prose.
fn separator(ws: &str) -> &'static str {
    if ws.is_empty() {
        ""
    } else if ws.bytes().any(|b| b == b'\n') {
        "\n"
    } else {
        " "
    }
}

fn new_cand(format: usize) -> Cand {
    Cand { format, wait: Wait::Len(0), pos: 0, bal: Balance::default() }
}

/// Appends an event, merging adjacent text (or reasoning) and skipping empties.
fn emit(out: &mut Vec<Event>, ev: Event) {
    match (out.last_mut(), ev) {
        (_, Event::Text(t)) if t.is_empty() => {}
        (_, Event::Reasoning(t)) if t.is_empty() => {}
        (Some(Event::Text(a)), Event::Text(b)) => a.push_str(&b),
        (Some(Event::Reasoning(a)), Event::Reasoning(b)) => a.push_str(&b),
        (_, ev) => out.push(ev),
    }
}

/// Whether a candidate's condition holds; advances its incremental state.
fn satisfied(c: &mut Cand, buf: &str) -> bool {
    let b = buf.as_bytes();
    match c.wait {
        Wait::Len(n) => b.len() >= n,
        Wait::Eof => false,
        Wait::Marker { marker, from } => {
            let start = from.max(c.pos).min(b.len());
            if memmem::find(&b[start..], marker.as_bytes()).is_some() {
                return true;
            }
            c.pos = b.len().saturating_sub(marker.len() - 1).max(start);
            false
        }
        Wait::NonSpaceAfter { from } => {
            let start = from.max(c.pos).min(b.len());
            if b[start..].iter().any(|x| !x.is_ascii_whitespace()) {
                return true;
            }
            c.pos = b.len();
            false
        }
        Wait::Balanced { from } => {
            if c.pos < from {
                c.pos = from;
                c.bal = Balance::default();
            }
            balance(&mut c.bal, b, &mut c.pos)
        }
    }
}

/// Advances a bracket matcher over `b[*pos..]`; true once the first bracket
/// closes. Quotes `"` and `'` delimit strings, `\` escapes inside them.
fn balance(s: &mut Balance, b: &[u8], pos: &mut usize) -> bool {
    if s.done {
        return true;
    }
    while *pos < b.len() {
        let x = b[*pos];
        *pos += 1;
        if let Some(q) = s.quote {
            if s.escape {
                s.escape = false;
            } else if x == b'\\' {
                s.escape = true;
            } else if x == q {
                s.quote = None;
            }
            continue;
        }
        match x {
            b'"' | b'\'' if s.depth > 0 => s.quote = Some(x),
            b'{' | b'[' | b'(' => s.depth += 1,
            b'}' | b']' | b')' if s.depth > 0 => {
                s.depth -= 1;
                if s.depth == 0 {
                    s.done = true;
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// Length of the longest suffix of `buf` that is a proper prefix of `needle`.
fn suffix_prefix_len(buf: &str, needle: &str) -> usize {
    let b = buf.as_bytes();
    let n = needle.as_bytes();
    let max = (n.len() - 1).min(b.len());
    (1..=max).rev().find(|k| n.starts_with(&b[b.len() - k..])).unwrap_or(0)
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// The result of a whole, non-streamed output.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Extraction {
    pub content: String,
    pub reasoning: String,
    pub calls: Vec<super::Call>,
}

impl Extraction {
    /// Folds a sequence of events (streamed or not) into one result.
    pub fn from_events(events: impl IntoIterator<Item = Event>) -> Self {
        let mut x = Extraction::default();
        for ev in events {
            match ev {
                Event::Text(t) => x.content.push_str(&t),
                Event::Reasoning(t) => x.reasoning.push_str(&t),
                Event::Call(c) => x.calls.push(c),
            }
        }
        x
    }
}

/// Extracts everything from a complete output in one call.
pub fn extract(text: &str, set: &Arc<FormatSet>, tools: &Arc<ToolIndex>) -> Extraction {
    let mut ex = Extractor::new(set.clone(), tools.clone());
    let mut out = Vec::new();
    ex.feed(text, &mut out);
    ex.finish(&mut out);
    Extraction::from_events(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deferred_marker_opens_only_its_owner_when_both_are_in_the_set() {
        let owners = |set: &FormatSet, m: &str| -> Vec<&str> {
            set.patterns
                .iter()
                .find_map(|(p, k)| match k {
                    Pattern::Marker { formats } if *p == m => {
                        Some(formats.iter().map(|f| set.formats[*f].name()).collect())
                    }
                    _ => None,
                })
                .unwrap_or_default()
        };
        let auto = FormatSet::all();
        assert!(!owners(&auto, "<tool_call>").contains(&"bare_json"));
        assert!(owners(&auto, "<tool_call>").contains(&"hermes"));
        let alone = FormatSet::named(&["bare_json"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(owners(&alone, "<tool_call>"), ["bare_json"]);
        assert_eq!(owners(&alone, "[TOOL_CALLS]"), ["bare_json"]);
    }

    #[test]
    fn auto_mode_leads_fit_the_packed_prefilter() {
        // Past 64 patterns the automaton has no SIMD prefilter and scans prose byte by byte.
        let leads = FormatSet::all().ac.map_or(0, |ac| ac.patterns_len());
        assert!((1..=64).contains(&leads), "{leads} leads");
    }

    #[test]
    fn holds_only_marker_prefixes() {
        let set = Arc::new(FormatSet::none());
        let mut ex = Extractor::new(set, Arc::new(ToolIndex::default()));
        let mut out = Vec::new();
        ex.feed("a < b <thi", &mut out);
        // Trailing whitespace waits to see what follows.
        assert_eq!(out, vec![Event::Text("a < b".into())]);
        ex.feed("nk>why</th", &mut out);
        ex.feed("ink>done", &mut out);
        ex.finish(&mut out);
        assert_eq!(out, vec![Event::Text("a < b".into()), Event::Reasoning("why".into()), Event::Text("done".into())]);
    }

    proptest::proptest! {
        /// What is held back and what may grow, by first byte, as a scan of every pattern says.
        #[test]
        fn held_suffix_and_growth_match_a_plain_scan(parts in proptest::collection::vec(proptest::sample::select(vec![
            "a", " ", "<", "<|", "<|tool", "<tool_call", "<tool_call>", "[TOOL", "<｜tool▁call", "]<]mini", "✿FUNC", "Act",
            "<|content_model_end", "functools", "Thought",
        ]), 0..12)) {
            let set = FormatSet::all();
            let text = parts.concat();
            let b = text.as_bytes();
            let want = (b.len().saturating_sub(set.max_len - 1)..b.len())
                .find(|&i| text.is_char_boundary(i)
                    && set.patterns.iter().any(|(p, _)| p.len() > b.len() - i && p.as_bytes().starts_with(&b[i..])))
                .map_or(0, |i| b.len() - i);
            proptest::prop_assert_eq!(set.partial_suffix(&text), want);
            if let Some((start, len, _)) = set.find(&text) {
                let tail = &b[start..];
                let grows = tail.len() < set.max_len
                    && set.patterns.iter().any(|(p, _)| p.len() > len && p.len() > tail.len() && p.as_bytes().starts_with(tail));
                proptest::prop_assert_eq!(set.could_grow(&text, start, len), grows);
            }
        }

        /// The near-window scan finds what the automaton alone finds.
        #[test]
        fn find_is_leftmost_longest(parts in proptest::collection::vec(proptest::sample::select(vec![
            "a", " ", "<", "<tool_call", "<tool_call>", "<tool_calls>", "[THINK]", "<think>", "Action", "Thought:",
            "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "```", "✿FUNCTION✿", "filler text that is long enough to pass the scan window",
        ]), 0..24)) {
            let set = FormatSet::all();
            let text = parts.concat();
            let want = (0..text.len()).find_map(|i| {
                set.patterns.iter().enumerate()
                    .filter(|(_, (p, _))| text.as_bytes()[i..].starts_with(p.as_bytes()))
                    .max_by_key(|(_, (p, _))| p.len())
                    .map(|(k, (p, _))| (i, p.len(), k))
            });
            proptest::prop_assert_eq!(set.find(&text), want);
        }
    }

    #[test]
    fn a_position_is_checked_against_a_few_patterns() {
        // The most patterns `at` can try at one position: the longest list
        // of any node a walk can stop at.
        fn worst(l: &Lookup) -> usize {
            l.children.iter().map(worst).fold(l.checks.len(), usize::max)
        }
        let set = FormatSet::all();
        let lt = set.by_first[b'<' as usize].len();
        assert!(lt > 40, "{lt} patterns begin with `<`");
        for (byte, l) in set.lookup.iter().enumerate() {
            assert!(worst(l) <= 4, "{:?}: up to {} of {}", byte as u8 as char, worst(l), set.by_first[byte].len());
        }
    }

    #[test]
    fn every_pattern_is_found_where_it_is_written() {
        for set in [FormatSet::all(), FormatSet::named(&["kimi_k2"]).unwrap_or_else(|e| panic!("{e}"))] {
            for (k, (p, _)) in set.patterns.iter().enumerate() {
                for text in [format!("so {p} then"), format!("{}{p}", "x".repeat(200)), p.to_string()] {
                    let at = text.find(p).unwrap_or_default();
                    let found = set.find(&text).map(|(i, len, j)| (i, &text[i..i + len], set.patterns[j].0));
                    assert_eq!(found, Some((at, *p, *p)), "pattern {k} {p:?} in {text:?}");
                }
            }
        }
    }

    /// A piece fed with nothing held is read in place: whatever it leaves
    /// undecided (a marker's first bytes, an open call, open reasoning) must
    /// carry over to the next piece exactly as when it was copied first.
    #[test]
    fn every_two_piece_split_gives_the_whole_answer() {
        let text = "<think>plan <x></think>Let me check. <|tool_calls_section_begin|><|tool_call_begin|>functions.get:0\
            <|tool_call_argument_begin|>{\"a\": \"東京\"}<|tool_call_end|><|tool_calls_section_end|> then <tool_call>\
            {\"name\": \"f\", \"arguments\": {}}</tool_call> done <|tool";
        let set = Arc::new(FormatSet::all());
        let tools = Arc::new(ToolIndex::open());
        let run = |pieces: &[&str]| {
            let mut ex = Extractor::new(set.clone(), tools.clone());
            let mut out = Vec::new();
            for p in pieces {
                ex.feed(p, &mut out);
            }
            ex.finish(&mut out);
            Extraction::from_events(out)
        };
        let whole = run(&[text]);
        assert_eq!(whole.calls.len(), 2, "{whole:?}");
        for cut in (1..text.len()).filter(|i| text.is_char_boundary(*i)) {
            assert_eq!(run(&[&text[..cut], &text[cut..]]), whole, "cut at {cut}");
        }
    }

    fn content(text: &str, pieces: usize) -> Extraction {
        let set = Arc::new(FormatSet::all());
        let tools = Arc::new(ToolIndex::open());
        let mut ex = Extractor::new(set, tools);
        let mut out = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        for part in chars.chunks(pieces.max(1)) {
            ex.feed(&part.iter().collect::<String>(), &mut out);
        }
        ex.finish(&mut out);
        Extraction::from_events(out)
    }

    #[test]
    fn reasoning_held_from_a_breaking_token_is_bounded() {
        let set = Arc::new(FormatSet::all());
        let mut ex = Extractor::with_options(set, Arc::new(ToolIndex::open()), Options { starts_in_reasoning: true });
        let mut out = Vec::new();
        ex.feed("hm <|tool_calls_section_begin|>", &mut out);
        let piece = "x".repeat(1 << 20);
        for _ in 0..9 {
            ex.feed(&piece, &mut out);
        }
        let held = ex.buf.len() - ex.run.head;
        assert!(held < MAX_REGION, "held {held}");
        ex.finish(&mut out);
        let got = Extraction::from_events(out);
        assert!(got.calls.is_empty() && got.reasoning.len() > 9 << 20);
    }

    #[test]
    fn prose_around_a_removed_call_keeps_one_separator() {
        let call = r#"<tool_call>{"name": "f", "arguments": {}}</tool_call>"#;
        for n in [1, 3, 1000] {
            assert_eq!(content(&format!("one {call} two"), n).content, "one two");
            assert_eq!(content(&format!("one\n\n{call}\n\ntwo"), n).content, "one\ntwo");
            assert_eq!(content(&format!("one{call} two"), n).content, "one two");
            assert_eq!(content(&format!("one{call}two"), n).content, "onetwo");
            assert_eq!(content(&format!("{call} two"), n).content, "two");
            assert_eq!(content(&format!("one {call}\n"), n).content, "one");
            assert_eq!(content(&format!("one {call} {call} two"), n).content, "one two");
        }
    }

    #[test]
    fn balance_respects_strings() {
        let mut s = Balance::default();
        let mut pos = 0;
        assert!(!balance(&mut s, br#"{"a": "}'", "b": ["#, &mut pos));
        assert!(balance(&mut s, br#"{"a": "}'", "b": [1]}"#, &mut pos));
    }
}
