//! Every metric kache exports: its name, type, labels and meaning, in one table.
//!
//! Names reuse the kube-apiserver's where the meaning is the same (`apiserver_*`, from
//! `k8s.io/apiserver/pkg/endpoints/metrics` and `pkg/storage/cacher/metrics`), so dashboards written for the
//! apiserver's watch cache work against kache. Labels are a subset of the apiserver's (kache does not track
//! `version`, `scope`, `subresource`, `dry_run` or `component`) plus `source` on request metrics.
//!
//! [`ALL`] drives the `# HELP` lines, histogram buckets, the docs/metrics.md table and the dashboard test: a
//! metric that is not in it does not exist.

/// The kind of a metric, as Prometheus types it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }
}

/// One exported metric.
#[derive(Clone, Copy, Debug)]
pub struct MetricDef {
    pub name: &'static str,
    pub kind: MetricKind,
    pub labels: &'static [&'static str],
    pub help: &'static str,
    /// Histogram bucket upper bounds (empty for counters and gauges).
    pub buckets: &'static [f64],
}

// --- request path (apiserver names) ---
pub(crate) const REQUEST_TOTAL: &str = "apiserver_request_total";
pub(crate) const REQUEST_DURATION_SECONDS: &str = "apiserver_request_duration_seconds";
// --- watch cache (apiserver names) ---
pub(crate) const CACHE_LIST_TOTAL: &str = "apiserver_cache_list_total";
pub(crate) const CACHE_LIST_FETCHED_OBJECTS_TOTAL: &str = "apiserver_cache_list_fetched_objects_total";
pub(crate) const CACHE_LIST_RETURNED_OBJECTS_TOTAL: &str = "apiserver_cache_list_returned_objects_total";
pub(crate) const WATCH_CACHE_EVENTS_RECEIVED_TOTAL: &str = "apiserver_watch_cache_events_received_total";
pub(crate) const WATCH_CACHE_RESOURCE_VERSION: &str = "apiserver_watch_cache_resource_version";
pub(crate) const WATCH_CACHE_READ_WAIT_SECONDS: &str = "apiserver_watch_cache_read_wait_seconds";
pub(crate) const WATCH_CACHE_CONSISTENT_READ_TOTAL: &str = "apiserver_watch_cache_consistent_read_total";
pub(crate) const WATCH_LIST_DURATION_SECONDS: &str = "apiserver_watch_list_duration_seconds";
pub(crate) const TERMINATED_WATCHERS_TOTAL: &str = "apiserver_terminated_watchers_total";
// --- store (kache) ---
pub(crate) const STORE_OBJECTS: &str = "kache_store_objects";
pub(crate) const STORE_BYTES: &str = "kache_store_bytes";
pub(crate) const HISTORY_EVENTS: &str = "kache_history_events";
pub(crate) const HISTORY_SPAN_SECONDS: &str = "kache_history_span_seconds";
pub(crate) const RETAINED_SNAPSHOTS: &str = "kache_retained_snapshots";
// --- reflectors (kache) ---
pub(crate) const RESOURCE_SYNCED: &str = "kache_resource_synced";
pub(crate) const REFLECTOR_STATE: &str = "kache_reflector_state";
pub(crate) const SECONDS_SINCE_LAST_EVENT: &str = "kache_seconds_since_last_event";
pub(crate) const RELISTS_TOTAL: &str = "kache_relists_total";
pub(crate) const WATCH_RESTARTS_TOTAL: &str = "kache_watch_restarts_total";
pub(crate) const BAD_FRAMES_TOTAL: &str = "kache_upstream_bad_frames_total";
pub(crate) const REFLECTOR_RESTARTS_TOTAL: &str = "kache_reflector_restarts_total";
pub(crate) const UPSTREAM_ERRORS_TOTAL: &str = "kache_upstream_errors_total";
// --- watch fan-out (kache) ---
pub const WATCHERS: &str = "kache_watchers";
pub(crate) const SLOW_WATCHERS_CLOSED_TOTAL: &str = "kache_slow_watchers_closed_total";
pub(crate) const WATCH_EVENTS_SENT_TOTAL: &str = "kache_watch_events_sent_total";
pub(crate) const WATCH_BOOKMARKS_SENT_TOTAL: &str = "kache_watch_bookmarks_sent_total";
pub(crate) const WATCH_STREAMS_STARTED_TOTAL: &str = "kache_watch_streams_started_total";
pub(crate) const WATCH_STREAMS_OPEN: &str = "kache_watch_streams_open";
pub(crate) const WATCH_STREAMS_ENDED_TOTAL: &str = "kache_watch_streams_ended_total";
pub(crate) const WATCH_INDEXED_WATCHERS: &str = "kache_watch_indexed_watchers";
pub(crate) const WATCH_INDEX_RINGS: &str = "kache_watch_index_rings";
pub(crate) const WATCH_INDEX_FULL_TOTAL: &str = "kache_watch_index_full_total";
// --- consistency, forwarding, auth, limits, encodings (kache) ---
pub(crate) const FRESHNESS_PROBES_TOTAL: &str = "kache_freshness_probes_total";
pub(crate) const FRESHNESS_UPSTREAM_PROBES_TOTAL: &str = "kache_freshness_upstream_probes_total";
pub(crate) const ETCD_REQUESTS_TOTAL: &str = "kache_etcd_requests_total";
pub(crate) const ETCD_PROVEN_TOTAL: &str = "kache_etcd_proven_total";
pub(crate) const ETCD_FALLBACKS_TOTAL: &str = "kache_etcd_fallbacks_total";
pub(crate) const ETCD_PROGRESS_SECONDS: &str = "kache_etcd_progress_seconds";
pub(crate) const ETCD_PROGRESS_TOTAL: &str = "kache_etcd_progress_total";
pub(crate) const ETCD_WATCHES: &str = "kache_etcd_watches";
pub(crate) const ETCD_WATCH_RESTARTS_TOTAL: &str = "kache_etcd_watch_restarts_total";
pub(crate) const FRESHNESS_WAITS_TOTAL: &str = "kache_freshness_waits_total";
pub(crate) const FRESHNESS_AHEAD_READS_TOTAL: &str = "kache_freshness_ahead_reads_total";
pub(crate) const FRESHNESS_PROOFS_TOTAL: &str = "kache_freshness_proofs_total";
pub(crate) const FRESHNESS_CENSUSES_TOTAL: &str = "kache_freshness_censuses_total";
pub(crate) const FRESHNESS_UPSTREAM_CENSUSES_TOTAL: &str = "kache_freshness_upstream_censuses_total";
pub(crate) const FRESHNESS_CENSUS_BYTES: &str = "kache_freshness_census_bytes";
pub(crate) const TOO_LARGE_RESOURCE_VERSION_TOTAL: &str = "kache_too_large_resource_version_total";
pub(crate) const FORWARDED_REQUESTS_TOTAL: &str = "kache_forwarded_requests_total";
pub(crate) const FORWARD_READ_AHEAD_BYTES: &str = "kache_forward_read_ahead_bytes";
pub(crate) const AUTH_CACHE_TOTAL: &str = "kache_auth_cache_total";
pub(crate) const IMPERSONATION_TOTAL: &str = "kache_impersonation_total";
pub(crate) const LIMIT_REJECTIONS_TOTAL: &str = "kache_limit_rejections_total";
pub(crate) const LIMIT_TRACKED_CLIENTS: &str = "kache_limit_tracked_clients";
pub(crate) const REFUSALS_TOTAL: &str = "kache_refusals_total";
pub(crate) const ENCODING_TOTAL: &str = "kache_encoding_total";
pub(crate) const TABLE_ROWS_TOTAL: &str = "kache_table_rows_total";
// --- filtered mirrors (kache) ---
pub(crate) const MIRROR_SELECTOR: &str = "kache_mirror_selector";
pub(crate) const MIRROR_UNCOVERED_TOTAL: &str = "kache_mirror_uncovered_total";
pub(crate) const TABLE_ROW_CACHE_BYTES: &str = "kache_table_row_cache_bytes";
pub(crate) const TABLE_GENERIC_RESOURCES: &str = "kache_table_generic_resources";
// --- reads from memory: admission, compression, the gzip cache (kache) ---
pub(crate) const MEMORY_READS_IN_FLIGHT: &str = "kache_memory_reads_in_flight";
pub(crate) const MEMORY_READ_BYTES_IN_FLIGHT: &str = "kache_memory_read_bytes_in_flight";
pub(crate) const GZIP_CACHE_BYTES: &str = "kache_gzip_cache_bytes";
pub(crate) const GZIP_CACHE_ENTRIES: &str = "kache_gzip_cache_entries";
pub(crate) const GZIP_CACHE_TOTAL: &str = "kache_gzip_cache_total";
pub(crate) const GZIP_CACHE_EVICTIONS_TOTAL: &str = "kache_gzip_cache_evictions_total";
pub(crate) const LIST_BODY_CACHE_BYTES: &str = "kache_list_body_cache_bytes";
pub(crate) const LIST_BODY_CACHE_ENTRIES: &str = "kache_list_body_cache_entries";
pub(crate) const LIST_BODY_CACHE_TOTAL: &str = "kache_list_body_cache_total";
pub(crate) const LIST_BODY_CACHE_EVICTIONS_TOTAL: &str = "kache_list_body_cache_evictions_total";
pub(crate) const COMPRESSIONS_IN_FLIGHT: &str = "kache_compressions_in_flight";
pub(crate) const COMPRESSION_SECONDS: &str = "kache_compression_seconds";
pub(crate) const HEAVY_BODIES_WAITING: &str = "kache_heavy_bodies_waiting";
pub(crate) const HEAVY_BODIES_PRODUCING: &str = "kache_heavy_bodies_producing";
pub(crate) const HEAVY_BODY_THREADS: &str = "kache_heavy_body_threads";
// --- protobuf served from memory (kache) ---
pub(crate) const PROTOBUF_BYTES: &str = "kache_protobuf_bytes";
pub(crate) const PROTOBUF_TRANSCODE_FAILURES_TOTAL: &str = "kache_protobuf_transcode_failures_total";
// --- the process (kache) ---
pub(crate) const HUGE_PAGES: &str = "kache_huge_pages";
pub(crate) const HEAP_COLLECTS_TOTAL: &str = "kache_heap_collects_total";
pub(crate) const HEAP_COLLECT_SECONDS: &str = "kache_heap_collect_seconds";

/// `apiserver_request_duration_seconds` buckets, as the apiserver's (SLO-oriented, 5 ms to 60 s), with three
/// sub-5 ms buckets in front because memory-served reads are that fast and would otherwise all land in one.
const REQUEST_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0,
    6.0, 8.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];
/// `apiserver_watch_cache_read_wait_seconds` buckets, exactly the apiserver's.
const READ_WAIT_BUCKETS: &[f64] = &[0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0];
/// `apiserver_watch_list_duration_seconds` buckets, the apiserver's with a 10 ms bucket in front.
const WATCH_LIST_BUCKETS: &[f64] =
    &[0.01, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0];

/// `kache_compression_seconds` buckets: a namespace's list compresses in milliseconds, 100k pods in seconds.
const COMPRESSION_BUCKETS: &[f64] = &[0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

const GR: &[&str] = &["group", "resource"];

const fn counter(name: &'static str, labels: &'static [&'static str], help: &'static str) -> MetricDef {
    MetricDef { name, kind: MetricKind::Counter, labels, help, buckets: &[] }
}
const fn gauge(name: &'static str, labels: &'static [&'static str], help: &'static str) -> MetricDef {
    MetricDef { name, kind: MetricKind::Gauge, labels, help, buckets: &[] }
}
const fn histogram(
    name: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
    buckets: &'static [f64],
) -> MetricDef {
    MetricDef { name, kind: MetricKind::Histogram, labels, help, buckets }
}

/// Every metric kache exports.
pub const ALL: &[MetricDef] = &[
    counter(
        REQUEST_TOTAL,
        &["verb", "group", "resource", "code", "source"],
        "Requests answered, by verb, API group, resource, HTTP status code and source (memory: served by kache; upstream: forwarded).",
    ),
    histogram(
        REQUEST_DURATION_SECONDS,
        &["verb", "group", "resource", "source"],
        "Response latency in seconds, by verb, API group, resource and source (memory|upstream). For WATCH, the time until the response starts.",
        REQUEST_BUCKETS,
    ),
    counter(
        CACHE_LIST_TOTAL,
        &["group", "resource", "index"],
        "LIST requests served from memory (index is always empty: kache scans snapshots).",
    ),
    counter(
        CACHE_LIST_FETCHED_OBJECTS_TOTAL,
        &["group", "resource", "index"],
        "Objects read from memory in the course of serving LIST requests.",
    ),
    counter(CACHE_LIST_RETURNED_OBJECTS_TOTAL, GR, "Objects returned by LIST requests served from memory."),
    counter(
        WATCH_CACHE_EVENTS_RECEIVED_TOTAL,
        GR,
        "Watch events (and bookmarks) received from the upstream and applied to the store.",
    ),
    gauge(
        WATCH_CACHE_RESOURCE_VERSION,
        GR,
        "Current resourceVersion of the store, truncated to its 15 least significant digits.",
    ),
    histogram(
        WATCH_CACHE_READ_WAIT_SECONDS,
        GR,
        "Time consistent reads spent waiting for the store to become as fresh as the upstream.",
        READ_WAIT_BUCKETS,
    ),
    counter(
        WATCH_CACHE_CONSISTENT_READ_TOTAL,
        &["group", "resource", "success", "fallback"],
        "Consistent reads (resourceVersion unset): fallback=true when the store could not be proven fresh in time and the read went upstream.",
    ),
    histogram(
        WATCH_LIST_DURATION_SECONDS,
        GR,
        "Time from a streaming list's (sendInitialEvents=true) start to its initial-events-end bookmark.",
        WATCH_LIST_BUCKETS,
    ),
    counter(
        TERMINATED_WATCHERS_TOTAL,
        GR,
        "Watchers closed because they could not keep up (same events as kache_slow_watchers_closed_total).",
    ),
    gauge(STORE_OBJECTS, GR, "Objects in the store's current snapshot."),
    gauge(
        STORE_BYTES,
        &["group", "resource", "kind"],
        "Estimated bytes held by the store: kind=live (current objects), history (kept alive only by the event ring), snapshots (kept alive only by retained snapshots) or index.",
    ),
    gauge(HISTORY_EVENTS, GR, "Events in the store's history ring (how far back watches can resume)."),
    gauge(HISTORY_SPAN_SECONDS, GR, "Time between the oldest and the newest event in the history ring."),
    gauge(RETAINED_SNAPSHOTS, GR, "Past snapshots retained for exact reads and continue tokens."),
    gauge(
        RESOURCE_SYNCED,
        &["group", "resource", "configured"],
        "1 when the resource's store holds a complete state and serves reads, else 0.",
    ),
    gauge(
        REFLECTOR_STATE,
        &["group", "resource", "state"],
        "1 for the state the resource's reflector is in (starting, listing, watching, backoff, restarting, ...), 0 for the others.",
    ),
    gauge(
        SECONDS_SINCE_LAST_EVENT,
        GR,
        "Seconds since the reflector last received an event or bookmark (absent before the first).",
    ),
    counter(
        RELISTS_TOTAL,
        GR,
        "Full re-lists after the initial sync (410 Gone or a stream that could not resume).",
    ),
    counter(
        WATCH_RESTARTS_TOTAL,
        GR,
        "Upstream watches re-opened from the last resourceVersion (closed, stalled or broken streams).",
    ),
    counter(
        BAD_FRAMES_TOTAL,
        GR,
        "Upstream bytes that could not be used (invalid JSON, objects without metadata, truncated or oversized frames); each broken watch stream is re-opened after a backoff.",
    ),
    counter(
        REFLECTOR_RESTARTS_TOTAL,
        GR,
        "Reflector tasks restarted after they panicked or ended; until the restarted one has resynced, the resource is not ready and its reads are forwarded.",
    ),
    counter(
        UPSTREAM_ERRORS_TOTAL,
        &["reason"],
        "Errors talking to the upstream apiserver, by reason (connect, timeout, tls, throttled, gone, server, client, decode, stream, other).",
    ),
    gauge(WATCHERS, GR, "Open watch streams served from memory."),
    counter(
        SLOW_WATCHERS_CLOSED_TOTAL,
        GR,
        "Watchers closed because their buffer stayed full past the send budget (the client re-watches).",
    ),
    counter(
        WATCH_EVENTS_SENT_TOTAL,
        &[],
        "ADDED/MODIFIED/DELETED events written to watch clients (one per event per watcher).",
    ),
    counter(WATCH_BOOKMARKS_SENT_TOTAL, &[], "BOOKMARK events written to watch clients."),
    counter(WATCH_STREAMS_STARTED_TOTAL, &[], "Watch streams opened from memory."),
    gauge(WATCH_STREAMS_OPEN, &[], "Watch streams open now, all resources together."),
    counter(
        WATCH_STREAMS_ENDED_TOTAL,
        &["reason"],
        "Watches ended or refused by kache: slow (fell behind, closed), reset (store rebuilt by a relist), expired (410: resourceVersion too old), too_large (504: store did not reach the resourceVersion in time), rejected (watcher limit).",
    ),
    gauge(
        WATCH_INDEXED_WATCHERS,
        &["index"],
        "Watchers on an index ring by what their selection pins: name, field (pods' spec.nodeName) or namespace; woken only by events whose object or previous version has their value.",
    ),
    gauge(
        WATCH_INDEX_RINGS,
        &[],
        "Index rings (one per pinned value with watchers, all resources together).",
    ),
    counter(
        WATCH_INDEX_FULL_TOTAL,
        &[],
        "Watchers that pinned an index value but got the shared ring because their resource's index rings were at their slot bound.",
    ),
    counter(
        FRESHNESS_PROBES_TOTAL,
        &["outcome"],
        "Consistent-read freshness checks by outcome: fresh (served from memory), lagging (probed; the store did not catch up, forwarded at once or after a wait), quiet (store behind the upstream's known revision with no advance expected soon: forwarded at once without a probe), small (a get or small list, for which a probe costs about what forwarding costs: forwarded at once without a probe), slow (the upstream answered a probe, census or proof so slowly that the read reached its cutoff, its deadline plus the latency bound: forwarded then) or probe_error.",
    ),
    counter(
        TOO_LARGE_RESOURCE_VERSION_TOTAL,
        &[],
        "504 \"Too large resource version\" answers kache gave itself, to reads and watches (the upstream's own 504s, relayed, are not counted): only when neither kache's store nor the upstream reached the requested resourceVersion within the apiserver's 3 s. Stays 0 under foreign writes.",
    ),
    counter(
        FRESHNESS_WAITS_TOTAL,
        &["outcome"],
        "Reads that waited for their store to advance because an advance was expected sooner than forwarding would take: reached (served from memory) or expired (then forwarded).",
    ),
    counter(
        FRESHNESS_PROOFS_TOTAL,
        &["outcome"],
        "Proof watches opened upstream to prove a quiet resource fresh (a short watch whose first frame is the pre-deadline bookmark), for waiting readers or in the background for a quiet store behind the upstream (at most every 10 s per resource): proven or failed (an event, an error or no bookmark came first).",
    ),
    counter(
        FRESHNESS_CENSUSES_TOTAL,
        &["outcome"],
        "Big consistent lists, namespace lists, pages and WatchLists of a store behind the upstream decided by a census (a consistent metadata-only list of what the read returns compared with the store): served (the store held the upstream's objects, or reached the census's revision; served from memory), behind (writes the store lacked, still lacking after 100 ms; forwarded), failed (forwarded) or held (served from the snapshot an earlier census of the whole resource matched, no event and no newer upstream revision since: no census of its own).",
    ),
    counter(
        FRESHNESS_UPSTREAM_CENSUSES_TOTAL,
        &[],
        "Censuses sent upstream (metadata-only consistent lists of a whole resource, coalesced: one in flight per resource; or of one namespace or page, one per read).",
    ),
    gauge(
        FRESHNESS_CENSUS_BYTES,
        &[],
        "Bytes the censuses in flight hold to read their answers: a protobuf census is compared as it arrives and holds at most one object's metadata (3 MiB at most, the apiserver's request body limit).",
    ),
    counter(
        FRESHNESS_AHEAD_READS_TOTAL,
        &["outcome"],
        "Reads at a resourceVersion ahead of their store (Exact, continue tokens, NotOlderThan) that the upstream had reached: reached (the store caught up; served from memory) or forwarded (instead of a 504). A continued page matched by a census counts in kache_freshness_censuses_total instead.",
    ),
    counter(
        FRESHNESS_UPSTREAM_PROBES_TOTAL,
        &[],
        "Revision probes sent upstream for consistent reads (coalesced: one in flight per resource).",
    ),
    counter(
        ETCD_REQUESTS_TOTAL,
        &["kind"],
        "Requests to etcd by the freshness oracle (--etcd-endpoints): revision (a linearizable read of one key, coalesced across readers), progress (a watch progress request, coalesced per resource), verify (a prefix checked against the store) and watch (prefix watches opened).",
    ),
    counter(
        ETCD_PROVEN_TOTAL,
        &[],
        "Consistent reads the etcd oracle proved fresh (served from memory at etcd's revision).",
    ),
    counter(
        ETCD_FALLBACKS_TOTAL,
        &["reason"],
        "Consistent reads the etcd oracle could not prove, which went the apiserver's way: unknown_prefix, not_ready (the prefix watch is starting, down, cancelled or compacted, or its prefix does not match the store), unreachable (etcd's revision could not be read), progress_timeout, store_behind (the store had not applied etcd's last write to the prefix within 100 ms) or not_applied.",
    ),
    gauge(
        ETCD_PROGRESS_SECONDS,
        &[],
        "The oracle's latency: the recent mean (each read counts for 1/8) of the time from asking etcd for its revision to the prefix watch's progress reaching it.",
    ),
    counter(
        ETCD_PROGRESS_TOTAL,
        &[],
        "Reads whose prefix watch reached etcd's revision (the reads kache_etcd_progress_seconds averages).",
    ),
    gauge(
        ETCD_WATCHES,
        &["state"],
        "The etcd oracle's prefix watches (one per resource read consistently) by state: starting, ready, down (etcd unreachable, cancelled or compacted: retried every second) or layout (the prefix does not match the store, or cannot be checked yet: retried every 10 s).",
    ),
    counter(
        ETCD_WATCH_RESTARTS_TOTAL,
        &[],
        "Prefix watch attempts of the etcd oracle that ended (etcd down, the watch cancelled or compacted, a key outside the resource's layout, a prefix that does not match the store).",
    ),
    counter(
        FORWARDED_REQUESTS_TOTAL,
        &["kind", "code"],
        "Requests passed through to the upstream, by kind (read, write, upgrade, other) and upstream status code (0: no response).",
    ),
    gauge(
        FORWARD_READ_AHEAD_BYTES,
        &[],
        "Bytes of forwarded response bodies read from the upstream ahead of their clients (at most 256 KiB per response; the forwarder's in-flight bound limits the responses).",
    ),
    counter(
        AUTH_CACHE_TOTAL,
        &["result", "decision"],
        "Authentication/authorization decisions by cache result (hit|miss) and decision (allow|deny|error).",
    ),
    counter(
        IMPERSONATION_TOTAL,
        &["decision"],
        "Requests carrying Impersonate-* headers by outcome: allow (acting as the impersonated user), deny (403) or error (malformed headers, failed review).",
    ),
    counter(
        LIMIT_REJECTIONS_TOTAL,
        &["limit"],
        "Requests or connections refused because a configured limit was reached, by limit.",
    ),
    gauge(
        LIMIT_TRACKED_CLIENTS,
        &["limit"],
        "Clients whose rate a per-client limit tracks, by limit (requests, token_reviews, access_reviews); at \
         10000, idle clients are dropped first and a new client past the bound is not rate-limited.",
    ),
    counter(
        REFUSALS_TOTAL,
        &["reason"],
        "Reads kache answered 429 or 504 itself instead of serving or forwarding them, by reason: too_large_resource_version (504 to a get or list, the upstream has not reached the revision either; a watch's is its ERROR event, counted in kache_too_large_resource_version_total), consistent_read_fallback (429, only with --consistent-read-fallback=429), read_bytes (429, the read byte budget), watchers (429, the watcher limit).",
    ),
    counter(
        ENCODING_TOTAL,
        &["encoding", "served"],
        "Responses by content encoding (json, protobuf, cbor, other) and where they came from (memory|forwarded).",
    ),
    gauge(
        MIRROR_SELECTOR,
        &["group", "resource", "selector"],
        "1 for each resource mirrored filtered (--resource-selector), with its selector; resources mirrored whole have no series.",
    ),
    counter(
        MIRROR_UNCOVERED_TOTAL,
        &["group", "resource", "verb"],
        "Reads of a filtered mirror forwarded because its selection does not cover them (get, list, watch).",
    ),
    counter(
        TABLE_ROWS_TOTAL,
        &["result"],
        "Table rows (kubectl get) looked up in the row cache: hit, or miss (printed from the object).",
    ),
    gauge(
        TABLE_ROW_CACHE_BYTES,
        &[],
        "Bytes held by cached Table rows (one per object version printed, bounded).",
    ),
    gauge(
        TABLE_GENERIC_RESOURCES,
        &[],
        "Resources whose Tables are printed with the generic columns (Name, Created At) learned from the upstream's own answer (bounded: 4096).",
    ),
    gauge(
        MEMORY_READS_IN_FLIGHT,
        &[],
        "Lists served from memory whose response body is still being sent (admitted against the read byte budget).",
    ),
    gauge(
        MEMORY_READ_BYTES_IN_FLIGHT,
        &[],
        "Uncompressed bytes of the memory-served lists in flight, charged at admission and released when the body ends; over --max-read-bytes-inflight a list gets 429 (limit=read_bytes).",
    ),
    gauge(GZIP_CACHE_BYTES, &[], "Compressed bytes held by the gzip cache of full lists."),
    gauge(GZIP_CACHE_ENTRIES, &[], "Entries (resource, namespace, view) in the gzip cache of full lists."),
    counter(
        GZIP_CACHE_TOTAL,
        &["result"],
        "Compressed full lists asked of the gzip cache: hit (ready), coalesced (waited for another request's compression of the same snapshot), miss (compressed it), bypass (an older snapshot than the cached one, or than the newest its resource was listed at: compressed, not cached).",
    ),
    counter(
        GZIP_CACHE_EVICTIONS_TOTAL,
        &["reason"],
        "Entries dropped from the gzip cache: replaced (a newer snapshot of the key, or the resource listed at a newer snapshot), idle (unused for the idle time), size (over the byte or entry bound).",
    ),
    gauge(
        LIST_BODY_CACHE_BYTES,
        &[],
        "Uncompressed bytes held by the body cache of full lists (bounded: 96 MiB).",
    ),
    gauge(
        LIST_BODY_CACHE_ENTRIES,
        &[],
        "Entries (resource, namespace, view, encoding) in the body cache of full lists.",
    ),
    counter(
        LIST_BODY_CACHE_TOTAL,
        &["result"],
        "Uncompressed full lists looked up in the body cache: hit (sent from the cached body of the same snapshot), coalesced (waited for another list's assembly of the same snapshot), miss (assembled from the store; for the cache when another list of the same snapshot missed before it).",
    ),
    counter(
        LIST_BODY_CACHE_EVICTIONS_TOTAL,
        &["reason"],
        "Entries dropped from the body cache: replaced (a newer snapshot of the key, or the resource listed at a newer snapshot), idle (unused for the idle time), size (over the byte or entry bound).",
    ),
    gauge(
        COMPRESSIONS_IN_FLIGHT,
        &[],
        "Whole-list compressions for the gzip cache in progress (their batches run as heavy bodies do).",
    ),
    histogram(
        COMPRESSION_SECONDS,
        &[],
        "Time to compress one full list for the gzip cache, on the blocking pool.",
        COMPRESSION_BUCKETS,
    ),
    gauge(
        HEAVY_BODIES_WAITING,
        &[],
        "Heavy response bodies (pretty-printed or gzipped lists, gzip-cache compressions) waiting for a producer permit to make their next batch.",
    ),
    gauge(
        HEAVY_BODIES_PRODUCING,
        &[],
        "Heavy response body batches being produced on the producer threads (at most half the cores).",
    ),
    gauge(
        HEAVY_BODY_THREADS,
        &["priority"],
        "Heavy-body producer threads running: priority=lowered (their nice value raised by 10, so requests on the runtime workers preempt them) or normal (lowering failed, or not Linux).",
    ),
    gauge(
        PROTOBUF_BYTES,
        &[],
        "Protobuf message bytes held for protobuf clients: each stored object version's message (and metadata view), transcoded once on first use and freed with the version (bounded by what the store retains).",
    ),
    counter(
        PROTOBUF_TRANSCODE_FAILURES_TOTAL,
        GR,
        "Object versions that could not be transcoded to protobuf (counted once per version and view); the reads that needed them were forwarded.",
    ),
    gauge(
        HUGE_PAGES,
        &[],
        "1 while the kernel may back kache's heap with transparent huge pages, else 0 (--huge-pages: auto allows them once the stores and protobuf messages hold 256 MiB, and forbids them again below 128 MiB).",
    ),
    counter(
        HEAP_COLLECTS_TOTAL,
        &[],
        "Collections of a thread's heap as it went idle, returning the pages its freed blocks left empty to the OS (at most one per thread per --heap-collect-interval; process-wide).",
    ),
    gauge(
        HEAP_COLLECT_SECONDS,
        &[],
        "Seconds spent in those collections since the process started (cumulative; process-wide).",
    ),
];

/// The definition of a metric by name.
pub fn def(name: &str) -> Option<&'static MetricDef> {
    ALL.iter().find(|d| d.name == name)
}

/// The series names a metric produces in the text exposition (a histogram's `_bucket`, `_sum`, `_count`).
pub fn series_names(def: &MetricDef) -> Vec<String> {
    match def.kind {
        MetricKind::Histogram => {
            ["_bucket", "_sum", "_count"].iter().map(|s| format!("{}{s}", def.name)).collect()
        }
        _ => vec![def.name.to_owned()],
    }
}

/// The metrics table of docs/metrics.md: one row per metric (name, type, labels, meaning).
pub fn markdown_table() -> String {
    let mut out = String::from("| metric | type | labels | meaning |\n|---|---|---|---|\n");
    for d in ALL {
        let labels = if d.labels.is_empty() {
            "—".to_owned()
        } else {
            d.labels.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>().join(", ")
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            d.name,
            d.kind.as_str(),
            labels,
            d.help.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut seen = HashSet::new();
        for d in ALL {
            assert!(seen.insert(d.name), "duplicate metric {}", d.name);
            assert!(d.name.starts_with("kache_") || d.name.starts_with("apiserver_"), "{}", d.name);
            assert!(d.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{}", d.name);
            if d.kind == MetricKind::Counter {
                assert!(d.name.ends_with("_total"), "counter {} must end in _total", d.name);
            } else {
                assert!(!d.name.ends_with("_total"), "{} is not a counter", d.name);
            }
            assert!(!d.help.is_empty());
        }
    }

    #[test]
    fn histograms_have_sorted_buckets_and_others_none() {
        for d in ALL {
            match d.kind {
                MetricKind::Histogram => {
                    assert!(!d.buckets.is_empty(), "{}", d.name);
                    assert!(d.buckets.windows(2).all(|w| w[0] < w[1]), "{} buckets unsorted", d.name);
                }
                _ => assert!(d.buckets.is_empty(), "{}", d.name),
            }
        }
    }

    #[test]
    fn apiserver_names_keep_apiserver_label_names() {
        // Labels dashboards group by must be spelled as the apiserver spells them.
        for d in ALL.iter().filter(|d| d.name.starts_with("apiserver_")) {
            assert!(d.labels.contains(&"resource"), "{}", d.name);
            assert!(d.labels.contains(&"group"), "{}", d.name);
        }
        assert_eq!(def(WATCH_CACHE_CONSISTENT_READ_TOTAL).map(|d| d.labels.len()), Some(4));
        assert_eq!(
            series_names(def(REQUEST_DURATION_SECONDS).expect("defined")),
            [
                "apiserver_request_duration_seconds_bucket",
                "apiserver_request_duration_seconds_sum",
                "apiserver_request_duration_seconds_count"
            ]
        );
    }
}
