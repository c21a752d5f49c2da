//! modelshim: an OpenAI-compatible proxy that makes other vendors' models
//! behave like OpenAI's for the official SDKs. See ARCHITECTURE.md for the map.

pub mod agent;
pub mod cli;
pub mod config;
pub mod error;
pub mod fixture;
pub mod idle;
pub mod metrics;
pub mod openai;
pub mod provider;
pub mod reasoning;
pub mod redact;
pub mod responses;
pub mod server;
pub mod skills;
pub mod state;
pub mod stream;
pub mod telemetry;
pub mod toolcall;
pub mod tools;
