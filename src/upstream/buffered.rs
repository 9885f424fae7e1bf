//! Upstream TCP connections read through a buffer, for TLS.
//!
//! rustls reads the socket 4 KiB at a time (`DeframerVecBuffer::prepare_read`, `READ_SIZE`), so a forwarded
//! 21.5 MiB list cost ~5,500 `recvfrom` calls, ~9 % of kache's CPU relaying it (`perf`). A
//! buffer under the TLS layer turns them into one read per buffer's worth of what the kernel holds; rustls
//! then takes its 4 KiB from memory. Plain-HTTP upstreams are unaffected: hyper reads with buffers at least
//! as large, and tokio's `BufReader` hands a read that large straight to the socket.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, BufReader, ReadBuf};
use tokio::net::TcpStream;

/// Bytes read from the socket at most per `read` (a few TLS records).
pub(crate) const READ_BUFFER: usize = 64 * 1024;

/// An [`HttpConnector`] whose connections are read through a [`READ_BUFFER`]-byte buffer.
#[derive(Clone)]
pub(crate) struct BufferedConnector(pub(crate) HttpConnector);

/// A TCP connection read through a buffer; writes go straight to the socket.
pub(crate) struct BufferedStream(BufReader<TcpStream>);

impl tower::Service<Uri> for BufferedConnector {
    type Response = TokioIo<BufferedStream>;
    type Error = <HttpConnector as tower::Service<Uri>>::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.0.call(uri);
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            Ok(TokioIo::new(BufferedStream(BufReader::with_capacity(READ_BUFFER, tcp))))
        })
    }
}

impl Connection for BufferedStream {
    fn connected(&self) -> Connected {
        self.0.get_ref().connected()
    }
}

impl AsyncRead for BufferedStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for BufferedStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_buffered_connection_carries_bytes_both_ways() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.expect("accept");
            let mut got = [0u8; 5];
            sock.read_exact(&mut got).await.expect("read");
            assert_eq!(&got, b"hello");
            // More than one buffer's worth, so the reader both fills its buffer and reads past it.
            let big: Vec<u8> = (0..3 * READ_BUFFER + 17).map(|i| (i % 251) as u8).collect();
            sock.write_all(&big).await.expect("write");
            big
        });
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        let mut connector = BufferedConnector(http);
        let uri: Uri = format!("http://{addr}/").parse().expect("uri");
        let conn = tower::ServiceExt::oneshot(&mut connector, uri).await.expect("connect");
        assert!(!conn.connected().is_proxied());
        let mut stream = conn.into_inner();
        stream.write_all(b"hello").await.expect("write");
        let mut got = Vec::new();
        stream.read_to_end(&mut got).await.expect("read");
        assert_eq!(got, server.await.expect("server"));
    }
}
