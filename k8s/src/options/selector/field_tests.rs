use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::options::selector::test_support::{TestObject, object};

fn ok(s: &str) -> FieldSelector {
    FieldSelector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn err(s: &str) -> String {
    FieldSelector::parse(s).expect_err(s).0
}

#[test]
fn parses_terms_sorted_with_escapes() {
    assert!(ok("").is_empty());
    assert!(ok("=").is_empty());
    assert!(ok(",,").is_empty());
    let s = ok("spec.nodeName=n1,metadata.name!=a\\,b");
    assert_eq!(s.to_string(), "metadata.name!=a\\,b,spec.nodeName=n1");
    assert_eq!(s.terms()[0].value, "a,b");
    assert_eq!(ok("a==b").terms()[0].op, FieldOp::Equals);
    assert_eq!(ok("a=b\\=\\=").terms()[0].value, "b==");
    assert_eq!(ok("a=b\\=\\=").to_string(), "a=b\\=\\=");
    assert_eq!(ok("metadata.name=x").exact("metadata.name"), Some("x"));
    assert_eq!(ok("metadata.name!=x").exact("metadata.name"), None);
}

#[test]
fn error_messages_match_apimachinery() {
    assert_eq!(err("abc"), "invalid selector: 'abc'; can't understand 'abc'");
    assert_eq!(err("a=b,c"), "invalid selector: 'a=b,c'; can't understand 'c'");
    assert_eq!(err("a=b=c"), "invalid field selector: unescaped character in value: 61");
    assert_eq!(err("a=\\x"), "invalid field selector: invalid escape sequence: \\x");
    assert_eq!(err("a=b\\"), "invalid field selector: invalid escape sequence: \\");
}

#[test]
fn field_label_conversion() {
    let conv = |k: FieldKind, s: &str| ok(s).convert(k).map(|s| s.to_string()).map_err(|e| e.0);
    assert_eq!(conv(FieldKind::Pod, "spec.host=n1"), Ok("spec.nodeName=n1".into()));
    assert_eq!(conv(FieldKind::Pod, "status.podIPs=x"), Ok("status.podIPs=x".into()));
    assert_eq!(conv(FieldKind::Pod, "spec.foo=x"), Err("field label not supported: spec.foo".into()));
    assert_eq!(
        conv(FieldKind::Generic, "spec.foo=x"),
        Err("\"spec.foo\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
            .into())
    );
    assert_eq!(
        conv(FieldKind::Node, "metadata.namespace=x"),
        Err("field label not supported: metadata.namespace".into())
    );
    assert_eq!(conv(FieldKind::Node, "spec.unschedulable=true"), Ok("spec.unschedulable=true".into()));
    // The first unsupported term in sorted order is reported.
    assert_eq!(conv(FieldKind::Pod, "z.b=1,a.b=2"), Err("field label not supported: a.b".into()));
}

/// The messages and forms the real CRD apiserver (1.36) answers.
#[test]
fn custom_resource_conversion() {
    let conv = |namespaced: bool, s: &str| {
        ok(s)
            .convert_with(|l| custom_resource_field_label(namespaced, &[".spec.color"], l))
            .map(|s| s.to_string())
            .map_err(|e| e.0)
    };
    assert_eq!(conv(true, "metadata.namespace=a"), Ok("metadata.namespace=a".into()));
    assert_eq!(
        conv(false, "metadata.namespace=a"),
        Err("field label not supported: metadata.namespace".into())
    );
    assert_eq!(conv(false, "spec.color=red"), Ok("spec.color=red".into()));
    assert_eq!(conv(true, ".spec.color=red"), Err("field label not supported: .spec.color".into()));
    assert_eq!(conv(true, "spec.size=1"), Err("field label not supported: spec.size".into()));
    assert_eq!(conv(true, "metadata.uid=1"), Err("field label not supported: metadata.uid".into()));
}

/// Terms on a CRD's selectable fields read the object's bytes; the others its key.
#[test]
fn custom_resource_fields_match_the_stored_bytes() {
    let fields: crate::options::selector::custom::SelectableFields = Arc::from(vec![
        crate::options::selector::custom::SelectableField {
            label: "spec.color".into(),
            path: vec!["spec".into(), "color".into()],
        },
        crate::options::selector::custom::SelectableField {
            label: "spec.size".into(),
            path: vec!["spec".into(), "size".into()],
        },
    ]);
    let mut red = object(Some("ns"), "w1", &[], &[]);
    red.raw = bytes::Bytes::from_static(
        br#"{"apiVersion":"example.com/v1","kind":"Widget","spec":{"color":"red","size":3}}"#,
    );
    let mut bare = object(Some("ns"), "w2", &[], &[]);
    bare.raw = bytes::Bytes::from_static(br#"{"apiVersion":"example.com/v1","kind":"Widget","spec":{}}"#);
    let sel = |s: &str| ok(s).convert_custom(true, fields.clone()).expect("supported");
    let m = |s: &str, o: &TestObject| {
        sel(s).matches(o, FieldKind::Generic) && sel(s).matcher(FieldKind::Generic).matches(o)
    };
    assert!(m("spec.color=red", &red) && !m("spec.color=red", &bare));
    assert!(m("spec.color=", &bare) && m("spec.color!=red", &bare));
    assert!(m("spec.size=3,metadata.name=w1", &red) && !m("spec.size=3,metadata.name=w2", &red));
    assert_eq!(
        ok("spec.notes=x").convert_custom(true, fields.clone()).map_err(|e| e.0),
        Err("field label not supported: spec.notes".to_owned())
    );
    assert_eq!(
        ok("metadata.namespace=ns").convert_custom(false, fields).map_err(|e| e.0),
        Err("field label not supported: metadata.namespace".to_owned())
    );
}

#[test]
fn custom_resource_metadata_only() {
    let meta = |namespaced: bool, s: &str| custom_resource_metadata_fields(&ok(s), namespaced);
    assert!(meta(true, "metadata.name=a,metadata.namespace!=b") && meta(false, "metadata.name=a"));
    assert!(meta(false, "") && !meta(false, "metadata.namespace=a") && !meta(true, "spec.color=red"));
}

#[test]
fn matching_reads_missing_fields_as_empty() {
    let pod_fields = [Some("node-1"), None, None, None, None, Some("Running"), None, None];
    let pod = object(Some("ns"), "p1", &[], &pod_fields);
    let m = |s: &str| ok(s).convert(FieldKind::Pod).expect("valid").matches(&pod, FieldKind::Pod);
    assert!(m("spec.nodeName=node-1") && m("spec.host=node-1") && !m("spec.nodeName=node-2"));
    assert!(m("metadata.name=p1,metadata.namespace=ns") && !m("metadata.namespace=other"));
    assert!(m("spec.restartPolicy=") && m("spec.restartPolicy!=Always") && m("status.podIPs="));
    assert!(m("status.phase!=Pending") && !m("status.phase!=Running"));
    let node = object(None, "n1", &[], &[Some("true")]);
    let sel = ok("metadata.name=n1,spec.unschedulable=true");
    assert!(sel.matches(&node, FieldKind::Node));
    assert!(sel.matcher(FieldKind::Node).matches(&node));
    assert!(ok("metadata.namespace=").matches(&node, FieldKind::Generic));
}

proptest! {
    #[test]
    fn never_panics(s in "\\PC{0,40}") {
        let _ = FieldSelector::parse(&s);
    }

    #[test]
    fn round_trips(terms in proptest::collection::vec(("[a-z.]{1,6}", any::<bool>(), "[a-z=,\\\\ ]{0,5}"), 0..4)) {
        let text: Vec<String> = terms.iter()
            .map(|(f, eq, v)| format!("{f}{}{}", if *eq { "=" } else { "!=" }, escape_value(v)))
            .collect();
        let sel = FieldSelector::parse(&text.join(",")).expect("escaped terms parse");
        prop_assert_eq!(sel.terms().len(), terms.len());
        prop_assert_eq!(FieldSelector::parse(&sel.to_string()).expect("rendered"), sel);
    }
}
