//! The types with their own JSON form, as apimachinery marshals them in both encodings.
//!
//! | type | JSON | protobuf |
//! |---|---|---|
//! | Time | RFC 3339, seconds (`null` when zero) | `seconds`=1, `nanos`=2; nothing when zero |
//! | MicroTime | RFC 3339 with microseconds | as Time |
//! | Duration | Go duration string (`1h2m3s`) | `duration`=1, nanoseconds |
//! | Quantity | string | `string`=1 (the zero quantity is `"0"`) |
//! | IntOrString | number or string | `type`=1, `intVal`=2, `strVal`=3, all three always |
//! | RawExtension, FieldsV1 | any JSON | `raw`=1, the compact JSON |
//! | StringList (`ExtraValue`) | array of strings | `items`=1, repeated |
//! | JSON (apiextensions) | any JSON | `raw`=1, the compact JSON |
//!
//! apiextensions' unions of JSONSchemaProps (a bool or a schema, ...) are encoded and decoded by
//! `encode.rs` and `decode.rs`, which have the message walk.

use serde_json::Value;

use super::encode::{put_bytes, put_varint};
use super::{DecodeError, EncodeError, Special};

/// Encodes `v` (never null: the caller treats null as absent) as the message body of `s`.
pub fn encode(s: Special, v: &Value, field: &str, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let ty = |expected| EncodeError::Type { field: field.to_string(), expected };
    match s {
        Special::Time | Special::MicroTime => {
            let t = v.as_str().ok_or_else(|| ty("a time string"))?;
            let (secs, nanos) = parse_rfc3339(t).ok_or_else(|| EncodeError::Value {
                field: field.into(),
                why: format!("parsing time {t:?}: not RFC 3339"),
            })?;
            if secs != ZERO_TIME_SECS || nanos != 0 {
                put_varint(out, 1 << 3);
                put_varint(out, secs as u64);
                put_varint(out, 2 << 3);
                put_varint(out, i64::from(nanos) as u64);
            }
        }
        Special::Duration => {
            let d = v.as_str().ok_or_else(|| ty("a duration string"))?;
            let n = parse_duration(d).ok_or_else(|| EncodeError::Value {
                field: field.into(),
                why: format!("time: invalid duration {d:?}"),
            })?;
            put_varint(out, 1 << 3);
            put_varint(out, n as u64);
        }
        Special::Quantity => {
            let q = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err(ty("a quantity")),
            };
            put_bytes(out, 1, q.as_bytes());
        }
        Special::IntOrString => match v {
            Value::Number(n) => {
                let i = n
                    .as_i64()
                    .and_then(|i| i32::try_from(i).ok())
                    .ok_or_else(|| ty("an int32 or a string"))?;
                put_varint(out, 1 << 3);
                put_varint(out, 0);
                put_varint(out, 2 << 3);
                put_varint(out, i64::from(i) as u64);
                put_bytes(out, 3, b"");
            }
            Value::String(s) => {
                put_varint(out, 1 << 3);
                put_varint(out, 1);
                put_varint(out, 2 << 3);
                put_varint(out, 0);
                put_bytes(out, 3, s.as_bytes());
            }
            _ => return Err(ty("an int32 or a string")),
        },
        Special::RawExtension | Special::FieldsV1 | Special::Json => {
            put_bytes(out, 1, &crate::json::compact(v))
        }
        Special::SchemaOrBool | Special::SchemaOrArray | Special::SchemaOrStringArray => {
            unreachable!("encode.rs encodes the unions of JSONSchemaProps")
        }
        Special::StringList => {
            let items = v.as_array().ok_or_else(|| ty("an array of strings"))?;
            for item in items {
                put_bytes(out, 1, item.as_str().ok_or_else(|| ty("an array of strings"))?.as_bytes());
            }
        }
    }
    Ok(())
}

/// The message body Go writes for the zero value of a non-pointer `s` field.
pub fn encode_zero(s: Special, out: &mut Vec<u8>) {
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
        Special::SchemaOrBool => out.extend_from_slice(&[0x08, 0x00]),
        Special::Duration => {
            put_varint(out, 1 << 3);
            put_varint(out, 0);
        }
        Special::Quantity => put_bytes(out, 1, b"0"),
        Special::IntOrString => out.extend_from_slice(&[0x08, 0x00, 0x10, 0x00, 0x1a, 0x00]),
    }
}

/// Decodes the message body of `s` into its JSON (`Value::Null` for a zero Time).
pub fn decode(s: Special, body: &[u8]) -> Result<Value, DecodeError> {
    if s == Special::StringList {
        let mut items = Vec::new();
        let mut r = super::decode::Reader::new(body);
        while let Some((tag, wire)) = r.key()? {
            match (tag, wire) {
                (1, 2) => items.push(Value::String(
                    String::from_utf8(r.len_delimited()?.to_vec()).map_err(|_| DecodeError::Utf8("items"))?,
                )),
                (1, w) => return Err(DecodeError::WireType { field: "items", wire: w }),
                (_, w) => r.skip(w)?,
            }
        }
        return Ok(Value::Array(items));
    }
    let mut ints = [0u64; 4];
    let mut bytes: [Option<&[u8]>; 4] = [None; 4];
    let mut r = super::decode::Reader::new(body);
    while let Some((tag, wire)) = r.key()? {
        match (tag, wire) {
            (1..=3, 0) => ints[tag as usize] = r.varint()?,
            (1..=3, 2) => bytes[tag as usize] = Some(r.len_delimited()?),
            (1..=3, w) => return Err(DecodeError::WireType { field: "special", wire: w }),
            (_, w) => r.skip(w)?,
        }
    }
    let text = |b: Option<&[u8]>| -> Result<String, DecodeError> {
        String::from_utf8(b.unwrap_or_default().to_vec()).map_err(|_| DecodeError::Utf8("string"))
    };
    Ok(match s {
        Special::Time | Special::MicroTime => {
            if body.is_empty() {
                return Ok(Value::Null);
            }
            let secs = ints[1] as i64;
            let nanos = (ints[2] as i64).clamp(0, 999_999_999) as u32;
            Value::String(format_rfc3339(
                secs,
                if s == Special::MicroTime { Some(nanos / 1000) } else { None },
            ))
        }
        Special::Duration => Value::String(format_duration(ints[1] as i64)),
        Special::Quantity => {
            let q = text(bytes[1])?;
            Value::String(if q.is_empty() { "0".into() } else { q })
        }
        Special::IntOrString if ints[1] == 1 => Value::String(text(bytes[3])?),
        Special::IntOrString => Value::from(ints[2] as i64 as i32),
        Special::RawExtension | Special::FieldsV1 | Special::Json => match bytes[1] {
            None => Value::Null,
            Some(raw) => serde_json::from_slice(raw).map_err(|_| DecodeError::Utf8("raw"))?,
        },
        Special::StringList => unreachable!("decoded above"),
        Special::SchemaOrBool | Special::SchemaOrArray | Special::SchemaOrStringArray => {
            unreachable!("decode.rs decodes the unions of JSONSchemaProps")
        }
    })
}

// === time ===

/// `0001-01-01T00:00:00Z`, Go's zero time, in Unix seconds.
const ZERO_TIME_SECS: i64 = -62_135_596_800;

pub use crate::time::{format_rfc3339, parse_rfc3339};

// === duration ===

/// Parses a Go duration string (`time.ParseDuration`) into nanoseconds.
pub fn parse_duration(s: &str) -> Option<i64> {
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
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let n = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit = match &rest[..u] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[u..];
        total += value * unit;
    }
    let n = total.round();
    (n <= i64::MAX as f64).then_some(if neg { -(n as i64) } else { n as i64 })
}

/// Formats nanoseconds as Go's `Duration.String()` does.
pub fn format_duration(n: i64) -> String {
    if n == 0 {
        return "0s".into();
    }
    let neg = n < 0;
    let u = n.unsigned_abs();
    let frac = |v: u64, digits: u32| -> String {
        let p = 10u64.pow(digits);
        let (w, f) = (v / p, v % p);
        if f == 0 {
            w.to_string()
        } else {
            let s = format!("{f:0width$}", width = digits as usize);
            format!("{w}.{}", s.trim_end_matches('0'))
        }
    };
    let body = if u < 1_000 {
        format!("{u}ns")
    } else if u < 1_000_000 {
        format!("{}µs", frac(u, 3))
    } else if u < 1_000_000_000 {
        format!("{}ms", frac(u, 6))
    } else {
        let (h, rem) = (u / 3_600_000_000_000, u % 3_600_000_000_000);
        let (m, rem) = (rem / 60_000_000_000, rem % 60_000_000_000);
        let s = format!("{}s", frac(rem, 9));
        match (h, m) {
            (0, 0) => s,
            (0, m) => format!("{m}m{s}"),
            (h, m) => format!("{h}h{m}m{s}"),
        }
    };
    if neg { format!("-{body}") } else { body }
}
