//! Watch fan-out: W watchers on kache (multiplexed over HTTP/2 like client-go), E upstream writes per
//! second carrying their send time. Measures delivery latency (write → receipt), kache's resident memory per
//! idle watcher, and kache's CPU time per delivered event.
//!
//! Scopes: every watcher on the writer's namespace or on all pods (each write reaches every
//! watcher), or node-scoped (`fieldSelector=spec.nodeName=X`, one kubelet per node) and namespace-scoped
//! watchers, where the written pods are spread over the nodes or namespaces and a write reaches only the
//! watchers of its pod's node or namespace. `watch_index = false` runs kache with `--watch-index=false`
//! (every watcher woken by every event) for the before/after comparison.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use ::http::Request;
use anyhow::Context as _;
use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use http_body_util::{BodyExt as _, Empty};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::{Mutex, watch};
use tokio::task::JoinSet;

use crate::ctx::{Ctx, SYNC_TIMEOUT};
use crate::http;
use crate::procs::{KacheOpts, Upstream, cpu_time, start_kache_with, start_sim};
use crate::results::{Latency, RunReport, Series, Table, fmt_bytes, fmt_num, histogram, record};
use crate::scenario::{WatchScope, WatchSpec};
use crate::writer::{self, WRITER_NAMESPACE};

/// How long all watchers may take to be established.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(120);
/// How long deliveries may trail the last write.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(15);
/// Poll period while waiting for the last deliveries.
const DRAIN_POLL: Duration = Duration::from_millis(50);
/// Latency samples a watcher buffers before taking the shared histogram's lock.
const LOCAL_SAMPLES: usize = 256;
/// Pods the scoped writer cycles through at most (one per node or namespace up to this many): enough that
/// writes land on many distinct watchers, few enough to create quickly.
const MAX_SCOPED_PODS: usize = 1000;

/// What all watchers of a run share.
struct Shared {
    established: watch::Sender<usize>,
    delivered: AtomicU64,
    hist: Mutex<Histogram<u64>>,
    errors: std::sync::Mutex<Vec<String>>,
}

pub async fn run(ctx: &Ctx, specs: &[WatchSpec], report: &mut RunReport) -> anyhow::Result<()> {
    ctx.progress.inc_length(specs.len() as u64);
    let mut table = Table::new(
        "Watch fan-out",
        &[
            "run",
            "watchers",
            "events/s",
            "writes",
            "delivered",
            "expected",
            "p50 ms",
            "p99 ms",
            "max ms",
            "idle RSS/watcher",
            "CPU/event",
            "load generator CPU",
        ],
    );
    for spec in specs {
        run_one(ctx, spec, report, &mut table).await.with_context(|| format!("watch {}", spec.name))?;
        ctx.progress.inc(1);
    }
    report.tables.push(table);
    Ok(())
}

async fn run_one(
    ctx: &Ctx,
    spec: &WatchSpec,
    report: &mut RunReport,
    table: &mut Table,
) -> anyhow::Result<()> {
    ctx.progress.set_message(format!("watch {}: starting", spec.name));
    let sim = start_sim(&ctx.bins, &spec.cluster, &ctx.log(&format!("watch-{}-sim", spec.name))).await?;
    let log = ctx.log(&format!("watch-{}-kache", spec.name));
    let index_flag = format!("--watch-index={}", spec.watch_index);
    let mut kache = start_kache_with(
        &ctx.bins.kache,
        &KacheOpts {
            upstream: Upstream::Url(&sim.url),
            resources: "pods",
            tls: None,
            log: &log,
            args: &[&index_flag],
        },
    )
    .await?;
    kache.wait_synced(1, SYNC_TIMEOUT).await?;
    let client = http::client(16);
    let layout = Layout::new(spec);
    layout.create_pods(&client, &sim.url).await?;
    let path = layout.list_path();
    let head = http::get(&client, &http::url(&sim.url, &path, "limit=1"), None, false).await?.head;
    let rv = http::list_resource_version(&head).context("no resourceVersion in the sim's list")?;
    // kache has caught up with the writer's pods once a not-older-than read at that revision answers.
    let caught_up = format!("resourceVersion={rv}&limit=1");
    http::get(&client, &http::url(&kache.url, &path, &caught_up), None, false).await?;
    let rss_before = kache.rss()?;

    ctx.progress.set_message(format!("watch {}: opening {} watchers", spec.name, spec.watchers));
    let (est_tx, mut est_rx) = watch::channel(0usize);
    let shared = Arc::new(Shared {
        established: est_tx,
        delivered: AtomicU64::new(0),
        hist: Mutex::new(histogram()),
        errors: std::sync::Mutex::new(Vec::new()),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let authority = kache.url.trim_start_matches("http://").to_string();
    let mut set = JoinSet::new();
    let per_conn = spec.streams_per_connection.max(1);
    for first in (0..spec.watchers).step_by(per_conn) {
        let sender = connect_h2(&authority).await?;
        for j in first..(first + per_conn).min(spec.watchers) {
            let uri = format!("{}{}", kache.url, layout.watch_uri(j, &rv));
            set.spawn(watcher(sender.clone(), uri, spec.protobuf, shared.clone(), stop_rx.clone()));
        }
    }
    tokio::time::timeout(ESTABLISH_TIMEOUT, est_rx.wait_for(|n| *n >= spec.watchers))
        .await
        .context("watchers were not all established in time")?
        .context("watchers ended")?;
    // Settle: let kache finish whatever per-watcher setup runs after the response head.
    tokio::time::sleep(Duration::from_secs_f64(spec.settle_secs)).await;
    let rss_idle = kache.rss()?;
    let idle_per_watcher = rss_idle.saturating_sub(rss_before) as f64 / spec.watchers.max(1) as f64;

    ctx.progress.set_message(format!(
        "watch {}: {} watchers, {} writes/s for {} s",
        spec.name, spec.watchers, spec.events_per_sec, spec.duration_secs
    ));
    let cpu_before = kache.cpu()?;
    // The generator's own CPU over the same phase: shows whether the receiving side was the bottleneck.
    let own_before = cpu_time(std::process::id())?;
    let delivered_before = shared.delivered.load(Relaxed);
    let (written, expected) = layout
        .write(&client, &sim.url, spec.events_per_sec, Duration::from_secs_f64(spec.duration_secs))
        .await;
    let drain_start = Instant::now();
    while shared.delivered.load(Relaxed) - delivered_before < expected
        && drain_start.elapsed() < DRAIN_TIMEOUT
    {
        tokio::time::sleep(DRAIN_POLL).await;
    }
    let cpu = kache.cpu()?.saturating_sub(cpu_before);
    let own = cpu_time(std::process::id())?.saturating_sub(own_before);
    let delivered = shared.delivered.load(Relaxed) - delivered_before;
    stop_tx.send_replace(true);
    set.join_all().await;

    for e in written.errors {
        report.error(format!("watch {} write: {e}", spec.name));
    }
    for e in shared.errors.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
        report.error(format!("watch {}: {e}", spec.name));
    }
    if delivered < expected {
        report.error(format!("watch {}: {delivered} of {expected} events delivered", spec.name));
    }
    let hist = shared.hist.lock().await.clone();
    let lat = Latency::of(&hist);
    let cpu_per_event_us = if delivered > 0 { cpu.as_secs_f64() * 1e6 / delivered as f64 } else { 0.0 };
    let label = format!("{}, {} events/s", layout.describe(), spec.events_per_sec);
    let detail = format!("{} deliveries of {} writes", lat.count, written.ok);
    report.figure(format!("Delivery latency p50 ({label})"), lat.p50_ms, "ms", None, detail.clone());
    report.figure(format!("Delivery latency p99 ({label})"), lat.p99_ms, "ms", spec.goal_p99_ms, detail);
    report.figure(
        format!("kache memory per idle watcher ({} watchers)", spec.watchers),
        idle_per_watcher / 1024.0,
        "KiB",
        spec.goal_idle_bytes_per_watcher.map(|b| b / 1024.0),
        format!("VmRSS {} → {} after opening them", fmt_bytes(rss_before as f64), fmt_bytes(rss_idle as f64)),
    );
    report.figure(
        format!("kache CPU per delivered event ({label})"),
        cpu_per_event_us,
        "µs",
        None,
        format!("{:.2} s user+system for {delivered} deliveries", cpu.as_secs_f64()),
    );
    table.row(vec![
        spec.name.clone(),
        layout.describe(),
        fmt_num(spec.events_per_sec),
        written.ok.to_string(),
        delivered.to_string(),
        expected.to_string(),
        fmt_num(lat.p50_ms),
        fmt_num(lat.p99_ms),
        fmt_num(lat.max_ms),
        fmt_bytes(idle_per_watcher),
        format!("{} µs", fmt_num(cpu_per_event_us)),
        format!("{:.1} s", own.as_secs_f64()),
    ]);
    let cdf = Series {
        plot: "watch-delivery-cdf".into(),
        title: "Watch delivery latency (CDF)".into(),
        x_label: "delivery latency (ms)".into(),
        y_label: "percentile".into(),
        log_x: true,
        log_y: false,
        name: format!("{} @ {} ev/s", layout.describe(), spec.events_per_sec),
        points: vec![],
    };
    if !hist.is_empty() {
        for i in 0..=200 {
            let q = f64::from(i) / 200.0;
            report.point(&cdf, hist.value_at_quantile(q) as f64 / 1000.0, q * 100.0);
        }
    }
    kache.stop().await;
    sim.stop().await;
    Ok(())
}

/// Where the written pods live and what each watcher selects.
struct Layout {
    scope: WatchScope,
    watchers: usize,
    /// Distinct nodes or namespaces (1 for the unscoped modes).
    values: usize,
    /// Written pods (the scoped modes: pod `p` is on node or in namespace `p % values`).
    pods: usize,
    index: bool,
    protobuf: bool,
}

// === impl Layout ===

impl Layout {
    fn new(spec: &WatchSpec) -> Self {
        let values = match spec.scope {
            WatchScope::Writer | WatchScope::Cluster => 1,
            WatchScope::Node if spec.scope_values == 0 => spec.watchers,
            WatchScope::Namespace if spec.scope_values == 0 => spec.cluster.namespaces,
            WatchScope::Node | WatchScope::Namespace => spec.scope_values,
        }
        .max(1);
        let pods = match spec.scope {
            WatchScope::Writer | WatchScope::Cluster => writer::WRITER_PODS,
            WatchScope::Node | WatchScope::Namespace => values.min(MAX_SCOPED_PODS),
        };
        Self {
            scope: spec.scope,
            watchers: spec.watchers,
            values,
            pods,
            index: spec.watch_index,
            protobuf: spec.protobuf,
        }
    }

    fn describe(&self) -> String {
        let dispatch = match (self.index, self.protobuf) {
            (true, false) => "",
            (false, false) => ", unindexed",
            (true, true) => ", protobuf",
            (false, true) => ", unindexed, protobuf",
        };
        match self.scope {
            WatchScope::Writer => format!("{} watchers{dispatch}", self.watchers),
            WatchScope::Cluster => format!("{} cluster-wide watchers{dispatch}", self.watchers),
            WatchScope::Node => format!("{} watchers on {} nodes{dispatch}", self.watchers, self.values),
            WatchScope::Namespace => {
                format!("{} watchers on {} namespaces{dispatch}", self.watchers, self.values)
            }
        }
    }

    fn scoped(&self) -> bool {
        matches!(self.scope, WatchScope::Node | WatchScope::Namespace)
    }

    /// The list every watcher's path is part of (for the start revision).
    fn list_path(&self) -> String {
        match self.scope {
            WatchScope::Writer => format!("/api/v1/namespaces/{WRITER_NAMESPACE}/pods"),
            _ => "/api/v1/pods".into(),
        }
    }

    /// Watcher `j`'s request: the `j % values`th node or namespace.
    fn watch_uri(&self, j: usize, rv: &str) -> String {
        let v = j % self.values;
        match self.scope {
            WatchScope::Writer | WatchScope::Cluster => {
                format!("{}?watch=true&resourceVersion={rv}", self.list_path())
            }
            WatchScope::Node => format!(
                "/api/v1/pods?watch=true&resourceVersion={rv}&fieldSelector=spec.nodeName%3D{}",
                node_name(v)
            ),
            WatchScope::Namespace => {
                format!("/api/v1/namespaces/ns-{v}/pods?watch=true&resourceVersion={rv}")
            }
        }
    }

    /// Watchers that see a write to pod `p`.
    fn watchers_of(&self, p: usize) -> u64 {
        if !self.scoped() {
            return self.watchers as u64;
        }
        let v = p % self.values;
        (self.watchers / self.values + usize::from(v < self.watchers % self.values)) as u64
    }

    /// Pod `p`'s namespace and URL path.
    fn pod_path(&self, p: usize) -> (String, String) {
        let ns = match self.scope {
            WatchScope::Namespace => format!("ns-{}", p % self.values),
            _ => WRITER_NAMESPACE.to_string(),
        };
        let name = if self.scoped() { format!("lt-s-{p}") } else { writer::pod_name(p) };
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
        (ns, path)
    }

    async fn create_pods(&self, client: &http::Client, base: &str) -> anyhow::Result<()> {
        if !self.scoped() {
            return writer::create_pods(client, base).await;
        }
        for p in 0..self.pods {
            let (ns, path) = self.pod_path(p);
            let name = path.rsplit('/').next().unwrap_or_default();
            let node = match self.scope {
                WatchScope::Node => format!(r#","nodeName":"{}""#, node_name(p % self.values)),
                _ => String::new(),
            };
            let body = format!(
                r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}","labels":{{"app":"loadtest"}}}},"spec":{{"containers":[{{"name":"c","image":"busybox"}}]{node}}}}}"#
            );
            let url = format!("{base}/api/v1/namespaces/{ns}/pods");
            let send = http::Send {
                content_type: Some("application/json"),
                body: Bytes::from(body),
                ..Default::default()
            };
            match http::request(client, http::Method::POST, &url, &send).await {
                Ok(_) => {}
                Err(http::HttpError::Status { status, .. }) if status == http::StatusCode::CONFLICT => {}
                Err(e) => anyhow::bail!("creating {path}: {e}"),
            }
        }
        Ok(())
    }

    /// Timestamped writes at `rate` per second for `duration` (open loop), write `i` to pod `i % pods`;
    /// returns what the writer did and the deliveries its successful writes owe the watchers.
    async fn write(
        &self,
        client: &http::Client,
        base: &str,
        rate: f64,
        duration: Duration,
    ) -> (writer::WriterStats, u64) {
        if !self.scoped() {
            let stats = writer::run(client, base, rate, duration).await;
            let expected = stats.ok * self.watchers as u64;
            return (stats, expected);
        }
        let n = (rate * duration.as_secs_f64()).round().max(0.0) as usize;
        let interval = Duration::from_secs_f64(1.0 / rate.max(0.001));
        let start = tokio::time::Instant::now();
        let mut set = JoinSet::new();
        for i in 0..n {
            tokio::time::sleep_until(start + interval.mul_f64(i as f64)).await;
            let p = i % self.pods;
            let url = format!("{base}{}", self.pod_path(p).1);
            let client = client.clone();
            set.spawn(async move {
                let body = format!(
                    r#"{{"metadata":{{"annotations":{{"{}":"{}"}}}}}}"#,
                    writer::SENT_AT,
                    writer::now_nanos()
                );
                let send = http::Send {
                    content_type: Some("application/merge-patch+json"),
                    body: Bytes::from(body),
                    ..Default::default()
                };
                http::request(&client, http::Method::PATCH, &url, &send).await.map(|f| (p, f.elapsed))
            });
        }
        let mut stats = writer::WriterStats { ok: 0, errors: Vec::new(), latency: histogram() };
        let mut expected = 0;
        for result in set.join_all().await {
            match result {
                Ok((p, elapsed)) => {
                    stats.ok += 1;
                    expected += self.watchers_of(p);
                    record(&mut stats.latency, elapsed);
                }
                Err(e) => stats.errors.push(e.to_string()),
            }
        }
        (stats, expected)
    }
}

fn node_name(v: usize) -> String {
    format!("lt-node-{v}")
}

/// An HTTP/2 (prior knowledge) connection to `authority`.
async fn connect_h2(authority: &str) -> anyhow::Result<SendRequest<Empty<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(authority).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(stream))
        .await
        .context("HTTP/2 handshake with kache")?;
    tokio::spawn(conn);
    Ok(sender)
}

/// One watcher: opens the watch, counts itself established, then records every event's delivery latency.
async fn watcher(
    mut sender: SendRequest<Empty<Bytes>>,
    uri: String,
    protobuf: bool,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) {
    let mut stopping = stop.clone();
    let fail = |e: String| shared.errors.lock().unwrap_or_else(|p| p.into_inner()).push(e);
    let accept = if protobuf { PROTOBUF } else { "application/json" };
    let req = match Request::get(&uri).header(::http::header::ACCEPT, accept).body(Empty::new()) {
        Ok(r) => r,
        Err(e) => return fail(e.to_string()),
    };
    if let Err(e) = sender.ready().await {
        return fail(format!("connection: {e}"));
    }
    let resp = match sender.send_request(req).await {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => return fail(format!("watch answered {}", r.status())),
        Err(e) => return fail(format!("watch: {e}")),
    };
    shared.established.send_modify(|n| *n += 1);
    let mut body = resp.into_body();
    let mut buf = BytesMut::new();
    let mut local: Vec<Duration> = Vec::with_capacity(LOCAL_SAMPLES);
    loop {
        tokio::select! {
            frame = body.frame() => match frame {
                Some(Ok(f)) => {
                    let Ok(data) = f.into_data() else { continue };
                    buf.extend_from_slice(&data);
                    let mut n = 0;
                    let mut record = |d: Option<Duration>| if let Some(d) = d {
                        local.push(d);
                        n += 1;
                    };
                    if protobuf {
                        drain_frames(&mut buf, |frame| record(writer::latency_of_proto(frame)));
                    } else {
                        http::drain_lines(&mut buf, |line| record(writer::latency_of(line)));
                    }
                    shared.delivered.fetch_add(n, Relaxed);
                    if local.len() >= LOCAL_SAMPLES {
                        flush(&shared, &mut local).await;
                    }
                }
                Some(Err(e)) => {
                    fail(format!("watch stream: {e}"));
                    break;
                }
                None => {
                    let stopped = *stop.borrow();
                    if !stopped {
                        fail("watch stream ended early".into());
                    }
                    break;
                }
            },
            _ = stopping.changed() => break,
        }
    }
    flush(&shared, &mut local).await;
}

/// The protobuf media type a protobuf watcher accepts (kache answers `;stream=watch` frames).
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// Calls `f` with each whole length-prefixed frame (a 4-byte big-endian length, then a `WatchEvent`) at the
/// start of `buf` and removes it; a partial frame stays for the next read.
fn drain_frames(buf: &mut BytesMut, mut f: impl FnMut(&[u8])) {
    while let Some(len) = buf.get(..4).map(|p| u32::from_be_bytes([p[0], p[1], p[2], p[3]]) as usize) {
        if buf.len() < 4 + len {
            break;
        }
        let frame = buf.split_to(4 + len);
        f(&frame[4..]);
    }
}

async fn flush(shared: &Shared, local: &mut Vec<Duration>) {
    let mut h = shared.hist.lock().await;
    for d in local.drain(..) {
        record(&mut h, d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A protobuf watch frame of a pod carrying the send-time annotation, as a map entry of its ObjectMeta.
    fn frame(sent: &str) -> Vec<u8> {
        let mut entry = vec![0x0a, writer::SENT_AT.len() as u8];
        entry.extend_from_slice(writer::SENT_AT.as_bytes());
        entry.extend_from_slice(&[0x12, sent.len() as u8]);
        entry.extend_from_slice(sent.as_bytes());
        let mut event = b"\x0a\x08MODIFIED\x12\x00k8s\0".to_vec();
        event.extend_from_slice(&[0x62, entry.len() as u8]);
        event.extend_from_slice(&entry);
        let mut out = (event.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&event);
        out
    }

    #[test]
    fn protobuf_frames_are_split_across_reads_and_carry_their_send_time() {
        let mut wire = frame("1700000000000000001");
        wire.extend_from_slice(&frame("1700000000000000002"));
        let mut buf = BytesMut::new();
        let mut seen = Vec::new();
        // Fed in 5-byte reads: frames are only handed over whole.
        for piece in wire.chunks(5) {
            buf.extend_from_slice(piece);
            drain_frames(&mut buf, |f| seen.push(writer::parse_sent_at_proto(f)));
        }
        assert_eq!(seen, vec![Some(1_700_000_000_000_000_001), Some(1_700_000_000_000_000_002)]);
        assert!(buf.is_empty());
        assert_eq!(writer::parse_sent_at_proto(b"no annotation"), None);
    }
}
