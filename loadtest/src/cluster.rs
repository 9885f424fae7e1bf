//! The testbed's client mix against a real cluster (`kache-loadtest cluster --env DIR/env`, a cluster of
//! `scripts/cluster.sh up DIR`): what a cluster's readers send, directly to the kube-apiserver and through
//! kache in front of it, one phase after the other in the same run, while the cluster's own nodes renew
//! their leases (the foreign writes that move the global revision).
//!
//! The mix, per phase:
//! - **kubelets**: `--kubelets` pod watches narrowed to one node each (`fieldSelector=spec.nodeName=…`), in
//!   protobuf, started as client-go 1.36 informers start them (WatchList: `sendInitialEvents=true`,
//!   `resourceVersionMatch=NotOlderThan`, bookmarks), held for the phase;
//! - **controllers**: one protobuf WatchList informer per resource a controller-manager and scheduler watch,
//!   held for the phase;
//! - **informer storm**: every `--storm-every` seconds, `--storm` WatchList starts of all pods at once, each
//!   closed at its initial-events-end bookmark;
//! - **kubectl**: `--kubectl` loops of `kubectl get pods -A`: consistent Tables in pages of `--page` with
//!   `continue`;
//! - **namespace lists**: consistent JSON lists of one workload namespace's pods, `--ns-list-rate` a second;
//! - **gets**: consistent gets of a node, a different one each time, `--get-rate` a second;
//! - **full lists**: consistent JSON lists of every pod (no `limit`), `--full-list-rate` a second.
//!
//! An idle window before each phase measures the cluster's own cost (controllers, scheduler, nodes) as it
//! drifts; each phase's apiserver and etcd CPU is given beside it and above it. The apiserver's requests are read from its
//! `/metrics` (`apiserver_request_total`, by verb) before and after each phase; kache's from its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use bytes::{Buf as _, BytesMut};
use hdrhistogram::Histogram;
use http_body_util::BodyExt as _;
use tokio::sync::Mutex;

use crate::apiserver::metrics::{self as kmetrics, Counters};
use crate::apiserver::setup::self_signed;
use crate::http::{self, Client, HttpError};
use crate::procs::{self, KacheOpts, Upstream};
use crate::results::{Latency, RunReport, Table, fmt_bytes, fmt_num, histogram, record};

/// Connections kept idle per host (the mix holds a few hundred streams at once; each is its own).
const POOL_IDLE: usize = 64;
/// kache's initial sync of the mix's resources.
const SYNC_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a WatchList start may take before it counts as an error.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The annotation of the bookmark that ends a WatchList's initial events.
const INITIAL_EVENTS_END: &[u8] = b"k8s.io/initial-events-end";
/// kubectl's Accept for `get` (Table, then the plain object).
const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
/// client-go's protobuf Accept.
const PROTOBUF_ACCEPT: &str = "application/vnd.kubernetes.protobuf, */*";
/// The informers a controller-manager and a scheduler hold (list paths), besides pods.
const CONTROLLER_INFORMERS: &[&str] = &[
    "/api/v1/pods",
    "/api/v1/nodes",
    "/api/v1/services",
    "/api/v1/namespaces",
    "/apis/apps/v1/replicasets",
    "/apis/apps/v1/deployments",
    "/apis/discovery.k8s.io/v1/endpointslices",
];
/// What kache caches for the mix (`--resources`).
const KACHE_RESOURCES: &str =
    "pods,nodes,services,namespaces,replicasets.apps,deployments.apps,endpointslices.discovery.k8s.io";
/// The workload's namespaces (scripts/cluster.sh).
const NAMESPACES: &[&str] = &["team-a", "team-b", "team-c"];

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The cluster's env file (`scripts/cluster.sh up DIR` writes `DIR/env`).
    #[arg(long)]
    pub env: PathBuf,
    /// Seconds each phase runs the mix.
    #[arg(long, default_value_t = 60.0)]
    pub secs: f64,
    /// Seconds of the idle phase (the cluster's own cost).
    #[arg(long, default_value_t = 30.0)]
    pub idle_secs: f64,
    /// Kubelet-like pod watches (one node each; at most one per node).
    #[arg(long, default_value_t = 100)]
    pub kubelets: usize,
    /// Informers started at once in each storm.
    #[arg(long, default_value_t = 50)]
    pub storm: usize,
    /// Seconds between storms (the first starts 5 s into the phase).
    #[arg(long, default_value_t = 30.0)]
    pub storm_every: f64,
    /// `kubectl get pods -A` started per second (an open loop: the same offered load on every target).
    #[arg(long, default_value_t = 0.5)]
    pub kubectl_rate: f64,
    /// kubectl's page size (`--chunk-size`).
    #[arg(long, default_value_t = 500)]
    pub page: usize,
    /// Consistent namespace lists per second, over the workload's namespaces (an open loop).
    #[arg(long, default_value_t = 4.0)]
    pub ns_list_rate: f64,
    /// Consistent gets of one node (a different one each time) per second (an open loop).
    #[arg(long, default_value_t = 10.0)]
    pub get_rate: f64,
    /// Consistent JSON lists of every pod (no `limit`) per second (an open loop).
    #[arg(long, default_value_t = 0.1)]
    pub full_list_rate: f64,
    /// kache configurations measured, one phase each: `NAME` or `NAME=FLAGS` (kache serve flags separated by
    /// spaces; `$VAR` is taken from the env file, e.g. `etcd=--etcd-endpoints $ETCD_URL`).
    #[arg(long = "variant", default_values = ["offload", "latency=--consistent-read-prefer latency"])]
    pub variants: Vec<String>,
    /// Concurrent readers of the coalescing sweep: after the mix, closed loops of consistent node gets with
    /// each many readers, directly and through every variant that has the etcd oracle (`--etcd-endpoints`).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 8, 64])]
    pub sweep: Vec<usize>,
    /// Seconds of each sweep level (0: no sweep).
    #[arg(long, default_value_t = 5.0)]
    pub sweep_secs: f64,
    /// Skip the direct phase (kache variants only).
    #[arg(long)]
    pub no_direct: bool,
    /// kache binary (default: $CARGO_TARGET_DIR/release/kache; debug builds are refused).
    #[arg(long)]
    pub kache_bin: Option<PathBuf>,
    /// Run name: <out>/<name>.json and .md.
    #[arg(long, default_value = "cluster")]
    pub run_name: String,
    /// Where JSON, Markdown and kache's logs go.
    #[arg(long, default_value = "loadtest/out")]
    pub out: PathBuf,
}

/// What the mix needs from the cluster's env file.
struct ClusterEnv {
    vars: BTreeMap<String, String>,
    url: String,
    token: String,
    kubeconfig: PathBuf,
    apiserver_pid: u32,
    etcd_pid: Option<u32>,
}

fn read_env(path: &Path) -> anyhow::Result<ClusterEnv> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let vars = parse_env(&text);
    let get = |k: &str| vars.get(k).cloned().with_context(|| format!("{}: no {k}", path.display()));
    Ok(ClusterEnv {
        url: get("KUBE_APISERVER_URL")?,
        token: get("KUBE_ADMIN_TOKEN")?,
        kubeconfig: get("KUBE_ADMIN_TOKEN_KUBECONFIG")?.into(),
        apiserver_pid: get("KUBE_APISERVER_PID")?.parse().context("KUBE_APISERVER_PID")?,
        etcd_pid: vars.get("ETCD_PID").and_then(|p| p.parse().ok()),
        vars,
    })
}

/// `KEY=VALUE` lines (bash's `%q` quoting of plain words; single quotes stripped), comments skipped.
fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v.trim();
            let v = v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')).unwrap_or(v);
            (k.trim().to_string(), v.to_string())
        })
        .collect()
}

/// `$VAR` and `${VAR}` replaced from `vars`.
fn expand(word: &str, vars: &BTreeMap<String, String>) -> anyhow::Result<String> {
    let Some(name) = word.strip_prefix('$') else { return Ok(word.to_string()) };
    let name = name.trim_start_matches('{').trim_end_matches('}');
    vars.get(name).cloned().with_context(|| format!("the env file has no {name}"))
}

// === the mix ===

/// How often a phase of the mix prints where it is.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Latencies and errors of one kind of client in one phase.
#[derive(Default)]
struct Class {
    hist: Option<Histogram<u64>>,
    ok: u64,
    errors: BTreeMap<String, u64>,
    bytes: u64,
}

impl Class {
    fn ok(&mut self, d: Duration, bytes: u64) {
        record(self.hist.get_or_insert_with(histogram), d);
        self.ok += 1;
        self.bytes += bytes;
    }

    fn error(&mut self, e: &str) {
        *self.errors.entry(e.to_string()).or_default() += 1;
    }

    fn latency(&self) -> Latency {
        self.hist.as_ref().map(Latency::of).unwrap_or_default()
    }

    fn errors_text(&self) -> String {
        if self.errors.is_empty() {
            return "0".into();
        }
        self.errors.iter().map(|(k, v)| format!("{v} {k}")).collect::<Vec<_>>().join(", ")
    }
}

fn error_kind(e: &HttpError) -> String {
    match e {
        HttpError::Status { status, .. } => status.as_u16().to_string(),
        HttpError::Transport(_) => "transport".into(),
        HttpError::Body(_) => "body".into(),
        HttpError::Request(_) => "request".into(),
    }
}

/// One target of the mix: a base URL and its bearer token.
#[derive(Clone)]
struct Target {
    base: String,
    bearer: Option<String>,
}

/// What every client of a phase shares.
struct Phase {
    client: Client,
    target: Target,
    deadline: Instant,
    stop: AtomicBool,
    classes: Mutex<BTreeMap<&'static str, Class>>,
}

impl Phase {
    fn over(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }

    async fn ok(&self, class: &'static str, d: Duration, bytes: u64) {
        self.classes.lock().await.entry(class).or_default().ok(d, bytes);
    }

    async fn error(&self, class: &'static str, e: &str) {
        self.classes.lock().await.entry(class).or_default().error(e);
    }

    fn request(
        &self,
        path: &str,
        query: &str,
        accept: &str,
    ) -> anyhow::Result<::http::Request<http_body_util::Full<bytes::Bytes>>> {
        let mut b = ::http::Request::builder()
            .uri(http::url(&self.target.base, path, query))
            .header(::http::header::ACCEPT, accept);
        if let Some(t) = &self.target.bearer {
            b = b.header(::http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        Ok(b.body(http_body_util::Full::new(bytes::Bytes::new()))?)
    }
}

/// Opens a WatchList (protobuf) of `path` narrowed by `selector`, waits for its initial-events-end bookmark
/// (recorded under `class`), then holds the stream until the phase ends (`hold`) or closes it.
async fn watch_list(
    phase: Arc<Phase>,
    class: &'static str,
    path: String,
    selector: Option<String>,
    hold: bool,
) {
    let mut query =
        "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true\
                     &timeoutSeconds=600"
            .to_string();
    if let Some(s) = &selector {
        query.push_str("&fieldSelector=");
        query.push_str(&http::query_escape(s));
    }
    let started = Instant::now();
    let req = match phase.request(&path, &query, PROTOBUF_ACCEPT) {
        Ok(r) => r,
        Err(e) => return phase.error(class, &e.to_string()).await,
    };
    let resp = match tokio::time::timeout(START_TIMEOUT, phase.client.request(req)).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => return phase.error(class, "transport").await,
        Err(_) => return phase.error(class, "timeout").await,
    };
    if !resp.status().is_success() {
        return phase.error(class, resp.status().as_str()).await;
    }
    let mut body = resp.into_body();
    let mut buf = BytesMut::new();
    let mut bytes = 0u64;
    let mut started_ok = false;
    loop {
        let left = if started_ok {
            phase.deadline.saturating_duration_since(Instant::now())
        } else {
            START_TIMEOUT.saturating_sub(started.elapsed())
        };
        if left.is_zero() || phase.stop.load(Ordering::Relaxed) {
            break;
        }
        let frame = match tokio::time::timeout(left, body.frame()).await {
            Err(_) => break,
            Ok(None) => break,
            Ok(Some(Err(_))) => {
                if !started_ok {
                    phase.error(class, "body").await;
                }
                return;
            }
            Ok(Some(Ok(f))) => f,
        };
        let Ok(data) = frame.into_data() else { continue };
        if started_ok {
            continue;
        }
        bytes += data.len() as u64;
        buf.extend_from_slice(&data);
        // Length-prefixed protobuf frames.
        while buf.len() >= 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if buf.len() < 4 + len {
                break;
            }
            let end = memchr::memmem::find(&buf[4..4 + len], INITIAL_EVENTS_END).is_some();
            buf.advance(4 + len);
            if end {
                started_ok = true;
                phase.ok(class, started.elapsed(), bytes).await;
                break;
            }
        }
        if started_ok && !hold {
            return;
        }
    }
    if !started_ok {
        phase.error(class, "no initial-events-end").await;
    }
}

/// Reads in flight per kind of open-loop client at most; a tick that finds them all busy is counted
/// `behind` (the target is not keeping up with the offered rate) and skipped.
const MAX_IN_FLIGHT: usize = 32;

/// Starts `read` every `1/rate` seconds until the phase ends (an open loop: the same offered load for every
/// target, whatever its latency), at most [`MAX_IN_FLIGHT`] at once.
async fn open_loop<F, Fut>(phase: Arc<Phase>, class: &'static str, rate: f64, read: F)
where
    F: Fn(Arc<Phase>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.01)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reads = tokio::task::JoinSet::new();
    loop {
        tick.tick().await;
        if phase.over() {
            break;
        }
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                let fut = read(phase.clone());
                reads.spawn(async move {
                    fut.await;
                    drop(permit);
                });
            }
            Err(_) => phase.error(class, "behind").await,
        }
        while reads.try_join_next().is_some() {}
    }
    while reads.join_next().await.is_some() {}
}

/// One `kubectl get pods -A`: consistent Table pages with `continue`, the whole walk and each page recorded.
async fn kubectl_walk(phase: Arc<Phase>, page: usize) {
    let s = http::Send {
        accept: Some(TABLE_ACCEPT),
        bearer: phase.target.bearer.as_deref(),
        ..Default::default()
    };
    let started = Instant::now();
    let mut query = format!("limit={page}");
    let mut bytes = 0;
    loop {
        let url = http::url(&phase.target.base, "/api/v1/pods", &query);
        let t = Instant::now();
        match http::request(&phase.client, http::Method::GET, &url, &s).await {
            Ok(f) => {
                bytes += f.bytes;
                phase.ok("kubectl page", t.elapsed(), f.bytes).await;
                match http::continue_token(&f.head) {
                    Some(token) if !token.is_empty() => {
                        query = http::with_continue(&format!("limit={page}"), &token)
                    }
                    _ => break,
                }
            }
            Err(e) => return phase.error("kubectl get pods -A", &error_kind(&e)).await,
        }
    }
    phase.ok("kubectl get pods -A", started.elapsed(), bytes).await;
}

/// One consistent JSON read of `path` (a get or a list), recorded under `class`.
async fn read(phase: Arc<Phase>, class: &'static str, path: String) {
    let s = http::Send { bearer: phase.target.bearer.as_deref(), ..Default::default() };
    let url = http::url(&phase.target.base, &path, "");
    let t = Instant::now();
    match http::request(&phase.client, http::Method::GET, &url, &s).await {
        Ok(f) => phase.ok(class, t.elapsed(), f.bytes).await,
        Err(e) => phase.error(class, &error_kind(&e)).await,
    }
}

/// Runs the whole mix against `target` for `secs`; returns the classes' figures.
async fn run_mix(
    client: &Client,
    target: Target,
    args: &Args,
    nodes: &[String],
) -> BTreeMap<&'static str, Class> {
    let phase = Arc::new(Phase {
        client: client.clone(),
        target,
        deadline: Instant::now() + Duration::from_secs_f64(args.secs),
        stop: AtomicBool::new(false),
        classes: Mutex::new(BTreeMap::new()),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for path in CONTROLLER_INFORMERS {
        tasks.spawn(watch_list(phase.clone(), "controller informer start", path.to_string(), None, true));
    }
    for node in nodes.iter().take(args.kubelets) {
        tasks.spawn(watch_list(
            phase.clone(),
            "kubelet pod watch start",
            "/api/v1/pods".into(),
            Some(format!("spec.nodeName={node}")),
            true,
        ));
    }
    let page = args.page;
    tasks.spawn(open_loop(phase.clone(), "kubectl get pods -A", args.kubectl_rate, move |p| {
        kubectl_walk(p, page)
    }));
    // The namespace lists' rate, spread over the workload's namespaces.
    let rate = args.ns_list_rate / NAMESPACES.len() as f64;
    for ns in NAMESPACES {
        tasks.spawn(open_loop(phase.clone(), "namespace list", rate, move |p| {
            read(p, "namespace list", format!("/api/v1/namespaces/{ns}/pods"))
        }));
    }
    {
        let (nodes, next) = (Arc::new(nodes.to_vec()), Arc::new(std::sync::atomic::AtomicUsize::new(0)));
        tasks.spawn(open_loop(phase.clone(), "consistent get", args.get_rate, move |p| {
            let i = next.fetch_add(1, Ordering::Relaxed);
            read(p, "consistent get", format!("/api/v1/nodes/{}", nodes[i % nodes.len()]))
        }));
    }
    tasks.spawn(open_loop(phase.clone(), "full list", args.full_list_rate, |p| {
        read(p, "full list", "/api/v1/pods".into())
    }));
    let storms = {
        let phase = phase.clone();
        let (n, every) = (args.storm, Duration::from_secs_f64(args.storm_every.max(1.0)));
        tokio::spawn(async move {
            let mut next = Instant::now() + Duration::from_secs(5);
            if n == 0 {
                return;
            }
            loop {
                tokio::time::sleep_until(next.into()).await;
                if phase.over() {
                    break;
                }
                let mut storm = tokio::task::JoinSet::new();
                for _ in 0..n {
                    storm.spawn(watch_list(
                        phase.clone(),
                        "informer storm start",
                        "/api/v1/pods".into(),
                        None,
                        false,
                    ));
                }
                while storm.join_next().await.is_some() {}
                next += every;
            }
        })
    };
    // A progress line every PROGRESS_EVERY: where the phase is and what it has answered so far.
    let started = Instant::now();
    let mut tick = tokio::time::interval_at((started + PROGRESS_EVERY).into(), PROGRESS_EVERY);
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(phase.deadline.into()) => break,
            _ = tick.tick() => {
                let classes = phase.classes.lock().await;
                let ok: u64 = classes.values().map(|c| c.ok).sum();
                let errors: u64 = classes.values().flat_map(|c| c.errors.values()).sum();
                eprintln!(
                    "  {:>4.0}/{:.0} s: {ok} reads answered, {errors} errors",
                    started.elapsed().as_secs_f64(),
                    args.secs
                );
            }
        }
    }
    phase.stop.store(true, Ordering::Relaxed);
    // Streams notice the stop at their next frame or at the deadline; requests in flight finish.
    let _ =
        tokio::time::timeout(Duration::from_secs(30), async { while tasks.join_next().await.is_some() {} })
            .await;
    tasks.abort_all();
    storms.abort();
    std::mem::take(&mut *phase.classes.lock().await)
}

// === the coalescing sweep ===

/// The sweep's reads: consistent gets of a node, a different one each time.
const SWEEP_READ: &str = "consistent get";

/// One level of the sweep: `readers` closed loops of consistent node gets against one target.
struct SweepLevel {
    phase: String,
    readers: usize,
    secs: f64,
    class: Class,
    /// kache's counters over the level (unseen for the direct phase).
    kache: Counters,
}

/// Runs every level of `--sweep` against `target` for `--sweep-secs` each: what the etcd oracle's
/// coalescing makes of concurrent consistent reads (etcd requests per proven read) and what they wait.
async fn sweep(
    client: &Client,
    target: &Target,
    metrics_url: Option<&str>,
    args: &Args,
    nodes: &[String],
    phase: &str,
) -> Vec<SweepLevel> {
    let mut levels = Vec::new();
    if args.sweep_secs <= 0.0 {
        return levels;
    }
    for &readers in args.sweep.iter().filter(|n| **n > 0) {
        eprintln!("sweep {phase}: {readers} concurrent consistent gets for {} s", args.sweep_secs);
        let before = kmetrics::scrape(client, metrics_url).await;
        let started = Instant::now();
        // The mix's own reads, in closed loops instead of open ones.
        let run = Arc::new(Phase {
            client: client.clone(),
            target: target.clone(),
            deadline: started + Duration::from_secs_f64(args.sweep_secs),
            stop: AtomicBool::new(false),
            classes: Mutex::new(BTreeMap::new()),
        });
        let mut loops = tokio::task::JoinSet::new();
        for r in 0..readers {
            let (run, nodes) = (run.clone(), nodes.to_vec());
            loops.spawn(async move {
                for node in nodes.iter().cycle().skip(r).step_by(readers) {
                    if run.over() {
                        break;
                    }
                    read(run.clone(), SWEEP_READ, format!("/api/v1/nodes/{node}")).await;
                }
            });
        }
        while loops.join_next().await.is_some() {}
        let secs = started.elapsed().as_secs_f64();
        let kache = kmetrics::scrape(client, metrics_url).await.minus(&before);
        let class = run.classes.lock().await.remove(SWEEP_READ).unwrap_or_default();
        levels.push(SweepLevel { phase: phase.to_string(), readers, secs, class, kache });
    }
    levels
}

/// The sweep's table, and for each kache phase with the oracle its etcd requests per proven read in the mix
/// and at the sweep's highest concurrency.
fn sweep_table(report: &mut RunReport, phases: &[Measured], levels: &[SweepLevel]) {
    for p in phases.iter().filter(|p| p.cost.kache.seen && p.cost.kache.etcd_proven > 0.0) {
        let k = &p.cost.kache;
        report.figure(
            format!("etcd requests per read proven by etcd, the mix ({})", p.name),
            k.etcd_requests / k.etcd_proven,
            "requests",
            Some(1.0),
            format!(
                "{} etcd requests (revision reads, progress requests, prefix checks, watches) for {} reads proven; \
                 the mix's reads mostly arrive one at a time (see the sweep)",
                fmt_num(k.etcd_requests),
                fmt_num(k.etcd_proven)
            ),
        );
    }
    if levels.is_empty() {
        return;
    }
    let mut t = Table::new(
        "Coalescing sweep: closed loops of consistent node gets, each level's readers at once; the etcd oracle \
         serves every read that arrived before a revision read and a progress request started with those two",
        &[
            "phase",
            "readers",
            "reads/s",
            "errors",
            "p50 ms",
            "p99 ms",
            "reads proven by etcd",
            "etcd requests",
            "etcd requests per proven read",
        ],
    );
    for l in levels {
        let lat = l.class.latency();
        let per =
            (l.kache.seen && l.kache.etcd_proven > 0.0).then(|| l.kache.etcd_requests / l.kache.etcd_proven);
        t.row(vec![
            l.phase.clone(),
            l.readers.to_string(),
            format!("{:.0}", l.class.ok as f64 / l.secs.max(1e-9)),
            l.class.errors_text(),
            format!("{:.1}", lat.p50_ms),
            format!("{:.1}", lat.p99_ms),
            if l.kache.seen { fmt_num(l.kache.etcd_proven) } else { "—".into() },
            if l.kache.seen { fmt_num(l.kache.etcd_requests) } else { "—".into() },
            per.map_or("—".into(), |x| format!("{x:.2}")),
        ]);
    }
    report.tables.push(t);
    // The highest concurrency's cost per read, for each kache phase swept.
    let top = levels.iter().map(|l| l.readers).max().unwrap_or(0);
    for l in levels.iter().filter(|l| l.readers == top && l.kache.seen && l.kache.etcd_proven > 0.0) {
        let direct =
            levels.iter().find(|d| d.phase == "direct" && d.readers == top).map(|d| d.class.latency());
        report.figure(
            format!("etcd requests per read proven by etcd, {top} concurrent consistent gets ({})", l.phase),
            l.kache.etcd_requests / l.kache.etcd_proven,
            "requests",
            Some(1.0),
            format!(
                "{} reads proven, {} etcd requests, p50 {:.1} ms{}",
                fmt_num(l.kache.etcd_proven),
                fmt_num(l.kache.etcd_requests),
                l.class.latency().p50_ms,
                direct.map_or(String::new(), |d| format!(" (direct: {:.1} ms)", d.p50_ms))
            ),
        );
    }
}

// === measuring ===

/// The apiserver's `apiserver_request_total`, summed by verb.
async fn apiserver_requests(client: &Client, env: &ClusterEnv) -> BTreeMap<String, f64> {
    let send = http::Send { keep_body: true, bearer: Some(&env.token), ..Default::default() };
    let url = http::url(&env.url, "/metrics", "");
    let Ok(f) = http::request(client, http::Method::GET, &url, &send).await else { return BTreeMap::new() };
    let text = String::from_utf8_lossy(&f.body.unwrap_or_default()).into_owned();
    let mut by_verb = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let Some((key, value)) = line.rsplit_once(' ') else { continue };
        let Ok(v) = value.parse::<f64>() else { continue };
        let Some(verb) = label(key, "verb") else { continue };
        *by_verb.entry(verb.to_string()).or_default() += v;
    }
    by_verb
}

fn label<'a>(key: &'a str, name: &str) -> Option<&'a str> {
    let at = key.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = &key[at..];
    Some(&rest[..rest.find('"')?])
}

/// CPU seconds and request counts of the upstream (and kache) over one phase.
struct Cost {
    secs: f64,
    apiserver_cpu: f64,
    etcd_cpu: f64,
    kache_cpu: f64,
    requests: BTreeMap<String, f64>,
    kache: Counters,
}

struct Meter {
    at: Instant,
    apiserver_cpu: f64,
    etcd_cpu: f64,
    kache_cpu: f64,
    requests: BTreeMap<String, f64>,
    kache: Counters,
}

async fn meter(client: &Client, env: &ClusterEnv, kache: Option<&procs::KacheProc>) -> Meter {
    let cpu = |pid: Option<u32>| pid.and_then(|p| procs::cpu_time(p).ok()).map_or(0.0, |d| d.as_secs_f64());
    Meter {
        at: Instant::now(),
        apiserver_cpu: cpu(Some(env.apiserver_pid)),
        etcd_cpu: cpu(env.etcd_pid),
        kache_cpu: cpu(kache.map(|k| k.pid)),
        requests: apiserver_requests(client, env).await,
        kache: kmetrics::scrape(client, kache.and_then(|k| k.metrics_url.as_deref())).await,
    }
}

impl Meter {
    fn since(&self, before: &Meter) -> Cost {
        let mut requests = BTreeMap::new();
        for (verb, v) in &self.requests {
            let d = v - before.requests.get(verb).copied().unwrap_or(0.0);
            if d > 0.0 {
                requests.insert(verb.clone(), d);
            }
        }
        Cost {
            secs: self.at.duration_since(before.at).as_secs_f64(),
            apiserver_cpu: self.apiserver_cpu - before.apiserver_cpu,
            etcd_cpu: self.etcd_cpu - before.etcd_cpu,
            kache_cpu: self.kache_cpu - before.kache_cpu,
            requests,
            kache: self.kache.minus(&before.kache),
        }
    }
}

/// One measured phase.
struct Measured {
    name: String,
    cost: Cost,
    classes: BTreeMap<&'static str, Class>,
    /// kache's RSS at the end and the JSON bytes of the objects it caches.
    memory: Option<(u64, u64)>,
    /// What kache said it held at the phase's end (its `*_bytes` gauges of stores and caches).
    held: Vec<(String, f64)>,
    /// The parts of the RSS at the end (anonymous, file-backed, shared).
    rss_parts: Vec<(&'static str, u64)>,
    /// The RSS and its parts [`SETTLE`] after the end, the mix stopped.
    settled: Option<(u64, Vec<(&'static str, u64)>)>,
}

/// How long after a kache phase's end its RSS is read again.
const SETTLE: Duration = Duration::from_secs(5);

fn fmt_rss_parts(parts: &[(&'static str, u64)]) -> String {
    parts.iter().map(|(n, b)| format!("{n} {}", fmt_bytes(*b as f64))).collect::<Vec<_>>().join(", ")
}

/// kache's gauges of the bytes its stores and caches hold, summed per metric.
async fn kache_bytes_held(client: &Client, metrics_url: Option<&str>) -> Vec<(String, f64)> {
    let Some(base) = metrics_url else { return Vec::new() };
    let send = http::Send { keep_body: true, ..Default::default() };
    let Ok(f) = http::request(client, http::Method::GET, &http::url(base, "/metrics", ""), &send).await
    else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&f.body.unwrap_or_default()).into_owned();
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, value)) = line.rsplit_once(' ') else { continue };
        let name = key.split_once('{').map_or(key, |(n, _)| n);
        if HELD_GAUGES.contains(&name)
            && let Ok(v) = value.parse::<f64>()
        {
            *sums.entry(name.to_string()).or_default() += v;
        }
    }
    sums.into_iter().collect()
}

/// The gauges of what kache holds in memory (docs/metrics.md).
const HELD_GAUGES: &[&str] = &[
    "kache_store_bytes",
    "kache_protobuf_bytes",
    "kache_table_row_cache_bytes",
    "kache_gzip_cache_bytes",
    "kache_list_body_cache_bytes",
    "kache_memory_read_bytes_in_flight",
];

/// The cluster alone for `secs` (its controllers, scheduler and nodes), measured right before `next`: the
/// baseline that phase's cost is taken above (the cluster's own work drifts over a run).
async fn idle_window(client: &Client, env: &ClusterEnv, secs: f64, next: &str) -> Measured {
    eprintln!("idle before {next}: {secs} s");
    let before = meter(client, env, None).await;
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let cost = meter(client, env, None).await.since(&before);
    Measured {
        name: format!("idle before {next}"),
        cost,
        classes: BTreeMap::new(),
        memory: None,
        held: Vec::new(),
        rss_parts: Vec::new(),
        settled: None,
    }
}

/// The node names the kubelet watches narrow to.
async fn node_names(client: &Client, env: &ClusterEnv) -> anyhow::Result<Vec<String>> {
    let send = http::Send { keep_body: true, bearer: Some(&env.token), ..Default::default() };
    let url = http::url(&env.url, "/api/v1/nodes", "");
    let f = http::request(client, http::Method::GET, &url, &send).await.context("listing nodes")?;
    let v: serde_json::Value =
        serde_json::from_slice(&f.body.unwrap_or_default()).context("the node list")?;
    let names: Vec<String> = v["items"]
        .as_array()
        .map(|items| {
            items.iter().filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string)).collect()
        })
        .unwrap_or_default();
    if names.is_empty() {
        bail!("the cluster has no nodes");
    }
    Ok(names)
}

/// Bytes of the mix's resources as JSON (a full list of each, `resourceVersion=0`).
async fn json_bytes(client: &Client, env: &ClusterEnv) -> u64 {
    let send = http::Send { bearer: Some(&env.token), ..Default::default() };
    let mut total = 0;
    for path in CONTROLLER_INFORMERS {
        let url = http::url(&env.url, path, "resourceVersion=0");
        if let Ok(f) = http::request(client, http::Method::GET, &url, &send).await {
            total += f.bytes;
        }
    }
    total
}

async fn count(client: &Client, env: &ClusterEnv, path: &str) -> usize {
    let send = http::Send { keep_body: true, bearer: Some(&env.token), ..Default::default() };
    let url = http::url(&env.url, path, "resourceVersion=0");
    let Ok(f) = http::request(client, http::Method::GET, &url, &send).await else { return 0 };
    serde_json::from_slice::<serde_json::Value>(&f.body.unwrap_or_default())
        .ok()
        .and_then(|v| v["items"].as_array().map(Vec::len))
        .unwrap_or(0)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let env = read_env(&args.env)?;
    let kache_bin = procs::resolve_bin(args.kache_bin.clone(), "kache", false)?;
    let logs = args.out.join("logs").join(&args.run_name);
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let client = http::client(POOL_IDLE);
    let nodes = node_names(&client, &env).await?;
    let pods = count(&client, &env, "/api/v1/pods").await;
    let json = json_bytes(&client, &env).await;
    eprintln!(
        "cluster {}: {} nodes, {pods} pods, {} of JSON in the mix's resources",
        env.url,
        nodes.len(),
        fmt_bytes(json as f64)
    );
    let mut report = RunReport {
        scenario: args.run_name.clone(),
        description: format!(
            "A real Kubernetes 1.36.3 control plane (scripts/cluster.sh: etcd, kube-apiserver, controller-manager, \
             scheduler, {} kwok nodes renewing their leases every 10 s, {pods} pods) and its readers' mix, \
             directly and through kache, one {} s phase after the other in one run: {} kubelet pod watches \
             (protobuf WatchList by spec.nodeName), {} controller informers (protobuf WatchList), {} informers \
             started at once every {} s, {} `kubectl get pods -A` a second (consistent Table pages of {}), {} \
             namespace lists a second (consistent JSON), {} consistent node gets a second and {} consistent \
             lists of every pod a second; the last four in open loops. Upstream CPU from /proc; an idle window \
             before each phase is the cluster's own cost.",
            nodes.len(),
            args.secs,
            args.kubelets.min(nodes.len()),
            CONTROLLER_INFORMERS.len(),
            args.storm,
            args.storm_every,
            args.kubectl_rate,
            args.page,
            args.ns_list_rate,
            args.get_rate,
            args.full_list_rate
        ),
        command: crate::command_line(),
        started_unix: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        ..RunReport::default()
    };

    let mut phases = Vec::new();
    let mut sweeps = Vec::new();
    if !args.no_direct {
        phases.push(idle_window(&client, &env, args.idle_secs, "direct").await);
        eprintln!("phase direct: {} s", args.secs);
        let target = Target { base: env.url.clone(), bearer: Some(env.token.clone()) };
        let before = meter(&client, &env, None).await;
        let classes = run_mix(&client, target.clone(), &args, &nodes).await;
        let cost = meter(&client, &env, None).await.since(&before);
        phases.push(Measured {
            name: "direct".into(),
            cost,
            classes,
            memory: None,
            held: Vec::new(),
            rss_parts: Vec::new(),
            settled: None,
        });
        sweeps.extend(sweep(&client, &target, None, &args, &nodes, "direct").await);
    }

    let (cert, key) = self_signed(&logs)?;
    for variant in &args.variants {
        let (name, flags) = variant.split_once('=').unwrap_or((variant, ""));
        let flags: Vec<String> =
            flags.split_whitespace().map(|w| expand(w, &env.vars)).collect::<anyhow::Result<_>>()?;
        let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
        phases.push(idle_window(&client, &env, args.idle_secs, &format!("kache {name}")).await);
        eprintln!("phase kache {name}: starting kache {}", flags.join(" "));
        let sync_before = meter(&client, &env, None).await;
        let mut kache = procs::start_kache_with(
            &kache_bin,
            &KacheOpts {
                upstream: Upstream::Kubeconfig(&env.kubeconfig),
                resources: KACHE_RESOURCES,
                tls: Some((cert.as_path(), key.as_path())),
                log: &logs.join(format!("kache-{name}.log")),
                args: &flag_refs,
            },
        )
        .await?;
        let synced = kache.wait_synced(KACHE_RESOURCES.split(',').count(), SYNC_TIMEOUT).await?;
        let sync_cost = meter(&client, &env, Some(&kache)).await.since(&sync_before);
        report.figure(
            format!(
                "kache ({name}) initial sync of the mix's {} resources",
                KACHE_RESOURCES.split(',').count()
            ),
            synced.as_secs_f64(),
            "s",
            None,
            format!(
                "process start to every resource's `synced` log line; apiserver CPU meanwhile {:.2} s",
                sync_cost.apiserver_cpu
            ),
        );
        eprintln!("phase kache {name}: synced in {:.1} s; {} s of the mix", synced.as_secs_f64(), args.secs);
        let target = Target { base: kache.url.clone(), bearer: Some(env.token.clone()) };
        let before = meter(&client, &env, Some(&kache)).await;
        let classes = run_mix(&client, target.clone(), &args, &nodes).await;
        let cost = meter(&client, &env, Some(&kache)).await.since(&before);
        let (memory, rss_parts) = match kache.rss_with_parts() {
            Ok((rss, parts)) => (Some((rss, json)), parts),
            Err(_) => (None, Vec::new()),
        };
        let held = kache_bytes_held(&client, kache.metrics_url.as_deref()).await;
        // What stays once the mix's transient buffers are gone (the figure is the RSS at the end itself).
        tokio::time::sleep(SETTLE).await;
        let settled = kache.rss_with_parts().ok();
        phases.push(Measured {
            name: format!("kache {name}"),
            cost,
            classes,
            memory,
            held,
            rss_parts,
            settled,
        });
        if flags.iter().any(|f| f == "--etcd-endpoints") {
            let label = format!("kache {name}");
            sweeps.extend(sweep(&client, &target, kache.metrics_url.as_deref(), &args, &nodes, &label).await);
        }
        kache.stop().await;
    }

    tables(&mut report, &phases, json);
    sweep_table(&mut report, &phases, &sweeps);
    report.duration_secs = started.elapsed().as_secs_f64();
    for p in &phases {
        for (class, c) in &p.classes {
            for (e, n) in &c.errors {
                for _ in 0..*n {
                    report.error(format!("{}: {class}: {e}", p.name));
                }
            }
        }
    }
    let json_path = args.out.join(format!("{}.json", args.run_name));
    std::fs::write(&json_path, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", json_path.display()))?;
    let md = report.markdown(None);
    std::fs::write(args.out.join(format!("{}.md", args.run_name)), &md)?;
    println!("{md}");
    println!("wrote {}", json_path.display());
    Ok(())
}

/// The run's tables and headline figures.
fn tables(report: &mut RunReport, phases: &[Measured], json: u64) {
    let is_idle = |p: &Measured| p.name.starts_with("idle");
    // Each phase's baseline: the idle window measured right before it.
    let baseline = |i: usize| phases[..i].iter().rev().find(|p| is_idle(p)).map(|p| &p.cost);
    let idle_rates: Vec<f64> =
        phases.iter().filter(|p| is_idle(p)).map(|p| p.cost.apiserver_cpu / p.cost.secs.max(1e-9)).collect();
    let spread =
        match (idle_rates.iter().copied().reduce(f64::min), idle_rates.iter().copied().reduce(f64::max)) {
            (Some(lo), Some(hi)) => format!("the idle windows ranged {lo:.3}–{hi:.3} CPU-s/s"),
            _ => String::new(),
        };
    let mut cost = Table::new(
        "Upstream cost per phase: CPU-seconds per second of the apiserver and etcd (in total, and above the \
         idle cluster's), the apiserver's requests per verb (`apiserver_request_total`), kache's CPU and what \
         it sent upstream",
        &[
            "phase",
            "apiserver CPU-s/s",
            "above idle",
            "apiserver CPU-ms per client read",
            "etcd CPU-s/s",
            "above idle",
            "apiserver requests by verb",
            "kache CPU-s/s",
            "kache: memory / forwarded / upstream reads",
            "kache: etcd requests / reads proven by etcd",
        ],
    );
    let mut above = BTreeMap::new();
    for (i, p) in phases.iter().enumerate() {
        let c = &p.cost;
        let secs = c.secs;
        let (ia, ie) = match baseline(i).filter(|_| !is_idle(p)) {
            Some(b) => (b.apiserver_cpu / b.secs.max(1e-9), b.etcd_cpu / b.secs.max(1e-9)),
            None => (c.apiserver_cpu / secs.max(1e-9), c.etcd_cpu / secs.max(1e-9)),
        };
        let a = c.apiserver_cpu / secs.max(1e-9);
        let e = c.etcd_cpu / secs.max(1e-9);
        above.insert(p.name.clone(), ((a - ia).max(0.0), (e - ie).max(0.0)));
        let verbs =
            c.requests.iter().map(|(v, n)| format!("{v} {}", fmt_num(*n))).collect::<Vec<_>>().join(", ");
        let kache = if c.kache.seen {
            format!(
                "{} / {} / {}",
                fmt_num(c.kache.memory),
                fmt_num(c.kache.forwarded),
                fmt_num(c.kache.upstream_requests())
            )
        } else {
            "—".into()
        };
        // Client requests: pages, lists and stream starts (a kubectl walk is its pages).
        let reads: u64 =
            p.classes.iter().filter(|(k, _)| **k != "kubectl get pods -A").map(|(_, c)| c.ok).sum();
        let idle = is_idle(p);
        cost.row(vec![
            p.name.clone(),
            format!("{a:.3}"),
            if idle { "—".into() } else { format!("{:.3}", (a - ia).max(0.0)) },
            if reads > 0 {
                format!("{:.2}", 1e3 * (a - ia).max(0.0) * secs / reads as f64)
            } else {
                "—".into()
            },
            format!("{e:.3}"),
            if idle { "—".into() } else { format!("{:.3}", (e - ie).max(0.0)) },
            verbs,
            if c.kache.seen { format!("{:.3}", c.kache_cpu / secs.max(1e-9)) } else { "—".into() },
            kache,
            if c.kache.seen && (c.kache.etcd_requests > 0.0 || c.kache.etcd_proven > 0.0) {
                format!("{} / {}", fmt_num(c.kache.etcd_requests), fmt_num(c.kache.etcd_proven))
            } else {
                "—".into()
            },
        ]);
    }
    report.tables.push(cost);

    let mut latency = Table::new(
        "Client latency per phase and kind of read (all requests of the phase; a start is the time to the \
         initial-events-end bookmark)",
        &["phase", "read", "ok", "errors", "p50 ms", "p99 ms", "bytes"],
    );
    for p in phases.iter().filter(|p| !is_idle(p)) {
        for (class, c) in &p.classes {
            let l = c.latency();
            latency.row(vec![
                p.name.clone(),
                class.to_string(),
                c.ok.to_string(),
                c.errors_text(),
                format!("{:.1}", l.p50_ms),
                format!("{:.1}", l.p99_ms),
                fmt_bytes(c.bytes as f64),
            ]);
        }
    }
    report.tables.push(latency);

    // Memory needs no direct phase to compare with: every kache phase reports it.
    for p in phases.iter().filter(|p| p.name.starts_with("kache")) {
        if let Some((rss, _)) = p.memory {
            let mib = 1024.0 * 1024.0;
            report.figure(
                format!("kache RSS ({}) ÷ JSON bytes cached, less 40 MiB", p.name),
                (rss as f64 - 40.0 * mib) / json.max(1) as f64,
                "×",
                Some(1.5),
                format!(
                    "RSS {} ({}) at the phase's end{}, {} of JSON cached; kache's gauges then: {}",
                    fmt_bytes(rss as f64),
                    fmt_rss_parts(&p.rss_parts),
                    p.settled.as_ref().map_or(String::new(), |(rss, parts)| format!(
                        " ({} s later {}: {})",
                        SETTLE.as_secs(),
                        fmt_bytes(*rss as f64),
                        fmt_rss_parts(parts)
                    )),
                    fmt_bytes(json as f64),
                    p.held
                        .iter()
                        .map(|(n, b)| format!("{n} {}", fmt_bytes(*b)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    }

    let Some(direct) = above.get("direct").copied() else { return };
    let reads_of = |c: &Cost| ["GET", "LIST", "WATCH"].iter().filter_map(|v| c.requests.get(*v)).sum::<f64>();
    let direct_reads = phases.iter().find(|p| p.name == "direct").map_or(0.0, |p| reads_of(&p.cost));
    for p in phases.iter().filter(|p| p.name.starts_with("kache")) {
        let (a, e) = above[&p.name];
        report.figure(
            format!("apiserver CPU for the mix, {} ÷ direct", p.name),
            100.0 * a / direct.0.max(1e-9),
            "%",
            Some(10.0),
            format!(
                "CPU-s/s above the idle window before each phase: {a:.3} through kache, {:.3} direct; {spread}",
                direct.0
            ),
        );
        report.figure(
            format!("apiserver reads (GET, LIST, WATCH) during the mix, {} ÷ direct", p.name),
            100.0 * reads_of(&p.cost) / direct_reads.max(1.0),
            "%",
            None,
            format!(
                "`apiserver_request_total` over the phase: {} through kache, {} direct (the cluster's own included)",
                fmt_num(reads_of(&p.cost)),
                fmt_num(direct_reads)
            ),
        );
        if direct.1 >= 0.005 {
            report.figure(
                format!("etcd CPU for the mix, {} ÷ direct", p.name),
                100.0 * e / direct.1,
                "%",
                None,
                format!(
                    "CPU-s/s above the idle window before each phase: {e:.3} through kache, {:.3} direct",
                    direct.1
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_cluster_env_file() {
        let vars =
            parse_env("# comment\nKUBE_APISERVER_URL=https://127.0.0.1:6443\nKUBE_CA='/a b/ca.crt'\nE=\n");
        assert_eq!(vars["KUBE_APISERVER_URL"], "https://127.0.0.1:6443");
        assert_eq!(vars["KUBE_CA"], "/a b/ca.crt");
        assert_eq!(vars["E"], "");
        assert_eq!(expand("$KUBE_CA", &vars).unwrap(), "/a b/ca.crt");
        assert_eq!(expand("${KUBE_CA}", &vars).unwrap(), "/a b/ca.crt");
        assert_eq!(expand("--flag", &vars).unwrap(), "--flag");
        assert!(expand("$NOPE", &vars).is_err());
    }

    #[test]
    fn sums_apiserver_requests_by_verb() {
        let key = r#"apiserver_request_total{code="200",component="apiserver",verb="LIST",version="v1"}"#;
        assert_eq!(label(key, "verb"), Some("LIST"));
        assert_eq!(label(key, "code"), Some("200"));
        assert_eq!(label(key, "nope"), None);
    }
}
