use bytes::Bytes;
use proptest::prelude::*;
use serde_json::Value;

use super::*;
use crate::resource::{Gvr, ResourceInfo};
use crate::store::EventType;

mod oracle;

fn info(group: &str, resource: &str, kind: &str, namespaced: bool) -> ResourceInfo {
    ResourceInfo {
        gvr: Gvr::new(group, "v1", resource),
        kind: kind.to_owned(),
        list_kind: format!("{kind}List"),
        namespaced,
        list_items_have_type_meta: false,
    }
}

fn pods() -> ResourceInfo {
    info("", "pods", "Pod", true)
}

fn extract(json: &str, info: &ResourceInfo) -> Result<Object, ExtractError> {
    object_from_json(Bytes::from(json.to_owned()), info)
}

fn field<'a>(object: &'a Object, info: &ResourceInfo, path: &str) -> Option<&'a str> {
    let i = info.field_kind().extra_fields().iter().position(|p| *p == path).expect("known field");
    object.fields[i].as_deref()
}

const POD: &str = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"default","uid":"u-1","resourceVersion":"42","labels":{"tier":"web","app":"shop"},"annotations":{"note":"a \u003cb\u003e \u0026 c"}},"spec":{"nodeName":"node-7","restartPolicy":"Always","schedulerName":"default-scheduler","serviceAccountName":"default","hostNetwork":true,"containers":[{"name":"c","image":"nginx"}]},"status":{"phase":"Running","podIP":"10.0.0.9","podIPs":[{"ip":"10.0.0.1"},{"ip":"fd00::1"}],"nominatedNodeName":"n2"}}"#;

#[test]
fn pod_facts_are_extracted() {
    let info = pods();
    let pod = extract(POD, &info).expect("valid pod");
    assert_eq!(&*pod.key, "default/web-1");
    assert_eq!(pod.namespace(), Some("default"));
    assert_eq!(pod.name(), "web-1");
    assert_eq!(&*pod.uid, "u-1");
    assert_eq!(pod.resource_version, 42);
    assert_eq!(pod.label("app"), Some("shop"));
    assert_eq!(pod.label("tier"), Some("web"));
    assert_eq!(pod.labels.iter().map(|(k, _)| &**k).collect::<Vec<_>>(), ["app", "tier"]);
    assert_eq!(field(&pod, &info, "spec.nodeName"), Some("node-7"));
    assert_eq!(field(&pod, &info, "spec.restartPolicy"), Some("Always"));
    assert_eq!(field(&pod, &info, "spec.schedulerName"), Some("default-scheduler"));
    assert_eq!(field(&pod, &info, "spec.serviceAccountName"), Some("default"));
    assert_eq!(field(&pod, &info, "spec.hostNetwork"), Some("true"));
    assert_eq!(field(&pod, &info, "status.phase"), Some("Running"));
    // The first of podIPs wins over podIP.
    assert_eq!(field(&pod, &info, "status.podIP"), Some("10.0.0.1"));
    assert_eq!(field(&pod, &info, "status.nominatedNodeName"), Some("n2"));
    let body = &POD[pod.body_offset as usize..];
    assert!(body.starts_with(r#""metadata":{"name":"web-1""#), "{body}");
    let meta = &POD[pod.metadata_range.start as usize..pod.metadata_range.end as usize];
    assert!(meta.starts_with(r#"{"name":"web-1""#) && meta.ends_with(r#"\u0026 c"}}"#), "{meta}");
}

#[test]
fn empty_and_null_roots_of_field_paths() {
    let json = r#"{"metadata":{"name":"p","namespace":"ns","resourceVersion":"1"},"spec":{},"status":null}"#;
    let pod = extract(json, &pods()).expect("valid pod");
    assert_eq!(field(&pod, &pods(), "spec.hostNetwork"), Some("false"));
    assert_eq!(field(&pod, &pods(), "status.phase"), None);
    // A later duplicate root replaces an earlier one wholesale, like Go's decoder of a fresh value.
    let json = r#"{"metadata":{"name":"p","namespace":"ns","resourceVersion":"1"},"spec":{"nodeName":"a"},"spec":{"schedulerName":"s"}}"#;
    let pod = extract(json, &pods()).expect("valid pod");
    assert_eq!(field(&pod, &pods(), "spec.nodeName"), None);
    assert_eq!(field(&pod, &pods(), "spec.schedulerName"), Some("s"));
}

#[test]
fn pod_defaults_follow_the_apiserver_field_set() {
    let info = pods();
    let json = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","resourceVersion":"1"},"spec":{},"status":{"podIP":"10.1.1.1"}}"#;
    let pod = extract(json, &info).expect("valid pod");
    assert_eq!(field(&pod, &info, "spec.hostNetwork"), Some("false"));
    assert_eq!(field(&pod, &info, "status.podIP"), Some("10.1.1.1"), "podIP when podIPs is absent");
    assert_eq!(field(&pod, &info, "spec.nodeName"), None);
    assert!(pod.labels.is_empty());
    assert_eq!(&*pod.uid, "");
}

#[test]
fn other_kinds_render_like_go() {
    let nodes = info("", "nodes", "Node", false);
    let node = extract(r#"{"metadata":{"name":"n1","resourceVersion":"5"},"spec":{}}"#, &nodes).unwrap();
    assert_eq!(&*node.key, "n1");
    assert_eq!(node.namespace(), None);
    assert_eq!(node.body_offset, 1, "no type meta");
    assert_eq!(field(&node, &nodes, "spec.unschedulable"), Some("false"));
    let node =
        extract(r#"{"metadata":{"name":"n1","resourceVersion":"5"},"spec":{"unschedulable":true}}"#, &nodes);
    assert_eq!(field(&node.unwrap(), &nodes, "spec.unschedulable"), Some("true"));

    let rs = info("apps", "replicasets", "ReplicaSet", true);
    let json = r#"{"metadata":{"name":"r","namespace":"a","resourceVersion":"5"},"status":{"replicas":3}}"#;
    assert_eq!(field(&extract(json, &rs).unwrap(), &rs, "status.replicas"), Some("3"));
    let json = r#"{"metadata":{"name":"r","namespace":"a","resourceVersion":"5"}}"#;
    assert_eq!(field(&extract(json, &rs).unwrap(), &rs, "status.replicas"), Some("0"));

    let events = info("", "events", "Event", true);
    let json = r#"{"metadata":{"name":"e","namespace":"a","resourceVersion":"5"},"involvedObject":{"kind":"Pod","name":"p"},"reason":"Started","type":"Normal","source":{"component":"kubelet"},"reportingComponent":"rc"}"#;
    let event = extract(json, &events).unwrap();
    assert_eq!(field(&event, &events, "source"), Some("kubelet"));
    assert_eq!(field(&event, &events, "reportingComponent"), Some("rc"));
    assert_eq!(field(&event, &events, "involvedObject.kind"), Some("Pod"));
    assert_eq!(field(&event, &events, "involvedObject.name"), Some("p"));
    assert_eq!(field(&event, &events, "reason"), Some("Started"));
    let json = r#"{"metadata":{"name":"e","namespace":"a","resourceVersion":"5"},"source":{},"reportingComponent":"ctrl"}"#;
    assert_eq!(field(&extract(json, &events).unwrap(), &events, "source"), Some("ctrl"));
}

#[test]
fn escapes_are_decoded() {
    let generic = info("example.com", "widgets", "Widget", true);
    let json = r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a\u002db","namespace":"n\u00e9","resourceVersion":"7","labels":{"k\u003c":"v\u0026\"q\""}},"spec":{}}"#;
    let widget = extract(json, &generic).expect("valid");
    assert_eq!(&*widget.key, "né/a-b");
    assert_eq!(widget.label("k<"), Some("v&\"q\""));
    // apiVersion-first type meta (Go sorts unstructured keys) is recognised too.
    assert!(json[widget.body_offset as usize..].starts_with(r#""metadata""#));
}

#[test]
fn invalid_objects_are_rejected() {
    let info = pods();
    type Check = fn(&ExtractError) -> bool;
    let cases: &[(&str, Check)] = &[
        (r#"{"kind":"Pod"}"#, |e| matches!(e, ExtractError::MissingMetadata)),
        (r#"{"metadata":null}"#, |e| matches!(e, ExtractError::MissingMetadata)),
        (r#"{"metadata":[]}"#, |e| matches!(e, ExtractError::WrongType(_))),
        (r#"{"metadata":{"namespace":"a","resourceVersion":"1"}}"#, |e| {
            matches!(e, ExtractError::MissingName)
        }),
        (r#"{"metadata":{"name":"","namespace":"a","resourceVersion":"1"}}"#, |e| {
            matches!(e, ExtractError::MissingName)
        }),
        (r#"{"metadata":{"name":"x","resourceVersion":"1"}}"#, |e| {
            matches!(e, ExtractError::MissingNamespace)
        }),
        (r#"{"metadata":{"name":"x","namespace":"a"}}"#, |e| {
            matches!(e, ExtractError::BadResourceVersion(_))
        }),
        (r#"{"metadata":{"name":"x","namespace":"a","resourceVersion":"+5"}}"#, |e| {
            matches!(e, ExtractError::BadResourceVersion(_))
        }),
        (r#"{"metadata":{"name":"x","namespace":"a","resourceVersion":"12a"}}"#, |e| {
            matches!(e, ExtractError::BadResourceVersion(_))
        }),
        (r#"{"metadata":{"name":"x","namespace":"a","resourceVersion":5}}"#, |e| {
            matches!(e, ExtractError::WrongType(_))
        }),
        (r#"{"metadata":{"name":"x/y","namespace":"a","resourceVersion":"1"}}"#, |e| {
            matches!(e, ExtractError::InvalidName { .. })
        }),
        (r#"{"metadata":{"name":"x","namespace":"a","resourceVersion":"1","labels":{"a":1}}}"#, |e| {
            matches!(e, ExtractError::WrongType(_))
        }),
        (r#"{"metadata":{"name":"x","namespace":"a","resourceVersion":"1"}} x"#, |e| {
            matches!(e, ExtractError::TrailingBytes)
        }),
        (r#"{"metadata":{"name":"x","namespace":"a","resourceVersion":"1"}}{}"#, |e| {
            matches!(e, ExtractError::TrailingBytes)
        }),
        (r#"{"metadata":{"name":"x","namespace":"a","resourceVersion":"1"},"spec":{"a":tru}}"#, |e| {
            matches!(e, ExtractError::Json(_))
        }),
        (r#"[1,2]"#, |e| matches!(e, ExtractError::NotAnObject)),
        ("", |e| matches!(e, ExtractError::Json(_))),
    ];
    for (json, expected) in cases {
        let err = extract(json, &info).expect_err(json);
        assert!(expected(&err), "{json}: {err:?}");
    }
    let invalid_utf8 =
        b"{\"metadata\":{\"name\":\"x\",\"namespace\":\"a\",\"resourceVersion\":\"1\"},\"s\":\"\xff\"}";
    assert!(object_from_json(Bytes::from_static(invalid_utf8), &info).is_err());
}

#[test]
fn pretty_printed_objects_are_handled() {
    let info = info("wardle.example.com", "flunders", "Flunder", true);
    let json = "{\n  \"kind\": \"Flunder\",\n  \"apiVersion\": \"wardle.example.com/v1alpha1\" ,\n  \"metadata\": {\n    \"name\": \"f1\",\n    \"namespace\": \"default\",\n    \"resourceVersion\": \"2\"\n  }\n}\n";
    let object = extract(json, &info).expect("valid");
    assert_eq!(&*object.key, "default/f1");
    let body = format!("{{{}", &json[object.body_offset as usize..]);
    let parsed: Value = serde_json::from_str(&body).expect("body form is JSON");
    assert_eq!(parsed.as_object().map(|o| o.len()), Some(1));
}

const LIST: &str = r#"{"kind":"FlunderList","apiVersion":"wardle.example.com/v1alpha1","metadata":{"resourceVersion":"6","continue":"eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6Niwic3RhcnQiOiIvZjJcdTAwMDAifQ","remainingItemCount":3},"items":[{"metadata":{"name":"f1","namespace":"default","resourceVersion":"2"},"spec":{"reference":"x1"},"status":{}},
 {"metadata":{"name":"f2","namespace":"default","resourceVersion":"3"},"spec":{},"status":{}}]}"#;

#[test]
fn lists_are_split_without_copies() {
    let body = Bytes::from_static(LIST.as_bytes());
    let parts = split_list(&body).expect("valid list");
    assert_eq!(parts.resource_version, 6);
    assert_eq!(
        parts.continue_token.as_deref(),
        Some("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6Niwic3RhcnQiOiIvZjJcdTAwMDAifQ")
    );
    assert_eq!(parts.remaining_item_count, Some(3));
    assert_eq!(parts.items_have_type_meta, Some(false));
    assert_eq!(parts.items.len(), 2);
    assert!(parts.items[0].starts_with(br#"{"metadata":{"name":"f1""#));
    assert!(parts.items[1].ends_with(br#""status":{}}"#));
    let base = body.as_ptr() as usize;
    let first = parts.items[0].as_ptr() as usize;
    assert!(first > base && first < base + body.len(), "items are slices of the body");

    let info = info("wardle.example.com", "flunders", "Flunder", true);
    let full = with_type_meta(&parts.items[1], "Flunder", "wardle.example.com/v1alpha1");
    assert!(full.starts_with(br#"{"kind":"Flunder","apiVersion":"wardle.example.com/v1alpha1","metadata""#));
    let object = object_from_json(full.clone(), &info).expect("valid item");
    assert_eq!(object.resource_version, 3);
    assert_eq!(
        format!("{{{}", std::str::from_utf8(&full[object.body_offset as usize..]).unwrap()).as_bytes(),
        &parts.items[1][..]
    );
}

#[test]
fn list_edge_cases() {
    let empty = Bytes::from_static(
        br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}"#,
    );
    let parts = split_list(&empty).unwrap();
    assert_eq!((parts.items.len(), parts.items_have_type_meta, parts.continue_token), (0, None, None));
    let null = Bytes::from_static(br#"{"metadata":{"resourceVersion":"9","continue":""},"items":null}"#);
    assert_eq!(split_list(&null).unwrap().resource_version, 9);
    let typed = Bytes::from_static(
        br#"{"metadata":{"resourceVersion":"9"},"items":[{"apiVersion":"x/v1","kind":"W","metadata":{}}]}"#,
    );
    assert_eq!(split_list(&typed).unwrap().items_have_type_meta, Some(true));
    for bad in [
        &br#"{"metadata":{"resourceVersion":"9"}}"#[..],
        br#"{"metadata":{"resourceVersion":"x"},"items":[]}"#,
        br#"{"metadata":{"resourceVersion":"9"},"items":[1]}"#,
        br#"{"metadata":{"resourceVersion":"9"},"items":{}}"#,
        br#"{"metadata":{"resourceVersion":"9"},"items":[{}"#,
    ] {
        assert!(split_list(&Bytes::from_static(bad)).is_err(), "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn watch_lines_are_framed() {
    let line = Bytes::from_static(
        b"{\"type\":\"ADDED\",\"object\":{\"kind\":\"Flunder\",\"metadata\":{\"name\":\"f2\"}}}\n",
    );
    let frame = parse_watch_line(line).unwrap();
    assert_eq!(frame.event_type, WatchEventType::Added);
    assert_eq!(&frame.object[..], br#"{"kind":"Flunder","metadata":{"name":"f2"}}"#);
    assert_eq!(frame.event_type.store_event_type(), Some(EventType::Added));

    let bookmark = Bytes::from_static(br#"{"type":"BOOKMARK","object":{"kind":"Flunder","apiVersion":"wardle.example.com/v1alpha1","metadata":{"resourceVersion":"6","annotations":{"k8s.io/initial-events-end":"true"}},"spec":{},"status":{}}}"#);
    let frame = parse_watch_line(bookmark).unwrap();
    assert_eq!(frame.event_type, WatchEventType::Bookmark);
    assert_eq!(
        bookmark_from_json(&frame.object).unwrap(),
        Bookmark { resource_version: 6, initial_events_end: true }
    );
    assert_eq!(&bookmark_tail(&frame.object).unwrap()[..], br#","spec":{},"status":{}"#);
    let bare = br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"1"}}"#;
    assert_eq!(&bookmark_tail(bare).unwrap()[..], b"");
    // Unstructured (sorted keys), missing type meta, oversized or malformed: nothing learned.
    let sorted = br#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"resourceVersion":"1"}}"#;
    assert_eq!(bookmark_tail(sorted), None);
    assert_eq!(bookmark_tail(br#"{"metadata":{"resourceVersion":"1"},"spec":{}}"#), None);
    let huge = format!(
        r#"{{"kind":"K","apiVersion":"v1","metadata":{{}},"spec":"{}"}}"#,
        "x".repeat(MAX_BOOKMARK_TAIL)
    );
    assert_eq!(bookmark_tail(huge.as_bytes()), None);
    assert_eq!(bookmark_tail(b"{"), None);
    let plain = br#"{"kind":"Flunder","metadata":{"resourceVersion":"7"},"spec":{}}"#;
    assert_eq!(
        bookmark_from_json(plain).unwrap(),
        Bookmark { resource_version: 7, initial_events_end: false }
    );

    let line = br#"{"type":"BOOKMARK","object":{"kind":"Flunder","metadata":{"resourceVersion":"9"}}}"#;
    let frame = parse_watch_line(Bytes::from_static(line)).unwrap();
    assert_eq!(frame.event_type, WatchEventType::Bookmark);
    assert_eq!(
        bookmark_from_json(&frame.object).unwrap(),
        Bookmark { resource_version: 9, initial_events_end: false }
    );
    let error = Bytes::from_static(br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 3 (11)","reason":"Expired","code":410}}"#);
    let frame = parse_watch_line(error).unwrap();
    assert_eq!(frame.event_type, WatchEventType::Error);
    assert!(frame.object.starts_with(b"{\"kind\":\"Status\""));

    for bad in [
        &br#"{"type":"UPSERT","object":{}}"#[..],
        br#"{"object":{}}"#,
        br#"{"type":"ADDED"}"#,
        br#"{"type":"ADDED","object":"x"}"#,
        br#"{"type":"ADDED","object":{"a":1}"#,
        b"",
        b"\n",
    ] {
        assert!(parse_watch_line(Bytes::from_static(bad)).is_err(), "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn type_meta_is_added_once() {
    let item = Bytes::from_static(br#"{"metadata":{"name":"a"}}"#);
    let full = with_type_meta(&item, "Pod", "v1");
    assert_eq!(&full[..], br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a"}}"#);
    let again = with_type_meta(&full, "Pod", "v1");
    assert_eq!(again.as_ptr(), full.as_ptr(), "already typed: returned as is");
    assert_eq!(
        &with_type_meta(&Bytes::from_static(b"{ }"), "K", "g/v")[..],
        br#"{"kind":"K","apiVersion":"g/v" }"#
    );
    let quoted = with_type_meta(&item, "K\"", "v");
    assert!(serde_json::from_slice::<Value>(&quoted).is_ok());
}

// === differential property tests (serde_json is the oracle) ===

/// The differential test is only worth something if the generator yields both valid and invalid
/// documents in fair numbers.
#[test]
fn generator_covers_valid_and_invalid_documents() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = oracle::document();
    let (mut ok, mut typed, total) = (0, 0, 400);
    for _ in 0..total {
        let doc = strategy.new_tree(&mut runner).expect("tree").current();
        if let Ok(object) = object_from_json(Bytes::from(doc.text.clone()), &doc.info()) {
            ok += 1;
            typed += usize::from(object.body_offset > 1);
        }
    }
    assert!(ok > total / 5 && ok < total * 4 / 5, "{ok} of {total} valid");
    assert!(typed > ok / 10, "{typed} of {ok} with type meta");
}

proptest! {

    #[test]
    fn extraction_matches_serde_json(doc in oracle::document()) {
        let info = doc.info();
        let raw = Bytes::from(doc.text.clone());
        let got = object_from_json(raw, &info);
        let expected = oracle::expected(&doc.text, &info);
        match (got, expected) {
            (Ok(object), Ok(want)) => {
                oracle::assert_object(&object, &want, &doc)?;
            }
            (Err(_), Err(_)) => {}
            (got, want) => prop_assert!(false, "{}: got {got:?}, oracle {want:?}", doc.text),
        }
    }

    #[test]
    fn truncated_objects_are_errors(doc in oracle::document(), cut in 0.0f64..1.0) {
        let text = doc.text.trim_end();
        let at = ((text.len() as f64) * cut) as usize;
        let truncated = Bytes::copy_from_slice(&text.as_bytes()[..at]);
        prop_assert!(object_from_json(truncated.clone(), &doc.info()).is_err());
        prop_assert!(split_list(&truncated).is_err());
        prop_assert!(parse_watch_line(truncated).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let bytes = Bytes::from(bytes);
        let _ = object_from_json(bytes.clone(), &pods());
        let _ = split_list(&bytes);
        let _ = parse_watch_line(bytes.clone());
        let _ = bookmark_from_json(&bytes);
        let _ = bookmark_tail(&bytes);
        let _ = with_type_meta(&bytes, "Pod", "v1");
    }

    #[test]
    fn lists_round_trip(docs in proptest::collection::vec(oracle::document(), 0..6), rv in 1u64..u64::MAX) {
        let items: Vec<&str> = docs.iter().map(|d| d.text.trim()).collect();
        let body = format!(r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[{}]}}"#, items.join(","));
        let body = Bytes::from(body);
        let parts = split_list(&body).expect("valid list");
        prop_assert_eq!(parts.resource_version, rv);
        prop_assert_eq!(parts.items.len(), items.len());
        for (got, want) in parts.items.iter().zip(&items) {
            prop_assert_eq!(&got[..], want.as_bytes());
        }
        let frame = parse_watch_line(Bytes::from(format!("{{\"type\":\"MODIFIED\",\"object\":{}}}\n", items.first().copied().unwrap_or("{}"))))
            .expect("valid frame");
        prop_assert_eq!(&frame.object[..], items.first().copied().unwrap_or("{}").as_bytes());
    }
}
