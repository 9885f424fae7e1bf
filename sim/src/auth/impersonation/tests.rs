//! Header parsing, the 400 text, usernames, and the mode machinery against rule sets. The expected texts
//! were checked against a real kube-apiserver 1.36 (sample-apiserver with a logging webhook authorizer).

use http::{HeaderMap, HeaderName, HeaderValue};

use super::*;
use crate::auth::{
    ANONYMOUS_USER, AUTHENTICATED_GROUP, AuthConfig, MASTERS_GROUP, NODES_GROUP, Rule, UNAUTHENTICATED_GROUP,
    UserInfo,
};

/// `serviceaccount.NodeNameKey`.
const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in pairs {
        h.append(
            HeaderName::from_bytes(name.as_bytes()).expect("valid name"),
            HeaderValue::from_bytes(value).expect("valid value"),
        );
    }
    h
}

fn list_pods(ns: &str) -> Action {
    Action::Resource(Attributes {
        verb: "list".into(),
        resource: "pods".into(),
        namespace: ns.into(),
        ..Attributes::default()
    })
}

fn wanted(name: &str) -> Wanted {
    Wanted { name: name.into(), ..Wanted::default() }
}

fn message(e: ImpersonationError) -> String {
    match e {
        ImpersonationError::Forbidden(status) => {
            assert_eq!(status["code"], 403);
            status["message"].as_str().expect("message").to_string()
        }
        other => panic!("expected a 403, got {other:?}"),
    }
}

fn impersonator(rules: Vec<Rule>) -> (AuthConfig, UserInfo) {
    let cfg = AuthConfig::new();
    cfg.set_rules(rules);
    (cfg, UserInfo::new("alice", &[AUTHENTICATED_GROUP]))
}

fn legacy(resource: &str, group: &str, names: &[&str]) -> Rule {
    Rule::new(format!("impersonate-{resource}"))
        .user("alice")
        .verbs(&["impersonate"])
        .api_groups(&[group])
        .resources(&[resource])
        .names(names)
}

// === parsing ===

#[test]
fn no_headers_or_an_empty_user_is_no_impersonation() {
    assert_eq!(parse_headers(&HeaderMap::new()), Ok(None));
    assert_eq!(parse_headers(&headers(&[("impersonate-user", b"")])), Ok(None));
    assert_eq!(parse_headers(&headers(&[("impersonate-user", b""), ("impersonate-uid", b"")])), Ok(None));
}

#[test]
fn headers_are_read_as_the_apiserver_reads_them() {
    let h = headers(&[
        ("impersonate-user", b"bob"),
        ("impersonate-user", b"ignored: only the first value counts"),
        ("impersonate-group", b"g1"),
        ("impersonate-group", b"g2"),
        ("impersonate-uid", b"u1"),
        ("impersonate-extra-scopes%2fx", b"a"),
        ("impersonate-extra-scopes%2fx", b"b"),
        ("impersonate-extra-almost%zzpercent", b"c"),
        ("impersonate-extra-example.com%2fescaped%e1%9b%84scopes", b"d"),
    ]);
    let w = parse_headers(&h).expect("valid").expect("impersonating");
    assert_eq!(w.name, "bob");
    assert_eq!(w.uid, "u1");
    assert_eq!(w.groups, Some(vec!["g1".to_string(), "g2".to_string()]));
    let extra = w.extra.expect("extra");
    assert_eq!(extra["scopes/x"], ["a", "b"]);
    assert_eq!(extra["almost%zzpercent"], ["c"], "a malformed escape keeps the raw key");
    assert_eq!(extra["example.com/escaped\u{16c4}scopes"], ["d"]);
}

#[test]
fn groups_uid_or_extra_without_a_user_is_a_bad_request() {
    let err = parse_headers(&headers(&[("impersonate-group", b"system:masters")])).expect_err("no user");
    assert_eq!(err.code(), 400);
    assert_eq!(
        err.to_string(),
        r#"requested &user.DefaultInfo{Name:"", UID:"", Groups:[]string{"system:masters"}, Extra:map[string][]string(nil)} without impersonating a user name"#
    );
    let err = parse_headers(&headers(&[
        ("impersonate-user", b""),
        ("impersonate-group", b"g1"),
        ("impersonate-group", b"g2"),
        ("impersonate-extra-scopes%2fx", b"a"),
        ("impersonate-extra-b", b"v"),
        ("impersonate-uid", b"u1"),
    ]))
    .expect_err("no user");
    assert_eq!(
        err.to_string(),
        r#"requested &user.DefaultInfo{Name:"", UID:"u1", Groups:[]string{"g1", "g2"}, Extra:map[string][]string{"b":[]string{"v"}, "scopes/x":[]string{"a"}}} without impersonating a user name"#
    );
    let err = parse_headers(&headers(&[("impersonate-uid", b"u1")])).expect_err("no user");
    assert!(err.to_string().contains(r#"UID:"u1", Groups:[]string(nil)"#), "{err}");
}

#[test]
fn bytes_that_are_not_utf8_are_a_bad_request_not_a_panic() {
    for h in [
        headers(&[("impersonate-user", b"caf\xe9")]),
        headers(&[("impersonate-user", b"bob"), ("impersonate-group", b"\xff")]),
        headers(&[("impersonate-user", b"bob"), ("impersonate-extra-k", b"\x80")]),
        headers(&[("impersonate-user", b"bob"), ("impersonate-extra-%ff", b"v")]),
    ] {
        let err = parse_headers(&h).expect_err("not UTF-8");
        assert_eq!(err.code(), 400, "{err}");
    }
    // UTF-8 beyond ASCII is kept as is.
    let w = parse_headers(&headers(&[("impersonate-user", "zoë".as_bytes())])).expect("valid").expect("user");
    assert_eq!(w.name, "zoë");
}

#[test]
fn stripping_removes_every_impersonation_header() {
    let mut h = headers(&[
        ("impersonate-user", b"bob"),
        ("impersonate-group", b"g"),
        ("impersonate-uid", b"u"),
        ("impersonate-extra-k", b"v"),
        ("accept", b"application/json"),
    ]);
    strip_headers(&mut h);
    assert_eq!(h.len(), 1);
    assert!(h.contains_key("accept"));
}

#[test]
fn service_account_usernames() {
    assert_eq!(split_service_account("system:serviceaccount:ns:sa"), Some(("ns", "sa")));
    assert_eq!(split_service_account("system:serviceaccount:ns:a.b-c"), Some(("ns", "a.b-c")));
    for plain in [
        "system:serviceaccount:ns",
        "system:serviceaccount:ns:sa:x",
        "system:serviceaccount:Ns:sa",
        "system:serviceaccount:n.s:sa",
        "system:serviceaccount::sa",
        "system:serviceaccount:ns:",
        "system:serviceaccounts:ns:sa",
        "bob",
    ] {
        assert_eq!(split_service_account(plain), None, "{plain}");
    }
}

// === decisions ===

#[test]
fn legacy_user_impersonation_adds_the_authenticated_group() {
    let (cfg, alice) = impersonator(vec![legacy("users", "", &["bob"])]);
    let user = cfg.impersonate(&alice, &wanted("bob"), &list_pods("a")).expect("allowed");
    assert_eq!(user, UserInfo::new("bob", &[AUTHENTICATED_GROUP]));
}

#[test]
fn a_denial_names_the_first_mode_that_failed() {
    let (cfg, alice) = impersonator(vec![legacy("users", "", &["bob"])]);
    // Never succeeded yet: the user-info mode's `impersonate-on` check is the first failure.
    let err = cfg.impersonate(&alice, &wanted("carol"), &list_pods("a")).expect_err("denied");
    assert_eq!(
        message(err),
        r#"pods is forbidden: User "alice" cannot impersonate-on:user-info:list resource "pods" in API group "" in the namespace "a""#
    );
    // After a legacy success, legacy is tried first and its denial is reported.
    cfg.impersonate(&alice, &wanted("bob"), &list_pods("a")).expect("allowed");
    let err = cfg.impersonate(&alice, &wanted("carol"), &list_pods("a")).expect_err("denied");
    let ImpersonationError::Forbidden(status) = err else { panic!("403 expected") };
    assert_eq!(
        status["message"],
        r#"users "carol" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope"#
    );
    assert_eq!(status["details"], serde_json::json!({"name": "carol", "kind": "users"}));
    // Non-resource requests are named by path.
    let (cfg, alice) = impersonator(Vec::new());
    let action = Action::NonResource { verb: "get".into(), path: "/api".into() };
    let err = cfg.impersonate(&alice, &wanted("system:node:n1"), &action).expect_err("denied");
    assert_eq!(
        message(err),
        r#"forbidden: User "alice" cannot impersonate-on:arbitrary-node:get path "/api""#
    );
}

#[test]
fn service_accounts_get_their_groups_unless_groups_are_given() {
    let sa_rule = Rule::new("sa")
        .user("alice")
        .verbs(&["impersonate"])
        .api_groups(&[""])
        .resources(&["serviceaccounts"])
        .namespaces(&["ns"])
        .names(&["builder"]);
    let (cfg, alice) = impersonator(vec![sa_rule, legacy("groups", "", &["g"])]);
    let user = cfg
        .impersonate(&alice, &wanted("system:serviceaccount:ns:builder"), &list_pods("a"))
        .expect("allowed");
    assert_eq!(user, UserInfo::service_account("ns", "builder").with_groups(&[AUTHENTICATED_GROUP]));
    assert_eq!(user.groups, ["system:serviceaccounts", "system:serviceaccounts:ns", AUTHENTICATED_GROUP]);

    let w = Wanted { groups: Some(vec!["g".into()]), ..wanted("system:serviceaccount:ns:builder") };
    let user = cfg.impersonate(&alice, &w, &list_pods("a")).expect("allowed");
    assert_eq!(user.groups, ["g", AUTHENTICATED_GROUP]);

    let err = cfg
        .impersonate(&alice, &wanted("system:serviceaccount:other:builder"), &list_pods("a"))
        .expect_err("denied");
    assert_eq!(
        message(err),
        r#"serviceaccounts "builder" is forbidden: User "alice" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "other""#
    );
}

#[test]
fn uid_is_checked_before_groups_and_extra() {
    let (cfg, alice) = impersonator(vec![legacy("users", "", &["bob"])]);
    cfg.impersonate(&alice, &wanted("bob"), &list_pods("a")).expect("warms the legacy mode");
    let w = Wanted {
        uid: "u1".into(),
        groups: Some(vec!["g".into()]),
        extra: Some([("scopes".to_string(), vec!["s".to_string()])].into()),
        ..wanted("bob")
    };
    assert_eq!(
        message(cfg.impersonate(&alice, &w, &list_pods("a")).expect_err("denied")),
        r#"uids.authentication.k8s.io "u1" is forbidden: User "alice" cannot impersonate resource "uids" in API group "authentication.k8s.io" at the cluster scope"#
    );
    cfg.set_rules(vec![
        legacy("users", "", &["bob"]),
        legacy("uids", "authentication.k8s.io", &["u1"]),
        legacy("groups", "", &["g"]),
    ]);
    let ImpersonationError::Forbidden(status) =
        cfg.impersonate(&alice, &w, &list_pods("a")).expect_err("denied")
    else {
        panic!("403 expected")
    };
    assert_eq!(
        status["message"],
        r#"userextras.authentication.k8s.io "s" is forbidden: User "alice" cannot impersonate resource "userextras/scopes" in API group "authentication.k8s.io" at the cluster scope"#
    );
    assert_eq!(
        status["details"],
        serde_json::json!({"name": "s", "group": "authentication.k8s.io", "kind": "userextras"})
    );
    cfg.set_rules(vec![
        legacy("users", "", &["bob"]),
        legacy("uids", "authentication.k8s.io", &["u1"]),
        legacy("groups", "", &["g"]),
        legacy("userextras/scopes", "authentication.k8s.io", &["s"]),
    ]);
    let user = cfg.impersonate(&alice, &w, &list_pods("a")).expect("allowed");
    assert_eq!(
        user,
        UserInfo::new("bob", &["g", AUTHENTICATED_GROUP]).with_uid("u1").with_extra("scopes", &["s"])
    );
}

#[test]
fn anonymous_and_unauthenticated_groups() {
    let (cfg, alice) = impersonator(vec![legacy("users", "", &["*"]), legacy("groups", "", &["*"])]);
    let user = cfg.impersonate(&alice, &wanted(ANONYMOUS_USER), &list_pods("a")).expect("allowed");
    assert_eq!(user.groups, [UNAUTHENTICATED_GROUP]);
    let w = Wanted { groups: Some(vec![UNAUTHENTICATED_GROUP.into()]), ..wanted("x") };
    assert_eq!(
        cfg.impersonate(&alice, &w, &list_pods("a")).expect("allowed").groups,
        [UNAUTHENTICATED_GROUP]
    );
    let w = Wanted { groups: Some(vec![AUTHENTICATED_GROUP.into(), "g".into()]), ..wanted("x") };
    assert_eq!(
        cfg.impersonate(&alice, &w, &list_pods("a")).expect("allowed").groups,
        [AUTHENTICATED_GROUP, "g"]
    );
}

#[test]
fn masters_may_impersonate_anyone_including_masters() {
    let cfg = AuthConfig::new();
    let root = UserInfo::new("root", &[MASTERS_GROUP]);
    let w = Wanted { groups: Some(vec![MASTERS_GROUP.into()]), ..wanted("bob") };
    let user = cfg.impersonate(&root, &w, &list_pods("a")).expect("allowed");
    assert_eq!(user.groups, [MASTERS_GROUP, AUTHENTICATED_GROUP]);
    // The impersonated user's groups are what authorization sees next.
    assert!(cfg.authorize(
        &user,
        &Attributes { verb: "delete".into(), resource: "nodes".into(), ..Attributes::default() }
    ));
}

#[test]
fn constrained_rights_impersonate_for_some_verbs_only() {
    let rules = vec![
        Rule::new("on")
            .user("alice")
            .verbs(&["impersonate-on:user-info:list"])
            .api_groups(&[""])
            .resources(&["pods"]),
        Rule::new("who")
            .user("alice")
            .verbs(&["impersonate:user-info"])
            .api_groups(&["authentication.k8s.io"])
            .resources(&["users", "groups"])
            .names(&["bob", "g", "system:masters"]),
    ];
    let (cfg, alice) = impersonator(rules);
    let user = cfg.impersonate(&alice, &wanted("bob"), &list_pods("a")).expect("allowed via user-info");
    assert_eq!(user, UserInfo::new("bob", &[AUTHENTICATED_GROUP]));
    let get =
        Action::Resource(Attributes { verb: "get".into(), resource: "pods".into(), ..Attributes::default() });
    let err = cfg.impersonate(&alice, &wanted("bob"), &get).expect_err("only list");
    assert_eq!(
        message(err),
        r#"pods is forbidden: User "alice" cannot impersonate-on:user-info:get resource "pods" in API group "" at the cluster scope"#
    );
    // Constrained impersonation never grants system:masters (legacy impersonation still could).
    let w = Wanted { groups: Some(vec![MASTERS_GROUP.into()]), ..wanted("bob") };
    assert_eq!(
        message(cfg.impersonate(&alice, &w, &list_pods("a")).expect_err("denied")),
        r#"groups.authentication.k8s.io "system:masters" is forbidden: User "alice" cannot impersonate:user-info resource "groups" in API group "authentication.k8s.io" at the cluster scope: impersonating the system:masters group is not allowed"#
    );
    // Extra keys must be domain-prefixed paths in constrained modes.
    let w = Wanted { extra: Some([("scopes".to_string(), vec!["s".to_string()])].into()), ..wanted("bob") };
    assert_eq!(
        message(cfg.impersonate(&alice, &w, &list_pods("a")).expect_err("denied")),
        r#"userextras.authentication.k8s.io is forbidden: User "alice" cannot impersonate:user-info resource "userextras" in API group "authentication.k8s.io" at the cluster scope: impersonating an invalid key in extra is not allowed: extra.key: Invalid value: "scopes": must be a domain-prefixed path (such as "acme.io/foo")"#
    );
}

#[test]
fn node_impersonation() {
    let rules = vec![
        Rule::new("on")
            .user("alice")
            .verbs(&["impersonate-on:arbitrary-node:list"])
            .api_groups(&[""])
            .resources(&["pods"]),
        Rule::new("nodes")
            .user("alice")
            .verbs(&["impersonate:arbitrary-node"])
            .api_groups(&["authentication.k8s.io"])
            .resources(&["nodes"])
            .names(&["n1"]),
    ];
    let (cfg, alice) = impersonator(rules);
    let user = cfg.impersonate(&alice, &wanted("system:node:n1"), &list_pods("a")).expect("allowed");
    assert_eq!(user.groups, [NODES_GROUP, AUTHENTICATED_GROUP]);
    // Legacy impersonation treats a node username as a plain user.
    let (cfg, alice) = impersonator(vec![legacy("users", "", &["system:node:n2"])]);
    let user = cfg.impersonate(&alice, &wanted("system:node:n2"), &list_pods("a")).expect("allowed");
    assert_eq!(user.groups, [AUTHENTICATED_GROUP]);
    // A ServiceAccount may impersonate the node its pod runs on.
    let cfg = AuthConfig::new();
    cfg.set_rules(vec![
        Rule::new("on")
            .service_account("kube-system", "agent")
            .verbs(&["impersonate-on:associated-node:list"])
            .api_groups(&[""])
            .resources(&["pods"]),
        Rule::new("node")
            .service_account("kube-system", "agent")
            .verbs(&["impersonate:associated-node"])
            .api_groups(&["authentication.k8s.io"])
            .resources(&["nodes"])
            .names(&["*"]),
    ]);
    let agent = UserInfo::service_account("kube-system", "agent").with_extra(NODE_NAME_EXTRA, &["n3"]);
    let user = cfg.impersonate(&agent, &wanted("system:node:n3"), &list_pods("a")).expect("allowed");
    assert_eq!(user.name, "system:node:n3");
    assert!(cfg.impersonate(&agent, &wanted("system:node:n4"), &list_pods("a")).is_err(), "not its node");
}

#[test]
fn constrained_sanity_checks_word_their_reasons_as_the_apiserver() {
    // Everything constrained is allowed, legacy nothing: the user-info mode's own refusals surface.
    let rules = vec![
        Rule::new("on")
            .user("alice")
            .verbs(&["impersonate-on:user-info:list"])
            .api_groups(&[""])
            .resources(&["pods"]),
        Rule::new("who")
            .user("alice")
            .verbs(&["impersonate:user-info"])
            .api_groups(&["authentication.k8s.io"])
            .resources(&["*"]),
    ];
    let (cfg, alice) = impersonator(rules);
    let refused = |h: HeaderMap| {
        let w = parse_headers(&h).expect("valid").expect("impersonating");
        message(cfg.impersonate(&alice, &w, &list_pods("x")).expect_err("refused"))
    };
    let prefix = |resource: &str| {
        format!(
            r#"{resource}.authentication.k8s.io is forbidden: User "alice" cannot impersonate:user-info resource "{resource}" in API group "authentication.k8s.io" at the cluster scope: "#
        )
    };
    assert_eq!(
        refused(headers(&[("impersonate-user", b"bob"), ("impersonate-group", b"")])),
        prefix("groups") + "impersonating the empty string group is not allowed"
    );
    assert_eq!(
        refused(headers(&[("impersonate-user", b"bob"), ("impersonate-extra-ex.com%2fa", b"")])),
        prefix("userextras") + "impersonating the empty string value in extra is not allowed"
    );
    assert_eq!(
        refused(headers(&[("impersonate-user", b"bob"), ("impersonate-extra-%41.com%2fa", b"v")])),
        prefix("userextras")
            + r#"impersonating an invalid key in extra is not allowed: extra.key: Invalid value: "A.com": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#
    );
    // Four or more extra values: one wildcard check stands for all of them.
    let h = headers(&[
        ("impersonate-user", b"bob"),
        ("impersonate-extra-a.com%2fa", b"v"),
        ("impersonate-extra-b.com%2fa", b"v"),
        ("impersonate-extra-c.com%2fa", b"v"),
        ("impersonate-extra-d.com%2fa", b"v"),
    ]);
    let w = parse_headers(&h).expect("valid").expect("impersonating");
    assert_eq!(cfg.impersonate(&alice, &w, &list_pods("x")).expect("allowed").extra.len(), 4);
    // The 400 prints an empty extra key and value as Go does.
    let err = parse_headers(&headers(&[("impersonate-extra-", b"")])).expect_err("no user");
    assert!(err.to_string().contains(r#"Extra:map[string][]string{"":[]string{""}}"#), "{err}");
}
