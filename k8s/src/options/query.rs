//! Query-string decoding exactly as Go's `url.ParseQuery` / `req.URL.Query()` does it, and Go's number
//! parsing with its error texts (`strconv.ParseInt` / `ParseUint`), which reach clients in 400 messages.

use crate::json::go_quote;

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

/// Go's `time.ParseDuration` with its error texts (`time: invalid duration "x"`, `time: missing unit in
/// duration "x"`, `time: unknown unit "u" in duration "x"`); returns nanoseconds, negative for negative
/// durations.
pub fn go_parse_duration_nanos(orig: &str) -> Result<i128, String> {
    const MAX: u128 = 1 << 63;
    let invalid = || format!("time: invalid duration {}", time_quote(orig));
    let mut s = orig;
    let mut neg = false;
    if let Some(c) = s.chars().next()
        && (c == '-' || c == '+')
    {
        neg = c == '-';
        s = &s[1..];
    }
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut d: u128 = 0;
    while !s.is_empty() {
        let b = s.as_bytes();
        if !(b[0] == b'.' || b[0].is_ascii_digit()) {
            return Err(invalid());
        }
        // [0-9]*
        let int_len = b.iter().take_while(|c| c.is_ascii_digit()).count();
        let mut v: u128 = 0;
        for c in &b[..int_len] {
            v = v * 10 + u128::from(c - b'0');
            if v > MAX {
                return Err(invalid());
            }
        }
        s = &s[int_len..];
        // (\.[0-9]*)?
        let (mut f, mut scale, mut post) = (0u128, 1f64, false);
        if let Some(rest) = s.strip_prefix('.') {
            let frac_len = rest.bytes().take_while(|c| c.is_ascii_digit()).count();
            let mut overflow = false;
            for c in rest[..frac_len].bytes() {
                if overflow || f > (MAX - 1) / 10 {
                    overflow = true;
                    continue;
                }
                f = f * 10 + u128::from(c - b'0');
                scale *= 10.0;
            }
            post = frac_len > 0;
            s = &rest[frac_len..];
        }
        if int_len == 0 && !post {
            return Err(invalid());
        }
        let unit_len = s.bytes().take_while(|c| !(*c == b'.' || c.is_ascii_digit())).count();
        if unit_len == 0 {
            return Err(format!("time: missing unit in duration {}", time_quote(orig)));
        }
        let u = &s[..unit_len];
        s = &s[unit_len..];
        let unit: u128 = match u {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(format!("time: unknown unit {} in duration {}", time_quote(u), time_quote(orig)));
            }
        };
        if v > MAX / unit {
            return Err(invalid());
        }
        v *= unit;
        if f > 0 {
            v += (f as f64 * (unit as f64 / scale)) as u128;
            if v > MAX {
                return Err(invalid());
            }
        }
        d += v;
        if d > MAX {
            return Err(invalid());
        }
    }
    if neg {
        return Ok(-(d as i128));
    }
    if d > MAX - 1 {
        return Err(invalid());
    }
    Ok(d as i128)
}

/// The `time` package's own `quote`: non-ASCII and control bytes as `\xNN`, `"` and `\` escaped.
fn time_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if (c as u32) >= 0x80 || c < ' ' {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        } else {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out.push('"');
    out
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
    fn durations_like_go() {
        assert_eq!(go_parse_duration_nanos("30s"), Ok(30_000_000_000));
        assert_eq!(go_parse_duration_nanos("1m30s"), Ok(90_000_000_000));
        assert_eq!(go_parse_duration_nanos("1.5h"), Ok(5_400_000_000_000));
        assert_eq!(go_parse_duration_nanos(".5s"), Ok(500_000_000));
        assert_eq!(go_parse_duration_nanos("0"), Ok(0));
        assert_eq!(go_parse_duration_nanos("-2s"), Ok(-2_000_000_000));
        assert_eq!(go_parse_duration_nanos("300µs"), Ok(300_000));
        assert_eq!(go_parse_duration_nanos("abc"), Err("time: invalid duration \"abc\"".into()));
        assert_eq!(go_parse_duration_nanos("30"), Err("time: missing unit in duration \"30\"".into()));
        assert_eq!(go_parse_duration_nanos("3x"), Err("time: unknown unit \"x\" in duration \"3x\"".into()));
        assert_eq!(go_parse_duration_nanos(""), Err("time: invalid duration \"\"".into()));
        assert_eq!(go_parse_duration_nanos(".s"), Err("time: invalid duration \".s\"".into()));
        assert_eq!(
            go_parse_duration_nanos("9999999999h"),
            Err("time: invalid duration \"9999999999h\"".into())
        );
        assert_eq!(
            go_parse_duration_nanos("1é"),
            Err("time: unknown unit \"\\xc3\\xa9\" in duration \"1\\xc3\\xa9\"".into())
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
