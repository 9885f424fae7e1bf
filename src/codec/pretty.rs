//! Go-style JSON indentation (`json.Indent` with two spaces), which the apiserver applies when a client asks
//! for `?pretty=true` or its User-Agent starts with `curl` or `Wget`.
//!
//! Works on bytes without decoding, so key order and number spelling are preserved.

/// Re-indents compact JSON. Input that is not valid JSON is re-indented on a best-effort basis; it never panics.
pub fn indent(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() + input.len() / 2);
    let mut depth: usize = 0;
    let mut in_string = false;
    let mut escaped = false;
    // After `{` or `[` the newline is deferred: if the next byte closes the value, Go writes `{}` / `[]`.
    let mut need_indent = false;
    for &b in input {
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        if b.is_ascii_whitespace() {
            continue;
        }
        if need_indent && b != b'}' && b != b']' {
            need_indent = false;
            depth += 1;
            newline(&mut out, depth);
        }
        match b {
            b'"' => {
                in_string = true;
                out.push(b);
            }
            b'{' | b'[' => {
                out.push(b);
                need_indent = true;
            }
            b',' => {
                out.push(b);
                newline(&mut out, depth);
            }
            b':' => {
                out.push(b);
                out.push(b' ');
            }
            b'}' | b']' => {
                if need_indent {
                    need_indent = false;
                } else {
                    depth = depth.saturating_sub(1);
                    newline(&mut out, depth);
                }
                out.push(b);
            }
            _ => out.push(b),
        }
    }
    out
}

fn newline(out: &mut Vec<u8>, depth: usize) {
    out.push(b'\n');
    for _ in 0..depth {
        out.extend_from_slice(b"  ");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_transcript_empty_list() {
        let compact = br#"{"kind":"FlunderList","apiVersion":"wardle.example.com/v1alpha1","metadata":{"resourceVersion":"1"},"items":[]}"#;
        let expected = "{\n  \"kind\": \"FlunderList\",\n  \"apiVersion\": \"wardle.example.com/v1alpha1\",\n  \"metadata\": {\n    \"resourceVersion\": \"1\"\n  },\n  \"items\": []\n}";
        assert_eq!(String::from_utf8(indent(compact)).unwrap(), expected);
    }

    #[test]
    fn strings_with_structural_bytes_are_untouched() {
        let compact = br#"{"a":"x,{}:[]\"y","b":{},"c":[1,2]}"#;
        let expected = "{\n  \"a\": \"x,{}:[]\\\"y\",\n  \"b\": {},\n  \"c\": [\n    1,\n    2\n  ]\n}";
        assert_eq!(String::from_utf8(indent(compact)).unwrap(), expected);
    }

    #[test]
    fn garbage_never_panics() {
        for input in [&b"}}}]]"[..], b"{{{", b"\"unterminated", b"", b"\\"] {
            let _ = indent(input);
        }
    }
}
