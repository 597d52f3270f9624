//! Hands the allocator's free pages back to the kernel.
//!
//! glibc keeps the pages of freed memory in its arenas: after a burst (the first list of every
//! watch, a StorageOS poll of thousands of volumes, a re-list) a process stays resident at the
//! size of the burst, not of what it holds. `malloc_trim` returns every whole free page of every
//! arena (what it saves: docs/benchmarks.md); [`set_up_allocator`] keeps every thread in one arena and
//! large blocks out of it.

use std::convert::Infallible;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

/// How often the long-running commands trim: a walk of the arenas costs well under a
/// millisecond at their sizes.
pub const TRIM_EVERY: Duration = Duration::from_secs(30);

/// Runs `work`, trimming the allocator every [`TRIM_EVERY`] until it ends.
pub async fn trimming<F: Future>(work: F) -> F::Output {
    tokio::select! {
        out = work => out,
        never = trim_every(TRIM_EVERY) => match never {},
    }
}

async fn trim_every(every: Duration) -> Infallible {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let released = trim();
        tracing::trace!(released, "allocator trimmed");
    }
}

/// Blocks this large or larger are mapped on their own and unmapped when freed.
pub const MMAP_THRESHOLD: usize = 128 * 1024;

/// Makes every thread allocate from glibc's one main arena, and keeps large blocks out of it.
///
/// By default each thread that allocates gets an arena of its own (up to 8 per core), each
/// holding its own free pages and its own fragmentation between live objects, which a trim
/// cannot give back: resident memory that grows with the threads (the api-manager's two runtime
/// workers and the fencer's thread), not with what the process holds. These processes allocate
/// in small bursts from a few threads, so the shared arena's lock is rarely contended.
///
/// glibc maps a block of 128 KiB or more on its own, but raises that threshold to the size of
/// each such block freed (up to 32 MiB): once the first large block was freed (a StorageOS node
/// list is 2.1 MB of JSON at 5,000 nodes, read every poll), every later one came from the arena,
/// and the small objects allocated beside it kept its pages from being given back. A fixed
/// threshold keeps large blocks out for good: at 5,000 nodes the api-manager's arena held 3 MB
/// more than was live instead of 11 (docs/benchmarks.md). Call this before any thread starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code, reason = "glibc's mallopt, as malloc_trim below")]
pub fn set_up_allocator() -> bool {
    let threshold = libc::c_int::try_from(MMAP_THRESHOLD).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt takes two integers, has no precondition and is MT-safe (mallopt(3)).
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) == 1 && libc::mallopt(libc::M_MMAP_THRESHOLD, threshold) == 1 }
}

/// Other allocators are set up their own way: nothing to do.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn set_up_allocator() -> bool {
    false
}

/// Returns the free pages of every malloc arena to the kernel; true when some were.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(
    unsafe_code,
    reason = "glibc's malloc_trim, as mallopt above (and statvfs in checks::host)"
)]
pub fn trim() -> bool {
    // SAFETY: malloc_trim takes no pointer, has no precondition and is MT-safe (malloc_trim(3)).
    unsafe { libc::malloc_trim(0) != 0 }
}

/// Other allocators have no such call (and keep fewer pages): nothing to do.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn glibc_takes_one_arena_and_a_fixed_mmap_threshold() {
        assert!(set_up_allocator(), "mallopt refused M_ARENA_MAX or M_MMAP_THRESHOLD");
    }

    #[tokio::test]
    async fn the_work_ends_the_trimming_and_gives_its_output() {
        let work = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            42
        };
        assert_eq!(trimming(work).await, 42);
    }
}
