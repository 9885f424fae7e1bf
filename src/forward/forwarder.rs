//! Transparent, streaming pass-through of one request to the upstream.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, BodyStream, LengthLimitError, StreamBody};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::coalesce;
use super::headers::{strip_client_identity, strip_hop_by_hop};
use super::readahead;
use super::upgrade;
use super::writes::{WriteTracker, resource_version, resource_version_protobuf};
use crate::codec::status::ApiError;
use crate::front::body::guarded;
use crate::front::body::{Body, BoxError};
use crate::front::respond::status as status_response;
use crate::front::route::{Route, Verb};
use crate::front::server::{BoxFuture, ConnInfo, Handler};
use crate::metrics::{ForwardKind, Limit, Metrics, Source, UpstreamErrorReason};
use crate::resource::Gvr;
use crate::upstream::{Credentials, Upstream, UpstreamError};

/// Write responses are single objects; up to this size they are read whole to learn their resourceVersion
/// (read-your-writes). Larger ones stream through untracked.
const WRITE_RESPONSE_BUFFER_LIMIT: usize = 4 << 20;
/// Retry hint sent with 503 when the upstream cannot be reached, and with 429 when the in-flight bound is
/// hit (the apiserver's max-in-flight filter also says 1 s).
const RETRY_AFTER_SECONDS: u32 = 1;

/// Headers trusted code (the auth layer) sets to forward a request as a given end user when kache uses its
/// own credentials (e.g. `Impersonate-User`); a request extension, applied after the client's identity
/// headers were removed.
#[derive(Clone, Debug, Default)]
pub struct UpstreamIdentity(pub HeaderMap);

/// Forwards requests to the upstream. Cheap to share (`Arc`).
pub struct Forwarder {
    upstream: Upstream,
    writes: Arc<WriteTracker>,
    in_flight: Arc<Semaphore>,
    /// Where forwarded requests, upstream errors and refusals are counted.
    metrics: Metrics,
    /// `kache_forward_read_ahead_bytes` of `metrics`, exported from the start.
    read_ahead: metrics::Gauge,
}

// === impl Forwarder ===

impl Forwarder {
    /// A forwarder allowing `max_in_flight` concurrent non-long-running requests (429 beyond).
    pub fn new(upstream: Upstream, writes: Arc<WriteTracker>, max_in_flight: usize) -> Self {
        let in_flight = Arc::new(Semaphore::new(max_in_flight.max(1)));
        Self::with_parts(upstream, writes, in_flight, Metrics::default())
    }

    fn with_parts(
        upstream: Upstream,
        writes: Arc<WriteTracker>,
        in_flight: Arc<Semaphore>,
        metrics: Metrics,
    ) -> Self {
        let read_ahead = metrics.read_ahead_bytes();
        Self { upstream, writes, in_flight, metrics, read_ahead }
    }

    /// Counts into the kache's `metrics` instead of an instance of its own.
    pub fn with_metrics(self, metrics: Metrics) -> Self {
        Self::with_parts(self.upstream, self.writes, self.in_flight, metrics)
    }

    pub(super) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// The resourceVersions of writes forwarded so far.
    pub fn writes(&self) -> &Arc<WriteTracker> {
        &self.writes
    }

    /// Forwards `req` and streams the answer back. Never fails: upstream trouble becomes a Status
    /// (503 unreachable, 413 body too large, 429 too many in flight).
    pub async fn forward(&self, req: Request<Body>) -> Response<Body> {
        let mut resp = self.forward_inner(req).await;
        // For the front's request metrics: this answer came from (or on behalf of) the upstream.
        resp.extensions_mut().insert(Source::Upstream);
        resp
    }

    async fn forward_inner(&self, req: Request<Body>) -> Response<Body> {
        if crate::front::server::is_upgrade(&req) {
            return upgrade::forward(self, req).await;
        }
        let route = match req.extensions().get::<Route>() {
            Some(route) => route.clone(),
            None => Route::parse(req.method(), req.uri()),
        };
        let kind = forward_kind(&route);
        let permit = if route.is_long_running() {
            None
        } else {
            match self.in_flight.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    self.metrics.limit_rejected(Limit::Inflight);
                    return too_many_requests();
                }
            }
        };

        let (parts, body) = req.into_parts();
        let body_limit = parts.extensions.get::<ConnInfo>().map(|c| c.max_body_bytes);
        let mut upstream_req = Request::new(body);
        *upstream_req.method_mut() = parts.method;
        *upstream_req.uri_mut() = parts.uri;
        *upstream_req.headers_mut() = self.upstream_headers(parts.headers, &parts.extensions);
        let list = is_list(&route);
        if list {
            upstream_req.extensions_mut().insert(crate::upstream::fwdrt::ForwardedList);
        }

        let resp = match self.upstream.send(upstream_req).await {
            Ok(resp) => resp,
            Err(e) => {
                self.metrics.forwarded(kind, 0);
                return error_response(&self.metrics, &e, body_limit);
            }
        };
        self.metrics.forwarded(kind, resp.status().as_u16());
        let (mut resp_parts, incoming) = resp.into_parts();
        strip_hop_by_hop(&mut resp_parts.headers);
        let incoming = incoming.map_err(BoxError::from).boxed();
        let mut body = if streams_long(&resp_parts.headers) {
            // A watch (or a followed log) streams events that must not wait; anything else ends with its
            // body and is handed over in batches.
            let handoff = if route.is_long_running() {
                readahead::Handoff::Immediate
            } else {
                readahead::Handoff::LIST
            };
            let held = self.read_ahead.clone();
            let thread = self.upstream.forward_thread().cloned();
            readahead::read_ahead(incoming, readahead::READ_AHEAD_BUDGET, handoff, held, |pump| match list {
                true => crate::upstream::fwdrt::spawn(thread.as_ref(), pump),
                false => drop(tokio::spawn(pump)),
            })
        } else {
            coalesce::coalesced(incoming, coalesce::MAX_COALESCED)
        };
        if let Some((gvr, encoding)) = tracked_write(&route, resp_parts.status, &resp_parts.headers) {
            body = self.track_write(gvr, encoding, body).await;
        }
        let body = match permit {
            Some(permit) => guarded::<OwnedSemaphorePermit>(body, permit),
            None => body,
        };
        Response::from_parts(resp_parts, body)
    }

    /// The client's headers as sent upstream: hop-by-hop headers removed, credentials per the auth mode,
    /// `X-Forwarded-For` extended with the client's address.
    pub(super) fn upstream_headers(&self, mut headers: HeaderMap, ext: &http::Extensions) -> HeaderMap {
        strip_hop_by_hop(&mut headers);
        headers.remove(header::HOST);
        if self.upstream.credentials() == Credentials::Own {
            strip_client_identity(&mut headers);
            if let Some(UpstreamIdentity(identity)) = ext.get::<UpstreamIdentity>() {
                for (k, v) in identity {
                    headers.append(k.clone(), v.clone());
                }
            }
        }
        if let Some(info) = ext.get::<ConnInfo>() {
            let xff = HeaderName::from_static("x-forwarded-for");
            let peer = info.peer.ip().to_string();
            let value = match headers.get(&xff).and_then(|v| v.to_str().ok()) {
                Some(prev) => format!("{prev}, {peer}"),
                None => peer,
            };
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(xff, value);
            }
        }
        headers
    }

    /// Reads a write's response (up to the bound) to record its resourceVersion, then replays it.
    async fn track_write(&self, gvr: Gvr, encoding: WriteEncoding, mut body: Body) -> Body {
        let mut frames: Vec<Frame<Bytes>> = Vec::new();
        let mut data = Vec::new();
        loop {
            match body.frame().await {
                None => break,
                Some(Ok(frame)) => {
                    if let Some(chunk) = frame.data_ref() {
                        data.extend_from_slice(chunk);
                    }
                    frames.push(frame);
                    if data.len() > WRITE_RESPONSE_BUFFER_LIMIT {
                        self.metrics.limit_rejected(Limit::ResponseBody);
                        return replay(frames, Some(body));
                    }
                }
                Some(Err(e)) => {
                    let replayed = frames.into_iter().map(Ok).chain(std::iter::once(Err(e)));
                    return StreamBody::new(futures_util::stream::iter(replayed)).boxed();
                }
            }
        }
        let rv = match encoding {
            WriteEncoding::Json => resource_version(&data),
            WriteEncoding::Protobuf => resource_version_protobuf(&data),
        };
        if let Some(rv) = rv {
            tracing::trace!(%gvr, rv, "recorded write");
            self.writes.record(&gvr, rv);
        }
        replay(frames, None)
    }
}

impl Handler for Forwarder {
    fn handle(&self, req: Request<Body>) -> BoxFuture<'_, Response<Body>> {
        Box::pin(self.forward(req))
    }
}

/// The metrics class of a forwarded request.
pub(super) fn forward_kind(route: &Route) -> ForwardKind {
    match route.resource() {
        Some(r) if r.is_write() => ForwardKind::Write,
        Some(r) if matches!(r.verb, Verb::Get | Verb::List | Verb::Watch) && r.subresource.is_none() => {
            ForwardKind::Read
        }
        Some(r) if r.verb == Verb::Proxy || r.is_long_running() => ForwardKind::Upgrade,
        _ => ForwardKind::Other,
    }
}

/// How a write's response body is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteEncoding {
    Json,
    Protobuf,
}

/// The resource whose write this response completed, when its resourceVersion should be recorded: a
/// successful write to a resource path, answered with an uncompressed JSON or protobuf object that is not
/// too large.
fn tracked_write(route: &Route, status: StatusCode, headers: &HeaderMap) -> Option<(Gvr, WriteEncoding)> {
    let res = route.resource().filter(|r| r.is_write())?;
    if !status.is_success() {
        return None;
    }
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok())?.trim_start();
    let encoding = if content_type.starts_with("application/json") {
        WriteEncoding::Json
    } else if content_type.starts_with("application/vnd.kubernetes.protobuf") {
        WriteEncoding::Protobuf
    } else {
        return None;
    };
    let encoded = headers.get(header::CONTENT_ENCODING).is_some_and(|v| v.as_bytes() != b"identity");
    let too_large = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .is_some_and(|len| len > WRITE_RESPONSE_BUFFER_LIMIT);
    (!encoded && !too_large).then(|| (res.gvr.clone(), encoding))
}

/// A list (a GET of a collection, not a watch): its upstream connection and read-ahead pump run on the forward
/// thread (`upstream::fwdrt`).
fn is_list(route: &Route) -> bool {
    route.resource().is_some_and(|r| r.verb == Verb::List)
}

/// Whether a response body is long enough to be read ahead: no length given (a chunked list or a watch)
/// or more than one coalesced frame.
fn streams_long(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .is_none_or(|len| len > coalesce::MAX_COALESCED)
}

/// A body yielding `frames` and then, if any, the rest of `rest`.
fn replay(frames: Vec<Frame<Bytes>>, rest: Option<Body>) -> Body {
    use futures_util::StreamExt;
    let head = futures_util::stream::iter(frames.into_iter().map(Ok::<_, BoxError>));
    match rest {
        Some(rest) => BodyExt::boxed(StreamBody::new(head.chain(BodyStream::new(rest)))),
        None => BodyExt::boxed(StreamBody::new(head)),
    }
}

fn too_many_requests() -> Response<Body> {
    status_response(&ApiError::TooManyRequests {
        message: "Too many requests, please try again later.".into(),
        retry_after: RETRY_AFTER_SECONDS,
    })
}

/// The Status a client gets when the upstream exchange failed.
pub(super) fn error_response(
    metrics: &Metrics,
    e: &UpstreamError,
    body_limit: Option<u64>,
) -> Response<Body> {
    if let Some(limit) = body_limit
        && e.caused_by::<LengthLimitError>()
    {
        tracing::debug!(limit, "request body over the limit");
        metrics.limit_rejected(Limit::RequestBody);
        return status_response(&crate::front::server::body_too_large(limit));
    }
    tracing::warn!(error = %e, "forwarding failed");
    metrics.upstream_error(match e {
        UpstreamError::Connect(_) if e.caused_by::<rustls::Error>() => UpstreamErrorReason::Tls,
        UpstreamError::Connect(_) => UpstreamErrorReason::Connect,
        UpstreamError::Transport(_) => UpstreamErrorReason::Stream,
        _ => UpstreamErrorReason::Other,
    });
    match e {
        UpstreamError::Connect(_) => {
            // Nothing reached the upstream, so a retry is safe: say when (client-go retries a 5xx that has
            // Retry-After).
            let mut resp = status_response(&ApiError::ServiceUnavailable(format!(
                "the upstream apiserver is unavailable: {e}"
            )));
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
            resp
        }
        UpstreamError::Transport(_) | UpstreamError::Auth(_) => status_response(
            &ApiError::ServiceUnavailable(format!("the request to the upstream apiserver failed: {e}")),
        ),
        UpstreamError::InvalidUrl { .. } | UpstreamError::Config(_) => {
            status_response(&ApiError::InternalError(e.to_string()))
        }
    }
}
