use http::{Method, Uri};
use proptest::prelude::*;

use super::*;

fn route(method: Method, uri: &str) -> Route {
    Route::parse(&method, &uri.parse::<Uri>().expect("test URIs are valid"))
}

fn res(method: Method, uri: &str) -> ResourceRequest {
    match route(method.clone(), uri) {
        Route::Resource(r) => r,
        Route::Other => panic!("{method} {uri}: expected a resource request, got Other"),
    }
}

/// (group, version, resource, namespace, name, subresource, verb, legacy watch path)
type Expect<'a> = (&'a str, &'a str, &'a str, Option<&'a str>, Option<&'a str>, Option<&'a str>, Verb, bool);

fn check(method: Method, uri: &str, want: Expect<'_>) {
    let got = res(method.clone(), uri);
    let (group, version, resource, namespace, name, subresource, verb, legacy) = want;
    let want = ResourceRequest {
        gvr: Gvr::new(group, version, resource),
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        subresource: subresource.map(str::to_owned),
        verb,
        legacy_watch_path: legacy,
    };
    assert_eq!(got, want, "{method} {uri}");
}

#[test]
fn core_collections_and_objects() {
    use Verb::*;
    let g = Method::GET;
    check(g.clone(), "/api/v1/pods", ("", "v1", "pods", None, None, None, List, false));
    check(g.clone(), "/api/v1/namespaces/ns1/pods", ("", "v1", "pods", Some("ns1"), None, None, List, false));
    check(
        g.clone(),
        "/api/v1/namespaces/ns1/pods/p1",
        ("", "v1", "pods", Some("ns1"), Some("p1"), None, Get, false),
    );
    check(g.clone(), "/api/v1/nodes/n1", ("", "v1", "nodes", None, Some("n1"), None, Get, false));
    check(Method::HEAD, "/api/v1/nodes/n1", ("", "v1", "nodes", None, Some("n1"), None, Get, false));
    // Trailing slashes are trimmed like Go's splitPath.
    check(g, "/api/v1/namespaces/ns1/pods/", ("", "v1", "pods", Some("ns1"), None, None, List, false));
}

#[test]
fn namespaces_resource_is_cluster_scoped() {
    use Verb::*;
    let g = Method::GET;
    check(g.clone(), "/api/v1/namespaces", ("", "v1", "namespaces", None, None, None, List, false));
    check(
        g.clone(),
        "/api/v1/namespaces/kube-system",
        ("", "v1", "namespaces", None, Some("kube-system"), None, Get, false),
    );
    check(
        Method::PUT,
        "/api/v1/namespaces/x/status",
        ("", "v1", "namespaces", None, Some("x"), Some("status"), Update, false),
    );
    check(
        Method::PUT,
        "/api/v1/namespaces/x/finalize",
        ("", "v1", "namespaces", None, Some("x"), Some("finalize"), Update, false),
    );
    check(g.clone(), "/api/v1/watch/namespaces", ("", "v1", "namespaces", None, None, None, Watch, true));
    check(g, "/api/v1/watch/namespaces/x", ("", "v1", "namespaces", None, Some("x"), None, Watch, true));
}

#[test]
fn groups() {
    use Verb::*;
    let g = Method::GET;
    check(
        g.clone(),
        "/apis/apps/v1/deployments",
        ("apps", "v1", "deployments", None, None, None, List, false),
    );
    check(
        g.clone(),
        "/apis/apps/v1/namespaces/d/deployments/web",
        ("apps", "v1", "deployments", Some("d"), Some("web"), None, Get, false),
    );
    check(
        Method::PUT,
        "/apis/apps/v1/namespaces/d/deployments/web/scale",
        ("apps", "v1", "deployments", Some("d"), Some("web"), Some("scale"), Update, false),
    );
    check(
        g.clone(),
        "/apis/example.com/v1/widgets",
        ("example.com", "v1", "widgets", None, None, None, List, false),
    );
    check(
        g,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin",
        ("rbac.authorization.k8s.io", "v1", "clusterroles", None, Some("admin"), None, Get, false),
    );
}

#[test]
fn verbs_from_methods() {
    use Verb::*;
    check(
        Method::POST,
        "/api/v1/namespaces/a/pods",
        ("", "v1", "pods", Some("a"), None, None, Create, false),
    );
    check(
        Method::PUT,
        "/api/v1/namespaces/a/pods/p",
        ("", "v1", "pods", Some("a"), Some("p"), None, Update, false),
    );
    check(
        Method::PATCH,
        "/api/v1/namespaces/a/pods/p",
        ("", "v1", "pods", Some("a"), Some("p"), None, Patch, false),
    );
    check(
        Method::DELETE,
        "/api/v1/namespaces/a/pods/p",
        ("", "v1", "pods", Some("a"), Some("p"), None, Delete, false),
    );
    check(
        Method::DELETE,
        "/api/v1/namespaces/a/pods",
        ("", "v1", "pods", Some("a"), None, None, DeleteCollection, false),
    );
    check(
        Method::OPTIONS,
        "/api/v1/namespaces/a/pods",
        ("", "v1", "pods", Some("a"), None, None, Unknown, false),
    );
    check(
        Method::POST,
        "/api/v1/namespaces/a/pods/p/eviction",
        ("", "v1", "pods", Some("a"), Some("p"), Some("eviction"), Create, false),
    );
    check(
        Method::POST,
        "/api/v1/namespaces/a/pods/p/binding",
        ("", "v1", "pods", Some("a"), Some("p"), Some("binding"), Create, false),
    );
    // POST to a collection with ?watch=1 is still a create (only GET becomes list/watch).
    check(Method::POST, "/api/v1/pods?watch=1", ("", "v1", "pods", None, None, None, Create, false));
}

#[test]
fn watch_query_parameter() {
    use Verb::*;
    let g = Method::GET;
    for q in [
        "watch=1",
        "watch=true",
        "watch=TRUE",
        "watch=yes",
        "watch=",
        "watch",
        "a=b&watch=1",
        "watch=1&watch=0",
        "wat%63h=1",
    ] {
        check(g.clone(), &format!("/api/v1/pods?{q}"), ("", "v1", "pods", None, None, None, Watch, false));
    }
    for q in
        ["watch=0", "watch=false", "watch=False", "watch=0&watch=1", "watchx=1", "x=watch", "watch=1;a=b", ""]
    {
        check(g.clone(), &format!("/api/v1/pods?{q}"), ("", "v1", "pods", None, None, None, List, false));
    }
    // A named object with ?watch=1 stays a get (the apiserver only looks at watch when there is no name).
    check(
        g,
        "/api/v1/namespaces/a/pods/p?watch=1",
        ("", "v1", "pods", Some("a"), Some("p"), None, Get, false),
    );
}

#[test]
fn legacy_watch_paths() {
    use Verb::*;
    let g = Method::GET;
    check(g.clone(), "/api/v1/watch/pods", ("", "v1", "pods", None, None, None, Watch, true));
    check(
        g.clone(),
        "/api/v1/watch/namespaces/a/pods",
        ("", "v1", "pods", Some("a"), None, None, Watch, true),
    );
    check(
        g.clone(),
        "/api/v1/watch/namespaces/a/pods/p",
        ("", "v1", "pods", Some("a"), Some("p"), None, Watch, true),
    );
    check(
        g.clone(),
        "/apis/apps/v1/watch/deployments",
        ("apps", "v1", "deployments", None, None, None, Watch, true),
    );
    // The path verb wins over the method and over ?watch=0.
    check(g.clone(), "/api/v1/watch/pods?watch=0", ("", "v1", "pods", None, None, None, Watch, true));
    check(Method::DELETE, "/api/v1/watch/pods", ("", "v1", "pods", None, None, None, Watch, true));
    // `/api/v1/watch` alone cannot name a resource.
    assert_eq!(route(g, "/api/v1/watch"), Route::Other);
}

#[test]
fn subresources_and_long_running() {
    use Verb::*;
    let g = Method::GET;
    check(
        g.clone(),
        "/api/v1/namespaces/a/pods/p/log?follow=true",
        ("", "v1", "pods", Some("a"), Some("p"), Some("log"), Get, false),
    );
    check(
        Method::POST,
        "/api/v1/namespaces/a/pods/p/exec?command=sh",
        ("", "v1", "pods", Some("a"), Some("p"), Some("exec"), Create, false),
    );
    check(
        g.clone(),
        "/api/v1/namespaces/a/pods/p/attach",
        ("", "v1", "pods", Some("a"), Some("p"), Some("attach"), Get, false),
    );
    check(
        Method::POST,
        "/api/v1/namespaces/a/pods/p/portforward",
        ("", "v1", "pods", Some("a"), Some("p"), Some("portforward"), Create, false),
    );
    // Parts after the subresource are not interpreted.
    check(
        g.clone(),
        "/api/v1/namespaces/a/services/s/proxy/x/y",
        ("", "v1", "services", Some("a"), Some("s"), Some("proxy"), Get, false),
    );
    // Legacy proxy verb: no subresource.
    check(
        g.clone(),
        "/api/v1/proxy/namespaces/a/pods/p/x",
        ("", "v1", "pods", Some("a"), Some("p"), None, Proxy, false),
    );

    for (uri, long) in [
        ("/api/v1/pods?watch=1", true),
        ("/api/v1/watch/pods", true),
        ("/api/v1/pods", false),
        ("/api/v1/namespaces/a/pods/p", false),
        ("/api/v1/namespaces/a/pods/p/log", true),
        ("/api/v1/namespaces/a/pods/p/exec", true),
        ("/api/v1/namespaces/a/pods/p/status", false),
        ("/api/v1/proxy/nodes/n/stats", true),
        ("/openapi/v2", false),
    ] {
        assert_eq!(route(g.clone(), uri).is_long_running(), long, "{uri}");
    }
}

#[test]
fn non_resource_paths() {
    for uri in [
        "/",
        "/api",
        "/api/v1",
        "/apis",
        "/apis/apps",
        "/apis/apps/v1",
        "/version",
        "/openapi/v2",
        "/openapi/v3/api/v1",
        "/healthz",
        "/metrics",
        "/logs/x/y",
        "/apis/apps/v1/watch",
        "/api/v1//pods",
        "/apis//v1/pods",
        "/api/v1/namespaces/a/pods//status",
        "/api/v1/pods%ZZ",
    ] {
        assert_eq!(route(Method::GET, uri), Route::Other, "{uri}");
    }
}

#[test]
fn percent_decoded_path() {
    // Go matches on the decoded path; an encoded slash splits segments like a real one.
    check(
        Method::GET,
        "/api/v1/namespaces/a/pods/p%2Dq",
        ("", "v1", "pods", Some("a"), Some("p-q"), None, Verb::Get, false),
    );
    check(
        Method::GET,
        "/api/v1/namespaces%2Fa/pods",
        ("", "v1", "pods", Some("a"), None, None, Verb::List, false),
    );
}

#[test]
fn verbs_have_apiserver_names() {
    assert_eq!(Verb::DeleteCollection.as_str(), "deletecollection");
    assert!(Verb::Patch.is_write() && Verb::DeleteCollection.is_write());
    assert!(!Verb::Get.is_write() && !Verb::Watch.is_write());
}

proptest! {
    /// Arbitrary paths and queries never panic, and a resource route always has non-empty parts.
    #[test]
    fn parse_is_total(segs in proptest::collection::vec("[a-z0-9%./-]{0,8}", 0..8), query in "[a-z0-9=&%;+]{0,20}") {
        let path = format!("/{}", segs.join("/"));
        if let Ok(uri) = format!("{path}?{query}").parse::<Uri>() {
            for m in [Method::GET, Method::POST, Method::DELETE] {
                if let Route::Resource(r) = Route::parse(&m, &uri) {
                    prop_assert!(!r.gvr.resource.is_empty() && !r.gvr.version.is_empty());
                    prop_assert!(r.name.as_deref().is_none_or(|n| !n.is_empty()));
                }
            }
        }
    }

    #[test]
    fn percent_decode_roundtrip(s in "\\PC{0,20}") {
        let encoded: String = s.bytes().map(|b| format!("%{b:02X}")).collect();
        prop_assert_eq!(percent_decode(encoded.as_bytes(), false), Some(s));
    }
}
