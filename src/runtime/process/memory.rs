//! Hands the allocator's free pages back to the kernel.
//!
//! glibc keeps the pages of freed memory in its arenas: after a burst (the first list of every
//! watch, a StorageOS poll of thousands of volumes, a re-list) a process stays resident at the
//! size of the burst, not of what it holds. `malloc_trim` returns every whole free page of every
//! arena (what it saves: docs/benchmarks.md).

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

/// Returns the free pages of every malloc arena to the kernel; true when some were.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code, reason = "the one foreign call of the crate: glibc's malloc_trim")]
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

    #[tokio::test]
    async fn the_work_ends_the_trimming_and_gives_its_output() {
        let work = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            42
        };
        assert_eq!(trimming(work).await, 42);
    }
}
