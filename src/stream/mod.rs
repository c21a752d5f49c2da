//! Response normalization, streamed and not, with one code path: a
//! non-streamed answer is turned into one chunk, normalized like any stream,
//! then assembled back ([`aggregate`]). That is what makes both outcomes
//! identical. A streamed chunk the normalizer would not change is forwarded
//! as it came ([`Normalizer::forward`], read by [`forward`]), and so is a
//! whole answer ([`Normalizer::whole_as_is`]).

pub mod aggregate;
pub mod data;
mod forward;
pub mod normalize;
pub mod usage;

pub use aggregate::{Assembler, completion_to_chunk};
pub use data::Data;
pub use forward::{Forwarded, Tokens};
pub use normalize::Normalizer;
