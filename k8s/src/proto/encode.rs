//! JSON tree → message bytes by the schema: what Go's generated marshallers write for the same object
//! decoded into its Go struct. Per message the object's keys are first placed into the schema's field
//! slots (unknown or duplicate keys are refused), then written in tag order: non-pointer fields even
//! when absent or null (their zero value), pointers, slices and maps only when set; map entries sorted
//! by key; repeated scalars unpacked (proto2); an embedded struct (`json:",inline"`) as a nested message
//! built from the parent's own keys.

use std::borrow::Cow;

use kache_k8s_schema::{Field, Message, Special, Ty};

use super::TranscodeError;
use super::json::J;
use super::special;
use super::wire::{FIXED64, VARINT, put_bytes, put_key, put_nested, put_varint};

/// Field slots on the stack for messages up to this many fields (the largest, PodSpec, has 41).
const STACK_SLOTS: usize = 64;

type Pairs<'j, 'a> = &'j [(Cow<'a, str>, J<'a>)];

/// Writes the object `obj` as message `m`. `extra` names top-level keys that are not fields (an
/// object's `kind` and `apiVersion`, checked by the caller).
pub(super) fn message(
    m: &'static Message,
    obj: Pairs,
    extra: &[&str],
    out: &mut Vec<u8>,
) -> Result<(), TranscodeError> {
    message_inner(m, obj, Strict::Yes(extra), out)
}

#[derive(Clone, Copy)]
enum Strict<'e> {
    /// Every key must be a field of this message or of one it embeds, or one of these.
    Yes(&'e [&'e str]),
    /// An embedded struct reading its parent's keys: the parent checked them.
    Embedded,
}

fn message_inner(
    m: &'static Message,
    obj: Pairs,
    strict: Strict,
    out: &mut Vec<u8>,
) -> Result<(), TranscodeError> {
    if m.fields.len() > STACK_SLOTS {
        return Err(TranscodeError::Value {
            field: m.name,
            why: "message too large for the transcoder".into(),
        });
    }
    let mut slots: [Option<&J>; STACK_SLOTS] = [None; STACK_SLOTS];
    for (k, v) in obj {
        match m.fields.iter().position(|f| !f.inline && f.json == k.as_ref()) {
            Some(i) if slots[i].is_some() => {
                return Err(TranscodeError::Duplicate { field: m.fields[i].json });
            }
            Some(i) => slots[i] = Some(v),
            // Go's TypeMeta: JSON only (an object nested in another has them when its writer set them).
            None if m.type_meta && (k == "kind" || k == "apiVersion") => {
                if !matches!(v, J::Str(_)) {
                    return Err(TranscodeError::Type { field: "kind/apiVersion", expected: "a string" });
                }
            }
            None => {
                if let Strict::Yes(extra) = strict
                    && !extra.contains(&k.as_ref())
                    && !embedded_knows(m, k)
                {
                    return Err(TranscodeError::UnknownField { message: m.name, field: k.to_string() });
                }
            }
        }
    }
    for &i in m.by_tag {
        let f = &m.fields[i];
        if f.inline {
            let Ty::Msg(inner) = f.ty else { continue };
            put_nested(out, f.tag, |out| message_inner(inner, obj, Strict::Embedded, out))?;
            continue;
        }
        match slots[i] {
            Some(v) if !v.is_null() => field(f, v, out)?,
            _ if f.always && !f.repeated => zero(f, out)?,
            _ => {}
        }
    }
    Ok(())
}

/// Whether `key` is a field of a struct `m` embeds (at any depth).
fn embedded_knows(m: &'static Message, key: &str) -> bool {
    m.fields.iter().any(|f| match f.ty {
        Ty::Msg(inner) if f.inline => {
            inner.fields.iter().any(|g| !g.inline && g.json == key) || embedded_knows(inner, key)
        }
        _ => false,
    })
}

fn type_err(f: &Field, expected: &'static str) -> TranscodeError {
    TranscodeError::Type { field: f.json, expected }
}

fn field(f: &'static Field, v: &J, out: &mut Vec<u8>) -> Result<(), TranscodeError> {
    if let J::Raw(text) = v
        && !raw_typed(f)
    {
        // A key named like a raw-JSON field elsewhere (a ConfigMap's `data`): read the value from its text.
        return field(f, &reparse(text)?, out);
    }
    match f.ty {
        Ty::MapString | Ty::MapBytes | Ty::MapMsg(_) => map(f, v, out),
        _ if f.repeated => {
            if let J::Raw(text) = v {
                return raw_elements(f, text, out);
            }
            let J::Arr(items) = v else { return Err(type_err(f, "an array")) };
            for x in items {
                // Go's zero value for a null element is a guess about its element type: refused.
                if x.is_null() {
                    return Err(type_err(f, "no null elements"));
                }
                single(f, x, out)?;
            }
            Ok(())
        }
        _ => single(f, v, out),
    }
}

/// Whether `f` holds raw JSON (its value may be [`J::Raw`], the source text).
fn raw_typed(f: &Field) -> bool {
    matches!(f.ty, Ty::Msg(m) if matches!(m.special, Some(Special::RawExtension | Special::FieldsV1 | Special::Json)))
}

/// A repeated raw-JSON field (a schema's `enum`), kept whole as text: each element as its own text, which
/// is what Go's decoder hands each element's `UnmarshalJSON`.
fn raw_elements(f: &'static Field, text: &str, out: &mut Vec<u8>) -> Result<(), TranscodeError> {
    let items: Vec<&serde_json::value::RawValue> =
        serde_json::from_str(text).map_err(|_| type_err(f, "an array"))?;
    for x in items {
        // Go's zero value for a null element is a guess about its element type: refused.
        if x.get() == "null" {
            return Err(type_err(f, "no null elements"));
        }
        single(f, &J::Raw(x.get()), out)?;
    }
    Ok(())
}

/// The tree of a value kept as source text.
fn reparse(text: &str) -> Result<J<'_>, TranscodeError> {
    super::json::parse(text.as_bytes()).map_err(|e| TranscodeError::Json(e.to_string()))
}

/// One (non-null) value of a non-map field.
fn single(f: &'static Field, v: &J, out: &mut Vec<u8>) -> Result<(), TranscodeError> {
    match f.ty {
        Ty::String => {
            let J::Str(s) = v else { return Err(type_err(f, "a string")) };
            put_bytes(out, f.tag, s.as_bytes());
        }
        Ty::Int32 => {
            let i = v.as_i64().and_then(|i| i32::try_from(i).ok()).ok_or_else(|| type_err(f, "an int32"))?;
            put_key(out, f.tag, VARINT);
            put_varint(out, i64::from(i) as u64); // negative int32s are sign-extended
        }
        Ty::Int64 => {
            let i = v.as_i64().ok_or_else(|| type_err(f, "an int64"))?;
            put_key(out, f.tag, VARINT);
            put_varint(out, i as u64);
        }
        Ty::Bool => {
            let J::Bool(b) = v else { return Err(type_err(f, "a bool")) };
            put_key(out, f.tag, VARINT);
            put_varint(out, u64::from(*b));
        }
        Ty::Double => {
            let d = match *v {
                J::Float(d) => d,
                J::Int(i) => i as f64,
                J::UInt(u) => u as f64,
                _ => return Err(type_err(f, "a number")),
            };
            put_key(out, f.tag, FIXED64);
            out.extend_from_slice(&d.to_le_bytes());
        }
        Ty::Bytes => put_bytes(out, f.tag, &base64(f, v)?),
        Ty::Msg(m) => put_nested(out, f.tag, |out| match m.special {
            Some(s) if s.is_union() => union(m, s, v, f.json, out),
            Some(s) => special::encode(s, v, f.json, out),
            None => {
                let J::Obj(o) = v else { return Err(type_err(f, "an object")) };
                message_inner(m, o, Strict::Yes(&[]), out)
            }
        })?,
        Ty::MapString | Ty::MapBytes | Ty::MapMsg(_) => return map(f, v, out),
    }
    Ok(())
}

/// A map: one entry message per key, sorted bytewise as Go sorts them, key = 1 and value = 2.
fn map(f: &'static Field, v: &J, out: &mut Vec<u8>) -> Result<(), TranscodeError> {
    let J::Obj(o) = v else { return Err(type_err(f, "an object")) };
    let mut entries: Vec<&(Cow<str>, J)> = o.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    if entries.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(TranscodeError::Duplicate { field: f.json });
    }
    for (k, val) in entries {
        // A value kept as source text (a key named like a raw field): read it now.
        let reread;
        let val = match val {
            J::Raw(text) => {
                reread = reparse(text)?;
                &reread
            }
            _ => val,
        };
        put_nested(out, f.tag, |e| {
            put_bytes(e, 1, k.as_bytes());
            match (&f.ty, val) {
                // A null map value is Go's zero value of the element type: a guess, refused.
                (Ty::MapString | Ty::MapMsg(_), J::Null) => return Err(type_err(f, "no null values")),
                (Ty::MapString, J::Str(s)) => put_bytes(e, 2, s.as_bytes()),
                (Ty::MapString, _) => return Err(type_err(f, "string values")),
                // A nil []byte is not written.
                (Ty::MapBytes, J::Null) => {}
                (Ty::MapBytes, _) => put_bytes(e, 2, &base64(f, val)?),
                (Ty::MapMsg(m), _) => put_nested(e, 2, |e| match m.special {
                    Some(s) if s.is_union() => union(m, s, val, f.json, e),
                    Some(s) => special::encode(s, val, f.json, e),
                    None => {
                        let J::Obj(o) = val else { return Err(type_err(f, "object values")) };
                        message_inner(m, o, Strict::Yes(&[]), e)
                    }
                })?,
                _ => unreachable!("map() is only called for map fields"),
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// A union of JSONSchemaProps (apiextensions' `marshal.go`): Go's `UnmarshalJSON` picks the member by the
/// JSON value's type, and its generated `Marshal` writes that member, plus `JSONSchemaPropsOrBool`'s
/// `allows` (a non-pointer bool) always. Refused, as not the apiserver's output: any other JSON type
/// (Go's decoder leaves the union empty, or fails) and empty arrays (an empty union, which Go prints as
/// `null`).
fn union(
    m: &'static Message,
    s: Special,
    v: &J,
    field: &'static str,
    out: &mut Vec<u8>,
) -> Result<(), TranscodeError> {
    let schema = |tag: u32, o: Pairs, out: &mut Vec<u8>| {
        let member = m.fields.iter().find(|f| f.tag == tag);
        let Some(Field { ty: Ty::Msg(props), .. }) = member else {
            unreachable!("the schema lists {}'s schema members", m.name)
        };
        put_nested(out, tag, |out| message_inner(props, o, Strict::Yes(&[]), out))
    };
    let expected = match s {
        Special::SchemaOrBool => "a bool or a schema",
        Special::SchemaOrArray => "a schema or an array of schemas",
        _ => "a schema or an array of strings",
    };
    let wrong = || TranscodeError::Type { field, expected };
    match (s, v) {
        (Special::SchemaOrBool, J::Bool(b)) => {
            put_key(out, 1, VARINT);
            put_varint(out, u64::from(*b));
        }
        (Special::SchemaOrBool, J::Obj(o)) => {
            put_key(out, 1, VARINT);
            put_varint(out, 1);
            schema(2, o, out)?;
        }
        (Special::SchemaOrArray | Special::SchemaOrStringArray, J::Obj(o)) => schema(1, o, out)?,
        (Special::SchemaOrArray, J::Arr(items)) if !items.is_empty() => {
            for x in items {
                let J::Obj(o) = x else { return Err(wrong()) };
                schema(2, o, out)?;
            }
        }
        (Special::SchemaOrStringArray, J::Arr(items)) if !items.is_empty() => {
            for x in items {
                let J::Str(p) = x else { return Err(wrong()) };
                put_bytes(out, 2, p.as_bytes());
            }
        }
        _ => return Err(wrong()),
    }
    Ok(())
}

/// The zero value of a non-pointer field.
fn zero(f: &'static Field, out: &mut Vec<u8>) -> Result<(), TranscodeError> {
    match f.ty {
        Ty::String => put_bytes(out, f.tag, b""),
        Ty::Int32 | Ty::Int64 | Ty::Bool => {
            put_key(out, f.tag, VARINT);
            put_varint(out, 0);
        }
        Ty::Double => {
            put_key(out, f.tag, FIXED64);
            out.extend_from_slice(&0f64.to_le_bytes());
        }
        // A nil []byte, map or slice is not written.
        Ty::Bytes | Ty::MapString | Ty::MapBytes | Ty::MapMsg(_) => {}
        Ty::Msg(m) => put_nested(out, f.tag, |out| match m.special {
            Some(s) => {
                special::encode_zero(s, out);
                Ok(())
            }
            None => message_inner(m, &[], Strict::Yes(&[]), out),
        })?,
    }
    Ok(())
}

/// A `[]byte` from its JSON: standard base64 with padding, as Go's decoder reads it (Go also skips
/// line breaks inside; refused here as the apiserver never writes them).
fn base64(f: &Field, v: &J) -> Result<Vec<u8>, TranscodeError> {
    use base64::Engine;
    let J::Str(s) = v else { return Err(type_err(f, "a base64 string")) };
    base64::engine::general_purpose::STANDARD
        .decode(s.as_bytes())
        .map_err(|e| TranscodeError::Value { field: f.json, why: format!("illegal base64 data: {e}") })
}
