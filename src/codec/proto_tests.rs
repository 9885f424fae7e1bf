//! The transcoder against the sim's independent encoder (itself proven byte-identical to the real Go
//! serializers in tests/protobuf.rs), and its refusals. The comparison with `kube-proto` itself is in
//! tests/it/protobuf_codec.rs.

use serde_json::{Value, json};

use crate::codec::proto::*;
use crate::codec::status::ApiError;
use kache_sim::proto::envelope as sim;

fn pod() -> Value {
    json!({"kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": "web-0", "namespace": "a", "uid": "u-1", "resourceVersion": "42",
            "creationTimestamp": "2024-05-06T07:08:09Z", "labels": {"b": "2", "a": "1"},
            "annotations": {"note": "<&>\u{e9}\u{2028}"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-2", "controller": true}],
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                "time": "2024-05-06T07:08:09Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:a": {}}}, "f:spec": {"k:{\"name\":\"c\"}": {"f:tab\t": {}}}}}]},
        "spec": {"volumes": [{"name": "cfg", "configMap": {"name": "cm", "defaultMode": 420}}],
            "containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "2"}},
                "livenessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 10},
                "readinessProbe": {"tcpSocket": {"port": 8080}}}],
            "terminationGracePeriodSeconds": 30, "priority": -5, "nodeName": "n"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null,
            "lastTransitionTime": "2024-05-06T07:08:09Z"}], "podIP": "10.0.0.5"}})
}

fn mine(v: &Value) -> Result<Vec<u8>, TranscodeError> {
    let av = v["apiVersion"].as_str().unwrap_or("v1");
    let (group, version) = av.split_once('/').unwrap_or(("", av));
    let kind = proto_kind(group, version, v["kind"].as_str().expect("kind")).expect("a schema kind");
    kind.encode_object(v.to_string().as_bytes())
}

fn sims(v: &Value) -> Vec<u8> {
    sim::encode_item(v["apiVersion"].as_str().expect("av"), v["kind"].as_str().expect("kind"), v)
        .expect("sim encodes")
}

#[test]
fn a_pod_encodes_as_the_sims_encoder() {
    let p = pod();
    assert_eq!(mine(&p).expect("transcodes"), sims(&p));
    // Without kind/apiVersion (a list item as stored) it is the same message.
    let mut bare = p.clone();
    bare.as_object_mut().expect("object").retain(|k, _| k != "kind" && k != "apiVersion");
    let k = proto_kind("", "v1", "Pod").expect("pods");
    assert_eq!(k.encode_object(bare.to_string().as_bytes()).expect("transcodes"), sims(&p));
}

#[test]
fn the_envelope_list_and_watch_frames_match_the_sims() {
    let p = pod();
    let msg = mine(&p).expect("transcodes");
    assert_eq!(envelope("v1", "Pod", &msg), sim::wrap("v1", "Pod", msg.clone()));
    let big = vec![7u8; 20_000]; // lengths of three varint bytes
    for (rv, cont, rem) in [("1", "", None), ("123456", "tok-en", Some(7)), ("", "", Some(0))] {
        let items: Vec<Vec<u8>> = vec![msg.clone(), Vec::new(), big.clone()];
        let meta = ListMeta { resource_version: rv, continue_token: cont, remaining_item_count: rem };
        let mut jmeta = json!({"resourceVersion": rv, "continue": cont});
        if let Some(n) = rem {
            jmeta["remainingItemCount"] = json!(n);
        }
        let want = sim::encode_list("v1", "PodList", &jmeta, &items).expect("sim list");
        assert_eq!(list("v1", "PodList", &meta, &items), want, "{rv} {cont} {rem:?}");
    }
    for ty in ["ADDED", "MODIFIED", "DELETED", "BOOKMARK"] {
        assert_eq!(
            watch_frame(ty, "v1", "Pod", &msg),
            sim::watch_frame(ty, sim::wrap("v1", "Pod", msg.clone()))
        );
    }
    assert_eq!(
        watch_frame("ADDED", "v1", "Pod", &big),
        sim::watch_frame("ADDED", sim::wrap("v1", "Pod", big.clone()))
    );
}

#[test]
fn statuses_encode_as_the_sims_encoder() {
    for err in [
        ApiError::not_found("", "pods", "web-0"),
        ApiError::bad_request("bad <input>"),
        ApiError::too_old_resource_version(5, 9),
        ApiError::not_ready(3),
        ApiError::not_acceptable(true),
        ApiError::method_not_supported("apps", "deployments", "proxy"),
    ] {
        let json: Value = serde_json::from_slice(&err.to_json()).expect("Status JSON");
        let want = sim::encode_object(&json).expect("sim Status");
        assert_eq!(status_body(&err), want, "{json}");
        let frame = status_watch_frame(&err);
        assert_eq!(frame, sim::watch_frame("ERROR", want), "{json}");
    }
}

#[test]
fn the_metadata_view_encodes_as_the_sims_encoder() {
    let p = pod();
    let meta = encode_object_meta(p["metadata"].to_string().as_bytes()).expect("metadata");
    let view =
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": p["metadata"]});
    assert_eq!(partial_object_metadata_message(&meta), sims(&view));
    let k = partial_object_metadata();
    assert_eq!(
        (k.api_version(), k.kind(), k.list_kind()),
        ("meta.k8s.io/v1", "PartialObjectMetadata", "PartialObjectMetadataList")
    );
    assert_eq!(k.encode_object(view.to_string().as_bytes()).expect("view"), sims(&view));
}

#[test]
fn kinds_are_found_by_group_version_kind() {
    let d = proto_kind("apps", "v1", "Deployment").expect("deployments");
    assert_eq!((d.api_version(), d.kind(), d.list_kind()), ("apps/v1", "Deployment", "DeploymentList"));
    let b = proto_kind("meta.k8s.io", "v1beta1", "PartialObjectMetadata").expect("v1beta1 views");
    assert_eq!(b.api_version(), "meta.k8s.io/v1beta1");
    for (g, v, k) in [
        ("", "v1", "Status"),
        ("", "v1", "PodList"),
        ("example.com", "v1", "Widget"),
        ("apps", "v2", "Deployment"),
        ("", "v1", "pod"),
    ] {
        assert!(proto_kind(g, v, k).is_none(), "{g}/{v} {k}");
    }
}

/// Every refusal is an error, never a panic and never bytes.
#[test]
fn what_the_schema_cannot_express_exactly_is_refused() {
    let k = proto_kind("", "v1", "Pod").expect("pods");
    let cases: &[(&str, &str)] = &[
        ("not JSON", "{"),
        ("trailing data", r#"{"metadata":{}} x"#),
        ("not an object", "[]"),
        ("unknown top-level key", r#"{"metadata":{},"extra":1}"#),
        ("unknown nested key", r#"{"metadata":{"nam":"x"}}"#),
        ("case-variant key (Go would match it)", r#"{"metadata":{"Name":"x"}}"#),
        ("duplicate key", r#"{"metadata":{"name":"a","name":"b"}}"#),
        ("duplicate embedded key", r#"{"spec":{"volumes":[{"name":"v","secret":{},"secret":{}}]}}"#),
        ("duplicate map key", r#"{"metadata":{"labels":{"a":"1","a":"2"}}}"#),
        ("wrong kind", r#"{"kind":"Service","metadata":{}}"#),
        ("wrong apiVersion", r#"{"apiVersion":"v2","metadata":{}}"#),
        ("string for an int", r#"{"spec":{"priority":"1"}}"#),
        ("float for an int", r#"{"spec":{"priority":1.0}}"#),
        ("int32 overflow", r#"{"spec":{"priority":2147483648}}"#),
        ("number for a string", r#"{"metadata":{"name":1}}"#),
        ("null map value", r#"{"metadata":{"labels":{"a":null}}}"#),
        ("null array element", r#"{"metadata":{"finalizers":[null]}}"#),
        ("time with a fraction", r#"{"metadata":{"creationTimestamp":"2024-05-06T07:08:09.5Z"}}"#),
        ("time with an offset", r#"{"metadata":{"creationTimestamp":"2024-05-06T07:08:09+02:00"}}"#),
        ("impossible date", r#"{"metadata":{"creationTimestamp":"2023-02-29T00:00:00Z"}}"#),
        (
            "non-canonical quantity",
            r#"{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"0.5"}}}]}}"#,
        ),
        (
            "quantity as a number",
            r#"{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":1}}}]}}"#,
        ),
        ("escaped raw JSON", r#"{"metadata":{"managedFields":[{"fieldsV1":{"f:\u003c":{}}}]}}"#),
        ("HTML-escaped raw JSON", r#"{"metadata":{"managedFields":[{"fieldsV1":{"f:\u0026":{}}}]}}"#),
        ("duplicate raw JSON", r#"{"metadata":{"managedFields":[{"fieldsV1":{"f:a":{}},"fieldsV1":{}}]}}"#),
        ("deep nesting", &format!("{}{}", "[".repeat(200), "]".repeat(200))),
    ];
    for (what, json) in cases {
        assert!(k.encode_object(json.as_bytes()).is_err(), "{what}: {json}");
    }
    let s = proto_kind("", "v1", "Secret").expect("secrets");
    assert!(s.encode_object(br#"{"data":{"a":"not base64!"}}"#).is_err());
}

#[test]
fn long_nested_messages_get_multi_byte_lengths() {
    // An annotation of 300 and one of 70 000 bytes: ObjectMeta and the map entries need 2- and 3-byte lengths.
    let v = json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "c", "annotations": {"a": "x".repeat(300), "b": "y".repeat(70_000)}}, "data": {"k": "z".repeat(130)}});
    assert_eq!(mine(&v).expect("transcodes"), sims(&v));
}
