use http::Method;
use serde_json::json;

use crate::common::*;

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const PODS: &str = "/api/v1/namespaces/default/pods";

#[tokio::test]
async fn create_get_and_errors_have_apiserver_shapes() {
    let env = start().await;
    let r = env.get(&format!("{PODS}/x")).await;
    assert_eq!(
        r.text(),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"pods \\\"x\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"x\",\"kind\":\"pods\"},\"code\":404}\n"
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": {"phase": "Running"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let r = env.post(PODS, pod.clone()).await;
    assert_eq!(r.code(), 201);
    let keys: Vec<String> = r.json().as_object().expect("map").keys().cloned().collect();
    assert_eq!(keys, ["kind", "apiVersion", "metadata", "spec", "status"]);
    let meta: Vec<String> = r.json()["metadata"].as_object().expect("meta").keys().cloned().collect();
    assert_eq!(
        meta,
        ["name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"]
    );
    let r = env.post(PODS, pod).await;
    assert_eq!(r.code(), 409);
    assert_eq!(r.json()["reason"], "AlreadyExists");
    let r = env.post("/api/v1/namespaces/nope/pods", json!({"metadata": {"name": "p"}})).await;
    assert_eq!((r.code(), r.json()["message"].clone()), (404, json!("namespaces \"nope\" not found")));
    let r = env.post(PODS, json!({"metadata": {"generateName": "web-"}})).await;
    assert_eq!(r.code(), 201);
    assert!(r.json()["metadata"]["name"].as_str().expect("name").starts_with("web-"));
    let r = env.post(PODS, json!({"apiVersion": "apps/v1", "metadata": {"name": "q"}})).await;
    assert_eq!(r.code(), 400);
    let r = env.send(Method::POST, PODS, None, &[("content-type", "application/json")]).await;
    assert_eq!(r.code(), 400);
    assert_eq!(r.json()["reason"], "BadRequest");
    let r = env.send(Method::POST, PODS, Some(&json!({})), &[("content-type", "application/yaml")]).await;
    assert_eq!(r.code(), 415);
    let r = env.post(&format!("{PODS}?dryRun=All"), json!({"metadata": {"name": "dry"}})).await;
    assert_eq!(r.code(), 201);
    assert_eq!(env.get(&format!("{PODS}/dry")).await.code(), 404);
}

#[tokio::test]
async fn update_conflicts_and_status_subresource() {
    let env = start().await;
    let r = env.post(PODS, json!({"metadata": {"name": "p"}, "spec": {"containers": []}})).await;
    let v1 = r.json();
    let mut upd = v1.clone();
    upd["spec"]["nodeName"] = json!("n1");
    let r = env.send(Method::PUT, &format!("{PODS}/p"), Some(&upd), &[]).await;
    assert_eq!(r.code(), 200);
    assert_eq!(r.json()["metadata"]["generation"], 2);
    let r = env.send(Method::PUT, &format!("{PODS}/p"), Some(&upd), &[]).await;
    assert_eq!(r.code(), 409);
    assert_eq!(
        r.json()["message"],
        "Operation cannot be fulfilled on pods \"p\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(r.json()["reason"], "Conflict");
    let cur = env.get(&format!("{PODS}/p")).await.json();
    let mut st = cur.clone();
    st["status"] = json!({"phase": "Running"});
    let r = env.send(Method::PUT, &format!("{PODS}/p/status"), Some(&st), &[]).await;
    assert_eq!((r.code(), r.json()["status"]["phase"].clone()), (200, json!("Running")));
    let r = env.send(Method::PUT, &format!("{PODS}/q"), Some(&json!({"metadata": {"name": "q"}})), &[]).await;
    assert_eq!(r.code(), 404);
    let r =
        env.send(Method::PUT, &format!("{PODS}/p"), Some(&json!({"metadata": {"name": "other"}})), &[]).await;
    assert_eq!(r.code(), 400);
}

#[tokio::test]
async fn patch_types() {
    let env = start().await;
    env.cm("default", "c").await;
    let p = |ct: &'static str, body: serde_json::Value| {
        let env = &env;
        async move { env.send(Method::PATCH, &format!("{CMS}/c"), Some(&body), &[("content-type", ct)]).await }
    };
    let r = p("application/merge-patch+json", json!({"data": {"a": "1", "b": "2"}})).await;
    assert_eq!((r.code(), r.json()["data"].clone()), (200, json!({"a": "1", "b": "2"})));
    let r = p("application/json-patch+json", json!([{"op": "remove", "path": "/data/a"}])).await;
    assert_eq!((r.code(), r.json()["data"].clone()), (200, json!({"b": "2"})));
    let r = p("application/strategic-merge-patch+json", json!({"metadata": {"labels": {"x": "y"}}})).await;
    assert_eq!(r.code(), 200);
    let r =
        p("application/strategic-merge-patch+json", json!({"data": {"$patch": "replace", "z": "1"}})).await;
    assert_eq!((r.code(), r.json()["data"].clone()), (200, json!({"z": "1"})));
    // Lists of unknown strategy and custom resources are refused, never guessed.
    env.post(PODS, json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "1"}]}}))
        .await;
    let smp = [("content-type", "application/strategic-merge-patch+json")];
    let body = json!({"spec": {"containers": [{"name": "a", "image": "2"}]}});
    let r = env.send(Method::PATCH, &format!("{PODS}/p"), Some(&body), &smp).await;
    assert_eq!(
        (r.code(), r.json()["spec"]["containers"].clone()),
        (200, json!([{"name": "a", "image": "2"}]))
    );
    let r =
        env.send(Method::PATCH, &format!("{PODS}/p"), Some(&json!({"spec": {"mystery": [1]}})), &smp).await;
    assert_eq!(r.code(), 415);
    env.post("/apis/example.com/v1/namespaces/default/widgets", json!({"metadata": {"name": "w"}})).await;
    let w = "/apis/example.com/v1/namespaces/default/widgets/w";
    assert_eq!(env.send(Method::PATCH, w, Some(&json!({"spec": {}})), &smp).await.code(), 415);
    let r = p("application/apply-patch+yaml", json!({})).await;
    assert_eq!(r.code(), 415);
    assert_eq!(r.json()["reason"], "UnsupportedMediaType");
    let r = p("application/json-patch+json", json!([{"op": "replace", "path": "/nope/x", "value": 1}])).await;
    assert_eq!(r.code(), 400);
    let r = env
        .send(
            Method::PATCH,
            &format!("{CMS}/missing"),
            Some(&json!({})),
            &[("content-type", "application/merge-patch+json")],
        )
        .await;
    assert_eq!(r.code(), 404);
}

#[tokio::test]
async fn delete_answers_and_preconditions() {
    let env = start().await;
    env.post(PODS, json!({"metadata": {"name": "p"}})).await;
    let r = env.send(Method::DELETE, &format!("{PODS}/p"), None, &[]).await;
    assert_eq!((r.code(), r.json()["kind"].clone()), (200, json!("Pod")), "pods answer the object");
    let c = env.post(CMS, json!({"metadata": {"name": "c"}})).await.json();
    let bad = json!({"preconditions": {"resourceVersion": "1"}});
    let r = env.send(Method::DELETE, &format!("{CMS}/c"), Some(&bad), &[]).await;
    assert_eq!(r.code(), 409);
    assert_eq!(
        r.json()["message"],
        format!(
            "Operation cannot be fulfilled on configmaps \"c\": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record ({}). The object might have been modified",
            rv_of(&c)
        )
    );
    let bad = json!({"preconditions": {"uid": "nope"}});
    assert_eq!(env.send(Method::DELETE, &format!("{CMS}/c"), Some(&bad), &[]).await.code(), 409);
    let ok = json!({"preconditions": {"uid": c["metadata"]["uid"], "resourceVersion": c["metadata"]["resourceVersion"]}});
    let r = env.send(Method::DELETE, &format!("{CMS}/c"), Some(&ok), &[]).await;
    assert_eq!(
        r.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": {"name": "c", "kind": "configmaps", "uid": c["metadata"]["uid"]}})
    );
    assert_eq!(env.send(Method::DELETE, &format!("{CMS}/c"), None, &[]).await.code(), 404);
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let env = start().await;
    let c =
        env.post(CMS, json!({"metadata": {"name": "f", "finalizers": ["example.com/hold"]}})).await.json();
    let mut w = env.watch(&format!("{CMS}?watch=1&resourceVersion={}", rv_of(&c))).await;
    let r = env.send(Method::DELETE, &format!("{CMS}/f"), None, &[]).await;
    assert_eq!(r.code(), 200);
    assert!(r.json()["metadata"]["deletionTimestamp"].is_string());
    let (ty, _, rv) = w.next_summary().await;
    assert_eq!((ty.as_str(), rv), ("MODIFIED", rv_of(&r.json())));
    assert_eq!(env.get(&format!("{CMS}/f")).await.code(), 200, "still there");
    let r = env
        .send(
            Method::PATCH,
            &format!("{CMS}/f"),
            Some(&json!({"metadata": {"finalizers": null}})),
            &[("content-type", "application/merge-patch+json")],
        )
        .await;
    assert_eq!(r.code(), 200);
    let (ty, _, _) = w.next_summary().await;
    assert_eq!(ty, "DELETED");
    assert_eq!(env.get(&format!("{CMS}/f")).await.code(), 404);
}

#[tokio::test]
async fn delete_collection_by_selector() {
    let env = start().await;
    for (n, l) in [("a", "x"), ("b", "x"), ("c", "y")] {
        env.post(CMS, json!({"metadata": {"name": n, "labels": {"l": l}}})).await;
    }
    let r = env.send(Method::DELETE, &format!("{CMS}?labelSelector=l%3Dx"), None, &[]).await;
    assert_eq!(r.code(), 200);
    assert_eq!(names(&r.json()), ["a", "b"]);
    assert_eq!(names(&env.get(CMS).await.json()), ["c"]);
}

#[tokio::test]
async fn deployments_and_namespaces() {
    let env = start().await;
    let r = env
        .post(
            "/apis/apps/v1/namespaces/default/deployments",
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}}),
        )
        .await;
    assert_eq!(r.code(), 201, "{}", r.text());
    assert_eq!(r.json()["apiVersion"], "apps/v1");
    let r = env.get("/apis/apps/v1/namespaces/default/deployments/x").await;
    assert_eq!(r.json()["details"], json!({"name": "x", "group": "apps", "kind": "deployments"}));
    assert_eq!(r.json()["message"], "deployments.apps \"x\" not found");
    env.ns("tmp").await;
    env.cm("tmp", "c").await;
    let r = env.send(Method::DELETE, "/api/v1/namespaces/tmp", None, &[]).await;
    assert_eq!(r.code(), 200);
    assert_eq!(env.get("/api/v1/namespaces/tmp/configmaps/c").await.code(), 404);
}
