//! Mixed traffic through kache for a fixed time: readers (namespace lists from the cache and consistent,
//! first pages of the full list, gets), watchers and writes, while the sim churns. Throughput, p50/p99,
//! errors, and kache's resident memory over time.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use http_body_util::BodyExt as _;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::ctx::{Ctx, SYNC_TIMEOUT};
use crate::http::{self, Client};
use crate::procs::{rss_bytes, start_kache, start_sim};
use crate::results::{Latency, RunReport, Series, Table, fmt_bytes, fmt_num, histogram, record};
use crate::scenario::MixedSpec;
use crate::writer::{self, WRITER_NAMESPACE};

/// The read operations readers cycle through.
const OPS: [&str; 4] =
    ["namespace list rv=0", "namespace list consistent", "first page (limit=500) rv=0", "get pod"];

pub async fn run(ctx: &Ctx, specs: &[MixedSpec], report: &mut RunReport) -> anyhow::Result<()> {
    ctx.progress.inc_length(specs.len() as u64);
    for spec in specs {
        run_one(ctx, spec, report).await.with_context(|| format!("mixed {}", spec.name))?;
        ctx.progress.inc(1);
    }
    Ok(())
}

/// The URL of read operation `op` for reader iteration `i`.
fn op_url(base: &str, op: usize, i: usize, namespaces: usize) -> String {
    let ns = format!("ns-{}", i % namespaces.max(1));
    match op {
        0 => format!("{base}/api/v1/namespaces/{ns}/pods?resourceVersion=0"),
        1 => format!("{base}/api/v1/namespaces/{ns}/pods"),
        2 => format!("{base}/api/v1/pods?resourceVersion=0&limit=500"),
        _ => format!(
            "{base}/api/v1/namespaces/{WRITER_NAMESPACE}/pods/{}",
            writer::pod_name(i % writer::WRITER_PODS)
        ),
    }
}

async fn run_one(ctx: &Ctx, spec: &MixedSpec, report: &mut RunReport) -> anyhow::Result<()> {
    ctx.progress.set_message(format!("mixed {}: starting", spec.name));
    let sim = start_sim(&ctx.bins, &spec.cluster, &ctx.log(&format!("mixed-{}-sim", spec.name))).await?;
    let mut kache = start_kache(
        &ctx.bins,
        &sim.url,
        "pods,nodes,namespaces",
        &ctx.log(&format!("mixed-{}-kache", spec.name)),
    )
    .await?;
    kache.wait_synced(3, SYNC_TIMEOUT).await?;
    let client = http::client(spec.readers + spec.watchers + 16);
    writer::create_pods(&client, &kache.url).await?;
    let head = http::get(&client, &format!("{}/api/v1/pods?limit=1", kache.url), None, false).await?.head;
    let rv = http::list_resource_version(&head).context("no resourceVersion")?;

    ctx.progress.set_message(format!("mixed {}: {} s of traffic", spec.name, spec.duration_secs));
    let duration = Duration::from_secs_f64(spec.duration_secs);
    let t0 = Instant::now();
    let deadline = t0 + duration;
    let (stop_tx, stop_rx) = watch::channel(false);

    let pid = kache.pid;
    let sample = Duration::from_millis(spec.sample_ms.max(10) as u64);
    let mut sampler_stop = stop_rx.clone();
    let sampler = tokio::spawn(async move {
        let mut points = Vec::new();
        let mut tick = tokio::time::interval(sample);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Ok(rss) = rss_bytes(pid) {
                        points.push((t0.elapsed().as_secs_f64(), rss as f64 / 1024.0 / 1024.0));
                    }
                }
                _ = sampler_stop.changed() => return points,
            }
        }
    });

    let mut watchers = JoinSet::new();
    for _ in 0..spec.watchers {
        let (client, url, stop) = (
            client.clone(),
            format!("{}/api/v1/pods?watch=true&resourceVersion={rv}", kache.url),
            stop_rx.clone(),
        );
        watchers.spawn(watch_count(client, url, stop));
    }
    let mut readers = JoinSet::new();
    for r in 0..spec.readers {
        let (client, base, namespaces) = (client.clone(), kache.url.clone(), spec.cluster.namespaces);
        readers.spawn(async move { reader(&client, &base, r, namespaces, deadline).await });
    }
    let written = writer::run(&client, &kache.url, spec.writes_per_sec, duration).await;
    let mut per_op: Vec<(Histogram<u64>, u64, Vec<String>)> =
        OPS.iter().map(|_| (histogram(), 0, Vec::new())).collect();
    for r in readers.join_all().await {
        for (acc, (h, errs, msgs)) in per_op.iter_mut().zip(r) {
            acc.0.add(&h).map_err(|e| anyhow::anyhow!("merging histograms: {e}"))?;
            acc.1 += errs;
            acc.2.extend(msgs);
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    stop_tx.send_replace(true);
    let mut events = 0u64;
    for w in watchers.join_all().await {
        match w {
            Ok(n) => events += n,
            Err(e) => report.error(format!("mixed {} watch: {e}", spec.name)),
        }
    }
    let rss = sampler.await.unwrap_or_default();

    let mut table = Table::new(
        format!(
            "Mixed traffic through kache ({}: {} readers, {} watchers, {} writes/s, {} s, sim churn {}/s)",
            spec.name,
            spec.readers,
            spec.watchers,
            spec.writes_per_sec,
            spec.duration_secs,
            spec.cluster.churn
        ),
        &["operation", "requests", "errors", "req/s", "p50 ms", "p99 ms", "max ms"],
    );
    let mut total_reads = 0;
    let mut total_errors = written.errors.len() as u64;
    for (name, (h, errs, msgs)) in OPS.iter().zip(&per_op) {
        let l = Latency::of(h);
        total_reads += l.count;
        total_errors += errs;
        table.row(vec![
            (*name).into(),
            (l.count + errs).to_string(),
            errs.to_string(),
            fmt_num(l.count as f64 / elapsed),
            fmt_num(l.p50_ms),
            fmt_num(l.p99_ms),
            fmt_num(l.max_ms),
        ]);
        for m in msgs {
            report.error(format!("mixed {} {name}: {m}", spec.name));
        }
    }
    let wl = Latency::of(&written.latency);
    table.row(vec![
        "write (merge patch, forwarded)".into(),
        (written.ok + written.errors.len() as u64).to_string(),
        written.errors.len().to_string(),
        fmt_num(written.ok as f64 / elapsed),
        fmt_num(wl.p50_ms),
        fmt_num(wl.p99_ms),
        fmt_num(wl.max_ms),
    ]);
    table.row(vec![
        "watch events received".into(),
        events.to_string(),
        String::new(),
        fmt_num(events as f64 / elapsed),
        String::new(),
        String::new(),
        String::new(),
    ]);
    for e in &written.errors {
        report.error(format!("mixed {} write: {e}", spec.name));
    }
    report.tables.push(table);
    let peak = rss.iter().map(|p| p.1).fold(0.0, f64::max);
    let first = rss.first().map_or(0.0, |p| p.1);
    report.figure(
        format!("Mixed ({}): reads per second through kache", spec.name),
        total_reads as f64 / elapsed,
        "req/s",
        None,
        format!("{} readers, closed loop, {} s", spec.readers, spec.duration_secs),
    );
    report.figure(
        format!("Mixed ({}): errors", spec.name),
        total_errors as f64,
        "",
        Some(0.0),
        "reads, writes and watches together".into(),
    );
    report.figure(
        format!("Mixed ({}): kache resident memory, peak", spec.name),
        peak,
        "MiB",
        None,
        format!("{} at the start of the traffic", fmt_bytes(first * 1024.0 * 1024.0)),
    );
    let s = Series {
        plot: "mixed-memory".into(),
        title: "kache resident memory during mixed traffic".into(),
        x_label: "seconds".into(),
        y_label: "VmRSS (MiB)".into(),
        log_x: false,
        log_y: false,
        name: spec.name.clone(),
        points: vec![],
    };
    for (t, m) in rss {
        report.point(&s, t, m);
    }
    kache.stop().await;
    sim.stop().await;
    Ok(())
}

/// Per-operation histogram, error count and first error messages.
type OpResults = Vec<(Histogram<u64>, u64, Vec<String>)>;

/// Error messages a reader keeps per operation.
const READER_ERRORS_KEPT: usize = 3;

/// A closed-loop reader cycling through [`OPS`] until the deadline.
async fn reader(client: &Client, base: &str, r: usize, namespaces: usize, deadline: Instant) -> OpResults {
    let mut out: OpResults = OPS.iter().map(|_| (histogram(), 0, Vec::new())).collect();
    let mut i = r;
    while Instant::now() < deadline {
        let op = i % OPS.len();
        match http::get(client, &op_url(base, op, i / OPS.len(), namespaces), None, false).await {
            Ok(f) => record(&mut out[op].0, f.elapsed),
            Err(e) => {
                out[op].1 += 1;
                if out[op].2.len() < READER_ERRORS_KEPT {
                    out[op].2.push(e.to_string());
                }
            }
        }
        i += 1;
    }
    out
}

/// A watcher counting events (newlines) until stopped.
async fn watch_count(client: Client, url: String, mut stop: watch::Receiver<bool>) -> Result<u64, String> {
    let mut body = http::open(&client, &url).await.map_err(|e| e.to_string())?.into_body();
    let mut events = 0u64;
    loop {
        tokio::select! {
            f = body.frame() => match f {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        events += memchr::memchr_iter(b'\n', &d).count() as u64;
                    }
                }
                Some(Err(e)) => return Err(e.to_string()),
                None => return Err("watch ended early".into()),
            },
            _ = stop.changed() => return Ok(events),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_urls() {
        assert_eq!(op_url("http://k", 0, 5, 3), "http://k/api/v1/namespaces/ns-2/pods?resourceVersion=0");
        assert_eq!(op_url("http://k", 1, 1, 0), "http://k/api/v1/namespaces/ns-0/pods");
        assert_eq!(op_url("http://k", 3, 12, 3), "http://k/api/v1/namespaces/ns-0/pods/lt-w-2");
    }
}
