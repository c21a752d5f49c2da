//! modelshim: an OpenAI-compatible proxy that makes other vendors' models
//! behave like OpenAI's for the official SDKs. See ARCHITECTURE.md for the map.

pub mod toolcall;
