//! Which resources are cached: discovered resources, running reflectors, and the lock-free lookup of their stores.
//!
//! The read path ([`Registry::get`]) is one arc-swap load and a hash lookup; starting and stopping reflectors
//! (rare) copies the map and swaps it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::config::ReflectorConfig;
use super::status::{ReflectorStatus, StatusCell};
use super::supervisor;
use crate::metrics::Metrics;
use crate::options::coverage::{self, MirrorSelector};
use crate::resource::{Gvr, ResourceInfo};
use crate::store::Store;
use crate::upstream::discovery::{
    self, DiscoveredResource, Discovery, DiscoveryError, ResourceSpec, Selection,
};
use crate::upstream::{Transport, Upstream};

/// Stores by resource, shared with the reflector tasks (which publish their store once it exists).
#[derive(Default)]
pub(super) struct StoreMap {
    map: ArcSwap<HashMap<Gvr, Arc<Store>>>,
    /// Serialises inserts against removals so a stopped reflector cannot re-insert its store.
    write: Mutex<()>,
}

struct Running {
    status: Arc<StatusCell>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct Inner {
    running: HashMap<Gvr, Running>,
}

/// The cached resources of one upstream.
pub struct Registry {
    transport: Arc<dyn Transport>,
    config: Arc<ReflectorConfig>,
    stores: Arc<StoreMap>,
    /// Every discovered resource, by GVR (also resources that are not cached).
    catalog: ArcSwap<HashMap<Gvr, DiscoveredResource>>,
    /// What is cached up front, and what never is (read without locking by `ensure`).
    selection: ArcSwap<Selection>,
    /// `--resource-selector`: the resources mirrored filtered, and their selectors.
    selector_specs: ArcSwap<Vec<(ResourceSpec, MirrorSelector)>>,
    /// The selector of every running filtered mirror, fixed when its reflector starts (lock-free lookup on
    /// the read path; resources mirrored whole are absent).
    mirrors: ArcSwap<HashMap<Gvr, Arc<MirrorSelector>>>,
    inner: Mutex<Inner>,
    /// The kache's metrics: its reflectors count upstream errors there, filtered mirrors their selector.
    metrics: Metrics,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("stores", &self.stores.map.load().len()).finish_non_exhaustive()
    }
}

// === impl StoreMap ===

impl StoreMap {
    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.write.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes a store unless its reflector was stopped meanwhile.
    pub(super) fn insert(&self, gvr: Gvr, store: Arc<Store>, status: &StatusCell) {
        let _guard = self.lock();
        if status.is_stopped() {
            return;
        }
        self.map.rcu(|m| {
            let mut m = HashMap::clone(m);
            m.insert(gvr.clone(), store.clone());
            m
        });
    }

    fn remove(&self, gvr: &Gvr) {
        let _guard = self.lock();
        self.map.rcu(|m| {
            let mut m = HashMap::clone(m);
            m.remove(gvr);
            m
        });
    }
}

// === impl Registry ===

impl Registry {
    /// A registry whose reflectors talk to `upstream`. Nothing is cached until [`Registry::start`],
    /// [`Registry::apply_discovery`] or [`Registry::ensure`].
    pub fn new(upstream: Upstream, config: ReflectorConfig) -> Arc<Self> {
        Self::with_transport(Arc::new(upstream), config)
    }

    /// As [`Registry::new`], over any transport (tests script the upstream).
    pub fn with_transport(transport: Arc<dyn Transport>, config: ReflectorConfig) -> Arc<Self> {
        Self::with_metrics(transport, config, Metrics::default())
    }

    /// As [`Registry::with_transport`], recording into the kache's `metrics`.
    pub fn with_metrics(
        transport: Arc<dyn Transport>,
        config: ReflectorConfig,
        metrics: Metrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            transport,
            config: Arc::new(config),
            stores: Arc::new(StoreMap::default()),
            catalog: ArcSwap::default(),
            selection: ArcSwap::default(),
            selector_specs: ArcSwap::default(),
            mirrors: ArcSwap::default(),
            inner: Mutex::new(Inner::default()),
            metrics,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store of a cached resource. Lock-free; check [`Store::is_synced`] before serving from it.
    pub fn get(&self, gvr: &Gvr) -> Option<Arc<Store>> {
        self.stores.map.load().get(gvr).cloned()
    }

    /// The selector of a filtered mirror; `None` when the resource is mirrored whole (or not cached). Set
    /// before the store is first published and never removed (a resource's selector is fixed by the flags,
    /// so a restarted reflector mirrors the same selection): a published store is never mistaken for a
    /// whole mirror.
    pub(crate) fn mirror_selector(&self, gvr: &Gvr) -> Option<Arc<MirrorSelector>> {
        let mirrors = self.mirrors.load();
        if mirrors.is_empty() { None } else { mirrors.get(gvr).cloned() }
    }

    /// Sets which resources are mirrored filtered (`--resource-selector`; several selectors of one resource
    /// are ANDed). Applies to reflectors started afterwards: call before discovery.
    pub(crate) fn set_mirror_selectors(&self, specs: Vec<(ResourceSpec, MirrorSelector)>) {
        self.selector_specs.store(Arc::new(specs));
    }

    /// The selector a new reflector of `info` mirrors with, from the `--resource-selector` specs that name it.
    fn selector_for(&self, info: &ResourceInfo) -> Option<Arc<MirrorSelector>> {
        let specs = self.selector_specs.load();
        if specs.is_empty() {
            return None;
        }
        let catalog = self.catalog.load();
        let found = catalog.get(&info.gvr)?;
        let merged = specs.iter().filter(|(spec, _)| spec.matches(found)).map(|(_, sel)| sel).fold(
            None,
            |acc: Option<MirrorSelector>, sel| {
                Some(acc.map_or_else(|| sel.clone(), |a| coverage::merge(&a, sel)))
            },
        )?;
        Some(Arc::new(merged.converted(info.field_kind())))
    }

    /// What discovery knows about a resource (cached or not).
    pub fn info(&self, gvr: &Gvr) -> Option<ResourceInfo> {
        match self.get(gvr) {
            Some(store) => Some(store.info().clone()),
            None => self.catalog.load().get(gvr).map(|r| r.info.clone()),
        }
    }

    /// [`Registry::info`] by parts, as parsed from a request path (`group` empty for `/api/v1`).
    pub fn lookup(&self, group: &str, version: &str, resource: &str) -> Option<ResourceInfo> {
        self.info(&Gvr::new(group, version, resource))
    }

    /// Starts caching a discovered, not excluded resource on its first read. Returns whether it is (now) cached;
    /// the caller forwards upstream until the store is synced.
    pub(crate) fn ensure(&self, gvr: &Gvr) -> bool {
        if self.get(gvr).is_some() {
            return true;
        }
        let catalog = self.catalog.load();
        let Some(found) = catalog.get(gvr) else { return false };
        if !self.selection.load().allows(found) {
            return false;
        }
        let mut inner = self.lock();
        if inner.running.contains_key(gvr) {
            return true;
        }
        info!(resource = %gvr, "caching on first read");
        self.spawn_locked(&mut inner, found.info.clone(), false);
        true
    }

    /// Starts caching these resources (configured: they count for readiness). Already running ones are kept
    /// (and now count for readiness).
    pub fn start(&self, resources: Vec<ResourceInfo>) {
        self.catalog.rcu(|c| {
            let mut c = HashMap::clone(c);
            for info in &resources {
                c.entry(info.gvr.clone()).or_insert_with(|| DiscoveredResource {
                    info: info.clone(),
                    preferred: true,
                    singular: String::new(),
                    short_names: Vec::new(),
                });
            }
            c
        });
        let mut inner = self.lock();
        for info in resources {
            match inner.running.get(&info.gvr) {
                Some(running) => running.status.set_configured(),
                None => self.spawn_locked(&mut inner, info, true),
            }
        }
    }

    /// Stops every reflector (shutdown) and waits until their tasks are gone (with what they held: the
    /// upstream client among it).
    pub(crate) async fn stop_all(&self) {
        let running: Vec<(Gvr, Running)> = self.lock().running.drain().collect();
        let mut tasks = Vec::with_capacity(running.len());
        for (gvr, running) in running {
            running.status.stop();
            running.task.abort();
            self.stores.remove(&gvr);
            tasks.push(running.task);
        }
        for task in tasks {
            let _ = task.await;
        }
    }

    /// Stops caching a resource: its reflector ends and reads are forwarded again.
    pub fn stop(&self, gvr: &Gvr) {
        let removed = self.lock().running.remove(gvr);
        if let Some(running) = removed {
            running.status.stop();
            running.task.abort();
            self.stores.remove(gvr);
            info!(resource = %gvr, "stopped caching");
        }
    }

    /// Sets which resources are cached: `include` up front, `exclude` never (not even lazily).
    pub fn set_selection(&self, selection: Selection) {
        self.selection.store(Arc::new(selection));
    }

    /// Takes a discovery round into account: remembers what exists, starts the selected resources that are not
    /// cached yet (custom resources added later), and stops those whose group version no longer serves them.
    /// Returns the resources started.
    pub fn apply_discovery(&self, discovery: Discovery) -> Vec<Gvr> {
        let old = self.catalog.load_full();
        let mut catalog: HashMap<Gvr, DiscoveredResource> =
            discovery.resources.iter().map(|r| (r.info.gvr.clone(), r.clone())).collect();
        for (gvr, r) in old.iter() {
            if !discovery.covers(gvr) {
                catalog.entry(gvr.clone()).or_insert_with(|| r.clone());
            }
        }
        let gone: Vec<Gvr> = {
            let inner = self.lock();
            inner.running.keys().filter(|g| !catalog.contains_key(*g)).cloned().collect()
        };
        self.catalog.store(Arc::new(catalog));
        for gvr in &gone {
            info!(resource = %gvr, "resource no longer served upstream");
            self.stop(gvr);
        }
        let (selected, unresolved) = self.selection.load().select(&discovery.resources);
        let mut inner = self.lock();
        for spec in unresolved {
            warn!(resource = %spec, "configured resource not found in discovery (yet)");
        }
        let mut started = Vec::new();
        for info in selected {
            match inner.running.get(&info.gvr) {
                Some(running) => running.status.set_configured(),
                None => {
                    started.push(info.gvr.clone());
                    self.spawn_locked(&mut inner, info, true);
                }
            }
        }
        started
    }

    /// Runs one discovery round against the upstream and applies it.
    pub(crate) async fn rediscover(&self) -> Result<Vec<Gvr>, DiscoveryError> {
        let found = discovery::discover_all(&*self.transport).await?;
        Ok(self.apply_discovery(found))
    }

    /// Rediscovers every `interval` (custom resources added later), until the registry is dropped.
    pub(crate) fn spawn_rediscovery(self: &Arc<Self>, interval: Duration) -> JoinHandle<()> {
        let weak: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(registry) = weak.upgrade() else { return };
                match registry.rediscover().await {
                    Ok(started) if !started.is_empty() => {
                        let started: Vec<String> = started.iter().map(ToString::to_string).collect();
                        info!(resources = %started.join(","), "rediscovery started caching")
                    }
                    Ok(_) => {}
                    Err(error) => warn!(%error, "rediscovery failed"),
                }
            }
        })
    }

    /// Every synced store (lock-free).
    pub(crate) fn synced_stores(&self) -> Vec<Arc<Store>> {
        self.stores.map.load().values().filter(|s| s.is_synced()).cloned().collect()
    }

    /// The synced stores of configured resources (those readiness counts).
    pub(crate) fn configured_synced_stores(&self) -> Vec<Arc<Store>> {
        let inner = self.lock();
        inner
            .running
            .iter()
            .filter(|(_, r)| r.status.configured())
            .filter_map(|(gvr, _)| self.get(gvr).filter(|s| s.is_synced()))
            .collect()
    }

    /// Whether every configured resource has a synced store. Lazily cached resources do not count, nor do
    /// resources the upstream refuses to list (e.g. RBAC forbids it): their reads are forwarded.
    pub fn all_synced(&self) -> bool {
        let inner = self.lock();
        inner
            .running
            .iter()
            .filter(|(_, r)| r.status.configured() && !r.status.is_rejected())
            .all(|(gvr, _)| self.get(gvr).is_some_and(|s| s.is_synced()))
    }

    /// The status of every running reflector, sorted by resource.
    pub fn statuses(&self) -> Vec<ReflectorStatus> {
        let mut out: Vec<_> = self.lock().running.values().map(|r| r.status.snapshot()).collect();
        out.sort_by(|a, b| a.gvr.cmp(&b.gvr));
        out
    }

    fn spawn_locked(&self, inner: &mut Inner, info: ResourceInfo, configured: bool) {
        let gvr = info.gvr.clone();
        let status = Arc::new(StatusCell::new(gvr.clone(), configured));
        // A filtered mirror: its own config (the selector goes on every list and watch), and its selector
        // published before its store can be.
        let config = match self.selector_for(&info) {
            Some(selector) => {
                info!(resource = %gvr, %selector, "mirroring a selection");
                self.metrics.mirror_selector(&gvr, &selector.to_string());
                self.mirrors.rcu(|m| {
                    let mut m = HashMap::clone(m);
                    m.insert(gvr.clone(), selector.clone());
                    m
                });
                Arc::new(ReflectorConfig { selector: Some(selector), ..ReflectorConfig::clone(&self.config) })
            }
            None => self.config.clone(),
        };
        let task = tokio::spawn(supervisor::run_resource(supervisor::Resource {
            transport: self.transport.clone(),
            config,
            info,
            status: status.clone(),
            stores: self.stores.clone(),
            metrics: self.metrics.clone(),
        }));
        inner.running.insert(gvr, Running { status, task });
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        for running in inner.running.values() {
            running.status.stop();
            running.task.abort();
        }
    }
}
