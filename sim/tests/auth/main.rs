//! Authentication and authorization over HTTP: bearer tokens, the bootstrap discovery policy, rules that
//! change while serving, anonymous access, TokenReview and SubjectAccessReview, and 401/403 bodies worded as
//! `kache_sim::auth`'s Status helpers word them.
//!
//! Impersonation (`Impersonate-*` headers) has its own module.
//!
//! Run: `cargo test -p kache-sim --test auth`.

mod impersonation;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use kache_sim::auth::{ANONYMOUS_USER, Attributes, UNAUTHENTICATED_GROUP};
use kache_sim::auth::{
    AuthConfig, Rule, UserInfo, forbidden_non_resource_status, forbidden_status, unauthorized_status,
};
use kache_sim::{Sim, SimHandle};
use serde_json::{Value, json};

pub struct Env {
    pub sim: SimHandle,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Env {
    pub async fn start(auth: AuthConfig) -> Env {
        let sim = Sim::builder().auth(Some(auth)).start().await.expect("sim starts");
        for ns in ["team-a", "team-b"] {
            sim.create(
                "namespaces",
                None,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .expect("namespace");
        }
        Env { sim, client: Client::builder(TokioExecutor::new()).build_http() }
    }

    /// Sends a request; returns the status and the body parsed as JSON (`Null` when it is not JSON).
    async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.send_with(method, path, token, &[], body).await
    }

    /// [`Env::send`] with extra headers (raw bytes, so tests can send values that are not UTF-8).
    pub async fn send_with(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &[u8])],
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = Request::builder().method(method).uri(format!("{}{path}", self.sim.url()));
        if let Some(token) = token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            let value = http::HeaderValue::from_bytes(value).expect("test header values are valid");
            req = req.header(*name, value);
        }
        let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let req = req.header("content-type", "application/json").body(Full::new(body)).expect("request");
        let resp = self.client.request(req).await.expect("sim answers");
        let status = resp.status();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }
}

fn config() -> AuthConfig {
    AuthConfig::new()
        .with_token("admin-token", UserInfo::new("admin", &["system:masters"]))
        .with_token("alice-token", UserInfo::new("alice", &["dev"]))
        .with_rule(
            Rule::new("dev-pods")
                .group("dev")
                .verbs(&["get", "list", "watch"])
                .api_groups(&[""])
                .resources(&["pods"])
                .namespaces(&["team-a"]),
        )
}

fn pods_in(verb: &str, namespace: &str) -> Attributes {
    Attributes {
        verb: verb.into(),
        resource: "pods".into(),
        namespace: namespace.into(),
        ..Attributes::default()
    }
}

#[tokio::test]
async fn tokens_rules_and_discovery() {
    let env = Env::start(config()).await;
    let alice = UserInfo::new("alice", &[]);

    // Discovery is open to every authenticated user (bootstrap policy), closed to unauthenticated ones.
    for path in ["/api", "/apis", "/version"] {
        assert_eq!(env.send(Method::GET, path, Some("alice-token"), None).await.0, StatusCode::OK, "{path}");
    }
    let (status, body) = env.send(Method::GET, "/api", None, None).await;
    assert_eq!((status, body), (StatusCode::UNAUTHORIZED, unauthorized_status()));
    let (status, _) = env.send(Method::GET, "/api", Some("wrong"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // The rule allows reading pods in team-a only.
    let (status, body) =
        env.send(Method::GET, "/api/v1/namespaces/team-a/pods", Some("alice-token"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["kind"], "PodList");
    let (status, body) =
        env.send(Method::GET, "/api/v1/namespaces/team-b/pods", Some("alice-token"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["message"], forbidden_status(&alice, &pods_in("list", "team-b"))["message"]);
    assert_eq!(body["details"], json!({"kind": "pods"}));
    let (status, body) = env.send(Method::GET, "/metrics", Some("alice-token"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["message"], forbidden_non_resource_status(&alice, "get", "/metrics")["message"]);

    // Masters may do anything; revoked rules stop working on the next request.
    let (status, _) =
        env.send(Method::GET, "/api/v1/namespaces/team-b/pods", Some("admin-token"), None).await;
    assert_eq!(status, StatusCode::OK);
    env.sim.auth().expect("auth is on").set_rules(Vec::new());
    let (status, _) =
        env.send(Method::GET, "/api/v1/namespaces/team-a/pods", Some("alice-token"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(env.send(Method::GET, "/api", Some("alice-token"), None).await.0, StatusCode::OK);
    env.sim.auth().expect("auth is on").revoke_token("alice-token");
    assert_eq!(env.send(Method::GET, "/api", Some("alice-token"), None).await.0, StatusCode::UNAUTHORIZED);
    env.sim.shutdown().await;
}

#[tokio::test]
async fn anonymous_requests_see_public_info_only() {
    let env = Env::start(config().with_anonymous(true)).await;
    assert_eq!(env.send(Method::GET, "/version", None, None).await.0, StatusCode::OK);
    let (status, body) = env.send(Method::GET, "/api", None, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let anonymous = UserInfo::new(ANONYMOUS_USER, &[UNAUTHENTICATED_GROUP]);
    assert_eq!(body["message"], forbidden_non_resource_status(&anonymous, "get", "/api")["message"]);
    assert_eq!(body["message"], "forbidden: User \"system:anonymous\" cannot get path \"/api\"");
    // Credentials that are not ASCII are bad credentials, not missing ones.
    let (status, _) =
        env.send_with(Method::GET, "/version", None, &[("authorization", b"Bearer t\xe9")], None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    env.sim.shutdown().await;
}

#[tokio::test]
async fn review_apis() {
    let env = Env::start(config()).await;
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "alice-token"}});
    let (status, body) = env
        .send(Method::POST, "/apis/authentication.k8s.io/v1/tokenreviews", Some("admin-token"), Some(review))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["status"]["authenticated"], true);
    assert_eq!(
        body["status"]["user"],
        json!({"username": "alice", "groups": ["dev", "system:authenticated"]})
    );

    let sar = |verb: &str, ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {"user": "alice", "groups": ["dev"],
                        "resourceAttributes": {"verb": verb, "resource": "pods", "namespace": ns}}})
    };
    let path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let (status, body) =
        env.send(Method::POST, path, Some("admin-token"), Some(sar("watch", "team-a"))).await;
    assert_eq!((status, body["status"]["allowed"].clone()), (StatusCode::CREATED, json!(true)), "{body}");
    let (_, body) = env.send(Method::POST, path, Some("admin-token"), Some(sar("delete", "team-a"))).await;
    assert_eq!(body["status"], json!({"allowed": false}));
    env.sim.shutdown().await;
}
