//! A watch response body split into newline-delimited frames.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures_util::FutureExt;
use http_body_util::BodyExt;

use super::request::ReflectError;
use crate::front::body::Body;

/// A JSON watch stream: one event per line.
///
/// Reading is cancel-safe: partial lines stay in `buf` across calls.
pub(crate) struct WatchStream {
    body: Body,
    buf: BytesMut,
    /// Bytes of `buf` already searched for a newline.
    scanned: usize,
    stall: Duration,
    max_frame: usize,
    /// The body ended (cleanly).
    ended: bool,
    /// An error met while draining ready lines, reported on the next read.
    pending: Option<ReflectError>,
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream").field("buffered", &self.buf.len()).field("ended", &self.ended).finish()
    }
}

// === impl WatchStream ===

impl WatchStream {
    pub(crate) fn new(body: Body, stall: Duration, max_frame: usize) -> Self {
        Self { body, buf: BytesMut::new(), scanned: 0, stall, max_frame, ended: false, pending: None }
    }

    /// Waits for at least one line, then takes every line already available without waiting, up to `max`.
    /// `Ok(false)` means the stream ended cleanly and `out` is empty; an error is returned only when `out` is
    /// empty (one met after some lines is kept for the next call, so those lines are handled first).
    pub(crate) async fn next_batch(
        &mut self,
        max: usize,
        out: &mut Vec<Bytes>,
    ) -> Result<bool, ReflectError> {
        match self.next_line().await? {
            Some(line) => out.push(line),
            None => return Ok(false),
        }
        while out.len() < max.max(1) {
            match self.next_line().now_or_never() {
                None | Some(Ok(None)) => break,
                Some(Ok(Some(line))) => out.push(line),
                Some(Err(e)) => {
                    self.pending = Some(e);
                    break;
                }
            }
        }
        Ok(true)
    }

    /// The next non-empty line without its newline; `None` at a clean end of the stream.
    pub(crate) async fn next_line(&mut self) -> Result<Option<Bytes>, ReflectError> {
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        loop {
            if let Some(pos) = memchr::memchr(b'\n', &self.buf[self.scanned..]) {
                let end = self.scanned + pos;
                let line = self.buf.split_to(end).freeze();
                self.buf.advance(1);
                self.scanned = 0;
                if line.iter().all(|b| b.is_ascii_whitespace()) {
                    continue;
                }
                return Ok(Some(line));
            }
            self.scanned = self.buf.len();
            if self.buf.len() > self.max_frame {
                return Err(ReflectError::FrameTooLarge(self.max_frame));
            }
            if self.ended {
                if self.buf.iter().all(|b| b.is_ascii_whitespace()) {
                    return Ok(None);
                }
                self.buf.clear();
                self.scanned = 0;
                return Err(ReflectError::Truncated);
            }
            let frame = tokio::time::timeout(self.stall, self.body.frame())
                .await
                .map_err(|_| ReflectError::Stalled(self.stall))?;
            match frame {
                None => self.ended = true,
                Some(Err(e)) => return Err(ReflectError::Stream(e)),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body::Frame;
    use http_body_util::StreamBody;
    use proptest::prelude::*;

    use super::*;
    use crate::front::body::BoxError;

    fn body_of(chunks: Vec<Vec<u8>>) -> Body {
        let frames = chunks.into_iter().map(|c| Ok::<_, BoxError>(Frame::data(Bytes::from(c))));
        StreamBody::new(futures_util::stream::iter(frames)).boxed()
    }

    fn read_all(chunks: Vec<Vec<u8>>, max: usize) -> (Vec<Bytes>, Option<String>) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
        rt.block_on(async {
            let mut s = WatchStream::new(body_of(chunks), Duration::from_secs(5), 64);
            let mut out = Vec::new();
            loop {
                match s.next_batch(max, &mut out).await {
                    Ok(true) => {}
                    Ok(false) => return (out, None),
                    Err(e) => return (out, Some(e.to_string())),
                }
            }
        })
    }

    proptest! {
        /// However the bytes are chunked, the stream yields the same non-blank lines, and a tail without a
        /// newline is reported as truncated.
        #[test]
        fn framing_is_independent_of_chunking(
            lines in proptest::collection::vec("[ -~]{0,40}", 0..12),
            cuts in proptest::collection::vec(0usize..600, 0..8),
            tail in "[a-z]{0,5}",
            max in 1usize..5,
        ) {
            let mut bytes = Vec::new();
            for l in &lines {
                bytes.extend_from_slice(l.as_bytes());
                bytes.push(b'\n');
            }
            bytes.extend_from_slice(tail.as_bytes());
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut at = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                chunks.push(bytes[at..c].to_vec());
                at = c;
            }
            let (got, err) = read_all(chunks, max);
            let want: Vec<&str> = lines.iter().map(String::as_str).filter(|l| !l.trim().is_empty()).collect();
            let got: Vec<String> = got.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(err.is_some(), !tail.is_empty());
        }
    }

    #[test]
    fn oversized_line_is_an_error() {
        let (got, err) = read_all(vec![b"ok\n".to_vec(), vec![b'x'; 100]], 10);
        assert_eq!(got, [Bytes::from_static(b"ok")]);
        assert!(err.unwrap().contains("longer than 64"));
    }
}
