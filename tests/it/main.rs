//! Every integration test in one binary, so the suite links the crate once.
//! Each module is what was one `tests/*.rs` file; `common` and `support`
//! are their shared harness.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by panicking

mod common;
mod support;

mod agent;
mod claude_code;
mod clients;
mod codex;
mod console;
mod context_overflow;
mod fixtures;
mod fuzz_request;
mod hardening;
mod key_pool;
mod messages;
mod nesting;
mod one_way;
mod prefix_stability;
mod production;
mod providers;
mod proxy;
mod reasoning;
mod reasoning_calls;
mod redis_modes;
mod redis_shared;
mod replay;
mod responses;
mod scenario_routes;
mod sdk;
mod skills;
mod spend;
mod stream_split;
mod structured;
mod tidy;
mod toolcall_conformance;
mod tools;
mod vision;
