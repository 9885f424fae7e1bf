//! Soak: a long run of everything at once against sim + kache — mixed reads (cached, consistent, pretty,
//! gzip), watches, writes through kache, sim churn, reconnect storms of every watcher, and upstream faults
//! (every upstream connection cut; the upstream refusing with 503 for a while) — with kache's resident
//! memory and CPU sampled into a series. Flat memory is the bar: the figure compares the median RSS of the
//! last tenth of the run with that of the second tenth (after the first storm and fault warmed every cache),
//! over every sample and over the samples taken outside storms and faults (the steady state, without what
//! in-flight reads pin); sampling stops at the deadline, before the run winds down (see [`samples`]).
//!
//! `kache-loadtest soak --minutes 30`; the smoke run includes it for a few seconds.
//!
//! ```text
//!   readers, watchers, writer ──▶ kache ──▶ fault proxy ──▶ kache-sim (churn, foreign writes)
//!                                   ▲ /proc/PID sampled        cuts connections / answers 503
//! ```

mod fault;
mod samples;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::BytesMut;
use hdrhistogram::Histogram;
use http::StatusCode;
use http_body_util::BodyExt as _;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::ctx::{Ctx, SYNC_TIMEOUT};
use crate::http::{self as lhttp, Client, HttpError};
use crate::procs::{Bins, start_kache, start_sim};
use crate::results::{Latency, RunReport, Table, fmt_num, histogram, record};
use crate::scenario::Cluster;
use crate::writer::{self, WRITER_NAMESPACE};
use fault::FaultProxy;
use samples::Disturbances;

/// Error messages kept per operation.
const ERRORS_KEPT: usize = 3;

/// `kache-loadtest soak`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Length of the run in minutes.
    #[arg(long, default_value_t = 30.0)]
    pub minutes: f64,
    /// Pods in the simulated cluster.
    #[arg(long, default_value_t = 20_000)]
    pub pods: usize,
    /// Closed-loop readers.
    #[arg(long, default_value_t = 8)]
    pub readers: usize,
    /// Watchers (half on one namespace, half on all pods).
    #[arg(long, default_value_t = 200)]
    pub watchers: usize,
    /// Where the JSON and Markdown go (and subprocess logs).
    #[arg(long, default_value = "loadtest/out")]
    pub out: PathBuf,
    /// Where the SVG plots go.
    #[arg(long, default_value = "loadtest/out/plots")]
    pub plots: PathBuf,
    /// kache binary (default: the release build).
    #[arg(long)]
    pub kache_bin: Option<PathBuf>,
    /// kache-sim binary.
    #[arg(long)]
    pub sim_bin: Option<PathBuf>,
}

/// What one soak does.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub duration: Duration,
    pub cluster: Cluster,
    pub readers: usize,
    pub watchers: usize,
    pub writes_per_sec: f64,
    /// Every watcher drops its stream and resumes from its last resourceVersion at once, this often.
    pub storm_every: Duration,
    /// An upstream fault (alternately: cut every connection; refuse with 503 for `refuse_for`) this often.
    pub fault_every: Duration,
    pub refuse_for: Duration,
    pub sample_every: Duration,
    /// How long after a storm or a fault the samples still show its reads in flight (relists, resumes,
    /// retries) rather than the steady state.
    pub settle: Duration,
}

impl Spec {
    fn from_args(a: &Args) -> Self {
        Self {
            name: format!("soak-{}m", a.minutes),
            duration: Duration::from_secs_f64(a.minutes * 60.0),
            cluster: Cluster { pods: a.pods, namespaces: 50, nodes: 100, churn: 20.0, foreign_writes: 10.0 },
            readers: a.readers,
            watchers: a.watchers,
            writes_per_sec: 10.0,
            storm_every: Duration::from_secs(120),
            fault_every: Duration::from_secs(90),
            refuse_for: Duration::from_secs(10),
            sample_every: Duration::from_secs(5),
            // 200 watchers resuming or relisting 20k pods drain within a few seconds on an idle machine;
            // a loaded one takes several times that.
            settle: Duration::from_secs(30),
        }
    }

    /// The smoke run's: seconds long, tiny, every kind of event at least once.
    pub fn smoke() -> Self {
        Self {
            name: "smoke-soak".into(),
            duration: Duration::from_secs(6),
            cluster: Cluster { pods: 50, namespaces: 2, nodes: 2, churn: 5.0, foreign_writes: 2.0 },
            readers: 2,
            watchers: 4,
            writes_per_sec: 5.0,
            storm_every: Duration::from_secs(2),
            fault_every: Duration::from_millis(1500),
            refuse_for: Duration::from_millis(500),
            sample_every: Duration::from_millis(250),
            settle: Duration::from_millis(300),
        }
    }
}

/// The `soak` subcommand: one run, written as JSON, Markdown and SVG.
pub async fn cli(args: Args) -> anyhow::Result<()> {
    let bins = Bins::resolve(args.kache_bin.clone(), args.sim_bin.clone(), false)?;
    let spec = Spec::from_args(&args);
    let logs = args.out.join("logs").join(&spec.name);
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let ctx = Ctx::new(bins, logs);
    let started = Instant::now();
    let mut report = RunReport {
        scenario: spec.name.clone(),
        description: format!(
            "{} min soak: {} pods, {} readers, {} watchers, {} writes/s, sim churn {}/s; watcher reconnect \
             storm every {} s; upstream fault every {} s (alternately: all connections cut; 503 for {} s).",
            args.minutes,
            spec.cluster.pods,
            spec.readers,
            spec.watchers,
            spec.writes_per_sec,
            spec.cluster.churn,
            spec.storm_every.as_secs(),
            spec.fault_every.as_secs(),
            spec.refuse_for.as_secs()
        ),
        command: crate::command_line(),
        ..RunReport::default()
    };
    ctx.progress.inc_length(1);
    if let Err(e) = run(&ctx, &spec, &mut report).await {
        report.error(format!("soak: {e:#}"));
    }
    ctx.progress.finish_and_clear();
    report.duration_secs = started.elapsed().as_secs_f64();
    let json = args.out.join(format!("{}.json", spec.name));
    std::fs::write(&json, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", json.display()))?;
    crate::plot::draw_all(&report.series, &args.plots)?;
    let md = report.markdown(Some(&args.plots.display().to_string()));
    std::fs::write(args.out.join(format!("{}.md", spec.name)), &md)?;
    println!("{md}");
    Ok(())
}

/// Runs one soak into `report`.
pub async fn run(ctx: &Ctx, spec: &Spec, report: &mut RunReport) -> anyhow::Result<()> {
    ctx.progress.set_message(format!("{}: starting", spec.name));
    let sim = start_sim(&ctx.bins, &spec.cluster, &ctx.log(&format!("{}-sim", spec.name))).await?;
    let faults = FaultProxy::start(&sim.url).await?;
    let mut kache = start_kache(
        &ctx.bins,
        &faults.url,
        "pods,nodes,namespaces",
        &ctx.log(&format!("{}-kache", spec.name)),
    )
    .await?;
    kache.wait_synced(3, SYNC_TIMEOUT).await?;
    let client = lhttp::client(spec.readers + spec.watchers + 16);
    writer::create_pods(&client, &kache.url).await?;

    ctx.progress.set_message(format!("{}: {} s", spec.name, spec.duration.as_secs()));
    let t0 = Instant::now();
    let deadline = t0 + spec.duration;
    let (stop_tx, stop_rx) = watch::channel(false);
    let (storm_tx, storm_rx) = watch::channel(0u64);

    // The sampler stops at the deadline by itself: what follows (readers draining, watchers stopping,
    // shutdown) is not the steady state the figure is about.
    let sampler = tokio::spawn(samples::sample(
        kache.pid,
        kache.metrics_url.clone(),
        t0,
        spec.sample_every,
        deadline,
        stop_rx.clone(),
    ));
    let mut watchers = JoinSet::new();
    for w in 0..spec.watchers {
        let ns = (w % 2 == 0).then(|| format!("ns-{}", w % spec.cluster.namespaces.max(1)));
        let (client, base, storm, stop) =
            (client.clone(), kache.url.clone(), storm_rx.clone(), stop_rx.clone());
        watchers.spawn(async move { watcher(&client, &base, ns.as_deref(), storm, stop).await });
    }
    let mut readers = JoinSet::new();
    for r in 0..spec.readers {
        let (client, base, namespaces) = (client.clone(), kache.url.clone(), spec.cluster.namespaces);
        readers.spawn(async move { reader(&client, &base, r, namespaces, deadline).await });
    }
    let writes = tokio::spawn(writes(client.clone(), kache.url.clone(), spec.writes_per_sec, deadline));

    // Storms and faults on their own clocks until the deadline.
    let (mut storms, mut cuts, mut refusals) = (0u64, 0u64, 0u64);
    let mut disturbances = Disturbances::default();
    let since = |at: Instant| at.duration_since(t0).as_secs_f64();
    let mut next_storm = t0 + spec.storm_every;
    let mut next_fault = t0 + spec.fault_every;
    loop {
        let next = next_storm.min(next_fault).min(deadline);
        tokio::time::sleep_until(next.into()).await;
        if next >= deadline {
            break;
        }
        if next == next_storm {
            storms += 1;
            storm_tx.send_replace(storms);
            disturbances.add(since(next), since(next), spec.settle);
            next_storm += spec.storm_every;
        } else {
            if (cuts + refusals).is_multiple_of(2) {
                cuts += 1;
                faults.cut();
                disturbances.add(since(next), since(next), spec.settle);
            } else {
                refusals += 1;
                faults.refuse(true);
                tokio::time::sleep(spec.refuse_for.min(deadline.saturating_duration_since(Instant::now())))
                    .await;
                faults.refuse(false);
                disturbances.add(since(next), since(Instant::now()), spec.settle);
            }
            next_fault += spec.fault_every;
        }
    }
    faults.refuse(false);
    let mut per_op: Vec<OpResult> = OPS.iter().map(|_| OpResult::default()).collect();
    for r in readers.join_all().await {
        for (acc, o) in per_op.iter_mut().zip(r) {
            acc.merge(o)?;
        }
    }
    let write_result = writes.await.context("writer task")?;
    let elapsed = t0.elapsed().as_secs_f64();
    stop_tx.send_replace(true);
    let mut w_total = WatchResult::default();
    for w in watchers.join_all().await {
        w_total.events += w.events;
        w_total.resumes += w.resumes;
        w_total.relists += w.relists;
        w_total.failed_opens += w.failed_opens;
        w_total.errors.extend(w.errors);
    }
    let samples = sampler.await.unwrap_or_default();
    kache.stop().await;
    sim.stop().await;

    let mut table = Table::new(
        format!(
            "Soak ({}): {} readers, {} watchers, {} writes/s, {} s, {} storms, {} cuts, {} refusals",
            spec.name,
            spec.readers,
            spec.watchers,
            spec.writes_per_sec,
            elapsed as u64,
            storms,
            cuts,
            refusals
        ),
        &["operation", "ok", "refused (5xx/429)", "errors", "req/s", "p50 ms", "p99 ms", "max ms"],
    );
    for (name, o) in OPS
        .iter()
        .map(|op| op.name)
        .chain(["write (merge patch, forwarded)"])
        .zip(per_op.iter().chain(std::iter::once(&write_result)))
    {
        let l = Latency::of(&o.latency);
        table.row(vec![
            name.into(),
            l.count.to_string(),
            o.refused.to_string(),
            o.errors.to_string(),
            fmt_num(l.count as f64 / elapsed),
            fmt_num(l.p50_ms),
            fmt_num(l.p99_ms),
            fmt_num(l.max_ms),
        ]);
        for m in &o.messages {
            report.error(format!("{} {name}: {m}", spec.name));
        }
        // A cached read (resourceVersion=0) never needs the upstream: refusing one is an error too.
        let cached = OPS.iter().any(|op| op.name == name && op.cached);
        for _ in 0..(o.errors + if cached { o.refused } else { 0 }).saturating_sub(o.messages.len() as u64) {
            report.error(format!("{} {name}: (not kept)", spec.name));
        }
    }
    table.row(vec![
        "watch events".into(),
        w_total.events.to_string(),
        String::new(),
        w_total.errors.len().to_string(),
        fmt_num(w_total.events as f64 / elapsed),
        format!("{} resumes", w_total.resumes),
        format!("{} relists", w_total.relists),
        format!("{} failed opens", w_total.failed_opens),
    ]);
    for e in w_total.errors {
        report.error(format!("{} watch: {e}", spec.name));
    }
    report.tables.push(table);
    samples::summarise(spec, &samples, &disturbances, report);
    Ok(())
}

// === readers ===

/// A read operation of the soak.
struct Op {
    name: &'static str,
    /// Served from memory whatever the upstream does (resourceVersion=0).
    cached: bool,
    gzip: bool,
}

const OPS: [Op; 6] = [
    Op { name: "namespace list rv=0", cached: true, gzip: false },
    Op { name: "namespace list rv=0, pretty", cached: true, gzip: false },
    Op { name: "full list rv=0, gzip", cached: true, gzip: true },
    Op { name: "first page (limit=500) rv=0", cached: true, gzip: false },
    Op { name: "namespace list consistent", cached: false, gzip: false },
    Op { name: "get pod (consistent)", cached: false, gzip: false },
];

/// Every [`FULL_LIST_EVERY`]th reader iteration of the gzip full list is issued; the others are skipped,
/// so the big list does not crowd out the rest.
const FULL_LIST_EVERY: usize = 8;

fn op_url(base: &str, op: usize, i: usize, namespaces: usize) -> String {
    let ns = format!("ns-{}", i % namespaces.max(1));
    match op {
        0 => format!("{base}/api/v1/namespaces/{ns}/pods?resourceVersion=0"),
        1 => format!("{base}/api/v1/namespaces/{ns}/pods?resourceVersion=0&pretty=true"),
        2 => format!("{base}/api/v1/pods?resourceVersion=0"),
        3 => format!("{base}/api/v1/pods?resourceVersion=0&limit=500"),
        4 => format!("{base}/api/v1/namespaces/{ns}/pods"),
        _ => format!(
            "{base}/api/v1/namespaces/{WRITER_NAMESPACE}/pods/{}",
            writer::pod_name(i % writer::WRITER_PODS)
        ),
    }
}

/// Latencies of successes, answers refused by status (5xx, 429) and other failures.
struct OpResult {
    latency: Histogram<u64>,
    refused: u64,
    errors: u64,
    messages: Vec<String>,
}

impl Default for OpResult {
    fn default() -> Self {
        Self { latency: histogram(), refused: 0, errors: 0, messages: vec![] }
    }
}

impl OpResult {
    fn add(&mut self, r: Result<Duration, HttpError>) {
        match r {
            Ok(d) => record(&mut self.latency, d),
            Err(HttpError::Status { status, .. })
                if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS =>
            {
                self.refused += 1
            }
            Err(e) => {
                self.errors += 1;
                if self.messages.len() < ERRORS_KEPT {
                    self.messages.push(e.to_string());
                }
            }
        }
    }

    fn add_joined(&mut self, r: Result<Result<Duration, HttpError>, tokio::task::JoinError>) {
        match r {
            Ok(r) => self.add(r),
            Err(e) => {
                self.errors += 1;
                self.messages.push(format!("writer task: {e}"));
            }
        }
    }

    fn merge(&mut self, o: OpResult) -> anyhow::Result<()> {
        self.latency.add(&o.latency).map_err(|e| anyhow::anyhow!("merging histograms: {e}"))?;
        self.refused += o.refused;
        self.errors += o.errors;
        self.messages.extend(o.messages.into_iter().take(ERRORS_KEPT.saturating_sub(self.messages.len())));
        Ok(())
    }
}

/// A closed-loop reader cycling through [`OPS`] until the deadline.
async fn reader(
    client: &Client,
    base: &str,
    r: usize,
    namespaces: usize,
    deadline: Instant,
) -> Vec<OpResult> {
    let mut out: Vec<OpResult> = OPS.iter().map(|_| OpResult::default()).collect();
    let mut i = r;
    while Instant::now() < deadline {
        let op = i % OPS.len();
        let round = i / OPS.len();
        i += 1;
        if op == 2 && !round.is_multiple_of(FULL_LIST_EVERY) {
            continue;
        }
        let url = op_url(base, op, round, namespaces);
        let r = lhttp::get(client, &url, None, OPS[op].gzip).await.map(|f| f.elapsed);
        out[op].add(r);
    }
    out
}

/// Open-loop writes through kache (forwarded) until the deadline.
async fn writes(client: Client, base: String, rate: f64, deadline: Instant) -> OpResult {
    let interval = Duration::from_secs_f64(1.0 / rate.max(0.001));
    let mut tick = tokio::time::interval(interval);
    let mut set = JoinSet::new();
    let mut out = OpResult::default();
    let mut i = 0;
    while Instant::now() < deadline {
        tick.tick().await;
        let (client, base) = (client.clone(), base.clone());
        set.spawn(async move { writer::write(&client, &base, i).await });
        i += 1;
        while let Some(r) = set.try_join_next() {
            out.add_joined(r);
        }
    }
    while let Some(r) = set.join_next().await {
        out.add_joined(r);
    }
    out
}

// === watchers ===

#[derive(Debug, Default)]
struct WatchResult {
    events: u64,
    /// Reconnections from the last resourceVersion (storms, ended streams).
    resumes: u64,
    /// Fresh starts after a 410 (or an unreadable stream).
    relists: u64,
    /// Opens answered with an error status or not connected (retried).
    failed_opens: u64,
    errors: Vec<String>,
}

/// The first `"resourceVersion":"N"` of an event line: the object's own.
fn event_rv(line: &[u8]) -> Option<&str> {
    const KEY: &[u8] = b"\"resourceVersion\":\"";
    let at = memchr::memmem::find(line, KEY)? + KEY.len();
    let len = memchr::memchr(b'"', &line[at..])?;
    std::str::from_utf8(&line[at..at + len]).ok().filter(|s| !s.is_empty())
}

/// A watcher that resumes from its last resourceVersion whenever its stream ends or a storm is signalled,
/// and starts over from a cached list's resourceVersion after a 410.
async fn watcher(
    client: &Client,
    base: &str,
    namespace: Option<&str>,
    mut storm: watch::Receiver<u64>,
    mut stop: watch::Receiver<bool>,
) -> WatchResult {
    let path = match namespace {
        Some(ns) => format!("{base}/api/v1/namespaces/{ns}/pods"),
        None => format!("{base}/api/v1/pods"),
    };
    let mut out = WatchResult::default();
    let mut rv: Option<String> = None;
    let mut backoff = Duration::from_millis(50);
    loop {
        if *stop.borrow() {
            return out;
        }
        let start = match rv.clone() {
            Some(rv) => rv,
            None => match lhttp::get(client, &format!("{path}?resourceVersion=0&limit=1"), None, false).await
            {
                Ok(f) => match lhttp::list_resource_version(&f.head) {
                    Some(rv) => rv,
                    None => {
                        out.errors.push("list without a resourceVersion".into());
                        return out;
                    }
                },
                Err(_) => {
                    out.failed_opens += 1;
                    tokio::time::sleep(backoff).await;
                    continue;
                }
            },
        };
        let url = format!("{path}?watch=true&allowWatchBookmarks=true&resourceVersion={start}");
        let mut body = match lhttp::open(client, &url).await {
            Ok(resp) => resp.into_body(),
            Err(e) => {
                out.failed_opens += 1;
                if let HttpError::Status { status: StatusCode::GONE, .. } = e {
                    rv = None;
                    out.relists += 1;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        rv = Some(start);
        let mut buf = BytesMut::new();
        let reason = loop {
            tokio::select! {
                f = body.frame() => match f {
                    Some(Ok(f)) => {
                        let Ok(d) = f.into_data() else { continue };
                        buf.extend_from_slice(&d);
                        let (mut gone, mut closed) = (false, false);
                        lhttp::drain_lines(&mut buf, |line| {
                            if line.starts_with(br#"{"type":"ERROR""#) {
                                gone = memchr::memmem::find(line, b"\"code\":410").is_some();
                                closed = !gone;
                            } else if let Some(v) = event_rv(line) {
                                out.events += 1;
                                rv = Some(v.to_string());
                            }
                        });
                        if gone {
                            break End::Gone;
                        }
                        if closed {
                            break End::Closed;
                        }
                    }
                    Some(Err(_)) | None => break End::Closed,
                },
                _ = storm.changed() => break End::Storm,
                _ = stop.changed() => return out,
            }
        };
        match reason {
            End::Gone => {
                rv = None;
                out.relists += 1;
            }
            End::Closed | End::Storm => out.resumes += 1,
        }
    }
}

enum End {
    Gone,
    Closed,
    Storm,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_object_resource_version_of_an_event() {
        let line = br#"{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"42"},"spec":{"x":{"resourceVersion":"7"}}}}"#;
        assert_eq!(event_rv(line), Some("42"));
        assert_eq!(event_rv(br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":""}}}"#), None);
    }
}
