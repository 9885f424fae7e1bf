//! A watch response body split into newline-delimited frames.

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures_util::FutureExt;
use http_body_util::BodyExt;

use super::request::ReflectError;
use crate::body::Body;

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
