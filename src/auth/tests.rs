use super::*;

fn hv(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).expect("valid header value")
}

#[test]
fn bearer_tokens_parse_like_the_apiserver() {
    assert_eq!(bearer_token(&hv("Bearer abc")), Some("abc"));
    assert_eq!(bearer_token(&hv("bearer abc")), Some("abc"));
    assert_eq!(bearer_token(&hv("BEARER abc extra")), Some("abc"));
    assert_eq!(bearer_token(&hv("Bearer ")), None);
    assert_eq!(bearer_token(&hv("Bearer")), None);
    assert_eq!(bearer_token(&hv("Basic dXNlcjpwYXNz")), None);
    assert_eq!(bearer_token(&HeaderValue::from_bytes(b"Bearer \xff").expect("opaque bytes")), None);
}

#[test]
fn token_keys_are_sha256_digests() {
    let k = token_key("abc");
    // SHA-256("abc").
    assert_eq!(k[..4], [0xba, 0x78, 0x16, 0xbf]);
    assert_ne!(token_key("abc"), token_key("abd"));
}

#[test]
fn attributes_follow_request_info() {
    use crate::front::route::Route;
    let attrs = |path: &str| {
        let route = Route::parse(&http::Method::GET, &path.parse().expect("uri"));
        Attributes::from_request(route.resource().expect("a resource request"))
    };
    let a = attrs("/api/v1/namespaces/ns/pods");
    assert_eq!(
        (a.verb.as_str(), a.resource.as_str(), a.namespace.as_str(), a.name.as_str()),
        ("list", "pods", "ns", "")
    );
    let a = attrs("/apis/apps/v1/namespaces/ns/deployments/d");
    assert_eq!((a.verb.as_str(), a.group.as_str(), a.name.as_str()), ("get", "apps", "d"));
    let a = attrs("/api/v1/pods?watch=true");
    assert_eq!((a.verb.as_str(), a.namespace.as_str()), ("watch", ""));
    let a = attrs("/api/v1/namespaces/kube-system");
    assert_eq!(
        (a.resource.as_str(), a.namespace.as_str(), a.name.as_str()),
        ("namespaces", "kube-system", "kube-system")
    );
}

#[test]
fn certificate_users_are_impersonated_and_their_claims_stripped() {
    let upstream = Upstream::plain("http://127.0.0.1:1").expect("valid url");
    let auth = Auth::new(AuthSettings::delegated(), upstream);
    let mut headers = HeaderMap::new();
    headers.insert(header::AUTHORIZATION, hv("Bearer stolen"));
    headers.insert("impersonate-user", hv("admin"));
    headers.insert("impersonate-group", hv("system:masters"));
    headers.insert(header::ACCEPT, hv("application/json"));
    let mut ext = http::Extensions::new();
    let mut id = Identity::certificate("carol", vec!["dev".into(), "ops".into()]);
    id.extra.insert("Scopes/X".into(), vec!["a".into()]);
    assert_eq!(auth.apply_to_forwarded(&id, &mut headers, &mut ext), Ok(ForwardVia::Kache));
    assert!(headers.get(header::AUTHORIZATION).is_none());
    assert!(headers.keys().all(|k| !k.as_str().starts_with("impersonate-")));
    assert!(headers.contains_key(header::ACCEPT));
    let UpstreamIdentity(imp) = ext.get::<UpstreamIdentity>().expect("identity headers set");
    assert_eq!(imp.get("impersonate-user").expect("user"), "carol");
    let groups: Vec<_> =
        imp.get_all("impersonate-group").iter().map(|v| v.to_str().expect("ascii")).collect();
    assert_eq!(groups, ["dev", "ops"]);
    // Upper-case letters are escaped too: the apiserver lower-cases header names before decoding them.
    let (name, value) =
        imp.iter().find(|(k, _)| k.as_str().starts_with("impersonate-extra-")).expect("extra");
    assert_eq!(value, "a");
    let key = name.as_str().strip_prefix("impersonate-extra-").expect("prefix");
    assert_eq!(impersonate::unescape_extra_key(&key.to_ascii_lowercase()).as_deref(), Some("Scopes/X"));
}

#[test]
fn identities_headers_cannot_carry_are_refused_not_narrowed() {
    let upstream = Upstream::plain("http://127.0.0.1:1").expect("valid url");
    let auth = Auth::new(AuthSettings::delegated(), upstream);
    for id in [
        Identity::certificate("bad\nuser", vec!["system:masters".into()]),
        Identity::certificate(" padded", vec![]),
        Identity::certificate("carol", vec!["ok".into(), "bad\u{7f}".into()]),
    ] {
        let mut headers = HeaderMap::new();
        let mut ext = http::Extensions::new();
        let err = auth.apply_to_forwarded(&id, &mut headers, &mut ext).expect_err("inexpressible");
        assert_eq!(err.status_code(), 500, "{id:?}");
        assert!(ext.get::<UpstreamIdentity>().is_none(), "nothing is forwarded for {id:?}");
    }
}

#[test]
fn bearer_clients_keep_their_own_credentials() {
    let upstream = Upstream::plain("http://127.0.0.1:1").expect("valid url");
    let auth = Auth::new(AuthSettings::delegated(), upstream);
    let mut headers = HeaderMap::new();
    headers.insert(header::AUTHORIZATION, hv("Bearer mine"));
    headers.insert("impersonate-user", hv("bob"));
    let mut ext = http::Extensions::new();
    let id = Identity::bearer("alice", "", vec![], BTreeMap::new());
    assert_eq!(auth.apply_to_forwarded(&id, &mut headers, &mut ext), Ok(ForwardVia::ClientCredentials));
    assert_eq!(headers.get(header::AUTHORIZATION).expect("kept"), "Bearer mine");
    assert_eq!(headers.get("impersonate-user").expect("kept for the upstream to authorize"), "bob");
    assert!(ext.get::<UpstreamIdentity>().is_none());
}

#[tokio::test]
async fn delegated_without_credentials_is_401_and_none_is_kache() {
    let upstream = Upstream::plain("http://127.0.0.1:1").expect("valid url");
    let auth = Auth::new(AuthSettings::delegated(), upstream.clone());
    let err = auth.authenticate(&HeaderMap::new(), None).await.expect_err("no credentials");
    assert_eq!(err.status_code(), 401);
    assert_eq!(err.to_string(), "Unauthorized");
    let mut basic = HeaderMap::new();
    basic.insert(header::AUTHORIZATION, hv("Basic dXNlcjpwYXNz"));
    assert_eq!(auth.authenticate(&basic, None).await.expect_err("not a bearer token").status_code(), 401);

    let none = Auth::new(AuthSettings::default(), upstream);
    let id = none.authenticate(&HeaderMap::new(), None).await.expect("none mode");
    assert_eq!(id.credential, Credential::Kache);
    none.authorize(&id, &Attributes::default()).await.expect("none mode authorizes nothing");
}

#[test]
fn forbidden_matches_the_apiserver_message() {
    let id = Identity::bearer("alice", "", vec![], BTreeMap::new());
    let a = Attributes {
        verb: "list".into(),
        resource: "pods".into(),
        namespace: "ns".into(),
        ..Default::default()
    };
    assert_eq!(
        forbidden(&id, &a, "").to_string(),
        r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "ns""#
    );
    let a = Attributes {
        verb: "get".into(),
        group: "apps".into(),
        resource: "deployments".into(),
        name: "d".into(),
        ..Default::default()
    };
    assert_eq!(
        forbidden(&id, &a, "").to_string(),
        r#"deployments.apps "d" is forbidden: User "alice" cannot get resource "deployments" in API group "apps" at the cluster scope"#
    );
}
