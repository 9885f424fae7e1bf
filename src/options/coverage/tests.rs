use super::*;

fn mirror(labels: &str, fields: &str) -> MirrorSelector {
    MirrorSelector::parse(labels, fields).expect("valid mirror selector").converted(FieldKind::Pod)
}

/// Whether `mirror` covers a request with these selectors (converted as the handler converts them).
fn covers(mirror: &MirrorSelector, ns: Option<&str>, name: Option<&str>, labels: &str, fields: &str) -> bool {
    let labels = LabelSelector::parse(labels).expect("valid request labels");
    let fields = FieldSelector::parse(fields)
        .expect("valid request fields")
        .convert(FieldKind::Pod)
        .expect("pod fields");
    mirror.covers(&Requested { namespace: ns, name, labels: &labels, fields: &fields })
}

#[test]
fn node_mirror_covers_its_own_node_only() {
    let m = mirror("", "spec.nodeName=n1");
    assert!(covers(&m, None, None, "", "spec.nodeName=n1"), "the kubelet's own selector");
    assert!(covers(&m, Some("ns"), None, "app=web", "spec.nodeName=n1,status.phase=Running"), "narrower");
    assert!(covers(&m, None, None, "", "spec.nodeName==n1"), "== is =");
    assert!(covers(&m, None, None, "", "spec.host=n1"), "the legacy field converts to spec.nodeName");
    assert!(!covers(&m, None, None, "", ""), "an unfiltered list");
    assert!(!covers(&m, Some("ns"), None, "", ""), "a namespace's list");
    assert!(!covers(&m, None, None, "", "spec.nodeName=n2"), "another node");
    assert!(!covers(&m, None, None, "", "spec.nodeName!=n2"), "!= does not pin a node");
    assert!(!covers(&m, None, None, "", "status.phase=Running"), "another field");
    assert!(!covers(&m, Some("ns"), Some("p"), "", ""), "a get by name cannot prove the pod's node");
}

#[test]
fn legacy_field_in_the_mirror_converts_too() {
    let m = mirror("", "spec.host=n1");
    assert_eq!(m.fields.to_string(), "spec.nodeName=n1");
    assert!(covers(&m, None, None, "", "spec.nodeName=n1"));
}

#[test]
fn not_equal_terms() {
    let m = mirror("", "status.phase!=Succeeded");
    assert!(covers(&m, None, None, "", "status.phase!=Succeeded"));
    assert!(covers(&m, None, None, "", "status.phase=Running"), "= another value excludes Succeeded");
    assert!(!covers(&m, None, None, "", "status.phase=Succeeded"));
    assert!(!covers(&m, None, None, "", "status.phase!=Failed"));
    assert!(!covers(&m, None, None, "", ""));
}

#[test]
fn namespace_and_name_pinned_by_the_url() {
    let m = mirror("", "metadata.namespace=team-a");
    assert!(covers(&m, Some("team-a"), None, "", ""), "a namespaced list in the mirror's namespace");
    assert!(covers(&m, Some("team-a"), Some("p"), "", ""), "a get in the mirror's namespace");
    assert!(covers(&m, None, None, "", "metadata.namespace=team-a"), "cluster-wide with the selector");
    assert!(!covers(&m, Some("team-b"), Some("p"), "", ""), "a get elsewhere");
    assert!(!covers(&m, None, None, "", ""), "cluster-wide");
    let m = mirror("", "metadata.name=only");
    assert!(covers(&m, Some("ns"), Some("only"), "", ""));
    assert!(!covers(&m, Some("ns"), Some("other"), "", ""));
}

#[test]
fn label_set_requirements() {
    let m = mirror("tier in (web,api)", "");
    assert!(covers(&m, None, None, "tier=web", ""));
    assert!(covers(&m, None, None, "tier in (api,web)", ""));
    assert!(covers(&m, None, None, "tier==api,app=x", ""), "extra requirements only narrow");
    assert!(!covers(&m, None, None, "tier in (web,db)", ""));
    assert!(!covers(&m, None, None, "tier", ""), "exists is wider");
    assert!(!covers(&m, None, None, "tier!=db", ""));
    assert!(!covers(&m, None, None, "", ""));

    let m = mirror("tier notin (db)", "");
    assert!(covers(&m, None, None, "tier!=db", ""));
    assert!(covers(&m, None, None, "tier notin (db,cache)", ""));
    assert!(covers(&m, None, None, "tier=web", ""));
    assert!(covers(&m, None, None, "!tier", ""), "absent labels match notin");
    assert!(!covers(&m, None, None, "tier notin (cache)", ""));
    assert!(!covers(&m, None, None, "tier in (web,db)", ""));
    assert!(!covers(&m, None, None, "tier", ""));
}

#[test]
fn label_existence_and_comparisons() {
    let m = mirror("gpu", "");
    for narrower in ["gpu", "gpu=a100", "gpu in (a,b)", "gpu>1", "gpu<3"] {
        assert!(covers(&m, None, None, narrower, ""), "{narrower}");
    }
    for wider in ["", "!gpu", "gpu!=a100", "other"] {
        assert!(!covers(&m, None, None, wider, ""), "{wider}");
    }
    let m = mirror("!gpu", "");
    assert!(covers(&m, None, None, "!gpu", ""));
    assert!(!covers(&m, None, None, "gpu!=x", ""), "!= also matches present labels");

    let m = mirror("rank>5", "");
    assert!(covers(&m, None, None, "rank>5", ""));
    assert!(covers(&m, None, None, "rank>9", ""));
    assert!(covers(&m, None, None, "rank in (6,7)", ""));
    assert!(!covers(&m, None, None, "rank>4", ""));
    assert!(!covers(&m, None, None, "rank in (6,x)", ""), "a non-integer never matches >");
    assert!(!covers(&m, None, None, "rank in (5)", ""));
    let m = mirror("rank<5", "");
    assert!(covers(&m, None, None, "rank<2", ""));
    assert!(covers(&m, None, None, "rank=1", ""));
    assert!(!covers(&m, None, None, "rank<6", ""));
}

#[test]
fn every_mirror_term_must_be_implied() {
    let m = mirror("app=web", "spec.nodeName=n1");
    assert!(covers(&m, None, None, "app=web", "spec.nodeName=n1"));
    assert!(!covers(&m, None, None, "app=web", ""));
    assert!(!covers(&m, None, None, "", "spec.nodeName=n1"));
    assert!(!covers(&m, None, None, "app=db", "spec.nodeName=n1"));
}

#[test]
fn conservative_about_combinations() {
    // `rank>1,rank<3` implies `rank` exists, and so does either term alone; but two terms that only together
    // imply the mirror's are not looked at together.
    let m = mirror("rank in (2)", "");
    assert!(!covers(&m, None, None, "rank>1,rank<3", ""), "only 2 fits, but that is reasoning about sets");
}

#[test]
fn spec_parsing() {
    let (resource, sel) = parse_selector_spec("pods:fieldSelector=spec.nodeName=node-1").expect("valid");
    assert_eq!(resource, "pods");
    assert_eq!(sel.fields.exact("spec.nodeName"), Some("node-1"));
    assert!(sel.labels.is_empty());
    let (resource, sel) =
        parse_selector_spec("apps/v1/deployments:labelSelector=app=web,tier!=db").expect("valid");
    assert_eq!(resource, "apps/v1/deployments");
    assert_eq!(sel.labels.to_string(), "app=web,tier!=db");
    assert_eq!(sel.to_string(), "labelSelector=app=web,tier!=db");

    for bad in [
        "pods",
        ":fieldSelector=a=b",
        "pods:spec.nodeName=n1",
        "pods:fieldSelector=",
        "pods:fieldSelector=nonsense",
        "pods:labelSelector=a in (",
    ] {
        assert!(parse_selector_spec(bad).is_err(), "{bad} is refused");
    }
}

#[test]
fn merged_selectors_and_query_params() {
    let (_, a) = parse_selector_spec("pods:fieldSelector=spec.nodeName=n1").expect("valid");
    let (_, b) = parse_selector_spec("pods:labelSelector=app=web").expect("valid");
    let (_, c) = parse_selector_spec("pods:fieldSelector=status.phase!=Succeeded").expect("valid");
    let m = merge(&merge(&a, &b), &c);
    assert_eq!(
        m.query_params(),
        vec![
            ("labelSelector", "app=web".to_owned()),
            ("fieldSelector", "spec.nodeName=n1,status.phase!=Succeeded".to_owned()),
        ]
    );
    assert_eq!(m.to_string(), "labelSelector=app=web fieldSelector=spec.nodeName=n1,status.phase!=Succeeded");
    assert_eq!(MirrorSelector::default().to_string(), "everything");
}
