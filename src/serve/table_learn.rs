//! Learning a resource's generic Table columns from the upstream's own answer (see
//! [`crate::codec::table::generic`]): a forwarded Table get or list of a kind kache has no printer for is
//! relayed unchanged while its first bytes are kept aside; when the body has been sent (or dropped), they
//! are checked and, if they are the generic convertor's, the resource's Tables are served from memory.
//!
//! Nothing here delays or alters the response: the copy is bounded ([`LEARN_PREFIX_BYTES`]) and the check
//! runs when the body is dropped.

use bytes::{Bytes, BytesMut};
use http::{Response, StatusCode, header};
use http_body_util::BodyExt;

use std::sync::Arc;

use crate::codec::table::Tables;
use crate::codec::table::generic::LEARN_PREFIX_BYTES;
use crate::front::body::Body;
use crate::resource::Gvr;

/// The first bytes of a forwarded Table body; checked when dropped.
struct Prefix {
    gvr: Gvr,
    /// The kache's Table state, which learns.
    tables: Arc<Tables>,
    gzip: bool,
    bytes: BytesMut,
}

impl Prefix {
    fn push(&mut self, data: &Bytes) {
        let room = LEARN_PREFIX_BYTES.saturating_sub(self.bytes.len());
        self.bytes.extend_from_slice(&data[..data.len().min(room)]);
    }
}

impl Drop for Prefix {
    fn drop(&mut self) {
        let plain = if self.gzip { gunzip_prefix(&self.bytes) } else { self.bytes.to_vec() };
        if self.tables.generic.learn(&self.gvr.group, &self.gvr.version, &self.gvr.resource, &plain) {
            tracing::debug!(resource = %self.gvr, "generic Table columns learned from the upstream");
        }
    }
}

/// As much of a gzip stream's start as decodes (a prefix of the stream gives a prefix of the text).
fn gunzip_prefix(gz: &[u8]) -> Vec<u8> {
    use std::io::Read as _;
    let mut out = Vec::new();
    let mut decoder = flate2::read::GzDecoder::new(gz).take(LEARN_PREFIX_BYTES as u64 * 4);
    let mut chunk = [0u8; 8192];
    loop {
        match decoder.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
        }
    }
    out
}

/// Relays `resp` (the upstream's answer to a Table get or list of `gvr`) and learns from its body.
pub(crate) fn learn_from(resp: Response<Body>, gvr: &Gvr, tables: Arc<Tables>) -> Response<Body> {
    let headers = resp.headers();
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    let encoding = headers.get(header::CONTENT_ENCODING).and_then(|v| v.to_str().ok());
    let gzip = encoding == Some("gzip");
    if resp.status() != StatusCode::OK || !json || !(encoding.is_none() || gzip) {
        return resp;
    }
    let mut prefix = Prefix { gvr: gvr.clone(), tables, gzip, bytes: BytesMut::new() };
    resp.map(|body| {
        body.map_frame(move |frame| {
            if let Some(data) = frame.data_ref() {
                prefix.push(data);
            }
            frame
        })
        .boxed()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    #[tokio::test]
    async fn a_relayed_generic_table_is_learned_and_unchanged() {
        let body = r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{},"columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"N","priority":0},{"name":"Created At","type":"date","format":"","description":"C","priority":0}],"rows":null}"#;
        let gvr = Gvr::new("learn.example", "v1", "things");
        let resp = Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from_static(body.as_bytes())).map_err(|e| match e {}).boxed())
            .expect("response");
        let tables = Arc::new(Tables::default());
        assert_eq!(tables.generic.lookup("learn.example", "v1", "things"), None);
        let relayed = learn_from(resp, &gvr, tables.clone());
        let got = relayed.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&got[..], body.as_bytes());
        assert!(tables.generic.lookup("learn.example", "v1", "things").is_some());
    }

    #[test]
    fn gzip_prefixes_decode() {
        use std::io::Write as _;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&[b'x'; 100_000]).expect("gzip");
        let gz = enc.finish().expect("gzip");
        assert_eq!(gunzip_prefix(&gz).len(), 100_000);
        assert!(gunzip_prefix(&gz[..gz.len() / 2]).len() <= 100_000);
    }
}
