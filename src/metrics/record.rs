//! One-line recording functions for the rest of kache.
//!
//! `resource` arguments accept a [`Gvr`](crate::resource::Gvr), a [`ResourceInfo`](crate::resource::ResourceInfo)
//! or a group-resource string (`"pods"`, `"deployments.apps"`). Callers on very hot paths may keep the
//! `Arc<ResourceMetrics>` from [`resource`](super::resource()) instead and call its methods.

use std::time::Duration;

use super::labels::{
    self, AsResource, AuthDecision, AuthResult, Encoding, ForwardKind, Limit, Served, Source,
    UpstreamErrorReason,
};
use super::names::*;
use super::recorder::{counter, label};
use super::resource::with_resource;

/// A request answered (by memory or by the upstream): `apiserver_request_total` and
/// `apiserver_request_duration_seconds`. `verb` is the apiserver's (`get`/`GET`, `list`, `watch`, ...).
pub fn request<R: AsResource + ?Sized>(
    verb: &str,
    resource: &R,
    code: u16,
    source: Source,
    elapsed: Duration,
) {
    with_resource(resource, |m| m.request(verb, code, source, elapsed));
}

/// A LIST served from memory: `fetched` objects scanned, `returned` objects in the response.
pub fn list_served<R: AsResource + ?Sized>(resource: &R, fetched: usize, returned: usize) {
    with_resource(resource, |m| m.list_served(fetched, returned));
}

/// A consistent read (resourceVersion unset) decided. `fallback`: it was not served from memory.
/// `success`: the client got an answer (from memory, or from the upstream after the fallback).
pub fn consistent_read<R: AsResource + ?Sized>(resource: &R, success: bool, fallback: bool) {
    with_resource(resource, |m| m.consistent_read(success, fallback));
}

/// Time a consistent read waited for the store to become fresh.
pub fn read_wait<R: AsResource + ?Sized>(resource: &R, waited: Duration) {
    with_resource(resource, |m| m.read_wait(waited));
}

/// A streaming list (sendInitialEvents=true) sent its initial-events-end bookmark after `elapsed`.
pub fn watch_list_done<R: AsResource + ?Sized>(resource: &R, elapsed: Duration) {
    with_resource(resource, |m| m.watch_list_done(elapsed));
}

/// A watcher opened (`delta` = 1) or closed (`delta` = -1).
pub fn watchers<R: AsResource + ?Sized>(resource: &R, delta: i64) {
    with_resource(resource, |m| m.watchers(delta));
}

/// A watcher closed because it could not keep up (also counts `apiserver_terminated_watchers_total`).
pub fn slow_watcher_closed<R: AsResource + ?Sized>(resource: &R) {
    with_resource(resource, |m| m.slow_watcher_closed());
}

/// A request passed through to the upstream, with the upstream's status code (0: no response).
pub fn forwarded(kind: ForwardKind, code: u16) {
    let labels = vec![label("kind", kind.as_str()), label("code", labels::code(code))];
    counter(FORWARDED_REQUESTS_TOTAL, labels).increment(1);
}

/// An error talking to the upstream.
pub fn upstream_error(reason: UpstreamErrorReason) {
    counter(UPSTREAM_ERRORS_TOTAL, vec![label("reason", reason.as_str())]).increment(1);
}

/// An authentication/authorization decision, from the cache or not.
pub fn auth_cache(result: AuthResult, decision: AuthDecision) {
    let labels = vec![label("result", result.as_str()), label("decision", decision.as_str())];
    counter(AUTH_CACHE_TOTAL, labels).increment(1);
}

/// The outcome of a request's impersonation (its `Impersonate-*` headers).
pub fn impersonation(decision: AuthDecision) {
    counter(IMPERSONATION_TOTAL, vec![label("decision", decision.as_str())]).increment(1);
}

/// A request or connection refused by a limit.
pub fn limit_rejected(limit: Limit) {
    counter(LIMIT_REJECTIONS_TOTAL, vec![label("limit", limit.as_str())]).increment(1);
}

/// A response's encoding and where it came from.
pub fn encoding(encoding: Encoding, served: Served) {
    let labels = vec![label("encoding", encoding.as_str()), label("served", served.as_str())];
    counter(ENCODING_TOTAL, labels).increment(1);
}

/// A filtered mirror and its selector (`kache_mirror_selector`, 1 while it is configured); its
/// `kache_mirror_uncovered_total` series exist (at zero) from then on.
pub fn mirror_selector<R: AsResource + ?Sized>(resource: &R, selector: &str) {
    with_resource(resource, |m| {
        let mut labels = m.labels(&[]);
        labels.push(metrics::Label::new("selector", selector.to_owned()));
        super::recorder::gauge(MIRROR_SELECTOR, labels).set(1.0);
        for verb in ["get", "list", "watch"] {
            counter(MIRROR_UNCOVERED_TOTAL, m.labels(&[("verb", verb)])).increment(0);
        }
    });
}

/// A read of a filtered mirror forwarded because the mirror's selection does not cover it; `verb` is one of
/// `get`, `list`, `watch`.
pub fn mirror_uncovered<R: AsResource + ?Sized>(resource: &R, verb: &'static str) {
    with_resource(resource, |m| counter(MIRROR_UNCOVERED_TOTAL, m.labels(&[("verb", verb)])).increment(1));
}

/// An object version that could not be transcoded to protobuf (the read was forwarded).
pub fn protobuf_transcode_failed<R: AsResource + ?Sized>(resource: &R) {
    with_resource(resource, |m| m.protobuf_failures.increment(1));
}

/// A Table row looked up in the row cache (`hit`) or printed from its object (`miss`).
pub fn table_rows(hit: bool) {
    counter(TABLE_ROWS_TOTAL, vec![label("result", if hit { "hit" } else { "miss" })]).increment(1);
}

/// Registers every series of the fixed label sets at zero, so a fresh kache already exports every metric
/// name its dashboards use. Called by [`install`](super::install); cheap to repeat.
pub(crate) fn register_fixed_series() {
    for result in ["hit", "miss"] {
        counter(TABLE_ROWS_TOTAL, vec![label("result", result)]).increment(0);
    }
    super::recorder::gauge(TABLE_ROW_CACHE_BYTES, Vec::new()).increment(0.0);
    super::recorder::gauge(PROTOBUF_BYTES, Vec::new()).increment(0.0);
    super::serving::register_fixed_series();
    for r in UpstreamErrorReason::ALL {
        counter(UPSTREAM_ERRORS_TOTAL, vec![label("reason", r.as_str())]).increment(0);
    }
    for r in AuthResult::ALL {
        for d in AuthDecision::ALL {
            counter(AUTH_CACHE_TOTAL, vec![label("result", r.as_str()), label("decision", d.as_str())])
                .increment(0);
        }
    }
    for d in AuthDecision::ALL {
        counter(IMPERSONATION_TOTAL, vec![label("decision", d.as_str())]).increment(0);
    }
    for l in Limit::ALL {
        counter(LIMIT_REJECTIONS_TOTAL, vec![label("limit", l.as_str())]).increment(0);
    }
    for e in Encoding::ALL {
        for s in Served::ALL {
            counter(ENCODING_TOTAL, vec![label("encoding", e.as_str()), label("served", s.as_str())])
                .increment(0);
        }
    }
    // Forwarded requests carry the upstream's code; the zero series uses code 0 ("no response yet").
    for k in ForwardKind::ALL {
        counter(FORWARDED_REQUESTS_TOTAL, vec![label("kind", k.as_str()), label("code", labels::code(0))])
            .increment(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::install;
    use crate::resource::Gvr;

    /// The value of one exact series line in a rendering.
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn fixed_series_exist_at_zero_after_install() {
        let text = install().render();
        assert!(value(&text, "kache_upstream_errors_total{reason=\"connect\"}").is_some(), "{text}");
        assert!(value(&text, "kache_limit_rejections_total{limit=\"watchers\"}").is_some());
        assert!(value(&text, "kache_auth_cache_total{result=\"hit\",decision=\"deny\"}").is_some());
        assert!(value(&text, "kache_encoding_total{encoding=\"protobuf\",served=\"forwarded\"}").is_some());
        assert!(value(&text, "kache_forwarded_requests_total{kind=\"upgrade\",code=\"0\"}").is_some());
    }

    #[test]
    fn global_counters_increase() {
        let handle = install();
        let series = "kache_forwarded_requests_total{kind=\"write\",code=\"201\"}";
        let before = value(&handle.render(), series).unwrap_or(0.0);
        forwarded(ForwardKind::Write, 201);
        forwarded(ForwardKind::Write, 201);
        assert_eq!(value(&handle.render(), series), Some(before + 2.0));
    }

    #[test]
    fn resource_helpers_accept_gvrs_and_strings() {
        let handle = install();
        let gvr = Gvr::new("batch", "v1", "helpers-test");
        list_served(&gvr, 4, 2);
        list_served("helpers-test.batch", 1, 1);
        slow_watcher_closed(&gvr);
        let text = handle.render();
        let gr = "group=\"batch\",resource=\"helpers-test\"";
        assert_eq!(value(&text, &format!("apiserver_cache_list_returned_objects_total{{{gr}}}")), Some(3.0));
        assert_eq!(value(&text, &format!("kache_slow_watchers_closed_total{{{gr}}}")), Some(1.0));
        assert_eq!(value(&text, &format!("apiserver_terminated_watchers_total{{{gr}}}")), Some(1.0));
    }
}
