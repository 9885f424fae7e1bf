//! A segmented, append-only log shared by published states: the event history and the retained
//! snapshots.
//!
//! Every published [`super::State`] holds a `Log` value: a window `[start, end)` over a list of fixed-size
//! segments whose slots are written once. The single writer appends by filling the next slot of the
//! shared tail segment in place (no copy: readers of older states never look past their own `end`) and
//! evicts by advancing `start`. The list of segments is copied only when a segment is added or a fully
//! evicted one is released, i.e. once every [`SEGMENT_LEN`] operations, so append and eviction are O(1)
//! amortised and a reader's view never changes under it. (An `imbl::Vector` would instead copy a 64-slot
//! chunk, with 64 reference-count updates, on every publish, because the published state shares it.)
//!
//! Memory: an evicted entry is dropped when its whole segment is released, so up to `SEGMENT_LEN - 1`
//! evicted entries may outlive their eviction.
//!
//! A [`Cursor`] reads a log lazily from some entry on: it holds the log's window (one shared pointer and
//! three positions), never a copy of the entries, so a watcher resuming far back costs what one resuming
//! at the head costs. The segments it shares stay alive while it reads (shared by every cursor over them).

use std::sync::{Arc, OnceLock};

/// Slots per segment: large enough to make segment-list copies rare, small enough that evicted entries
/// kept alive by a partly evicted segment stay few.
pub(crate) const SEGMENT_LEN: usize = 256;
const SEGMENT_LEN_U64: u64 = SEGMENT_LEN as u64;

struct Segment<T> {
    slots: Box<[OnceLock<T>]>,
}

impl<T> Segment<T> {
    fn new() -> Arc<Self> {
        Arc::new(Segment { slots: (0..SEGMENT_LEN).map(|_| OnceLock::new()).collect() })
    }
}

/// A window over an append-only sequence. Cloning is O(1).
pub struct Log<T> {
    segments: Arc<[Arc<Segment<T>>]>,
    /// Absolute position of `segments[0].slots[0]`.
    base: u64,
    /// Absolute positions `[start, end)` are live; every slot in it is set.
    start: u64,
    end: u64,
}

impl<T> Clone for Log<T> {
    fn clone(&self) -> Self {
        Self { segments: self.segments.clone(), base: self.base, start: self.start, end: self.end }
    }
}

impl<T> Default for Log<T> {
    fn default() -> Self {
        Self { segments: Arc::from(Vec::new()), base: 0, start: 0, end: 0 }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Log<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log").field("len", &self.len()).field("front", &self.front()).finish()
    }
}

// === impl Log ===

impl<T> Log<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        // `end - start` never exceeds the number of allocated slots, which fits in memory.
        (self.end - self.start) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    fn slot(&self, pos: u64) -> &OnceLock<T> {
        let rel = pos - self.base;
        &self.segments[(rel / SEGMENT_LEN_U64) as usize].slots[(rel % SEGMENT_LEN_U64) as usize]
    }

    /// The `i`th live entry (0 is the oldest).
    pub fn get(&self, i: usize) -> Option<&T> {
        let pos = self.start.checked_add(i as u64)?;
        if pos >= self.end {
            return None;
        }
        self.slot(pos).get()
    }

    pub fn front(&self) -> Option<&T> {
        self.get(0)
    }

    pub fn back(&self) -> Option<&T> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    /// Live entries from the `from`th on, oldest first.
    pub(crate) fn iter_from(&self, from: usize) -> impl DoubleEndedIterator<Item = &T> {
        // Every slot of the window is set, so `filter_map` drops nothing.
        (from.min(self.len())..self.len()).filter_map(move |i| self.get(i))
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> {
        self.iter_from(0)
    }

    /// A lazy reader of the live entries from the `from`th on, oldest first (see [`Cursor`]).
    pub(crate) fn cursor_from(&self, from: usize) -> Cursor<T> {
        let next = self.start.saturating_add(from as u64).min(self.end);
        Cursor { log: self.clone(), next }
    }

    /// The index of the first entry for which `pred` is false, given that `pred` is true for a prefix of
    /// the log and false for the rest (binary search).
    pub(crate) fn partition_point(&self, mut pred: impl FnMut(&T) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(mid) {
                Some(entry) if pred(entry) => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo
    }

    /// Drops the oldest entry and returns it. A segment is released once all its slots are evicted.
    pub fn pop_front(&mut self) -> Option<T>
    where
        T: Clone,
    {
        let value = self.front()?.clone();
        self.start += 1;
        let dead = ((self.start - self.base) / SEGMENT_LEN_U64) as usize;
        if dead > 0 {
            self.segments = self.segments[dead..].to_vec().into();
            self.base += dead as u64 * SEGMENT_LEN_U64;
        }
        Some(value)
    }

    /// Appends an entry.
    pub fn push(&mut self, value: T)
    where
        T: Clone,
    {
        let capacity = self.base + self.segments.len() as u64 * SEGMENT_LEN_U64;
        if self.end == capacity {
            let mut segments = self.segments.to_vec();
            segments.push(Segment::new());
            self.segments = segments.into();
        }
        if let Err(value) = self.slot(self.end).set(value) {
            // The slot was filled by a state that was built and never published. The writer always
            // publishes what it appends, so this is defensive: copy the tail segment's live entries into
            // a fresh segment (published states keep the old one), then append there.
            self.fork_tail();
            let fresh = self.slot(self.end).set(value);
            debug_assert!(fresh.is_ok(), "a forked segment has no entry past `end`");
        }
        self.end += 1;
    }

    fn fork_tail(&mut self)
    where
        T: Clone,
    {
        let last = self.segments.len() - 1;
        let tail_base = self.base + last as u64 * SEGMENT_LEN_U64;
        let fresh = Segment::new();
        for pos in self.start.max(tail_base)..self.end {
            let rel = (pos - tail_base) as usize;
            if let Some(v) = self.segments[last].slots[rel].get() {
                let _ = fresh.slots[rel].set(v.clone());
            }
        }
        let mut segments = self.segments.to_vec();
        segments[last] = fresh;
        self.segments = segments.into();
    }
}

/// Owned, lazy iteration over a [`Log`]'s window from some entry on. O(1) memory whatever the number of
/// entries left: the window it reads is fixed when it is made (entries appended later are not seen).
pub struct Cursor<T> {
    log: Log<T>,
    /// Absolute position of the next entry; `log.end` once exhausted.
    next: u64,
}

impl<T> Clone for Cursor<T> {
    fn clone(&self) -> Self {
        Self { log: self.log.clone(), next: self.next }
    }
}

impl<T> Default for Cursor<T> {
    /// An exhausted cursor.
    fn default() -> Self {
        Self { log: Log::default(), next: 0 }
    }
}

impl<T> std::fmt::Debug for Cursor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor").field("remaining", &self.remaining()).finish()
    }
}

// === impl Cursor ===

impl<T> Cursor<T> {
    /// Entries not read yet.
    pub fn remaining(&self) -> usize {
        // Within the window, which fits in memory.
        (self.log.end - self.next) as usize
    }
}

impl<T: Clone> Iterator for Cursor<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.next >= self.log.end {
            return None;
        }
        let value = self.log.slot(self.next).get().cloned();
        self.next += 1;
        value
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining(), Some(self.remaining()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(log: &Log<u64>) -> Vec<u64> {
        log.iter().copied().collect()
    }

    #[test]
    fn push_and_pop_across_segments() {
        let mut log = Log::new();
        let n = SEGMENT_LEN as u64 * 3 + 7;
        for i in 0..n {
            log.push(i);
        }
        assert_eq!(log.len(), n as usize);
        assert_eq!((log.front(), log.back()), (Some(&0), Some(&(n - 1))));
        for i in 0..SEGMENT_LEN as u64 * 2 + 1 {
            assert_eq!(log.pop_front(), Some(i));
        }
        assert_eq!(log.segments.len(), 2, "fully evicted segments are released");
        assert_eq!(contents(&log), (SEGMENT_LEN as u64 * 2 + 1..n).collect::<Vec<_>>());
        assert_eq!(log.get(0), Some(&(SEGMENT_LEN as u64 * 2 + 1)));
        assert_eq!(log.get(log.len()), None);
        while log.pop_front().is_some() {}
        assert!(log.is_empty());
        log.push(99);
        assert_eq!(contents(&log), [99]);
    }

    #[test]
    fn clones_keep_their_view() {
        let mut log = Log::new();
        for i in 0..10u64 {
            log.push(i);
        }
        let published = log.clone();
        for i in 10..SEGMENT_LEN as u64 + 10 {
            log.push(i);
        }
        log.pop_front();
        assert_eq!(contents(&published), (0..10).collect::<Vec<_>>());
        assert_eq!(log.len(), SEGMENT_LEN + 9);
        assert_eq!(log.front(), Some(&1));
    }

    #[test]
    fn diverging_writers_do_not_clobber_each_other() {
        let mut a = Log::new();
        a.push(1u64);
        let mut b = a.clone();
        a.push(2);
        // `b` was built from the same state; its next slot is already taken by `a`.
        b.push(3);
        b.push(4);
        assert_eq!(contents(&a), [1, 2]);
        assert_eq!(contents(&b), [1, 3, 4]);
    }

    #[test]
    fn partition_point_is_a_binary_search() {
        let mut log = Log::new();
        for i in 0..1000u64 {
            log.push(i * 2);
        }
        for _ in 0..300 {
            log.pop_front();
        }
        assert_eq!(log.partition_point(|v| *v <= 600), 1);
        assert_eq!(log.partition_point(|v| *v < 601), 1);
        assert_eq!(log.partition_point(|v| *v <= 599), 0);
        assert_eq!(log.partition_point(|v| *v <= 10_000), 700);
        assert_eq!(log.iter_from(698).copied().collect::<Vec<_>>(), [1996, 1998]);
        assert_eq!(log.iter_from(5000).count(), 0);
    }

    #[test]
    fn cursors_read_their_window_lazily_and_hold_no_copy() {
        let mut log = Log::new();
        for i in 0..(SEGMENT_LEN as u64 * 4) {
            log.push(i);
        }
        for _ in 0..10 {
            log.pop_front();
        }
        let mut cursor = log.cursor_from(3);
        assert_eq!(cursor.remaining(), log.len() - 3);
        // The cursor shares the log's segment list: no entry is copied, however many are left.
        assert!(Arc::ptr_eq(&cursor.log.segments, &log.segments));
        assert_eq!(std::mem::size_of::<Cursor<u64>>(), std::mem::size_of::<Log<u64>>() + 8);
        assert_eq!(cursor.next(), Some(13));
        // Later appends and evictions by the writer do not change what the cursor reads.
        let expected: Vec<u64> = log.iter_from(4).copied().collect();
        for i in 0..(SEGMENT_LEN as u64 * 2) {
            log.push(10_000 + i);
            log.pop_front();
        }
        assert_eq!(cursor.clone().collect::<Vec<_>>(), expected);
        assert_eq!(cursor.by_ref().count(), expected.len());
        assert_eq!((cursor.next(), cursor.remaining()), (None, 0));
        assert_eq!(log.cursor_from(log.len() + 5).next(), None);
        assert_eq!(Cursor::<u64>::default().next(), None);
    }
}
