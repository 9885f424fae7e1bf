//! Continue tokens in the apiserver's format (`k8s.io/apiserver/pkg/storage/continue.go`).
//!
//! `token = base64.RawURLEncoding(json.Marshal({"v":"meta.k8s.io/v1","rv":<int64>,"start":"<key>\u0000"}))`
//! where `start` is the last returned key relative to the list prefix, followed by NUL so that the next
//! page starts strictly after it. The watch cache writes `start` with a leading `/` (`"/name\u0000"`,
//! `"/ns/name\u0000"`), etcd without (`"name\u0000"`); both decode to the same position. Tokens are not
//! bound to the query: the relative key is re-rooted under the prefix of the request that presents it.
//!
//! kache's store keys are `ns/name` (namespaced) and `name` (cluster-scoped). For a namespaced list in
//! namespace `ns` the apiserver's prefix is `/<resource>/ns/`, so a relative key `name\0` maps to the store
//! key `ns/name\0`; for an all-namespaces or cluster-scoped list the prefix is `/<resource>/`, and the
//! relative key is the store key itself. See [`scan_start`] and [`relative_key`].

use base64::Engine as _;

use crate::json;

/// The only token version the apiserver understands.
pub const TOKEN_VERSION: &str = "meta.k8s.io/v1";

/// A decoded continue token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Continue {
    /// The snapshot's resourceVersion; negative (-1) means "continue at the latest state" (a consistent
    /// read), never 0.
    pub rv: i64,
    /// The start key relative to the list prefix, cleaned, without leading `/`, usually ending in NUL:
    /// `"default/f2\0"` (all namespaces) or `"f2\0"` (one namespace). Empty means "from the beginning".
    pub start_key: String,
}

/// Why a continue token was rejected; `Display` is the text after `invalid continue token: `.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not RawURL base64 (Go: `illegal base64 data at input byte N`).
    #[error("continue key is not valid: illegal base64 data at input byte {0}")]
    Base64(usize),
    /// Not JSON, or JSON of the wrong shape (Go's `encoding/json` message, approximated).
    #[error("continue key is not valid: {0}")]
    Json(String),
    /// `v` is not `meta.k8s.io/v1` (Go prints no colon before the version).
    #[error("continue key is not valid: server does not recognize this encoded version {0}")]
    UnrecognizedVersion(String),
    /// `rv` is 0 (or absent).
    #[error("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")]
    InvalidStartRv,
    /// `start` is empty (or absent).
    #[error("continue key is not valid: encoded start key empty (version meta.k8s.io/v1)")]
    EmptyStartKey,
    /// `start` is not a clean path (`path.Clean("/"+start) != "/"+start`, e.g. `../x`, `a//b`, `a/`).
    #[error("continue key is not valid: {0}")]
    UncleanKey(String),
}

// === impl Continue ===

impl Continue {
    /// The store key to start scanning from (inclusive) for a request in `namespace` (`None` for an
    /// all-namespaces or cluster-scoped list).
    pub fn scan_start(&self, namespace: Option<&str>) -> String {
        scan_start(&self.start_key, namespace)
    }
}

/// Maps a decoded relative start key to the store key to scan from (inclusive).
pub fn scan_start(relative: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{relative}"),
        _ => relative.to_owned(),
    }
}

/// The key of the last returned object relative to the request's prefix: `name` for a list in one
/// namespace, the store key itself otherwise. Feed it to [`encode`].
pub fn relative_key<'a>(store_key: &'a str, namespace: Option<&str>) -> &'a str {
    match namespace {
        Some(ns) if !ns.is_empty() => {
            store_key.strip_prefix(ns).and_then(|rest| rest.strip_prefix('/')).unwrap_or(store_key)
        }
        _ => store_key,
    }
}

/// Encodes a token as the watch cache does: `start` = `"/" + last_key_relative + "\0"`.
pub fn encode(rv: i64, last_key_relative: &str) -> String {
    encode_start(rv, &format!("/{last_key_relative}\u{0}"))
}

/// Encodes a token with a literal `start` value (e.g. a 410's fresh rv=-1 token keeping the old start).
pub fn encode_start(rv: i64, start: &str) -> String {
    let mut json = String::with_capacity(start.len() + 48);
    json.push_str("{\"v\":\"meta.k8s.io/v1\",\"rv\":");
    json.push_str(&rv.to_string());
    json.push_str(",\"start\":");
    json::write_str(&mut json, start);
    json.push('}');
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json.as_bytes())
}

/// `DecodeContinue`: every check and message of the apiserver, in its order.
pub fn decode(token: &str) -> Result<Continue, TokenError> {
    let data = decode_raw_url_base64(token.as_bytes())?;
    let (version, rv, start) = parse_token_json(&data)?;
    if version != TOKEN_VERSION {
        return Err(TokenError::UnrecognizedVersion(version));
    }
    if rv == 0 {
        return Err(TokenError::InvalidStartRv);
    }
    if start.is_empty() {
        return Err(TokenError::EmptyStartKey);
    }
    let key = if start.starts_with('/') { start.clone() } else { format!("/{start}") };
    if clean_path(&key) != key {
        return Err(TokenError::UncleanKey(start));
    }
    Ok(Continue { rv, start_key: key[1..].to_owned() })
}

/// The decoded start key of a token already known to be valid, in its original spelling (for building
/// the 410's rv=-1 replacement token with "the same start").
pub fn original_start(token: &str) -> Option<String> {
    let data = decode_raw_url_base64(token.as_bytes()).ok()?;
    parse_token_json(&data).ok().map(|(_, _, start)| start)
}

/// Go's `base64.RawURLEncoding.DecodeString`: URL alphabet, no padding, CR/LF skipped, non-strict about
/// trailing bits, errors name the offending input byte.
fn decode_raw_url_base64(src: &[u8]) -> Result<Vec<u8>, TokenError> {
    fn value(c: u8) -> Option<u8> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        })
    }
    let mut out = Vec::with_capacity(src.len() * 3 / 4);
    let mut quantum = [0u8; 4];
    let mut n = 0;
    for (i, &c) in src.iter().enumerate() {
        if c == b'\n' || c == b'\r' {
            continue;
        }
        let Some(v) = value(c) else { return Err(TokenError::Base64(i)) };
        quantum[n] = v;
        n += 1;
        if n == 4 {
            out.push((quantum[0] << 2) | (quantum[1] >> 4));
            out.push((quantum[1] << 4) | (quantum[2] >> 2));
            out.push((quantum[2] << 6) | quantum[3]);
            n = 0;
        }
    }
    match n {
        0 => {}
        // A lone trailing character cannot encode a byte: Go reports `len(src) - 1` (its read position
        // minus the one character of the quantum, counting skipped newlines).
        1 => return Err(TokenError::Base64(src.len().saturating_sub(1))),
        2 => out.push((quantum[0] << 2) | (quantum[1] >> 4)),
        _ => {
            out.push((quantum[0] << 2) | (quantum[1] >> 4));
            out.push((quantum[1] << 4) | (quantum[2] >> 2));
        }
    }
    Ok(out)
}

/// `json.Unmarshal(data, &continueToken{})`: case-insensitive field names, unknown fields ignored, `null`
/// leaves the zero value (a top-level `null` too), members are applied in document order so the last
/// duplicate wins, and the earliest type mismatch is the error. Error texts approximate Go's for the common
/// cases. The members are read in document order by [`TokenDoc`]'s visitor, so the result does not depend
/// on how a `serde_json::Map` orders keys (serde_json's `preserve_order` feature).
fn parse_token_json(data: &[u8]) -> Result<(String, i64, String), TokenError> {
    let doc: TokenDoc =
        serde_json::from_slice(data).map_err(|e| TokenError::Json(go_syntax_error(&e, data)))?;
    let members = match doc {
        TokenDoc::Object(members) => members,
        TokenDoc::Null => Vec::new(),
        TokenDoc::Other(kind) => {
            return Err(TokenError::Json(format!(
                "json: cannot unmarshal {kind} into Go value of type storage.continueToken"
            )));
        }
    };
    let (mut version, mut rv, mut start) = (String::new(), 0i64, String::new());
    let mut first_error = None;
    for (k, v) in &members {
        let field = match k.to_ascii_lowercase().as_str() {
            "v" => "v",
            "rv" => "rv",
            "start" => "start",
            _ => continue,
        };
        let mismatch = |ty: &str| {
            TokenError::Json(format!(
                "json: cannot unmarshal {} into Go struct field continueToken.{field} of type {ty}",
                go_kind(v)
            ))
        };
        let outcome = match (field, v) {
            (_, serde_json::Value::Null) => Ok(()),
            ("rv", serde_json::Value::Number(n)) => match n.as_i64() {
                Some(n) => {
                    rv = n;
                    Ok(())
                }
                None => Err(TokenError::Json(format!(
                    "json: cannot unmarshal number {n} into Go struct field continueToken.rv of type int64"
                ))),
            },
            ("rv", _) => Err(mismatch("int64")),
            ("v", serde_json::Value::String(s)) => {
                version = s.clone();
                Ok(())
            }
            ("start", serde_json::Value::String(s)) => {
                start = s.clone();
                Ok(())
            }
            _ => Err(mismatch("string")),
        };
        // Go skips a mismatched member, completes the decode and reports the earliest mismatch.
        if let Err(e) = outcome {
            first_error.get_or_insert(e);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok((version, rv, start)),
    }
}

/// A token's JSON document: an object's members in document order (duplicates kept), `null`, or the kind
/// of any other top-level value.
enum TokenDoc {
    Object(Vec<(String, serde_json::Value)>),
    Null,
    Other(&'static str),
}

impl<'de> serde::Deserialize<'de> for TokenDoc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = TokenDoc;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<TokenDoc, A::Error> {
                let mut members = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    members.push((key, map.next_value::<serde_json::Value>()?));
                }
                Ok(TokenDoc::Object(members))
            }
            fn visit_unit<E>(self) -> Result<TokenDoc, E> {
                Ok(TokenDoc::Null)
            }
            fn visit_none<E>(self) -> Result<TokenDoc, E> {
                Ok(TokenDoc::Null)
            }
            fn visit_bool<E>(self, _: bool) -> Result<TokenDoc, E> {
                Ok(TokenDoc::Other("bool"))
            }
            fn visit_i64<E>(self, _: i64) -> Result<TokenDoc, E> {
                Ok(TokenDoc::Other("number"))
            }
            fn visit_u64<E>(self, _: u64) -> Result<TokenDoc, E> {
                Ok(TokenDoc::Other("number"))
            }
            fn visit_f64<E>(self, _: f64) -> Result<TokenDoc, E> {
                Ok(TokenDoc::Other("number"))
            }
            fn visit_str<E>(self, _: &str) -> Result<TokenDoc, E> {
                Ok(TokenDoc::Other("string"))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<TokenDoc, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(TokenDoc::Other("array"))
            }
        }
        d.deserialize_any(Visitor)
    }
}

fn go_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// Approximates Go's JSON syntax errors: `unexpected end of JSON input` at EOF, `invalid character 'c'
/// after top-level value` for trailing data, otherwise `invalid character 'c' looking for beginning of
/// value` naming the byte serde stopped at (Go's wording varies with the parser state; documented gap).
fn go_syntax_error(e: &serde_json::Error, data: &[u8]) -> String {
    if e.is_eof() {
        return "unexpected end of JSON input".to_owned();
    }
    // serde reports 1-based line/column; the column points at the offending byte on a one-line input.
    let offset = if e.line() <= 1 { e.column().saturating_sub(1) } else { 0 };
    let c = data.get(offset).copied().unwrap_or(b' ');
    // Go's `quoteChar`: `strconv.Quote(string(c))` between single quotes. `string(c)` of a byte is the rune
    // U+00XX (Go 1.26, which Kubernetes 1.36 is built with): its non-printable ones (U+0080–U+00A0, U+00AD)
    // are `\u00XX`, the others the character itself.
    let shown = match c {
        b'\'' => "\\'".to_owned(),
        b'\\' => "\\\\".to_owned(),
        b'\n' => "\\n".to_owned(),
        b'\r' => "\\r".to_owned(),
        b'\t' => "\\t".to_owned(),
        0x07 => "\\a".to_owned(),
        0x08 => "\\b".to_owned(),
        0x0b => "\\v".to_owned(),
        0x0c => "\\f".to_owned(),
        0x20..=0x7e => (c as char).to_string(),
        0x80..=0xa0 | 0xad => format!("\\u{c:04x}"),
        0xa1..=0xff => char::from(c).to_string(),
        _ => format!("\\x{c:02x}"),
    };
    if e.to_string().starts_with("trailing characters") {
        format!("invalid character '{shown}' after top-level value")
    } else {
        format!("invalid character '{shown}' looking for beginning of value")
    }
}

/// Go's `path.Clean` for rooted paths (the only kind checked here).
fn clean_path(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
#[path = "token_tests.rs"]
mod tests;
