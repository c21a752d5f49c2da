//! The `modelshim` binary: parse the command line and run it.

use clap::Parser;

/// mimalloc: the streaming path allocates small strings per chunk, which it
/// serves from thread-local free lists (measured in benches/ and bench/).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    modelshim::cli::run(modelshim::cli::Cli::parse()).await
}
