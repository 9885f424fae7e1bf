//! kache's front forwarding everything to an upstream, over real sockets.
//!
//! The upstream here is a small scripted hyper server (paths below), so each property is tested on its
//! own: header fidelity both ways, streaming with bounded memory, upgrades, limits, an unreachable upstream.
//!
//! Upstream paths:
//! - `/echo...` and any `?watch=1`: answers JSON with the method, path and request headers it received; sets response headers.
//! - `/big?mb=N`: streams N MiB of `x` in 64 KiB chunks.
//! - `/upload`: reads the request body and answers how many bytes it got.
//! - `/hold`: answers once the test releases it.
//! - `/gzip`: a gzip-encoded body, as the apiserver sends lists over 128 KiB.
//! - POST `/api/v1/namespaces/{ns}/pods`: 201 with an object at resourceVersion 123.
//! - any request with `Upgrade`: 101, then echoes every byte back, prefixed by a greeting.

use crate::common;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kache::forward::{Forwarder, WriteTracker};
use kache::front::body::{self, Body, BoxError};
use kache::front::server::{BoxFuture, ConnInfo, Handler, Limits, TlsConfig, serve};
use kache::resource::Gvr;
use kache::upstream::{Credentials, H2_POOL_SIZE, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};

const CHUNK: usize = 64 << 10;
const GREETING: &[u8] = b"upstream-hello\n";

// --- the scripted upstream ---

async fn upstream_handler(
    mut req: Request<Incoming>,
    hold: Arc<Notify>,
) -> Result<Response<Body>, Infallible> {
    if req.headers().contains_key(http::header::UPGRADE) {
        let on_upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            let Ok(upgraded) = on_upgrade.await else { return };
            let mut io = TokioIo::new(upgraded);
            let _ = io.write_all(GREETING).await;
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = io.read(&mut buf).await {
                if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        });
        let mut resp = Response::new(body::empty());
        *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let h = resp.headers_mut();
        h.insert("connection", "Upgrade".parse().expect("valid"));
        h.insert("upgrade", req.headers()["upgrade"].clone());
        for name in ["x-stream-protocol-version", "sec-websocket-protocol"] {
            if let Some(v) = req.headers().get(name) {
                h.insert(name, v.clone());
            }
        }
        if req.headers().contains_key("sec-websocket-key") {
            h.insert("sec-websocket-accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".parse().expect("valid"));
        }
        return Ok(resp);
    }
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let resp = match (req.method().clone(), path.as_str()) {
        (_, p) if p.starts_with("/echo") || query.contains("watch=1") => {
            let headers: serde_json::Map<String, serde_json::Value> = req
                .headers()
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into()))
                .collect();
            let body = serde_json::json!({"method": req.method().as_str(), "path": p, "query": query, "headers": headers});
            let mut resp = Response::new(body::full(body.to_string()));
            let h = resp.headers_mut();
            h.insert("content-type", "application/json".parse().expect("valid"));
            h.insert("audit-id", "8a8c6d53-6f6e-4b8c-9a59-1c0e2f5b1f00".parse().expect("valid"));
            h.append("warning", "299 - \"first warning\"".parse().expect("valid"));
            h.append("warning", "299 - \"second warning\"".parse().expect("valid"));
            h.insert("retry-after", "7".parse().expect("valid"));
            h.insert("connection", "keep-alive, x-hop".parse().expect("valid"));
            h.insert("x-hop", "must not cross".parse().expect("valid"));
            h.insert("keep-alive", "timeout=5".parse().expect("valid"));
            resp
        }
        (_, "/big") => {
            let mb: usize = query.strip_prefix("mb=").and_then(|m| m.parse().ok()).unwrap_or(1);
            let chunk = Bytes::from(vec![b'x'; CHUNK]);
            let frames =
                (0..mb * (1 << 20) / CHUNK).map(move |_| Ok::<_, BoxError>(Frame::data(chunk.clone())));
            Response::new(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(frames))))
        }
        (_, "/upload") => {
            let mut n = 0usize;
            let mut body = req.into_body();
            while let Some(Ok(frame)) = body.frame().await {
                n += frame.data_ref().map_or(0, Bytes::len);
            }
            Response::new(body::full(n.to_string()))
        }
        (_, "/hold") => {
            hold.notified().await;
            Response::new(body::full("released"))
        }
        (_, "/gzip") => {
            let mut resp = Response::new(body::full(gzipped()));
            resp.headers_mut().insert("content-encoding", "gzip".parse().expect("valid"));
            resp.headers_mut().insert("vary", "Accept-Encoding".parse().expect("valid"));
            resp
        }
        (Method::POST, p) if p.starts_with("/api/v1/namespaces/") && p.ends_with("/pods") => {
            let mut resp = Response::new(body::full(
                r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"a","resourceVersion":"123"}}"#,
            ));
            *resp.status_mut() = StatusCode::CREATED;
            resp.headers_mut().insert("content-type", "application/json".parse().expect("valid"));
            resp
        }
        _ => {
            let mut resp = Response::new(body::full(r#"{"kind":"Status","code":404}"#));
            *resp.status_mut() = StatusCode::NOT_FOUND;
            resp
        }
    };
    Ok(resp)
}

fn gzipped() -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&b"{\"kind\":\"PodList\"}".repeat(100)).expect("in-memory write");
    enc.finish().expect("in-memory gzip")
}

struct FakeUpstream {
    addr: SocketAddr,
    hold: Arc<Notify>,
}

async fn fake_upstream() -> FakeUpstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let hold = Arc::new(Notify::new());
    let hold2 = hold.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let hold = hold2.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| upstream_handler(req, hold.clone()));
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    FakeUpstream { addr, hold }
}

// --- kache in front ---

struct Kache {
    addr: SocketAddr,
    writes: Arc<WriteTracker>,
    metrics: kache::metrics::Metrics,
    _stop: oneshot::Sender<()>,
}

impl Kache {
    /// This front's metrics (the forwarder and the server record into the same instance).
    fn metrics(&self) -> &kache::metrics::Metrics {
        &self.metrics
    }
}

async fn kache(upstream: &str, limits: Limits) -> Kache {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind kache");
    let addr = listener.local_addr().expect("addr");
    let writes = Arc::new(WriteTracker::new());
    let metrics = kache::metrics::Metrics::new();
    let forwarder = Arc::new(
        Forwarder::new(Upstream::plain(upstream).expect("valid URL"), writes.clone(), limits.max_in_flight)
            .with_metrics(metrics.clone()),
    );
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, None, forwarder, limits, metrics.clone(), async {
        let _ = stopped.await;
    }));
    Kache { addr, writes, metrics, _stop: stop }
}

async fn setup(limits: Limits) -> (FakeUpstream, Kache) {
    let up = fake_upstream().await;
    let k = kache(&format!("http://{}", up.addr), limits).await;
    (up, k)
}

type H1 = hyper::client::conn::http1::SendRequest<Body>;

async fn h1(addr: SocketAddr) -> H1 {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("handshake");
    tokio::spawn(conn);
    sender
}

async fn collect(resp: Response<Incoming>) -> (StatusCode, HeaderMap, Bytes) {
    let (parts, body) = resp.into_parts();
    (parts.status, parts.headers, body.collect().await.expect("body").to_bytes())
}

fn request(method: Method, uri: &str) -> http::request::Builder {
    Request::builder().method(method).uri(uri).header("host", "kache.test")
}

// --- tests ---

#[tokio::test]
async fn headers_cross_both_ways_except_hop_by_hop() {
    let (_up, k) = setup(Limits::default()).await;
    let req = request(Method::GET, "/echo/api/v1/pods?limit=5&labelSelector=a%3Db")
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io, application/json")
        .header("accept-encoding", "gzip")
        .header("authorization", "Bearer client-token")
        .header("impersonate-user", "jane")
        .header("impersonate-group", "devs")
        .header("user-agent", "kubectl/v1.32.4")
        .header("audit-id", "client-audit")
        .header("connection", "keep-alive, x-client-hop")
        .header("x-client-hop", "gone")
        .header("te", "trailers")
        .body(body::empty())
        .expect("valid");
    let (status, headers, body) = collect(h1(k.addr).await.send_request(req).await.expect("response")).await;
    assert_eq!(status, StatusCode::OK);
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(echo["path"], "/echo/api/v1/pods");
    assert_eq!(echo["query"], "limit=5&labelSelector=a%3Db");
    let sent = &echo["headers"];
    assert_eq!(sent["accept"], "application/json;as=Table;v=v1;g=meta.k8s.io, application/json");
    assert_eq!(sent["accept-encoding"], "gzip");
    // Plain upstream: kache has no credentials of its own, the client's pass through.
    assert_eq!(sent["authorization"], "Bearer client-token");
    assert_eq!(sent["impersonate-user"], "jane");
    assert_eq!(sent["impersonate-group"], "devs");
    assert_eq!(sent["user-agent"], "kubectl/v1.32.4");
    assert_eq!(sent["audit-id"], "client-audit");
    assert_eq!(sent["x-forwarded-for"], "127.0.0.1");
    for hop in ["x-client-hop", "te"] {
        assert!(sent.get(hop).is_none(), "{hop} was forwarded: {sent}");
    }

    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["audit-id"], "8a8c6d53-6f6e-4b8c-9a59-1c0e2f5b1f00");
    assert_eq!(headers["retry-after"], "7");
    let warnings: Vec<_> = headers.get_all("warning").iter().collect();
    assert_eq!(warnings, ["299 - \"first warning\"", "299 - \"second warning\""]);
    for hop in ["x-hop", "keep-alive"] {
        assert!(!headers.contains_key(hop), "{hop} crossed back: {headers:?}");
    }
}

#[tokio::test]
async fn gzip_passes_through_untouched() {
    let (_up, k) = setup(Limits::default()).await;
    let req =
        request(Method::GET, "/gzip").header("accept-encoding", "gzip").body(body::empty()).expect("valid");
    let (status, headers, body) = collect(h1(k.addr).await.send_request(req).await.expect("response")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-encoding"], "gzip");
    assert_eq!(headers["vary"], "Accept-Encoding");
    assert_eq!(&body[..], &gzipped()[..]);
}

#[tokio::test]
async fn upstream_errors_pass_through_as_they_are() {
    let (_up, k) = setup(Limits::default()).await;
    let req = request(Method::GET, "/nowhere").body(body::empty()).expect("valid");
    let (status, _, body) = collect(h1(k.addr).await.send_request(req).await.expect("response")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(&body[..], br#"{"kind":"Status","code":404}"#);
}

#[tokio::test]
async fn successful_writes_record_their_resource_version() {
    let (_up, k) = setup(Limits::default()).await;
    let pods = Gvr::new("", "v1", "pods");
    assert_eq!(k.writes.last_write(&pods), 0);
    let req = request(Method::POST, "/api/v1/namespaces/a/pods")
        .header("content-type", "application/json")
        .body(body::full(r#"{"metadata":{"name":"p"}}"#))
        .expect("valid");
    let (status, _, body) = collect(h1(k.addr).await.send_request(req).await.expect("response")).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(body.starts_with(br#"{"kind":"Pod""#), "the body still reaches the client");
    assert_eq!(k.writes.last_write(&pods), 123);
    // A failed write records nothing.
    let req = request(Method::POST, "/api/v1/nodes").body(body::full("{}")).expect("valid");
    let (status, _, _) = collect(h1(k.addr).await.send_request(req).await.expect("response")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(k.writes.last_write(&Gvr::new("", "v1", "nodes")), 0);
}

#[tokio::test]
async fn unreachable_upstream_is_a_503_status() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let k = kache(&format!("http://127.0.0.1:{port}"), Limits::default()).await;
    let req = request(Method::GET, "/api/v1/pods").body(body::empty()).expect("valid");
    let (status, headers, body) = collect(h1(k.addr).await.send_request(req).await.expect("response")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["retry-after"], "1");
    let status: serde_json::Value = serde_json::from_slice(&body).expect("a Status");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "ServiceUnavailable");
    assert_eq!(status["code"], 503);
}

/// The value of one exact series in a Prometheus rendering (0 when absent).
fn series(text: &str, series: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok()).unwrap_or(0.0)
}

#[tokio::test]
async fn concurrent_forwarded_requests_are_bounded_with_429() {
    let (up, k) = setup(Limits { max_in_flight: 1, ..Limits::default() }).await;
    let metrics = k.metrics().clone();
    let rejections = r#"kache_limit_rejections_total{limit="inflight"}"#;
    let before = series(&metrics.render(), rejections);
    let mut held = h1(k.addr).await;
    let first = tokio::spawn(async move {
        collect(
            held.send_request(request(Method::GET, "/hold").body(body::empty()).expect("valid"))
                .await
                .expect("response"),
        )
        .await
    });
    // Retry until the first request holds the only slot (it is in flight once the upstream blocks on it).
    let mut c = h1(k.addr).await;
    let (status, headers, body) = loop {
        let r = collect(
            c.send_request(request(Method::GET, "/echo").body(body::empty()).expect("valid"))
                .await
                .expect("response"),
        )
        .await;
        if r.0 == StatusCode::TOO_MANY_REQUESTS {
            break r;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(
        &body[..],
        br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too many requests, please try again later.","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429}
"#
    );
    // Watches (long-running) are not counted against the bound.
    let (status, _, _) = collect(
        c.send_request(request(Method::GET, "/api/v1/pods?watch=1").body(body::empty()).expect("valid"))
            .await
            .expect("response"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "a watch passes while the slot is taken");
    assert!(series(&metrics.render(), rejections) > before, "the rejection is counted");
    up.hold.notify_one();
    assert_eq!(first.await.expect("joined").0, StatusCode::OK);
    // The slot is free again once the first response is done.
    let (status, _, _) = collect(
        c.send_request(request(Method::GET, "/echo").body(body::empty()).expect("valid"))
            .await
            .expect("response"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn streamed_upload_over_the_body_limit_is_413() {
    let (_up, k) = setup(Limits { max_body_bytes: 1 << 20, ..Limits::default() }).await;
    let chunk = Bytes::from(vec![b'y'; CHUNK]);
    let frames = (0..32).map(move |_| Ok::<_, BoxError>(Frame::data(chunk.clone())));
    let req = request(Method::POST, "/upload")
        .body(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(frames))))
        .expect("valid");
    let (status, _, body) = collect(h1(k.addr).await.send_request(req).await.expect("response")).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{}", String::from_utf8_lossy(&body));
    assert!(body.ends_with(
        br#""message":"Request entity too large: limit is 1048576","reason":"RequestEntityTooLarge","code":413}
"#
    ));
}

/// Peak resident memory of this process (VmHWM), in bytes.
fn peak_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM line");
    let kb: usize = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a number");
    kb * 1024
}

/// 100 MiB down and 64 MiB up through kache with bounded memory: the whole test process (upstream, kache
/// and client together) must not grow by anything near the body sizes.
///
/// Peak RSS is per process, so the measurement runs alone in a child process (`common::alone`) where no
/// other test's memory counts.
#[test]
fn large_bodies_stream_with_bounded_memory() {
    let stderr =
        common::alone::run_in_own_process("forward::large_bodies_stream_with_bounded_memory_in_own_process");
    eprintln!("{}", stderr.lines().filter(|l| l.contains("RSS")).collect::<Vec<_>>().join("\n"));
}

#[tokio::test]
#[ignore = "run by large_bodies_stream_with_bounded_memory in its own process"]
async fn large_bodies_stream_with_bounded_memory_in_own_process() {
    const DOWN_MB: usize = 100;
    const UP_MB: usize = 64;
    const MAX_GROWTH: usize = 32 << 20;
    let (_up, k) = setup(Limits { max_body_bytes: 1 << 30, ..Limits::default() }).await;
    let before = peak_rss();

    let mut c = h1(k.addr).await;
    let resp = c
        .send_request(request(Method::GET, &format!("/big?mb={DOWN_MB}")).body(body::empty()).expect("valid"))
        .await
        .expect("response");
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut received = 0usize;
    while let Some(frame) = body.frame().await {
        received += frame.expect("no error").data_ref().map_or(0, Bytes::len);
    }
    assert_eq!(received, DOWN_MB << 20);

    let chunk = Bytes::from(vec![b'y'; CHUNK]);
    let frames = (0..(UP_MB << 20) / CHUNK).map(move |_| Ok::<_, BoxError>(Frame::data(chunk.clone())));
    let req = request(Method::POST, "/upload")
        .body(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(frames))))
        .expect("valid");
    let (status, _, body) = collect(c.send_request(req).await.expect("response")).await;
    assert_eq!(
        (status, String::from_utf8_lossy(&body).into_owned()),
        (StatusCode::OK, (UP_MB << 20).to_string())
    );

    let growth = peak_rss().saturating_sub(before);
    eprintln!("peak RSS growth while streaming {DOWN_MB} MiB down and {UP_MB} MiB up: {} KiB", growth >> 10);
    assert!(growth < MAX_GROWTH, "peak RSS grew by {growth} bytes");
}

#[tokio::test]
async fn h2c_clients_multiplex_through_kache() {
    let (up, k) = setup(Limits::default()).await;
    let stream = TcpStream::connect(k.addr).await.expect("connect");
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.expect("h2c");
    tokio::spawn(conn);
    // A held request stays in flight while others complete on the same connection.
    let mut s = sender.clone();
    let held = tokio::spawn(async move {
        collect(
            s.send_request(request(Method::GET, "http://kache/hold").body(body::empty()).expect("valid"))
                .await
                .expect("response"),
        )
        .await
    });
    let requests = (0..16).map(|i| {
        let mut s = sender.clone();
        async move {
            let req =
                request(Method::GET, &format!("http://kache/echo/{i}")).body(body::empty()).expect("valid");
            collect(s.send_request(req).await.expect("response")).await
        }
    });
    for (i, (status, _, body)) in futures_util::future::join_all(requests).await.into_iter().enumerate() {
        assert_eq!(status, StatusCode::OK);
        let echo: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(echo["path"], format!("/echo/{i}"));
    }
    up.hold.notify_one();
    assert_eq!(held.await.expect("joined").0, StatusCode::OK);
}

/// Sends an upgrade request on a raw connection, returns the response head and the connection.
async fn raw_upgrade(addr: SocketAddr, headers: &[(&str, &str)]) -> (String, TcpStream) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut head = String::from(
        "POST /api/v1/namespaces/a/pods/p/exec?command=sh&stdin=true HTTP/1.1\r\nHost: kache\r\n",
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.expect("write head");
    let mut resp = Vec::new();
    let mut byte = [0u8; 1];
    while !resp.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).await.expect("read head");
        assert_eq!(n, 1, "connection closed before the response head: {}", String::from_utf8_lossy(&resp));
        resp.push(byte[0]);
    }
    (String::from_utf8(resp).expect("ascii head"), stream)
}

async fn assert_bidirectional(mut stream: TcpStream) {
    // Upstream → client without any client bytes first.
    let mut greeting = vec![0u8; GREETING.len()];
    stream.read_exact(&mut greeting).await.expect("greeting");
    assert_eq!(greeting, GREETING);
    for round in 0..5 {
        let msg = format!("round {round}: {}\n", "z".repeat(round * 1000));
        stream.write_all(msg.as_bytes()).await.expect("write");
        let mut echoed = vec![0u8; msg.len()];
        stream.read_exact(&mut echoed).await.expect("echo");
        assert_eq!(echoed, msg.as_bytes());
    }
    // Closing our write side ends the tunnel: the upstream's echo loop ends and closes, we see EOF.
    stream.shutdown().await.expect("shutdown write");
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).await.expect("eof");
    assert!(rest.is_empty());
}

#[tokio::test]
async fn spdy_style_upgrade_streams_both_ways() {
    let (_up, k) = setup(Limits { request_timeout: Duration::from_millis(200), ..Limits::default() }).await;
    let (head, stream) = raw_upgrade(
        k.addr,
        &[
            ("Connection", "Upgrade"),
            ("Upgrade", "SPDY/3.1"),
            ("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
        ],
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("upgrade: spdy/3.1"), "{head}");
    assert!(lower.contains("x-stream-protocol-version: v4.channel.k8s.io"), "{head}");
    assert_bidirectional(stream).await;
}

#[tokio::test]
async fn websocket_style_upgrade_streams_both_ways() {
    let (_up, k) = setup(Limits::default()).await;
    let (head, stream) = raw_upgrade(
        k.addr,
        &[
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Protocol", "v5.channel.k8s.io"),
        ],
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("upgrade: websocket"), "{head}");
    assert!(lower.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="), "{head}");
    assert!(lower.contains("sec-websocket-protocol: v5.channel.k8s.io"), "{head}");
    assert_bidirectional(stream).await;
}

#[tokio::test]
async fn discovery_and_unknown_paths_are_forwarded() {
    let (_up, k) = setup(Limits::default()).await;
    let mut c = h1(k.addr).await;
    for path in ["/echo/openapi/v2", "/echo/apis", "/echo/version", "/echo/some/unknown/path"] {
        let (status, _, body) = collect(
            c.send_request(
                request(Method::GET, path)
                    .body(Full::new(Bytes::new()).map_err(|e| match e {}).boxed())
                    .expect("valid"),
            )
            .await
            .expect("response"),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{path}");
        let echo: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(echo["path"], path);
    }
}

// --- a TLS upstream reached through a kubeconfig ---

/// A CA and a server certificate for `localhost` / 127.0.0.1 signed by it, made with the openssl CLI (no
/// certificate is committed). Returns (CA cert, server cert, server key).
fn certificates(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let p = |name: &str| dir.join(name).to_str().expect("utf-8 temp path").to_owned();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-days", "1", "-subj", "/CN=test-ca", "-keyout", &p("ca.key"), "-out", &p("ca.pem")],
        ]
        .concat(),
    );
    openssl(
        &[&["req"][..], &ec, &["-subj", "/CN=localhost", "-keyout", &p("key.pem"), "-out", &p("csr.pem")]]
            .concat(),
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .expect("write ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        &p("csr.pem"),
        "-CA",
        &p("ca.pem"),
        "-CAkey",
        &p("ca.key"),
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        &p("ext.cnf"),
        "-out",
        &p("cert.pem"),
    ]);
    (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"))
}

/// Answers with what it saw: HTTP version, client port, TLS, path and headers.
struct TlsEcho;

impl Handler for TlsEcho {
    fn handle(&self, req: Request<Body>) -> BoxFuture<'_, Response<Body>> {
        Box::pin(async move {
            let info = req.extensions().get::<ConnInfo>().cloned().expect("ConnInfo");
            let headers: serde_json::Map<String, serde_json::Value> = req
                .headers()
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into()))
                .collect();
            let body = serde_json::json!({
                "version": format!("{:?}", req.version()),
                "port": info.peer.port(),
                "tls": info.tls,
                "path": req.uri().path(),
                "headers": headers,
            });
            Response::new(body::full(body.to_string()))
        })
    }
}

struct TlsUpstream {
    kubeconfig: std::path::PathBuf,
    _dir: tempfile::TempDir,
    _stop: oneshot::Sender<()>,
}

async fn tls_upstream() -> TlsUpstream {
    use base64::Engine;
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = certificates(dir.path());
    let tls = TlsConfig::from_pem_files(&cert, &key).expect("valid cert and key");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(
        listener,
        Some(tls),
        Arc::new(TlsEcho),
        Limits::default(),
        Default::default(),
        async {
            let _ = stopped.await;
        },
    ));
    let ca = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&ca).expect("CA cert"));
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://{addr}\n    \
             certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n    token: kache-token\ncontexts:\n- \
             name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
        ),
    )
    .expect("write kubeconfig");
    TlsUpstream { kubeconfig, _dir: dir, _stop: stop }
}

async fn json_of(resp: Response<Incoming>) -> serde_json::Value {
    serde_json::from_slice(&resp.into_body().collect().await.expect("body").to_bytes()).expect("json")
}

#[tokio::test]
async fn kubeconfig_upstream_uses_h2_pool_tls_and_its_own_token() {
    let up = tls_upstream().await;
    let upstream = Upstream::from_kubeconfig(Some(&up.kubeconfig)).await.expect("kubeconfig loads");
    assert_eq!(upstream.credentials(), Credentials::Own);

    // Gets and lists go over HTTP/1.1 (a Go apiserver sends large bodies faster that way).
    let req = Request::builder().uri("/api/v1/pods?limit=5").body(body::empty()).expect("valid");
    let seen = json_of(upstream.send(req).await.expect("response")).await;
    assert_eq!(seen["version"], "HTTP/1.1", "{seen}");
    assert_eq!(seen["headers"]["authorization"], "Bearer kache-token");

    // Watches are spread over the HTTP/2 pool.
    let mut ports = std::collections::BTreeSet::new();
    for i in 0..(2 * H2_POOL_SIZE) {
        let req =
            Request::builder().uri(format!("/api/v1/pods?watch=1&i={i}")).body(body::empty()).expect("valid");
        let seen = json_of(upstream.send(req).await.expect("response")).await;
        assert_eq!(seen["version"], "HTTP/2.0", "{seen}");
        assert_eq!(seen["tls"], true);
        assert_eq!(seen["headers"]["authorization"], "Bearer kache-token");
        ports.insert(seen["port"].as_u64().expect("port"));
    }
    assert_eq!(ports.len(), H2_POOL_SIZE, "requests are spread over {H2_POOL_SIZE} connections: {ports:?}");

    // Upgrades go over HTTP/1.1 (ALPN http/1.1 only).
    let req = Request::builder().uri("/api/v1/namespaces/a/pods/p/exec").body(body::empty()).expect("valid");
    let seen = json_of(upstream.send_upgrade(req).await.expect("response")).await;
    assert_eq!(seen["version"], "HTTP/1.1", "{seen}");
    assert_eq!(seen["headers"]["authorization"], "Bearer kache-token");
}

#[tokio::test]
async fn with_own_credentials_client_identity_is_not_forwarded() {
    let up = tls_upstream().await;
    let upstream = Upstream::from_kubeconfig(Some(&up.kubeconfig)).await.expect("kubeconfig loads");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let forwarder = Arc::new(Forwarder::new(upstream, Arc::new(WriteTracker::new()), 10));
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, None, forwarder, Limits::default(), Default::default(), async {
        let _ = stopped.await;
    }));
    let req = request(Method::GET, "/api/v1/pods")
        .header("authorization", "Bearer client-token")
        .header("impersonate-user", "admin")
        .header("impersonate-group", "system:masters")
        .header("accept", "application/json")
        .body(body::empty())
        .expect("valid");
    let seen = json_of(h1(addr).await.send_request(req).await.expect("response")).await;
    let headers = &seen["headers"];
    assert_eq!(headers["authorization"], "Bearer kache-token", "{seen}");
    assert!(
        headers.get("impersonate-user").is_none() && headers.get("impersonate-group").is_none(),
        "{seen}"
    );
    assert_eq!(headers["accept"], "application/json");

    // Trusted code (the auth layer) can forward as the authenticated end user.
    let mut identity = HeaderMap::new();
    identity.insert("impersonate-user", "jane".parse().expect("valid"));
    let mut req = request(Method::GET, "/api/v1/pods")
        .header("impersonate-user", "admin")
        .body(body::empty())
        .expect("valid");
    req.extensions_mut().insert(kache::forward::UpstreamIdentity(identity));
    let forwarder = Forwarder::new(
        Upstream::from_kubeconfig(Some(&up.kubeconfig)).await.expect("kubeconfig loads"),
        Arc::new(WriteTracker::new()),
        10,
    );
    let resp = forwarder.forward(req).await;
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    let seen: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(seen["headers"]["impersonate-user"], "jane", "{seen}");
}

// --- against kache-sim: the real upstream model ---

struct SimFront {
    sim: kache_sim::sim::SimHandle,
    kache: Kache,
}

async fn sim_front() -> SimFront {
    let sim = kache_sim::sim::Sim::builder().start().await.expect("sim starts");
    let kache = kache(&sim.url(), Limits::default()).await;
    SimFront { sim, kache }
}

/// Bytes written on an upgraded stream come back (the sim's echo), in several rounds, both directions.
async fn assert_echo(mut stream: TcpStream) {
    for round in 0..5 {
        let msg = format!("round {round}: {}\n", "q".repeat(round * 3000));
        stream.write_all(msg.as_bytes()).await.expect("write");
        let mut echoed = vec![0u8; msg.len()];
        stream.read_exact(&mut echoed).await.expect("echo");
        assert_eq!(echoed, msg.as_bytes());
    }
}

async fn raw_request_head(
    addr: SocketAddr,
    request_line: &str,
    headers: &[(&str, &str)],
) -> (String, TcpStream) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut head = format!("{request_line}\r\nHost: kache\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.expect("write head");
    let mut resp = Vec::new();
    let mut byte = [0u8; 1];
    while !resp.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).await.expect("read head");
        assert_eq!(n, 1, "connection closed before the response head: {}", String::from_utf8_lossy(&resp));
        resp.push(byte[0]);
    }
    (String::from_utf8(resp).expect("ascii head"), stream)
}

#[tokio::test]
async fn sim_echo_upgrade_spdy_and_websocket_through_kache() {
    let f = sim_front().await;
    let spdy = [
        ("Connection", "Upgrade"),
        ("Upgrade", "SPDY/3.1"),
        ("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
    ];
    let ws = [
        ("Connection", "Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Protocol", "v5.channel.k8s.io"),
    ];
    for (headers, proto) in [(&spdy[..], "spdy/3.1"), (&ws[..], "websocket")] {
        let (head, stream) = raw_request_head(f.kache.addr, "GET /sim/echo-upgrade HTTP/1.1", headers).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        assert!(head.to_ascii_lowercase().contains(&format!("upgrade: {proto}")), "{head}");
        assert_echo(stream).await;
    }
    // Without an upgrade header the sim's 400 passes through as it is.
    let (head, _) = raw_request_head(f.kache.addr, "GET /sim/echo-upgrade HTTP/1.1", &[]).await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
}

#[tokio::test]
async fn sim_writes_through_kache_record_resource_versions() {
    let f = sim_front().await;
    let mut c = h1(f.kache.addr).await;
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"w1"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#;
    let req = request(Method::POST, "/api/v1/namespaces/default/pods")
        .header("content-type", "application/json")
        .body(body::full(pod))
        .expect("valid");
    let (status, _, body) = collect(c.send_request(req).await.expect("response")).await;
    assert_eq!(status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&body));
    let created: serde_json::Value = serde_json::from_slice(&body).expect("json");
    let rv: u64 =
        created["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).expect("an rv");
    let pods = Gvr::new("", "v1", "pods");
    assert_eq!(f.kache.writes.last_write(&pods), rv);

    let req = request(Method::PATCH, "/api/v1/namespaces/default/pods/w1")
        .header("content-type", "application/merge-patch+json")
        .body(body::full(r#"{"metadata":{"labels":{"a":"b"}}}"#))
        .expect("valid");
    let (status, _, body) = collect(c.send_request(req).await.expect("response")).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let patched: serde_json::Value = serde_json::from_slice(&body).expect("json");
    let rv2: u64 =
        patched["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).expect("an rv");
    assert!(rv2 > rv);
    assert_eq!(f.kache.writes.last_write(&pods), rv2);
    assert_eq!(f.sim.get("pods", Some("default"), "w1").expect("in the sim")["metadata"]["labels"]["a"], "b");
}

#[tokio::test]
async fn sim_followed_logs_stream_through_kache() {
    let f = sim_front().await;
    f.sim
        .create("pods", Some("default"), serde_json::json!({"metadata": {"name": "logger"}}))
        .expect("pod created");
    let mut c = h1(f.kache.addr).await;
    let req = request(Method::GET, "/api/v1/namespaces/default/pods/logger/log?follow=true")
        .body(body::empty())
        .expect("valid");
    let resp = c.send_request(req).await.expect("response");
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut text = String::new();
    // The fixed lines, then a line the sim produces later: the stream is passed on as it is produced.
    while !text.contains("log line 4 from pod logger\n") {
        let frame = body.frame().await.expect("the stream stays open").expect("no error");
        text.push_str(&String::from_utf8_lossy(&frame.into_data().expect("data")));
    }
    assert!(text.starts_with("log line 1 from pod logger\n"), "{text}");
}

/// Runs kubectl against kache; returns (success, stdout, stderr).
async fn kubectl(
    kubeconfig: &std::path::Path,
    cache: &std::path::Path,
    args: &[&str],
) -> (bool, String, String) {
    let mut cmd = std::process::Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(kubeconfig).arg("--cache-dir").arg(cache).args(args);
    cmd.env_remove("KUBECONFIG");
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.expect("joined").expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_through_kache() {
    let f = sim_front().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: http://{}\nusers:\n- name: u\n  \
             user: {{}}\ncontexts:\n- name: k\n  context: {{cluster: k, user: u, namespace: default}}\ncurrent-context: k\n",
            f.kache.addr
        ),
    )
    .expect("write kubeconfig");
    let manifest = dir.path().join("cm.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: fast\n",
    )
    .expect("write manifest");
    let cache = dir.path().join("cache");
    let manifest = manifest.to_str().expect("utf-8 path");
    let run = |args: &'static [&'static str]| kubectl(&kubeconfig, &cache, args);

    let (ok, out, err) = kubectl(&kubeconfig, &cache, &["apply", "--validate=false", "-f", manifest]).await;
    assert!(ok, "apply: {out}{err}");
    assert!(out.contains("configmap/settings"), "{out}");

    let (ok, out, err) = run(&["get", "configmap", "settings", "-o", "yaml"]).await;
    assert!(ok, "get: {out}{err}");
    assert!(out.contains("mode: fast") && out.contains("name: settings"), "{out}");

    let (ok, out, err) = run(&["label", "configmap", "settings", "tier=gold"]).await;
    assert!(ok, "label: {out}{err}");
    let (ok, out, err) =
        run(&["patch", "configmap", "settings", "--type=merge", "-p", r#"{"data":{"mode":"slow"}}"#]).await;
    assert!(ok, "patch: {out}{err}");
    let (ok, out, err) = run(&["get", "configmaps", "-l", "tier=gold", "-o", "yaml"]).await;
    assert!(ok, "get -l: {out}{err}");
    assert!(out.contains("mode: slow") && out.contains("tier: gold"), "{out}");

    let (ok, out, err) = run(&["delete", "configmap", "settings"]).await;
    assert!(ok, "delete: {out}{err}");
    let (ok, _, err) = run(&["get", "configmap", "settings"]).await;
    assert!(!ok && err.contains("NotFound"), "{err}");
    assert!(f.kache.writes.last_write(&Gvr::new("", "v1", "configmaps")) > 0, "writes were tracked");

    // Logs through kubectl's raw path (`kubectl logs` needs spec.containers, which the sim does not keep).
    f.sim
        .create("pods", Some("default"), serde_json::json!({"metadata": {"name": "web"}}))
        .expect("pod created");
    let (ok, out, err) = run(&["get", "--raw", "/api/v1/namespaces/default/pods/web/log"]).await;
    assert!(ok, "logs: {out}{err}");
    assert!(out.starts_with("log line 1 from pod web\n"), "{out}");
    let (ok, out, err) = run(&["get", "--raw", "/version"]).await;
    assert!(ok && out.contains("gitVersion"), "get --raw /version: {out}{err}");
}

#[tokio::test]
async fn forwarded_requests_are_counted_like_the_apiserver() {
    let (_up, k) = setup(Limits::default()).await;
    let metrics = k.metrics().clone();
    let mut c = h1(k.addr).await;
    let req = request(Method::GET, "/api/v1/namespaces/a/frontmetrics").body(body::empty()).expect("valid");
    let (status, _, _) = collect(c.send_request(req).await.expect("response")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let req = request(Method::PATCH, "/api/v1/namespaces/a/frontmetrics/x")
        .header("content-type", "application/apply-patch+yaml")
        .body(body::full("{}"))
        .expect("valid");
    collect(c.send_request(req).await.expect("response")).await;
    let text = metrics.render();
    for line in [
        r#"apiserver_request_total{group="",resource="frontmetrics",verb="LIST",code="404",source="upstream"}"#,
        r#"apiserver_request_total{group="",resource="frontmetrics",verb="APPLY",code="404",source="upstream"}"#,
    ] {
        assert_eq!(series(&text, line), 1.0, "{line} in\n{text}");
    }
}

/// exec/attach/port-forward reach kache over TLS in practice: an HTTP/1.1 (ALPN) client upgrades through
/// a TLS front to the sim's echo endpoint.
#[tokio::test]
async fn upgrade_through_a_tls_front() {
    use rustls_pki_types::pem::PemObject;
    kache::upstream::install_crypto_provider();
    let sim = kache_sim::sim::Sim::builder().start().await.expect("sim starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = certificates(dir.path());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let forwarder = Arc::new(Forwarder::new(
        Upstream::plain(&sim.url()).expect("url"),
        Arc::new(WriteTracker::new()),
        10,
    ));
    let tls = TlsConfig::from_pem_files(&cert, &key).expect("valid cert");
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, Some(tls), forwarder, Limits::default(), Default::default(), async {
        let _ = stopped.await;
    }));

    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls_pki_types::CertificateDer::from_pem_file(&ca).expect("CA pem")).expect("CA added");
    let mut client = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("valid name");
    let mut stream = connector.connect(name, tcp).await.expect("TLS handshake");
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));

    stream
        .write_all(b"GET /sim/echo-upgrade HTTP/1.1\r\nHost: kache\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
        .await
        .expect("write head");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).await.expect("read head"), 1, "closed early");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    for round in 0..3 {
        let msg = format!("tls round {round}\n");
        stream.write_all(msg.as_bytes()).await.expect("write");
        let mut echoed = vec![0u8; msg.len()];
        stream.read_exact(&mut echoed).await.expect("echo");
        assert_eq!(echoed, msg.as_bytes());
    }
}
