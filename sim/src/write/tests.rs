use serde_json::json;

use super::*;
use crate::kinds::table;

fn setup() -> (Store, ResId, WriteOpts) {
    let s = Store::new(table(&[]));
    let ns = s.find("", "namespaces").expect("namespaces");
    let opts = WriteOpts { dry_run: false, manager: "test".into() };
    create(&s, ns, None, json!({"metadata": {"name": "default"}}), &opts).expect("ns");
    let cm = s.find("", "configmaps").expect("configmaps");
    (s, cm, opts)
}

fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"].as_str().expect("rv").to_string()
}

#[test]
fn create_sets_server_fields_and_conflicts() {
    let (s, cm, o) = setup();
    let c = create(&s, cm, Some("default"), json!({"data": {"a": "1"}, "metadata": {"name": "x"}}), &o)
        .expect("create");
    let keys: Vec<&String> = c.as_object().expect("map").keys().collect();
    assert_eq!(keys, ["kind", "apiVersion", "metadata", "data"]);
    assert!(c["metadata"]["uid"].is_string() && c["metadata"]["creationTimestamp"].is_string());
    assert!(c["metadata"].get("generation").is_none());
    let e = create(&s, cm, Some("default"), json!({"metadata": {"name": "x"}}), &o).expect_err("409");
    assert_eq!((e.code, e.message.as_str()), (409, "configmaps \"x\" already exists"));
    let e = create(&s, cm, Some("nope"), json!({"metadata": {"name": "y"}}), &o).expect_err("404");
    assert_eq!(e.message, "namespaces \"nope\" not found");
    let e = create(&s, cm, Some("default"), json!({"metadata": {}}), &o).expect_err("422");
    assert_eq!(e.code, 422);
    let e = create(&s, cm, Some("default"), json!({"metadata": {"name": "Bad_Name"}}), &o).expect_err("422");
    assert!(e.message.starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value"));
    let g = create(&s, cm, Some("default"), json!({"metadata": {"generateName": "gen-"}}), &o).expect("gen");
    assert!(g["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("gen-") && n.len() == 9));
}

#[test]
fn update_precondition_conflict_and_noop() {
    let (s, cm, o) = setup();
    let c = create(&s, cm, Some("default"), json!({"metadata": {"name": "x"}, "data": {"a": "1"}}), &o)
        .expect("c");
    let mut stale = c.clone();
    stale["data"]["a"] = json!("2");
    let u = update(&s, cm, Some("default"), "x", stale.clone(), Part::Main, &o).expect("update");
    assert_ne!(rv(&u), rv(&c));
    let e = update(&s, cm, Some("default"), "x", stale, Part::Main, &o).expect_err("conflict");
    assert_eq!(
        e.message,
        "Operation cannot be fulfilled on configmaps \"x\": the object has been modified; please apply your changes to the latest version and try again"
    );
    let before = s.current_rev();
    let same = update(&s, cm, Some("default"), "x", u.clone(), Part::Main, &o).expect("noop");
    assert_eq!((rv(&same), s.current_rev()), (rv(&u), before));
}

#[test]
fn pods_track_generation_and_status_subresource() {
    let (s, _, o) = setup();
    let pods = s.find("", "pods").expect("pods");
    let p =
        create(&s, pods, Some("default"), json!({"metadata": {"name": "p"}, "spec": {"containers": []}}), &o)
            .expect("pod");
    assert_eq!(p["metadata"]["generation"], json!(1));
    let mut st = p.clone();
    st["status"] = json!({"phase": "Running"});
    st["spec"] = json!({"containers": [{"name": "ignored"}]});
    let s1 = update(&s, pods, Some("default"), "p", st, Part::Status, &o).expect("status");
    assert_eq!(
        (s1["status"]["phase"].clone(), s1["metadata"]["generation"].clone()),
        (json!("Running"), json!(1))
    );
    assert_eq!(s1["spec"], json!({"containers": []}));
    let mut sp = s1.clone();
    sp["spec"] = json!({"containers": [{"name": "c"}]});
    sp["status"] = json!({"phase": "Failed"});
    let s2 = update(&s, pods, Some("default"), "p", sp, Part::Main, &o).expect("spec");
    assert_eq!(
        (s2["status"]["phase"].clone(), s2["metadata"]["generation"].clone()),
        (json!("Running"), json!(2))
    );
}

#[test]
fn delete_with_preconditions_and_finalizers() {
    let (s, cm, o) = setup();
    let obj = json!({"metadata": {"name": "f", "finalizers": ["x/y"]}});
    let c = create(&s, cm, Some("default"), obj, &o).expect("c");
    let pre = Preconditions { resource_version: Some("999".into()), uid: None };
    let e = delete(&s, cm, Some("default"), "f", &pre, &o).expect_err("precondition");
    assert_eq!(e.code, 409);
    assert!(e.message.contains("the ResourceVersion in the precondition (999) does not match"));
    let Deleted::Pending(p) = delete(&s, cm, Some("default"), "f", &Preconditions::default(), &o).expect("d")
    else {
        panic!("finalizers keep the object");
    };
    assert!(p["metadata"]["deletionTimestamp"].is_string());
    let mut clear = p.clone();
    clear["metadata"]["finalizers"] = json!([]);
    update(&s, cm, Some("default"), "f", clear, Part::Main, &o).expect("remove finalizer");
    assert!(s.get(cm, "default/f", None).expect("read").is_none());
    let _ = c;
}

#[test]
fn patches_and_dry_run() {
    let (s, cm, o) = setup();
    create(&s, cm, Some("default"), json!({"metadata": {"name": "x"}, "data": {"a": "1"}}), &o).expect("c");
    let p =
        patch(&s, cm, Some("default"), "x", PatchType::Merge, &json!({"data": {"b": "2"}}), Part::Main, &o)
            .expect("merge");
    assert_eq!(p["data"], json!({"a": "1", "b": "2"}));
    let jp = json!([{"op": "remove", "path": "/data/a"}]);
    let p = patch(&s, cm, Some("default"), "x", PatchType::Json, &jp, Part::Main, &o).expect("json");
    assert_eq!(p["data"], json!({"b": "2"}));
    let e = patch(
        &s,
        cm,
        Some("default"),
        "x",
        PatchType::Json,
        &json!([{"op": "test", "path": "/data/b", "value": "9"}]),
        Part::Main,
        &o,
    )
    .expect_err("test fails");
    assert_eq!(e.code, 400);
    let rv_patch = json!({"metadata": {"resourceVersion": "1"}, "data": {"c": "3"}});
    let e = patch(&s, cm, Some("default"), "x", PatchType::Merge, &rv_patch, Part::Main, &o)
        .expect_err("conflict");
    assert_eq!(e.code, 409);
    let dry = WriteOpts { dry_run: true, ..o.clone() };
    let before = s.current_rev();
    create(&s, cm, Some("default"), json!({"metadata": {"name": "d"}}), &dry).expect("dry create");
    delete(&s, cm, Some("default"), "x", &Preconditions::default(), &dry).expect("dry delete");
    assert_eq!(s.current_rev(), before);
    assert!(s.get(cm, "default/d", None).expect("read").is_none());
}

#[test]
fn namespace_delete_cascades() {
    let (s, cm, o) = setup();
    let ns = s.find("", "namespaces").expect("ns");
    create(&s, ns, None, json!({"metadata": {"name": "gone"}}), &o).expect("ns");
    create(&s, cm, Some("gone"), json!({"metadata": {"name": "a"}}), &o).expect("cm");
    delete(&s, ns, None, "gone", &Preconditions::default(), &o).expect("delete ns");
    assert!(s.get(cm, "gone/a", None).expect("read").is_none());
}

#[test]
fn managed_fields_are_computed_unless_the_client_sets_them() {
    let (s, cm, o) = setup();
    let c = create(&s, cm, Some("default"), json!({"metadata": {"name": "a"}, "data": {"k": "v"}}), &o)
        .expect("c");
    assert_eq!(c["metadata"]["managedFields"][0]["manager"], "test");
    assert_eq!(c["metadata"]["managedFields"][0]["fieldsV1"], json!({"f:data": {"f:k": {}}}));
    let mine = json!([{"manager": "me", "operation": "Apply", "apiVersion": "v1"}]);
    let b = create(&s, cm, Some("default"), json!({"metadata": {"name": "b", "managedFields": mine}}), &o)
        .expect("b");
    assert_eq!(b["metadata"]["managedFields"], mine);
    // Sending back what was read is not "setting" them: the server records the update.
    let mut upd = c.clone();
    upd["data"]["k"] = json!("w");
    let u = update(&s, cm, Some("default"), "a", upd, Part::Main, &o).expect("u");
    assert_ne!(u["metadata"]["managedFields"][0]["time"], json!(null));
    assert_eq!(u["metadata"]["managedFields"].as_array().map(Vec::len), Some(1));
}

#[test]
fn metadata_of_the_wrong_type_is_400() {
    let (s, cm, o) = setup();
    for meta in [
        json!({"name": 7}),
        json!({"name": "a", "labels": {"x": 1}}),
        json!({"name": "a", "labels": []}),
        json!({"name": "a", "finalizers": "x"}),
    ] {
        let e = create(&s, cm, Some("default"), json!({"metadata": meta}), &o).expect_err("400");
        assert_eq!(e.code, 400, "{meta}");
        assert!(e.message.starts_with("json: cannot unmarshal"), "{}", e.message);
    }
}
