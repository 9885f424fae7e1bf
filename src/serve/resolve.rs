//! Turning a [`ReadAt`] into a snapshot of the store, waiting where the apiserver waits.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use crate::fresh::census::Scope;
use crate::fresh::{Ahead, Fresh, Freshness, NotFresh};
use crate::serve::read::ReadAt;
use crate::store::{Snapshot, Store};

/// The apiserver's `blockTimeout`: how long a read waits for the cache to reach a requested RV
/// (`cacher/watch_cache.go`).
pub(crate) const BLOCK_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a read could not be served from memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The requested RV is older than every retained snapshot: the upstream must answer (200 from etcd or 410).
    #[error("resourceVersion {0} is older than the retained snapshots")]
    NotRetained(u64),
    /// Neither the store nor the upstream reached the requested RV within the block timeout: 504 "Too large
    /// resource version", as the apiserver answers.
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLarge { requested: u64, current: u64 },
    /// The upstream has reached the requested RV and the store has not (a continue token or Exact revision
    /// minted by a forwarded answer): the upstream answers.
    #[error("resourceVersion {0} is ahead of the store and reached upstream")]
    Ahead(u64),
    /// A consistent read could not be proven fresh.
    #[error(transparent)]
    NotFresh(#[from] NotFresh),
}

/// A snapshot to serve and the resourceVersion the response reports.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub snapshot: Arc<Snapshot>,
    /// The list's `metadata.resourceVersion` (and the continue token's rv): the requested RV for exact reads,
    /// the snapshot's RV otherwise.
    pub rv: u64,
}

/// Resolves `at` against `store`. `arrived` is when the request arrived (consistent reads only trust probes
/// started after it); `min_rv` is a lower bound the read must reflect (the last write through kache);
/// `bytes` is the size of the read (what forwarding it would cost, see [`crate::fresh::budget`]); `census`
/// is what a census deciding a consistent read would cover: the whole resource, or the read's namespace or
/// first page (`None` for a selector's list: what forwarding it costs is the upstream's scan, not its bytes,
/// and its answer is often small).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn resolve(
    store: &Arc<Store>,
    at: ReadAt,
    freshness: &Freshness,
    arrived: Instant,
    min_rv: u64,
    block_timeout: Duration,
    bytes: usize,
    census: Option<&Scope>,
) -> Result<Resolved, ResolveError> {
    match at {
        ReadAt::Current => {
            let snapshot = store.current();
            Ok(Resolved { rv: snapshot.rv, snapshot })
        }
        ReadAt::Consistent => match freshness.ensure(store, arrived, min_rv, bytes, false, census).await? {
            Fresh::At(_) => {
                let snapshot = store.current();
                Ok(Resolved { rv: snapshot.rv, snapshot })
            }
            // The snapshot the census matched, exactly, at the census's revision: a later snapshot may hold
            // writes of the census's interval that were undone before it (see `fresh::census`).
            Fresh::Matched(matched) => Ok(Resolved { rv: matched.rv, snapshot: matched.snapshot }),
        },
        ReadAt::AtLeast(n) => {
            if n > store.resource_version()
                && let Some(matched) = ahead(store, n, freshness, arrived, bytes, block_timeout, None).await?
            {
                // The snapshot an earlier census proved at exactly `n` (nothing changed since).
                return Ok(Resolved { rv: matched.rv, snapshot: matched.snapshot });
            }
            let snapshot = store.current();
            Ok(Resolved { rv: snapshot.rv, snapshot })
        }
        ReadAt::Exact(n) => {
            if n > store.resource_version() {
                // A continued page (its token carries `n`) may be decided by a census of that page at `n`.
                let page = census.filter(|scope| scope.continued.is_some());
                if let Some(matched) = ahead(store, n, freshness, arrived, bytes, block_timeout, page).await?
                {
                    return Ok(Resolved { rv: n, snapshot: matched.snapshot });
                }
            }
            match store.snapshot_at(n) {
                Some(snapshot) => Ok(Resolved { snapshot, rv: n }),
                None => Err(ResolveError::NotRetained(n)),
            }
        }
    }
}

/// A read at `n` > the store's resourceVersion: served once the store reaches it (or from the snapshot a
/// census of `page` matched at `n`), forwarded when only the upstream has, 504 when neither has within the
/// block timeout.
async fn ahead(
    store: &Arc<Store>,
    n: u64,
    freshness: &Freshness,
    arrived: Instant,
    bytes: usize,
    block_timeout: Duration,
    page: Option<&Scope>,
) -> Result<Option<crate::fresh::Matched>, ResolveError> {
    match freshness.ahead(store, n, arrived, bytes, block_timeout, page).await {
        Ahead::Reached => Ok(None),
        Ahead::Matched(matched) => Ok(Some(matched)),
        Ahead::Forward => Err(ResolveError::Ahead(n)),
        Ahead::TooLarge { requested, current } => Err(ResolveError::TooLarge { requested, current }),
    }
}

/// The estimated size of a read of `objects` objects of `store` (average stored object size × count): what
/// [`crate::fresh`] takes a read to cost upstream.
pub fn read_bytes(store: &Store, objects: usize) -> usize {
    let state = store.load();
    let avg = state.live_bytes / state.snapshot.len().max(1);
    avg.saturating_mul(objects)
}
