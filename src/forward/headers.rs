//! Which headers cross kache, both ways.

use http::header::{self, HeaderMap, HeaderName};

/// Hop-by-hop headers (RFC 9110 §7.6.1 and the de-facto `Proxy-Connection`/`Keep-Alive`): they describe
/// one connection, so a proxy never forwards them. `Upgrade` and `Connection: Upgrade` are restored on the
/// upgrade path, where they are the point.
const HOP_BY_HOP: &[HeaderName] = &[
    header::CONNECTION,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];
const HOP_BY_HOP_EXTRA: &[&str] = &["keep-alive", "proxy-connection"];

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP) {
        headers.remove(name);
    }
    for name in HOP_BY_HOP_EXTRA {
        headers.remove(*name);
    }
}

/// Removes the client's credentials and identity claims: with its own credentials, kache must not let a
/// client's `Authorization` reach the upstream, nor let it ask kache's identity to impersonate someone.
pub(crate) fn strip_client_identity(headers: &mut HeaderMap) {
    headers.remove(header::AUTHORIZATION);
    let impersonate: Vec<HeaderName> =
        headers.keys().filter(|k| k.as_str().starts_with("impersonate-")).cloned().collect();
    for name in impersonate {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn hop_by_hop_headers_are_dropped_and_end_to_end_kept() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, x-private"),
            ("keep-alive", "timeout=5"),
            ("x-private", "1"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("proxy-connection", "keep-alive"),
            ("content-type", "application/json"),
            ("accept-encoding", "gzip"),
            ("audit-id", "abc"),
            ("warning", "299 - \"deprecated\""),
            ("impersonate-user", "jane"),
            ("authorization", "Bearer t"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(
            left,
            ["accept-encoding", "audit-id", "authorization", "content-type", "impersonate-user", "warning"]
        );
        strip_client_identity(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["accept-encoding", "audit-id", "content-type", "warning"]);
    }
}
