//! Go-compatible text encoding helpers: `encoding/json` string escaping and `strconv.Quote` (`%q`).
//!
//! The apiserver writes every body with Go's `encoding/json`, which escapes HTML-sensitive characters
//! (`<`, `>`, `&` become `\u003c`, `\u003e`, `\u0026`) and U+2028/U+2029. Messages quoting user input
//! (`<nil>: Invalid value: ...`, selectors with `&`) must be escaped the same way to be byte-identical.

use std::fmt::Write as _;

/// Appends `s` as a JSON string literal (with quotes), escaped exactly like Go's `encoding/json`
/// (HTML escaping on, Go ≥ 1.22 `\b`/`\f` short escapes).
pub(crate) fn write_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `s` as a JSON string literal, escaped like Go's `encoding/json`.
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_json_str(&mut out, s);
    out
}

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
mod tests {
    use super::*;

    #[test]
    fn json_escapes_like_go() {
        assert_eq!(json_str("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(json_str("<nil> & >"), r#""\u003cnil\u003e \u0026 \u003e""#);
        assert_eq!(json_str("\n\t\u{1}\u{8}\u{c}"), r#""\n\t\u0001\b\f""#);
        assert_eq!(json_str("é\u{2028}"), "\"é\\u2028\"");
        assert_eq!(json_str("\u{0}"), r#""\u0000""#);
    }

    #[test]
    fn quote_like_go() {
        assert_eq!(go_quote("abc"), r#""abc""#);
        assert_eq!(go_quote("a\"b"), r#""a\"b""#);
        assert_eq!(go_quote("\u{0}\n\u{7f}"), r#""\x00\n\x7f""#);
        assert_eq!(go_quote("héllo"), "\"héllo\"");
        assert_eq!(go_quote("\u{200b}"), r#""\u200b""#);
    }
}
