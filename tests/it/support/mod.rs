//! Installs and servers the tests share.

pub mod mcp_everything;
pub mod pyenv;
pub mod redis;
