use std::sync::Arc;

use bytes::Bytes;
use imbl::OrdMap;
use proptest::prelude::*;

use super::*;
use crate::codec::extract::object_from_json;
use crate::resource::ResourceInfo;
use crate::store::{Key, Object, Snapshot};

/// A census of namespace `fx` (objects `a` at 6463 and `b` at 6464, list at 6466) as the real 1.36 sample
/// apiserver answered it.
const FX_PB: &[u8] = include_bytes!("../testdata/census-fx.pb");

pub(super) fn flunders() -> ResourceInfo {
    ResourceInfo::flunders()
}

pub(super) fn object(ns: &str, name: &str, rv: u64) -> Arc<Object> {
    let raw = format!(
        r#"{{"kind":"Flunder","apiVersion":"wardle.example.com/v1beta1","metadata":{{"name":"{name}","namespace":"{ns}","uid":"u-{name}","resourceVersion":"{rv}"}},"spec":{{"flunderReference":"{}"}}}}"#,
        "x".repeat(200)
    );
    Arc::new(object_from_json(Bytes::from(raw), &flunders()).expect("a valid object"))
}

fn snapshot(rv: u64, objects: &[(&str, &str, u64)]) -> Snapshot {
    let map: OrdMap<Key, Arc<Object>> =
        objects.iter().map(|&(ns, name, rv)| object(ns, name, rv)).map(|o| (o.key.clone(), o)).collect();
    Snapshot::new(rv, map)
}

fn census(rv: u64, items: &[(&str, &str, u64)]) -> Census {
    Census {
        rv,
        items: items
            .iter()
            .map(|&(ns, name, rv)| Item { namespace: Some(ns.into()), name: name.into(), rv })
            .collect(),
        bytes: 0,
        more: false,
        remaining: None,
    }
}

/// A census of one page of `items`, `remaining` more following.
fn page(rv: u64, items: &[(&str, &str, u64)], remaining: u64) -> Census {
    Census { more: true, remaining: Some(remaining), ..census(rv, items) }
}

fn whole() -> Scope {
    Scope::default()
}

fn namespace(ns: &str, limit: usize) -> Scope {
    Scope { namespace: Some(ns.into()), limit, continued: None }
}

fn fx() -> Vec<Item> {
    vec![
        Item { namespace: Some("fx".into()), name: "a".into(), rv: 6463 },
        Item { namespace: Some("fx".into()), name: "b".into(), rv: 6464 },
    ]
}

#[test]
fn parses_the_real_apiservers_protobuf_census() {
    let c = parse_protobuf(&Bytes::from_static(FX_PB)).expect("parses");
    assert_eq!(c.rv, 6466);
    assert_eq!(c.items, fx());
    assert_eq!(c.bytes, FX_PB.len());
}

#[test]
fn refuses_pages_of_the_whole_resource_and_revisions_that_are_not_numbers() {
    let c = page(9, &[], 7);
    assert!(checked(c.clone(), &whole()).is_err(), "a page is not the whole resource");
    assert!(checked(c.clone(), &namespace("a", 0)).is_err(), "nor a whole namespace");
    assert_eq!(
        checked(c.clone(), &Scope { namespace: None, limit: 500, continued: None }),
        Ok(c),
        "it is a first page"
    );
    assert!(parse_protobuf(&Bytes::from(encode("x", &[]))).is_err(), "a revision that is not a number");
    let mut pb = FX_PB.to_vec();
    assert!(parse_protobuf(&Bytes::from(pb.clone())).is_ok());
    pb.truncate(pb.len() - 1);
    assert!(parse_protobuf(&Bytes::from(pb)).is_err(), "a truncated answer is malformed");
    assert!(parse_protobuf(&Bytes::from_static(b"{}")).is_err(), "no envelope");
}

#[test]
fn a_snapshot_with_the_same_objects_is_the_same() {
    let s = snapshot(100, &[("a", "x", 10), ("a", "y", 20), ("b", "x", 30)]);
    let c = census(500, &[("a", "x", 10), ("a", "y", 20), ("b", "x", 30)]);
    assert_eq!(compare(&s, &c, &whole()), Compared::Same);
    // Listed in another order: compared by key, still the same.
    let shuffled = census(500, &[("b", "x", 30), ("a", "x", 10), ("a", "y", 20)]);
    assert_eq!(compare(&s, &shuffled, &whole()), Compared::Same);
    assert_eq!(compare(&snapshot(3, &[]), &census(7, &[]), &whole()), Compared::Same);
}

#[test]
fn a_snapshot_lacking_writes_is_behind_the_newest_it_lacks() {
    let s = snapshot(100, &[("a", "x", 10), ("a", "y", 20), ("b", "x", 30)]);
    // Updated upstream.
    assert_eq!(
        compare(&s, &census(500, &[("a", "x", 10), ("a", "y", 120), ("b", "x", 130)]), &whole()),
        Compared::Behind { upto: 130 }
    );
    // Created upstream.
    assert_eq!(
        compare(
            &s,
            &census(500, &[("a", "x", 10), ("a", "y", 20), ("a", "z", 140), ("b", "x", 30)]),
            &whole()
        ),
        Compared::Behind { upto: 140 }
    );
    // Deleted upstream: the deletion's revision is unknown, the census's stands for it.
    assert_eq!(
        compare(&s, &census(500, &[("a", "x", 10), ("b", "x", 30)]), &whole()),
        Compared::Behind { upto: 500 }
    );
    // An object listed twice cannot stand in for one missing.
    assert_eq!(
        compare(&s, &census(500, &[("a", "x", 10), ("a", "x", 10), ("b", "x", 30)]), &whole()),
        Compared::Behind { upto: 10 }
    );
    // A version the store never had, even an older-looking one, is not the same.
    assert_eq!(
        compare(&s, &census(500, &[("a", "x", 9), ("a", "y", 20), ("b", "x", 30)]), &whole()),
        Compared::Behind { upto: 9 }
    );
}

#[test]
fn estimates_a_census_by_the_metadata_share() {
    let (store, mut writer) = crate::store::Store::new(flunders(), crate::store::StoreConfig::default());
    assert_eq!(metadata_share(&store.load()), 1.0, "an empty store: a census costs what a list does");
    writer.replace((0..10).map(|i| object("ns", &format!("o{i}"), 10 + i)), 20);
    let o = object("ns", "o1", 11);
    let share = o.metadata_range.len() as f64 / o.raw.len() as f64;
    assert!(share > 0.1 && share < 0.6, "the test objects carry most bytes in spec: {share}");
    let estimate = metadata_share(&store.load());
    assert!((estimate - share).abs() <= share * 0.05, "{estimate} vs {share}");
}

#[test]
fn a_part_of_the_snapshot_is_compared_with_its_census() {
    let s = snapshot(100, &[("a", "x", 10), ("a", "y", 20), ("b", "x", 30), ("b", "y", 40), ("c", "x", 50)]);
    // A namespace: its objects only.
    assert_eq!(
        compare(&s, &census(500, &[("b", "x", 30), ("b", "y", 40)]), &namespace("b", 0)),
        Compared::Same
    );
    assert_eq!(
        compare(&s, &census(500, &[("b", "x", 30), ("b", "y", 41)]), &namespace("b", 0)),
        Compared::Behind { upto: 41 }
    );
    assert_eq!(
        compare(&s, &census(500, &[("b", "x", 30)]), &namespace("b", 0)),
        Compared::Behind { upto: 500 },
        "deleted upstream"
    );
    assert_eq!(compare(&s, &census(500, &[]), &namespace("d", 0)), Compared::Same, "an empty namespace");
    // A first page: the first objects, and as many after them.
    let first = Scope { namespace: None, limit: 2, continued: None };
    type Case<'a> = (&'a [(&'a str, &'a str, u64)], u64, Compared, &'a str);
    let cases: [Case; 6] = [
        (&[("a", "x", 10), ("a", "y", 20)], 3, Compared::Same, "the same page, as many after it"),
        (&[("a", "x", 10), ("a", "y", 20)], 4, Compared::Behind { upto: 500 }, "created after the page"),
        (&[("a", "x", 10), ("a", "y", 20)], 2, Compared::Behind { upto: 500 }, "deleted after the page"),
        (&[("a", "x", 10), ("a", "y", 120)], 3, Compared::Behind { upto: 120 }, "updated in the page"),
        (&[("a", "x", 10), ("b", "x", 30)], 2, Compared::Behind { upto: 500 }, "deleted in the page"),
        (&[("a", "w", 130), ("a", "x", 10)], 4, Compared::Behind { upto: 130 }, "created in the page"),
    ];
    for (items, remaining, want, why) in cases {
        assert_eq!(compare(&s, &page(500, items, remaining), &first), want, "{why}");
    }
    // A continued page: the objects from its token's key.
    let continued = |start: &str| Scope {
        namespace: None,
        limit: 2,
        continued: Continued::new("eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ", start),
    };
    assert_eq!(
        compare(&s, &page(500, &[("a", "y", 20), ("b", "x", 30)], 2), &continued("a/x\0")),
        Compared::Same
    );
    assert_eq!(
        compare(&s, &page(500, &[("a", "y", 20), ("b", "x", 31)], 2), &continued("a/x\0")),
        Compared::Behind { upto: 31 }
    );
    // Its last page: every object from the key.
    assert_eq!(
        compare(&s, &census(500, &[("b", "y", 40), ("c", "x", 50)]), &continued("b/x\0")),
        Compared::Same
    );
    assert_eq!(
        compare(&s, &census(500, &[("b", "y", 40)]), &continued("b/x\0")),
        Compared::Behind { upto: 500 }
    );
    // Tokens are sent upstream as they came, so only plain ones are.
    assert!(Continued::new("abc&limit=1", "a").is_none());
    assert!(Continued::new("", "a").is_none());
    // A page without remainingItemCount cannot show what follows it.
    let unknown = Census { remaining: None, ..page(500, &[("a", "x", 10), ("a", "y", 20)], 3) };
    assert_eq!(compare(&s, &unknown, &first), Compared::Behind { upto: 500 });
    // A namespace's first page; a page limit that takes all (no continue): the whole namespace.
    let b1 = namespace("b", 1);
    assert_eq!(compare(&s, &page(500, &[("b", "x", 30)], 1), &b1), Compared::Same);
    assert_eq!(
        compare(&s, &census(500, &[("b", "x", 30), ("b", "y", 40)]), &namespace("b", 5)),
        Compared::Same
    );
}

#[test]
fn a_scope_is_the_censuss_path() {
    let p = |scope: &Scope, selection| scope.path("/api/v1", "pods", selection);
    assert_eq!(p(&whole(), None), "/api/v1/pods");
    assert_eq!(
        p(&whole(), Some("fieldSelector=spec.nodeName%3Dn1")),
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1"
    );
    assert_eq!(p(&namespace("a", 0), None), "/api/v1/namespaces/a/pods");
    assert_eq!(
        p(&namespace("a", 500), Some("labelSelector=x")),
        "/api/v1/namespaces/a/pods?limit=500&labelSelector=x"
    );
    assert_eq!(p(&Scope { namespace: None, limit: 500, continued: None }, None), "/api/v1/pods?limit=500");
}

/// A protobuf list of `items` `(namespace, name, rv)` at `rv`, in the apiserver's envelope.
fn encode(rv: &str, items: &[(&str, &str, &str)]) -> Vec<u8> {
    use crate::codec::proto::put_bytes as field;
    let mut list = Vec::new();
    let mut list_meta = Vec::new();
    field(&mut list_meta, 2, rv.as_bytes());
    field(&mut list, 1, &list_meta);
    for (ns, name, rv) in items {
        let mut meta = Vec::new();
        field(&mut meta, 1, name.as_bytes());
        field(&mut meta, 3, ns.as_bytes());
        field(&mut meta, 6, rv.as_bytes());
        let mut item = Vec::new();
        field(&mut item, 1, &meta);
        field(&mut list, 2, &item);
    }
    let mut unknown = Vec::new();
    field(&mut unknown, 2, &list);
    let mut out = b"k8s\0".to_vec();
    out.extend_from_slice(&unknown);
    out
}

#[test]
fn parses_a_protobuf_pages_continue_and_remaining_count() {
    use crate::codec::proto::put_bytes as field;
    let mut list_meta = Vec::new();
    field(&mut list_meta, 2, b"88");
    field(&mut list_meta, 3, b"token");
    // remainingItemCount = 300: field 4, varint.
    list_meta.extend_from_slice(&[4 << 3, 0xac, 0x02]);
    let mut list = Vec::new();
    field(&mut list, 1, &list_meta);
    let mut unknown = Vec::new();
    field(&mut unknown, 2, &list);
    let mut pb = b"k8s\0".to_vec();
    pb.extend_from_slice(&unknown);
    let c = parse_protobuf(&Bytes::from(pb)).expect("parses");
    assert_eq!((c.rv, c.more, c.remaining), (88, true, Some(300)));
    let whole = parse_protobuf(&Bytes::from(encode("77", &[]))).expect("parses");
    assert_eq!((whole.more, whole.remaining), (false, None));
}

#[test]
fn parses_what_the_test_encoder_writes() {
    let pb = encode("77", &[("ns", "a", "5"), ("", "b", "6")]);
    let c = parse_protobuf(&Bytes::from(pb)).expect("parses");
    assert_eq!(c.rv, 77);
    assert_eq!(
        c.items,
        [
            Item { namespace: Some("ns".into()), name: "a".into(), rv: 5 },
            Item { namespace: None, name: "b".into(), rv: 6 },
        ]
    );
}

proptest! {
    /// Upstream bytes are parsed defensively: anything is an answer or an error, never a panic.
    #[test]
    fn any_bytes_parse_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut enveloped = b"k8s\0".to_vec();
        enveloped.extend_from_slice(&bytes);
        let _ = parse_protobuf(&Bytes::from(enveloped));
        let _ = parse_protobuf(&Bytes::from(bytes));
    }

    /// A census read back from its encoding lists what was encoded, and compares as the same with a
    /// snapshot of those objects.
    #[test]
    fn encoded_censuses_round_trip_and_match(
        objects in proptest::collection::btree_map(("[a-c]{1,2}", "[a-z]{1,5}"), 1u64..1_000_000, 0..40),
    ) {
        let items: Vec<(String, String, String)> =
            objects.iter().map(|((ns, name), rv)| (ns.clone(), name.clone(), rv.to_string())).collect();
        let refs: Vec<(&str, &str, &str)> =
            items.iter().map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str())).collect();
        let c = parse_protobuf(&Bytes::from(encode("2000000", &refs))).expect("parses");
        prop_assert_eq!(c.items.len(), objects.len());
        let stored: Vec<(&str, &str, u64)> =
            objects.iter().map(|((ns, name), rv)| (ns.as_str(), name.as_str(), *rv)).collect();
        prop_assert_eq!(compare(&snapshot(1, &stored), &c, &whole()), Compared::Same);
        if let Some(((ns, name), rv)) = objects.iter().next() {
            let mut changed = stored.clone();
            changed[0] = (ns.as_str(), name.as_str(), rv + 1);
            prop_assert_eq!(compare(&snapshot(1, &changed), &c, &whole()), Compared::Behind { upto: *rv });
        }
    }

    /// The upstream's page of any scope (a namespace or all, a limit, from any stored key), as an apiserver
    /// would list it from the same objects, matches the snapshot; the same page showing one more or one less
    /// object after it, or another version of one of its objects, does not.
    #[test]
    fn a_page_of_any_scope_matches_the_snapshot_it_was_listed_from(
        objects in proptest::collection::btree_map(("[a-c]", "[a-z]{1,3}"), 1u64..1_000, 1..30),
        namespace in proptest::option::of("[a-c]"),
        limit in 0usize..8,
        start_at in proptest::option::of(0usize..30),
    ) {
        let stored: Vec<(&str, &str, u64)> =
            objects.iter().map(|((ns, name), rv)| (ns.as_str(), name.as_str(), *rv)).collect();
        let s = snapshot(1, &stored);
        // The objects in scope, in key order, and the page the upstream would answer.
        let in_ns: Vec<&(&str, &str, u64)> =
            stored.iter().filter(|(ns, _, _)| namespace.as_deref().is_none_or(|n| n == *ns)).collect();
        let start = start_at.filter(|_| limit > 0).and_then(|i| in_ns.get(i % in_ns.len().max(1)).copied());
        let from: Vec<&(&str, &str, u64)> = in_ns
            .iter()
            .copied()
            .filter(|(ns, name, _)| start.is_none_or(|(sns, sname, _)| (*ns, *name) >= (*sns, *sname)))
            .collect();
        let listed: Vec<(&str, &str, u64)> =
            from.iter().take(if limit == 0 { usize::MAX } else { limit }).map(|o| **o).collect();
        let after = from.len() - listed.len();
        let mut c = census(500, &listed);
        if after > 0 {
            c.more = true;
            c.remaining = Some(after as u64);
        }
        let continued = start.map(|(ns, name, _)| {
            Continued::new("eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ", &format!("{ns}/{name}")).expect("a plain token")
        });
        let scope = Scope { namespace: namespace.clone().map(Into::into), limit, continued };
        prop_assert_eq!(compare(&s, &c, &scope), Compared::Same);
        if c.more {
            for remaining in [after as u64 + 1, after as u64 - 1] {
                let other = Census { remaining: Some(remaining), ..c.clone() };
                prop_assert_eq!(compare(&s, &other, &scope), Compared::Behind { upto: 500 });
            }
        }
        if let Some(first) = c.items.first().cloned() {
            let mut changed = c.clone();
            changed.items[0].rv = first.rv + 1;
            prop_assert_eq!(compare(&s, &changed, &scope), Compared::Behind { upto: first.rv + 1 });
        }
    }
}
