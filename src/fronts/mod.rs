//! The API fronts: each translates its wire format onto the core and the
//! core's answer back — chat completions ([`chat`]), the Responses API
//! ([`responses`]) and Anthropic's Messages API ([`messages`]). A front
//! knows its own wire types and the core, never another front.

pub mod chat;
pub mod drive;
pub mod messages;
pub mod responses;
pub mod sse;
