//! The `modelshim` binary: parse the command line and run it.

use clap::Parser;

/// mimalloc: the streaming path allocates small strings per chunk, which it
/// serves from thread-local free lists (measured in benches/ and bench/).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    no_huge_pages();
    // Requests are served by the serving threads' own runtimes
    // (server::shutdown::serve_threads); this one runs startup, signals and
    // background tasks (MCP clients, Redis, the skills watcher, the demo).
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    runtime.block_on(modelshim::cli::run(modelshim::cli::Cli::parse()))
}

/// mimalloc maps its memory in 2 MiB-aligned arenas; where transparent huge
/// pages are `always` on (common), the kernel backs them with huge pages and
/// a few small allocations cost megabytes. Measured with bench/: idle RSS
/// 27.6 → 18.3 MiB, 71 → 49 KiB per open stream. The flag is process-wide
/// and inherited by child processes (stdio MCP servers).
fn no_huge_pages() {
    #[cfg(all(feature = "mimalloc", target_os = "linux"))]
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        eprintln!("modelshim: cannot turn off transparent huge pages ({e}); memory use will be higher");
    }
}
