use std::collections::HashMap;

use http::{Request, Response, StatusCode};

use super::*;
use crate::front::body::{self, Body};
use crate::upstream::BoxFuture;

/// Answers GETs by exact path; anything else is 404.
struct Paths(HashMap<&'static str, (u16, String)>);

impl Transport for Paths {
    fn send(&self, req: Request<Body>) -> BoxFuture<'_, Result<Response<Body>, UpstreamError>> {
        let (code, body) = self.0.get(req.uri().path()).cloned().unwrap_or((404, String::new()));
        Box::pin(async move {
            Ok(Response::builder()
                .status(StatusCode::from_u16(code).unwrap())
                .body(body::full(body))
                .unwrap())
        })
    }
}

fn cluster() -> Paths {
    let mut m = HashMap::new();
    m.insert("/api", (200, r#"{"kind":"APIVersions","versions":["v1"]}"#.to_owned()));
    m.insert(
        "/api/v1",
        (
            200,
            r#"{"kind":"APIResourceList","groupVersion":"v1","resources":[
            {"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["create","delete","get","list","patch","update","watch"],"shortNames":["po"]},
            {"name":"pods/status","singularName":"","namespaced":true,"kind":"Pod","verbs":["get","patch","update"]},
            {"name":"pods/log","singularName":"","namespaced":true,"kind":"Pod","verbs":["get"]},
            {"name":"bindings","singularName":"binding","namespaced":true,"kind":"Binding","verbs":["create"]},
            {"name":"componentstatuses","singularName":"componentstatus","namespaced":false,"kind":"ComponentStatus","verbs":["get","list"]},
            {"name":"nodes","singularName":"node","namespaced":false,"kind":"Node","verbs":["get","list","watch"],"shortNames":["no"]},
            {"name":"events","singularName":"event","namespaced":true,"kind":"Event","verbs":["list","watch"],"shortNames":["ev"]}
            ]}"#
            .to_owned(),
        ),
    );
    m.insert(
        "/apis",
        (
            200,
            r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[
            {"name":"apps","versions":[{"groupVersion":"apps/v1","version":"v1"}],"preferredVersion":{"groupVersion":"apps/v1","version":"v1"}},
            {"name":"events.k8s.io","versions":[{"groupVersion":"events.k8s.io/v1","version":"v1"}],"preferredVersion":{"groupVersion":"events.k8s.io/v1","version":"v1"}},
            {"name":"example.com","versions":[{"groupVersion":"example.com/v2","version":"v2"},{"groupVersion":"example.com/v1","version":"v1"}],"preferredVersion":{"groupVersion":"example.com/v2","version":"v2"}},
            {"name":"metrics.k8s.io","versions":[{"groupVersion":"metrics.k8s.io/v1beta1","version":"v1beta1"}],"preferredVersion":{"groupVersion":"metrics.k8s.io/v1beta1","version":"v1beta1"}}
            ]}"#
            .to_owned(),
        ),
    );
    m.insert(
        "/apis/apps/v1",
        (
            200,
            r#"{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"apps/v1","resources":[
            {"name":"deployments","singularName":"deployment","namespaced":true,"kind":"Deployment","verbs":["list","watch","get"],"shortNames":["deploy"]},
            {"name":"deployments/scale","singularName":"","namespaced":true,"group":"autoscaling","version":"v1","kind":"Scale","verbs":["get","patch","update"]}
            ]}"#
            .to_owned(),
        ),
    );
    m.insert(
        "/apis/events.k8s.io/v1",
        (
            200,
            r#"{"kind":"APIResourceList","groupVersion":"events.k8s.io/v1","resources":[
            {"name":"events","singularName":"event","namespaced":true,"kind":"Event","verbs":["list","watch"],"shortNames":["ev"]}]}"#
                .to_owned(),
        ),
    );
    for v in ["v1", "v2"] {
        let path: &'static str = if v == "v1" { "/apis/example.com/v1" } else { "/apis/example.com/v2" };
        m.insert(
            path,
            (
                200,
                r#"{"kind":"APIResourceList","resources":[
                {"name":"widgets","singularName":"widget","namespaced":false,"kind":"Widget","verbs":["list","watch"],"shortNames":null}]}"#
                    .to_owned(),
            ),
        );
    }
    m.insert("/apis/metrics.k8s.io/v1beta1", (503, "service unavailable".to_owned()));
    Paths(m)
}

fn gvrs(infos: &[ResourceInfo]) -> Vec<String> {
    infos.iter().map(|i| i.gvr.to_string()).collect()
}

#[tokio::test]
async fn discovers_list_watch_resources_of_preferred_versions() {
    let found = discover(&cluster()).await.unwrap();
    assert_eq!(
        gvrs(&found),
        [
            "v1/pods",
            "v1/nodes",
            "v1/events",
            "apps/v1/deployments",
            "events.k8s.io/v1/events",
            "example.com/v2/widgets"
        ]
    );
    let pods = &found[0];
    assert_eq!((pods.kind.as_str(), pods.list_kind.as_str(), pods.namespaced), ("Pod", "PodList", true));
    assert!(!pods.list_items_have_type_meta);
    let widgets = found.iter().find(|i| i.kind == "Widget").unwrap();
    assert!(!widgets.namespaced && widgets.list_items_have_type_meta, "custom resources keep type meta");
}

#[tokio::test]
async fn reports_group_versions_that_failed() {
    let all = discover_all(&cluster()).await.unwrap();
    assert_eq!(all.failed, ["metrics.k8s.io/v1beta1"]);
    assert!(!all.covers(&Gvr::new("metrics.k8s.io", "v1beta1", "pods")));
    assert!(all.covers(&Gvr::new("apps", "v1", "deployments")));
    let widgets: Vec<_> = all.resources.iter().filter(|r| r.info.kind == "Widget").collect();
    assert_eq!(widgets.len(), 2);
    assert!(widgets.iter().any(|w| w.info.gvr.version == "v1" && !w.preferred));
}

#[tokio::test]
async fn core_discovery_failure_is_an_error() {
    let mut c = cluster();
    c.0.insert("/api", (500, String::new()));
    assert!(matches!(discover(&c).await, Err(DiscoveryError::Status { code: 500, .. })));
    c.0.insert("/api", (200, "not json".into()));
    assert!(matches!(discover(&c).await, Err(DiscoveryError::Decode { .. })));
    c.0.insert("/api", (403, String::new()));
    assert!(matches!(discover(&c).await, Err(DiscoveryError::Status { code: 403, .. })));
}

/// The shape of k8s.io/sample-apiserver (the testbed): no core group, flunders in the preferred
/// v1beta1 and in v1alpha1, fischers only in v1alpha1.
fn sample_apiserver() -> Paths {
    let mut m = HashMap::new();
    m.insert("/api", (404, r#"{"paths":["/apis","/healthz"]}"#.to_owned()));
    m.insert(
        "/apis",
        (
            200,
            r#"{"kind":"APIGroupList","groups":[{"name":"wardle.example.com","versions":[
            {"groupVersion":"wardle.example.com/v1beta1","version":"v1beta1"},
            {"groupVersion":"wardle.example.com/v1alpha1","version":"v1alpha1"}],
            "preferredVersion":{"groupVersion":"wardle.example.com/v1beta1","version":"v1beta1"}}]}"#
                .to_owned(),
        ),
    );
    let verbs = r#"["create","delete","deletecollection","get","list","patch","update","watch"]"#;
    m.insert(
        "/apis/wardle.example.com/v1alpha1",
        (
            200,
            format!(
                r#"{{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"wardle.example.com/v1alpha1","resources":[
                {{"name":"fischers","singularName":"fischer","namespaced":false,"kind":"Fischer","verbs":{verbs}}},
                {{"name":"flunders","singularName":"flunder","namespaced":true,"kind":"Flunder","verbs":{verbs}}}]}}"#
            ),
        ),
    );
    m.insert(
        "/apis/wardle.example.com/v1beta1",
        (
            200,
            format!(
                r#"{{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"wardle.example.com/v1beta1","resources":[
                {{"name":"flunders","singularName":"flunder","namespaced":true,"kind":"Flunder","verbs":{verbs}}}]}}"#
            ),
        ),
    );
    Paths(m)
}

#[tokio::test]
async fn an_upstream_without_the_core_group_is_discovered() {
    let found = discover(&sample_apiserver()).await.expect("no core group is a valid upstream");
    assert_eq!(gvrs(&found), ["wardle.example.com/v1beta1/flunders", "wardle.example.com/v1alpha1/fischers"]);
    let all = discover_all(&sample_apiserver()).await.unwrap();
    assert!(all.failed.is_empty());
    let alpha_flunders =
        all.resources.iter().find(|r| r.info.gvr.to_string() == "wardle.example.com/v1alpha1/flunders");
    assert!(alpha_flunders.is_some_and(|r| !r.preferred), "served, not preferred");
    let named =
        Selection { include: Some(parse_resource_specs("fischers,flunders").unwrap()), exclude: Vec::new() };
    let (chosen, unresolved) = named.select(&all.resources);
    assert_eq!(
        gvrs(&chosen),
        ["wardle.example.com/v1alpha1/fischers", "wardle.example.com/v1beta1/flunders"]
    );
    assert!(unresolved.is_empty());
}

#[tokio::test]
async fn a_resource_is_not_preferred_in_an_older_version_while_the_preferred_one_failed() {
    let mut c = sample_apiserver();
    c.0.insert("/apis/wardle.example.com/v1beta1", (503, String::new()));
    let all = discover_all(&c).await.unwrap();
    assert_eq!(all.failed, ["wardle.example.com/v1beta1"]);
    // v1beta1 might serve fischers too: nothing of the group is preferred until it answers.
    assert!(all.resources.iter().all(|r| !r.preferred), "{:?}", all.resources);
}

#[test]
fn parses_specs() {
    use ResourceSpec::*;
    let specs = parse_resource_specs(
        " pods, nodes ,apps/v1/deployments,example.com/v1/widgets,deployments.apps,v1/services,,apps/replicasets",
    )
    .unwrap();
    assert_eq!(
        specs,
        [
            Name("pods".into()),
            Name("nodes".into()),
            Exact(Gvr::new("apps", "v1", "deployments")),
            Exact(Gvr::new("example.com", "v1", "widgets")),
            GroupResource { group: "apps".into(), resource: "deployments".into() },
            Exact(Gvr::new("", "v1", "services")),
            GroupResource { group: "apps".into(), resource: "replicasets".into() },
        ]
    );
    assert_eq!(parse_resource_specs("").unwrap(), []);
    assert_eq!(parse_resource_specs("core/v1/pods").unwrap(), [Exact(Gvr::new("", "v1", "pods"))]);
    for bad in ["a/b/c/d", "apps//deployments", "Pods", "apps/x1/deployments", "pods;rm", "-x", "v01/pods/x"]
    {
        assert!(parse_resource_specs(bad).is_err(), "{bad} should be rejected");
    }
}

#[tokio::test]
async fn selects_everything_minus_excludes_or_the_named_resources() {
    let all = discover_all(&cluster()).await.unwrap().resources;
    let everything = Selection { include: None, exclude: parse_resource_specs("events").unwrap() };
    let (chosen, _) = everything.select(&all);
    assert_eq!(gvrs(&chosen), ["v1/pods", "v1/nodes", "apps/v1/deployments", "example.com/v2/widgets"]);

    let named = Selection {
        include: Some(
            parse_resource_specs("po,ev,deploy,example.com/v1/widgets,nothere.example.com").unwrap(),
        ),
        exclude: parse_resource_specs("nodes").unwrap(),
    };
    let (chosen, unresolved) = named.select(&all);
    assert_eq!(gvrs(&chosen), ["v1/pods", "v1/events", "apps/v1/deployments", "example.com/v1/widgets"]);
    assert_eq!(unresolved, parse_resource_specs("nothere.example.com").unwrap());
    assert!(!named.allows(all.iter().find(|r| r.info.kind == "Node").unwrap()));
}
