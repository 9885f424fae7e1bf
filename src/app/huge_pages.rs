//! Transparent huge pages for the process, by how much its caches hold.
//!
//! kache's allocator (mimalloc) advises the kernel to back its arenas with transparent huge pages
//! (`MADV_HUGEPAGE`). The kernel then backs every 2 MiB of heap that holds any live byte with a whole huge
//! page, and khugepaged collapses partly used ranges into huge pages too, so the heap's resident size rounds
//! up to 2 MiB per range touched: in a 1000-node cluster (14 MiB of JSON cached) that was half of kache's
//! anonymous memory (docs/decisions/0021-memory-per-cached-byte.md). The gain, fewer TLB misses, was measured
//! only for heaps of hundreds of MiB (lists of 100k pods, docs/decisions/0012-transparent-huge-pages.md).
//!
//! So with [`HugePages::Auto`] kache forbids huge pages for the process (`PR_SET_THP_DISABLE`, which
//! overrides the arenas' advice, for page faults and khugepaged alike) until its stores and protobuf messages
//! hold [`ON_FROM_BYTES`], and forbids them again below [`OFF_BELOW_BYTES`]. The switch is the process's
//! (the allocator is), so only the binary's kaches use `Auto`; tests keep the allocator's choice.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, StatsSource};
use crate::reflector::Registry;

/// Cached bytes from which huge pages are allowed: below the ~400 MiB of 100k pods where their gain was
/// measured (decision 0012), above the heaps where only their cost was (10k pods: RSS 2.4× the JSON with
/// them, 1.8× without, list times unchanged). From here the 2 MiB rounding is a few per cent of the heap.
pub const ON_FROM_BYTES: usize = 256 << 20;
/// Cached bytes below which huge pages are forbidden again: half of [`ON_FROM_BYTES`], so a store that
/// hovers around the threshold does not flip the switch at every check.
pub const OFF_BELOW_BYTES: usize = ON_FROM_BYTES / 2;
/// How often [`HugePages::Auto`] weighs the caches: they grow by a relist or a burst of events, and a few
/// seconds of 4 KiB pages after that cost nothing measurable.
const CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Whether the kernel may back kache's heap with transparent huge pages (`--huge-pages`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum HugePages {
    /// Forbidden until the caches hold [`ON_FROM_BYTES`], forbidden again below [`OFF_BELOW_BYTES`].
    Auto,
    /// The allocator's choice, untouched: mimalloc asks for them on its arenas.
    #[default]
    On,
    /// Forbidden for the process.
    Off,
}

// === impl HugePages ===

impl HugePages {
    /// Sets the process's switch as this mode starts: forbidden for `Off` and `Auto`, untouched for `On`.
    /// `main` calls it first, before the runtime's threads touch the heap: a range touched while huge pages
    /// are allowed stays a huge page (10 MiB of them when the kache set it only as it started).
    pub fn apply_at_start(self) {
        if self != HugePages::On {
            allow(false);
        }
    }
}

/// Whether huge pages should be allowed, given whether they are now and the bytes cached (with hysteresis).
fn wanted(now: bool, cached: usize) -> bool {
    if now { cached >= OFF_BELOW_BYTES } else { cached >= ON_FROM_BYTES }
}

/// Allows or forbids huge pages for the whole process; `false` when the kernel refused (no THP support).
fn allow(on: bool) -> bool {
    match rustix::thread::disable_transparent_huge_pages(!on) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, on, "could not set the process's transparent huge pages");
            false
        }
    }
}

/// Applies `mode` and, for [`HugePages::Auto`], follows the caches' size until `stop`; `kache_huge_pages`
/// shows whether they are allowed.
pub(crate) async fn run(mode: HugePages, registry: Arc<Registry>, metrics: Metrics, stop: CancellationToken) {
    let gauge = metrics.gauge(crate::metrics::names::HUGE_PAGES, Vec::new());
    let mut now = match mode {
        HugePages::On => true,
        // Again here for a kache started without `main` (`apply_at_start`); the call is idempotent.
        HugePages::Off | HugePages::Auto => !allow(false),
    };
    gauge.set(f64::from(u8::from(now)));
    if mode != HugePages::Auto {
        return;
    }
    let mut tick = tokio::time::interval(CHECK_INTERVAL);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let cached = cached_bytes(&registry, &metrics);
        let want = wanted(now, cached);
        if want != now && allow(want) {
            tracing::info!(on = want, cached, "transparent huge pages");
            now = want;
            gauge.set(f64::from(u8::from(now)));
        }
    }
}

/// The bytes the stores (objects, history, retained snapshots, indexes) and their protobuf messages hold.
fn cached_bytes(registry: &Registry, metrics: &Metrics) -> usize {
    let stores: usize =
        registry.resources().iter().filter_map(|r| r.store.as_ref()).map(|s| s.memory_bytes()).sum();
    stores + usize::try_from(metrics.protobuf_bytes_held()).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_follow_the_cached_bytes_with_hysteresis() {
        // Off: on only from the threshold.
        assert!(!wanted(false, ON_FROM_BYTES - 1));
        assert!(wanted(false, ON_FROM_BYTES));
        // On: stays on down to half of it.
        assert!(wanted(true, ON_FROM_BYTES - 1));
        assert!(wanted(true, OFF_BELOW_BYTES));
        assert!(!wanted(true, OFF_BELOW_BYTES - 1));
    }
}
