use http::{HeaderMap, HeaderValue};

use super::*;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
            HeaderValue::from_str(v).expect("value"),
        );
    }
    h
}

fn parse(pairs: &[(&str, &str)]) -> Option<Requested> {
    Requested::parse(&headers(pairs)).expect("valid impersonation")
}

fn list_pods(ns: &str) -> Attributes {
    Attributes {
        verb: "list".into(),
        version: "v1".into(),
        resource: "pods".into(),
        namespace: ns.into(),
        ..Attributes::default()
    }
}

/// Each mode as `name: verb group/resource[/sub] ns/name, …`.
fn describe(r: &Requested, request: Option<&Attributes>) -> Vec<String> {
    r.modes(request, Credential::Bearer)
        .iter()
        .map(|m| {
            let checks: Vec<String> = m
                .checks
                .iter()
                .map(|a| {
                    let sub =
                        if a.subresource.is_empty() { String::new() } else { format!("/{}", a.subresource) };
                    format!("{} {}/{}{} {}/{}", a.verb, a.group, a.resource, sub, a.namespace, a.name)
                })
                .collect();
            let refused = m.refused.as_ref().map(|(_, r)| format!(" refused: {r}")).unwrap_or_default();
            format!("{}: {}{refused}", m.name, checks.join(", "))
        })
        .collect()
}

#[test]
fn no_headers_is_no_impersonation() {
    assert_eq!(parse(&[("accept", "application/json")]), None);
    // An empty user with nothing else is no impersonation (`Header.Get` returns "").
    assert_eq!(parse(&[("impersonate-user", "")]), None);
    // Unknown Impersonate-* headers alone are ignored, as the apiserver's filter does.
    assert_eq!(parse(&[("impersonate-whatever", "x")]), None);
}

#[test]
fn a_user_is_tried_as_user_info_then_legacy() {
    let r = parse(&[("impersonate-user", "alice")]).expect("impersonation");
    assert_eq!(
        describe(&r, Some(&list_pods("a"))),
        [
            "user-info: impersonate-on:user-info:list /pods a/, impersonate:user-info authentication.k8s.io/users /alice",
            "legacy: impersonate /users /alice",
        ]
    );
    // A non-resource request: legacy only.
    assert_eq!(describe(&r, None), ["legacy: impersonate /users /alice"]);
    for mode in r.modes(Some(&list_pods("a")), Credential::Certificate) {
        assert_eq!(mode.user.user, "alice");
        assert_eq!(mode.user.groups, ["system:authenticated"]);
        assert_eq!(mode.user.credential, Credential::Certificate);
    }
}

#[test]
fn user_uid_groups_extras_are_checked_in_the_apiservers_order() {
    let r = parse(&[
        ("impersonate-extra-example.com%2Fscope", "b"),
        ("impersonate-extra-example.com%2Fscope", "a"),
        ("impersonate-group", "dev"),
        ("impersonate-group", "ops"),
        ("impersonate-uid", "u-1"),
        ("impersonate-user", "alice"),
    ])
    .expect("impersonation");
    assert_eq!(
        describe(&r, Some(&list_pods("a"))),
        [
            "user-info: impersonate-on:user-info:list /pods a/, \
             impersonate:user-info authentication.k8s.io/users /alice, \
             impersonate:user-info authentication.k8s.io/uids /u-1, \
             impersonate:user-info authentication.k8s.io/groups /dev, \
             impersonate:user-info authentication.k8s.io/groups /ops, \
             impersonate:user-info authentication.k8s.io/userextras/example.com/scope /b, \
             impersonate:user-info authentication.k8s.io/userextras/example.com/scope /a",
            "legacy: impersonate /users /alice, impersonate authentication.k8s.io/uids /u-1, \
             impersonate /groups /dev, impersonate /groups /ops, \
             impersonate authentication.k8s.io/userextras/example.com/scope /b, \
             impersonate authentication.k8s.io/userextras/example.com/scope /a",
        ]
    );
    let user = &r.modes(None, Credential::Bearer)[0].user;
    assert_eq!(user.groups, ["dev", "ops", "system:authenticated"]);
    assert_eq!(user.extra.get("example.com/scope").expect("extra"), &["b", "a"]);
    assert_eq!(user.uid, "u-1");
}

#[test]
fn constrained_modes_refuse_what_legacy_may_allow() {
    let refusal = |pairs: &[(&str, &str)]| {
        let r = parse(pairs).expect("impersonation");
        let modes = r.modes(Some(&list_pods("a")), Credential::Bearer);
        assert_eq!(modes.last().expect("legacy").refused, None, "legacy refuses nothing by itself");
        modes[0].refused.as_ref().map(|(_, reason)| reason.clone())
    };
    let user = ("impersonate-user", "alice");
    assert_eq!(
        refusal(&[user, ("impersonate-group", "system:masters")]).as_deref(),
        Some("impersonating the system:masters group is not allowed")
    );
    assert_eq!(
        refusal(&[user, ("impersonate-group", "")]).as_deref(),
        Some("impersonating the empty string group is not allowed")
    );
    assert_eq!(
        refusal(&[user, ("impersonate-extra-scopes", "x")]).as_deref(),
        Some(
            r#"impersonating an invalid key in extra is not allowed: extra.key: Invalid value: "scopes": must be a domain-prefixed path (such as "acme.io/foo")"#
        )
    );
    assert_eq!(
        refusal(&[user, ("impersonate-extra-example.com%2F%53cope", "x")]).as_deref(),
        Some(r#"impersonating a non-lowercase key in extra is not allowed: "example.com/Scope""#)
    );
    assert_eq!(
        refusal(&[user, ("impersonate-extra-example.com%2fs", "")]).as_deref(),
        Some("impersonating the empty string value in extra is not allowed")
    );
    assert_eq!(refusal(&[user, ("impersonate-extra-example.com%2fs", "v")]), None);
}

#[test]
fn anonymous_and_explicit_authentication_groups() {
    let groups = |pairs: &[(&str, &str)]| {
        parse(pairs).expect("impersonation").modes(None, Credential::Bearer)[0].user.groups.clone()
    };
    assert_eq!(groups(&[("impersonate-user", "system:anonymous")]), ["system:unauthenticated"]);
    assert_eq!(
        groups(&[("impersonate-user", "alice"), ("impersonate-group", "system:unauthenticated")]),
        ["system:unauthenticated"]
    );
    assert_eq!(
        groups(&[("impersonate-user", "alice"), ("impersonate-group", "system:authenticated")]),
        ["system:authenticated"]
    );
}

#[test]
fn service_accounts_and_nodes() {
    let r = parse(&[("impersonate-user", "system:serviceaccount:ns-1:builder")]).expect("impersonation");
    assert_eq!(
        describe(&r, Some(&list_pods("a"))),
        [
            "serviceaccount: impersonate-on:serviceaccount:list /pods a/, \
             impersonate:serviceaccount authentication.k8s.io/serviceaccounts ns-1/builder",
            "legacy: impersonate /serviceaccounts ns-1/builder",
        ]
    );
    for mode in r.modes(Some(&list_pods("a")), Credential::Bearer) {
        assert_eq!(mode.user.user, "system:serviceaccount:ns-1:builder");
        assert_eq!(
            mode.user.groups,
            ["system:serviceaccounts", "system:serviceaccounts:ns-1", "system:authenticated"]
        );
    }
    // With groups: the groups, and only legacy applies.
    let r = parse(&[("impersonate-user", "system:serviceaccount:ns-1:builder"), ("impersonate-group", "g")]);
    let modes = r.expect("impersonation").modes(Some(&list_pods("a")), Credential::Bearer);
    assert_eq!(modes.len(), 1);
    assert_eq!(modes[0].user.groups, ["g", "system:authenticated"]);
    // Not a valid service-account name: a plain user.
    for user in ["system:serviceaccount:NS:x", "system:serviceaccount:ns", "system:serviceaccount:ns:a:b"] {
        let r = parse(&[("impersonate-user", user)]).expect("impersonation");
        assert_eq!(describe(&r, None), [format!("legacy: impersonate /users /{user}")]);
    }
    // Nodes: the arbitrary-node mode gives them their group; never decided for memory.
    let r = parse(&[("impersonate-user", "system:node:n1")]).expect("impersonation");
    assert!(!r.decidable_for_memory());
    let modes = r.modes(Some(&list_pods("a")), Credential::Certificate);
    assert_eq!(modes[0].name, "arbitrary-node");
    assert_eq!(modes[0].user.groups, ["system:nodes", "system:authenticated"]);
    assert_eq!(modes[1].name, "legacy");
    assert_eq!(modes[1].user.groups, ["system:authenticated"]);
    assert!(parse(&[("impersonate-user", "alice")]).expect("impersonation").decidable_for_memory());
}

#[test]
fn parts_without_a_user_are_the_apiservers_400() {
    let err = Requested::parse(&headers(&[("impersonate-group", "system:masters")])).expect_err("no user");
    let ParseError::Api(err) = err else { panic!("an API error: {err:?}") };
    assert_eq!(err.status_code(), 400);
    assert_eq!(
        err.to_string(),
        r#"requested &user.DefaultInfo{Name:"", UID:"", Groups:[]string{"system:masters"}, Extra:map[string][]string(nil)} without impersonating a user name"#
    );
    let err = Requested::parse(&headers(&[
        ("impersonate-uid", "u"),
        ("impersonate-extra-k", "v"),
        ("impersonate-user", ""),
    ]))
    .expect_err("no user");
    assert_eq!(
        err,
        ParseError::Api(ApiError::BadRequest(
            r#"requested &user.DefaultInfo{Name:"", UID:"u", Groups:[]string(nil), Extra:map[string][]string{"k":[]string{"v"}}} without impersonating a user name"#
                .to_owned()
        ))
    );
}

#[test]
fn extra_keys_are_unescaped() {
    assert_eq!(unescape_extra_key("scopes%2fx").as_deref(), Some("scopes/x"));
    assert_eq!(unescape_extra_key("%53copes").as_deref(), Some("Scopes"));
    assert_eq!(unescape_extra_key("bad%zz").as_deref(), Some("bad%zz"), "a malformed escape keeps the key");
    assert_eq!(unescape_extra_key("trailing%").as_deref(), Some("trailing%"));
    assert_eq!(unescape_extra_key("%ff"), None, "not UTF-8");
}

#[test]
fn bytes_that_are_not_utf8_are_reported_never_a_panic() {
    let mut h = HeaderMap::new();
    h.insert("impersonate-user", HeaderValue::from_bytes(b"al\xffice").expect("opaque bytes"));
    assert!(matches!(Requested::parse(&h), Err(ParseError::NotUtf8(_))));
    let mut h = HeaderMap::new();
    h.insert("impersonate-user", HeaderValue::from_static("alice"));
    h.insert("impersonate-extra-%ff", HeaderValue::from_static("v"));
    assert!(matches!(Requested::parse(&h), Err(ParseError::NotUtf8(_))));
}

#[test]
fn strip_removes_every_impersonation_header() {
    let mut h = headers(&[("impersonate-user", "a"), ("impersonate-extra-x", "y"), ("accept", "*/*")]);
    strip_impersonation(&mut h);
    assert_eq!(h.len(), 1);
    assert!(!has_impersonation(&h));
}

proptest::proptest! {
    /// Any header set parses without panicking; a successful parse names a user every mode checks first
    /// (after the request check of constrained modes), and legacy impersonation always applies.
    #[test]
    fn any_headers_parse_without_panic(
        pairs in proptest::collection::vec(
            (
                proptest::sample::select(vec![
                    "impersonate-user", "impersonate-group", "impersonate-uid", "impersonate-extra-a%2",
                    "impersonate-extra-", "impersonate-extra-k%41", "impersonate-x", "accept",
                ]),
                proptest::collection::vec(proptest::num::u8::ANY, 0..12),
            ),
            0..8,
        )
    ) {
        let mut h = HeaderMap::new();
        for (k, v) in &pairs {
            if let Ok(v) = HeaderValue::from_bytes(v) {
                h.append(*k, v);
            }
        }
        if let Ok(Some(r)) = Requested::parse(&h) {
            let modes = r.modes(Some(&list_pods("a")), Credential::Bearer);
            let legacy = modes.last().expect("legacy");
            proptest::prop_assert_eq!(legacy.name, "legacy");
            proptest::prop_assert!(matches!(legacy.checks[0].resource.as_str(), "users" | "serviceaccounts"));
            proptest::prop_assert!(!legacy.user.user.is_empty());
        }
    }
}
