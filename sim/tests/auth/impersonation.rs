//! Impersonation over HTTP: who may impersonate whom (users, groups, ServiceAccounts, uids, extras), that
//! the request then runs with the impersonated user's rights (one namespace allowed, another forbidden),
//! the 400 for groups without a user, anonymous impersonation, and uid/extra through TokenReview,
//! SubjectAccessReview and SelfSubjectReview. Texts are the apiserver's (checked against a real 1.36).

use http::{Method, StatusCode};
use kache_sim::auth::{AuthConfig, Rule, UserInfo};
use serde_json::{Value, json};

use super::Env;

const PODS_A: &str = "/api/v1/namespaces/team-a/pods";
const PODS_B: &str = "/api/v1/namespaces/team-b/pods";
const WHOAMI: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// alice may impersonate bob, the group `readers`, the ServiceAccount `team-a/builder`, the uid `u-1` and
/// the extra `scopes/x=read`; bob, `readers` and the ServiceAccount may read pods in team-a only.
/// mallory may impersonate nobody; root is in system:masters.
fn config() -> AuthConfig {
    let impersonate = |name: &str, group: &str, resource: &str, names: &[&str]| {
        Rule::new(name)
            .user("alice")
            .verbs(&["impersonate"])
            .api_groups(&[group])
            .resources(&[resource])
            .names(names)
    };
    let read_pods_in_a = |rule: Rule| {
        rule.verbs(&["get", "list", "watch"]).api_groups(&[""]).resources(&["pods"]).namespaces(&["team-a"])
    };
    AuthConfig::new()
        .with_token("alice-token", UserInfo::new("alice", &[]))
        .with_token("mallory-token", UserInfo::new("mallory", &[]))
        .with_token("root-token", UserInfo::new("root", &["system:masters"]))
        .with_token(
            "carol-token",
            UserInfo::new("carol", &["dev"]).with_uid("carol-uid").with_extra("scopes/x", &["read", "write"]),
        )
        .with_rule(impersonate("users", "", "users", &["bob"]))
        .with_rule(impersonate("groups", "", "groups", &["readers"]))
        .with_rule(impersonate("sa", "", "serviceaccounts", &["builder"]).namespaces(&["team-a"]))
        .with_rule(impersonate("uids", "authentication.k8s.io", "uids", &["u-1"]))
        .with_rule(impersonate("extras", "authentication.k8s.io", "userextras/scopes/x", &["read"]))
        .with_rule(read_pods_in_a(Rule::new("bob-reads-a").user("bob")))
        .with_rule(read_pods_in_a(Rule::new("readers-read-a").group("readers")))
        .with_rule(read_pods_in_a(Rule::new("builder-reads-a").service_account("team-a", "builder")))
}

async fn env() -> Env {
    Env::start(config()).await
}

fn whoami_body() -> Option<Value> {
    Some(json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1"}))
}

#[tokio::test]
async fn an_impersonated_user_reads_with_its_own_rights() {
    let env = env().await;
    let as_bob: &[(&str, &[u8])] = &[("Impersonate-User", b"bob")];
    let (status, body) = env.send_with(Method::GET, PODS_A, Some("alice-token"), as_bob, None).await;
    assert_eq!(status, StatusCode::OK, "GET {PODS_A} as bob: {body}");
    assert_eq!(body["kind"], "PodList");
    let (status, body) = env.send_with(Method::GET, PODS_B, Some("alice-token"), as_bob, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "GET {PODS_B} as bob: {body}");
    assert_eq!(
        body["message"],
        r#"pods is forbidden: User "bob" cannot list resource "pods" in API group "" in the namespace "team-b""#
    );
    // alice herself may not read pods: the rights were bob's.
    let (status, body) = env.send(Method::GET, PODS_A, Some("alice-token"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) =
        env.send_with(Method::POST, WHOAMI, Some("alice-token"), as_bob, whoami_body()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        body,
        json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
               "metadata": {"creationTimestamp": null},
               "status": {"userInfo": {"username": "bob", "groups": ["system:authenticated"]}}})
    );
    env.sim.shutdown().await;
}

#[tokio::test]
async fn denied_impersonation_is_a_403_naming_the_requester() {
    let env = env().await;
    // mallory has never impersonated anyone: the first mode tried (user-info) answers.
    let (status, body) = env
        .send_with(Method::GET, PODS_A, Some("mallory-token"), &[("Impersonate-User", b"bob")], None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pods is forbidden: User \"mallory\" cannot impersonate-on:user-info:list resource \"pods\" in API group \"\" in the namespace \"team-a\"",
               "reason": "Forbidden", "details": {"kind": "pods"}, "code": 403})
    );
    // alice, once she has impersonated through legacy rules, sees their denial.
    let (status, _) =
        env.send_with(Method::GET, PODS_A, Some("alice-token"), &[("Impersonate-User", b"bob")], None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = env
        .send_with(Method::GET, PODS_A, Some("alice-token"), &[("Impersonate-User", b"carol")], None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["message"],
        r#"users "carol" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope"#
    );
    assert_eq!(body["details"], json!({"name": "carol", "kind": "users"}));
    env.sim.shutdown().await;
}

#[tokio::test]
async fn groups_uids_and_extras() {
    let env = env().await;
    let alice = Some("alice-token");
    let h = |group: &'static [u8]| -> Vec<(&'static str, &'static [u8])> {
        vec![("Impersonate-User", b"nobody-special"), ("Impersonate-Group", group)]
    };
    // A group alone does not do: the user must be one alice may impersonate too.
    let (status, body) = env.send_with(Method::GET, PODS_A, alice, &h(b"readers"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let as_bob_in = |group: &'static [u8]| -> Vec<(&'static str, &'static [u8])> {
        vec![("Impersonate-User", b"bob"), ("Impersonate-Group", group)]
    };
    let (status, body) =
        env.send_with(Method::POST, WHOAMI, alice, &as_bob_in(b"readers"), whoami_body()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        body["status"]["userInfo"],
        json!({"username": "bob", "groups": ["readers", "system:authenticated"]})
    );
    let (status, body) = env.send_with(Method::GET, PODS_A, alice, &as_bob_in(b"system:masters"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["message"],
        r#"groups "system:masters" is forbidden: User "alice" cannot impersonate resource "groups" in API group "" at the cluster scope"#
    );

    // uid and an escaped extra key (`scopes%2Fx` → `scopes/x`).
    let full: &[(&str, &[u8])] = &[
        ("Impersonate-User", b"bob"),
        ("Impersonate-Uid", b"u-1"),
        ("Impersonate-Extra-Scopes%2Fx", b"read"),
    ];
    let (status, body) = env.send_with(Method::POST, WHOAMI, alice, full, whoami_body()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        body["status"]["userInfo"],
        json!({"username": "bob", "uid": "u-1", "groups": ["system:authenticated"], "extra": {"scopes/x": ["read"]}})
    );
    let bad_uid: &[(&str, &[u8])] = &[("Impersonate-User", b"bob"), ("Impersonate-Uid", b"u-2")];
    let (status, body) = env.send_with(Method::GET, PODS_A, alice, bad_uid, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["message"],
        r#"uids.authentication.k8s.io "u-2" is forbidden: User "alice" cannot impersonate resource "uids" in API group "authentication.k8s.io" at the cluster scope"#
    );
    let bad_extra: &[(&str, &[u8])] =
        &[("Impersonate-User", b"bob"), ("Impersonate-Extra-Scopes%2Fx", b"write")];
    let (status, body) = env.send_with(Method::GET, PODS_A, alice, bad_extra, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["message"],
        r#"userextras.authentication.k8s.io "write" is forbidden: User "alice" cannot impersonate resource "userextras/scopes/x" in API group "authentication.k8s.io" at the cluster scope"#
    );
    assert_eq!(
        body["details"],
        json!({"name": "write", "group": "authentication.k8s.io", "kind": "userextras"})
    );
    env.sim.shutdown().await;
}

#[tokio::test]
async fn service_accounts_with_and_without_groups() {
    let env = env().await;
    let alice = Some("alice-token");
    let sa: &[(&str, &[u8])] = &[("Impersonate-User", b"system:serviceaccount:team-a:builder")];
    let (status, body) = env.send_with(Method::POST, WHOAMI, alice, sa, whoami_body()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        body["status"]["userInfo"],
        json!({"username": "system:serviceaccount:team-a:builder",
               "groups": ["system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"]})
    );
    let (status, body) = env.send_with(Method::GET, PODS_A, alice, sa, None).await;
    assert_eq!(status, StatusCode::OK, "the ServiceAccount's own rule: {body}");
    let (status, body) = env.send_with(Method::GET, PODS_B, alice, sa, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["message"],
        r#"pods is forbidden: User "system:serviceaccount:team-a:builder" cannot list resource "pods" in API group "" in the namespace "team-b""#
    );

    let with_group: &[(&str, &[u8])] =
        &[("Impersonate-User", b"system:serviceaccount:team-a:builder"), ("Impersonate-Group", b"readers")];
    let (status, body) = env.send_with(Method::POST, WHOAMI, alice, with_group, whoami_body()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["status"]["userInfo"]["groups"], json!(["readers", "system:authenticated"]));

    let other_ns: &[(&str, &[u8])] = &[("Impersonate-User", b"system:serviceaccount:team-b:builder")];
    let (status, body) = env.send_with(Method::GET, PODS_A, alice, other_ns, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["message"],
        r#"serviceaccounts "builder" is forbidden: User "alice" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "team-b""#
    );
    assert_eq!(body["details"], json!({"name": "builder", "kind": "serviceaccounts"}));
    env.sim.shutdown().await;
}

#[tokio::test]
async fn bad_requests_and_anonymous_impersonation() {
    let env = env().await;
    let (status, body) = env
        .send_with(
            Method::GET,
            PODS_A,
            Some("alice-token"),
            &[("Impersonate-Group", b"system:masters")],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "requested &user.DefaultInfo{Name:\"\", UID:\"\", Groups:[]string{\"system:masters\"}, Extra:map[string][]string(nil)} without impersonating a user name",
               "reason": "BadRequest", "code": 400})
    );
    // Without credentials, authentication answers first.
    let (status, _) = env.send_with(Method::GET, "/api", None, &[("Impersonate-Group", b"g")], None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Values that are not UTF-8 are refused, never a crash.
    let (status, body) = env
        .send_with(Method::GET, PODS_A, Some("alice-token"), &[("Impersonate-User", b"b\xf6b")], None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let anonymous: &[(&str, &[u8])] = &[("Impersonate-User", b"system:anonymous")];
    let (status, body) = env.send_with(Method::GET, "/version", Some("root-token"), anonymous, None).await;
    assert_eq!(status, StatusCode::OK, "public info: {body}");
    let (status, body) = env.send_with(Method::GET, "/api", Some("root-token"), anonymous, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["message"], r#"forbidden: User "system:anonymous" cannot get path "/api""#);
    let (status, body) = env.send_with(Method::GET, PODS_A, Some("alice-token"), anonymous, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    env.sim.shutdown().await;
}

#[tokio::test]
async fn uid_and_extra_round_trip_through_the_review_apis() {
    let env = env().await;
    let root = Some("root-token");
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "carol-token"}});
    let (status, body) =
        env.send(Method::POST, "/apis/authentication.k8s.io/v1/tokenreviews", root, Some(review)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        body["status"]["user"],
        json!({"username": "carol", "uid": "carol-uid", "groups": ["dev", "system:authenticated"],
               "extra": {"scopes/x": ["read", "write"]}})
    );
    let user = body["status"]["user"].clone();

    // The reviewed user, uid and extra included, goes into a SubjectAccessReview as a delegating server
    // sends it; the spec is echoed and impersonation rights can be asked about.
    let sar_path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                     "spec": {"user": user["username"], "uid": user["uid"], "groups": user["groups"], "extra": user["extra"],
                              "resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "team-a"}}});
    let (status, body) = env.send(Method::POST, sar_path, root, Some(sar)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["spec"]["uid"], "carol-uid");
    assert_eq!(body["spec"]["extra"], json!({"scopes/x": ["read", "write"]}));
    assert_eq!(body["status"], json!({"allowed": false}));
    let can_impersonate = |name: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {"user": "alice", "groups": ["system:authenticated"],
                        "resourceAttributes": {"verb": "impersonate", "resource": "users", "name": name}}})
    };
    let (_, body) = env.send(Method::POST, sar_path, root, Some(can_impersonate("bob"))).await;
    assert_eq!(body["status"], json!({"allowed": true, "reason": "RBAC: allowed by rule \"users\""}));
    let (_, body) = env.send(Method::POST, sar_path, root, Some(can_impersonate("carol"))).await;
    assert_eq!(body["status"], json!({"allowed": false}));

    // The review APIs are authorized like any resource: alice may not create TokenReviews, nor may she
    // through someone she may impersonate.
    let (status, body) = env
        .send(
            Method::POST,
            "/apis/authentication.k8s.io/v1/tokenreviews",
            Some("alice-token"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["message"],
        r#"tokenreviews.authentication.k8s.io is forbidden: User "alice" cannot create resource "tokenreviews" in API group "authentication.k8s.io" at the cluster scope"#
    );
    env.sim.shutdown().await;
}
