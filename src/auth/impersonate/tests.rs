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

fn check_names(r: &Requested) -> Vec<String> {
    r.checks()
        .iter()
        .map(|a| {
            assert_eq!(a.verb, "impersonate");
            let sub = if a.subresource.is_empty() { String::new() } else { format!("/{}", a.subresource) };
            format!("{}:{}{}:{}:{}", a.group, a.resource, sub, a.namespace, a.name)
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
fn a_user_is_checked_and_gets_the_authenticated_group() {
    let r = parse(&[("impersonate-user", "alice")]).expect("impersonation");
    assert_eq!(check_names(&r), [":users::alice"]);
    let id = r.identity(Credential::Bearer);
    assert_eq!(id.user, "alice");
    assert_eq!(id.groups, ["system:authenticated"]);
    assert!(id.extra.is_empty() && id.uid.is_empty());
    assert_eq!(id.credential, Credential::Bearer);
}

#[test]
fn groups_extras_and_uid_are_each_checked_in_the_apiservers_order() {
    let r = parse(&[
        ("impersonate-uid", "u-1"),
        ("impersonate-extra-scopes%2Fx", "a"),
        ("impersonate-extra-scopes%2Fx", "b"),
        ("impersonate-group", "dev"),
        ("impersonate-group", "ops"),
        ("impersonate-user", "alice"),
    ])
    .expect("impersonation");
    assert_eq!(
        check_names(&r),
        [
            ":users::alice",
            ":groups::dev",
            ":groups::ops",
            "authentication.k8s.io:userextras/scopes/x::a",
            "authentication.k8s.io:userextras/scopes/x::b",
            "authentication.k8s.io:uids::u-1",
        ]
    );
    let id = r.identity(Credential::Certificate);
    assert_eq!(id.groups, ["dev", "ops", "system:authenticated"]);
    assert_eq!(id.extra.get("scopes/x").expect("extra"), &["a", "b"]);
    assert_eq!(id.uid, "u-1");
}

#[test]
fn explicit_authentication_groups_are_kept_as_requested() {
    let r = parse(&[("impersonate-user", "alice"), ("impersonate-group", "system:unauthenticated")]);
    assert_eq!(r.expect("impersonation").identity(Credential::Bearer).groups, ["system:unauthenticated"]);
    let r = parse(&[("impersonate-user", "alice"), ("impersonate-group", "system:authenticated")]);
    assert_eq!(r.expect("impersonation").identity(Credential::Bearer).groups, ["system:authenticated"]);
}

#[test]
fn anonymous_gets_the_unauthenticated_group() {
    let r = parse(&[("impersonate-user", "system:anonymous")]).expect("impersonation");
    assert_eq!(r.identity(Credential::Bearer).groups, ["system:unauthenticated"]);
}

#[test]
fn service_accounts_are_checked_in_their_namespace_and_get_their_groups() {
    let r = parse(&[("impersonate-user", "system:serviceaccount:ns-1:builder")]).expect("impersonation");
    assert_eq!(check_names(&r), [":serviceaccounts:ns-1:builder"]);
    let id = r.identity(Credential::Bearer);
    assert_eq!(id.user, "system:serviceaccount:ns-1:builder");
    assert_eq!(id.groups, ["system:serviceaccounts", "system:serviceaccounts:ns-1", "system:authenticated"]);
    // With groups given, they are the groups.
    let r = parse(&[("impersonate-user", "system:serviceaccount:ns-1:builder"), ("impersonate-group", "g")]);
    assert_eq!(r.expect("impersonation").identity(Credential::Bearer).groups, ["g", "system:authenticated"]);
    // Not a valid service-account name: a plain user.
    for user in ["system:serviceaccount:NS:x", "system:serviceaccount:ns", "system:serviceaccount:ns:a:b"] {
        let r = parse(&[("impersonate-user", user)]).expect("impersonation");
        assert_eq!(check_names(&r), [format!(":users::{user}")]);
    }
}

#[test]
fn parts_without_a_user_are_the_apiservers_500() {
    let err = Requested::parse(&headers(&[("impersonate-group", "system:masters")])).expect_err("no user");
    assert_eq!(err.status_code(), 500);
    assert_eq!(
        err.to_string(),
        "Internal error occurred: requested [{Group  system:masters    }] without impersonating a user"
    );
    let err = Requested::parse(&headers(&[("impersonate-uid", "u"), ("impersonate-extra-k", "v")]))
        .expect_err("no user");
    assert_eq!(
        err.to_string(),
        "Internal error occurred: requested [{UserExtra  v  authentication.k8s.io/v1  k} \
         {UID  u  authentication.k8s.io/v1  }] without impersonating a user"
    );
}

#[test]
fn extra_keys_are_lower_cased_and_unescaped() {
    assert_eq!(unescape_extra_key("scopes%2fx"), "scopes/x");
    assert_eq!(unescape_extra_key("%53copes"), "Scopes");
    assert_eq!(unescape_extra_key("bad%zz"), "bad%zz", "a malformed escape keeps the key");
    assert_eq!(unescape_extra_key("trailing%"), "trailing%");
    assert_eq!(unescape_extra_key("%ff"), "%ff", "not UTF-8: kept as sent");
}

#[test]
fn non_utf8_values_never_panic() {
    let mut h = HeaderMap::new();
    h.insert("impersonate-user", HeaderValue::from_bytes(b"al\xffice").expect("opaque bytes"));
    let r = Requested::parse(&h).expect("parsed").expect("impersonation");
    assert_eq!(r.identity(Credential::Bearer).user, "al\u{fffd}ice");
}

proptest::proptest! {
    /// Any header set parses without panicking, and a successful parse always names a user that is checked
    /// first.
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
            let checks = r.checks();
            proptest::prop_assert!(matches!(checks[0].resource.as_str(), "users" | "serviceaccounts"));
            let id = r.identity(Credential::Bearer);
            proptest::prop_assert!(!id.user.is_empty());
        }
    }
}
