use serde_json::{Value, json};

use super::*;
use crate::kinds::{Crd, table as kinds_table};
use kache_k8s::table::age::{format_rfc3339, human as human_duration, parse as parse_rfc3339};

/// The cells and conditions the printer of a built-in resource gives one object.
fn printed_cells(plural: &str, v: &Value, now: i64) -> (Vec<Value>, Option<Value>) {
    printed(&printer(&res(plural, &[])), v, now)
}

fn res(plural: &str, crds: &[Crd]) -> ResourceDef {
    kinds_table(crds).into_iter().find(|r| r.plural == plural).expect("resource")
}

#[test]
fn human_durations_as_apimachinery_prints_them() {
    let s = 1000;
    for (ms, want) in [
        (-3 * s, "<invalid>"),
        (-1500, "0s"),
        (0, "0s"),
        (119 * s, "119s"),
        (120 * s, "2m"),
        (150 * s, "2m30s"),
        (600 * s, "10m"),
        (179 * 60 * s, "179m"),
        (3 * 3600 * s, "3h"),
        (3 * 3600 * s + 60 * s, "3h1m"),
        (8 * 3600 * s, "8h"),
        (47 * 3600 * s, "47h"),
        (48 * 3600 * s, "2d"),
        (50 * 3600 * s, "2d2h"),
        (8 * 86400 * s, "8d"),
        (730 * 86400 * s, "2y"),
        (731 * 86400 * s, "2y1d"),
        (3000 * 86400 * s, "8y"),
    ] {
        assert_eq!(human_duration(ms), want, "{ms} ms");
    }
}

#[test]
fn rfc3339_round_trips() {
    let t = parse_rfc3339("2026-11-26T12:57:50Z").expect("parses");
    assert_eq!(format_rfc3339(t), "2026-11-26T12:57:50Z");
    assert_eq!(parse_rfc3339("2026-11-26T13:57:50+01:00"), Some(t));
    assert_eq!(parse_rfc3339("2026-11-26T12:57:50.123456Z"), Some(t + 123));
    assert_eq!(format_rfc3339(kache_k8s::table::age::GO_ZERO_MS), "0001-01-01T00:00:00Z");
    assert_eq!(parse_rfc3339("0001-01-01T00:00:00Z"), Some(kache_k8s::table::age::GO_ZERO_MS));
    assert_eq!(parse_rfc3339("yesterday"), None);
}

#[test]
fn include_object_is_validated_like_the_apiserver() {
    let q = crate::options::Query::parse(Some("includeObject=Foo"));
    assert_eq!(
        Include::from_query(&q).map_err(|e| e.message),
        Err("Unable to convert to Table as requested: includeObject: Invalid value: \"Foo\": must be 'Metadata', 'Object', 'None', or empty".into())
    );
    assert_eq!(Include::from_query(&crate::options::Query::parse(None)).ok(), Some(Include::Metadata));
}

/// The generic default convertor, byte for byte as the real 1.36 sample-apiserver answered (flunders,
/// `includeObject=None`, compact).
#[test]
fn default_convertor_matches_the_real_apiserver() {
    let mut r = res("leases", &[]);
    r.plural = "unprinted".into();
    let obj = json!({"metadata": {"name": "f1", "namespace": "default", "resourceVersion": "2", "creationTimestamp": "2026-11-26T12:57:50Z"}});
    let meta = TableMeta { resource_version: "3".into(), cont: None, remaining: None, headers: true };
    let got = crate::json::compact(&table(&r, &[obj], meta, Include::None, MetaVersion::V1));
    let want = concat!(
        r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"3"},"columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names","priority":0},"#,
        r#"{"name":"Created At","type":"date","format":"","description":"CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata","priority":0}],"#,
        r#""rows":[{"cells":["f1","2026-11-26T12:57:50Z"],"object":null}]}"#
    );
    assert_eq!(String::from_utf8_lossy(&got), want);
    let empty = table(
        &r,
        &[],
        TableMeta { resource_version: "3".into(), cont: None, remaining: None, headers: false },
        Include::None,
        MetaVersion::V1,
    );
    assert_eq!(empty["rows"], Value::Null);
    assert_eq!(empty["columnDefinitions"], Value::Null);
}

/// A CRD's printer columns, cells as the real 1.36 CRD apiserver printed them for the same objects.
#[test]
fn crd_columns_match_the_real_crd_apiserver() {
    let cols = vec![
        PrinterColumn::new("Color", "string", ".spec.color").description("the color"),
        PrinterColumn::new("Size", "integer", ".spec.size"),
        PrinterColumn::new("Weight", "number", ".spec.weight").priority(1),
        PrinterColumn::new("Ready", "boolean", ".status.ready"),
        PrinterColumn::new("Tags", "string", ".spec.tags"),
        PrinterColumn::new("First", "string", ".spec.items[0].name").priority(1),
        PrinterColumn::new("Obj", "string", ".spec.obj").priority(2),
        PrinterColumn::new("Age", "date", ".metadata.creationTimestamp"),
    ];
    let crd = Crd::parse("example.com/v1/Widget/widgets/Namespaced").expect("crd").with_columns(cols);
    let r = res("widgets", &[crd]);
    let now = age::now_ms();
    let created = format_rfc3339(now - 5000);
    let w1 = json!({"metadata": {"name": "w1", "creationTimestamp": created}, "spec": {"color": "red", "size": 3, "weight": 1.5, "tags": ["a", "b"], "items": [{"name": "x"}], "obj": {"n": 1, "k": "v"}}, "status": {"ready": true}});
    let w2 = json!({"metadata": {"name": "w2", "creationTimestamp": created}, "spec": {"size": "big", "weight": 2.0, "color": 7}});
    let p = printer(&r);
    let (c1, c2) = (printed(&p, &w1, now).0, printed(&p, &w2, now).0);
    assert_eq!(
        String::from_utf8_lossy(&crate::json::compact(&json!([c1, c2]))),
        r#"[["w1","red",3,1.5,true,"[\"a\",\"b\"]","x","{\"k\":\"v\",\"n\":1}","5s"],["w2","7",null,2,null,null,null,null,"5s"]]"#
    );
    let defs = crate::json::compact(&column_values(&r));
    let defs = String::from_utf8_lossy(&defs);
    assert!(defs.contains(r#"{"name":"Size","type":"integer","format":"","description":"Custom resource definition column (in JSONPath format): .spec.size","priority":0}"#), "{defs}");
    assert!(
        defs.contains(
            r#"{"name":"Color","type":"string","format":"","description":"the color","priority":0}"#
        )
    );
    // Without declared columns: Name and the default Age (with ObjectMeta's description).
    let plain = res("gadgets", &[Crd::parse("example.com/v1/Gadget/gadgets/Cluster").expect("crd")]);
    let defs = column_values(&plain);
    assert_eq!(defs.as_array().map(Vec::len), Some(2));
    assert_eq!(defs[1]["description"], json!(docs::CREATED));
    assert_eq!(defs[1]["type"], json!("date"));
}

#[test]
fn pod_printer_aggregates_container_states() {
    let now = parse_rfc3339("2026-01-01T01:00:00Z").expect("now");
    let pod = json!({
        "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}],
                 "initContainers": [{"name": "side", "restartPolicy": "Always"}]},
        "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}],
            "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
            "initContainerStatuses": [{"name": "side", "ready": true, "started": true, "restartCount": 1, "state": {"running": {}}}],
            "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T00:55:00Z"}}},
                {"name": "b", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
    });
    let (cells, conds) = printed_cells("pods", &pod, now);
    assert_eq!(
        Value::Array(cells),
        json!(["p", "2/3", "CrashLoopBackOff", "3 (5m ago)", "60m", "10.0.0.1", "n1", "<none>", "<none>"])
    );
    assert!(conds.is_none());
    let done = json!({"metadata": {"name": "d"}, "spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Succeeded",
        "containerStatuses": [{"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}});
    let (cells, conds) = printed_cells("pods", &done, now);
    assert_eq!(cells[1..5], [json!("0/1"), json!("Completed"), json!("0"), json!("<unknown>")]);
    assert_eq!(conds.expect("conditions")[0]["reason"], json!("Succeeded"));
}

#[test]
fn workload_printers() {
    let now = parse_rfc3339("2026-01-03T00:00:00Z").expect("now");
    let ts = "2026-01-01T00:00:00Z";
    let dep = json!({"metadata": {"name": "web", "creationTimestamp": ts},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]},
                 "template": {"spec": {"containers": [{"name": "c1", "image": "i1"}, {"name": "c2", "image": "i2"}]}}},
        "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
    assert_eq!(
        Value::Array(printed_cells("deployments", &dep, now).0),
        json!(["web", "2/3", 3, 2, "2d", "c1,c2", "i1,i2", "app=web,tier in (a,b)"])
    );
    let svc = json!({"metadata": {"name": "s", "creationTimestamp": ts}, "spec": {"type": "NodePort", "clusterIPs": ["10.96.0.1"],
        "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}, {"port": 53, "protocol": "UDP"}], "selector": {"b": "2", "a": "1"}}});
    assert_eq!(
        Value::Array(printed_cells("services", &svc, now).0),
        json!(["s", "NodePort", "10.96.0.1", "<none>", "80:30080/TCP,53/UDP", "2d", "a=1,b=2"])
    );
    let node = json!({"metadata": {"name": "n", "creationTimestamp": ts, "labels": {"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": ""}},
        "spec": {"unschedulable": true}, "status": {"conditions": [{"type": "Ready", "status": "False"}],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.9"}], "nodeInfo": {"kubeletVersion": "v1.36.0"}}});
    assert_eq!(
        Value::Array(printed_cells("nodes", &node, now).0),
        json!([
            "n",
            "NotReady,SchedulingDisabled",
            "control-plane,worker",
            "2d",
            "v1.36.0",
            "10.0.0.9",
            "<none>",
            "<unknown>",
            "<unknown>",
            "<unknown>"
        ])
    );
    let ev = json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "Started", "type": "Normal",
        "message": " hi ", "source": {"component": "kubelet", "host": "n1"}, "firstTimestamp": ts, "lastTimestamp": ts});
    assert_eq!(
        Value::Array(printed_cells("events", &ev, now).0),
        json!(["2d", "Normal", "Started", "pod/p", "", "kubelet, n1", "hi", "2d", 1, "e1"])
    );
}
