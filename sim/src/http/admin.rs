//! The `/sim/` admin API (test hooks), the upgrade echo endpoint and pod logs.
//!
//! | request | effect |
//! |---|---|
//! | `POST /sim/compact[?revision=N]` | compact storage at N (default: now); answers `{"revision":N}` |
//! | `POST /sim/drop-watches` | end every open watch stream |
//! | `POST /sim/fail?count=N&status=S` | the next N non-admin requests fail with status S |
//! | `POST /sim/delay?ms=N` | delay every non-admin response by N ms (0 = off) |
//! | `POST /sim/stall-watches?on=true\|false` | stop/resume watch delivery |
//! | `POST /sim/restart` | drop all connections and the watch history, keep the data |
//! | `GET /sim/revision` | the current global revision |
//! | `GET /sim/served` | API requests answered and their response bytes so far (`{"requests":N,"bytes":B}`) |
//! | `GET /sim/echo-upgrade` with `Upgrade: SPDY/3.1` or `websocket` | 101, then echoes bytes |
//!
//! `pods/{name}/exec`, `/attach` and `/portforward` upgrade the same way (for an existing pod).

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::json;

use crate::http::response::{Body, full, text};
use crate::http::{Ctx, State};
use crate::options::Query;
use crate::status::ApiError;

/// Lines of the fixed pod log.
const LOG_LINES: usize = 3;
/// Period of lines on a followed log.
const LOG_FOLLOW_PERIOD: Duration = Duration::from_millis(500);
/// Grace before an HTTP-triggered restart drops connections, so its own response gets out.
const RESTART_GRACE: Duration = Duration::from_millis(20);

pub async fn handle(ctx: &Ctx, req: Request<Incoming>, q: &Query) -> Response<Body> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    let st = &ctx.state;
    let post = req.method() == Method::POST;
    match (path.as_str(), post) {
        ("/sim/echo-upgrade", _) => echo_upgrade(req),
        ("/sim/revision", _) => ctx.out.json(200, &json!({"revision": st.store.current_rev()})),
        ("/sim/served", _) => {
            let (requests, bytes) = st.admin.served.get();
            ctx.out.json(200, &json!({"requests": requests, "bytes": bytes}))
        }
        ("/sim/compact", true) => {
            let rev = match q.get("revision").map(str::parse::<u64>).transpose() {
                Ok(r) => r,
                Err(_) => {
                    return ctx.out.error(&ApiError::bad_request("revision must be an unsigned integer"));
                }
            };
            ctx.out.json(200, &json!({"revision": st.store.compact(rev)}))
        }
        ("/sim/drop-watches", true) => {
            drop_watches(st);
            ctx.out.json(200, &json!({"dropped": true}))
        }
        ("/sim/fail", true) => {
            let count = q.get("count").and_then(|c| c.parse::<u32>().ok()).unwrap_or(1);
            let status =
                q.get("status").and_then(|c| c.parse::<u16>().ok()).filter(|s| (400..600).contains(s));
            let Some(status) = status else {
                return ctx.out.error(&ApiError::bad_request("status must be an HTTP error code (400-599)"));
            };
            *st.admin.fail.lock().unwrap_or_else(|p| p.into_inner()) = (count, status);
            ctx.out.json(200, &json!({"count": count, "status": status}))
        }
        ("/sim/delay", true) => {
            let ms = q.get("ms").and_then(|c| c.parse::<u64>().ok()).unwrap_or(0);
            *st.admin.delay.lock().unwrap_or_else(|p| p.into_inner()) = Duration::from_millis(ms);
            ctx.out.json(200, &json!({"ms": ms}))
        }
        ("/sim/stall-watches", true) => {
            let on = q.flag("on");
            st.admin.stall.send_replace(on);
            ctx.out.json(200, &json!({"stalled": on}))
        }
        ("/sim/restart", true) => {
            let st = st.clone();
            tokio::spawn(async move {
                tokio::time::sleep(RESTART_GRACE).await;
                restart(&st);
            });
            ctx.out.json(200, &json!({"restarting": true}))
        }
        _ => ctx.out.error(&ApiError::path_not_found()),
    }
}

/// Ends every open watch.
pub fn drop_watches(st: &State) {
    st.admin.drop_watches.send_modify(|g| *g += 1);
}

/// A restart: connections and watches are dropped, the watch cache forgets its history (watches from
/// older RVs get 410), storage keeps every object and revision.
pub fn restart(st: &State) {
    st.store.reset_history();
    drop_watches(st);
    st.admin.drop_connections.send_modify(|g| *g += 1);
}

/// `pods/{name}/exec|attach|portforward`: the pod must exist; the upgraded stream echoes bytes (no
/// container runs in the sim), which is enough to test upgrade forwarding end to end.
pub fn pod_stream(
    ctx: &Ctx,
    req: Request<Incoming>,
    ns: Option<&str>,
    name: &str,
) -> Result<Response<Body>, ApiError> {
    let st = &ctx.state;
    let pods = st.store.find("", "pods").expect("pods is a built-in resource");
    let res = st.store.resource(pods).clone();
    if !matches!(st.store.get(pods, &crate::write::key(&res, ns, name), None), Ok(Some(_))) {
        return Err(ApiError::not_found(&res, name));
    }
    if req.headers().get(http::header::UPGRADE).is_none() {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    Ok(echo_upgrade(req))
}

fn echo_upgrade(mut req: Request<Incoming>) -> Response<Body> {
    let proto = req.headers().get(http::header::UPGRADE).and_then(|v| v.to_str().ok()).map(str::to_string);
    let Some(proto) =
        proto.filter(|p| p.eq_ignore_ascii_case("SPDY/3.1") || p.eq_ignore_ascii_case("websocket"))
    else {
        return text(400, "expected Upgrade: SPDY/3.1 or websocket\n");
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        if let Ok(upgraded) = on_upgrade.await {
            let io = TokioIo::new(upgraded);
            let (mut r, mut w) = tokio::io::split(io);
            // The peer closing ends the echo; errors just end it.
            let _ = tokio::io::copy(&mut r, &mut w).await;
        }
    });
    Response::builder()
        .status(101)
        .header(http::header::CONNECTION, "Upgrade")
        .header(http::header::UPGRADE, proto)
        .body(full(Vec::new()))
        .expect("static headers are valid")
}

/// `GET /api/v1/namespaces/{ns}/pods/{name}/log`: a short fixed text; `follow=true` streams a line
/// periodically until the client goes away.
pub fn pod_log(ctx: &Ctx, ns: Option<&str>, name: &str, q: &Query) -> Result<Response<Body>, ApiError> {
    let st = &ctx.state;
    let pods = st.store.find("", "pods").expect("pods is a built-in resource");
    let res = st.store.resource(pods).clone();
    let key = crate::write::key(&res, ns, name);
    if !matches!(st.store.get(pods, &key, None), Ok(Some(_))) {
        return Err(ApiError::not_found(&res, name));
    }
    let mut body = String::new();
    for i in 1..=LOG_LINES {
        body.push_str(&format!("log line {i} from pod {name}\n"));
    }
    if !q.flag("follow") {
        return Ok(text(200, body));
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(4);
    let st: Arc<State> = st.clone();
    let name = name.to_string();
    tokio::spawn(async move {
        if tx.send(body.into()).await.is_err() {
            return;
        }
        let mut drop_rx = st.admin.drop_connections.subscribe();
        let mut n = LOG_LINES;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(LOG_FOLLOW_PERIOD) => {}
                _ = drop_rx.changed() => return,
            }
            n += 1;
            if tx.send(format!("log line {n} from pod {name}\n").into()).await.is_err() {
                return;
            }
        }
    });
    use http_body_util::BodyExt;
    let stream = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|o| o.map(|b| Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(b))))
    });
    Ok(Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, "text/plain")
        .body(http_body_util::StreamBody::new(stream).boxed())
        .expect("static headers are valid"))
}
