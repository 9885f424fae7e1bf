//! List and watch requests against the upstream, and what can go wrong with them.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};

use super::config::ReflectorConfig;
use super::decode::{ApiStatus, DecodeError, decode_status};
use super::stream::WatchStream;
use crate::front::body::{self, Body, BoxError};
use crate::metrics::UpstreamErrorReason;
use crate::options::coverage::MirrorSelector;
use crate::resource::Gvr;
use crate::upstream::Transport;
use crate::upstream::{ReadBodyError, UpstreamError, read_body};

/// Error bodies are Status objects of a few hundred bytes; read at most this much of one.
const MAX_ERROR_BODY: usize = 64 << 10;
/// The User-Agent of kache's own upstream requests.
pub(crate) const USER_AGENT: &str = concat!("kache/", env!("CARGO_PKG_VERSION"), " (reflector)");

/// Why a list or watch failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReflectError {
    /// No response: connecting or exchanging with the upstream failed.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The upstream answered with an error Status (HTTP error or watch ERROR event).
    #[error("upstream answered {}: {} {}", .0.code, .0.reason, .0.message)]
    Api(ApiStatus),
    /// Reading a list body failed mid-way, or it was too large.
    #[error(transparent)]
    Body(#[from] ReadBodyError),
    /// Reading a watch body failed mid-way.
    #[error("reading the watch stream failed: {0}")]
    Stream(#[source] BoxError),
    /// No response (or no byte of a watch) within the deadline.
    #[error("no data from the upstream for {0:?}")]
    Stalled(Duration),
    /// The upstream sent bytes kache cannot use.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A watch line longer than the configured bound.
    #[error("watch frame longer than {0} bytes")]
    FrameTooLarge(usize),
    /// The stream ended inside a frame.
    #[error("watch stream ended inside a frame")]
    Truncated,
    /// A streaming list ended, or sent an ordinary bookmark, before its initial-events-end bookmark: the
    /// upstream does not support streaming lists (or ignored `sendInitialEvents`).
    #[error("streaming list not completed: {0}")]
    NoInitialEventsEnd(&'static str),
    /// A watch ended cleanly right after it opened, with no event.
    #[error("watch closed after {0:?} without any event")]
    ShortWatch(Duration),
}

// === impl ReflectError ===

impl ReflectError {
    /// 410: the resourceVersion is compacted; relist.
    pub(crate) fn is_gone(&self) -> bool {
        matches!(self, Self::Api(s) if s.code == StatusCode::GONE.as_u16())
    }

    /// A client error that retrying the same request will not fix (a streaming list the upstream does not
    /// support, a forbidden resource): 4xx except 408 (timeout), 410 (handled as relist) and 429 (throttling).
    pub(crate) fn is_rejection(&self) -> bool {
        matches!(self, Self::Api(s) if (400..500).contains(&s.code) && !matches!(s.code, 408 | 410 | 429))
    }

    /// Bytes kache could not use (counted as bad frames).
    pub(crate) fn is_bad_bytes(&self) -> bool {
        matches!(self, Self::Decode(_) | Self::FrameTooLarge(_) | Self::Truncated)
    }

    /// The `reason` label of `kache_upstream_errors_total`.
    pub(crate) fn reason(&self) -> UpstreamErrorReason {
        use UpstreamErrorReason as R;
        match self {
            Self::Upstream(e) if e.caused_by::<rustls::Error>() => R::Tls,
            Self::Upstream(UpstreamError::Connect(_)) => R::Connect,
            Self::Upstream(UpstreamError::Transport(_)) => R::Stream,
            Self::Upstream(_) => R::Other,
            Self::Api(s) => match s.code {
                410 => R::Gone,
                429 => R::Throttled,
                408 | 504 => R::Timeout,
                500..=599 => R::Server,
                400..=499 => R::Client,
                _ => R::Other,
            },
            Self::Stalled(_) => R::Timeout,
            Self::Body(_) | Self::Stream(_) | Self::Truncated | Self::ShortWatch(_) => R::Stream,
            Self::Decode(_) | Self::FrameTooLarge(_) | Self::NoInitialEventsEnd(_) => R::Decode,
        }
    }

    /// Counts this error in `kache_upstream_errors_total`.
    pub(crate) fn record(&self, metrics: &crate::metrics::Metrics) {
        metrics.upstream_error(self.reason());
    }

    /// How long the upstream asked us to wait.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Api(s) => s.retry_after,
            _ => None,
        }
    }
}

/// Appends `k=v` to a query string, percent-encoding everything but unreserved characters.
fn push_param(query: &mut String, key: &str, value: &str) {
    if !query.is_empty() {
        query.push('&');
    }
    query.push_str(key);
    query.push('=');
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            query.push(b as char);
        } else {
            query.push_str(&format!("%{b:02X}"));
        }
    }
}

fn get(gvr: &Gvr, query: &str) -> Request<Body> {
    let uri = format!("{}/{}?{query}", gvr.path_prefix(), gvr.resource);
    Request::builder()
        .method(Method::GET)
        .uri(uri)
        .header(header::ACCEPT, "application/json")
        .header(header::USER_AGENT, USER_AGENT)
        .body(body::empty())
        .expect("path and headers built from validated parts")
}

/// A filtered mirror's `labelSelector` / `fieldSelector`, first in every list and watch it sends (a
/// continue token is only valid with the same selectors, which every page repeats).
fn push_selector(query: &mut String, selector: Option<&MirrorSelector>) {
    for (key, value) in selector.map(MirrorSelector::query_params).unwrap_or_default() {
        push_param(query, key, &value);
    }
}

/// A filtered mirror's selectors as a query string (no leading `?` or `&`), for other requests that must
/// see exactly the mirror's selection (the freshness proof watch).
pub(crate) fn selector_query(selector: &MirrorSelector) -> String {
    let mut query = String::new();
    push_selector(&mut query, Some(selector));
    query.trim_start_matches(['?', '&']).to_owned()
}

/// One page of a consistent paginated list (resourceVersion unset).
pub(crate) fn list(
    gvr: &Gvr,
    selector: Option<&MirrorSelector>,
    limit: u32,
    continue_token: Option<&str>,
) -> Request<Body> {
    let mut q = String::new();
    push_selector(&mut q, selector);
    push_param(&mut q, "limit", &limit.to_string());
    if let Some(token) = continue_token {
        push_param(&mut q, "continue", token);
    }
    get(gvr, &q)
}

/// A streaming list: the full current state as ADDED events, the initial-events-end bookmark, then live events.
pub(crate) fn watch_list(gvr: &Gvr, selector: Option<&MirrorSelector>, timeout_secs: u64) -> Request<Body> {
    let mut q = String::new();
    push_selector(&mut q, selector);
    push_param(&mut q, "watch", "1");
    push_param(&mut q, "sendInitialEvents", "true");
    push_param(&mut q, "resourceVersionMatch", "NotOlderThan");
    push_param(&mut q, "allowWatchBookmarks", "true");
    push_param(&mut q, "timeoutSeconds", &timeout_secs.to_string());
    get(gvr, &q)
}

/// A watch of every change after `rv`.
pub(crate) fn watch(
    gvr: &Gvr,
    selector: Option<&MirrorSelector>,
    rv: u64,
    timeout_secs: u64,
) -> Request<Body> {
    let mut q = String::new();
    push_selector(&mut q, selector);
    push_param(&mut q, "watch", "1");
    push_param(&mut q, "resourceVersion", &rv.to_string());
    push_param(&mut q, "allowWatchBookmarks", "true");
    push_param(&mut q, "timeoutSeconds", &timeout_secs.to_string());
    get(gvr, &q)
}

/// Sends a request and waits for the response head, at most `request_timeout`; error statuses become
/// [`ReflectError::Api`].
async fn send(
    transport: &dyn Transport,
    req: Request<Body>,
    config: &ReflectorConfig,
) -> Result<Response<Body>, ReflectError> {
    let resp = tokio::time::timeout(config.request_timeout, transport.send(req))
        .await
        .map_err(|_| ReflectError::Stalled(config.request_timeout))??;
    if resp.status().is_success() {
        return Ok(resp);
    }
    let code = resp.status().as_u16();
    let header_retry = retry_after_header(resp.headers());
    let bytes =
        match tokio::time::timeout(config.request_timeout, read_body(resp.into_body(), MAX_ERROR_BODY)).await
        {
            Ok(Ok(bytes)) => bytes,
            _ => Bytes::new(),
        };
    let mut status = decode_status(&bytes, code);
    status.code = code;
    status.retry_after = status.retry_after.or(header_retry);
    Err(ReflectError::Api(status))
}

fn retry_after_header(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// At most this many `Warning` values are learned from an upstream response, each at most
/// [`MAX_WARNING_BYTES`] (the apiserver itself truncates its warnings to a few KiB in all).
pub(crate) const MAX_WARNINGS: usize = 8;
pub(crate) const MAX_WARNING_BYTES: usize = 2048;

/// The `Warning` headers of a successful list or watch of a whole resource: what the upstream says about
/// every read of that resource version (a deprecation), which kache repeats on its own answers.
pub(crate) fn warnings(headers: &HeaderMap) -> Vec<HeaderValue> {
    headers
        .get_all(header::WARNING)
        .iter()
        .filter(|v| v.len() <= MAX_WARNING_BYTES)
        .take(MAX_WARNINGS)
        .cloned()
        .collect()
}

/// GETs a whole (bounded) response body, with the response's [`warnings`].
pub(crate) async fn fetch(
    transport: &dyn Transport,
    req: Request<Body>,
    config: &ReflectorConfig,
) -> Result<(Bytes, Vec<HeaderValue>), ReflectError> {
    let deadline = config.request_timeout;
    let read = async {
        let resp = send(transport, req, config).await?;
        let warnings = warnings(resp.headers());
        let body = read_body(resp.into_body(), config.max_page_bytes).await.map_err(ReflectError::Body)?;
        Ok((body, warnings))
    };
    tokio::time::timeout(deadline, read).await.map_err(|_| ReflectError::Stalled(deadline))?
}

/// Opens a watch and returns its framed stream, with the response's [`warnings`].
pub(crate) async fn open_watch(
    transport: &dyn Transport,
    req: Request<Body>,
    config: &ReflectorConfig,
) -> Result<(WatchStream, Vec<HeaderValue>), ReflectError> {
    let resp = send(transport, req, config).await?;
    let warnings = warnings(resp.headers());
    Ok((WatchStream::new(resp.into_body(), config.stall_timeout, config.max_frame_bytes), warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_encoded() {
        let req = list(&Gvr::new("apps", "v1", "deployments"), None, 500, Some("ab+/=c"));
        assert_eq!(req.uri().to_string(), "/apis/apps/v1/deployments?limit=500&continue=ab%2B%2F%3Dc");
    }

    #[test]
    fn watch_requests_carry_the_streaming_list_parameters() {
        let req = watch_list(&Gvr::new("", "v1", "pods"), None, 321);
        assert_eq!(
            req.uri().to_string(),
            "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
             &allowWatchBookmarks=true&timeoutSeconds=321"
        );
        let req = watch(&Gvr::new("", "v1", "pods"), None, 42, 300);
        assert_eq!(
            req.uri().to_string(),
            "/api/v1/pods?watch=1&resourceVersion=42&allowWatchBookmarks=true&timeoutSeconds=300"
        );
    }

    #[test]
    fn a_filtered_mirror_sends_its_selectors_on_every_request() {
        let sel = MirrorSelector::parse("app=web,tier in (a,b)", "spec.nodeName=node-1").expect("valid");
        let pods = Gvr::new("", "v1", "pods");
        let expect = "labelSelector=app%3Dweb%2Ctier%20in%20%28a%2Cb%29&fieldSelector=spec.nodeName%3Dnode-1";
        let req = list(&pods, Some(&sel), 500, Some("tok"));
        assert_eq!(req.uri().to_string(), format!("/api/v1/pods?{expect}&limit=500&continue=tok"));
        let req = watch_list(&pods, Some(&sel), 300);
        assert!(
            req.uri()
                .query()
                .expect("query")
                .starts_with(&format!("{expect}&watch=1&sendInitialEvents=true"))
        );
        let req = watch(&pods, Some(&sel), 7, 300);
        assert!(
            req.uri().query().expect("query").starts_with(&format!("{expect}&watch=1&resourceVersion=7"))
        );
    }

    #[test]
    fn classifies_errors() {
        let api = |code| {
            ReflectError::Api(ApiStatus {
                code,
                reason: String::new(),
                message: String::new(),
                retry_after: None,
            })
        };
        assert!(api(410).is_gone());
        assert!(api(422).is_rejection() && api(403).is_rejection());
        assert!(!api(429).is_rejection() && !api(410).is_rejection() && !api(500).is_rejection());
    }
}
