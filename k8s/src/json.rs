//! Go's `encoding/json` bytes, as the apiserver writes every JSON body.
//!
//! The apiserver encodes with `json.NewEncoder(w).Encode(obj)` (compact, HTML escaping on, a trailing
//! `\n`) and, when a client asks for pretty output, `json.MarshalIndent(obj, "", "  ")` (no trailing
//! newline). Go's `appendString` (`encoding/json/encode.go`) escapes:
//! - `"` and `\` with a backslash; `\b`, `\f`, `\n`, `\r`, `\t` short (Go ≥ 1.22 for `\b` and `\f`);
//!   every other byte below 0x20 as `\u00XX` (lower-case hex); DEL (0x7f) is written as is;
//! - `<`, `>`, `&` as `\u003c`, `\u003e`, `\u0026` (HTML escaping, on by default);
//! - U+2028 and U+2029 as `\u2028` and `\u2029`, always;
//! - each byte that does not start a valid UTF-8 sequence as `\ufffd` (six characters, one per byte).
//!
//! Everything kache writes as JSON goes through [`write_str`] / [`write_bytes`] (hand-assembled bodies:
//! lists, Tables, bookmarks, tokens) or [`GoFormatter`] (serde-serialised values: Status bodies, the sim's
//! objects), so the two cannot disagree.

use std::fmt::Write as _;
use std::io;

use bytes::{BufMut, BytesMut};
use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter};

/// Lower-case hex digits, as Go's `hex` table.
const HEX: &[u8; 16] = b"0123456789abcdef";

/// Where JSON text is appended: a `String`, a `Vec<u8>` or a `BytesMut`. Every piece is valid UTF-8.
pub trait Sink {
    fn put(&mut self, s: &str);
}

impl Sink for String {
    fn put(&mut self, s: &str) {
        self.push_str(s);
    }
}

impl Sink for Vec<u8> {
    fn put(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes());
    }
}

impl Sink for BytesMut {
    fn put(&mut self, s: &str) {
        self.put_slice(s.as_bytes());
    }
}

/// Bytes Go escapes (below 0x80); 0xE2 marks a possible U+2028/U+2029, checked at the byte after it.
const fn needs_escape_table() -> [bool; 256] {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = true;
        b += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t[b'<' as usize] = true;
    t[b'>' as usize] = true;
    t[b'&' as usize] = true;
    t[0xE2] = true;
    t
}
static NEEDS_ESCAPE: [bool; 256] = needs_escape_table();

/// Appends the escaped contents of `s` (no quotes).
fn write_escaped<S: Sink + ?Sized>(out: &mut S, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !NEEDS_ESCAPE[b as usize] {
            i += 1;
            continue;
        }
        let buf;
        let (esc, len): (&str, usize) = match b {
            b'"' => ("\\\"", 1),
            b'\\' => ("\\\\", 1),
            b'\n' => ("\\n", 1),
            b'\r' => ("\\r", 1),
            b'\t' => ("\\t", 1),
            0x08 => ("\\b", 1),
            0x0c => ("\\f", 1),
            // U+2028 / U+2029 are E2 80 A8 / E2 80 A9; any other E2 sequence is written as is.
            0xE2 => match bytes.get(i + 1..i + 3) {
                Some([0x80, 0xA8]) => ("\\u2028", 3),
                Some([0x80, 0xA9]) => ("\\u2029", 3),
                _ => {
                    i += 1;
                    continue;
                }
            },
            _ => {
                buf = [b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xF)]];
                (std::str::from_utf8(&buf).expect("an escape is ASCII"), 1)
            }
        };
        out.put(&s[start..i]);
        out.put(esc);
        i += len;
        start = i;
    }
    out.put(&s[start..]);
}

/// Appends `s` as a JSON string literal (with quotes), byte for byte as Go's `encoding/json`.
pub fn write_str<S: Sink + ?Sized>(out: &mut S, s: &str) {
    out.put("\"");
    write_escaped(out, s);
    out.put("\"");
}

/// Appends `b` as a JSON string literal like Go encodes a `string` holding these bytes: each byte that
/// does not start a valid UTF-8 sequence becomes `\ufffd` (Go's `utf8.DecodeRune` consumes one byte of an
/// invalid sequence at a time, so a truncated three-byte sequence gives two, a surrogate three).
pub fn write_bytes<S: Sink + ?Sized>(out: &mut S, mut b: &[u8]) {
    out.put("\"");
    loop {
        match std::str::from_utf8(b) {
            Ok(s) => {
                write_escaped(out, s);
                break;
            }
            Err(e) => {
                let (valid, rest) = b.split_at(e.valid_up_to());
                write_escaped(out, std::str::from_utf8(valid).expect("valid up to here"));
                out.put("\\ufffd");
                b = &rest[1..];
            }
        }
    }
    out.put("\"");
}

/// `s` as a JSON string literal, escaped like Go's `encoding/json`.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_str(&mut out, s);
    out
}

// === impl GoFormatter ===

/// A serde_json formatter that writes strings as Go's `encoding/json` does. serde_json already writes
/// `"`, `\`, `\b`, `\f`, `\n`, `\r`, `\t` and other controls as `\u00xx` exactly like Go; the string
/// fragments between those escapes get Go's HTML and U+2028/U+2029 escaping here. Numbers, separators and
/// indentation come from the wrapped formatter.
pub struct GoFormatter<F> {
    inner: F,
}

impl GoFormatter<CompactFormatter> {
    /// `json.Marshal` / `Encoder.Encode` layout.
    pub fn compact() -> Self {
        GoFormatter { inner: CompactFormatter }
    }
}

impl GoFormatter<PrettyFormatter<'static>> {
    /// `json.MarshalIndent(v, "", "  ")` layout (empty objects and arrays stay `{}` and `[]`).
    pub fn pretty() -> Self {
        GoFormatter { inner: PrettyFormatter::with_indent(b"  ") }
    }
}

/// Forwards one formatter method to the wrapped formatter.
macro_rules! forward {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $name<W: ?Sized + io::Write>(&mut self, w: &mut W $(, $arg: $ty)*) -> io::Result<()> {
            self.inner.$name(w $(, $arg)*)
        }
    )*};
}

impl<F: Formatter> Formatter for GoFormatter<F> {
    forward! {
        write_null();
        write_bool(v: bool);
        write_i64(v: i64);
        write_u64(v: u64);
        write_number_str(v: &str);
        begin_array();
        end_array();
        begin_array_value(first: bool);
        end_array_value();
        begin_object();
        end_object();
        begin_object_key(first: bool);
        end_object_key();
        begin_object_value();
        end_object_value();
    }

    fn write_f64<W: ?Sized + io::Write>(&mut self, w: &mut W, v: f64) -> io::Result<()> {
        w.write_all(go_float(v).as_bytes())
    }

    fn write_string_fragment<W: ?Sized + io::Write>(&mut self, w: &mut W, fragment: &str) -> io::Result<()> {
        let mut out = String::new();
        write_escaped(&mut out, fragment);
        w.write_all(out.as_bytes())
    }
}

/// `json.Marshal(v)`: compact, no trailing newline (watch event framing, embedding).
pub fn to_vec<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, GoFormatter::compact());
    v.serialize(&mut ser).expect("serialising into a Vec cannot fail");
    out
}

/// `json.MarshalIndent(v, "", "  ")`.
pub fn to_vec_pretty<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, GoFormatter::pretty());
    v.serialize(&mut ser).expect("serialising into a Vec cannot fail");
    out
}

/// A response body as the apiserver's serializer writes it: indented without newline, or compact with the
/// `\n` that `json.Encoder.Encode` appends.
pub fn body<T: Serialize + ?Sized>(v: &T, pretty: bool) -> Vec<u8> {
    if pretty {
        to_vec_pretty(v)
    } else {
        let mut out = to_vec(v);
        out.push(b'\n');
        out
    }
}

// === numbers and unstructured values ===

/// A float64 as Go's `encoding/json` writes it (`floatEncoder`): the shortest decimal that round-trips,
/// plain from 1e-6 up to 1e21 (`100`, not `100.0`), otherwise with an exponent of at least two digits
/// when positive and without a leading zero when negative (`1e+21`, `1.5e-7`). Non-finite values, which
/// Go refuses to encode, are written as `null`.
pub fn go_float(f: f64) -> String {
    if !f.is_finite() {
        return "null".into();
    }
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        return format!("{f}");
    }
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').expect("exponent format has an e");
    match exp.strip_prefix('-') {
        Some(digits) => format!("{mantissa}e-{digits}"),
        None => format!("{mantissa}e+{exp:0>2}"),
    }
}

/// Appends `v` as Go marshals the same value decoded into `interface{}`: objects with their keys sorted
/// (Go sorts a map's keys by bytes), whatever a `serde_json::Map`'s own iteration order is.
pub fn write_unstructured<S: Sink + ?Sized>(out: &mut S, v: &serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Null => out.put("null"),
        Value::Bool(b) => out.put(if *b { "true" } else { "false" }),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => out.put(&i.to_string()),
            (None, Some(u)) => out.put(&u.to_string()),
            _ => out.put(&go_float(n.as_f64().unwrap_or_default())),
        },
        Value::String(s) => write_str(out, s),
        Value::Array(a) => {
            out.put("[");
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.put(",");
                }
                write_unstructured(out, x);
            }
            out.put("]");
        }
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.put("{");
            for (i, (k, x)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.put(",");
                }
                write_str(out, k);
                out.put(":");
                write_unstructured(out, x);
            }
            out.put("}");
        }
    }
}

// === Go's strconv.Quote ===

/// Go's `strconv.Quote(s)` (what `fmt`'s `%q` prints for a string).
///
/// Printable characters are kept, `"` and `\` are escaped, control characters use `\a \b \f \n \r \t \v`,
/// other ASCII controls `\xNN`, and non-printable non-ASCII characters `\uNNNN`. "Printable" for non-ASCII
/// is approximated by `!char::is_control()` plus the format/separator characters Go also escapes.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x80 => out.push(c),
            c if is_go_printable(c) => out.push(c),
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// Approximates Go's `unicode.IsPrint` for non-ASCII characters.
fn is_go_printable(c: char) -> bool {
    let u = c as u32;
    !(c.is_control()
        || (0x2000..=0x200f).contains(&u)
        || (0x2028..=0x202f).contains(&u)
        || (0x205f..=0x206f).contains(&u)
        || u == 0x00a0
        || u == 0x00ad
        || u == 0x1680
        || u == 0x3000
        || u == 0xfeff
        || (0xfff9..=0xfffb).contains(&u)
        || (0xe000..=0xf8ff).contains(&u)
        || u >= 0xf0000)
}

#[cfg(test)]
mod tests;
