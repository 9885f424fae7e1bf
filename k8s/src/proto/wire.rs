//! Protobuf wire primitives: varints, keys, length-delimited fields. A nested message is written in
//! place: one byte is reserved for its length, the body is written after it, and only a body of 128
//! bytes or more (a length varint of two bytes or more) moves up to make room, so nesting never
//! allocates a buffer of its own.

pub(super) const VARINT: u32 = 0;
pub(super) const FIXED64: u32 = 1;
pub(super) const LEN: u32 = 2;

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint from the front of `buf`, advancing it; `None` when it is truncated or longer than ten bytes.
fn read_varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// A protobuf message that does not parse (truncated, or a wire type Kubernetes never uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// A field's value as read from upstream bytes: a varint, a length-delimited payload, or a fixed-width value
/// (skipped: Kubernetes' messages read here carry none that matter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    Varint(u64),
    Len(&'a [u8]),
    Fixed,
}

/// The fields of a protobuf message read from upstream bytes (`forward::writes`, `fresh::census`), as
/// `(number, value)`. A malformed message yields one `Err` and ends the iteration.
pub struct Fields<'a>(&'a [u8]);

pub fn fields(msg: &[u8]) -> Fields<'_> {
    Fields(msg)
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Value<'a>), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let field = read_varint(&mut self.0).and_then(|key| {
            let value = match key & 7 {
                0 => Value::Varint(read_varint(&mut self.0)?),
                1 => {
                    self.0 = self.0.get(8..)?;
                    Value::Fixed
                }
                5 => {
                    self.0 = self.0.get(4..)?;
                    Value::Fixed
                }
                2 => {
                    let len = usize::try_from(read_varint(&mut self.0)?).ok()?;
                    let payload = self.0.get(..len)?;
                    self.0 = &self.0[len..];
                    Value::Len(payload)
                }
                // Groups (3, 4) are not used by Kubernetes; anything else is malformed.
                _ => return None,
            };
            Some((key >> 3, value))
        });
        match field {
            Some(field) => Some(Ok(field)),
            None => {
                self.0 = &[];
                Some(Err(Malformed))
            }
        }
    }
}

/// The length-delimited fields of a protobuf message read from upstream bytes, as `(number, payload)`;
/// fields of other wire types are skipped. A malformed message yields one `Err` and ends the iteration.
pub fn len_fields(msg: &[u8]) -> impl Iterator<Item = Result<(u64, &[u8]), Malformed>> {
    fields(msg).filter_map(|f| match f {
        Ok((n, Value::Len(payload))) => Some(Ok((n, payload))),
        Ok(_) => None,
        Err(e) => Some(Err(e)),
    })
}

/// The payload of the last length-delimited field `number` of a message (proto3: the last one wins).
pub fn last_len_field(msg: &[u8], number: u64) -> Result<Option<&[u8]>, Malformed> {
    let mut found = None;
    for field in len_fields(msg) {
        let (n, payload) = field?;
        if n == number {
            found = Some(payload);
        }
    }
    Ok(found)
}

/// The number of bytes `v` takes as a varint.
pub(super) fn varint_len(v: u64) -> usize {
    // 1 byte per 7 significant bits, at least one.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

pub(super) fn put_key(out: &mut Vec<u8>, tag: u32, wire: u32) {
    put_varint(out, u64::from(tag << 3 | wire));
}

/// A length-delimited field holding `b`.
pub fn put_bytes(out: &mut Vec<u8>, tag: u32, b: &[u8]) {
    put_key(out, tag, LEN);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A length-delimited field whose body `body` writes into `out` directly.
pub(super) fn put_nested<E>(
    out: &mut Vec<u8>,
    tag: u32,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    put_key(out, tag, LEN);
    let at = out.len();
    out.push(0);
    body(out)?;
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let mut v = [0u8; 10];
        let mut n = 0;
        let mut x = len as u64;
        while x >= 0x80 {
            v[n] = (x as u8) | 0x80;
            x >>= 7;
            n += 1;
        }
        v[n] = x as u8;
        out.splice(at..at + 1, v[..=n].iter().copied());
    }
    Ok(())
}
