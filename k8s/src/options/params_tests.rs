use proptest::prelude::*;

use super::*;

fn list(q: &str) -> Result<ListOptions, ApiError> {
    parse_list_options(Some(q), false)
}

fn err(q: &str) -> (u16, String) {
    let e = list(q).expect_err(q);
    (e.status_code(), e.to_string())
}

const LO: &str = "ListOptions.meta.k8s.io \"\" is invalid: ";

#[test]
fn decodes_values() {
    let o = list("limit=500&resourceVersion=12&resourceVersionMatch=NotOlderThan&labelSelector=app%3Dweb&fieldSelector=metadata.name%3Dx&timeoutSeconds=30&allowWatchBookmarks=true&pretty=true").expect("valid");
    assert_eq!(o.limit, 500);
    assert_eq!(o.resource_version.as_deref(), Some("12"));
    assert_eq!(o.resource_version_match, Some(RvMatch::NotOlderThan));
    assert_eq!(o.label_selector.to_string(), "app=web");
    assert_eq!(o.field_selector.exact("metadata.name"), Some("x"));
    assert_eq!(o.timeout_seconds, Some(30));
    assert!(o.allow_watch_bookmarks && !o.watch);
    assert_eq!(o.pretty, Some(true));
    // Repeated keys: the first wins; empty values are unset; negative limits are accepted.
    let o = list("limit=-3&limit=5&resourceVersion=&continue=").expect("valid");
    assert_eq!(o.limit, -3);
    assert_eq!((o.resource_version, o.continue_token), (None, None));
    assert_eq!(list("pretty=yes").expect("valid").pretty, Some(false));
    assert_eq!(list("pretty=").expect("valid").pretty, None);
    assert_eq!(parse_list_options(None, false).expect("valid"), ListOptions::default());
}

#[test]
fn conversion_errors_are_400_in_field_order() {
    assert_eq!(err("limit=abc"), (400, "strconv.ParseInt: parsing \"abc\": invalid syntax".into()));
    assert_eq!(
        err("limit=y&timeoutSeconds=x"),
        (400, "strconv.ParseInt: parsing \"x\": invalid syntax".into())
    );
    assert_eq!(
        err("labelSelector=a%20b&limit=1.5"),
        (400, "strconv.ParseInt: parsing \"1.5\": invalid syntax".into())
    );
    assert_eq!(
        err("fieldSelector=abc&labelSelector=x%3D%3D%3D"),
        (400, "unable to parse requirement: found '=', expected: identifier".into())
    );
    assert_eq!(err("fieldSelector=abc"), (400, "invalid selector: 'abc'; can't understand 'abc'".into()));
    // Selector errors come before validation errors.
    assert_eq!(err("fieldSelector=abc&resourceVersionMatch=Exact").0, 400);
}

#[test]
fn list_validation_messages() {
    assert_eq!(
        err("resourceVersionMatch=Exact"),
        (
            422,
            format!(
                "{LO}resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
            )
        )
    );
    assert_eq!(
        err("resourceVersion=0&resourceVersionMatch=Exact"),
        (
            422,
            format!(
                "{LO}resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
            )
        )
    );
    assert_eq!(
        err("resourceVersion=1&resourceVersionMatch=Foo"),
        (
            422,
            format!(
                "{LO}resourceVersionMatch: Unsupported value: \"Foo\": supported values: \"Exact\", \"NotOlderThan\", \"\""
            )
        )
    );
    assert_eq!(
        err("sendInitialEvents=false"),
        (422, format!("{LO}sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"))
    );
    assert_eq!(
        err("resourceVersionMatch=Foo&continue=x&sendInitialEvents=true"),
        (
            422,
            format!(
                "{LO}[resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided, resourceVersionMatch: Unsupported value: \"Foo\": supported values: \"Exact\", \"NotOlderThan\", \"\", sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list]"
            )
        )
    );
}

#[test]
fn watch_defaulting_and_validation() {
    let o = list("watch=1").expect("valid");
    assert!(o.watch);
    assert_eq!((o.send_initial_events, o.resource_version_match), (Some(true), Some(RvMatch::NotOlderThan)));
    let o = list("watch=true&resourceVersion=0&allowWatchBookmarks=1").expect("valid");
    assert_eq!(o.send_initial_events, Some(true));
    let o = list("watch=1&resourceVersion=5").expect("valid");
    assert_eq!((o.send_initial_events, o.resource_version_match), (None, None));
    // Transcript 17.
    assert_eq!(
        err("watch=1&sendInitialEvents=true"),
        (
            422,
            format!(
                "{LO}resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
            )
        )
    );
    assert_eq!(
        err("watch=1&sendInitialEvents=true&resourceVersionMatch=Exact"),
        (
            422,
            format!(
                "{LO}[resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan, resourceVersionMatch: Unsupported value: \"Exact\": supported values: \"NotOlderThan\"]"
            )
        )
    );
    assert_eq!(
        err("watch=1&resourceVersionMatch=NotOlderThan"),
        (
            422,
            format!(
                "{LO}resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
            )
        )
    );
    let o = list("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=7")
        .expect("valid");
    assert_eq!(o.send_initial_events, Some(true));
    // watch=false is a list; a /watch/ path without the parameter is validated as a list.
    assert!(!list("watch=false").expect("valid").watch);
    let o = parse_list_options(Some("resourceVersion=0"), true).expect("valid");
    assert!(o.watch && o.send_initial_events.is_none());
    assert_eq!(
        parse_list_options(Some("sendInitialEvents=true"), true).expect_err("list rules").status_code(),
        422
    );
}

#[test]
fn storage_validation_order_and_messages() {
    let v = |q: &str| validate_for_storage(&list(q).expect("options valid"));
    let e = |q: &str| v(q).expect_err(q).to_string();
    assert_eq!(
        e("continue=!!&resourceVersion=abc"),
        "invalid continue token: continue key is not valid: illegal base64 data at input byte 0"
    );
    let tok = token::encode(6, "f2");
    assert_eq!(
        e(&format!("continue={tok}&resourceVersion=5")),
        "specifying resource version is not allowed when using continue"
    );
    let d = v(&format!("continue={tok}&resourceVersion=0")).expect("rv 0 with continue is accepted");
    assert_eq!(d.continue_from, Some(Continue { rv: 6, start_key: "f2\0".into() }));
    assert_eq!(d.resource_version, Some(0));
    assert_eq!(
        e("resourceVersion=abc"),
        "invalid resource version: resourceVersion: Invalid value: \"abc\": strconv.ParseUint: parsing \"abc\": invalid syntax"
    );
    assert_eq!(
        e("resourceVersion=-1"),
        "invalid resource version: resourceVersion: Invalid value: \"-1\": strconv.ParseUint: parsing \"-1\": invalid syntax"
    );
    assert_eq!(v("resourceVersion=42").expect("valid").resource_version, Some(42));
    assert_eq!(v("").expect("valid"), Decoded { continue_from: None, resource_version: None });
    assert_eq!(v("resourceVersion=abc").expect_err("bad").status_code(), 400);
}

#[test]
fn field_labels_and_path_names() {
    let e = parse_list_request(Some("fieldSelector=spec.foo%3Dx"), false, FieldKind::Pod)
        .expect_err("unsupported");
    assert_eq!((e.status_code(), e.to_string()), (400, "field label not supported: spec.foo".into()));
    let o = parse_list_request(Some("fieldSelector=spec.host%3Dn1"), false, FieldKind::Pod).expect("valid");
    assert_eq!(o.field_selector.exact("spec.nodeName"), Some("n1"));
    let mut o = list("fieldSelector=metadata.name%3Da").expect("valid");
    assert!(o.check_path_name("a").is_ok());
    assert_eq!(
        o.check_path_name("b").expect_err("conflict").to_string(),
        "fieldSelector metadata.name doesn't match requested name"
    );
    let mut o = list("").expect("valid");
    o.check_path_name("x").expect("sets selector");
    assert_eq!(o.field_selector.exact("metadata.name"), Some("x"));
}

#[test]
fn watch_and_get_resource_versions() {
    let e = list("watch=1&resourceVersion=abc").expect("valid").watch_resource_version().expect_err("bad rv");
    assert_eq!(e.status_code(), 500);
    assert_eq!(e.reason(), "");
    assert_eq!(
        e.to_string(),
        "resourceVersion: Invalid value: \"abc\": strconv.ParseUint: parsing \"abc\": invalid syntax"
    );
    let g = parse_get_options(Some("resourceVersion=7&pretty=1"));
    assert_eq!((g.parsed_resource_version(), g.pretty), (Ok(Some(7)), Some(true)));
    assert_eq!(parse_get_options(None).parsed_resource_version(), Ok(None));
    assert_eq!(
        parse_get_options(Some("resourceVersion=x"))
            .parsed_resource_version()
            .expect_err("bad")
            .status_code(),
        500
    );
}

#[test]
fn request_timeouts() {
    use std::time::Duration;
    let max = REQUEST_TIMEOUT_MAXIMUM;
    assert_eq!(request_timeout(None, max), Ok(max));
    assert_eq!(request_timeout(Some("timeout=10s"), max), Ok(Duration::from_secs(10)));
    assert_eq!(request_timeout(Some("timeout=0s"), max), Ok(max));
    assert_eq!(request_timeout(Some("timeout=-5s"), max), Ok(max));
    assert_eq!(request_timeout(Some("timeout=5m"), max), Ok(max));
    assert_eq!(
        request_timeout(Some("timeout=abc"), max).expect_err("bad").to_string(),
        "invalid timeout specified in the request URL - time: invalid duration \"abc\""
    );
}

proptest! {
    #[test]
    fn never_panics(q in "[a-zA-Z=&%0-9+;,!()<> .-]{0,80}", watch_path in any::<bool>()) {
        if let Ok(o) = parse_list_options(Some(&q), watch_path) {
            let _ = validate_for_storage(&o);
            let _ = o.clone().convert_fields(FieldKind::Pod);
        }
    }

    #[test]
    fn known_keys_never_panic(
        key in prop_oneof![Just("limit"), Just("resourceVersion"), Just("resourceVersionMatch"), Just("continue"),
            Just("labelSelector"), Just("fieldSelector"), Just("watch"), Just("sendInitialEvents"), Just("timeoutSeconds")],
        val in "\\PC{0,30}",
    ) {
        let q = format!("{key}={}", val.replace('%', "%25").replace('&', "%26"));
        let _ = parse_list_options(Some(&q), false).map(|o| validate_for_storage(&o));
    }
}
