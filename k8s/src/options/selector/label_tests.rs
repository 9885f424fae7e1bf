use proptest::prelude::*;

use super::*;
use crate::options::selector::test_support::object;

fn err(s: &str) -> String {
    LabelSelector::parse(s).expect_err(s).0
}

fn ok(s: &str) -> LabelSelector {
    LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn parses_the_grammar() {
    assert!(ok("").is_empty());
    assert!(ok("  ").is_empty());
    assert_eq!(ok("x in (foo,,baz),y,z notin ()").to_string(), "x in (,baz,foo),y,z notin ()");
    assert_eq!(ok("b=1,a==2,c!=3").to_string(), "a==2,b=1,c!=3");
    assert_eq!(ok("!a , b").to_string(), "!a,b");
    assert_eq!(ok("a>5,b<3").to_string(), "a>5,b<3");
    assert!(err("b<-3").contains("values[0][b]: Invalid value: \"-3\""));
    assert_eq!(ok("a=").to_string(), "a=");
    assert_eq!(ok("in in (in,notin)").to_string(), "in in (in,notin)");
    assert_eq!(ok("a in (,)").requirements()[0].values(), &[String::new()]);
    assert_eq!(ok("example.com/k=v").to_string(), "example.com/k=v");
}

#[test]
fn error_messages_match_apimachinery() {
    assert_eq!(err("a b"), "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt");
    assert_eq!(err("a=b c"), "found 'c', expected: ',' or 'end of string'");
    assert_eq!(err("a,"), "found '', expected: identifier after ','");
    assert_eq!(err("=a"), "found '=', expected: !, identifier, or 'end of string'");
    assert_eq!(
        err("a>b"),
        "unable to parse requirement: values[0]: Invalid value: \"b\": for 'Gt', 'Lt' operators, the value must be an integer"
    );
    assert_eq!(
        err("-a"),
        "unable to parse requirement: <nil>: Invalid value: \"-a\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
    );
    assert_eq!(
        err("a=-b"),
        "unable to parse requirement: values[0][a]: Invalid value: \"-b\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
    );
    assert!(
        err("a>b_").starts_with("unable to parse requirement: [values[0]: Invalid value: \"b_\": for 'Gt'")
    );
    assert_eq!(err("a in (b"), "unable to parse requirement: found '', expected: ',' or ')'");
    assert_eq!(err("a in b"), "unable to parse requirement: found 'b' expected: '('");
    assert_eq!(err("a in (="), "unable to parse requirement: found '=', expected: ',', ')' or identifier");
    assert_eq!(err("a in (b,="), "unable to parse requirement: found '=', expected: ',', or identifier");
    assert_eq!(ok("a==").to_string(), "a==");
    assert_eq!(err("a!=="), "unable to parse requirement: found '=', expected: identifier");
    assert_eq!(err("!a=b"), "found '=', expected: ',' or 'end of string'");
    assert_eq!(err("!"), "unable to parse requirement: found '', expected: identifier");
}

#[test]
fn nul_byte_ends_input_like_go() {
    // Go's lexer reads NUL as end of string at the start of a token.
    assert_eq!(ok("a=b,c\0").to_string(), "a=b,c");
    assert_eq!(err("a\0b"), "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt");
}

#[test]
fn matching_semantics() {
    let o = object(Some("ns"), "p", &[("app", "web"), ("tier", "3"), ("x", "abc")], &[]);
    let m = |s: &str| ok(s).matches(&o);
    assert!(m(""));
    assert!(m("app=web") && m("app==web") && !m("app=db"));
    assert!(m("app!=db") && m("missing!=x") && !m("app!=web"));
    assert!(m("app in (db,web)") && !m("missing in (a)"));
    assert!(m("app notin (db)") && m("missing notin (a)") && !m("app notin (web)"));
    assert!(m("app") && !m("missing") && m("!missing") && !m("!app"));
    assert!(m("tier>2") && !m("tier>3") && m("tier<4") && !m("x>1") && !m("missing<5"));
    assert!(m("app=web,tier>1") && !m("app=web,tier>5"));
    assert_eq!(ok("app=web,b in (x)").exact("app"), Some("web"));
    assert_eq!(ok("app in (a,b)").exact("app"), None);
}

fn key_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9]{0,3}",
        "[a-z]{1,3}\\.[a-z]{1,3}/[A-Za-z][A-Za-z0-9_.-]{0,3}[a-z0-9]",
        Just("in".to_owned()),
        Just("notin".to_owned()),
    ]
}

fn value_strategy() -> impl Strategy<Value = String> {
    prop_oneof!["", "[A-Za-z0-9]", "[A-Za-z0-9][A-Za-z0-9_.-]{0,4}[A-Za-z0-9]", Just("in".to_owned())]
}

fn req_strategy() -> impl Strategy<Value = (String, u8, Vec<String>, i64)> {
    (key_strategy(), 0u8..9, proptest::collection::vec(value_strategy(), 1..4), 0i64..50)
}

/// Renders a requirement in the grammar (with optional whitespace the parser must accept).
fn render((key, op, vals, n): &(String, u8, Vec<String>, i64), ws: &str) -> String {
    let vals = &set_values(vals);
    match op {
        0 => format!("{key}{ws}={ws}{}", vals[0]),
        1 => format!("{key}{ws}=={ws}{}", vals[0]),
        2 => format!("{key}{ws}!={ws}{}", vals[0]),
        3 => format!("{key} in{ws}({ws}{}{ws})", vals.join(",")),
        4 => format!("{key} notin{ws}({})", vals.join(&format!("{ws},{ws}"))),
        5 => key.clone(),
        6 => format!("!{ws}{key}"),
        7 => format!("{key}{ws}>{ws}{n}"),
        _ => format!("{key}{ws}<{ws}{n}"),
    }
}

/// Go's parser cannot read several empty values in a set (`(,,)` fails), so sets carry non-empty values,
/// or the single empty value.
fn set_values(vals: &[String]) -> Vec<String> {
    let mut v: Vec<String> = vals.iter().filter(|v| !v.is_empty()).cloned().collect();
    if v.is_empty() {
        v.push(String::new());
    }
    v
}

/// A naive reference of the selector semantics, straight from the API documentation.
fn reference(reqs: &[(String, u8, Vec<String>, i64)], labels: &[(String, String)]) -> bool {
    let get = |k: &str| labels.iter().find(|(lk, _)| lk == k).map(|(_, v)| v.as_str());
    reqs.iter().all(|(key, op, vals, n)| {
        let v = get(key);
        let vals = &set_values(vals);
        match op {
            0 | 1 => v == Some(vals[0].as_str()),
            2 => v != Some(vals[0].as_str()),
            3 => v.is_some_and(|v| vals.iter().any(|x| x == v)),
            4 => !v.is_some_and(|v| vals.iter().any(|x| x == v)),
            5 => v.is_some(),
            6 => v.is_none(),
            7 => v.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
            _ => v.and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
        }
    })
}

proptest! {
    #[test]
    fn never_panics(s in "\\PC{0,40}") {
        let _ = LabelSelector::parse(&s);
    }

    #[test]
    fn never_panics_on_grammar_soup(s in "[a-z!=(),<> \t0-9in]{0,30}") {
        if let Ok(sel) = LabelSelector::parse(&s) {
            // Anything accepted renders to something that parses to the same selector.
            prop_assert_eq!(LabelSelector::parse(&sel.to_string()).expect("rendered"), sel);
        }
    }

    #[test]
    fn parse_render_round_trips(reqs in proptest::collection::vec(req_strategy(), 0..5), ws in prop_oneof![Just(""), Just(" "), Just("\t ")]) {
        let text: Vec<String> = reqs.iter().map(|r| render(r, ws)).collect();
        let text = text.join(&format!("{ws},{ws}"));
        let sel = LabelSelector::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        prop_assert_eq!(sel.requirements().len(), reqs.len());
        let again = LabelSelector::parse(&sel.to_string()).expect("rendered form parses");
        prop_assert_eq!(again, sel);
    }

    #[test]
    fn matching_agrees_with_reference(
        reqs in proptest::collection::vec(req_strategy(), 0..4),
        labels in proptest::collection::btree_map(key_strategy(), prop_oneof![value_strategy(), "-?[0-9]{1,3}"], 0..5),
    ) {
        let text: Vec<String> = reqs.iter().map(|r| render(r, "")).collect();
        let sel = LabelSelector::parse(&text.join(",")).expect("valid");
        let pairs: Vec<(String, String)> = labels.into_iter().collect();
        let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let obj = object(Some("ns"), "o", &refs, &[]);
        prop_assert_eq!(sel.matches(&obj), reference(&reqs, &pairs));
    }
}
