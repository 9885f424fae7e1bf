//! Answers to requests that cannot be parsed, as the apiserver's Go `net/http` server writes them.
//!
//! hyper answers a request head it cannot parse itself, before any handler runs, with a bare status line
//! and `content-length: 0`: 400 (malformed request line or header), 431 (head over its buffer or header
//! count) and 414 (a URI over 65534 bytes, `http::Uri`'s bound). It offers no hook to change that answer,
//! so the connection's writer recognises it on its way out and sends instead what a Go apiserver sends:
//!
//! ```text
//! HTTP/1.1 431 Request Header Fields Too Large        HTTP/1.1 400 Bad Request
//! Content-Type: text/plain; charset=utf-8             Content-Type: text/plain; charset=utf-8
//! Connection: close                                   Connection: close
//!
//! 431 Request Header Fields Too Large                 400 Bad Request
//! ```
//!
//! (recorded from a 1.36 apiserver: more than [`MAX_HEADER_FIELDS`] header fields, or a head over
//! `MaxHeaderBytes` + 4096, gets the 431). Go has no URI bound of its own (the URI counts toward the head);
//! kache's [`max_url_bytes`](super::Limits::max_url_bytes) answers 414 with a Status, and so does the
//! rewritten 414.
//!
//! Only hyper's own answers are rewritten: they are the only 400/414/431 heads with `content-length: 0`
//! that the service did not produce. The service counts the empty 400/414/431 responses it returns (a
//! forwarded upstream's, say) in [`EmptyErrors`], and that many such heads pass unchanged.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::codec::status::ApiError;

/// Header fields a Go apiserver accepts in one request (a 1.36 apiserver answers 431 to 501).
pub(crate) const MAX_HEADER_FIELDS: usize = 500;
/// Bytes Go's server reads beyond `MaxHeaderBytes` before it answers 431 (`initialReadLimitSize`).
pub(crate) const GO_HEAD_SLACK: usize = 4096;

/// Empty 400/414/431 responses the service produced on a connection, not yet written.
pub(super) type EmptyErrors = Arc<AtomicUsize>;

/// Whether the service's response is an empty 400/414/431, which the writer must let through.
pub(super) fn is_rewritable_status(status: u16) -> bool {
    matches!(status, 400 | 414 | 431)
}

/// Go's `http.Error`-style answer for a head it refused: plain text, then the connection closes.
pub(crate) fn go_response(status: u16) -> Bytes {
    let reason = if status == 431 { "Request Header Fields Too Large" } else { "Bad Request" };
    Bytes::from(format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n{status} {reason}"
    ))
}

/// kache's 414 for a URI hyper refused, as its own check answers (see `request::check_limits`).
fn uri_too_long_response(max_url_bytes: usize) -> Bytes {
    let err = ApiError::Unknown {
        code: 414,
        message: format!("Request URI too long: limit is {}", max_url_bytes.min(HYPER_MAX_URI_LEN)),
    };
    let body = err.to_json();
    let mut out = format!(
        "HTTP/1.1 414 URI Too Long\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out.into()
}

/// The longest URI hyper parses (`http::Uri` stores lengths in a `u16`; hyper's `MAX_URI_LEN`).
pub(crate) const HYPER_MAX_URI_LEN: usize = (u16::MAX - 1) as usize;

/// The status of a head hyper writes for a parse error (`HTTP/1.1 NNN …` with `content-length: 0`, no
/// body), if `buf` is one.
fn hyper_error_status(buf: &[u8]) -> Option<u16> {
    let rest = buf.strip_prefix(b"HTTP/1.1 ")?;
    let status: u16 = std::str::from_utf8(rest.get(..3)?).ok()?.parse().ok()?;
    if !is_rewritable_status(status) || !buf.ends_with(b"\r\n\r\n") {
        return None;
    }
    let head = &buf[..buf.len() - 2];
    let empty = head.split(|&b| b == b'\n').any(|line| line.eq_ignore_ascii_case(b"content-length: 0\r"));
    empty.then_some(status)
}

pin_project_lite::pin_project! {
    /// A connection's byte stream with hyper's parse-error answers replaced (see the module doc).
    pub(super) struct GoErrors<I> {
        #[pin]
        inner: I,
        service_empty_errors: EmptyErrors,
        max_url_bytes: usize,
        // A replacement still being written; written before anything else.
        pending: Bytes,
    }
}

impl<I> GoErrors<I> {
    pub(super) fn new(inner: I, service_empty_errors: EmptyErrors, max_url_bytes: usize) -> Self {
        Self { inner, service_empty_errors, max_url_bytes, pending: Bytes::new() }
    }
}

impl<I: AsyncWrite> GoErrors<I> {
    /// Writes what is left of a replacement.
    fn poll_pending(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut this = self.project();
        while !this.pending.is_empty() {
            let n = ready!(this.inner.as_mut().poll_write(cx, this.pending))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            this.pending.advance(n);
        }
        Poll::Ready(Ok(()))
    }

    /// Swallows `buf` and queues its replacement when it is hyper's answer to a parse error.
    fn intercept(self: Pin<&mut Self>, buf: &[u8]) -> bool {
        let this = self.project();
        let Some(status) = hyper_error_status(buf) else { return false };
        let owned =
            this.service_empty_errors.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if owned.is_ok() {
            return false;
        }
        *this.pending =
            if status == 414 { uri_too_long_response(*this.max_url_bytes) } else { go_response(status) };
        true
    }
}

impl<I: AsyncRead> AsyncRead for GoErrors<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_read(cx, buf)
    }
}

impl<I: AsyncWrite> AsyncWrite for GoErrors<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.as_mut().poll_pending(cx))?;
        if self.as_mut().intercept(buf) {
            // The replacement goes out on the next flush; hyper's bytes count as written.
            return Poll::Ready(Ok(buf.len()));
        }
        self.project().inner.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.as_mut().poll_pending(cx))?;
        // hyper's error head is a lone head buffer: the first non-empty slice, with nothing after it.
        let mut nonempty = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(first), None) = (nonempty.next(), nonempty.next())
            && self.as_mut().intercept(first)
        {
            return Poll::Ready(Ok(first.len()));
        }
        self.project().inner.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_pending(cx))?;
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_pending(cx))?;
        self.project().inner.poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt as _;

    use super::*;

    #[test]
    fn recognises_only_empty_error_heads() {
        let hyper_431 =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert_eq!(hyper_error_status(hyper_431), Some(431));
        assert_eq!(hyper_error_status(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n"), Some(400));
        assert_eq!(hyper_error_status(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"), None);
        assert_eq!(hyper_error_status(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 10\r\n\r\n"), None);
        assert_eq!(hyper_error_status(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}"), None);
    }

    #[tokio::test]
    async fn rewrites_hypers_answer_but_not_the_services() {
        let (client, mut server) = tokio::io::duplex(4096);
        let owned: EmptyErrors = Arc::new(AtomicUsize::new(1));
        let mut w = GoErrors::new(client, owned.clone(), 100);
        // The service's own empty 400 passes; hyper's next one is rewritten.
        w.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").await.expect("write");
        w.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").await.expect("write");
        w.write_all(b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n\r\n").await.expect("write");
        w.shutdown().await.expect("shutdown");
        drop(w);
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut server, &mut out).await.expect("read");
        let expected = format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n\
             HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request{}",
            String::from_utf8_lossy(&uri_too_long_response(100))
        );
        assert_eq!(out, expected);
        assert_eq!(owned.load(Ordering::Acquire), 0);
    }
}
