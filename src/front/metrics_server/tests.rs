use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;
use crate::metrics::test_source::{Fake, snapshot};
use crate::resource::Gvr;

struct Running {
    addr: SocketAddr,
    source: Arc<Fake>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start() -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("bound address");
    let source = Arc::new(Fake::default());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve_metrics(listener, Metrics::new(), source.clone(), shutdown.clone()));
    Running { addr, source, shutdown, task }
}

/// One HTTP/1.1 request; returns status, headers (lower-cased names) and body.
async fn get(addr: SocketAddr, method: &str, target: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let req = format!("{method} {target} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await.expect("write request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read response");
    let raw = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("header/body separator");
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("status code");
    (status, head.to_ascii_lowercase(), body.to_owned())
}

#[tokio::test]
async fn readyz_follows_sync_state() {
    let srv = start().await;
    srv.source.resources.lock().expect("test lock").push(snapshot(
        Gvr::new("", "v1", "pods"),
        false,
        "listing",
        0,
    ));

    let (status, head, body) = get(srv.addr, "GET", "/readyz").await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(body, "[+]ping ok\n[-]informer-sync-pods failed: reason withheld\nreadyz check failed\n");
    assert!(head.contains("content-type: text/plain; charset=utf-8"), "{head}");
    assert!(head.contains("x-content-type-options: nosniff"), "{head}");

    let (status, _, body) = get(srv.addr, "GET", "/readyz/informer-sync-pods").await;
    assert_eq!((status, body.as_str()), (500, "internal server error: v1/pods is listing, not synced yet\n"));

    srv.source.resources.lock().expect("test lock")[0].synced = true;
    let (status, _, body) = get(srv.addr, "GET", "/readyz").await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    let (status, _, body) = get(srv.addr, "GET", "/readyz?verbose").await;
    assert_eq!((status, body.as_str()), (200, "[+]ping ok\n[+]informer-sync-pods ok\nreadyz check passed\n"));

    srv.shutdown.cancel();
    srv.task.await.expect("server task").expect("server result");
}

#[tokio::test]
async fn liveness_ignores_resources() {
    let srv = start().await;
    srv.source.resources.lock().expect("test lock").push(snapshot(
        Gvr::new("", "v1", "pods"),
        false,
        "backoff",
        0,
    ));
    for path in ["/livez", "/healthz", "/livez/ping"] {
        let (status, _, body) = get(srv.addr, "GET", path).await;
        assert_eq!((status, body.as_str()), (200, "ok"), "{path}");
    }
    let (status, _, body) = get(srv.addr, "GET", "/healthz?verbose").await;
    assert_eq!((status, body.as_str()), (200, "[+]ping ok\nhealthz check passed\n"));
    srv.shutdown.cancel();
    srv.task.await.expect("server task").expect("server result");
}

#[tokio::test]
async fn metrics_refresh_gauges_before_rendering() {
    let srv = start().await;
    let gvr = Gvr::new("server.example.com", "v1", "gadgets");
    srv.source.resources.lock().expect("test lock").push(snapshot(gvr, true, "watching", 5));
    let (status, head, body) = get(srv.addr, "GET", "/metrics").await;
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/plain; version=0.0.4; charset=utf-8"), "{head}");
    assert!(
        body.contains("kache_store_objects{group=\"server.example.com\",resource=\"gadgets\"} 5"),
        "{body}"
    );
    assert!(
        body.contains("# TYPE apiserver_request_total counter") || !body.contains("apiserver_request_total{")
    );
    srv.shutdown.cancel();
    srv.task.await.expect("server task").expect("server result");
}

#[tokio::test]
async fn unknown_paths_and_methods_are_refused() {
    let srv = start().await;
    let (status, _, body) = get(srv.addr, "GET", "/nope").await;
    assert_eq!((status, body.as_str()), (404, "404 page not found\n"));
    let (status, _, _) = get(srv.addr, "GET", "/readyz/etcd").await;
    assert_eq!(status, 404);
    let (status, _, _) = get(srv.addr, "POST", "/metrics").await;
    assert_eq!(status, 405);
    srv.shutdown.cancel();
    srv.task.await.expect("server task").expect("server result");
}

#[tokio::test]
async fn large_expositions_are_gzipped_when_accepted() {
    use http_body_util::BodyExt;
    use std::io::Read;

    let text = "kache_test_series{resource=\"x\"} 1\n".repeat(8192);
    let plain = exposition(text.clone(), "");
    assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
    let zipped = exposition(text.clone(), "gzip, deflate");
    assert_eq!(zipped.headers().get(header::CONTENT_ENCODING).map(|v| v.as_bytes()), Some(&b"gzip"[..]));
    let bytes = zipped.into_body().collect().await.expect("full body").to_bytes();
    assert!(bytes.len() < text.len() / 4, "compressed {} of {}", bytes.len(), text.len());
    let mut unzipped = String::new();
    flate2::read::GzDecoder::new(&bytes[..]).read_to_string(&mut unzipped).expect("valid gzip");
    assert_eq!(unzipped, text);
    // Small expositions are sent as they are, like the apiserver's small responses.
    let small = exposition("a 1\n".to_owned(), "gzip");
    assert!(small.headers().get(header::CONTENT_ENCODING).is_none());
}
