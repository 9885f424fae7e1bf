use bytes::BytesMut;
use kache_k8s::table::Printer as BuiltIn;

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
    let view = TableView {
        printer: Printer::BuiltIn(BuiltIn::Namespaces),
        include: Include::None,
        v1: true,
        tables: std::sync::Arc::default(),
    };
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
    TableView { include: Include::Metadata, v1: false, ..view.clone() }.put_row_uncached(
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
