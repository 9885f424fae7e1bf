//! Go-style JSON indentation (`json.Indent` with two spaces), which the apiserver applies when a client asks
//! for `?pretty=true` or its User-Agent starts with `curl` or `Wget`.
//!
//! Works on bytes without decoding, so key order and number spelling are preserved.

use bytes::Bytes;

/// Re-indents compact JSON. Input that is not valid JSON is re-indented on a best-effort basis; it never panics.
pub fn indent(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() + input.len() / 2);
    Indenter::default().push(input, &mut out);
    out
}

/// `json.Indent` as a state machine over a byte stream: feed it the compact document in pieces, split
/// anywhere (inside strings and escapes too), and the concatenated output is [`indent`] of the whole. It holds
/// only its position (depth, string and escape state), so a streamed response needs one output buffer per
/// input chunk, never the whole document.
#[derive(Clone, Debug, Default)]
pub(crate) struct Indenter {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// After `{` or `[` the newline is deferred: if the next byte closes the value, Go writes `{}` / `[]`.
    need_indent: bool,
}

// === impl Indenter ===

impl Indenter {
    /// Appends the indented form of `input` (the next bytes of the document) to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            if self.in_string {
                out.push(b);
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            if b.is_ascii_whitespace() {
                continue;
            }
            if self.need_indent && b != b'}' && b != b']' {
                self.need_indent = false;
                self.depth += 1;
                newline(out, self.depth);
            }
            match b {
                b'"' => {
                    self.in_string = true;
                    out.push(b);
                }
                b'{' | b'[' => {
                    out.push(b);
                    self.need_indent = true;
                }
                b',' => {
                    out.push(b);
                    newline(out, self.depth);
                }
                b':' => {
                    out.push(b);
                    out.push(b' ');
                }
                b'}' | b']' => {
                    if self.need_indent {
                        self.need_indent = false;
                    } else {
                        self.depth = self.depth.saturating_sub(1);
                        newline(out, self.depth);
                    }
                    out.push(b);
                }
                _ => out.push(b),
            }
        }
    }
}

/// Pretty-prints a stream of compact JSON chunks chunk by chunk: each output chunk is the indented form of
/// one input chunk, so memory stays bounded by the largest chunk (a list's chunks are ~64 KiB or one object).
pub(crate) struct PrettyChunks<I> {
    inner: I,
    indenter: Indenter,
}

impl<I> PrettyChunks<I> {
    pub fn new(inner: I) -> Self {
        Self { inner, indenter: Indenter::default() }
    }
}

impl<I: Iterator<Item = Bytes>> Iterator for PrettyChunks<I> {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        loop {
            let chunk = self.inner.next()?;
            // Indentation adds at most a newline and two spaces per level per structural byte; half again is
            // the usual growth of Kubernetes objects.
            let mut out = Vec::with_capacity(chunk.len() + chunk.len() / 2);
            self.indenter.push(&chunk, &mut out);
            // A chunk of only whitespace (the trailing newline) produces nothing: skip empty frames.
            if !out.is_empty() {
                return Some(out.into());
            }
        }
    }
}

fn newline(out: &mut Vec<u8>, depth: usize) {
    out.push(b'\n');
    for _ in 0..depth {
        out.extend_from_slice(b"  ");
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

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

    /// Arbitrary JSON (serde_json keeps object key order with `preserve_order`, otherwise sorted: either way
    /// the compact and pretty forms of one `Value` agree on order).
    fn arb_json() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[ \\\\\"{}\\[\\],:\\n\\t]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                prop::collection::vec((any::<String>(), inner), 0..6)
                    .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Streaming in arbitrary pieces gives serde_json's pretty output (two spaces, `": "`, `{}`/`[]`) —
        /// which is Go's `MarshalIndent` layout — of the same value.
        #[test]
        fn streamed_indent_equals_serde_pretty(v in arb_json(), cuts in prop::collection::vec(any::<usize>(), 0..8)) {
            let compact = serde_json::to_vec(&v).unwrap();
            let mut at: Vec<usize> = cuts.iter().map(|c| c % (compact.len() + 1)).collect();
            at.sort_unstable();
            let mut pieces = Vec::new();
            let mut prev = 0;
            for a in at.into_iter().chain([compact.len()]) {
                pieces.push(Bytes::copy_from_slice(&compact[prev..a]));
                prev = a;
            }
            // The trailing newline of a compact response is dropped, as `MarshalIndent` has none.
            pieces.push(Bytes::from_static(b"\n"));
            let streamed: Vec<u8> = PrettyChunks::new(pieces.into_iter()).flat_map(|b| b.to_vec()).collect();
            prop_assert_eq!(String::from_utf8(streamed).unwrap(), serde_json::to_string_pretty(&v).unwrap());
        }
    }

    #[test]
    fn garbage_never_panics() {
        for input in [&b"}}}]]"[..], b"{{{", b"\"unterminated", b"", b"\\"] {
            let _ = indent(input);
        }
    }
}
