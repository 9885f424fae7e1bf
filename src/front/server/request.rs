//! Per-request work of the front: limits, classification, the handler call and response wrapping.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::time::Instant;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::conn::{ActiveGuard, Activity};
use super::framing::Framing;
use super::parse_error::{self, EmptyErrors};
use super::{ConnInfo, Handler, Limits};
use crate::codec::status::ApiError;
use crate::front::body::{Body, BoxError};
use crate::front::respond::status as status_response;
use crate::front::route::{Route, Verb};
use crate::metrics::{Limit, Metrics, Source};

/// Per-connection state shared by its requests.
pub(super) struct RequestCtx {
    pub info: ConnInfo,
    pub handler: Arc<dyn Handler>,
    pub limits: Arc<Limits>,
    /// The kache's metrics: requests and limit refusals are counted there.
    pub metrics: Metrics,
    pub activity: Arc<Activity>,
    /// Empty 400/414/431 responses of the service, which the connection's writer must not rewrite.
    pub empty_errors: EmptyErrors,
}

/// Serves one request. Never fails: every error is a Status response.
pub(super) async fn handle(
    req: Request<Incoming>,
    ctx: Arc<RequestCtx>,
) -> Result<Response<Body>, Infallible> {
    let guard = ctx.activity.begin();
    let limits = &ctx.limits;
    if let Some(rejection) = check_limits(&req, limits, &ctx.metrics) {
        return Ok(ServedBody::wrap(rejection, guard, None));
    }

    let started = Instant::now();
    let route = Route::parse(req.method(), req.uri());
    let query = req.uri().query().map(str::to_owned);
    let upgrade = is_upgrade(&req);
    let long_running = route.is_long_running() || upgrade;
    let metric_verb = route.resource().map(|r| reported_verb(r.verb, upgrade, req.headers()));
    let (mut parts, incoming) = req.into_parts();
    parts.extensions.insert(ctx.info.clone());
    let route_resource = route.resource().cloned();
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
            Err(_) => status_response(&timeout_error()),
        }
    };
    if let (Some(r), Some(verb)) = (route_resource, metric_verb) {
        let source = resp.extensions().get::<Source>().copied().unwrap_or(Source::Memory);
        ctx.metrics.request(verb, &r.gvr, resp.status().as_u16(), source, started.elapsed());
    }
    if parse_error::is_rewritable_status(resp.status().as_u16()) && resp.body().size_hint().exact() == Some(0)
    {
        ctx.empty_errors.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
    // Long-running responses end when shutdown starts; others finish their body within the drain time.
    let drain = long_running.then(|| ctx.info.shutdown.drain.clone().cancelled_owned());
    Ok(ServedBody::wrap(resp, guard, drain))
}

/// The verb label of `apiserver_request_total`, as the apiserver reports it (`metrics.CleanVerb`): method
/// based, LIST/WATCH for collection reads, APPLY for server-side apply, CONNECT for upgrades.
fn reported_verb(verb: Verb, upgrade: bool, headers: &http::HeaderMap) -> &'static str {
    if upgrade {
        return "CONNECT";
    }
    match verb {
        Verb::Get => "GET",
        Verb::List => "LIST",
        Verb::Watch => "WATCH",
        Verb::Create => "POST",
        Verb::Update => "PUT",
        Verb::Patch => {
            let apply = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|ct| ct.starts_with("application/apply-patch"));
            if apply { "APPLY" } else { "PATCH" }
        }
        Verb::Delete => "DELETE",
        Verb::DeleteCollection => "DELETECOLLECTION",
        Verb::Proxy => "PROXY",
        Verb::Unknown => "other",
    }
}

/// The apiserver's answer when a request outlives `--request-timeout` (its timeout filter).
fn timeout_error() -> ApiError {
    ApiError::Timeout {
        message: "request did not complete within requested timeout - context deadline exceeded".into(),
        retry_after: 0,
    }
}

/// The client's `timeout` query parameter (e.g. `?timeout=30s`), which the apiserver's request-deadline
/// filter honours when shorter than `--request-timeout`. Values that do not parse are left to whoever serves
/// the request (the upstream answers 400 for them).
pub(super) fn user_timeout(query: Option<&str>) -> Option<std::time::Duration> {
    let value = query?.split('&').find_map(|pair| pair.strip_prefix("timeout="))?;
    let value = crate::front::route::percent_decode(value.as_bytes(), true)?;
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

/// Checks the URL, head and declared body size against the limits; the answer when one is exceeded.
fn check_limits(req: &Request<Incoming>, limits: &Limits, metrics: &Metrics) -> Option<Response<Body>> {
    let url_len = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if url_len > limits.max_url_bytes {
        metrics.limit_rejected(Limit::Headers);
        return Some(status_response(&ApiError::Unknown {
            code: StatusCode::URI_TOO_LONG.as_u16(),
            message: format!("Request URI too long: {url_len} bytes, limit is {}", limits.max_url_bytes),
        }));
    }
    // Counted like Go's MaxHeaderBytes: names, values and their ": " and CRLF, plus the request line; Go
    // reads GO_HEAD_SLACK bytes past the bound before refusing, and refuses over MAX_HEADER_FIELDS fields.
    let head_len = url_len
        + req.method().as_str().len()
        + req.headers().iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum::<usize>();
    if head_len > limits.max_header_bytes.saturating_add(parse_error::GO_HEAD_SLACK)
        || req.headers().len() > parse_error::MAX_HEADER_FIELDS
    {
        metrics.limit_rejected(Limit::Headers);
        return Some(go_error(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE));
    }
    let declared = req
        .body()
        .size_hint()
        .exact()
        .or_else(|| req.headers().get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse::<u64>().ok());
    if let Some(len) = declared.filter(|&len| len > limits.max_body_bytes) {
        tracing::debug!(len, "request body over the limit");
        metrics.limit_rejected(Limit::RequestBody);
        return Some(status_response(&body_too_large(limits.max_body_bytes)));
    }
    None
}

/// The Go server's plain-text refusal of a request head (see [`parse_error`]).
fn go_error(status: StatusCode) -> Response<Body> {
    let text = format!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or(""));
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header(header::CONNECTION, "close")
        .body(crate::front::body::full(text))
        .expect("static headers are valid")
}

/// The apiserver's 413 (`errors.NewRequestEntityTooLargeError`).
pub(crate) fn body_too_large(limit: u64) -> ApiError {
    ApiError::RequestEntityTooLarge(format!("limit is {limit}"))
}

/// How a long-running body ends when shutdown starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DrainState {
    /// Shutdown has not started.
    Running,
    /// Shutdown started mid-event (of a JSON or protobuf watch stream): pass frames on until the event is
    /// complete, so the client never sees half an event.
    FinishingEvent,
    /// The body ends at the next poll.
    Done,
}

pin_project_lite::pin_project! {
    /// A response body as served: keeps the request counted as in flight until the body is done, and ends
    /// long-running bodies (watches) cleanly, between events, when shutdown starts.
    struct ServedBody {
        #[pin]
        inner: Body,
        guard: Option<ActiveGuard>,
        drain: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
        // Where events end in this stream, and whether the bytes sent so far end at one.
        framing: Framing,
        state: DrainState,
    }
}

impl ServedBody {
    fn wrap(
        resp: Response<Body>,
        guard: ActiveGuard,
        drain: Option<WaitForCancellationFutureOwned>,
    ) -> Response<Body> {
        let framing =
            Framing::for_content_type(resp.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()));
        resp.map(|inner| {
            ServedBody {
                inner,
                guard: Some(guard),
                drain: drain.map(Box::pin),
                framing,
                state: DrainState::Running,
            }
            .boxed()
        })
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
        if *this.state == DrainState::Running
            && let Some(drain) = this.drain.as_mut()
            && drain.as_mut().poll(cx).is_ready()
        {
            *this.state =
                if !this.framing.at_boundary() { DrainState::FinishingEvent } else { DrainState::Done };
        }
        if *this.state == DrainState::Done {
            this.guard.take();
            return Poll::Ready(None);
        }
        let frame = ready!(this.inner.poll_frame(cx));
        match &frame {
            Some(Ok(f)) => {
                if let Some(data) = f.data_ref() {
                    this.framing.advance(data);
                }
                if *this.state == DrainState::FinishingEvent && this.framing.at_boundary() {
                    *this.state = DrainState::Done;
                }
            }
            _ => {
                this.guard.take();
            }
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
