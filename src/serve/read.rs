//! Which state a get or list is served from: the apiserver's resourceVersion decision table
//! (staging/src/k8s.io/apiserver/pkg/storage/cacher/delegator.go: CacheDelegator.GetList with
//! cacher/delegator/interface.go: ShouldDelegateList; registry/generic/registry/store.go: Store.ListPredicate
//! for single-key lists; delegator.go: CacheDelegator.Get for get), as a pure function.

/// The `resourceVersion` parameter of a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rv {
    /// Unset: a consistent read.
    Unset,
    /// `"0"`: any state the store has.
    Any,
    /// A specific resourceVersion.
    At(u64),
}

/// `resourceVersionMatch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Match {
    Unset,
    NotOlderThan,
    Exact,
}

/// A decoded continue token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContinueAt {
    /// The token's resourceVersion; negative (-1) means "continue at the latest state".
    pub rv: i64,
    /// Store key to resume from (inclusive): the last returned key followed by `\0`.
    pub start_key: String,
    /// The token as the client sent it.
    pub token: String,
}

/// The state a read is served from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadAt {
    /// The latest state, proven at least as fresh as the upstream when the request arrived.
    Consistent,
    /// The store's current state, whatever its age (RV=0).
    Current,
    /// The current state once the store reached the RV (wait ≤ 3 s, else 504).
    AtLeast(u64),
    /// The state at exactly this RV, from a retained snapshot (wait ≤ 3 s when it is in the future).
    Exact(u64),
}

/// How a list is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListPlan {
    /// From memory.
    Memory {
        at: ReadAt,
        /// Page size; 0 = unlimited.
        limit: usize,
        /// Where the page starts.
        start_key: Option<String>,
    },
    /// Passed to the upstream unchanged (the apiserver would read etcd here).
    Forward,
}

/// Decides how a *recursive* list is served. Options are already validated (422/400 checks done), so
/// impossible combinations (RVM with continue, Exact with RV=0…) do not reach here.
pub(crate) fn plan_list(rv: Rv, rvm: Match, limit: i64, cont: Option<&ContinueAt>) -> ListPlan {
    let limit = if limit > 0 { limit as usize } else { 0 };
    if let Some(c) = cont {
        // D11/D12: RV is unset or "0"; the token decides. The cacher ignores `limit` when RV=0
        // (`computeListLimit`).
        let limit = if rv == Rv::Any { 0 } else { limit };
        let at = if c.rv > 0 { ReadAt::Exact(c.rv as u64) } else { ReadAt::Consistent };
        return ListPlan::Memory { at, limit, start_key: Some(c.start_key.clone()) };
    }
    let (at, limit) = match (rv, rvm) {
        // D1/D2.
        (Rv::Unset, _) => (ReadAt::Consistent, limit),
        // D4/D5: the watch cache ignores limit for RV=0 (k/k#108003).
        (Rv::Any, _) => (ReadAt::Current, 0),
        // D8.
        (Rv::At(n), Match::NotOlderThan) => (ReadAt::AtLeast(n), limit),
        // D10.
        (Rv::At(n), Match::Exact) => (ReadAt::Exact(n), limit),
        // D9: legacy exact.
        (Rv::At(n), Match::Unset) if limit > 0 => (ReadAt::Exact(n), limit),
        // D7.
        (Rv::At(n), Match::Unset) => (ReadAt::AtLeast(n), 0),
    };
    ListPlan::Memory { at, limit, start_key: None }
}

/// Decides how a single-key list (`metadata.name` pinned: registry/generic/registry/store.go:
/// Store.ListPredicate) or a get (storage/cacher/delegator.go: CacheDelegator.Get) is served. `limit` and
/// `continue` have no effect; Exact and limit+RV go to etcd in the apiserver, so kache forwards them.
pub(crate) fn plan_single(rv: Rv, rvm: Match, limit: i64) -> Option<ReadAt> {
    match (rv, rvm) {
        (_, Match::Exact) => None,
        (Rv::At(_), Match::Unset) if limit > 0 => None,
        (Rv::Unset, _) => Some(ReadAt::Consistent),
        (Rv::Any, _) => Some(ReadAt::Current),
        (Rv::At(n), _) => Some(ReadAt::AtLeast(n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(at: ReadAt, limit: usize) -> ListPlan {
        ListPlan::Memory { at, limit, start_key: None }
    }

    #[test]
    fn decision_table_rows() {
        use Match::*;
        // D1, D2
        assert_eq!(plan_list(Rv::Unset, Unset, 0, None), mem(ReadAt::Consistent, 0));
        assert_eq!(plan_list(Rv::Unset, Unset, 5, None), mem(ReadAt::Consistent, 5));
        // D4, D5: limit ignored
        assert_eq!(plan_list(Rv::Any, Unset, 5, None), mem(ReadAt::Current, 0));
        assert_eq!(plan_list(Rv::Any, NotOlderThan, 5, None), mem(ReadAt::Current, 0));
        // D7, D8
        assert_eq!(plan_list(Rv::At(7), Unset, 0, None), mem(ReadAt::AtLeast(7), 0));
        assert_eq!(plan_list(Rv::At(7), NotOlderThan, 3, None), mem(ReadAt::AtLeast(7), 3));
        // D9, D10
        assert_eq!(plan_list(Rv::At(7), Unset, 3, None), mem(ReadAt::Exact(7), 3));
        assert_eq!(plan_list(Rv::At(7), Exact, 0, None), mem(ReadAt::Exact(7), 0));
        // negative limit is no limit
        assert_eq!(plan_list(Rv::Unset, Unset, -4, None), mem(ReadAt::Consistent, 0));
    }

    #[test]
    fn continue_rows() {
        let c = ContinueAt { rv: 9, start_key: "ns/b\0".into(), token: String::new() };
        let m = |at, limit| ListPlan::Memory { at, limit, start_key: Some("ns/b\0".into()) };
        // D11
        assert_eq!(plan_list(Rv::Unset, Match::Unset, 2, Some(&c)), m(ReadAt::Exact(9), 2));
        // D11 exception: RV=0 + continue ignores limit
        assert_eq!(plan_list(Rv::Any, Match::Unset, 2, Some(&c)), m(ReadAt::Exact(9), 0));
        // D12
        let c = ContinueAt { rv: -1, start_key: "ns/b\0".into(), token: String::new() };
        assert_eq!(plan_list(Rv::Unset, Match::Unset, 2, Some(&c)), m(ReadAt::Consistent, 2));
    }

    #[test]
    fn single_key_reads() {
        assert_eq!(plan_single(Rv::Unset, Match::Unset, 0), Some(ReadAt::Consistent));
        assert_eq!(plan_single(Rv::Any, Match::Unset, 0), Some(ReadAt::Current));
        assert_eq!(plan_single(Rv::At(3), Match::NotOlderThan, 1), Some(ReadAt::AtLeast(3)));
        assert_eq!(plan_single(Rv::At(3), Match::Exact, 0), None);
        assert_eq!(plan_single(Rv::At(3), Match::Unset, 1), None);
    }
}
