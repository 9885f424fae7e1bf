//! The public Rust API: `Sim::builder()...start()` and the running `SimHandle`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::auth::AuthConfig;
use crate::http::{Admin, Config, State};
use crate::kinds::{Crd, table};
use crate::status::ApiError;
use crate::store::{ResId, Store};
use crate::workload::foreign::{self, ForeignStats};
use crate::write::{self, Deleted, Part, PatchType, Preconditions, WriteOpts};

mod seed;

/// The apiserver's bookmark frequency (`defaultBookmarkFrequency`).
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);
/// The apiserver's etcd compaction interval (`--etcd-compaction-interval`).
pub const DEFAULT_COMPACTION_INTERVAL: Duration = Duration::from_secs(300);
/// A kube-apiserver's time per MiB of a consistent list (1.36 with its watch cache: a 21.5 MiB list in
/// 182–194 ms, p50, in the project's real-apiserver benchmarks on a 2-core machine), for
/// [`SimBuilder::list_cost_per_mib`].
pub const APISERVER_LIST_COST_PER_MIB: Duration = Duration::from_millis(9);
/// The watch cache's freshness wait before 504 (`blockTimeout`).
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(3);
/// The field manager of writes made through the Rust API.
const RUST_API_MANAGER: &str = "kache-sim";

/// Errors starting the sim.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listen address could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// Two resources share a group and plural.
    #[error("duplicate resource {0}")]
    DuplicateResource(String),
}

/// Entry point: `Sim::builder()`.
pub struct Sim;

impl Sim {
    pub fn builder() -> SimBuilder {
        SimBuilder {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            crds: Vec::new(),
            bookmark_interval: DEFAULT_BOOKMARK_INTERVAL,
            compaction_interval: Some(DEFAULT_COMPACTION_INTERVAL),
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
            seed_default_namespace: true,
            auth: None,
            foreign_writes: 0.0,
            kubelets: true,
            list_cost_per_mib: None,
        }
    }
}

/// Configures and starts a sim.
#[derive(Debug, Clone)]
pub struct SimBuilder {
    listen: SocketAddr,
    crds: Vec<Crd>,
    bookmark_interval: Duration,
    compaction_interval: Option<Duration>,
    wait_timeout: Duration,
    seed_default_namespace: bool,
    auth: Option<Arc<AuthConfig>>,
    foreign_writes: f64,
    kubelets: bool,
    list_cost_per_mib: Option<Duration>,
}

// === impl SimBuilder ===

impl SimBuilder {
    /// Address to listen on (default 127.0.0.1:0, an ephemeral port).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Declares a custom resource.
    pub fn crd(mut self, crd: Crd) -> Self {
        self.crds.push(crd);
        self
    }

    /// Period of watch bookmarks (default 60 s).
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.bookmark_interval = d;
        self
    }

    /// Period of automatic compaction (default 5 min; None = never). Each run compacts to the revision
    /// seen at the previous run, like kube-apiserver's compactor.
    pub fn compaction_interval(mut self, d: Option<Duration>) -> Self {
        self.compaction_interval = d;
        self
    }

    /// How long reads wait for a future resourceVersion before 504 (default 3 s).
    pub fn wait_timeout(mut self, d: Duration) -> Self {
        self.wait_timeout = d;
        self
    }

    /// Whether the `default`, `kube-system` and `kube-public` namespaces exist at start (default true).
    pub fn seed_default_namespaces(mut self, on: bool) -> Self {
        self.seed_default_namespace = on;
        self
    }

    /// Authentication and authorization (static tokens, allow rules); None (the default) serves everyone.
    /// Also enables the TokenReview and SubjectAccessReview APIs.
    pub fn auth(mut self, auth: Option<AuthConfig>) -> Self {
        self.auth = auth.map(Arc::new);
        self
    }

    /// Background writes per second to resources a test does not look at (node lease renewals and
    /// events, see [`workload::foreign`](crate::workload::foreign)), moving the global revision as a real
    /// cluster does. Default 0 (off); [`SimHandle::set_foreign_writes`] changes it while running.
    pub fn foreign_writes(mut self, per_sec: f64) -> Self {
        self.foreign_writes = per_sec;
        self
    }

    /// Whether pods have kubelets behind them (default true): pod logs answer a fixed text and
    /// exec/attach/portforward upgrade and echo bytes, what tests of a proxy in front need. Without
    /// (`kache demo`), these answer a 501 Status saying that the simulated cluster has no kubelets.
    pub fn kubelets(mut self, on: bool) -> Self {
        self.kubelets = on;
        self
    }

    /// A cost model for lists (default None: off, as tests need): each list response is delayed by this
    /// much per MiB of its body. The sim writes a list by concatenating stored bytes, faster than any
    /// apiserver, which encodes every object for every list: a kube-apiserver 1.36 answered a consistent
    /// 21.5 MiB list in ~190 ms on a 2-core machine, ~9 ms per MiB ([`APISERVER_LIST_COST_PER_MIB`]).
    /// It models the time only (the sim sleeps), not the CPU. `kache demo` turns it on so that reading
    /// through kache and directly compare as they would against a real cluster.
    pub fn list_cost_per_mib(mut self, cost: Option<Duration>) -> Self {
        self.list_cost_per_mib = cost;
        self
    }

    /// Binds and starts serving.
    pub async fn start(self) -> Result<SimHandle, StartError> {
        let resources = table(&self.crds);
        for (i, r) in resources.iter().enumerate() {
            if resources[..i].iter().any(|o| o.group == r.group && o.plural == r.plural) {
                return Err(StartError::DuplicateResource(r.qualified()));
            }
        }
        let listener = TcpListener::bind(self.listen)
            .await
            .map_err(|source| StartError::Bind { addr: self.listen, source })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind { addr: self.listen, source })?;
        let store = Arc::new(Store::new(resources));
        let state = Arc::new(State {
            store,
            cfg: Config {
                bookmark_interval: self.bookmark_interval,
                wait_timeout: self.wait_timeout,
                kubelets: self.kubelets,
                list_cost_per_mib: self.list_cost_per_mib,
            },
            auth: self.auth,
            admin: Admin::new(),
            addr,
        });
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (foreign_tx, foreign_rx) = watch::channel(self.foreign_writes);
        let foreign_stats = Arc::new(ForeignStats::default());
        let handle = SimHandle {
            state: state.clone(),
            shutdown: shutdown_tx,
            tasks: Vec::new(),
            foreign: foreign_tx,
            foreign_stats: foreign_stats.clone(),
        };
        if self.seed_default_namespace {
            for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                handle
                    .create("namespaces", None, serde_json::json!({"metadata": {"name": ns}}))
                    .map_err(|_| StartError::DuplicateResource("namespaces".into()))?;
            }
        }
        let mut handle = handle;
        handle.tasks.push(tokio::spawn(crate::http::server::run(
            listener,
            state.clone(),
            shutdown_rx.clone(),
        )));
        handle.tasks.push(tokio::spawn(foreign::run(
            state.clone(),
            foreign_rx,
            shutdown_rx.clone(),
            foreign_stats,
        )));
        if let Some(period) = self.compaction_interval {
            handle.tasks.push(tokio::spawn(compactor(state.clone(), period, shutdown_rx)));
        }
        Ok(handle)
    }
}

/// Compacts every `period` to the revision observed one period earlier, so one period of history is
/// always retained (kube-apiserver's `compactor` does the same with etcd).
async fn compactor(state: Arc<State>, period: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut last = state.store.current_rev();
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                state.store.compact(Some(last));
                last = state.store.current_rev();
            }
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// A running sim. Dropping it does not stop the server; call [`SimHandle::shutdown`].
pub struct SimHandle {
    state: Arc<State>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// The background workload's rate (writes per second).
    foreign: watch::Sender<f64>,
    foreign_stats: Arc<ForeignStats>,
}

// === impl SimHandle ===

impl SimHandle {
    pub fn addr(&self) -> SocketAddr {
        self.state.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.state.addr)
    }

    /// The authentication/authorization tables, to add tokens or change rules while serving.
    pub fn auth(&self) -> Option<&AuthConfig> {
        self.state.auth.as_deref()
    }

    /// The current global revision.
    pub fn revision(&self) -> u64 {
        self.state.store.current_rev()
    }

    /// API requests answered and the body bytes of complete responses so far (`GET /sim/served`):
    /// the upstream's work, which a cache in front of the sim saves.
    pub fn served(&self) -> (u64, u64) {
        self.state.admin.served.get()
    }

    /// Sets the background workload's rate (writes per second; 0 pauses it).
    pub fn set_foreign_writes(&self, per_sec: f64) {
        self.foreign.send_replace(per_sec);
    }

    /// Successful background writes so far.
    pub fn foreign_writes(&self) -> u64 {
        self.foreign_stats.writes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Compacts at `rev` (default: the current revision); returns the compacted revision.
    pub fn compact(&self, rev: Option<u64>) -> u64 {
        self.state.store.compact(rev)
    }

    /// Ends every open watch stream.
    pub fn drop_watches(&self) {
        crate::http::admin::drop_watches(&self.state);
    }

    /// Makes the next `n` API requests fail with `status` (admin requests are not counted).
    pub fn fail_next(&self, n: u32, status: u16) {
        *self.state.admin.fail.lock().unwrap_or_else(|p| p.into_inner()) = (n, status);
    }

    /// Delays every API response (zero = off).
    pub fn set_delay(&self, d: Duration) {
        *self.state.admin.delay.lock().unwrap_or_else(|p| p.into_inner()) = d;
    }

    /// Stops (true) or resumes (false) delivery on all watches.
    pub fn stall_watches(&self, on: bool) {
        self.state.admin.stall.send_replace(on);
    }

    /// Drops every connection and the watch history (like an apiserver restart); data and port stay.
    pub async fn restart(&self) {
        crate::http::admin::restart(&self.state);
        tokio::task::yield_now().await;
    }

    /// Stops serving and waits for the server tasks.
    pub async fn shutdown(mut self) {
        self.shutdown.send_replace(true);
        crate::http::admin::restart(&self.state);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }

    fn resolve(&self, resource: &str) -> Result<ResId, ApiError> {
        let (plural, group) = resource.split_once('.').unwrap_or((resource, ""));
        self.state.store.find(group, plural).ok_or_else(ApiError::path_not_found)
    }

    fn opts() -> WriteOpts {
        WriteOpts { dry_run: false, manager: RUST_API_MANAGER.to_string() }
    }

    /// Creates an object. `resource` is `plural` or `plural.group` (`pods`, `deployments.apps`,
    /// `widgets.example.com`); `namespace` is required for namespaced resources. Same code path and
    /// errors as `POST`.
    pub fn create(&self, resource: &str, namespace: Option<&str>, obj: Value) -> Result<Value, ApiError> {
        let id = self.resolve(resource)?;
        write::create(&self.state.store, id, namespace, obj, &Self::opts())
    }

    /// Replaces an object (`PUT`); a `metadata.resourceVersion` in `obj` is a precondition.
    pub fn update(&self, resource: &str, namespace: Option<&str>, obj: Value) -> Result<Value, ApiError> {
        let id = self.resolve(resource)?;
        let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        write::update(&self.state.store, id, namespace, &name, obj, Part::Main, &Self::opts())
    }

    /// Replaces an object's status (`PUT .../status`).
    pub fn update_status(
        &self,
        resource: &str,
        namespace: Option<&str>,
        obj: Value,
    ) -> Result<Value, ApiError> {
        let id = self.resolve(resource)?;
        let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        write::update(&self.state.store, id, namespace, &name, obj, Part::Status, &Self::opts())
    }

    /// Applies a JSON merge patch (`PATCH` with `application/merge-patch+json`).
    pub fn merge_patch(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        patch: Value,
    ) -> Result<Value, ApiError> {
        let id = self.resolve(resource)?;
        write::patch(
            &self.state.store,
            id,
            namespace,
            name,
            PatchType::Merge,
            &patch,
            Part::Main,
            &Self::opts(),
        )
    }

    /// Deletes an object; returns its last state (with finalizers: the object now being deleted).
    pub fn delete(&self, resource: &str, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        let id = self.resolve(resource)?;
        match write::delete(&self.state.store, id, namespace, name, &Preconditions::default(), &Self::opts())?
        {
            Deleted::Gone(o) | Deleted::Pending(o) => Ok(o),
        }
    }

    /// Reads the latest state of an object.
    pub fn get(&self, resource: &str, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        let id = self.resolve(resource)?;
        let res = self.state.store.resource(id).clone();
        match self.state.store.get(id, &write::key(&res, namespace, name), None) {
            Ok(Some(o)) => Ok(o.value()),
            _ => Err(ApiError::not_found(&res, name)),
        }
    }

    /// All current objects of a resource (in one namespace or all), in key order.
    pub fn list(&self, resource: &str, namespace: Option<&str>) -> Result<Vec<Value>, ApiError> {
        let id = self.resolve(resource)?;
        let prefix = namespace.map(|n| format!("{n}/")).unwrap_or_default();
        let (_, items) =
            self.state.store.range(id, &prefix, "", None).map_err(|_| ApiError::list_too_old())?;
        Ok(items.into_iter().map(|(_, v)| v.value()).collect())
    }
}
