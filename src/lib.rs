//! modelshim: an OpenAI-compatible proxy that makes other vendors' models
//! behave like OpenAI's for the official SDKs. See ARCHITECTURE.md for the map.

pub mod cli;
pub mod config;
pub mod core;
pub mod error;
pub mod fixture;
pub mod fronts;
pub mod idle;
pub mod logline;
pub mod metrics;
pub mod openai;
pub mod provider;
pub mod recorder;
pub mod redact;
pub mod server;
pub mod skills;
pub mod spend;
pub mod state;
pub mod stream;
pub mod telemetry;
pub mod toolcall;
pub mod tools;
