//! Per-resource metric handles, registered once and looked up lock-free.
//!
//! Hot paths (list, get, watch fan-out, event ingest) either hold an `Arc<ResourceMetrics>` (from
//! [`Metrics::resource`]) or call the recording methods in `record`, which look it up here: one arc-swap
//! load and two borrowed-key hash lookups, no allocation. Each method is then an atomic add. The table
//! belongs to one [`Metrics`] instance.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use metrics::{Counter, Gauge, Histogram, Label, SharedString};

use super::instance::Metrics;
use super::labels::{self, AsResource, Source};
use super::names::*;
use super::recorder::{Recorder, label};

/// At most this many distinct (group, resource) label pairs; later ones share the `other` series. A cluster
/// with every built-in API and a few hundred CRDs stays under it; a client probing random URLs cannot grow it.
pub const MAX_RESOURCES: usize = 2048;
/// The resource label of requests whose resource is not a valid Kubernetes name or exceeds [`MAX_RESOURCES`].
pub const OTHER_RESOURCE: &str = "other";

/// Group → resource → handles. Replaced whole on insert (rare), read without locks.
type Table = HashMap<String, HashMap<String, Arc<ResourceMetrics>>>;

/// The bounded set of resources with handles (one per [`Metrics`] instance).
pub(crate) struct Interner {
    table: ArcSwap<Table>,
    /// Serialises inserts and counts the distinct resources in the table.
    insert: Mutex<usize>,
    other: Arc<ResourceMetrics>,
    max: usize,
    recorder: Recorder,
}

// === impl Interner ===

impl Interner {
    pub(crate) fn new(recorder: &Recorder, max: usize) -> Self {
        Self {
            table: ArcSwap::default(),
            insert: Mutex::new(0),
            other: Arc::new(ResourceMetrics::new(recorder, "", OTHER_RESOURCE)),
            max,
            recorder: recorder.clone(),
        }
    }

    /// The handles of `group`/`resource`: found lock-free, created once under the insert lock, or the
    /// shared `other` handles for invalid names and beyond `max`.
    pub(crate) fn get(&self, group: &str, resource: &str) -> Arc<ResourceMetrics> {
        if let Some(found) = self.table.load().get(group).and_then(|m| m.get(resource)) {
            return found.clone();
        }
        if !labels::valid_name(group) || !labels::valid_name(resource) {
            return self.other.clone();
        }
        let mut count = self.insert.lock().unwrap_or_else(|p| p.into_inner());
        let table = self.table.load_full();
        if let Some(found) = table.get(group).and_then(|m| m.get(resource)) {
            return found.clone();
        }
        if *count >= self.max {
            return self.other.clone();
        }
        let created = Arc::new(ResourceMetrics::new(&self.recorder, group, resource));
        let mut next = Table::clone(&table);
        next.entry(group.to_owned()).or_default().insert(resource.to_owned(), created.clone());
        self.table.store(Arc::new(next));
        *count += 1;
        created
    }

    /// Runs `f` on the handles of `group`/`resource` without taking a reference count when they exist.
    pub(crate) fn with<T>(&self, group: &str, resource: &str, f: impl FnOnce(&ResourceMetrics) -> T) -> T {
        if let Some(found) = self.table.load().get(group).and_then(|m| m.get(resource)) {
            return f(found);
        }
        f(&self.get(group, resource))
    }

    pub(crate) fn all(&self) -> Vec<Arc<ResourceMetrics>> {
        self.table.load().values().flat_map(|m| m.values().cloned()).collect()
    }
}

/// Key of a request series: verb label, status code, source.
type RequestKey = (&'static str, u16, Source);

/// One resource's series. Counters and gauges exist (at zero) from creation, so dashboards see every
/// resource before its first event.
pub struct ResourceMetrics {
    /// The instance's recorder, for the request series created on first use.
    recorder: Recorder,
    group: SharedString,
    resource: SharedString,
    list_total: Counter,
    list_fetched: Counter,
    list_returned: Counter,
    events_received: Counter,
    resource_version: Gauge,
    read_wait: Histogram,
    /// Indexed by `[success][fallback]`.
    consistent_reads: [[Counter; 2]; 2],
    watch_list_duration: Histogram,
    terminated_watchers: Counter,
    slow_watchers_closed: Counter,
    watchers: Gauge,
    pub(crate) store_objects: Gauge,
    pub(crate) store_live_bytes: Gauge,
    pub(crate) store_history_bytes: Gauge,
    pub(crate) store_snapshot_bytes: Gauge,
    pub(crate) store_index_bytes: Gauge,
    pub(crate) history_events: Gauge,
    pub(crate) history_span: Gauge,
    pub(crate) retained_snapshots: Gauge,
    pub(crate) relists: Counter,
    pub(crate) watch_restarts: Counter,
    pub(crate) bad_frames: Counter,
    pub(crate) restarts: Counter,
    /// `kache_protobuf_transcode_failures_total` (exported at zero from the start).
    pub(crate) protobuf_failures: Counter,
    /// Request series are keyed by verb × code × source: created on first use (bounded: 15 × 501 × 2).
    requests: ArcSwap<HashMap<RequestKey, Counter>>,
    durations: ArcSwap<HashMap<(&'static str, Source), Histogram>>,
    /// Series whose label sets are learned from the stats source (reflector states, synced/configured).
    pub(crate) dynamic: Mutex<DynamicSeries>,
}

/// Gauges keyed by a label learned at refresh time.
#[derive(Default)]
pub(crate) struct DynamicSeries {
    pub(crate) states: HashMap<&'static str, Gauge>,
    pub(crate) synced: HashMap<bool, Gauge>,
    pub(crate) since_last_event: Option<Gauge>,
}

impl std::fmt::Debug for ResourceMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceMetrics")
            .field("group", &self.group)
            .field("resource", &self.resource)
            .finish()
    }
}

// === impl ResourceMetrics ===

impl ResourceMetrics {
    fn new(recorder: &Recorder, group: &str, resource: &str) -> Self {
        let counter = |name, labels| recorder.counter(name, labels);
        let gauge = |name, labels| recorder.gauge(name, labels);
        let histogram = |name, labels| recorder.histogram(name, labels);
        let group: SharedString = Arc::<str>::from(group).into();
        let resource: SharedString = Arc::<str>::from(resource).into();
        let gr = || vec![Label::new("group", group.clone()), Label::new("resource", resource.clone())];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut l = gr();
            l.extend(extra.iter().map(|(k, v)| label(k, v)));
            l
        };
        let consistent = |success: &'static str| {
            [
                counter(
                    WATCH_CACHE_CONSISTENT_READ_TOTAL,
                    with(&[("success", success), ("fallback", "false")]),
                ),
                counter(
                    WATCH_CACHE_CONSISTENT_READ_TOTAL,
                    with(&[("success", success), ("fallback", "true")]),
                ),
            ]
        };
        Self {
            list_total: counter(CACHE_LIST_TOTAL, with(&[("index", "")])),
            list_fetched: counter(CACHE_LIST_FETCHED_OBJECTS_TOTAL, with(&[("index", "")])),
            list_returned: counter(CACHE_LIST_RETURNED_OBJECTS_TOTAL, gr()),
            events_received: counter(WATCH_CACHE_EVENTS_RECEIVED_TOTAL, gr()),
            resource_version: gauge(WATCH_CACHE_RESOURCE_VERSION, gr()),
            read_wait: histogram(WATCH_CACHE_READ_WAIT_SECONDS, gr()),
            consistent_reads: [consistent("false"), consistent("true")],
            watch_list_duration: histogram(WATCH_LIST_DURATION_SECONDS, gr()),
            terminated_watchers: counter(TERMINATED_WATCHERS_TOTAL, gr()),
            slow_watchers_closed: counter(SLOW_WATCHERS_CLOSED_TOTAL, gr()),
            watchers: gauge(WATCHERS, gr()),
            store_objects: gauge(STORE_OBJECTS, gr()),
            store_live_bytes: gauge(STORE_BYTES, with(&[("kind", "live")])),
            store_history_bytes: gauge(STORE_BYTES, with(&[("kind", "history")])),
            store_snapshot_bytes: gauge(STORE_BYTES, with(&[("kind", "snapshots")])),
            store_index_bytes: gauge(STORE_BYTES, with(&[("kind", "index")])),
            history_events: gauge(HISTORY_EVENTS, gr()),
            history_span: gauge(HISTORY_SPAN_SECONDS, gr()),
            retained_snapshots: gauge(RETAINED_SNAPSHOTS, gr()),
            relists: counter(RELISTS_TOTAL, gr()),
            watch_restarts: counter(WATCH_RESTARTS_TOTAL, gr()),
            bad_frames: counter(BAD_FRAMES_TOTAL, gr()),
            restarts: counter(REFLECTOR_RESTARTS_TOTAL, gr()),
            protobuf_failures: counter(PROTOBUF_TRANSCODE_FAILURES_TOTAL, gr()),
            requests: ArcSwap::default(),
            durations: ArcSwap::default(),
            dynamic: Mutex::new(DynamicSeries::default()),
            recorder: recorder.clone(),
            group,
            resource,
        }
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Labels `group`, `resource` plus `extra`.
    pub(crate) fn labels(&self, extra: &[(&'static str, &'static str)]) -> Vec<Label> {
        let mut l =
            vec![Label::new("group", self.group.clone()), Label::new("resource", self.resource.clone())];
        l.extend(extra.iter().map(|(k, v)| label(k, v)));
        l
    }

    /// A request answered: `verb` as the apiserver reports it (`LIST`, `WATCH`, ...; see
    /// [`labels::verb`]), its status code, where the answer came from and how long it took.
    pub fn request(&self, verb: &str, code: u16, source: Source, elapsed: Duration) {
        let verb = labels::verb(verb);
        let code = if labels::code(code) == "0" { 0 } else { code };
        let counter = cached(&self.requests, (verb, code, source), || {
            self.recorder.counter(
                REQUEST_TOTAL,
                self.labels(&[("verb", verb), ("code", labels::code(code)), ("source", source.as_str())]),
            )
        });
        counter.increment(1);
        let histogram = cached(&self.durations, (verb, source), || {
            self.recorder.histogram(
                REQUEST_DURATION_SECONDS,
                self.labels(&[("verb", verb), ("source", source.as_str())]),
            )
        });
        histogram.record(elapsed.as_secs_f64());
    }

    /// A LIST served from memory: objects scanned and objects returned.
    pub fn list_served(&self, fetched: usize, returned: usize) {
        self.list_total.increment(1);
        self.list_fetched.increment(fetched as u64);
        self.list_returned.increment(returned as u64);
    }

    /// Events (or bookmarks) applied to the store, as the reflector counts them (mirrored at each scrape).
    pub(crate) fn events_received_absolute(&self, total: u64) {
        self.events_received.absolute(total);
    }

    /// The store's resourceVersion (truncated to 15 digits like the apiserver, to stay exact in an f64).
    pub(crate) fn set_resource_version(&self, rv: u64) {
        self.resource_version.set((rv % RV_MODULUS) as f64);
    }

    /// A consistent read decided: `fallback` when it went upstream, `success` when it was answered.
    pub fn consistent_read(&self, success: bool, fallback: bool) {
        self.consistent_reads[usize::from(success)][usize::from(fallback)].increment(1);
    }

    /// Time a consistent read waited for the store to become fresh.
    pub fn read_wait(&self, waited: Duration) {
        self.read_wait.record(waited.as_secs_f64());
    }

    /// A streaming list (sendInitialEvents) reached its initial-events-end bookmark after `elapsed`.
    pub(crate) fn watch_list_done(&self, elapsed: Duration) {
        self.watch_list_duration.record(elapsed.as_secs_f64());
    }

    /// A watcher opened (+1) or closed (-1).
    pub fn watchers(&self, delta: i64) {
        self.watchers.increment(delta as f64);
    }

    /// A watcher closed because it could not keep up.
    pub fn slow_watcher_closed(&self) {
        self.slow_watchers_closed.increment(1);
        self.terminated_watchers.increment(1);
    }
}

/// Counts one open watcher of a resource in `kache_watchers` for as long as it lives.
#[derive(Debug)]
pub struct WatcherGuard(Arc<ResourceMetrics>);

impl WatcherGuard {
    pub fn new<R: AsResource + ?Sized>(metrics: &Metrics, r: &R) -> Self {
        let m = metrics.resource(r);
        m.watchers(1);
        Self(m)
    }

    /// The watcher is being closed because it could not keep up
    /// (`kache_slow_watchers_closed_total`, `apiserver_terminated_watchers_total`).
    pub(crate) fn slow_closed(&self) {
        self.0.slow_watcher_closed();
    }
}

impl Drop for WatcherGuard {
    fn drop(&mut self) {
        self.0.watchers(-1);
    }
}

/// The apiserver truncates resourceVersions to their 15 least significant digits (below 2^53).
const RV_MODULUS: u64 = 1_000_000_000_000_000;

/// A handle from a copy-on-write map, creating it on first use.
fn cached<K, V>(map: &ArcSwap<HashMap<K, V>>, key: K, make: impl FnOnce() -> V) -> V
where
    K: std::hash::Hash + Eq + Copy,
    V: Clone,
{
    if let Some(v) = map.load().get(&key) {
        return v.clone();
    }
    let value = make();
    map.rcu(|m| {
        let mut m = HashMap::clone(m);
        m.entry(key).or_insert_with(|| value.clone());
        m
    });
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Gvr;

    #[test]
    fn one_handle_per_resource_whatever_the_spelling() {
        let metrics = Metrics::new();
        let a = metrics.resource(&Gvr::new("apps", "v1", "handles-test"));
        let b = metrics.resource("handles-test.apps");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!((a.group(), a.resource()), ("apps", "handles-test"));
    }

    #[test]
    fn the_number_of_resources_is_bounded() {
        let interner = Interner::new(&Recorder::new(), 2);
        let a = interner.get("bound.example.com", "a");
        let b = interner.get("bound.example.com", "b");
        let c = interner.get("bound.example.com", "c");
        assert_eq!((a.resource(), b.resource(), c.resource()), ("a", "b", OTHER_RESOURCE));
        assert!(Arc::ptr_eq(&a, &interner.get("bound.example.com", "a")), "known resources stay known");
        assert_eq!(interner.all().len(), 2);
    }

    proptest::proptest! {
        /// Whatever a client puts in a URL, the label values are Kubernetes names or `other`, and the set
        /// stays bounded.
        #[test]
        fn any_name_maps_to_a_bounded_valid_label(
            names in proptest::collection::vec(proptest::prop_oneof!["[a-z]{1,8}(\\.[a-z]{1,8})?", ".{0,40}"], 1..20)
        ) {
            let interner = Interner::new(&Recorder::new(), 4);
            for name in &names {
                let m = interner.get(name.as_str().group(), name.as_str().resource());
                proptest::prop_assert!(labels::valid_name(m.group()) && labels::valid_name(m.resource()));
            }
            proptest::prop_assert!(interner.all().len() <= 4);
        }
    }

    #[test]
    fn invalid_names_share_the_other_series() {
        let metrics = Metrics::new();
        let a = metrics.resource("Bad\"Name");
        let b = metrics.resource("pods\n.x");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.resource(), OTHER_RESOURCE);
    }

    #[test]
    fn series_exist_at_zero_then_count() {
        let handle = Metrics::new();
        let m = handle.resource("zero-test.example.com");
        let text = handle.render();
        let gr = "group=\"example.com\",resource=\"zero-test\"";
        assert!(text.contains(&format!("apiserver_cache_list_total{{{gr},index=\"\"}} 0")), "{text}");
        assert!(text.contains(&format!("kache_watchers{{{gr}}} 0")), "{text}");
        m.list_served(10, 3);
        m.list_served(5, 5);
        m.watchers(1);
        m.watchers(1);
        m.watchers(-1);
        m.consistent_read(true, true);
        m.set_resource_version(1_234_567_890_123_456_789);
        let text = handle.render();
        assert!(text.contains(&format!("apiserver_cache_list_total{{{gr},index=\"\"}} 2")), "{text}");
        assert!(text.contains(&format!("apiserver_cache_list_fetched_objects_total{{{gr},index=\"\"}} 15")));
        assert!(text.contains(&format!("apiserver_cache_list_returned_objects_total{{{gr}}} 8")));
        assert!(text.contains(&format!("kache_watchers{{{gr}}} 1")), "{text}");
        assert!(text.contains(&format!(
            "apiserver_watch_cache_consistent_read_total{{{gr},success=\"true\",fallback=\"true\"}} 1"
        )));
        assert!(text.contains(&format!(
            "apiserver_watch_cache_consistent_read_total{{{gr},success=\"true\",fallback=\"false\"}} 0"
        )));
        assert!(text.contains(&format!("apiserver_watch_cache_resource_version{{{gr}}} 567890123456789")));
    }

    #[test]
    fn watcher_guards_count_open_watchers() {
        let handle = Metrics::new();
        let series = "kache_watchers{group=\"\",resource=\"guard-test\"}";
        let value =
            |text: &str| text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok());
        let a = WatcherGuard::new(&handle, "guard-test");
        let b = WatcherGuard::new(&handle, "guard-test");
        assert_eq!(value(&handle.render()), Some(2.0));
        drop(a);
        assert_eq!(value(&handle.render()), Some(1.0));
        drop(b);
        assert_eq!(value(&handle.render()), Some(0.0));
    }

    #[test]
    fn requests_are_labelled_by_verb_code_and_source() {
        let handle = Metrics::new();
        let m = handle.resource("req-test");
        m.request("list", 200, Source::Memory, Duration::from_millis(2));
        m.request("LIST", 200, Source::Memory, Duration::from_millis(2));
        m.request("frobnicate", 999, Source::Upstream, Duration::from_millis(30));
        let text = handle.render();
        let line = "apiserver_request_total{group=\"\",resource=\"req-test\",verb=\"LIST\",code=\"200\",source=\"memory\"} 2";
        assert!(text.contains(line), "{text}");
        let other = "apiserver_request_total{group=\"\",resource=\"req-test\",verb=\"other\",code=\"0\",source=\"upstream\"} 1";
        assert!(text.contains(other), "{text}");
        let bucket = "apiserver_request_duration_seconds_bucket{group=\"\",resource=\"req-test\",verb=\"LIST\",source=\"memory\",le=\"0.0025\"} 2";
        assert!(text.contains(bucket), "{text}");
    }
}
