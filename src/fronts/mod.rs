//! The API fronts: each translates its wire format onto the core and the
//! core's answer back — chat completions ([`chat`]) and the Responses API
//! ([`responses`]). A front knows its own wire types and the core, never
//! another front.

pub mod chat;
pub mod responses;
pub mod sse;
