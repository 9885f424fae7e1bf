use std::time::Duration;

use http::Method;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

#[tokio::test]
async fn discovery_documents() {
    let env = start().await;
    let v = env.get("/version").await.json();
    assert_eq!((v["major"].as_str(), v["minor"].as_str()), (Some("1"), Some("35")));
    let api = env.get("/api").await.json();
    assert_eq!(api["versions"], json!(["v1"]));
    let core = env.get("/api/v1").await.json();
    assert_eq!(core["groupVersion"], "v1");
    let names: Vec<&str> =
        core["resources"].as_array().expect("r").iter().map(|r| r["name"].as_str().expect("n")).collect();
    for want in [
        "configmaps",
        "endpoints",
        "events",
        "namespaces",
        "namespaces/status",
        "nodes",
        "pods",
        "pods/log",
        "pods/status",
        "secrets",
        "services",
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    let groups = env.get("/apis").await.json();
    let gs: Vec<&str> =
        groups["groups"].as_array().expect("g").iter().map(|g| g["name"].as_str().expect("n")).collect();
    assert!(gs.contains(&"apps") && gs.contains(&"example.com"));
    assert_eq!(env.get("/apis/apps").await.json()["preferredVersion"]["groupVersion"], "apps/v1");
    let ex = env.get("/apis/example.com/v1").await.json();
    assert_eq!(ex["resources"][0]["name"], "gadgets");
    assert_eq!(env.get("/apis/nope").await.code(), 404);
    let r = env.get("/api/v1/foos").await;
    assert_eq!(
        r.text(),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"the server could not find the requested resource\",\"reason\":\"NotFound\",\"details\":{},\"code\":404}\n"
    );
    assert_eq!(env.get("/openapi/v3").await.code(), 200);
    assert_eq!(env.get("/healthz").await.code(), 200);
}

#[tokio::test]
async fn admin_api_over_http() {
    let env = start().await;
    let rv = env.cm("default", "a").await;
    env.cm("default", "b").await;
    let r = env.send(Method::POST, &format!("/sim/compact?revision={rv}"), None, &[]).await;
    assert_eq!(r.json()["revision"], json!(rv));
    assert_eq!(env.sim.revision(), env.get("/sim/revision").await.json()["revision"].as_u64().expect("rev"));
    env.send(Method::POST, "/sim/fail?count=2&status=503", None, &[]).await;
    assert_eq!(env.get("/api/v1/namespaces").await.code(), 503);
    assert_eq!(env.get("/api/v1/namespaces").await.code(), 503);
    assert_eq!(env.get("/api/v1/namespaces").await.code(), 200);
    env.sim.fail_next(1, 429);
    let r = env.get("/api/v1/namespaces").await;
    assert_eq!((r.code(), r.headers.get("retry-after").map(|v| v.to_str().unwrap_or(""))), (429, Some("1")));
    env.send(Method::POST, "/sim/delay?ms=1", None, &[]).await;
    assert_eq!(env.get("/api/v1/namespaces").await.code(), 200);
    env.send(Method::POST, "/sim/delay?ms=0", None, &[]).await;
    let mut w = env
        .watch(&format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={}",
            env.sim.revision()
        ))
        .await;
    env.send(Method::POST, "/sim/drop-watches", None, &[]).await;
    w.end().await;
    assert_eq!(env.send(Method::POST, "/sim/fail?status=abc", None, &[]).await.code(), 400);
    assert_eq!(env.get("/sim/nope").await.code(), 404);
}

#[tokio::test]
async fn restart_keeps_port_and_data() {
    let env = start().await;
    env.cm("default", "a").await;
    let addr = env.sim.addr();
    env.send(Method::POST, "/sim/restart", None, &[]).await;
    env.sim.restart().await;
    assert_eq!(env.sim.addr(), addr);
    assert_eq!(env.get("/api/v1/namespaces/default/configmaps/a").await.code(), 200);
}

#[tokio::test]
async fn echo_upgrade_and_pod_logs() {
    let env = start().await;
    let mut s = tokio::net::TcpStream::connect(env.sim.addr()).await.expect("connect");
    s.write_all(
        b"GET /sim/echo-upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n",
    )
    .await
    .expect("w");
    let mut buf = vec![0u8; 1024];
    let n = s.read(&mut buf).await.expect("r");
    let head = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(b"ping").await.expect("w");
    let mut got = [0u8; 4];
    tokio::time::timeout(EVENT_TIMEOUT, s.read_exact(&mut got)).await.expect("echo in time").expect("r");
    assert_eq!(&got, b"ping");

    assert_eq!(env.get("/api/v1/namespaces/default/pods/p/log").await.code(), 404);
    env.post("/api/v1/namespaces/default/pods", json!({"metadata": {"name": "p"}})).await;
    let mut s = tokio::net::TcpStream::connect(env.sim.addr()).await.expect("connect");
    s.write_all(
        b"POST /api/v1/namespaces/default/pods/p/exec?command=sh HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    )
    .await
    .expect("w");
    let n = s.read(&mut buf).await.expect("r");
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 101"));
    assert_eq!(env.send(Method::POST, "/api/v1/namespaces/default/pods/p/exec", None, &[]).await.code(), 400);
    let r = env.get("/api/v1/namespaces/default/pods/p/log").await;
    assert_eq!(r.code(), 200);
    assert!(r.text().starts_with("log line 1 from pod p\n"));
    let (ct, mut w) = env.stream("/api/v1/namespaces/default/pods/p/log?follow=true").await;
    assert_eq!(ct, "text/plain");
    for i in 1..=4 {
        assert_eq!(w.next_line().await, Some(format!("log line {i} from pod p")));
    }
}

#[tokio::test]
async fn bad_input_never_panics() {
    let env = start().await;
    let paths = [
        "/api/v1/namespaces/default/pods?limit=abc",
        "/api/v1/namespaces/default/pods?labelSelector=%21%21",
        "/api/v1/namespaces/default/pods?fieldSelector=%3D%3D%3D",
        "/api/v1/namespaces/default/pods?continue=%00%FF",
        "/api/v1/namespaces/default/pods?resourceVersion=99999999999999999999999",
        "/api/v1/namespaces/default/pods?timeoutSeconds=x&watch=1",
        "/api/v1/namespaces//pods",
        "/api/v1/namespaces/default/pods/x/y/z/w",
        "/apis/apps/v2/deployments",
        "/api/v1/namespaces/default/pods/%zz",
        "/%%%",
    ];
    for p in paths {
        let r = env.get(p).await;
        assert!(r.code() >= 400 && r.code() < 500, "{p}: {} {}", r.code(), r.text());
        assert_eq!(r.json()["kind"], "Status", "{p}");
    }
    for body in ["{", "[]", "null", "\"x\"", "{\"metadata\": 5}", "{\"metadata\":{\"name\":7}}"] {
        let r = env
            .send(
                Method::POST,
                "/api/v1/namespaces/default/configmaps",
                Some(&serde_json::from_str(body).unwrap_or(json!(body))),
                &[],
            )
            .await;
        assert!(r.code() == 400 || r.code() == 422, "{body}: {} {}", r.code(), r.text());
    }
    let r = env.send(Method::PUT, "/api/v1/namespaces/default/configmaps", Some(&json!({})), &[]).await;
    assert_eq!(r.code(), 405);
    let r = env.send(Method::DELETE, "/api/v1/configmaps", None, &[]).await;
    assert_eq!(r.code(), 405);
    let r = env.post("/api/v1/pods", json!({"metadata": {"name": "p"}})).await;
    assert_eq!(r.code(), 405);
    // Built-in kinds speak protobuf (src/proto); garbage in a protobuf body is a 400 Status.
    let r = env
        .send(Method::GET, "/api/v1/namespaces", None, &[("accept", "application/vnd.kubernetes.protobuf")])
        .await;
    assert_eq!(r.code(), 200);
    assert!(r.body.starts_with(b"k8s\0"), "{:?}", r.body);
    let r = env
        .send(
            Method::POST,
            "/api/v1/namespaces/default/configmaps",
            Some(&json!("k8s\u{0}\u{ff}\u{1}")),
            &[("content-type", "application/vnd.kubernetes.protobuf")],
        )
        .await;
    assert_eq!(r.code(), 400, "{}", r.text());
    assert_eq!(r.json()["reason"], "BadRequest");
    // The server still answers.
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(env.get("/api/v1/namespaces").await.code(), 200);
}

#[tokio::test]
async fn authentication_and_authorization() {
    use kache_sim::auth::{AuthConfig, Rule, UserInfo};
    let auth = AuthConfig::new()
        .with_token("admin-token", UserInfo::new("admin", &["system:masters"]))
        .with_token("alice-token", UserInfo::new("alice", &[]))
        .with_rule(
            Rule::new("read-cms")
                .user("alice")
                .verbs(&["get", "list", "watch"])
                .api_groups(&[""])
                .resources(&["configmaps"])
                .namespaces(&["default"]),
        );
    let env = start_with(builder().auth(Some(auth))).await;
    let r = env.get("/api/v1/namespaces").await;
    assert_eq!(
        r.text(),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"Unauthorized\",\"reason\":\"Unauthorized\",\"code\":401}\n"
    );
    assert_eq!(
        env.send(Method::GET, "/api/v1/namespaces", None, &[("authorization", "Bearer nope")]).await.code(),
        401
    );
    let admin = [("authorization", "Bearer admin-token")];
    assert_eq!(env.send(Method::GET, "/api/v1/namespaces", None, &admin).await.code(), 200);
    let alice = [("authorization", "Bearer alice-token")];
    assert_eq!(
        env.send(Method::GET, "/api/v1/namespaces/default/configmaps", None, &alice).await.code(),
        200
    );
    let r = env.send(Method::GET, "/api/v1/namespaces/default/secrets/s", None, &alice).await;
    assert_eq!(r.code(), 403);
    assert_eq!(
        r.json()["message"],
        "secrets \"s\" is forbidden: User \"alice\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\""
    );
    assert_eq!(r.json()["details"], json!({"name": "s", "kind": "secrets"}));
    let r = env.send(Method::GET, "/api/v1/configmaps", None, &alice).await;
    assert_eq!(
        r.json()["message"],
        "configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope"
    );
    let tr = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "alice-token"}});
    let r = env.send(Method::POST, "/apis/authentication.k8s.io/v1/tokenreviews", Some(&tr), &admin).await;
    assert_eq!(r.code(), 201, "{}", r.text());
    assert_eq!(r.json()["status"]["user"]["username"], "alice");
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "alice", "resourceAttributes": {"verb": "list", "resource": "configmaps", "namespace": "default"}}});
    let r = env
        .send(Method::POST, "/apis/authorization.k8s.io/v1/subjectaccessreviews", Some(&sar), &admin)
        .await;
    assert_eq!((r.code(), r.json()["status"]["allowed"].clone()), (201, json!(true)));
    // Rules can change while serving.
    env.sim.auth().expect("auth").set_rules(Vec::new());
    assert_eq!(
        env.send(Method::GET, "/api/v1/namespaces/default/configmaps", None, &alice).await.code(),
        403
    );
}

#[tokio::test]
async fn seeding_a_workload() {
    let env = start().await;
    let w = kache_sim::workload::Workload { namespaces: 2, pods: 10, nodes: 3, churn_per_sec: 0.0, seed: 7 };
    let n = env.sim.seed(&w).expect("seed");
    assert_eq!(n, 15);
    // Streaming seeding creates exactly the objects `seed_objects` describes.
    for (resource, ns, body) in kache_sim::workload::seed_objects(&w) {
        let name = body["metadata"]["name"].as_str().expect("name");
        let got = env.sim.get(resource, ns.as_deref(), name).expect("seeded");
        assert_eq!(got["spec"], body["spec"], "{resource} {name}");
        assert_eq!(got["metadata"]["labels"], body["metadata"]["labels"], "{resource} {name}");
    }
    let l = env.get("/api/v1/pods").await.json();
    assert_eq!(names(&l).len(), 10);
    let l = env.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-0").await.json();
    assert!(!names(&l).is_empty());
}
