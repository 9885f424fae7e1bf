//! BOOKMARK events: their object shape and when a watcher gets one.
//!
//! The apiserver's bookmark object is `newFunc()` — the typed zero value of the watched kind — with only
//! `metadata.resourceVersion` set (and, for the end of a watch-list's initial events, the annotation
//! `k8s.io/initial-events-end: "true"`). Serialised by Go's encoding/json, `omitempty` fields vanish while
//! non-pointer structs and non-omitempty fields stay, so the JSON differs per kind: [`zero_value_tail`] keeps
//! that table for built-in kinds. Custom resources are unstructured: only apiVersion, kind and metadata, with
//! keys sorted as Go marshals maps.

use std::io::Write as _;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::time::Instant;

use super::frame::WatchView;
use kache_k8s::json;

use crate::codec::list::ListMeta;
use crate::codec::table::Include;
use crate::resource::ResourceInfo;

/// The apiserver's `defaultBookmarkFrequency` (staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go).
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);
/// A last bookmark is due this long before the watch deadline (`cache_watcher.go` `nextBookmarkTime`).
pub(crate) const PRE_DEADLINE: Duration = Duration::from_secs(2);
/// The apiserver's bookmark dispatcher ticks about every second (staging/src/k8s.io/apiserver/pkg/storage/
/// cacher/cacher.go: Cacher.dispatchEvents, its `bookmarkTimer`); a watch-list watcher
/// is re-queued for the next tick after its initial-events-end bookmark (cacher.go: Cacher.finishDispatching
/// re-adds it; cache_watcher.go: cacheWatcher.nextBookmarkTime picks the tick).
pub(crate) const DISPATCH_TICK: Duration = Duration::from_secs(1);
/// A watcher that allows bookmarks gets one when the store's proven revision moves (an upstream bookmark
/// or a freshness proof applied as progress), at most once per this gap. The apiserver sends bookmarks at
/// its discretion (on its ~1 s dispatcher tick); kache uses that freedom so that a kache behind it learns
/// the proven revision within a gap instead of a minute, and can prove its own consistent reads with it.
pub(crate) const PROGRESS_BOOKMARK_GAP: Duration = DISPATCH_TICK;
/// The annotation on the bookmark that ends a watch-list's initial events (`metav1.InitialEventsAnnotationKey`).
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// What follows `metadata` in the JSON of the kind's zero value (with its leading comma), for the built-in
/// kinds whose zero value has more than type meta and metadata. Derived from the `json` tags of
/// `k8s.io/api` 1.35 (ObjectMeta's `creationTimestamp` is `omitzero` there, other `metav1.Time` fields
/// serialise their zero as `null`).
pub(crate) fn zero_value_tail(group: &str, kind: &str) -> &'static str {
    match (group, kind) {
        // PodSpec.Containers has no omitempty; PodStatus is a non-pointer struct of omitempty fields.
        ("", "Pod") => r#","spec":{"containers":null},"status":{}"#,
        ("", "Namespace") => r#","spec":{},"status":{}"#,
        // ServiceStatus.LoadBalancer is a non-pointer struct.
        ("", "Service") => r#","spec":{},"status":{"loadBalancer":{}}"#,
        // NodeStatus.DaemonEndpoints.KubeletEndpoint.Port and every NodeSystemInfo string lack omitempty.
        ("", "Node") => concat!(
            r#","spec":{},"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"#,
            r#""nodeInfo":{"machineID":"","systemUUID":"","bootID":"","kernelVersion":"","osImage":"","#,
            r#""containerRuntimeVersion":"","kubeletVersion":"","kubeProxyVersion":"","operatingSystem":"","#,
            r#""architecture":""}}"#
        ),
        ("", "Event") => concat!(
            r#","involvedObject":{},"source":{},"firstTimestamp":null,"lastTimestamp":null,"#,
            r#""eventTime":null,"reportingComponent":"","reportingInstance":"""#
        ),
        ("", "ReplicationController") => r#","spec":{},"status":{"replicas":0}"#,
        ("", "PersistentVolumeClaim") | ("", "PersistentVolume") => r#","spec":{},"status":{}"#,
        ("apps", "Deployment") => {
            r#","spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"strategy":{}},"status":{}"#
        }
        ("apps", "ReplicaSet") => {
            r#","spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}}},"status":{"replicas":0}"#
        }
        // ConfigMap, Secret, Endpoints, ServiceAccount and custom resources: nothing beyond metadata.
        _ => "",
    }
}

/// Builds a watcher's BOOKMARK lines. Made once per watcher; a bookmark costs one small allocation.
#[derive(Debug, Clone)]
pub struct BookmarkShape {
    /// Typed: `{"kind":…,"apiVersion":…,"metadata":{`.
    /// Unstructured: `{"apiVersion":…,"kind":…,"metadata":{`.
    head: Bytes,
    /// What follows metadata, then `}`: the upstream's own (learned from its bookmarks), else the table.
    tail: Bytes,
    /// Custom resources are unstructured: Go marshals their maps with sorted keys, so `apiVersion` comes
    /// before `kind` and `annotations` before `resourceVersion`.
    unstructured: bool,
    /// Table watches: the bookmark object becomes a one-row Table (see [`BookmarkShape::put_frame_headers`]).
    table: Option<crate::codec::table::TableView>,
}

/// What every BOOKMARK line starts with.
const FRAME_HEAD: &[u8] = b"{\"type\":\"BOOKMARK\",\"object\":";
const ANNOTATIONS: &[u8] = b"\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}";

impl BookmarkShape {
    /// `learned`: the upstream's own tail for this kind ([`crate::store::Store::bookmark_tail`]), which wins
    /// over [`zero_value_tail`] for typed kinds.
    pub fn new(info: &ResourceInfo, view: WatchView, learned: Option<Bytes>) -> Self {
        let mut head = BytesMut::with_capacity(128);
        head.put_u8(b'{');
        let (object_view, table) = match view {
            // A Table bookmark prints the kind's own bookmark object (the apiserver's asTable over it).
            WatchView::Table(t) => (WatchView::Full, Some(t)),
            v => (v, None),
        };
        let unstructured = object_view == WatchView::Full && info.list_items_have_type_meta;
        let tail = match object_view {
            WatchView::Full if unstructured => {
                head.put_slice(b"\"apiVersion\":");
                json::write_str(&mut head, &info.api_version());
                head.put_slice(b",\"kind\":");
                json::write_str(&mut head, &info.kind);
                Bytes::new()
            }
            WatchView::Full | WatchView::Table(_) => {
                head.put_slice(b"\"kind\":");
                json::write_str(&mut head, &info.kind);
                head.put_slice(b",\"apiVersion\":");
                json::write_str(&mut head, &info.api_version());
                learned.unwrap_or_else(|| {
                    Bytes::from_static(zero_value_tail(&info.gvr.group, &info.kind).as_bytes())
                })
            }
            WatchView::PartialObjectMetadata => {
                head.put_slice(b"\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\"");
                Bytes::new()
            }
        };
        head.put_slice(b",\"metadata\":{");
        Self { head: head.freeze(), tail, unstructured, table }
    }

    /// The BOOKMARK line at `rv`; `initial_events_end` adds the watch-list annotation.
    pub fn frame(&self, rv: u64, initial_events_end: bool) -> Bytes {
        let mut out = BytesMut::with_capacity(self.head.len() + self.tail.len() + 80);
        self.put_frame(&mut out, rv, initial_events_end);
        out.freeze()
    }

    /// Appends the BOOKMARK line at `rv` to `out` (a Table watch's without column definitions).
    pub fn put_frame(&self, out: &mut BytesMut, rv: u64, initial_events_end: bool) {
        self.put_frame_headers(out, rv, initial_events_end, false);
    }

    /// Appends the BOOKMARK line at `rv` to `out`; in a Table watch `headers` says whether it is the
    /// watcher's first event (the only one with `columnDefinitions`).
    ///
    /// A Table watch's bookmark is what the apiserver's `watchEmbeddedEncoder` makes of the bookmark
    /// object: a one-row Table at `rv` whose cells are the printer's output for that (empty) object and
    /// whose row object is the bookmark itself (`includeObject=Object`) or its `PartialObjectMetadata` —
    /// also for `includeObject=None`, which kube-apiserver 1.36 answers so for bookmarks (checked against
    /// the real generic apiserver in tests/it/table_real.rs), so that a client reads the annotation.
    pub(crate) fn put_frame_headers(
        &self,
        out: &mut BytesMut,
        rv: u64,
        initial_events_end: bool,
        headers: bool,
    ) {
        out.put_slice(FRAME_HEAD);
        match &self.table {
            None => self.put_object(out, rv, initial_events_end),
            Some(table) => {
                let mut raw = BytesMut::with_capacity(self.head.len() + self.tail.len() + 80);
                self.put_object(&mut raw, rv, initial_events_end);
                let mut metadata = BytesMut::with_capacity(80);
                let _ = write!((&mut metadata).writer(), "{{\"resourceVersion\":\"{rv}\"");
                if initial_events_end {
                    metadata.put_u8(b',');
                    metadata.put_slice(ANNOTATIONS);
                }
                metadata.put_u8(b'}');
                let view = crate::codec::table::TableView {
                    include: match table.include {
                        Include::None => Include::Metadata,
                        other => other,
                    },
                    ..table.clone()
                };
                let meta = ListMeta { resource_version: rv, ..Default::default() };
                out.put_slice(&view.header(&meta, headers));
                view.put_row_uncached(out, &raw, Some(&metadata), true, crate::codec::table::age::now_ms());
                out.put_slice(b"]}");
            }
        }
        out.put_slice(b"}\n");
    }

    /// The bookmark object at `rv` as JSON (what a protobuf bookmark is transcoded from).
    pub(crate) fn object_json(&self, rv: u64, initial_events_end: bool) -> BytesMut {
        let mut out = BytesMut::with_capacity(self.head.len() + self.tail.len() + 80);
        self.put_object(&mut out, rv, initial_events_end);
        out
    }

    /// Appends the bookmark object at `rv`.
    fn put_object(&self, out: &mut BytesMut, rv: u64, initial_events_end: bool) {
        out.put_slice(&self.head);
        if initial_events_end && self.unstructured {
            out.put_slice(ANNOTATIONS);
            out.put_u8(b',');
        }
        out.put_slice(b"\"resourceVersion\":\"");
        out.put_slice(rv.to_string().as_bytes());
        out.put_u8(b'"');
        if initial_events_end && !self.unstructured {
            out.put_u8(b',');
            out.put_slice(ANNOTATIONS);
        }
        out.put_u8(b'}');
        out.put_slice(&self.tail);
        out.put_u8(b'}');
    }
}

/// When a watcher's next periodic bookmark is due (`cache_watcher.go` `nextBookmarkTime`): one `interval`
/// from `now`, but no later than `deadline − 2 s`; none once that point has passed.
pub fn next_bookmark(now: Instant, interval: Duration, deadline: Instant) -> Option<Instant> {
    let last = deadline.checked_sub(PRE_DEADLINE)?;
    if now >= last {
        return None;
    }
    Some((now + interval).min(last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Gvr;

    fn info(group: &str, version: &str, resource: &str, kind: &str) -> ResourceInfo {
        ResourceInfo {
            gvr: Gvr::new(group, version, resource),
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            namespaced: true,
            list_items_have_type_meta: false,
        }
    }

    #[test]
    fn pod_bookmark_matches_the_apiserver() {
        let shape = BookmarkShape::new(&info("", "v1", "pods", "Pod"), WatchView::Full, None);
        assert_eq!(
            &shape.frame(123, true)[..],
            concat!(
                r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"123","#,
                r#""annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"containers":null},"status":{}}}"#,
                "\n"
            )
            .as_bytes()
        );
        assert_eq!(
            &shape.frame(7, false)[..],
            concat!(
                r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"7"}"#,
                r#","spec":{"containers":null},"status":{}}}"#,
                "\n"
            )
            .as_bytes()
        );
    }

    #[test]
    fn a_tail_learned_from_the_upstream_wins_over_the_table() {
        let flunder = info("wardle.example.com", "v1alpha1", "flunders", "Flunder");
        let learned = Bytes::from_static(br#","spec":{},"status":{}"#);
        let shape = BookmarkShape::new(&flunder, WatchView::Full, Some(learned.clone()));
        assert_eq!(
            &shape.frame(9, false)[..],
            concat!(
                r#"{"type":"BOOKMARK","object":{"kind":"Flunder","apiVersion":"wardle.example.com/v1alpha1","#,
                r#""metadata":{"resourceVersion":"9"},"spec":{},"status":{}}}"#,
                "\n"
            )
            .as_bytes()
        );
        // The metadata view never carries it.
        let shape = BookmarkShape::new(&flunder, WatchView::PartialObjectMetadata, Some(learned));
        assert!(!shape.frame(9, false).windows(7).any(|w| w == b"\"spec\":"));
    }

    /// The generic apiserver's Table bookmarks (kube-apiserver 1.36, captured with curl): the row is the
    /// generic convertor's output for the bookmark object; `includeObject=None` still shows its metadata.
    #[test]
    fn table_bookmarks_match_the_apiserver() {
        use crate::codec::table::{Include, Printer, TableView, Tables};
        const COLUMNS: &str = r#"[{"name":"Name","type":"string","format":"name","description":"N","priority":0},{"name":"Created At","type":"date","format":"","description":"C","priority":0}]"#;
        let body = format!(r#"{{"kind":"Table","columnDefinitions":{COLUMNS},"rows":null}}"#);
        let tables = std::sync::Arc::new(Tables::default());
        assert!(tables.generic.learn("wardle.example.com", "v1alpha1", "flunders", body.as_bytes()));
        let id = tables.generic.lookup("wardle.example.com", "v1alpha1", "flunders").expect("learned");
        let flunder = info("wardle.example.com", "v1alpha1", "flunders", "Flunder");
        let learned = Bytes::from_static(br#","spec":{},"status":{}"#);
        let table = |include| {
            WatchView::Table(TableView {
                printer: Printer::Generic(id),
                include,
                v1: true,
                tables: tables.clone(),
            })
        };
        let head = r#"{"type":"BOOKMARK","object":{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"3"},"columnDefinitions":"#;
        let cells = r#","rows":[{"cells":["","0001-01-01T00:00:00Z"],"object":"#;
        let partial = r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"3","annotations":{"k8s.io/initial-events-end":"true"}}}"#;
        let full = r#"{"kind":"Flunder","apiVersion":"wardle.example.com/v1alpha1","metadata":{"resourceVersion":"3","annotations":{"k8s.io/initial-events-end":"true"}},"spec":{},"status":{}}"#;
        for (include, object) in
            [(Include::None, partial), (Include::Metadata, partial), (Include::Object, full)]
        {
            let shape = BookmarkShape::new(&flunder, table(include), Some(learned.clone()));
            let mut out = BytesMut::new();
            shape.put_frame_headers(&mut out, 3, true, false);
            assert_eq!(
                std::str::from_utf8(&out).expect("utf8"),
                format!("{head}null{cells}{object}}}]}}}}\n"),
                "{include:?}"
            );
            // The watcher's first event carries the column definitions, a bookmark too.
            let mut out = BytesMut::new();
            shape.put_frame_headers(&mut out, 3, true, true);
            assert_eq!(
                std::str::from_utf8(&out).expect("utf8"),
                format!("{head}{COLUMNS}{cells}{object}}}]}}}}\n"),
                "{include:?}"
            );
        }
    }

    #[test]
    fn custom_resource_bookmark_is_unstructured_with_sorted_keys() {
        let crd = ResourceInfo {
            list_items_have_type_meta: true,
            ..info("example.com", "v1", "widgets", "Widget")
        };
        let shape = BookmarkShape::new(&crd, WatchView::Full, None);
        assert_eq!(
            &shape.frame(5, false)[..],
            concat!(
                r#"{"type":"BOOKMARK","object":{"apiVersion":"example.com/v1","kind":"Widget","#,
                r#""metadata":{"resourceVersion":"5"}}}"#,
                "\n"
            )
            .as_bytes()
        );
        assert_eq!(
            &shape.frame(6, true)[..],
            concat!(
                r#"{"type":"BOOKMARK","object":{"apiVersion":"example.com/v1","kind":"Widget","#,
                r#""metadata":{"annotations":{"k8s.io/initial-events-end":"true"},"resourceVersion":"6"}}}"#,
                "\n"
            )
            .as_bytes()
        );
    }

    #[test]
    fn typed_kind_without_zero_value_fields_has_only_type_meta_and_metadata() {
        let shape = BookmarkShape::new(&info("", "v1", "configmaps", "ConfigMap"), WatchView::Full, None);
        assert_eq!(
            &shape.frame(5, false)[..],
            concat!(
                r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","#,
                r#""metadata":{"resourceVersion":"5"}}}"#,
                "\n"
            )
            .as_bytes()
        );
    }

    #[test]
    fn every_bookmark_is_valid_json() {
        let kinds = [
            ("", "Pod"),
            ("", "Namespace"),
            ("", "Service"),
            ("", "Node"),
            ("", "Event"),
            ("", "ConfigMap"),
            ("", "ReplicationController"),
            ("apps", "Deployment"),
            ("apps", "ReplicaSet"),
        ];
        for (group, kind) in kinds {
            for (view, crd) in
                [(WatchView::Full, false), (WatchView::Full, true), (WatchView::PartialObjectMetadata, false)]
            {
                let resource =
                    ResourceInfo { list_items_have_type_meta: crd, ..info(group, "v1", "x", kind) };
                let shape = BookmarkShape::new(&resource, view, None);
                let line = shape.frame(42, true);
                assert_eq!(line.last(), Some(&b'\n'));
                let v: serde_json::Value = serde_json::from_slice(&line).expect("valid JSON");
                assert_eq!(v["type"], "BOOKMARK");
                assert_eq!(v["object"]["metadata"]["resourceVersion"], "42");
                assert_eq!(v["object"]["metadata"]["annotations"][INITIAL_EVENTS_END], "true");
            }
        }
    }

    #[test]
    fn schedule_caps_at_pre_deadline_and_stops_after_it() {
        let now = Instant::now();
        let minute = Duration::from_secs(60);
        let deadline = now + Duration::from_secs(300);
        assert_eq!(next_bookmark(now, minute, deadline), Some(now + minute));
        let deadline = now + Duration::from_secs(30);
        assert_eq!(next_bookmark(now, minute, deadline), Some(now + Duration::from_secs(28)));
        assert_eq!(next_bookmark(now + Duration::from_secs(28), minute, deadline), None);
        assert_eq!(next_bookmark(now, minute, now + Duration::from_secs(1)), None);
    }
}
