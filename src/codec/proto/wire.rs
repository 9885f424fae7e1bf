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
/// (Readers of upstream bytes use it: `forward::writes`, `fresh::census`.)
pub(crate) fn read_varint(buf: &mut &[u8]) -> Option<u64> {
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

/// The number of bytes `v` takes as a varint.
pub(super) fn varint_len(v: u64) -> usize {
    // 1 byte per 7 significant bits, at least one.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

pub(super) fn put_key(out: &mut Vec<u8>, tag: u32, wire: u32) {
    put_varint(out, u64::from(tag << 3 | wire));
}

/// A length-delimited field holding `b`.
pub(super) fn put_bytes(out: &mut Vec<u8>, tag: u32, b: &[u8]) {
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
