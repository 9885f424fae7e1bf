//! JSON → protobuf by the schema, writing what Go's generated marshallers write for the same object
//! decoded into its Go struct: fields in tag order; non-pointer fields even when absent or empty (their
//! zero value); pointers, slices and maps only when set; map entries sorted by key, each with its key
//! and value; repeated scalars unpacked (proto2); embedded structs as a nested message built from the
//! parent's JSON object. JSON `null` is an absent field, unknown JSON fields are dropped (as Go's
//! decoder drops them).

use base64::Engine;
use serde_json::{Map, Value};

use super::{EncodeError, Field, MAX_DEPTH, Message, Special, Ty, special};

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;

pub fn put_varint(out: &mut Vec<u8>, v: u64) {
    prost::encoding::encode_varint(v, out);
}

fn put_key(out: &mut Vec<u8>, tag: u32, wire: u32) {
    put_varint(out, u64::from(tag << 3 | wire));
}

/// A length-delimited field.
pub fn put_bytes(out: &mut Vec<u8>, tag: u32, b: &[u8]) {
    put_key(out, tag, LEN);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Encodes the JSON object `v` as message `m` (no envelope).
pub fn message(m: &'static Message, v: &Map<String, Value>, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    message_at(m, v, out, 0)
}

fn message_at(
    m: &'static Message,
    v: &Map<String, Value>,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), EncodeError> {
    if depth > MAX_DEPTH {
        return Err(EncodeError::Value { field: m.name.into(), why: "nesting too deep".into() });
    }
    for &i in m.by_tag {
        let f = &m.fields[i];
        if f.inline {
            let Ty::Msg(inner) = f.ty else { continue };
            let mut body = Vec::new();
            message_at(inner, v, &mut body, depth + 1)?;
            put_bytes(out, f.tag, &body);
            continue;
        }
        match v.get(f.json).filter(|x| !x.is_null()) {
            Some(x) => field(f, x, out, depth)?,
            None if f.always && !f.repeated => zero(f, out, depth)?,
            None => {}
        }
    }
    Ok(())
}

fn type_err(f: &Field, expected: &'static str) -> EncodeError {
    EncodeError::Type { field: f.json.to_string(), expected }
}

fn field(f: &Field, v: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), EncodeError> {
    match &f.ty {
        Ty::MapString | Ty::MapBytes | Ty::MapMsg(_) => {
            let obj = v.as_object().ok_or_else(|| type_err(f, "an object"))?;
            let mut keys: Vec<&String> = obj.keys().collect();
            keys.sort(); // Go sorts map keys (bytewise) before writing
            for k in keys {
                let mut entry = Vec::new();
                put_bytes(&mut entry, 1, k.as_bytes());
                let val = &obj[k.as_str()];
                match &f.ty {
                    Ty::MapString => put_bytes(
                        &mut entry,
                        2,
                        val.as_str().ok_or_else(|| type_err(f, "string values"))?.as_bytes(),
                    ),
                    Ty::MapBytes => {
                        if !val.is_null() {
                            put_bytes(&mut entry, 2, &base64_value(f, val)?);
                        }
                    }
                    Ty::MapMsg(m) => {
                        let mut body = Vec::new();
                        if val.is_null() {
                            zero_message(m, &mut body, depth + 1)?;
                        } else {
                            message_value(f, m, val, &mut body, depth + 1)?;
                        }
                        put_bytes(&mut entry, 2, &body);
                    }
                    _ => unreachable!("matched above"),
                }
                put_bytes(out, f.tag, &entry);
            }
            Ok(())
        }
        _ if f.repeated => {
            let items = v.as_array().ok_or_else(|| type_err(f, "an array"))?;
            for x in items {
                single(f, x, out, depth)?;
            }
            Ok(())
        }
        _ => single(f, v, out, depth),
    }
}

/// One value of a (possibly repeated) non-map field. A null array element is Go's zero value.
fn single(f: &Field, v: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), EncodeError> {
    if v.is_null() {
        return zero(f, out, depth);
    }
    match &f.ty {
        Ty::String => put_bytes(out, f.tag, v.as_str().ok_or_else(|| type_err(f, "a string"))?.as_bytes()),
        Ty::Int32 => {
            let i = v.as_i64().and_then(|i| i32::try_from(i).ok()).ok_or_else(|| type_err(f, "an int32"))?;
            put_key(out, f.tag, VARINT);
            put_varint(out, i64::from(i) as u64);
        }
        Ty::Int64 => {
            let i = v.as_i64().ok_or_else(|| type_err(f, "an int64"))?;
            put_key(out, f.tag, VARINT);
            put_varint(out, i as u64);
        }
        Ty::Bool => {
            let b = v.as_bool().ok_or_else(|| type_err(f, "a bool"))?;
            put_key(out, f.tag, VARINT);
            put_varint(out, u64::from(b));
        }
        Ty::Double => {
            let d = v.as_f64().ok_or_else(|| type_err(f, "a number"))?;
            put_key(out, f.tag, FIXED64);
            out.extend_from_slice(&d.to_le_bytes());
        }
        Ty::Bytes => put_bytes(out, f.tag, &base64_value(f, v)?),
        Ty::Msg(m) => {
            let mut body = Vec::new();
            message_value(f, m, v, &mut body, depth + 1)?;
            put_bytes(out, f.tag, &body);
        }
        Ty::MapString | Ty::MapBytes | Ty::MapMsg(_) => unreachable!("maps are handled by field()"),
    }
    Ok(())
}

fn message_value(
    f: &Field,
    m: &'static Message,
    v: &Value,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), EncodeError> {
    match m.special {
        Some(s) if s.is_union() => union(f, m, s, v, out, depth),
        Some(s) => special::encode(s, v, f.json, out),
        None => message_at(m, v.as_object().ok_or_else(|| type_err(f, "an object"))?, out, depth),
    }
}

/// A union of JSONSchemaProps (apiextensions' `marshal.go`) as Go's `UnmarshalJSON` fills it: the JSON
/// value's type picks the member, a schema in an OrBool means `allows`; then its message by the schema.
fn union(
    f: &Field,
    m: &'static Message,
    s: Special,
    v: &Value,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), EncodeError> {
    let mut members = Map::new();
    match (s, v) {
        (Special::SchemaOrBool, Value::Bool(b)) => {
            members.insert("allows".into(), Value::Bool(*b));
        }
        (Special::SchemaOrBool, Value::Object(_)) => {
            members.insert("allows".into(), Value::Bool(true));
            members.insert("schema".into(), v.clone());
        }
        (Special::SchemaOrArray | Special::SchemaOrStringArray, Value::Object(_)) => {
            members.insert("schema".into(), v.clone());
        }
        (Special::SchemaOrArray, Value::Array(_)) => {
            members.insert("jSONSchemas".into(), v.clone());
        }
        (Special::SchemaOrStringArray, Value::Array(_)) => {
            members.insert("property".into(), v.clone());
        }
        (Special::SchemaOrBool, _) => return Err(type_err(f, "a bool or a schema")),
        // Go's decoder leaves the union empty.
        _ => {}
    }
    message_at(m, &members, out, depth)
}

/// The zero value of a non-pointer field.
fn zero(f: &Field, out: &mut Vec<u8>, depth: usize) -> Result<(), EncodeError> {
    match &f.ty {
        Ty::String => put_bytes(out, f.tag, b""),
        Ty::Int32 | Ty::Int64 | Ty::Bool => {
            put_key(out, f.tag, VARINT);
            put_varint(out, 0);
        }
        Ty::Double => {
            put_key(out, f.tag, FIXED64);
            out.extend_from_slice(&0f64.to_le_bytes());
        }
        // A nil []byte is not written.
        Ty::Bytes => {}
        Ty::Msg(m) => {
            let mut body = Vec::new();
            zero_message(m, &mut body, depth + 1)?;
            put_bytes(out, f.tag, &body);
        }
        Ty::MapString | Ty::MapBytes | Ty::MapMsg(_) => {}
    }
    Ok(())
}

fn zero_message(m: &'static Message, out: &mut Vec<u8>, depth: usize) -> Result<(), EncodeError> {
    match m.special {
        Some(s) => {
            special::encode_zero(s, out);
            Ok(())
        }
        None => message_at(m, &Map::new(), out, depth),
    }
}

fn base64_value(f: &Field, v: &Value) -> Result<Vec<u8>, EncodeError> {
    let s = v.as_str().ok_or_else(|| type_err(f, "a base64 string"))?;
    base64::engine::general_purpose::STANDARD.decode(s).map_err(|e| EncodeError::Value {
        field: f.json.to_string(),
        why: format!("illegal base64 data: {e}"),
    })
}
