//! Wires the parts together: upstream → registry of reflectors → stores → the HTTP front.
//!
//! `main` parses flags into a [`Config`], binds listeners and calls [`Kache::start`] (or [`run`]); the
//! integration tests, the load test and `kache demo` call the same functions on `127.0.0.1:0`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::auth::{Auth, AuthMode, AuthSettings};
use crate::forward::{Forwarder, WriteTracker};
use crate::fresh::{Freshness, FreshnessConfig};
use crate::front::server::{self, Limits, TlsConfig};
use crate::metrics::{FreshnessCounters, Metrics, ResourceSnapshot, SharedCounters, StatsSource};
use crate::options::coverage::{MirrorSelector, SelectorSpecError, parse_selector_spec};
use crate::pipeline::{HandlerStats, KacheHandler};
use crate::reflector::{ReflectorConfig, Registry};
use crate::serve::reads::{ReadConfig, Reads};
use crate::upstream::discovery::{ResourceSpec, Selection, parse_resource_specs};
use crate::upstream::reach::{DEFAULT_UNREACHABLE_GRACE, Reach};
use crate::upstream::{Upstream, UpstreamError};

mod huge_pages;
pub mod idle_collect;
pub use huge_pages::HugePages;

/// How often histogram samples are folded into their buckets when nobody scrapes. Bounds the memory of
/// unscraped samples (the exporter keeps raw samples until upkeep or render drains them).
const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);
/// How often the initial sync's progress is logged until every configured resource is synced.
const SYNC_PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// How often the initial sync is checked (the "done" line says when it ended to this precision).
const SYNC_CHECK_EVERY: Duration = Duration::from_millis(100);
/// How often the etcd oracle looks for newly synced stores to start their prefix watches (a store syncs once,
/// and again only after its reflector restarted; a scan is a walk over the store map).
const ORACLE_SCAN_INTERVAL: Duration = Duration::from_millis(100);

/// How often discovery runs again to pick up custom resources added later.
pub(crate) const DEFAULT_REDISCOVERY_INTERVAL: Duration = Duration::from_secs(60);

/// Where the upstream apiserver is and how to authenticate to it.
#[derive(Clone, Debug)]
pub enum UpstreamSource {
    /// A plain `http://host:port` URL (tests, chaining behind another kache on a trusted network).
    Url(String),
    /// A kubeconfig file (`None`: `KUBECONFIG`, else `~/.kube/config`, else in-cluster).
    Kubeconfig(Option<PathBuf>),
    /// A context of a kubeconfig file (`None`: `KUBECONFIG`, else `~/.kube/config`), like `kubectl --context`.
    KubeconfigContext(Option<PathBuf>, String),
}

/// Everything kache needs to run.
#[derive(Clone, Debug)]
pub struct Config {
    pub upstream: UpstreamSource,
    /// Which resources are cached up front and which never are.
    pub selection: Selection,
    /// Filtered mirrors (`--resource-selector`): these resources hold only the objects their selector
    /// matches; reads the selection does not cover are forwarded (see [`crate::options::coverage`]).
    pub mirror_selectors: Vec<(ResourceSpec, MirrorSelector)>,
    /// Whether a resource nobody configured starts caching on its first read.
    pub lazy: bool,
    pub rediscovery_interval: Duration,
    pub reflector: ReflectorConfig,
    pub freshness: FreshnessConfig,
    pub handler: ReadConfig,
    pub limits: Limits,
    pub tls: Option<TlsConfig>,
    /// The serving certificate's files, followed for rotation in place while kache runs (`--tls-cert` and
    /// `--tls-key`; `tls` serves from it). Watched from [`Kache::start`], stopped with the kache.
    pub tls_reload: Option<Arc<crate::auth::ReloadingCert>>,
    /// Client authentication and authorization.
    pub auth: AuthSettings,
    /// How long the upstream may be unreachable before `/readyz` fails ([`Reach`]).
    pub unreachable_grace: Duration,
    /// Whether the kernel may back the heap with transparent huge pages. The switch is the process's: one
    /// kache per process sets it (the binary's); the default leaves the allocator's choice.
    pub huge_pages: HugePages,
}

impl Config {
    /// Defaults for an upstream URL: every discovered resource cached, lazily too.
    pub fn for_url(url: impl Into<String>) -> Self {
        Self {
            upstream: UpstreamSource::Url(url.into()),
            selection: Selection::default(),
            mirror_selectors: Vec::new(),
            lazy: true,
            rediscovery_interval: DEFAULT_REDISCOVERY_INTERVAL,
            reflector: ReflectorConfig::default(),
            freshness: FreshnessConfig::default(),
            handler: ReadConfig::default(),
            limits: Limits::default(),
            tls: None,
            tls_reload: None,
            auth: AuthSettings::default(),
            unreachable_grace: DEFAULT_UNREACHABLE_GRACE,
            huge_pages: HugePages::default(),
        }
    }
}

/// Parses `--resource-selector` values (`RESOURCE:fieldSelector=…` / `RESOURCE:labelSelector=…`, see
/// [`parse_selector_spec`]) into the specs of [`Config::mirror_selectors`].
pub fn parse_mirror_selectors(
    values: &[String],
) -> Result<Vec<(ResourceSpec, MirrorSelector)>, SelectorSpecError> {
    values
        .iter()
        .map(|value| {
            let (resource, selector) = parse_selector_spec(value)?;
            let mut specs = parse_resource_specs(&resource)
                .map_err(|e| SelectorSpecError { spec: value.clone(), reason: e.to_string() })?;
            match (specs.pop(), specs.is_empty()) {
                (Some(spec), true) => Ok((spec, selector)),
                _ => Err(SelectorSpecError {
                    spec: value.clone(),
                    reason: "name exactly one resource".to_owned(),
                }),
            }
        })
        .collect()
}

/// Failure to start kache.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The upstream could not be configured.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// A listener could not be used.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
}

/// A running kache.
pub struct Kache {
    addr: SocketAddr,
    /// Whether the API listener serves TLS (`--tls-cert`/`--tls-key`): the scheme of [`Kache::url`].
    tls: bool,
    metrics_addr: Option<SocketAddr>,
    registry: Arc<Registry>,
    stats: Arc<HandlerStats>,
    metrics: Metrics,
    freshness: Arc<Freshness>,
    shutdown: CancellationToken,
    server: JoinHandle<std::io::Result<()>>,
    background: Vec<JoinHandle<()>>,
}

// === impl Kache ===

impl Kache {
    /// Starts kache on `listener`: discovery and reflectors in the background, the HTTP front at once
    /// (requests are forwarded until their resource is synced).
    pub async fn start(config: Config, listener: TcpListener) -> Result<Kache, AppError> {
        Self::start_with_metrics(config, listener, None).await
    }

    /// As [`Kache::start`], also serving `/metrics`, `/healthz`, `/livez` and `/readyz` on `metrics`.
    pub async fn start_with_metrics(
        config: Config,
        listener: TcpListener,
        metrics: Option<TcpListener>,
    ) -> Result<Kache, AppError> {
        let addr = listener.local_addr()?;
        let metrics_addr = metrics.as_ref().map(TcpListener::local_addr).transpose()?;
        // This kache's metrics: handed to every stage that records, rendered by its metrics listener.
        let metrics_instance = Metrics::new();
        let upstream = match &config.upstream {
            UpstreamSource::Url(url) => Upstream::plain(url)?,
            UpstreamSource::Kubeconfig(path) => Upstream::from_kubeconfig(path.as_deref()).await?,
            UpstreamSource::KubeconfigContext(path, context) => {
                Upstream::from_kubeconfig_context(path.as_deref(), Some(context)).await?
            }
        };
        let registry = Registry::with_metrics(
            Arc::new(upstream.clone()),
            config.reflector.clone(),
            metrics_instance.clone(),
        );
        registry.set_selection(config.selection.clone());
        registry.set_mirror_selectors(config.mirror_selectors.clone());
        let shutdown = CancellationToken::new();
        let mut background = Vec::new();
        if let Some(cert) = &config.tls_reload {
            background.push(cert.clone().spawn_watch(crate::auth::DEFAULT_RELOAD_INTERVAL, shutdown.clone()));
        }
        {
            // Histogram samples are folded into buckets on render; without scrapes, periodically.
            let metrics = metrics_instance.clone();
            let stop = shutdown.clone();
            background.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(METRICS_UPKEEP_INTERVAL);
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        _ = tick.tick() => metrics.run_upkeep(),
                    }
                }
            }));
        }

        background.push(tokio::spawn(huge_pages::run(
            config.huge_pages,
            registry.clone(),
            metrics_instance.clone(),
            shutdown.clone(),
        )));

        // Readiness beyond the stores' sync: the first discovery, and an upstream that answers.
        let discovery = Arc::new(DiscoveryState::default());
        let reach = Arc::new(Reach::new(config.unreachable_grace));
        background.push(tokio::spawn(reach.clone().watch(upstream.clone(), shutdown.clone())));
        background.push(tokio::spawn(log_initial_sync(registry.clone(), shutdown.clone())));
        // Discovery: first round now (in the background so an unreachable upstream does not block
        // serving), then periodically.
        {
            let registry = registry.clone();
            let interval = config.rediscovery_interval;
            let stop = shutdown.clone();
            let discovery = discovery.clone();
            background.push(tokio::spawn(async move {
                let mut backoff = Duration::from_millis(200);
                loop {
                    match registry.rediscover().await {
                        Ok(started) => {
                            tracing::info!(resources = started.len(), "discovery done");
                            discovery.done();
                            break;
                        }
                        Err(e) => {
                            tracing::warn!(
                                error = %e,
                                retry_in_ms = backoff.as_millis() as u64,
                                "discovery failed"
                            );
                            discovery.failed(e.to_string());
                            tokio::select! {
                                () = stop.cancelled() => return,
                                () = tokio::time::sleep(backoff) => {}
                            }
                            backoff = (backoff * 2).min(Duration::from_secs(30));
                        }
                    }
                }
                let periodic = registry.spawn_rediscovery(interval);
                stop.cancelled().await;
                periodic.abort();
            }));
        }

        let writes = Arc::new(WriteTracker::new());
        let forwarder = Forwarder::new(upstream.clone(), writes.clone(), config.limits.max_in_flight)
            .with_metrics(metrics_instance.clone());
        let freshness = Arc::new(Freshness::new(upstream.clone(), config.freshness.clone()));
        let tables = Arc::new(crate::codec::table::Tables::default());
        let producers = Arc::new(crate::serve::admit::Producers::default());
        {
            let registry = registry.clone();
            freshness.set_selection_lookup(Arc::new(move |gvr: &crate::resource::Gvr| {
                registry.mirror_selector(gvr).map(|s| crate::reflector::selector_query(&s))
            }));
        }
        if freshness.has_oracle() {
            // Each synced store gets its etcd prefix watch now, not at its first consistent read.
            let (registry, freshness, stop) = (registry.clone(), freshness.clone(), shutdown.clone());
            background.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(ORACLE_SCAN_INTERVAL);
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        _ = tick.tick() => {
                            for store in registry.synced_stores() {
                                freshness.prepare(&store);
                            }
                        }
                    }
                }
            }));
        }
        if let Some(listener) = metrics {
            let (discovery, reach) = (discovery.clone(), reach.clone());
            let mut stats = KacheStats::new(registry.clone());
            if freshness.has_oracle() {
                let oracle = (registry.clone(), freshness.clone());
                stats = stats.with_check("etcd", move || oracle_check(&oracle));
            }
            let source = Arc::new(
                stats
                    .with_freshness(freshness.clone())
                    .with_tables(tables.clone())
                    .with_producers(producers.clone())
                    .with_check("discovery", move || discovery.check())
                    .with_check("upstream", move || reach.check()),
            );
            let (stop, metrics) = (shutdown.clone(), metrics_instance.clone());
            background.push(tokio::spawn(async move {
                if let Err(e) =
                    crate::front::metrics_server::serve_metrics(listener, metrics, source, stop).await
                {
                    tracing::error!(error = %e, "metrics listener failed");
                }
            }));
        }
        let reads = Reads::new(
            registry.clone(),
            freshness.clone(),
            config.handler.clone(),
            config.lazy,
            shutdown.clone(),
            metrics_instance.clone(),
            producers,
        )
        .with_read_budget(config.limits.max_read_bytes_in_flight, config.limits.max_heavy_bodies_in_flight)
        .with_list_body_cache(config.limits.list_body_cache_bytes)
        .with_tables(tables);
        let handler = KacheHandler::new(registry.clone(), reads, forwarder, writes.clone(), config.lazy);
        // --- auth (k-sec): reviews with kache's credentials; bearer-token clients forwarded with their own ---
        let handler = match config.auth.mode {
            AuthMode::None => handler.with_auth(
                Arc::new(Auth::none_with(config.auth.clone()).with_metrics(metrics_instance.clone())),
                None,
            ),
            AuthMode::Delegated => {
                let auth = Arc::new(
                    Auth::new(config.auth.clone(), upstream.clone()).with_metrics(metrics_instance.clone()),
                );
                let pass_through = match (&config.upstream, upstream.credentials()) {
                    (
                        UpstreamSource::Kubeconfig(path) | UpstreamSource::KubeconfigContext(path, _),
                        crate::upstream::Credentials::Own,
                    ) => {
                        let context = match &config.upstream {
                            UpstreamSource::KubeconfigContext(_, context) => Some(context.as_str()),
                            _ => None,
                        };
                        let bare =
                            Upstream::from_kubeconfig_without_credentials(path.as_deref(), context).await?;
                        let forwarder = Forwarder::new(bare, writes.clone(), config.limits.max_in_flight);
                        Some(forwarder.with_metrics(metrics_instance.clone()))
                    }
                    _ => None,
                };
                handler.with_auth(auth, pass_through)
            }
        };
        let handler = Arc::new(handler);
        let stats = handler.stats().clone();
        let stop = shutdown.clone();
        let server = tokio::spawn(server::serve(
            listener,
            config.tls.clone(),
            handler,
            config.limits.clone(),
            metrics_instance.clone(),
            async move { stop.cancelled().await },
        ));
        let tls = config.tls.is_some();
        let metrics = metrics_instance;
        Ok(Kache {
            addr,
            tls,
            metrics_addr,
            registry,
            stats,
            metrics,
            freshness,
            shutdown,
            server,
            background,
        })
    }

    /// The address kache listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://ADDR` when the API listener serves TLS, else `http://ADDR`.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// `http://ADDR` of the metrics and health listener, when there is one.
    pub fn metrics_url(&self) -> Option<String> {
        self.metrics_addr.map(|a| format!("http://{a}"))
    }

    /// Where answers came from.
    pub fn stats(&self) -> &Arc<HandlerStats> {
        &self.stats
    }

    /// This kache's metrics (what its `/metrics` renders, before the scrape-time refresh).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Consistent-read freshness: its counters say how reads were proven fresh, waited or forwarded.
    pub fn freshness(&self) -> &Arc<Freshness> {
        &self.freshness
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Waits until every configured resource is synced and, with the etcd oracle, its prefix watch has
    /// ended its first attempt (what `/readyz` waits for).
    pub async fn wait_synced(&self) {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        let oracle = (self.registry.clone(), self.freshness.clone());
        loop {
            tick.tick().await;
            if self.registry.all_synced()
                && !self.registry.statuses().is_empty()
                && oracle_check(&oracle).is_ok()
            {
                return;
            }
        }
    }

    /// A token that stops kache when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Stops kache: drains in-flight requests, ends watches, stops reflectors.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        let _ = self.server.await;
        for task in &self.background {
            task.abort();
        }
        for task in self.background {
            let _ = task.await;
        }
        self.registry.stop_all().await;
    }

    /// Runs until `signal` completes, then shuts down.
    pub async fn run_until(self, signal: impl std::future::Future<Output = ()>) {
        let token = self.shutdown.clone();
        tokio::select! {
            () = signal => {}
            () = token.cancelled() => {}
        }
        self.shutdown().await;
    }
}

/// The first discovery round: readiness fails until it succeeded (before it, no store is registered, so no
/// per-resource check could fail).
#[derive(Debug, Default)]
struct DiscoveryState {
    done: std::sync::atomic::AtomicBool,
    last_error: std::sync::Mutex<Option<String>>,
}

// === impl DiscoveryState ===

impl DiscoveryState {
    fn done(&self) {
        self.done.store(true, std::sync::atomic::Ordering::Release);
    }

    fn failed(&self, why: String) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }

    fn check(&self) -> Result<(), String> {
        if self.done.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        Err(match &*self.last_error.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(why) => format!("discovering the upstream's resources failed: {why}"),
            None => "discovering the upstream's resources".to_owned(),
        })
    }
}

/// Logs the initial sync's progress every [`SYNC_PROGRESS_EVERY`] (configured resources synced, objects
/// held) until every configured resource is synced, then once how long it took. Per-resource lines come
/// from the reflectors.
async fn log_initial_sync(registry: Arc<Registry>, stop: CancellationToken) {
    let started = tokio::time::Instant::now();
    let mut logged = started;
    let mut tick = tokio::time::interval(SYNC_CHECK_EVERY);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let statuses = registry.statuses();
        let configured: Vec<_> = statuses.iter().filter(|s| s.configured && !s.rejected).collect();
        if configured.is_empty() {
            continue; // discovery has not started any yet
        }
        let synced = configured.iter().filter(|s| s.synced).count();
        let objects: usize = configured.iter().map(|s| s.objects).sum();
        if synced == configured.len() {
            tracing::info!(resources = synced, objects, elapsed = ?started.elapsed(), "initial sync done");
            return;
        }
        if logged.elapsed() >= SYNC_PROGRESS_EVERY {
            logged = tokio::time::Instant::now();
            let waiting: Vec<String> =
                configured.iter().filter(|s| !s.synced).take(5).map(|s| s.gvr.to_string()).collect();
            tracing::info!(
                synced,
                of = configured.len(),
                objects,
                waiting = %waiting.join(","),
                "initial sync in progress"
            );
        }
    }
}

/// Readiness with the etcd oracle: every configured, synced resource's prefix watch has ended its first
/// attempt (ready, or etcd unreachable or the prefix unverified: those reads go the apiserver's way).
fn oracle_check((registry, freshness): &(Arc<Registry>, Arc<Freshness>)) -> Result<(), String> {
    let starting =
        registry.configured_synced_stores().iter().filter(|s| !freshness.oracle_settled(s)).count();
    match starting {
        0 => Ok(()),
        n => Err(format!("{n} etcd prefix watches starting")),
    }
}

/// A named readiness check: `Err(reason)` while failing.
type ReadyCheck = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What a kache's metrics listener reads at scrape time: the reflector registry, the freshness prober when
/// there is one, its Table state, the counters the watch fan-out and the process-wide pools keep, and any readiness checks
/// the app adds (e.g. `discovery` until the first discovery round is done).
pub struct KacheStats {
    registry: Arc<Registry>,
    freshness: Option<Arc<Freshness>>,
    /// The kache's Table state (its row cache and learned columns are counted at scrape time).
    tables: Arc<crate::codec::table::Tables>,
    /// The kache's heavy-body producers (their gauges are read at scrape time).
    producers: Arc<crate::serve::admit::Producers>,
    checks: Vec<(String, ReadyCheck)>,
}

// === impl KacheStats ===

impl KacheStats {
    pub fn new(registry: Arc<Registry>) -> Self {
        Self {
            registry,
            freshness: None,
            tables: Arc::default(),
            producers: Arc::new(crate::serve::admit::Producers::new(1)),
            checks: Vec::new(),
        }
    }

    pub(crate) fn with_producers(mut self, producers: Arc<crate::serve::admit::Producers>) -> Self {
        self.producers = producers;
        self
    }

    pub(crate) fn with_tables(mut self, tables: Arc<crate::codec::table::Tables>) -> Self {
        self.tables = tables;
        self
    }

    pub(crate) fn with_freshness(mut self, freshness: Arc<Freshness>) -> Self {
        self.freshness = Some(freshness);
        self
    }

    /// Adds a readiness check, listed after `ping` and before the per-resource checks.
    pub fn with_check(
        mut self,
        name: impl Into<String>,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.checks.push((name.into(), Box::new(check)));
        self
    }
}

impl StatsSource for KacheStats {
    fn resources(&self) -> Vec<ResourceSnapshot> {
        self.registry.resources()
    }

    fn extra_ready_checks(&self) -> Vec<(String, Result<(), String>)> {
        self.checks.iter().map(|(name, check)| (name.clone(), check())).collect()
    }

    fn freshness(&self) -> Option<FreshnessCounters> {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.freshness.as_deref()?.stats;
        Some(FreshnessCounters {
            probes: s.probes.load(Relaxed),
            fresh: s.fresh.load(Relaxed),
            lagging: s.lagging.load(Relaxed),
            probe_errors: s.probe_errors.load(Relaxed),
            quiet: s.quiet.load(Relaxed),
            small: s.small.load(Relaxed),
            slow: s.slow.load(Relaxed),
            waited: s.waited.load(Relaxed),
            waits_expired: s.waits_expired.load(Relaxed),
            ahead_reached: s.ahead_reached.load(Relaxed),
            ahead_forwarded: s.ahead_forwarded.load(Relaxed),
            proofs_succeeded: s.proofs_succeeded.load(Relaxed),
            proofs_failed: s.proofs_failed.load(Relaxed),
            censuses: s.censuses.load(Relaxed),
            census_same: s.census_same.load(Relaxed),
            census_behind: s.census_behind.load(Relaxed),
            census_failed: s.census_failed.load(Relaxed),
            census_bytes: s.census_bytes.load(Relaxed),
            too_large: s.too_large.load(Relaxed),
            etcd: self.freshness.as_deref()?.etcd_stats(),
        })
    }

    fn shared(&self) -> SharedCounters {
        let (table_row_hits, table_row_misses) = self.tables.rows.lookups();
        let (heavy_bodies_waiting, heavy_bodies_producing) = self.producers.heavy_bodies();
        let (heavy_body_threads_lowered, heavy_body_threads_normal) = self.producers.heavy_body_threads();
        let (heap_collects, heap_collect_nanos) = idle_collect::totals();
        SharedCounters {
            table_row_hits,
            table_row_misses,
            table_row_cache_bytes: self.tables.rows.weighted_bytes(),
            table_generic_resources: self.tables.generic.learned_resources() as u64,
            heavy_bodies_waiting,
            heavy_bodies_producing,
            heavy_body_threads_lowered,
            heavy_body_threads_normal,
            heap_collects,
            heap_collect_nanos,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn kache_stats_runs_added_checks_in_order() {
        use std::sync::atomic::{AtomicBool, Ordering};

        let upstream = Upstream::plain("http://127.0.0.1:9").expect("plain upstream");
        let registry = Registry::new(upstream, ReflectorConfig::default());
        let discovered = Arc::new(AtomicBool::new(false));
        let flag = discovered.clone();
        let stats = KacheStats::new(registry).with_check("discovery", move || {
            if flag.load(Ordering::Relaxed) { Ok(()) } else { Err("first discovery pending".into()) }
        });
        let checks = crate::metrics::readiness(&stats);
        assert_eq!(
            checks,
            vec![
                ("ping".to_owned(), Ok(())),
                ("discovery".to_owned(), Err("first discovery pending".to_owned()))
            ]
        );
        discovered.store(true, Ordering::Relaxed);
        assert_eq!(crate::metrics::readiness(&stats)[1], ("discovery".to_owned(), Ok(())));
    }
}
