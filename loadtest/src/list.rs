//! List scenario: for each suite (one cluster size), every case is measured against the static server,
//! the sim and kache in alternating batches (round-robin, the starting target rotating each round), so
//! that machine noise hits all targets alike and the ratios hold.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::ctx::{Ctx, SYNC_TIMEOUT};
use crate::http::{self, Client};
use crate::procs::{start_kache, start_sim};
use crate::results::{Latency, RunReport, Series, Table, fmt_bytes, fmt_num, histogram, median, record};
use crate::scenario::{Combine, FigureSpec, ListCase, ListSuite, Stat, Target};
use crate::statics::StaticServer;

/// Resources kache caches in list suites.
const LIST_RESOURCES: &str = "pods,nodes,namespaces";
/// A pagination chain longer than this is a bug in the target (or an endless token loop).
const MAX_PAGES: usize = 100_000;
/// Open-loop requests in flight at most; beyond it a request counts as an error (overload).
const OPEN_LOOP_IN_FLIGHT: usize = 1024;
/// The goal: resident memory per cached object ≤ 1.5× its JSON size (the process's fixed overhead
/// is included, so the goal is applied from this many pods on, where it no longer dominates).
const MEMORY_GOAL_RATIO: f64 = 1.5;
const MEMORY_GOAL_MIN_PODS: usize = 10_000;
/// Idle connections kept per target.
const POOL_IDLE: usize = 256;

/// One request's outcome: latency and bytes, or why it failed.
type Sample = Result<(Duration, u64), String>;

/// Samples of one (case, target) across all its batches.
#[derive(Default)]
struct Measure {
    batch_medians: Vec<f64>,
    hist: Option<Histogram<u64>>,
    bytes: Vec<f64>,
    requests: u64,
    errors: u64,
    busy_secs: f64,
}

impl Measure {
    fn absorb(&mut self, samples: Vec<Sample>, elapsed: Duration, errors: &mut Vec<String>) {
        let hist = self.hist.get_or_insert_with(histogram);
        let mut ms = Vec::with_capacity(samples.len());
        for s in samples {
            self.requests += 1;
            match s {
                Ok((d, b)) => {
                    record(hist, d);
                    ms.push(d.as_secs_f64() * 1000.0);
                    self.bytes.push(b as f64);
                }
                Err(e) => {
                    self.errors += 1;
                    errors.push(e);
                }
            }
        }
        if !ms.is_empty() {
            self.batch_medians.push(median(&ms));
        }
        self.busy_secs += elapsed.as_secs_f64();
    }

    fn stat(&self, s: Stat) -> f64 {
        match s {
            Stat::Median => median(&self.batch_medians),
            Stat::P99 => self.hist.as_ref().map_or(0.0, |h| Latency::of(h).p99_ms),
            Stat::Bytes => median(&self.bytes),
        }
    }
}

pub async fn run(ctx: &Ctx, suites: &[ListSuite], report: &mut RunReport) -> anyhow::Result<()> {
    let statics = StaticServer::start().await?;
    let steps: usize =
        suites.iter().map(|s| s.rounds * s.case.iter().map(|c| c.targets.len()).sum::<usize>()).sum();
    ctx.progress.inc_length(steps as u64);
    let mut cases = Table::new(
        "List: every case and target (median of batch medians; p99 over all requests)",
        &[
            "suite",
            "case",
            "target",
            "requests",
            "errors",
            "bytes",
            "median ms",
            "p99 ms",
            "req/s",
            "÷ static",
            "÷ sim",
        ],
    );
    let mut sizes = Table::new(
        "List suites: kache's initial sync and resident memory",
        &[
            "suite",
            "pods",
            "kache sync",
            "kache RSS after sync",
            "RSS per pod",
            "pod JSON (list body)",
            "RSS ÷ JSON",
            "kache RSS after the run",
        ],
    );
    for suite in suites {
        run_suite(ctx, suite, &statics, report, &mut cases, &mut sizes)
            .await
            .with_context(|| format!("list suite {}", suite.name))?;
        statics.clear();
    }
    report.tables.push(sizes);
    report.tables.push(cases);
    Ok(())
}

async fn run_suite(
    ctx: &Ctx,
    suite: &ListSuite,
    statics: &StaticServer,
    report: &mut RunReport,
    cases: &mut Table,
    sizes: &mut Table,
) -> anyhow::Result<()> {
    ctx.progress.set_message(format!("list {}: starting the sim ({} pods)", suite.name, suite.cluster.pods));
    let sim = start_sim(&ctx.bins, &suite.cluster, &ctx.log(&format!("list-{}-sim", suite.name))).await?;
    ctx.progress.set_message(format!("list {}: kache syncing", suite.name));
    let mut kache =
        start_kache(&ctx.bins, &sim.url, LIST_RESOURCES, &ctx.log(&format!("list-{}-kache", suite.name)))
            .await?;
    let synced = kache.wait_synced(LIST_RESOURCES.split(',').count(), SYNC_TIMEOUT).await?;
    let rss_synced = kache.rss()? as f64;
    ctx.say(format!(
        "list {}: kache synced {} pods in {:.1} s, VmRSS {}",
        suite.name,
        suite.cluster.pods,
        synced.as_secs_f64(),
        fmt_bytes(rss_synced)
    ));
    let client = http::client(POOL_IDLE);
    // The cached objects' JSON size: one full list body (items as the upstream sent them).
    let json = http::get(&client, &http::url(&kache.url, "/api/v1/pods", "resourceVersion=0"), None, false)
        .await
        .context("measuring the pods' JSON size")?
        .bytes as f64;
    if suite.cluster.pods > 0 {
        report.figure(
            format!("kache resident memory ÷ JSON bytes of the cached pods ({} pods)", suite.cluster.pods),
            rss_synced / json,
            "×",
            (suite.cluster.pods >= MEMORY_GOAL_MIN_PODS).then_some(MEMORY_GOAL_RATIO),
            format!(
                "VmRSS {} after sync (whole process) ÷ {} full list body",
                fmt_bytes(rss_synced),
                fmt_bytes(json)
            ),
        );
    }
    for case in suite.case.iter().filter(|c| c.targets.contains(&Target::Static)) {
        prepare_static(&client, &kache.url, case, statics)
            .await
            .with_context(|| format!("preparing {}", case.name))?;
    }
    let mut measures: BTreeMap<(usize, Target), Measure> = BTreeMap::new();
    for round in 0..suite.rounds {
        for (ci, case) in suite.case.iter().enumerate() {
            let n = case.targets.len();
            for k in 0..n {
                let target = case.targets[(k + round) % n];
                ctx.progress.set_message(format!(
                    "list {} r{round} {} → {}",
                    suite.name,
                    case.name,
                    target.as_str()
                ));
                let base = match target {
                    Target::Static => statics.url.as_str(),
                    Target::Sim => sim.url.as_str(),
                    Target::Kache => kache.url.as_str(),
                };
                let started = Instant::now();
                let samples = batch(&client, base, case, suite).await;
                let mut errs = Vec::new();
                measures.entry((ci, target)).or_default().absorb(samples, started.elapsed(), &mut errs);
                for e in errs {
                    report.error(format!("list {}/{}/{}: {e}", suite.name, case.name, target.as_str()));
                }
                ctx.progress.inc(1);
            }
        }
    }
    let rss_end = kache.rss()? as f64;
    sizes.row(vec![
        suite.name.clone(),
        suite.cluster.pods.to_string(),
        format!("{:.1} s", synced.as_secs_f64()),
        fmt_bytes(rss_synced),
        if suite.cluster.pods > 0 { fmt_bytes(rss_synced / suite.cluster.pods as f64) } else { "—".into() },
        fmt_bytes(json),
        format!("{:.2}×", rss_synced / json),
        fmt_bytes(rss_end),
    ]);
    summarize(suite, &measures, report, cases);
    kache.stop().await;
    sim.stop().await;
    Ok(())
}

/// Fetches the case's answer (every page) from kache and prepares the static server to send the same bytes.
async fn prepare_static(
    client: &Client,
    kache: &str,
    case: &ListCase,
    statics: &StaticServer,
) -> anyhow::Result<()> {
    let mut query = case.query.clone();
    for _ in 0..MAX_PAGES {
        let send = http::Send {
            accept: case.accept.as_deref(),
            gzip: case.gzip,
            keep_body: true,
            ..Default::default()
        };
        let f =
            http::request(client, http::Method::GET, &http::url(kache, &case.path, &query), &send).await?;
        let pq = http::url("", &case.path, &query);
        statics.insert(case.gzip, case.accept.as_deref(), &pq, f.body.unwrap_or_default(), f.gzipped);
        match http::continue_token(&f.head) {
            Some(t) if case.paginate => query = http::with_continue(&case.query, &t),
            _ => return Ok(()),
        }
    }
    anyhow::bail!("more than {MAX_PAGES} pages")
}

/// One logical request: a single GET, or the whole pagination chain.
async fn one(client: &Client, base: &str, case: &ListCase) -> Sample {
    let started = Instant::now();
    let mut bytes = 0;
    let mut query = case.query.clone();
    for _ in 0..MAX_PAGES {
        let f = http::get(client, &http::url(base, &case.path, &query), case.accept.as_deref(), case.gzip)
            .await
            .map_err(|e| e.to_string())?;
        bytes += f.bytes;
        match http::continue_token(&f.head) {
            Some(t) if case.paginate => query = http::with_continue(&case.query, &t),
            _ => return Ok((started.elapsed(), bytes)),
        }
    }
    Err(format!("more than {MAX_PAGES} pages"))
}

/// One batch against one target: closed loop with `concurrency` workers, or open loop at `rate`.
async fn batch(client: &Client, base: &str, case: &ListCase, suite: &ListSuite) -> Vec<Sample> {
    if let Some(rate) = case.rate {
        return open_loop(client, base, case, rate).await;
    }
    let issued = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(suite.batch_max_secs);
    let mut set = JoinSet::new();
    for _ in 0..case.concurrency.max(1) {
        let (client, base, case, issued) = (client.clone(), base.to_string(), case.clone(), issued.clone());
        let limit = suite.batch_requests.max(1);
        set.spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = issued.fetch_add(1, Relaxed);
                if i >= limit || (i > 0 && Instant::now() >= deadline) {
                    return out;
                }
                out.push(one(&client, &base, &case).await);
            }
        });
    }
    set.join_all().await.into_iter().flatten().collect()
}

/// Requests at a fixed rate; each latency counts from its scheduled send time (no coordinated omission).
async fn open_loop(client: &Client, base: &str, case: &ListCase, rate: f64) -> Vec<Sample> {
    let rate = rate.max(0.001);
    let n = (rate * case.rate_secs).ceil().max(1.0) as usize;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let gate = Arc::new(Semaphore::new(OPEN_LOOP_IN_FLIGHT));
    let start = tokio::time::Instant::now();
    let mut set = JoinSet::new();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let at = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(at).await;
        let Ok(permit) = gate.clone().try_acquire_owned() else {
            out.push(Err(format!("open loop: {OPEN_LOOP_IN_FLIGHT} requests in flight, target overloaded")));
            continue;
        };
        let (client, base, case) = (client.clone(), base.to_string(), case.clone());
        set.spawn(async move {
            let r = one(&client, &base, &case).await;
            drop(permit);
            r.map(|(_, bytes)| (at.elapsed(), bytes))
        });
    }
    out.extend(set.join_all().await);
    out
}

/// Table rows, derived figures and plot points of one suite.
fn summarize(
    suite: &ListSuite,
    m: &BTreeMap<(usize, Target), Measure>,
    report: &mut RunReport,
    table: &mut Table,
) {
    for (ci, case) in suite.case.iter().enumerate() {
        let med = |t: Target| m.get(&(ci, t)).map(|x| x.stat(Stat::Median));
        for &t in &case.targets {
            let Some(x) = m.get(&(ci, t)) else { continue };
            let ratio = |other: Target| match (t, med(other)) {
                (Target::Kache, Some(o)) if o > 0.0 => format!("{:.2}×", x.stat(Stat::Median) / o),
                _ => String::new(),
            };
            table.row(vec![
                suite.name.clone(),
                case.name.clone(),
                t.as_str().into(),
                x.requests.to_string(),
                x.errors.to_string(),
                fmt_bytes(x.stat(Stat::Bytes)),
                fmt_num(x.stat(Stat::Median)),
                fmt_num(x.stat(Stat::P99)),
                if x.busy_secs > 0.0 { fmt_num(x.requests as f64 / x.busy_secs) } else { "—".into() },
                ratio(Target::Static),
                ratio(Target::Sim),
            ]);
            if case.plot {
                let s = Series {
                    plot: "list-latency-vs-objects".into(),
                    title: "List latency against object count (median)".into(),
                    x_label: "pods".into(),
                    y_label: "median latency (ms)".into(),
                    log_x: true,
                    log_y: true,
                    name: format!("{} · {}", case.name, t.as_str()),
                    points: vec![],
                };
                report.point(&s, suite.cluster.pods as f64, x.stat(Stat::Median));
            }
        }
    }
    for f in &suite.figure {
        match figure(suite, f, m) {
            Ok((value, unit, detail)) => report.figure(&f.label, value, unit, f.goal_max, detail),
            Err(e) => report.error(format!("figure {:?}: {e}", f.label)),
        }
    }
}

/// Computes a figure from the measurements it names.
fn figure(
    suite: &ListSuite,
    f: &FigureSpec,
    m: &BTreeMap<(usize, Target), Measure>,
) -> Result<(f64, &'static str, String), String> {
    let get = |r: &crate::scenario::Ref| {
        let ci = suite
            .case
            .iter()
            .position(|c| c.name == r.case)
            .ok_or_else(|| format!("no case {:?}", r.case))?;
        let x = m
            .get(&(ci, r.target))
            .ok_or_else(|| format!("{} not measured on {}", r.case, r.target.as_str()))?;
        Ok::<_, String>((x.stat(r.stat), x.batch_medians.len()))
    };
    let unit_of = |s: Stat| if s == Stat::Bytes { "B" } else { "ms" };
    let describe = |r: &crate::scenario::Ref, v: f64| {
        let what = match r.stat {
            Stat::Median => "median",
            Stat::P99 => "p99",
            Stat::Bytes => "bytes",
        };
        format!("{} {} {what} {}", r.case, r.target.as_str(), fmt_num(v))
    };
    let (a, batches) = get(&f.a)?;
    let Some(bref) = f.b.as_ref().filter(|_| f.combine != Combine::Value) else {
        return Ok((a, unit_of(f.a.stat), format!("{}; {batches} batches", describe(&f.a, a))));
    };
    let (b, _) = get(bref)?;
    let detail = format!("{} vs {}; {batches} batches", describe(&f.a, a), describe(bref, b));
    match f.combine {
        Combine::Ratio if b > 0.0 => Ok((a / b, "×", detail)),
        Combine::Ratio => Err("division by zero".into()),
        _ => Ok((a - b, unit_of(f.a.stat), detail)),
    }
}
