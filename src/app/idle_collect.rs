//! Returning the heap a burst freed to the OS once a thread goes idle.
//!
//! kache's allocator (mimalloc, chosen by the binary) keeps each thread's freed blocks in that thread's pages:
//! a block freed by another thread (a response body built on one runtime worker and dropped on another, a list
//! chunk produced on a heavy-body thread) waits in its page's cross-thread list until the owning thread
//! allocates in that size class again, and a page whose blocks are all free is kept for reuse. A thread that
//! goes idle after a burst therefore keeps the burst's pages resident, however long it stays idle
//! (docs/decisions/0021-memory-per-cached-byte.md). [`on_idle`], called as a thread parks, has the
//! allocator collect that thread's heap — free pages are released and their memory purged — at most once per
//! interval per thread, so a busy thread that parks between requests pays for it rarely.
//!
//! The interval (`--heap-collect-interval`, 2 s by default) bounds the cost: a collection visits every page of
//! its thread's heap, ~1 ms in a 1000-node cluster's kache, so a worker that parks between every request pays
//! it at most once per interval (a few per mille of a core); a thread idle after a burst collects within it.
//!
//! The library does not choose the allocator: the binary [`install`]s its collection; without one (tests,
//! embedders) [`on_idle`] does nothing.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The allocator's collection and how often one thread may run it.
struct Collector {
    collect: fn(),
    every: Duration,
}

static COLLECTOR: OnceLock<Collector> = OnceLock::new();
/// Collections run, and the time they took (nanoseconds), process-wide.
static COLLECTS: AtomicU64 = AtomicU64::new(0);
static COLLECT_NANOS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// When this thread last collected.
    static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Installs the allocator's collection of the calling thread's heap, run by [`on_idle`] at most once per
/// `every` per thread; a zero `every` installs nothing. The first installation wins (one per process).
pub fn install(collect: fn(), every: Duration) {
    if !every.is_zero() {
        let _ = COLLECTOR.set(Collector { collect, every });
    }
}

/// The installed interval, if a collection is installed.
pub fn interval() -> Option<Duration> {
    COLLECTOR.get().map(|c| c.every)
}

/// Called as the calling thread goes idle: collects its heap if it has not in the installed interval.
pub fn on_idle() {
    let Some(c) = COLLECTOR.get() else { return };
    let now = Instant::now();
    if LAST.get().is_some_and(|last| now.duration_since(last) < c.every) {
        return;
    }
    (c.collect)();
    let done = Instant::now();
    LAST.set(Some(done));
    COLLECTS.fetch_add(1, Ordering::Relaxed);
    let nanos = u64::try_from(done.duration_since(now).as_nanos()).unwrap_or(u64::MAX);
    COLLECT_NANOS.fetch_add(nanos, Ordering::Relaxed);
}

/// Collections run so far and the nanoseconds they took, process-wide.
pub fn totals() -> (u64, u64) {
    (COLLECTS.load(Ordering::Relaxed), COLLECT_NANOS.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static COLLECTED: Cell<u32> = const { Cell::new(0) };
    }

    fn count() {
        COLLECTED.set(COLLECTED.get() + 1);
    }

    #[test]
    fn a_thread_collects_once_per_interval_as_it_goes_idle() {
        // The only installation in the library's tests (one per process); the count is per thread, so other
        // tests' threads going idle meanwhile do not disturb it.
        install(count, Duration::from_secs(3600));
        let before = totals().0;
        on_idle();
        assert_eq!(COLLECTED.get(), 1, "the first idle collects");
        on_idle();
        on_idle();
        assert_eq!(COLLECTED.get(), 1, "not again within the interval");
        // Another thread has its own interval.
        let other = std::thread::spawn(|| {
            on_idle();
            COLLECTED.get()
        });
        assert_eq!(other.join().expect("thread"), 1);
        assert!(totals().0 >= before + 2);
    }

    #[test]
    fn a_zero_interval_installs_nothing() {
        // Runs before or after the test above: either way, zero never replaces nor becomes the collector.
        install(count, Duration::ZERO);
        assert!(COLLECTOR.get().is_none_or(|c| !c.every.is_zero()));
    }
}
