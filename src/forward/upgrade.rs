//! HTTP/1.1 protocol upgrades (exec, attach, port-forward over SPDY/3.1 or WebSocket): the request goes
//! upstream on the HTTP/1.1-only client with its `Connection: Upgrade` and `Upgrade` headers, the upstream's
//! `101 Switching Protocols` comes back to the client, and then bytes are copied both ways until either side
//! closes. No SPDY or WebSocket framing is interpreted: kache is a byte pipe here.

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;

use super::Forwarder;
use super::forwarder::error_response;
use super::headers::strip_hop_by_hop;
use crate::front::body::{self, Body, BoxError};
use crate::front::server::ConnInfo;
use crate::metrics::ForwardKind;

/// Forwards an upgrade request; see the module doc.
pub(super) async fn forward(fwd: &Forwarder, mut req: Request<Body>) -> Response<Body> {
    let client_side = hyper::upgrade::on(&mut req);
    let (parts, _body) = req.into_parts();
    let kill = parts.extensions.get::<ConnInfo>().map(|info| info.shutdown.kill.clone());
    let body_limit = parts.extensions.get::<ConnInfo>().map(|info| info.max_body_bytes);

    let upgrade_protocols: Vec<HeaderValue> =
        parts.headers.get_all(header::UPGRADE).iter().cloned().collect();
    let mut headers = fwd.upstream_headers(parts.headers, &parts.extensions);
    for protocol in upgrade_protocols {
        headers.append(header::UPGRADE, protocol);
    }
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    // Upgrade requests carry no body (kubectl sends none); the connection becomes the tunnel instead.
    headers.remove(header::CONTENT_LENGTH);
    let mut upstream_req = Request::new(body::empty());
    *upstream_req.method_mut() = parts.method;
    *upstream_req.uri_mut() = parts.uri;
    *upstream_req.headers_mut() = headers;

    let mut resp = match fwd.upstream().send_upgrade(upstream_req).await {
        Ok(resp) => resp,
        Err(e) => {
            fwd.metrics().forwarded(ForwardKind::Upgrade, 0);
            return error_response(fwd.metrics(), &e, body_limit);
        }
    };
    fwd.metrics().forwarded(ForwardKind::Upgrade, resp.status().as_u16());
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Refused (403, 400 "upgrade request required", ...): pass the answer through as it is.
        let (mut resp_parts, incoming) = resp.into_parts();
        strip_hop_by_hop(&mut resp_parts.headers);
        return Response::from_parts(resp_parts, incoming.map_err(BoxError::from).boxed());
    }

    let upstream_side = hyper::upgrade::on(&mut resp);
    tokio::spawn(async move {
        let (client, upstream) = match tokio::try_join!(client_side, upstream_side) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::debug!(error = %e, "upgrade did not complete");
                return;
            }
        };
        let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
        let copy = tokio::io::copy_bidirectional(&mut client, &mut upstream);
        let outcome = match kill {
            Some(kill) => tokio::select! {
                res = copy => Some(res),
                () = kill.cancelled() => None,
            },
            None => Some(copy.await),
        };
        match outcome {
            Some(Ok((to_upstream, to_client))) => {
                tracing::debug!(to_upstream, to_client, "upgraded stream closed")
            }
            Some(Err(e)) => tracing::debug!(error = %e, "upgraded stream ended with an error"),
            None => tracing::debug!("upgraded stream closed by shutdown"),
        }
    });

    // The 101 with the upstream's headers (Upgrade, Connection, Sec-WebSocket-Accept,
    // X-Stream-Protocol-Version, ...); hyper switches the client connection once it is sent.
    let mut out = Response::new(body::empty());
    *out.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *out.headers_mut() = resp.headers().clone();
    out
}
