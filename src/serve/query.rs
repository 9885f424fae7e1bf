//! Query-string decoding exactly as Go's `url.ParseQuery` / `req.URL.Query()` does it, and Go's number
//! parsing with its error texts (`strconv.ParseInt` / `ParseUint`), which reach clients in 400 messages.

use crate::codec::gojson::go_quote;

/// Upper bound on decoded parameters kept from one query (Go ≥ 1.24 rejects more than 10,000 by default;
/// kache keeps the first ones and drops the rest, bounding memory on hostile URLs).
pub const MAX_QUERY_PARAMS: usize = 10_000;

/// The decoded query: `(key, value)` pairs in order; repeated keys are kept (the first one wins on lookup,
/// like `url.Values.Get` and the apiserver's `Convert_Slice_string_To_*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

// === impl Query ===

impl Query {
    /// `url.ParseQuery`, ignoring its error like `req.URL.Query()` does: pairs are split on `&`, a pair
    /// containing `;` is dropped, empty pairs are skipped, key and value are split at the first `=`, and
    /// a pair whose key or value has a bad `%` escape is dropped. `+` decodes to a space. Bytes that are
    /// not UTF-8 after decoding are replaced by U+FFFD (Go keeps raw bytes; documented difference).
    pub fn parse(raw: Option<&str>) -> Self {
        let mut pairs = Vec::new();
        for part in raw.unwrap_or("").split('&') {
            if pairs.len() >= MAX_QUERY_PARAMS {
                break;
            }
            if part.is_empty() || part.contains(';') {
                continue;
            }
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let (Some(k), Some(v)) = (query_unescape(k), query_unescape(v)) else { continue };
            pairs.push((k, v));
        }
        Self { pairs }
    }

    /// The first value of `key` (`url.Values.Get`), `None` when the key is absent.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

/// `url.QueryUnescape`: `%XX` escapes and `+` as space; `None` on a malformed escape.
fn query_unescape(s: &str) -> Option<String> {
    if !s.contains(['%', '+']) {
        return Some(s.to_owned());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hi = b.get(i + 1).and_then(|c| (*c as char).to_digit(16))?;
                let lo = b.get(i + 2).and_then(|c| (*c as char).to_digit(16))?;
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// `strconv.ParseInt(s, 10, 64)` with Go's error text.
pub fn go_parse_int(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("strconv.ParseInt: parsing {}: invalid syntax", go_quote(s)));
    }
    s.parse::<i64>().map_err(|_| format!("strconv.ParseInt: parsing {}: value out of range", go_quote(s)))
}

/// `strconv.ParseUint(s, 10, 64)` with Go's error text (no sign accepted).
pub fn go_parse_uint(s: &str) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("strconv.ParseUint: parsing {}: invalid syntax", go_quote(s)));
    }
    s.parse::<u64>().map_err(|_| format!("strconv.ParseUint: parsing {}: value out of range", go_quote(s)))
}

/// `Convert_Slice_string_To_bool`: only `0` and (case-insensitive) `false` are false; anything else,
/// including the empty string, is true.
pub fn query_bool(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

/// `strconv.ParseBool`; `None` when it would fail.
pub fn go_parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_go_url_values() {
        let q = Query::parse(Some("a=1&a=2&b=x+y%21&bad=%zz&semi=1;2&&flag&e="));
        assert_eq!(q.get("a"), Some("1"));
        assert_eq!(q.get("b"), Some("x y!"));
        assert_eq!(q.get("bad"), None);
        assert_eq!(q.get("semi"), None);
        assert_eq!(q.get("flag"), Some(""));
        assert_eq!(q.get("e"), Some(""));
        assert_eq!(q.get("missing"), None);
        assert!(Query::parse(None).is_empty());
        assert_eq!(
            Query::parse(Some("labelSelector=app%3Dweb%2Ctier%21%3Ddb")).get("labelSelector"),
            Some("app=web,tier!=db")
        );
    }

    #[test]
    fn numbers_and_bools_like_go() {
        assert_eq!(go_parse_int("-5"), Ok(-5));
        assert_eq!(go_parse_int("+5"), Ok(5));
        assert_eq!(go_parse_int("abc"), Err("strconv.ParseInt: parsing \"abc\": invalid syntax".into()));
        assert_eq!(go_parse_int(""), Err("strconv.ParseInt: parsing \"\": invalid syntax".into()));
        assert_eq!(
            go_parse_int("99999999999999999999"),
            Err("strconv.ParseInt: parsing \"99999999999999999999\": value out of range".into())
        );
        assert_eq!(go_parse_uint("-1"), Err("strconv.ParseUint: parsing \"-1\": invalid syntax".into()));
        assert_eq!(go_parse_uint("42"), Ok(42));
        assert!(query_bool("") && query_bool("1") && query_bool("f") && query_bool("yes"));
        assert!(!query_bool("0") && !query_bool("FALSE") && !query_bool("False"));
        assert_eq!(go_parse_bool("T"), Some(true));
        assert_eq!(go_parse_bool("yes"), None);
    }
}
