//! The `modelshim` binary: parse the command line and run it.

use clap::Parser;

/// mimalloc: the streaming path allocates small strings per chunk, which it
/// serves from thread-local free lists (measured in benches/ and bench/).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    no_huge_pages();
    prompt_purge();
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

/// How long mimalloc keeps memory that fell free before it gives it back to
/// the OS. Its default (v3) is a second: what a burst of requests used on the
/// way to their answers (their futures, bodies, parsed JSON) then stays
/// resident next to the streams they opened. 10 ms (mimalloc v2's default):
/// 1,000 streams opened 200 at a time hold ~2 MiB less, for no CPU the
/// harness can tell apart; 0 would save another MiB for ~17% more CPU per
/// plain request (bench/README.md, twenty-second run). `MIMALLOC_PURGE_DELAY` in the
/// environment still decides when set.
#[cfg(feature = "mimalloc")]
const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// `mi_option_purge_delay`'s place in mimalloc's `mi_option_t` (the same in
/// v2 and v3), which libmimalloc-sys does not name.
#[cfg(feature = "mimalloc")]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Sets the purge delay ([`PURGE_DELAY_MS`]). mimalloc reads its options from
/// the environment as the process loads, so this sets the value itself.
fn prompt_purge() {
    #[cfg(feature = "mimalloc")]
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        set_purge_delay(PURGE_DELAY_MS);
    }
}

#[cfg(feature = "mimalloc")]
#[allow(unsafe_code)]
fn set_purge_delay(ms: std::ffi::c_long) {
    // SAFETY: stores an integer option that mimalloc reads when it purges;
    // called before any other thread of ours exists.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, ms) }
}

#[cfg(all(test, feature = "mimalloc"))]
mod tests {
    use super::*;

    /// The option index is mimalloc's purge delay: its v3 default is 1000 ms,
    /// the only option whose default is.
    #[test]
    #[allow(unsafe_code)]
    fn the_option_set_is_the_purge_delay() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: reads an integer option.
        let get = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(get(), 1000);
        set_purge_delay(PURGE_DELAY_MS);
        assert_eq!(get(), PURGE_DELAY_MS);
    }
}
