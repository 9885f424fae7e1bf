//! Per-request work of the front: limits, classification, the handler call and response wrapping.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::conn::{ActiveGuard, Activity};
use super::{ConnInfo, Handler, Limits};
use crate::body::{Body, BoxError};
use crate::forward::status::FailureStatus;
use crate::serve::route::Route;

/// Per-connection state shared by its requests.
pub(super) struct RequestCtx {
    pub info: ConnInfo,
    pub handler: Arc<dyn Handler>,
    pub limits: Arc<Limits>,
    pub activity: Arc<Activity>,
}

/// Serves one request. Never fails: every error is a Status response.
pub(super) async fn handle(
    req: Request<Incoming>,
    ctx: Arc<RequestCtx>,
) -> Result<Response<Body>, Infallible> {
    let guard = ctx.activity.begin();
    let limits = &ctx.limits;
    if let Some(rejection) = check_limits(&req, limits) {
        return Ok(rejection.into_response().map(|b| ServedBody::wrap(b, guard, None)));
    }

    let route = Route::parse(req.method(), req.uri());
    let query = req.uri().query().map(str::to_owned);
    let long_running = route.is_long_running() || is_upgrade(&req);
    let (mut parts, incoming) = req.into_parts();
    parts.extensions.insert(ctx.info.clone());
    parts.extensions.insert(route);
    let body = Limited::new(incoming, usize::try_from(limits.max_body_bytes).unwrap_or(usize::MAX)).boxed();
    let fut = ctx.handler.handle(Request::from_parts(parts, body));

    let resp = if long_running {
        fut.await
    } else {
        let deadline =
            user_timeout(query.as_deref()).map_or(limits.request_timeout, |t| t.min(limits.request_timeout));
        match tokio::time::timeout(deadline, fut).await {
            Ok(resp) => resp,
            Err(_) => timeout_status().into_response(),
        }
    };
    // Long-running responses end when shutdown starts; others finish their body within the drain time.
    let drain = long_running.then(|| ctx.info.shutdown.drain.clone().cancelled_owned());
    Ok(resp.map(|b| ServedBody::wrap(b, guard, drain)))
}

/// The apiserver's answer when a request outlives `--request-timeout` (its timeout filter).
fn timeout_status() -> FailureStatus {
    FailureStatus::new(
        StatusCode::GATEWAY_TIMEOUT,
        "Timeout",
        "Timeout: request did not complete within requested timeout - context deadline exceeded",
    )
    .with_empty_details()
}

/// The client's `timeout` query parameter (e.g. `?timeout=30s`), which the apiserver's request-deadline
/// filter honours when shorter than `--request-timeout`. Values that do not parse are left to whoever serves
/// the request (the upstream answers 400 for them).
pub(super) fn user_timeout(query: Option<&str>) -> Option<std::time::Duration> {
    let value = query?.split('&').find_map(|pair| pair.strip_prefix("timeout="))?;
    let value = crate::serve::route::percent_decode(value.as_bytes(), true)?;
    super::parse_duration(&value).ok().filter(|d| !d.is_zero())
}

/// Whether the request asks for an HTTP/1.1 protocol upgrade (SPDY or WebSocket).
pub(crate) fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.headers().contains_key(header::UPGRADE)
        && req
            .headers()
            .get_all(header::CONNECTION)
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade"))))
}

/// Checks the URL, head and declared body size against the limits.
fn check_limits(req: &Request<Incoming>, limits: &Limits) -> Option<FailureStatus> {
    let url_len = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if url_len > limits.max_url_bytes {
        return Some(FailureStatus::new(
            StatusCode::URI_TOO_LONG,
            "",
            format!("Request URI too long: {url_len} bytes, limit is {}", limits.max_url_bytes),
        ));
    }
    // Counted like Go's MaxHeaderBytes: names, values and their ": " and CRLF, plus the request line.
    let head_len = url_len
        + req.method().as_str().len()
        + req.headers().iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum::<usize>();
    if head_len > limits.max_header_bytes {
        return Some(FailureStatus::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "",
            format!(
                "Request header fields too large: {head_len} bytes, limit is {}",
                limits.max_header_bytes
            ),
        ));
    }
    let declared = req
        .body()
        .size_hint()
        .exact()
        .or_else(|| req.headers().get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse::<u64>().ok());
    if let Some(len) = declared.filter(|&len| len > limits.max_body_bytes) {
        tracing::debug!(len, "request body over the limit");
        return Some(body_too_large(limits.max_body_bytes));
    }
    None
}

/// The apiserver's 413 (`errors.NewRequestEntityTooLargeError`).
pub(crate) fn body_too_large(limit: u64) -> FailureStatus {
    FailureStatus::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "RequestEntityTooLarge",
        format!("Request entity too large: limit is {limit}"),
    )
}

pin_project_lite::pin_project! {
    /// A response body as served: keeps the request counted as in flight until the body is done, and ends
    /// long-running bodies (watches) cleanly, between frames, when shutdown starts.
    struct ServedBody {
        #[pin]
        inner: Body,
        guard: Option<ActiveGuard>,
        drain: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    }
}

impl ServedBody {
    fn wrap(inner: Body, guard: ActiveGuard, drain: Option<WaitForCancellationFutureOwned>) -> Body {
        ServedBody { inner, guard: Some(guard), drain: drain.map(Box::pin) }.boxed()
    }
}

impl HttpBody for ServedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        if let Some(drain) = this.drain.as_mut()
            && drain.as_mut().poll(cx).is_ready()
        {
            this.guard.take();
            return Poll::Ready(None);
        }
        let frame = ready!(this.inner.poll_frame(cx));
        if frame.is_none() {
            this.guard.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
