//! Scanning a snapshot for one list page, as the apiserver's cacher does (`cacher.go` GetList): items in key
//! order, filtered, cut at `limit` matching items, with the continue position and `remainingItemCount`.

use std::ops::Bound;
use std::sync::Arc;

use crate::store::{Key, Object, Snapshot};

/// What to scan.
pub struct ScanRequest<'a> {
    /// Restrict to one namespace (its keys are the contiguous range `ns/…`).
    pub namespace: Option<&'a str>,
    /// Start at this store key (inclusive), from a continue token.
    pub start: Option<&'a str>,
    /// Maximum matching items; 0 means no limit.
    pub limit: usize,
    /// Whether a label or field selector is set (then `remainingItemCount` is omitted).
    pub has_selector: bool,
}

/// One page.
#[derive(Debug, Default)]
pub struct ScanResult {
    pub items: Vec<Arc<Object>>,
    /// Set when keys remain after the page: the key of the last selected item (the next page starts after it).
    pub continue_after: Option<Key>,
    /// Keys remaining after the page, when there is a continue position and no selector.
    pub remaining: Option<i64>,
}

/// The key range of a namespace: `["ns/", "ns0")` (`0` is the byte after `/`).
pub fn namespace_bounds(ns: &str) -> (String, String) {
    (format!("{ns}/"), format!("{ns}0"))
}

/// Scans `snapshot` for one page.
pub fn scan(snapshot: &Snapshot, req: &ScanRequest<'_>, matches: impl Fn(&Object) -> bool) -> ScanResult {
    let (lower, upper): (Bound<Key>, Bound<Key>) = match req.namespace {
        Some(ns) => {
            let (lo, hi) = namespace_bounds(ns);
            (Bound::Included(Arc::from(lo)), Bound::Excluded(Arc::from(hi)))
        }
        None => (Bound::Unbounded, Bound::Unbounded),
    };
    let lower = match (lower, req.start) {
        (Bound::Included(lo), Some(start)) if *start > *lo => Bound::Included(Arc::from(start)),
        (Bound::Unbounded, Some(start)) => Bound::Included(Arc::from(start)),
        (lower, _) => lower,
    };
    let mut range = snapshot.objects.range((lower, upper));
    let mut result = ScanResult::default();
    for (_, object) in range.by_ref() {
        if !matches(object) {
            continue;
        }
        result.items.push(object.clone());
        if req.limit > 0 && result.items.len() >= req.limit {
            let rest = range.by_ref().count();
            if rest > 0 {
                result.continue_after = Some(object.key.clone());
                if !req.has_selector {
                    result.remaining = Some(rest as i64);
                }
            }
            break;
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use imbl::OrdMap;
    use tokio::time::Instant;

    fn obj(key: &str) -> Arc<Object> {
        let ns_len = key.find('/').unwrap_or(0) as u32;
        Arc::new(Object {
            key: Arc::from(key),
            ns_len,
            uid: "u".into(),
            resource_version: 1,
            labels: Box::new([]),
            fields: Box::new([]),
            raw: Bytes::from_static(b"{}"),
            body_offset: 1,
            metadata_range: 0..0,
            proto: Default::default(),
        })
    }

    fn snap(keys: &[&str]) -> Snapshot {
        let mut objects = OrdMap::new();
        for k in keys {
            objects.insert(Arc::from(*k), obj(k));
        }
        Snapshot { rv: 10, objects, taken_at: Instant::now() }
    }

    fn keys(r: &ScanResult) -> Vec<&str> {
        r.items.iter().map(|o| &*o.key).collect()
    }

    #[test]
    fn namespace_range_excludes_prefix_siblings() {
        // `kube-system` sorts before `kube/`: a scan of `kube` must not include it, nor `kube2`.
        let s = snap(&["kube-system/a", "kube/a", "kube/b", "kube2/a"]);
        let r = scan(
            &s,
            &ScanRequest { namespace: Some("kube"), start: None, limit: 0, has_selector: false },
            |_| true,
        );
        assert_eq!(keys(&r), ["kube/a", "kube/b"]);
        assert!(r.continue_after.is_none());
    }

    #[test]
    fn limit_sets_continue_and_remaining() {
        let s = snap(&["ns/a", "ns/b", "ns/c", "ns/d", "ns/e"]);
        let r =
            scan(&s, &ScanRequest { namespace: None, start: None, limit: 2, has_selector: false }, |_| true);
        assert_eq!(keys(&r), ["ns/a", "ns/b"]);
        assert_eq!(r.continue_after.as_deref(), Some("ns/b"));
        assert_eq!(r.remaining, Some(3));
        let r = scan(
            &s,
            &ScanRequest { namespace: None, start: Some("ns/b\0"), limit: 2, has_selector: false },
            |_| true,
        );
        assert_eq!(keys(&r), ["ns/c", "ns/d"]);
        assert_eq!(r.remaining, Some(1));
    }

    #[test]
    fn last_page_has_no_continue() {
        let s = snap(&["a", "b"]);
        let r =
            scan(&s, &ScanRequest { namespace: None, start: None, limit: 2, has_selector: false }, |_| true);
        assert!(r.continue_after.is_none());
        assert!(r.remaining.is_none());
    }

    #[test]
    fn selector_fills_page_and_token_even_if_rest_does_not_match() {
        // As the store test "filter returning only one item, ensure only a single page returned" shows, a
        // full page carries a token while keys remain, matching or not, and no remainingItemCount.
        let s = snap(&["first/a", "second/barfoo", "third/barfoo", "third/foo"]);
        let r = scan(&s, &ScanRequest { namespace: None, start: None, limit: 1, has_selector: true }, |o| {
            o.key.ends_with("barfoo")
        });
        assert_eq!(keys(&r), ["second/barfoo"]);
        assert_eq!(r.continue_after.as_deref(), Some("second/barfoo"));
        assert_eq!(r.remaining, None);
    }
}
