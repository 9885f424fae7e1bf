//! The test binary's global allocator: the system allocator, counting what it hands out, for the tests
//! that measure memory (there can be only one global allocator in a binary).
//!
//! Two counts, for two kinds of measurement:
//! - per thread ([`held_by_this_thread`]): the bytes the calling thread holds (allocated minus freed). Other
//!   tests' threads do not touch it, so `resume` measures in the shared process.
//! - process-wide ([`live`], [`peak`]): the live heap of the whole process and its high-water mark since
//!   [`reset_peak`]. Every thread moves it, so a test that bounds it (`memory`) runs alone in a child process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

struct Counting;

/// Bytes live in the whole process.
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// The largest [`LIVE`] since the last [`reset_peak`].
static PEAK: AtomicIsize = AtomicIsize::new(0);
/// Whether [`PEAK`] is kept: off until a test asks for it, so the other tests' allocations do not all
/// contend on it.
static TRACK_PEAK: AtomicBool = AtomicBool::new(false);

thread_local! {
    static HELD: Cell<i64> = const { Cell::new(0) };
}

fn grew(by: isize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    if TRACK_PEAK.load(Ordering::Relaxed) {
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
    // `try_with`: the thread-local may be gone while the thread exits.
    let _ = HELD.try_with(|held| held.set(held.get() + by as i64));
}

fn shrank(by: isize) {
    LIVE.fetch_sub(by, Ordering::Relaxed);
    let _ = HELD.try_with(|held| held.set(held.get() - by as i64));
}

/// Bytes the calling thread holds now (allocated minus freed since it started).
pub fn held_by_this_thread() -> i64 {
    HELD.with(Cell::get)
}

/// Bytes live in the whole process now.
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// The high-water mark of [`live`] since the last [`reset_peak`].
pub fn peak() -> isize {
    PEAK.load(Ordering::Relaxed)
}

/// Starts a new high-water mark at the current live heap; returns it (the baseline).
pub fn reset_peak() -> isize {
    TRACK_PEAK.store(true, Ordering::Relaxed);
    let now = live();
    PEAK.store(now, Ordering::Relaxed);
    now
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; counting allocates
// nothing (the thread-local is a const-initialised `Cell`). The workspace denies `unsafe`; a global
// allocator cannot be written without it.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System.alloc`'s.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size() as isize);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size() as isize);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes through here).
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size() as isize);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `dealloc`, and `new_size` is the caller's.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            let delta = new_size as isize - layout.size() as isize;
            if delta >= 0 { grew(delta) } else { shrank(-delta) }
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;
