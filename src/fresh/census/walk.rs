//! Comparing a census with a snapshot as its items arrive, in one walk of the snapshot's objects of the scope
//! in key order: the upstream lists in storage-key order (etcd's, and the 1.36 watch cache's btree), which
//! is the store's. The walk holds the key of the last object matched and a count; the first difference ends
//! the comparison with that snapshot. A newer snapshot may then take over (the events of the writes the
//! census shows are on their way): it continues the walk where it stopped once its objects up to there are
//! the ones already matched.

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use super::Scope;
use super::decode::ItemRef;
use crate::store::{Key, Object, Snapshot, State};

/// How often a census may move to a newer snapshot after a difference: the events of writes the census shows
/// come in a batch or two, and each move walks the part already compared again.
pub(super) const MAX_CATCH_UPS: u32 = 3;
/// Stored objects fetched ahead of the walk by one range lookup: a lookup per item would descend the tree for
/// each (three times the time of a whole-body comparison); this many cost one descent and 512 bytes.
const AHEAD: usize = 64;

/// Why the snapshot differs from the census so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Diff {
    /// An item the snapshot lacks or holds at another version: a write at this revision.
    Item(u64),
    /// Objects the census does not list where the snapshot has them (deleted upstream), or a different
    /// number of them after a page.
    Deleted,
    /// An item listed out of key order, or twice: this walk cannot compare such a census.
    Unordered,
}

/// An item kept while a newer snapshot is awaited, to be compared with it.
#[derive(Debug, Clone)]
struct Pending {
    namespace: Option<Box<str>>,
    name: Box<str>,
    rv: u64,
}

/// The streaming comparison of one census with the store's snapshots.
pub(crate) struct Walk {
    /// The snapshot compared with (and the store state it belongs to).
    state: Arc<State>,
    bounds: Bounds,
    /// The key of the last object matched, and how many have been.
    cursor: Option<Key>,
    /// The snapshot's next objects of the scope after `cursor`, in key order.
    ahead: VecDeque<Arc<Object>>,
    pub(crate) matched: usize,
    pub(crate) diff: Option<Diff>,
    pending: Option<Pending>,
    /// The list's end, once reached: whether it was a page, and its `remainingItemCount`.
    ended: Option<(bool, Option<u64>)>,
    catch_ups: u32,
    /// No newer snapshot will be tried: the difference stands.
    pub(crate) settled: bool,
}

impl Walk {
    pub(crate) fn new(state: Arc<State>, scope: &Scope) -> Self {
        let start = scope.continued.as_ref().map(|c| c.start_key.to_string());
        let (lower, upper) = match &scope.namespace {
            Some(ns) => {
                let (lo, hi) = crate::store::namespace_bounds(ns);
                (Some(start.filter(|s| *s > lo).unwrap_or(lo)), Some(hi))
            }
            None => (start, None),
        };
        Self {
            state,
            bounds: Bounds { lower, upper },
            cursor: None,
            ahead: VecDeque::with_capacity(AHEAD),
            matched: 0,
            diff: None,
            pending: None,
            ended: None,
            catch_ups: 0,
            settled: false,
        }
    }

    /// Compares the next listed item; breaks off at a difference.
    pub(crate) fn item(&mut self, item: &ItemRef<'_>) -> ControlFlow<()> {
        if self.diff.is_some() {
            return ControlFlow::Continue(());
        }
        if self.ahead.is_empty() {
            let next = in_scope(&self.state.snapshot, &self.bounds, self.cursor.as_deref());
            self.ahead.extend(next.take(AHEAD).cloned());
        }
        let next = self.ahead.front().cloned();
        let after_cursor = || self.cursor.as_deref().is_none_or(|c| cmp_key(c, item) == Ordering::Less);
        let diff = match next {
            Some(o) => match cmp_key(&o.key, item) {
                Ordering::Equal if o.resource_version == item.rv => {
                    self.ahead.pop_front();
                    self.cursor = Some(o.key.clone());
                    self.matched += 1;
                    return ControlFlow::Continue(());
                }
                Ordering::Equal => Diff::Item(item.rv),
                // A stored object the census went past.
                Ordering::Less => Diff::Deleted,
                Ordering::Greater if after_cursor() => Diff::Item(item.rv),
                Ordering::Greater => Diff::Unordered,
            },
            None if after_cursor() => Diff::Item(item.rv),
            None => Diff::Unordered,
        };
        self.pending = Some(Pending {
            namespace: item.namespace.as_deref().map(Into::into),
            name: item.name.as_ref().into(),
            rv: item.rv,
        });
        self.differs(diff);
        ControlFlow::Break(())
    }

    /// The list ended (every item read): the snapshot's objects after the last one listed must be none, or
    /// as many as the page's `remainingItemCount`.
    pub(crate) fn end(&mut self, more: bool, remaining: Option<u64>) {
        self.ended = Some((more, remaining));
        if self.diff.is_some() {
            return;
        }
        let last = self.ahead.back().map(|o| &*o.key).or(self.cursor.as_deref());
        let rest = (self.ahead.len() + in_scope(&self.state.snapshot, &self.bounds, last).count()) as u64;
        let same = if more { remaining == Some(rest) } else { rest == 0 };
        if !same {
            self.differs(Diff::Deleted);
        }
    }

    fn differs(&mut self, diff: Diff) {
        self.diff = Some(diff);
        if diff == Diff::Unordered || self.catch_ups >= MAX_CATCH_UPS {
            self.settled = true;
        }
    }

    /// The store revision a newer snapshot must reach to change the outcome: the difference's write, or the
    /// next advance for a deletion (its revision is unknown). `None` when none is awaited.
    pub(crate) fn catch_up_target(&self) -> Option<u64> {
        let next = self.state.snapshot.rv + 1;
        match self.diff? {
            _ if self.settled => None,
            Diff::Item(rv) => Some(rv.max(next)),
            Diff::Deleted => Some(next),
            Diff::Unordered => None,
        }
    }

    /// Gives up waiting: the difference stands.
    pub(crate) fn settle(&mut self) {
        self.settled = true;
    }

    /// Goes on with a newer snapshot, if its objects up to where the walk stopped are those matched (else
    /// the difference stands), comparing the item that differed again.
    pub(crate) fn switch(&mut self, state: Arc<State>) {
        self.catch_ups += 1;
        let same_prefix = {
            let mut old = in_scope(&self.state.snapshot, &self.bounds, None);
            let mut new = in_scope(&state.snapshot, &self.bounds, None);
            (0..self.matched).all(|_| match (old.next(), new.next()) {
                (Some(a), Some(b)) => a.key == b.key && a.resource_version == b.resource_version,
                _ => false,
            })
        };
        if !same_prefix {
            self.settled = true;
            return;
        }
        self.state = state;
        self.ahead.clear();
        self.diff = None;
        if let Some(p) = self.pending.take() {
            let item = ItemRef {
                namespace: p.namespace.as_deref().map(Into::into),
                name: (&*p.name).into(),
                rv: p.rv,
            };
            if self.item(&item).is_break() {
                return;
            }
        }
        if let Some((more, remaining)) = self.ended {
            self.end(more, remaining);
        }
    }

    /// The state whose snapshot matched the whole census, once it ended without a difference.
    pub(crate) fn matched_state(&self) -> Option<&Arc<State>> {
        (self.ended.is_some() && self.diff.is_none()).then_some(&self.state)
    }

    /// Whether the comparison is over whatever the rest of the items hold.
    pub(crate) fn decided(&self) -> bool {
        self.diff.is_some() && self.settled
    }
}

/// The scope's first key (a namespace's, or a continued page's), and the end of a namespace's keys.
struct Bounds {
    lower: Option<String>,
    upper: Option<String>,
}

/// The objects of the scope in `snapshot`, after `after` (from the first when `None`).
fn in_scope<'a>(
    snapshot: &'a Snapshot,
    bounds: &'a Bounds,
    after: Option<&'a str>,
) -> impl Iterator<Item = &'a Arc<Object>> + 'a {
    let lower = match (after, &bounds.lower) {
        (Some(after), _) => Bound::Excluded(after),
        (None, Some(lo)) => Bound::Included(lo.as_str()),
        (None, None) => Bound::Unbounded,
    };
    let upper = bounds.upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
    snapshot.objects.range::<_, str>((lower, upper)).map(|(_, o)| o)
}

/// Orders a stored key against an item's key (`namespace/name`, or `name`) in the store's byte order.
fn cmp_key(key: &str, item: &ItemRef<'_>) -> Ordering {
    let name = item.name.as_bytes();
    match &item.namespace {
        Some(ns) => key.bytes().cmp(ns.bytes().chain(*b"/").chain(name.iter().copied())),
        None => key.as_bytes().cmp(name),
    }
}
