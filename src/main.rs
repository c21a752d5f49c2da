//! The `modelshim` binary: parse the command line and run it.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    modelshim::cli::run(modelshim::cli::Cli::parse()).await
}
