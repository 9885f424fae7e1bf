//! etcd as the freshness oracle of consistent reads, as the apiserver's own watch cache uses it
//! (`cacher.go` `waitUntilFreshAndBlock`, `etcd3/store.go` `GetCurrentResourceVersion`, `RequestWatchProgress`):
//! a consistent read takes etcd's current revision R (one linearizable read of one key, coalesced: one request
//! serves every reader that arrived before it started), asks the resource's prefix watch for its progress
//! (coalesced as well) and, once the watch has reported progress to R, knows the last write to the prefix at or
//! below R ([`watch::Known::floor`]). A store that has applied that write (its resourceVersion ≥ it) holds the
//! resource's state at R: the reflector takes it as progress to R, as it takes a proof's bookmark, and the read
//! is served at R. etcd's revision is the apiserver's resourceVersion (the apiserver writes etcd's mod_revision
//! into `metadata.resourceVersion` and its lists' revision): tests/it/kube_etcd.rs checks it.
//!
//! Any doubt ends in [`Unproven`]: the planner goes on with the apiserver-only steps. Nothing here decodes or
//! keeps a value.

pub(crate) mod layout;
mod watch;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};
use tokio::time::Instant;

use crate::resource::Gvr;
use crate::store::Store;
use layout::Layout;
use watch::PrefixWatch;

/// How long a read waits for the watch to report progress to R: a synced etcd watch answers a progress
/// request in a round trip; one that does not answer is catching up, and the read goes the apiserver's way.
const PROGRESS_TIMEOUT: Duration = Duration::from_millis(250);
/// How long a read waits for the store to apply the last write at or below R (its event is on its way through
/// the apiserver's watch cache, typically within milliseconds of etcd's).
const STORE_CATCH_UP: Duration = Duration::from_millis(100);
/// How long a read waits for the reflector to apply the progress to R.
const APPLY_TIMEOUT: Duration = Duration::from_millis(250);
/// How long a read waits for a prefix watch that is starting (its store just synced: verifying the prefix,
/// opening the watch and etcd's first progress answer take a few round trips) before going the apiserver's way.
const START_WAIT: Duration = Duration::from_millis(500);
/// Connecting to etcd and reading its revision: a slower etcd is treated as unreachable for this read.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The etcd source, as configured (`--etcd-*`).
#[derive(Clone, Debug, Default)]
pub struct EtcdConfig {
    /// Client URLs (`http://` or `https://`); empty: no oracle.
    pub endpoints: Vec<String>,
    /// TLS client certificate and key (PEM) and the CA (PEM) that signed etcd's serving certificate.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub ca: Option<PathBuf>,
    /// The apiserver's `--etcd-prefix`.
    pub prefix: String,
    /// `RESOURCE.GROUP=/prefix` overrides.
    pub resource_prefixes: Vec<String>,
}

impl EtcdConfig {
    /// Checks what flag parsing cannot: the endpoints, the prefixes, TLS files given in pairs.
    pub fn validate(&self) -> Result<(), String> {
        Layout::new(&self.prefix, &self.resource_prefixes)?;
        for e in &self.endpoints {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(format!("--etcd-endpoints {e:?}: want http:// or https:// URLs"));
            }
            if e.starts_with("https://") && self.ca.is_none() {
                return Err(format!("--etcd-endpoints {e:?}: https needs --etcd-ca"));
            }
        }
        if self.cert.is_some() != self.key.is_some() {
            return Err("--etcd-cert and --etcd-key go together".into());
        }
        Ok(())
    }
}

/// A prefix watch's state (`kache_etcd_watches{state}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchState {
    /// Verifying the prefix or opening the watch.
    Starting,
    /// Watching: reads may be proven.
    Ready,
    /// etcd unreachable, the watch cancelled or compacted: retried every second.
    Down,
    /// The prefix does not match the store (or cannot be verified yet): retried every 10 s.
    Layout,
}

impl WatchState {
    pub const ALL: [WatchState; 4] = [Self::Starting, Self::Ready, Self::Down, Self::Layout];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Down => "down",
            Self::Layout => "layout",
        }
    }
}

/// Why the oracle could not prove a read (`kache_etcd_fallbacks_total{reason}`): the read goes on the
/// apiserver's way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unproven {
    /// No prefix known for the resource.
    #[error("no etcd prefix known for the resource")]
    UnknownPrefix,
    /// Its prefix watch is not ready (starting, etcd down, cancelled, compacted, or the prefix unverified).
    #[error("the resource's etcd watch is not ready")]
    NotReady,
    /// etcd's revision could not be read.
    #[error("etcd's revision could not be read")]
    Unreachable,
    /// The watch did not report progress to R in time.
    #[error("the etcd watch did not report progress in time")]
    Progress,
    /// The store had not applied the last write at or below R in time.
    #[error("the store is behind etcd's last write to the prefix")]
    Behind,
    /// The reflector did not take the progress (relisting, or another offer replaced it).
    #[error("the store did not take the progress")]
    Apply,
}

impl Unproven {
    pub const ALL: [Unproven; 6] =
        [Self::UnknownPrefix, Self::NotReady, Self::Unreachable, Self::Progress, Self::Behind, Self::Apply];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownPrefix => "unknown_prefix",
            Self::NotReady => "not_ready",
            Self::Unreachable => "unreachable",
            Self::Progress => "progress_timeout",
            Self::Behind => "store_behind",
            Self::Apply => "not_applied",
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|u| *u == self).expect("every reason is listed")
    }
}

/// The oracle's counters (exported as `kache_etcd_*`).
#[derive(Debug, Default)]
pub struct EtcdStats {
    /// Linearizable revision reads (`kind="revision"`), progress requests, prefix verifications, watches.
    pub revisions: AtomicU64,
    pub progress_requests: AtomicU64,
    pub verifies: AtomicU64,
    pub watches: AtomicU64,
    pub watch_restarts: AtomicU64,
    /// Reads proven fresh.
    pub proven: AtomicU64,
    /// Reads not proven, by [`Unproven::ALL`] index.
    pub fallbacks: [AtomicU64; 6],
    /// Sum and count of the times from asking for R to the watch's progress reaching it (µs).
    pub progress_micros: AtomicU64,
    pub progress_waits: AtomicU64,
    /// Their recent mean (µs; each new time counts for 1/8).
    pub progress_recent_micros: AtomicU64,
}

/// What the executor reads of the oracle for the metrics.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EtcdCounters {
    pub revisions: u64,
    pub progress_requests: u64,
    pub verifies: u64,
    pub watches_opened: u64,
    pub proven: u64,
    pub fallbacks: Vec<(&'static str, u64)>,
    pub progress_micros: u64,
    pub progress_recent_micros: u64,
    pub progress_count: u64,
    pub watch_restarts: u64,
    pub watch_states: Vec<(&'static str, u64)>,
}

/// The revision coalescing: the latest read's start, its result and when it ended.
type Revision = Option<(Instant, Result<(u64, Instant), String>)>;

pub(super) struct Inner {
    config: EtcdConfig,
    client: tokio::sync::Mutex<Option<Client>>,
    revision: tokio::sync::watch::Sender<Revision>,
    revision_running: Mutex<bool>,
    stats: Arc<EtcdStats>,
}

/// The etcd freshness oracle.
pub(crate) struct Oracle {
    inner: Arc<Inner>,
    layout: Layout,
    watches: Mutex<HashMap<Gvr, Option<Arc<PrefixWatch>>>>,
}

// === impl Oracle ===

impl Oracle {
    pub(crate) fn new(config: EtcdConfig) -> Result<Self, String> {
        let layout = Layout::new(&config.prefix, &config.resource_prefixes)?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                client: tokio::sync::Mutex::new(None),
                revision: tokio::sync::watch::channel(None).0,
                revision_running: Mutex::new(false),
                stats: Arc::new(EtcdStats::default()),
            }),
            layout,
            watches: Mutex::new(HashMap::new()),
        })
    }

    /// Starts the prefix watch of a synced store if it has none (the freshness task calls it for every synced
    /// store, so the first reads find it started).
    pub(crate) fn prepare(&self, store: &Arc<Store>, filtered: bool) {
        self.watch_of(store, filtered);
    }

    /// The prefix watch of `store`'s resource, started on first use; `None` when its prefix is unknown.
    fn watch_of(&self, store: &Arc<Store>, filtered: bool) -> Option<Arc<PrefixWatch>> {
        let info = store.info();
        let mut watches = self.watches.lock().expect("etcd watches lock poisoned");
        if let Some(watch) = watches.get(&info.gvr) {
            match watch {
                Some(w) if !w.vouches_for(store) => w.retired.cancel(),
                _ => return watch.clone(),
            }
        }
        // A new resource, or its store replaced (a resource registered again).
        let watch = self.layout.prefix(&info.gvr).map(|(prefix, origin)| {
            let watch =
                Arc::new(PrefixWatch::new(prefix, origin, info.namespaced, filtered, Arc::downgrade(store)));
            tokio::spawn(watch.clone().run(self.inner.clone()));
            watch
        });
        watches.insert(info.gvr.clone(), watch.clone());
        watch
    }

    /// Proves `store` fresh at etcd's revision R, read after `arrived`: returns R once the store is at R.
    pub(crate) async fn prove(
        &self,
        store: &Arc<Store>,
        arrived: Instant,
        filtered: bool,
    ) -> Result<u64, Unproven> {
        let result = self.prove_inner(store, arrived, filtered).await;
        match result {
            Ok(_) => self.inner.stats.proven.fetch_add(1, Relaxed),
            Err(why) => self.inner.stats.fallbacks[why.index()].fetch_add(1, Relaxed),
        };
        result
    }

    async fn prove_inner(
        &self,
        store: &Arc<Store>,
        arrived: Instant,
        filtered: bool,
    ) -> Result<u64, Unproven> {
        let watch = self.watch_of(store, filtered).ok_or(Unproven::UnknownPrefix)?;
        let state = match watch.state() {
            WatchState::Starting => watch.started(START_WAIT).await,
            state => state,
        };
        if state != WatchState::Ready {
            return Err(Unproven::NotReady);
        }
        let asked = Instant::now();
        let (r, known_at) = self.inner.revision_after(&watch.prefix, arrived).await.map_err(|e| {
            tracing::debug!(error = %e, "etcd revision read failed");
            Unproven::Unreachable
        })?;
        // Progress to R: the watch may have it already; otherwise one progress request sent after R was known.
        let mut rx = watch.progress.subscribe();
        if *rx.borrow_and_update() < r {
            {
                let mut requested = watch.requested.lock().expect("etcd progress lock poisoned");
                if requested.is_none_or(|at| at < known_at) {
                    *requested = Some(Instant::now());
                    watch.nudge.notify_one();
                }
            }
            let reached = tokio::time::timeout(PROGRESS_TIMEOUT, rx.wait_for(|p| *p >= r)).await;
            if !matches!(reached, Ok(Ok(_))) {
                return Err(Unproven::Progress);
            }
        }
        let stats = &self.inner.stats;
        let took = asked.elapsed().as_micros() as u64;
        stats.progress_micros.fetch_add(took, Relaxed);
        let _ = stats
            .progress_recent_micros
            .fetch_update(Relaxed, Relaxed, |m| Some(if m == 0 { took } else { m - m / 8 + took / 8 }));
        stats.progress_waits.fetch_add(1, Relaxed);
        let floor = watch.known().floor(r).ok_or(Unproven::NotReady)?;
        // The store must hold the last write at or below R (its event comes through the apiserver).
        if store.resource_version() < floor && store.wait_for(floor, STORE_CATCH_UP).await.is_err() {
            return Err(Unproven::Behind);
        }
        if store.resource_version() < r {
            // No write to the prefix in (floor, R]: the store at floor or beyond is the state at R.
            store.offer_progress(floor, r);
            if store.wait_for(r, APPLY_TIMEOUT).await.is_err() {
                return Err(Unproven::Apply);
            }
        }
        Ok(r)
    }

    /// Whether `store`'s prefix watch has been started and its first attempt has ended or made it ready (a
    /// resource without a known prefix has nothing to wait for).
    pub(crate) fn settled(&self, store: &Arc<Store>) -> bool {
        let watches = self.watches.lock().expect("etcd watches lock poisoned");
        match watches.get(&store.info().gvr) {
            Some(Some(w)) => w.settled() && w.vouches_for(store),
            Some(None) => true,
            None => self.layout.prefix(&store.info().gvr).is_none(),
        }
    }

    pub(crate) fn stats(&self) -> EtcdCounters {
        let s = &self.inner.stats;
        let mut states = [0u64; 4];
        for w in self.watches.lock().expect("etcd watches lock poisoned").values().flatten() {
            states[WatchState::ALL.iter().position(|x| *x == w.state()).expect("listed")] += 1;
        }
        EtcdCounters {
            revisions: s.revisions.load(Relaxed),
            progress_requests: s.progress_requests.load(Relaxed),
            verifies: s.verifies.load(Relaxed),
            watches_opened: s.watches.load(Relaxed),
            proven: s.proven.load(Relaxed),
            fallbacks: Unproven::ALL
                .iter()
                .map(|u| (u.as_str(), s.fallbacks[u.index()].load(Relaxed)))
                .collect(),
            progress_micros: s.progress_micros.load(Relaxed),
            progress_recent_micros: s.progress_recent_micros.load(Relaxed),
            progress_count: s.progress_waits.load(Relaxed),
            watch_restarts: s.watch_restarts.load(Relaxed),
            watch_states: WatchState::ALL.iter().zip(states).map(|(w, n)| (w.as_str(), n)).collect(),
        }
    }
}

// === impl Inner ===

impl Inner {
    /// A connected client (connected on first use; a failed connection is tried again by the next caller).
    pub(super) async fn client(&self) -> Result<Client, String> {
        let mut client = self.client.lock().await;
        if let Some(c) = client.as_ref() {
            return Ok(c.clone());
        }
        let mut options = ConnectOptions::new()
            .with_connect_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(true);
        if let Some(ca) = &self.config.ca {
            let read = |p: &PathBuf| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
            let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(read(ca)?));
            if let (Some(cert), Some(key)) = (&self.config.cert, &self.config.key) {
                tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            options = options.with_tls(tls);
        }
        let connected =
            tokio::time::timeout(REQUEST_TIMEOUT, Client::connect(&self.config.endpoints, Some(options)));
        let c = match connected.await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("connecting to etcd timed out".into()),
        };
        *client = Some(c.clone());
        Ok(c)
    }

    /// etcd's current revision from a linearizable read that started at or after `after` (coalesced), and
    /// when it was known.
    async fn revision_after(self: &Arc<Self>, key: &str, after: Instant) -> Result<(u64, Instant), String> {
        let mut rx = self.revision.subscribe();
        loop {
            {
                let current = rx.borrow_and_update();
                if let Some((started, result)) = &*current
                    && *started >= after
                {
                    return result.clone();
                }
            }
            let start = {
                let mut running = self.revision_running.lock().expect("etcd revision lock poisoned");
                !std::mem::replace(&mut *running, true)
            };
            if start {
                // On a task of its own: a reader that goes away must not leave the read unfinished.
                let (inner, key) = (self.clone(), key.to_owned());
                tokio::spawn(async move {
                    let started = Instant::now();
                    inner.stats.revisions.fetch_add(1, Relaxed);
                    let result = inner.read_revision(&key).await;
                    *inner.revision_running.lock().expect("etcd revision lock poisoned") = false;
                    inner.revision.send_replace(Some((started, result)));
                });
            }
            if rx.changed().await.is_err() {
                return Err("etcd revision reader dropped".into());
            }
        }
    }

    /// etcd's current revision, from a linearizable read of one key (the apiserver's
    /// `GetCurrentResourceVersion` reads it the same way).
    async fn read_revision(&self, key: &str) -> Result<(u64, Instant), String> {
        let mut client = self.client().await?;
        let read = client.get(key, Some(GetOptions::new().with_keys_only().with_limit(1)));
        let resp = tokio::time::timeout(REQUEST_TIMEOUT, read)
            .await
            .map_err(|_| "etcd revision read timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        let rev = resp.header().map(|h| h.revision()).filter(|r| *r > 0);
        rev.map(|r| (r as u64, Instant::now())).ok_or_else(|| "etcd answered without a revision".to_owned())
    }
}
