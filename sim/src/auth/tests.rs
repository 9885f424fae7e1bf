use serde_json::{Value, json};

use super::*;

fn config() -> AuthConfig {
    AuthConfig::new()
        .with_token("alice-token", UserInfo::new("alice", &["dev"]))
        .with_token("root-token", UserInfo::new("root", &[MASTERS_GROUP]))
        .with_rule(
            Rule::new("pod-reader")
                .user("alice")
                .verbs(&["get", "list", "watch"])
                .api_groups(&[""])
                .resources(&["pods"]),
        )
        .with_rule(
            Rule::new("dev-configmaps")
                .group("dev")
                .verbs(&["*"])
                .api_groups(&[""])
                .resources(&["configmaps"])
                .namespaces(&["team-a"]),
        )
        .with_rule(
            Rule::new("discovery")
                .group(AUTHENTICATED_GROUP)
                .verbs(&["get"])
                .non_resource_urls(&["/api", "/apis/*", "/version"]),
        )
}

fn attrs(verb: &str, group: &str, resource: &str, namespace: &str) -> Attributes {
    Attributes {
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        namespace: namespace.into(),
        ..Attributes::default()
    }
}

fn json_of(bytes: Result<Vec<u8>, String>) -> Value {
    serde_json::from_slice(&bytes.expect("review succeeds")).expect("response is JSON")
}

// === authentication ===

#[test]
fn bearer_tokens_authenticate_and_add_the_authenticated_group() {
    let cfg = config();
    let alice = cfg.authenticate(Some("Bearer alice-token")).expect("known token");
    assert_eq!(alice.name, "alice");
    assert_eq!(alice.groups, ["dev", AUTHENTICATED_GROUP]);
    assert_eq!(cfg.authenticate(Some("bearer alice-token")).map(|u| u.name), Some("alice".into()));
    assert_eq!(cfg.authenticate(Some("Bearer alice-token extra")).map(|u| u.name), Some("alice".into()));
    for bad in
        ["Bearer nope", "Bearer ", "Bearer", "Basic YWxpY2U6cA==", "", "alice-token", "Bearer  alice-token"]
    {
        assert_eq!(cfg.authenticate(Some(bad)), None, "{bad:?}");
    }
    assert_eq!(cfg.authenticate(None), None, "anonymous access is off by default");
}

#[test]
fn anonymous_only_without_credentials() {
    let cfg = config().with_anonymous(true);
    assert_eq!(cfg.authenticate(None), Some(UserInfo::new(ANONYMOUS_USER, &[UNAUTHENTICATED_GROUP])));
    assert_eq!(cfg.authenticate(Some("Bearer wrong")), None, "a bad token is a 401, never anonymous");
}

#[test]
fn tokens_can_be_revoked_and_added_at_runtime() {
    let cfg = config();
    assert!(cfg.revoke_token("alice-token"));
    assert!(!cfg.revoke_token("alice-token"));
    assert_eq!(cfg.authenticate(Some("Bearer alice-token")), None);
    cfg.add_token("bob-token", UserInfo::new("bob", &[]));
    assert_eq!(
        cfg.authenticate(Some("Bearer bob-token")).map(|u| u.groups),
        Some(vec![AUTHENTICATED_GROUP.into()])
    );
}

#[test]
fn token_csv_file() {
    let cfg = AuthConfig::new()
        .with_token_csv("# comment\nt1,alice,1001,\"dev,ops\"\nt2,bob,1002\n\n")
        .expect("valid file");
    assert_eq!(
        cfg.authenticate(Some("Bearer t1")).map(|u| u.groups),
        Some(vec!["dev".into(), "ops".into(), AUTHENTICATED_GROUP.into()])
    );
    assert_eq!(cfg.authenticate(Some("Bearer t2")).map(|u| u.name), Some("bob".into()));
    assert!(AuthConfig::new().with_token_csv("only,two").is_err());
    assert!(AuthConfig::new().with_token_csv(",user,uid").is_err());
}

// === authorization ===

#[test]
fn rules_match_verbs_groups_resources_and_namespaces() {
    let cfg = config();
    let alice = cfg.authenticate(Some("Bearer alice-token")).expect("alice");
    assert!(cfg.authorize(&alice, &attrs("list", "", "pods", "")));
    assert!(cfg.authorize(&alice, &attrs("watch", "", "pods", "any")));
    assert!(!cfg.authorize(&alice, &attrs("delete", "", "pods", "any")));
    assert!(!cfg.authorize(&alice, &attrs("list", "apps", "pods", "")), "API group must match");
    assert!(!cfg.authorize(&alice, &attrs("get", "", "pods/status", "")), "resource names are exact");
    let mut status = attrs("get", "", "pods", "x");
    status.subresource = "status".into();
    assert!(!cfg.authorize(&alice, &status), "a subresource needs its own rule");
    // Group rule restricted to one namespace.
    assert!(cfg.authorize(&alice, &attrs("create", "", "configmaps", "team-a")));
    assert!(!cfg.authorize(&alice, &attrs("create", "", "configmaps", "team-b")));
    assert!(
        !cfg.authorize(&alice, &attrs("list", "", "configmaps", "")),
        "all-namespace list is not in team-a"
    );
    // Masters may do anything.
    let root = cfg.authenticate(Some("Bearer root-token")).expect("root");
    assert!(cfg.authorize(&root, &attrs("deletecollection", "apps", "deployments", "")));
    // Non-resource URLs (without the bootstrap policy, which would allow discovery anyway).
    let cfg = config().with_bootstrap_policy(false);
    assert!(cfg.authorize_non_resource(&alice, "get", "/apis/apps/v1"));
    assert!(cfg.authorize_non_resource(&alice, "get", "/api"));
    assert!(!cfg.authorize_non_resource(&alice, "get", "/api/v1"));
    assert!(!cfg.authorize_non_resource(&alice, "post", "/api"));
}

#[test]
fn bootstrap_policy_allows_discovery_and_self_reviews() {
    let cfg = config();
    let bob = UserInfo::new("bob", &[AUTHENTICATED_GROUP]);
    let anonymous = UserInfo::new(ANONYMOUS_USER, &[UNAUTHENTICATED_GROUP]);
    for path in ["/api", "/api/v1", "/apis", "/apis/apps/v1", "/version", "/openapi/v3", "/healthz"] {
        assert!(cfg.authorize_non_resource(&bob, "get", path), "{path}");
    }
    assert!(!cfg.authorize_non_resource(&bob, "get", "/metrics"));
    assert!(cfg.authorize_non_resource(&anonymous, "get", "/version"));
    assert!(!cfg.authorize_non_resource(&anonymous, "get", "/api"));
    assert!(cfg.authorize(&bob, &attrs("create", "authorization.k8s.io", "selfsubjectaccessreviews", "")));
    assert!(!cfg.authorize(&bob, &attrs("create", "authorization.k8s.io", "subjectaccessreviews", "")));
    cfg.set_rules(Vec::new());
    assert!(cfg.authorize_non_resource(&bob, "get", "/api"), "set_rules keeps the bootstrap policy");
    let cfg = config().with_bootstrap_policy(false);
    assert!(!cfg.authorize_non_resource(&bob, "get", "/api/v1"));
}

#[test]
fn subresources_names_and_wildcards() {
    let cfg = AuthConfig::new().with_rule(
        Rule::new("r")
            .user("u")
            .verbs(&["get"])
            .api_groups(&["*"])
            .resources(&["pods/*", "*/scale"])
            .names(&["a"]),
    );
    let u = UserInfo::new("u", &[]);
    let mut a = attrs("get", "apps", "pods", "ns");
    a.name = "a".into();
    assert!(!cfg.authorize(&u, &a), "pods/* covers subresources only");
    a.subresource = "log".into();
    assert!(cfg.authorize(&u, &a));
    a.resource = "deployments".into();
    a.subresource = "scale".into();
    assert!(cfg.authorize(&u, &a));
    a.name = "b".into();
    assert!(!cfg.authorize(&u, &a), "resource names restrict");
}

#[test]
fn rules_can_be_revoked_at_runtime() {
    let cfg = config();
    let alice = cfg.authenticate(Some("Bearer alice-token")).expect("alice");
    assert!(cfg.authorize(&alice, &attrs("list", "", "pods", "")));
    let remaining: Vec<Rule> = cfg.rules().into_iter().filter(|r| r.name != "pod-reader").collect();
    cfg.set_rules(remaining);
    assert!(!cfg.authorize(&alice, &attrs("list", "", "pods", "")));
}

// === TokenReview ===

#[test]
fn token_review_authenticated() {
    let cfg = config();
    let out = json_of(cfg.token_review(
        br#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"alice-token"}}"#,
    ));
    assert_eq!(
        out,
        json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {"creationTimestamp": null},
               "spec": {"token": "alice-token"},
               "status": {"authenticated": true, "user": {"username": "alice", "groups": ["dev", AUTHENTICATED_GROUP]},
                          "audiences": [DEFAULT_API_AUDIENCE]}})
    );
    let keys: Vec<&String> = out.as_object().expect("object").keys().collect();
    assert_eq!(keys, ["kind", "apiVersion", "metadata", "spec", "status"]);
}

#[test]
fn token_review_unauthenticated_and_audiences() {
    let cfg = config();
    let out = json_of(cfg.token_review(br#"{"spec":{"token":"bad"}}"#));
    assert_eq!(out["status"], json!({"user": {}}));
    let out = json_of(cfg.token_review(br#"{"spec":{"token":"alice-token","audiences":["other"]}}"#));
    assert_eq!(out["status"], json!({"user": {}}), "no audience in common");
    let out = json_of(cfg.token_review(
        br#"{"apiVersion":"authentication.k8s.io/v1beta1","spec":{"token":"alice-token","audiences":["other","https://kubernetes.default.svc.cluster.local"]}}"#,
    ));
    assert_eq!(out["apiVersion"], "authentication.k8s.io/v1beta1");
    assert_eq!(out["status"]["audiences"], json!([DEFAULT_API_AUDIENCE]));
    assert_eq!(
        cfg.token_review(br#"{"spec":{}}"#),
        Err("token is required for TokenReview in authentication".into())
    );
    assert!(cfg.token_review(b"not json").is_err());
    assert!(cfg.token_review(b"[]").is_err());
}

// === SubjectAccessReview ===

#[test]
fn subject_access_review_decisions() {
    let cfg = config();
    let review = |spec: Value| {
        json_of(
            cfg.subject_access_review(
                json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
                    .to_string()
                    .as_bytes(),
            ),
        )
    };
    let out = review(json!({"resourceAttributes": {"verb": "list", "resource": "pods"}, "user": "alice"}));
    assert_eq!(out["status"], json!({"allowed": true, "reason": "RBAC: allowed by rule \"pod-reader\""}));
    assert_eq!(out["spec"]["user"], "alice", "the spec is echoed");
    let out = review(json!({"resourceAttributes": {"verb": "delete", "resource": "pods"}, "user": "alice"}));
    assert_eq!(out["status"], json!({"allowed": false}));
    let out = review(
        json!({"resourceAttributes": {"verb": "create", "resource": "configmaps", "namespace": "team-a"},
                            "user": "carol", "groups": ["dev"]}),
    );
    assert_eq!(out["status"]["allowed"], true, "group membership comes from the review's spec");
    let out = review(json!({"nonResourceAttributes": {"verb": "get", "path": "/version"}, "user": "x",
                            "groups": [AUTHENTICATED_GROUP]}));
    assert_eq!(out["status"]["allowed"], true);
    let out = review(
        json!({"resourceAttributes": {"verb": "delete", "resource": "nodes"}, "groups": [MASTERS_GROUP]}),
    );
    assert_eq!(out["status"], json!({"allowed": true}));
}

#[test]
fn subject_access_review_validation() {
    let cfg = config();
    assert_eq!(
        cfg.subject_access_review(br#"{"spec":{"resourceAttributes":{"verb":"get"}}}"#),
        Err("SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified".into())
    );
    let both = cfg.subject_access_review(br#"{"spec":{}}"#).expect_err("invalid");
    assert!(both.starts_with("SubjectAccessReview.authorization.k8s.io \"\" is invalid: [spec.resourceAttributes: Invalid value: \"null\": exactly one of"), "{both}");
    let err = cfg
        .subject_access_review(br#"{"spec":{"user":"a","resourceAttributes":{},"nonResourceAttributes":{}}}"#)
        .expect_err("invalid");
    assert!(err.contains("cannot be specified in combination with resourceAttributes"), "{err}");
    assert!(cfg.subject_access_review(b"{").is_err());
    let err = cfg
        .subject_access_review_checked(br#"{"spec":{"resourceAttributes":{"verb":"get"}}}"#)
        .expect_err("invalid");
    assert_eq!(err.code(), 422);
    assert_eq!(
        err.status().to_string(),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified","reason":"Invalid","details":{"group":"authorization.k8s.io","kind":"SubjectAccessReview","causes":[{"reason":"FieldValueInvalid","message":"Invalid value: \"\": at least one of user or group must be specified","field":"spec.user"}]},"code":422}"#
    );
    let err = cfg.token_review_checked(br#"{"spec":{}}"#).expect_err("no token");
    assert_eq!((err.code(), err.status()["reason"].clone()), (400, json!("BadRequest")));
}

// === Status bodies ===

#[test]
fn forbidden_and_unauthorized_statuses() {
    let alice = UserInfo::new("alice", &[]);
    let status = forbidden_status(&alice, &attrs("list", "", "pods", "default"));
    assert_eq!(
        status.to_string(),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\"","reason":"Forbidden","details":{"kind":"pods"},"code":403}"#
    );
    let mut a = attrs("get", "apps", "deployments", "");
    a.name = "web".into();
    a.subresource = "scale".into();
    let status = forbidden_status(&alice, &a);
    assert_eq!(
        status["message"],
        "deployments.apps \"web\" is forbidden: User \"alice\" cannot get resource \"deployments/scale\" in API group \"apps\" at the cluster scope"
    );
    assert_eq!(status["details"], json!({"name": "web", "group": "apps", "kind": "deployments"}));
    assert_eq!(
        forbidden_non_resource_status(&UserInfo::new(ANONYMOUS_USER, &[]), "get", "/").to_string(),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"forbidden: User \"system:anonymous\" cannot get path \"/\"","reason":"Forbidden","details":{},"code":403}"#
    );
    assert_eq!(
        unauthorized_status().to_string(),
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#
    );
}
