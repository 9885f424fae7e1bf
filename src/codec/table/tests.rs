use bytes::BytesMut;
use serde_json::json;

use super::*;

#[test]
fn include_object_values() {
    assert_eq!(Include::from_value("").ok(), Some(Include::Metadata));
    assert_eq!(Include::from_value("Object").ok(), Some(Include::Object));
    assert_eq!(Include::from_value("None").ok(), Some(Include::None));
    let err = Include::from_value("Foo").expect_err("400");
    assert_eq!(
        err.to_string(),
        r#"Unable to convert to Table as requested: includeObject: Invalid value: "Foo": must be 'Metadata', 'Object', 'None', or empty"#
    );
}

#[test]
fn header_columns_and_rows() {
    let view = TableView { printer: Printer::Namespaces, include: Include::None, v1: true };
    let meta =
        ListMeta { resource_version: 7, continue_token: Some("t".into()), remaining_item_count: Some(2) };
    let h = view.header(&meta, true);
    let h = std::str::from_utf8(&h).expect("utf8");
    assert!(h.starts_with(r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"7","continue":"t","remainingItemCount":2},"columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"Name must be unique"#), "{h}");
    assert!(h.ends_with(r#"{"name":"Age","type":"string","format":"","description":"CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata","priority":0}],"rows":["#), "{h}");
    let no_headers = view.header(&ListMeta::default(), false);
    assert_eq!(
        &no_headers[..],
        &br#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{},"columnDefinitions":null,"rows":["#
            [..]
    );

    let raw = br#"{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"3","creationTimestamp":"1970-01-01T00:00:00Z"},"status":{"phase":"Active"}}"#;
    let mut out = BytesMut::new();
    TableView { include: Include::Metadata, v1: false, ..view }.put_row_uncached(
        &mut out,
        raw,
        Some(br#"{"name":"a","resourceVersion":"3","creationTimestamp":"1970-01-01T00:00:00Z"}"#),
        true,
        3_600_000,
    );
    assert_eq!(
        std::str::from_utf8(&out).expect("utf8"),
        r#"{"cells":["a","Active","60m"],"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1beta1","metadata":{"name":"a","resourceVersion":"3","creationTimestamp":"1970-01-01T00:00:00Z"}}}"#
    );
}

#[test]
fn pod_rows_keep_ages_symbolic() {
    let pod = json!({"metadata": {"name": "p", "creationTimestamp": "1970-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "a"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 1, "finishedAt": "1970-01-01T00:01:00Z"}}}]}});
    let row = Printer::Pods.row(&pod);
    assert_eq!(row.cells[3], row::Cell::RestartsAgo { count: 2, at: 60_000 });
    let mut out = BytesMut::new();
    row.put_head(&mut out, 180_000);
    assert_eq!(
        std::str::from_utf8(&out).expect("utf8"),
        r#"{"cells":["p","1/1","Running","2 (2m ago)","3m","\u003cnone\u003e","\u003cnone\u003e","\u003cnone\u003e","\u003cnone\u003e"]"#
    );
}

/// A cell holding the characters Go's `encoding/json` escapes is written as the apiserver writes it.
#[test]
fn cells_are_escaped_like_go() {
    let ns = json!({"metadata": {"name": "a<b>&", "creationTimestamp": "1970-01-01T00:00:00Z"},
        "status": {"phase": "\u{2028}\u{2029}\u{8}\u{c}"}});
    let mut out = BytesMut::new();
    Printer::Namespaces.row(&ns).put_head(&mut out, 0);
    assert_eq!(
        std::str::from_utf8(&out).expect("utf8"),
        r#"{"cells":["a\u003cb\u003e\u0026","\u2028\u2029\b\f","0s"]"#
    );
}

/// A `string` column whose value is an object prints it as Go's jsonpath does, keys sorted: the bytes must
/// not depend on serde_json's map order (`preserve_order` is on in test builds through the sim, off in the
/// shipped binary).
#[test]
fn crd_object_cells_sort_keys_in_every_build() {
    let crd = json!({"spec": {"versions": [{"name": "v1", "additionalPrinterColumns": [
        {"name": "Spec", "type": "string", "jsonPath": ".spec"}]}]}});
    let cols = crd::CrdColumns::from_crd(&crd, "v1").expect("columns");
    let o: serde_json::Value =
        serde_json::from_str(r#"{"metadata":{"name":"x"},"spec":{"z":1,"a":{"y":2.5,"b":"<"}}}"#)
            .expect("json");
    let mut out = BytesMut::new();
    cols.row(&o).put_head(&mut out, 0);
    assert_eq!(
        std::str::from_utf8(&out).expect("utf8"),
        r#"{"cells":["x","{\"a\":{\"b\":\"\\u003c\",\"y\":2.5},\"z\":1}"]"#
    );
}
