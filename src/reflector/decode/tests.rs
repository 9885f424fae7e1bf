use proptest::prelude::*;

use super::*;
use crate::resource::Gvr;

fn pods() -> ResourceInfo {
    ResourceInfo {
        gvr: Gvr::new("", "v1", "pods"),
        kind: "Pod".into(),
        list_kind: "PodList".into(),
        namespaced: true,
        list_items_have_type_meta: false,
    }
}

const POD: &str = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"7","labels":{"b":"2","a":"1"}},"spec":{"nodeName":"n1","hostNetwork":true},"status":{"phase":"Running"}}"#;

#[test]
fn object_fields_are_extracted_once() {
    let o = object_from_json(Bytes::from_static(POD.as_bytes()), &pods()).unwrap();
    assert_eq!((&*o.key, o.namespace(), o.name()), ("ns/a", Some("ns"), "a"));
    assert_eq!((&*o.uid, o.resource_version), ("u1", 7));
    assert_eq!(o.labels.iter().map(|(k, _)| &**k).collect::<Vec<_>>(), ["a", "b"], "sorted");
    let r = o.metadata_range.start as usize..o.metadata_range.end as usize;
    assert!(
        POD[r].starts_with("{\"name\":\"a\"")
            && POD[o.metadata_range.end as usize..].starts_with(",\"spec\"")
    );
    assert_eq!(&POD[o.body_offset as usize..o.body_offset as usize + 11], "\"metadata\":");
    let fields: Vec<_> = o.fields.iter().map(|f| f.as_deref()).collect();
    assert_eq!(fields[0], Some("n1"));
    assert_eq!(fields[4], Some("true"));
    assert_eq!(fields[5], Some("Running"));
}

#[test]
fn cluster_scoped_objects_ignore_namespace() {
    let info = ResourceInfo { namespaced: false, ..pods() };
    let o = object_from_json(Bytes::from_static(POD.as_bytes()), &info).unwrap();
    assert_eq!((&*o.key, o.ns_len), ("a", 0));
}

#[test]
fn type_meta_in_either_order() {
    assert_eq!(type_meta_end(br#"{"kind":"Pod","apiVersion":"v1","metadata":{}}"#), 32);
    assert_eq!(type_meta_end(br#"{"apiVersion":"x/v1","kind":"W","metadata":{}}"#), 32);
    assert_eq!(type_meta_end(br#"{"kind":"Pod","apiVersion":"v1"}"#), 31);
    assert_eq!(type_meta_end(br#"{"metadata":{},"kind":"Pod"}"#), 1);
    assert_eq!(type_meta_end(br#"{"kind":"P\"o","apiVersion":"v1","x":1}"#), 33);
    assert_eq!(type_meta_end(b"{\"kind\":\"unterminated"), 1);
    assert_eq!(type_meta_end(b""), 1);
}

#[test]
fn list_items_get_type_meta() {
    let body = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9","continue":"t"},"items":[{"metadata":{"name":"a","namespace":"ns","resourceVersion":"3"}},{"spec":{}}]}"#;
    let page = decode_list(body.as_bytes(), &pods()).unwrap();
    assert_eq!((page.rv, page.continue_token.as_deref(), page.skipped), (9, Some("t"), 1));
    assert_eq!(page.items_have_type_meta, Some(false));
    assert_eq!(
        page.items[0].raw,
        Bytes::from_static(br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"3"}}"#)
    );
    assert_eq!(
        with_type_meta(b"{}", "Pod", "v1"),
        Bytes::from_static(br#"{"kind":"Pod","apiVersion":"v1"}"#)
    );
    let empty =
        decode_list(br#"{"metadata":{"resourceVersion":"4","continue":""},"items":null}"#, &pods()).unwrap();
    assert_eq!(
        (empty.rv, empty.continue_token, empty.items.len(), empty.items_have_type_meta),
        (4, None, 0, None)
    );
    assert!(decode_list(br#"{"items":[]}"#, &pods()).is_err(), "a list without resourceVersion");
}

#[test]
fn events_bookmarks_and_errors() {
    let line = format!(r#"{{"type":"MODIFIED","object":{POD}}}"#);
    match decode_event(line.as_bytes(), &pods()).unwrap() {
        WatchEvent::Change(EventType::Modified, o) => assert_eq!(o.raw, Bytes::from_static(POD.as_bytes())),
        other => panic!("{other:?}"),
    }
    let bm = br#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"containers":null},"status":{}}}"#;
    assert!(matches!(
        decode_event(bm, &pods()).unwrap(),
        WatchEvent::Bookmark { rv: 12, initial_events_end: true }
    ));
    let err = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 3 (11)","reason":"Expired","code":410}}"#;
    match decode_event(err, &pods()).unwrap() {
        WatchEvent::Error(s) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(decode_event(b"{\"type\":\"ADDED\"", &pods()), Err(DecodeError::Frame(_))));
    assert!(matches!(decode_event(br#"{"type":"WHAT","object":{}}"#, &pods()), Err(DecodeError::Frame(_))));
    assert!(matches!(
        decode_event(br#"{"type":"ADDED","object":{"kind":"Pod"}}"#, &pods()),
        Err(DecodeError::Object(_))
    ));
    assert!(matches!(
        decode_event(br#"{"type":"ADDED","object":{"metadata":{"name":"","resourceVersion":"1"}}}"#, &pods()),
        Err(DecodeError::Object(_))
    ));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_event(&bytes, &pods());
        let _ = decode_list(&bytes, &pods());
        let _ = type_meta_end(&bytes);
        let _ = decode_status(&bytes, 500);
    }

    #[test]
    fn mutated_events_never_panic_and_never_yield_nameless_objects(
        cut in 0usize..300, flip in 0usize..300, byte in any::<u8>()
    ) {
        let mut line = format!(r#"{{"type":"ADDED","object":{POD}}}"#).into_bytes();
        let flip = flip % line.len();
        line[flip] = byte;
        line.truncate(line.len() - cut.min(line.len()));
        if let Ok(WatchEvent::Change(_, o)) = decode_event(&line, &pods()) {
            prop_assert!(!o.name().is_empty());
            prop_assert!(o.metadata_range.end as usize <= o.raw.len());
            prop_assert!(o.body_offset as usize <= o.raw.len());
        }
    }

    #[test]
    fn type_meta_round_trips(
        name in "[a-z0-9.-]{1,20}", kind in "[A-Za-z]{1,12}", value in "[ -~]{0,20}"
    ) {
        let item = format!(r#"{{"metadata":{{"name":"{name}","resourceVersion":"1"}},"data":{}}}"#, serde_json::Value::from(value));
        let full = with_type_meta(item.as_bytes(), &kind, "example.com/v1");
        let end = type_meta_end(&full);
        prop_assert!(end > 1);
        let mut back = b"{".to_vec();
        back.extend_from_slice(&full[end..]);
        prop_assert_eq!(back, item.into_bytes());
        prop_assert!(serde_json::from_slice::<serde_json::Value>(&full).is_ok());
    }
}
