//! Tunables of the reflectors, each with its reason (and its client-go counterpart where there is one).

use std::sync::Arc;
use std::time::Duration;

use crate::options::coverage::MirrorSelector;
use crate::store::StoreConfig;

/// client-go's page size for a paginated list (`tools/pager` `defaultPageSize`).
pub(crate) const DEFAULT_PAGE_SIZE: u32 = 500;
/// client-go's `minWatchTimeout`: a watch asks for `timeoutSeconds` in `[min, 2·min)` so watches of many
/// reflectors do not all end together.
pub(crate) const DEFAULT_MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);
/// A watch with no byte for this long is presumed dead and re-opened. The apiserver sends a bookmark at
/// least every minute while the RV moves (and before its deadline), so ~2.5 bookmark periods of silence
/// means a stuck connection rather than a quiet resource.
pub(crate) const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(150);
/// client-go's reflector backoff: 800 ms doubling to 30 s.
pub(crate) const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_millis(800);
pub(crate) const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Backoff resets after this long without a failure (client-go: 2 min).
pub(crate) const DEFAULT_BACKOFF_RESET: Duration = Duration::from_secs(120);
/// A Retry-After longer than this is capped: a hostile or confused upstream must not park a reflector.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// Upper bound on events applied in one store publish (bounds the latency of a batch and its memory).
pub(crate) const DEFAULT_MAX_BATCH: usize = 1024;
/// Upper bound on one watch line. etcd's default request limit is 1.5 MiB; leave room for big objects.
pub(crate) const DEFAULT_MAX_FRAME_BYTES: usize = 32 << 20;
/// Upper bound on one list page body (500 items of at most a few MiB each in the worst case).
pub(crate) const DEFAULT_MAX_PAGE_BYTES: usize = 1 << 30;
/// Deadline of one non-watch request (the apiserver's own `--request-timeout` is 60 s).
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a long initial sync logs how far it is (client-go warns every 10 s while waiting for the
/// initial-events-end bookmark).
pub(crate) const DEFAULT_PROGRESS_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// A watch that ends cleanly this soon with no event is a failure ("very short watch" in client-go), so a
/// broken upstream cannot make the reflector spin.
pub(crate) const SHORT_WATCH: Duration = Duration::from_secs(1);

/// How every reflector behaves.
#[derive(Clone, Debug)]
pub struct ReflectorConfig {
    /// Bounds of each resource's store.
    pub store: StoreConfig,
    /// Try the streaming list (watch with `sendInitialEvents=true`) before a paginated list.
    pub watch_list: bool,
    pub page_size: u32,
    pub min_watch_timeout: Duration,
    pub stall_timeout: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub backoff_reset: Duration,
    pub max_batch: usize,
    pub max_frame_bytes: usize,
    pub max_page_bytes: usize,
    pub request_timeout: Duration,
    pub progress_log_interval: Duration,
    /// A filtered mirror's selector (`--resource-selector`): the list and watch ask the upstream for these
    /// objects only. `None` mirrors the whole resource. Set per resource by the registry.
    pub selector: Option<Arc<MirrorSelector>>,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        Self {
            store: StoreConfig::default(),
            watch_list: true,
            page_size: DEFAULT_PAGE_SIZE,
            min_watch_timeout: DEFAULT_MIN_WATCH_TIMEOUT,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
            backoff_initial: DEFAULT_BACKOFF_INITIAL,
            backoff_max: DEFAULT_BACKOFF_MAX,
            backoff_reset: DEFAULT_BACKOFF_RESET,
            max_batch: DEFAULT_MAX_BATCH,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_page_bytes: DEFAULT_MAX_PAGE_BYTES,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            progress_log_interval: DEFAULT_PROGRESS_LOG_INTERVAL,
            selector: None,
        }
    }
}
