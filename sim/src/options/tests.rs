use super::*;
use crate::kinds::table;

fn pods() -> ResourceDef {
    table(&[]).into_iter().find(|r| r.plural == "pods").expect("pods")
}

fn list(q: &str) -> Result<ListOptions, ApiError> {
    ListOptions::from_query(&Query::parse(Some(q)), &pods(), false)
}

fn watch(q: &str) -> Result<ListOptions, ApiError> {
    ListOptions::from_query(&Query::parse(Some(q)), &pods(), true)
}

#[test]
fn list_validation_422_messages() {
    let e = list("resourceVersionMatch=Exact").expect_err("422");
    assert_eq!(e.code, 422);
    assert_eq!(
        e.message,
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
    );
    let e = list("resourceVersion=0&resourceVersionMatch=Exact").expect_err("422");
    assert!(e.message.ends_with("resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""));
    let e = list("resourceVersion=1&resourceVersionMatch=Foo").expect_err("422");
    assert!(
        e.message.ends_with(r#"Unsupported value: "Foo": supported values: "Exact", "NotOlderThan", """#)
    );
    let e = list("sendInitialEvents=false").expect_err("422");
    assert!(e.message.ends_with("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"));
    // Two errors are printed as a list.
    let e = list("resourceVersionMatch=Exact&continue=abc").expect_err("422");
    assert!(e.message.contains(": [resourceVersionMatch: Forbidden"), "{}", e.message);
}

#[test]
fn list_storage_validation_400() {
    let e = list("resourceVersion=abc").expect_err("400");
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        r#"invalid resource version: resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax"#
    );
    let e = list("resourceVersion=-1").expect_err("400");
    assert!(e.message.ends_with(r#"parsing "-1": invalid syntax"#));
    let tok = crate::token::encode(5, "a");
    let e = list(&format!("continue={tok}&resourceVersion=5")).expect_err("400");
    assert_eq!(e.message, "specifying resource version is not allowed when using continue");
    // The token is checked before the RV.
    let e = list("continue=%21%21&resourceVersion=abc").expect_err("400");
    assert!(e.message.starts_with("invalid continue token: continue key is not valid: illegal base64"));
    assert!(list(&format!("continue={tok}&resourceVersion=0")).is_ok());
    let e = list("limit=abc").expect_err("400");
    assert_eq!(e.message, r#"strconv.ParseInt: parsing "abc": invalid syntax"#);
    assert_eq!(list("limit=-3").map(|o| o.limit).ok(), Some(-3));
}

#[test]
fn watch_defaulting_and_validation() {
    let o = watch("resourceVersion=0").expect("ok");
    assert_eq!((o.send_initial_events, o.rvm), (Some(true), Rvm::NotOlderThan));
    let o = watch("").expect("ok");
    assert_eq!(o.send_initial_events, Some(true));
    let o = watch("resourceVersion=7").expect("ok");
    assert_eq!((o.send_initial_events, o.rv), (None, Rv::At(7)));
    let e = watch("sendInitialEvents=true").expect_err("422");
    assert_eq!(
        e.message,
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    );
    let e = watch("sendInitialEvents=true&resourceVersionMatch=Exact").expect_err("422");
    assert_eq!(e.details.map(|d| d.causes.len()), Some(2));
    let e = watch("resourceVersion=5&resourceVersionMatch=NotOlderThan").expect_err("422");
    assert!(
        e.message
            .ends_with("resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
    );
    let e = watch("resourceVersion=abc").expect_err("500");
    assert_eq!((e.code, e.reason.as_str()), (500, ""));
}

#[test]
fn selectors_are_decoded_then_converted() {
    assert_eq!(list("labelSelector=x%20in%20(a").map(|_| ()).unwrap_err().code, 400);
    let e = list("fieldSelector=spec.foo%3Dx").expect_err("400");
    assert_eq!(e.message, "field label not supported: spec.foo");
    let o = list("fieldSelector=metadata.name%3Dx").expect("ok");
    assert_eq!(o.pinned_name(), Some("x"));
}

#[test]
fn query_unescape() {
    let q = Query::parse(Some("a=x+y%2Cz&b&c=%zz"));
    assert_eq!(q.get("a"), Some("x y,z"));
    assert_eq!(q.get("b"), Some(""));
    assert_eq!(q.get("c"), Some("%zz"));
}
