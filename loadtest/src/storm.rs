//! Informer storm: kache restarts, and K informers start at once (list+watch or streaming list). Measures
//! the time until every informer is synced and the upstream requests the storm caused (counted by a proxy
//! between kache and the sim).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::BytesMut;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::ctx::{Ctx, SYNC_TIMEOUT};
use crate::http::{self, Client};
use crate::procs::{start_kache, start_sim};
use crate::proxy::CountingProxy;
use crate::results::{RunReport, Table, fmt_num, median};
use crate::scenario::{InformerMode, StormSpec};

/// First retry delay of an informer whose request failed (kache not listening yet, 429 while syncing).
const RETRY_MIN: Duration = Duration::from_millis(20);
/// Longest retry delay.
const RETRY_MAX: Duration = Duration::from_secs(1);
/// The bookmark annotation that ends a streaming list's initial events.
const INITIAL_EVENTS_END: &[u8] = b"k8s.io/initial-events-end";
/// Page size of an informer's list (client-go's).
const PAGE: usize = 500;

pub async fn run(ctx: &Ctx, specs: &[StormSpec], report: &mut RunReport) -> anyhow::Result<()> {
    ctx.progress.inc_length(specs.len() as u64);
    let mut table = Table::new(
        "Informer storm after a kache restart",
        &[
            "run",
            "pods",
            "informers",
            "mode",
            "kache sync s",
            "all synced s",
            "median informer s",
            "upstream lists",
            "upstream watches",
            "upstream other",
            "failed informers",
        ],
    );
    for spec in specs {
        run_one(ctx, spec, report, &mut table).await.with_context(|| format!("storm {}", spec.name))?;
        ctx.progress.inc(1);
    }
    report.tables.push(table);
    Ok(())
}

async fn run_one(
    ctx: &Ctx,
    spec: &StormSpec,
    report: &mut RunReport,
    table: &mut Table,
) -> anyhow::Result<()> {
    ctx.progress.set_message(format!("storm {}: starting", spec.name));
    let sim = start_sim(&ctx.bins, &spec.cluster, &ctx.log(&format!("storm-{}-sim", spec.name))).await?;
    let proxy = CountingProxy::start(&sim.url).await?;
    let mut first =
        start_kache(&ctx.bins, &proxy.url, "pods", &ctx.log(&format!("storm-{}-kache-1", spec.name))).await?;
    first.wait_synced(1, SYNC_TIMEOUT).await?;
    first.stop().await;

    ctx.progress.set_message(format!("storm {}: {} informers", spec.name, spec.clients));
    proxy.counts.reset();
    let t0 = Instant::now();
    let mut kache =
        start_kache(&ctx.bins, &proxy.url, "pods", &ctx.log(&format!("storm-{}-kache-2", spec.name))).await?;
    let client = http::client(spec.clients);
    let deadline = t0 + Duration::from_secs_f64(spec.timeout_secs);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut set = JoinSet::new();
    for _ in 0..spec.clients {
        let (client, url, stop) = (client.clone(), kache.url.clone(), stop_rx.clone());
        let mode = spec.mode;
        set.spawn(async move { informer(&client, &url, mode, t0, deadline, stop).await });
    }
    let kache_sync = kache.wait_synced(1, SYNC_TIMEOUT).await?;
    // Each informer reports when synced, then keeps its watch open until the end of the run.
    let (synced_tx, mut synced_rx) = tokio::sync::mpsc::channel(spec.clients.max(1));
    let mut drains = JoinSet::new();
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok((at, drain))) => {
                let _ = synced_tx.send(at).await;
                drains.spawn(drain);
            }
            Ok(Err(e)) => report.error(format!("storm {}: {e}", spec.name)),
            Err(e) => report.error(format!("storm {}: informer task: {e}", spec.name)),
        }
    }
    drop(synced_tx);
    let counts = proxy.counts.snapshot();
    stop_tx.send_replace(true);
    drains.join_all().await;
    let mut times = Vec::new();
    while let Some(at) = synced_rx.recv().await {
        times.push(at.as_secs_f64());
    }
    let failed = spec.clients - times.len();
    let all = times.iter().copied().fold(0.0, f64::max);
    let mode = match spec.mode {
        InformerMode::ListWatch => "list+watch",
        InformerMode::WatchList => "streaming list",
    };
    let label = format!("{} {mode} informers, {} pods", spec.clients, spec.cluster.pods);
    report.figure(
        format!("Storm: time until all synced ({label})"),
        all,
        "s",
        None,
        format!("from kache's restart; kache itself synced after {:.2} s", kache_sync.as_secs_f64()),
    );
    report.figure(
        format!("Storm: upstream requests caused ({label})"),
        (counts.lists + counts.watches + counts.other) as f64,
        "requests",
        None,
        format!("{} lists, {} watches, {} other", counts.lists, counts.watches, counts.other),
    );
    table.row(vec![
        spec.name.clone(),
        spec.cluster.pods.to_string(),
        spec.clients.to_string(),
        mode.into(),
        fmt_num(kache_sync.as_secs_f64()),
        fmt_num(all),
        fmt_num(median(&times)),
        counts.lists.to_string(),
        counts.watches.to_string(),
        counts.other.to_string(),
        failed.to_string(),
    ]);
    kache.stop().await;
    drop(proxy);
    sim.stop().await;
    Ok(())
}

/// A future that keeps a watch body drained until told to stop.
type Drain = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Starts one informer, retrying until it is synced or the deadline passes; returns when it synced
/// (since `t0`) and the still-open watch to keep draining.
async fn informer(
    client: &Client,
    url: &str,
    mode: InformerMode,
    t0: Instant,
    deadline: Instant,
    stop: watch::Receiver<bool>,
) -> Result<(Duration, Drain), String> {
    let mut delay = RETRY_MIN;
    loop {
        let attempt = match mode {
            InformerMode::ListWatch => list_then_watch(client, url).await,
            InformerMode::WatchList => streaming_list(client, url).await,
        };
        match attempt {
            Ok((body, pending)) => return Ok((t0.elapsed(), Box::pin(drain(body, pending, stop)))),
            Err(e) if Instant::now() + delay >= deadline => return Err(format!("informer gave up: {e}")),
            Err(_) => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RETRY_MAX);
            }
        }
    }
}

/// client-go's reflector without streaming lists: paginated list at resourceVersion=0, then a watch.
async fn list_then_watch(client: &Client, url: &str) -> Result<(Incoming, BytesMut), String> {
    let base = format!("resourceVersion=0&limit={PAGE}");
    let mut query = base.clone();
    let rv = loop {
        let f = http::get(client, &http::url(url, "/api/v1/pods", &query), None, true)
            .await
            .map_err(|e| e.to_string())?;
        match http::continue_token(&f.head) {
            Some(t) => query = http::with_continue(&base, &t),
            None => break http::list_resource_version(&f.head).ok_or("list without resourceVersion")?,
        }
    };
    let watch = format!("watch=true&resourceVersion={rv}&allowWatchBookmarks=true");
    let resp =
        http::open(client, &http::url(url, "/api/v1/pods", &watch)).await.map_err(|e| e.to_string())?;
    Ok((resp.into_body(), BytesMut::new()))
}

/// client-go ≥ 1.35's default: a watch with sendInitialEvents until the initial-events-end bookmark.
async fn streaming_list(client: &Client, url: &str) -> Result<(Incoming, BytesMut), String> {
    let q = "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
    let resp = http::open(client, &http::url(url, "/api/v1/pods", q)).await.map_err(|e| e.to_string())?;
    let mut body = resp.into_body();
    let mut buf = BytesMut::new();
    loop {
        let Some(frame) = body.frame().await else {
            return Err("stream ended before initial-events-end".into());
        };
        let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() else { continue };
        buf.extend_from_slice(&data);
        let mut done = false;
        http::drain_lines(&mut buf, |line| {
            if is_initial_events_end(line) {
                done = true;
            }
        });
        if done {
            return Ok((body, buf));
        }
    }
}

/// Whether a watch event line is the bookmark that ends a streaming list's initial events.
fn is_initial_events_end(line: &[u8]) -> bool {
    memchr::memmem::find(line, b"\"BOOKMARK\"").is_some()
        && memchr::memmem::find(line, INITIAL_EVENTS_END).is_some()
}

/// Reads a watch body until it ends or `stop` is set.
async fn drain(mut body: Incoming, _pending: BytesMut, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            f = body.frame() => if !matches!(f, Some(Ok(_))) { return },
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_initial_events_end_bookmark() {
        let end = br#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        assert!(is_initial_events_end(end));
        assert!(!is_initial_events_end(
            br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}"#
        ));
        assert!(!is_initial_events_end(
            br#"{"type":"ADDED","object":{"metadata":{"name":"k8s.io/initial-events-end"}}}"#
        ));
    }
}
