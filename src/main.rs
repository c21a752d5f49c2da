//! The `modelshim` binary: parse the command line and run it.

use clap::Parser;

/// mimalloc: the streaming path allocates small strings per chunk, which it
/// serves from thread-local free lists.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // First, while this is the only thread: capabilities are per thread and
    // every later thread and child inherits these.
    keep_secrets_from_children();
    no_huge_pages();
    prompt_purge();
    keep_purging();
    // Requests are served by the serving threads' own runtimes
    // (server::shutdown::serve_threads); this one runs startup, signals and
    // background tasks (MCP clients, Redis, the skills watcher, the demo).
    let run = || -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
        runtime.block_on(modelshim::cli::run(modelshim::cli::Cli::parse()))
    };
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The message and its causes only (returning the error from
            // `main` printed anyhow's backtrace whenever RUST_BACKTRACE was
            // set), redacted like every other exit.
            eprintln!("Error: {}", modelshim::redact::text(&format!("{e:#}")));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Provider and proxy keys are in this process's environment and memory;
/// skill scripts and stdio MCP servers run as the same user and must not
/// read them (their own environment is scrubbed: `tools/skill_scripts.rs`,
/// `tools/mcp.rs`). The kernel lets a process read another's
/// `/proc/PID/environ` and `/proc/PID/mem` (and ptrace it) when it has the
/// same uid and the target is dumpable, or when it holds CAP_SYS_PTRACE,
/// CAP_SYS_ADMIN or CAP_PERFMON (so a child of a root proxy reads it
/// whatever `dumpable` says). So:
/// - the process is made non-dumpable (also: no core dumps with keys in them);
/// - those capabilities, and the ones that reach all memory another way
///   (CAP_SYS_RAWIO: /dev/mem, /proc/kcore; CAP_SYS_MODULE; CAP_BPF), are
///   removed from the bounding, inheritable and ambient sets, so no program
///   started from here, root or not, can hold them.
///
/// What is left: a child running as root keeps root's other powers
/// (e.g. writing this binary or the config); run the proxy as an
/// unprivileged user where that matters. Not possible elsewhere than Linux.
fn keep_secrets_from_children() {
    #[cfg(target_os = "linux")]
    {
        if let Err(e) = nix::sys::prctl::set_dumpable(false) {
            eprintln!("modelshim: cannot make the process non-dumpable ({e}); child processes may read its keys");
        }
        if let Err(e) = drop_capabilities(&MEMORY_CAPS) {
            eprintln!("modelshim: {e}; child processes running as root may read this process's keys");
        }
    }
}

/// CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF.
#[cfg(target_os = "linux")]
const MEMORY_CAPS: [u32; 6] = [16, 17, 19, 21, 38, 39];

/// Removes `caps` from the inheritable, ambient and bounding sets of this
/// thread (threads and children created later inherit them). Dropping from
/// the bounding set needs CAP_SETPCAP: without it (not root), there is
/// nothing to drop unless the sets were set up so, which is reported.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn drop_capabilities(caps: &[u32]) -> Result<(), String> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const V3: u32 = 0x2008_0522;
    let mut header = Header { version: V3, pid: 0 };
    let mut data = [Data::default(); 2];
    // SAFETY: capget/capset with a v3 header and the two data words v3 uses.
    let got = unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut Header, data.as_mut_ptr()) };
    if got != 0 {
        return Err(format!("cannot read the capabilities: {}", std::io::Error::last_os_error()));
    }
    let inheritable = |d: &[Data; 2]| caps.iter().any(|&c| d[(c / 32) as usize].inheritable & (1 << (c % 32)) != 0);
    if inheritable(&data) {
        for &c in caps {
            data[(c / 32) as usize].inheritable &= !(1 << (c % 32));
        }
        // SAFETY: as above; lowering the inheritable set is always allowed.
        let set = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
        if set != 0 {
            return Err(format!("cannot lower the inheritable capabilities: {}", std::io::Error::last_os_error()));
        }
    }
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    for &c in caps {
        // SAFETY: prctl with integer arguments only.
        let bounded = unsafe { libc::prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(c), 0, 0, 0) };
        // SAFETY: prctl with integer arguments only.
        if bounded == 1 && unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(c), 0, 0, 0) } != 0 {
            let e = std::io::Error::last_os_error();
            // Not root and not given CAP_SETPCAP: children only get such a
            // capability from a file that has it, which is the admin's choice.
            // SAFETY: geteuid has no arguments and cannot fail.
            if unsafe { libc::geteuid() } == 0 {
                return Err(format!("cannot drop capability {c} from the bounding set: {e}"));
            }
        }
    }
    Ok(())
}

/// mimalloc maps its memory in 2 MiB-aligned arenas; where transparent huge
/// pages are `always` on (common), the kernel backs them with huge pages and
/// a few small allocations cost megabytes, idle and in every open stream.
/// The flag is process-wide
/// and inherited by child processes (stdio MCP servers). Where they are
/// given on advice only, mimalloc's `no_thp` build (Cargo.toml) keeps it from
/// asking for them before this runs.
fn no_huge_pages() {
    #[cfg(all(feature = "mimalloc", target_os = "linux"))]
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        eprintln!("modelshim: cannot turn off transparent huge pages ({e}); memory use will be higher");
    }
}

/// How long mimalloc keeps memory that fell free before it gives it back to
/// the OS. Its default (v3) is a second: what a burst of requests used on the
/// way to their answers (their futures, bodies, parsed JSON) then stays
/// resident next to the streams they opened. 10 ms (mimalloc v2's default)
/// gives most of it back for no CPU one can measure; 0 gives a little more
/// and costs CPU on every request. `MIMALLOC_PURGE_DELAY` in the
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

/// How often [`keep_purging`] gives back what is free.
#[cfg(feature = "mimalloc")]
const PURGE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// mimalloc purges only when a later allocation or free on some thread finds
/// a purge due, and in 3.3 it can stop for good: a thread that schedules a
/// purge while another ends a pass that found nothing due leaves the
/// process-wide deadline cleared and the arena's set, and no later free
/// starts a pass again (the stream soak's one-time step of ≈5 MiB, then RSS
/// held at its high-water mark). A forced collect once a second, on a thread
/// of its own so no request waits on it, purges what is free, clears the
/// arena's deadline so the next free schedules both again, and gives back
/// what a burst left when the proxy goes idle.
fn keep_purging() {
    #[cfg(feature = "mimalloc")]
    {
        let spawned = std::thread::Builder::new().name("purge".into()).stack_size(64 * 1024).spawn(|| {
            // mimalloc collects only on a thread that has allocated.
            drop(std::hint::black_box(Box::new(0u8)));
            loop {
                std::thread::sleep(PURGE_EVERY);
                collect();
            }
        });
        if let Err(e) = spawned {
            eprintln!("modelshim: cannot start the purge thread ({e}); memory freed may stay resident");
        }
    }
}

#[cfg(feature = "mimalloc")]
#[allow(unsafe_code)]
fn collect() {
    // SAFETY: collects the calling thread's heap and purges every arena.
    unsafe { libmimalloc_sys::mi_collect(true) }
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

    /// Resident memory of this process, in KiB.
    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap_or_default();
        line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0)
    }

    /// What a burst freed goes back to the OS while nothing else allocates:
    /// without the purge thread it stays resident until a later allocation
    /// happens to find the purge due.
    #[test]
    #[cfg(target_os = "linux")]
    fn memory_freed_goes_back_while_the_process_is_idle() {
        keep_purging();
        const SIZE: usize = 64 << 20;
        let mut burst = vec![0u8; SIZE];
        for i in (0..SIZE).step_by(4096) {
            burst[i] = 1;
        }
        std::hint::black_box(&burst);
        let high = rss_kib();
        drop(burst);
        let given_back = (0..30).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            high.saturating_sub(rss_kib()) > (SIZE as u64 / 1024) * 3 / 4
        });
        assert!(given_back, "RSS {high} KiB before the free, {} KiB 3 s after", rss_kib());
    }
}
