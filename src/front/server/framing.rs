//! Where event boundaries fall in a streamed response, so shutdown can end a watch between events.
//!
//! JSON watch streams are newline-delimited (one event per line). Protobuf watch streams
//! (`application/vnd.kubernetes.protobuf;stream=watch`) are length-prefixed: a 4-byte big-endian length,
//! then that many bytes of `WatchEvent`. Any other stream is treated as having no boundaries to respect.

use bytes::Bytes;

/// Tracks whether the bytes passed so far end at an event boundary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Framing {
    /// No known framing: every point is a boundary.
    Unframed,
    /// Newline-delimited: at a boundary when the last byte was `\n` (or nothing was sent).
    Lines { at_end: bool },
    /// Length-prefixed: `header` collects the 4 length bytes, then `remaining` bytes of body follow.
    LengthPrefixed { header: [u8; 4], header_len: usize, remaining: u64 },
}

impl Framing {
    /// The framing of a response with this `Content-Type`.
    pub(super) fn for_content_type(content_type: Option<&str>) -> Self {
        let Some(ct) = content_type.map(str::trim_start) else { return Self::Unframed };
        if ct.starts_with("application/vnd.kubernetes.protobuf") && ct.contains("stream=watch") {
            Self::LengthPrefixed { header: [0; 4], header_len: 0, remaining: 0 }
        } else if ct.starts_with("application/json") || ct.starts_with("text/") {
            Self::Lines { at_end: true }
        } else {
            Self::Unframed
        }
    }

    /// Accounts for `data` having been passed on.
    pub(super) fn advance(&mut self, data: &Bytes) {
        match self {
            Self::Unframed => {}
            Self::Lines { at_end } => {
                if let Some(&last) = data.last() {
                    *at_end = last == b'\n';
                }
            }
            Self::LengthPrefixed { header, header_len, remaining } => {
                let mut rest = &data[..];
                while !rest.is_empty() {
                    if *remaining > 0 {
                        let take = usize::try_from(*remaining).unwrap_or(usize::MAX).min(rest.len());
                        *remaining -= take as u64;
                        rest = &rest[take..];
                    } else {
                        header[*header_len] = rest[0];
                        *header_len += 1;
                        rest = &rest[1..];
                        if *header_len == header.len() {
                            *remaining = u64::from(u32::from_be_bytes(*header));
                            *header_len = 0;
                        }
                    }
                }
            }
        }
    }

    /// Whether the bytes passed so far end exactly between two events.
    pub(super) fn at_boundary(&self) -> bool {
        match self {
            Self::Unframed => true,
            Self::Lines { at_end } => *at_end,
            Self::LengthPrefixed { header_len, remaining, .. } => *header_len == 0 && *remaining == 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut out = u32::try_from(payload.len()).expect("small").to_be_bytes().to_vec();
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn content_types() {
        assert_eq!(Framing::for_content_type(Some("application/json")), Framing::Lines { at_end: true });
        assert!(matches!(
            Framing::for_content_type(Some("application/vnd.kubernetes.protobuf;stream=watch")),
            Framing::LengthPrefixed { .. }
        ));
        assert_eq!(Framing::for_content_type(Some("application/vnd.kubernetes.protobuf")), Framing::Unframed);
        assert_eq!(Framing::for_content_type(None), Framing::Unframed);
    }

    #[test]
    fn lines() {
        let mut f = Framing::for_content_type(Some("application/json"));
        f.advance(&Bytes::from_static(b"{\"type\":\"ADDED\"}\n{\"ty"));
        assert!(!f.at_boundary());
        f.advance(&Bytes::from_static(b""));
        assert!(!f.at_boundary(), "an empty frame changes nothing");
        f.advance(&Bytes::from_static(b"pe\":\"DELETED\"}\n"));
        assert!(f.at_boundary());
    }

    proptest! {
        /// However a stream of length-prefixed events is chunked, the tracker is at a boundary exactly at the
        /// ends of events.
        #[test]
        fn length_prefixed_boundaries(
            events in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..6),
            cuts in proptest::collection::vec(1usize..30, 1..40),
        ) {
            let stream: Vec<u8> = events.iter().flat_map(|e| frame(e)).collect();
            let mut ends = std::collections::BTreeSet::new();
            let mut pos = 0;
            for e in &events {
                pos += 4 + e.len();
                ends.insert(pos);
            }
            let mut f = Framing::for_content_type(Some("application/vnd.kubernetes.protobuf;stream=watch"));
            let (mut at, mut cut) = (0, cuts.iter().cycle());
            while at < stream.len() {
                let n = (*cut.next().expect("cycle")).min(stream.len() - at);
                f.advance(&Bytes::copy_from_slice(&stream[at..at + n]));
                at += n;
                prop_assert_eq!(f.at_boundary(), ends.contains(&at), "after {} bytes", at);
            }
        }
    }
}
