use bytes::BytesMut;
use serde_json::json;

use super::*;

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
