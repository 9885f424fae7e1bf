//! Protobuf → JSON by the schema: the JSON Go's encoder prints for the object Go's generated
//! unmarshallers build from the same bytes. Fields come out in Go struct order; an empty non-pointer
//! field is printed only where Go prints it (`Field::zero_json`); a repeated non-map message field that
//! occurs more than once is merged (protobuf's rule: its occurrences' bytes concatenated); unknown
//! fields are skipped. Every read is bounds-checked: malformed input is a [`DecodeError`], never a
//! panic.

use base64::Engine;
use serde_json::{Map, Value};

use super::{DecodeError, Field, MAX_DEPTH, Message, Ty, special};

/// A cursor over protobuf wire bytes.
pub struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, i: 0 }
    }

    /// The next field's (tag, wire type), or None at the end.
    pub fn key(&mut self) -> Result<Option<(u32, u8)>, DecodeError> {
        if self.i >= self.b.len() {
            return Ok(None);
        }
        let k = self.varint()?;
        let tag = u32::try_from(k >> 3).map_err(|_| DecodeError::Overflow)?;
        if tag == 0 {
            return Err(DecodeError::TagZero);
        }
        Ok(Some((tag, (k & 7) as u8)))
    }

    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let c = *self.b.get(self.i).ok_or(DecodeError::Eof)?;
            self.i += 1;
            if shift == 63 && c > 1 {
                return Err(DecodeError::Overflow);
            }
            v |= u64::from(c & 0x7f) << shift;
            if c < 0x80 {
                return Ok(v);
            }
        }
        Err(DecodeError::Overflow)
    }

    pub fn len_delimited(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = usize::try_from(self.varint()?).map_err(|_| DecodeError::Eof)?;
        let end = self.i.checked_add(n).filter(|e| *e <= self.b.len()).ok_or(DecodeError::Eof)?;
        let s = &self.b[self.i..end];
        self.i = end;
        Ok(s)
    }

    fn fixed(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.i.checked_add(n).filter(|e| *e <= self.b.len()).ok_or(DecodeError::Eof)?;
        let s = &self.b[self.i..end];
        self.i = end;
        Ok(s)
    }

    /// Skips a field of wire type `wire`.
    pub fn skip(&mut self, wire: u8) -> Result<(), DecodeError> {
        match wire {
            0 => self.varint().map(drop),
            1 => self.fixed(8).map(drop),
            2 => self.len_delimited().map(drop),
            5 => self.fixed(4).map(drop),
            w => Err(DecodeError::IllegalWireType(w)),
        }
    }
}

/// One field occurrence as read.
#[derive(Clone, Copy)]
enum Raw<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
}

/// Decodes message `m` into its JSON object.
pub fn message(m: &'static Message, b: &[u8]) -> Result<Map<String, Value>, DecodeError> {
    message_at(m, b, 0)
}

fn message_at(m: &'static Message, b: &[u8], depth: usize) -> Result<Map<String, Value>, DecodeError> {
    if depth > MAX_DEPTH {
        return Err(DecodeError::TooDeep);
    }
    let mut seen: Vec<Vec<Raw<'_>>> = vec![Vec::new(); m.fields.len()];
    let mut r = Reader::new(b);
    while let Some((tag, wire)) = r.key()? {
        let Some(i) = m.fields.iter().position(|f| f.tag == tag) else {
            r.skip(wire)?;
            continue;
        };
        let f = &m.fields[i];
        match (expected_wire(f), wire) {
            (0, 0) => seen[i].push(Raw::Varint(r.varint()?)),
            (1, 1) => {
                let mut x = [0u8; 8];
                x.copy_from_slice(r.fixed(8)?);
                seen[i].push(Raw::Fixed64(u64::from_le_bytes(x)));
            }
            (2, 2) => seen[i].push(Raw::Bytes(r.len_delimited()?)),
            // A packed repeated varint field (Go's unmarshallers accept both forms).
            (0, 2) if f.repeated => {
                let mut p = Reader::new(r.len_delimited()?);
                while p.i < p.b.len() {
                    seen[i].push(Raw::Varint(p.varint()?));
                }
            }
            (_, w) => return Err(DecodeError::WireType { field: f.json, wire: w }),
        }
    }
    let mut out = Map::new();
    for (f, raws) in m.fields.iter().zip(&seen) {
        if f.inline {
            let Ty::Msg(inner) = f.ty else { continue };
            out.extend(message_at(inner, &concat(raws), depth + 1)?);
            continue;
        }
        if raws.is_empty() {
            if let Some(z) = f.zero_json {
                out.insert(f.json.into(), serde_json::from_str(z).unwrap_or(Value::Null));
            }
            continue;
        }
        let v = match &f.ty {
            Ty::MapString | Ty::MapBytes | Ty::MapMsg(_) => {
                let mut obj = Map::new();
                for raw in raws {
                    let (k, v) = map_entry(f, raw, depth)?;
                    obj.insert(k, v);
                }
                Value::Object(obj)
            }
            _ if f.repeated => {
                Value::Array(raws.iter().map(|raw| scalar(f, *raw, depth)).collect::<Result<Vec<_>, _>>()?)
            }
            Ty::Msg(_) => scalar(f, Raw::Bytes(&concat(raws)), depth)?,
            _ => scalar(f, *raws.last().expect("not empty"), depth)?,
        };
        // An empty non-pointer value is printed as Go prints an absent one.
        if (f.always && is_zero(&v)) || v.is_null() {
            if let Some(z) = f.zero_json {
                out.insert(f.json.into(), serde_json::from_str(z).unwrap_or(Value::Null));
            }
            continue;
        }
        out.insert(f.json.into(), v);
    }
    Ok(out)
}

fn expected_wire(f: &Field) -> u8 {
    match f.ty {
        Ty::Int32 | Ty::Int64 | Ty::Bool => 0,
        Ty::Double => 1,
        _ => 2,
    }
}

fn concat(raws: &[Raw<'_>]) -> Vec<u8> {
    let mut b = Vec::new();
    for r in raws {
        if let Raw::Bytes(x) = r {
            b.extend_from_slice(x);
        }
    }
    b
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Bool(b) => !b,
        _ => false,
    }
}

fn utf8(f: &Field, b: &[u8]) -> Result<String, DecodeError> {
    String::from_utf8(b.to_vec()).map_err(|_| DecodeError::Utf8(f.json))
}

fn scalar(f: &Field, raw: Raw<'_>, depth: usize) -> Result<Value, DecodeError> {
    Ok(match (&f.ty, raw) {
        (Ty::String, Raw::Bytes(b)) => Value::String(utf8(f, b)?),
        (Ty::Bytes, Raw::Bytes(b)) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        (Ty::Int32, Raw::Varint(v)) => Value::from(v as i64 as i32),
        (Ty::Int64, Raw::Varint(v)) => Value::from(v as i64),
        (Ty::Bool, Raw::Varint(v)) => Value::Bool(v != 0),
        (Ty::Double, Raw::Fixed64(v)) => {
            serde_json::Number::from_f64(f64::from_bits(v)).map(Value::Number).unwrap_or(Value::Null)
        }
        (Ty::Msg(m), Raw::Bytes(b)) => match m.special {
            Some(s) if s.is_union() => union(m, b, depth)?,
            Some(s) => special::decode(s, b)?,
            None => Value::Object(message_at(m, b, depth + 1)?),
        },
        (_, _) => return Err(DecodeError::WireType { field: f.json, wire: 0 }),
    })
}

fn map_entry(f: &Field, raw: &Raw<'_>, depth: usize) -> Result<(String, Value), DecodeError> {
    let Raw::Bytes(b) = raw else { return Err(DecodeError::WireType { field: f.json, wire: 0 }) };
    let mut r = Reader::new(b);
    let (mut key, mut val): (&[u8], Option<&[u8]>) = (b"", None);
    while let Some((tag, wire)) = r.key()? {
        match (tag, wire) {
            (1, 2) => key = r.len_delimited()?,
            (2, 2) => val = Some(r.len_delimited()?),
            (1 | 2, w) => return Err(DecodeError::WireType { field: f.json, wire: w }),
            (_, w) => r.skip(w)?,
        }
    }
    let key = utf8(f, key)?;
    let val = match &f.ty {
        Ty::MapString => Value::String(utf8(f, val.unwrap_or_default())?),
        Ty::MapBytes => match val {
            Some(v) => Value::String(base64::engine::general_purpose::STANDARD.encode(v)),
            None => Value::Null,
        },
        Ty::MapMsg(m) => match m.special {
            Some(s) if s.is_union() => union(m, val.unwrap_or_default(), depth)?,
            Some(s) => special::decode(s, val.unwrap_or_default())?,
            None => Value::Object(message_at(m, val.unwrap_or_default(), depth + 1)?),
        },
        _ => unreachable!("map_entry is called for map fields"),
    };
    Ok((key, val))
}

/// A union of JSONSchemaProps as Go's `MarshalJSON` prints it: its array member when not empty, else its
/// schema, else (an OrBool) its `allows`, else `null`.
fn union(m: &'static Message, b: &[u8], depth: usize) -> Result<Value, DecodeError> {
    let mut members = message_at(m, b, depth + 1)?;
    for array in ["jSONSchemas", "property"] {
        if let Some(Value::Array(a)) = members.get(array)
            && !a.is_empty()
        {
            return Ok(members.remove(array).expect("present"));
        }
    }
    if let Some(schema) = members.remove("schema") {
        return Ok(schema);
    }
    Ok(members.remove("allows").unwrap_or(if m.special == Some(super::Special::SchemaOrBool) {
        Value::Bool(false)
    } else {
        Value::Null
    }))
}
