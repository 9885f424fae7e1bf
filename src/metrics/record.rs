//! One-line recording methods of [`Metrics`] for the rest of kache.
//!
//! `resource` arguments accept a [`Gvr`](crate::resource::Gvr), a [`ResourceInfo`](crate::resource::ResourceInfo)
//! or a group-resource string (`"pods"`, `"deployments.apps"`). Callers on very hot paths may keep the
//! `Arc<ResourceMetrics>` from [`Metrics::resource`] instead and call its methods.

use std::time::Duration;

use super::instance::Metrics;
use super::labels::{
    self, AsResource, AuthDecision, AuthResult, Encoding, ForwardKind, Limit, Refusal, Served, Source,
    UpstreamErrorReason,
};
use super::names::*;
use super::recorder::label;

// === impl Metrics (recording) ===

impl Metrics {
    /// A request answered (by memory or by the upstream): `apiserver_request_total` and
    /// `apiserver_request_duration_seconds`. `verb` is the apiserver's (`get`/`GET`, `list`, `watch`, ...).
    pub fn request<R: AsResource + ?Sized>(
        &self,
        verb: &str,
        resource: &R,
        code: u16,
        source: Source,
        elapsed: Duration,
    ) {
        self.with_resource(resource, |m| m.request(verb, code, source, elapsed));
    }

    /// A LIST served from memory: `fetched` objects scanned, `returned` objects in the response.
    pub fn list_served<R: AsResource + ?Sized>(&self, resource: &R, fetched: usize, returned: usize) {
        self.with_resource(resource, |m| m.list_served(fetched, returned));
    }

    /// A consistent read (resourceVersion unset) decided. `fallback`: it was not served from memory.
    /// `success`: the client got an answer (from memory, or from the upstream after the fallback).
    pub fn consistent_read<R: AsResource + ?Sized>(&self, resource: &R, success: bool, fallback: bool) {
        self.with_resource(resource, |m| m.consistent_read(success, fallback));
    }

    /// Time a consistent read waited for the store to become fresh.
    pub fn read_wait<R: AsResource + ?Sized>(&self, resource: &R, waited: Duration) {
        self.with_resource(resource, |m| m.read_wait(waited));
    }

    /// A streaming list (sendInitialEvents=true) sent its initial-events-end bookmark after `elapsed`.
    pub(crate) fn watch_list_done<R: AsResource + ?Sized>(&self, resource: &R, elapsed: Duration) {
        self.with_resource(resource, |m| m.watch_list_done(elapsed));
    }

    /// A watcher opened (`delta` = 1) or closed (`delta` = -1).
    pub fn watchers<R: AsResource + ?Sized>(&self, resource: &R, delta: i64) {
        self.with_resource(resource, |m| m.watchers(delta));
    }

    /// A watcher closed because it could not keep up (also counts `apiserver_terminated_watchers_total`).
    pub fn slow_watcher_closed<R: AsResource + ?Sized>(&self, resource: &R) {
        self.with_resource(resource, |m| m.slow_watcher_closed());
    }

    /// A request passed through to the upstream, with the upstream's status code (0: no response).
    pub fn forwarded(&self, kind: ForwardKind, code: u16) {
        let labels = vec![label("kind", kind.as_str()), label("code", labels::code(code))];
        self.counter(FORWARDED_REQUESTS_TOTAL, labels).increment(1);
    }

    /// The gauge of forwarded body bytes held ahead of clients (one handle, moved by every read-ahead pump).
    pub(crate) fn read_ahead_bytes(&self) -> metrics::Gauge {
        self.gauge(FORWARD_READ_AHEAD_BYTES, vec![])
    }

    /// An error talking to the upstream.
    pub(crate) fn upstream_error(&self, reason: UpstreamErrorReason) {
        self.counter(UPSTREAM_ERRORS_TOTAL, vec![label("reason", reason.as_str())]).increment(1);
    }

    /// An authentication/authorization decision, from the cache or not.
    pub(crate) fn auth_cache(&self, result: AuthResult, decision: AuthDecision) {
        let labels = vec![label("result", result.as_str()), label("decision", decision.as_str())];
        self.counter(AUTH_CACHE_TOTAL, labels).increment(1);
    }

    /// The outcome of a request's impersonation (its `Impersonate-*` headers).
    pub fn impersonation(&self, decision: AuthDecision) {
        self.counter(IMPERSONATION_TOTAL, vec![label("decision", decision.as_str())]).increment(1);
    }

    /// A request or connection refused by a limit.
    pub(crate) fn limit_rejected(&self, limit: Limit) {
        self.counter(LIMIT_REJECTIONS_TOTAL, vec![label("limit", limit.as_str())]).increment(1);
    }

    /// How many clients a per-client rate limit tracks (its map is bounded).
    pub(crate) fn limit_tracked(&self, limit: Limit, clients: usize) {
        self.gauge(LIMIT_TRACKED_CLIENTS, vec![label("limit", limit.as_str())]).set(clients as f64);
    }

    /// A read kache refused itself (429 or 504), by reason.
    pub(crate) fn refused(&self, why: Refusal) {
        self.counter(REFUSALS_TOTAL, vec![label("reason", why.as_str())]).increment(1);
    }

    /// A response's encoding and where it came from.
    pub fn encoding(&self, encoding: Encoding, served: Served) {
        let labels = vec![label("encoding", encoding.as_str()), label("served", served.as_str())];
        self.counter(ENCODING_TOTAL, labels).increment(1);
    }

    /// A filtered mirror and its selector (`kache_mirror_selector`, 1 while it is configured); its
    /// `kache_mirror_uncovered_total` series exist (at zero) from then on.
    pub(crate) fn mirror_selector<R: AsResource + ?Sized>(&self, resource: &R, selector: &str) {
        self.with_resource(resource, |m| {
            let mut labels = m.labels(&[]);
            labels.push(metrics::Label::new("selector", selector.to_owned()));
            self.gauge(MIRROR_SELECTOR, labels).set(1.0);
            for verb in ["get", "list", "watch"] {
                self.counter(MIRROR_UNCOVERED_TOTAL, m.labels(&[("verb", verb)])).increment(0);
            }
        });
    }

    /// A read of a filtered mirror forwarded because the mirror's selection does not cover it; `verb` is one of
    /// `get`, `list`, `watch`.
    pub(crate) fn mirror_uncovered<R: AsResource + ?Sized>(&self, resource: &R, verb: &'static str) {
        self.with_resource(resource, |m| {
            self.counter(MIRROR_UNCOVERED_TOTAL, m.labels(&[("verb", verb)])).increment(1)
        });
    }

    /// An object version that could not be transcoded to protobuf (the read was forwarded).
    pub(crate) fn protobuf_transcode_failed<R: AsResource + ?Sized>(&self, resource: &R) {
        self.with_resource(resource, |m| m.protobuf_failures.increment(1));
    }

    /// Registers every series of the fixed label sets at zero, so a fresh kache already exports every metric
    /// name its dashboards use. Called by [`install`](super::install); cheap to repeat.
    pub(crate) fn register_fixed_series(&self) {
        for result in ["hit", "miss"] {
            self.counter(TABLE_ROWS_TOTAL, vec![label("result", result)]).increment(0);
        }
        self.gauge(TABLE_ROW_CACHE_BYTES, Vec::new()).increment(0.0);
        self.gauge(PROTOBUF_BYTES, Vec::new()).increment(0.0);
        self.gauge(HUGE_PAGES, Vec::new()).increment(0.0);
        self.counter(HEAP_COLLECTS_TOTAL, Vec::new()).increment(0);
        self.gauge(HEAP_COLLECT_SECONDS, Vec::new()).increment(0.0);
        self.register_serving_series();
        for r in UpstreamErrorReason::ALL {
            self.counter(UPSTREAM_ERRORS_TOTAL, vec![label("reason", r.as_str())]).increment(0);
        }
        for r in AuthResult::ALL {
            for d in AuthDecision::ALL {
                self.counter(
                    AUTH_CACHE_TOTAL,
                    vec![label("result", r.as_str()), label("decision", d.as_str())],
                )
                .increment(0);
            }
        }
        for d in AuthDecision::ALL {
            self.counter(IMPERSONATION_TOTAL, vec![label("decision", d.as_str())]).increment(0);
        }
        for l in Limit::ALL {
            self.counter(LIMIT_REJECTIONS_TOTAL, vec![label("limit", l.as_str())]).increment(0);
        }
        for r in Refusal::ALL {
            self.counter(REFUSALS_TOTAL, vec![label("reason", r.as_str())]).increment(0);
        }
        for e in Encoding::ALL {
            for s in Served::ALL {
                self.counter(
                    ENCODING_TOTAL,
                    vec![label("encoding", e.as_str()), label("served", s.as_str())],
                )
                .increment(0);
            }
        }
        // Forwarded requests carry the upstream's code; the zero series uses code 0 ("no response yet").
        for k in ForwardKind::ALL {
            self.counter(
                FORWARDED_REQUESTS_TOTAL,
                vec![label("kind", k.as_str()), label("code", labels::code(0))],
            )
            .increment(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Gvr;

    /// The value of one exact series line in a rendering.
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn fixed_series_exist_at_zero_after_install() {
        let text = Metrics::new().render();
        assert!(value(&text, "kache_upstream_errors_total{reason=\"connect\"}").is_some(), "{text}");
        assert!(value(&text, "kache_limit_rejections_total{limit=\"watchers\"}").is_some());
        assert!(value(&text, "kache_auth_cache_total{result=\"hit\",decision=\"deny\"}").is_some());
        assert!(value(&text, "kache_encoding_total{encoding=\"protobuf\",served=\"forwarded\"}").is_some());
        assert!(value(&text, "kache_forwarded_requests_total{kind=\"upgrade\",code=\"0\"}").is_some());
    }

    #[test]
    fn global_counters_increase() {
        let handle = Metrics::new();
        let series = "kache_forwarded_requests_total{kind=\"write\",code=\"201\"}";
        let before = value(&handle.render(), series).unwrap_or(0.0);
        handle.forwarded(ForwardKind::Write, 201);
        handle.forwarded(ForwardKind::Write, 201);
        assert_eq!(value(&handle.render(), series), Some(before + 2.0));
    }

    #[test]
    fn resource_helpers_accept_gvrs_and_strings() {
        let handle = Metrics::new();
        let gvr = Gvr::new("batch", "v1", "helpers-test");
        handle.list_served(&gvr, 4, 2);
        handle.list_served("helpers-test.batch", 1, 1);
        handle.slow_watcher_closed(&gvr);
        let text = handle.render();
        let gr = "group=\"batch\",resource=\"helpers-test\"";
        assert_eq!(value(&text, &format!("apiserver_cache_list_returned_objects_total{{{gr}}}")), Some(3.0));
        assert_eq!(value(&text, &format!("kache_slow_watchers_closed_total{{{gr}}}")), Some(1.0));
        assert_eq!(value(&text, &format!("apiserver_terminated_watchers_total{{{gr}}}")), Some(1.0));
    }
}
