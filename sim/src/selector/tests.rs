use std::collections::BTreeMap;

use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Map, Value, json};

use super::*;

fn labels(pairs: &[(&str, &str)]) -> Map<String, Value> {
    pairs.iter().map(|(k, v)| (k.to_string(), Value::String(v.to_string()))).collect()
}

fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn label_err(s: &str) -> String {
    match LabelSelector::parse(s) {
        Ok(sel) => panic!("{s:?} parsed as {sel}, expected an error"),
        Err(e) => e,
    }
}

fn field_err(s: &str) -> String {
    match FieldSelector::parse(s) {
        Ok(sel) => panic!("{s:?} parsed as {sel}, expected an error"),
        Err(e) => e,
    }
}

const NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const VALUE_RULE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

// === label selectors: matching ===

#[test]
fn empty_label_selector_matches_everything() {
    for s in ["", "   ", "\t\n"] {
        let sel = LabelSelector::parse(s).expect("blank selector is valid");
        assert!(sel.is_empty());
        assert!(sel.matches(&labels(&[])));
        assert!(sel.matches(&labels(&[("a", "b")])));
    }
}

#[test]
fn equality_operators() {
    for s in ["a=b", "a==b", " a = b "] {
        let sel = LabelSelector::parse(s).expect("valid");
        assert!(!sel.is_empty());
        assert!(sel.matches(&labels(&[("a", "b"), ("c", "d")])), "{s}");
        assert!(!sel.matches(&labels(&[("a", "c")])), "{s}");
        assert!(!sel.matches(&labels(&[])), "{s}: = needs the label to be present");
    }
    let ne = LabelSelector::parse("a!=b").expect("valid");
    assert!(ne.matches(&labels(&[])), "!= matches an absent label");
    assert!(ne.matches(&labels(&[("a", "c")])));
    assert!(!ne.matches(&labels(&[("a", "b")])));
}

#[test]
fn set_operators() {
    let sel = LabelSelector::parse("env in (prod, qa)").expect("valid");
    assert!(sel.matches(&labels(&[("env", "qa")])));
    assert!(!sel.matches(&labels(&[("env", "dev")])));
    assert!(!sel.matches(&labels(&[])));
    let sel = LabelSelector::parse("env notin (prod,qa)").expect("valid");
    assert!(sel.matches(&labels(&[])), "notin matches an absent label");
    assert!(sel.matches(&labels(&[("env", "dev")])));
    assert!(!sel.matches(&labels(&[("env", "prod")])));
}

#[test]
fn existence_operators() {
    let sel = LabelSelector::parse("a,!b").expect("valid");
    assert!(sel.matches(&labels(&[("a", "")])));
    assert!(!sel.matches(&labels(&[("a", "x"), ("b", "")])));
    assert!(!sel.matches(&labels(&[])));
}

#[test]
fn numeric_comparisons_are_strict_and_need_integers() {
    let gt = LabelSelector::parse("n>1").expect("valid");
    assert!(gt.matches(&labels(&[("n", "2")])));
    assert!(!gt.matches(&labels(&[("n", "1")])));
    assert!(!gt.matches(&labels(&[("n", "x")])), "non-integer values never match");
    assert!(!gt.matches(&labels(&[])));
    let lt = LabelSelector::parse("n<1").expect("valid");
    assert!(lt.matches(&labels(&[("n", "0")])));
    assert!(!lt.matches(&labels(&[("n", "1")])));
}

#[test]
fn empty_parentheses_mean_the_empty_value() {
    let sel = LabelSelector::parse("k in ()").expect("`k in ()` is accepted");
    assert!(sel.matches(&labels(&[("k", "")])));
    assert!(!sel.matches(&labels(&[("k", "x")])));
    assert!(!sel.matches(&labels(&[])));
    let sel = LabelSelector::parse("x in (foo,,baz),y,z notin ()").expect("the grammar's own example");
    assert_eq!(sel.to_string(), "x in (,baz,foo),y,z notin ()");
    assert!(sel.matches(&labels(&[("x", ""), ("y", "1"), ("z", "a")])));
    assert!(!sel.matches(&labels(&[("x", "foo"), ("y", "1"), ("z", "")])));
}

#[test]
fn keywords_are_identifiers_where_a_key_or_value_is_expected() {
    let sel = LabelSelector::parse("in in (in, notin),notin=in").expect("valid");
    assert!(sel.matches(&labels(&[("in", "notin"), ("notin", "in")])));
    assert!(!sel.matches(&labels(&[("in", "x"), ("notin", "in")])));
}

#[test]
fn prefixed_keys_and_canonical_form() {
    let sel = LabelSelector::parse("b=1,app.kubernetes.io/name in (y,x),!z").expect("valid");
    assert_eq!(sel.to_string(), "app.kubernetes.io/name in (x,y),b=1,!z");
}

#[test]
fn non_string_label_values_are_treated_as_absent() {
    let mut l = Map::new();
    l.insert("a".into(), json!(1));
    assert!(!LabelSelector::parse("a").expect("valid").matches(&l));
    assert!(LabelSelector::parse("a!=1").expect("valid").matches(&l));
}

/// apimachinery's own `TestSelectorParse` table: good strings print back without their spaces.
#[test]
fn apimachinery_parse_table() {
    for good in ["x=a,y=b,z=c", "", "x!=a,y=b", "x=", "x= ", "x=,z= ", "x= ,z= ", "!x", "x>1", "x>1,z<5"] {
        let sel = LabelSelector::parse(good).unwrap_or_else(|e| panic!("{good:?}: {e}"));
        assert_eq!(sel.to_string(), good.replace(' ', ""), "{good:?}");
    }
    for bad in ["x=a||y=b", "x==a==b", "!x=a", "x<a"] {
        assert!(LabelSelector::parse(bad).is_err(), "{bad:?} must be rejected");
    }
    // Deterministic: requirements are sorted by key.
    assert_eq!(
        LabelSelector::parse("x=a,a=x").map(|s| s.to_string()),
        LabelSelector::parse("a=x,x=a").map(|s| s.to_string())
    );
    // Non-special characters are identifier characters (then rejected by key validation).
    assert!(label_err("~").starts_with("unable to parse requirement: <nil>: Invalid value: \"~\""));
    assert!(
        LabelSelector::parse("\rx").expect("carriage return is whitespace").matches(&labels(&[("x", "")]))
    );
    let sel = LabelSelector::parse("0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)").expect("valid");
    assert_eq!(sel.to_string(), "0.1.2.domain/99 notin (10.10.100.1,tick.tack.clock)");
    let long_key = "a".repeat(254);
    assert!(LabelSelector::parse(&long_key).is_err());
}

// === label selectors: errors worded like the apiserver ===

#[test]
fn label_syntax_errors() {
    let cases = [
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("a=b,", "found '', expected: identifier after ','"),
        (",", "found ',', expected: !, identifier, or 'end of string'"),
        ("=a", "found '=', expected: !, identifier, or 'end of string'"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
        ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("a!", "unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt"),
        ("a in b", "unable to parse requirement: found 'b' expected: '('"),
        ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
        ("a in (b,=)", "unable to parse requirement: found '=', expected: ',', or identifier"),
        ("a=(b)", "unable to parse requirement: found '(', expected: identifier"),
        ("!", "unable to parse requirement: found '', expected: identifier"),
        ("!,a", "unable to parse requirement: found ',', expected: identifier"),
        ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
    ];
    for (input, want) in cases {
        assert_eq!(label_err(input), want, "selector {input:?}");
    }
}

#[test]
fn label_validation_errors() {
    assert_eq!(
        label_err("-a=b"),
        format!("unable to parse requirement: <nil>: Invalid value: \"-a\": name part {NAME_RULE}")
    );
    assert_eq!(
        label_err("a=-b"),
        format!("unable to parse requirement: values[0][a]: Invalid value: \"-b\": {VALUE_RULE}")
    );
    let long = "x".repeat(64);
    assert_eq!(
        label_err(&format!("a={long}")),
        format!(
            "unable to parse requirement: values[0][a]: Invalid value: \"{long}\": must be no more than 63 characters"
        )
    );
    assert_eq!(
        label_err(&long),
        format!(
            "unable to parse requirement: <nil>: Invalid value: \"{long}\": name part must be no more than 63 characters"
        )
    );
    assert_eq!(
        label_err("/a"),
        "unable to parse requirement: <nil>: Invalid value: \"/a\": prefix part must be non-empty"
    );
    assert_eq!(
        label_err("Example.com/a"),
        "unable to parse requirement: <nil>: Invalid value: \"Example.com/a\": prefix part a lowercase RFC 1123 \
         subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with \
         an alphanumeric character (e.g. 'example.com', regex used for validation is \
         '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    );
    assert!(label_err("a/b/c").contains("Invalid value: \"a/b/c\": a qualified name must consist of"));
    assert_eq!(
        label_err("a/"),
        format!(
            "unable to parse requirement: <nil>: Invalid value: \"a/\": name part must be non-empty; name part {NAME_RULE}"
        )
    );
    assert_eq!(
        label_err("a>b"),
        "unable to parse requirement: values[0]: Invalid value: \"b\": for 'Gt', 'Lt' operators, the value must be an integer"
    );
    // "-1" is an integer but not a valid label value.
    assert_eq!(
        label_err("a>-1"),
        format!("unable to parse requirement: values[0][a]: Invalid value: \"-1\": {VALUE_RULE}")
    );
    // Several errors are aggregated as [e1, e2], values in sorted order.
    assert_eq!(
        label_err("a in (-y,-x)"),
        format!(
            "unable to parse requirement: [values[0][a]: Invalid value: \"-x\": {VALUE_RULE}, \
             values[1][a]: Invalid value: \"-y\": {VALUE_RULE}]"
        )
    );
    assert_eq!(
        label_err("a\"b"),
        format!("unable to parse requirement: <nil>: Invalid value: \"a\\\"b\": name part {NAME_RULE}")
    );
}

#[test]
fn nul_byte_ends_the_input() {
    // The Go lexer's read() returns 0 both at the end and for a NUL byte: where a token starts, a NUL ends
    // the input; inside or right after a token it is swallowed as a separator.
    let sel = LabelSelector::parse("a=b, \0c=d").map(|s| s.to_string());
    assert_eq!(sel, Err("found '', expected: identifier after ','".to_string()));
    assert_eq!(LabelSelector::parse("a=b,\0c=d").map(|s| s.to_string()), Ok("a=b,c=d".to_string()));
    assert_eq!(label_err("a=b\0c"), "found 'c', expected: ',' or 'end of string'");
}

/// Random inputs never panic, and every accepted selector prints to a form that parses back to itself.
#[test]
fn label_selector_property_loop() {
    const ALPHABET: &[&str] = &[
        "a", "b", "Z", "1", "-", "_", ".", "/", " ", "=", "!", "(", ")", ",", ">", "<", "in", "notin", "é",
        "\0",
    ];
    let mut rng = StdRng::seed_from_u64(0x5e1ec7);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let len = rng.random_range(0..12);
        let s: String = (0..len).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())]).collect();
        if let Ok(sel) = LabelSelector::parse(&s) {
            accepted += 1;
            let printed = sel.to_string();
            let again = LabelSelector::parse(&printed)
                .unwrap_or_else(|e| panic!("{s:?} printed as {printed:?} which fails: {e}"));
            assert_eq!(again, sel, "{s:?} -> {printed:?}");
        }
    }
    assert!(accepted > 500, "the generator should produce valid selectors too ({accepted})");
}

// === field selectors ===

#[test]
fn field_selector_terms_are_sorted_and_unescaped() {
    let sel = FieldSelector::parse("status.phase!=Running,metadata.name==a\\,b\\=c\\\\,,").expect("valid");
    assert_eq!(
        sel.terms(),
        &[
            ("metadata.name".to_string(), true, "a,b=c\\".to_string()),
            ("status.phase".to_string(), false, "Running".to_string()),
        ]
    );
    assert_eq!(sel.requires_exact_match("metadata.name"), Some("a,b=c\\"));
    assert_eq!(sel.requires_exact_match("status.phase"), None);
    assert_eq!(FieldSelector::parse(&sel.to_string()).expect("canonical form parses"), sel);
    assert!(FieldSelector::parse("").expect("valid").is_empty());
    assert!(FieldSelector::parse(",,").expect("valid").is_empty());
}

#[test]
fn field_selector_errors() {
    assert_eq!(field_err("a=b,c"), "invalid selector: 'a=b,c'; can't understand 'c'");
    assert_eq!(field_err("a=b=c"), "invalid field selector: unescaped character in value: 61");
    assert_eq!(field_err("a!==b"), "invalid field selector: unescaped character in value: 61");
    assert_eq!(field_err("a=b\\x"), "invalid field selector: invalid escape sequence: \\x");
    assert_eq!(field_err("a=b\\"), "invalid field selector: invalid escape sequence: \\");
    // A comma can only reach a value escaped... unless the escape is itself escaped.
    assert_eq!(field_err("a=b\\\\\\,c,d"), "invalid selector: 'a=b\\\\\\,c,d'; can't understand 'd'");
}

#[test]
fn field_matching_reads_missing_fields_as_empty() {
    let set = fields(&[("metadata.name", "a"), ("spec.nodeName", "n1")]);
    let m = |s: &str| FieldSelector::parse(s).expect("valid").matches(&set);
    assert!(m("metadata.name=a"));
    assert!(m("metadata.name=a,spec.nodeName==n1"));
    assert!(!m("metadata.name=a,spec.nodeName=n2"));
    assert!(m("status.phase="));
    assert!(m("status.phase!=Running"));
    assert!(!m("status.phase!="));
    assert!(m(""));
}

/// Random inputs never panic; accepted selectors print to a form that parses back to themselves, and a term
/// `f=v` built with the escaper always parses to exactly `(f, v)`.
#[test]
fn field_selector_property_loop() {
    const ALPHABET: &[&str] = &["a", "b", ".", "=", "!", ",", "\\", " ", "é", "=="];
    let mut rng = StdRng::seed_from_u64(0xf1e1d);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let len = rng.random_range(0..10);
        let s: String = (0..len).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())]).collect();
        if let Ok(sel) = FieldSelector::parse(&s) {
            accepted += 1;
            let printed = sel.to_string();
            let again = FieldSelector::parse(&printed)
                .unwrap_or_else(|e| panic!("{s:?} printed as {printed:?} which fails: {e}"));
            // The order may differ (terms sort by their raw text, `==` prints as `=`); the AND may not.
            let sorted = |f: &FieldSelector| {
                let mut t = f.terms().to_vec();
                t.sort();
                t
            };
            assert_eq!(sorted(&again), sorted(&sel), "{s:?} -> {printed:?}");
        }
        let value: String = (0..len).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())]).collect();
        let term = format!("spec.x={}", kache_k8s::options::selector::field::escape_value(&value));
        let parsed = FieldSelector::parse(&term).unwrap_or_else(|e| panic!("{term:?}: {e}"));
        assert_eq!(parsed.terms(), &[("spec.x".to_string(), true, value.clone())], "{term:?}");
    }
    assert!(accepted > 1000, "{accepted}");
}

// === per-kind support ===

#[test]
fn unsupported_fields_are_rejected_with_the_kinds_message() {
    let sel = |s: &str| FieldSelector::parse(s).expect("valid");
    assert_eq!(
        validate_fields("", "Pod", &sel("spec.foo=1")),
        Err("field label not supported: spec.foo".into())
    );
    assert_eq!(
        validate_fields("", "ConfigMap", &sel("spec.foo=1")),
        Err("\"spec.foo\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
            .into())
    );
    assert_eq!(
        validate_fields("apps", "ReplicaSet", &sel("status.replicas=1")),
        Err("\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"".into())
    );
    assert_eq!(
        validate_fields("", "Node", &sel("metadata.namespace=x")),
        Err("field label not supported: metadata.namespace".into())
    );
    // The first unsupported field in sorted order is the one reported.
    assert_eq!(validate_fields("", "Pod", &sel("z.z=1,b.b=2")), Err("field label not supported: b.b".into()));
    assert_eq!(
        validate_fields("example.com", "Widget", &sel("spec.size=1")),
        Err("field label not supported: spec.size".into())
    );
    assert!(convert_custom_fields(true, &sel("metadata.namespace=a")).is_ok());
    assert_eq!(
        convert_custom_fields(false, &sel("metadata.namespace=a")),
        Err("field label not supported: metadata.namespace".into())
    );
    for (group, kind, s) in [
        ("", "Pod", "spec.nodeName=a,status.phase=Running,spec.hostNetwork=true,status.podIPs=x,spec.host=n"),
        ("", "Node", "spec.unschedulable=false,metadata.name=n"),
        ("", "Namespace", "status.phase=Active"),
        ("", "Secret", "type=Opaque,metadata.namespace=a"),
        ("", "Service", "spec.type=ClusterIP,spec.clusterIP=None"),
        (
            "",
            "Event",
            "involvedObject.kind=Pod,reason=Started,source=kubelet,reportingComponent=x,type=Normal",
        ),
        ("", "ConfigMap", "metadata.name=a,metadata.namespace=b"),
        ("apps", "Deployment", "metadata.name=a"),
    ] {
        assert_eq!(validate_fields(group, kind, &sel(s)), Ok(()), "{kind}: {s}");
    }
}

#[test]
fn legacy_pod_host_means_node_name() {
    let sel = FieldSelector::parse("spec.host=n1").expect("valid");
    let converted = convert_fields("", "Pod", &sel).expect("pods accept spec.host");
    assert_eq!(converted.terms(), &[("spec.nodeName".to_string(), true, "n1".to_string())]);
    let pod = json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"nodeName": "n1"}});
    let set = field_set("", "Pod", true, &pod);
    assert!(converted.matches(&set));
    assert!(sel.matches(&set), "an unconverted spec.host still matches spec.nodeName");
    assert!(validate_fields("", "Node", &sel).is_err());
}

#[test]
fn pod_field_set() {
    let pod = json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"nodeName": "n1", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                 "serviceAccountName": "sa"},
        "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]}
    });
    let set = field_set("", "Pod", true, &pod);
    assert_eq!(
        set,
        fields(&[
            ("metadata.name", "p"),
            ("metadata.namespace", "default"),
            ("spec.nodeName", "n1"),
            ("spec.restartPolicy", "Always"),
            ("spec.schedulerName", "default-scheduler"),
            ("spec.serviceAccountName", "sa"),
            ("spec.hostNetwork", "false"),
            ("status.phase", "Running"),
            ("status.podIP", "10.0.0.1"),
            ("status.nominatedNodeName", ""),
        ])
    );
    let pod = json!({"metadata": {"name": "p"}, "spec": {"hostNetwork": true},
                     "status": {"podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.1"}]}});
    let set = field_set("", "Pod", true, &pod);
    assert_eq!(set["spec.hostNetwork"], "true");
    assert_eq!(set["status.podIP"], "10.0.0.9", "podIP is authoritative when it disagrees with podIPs");
    assert_eq!(set["metadata.namespace"], "");
}

#[test]
fn other_kinds_field_sets() {
    let node = field_set("", "Node", false, &json!({"metadata": {"name": "n"}, "spec": {}}));
    assert_eq!(node, fields(&[("metadata.name", "n"), ("spec.unschedulable", "false")]));
    let ns =
        field_set("", "Namespace", false, &json!({"metadata": {"name": "d"}, "status": {"phase": "Active"}}));
    assert_eq!(ns, fields(&[("metadata.name", "d"), ("name", "d"), ("status.phase", "Active")]));
    let cm = field_set("", "ConfigMap", true, &json!({"metadata": {"name": "c", "namespace": "d"}}));
    assert_eq!(cm, fields(&[("metadata.name", "c"), ("metadata.namespace", "d")]));
    let crd = field_set("example.com", "Widget", false, &json!({"metadata": {"name": "w"}}));
    assert_eq!(crd, fields(&[("metadata.name", "w")]));
    let rs =
        field_set("apps", "ReplicaSet", true, &json!({"metadata": {"name": "r"}, "status": {"replicas": 3}}));
    assert_eq!(rs["status.replicas"], "3");
    let ev = field_set(
        "",
        "Event",
        true,
        &json!({"metadata": {"name": "e", "namespace": "d"}, "involvedObject": {"kind": "Pod", "name": "p"},
                "reason": "Started", "reportingComponent": "kubelet", "type": "Normal"}),
    );
    assert_eq!(ev["source"], "kubelet", "source falls back to reportingComponent");
    assert_eq!(ev["involvedObject.kind"], "Pod");
    assert_eq!(ev["involvedObject.uid"], "");
    let secret = field_set("", "Secret", true, &json!({"metadata": {"name": "s"}, "type": "Opaque"}));
    assert_eq!(secret["type"], "Opaque");
}
