//! The HTTP client side: one pooled hyper client (plain HTTP or TLS, HTTP/1.1), requests that drain and
//! count the body, and the few facts read from a list's head (continue token, resourceVersion) without
//! decoding the items.

use std::io::Read as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::http::{Request, header};
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Bytes of a response kept for inspection (the list envelope's metadata comes first).
pub const HEAD_BYTES: usize = 4096;
/// Decompressed bytes read from a gzip head: enough for any list metadata.
const GZIP_HEAD_BYTES: usize = 2048;

pub use ::http::{Method, StatusCode};

pub type Client = HyperClient<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A pooled HTTP/1.1 client keeping up to `idle` connections per host; `https://` URLs go over TLS
/// without verifying the server's certificate (the load tool measures, it does not trust: the real
/// apiserver and kache both serve self-signed certificates), `http://` URLs in the clear.
pub fn client(idle: usize) -> Client {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.enforce_http(false);
    let tls = tls_client_config();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector);
    HyperClient::builder(TokioExecutor::new()).pool_max_idle_per_host(idle).build(https)
}

/// A TLS client configuration that does not verify the server's certificate (see [`client`]).
pub fn tls_client_config() -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("the default provider supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
        .with_no_client_auth()
}

/// Accepts any server certificate (signatures are still checked, so the handshake is the real cost).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

// === impl NoVerify ===

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A failed request.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("invalid request: {0}")]
    Request(#[from] http::Error),
    #[error("transport: {0}")]
    Transport(#[from] hyper_util::client::legacy::Error),
    #[error("body: {0}")]
    Body(#[from] hyper::Error),
    #[error("status {status}: {head}")]
    Status { status: StatusCode, head: String },
}

/// A drained response.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// Whether the body came with `Content-Encoding: gzip`.
    pub gzipped: bool,
    /// Body bytes on the wire (compressed when gzip was used).
    pub bytes: u64,
    /// The first [`HEAD_BYTES`] of the body, decompressed when it was gzip.
    pub head: Bytes,
    /// The whole body as sent (still compressed), when [`Send::keep_body`] asked for it.
    pub body: Option<Bytes>,
    pub elapsed: Duration,
}

/// What to send.
#[derive(Debug, Clone, Default)]
pub struct Send<'a> {
    pub accept: Option<&'a str>,
    pub gzip: bool,
    pub content_type: Option<&'a str>,
    pub body: Bytes,
    /// `Authorization: Bearer …` (a kubeconfig's token).
    pub bearer: Option<&'a str>,
    /// Keep the whole response body (preparing the static server's answers).
    pub keep_body: bool,
}

/// Sends a request and drains the body; non-2xx answers are errors carrying the start of the body.
pub async fn request(client: &Client, method: Method, url: &str, s: &Send<'_>) -> Result<Fetched, HttpError> {
    let started = Instant::now();
    let mut b = Request::builder().method(method).uri(url);
    if let Some(a) = s.accept {
        b = b.header(header::ACCEPT, a);
    }
    if s.gzip {
        b = b.header(header::ACCEPT_ENCODING, "gzip");
    }
    if let Some(ct) = s.content_type {
        b = b.header(header::CONTENT_TYPE, ct);
    }
    if let Some(t) = s.bearer {
        b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let resp = client.request(b.body(Full::new(s.body.clone()))?).await?;
    let status = resp.status();
    let gzipped = resp.headers().get(header::CONTENT_ENCODING).is_some_and(|v| v.as_bytes() == b"gzip");
    let mut body = resp.into_body();
    let mut head = BytesMut::new();
    let mut bytes = 0u64;
    let mut all = BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            bytes += data.len() as u64;
            if s.keep_body {
                all.extend_from_slice(&data);
            }
            if head.len() < HEAD_BYTES {
                let take = (HEAD_BYTES - head.len()).min(data.len());
                head.extend_from_slice(&data[..take]);
            }
        }
    }
    let head = if gzipped { gunzip_head(&head) } else { head.freeze() };
    if !status.is_success() {
        let text = String::from_utf8_lossy(&head[..head.len().min(300)]).into_owned();
        return Err(HttpError::Status { status, head: text });
    }
    let body = s.keep_body.then(|| all.freeze());
    Ok(Fetched { gzipped, bytes, head, body, elapsed: started.elapsed() })
}

/// GET shorthand.
pub async fn get(client: &Client, url: &str, accept: Option<&str>, gzip: bool) -> Result<Fetched, HttpError> {
    request(client, Method::GET, url, &Send { accept, gzip, ..Send::default() }).await
}

/// Sends a GET and returns the response once its head arrived (for watches: the body streams on).
pub async fn open(client: &Client, url: &str) -> Result<http::Response<hyper::body::Incoming>, HttpError> {
    let req = Request::builder().method(Method::GET).uri(url).body(Full::new(Bytes::new()))?;
    let resp = client.request(req).await?;
    if !resp.status().is_success() {
        let status = resp.status();
        let body = resp.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
        let head = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
        return Err(HttpError::Status { status, head });
    }
    Ok(resp)
}

/// Splits complete lines off `buf` (watch events are newline-delimited JSON), calling `f` on each.
pub fn drain_lines(buf: &mut BytesMut, mut f: impl FnMut(&[u8])) {
    while let Some(pos) = memchr::memchr(b'\n', buf) {
        let line = buf.split_to(pos + 1);
        f(&line[..pos]);
    }
}

/// The decompressed start of a gzip body (as much as the truncated input yields).
fn gunzip_head(compressed: &[u8]) -> Bytes {
    let mut out = vec![0u8; GZIP_HEAD_BYTES];
    let mut dec = flate2::read::GzDecoder::new(compressed);
    let mut n = 0;
    while n < out.len() {
        match dec.read(&mut out[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    out.truncate(n);
    Bytes::from(out)
}

/// The part of a list body before its items: where the list metadata is.
fn list_meta(head: &[u8]) -> &[u8] {
    let end = memchr::memmem::find(head, b"\"items\":").unwrap_or(head.len());
    &head[..end]
}

/// A JSON string member's value in `haystack`, for values without escapes (tokens, resourceVersions).
fn string_member<'a>(haystack: &'a [u8], key: &[u8]) -> Option<&'a str> {
    let start = memchr::memmem::find(haystack, key)? + key.len();
    let len = memchr::memchr(b'"', &haystack[start..])?;
    std::str::from_utf8(&haystack[start..start + len]).ok()
}

/// The list's continue token, when there is a next page.
pub fn continue_token(head: &[u8]) -> Option<String> {
    string_member(list_meta(head), b"\"continue\":\"").filter(|t| !t.is_empty()).map(str::to_string)
}

/// The list's resourceVersion.
pub fn list_resource_version(head: &[u8]) -> Option<String> {
    string_member(list_meta(head), b"\"resourceVersion\":\"").map(str::to_string)
}

/// A query value made safe for a URL (continue tokens may end in `=` padding).
pub fn query_escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `base + path + ?query` (query may be empty).
pub fn url(base: &str, path: &str, query: &str) -> String {
    if query.is_empty() { format!("{base}{path}") } else { format!("{base}{path}?{query}") }
}

/// `query` with `continue=token` appended.
pub fn with_continue(query: &str, token: &str) -> String {
    let sep = if query.is_empty() { "" } else { "&" };
    format!("{query}{sep}continue={}", query_escape(token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    const PAGE: &[u8] = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ==","remainingItemCount":3},"items":[{"metadata":{"resourceVersion":"7","continue":"x"}}]}"#;

    #[test]
    fn reads_list_metadata_only() {
        assert_eq!(continue_token(PAGE).as_deref(), Some("eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ=="));
        assert_eq!(list_resource_version(PAGE).as_deref(), Some("42"));
        let last = br#"{"kind":"PodList","metadata":{"resourceVersion":"9"},"items":[{"metadata":{"continue":"no"}}]}"#;
        assert_eq!(continue_token(last), None);
        assert_eq!(continue_token(br#"{"metadata":{"continue":""},"items":[]}"#), None);
    }

    #[test]
    fn gunzips_a_truncated_head() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(1));
        let big: Vec<u8> = PAGE.iter().chain(std::iter::repeat_n(&b'x', 100_000)).copied().collect();
        enc.write_all(&big).expect("vec");
        let gz = enc.finish().expect("vec");
        let head = gunzip_head(&gz[..gz.len().min(HEAD_BYTES)]);
        assert!(head.starts_with(PAGE));
        assert_eq!(list_resource_version(&head).as_deref(), Some("42"));
    }

    #[test]
    fn splits_lines_keeping_the_partial_tail() {
        let mut buf = BytesMut::from(&b"a\nbc\nd"[..]);
        let mut seen = Vec::new();
        drain_lines(&mut buf, |l| seen.push(l.to_vec()));
        assert_eq!(seen, vec![b"a".to_vec(), b"bc".to_vec()]);
        assert_eq!(&buf[..], b"d");
    }

    #[test]
    fn escapes_query_values() {
        assert_eq!(query_escape("ab_-.~=+/"), "ab_-.~%3D%2B%2F");
        assert_eq!(with_continue("limit=500", "t="), "limit=500&continue=t%3D");
        assert_eq!(with_continue("", "t"), "continue=t");
        assert_eq!(url("http://h", "/api", ""), "http://h/api");
    }
}
