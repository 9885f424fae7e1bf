//! apimachinery's types with a JSON form of their own, each accepted only in a form whose protobuf is
//! certain; anything else is an error and the caller forwards the request to the apiserver.
//!
//! | type | accepted JSON | protobuf (Go's `Marshal`) |
//! |---|---|---|
//! | Time | `YYYY-MM-DDTHH:MM:SSZ` | `seconds`=1, `nanos`=2 (always 0: Go drops them); nothing for the zero time |
//! | MicroTime | `YYYY-MM-DDTHH:MM:SS.ffffffZ` | `seconds`=1, `nanos`=2 |
//! | Duration | `time.ParseDuration` syntax | `duration`=1, nanoseconds |
//! | Quantity | a string in canonical form (`100m`, `64Mi`, `2`) | `string`=1 |
//! | IntOrString | an int32 or a string | `type`=1, `intVal`=2, `strVal`=3 |
//! | FieldsV1 | any JSON but HTML escapes (`\u003c`...) | `raw`=1, the source bytes as they are |
//! | RawExtension | compact JSON as stored (its source text), without HTML escapes | `raw`=1, those bytes |
//! | StringList (`ExtraValue`) | an array of strings | `items`=1, repeated |
//! | JSON (apiextensions) | compact JSON as stored (its source text), without HTML escapes | `raw`=1, those bytes, `<>&` and U+2028/9 escaped as Go's `Marshal` writes them |
//!
//! apiextensions' unions of JSONSchemaProps (a bool or a schema, ...) are written by `encode.rs`, which
//! has the schema's message encoder.
//!
//! Why so strict: Go re-derives these values. A Time with a fraction loses it, an offset becomes UTC, and
//! a Quantity is re-canonicalised (`0.5` → `500m`, `1024Mi` → `1Gi`); the raw JSON of a RawExtension is
//! the decoder's input bytes, which the apiserver's JSON output (HTML-escaped, compacted) no longer
//! shows. apiextensions' `JSON` is raw JSON too: the apiserver holds it as Go's `json.Marshal` of the
//! decoded value (its conversion through the internal version: keys sorted, numbers re-printed), the
//! text its JSON output shows, unless an HTML escape or whitespace makes that uncertain. The apiserver
//! only ever prints the canonical forms, so the strictness costs nothing on its output, and a
//! hand-written object outside them is forwarded rather than guessed at.

use kache_k8s_schema::Special;

use super::TranscodeError;
use super::json::J;
use super::wire::{VARINT, put_bytes, put_key, put_varint};

/// Writes the message body of `s` for the (non-null) value `v` of field `field`.
pub(super) fn encode(
    s: Special,
    v: &J,
    field: &'static str,
    out: &mut Vec<u8>,
) -> Result<(), TranscodeError> {
    let ty = |expected| TranscodeError::Type { field, expected };
    let bad = |why: String| TranscodeError::Value { field, why };
    match s {
        Special::Time | Special::MicroTime => {
            let J::Str(t) = v else { return Err(ty("a time string")) };
            let (secs, nanos) = parse_time(t, s == Special::MicroTime)
                .ok_or_else(|| bad(format!("time {t:?} is not in the form the apiserver writes")))?;
            if secs != ZERO_TIME_SECS || nanos != 0 {
                put_key(out, 1, VARINT);
                put_varint(out, secs as u64);
                put_key(out, 2, VARINT);
                put_varint(out, u64::from(nanos));
            }
        }
        Special::Duration => {
            let J::Str(d) = v else { return Err(ty("a duration string")) };
            let n = parse_duration(d).ok_or_else(|| bad(format!("time: invalid duration {d:?}")))?;
            put_key(out, 1, VARINT);
            put_varint(out, n as u64);
        }
        Special::Quantity => {
            let J::Str(q) = v else { return Err(ty("a quantity string")) };
            if !canonical_quantity(q) {
                return Err(bad(format!("quantity {q:?} is not in canonical form")));
            }
            put_bytes(out, 1, q.as_bytes());
        }
        Special::IntOrString => {
            let (kind, int, text): (u64, i32, &str) = match v {
                J::Str(s) => (1, 0, s),
                _ => {
                    let i = v
                        .as_i64()
                        .and_then(|i| i32::try_from(i).ok())
                        .ok_or_else(|| ty("an int32 or a string"))?;
                    (0, i, "")
                }
            };
            put_key(out, 1, VARINT);
            put_varint(out, kind);
            put_key(out, 2, VARINT);
            put_varint(out, i64::from(int) as u64);
            put_bytes(out, 3, text.as_bytes());
        }
        Special::RawExtension | Special::FieldsV1 if matches!(v, J::Raw(_)) => {
            let J::Raw(text) = v else { return Err(ty("raw JSON")) };
            if ambiguous_escapes(text) {
                return Err(bad("raw JSON with an HTML-escaped character".into()));
            }
            put_bytes(out, 1, text.as_bytes());
        }
        Special::Json => {
            let J::Raw(text) = v else { return Err(ty("raw JSON")) };
            if ambiguous_escapes(text) {
                return Err(bad("raw JSON with an HTML-escaped character".into()));
            }
            if !is_compact(text) {
                return Err(bad("raw JSON with whitespace".into()));
            }
            put_bytes(out, 1, &html_escaped(text));
        }
        Special::RawExtension | Special::FieldsV1 => {
            let mut raw = Vec::new();
            compact(v, &mut raw).map_err(|why| bad(why.into()))?;
            put_bytes(out, 1, &raw);
        }
        Special::StringList => {
            let J::Arr(items) = v else { return Err(ty("an array of strings")) };
            for item in items {
                let J::Str(s) = item else { return Err(ty("an array of strings")) };
                put_bytes(out, 1, s.as_bytes());
            }
        }
        Special::SchemaOrBool | Special::SchemaOrArray | Special::SchemaOrStringArray => {
            unreachable!("encode.rs writes the unions of JSONSchemaProps")
        }
    }
    Ok(())
}

/// The message body of the zero value of `s` (a non-pointer field left out or null).
pub(super) fn encode_zero(s: Special, out: &mut Vec<u8>) {
    match s {
        Special::Time
        | Special::MicroTime
        | Special::RawExtension
        | Special::FieldsV1
        | Special::StringList
        | Special::Json
        | Special::SchemaOrArray
        | Special::SchemaOrStringArray => {}
        // `allows`, a non-pointer bool.
        Special::SchemaOrBool => {
            put_key(out, 1, VARINT);
            put_varint(out, 0);
        }
        Special::Duration => {
            put_key(out, 1, VARINT);
            put_varint(out, 0);
        }
        // The zero Quantity prints as "0".
        Special::Quantity => put_bytes(out, 1, b"0"),
        Special::IntOrString => {
            put_key(out, 1, VARINT);
            put_varint(out, 0);
            put_key(out, 2, VARINT);
            put_varint(out, 0);
            put_bytes(out, 3, b"");
        }
    }
}

/// Whether raw JSON holds an escape Go's JSON encoder writes for a character that may be literal in
/// the apiserver's stored bytes (`<`, `>`, `&`, U+2028, U+2029: `encoding/json` HTML-escapes them when it
/// compacts a raw value into its output), so that the stored bytes are not known.
fn ambiguous_escapes(text: &str) -> bool {
    let b = text.as_bytes();
    memchr::memmem::find_iter(b, b"\\u").any(|i| {
        // Count the backslashes before this one: an odd run means it is itself escaped.
        let run = b[..i].iter().rev().take_while(|&&c| c == b'\\').count();
        run % 2 == 0
            && b.get(i + 2..i + 6).is_some_and(|h| {
                let h = h.to_ascii_lowercase();
                matches!(&h[..], b"003c" | b"003e" | b"0026" | b"2028" | b"2029")
            })
    })
}

/// `text` as Go's `json.Marshal` writes it: `<`, `>`, `&`, U+2028 and U+2029 (which only strings hold) as
/// `\u003c`-style escapes. The apiserver holds apiextensions' `JSON` as that marshalling of the decoded value,
/// so a literal one in the text (never in the apiserver's own output, which escapes them too) is escaped.
fn html_escaped(text: &str) -> std::borrow::Cow<'_, [u8]> {
    let b = text.as_bytes();
    let needs = |c: char| matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}');
    if !text.chars().any(needs) {
        return std::borrow::Cow::Borrowed(b);
    }
    let mut out = Vec::with_capacity(b.len() + 16);
    let mut buf = [0u8; 4];
    for c in text.chars() {
        match c {
            '<' => out.extend_from_slice(b"\\u003c"),
            '>' => out.extend_from_slice(b"\\u003e"),
            '&' => out.extend_from_slice(b"\\u0026"),
            '\u{2028}' => out.extend_from_slice(b"\\u2028"),
            '\u{2029}' => out.extend_from_slice(b"\\u2029"),
            c => out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes()),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Whether `text` has no whitespace outside its strings (Go's JSON output is compact).
fn is_compact(text: &str) -> bool {
    let (mut in_string, mut escaped) = (false, false);
    for &c in text.as_bytes() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else if c == b'"' {
            in_string = true;
        } else if matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
            return false;
        }
    }
    true
}

/// Compact JSON of `v`, exactly the bytes Go's decoder handed to `UnmarshalJSON` provided the input was
/// compact: so only for values whose compact form is unique (no escaped strings, no numbers).
fn compact(v: &J, out: &mut Vec<u8>) -> Result<(), &'static str> {
    let string = |s: &std::borrow::Cow<str>, out: &mut Vec<u8>| {
        if matches!(s, std::borrow::Cow::Owned(_)) {
            return Err("raw JSON with escaped strings");
        }
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        Ok(())
    };
    match v {
        J::Null => out.extend_from_slice(b"null"),
        J::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        J::Int(_) | J::UInt(_) | J::Float(_) => return Err("raw JSON with numbers"),
        J::Raw(text) => out.extend_from_slice(text.as_bytes()),
        J::Str(s) => string(s, out)?,
        J::Arr(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                compact(x, out)?;
            }
            out.push(b']');
        }
        J::Obj(o) => {
            out.push(b'{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(k, out)?;
                out.push(b':');
                compact(x, out)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

// === time ===

/// `0001-01-01T00:00:00Z`, Go's zero time, in Unix seconds.
const ZERO_TIME_SECS: i64 = -62_135_596_800;

/// Parses `YYYY-MM-DDTHH:MM:SSZ` (or, for a MicroTime, with exactly six fraction digits) into Unix
/// seconds and nanoseconds.
fn parse_time(t: &str, micro: bool) -> Option<(i64, u32)> {
    let b = t.as_bytes();
    let want = if micro { 27 } else { 20 };
    if b.len() != want || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if b[want - 1] != b'Z' || (micro && b[19] != b'.') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        b[r].iter().try_fold(0u32, |n, &c| c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0')))
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let nanos = if micro { num(20..26)? * 1000 } else { 0 };
    if !(1..=12).contains(&mo) || d == 0 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 59 {
        return None;
    }
    let days = days_from_civil(i64::from(y), mo, d);
    Some((days * 86_400 + i64::from(h * 3600 + mi * 60 + s), nanos))
}

fn days_in_month(y: u32, m: u32) -> u32 {
    match m {
        2 if y.is_multiple_of(4) && (!y.is_multiple_of(100) || y.is_multiple_of(400)) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

// === duration ===

/// `time.ParseDuration`, to nanoseconds, following Go's arithmetic (integers, the fraction through a
/// float64 scale) so the result is the same to the nanosecond.
fn parse_duration(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    const LIMIT: u64 = 1 << 63;
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let c = rest.as_bytes()[0];
        if !(c == b'.' || c.is_ascii_digit()) {
            return None;
        }
        let n = rest.bytes().take_while(u8::is_ascii_digit).count();
        let pre = n > 0;
        let mut v: u64 = 0;
        for c in rest[..n].bytes() {
            v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            if v > LIMIT {
                return None;
            }
        }
        rest = &rest[n..];
        let (mut f, mut scale, mut post) = (0u64, 1f64, false);
        if let Some(r) = rest.strip_prefix('.') {
            let n = r.bytes().take_while(u8::is_ascii_digit).count();
            post = n > 0;
            let mut overflow = false;
            for c in r[..n].bytes() {
                if overflow || f > (LIMIT - 1) / 10 {
                    overflow = true;
                    continue;
                }
                let y = f * 10 + u64::from(c - b'0');
                if y > LIMIT {
                    overflow = true;
                    continue;
                }
                f = y;
                scale *= 10.0;
            }
            rest = &r[n..];
        }
        if !pre && !post {
            return None;
        }
        let u = rest.find(|c: char| c == '.' || c.is_ascii_digit()).unwrap_or(rest.len());
        let unit: u64 = match &rest[..u] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        rest = &rest[u..];
        if v > LIMIT / unit {
            return None;
        }
        v *= unit;
        if f > 0 {
            v = v.checked_add((f as f64 * (unit as f64 / scale)) as u64)?;
            if v > LIMIT {
                return None;
            }
        }
        total = total.checked_add(v)?;
        if total > LIMIT {
            return None;
        }
    }
    if neg {
        Some((total as i64).wrapping_neg())
    } else if total > LIMIT - 1 {
        None
    } else {
        Some(total as i64)
    }
}

// === quantity ===

/// Whether `q` is a Quantity in the form Go's `Quantity.String()` prints, so that Go's protobuf (which
/// holds that string) carries exactly `q`: `0`, or a positive integer mantissa of at most 18 digits with
/// no leading zero and a suffix, where a decimal mantissa does not end in `000` (Go would move it into
/// the suffix) and a binary one is not a multiple of 1024 and small enough for Go's int64 fast path.
/// Fractions, exponents and signs are valid quantities too, but Go rewrites them: refused.
pub(super) fn canonical_quantity(q: &str) -> bool {
    if q == "0" {
        return true;
    }
    let n = q.bytes().take_while(u8::is_ascii_digit).count();
    let (digits, suffix) = q.split_at(n);
    if n == 0 || n > 18 || digits.starts_with('0') {
        return false;
    }
    match suffix {
        "" | "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => !digits.ends_with("000"),
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            let power = match suffix {
                "Ki" => 1,
                "Mi" => 2,
                "Gi" => 3,
                "Ti" => 4,
                "Pi" => 5,
                _ => 6,
            };
            // ParseQuantity's BinarySI precision: 15 - digits - exponent*3/10 - 1 must not go negative.
            let precision = 15 - n as i64 - (power * 10 * 3 / 10) - 1;
            let value: u64 = digits.parse().unwrap_or(0);
            precision >= 0 && !value.is_multiple_of(1024)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apiextensions_json_is_html_escaped_as_go_marshals_it() {
        let escaped = html_escaped("[\"<&>\",\"é\u{2028}\u{2029}x\",1]");
        assert_eq!(std::str::from_utf8(&escaped), Ok(r#"["\u003c\u0026\u003e","é\u2028\u2029x",1]"#));
        let plain = html_escaped(r#"{"a":"b"}"#);
        assert!(matches!(plain, std::borrow::Cow::Borrowed(_)), "nothing to escape: no copy");
    }

    #[test]
    fn canonical_quantities_are_recognised() {
        for q in ["0", "1", "2", "100m", "1500m", "128Mi", "1Gi", "1500", "10n", "999E", "3Ki", "1073741824"]
        {
            assert!(canonical_quantity(q), "{q}");
        }
        for q in [
            "", "00", "01", "0.5", "1e3", "-1", "1000", "2000m", "1024Mi", "0Ki", "1Ei", "1.5Gi", "1 ", "1KI",
        ] {
            assert!(!canonical_quantity(q), "{q}");
        }
    }
}
