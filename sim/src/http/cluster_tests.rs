//! What a sim run as `kache demo` runs it answers over HTTP: no kubelets said plainly, `kubectl auth
//! can-i` without authorization, server-side apply refused with the reason, strict field validation
//! against the OpenAPI schemas, the counters of what it served.

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::Sim;

async fn send(base: &str, method: Method, path: &str, ct: &str, body: &Value) -> (u16, Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::builder()
        .method(method)
        .uri(format!("{base}{path}"))
        .header("content-type", ct)
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    let resp = client.request(req).await.expect("response");
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn pod(name: &str, container: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [container]}})
}

#[tokio::test]
async fn without_kubelets_what_needs_one_answers_why() {
    let sim = Sim::builder().kubelets(false).start().await.expect("sim starts");
    let url = sim.url();
    sim.create("pods", Some("default"), pod("p", json!({"name": "c", "image": "i"}))).expect("created");
    for (sub, what) in [
        ("exec?command=ls", "kubectl exec"),
        ("log", "kubectl logs"),
        ("portforward", "kubectl port-forward"),
    ] {
        let (code, status) =
            send(&url, Method::GET, &format!("/api/v1/namespaces/default/pods/p/{sub}"), "", &Value::Null)
                .await;
        assert_eq!(code, 501, "{sub}: {status}");
        let message = status["message"].as_str().unwrap_or("");
        assert!(message.starts_with(what) && message.contains("no kubelets"), "{message}");
    }
    let ssa = send(
        &url,
        Method::PATCH,
        "/api/v1/namespaces/default/pods/p",
        "application/apply-patch+yaml",
        &json!({}),
    )
    .await;
    assert_eq!(ssa.0, 415);
    assert!(ssa.1["message"].as_str().unwrap_or("").contains("server-side apply"), "{}", ssa.1);
    sim.shutdown().await;
}

#[tokio::test]
async fn can_i_is_always_yes_without_authorization() {
    let sim = Sim::builder().start().await.expect("sim starts");
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                        "spec": {"resourceAttributes": {"verb": "list", "resource": "pods"}}});
    let (code, out) = send(
        &sim.url(),
        Method::POST,
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        "application/json",
        &review,
    )
    .await;
    assert_eq!((code, &out["status"]["allowed"], &out["spec"]), (201, &json!(true), &review["spec"]));
    sim.shutdown().await;
}

#[tokio::test]
async fn strict_field_validation_names_unknown_fields() {
    let sim = Sim::builder().start().await.expect("sim starts");
    let url = sim.url();
    let pods = "/api/v1/namespaces/default/pods";
    let typo = pod("typo", json!({"name": "c", "imagee": "i"}));
    let (code, status) =
        send(&url, Method::POST, &format!("{pods}?fieldValidation=Strict"), "application/json", &typo).await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        r#"Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.containers[0].imagee""#
    );
    // Without Strict the body is taken as it is; a correct one passes Strict.
    assert_eq!(send(&url, Method::POST, pods, "application/json", &typo).await.0, 201);
    let good = pod("good", json!({"name": "c", "image": "i"}));
    assert_eq!(
        send(&url, Method::POST, &format!("{pods}?fieldValidation=Strict"), "application/json", &good)
            .await
            .0,
        201
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn served_counts_api_requests_and_their_bytes() {
    let sim = Sim::builder().start().await.expect("sim starts");
    let before = sim.served();
    let (code, list) = send(&sim.url(), Method::GET, "/api/v1/namespaces", "", &Value::Null).await;
    assert_eq!(code, 200);
    let after = sim.served();
    assert_eq!(after.0 - before.0, 1);
    assert_eq!(after.1 - before.1, list.to_string().len() as u64 + 1, "compact JSON and a newline");
    // The admin API is not counted.
    send(&sim.url(), Method::GET, "/sim/served", "", &Value::Null).await;
    assert_eq!(sim.served(), after);
    sim.shutdown().await;
}
