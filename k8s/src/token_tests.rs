use base64::Engine as _;
use proptest::prelude::*;

use super::*;

const T02: &str = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6Niwic3RhcnQiOiIvZjJcdTAwMDAifQ";
const T03: &str = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6Niwic3RhcnQiOiIvZjRcdTAwMDAifQ";
const T12: &str = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiZjJcdTAwMDAifQ";

fn b64(json: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

fn msg(token: &str) -> String {
    format!("invalid continue token: {}", decode(token).expect_err(token))
}

#[test]
fn transcript_tokens_encode_and_decode() {
    assert_eq!(encode(6, "f2"), T02);
    assert_eq!(encode(6, "f4"), T03);
    assert_eq!(decode(T02), Ok(Continue { rv: 6, start_key: "f2\0".into() }));
    // The etcd form (no leading slash) with rv=-1, as in the 410 that
    // staging/src/k8s.io/apiserver/pkg/storage/etcd3/errors.go: handleCompactedErrorForPaging builds.
    assert_eq!(decode(T12), Ok(Continue { rv: -1, start_key: "f2\0".into() }));
    assert_eq!(encode_start(-1, "f2\0"), T12);
    assert_eq!(original_start(T12).as_deref(), Some("f2\0"));
}

#[test]
fn re_rooting_under_the_request_prefix() {
    // Namespaced list: prefix /pods/ns, store keys ns/name.
    assert_eq!(relative_key("default/f2", Some("default")), "f2");
    assert_eq!(scan_start("f2\0", Some("default")), "default/f2\0");
    // All namespaces: prefix /pods, the relative key is the store key.
    assert_eq!(relative_key("default/f2", None), "default/f2");
    let t = decode(&encode(9, "default/f2")).expect("valid");
    assert_eq!(t.scan_start(None), "default/f2\0");
    // Tokens are not bound to the query: an all-namespaces token used in one namespace.
    assert_eq!(t.scan_start(Some("kube-system")), "kube-system/default/f2\0");
}

#[test]
fn error_messages_match_the_apiserver() {
    // A lone trailing character: Go reports len(src) - 1, counting skipped newlines.
    assert_eq!(
        msg("abcd\ne"),
        "invalid continue token: continue key is not valid: illegal base64 data at input byte 5"
    );
    assert_eq!(
        msg("a!b"),
        "invalid continue token: continue key is not valid: illegal base64 data at input byte 1"
    );
    assert_eq!(
        msg("abcde"),
        "invalid continue token: continue key is not valid: illegal base64 data at input byte 4"
    );
    assert_eq!(
        msg("YWJj="),
        "invalid continue token: continue key is not valid: illegal base64 data at input byte 4"
    );
    assert_eq!(
        msg(&b64("{\"v\":\"x\",\"rv\":1,\"start\":\"a\"}")),
        "invalid continue token: continue key is not valid: server does not recognize this encoded version x"
    );
    assert_eq!(
        msg(&b64("{\"v\":\"meta.k8s.io/v1\",\"rv\":0,\"start\":\"a\"}")),
        "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
    );
    assert_eq!(
        msg(&b64("{\"v\":\"meta.k8s.io/v1\",\"rv\":3}")),
        "invalid continue token: continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"
    );
    assert_eq!(
        msg(&b64("{\"v\":\"meta.k8s.io/v1\",\"rv\":3,\"start\":\"../x\"}")),
        "invalid continue token: continue key is not valid: ../x"
    );
    assert_eq!(
        msg(&b64("{\"v\":\"meta.k8s.io/v1\",\"rv\":3,\"start\":\"a//b\"}")),
        "invalid continue token: continue key is not valid: a//b"
    );
    assert_eq!(
        msg(&b64("{\"v\":\"meta.k8s.io/v1\",\"rv\":3,\"start\":\"a/\"}")),
        "invalid continue token: continue key is not valid: a/"
    );
    assert_eq!(
        msg(&b64("{")),
        "invalid continue token: continue key is not valid: unexpected end of JSON input"
    );
    assert_eq!(
        msg(&b64("xyz")),
        "invalid continue token: continue key is not valid: invalid character 'x' looking for beginning of value"
    );
    assert_eq!(
        msg(&b64("[]")),
        "invalid continue token: continue key is not valid: json: cannot unmarshal array into Go value of type storage.continueToken"
    );
    assert_eq!(
        msg(&b64("{\"v\":\"meta.k8s.io/v1\",\"rv\":\"3\",\"start\":\"a\"}")),
        "invalid continue token: continue key is not valid: json: cannot unmarshal string into Go struct field continueToken.rv of type int64"
    );
}

#[test]
fn go_json_leniency() {
    // Case-insensitive field names, unknown fields ignored, CR/LF skipped by the base64 decoder.
    let t = b64("{\"V\":\"meta.k8s.io/v1\",\"RV\":5,\"Start\":\"/a\\u0000\",\"x\":1}");
    assert_eq!(decode(&t), Ok(Continue { rv: 5, start_key: "a\0".into() }));
    let mut split = t.clone();
    split.insert(4, '\n');
    assert_eq!(decode(&split), decode(&t));
    // Root start: scan from the beginning.
    assert_eq!(
        decode(&b64("{\"v\":\"meta.k8s.io/v1\",\"rv\":5,\"start\":\"/\"}")).expect("valid").start_key,
        ""
    );
}

#[test]
fn members_apply_in_document_order_whatever_the_map_type() {
    // Go applies members in document order: the last one naming a field wins, whatever its case. A sorted
    // map would put "RV" before "rv" and keep 7; an insertion-ordered one would keep the first position.
    let t = b64("{\"v\":\"meta.k8s.io/v1\",\"rv\":7,\"RV\":8,\"start\":\"/a\\u0000\",\"rv\":9}");
    assert_eq!(decode(&t), Ok(Continue { rv: 9, start_key: "a\0".into() }));
    let t = b64("{\"v\":\"meta.k8s.io/v1\",\"rv\":9,\"start\":\"/a\\u0000\",\"Rv\":3}");
    assert_eq!(decode(&t).map(|c| c.rv), Ok(3));
    // A mismatched member is skipped and the earliest mismatch reported, even when a later member is valid.
    let t = b64("{\"v\":\"meta.k8s.io/v1\",\"rv\":\"x\",\"start\":1,\"rv\":4}");
    assert_eq!(
        msg(&t),
        "invalid continue token: continue key is not valid: json: cannot unmarshal string into Go struct \
         field continueToken.rv of type int64"
    );
    // A top-level null leaves the zero token, whose empty version is the first check to fail.
    assert_eq!(decode(&b64("null")), Err(TokenError::UnrecognizedVersion(String::new())));
    assert_eq!(
        msg(&b64("[1]")),
        "invalid continue token: continue key is not valid: json: cannot unmarshal array into Go value of type \
         storage.continueToken"
    );
}

proptest! {
    #[test]
    fn round_trips(rv in prop_oneof![Just(-1i64), 1i64..i64::MAX], ns in "[a-z0-9-]{1,10}", name in "[a-z0-9.-]{1,20}") {
        let token = encode(rv, &format!("{ns}/{name}"));
        let c = decode(&token).expect("own tokens decode");
        prop_assert_eq!(c.rv, rv);
        prop_assert_eq!(c.scan_start(None), format!("{ns}/{name}\0"));
        let token = encode(rv, relative_key(&format!("{ns}/{name}"), Some(&ns)));
        prop_assert_eq!(decode(&token).expect("valid").scan_start(Some(&ns)), format!("{ns}/{name}\0"));
    }

    #[test]
    fn never_panics(s in "\\PC{0,60}") {
        let _ = decode(&s);
        let _ = decode(&b64(&s));
    }
}
