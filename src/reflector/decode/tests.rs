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

const POD: &str = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"7","labels":{"b":"2","a":"1"}},"spec":{"nodeName":"n1"},"status":{"phase":"Running"}}"#;

fn line(s: impl Into<String>) -> Bytes {
    Bytes::from(s.into())
}

#[test]
fn list_items_get_type_meta_and_own_their_bytes() {
    let body = Bytes::from_static(
        br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9","continue":"t"},"items":[{"metadata":{"name":"a","namespace":"ns","resourceVersion":"3"}},{"spec":{}}]}"#,
    );
    let page = decode_list(&body, &pods()).unwrap();
    assert_eq!((page.rv, page.continue_token.as_deref(), page.skipped), (9, Some("t"), 1));
    assert_eq!(page.items_have_type_meta, Some(false));
    assert_eq!(
        page.items[0].raw,
        Bytes::from_static(
            br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"3"}}"#
        )
    );
    let full =
        Bytes::from(format!(r#"{{"kind":"PodList","metadata":{{"resourceVersion":"9"}},"items":[{POD}]}}"#));
    let page = decode_list(&full, &pods()).unwrap();
    assert_eq!(page.items_have_type_meta, Some(true));
    let range = full.as_ptr() as usize..full.as_ptr() as usize + full.len();
    assert!(!range.contains(&(page.items[0].raw.as_ptr() as usize)), "copied out of the page");
    let empty = decode_list(
        &Bytes::from_static(br#"{"metadata":{"resourceVersion":"4","continue":""},"items":null}"#),
        &pods(),
    )
    .unwrap();
    assert_eq!(
        (empty.rv, empty.continue_token, empty.items.len(), empty.items_have_type_meta),
        (4, None, 0, None)
    );
    assert!(
        decode_list(&Bytes::from_static(br#"{"items":[]}"#), &pods()).is_err(),
        "a list without resourceVersion"
    );
}

#[test]
fn events_bookmarks_and_errors() {
    match decode_event(line(format!(r#"{{"type":"MODIFIED","object":{POD}}}"#)), &pods()).unwrap() {
        WatchEvent::Change(EventType::Modified, o) => {
            assert_eq!(o.raw, Bytes::from_static(POD.as_bytes()));
            assert_eq!((&*o.key, o.resource_version), ("ns/a", 7));
        }
        other => panic!("{other:?}"),
    }
    let bm = r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"containers":null},"status":{}}}"#;
    assert!(matches!(
        decode_event(line(bm), &pods()).unwrap(),
        WatchEvent::Bookmark { rv: 12, initial_events_end: true, .. }
    ));
    let err = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 3 (11)","reason":"Expired","code":410}}"#;
    match decode_event(line(err), &pods()).unwrap() {
        WatchEvent::Error(s) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(decode_event(line("{\"type\":\"ADDED\""), &pods()), Err(DecodeError::Frame(_))));
    assert!(matches!(
        decode_event(line(r#"{"type":"WHAT","object":{}}"#), &pods()),
        Err(DecodeError::Frame(_))
    ));
    assert!(matches!(
        decode_event(line(r#"{"type":"ADDED","object":{"kind":"Pod"}}"#), &pods()),
        Err(DecodeError::Object(_))
    ));
    assert!(matches!(
        decode_event(
            line(r#"{"type":"ADDED","object":{"metadata":{"name":"","resourceVersion":"1"}}}"#),
            &pods()
        ),
        Err(DecodeError::Object(_))
    ));
}

#[test]
fn status_retry_after_and_defaults() {
    let s = decode_status(
        br#"{"kind":"Status","status":"Failure","message":"storage is (re)initializing","reason":"TooManyRequests","details":{"retryAfterSeconds":3},"code":429}"#,
        500,
    );
    assert_eq!((s.code, s.retry_after), (429, Some(Duration::from_secs(3))));
    let s = decode_status(b"<html>bad gateway</html>", 502);
    assert_eq!((s.code, s.message.as_str()), (502, "<html>bad gateway</html>"));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let bytes = Bytes::from(bytes);
        let _ = decode_event(bytes.clone(), &pods());
        let _ = decode_list(&bytes, &pods());
        let _ = decode_status(&bytes, 500);
    }

    #[test]
    fn mutated_events_never_panic_and_never_yield_nameless_objects(
        cut in 0usize..300, flip in 0usize..300, byte in any::<u8>()
    ) {
        let mut l = format!(r#"{{"type":"ADDED","object":{POD}}}"#).into_bytes();
        let flip = flip % l.len();
        l[flip] = byte;
        l.truncate(l.len() - cut.min(l.len()));
        if let Ok(WatchEvent::Change(_, o)) = decode_event(Bytes::from(l), &pods()) {
            prop_assert!(!o.name().is_empty());
            prop_assert!(o.metadata_range.end as usize <= o.raw.len());
            prop_assert!(o.body_offset as usize <= o.raw.len());
        }
    }
}
