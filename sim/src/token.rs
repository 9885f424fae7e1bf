//! Continue tokens in the apiserver's format (`storage/continue.go`).
//!
//! `base64.RawURLEncoding(json({"v":"meta.k8s.io/v1","rv":<int64>,"start":"<key>\u0000"}))`. The sim
//! writes the watch-cache form: `start` is the last returned key relative to the list prefix, with a
//! leading `/` and a trailing NUL.

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde::Deserialize;
use serde_json::{Map, Value, json};

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

/// Go's `base64.RawURLEncoding`: no padding, and (not being Strict) it accepts non-zero trailing bits.
const RAW_URL: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// A decoded token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continue {
    /// Revision of the list the token continues; -1 means "continue at the latest revision".
    pub rv: i64,
    /// The start key relative to the list prefix, cleaned, without leading `/` (may end with NUL).
    pub start: String,
}

#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    v: String,
    #[serde(default)]
    rv: i64,
    #[serde(default)]
    start: String,
}

/// Encodes a token continuing after `last_key` (relative to the list prefix).
pub fn encode(rv: i64, last_key_rel: &str) -> String {
    let mut m = Map::new();
    m.insert("v".into(), json!(TOKEN_VERSION));
    m.insert("rv".into(), json!(rv));
    m.insert("start".into(), json!(format!("/{last_key_rel}\u{0}")));
    RAW_URL.encode(crate::json::compact(&Value::Object(m)))
}

/// Re-encodes a decoded token with a new rv and the same start (for the inconsistent-continue 410).
pub fn encode_start(rv: i64, start_rel: &str) -> String {
    let mut m = Map::new();
    m.insert("v".into(), json!(TOKEN_VERSION));
    m.insert("rv".into(), json!(rv));
    m.insert("start".into(), json!(start_rel));
    RAW_URL.encode(crate::json::compact(&Value::Object(m)))
}

/// Decodes a token; the error text follows `invalid continue token: ` in the 400.
pub fn decode(token: &str) -> Result<Continue, String> {
    let data = RAW_URL.decode(token).map_err(|e| format!("continue key is not valid: {}", base64_err(e)))?;
    let w: Wire = serde_json::from_slice(&data)
        .map_err(|e| format!("continue key is not valid: {}", json_err(&data, &e)))?;
    if w.v != TOKEN_VERSION {
        return Err(format!(
            "continue key is not valid: server does not recognize this encoded version {}",
            w.v
        ));
    }
    if w.rv == 0 {
        return Err(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
                .into(),
        );
    }
    if w.start.is_empty() {
        return Err("continue key is not valid: encoded start key empty (version meta.k8s.io/v1)".into());
    }
    let key = if w.start.starts_with('/') { w.start.clone() } else { format!("/{}", w.start) };
    if !is_clean(&key) {
        return Err(format!("continue key is not valid: {}", w.start));
    }
    Ok(Continue { rv: w.rv, start: key[1..].to_string() })
}

/// Whether Go's `path.Clean(p) == p` for an absolute path.
fn is_clean(p: &str) -> bool {
    if p == "/" {
        return true;
    }
    if p.ends_with('/') {
        return false;
    }
    p[1..].split('/').all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

/// Go's message for a base64 decode error: `illegal base64 data at input byte N`.
fn base64_err(e: base64::DecodeError) -> String {
    let at = match e {
        base64::DecodeError::InvalidByte(i, _) | base64::DecodeError::InvalidLastSymbol(i, _) => i,
        base64::DecodeError::InvalidLength(n) => n,
        base64::DecodeError::InvalidPadding => 0,
    };
    format!("illegal base64 data at input byte {at}")
}

/// An approximation of Go's `encoding/json` error text for the common cases.
fn json_err(data: &[u8], e: &serde_json::Error) -> String {
    if e.is_eof() {
        return "unexpected end of JSON input".into();
    }
    if e.is_data() {
        return "json: cannot unmarshal into Go value of type storage.continueToken".into();
    }
    let first = data.iter().copied().find(|b| !b.is_ascii_whitespace());
    match first {
        Some(b) if b != b'{' && b != b'[' && b != b'"' && !b.is_ascii_digit() && b != b'-' => {
            format!("invalid character '{}' looking for beginning of value", go_quote_char(b))
        }
        _ => format!("invalid character in JSON input: {e}"),
    }
}

/// Go's `quoteChar` (encoding/json): the byte as `strconv.Quote` prints it, between single quotes — a
/// byte U+0080–U+00A0 or U+00AD is `\u00XX` (Go 1.26's `string(byte)` is a rune; found against the real apiserver: `'\u0081'`).
fn go_quote_char(b: u8) -> String {
    match b {
        b'\'' => "\\'".into(),
        b'\\' => "\\\\".into(),
        0x07 => "\\a".into(),
        0x08 => "\\b".into(),
        0x0c => "\\f".into(),
        b'\n' => "\\n".into(),
        b'\r' => "\\r".into(),
        b'\t' => "\\t".into(),
        0x0b => "\\v".into(),
        0x20..=0x7e => (b as char).to_string(),
        // `string(b)` is the rune U+00XX (Go 1.26): non-printable ones quoted as `\u00XX`.
        0x80..=0xa0 | 0xad => format!("\\u{b:04x}"),
        0xa1..=0xff => char::from(b).to_string(),
        _ => format!("\\x{b:02x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_errors_quote_bytes_like_go() {
        // base64("garbage") starts with 0x81: the real apiserver (Go 1.26) says '\u0081'.
        let data = [0x81, 0xaa];
        let e = serde_json::from_slice::<serde_json::Value>(&data).expect_err("not JSON");
        assert_eq!(json_err(&data, &e), "invalid character '\\u0081' looking for beginning of value");
        assert_eq!(go_quote_char(b'x'), "x");
        assert_eq!(go_quote_char(b'\''), "\\'");
        assert_eq!(go_quote_char(b'\n'), "\\n");
    }

    #[test]
    fn matches_transcript_tokens() {
        // 02-list-limit2: rv 6, last key f2 in namespace default.
        assert_eq!(encode(6, "f2"), "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6Niwic3RhcnQiOiIvZjJcdTAwMDAifQ");
        let c = decode("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6Niwic3RhcnQiOiIvZjJcdTAwMDAifQ").expect("decode");
        assert_eq!(c, Continue { rv: 6, start: "f2\u{0}".into() });
        // 12: the inconsistent-continue token uses rv -1 and the etcd-form start.
        assert_eq!(
            encode_start(-1, "f2\u{0}"),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiZjJcdTAwMDAifQ"
        );
    }

    #[test]
    fn rejects_bad_tokens_with_apiserver_messages() {
        let enc = |s: &str| RAW_URL.encode(s);
        assert!(decode("!!!").unwrap_err().contains("illegal base64 data at input byte 0"));
        assert_eq!(
            decode(&enc(r#"{"v":"x","rv":1,"start":"a"}"#)).unwrap_err(),
            "continue key is not valid: server does not recognize this encoded version x"
        );
        assert!(
            decode(&enc(r#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#))
                .unwrap_err()
                .contains("resourceVersion")
        );
        assert!(decode(&enc(r#"{"v":"meta.k8s.io/v1","rv":1,"start":""}"#)).unwrap_err().contains("empty"));
        assert_eq!(
            decode(&enc(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"../x"}"#)).unwrap_err(),
            "continue key is not valid: ../x"
        );
        assert!(decode(&enc(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"a//b"}"#)).is_err());
        assert!(decode(&enc("nope")).unwrap_err().contains("invalid character 'n'"));
        assert_eq!(decode(&enc(r#"{"v":"meta.k8s.io/v1","rv":-1,"start":"ns/a"}"#)).map(|c| c.rv), Ok(-1));
    }
}
