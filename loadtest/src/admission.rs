//! Admission of heavy reads from memory: do 20 clients listing everything pretty-printed and
//! 20 listing it gzipped hurt everyone else? Small readers (namespace lists and gets from the cache) run
//! closed-loop through alternating windows — idle, then with the 40 heavy clients looping — so both sides
//! of the ratio come from the same run. Heavy clients honour 429 + Retry-After as client-go does.
//!
//! `kache-loadtest admission --pods 30000`

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;

use crate::ctx::{Ctx, SYNC_TIMEOUT};
use crate::http::{self as lhttp, Client, HttpError, StatusCode};
use crate::procs::{Bins, rss_bytes, start_kache, start_sim};
use crate::results::{Latency, RunReport, Table, fmt_num, histogram, record};
use crate::scenario::Cluster;

/// The goal: small readers' p99 under the heavy load within 2× of their idle p99.
const P99_RATIO_GOAL: f64 = 2.0;

/// `kache-loadtest admission`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Pods in the simulated cluster (the heavy clients list all of them).
    #[arg(long, default_value_t = 30_000)]
    pub pods: usize,
    /// Heavy clients of each kind (pretty, gzip).
    #[arg(long, default_value_t = 20)]
    pub heavy: usize,
    /// The gzip clients list the whole resource as is, which the gzip cache serves once compressed; by
    /// default they add a field selector matching every pod, so each list is compressed anew
    /// ("uncached gzip lists").
    #[arg(long)]
    pub gzip_cached: bool,
    /// Nice value added to the heavy clients' threads, to emulate clients on other machines (their own work
    /// of draining big bodies then yields the cores to kache and the small readers). 0, the default, runs them
    /// at the readers' priority: the harsher set-up, and the one every recorded run used (at 100k pods, +10
    /// measured the same: the heavy clients spend most of the run waiting out 429s).
    #[arg(long, default_value_t = 0)]
    pub heavy_nice: i32,
    /// Small closed-loop readers.
    #[arg(long, default_value_t = 4)]
    pub readers: usize,
    /// Seconds per window; windows alternate idle / loaded.
    #[arg(long, default_value_t = 10.0)]
    pub window_secs: f64,
    /// Idle+loaded window pairs.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    #[arg(long, default_value = "loadtest/out")]
    pub out: PathBuf,
    /// Also writes every small read as a CSV line (window, milliseconds since the run's start, latency in
    /// milliseconds, request kind) to this file: to see whether the slow ones come in bursts.
    #[arg(long)]
    pub latencies_csv: Option<PathBuf>,
    #[arg(long)]
    pub kache_bin: Option<PathBuf>,
    #[arg(long)]
    pub sim_bin: Option<PathBuf>,
}

pub async fn cli(args: Args) -> anyhow::Result<()> {
    let bins = Bins::resolve(args.kache_bin.clone(), args.sim_bin.clone(), false)?;
    let logs = args.out.join("logs").join("admission");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let ctx = Ctx::new(bins, logs);
    let started = Instant::now();
    let mut report = RunReport {
        scenario: "admission".into(),
        description: format!(
            "{} small readers (namespace list rv=0, get) alone and beside {} pretty + {} gzip ({}) full lists \
             of {} pods looping (heavy clients' threads at nice +{}); {} × {} s windows each, alternating in \
             one run.",
            args.readers,
            args.heavy,
            args.heavy,
            if args.gzip_cached { "cacheable" } else { "uncached" },
            args.pods,
            args.heavy_nice,
            args.rounds,
            args.window_secs
        ),
        command: crate::command_line(),
        ..RunReport::default()
    };
    if let Err(e) = run(&ctx, &args, &mut report).await {
        report.error(format!("admission: {e:#}"));
    }
    ctx.progress.finish_and_clear();
    report.duration_secs = started.elapsed().as_secs_f64();
    std::fs::write(args.out.join("admission.json"), serde_json::to_string_pretty(&report)?)?;
    let md = report.markdown(None);
    std::fs::write(args.out.join("admission.md"), &md)?;
    println!("{md}");
    Ok(())
}

async fn run(ctx: &Ctx, args: &Args, report: &mut RunReport) -> anyhow::Result<()> {
    let cluster = Cluster { pods: args.pods, namespaces: 50, nodes: 50, churn: 0.0, foreign_writes: 0.0 };
    ctx.progress.set_message("admission: starting");
    let sim = start_sim(&ctx.bins, &cluster, &ctx.log("admission-sim")).await?;
    let mut kache = start_kache(&ctx.bins, &sim.url, "pods", &ctx.log("admission-kache")).await?;
    kache.wait_synced(1, SYNC_TIMEOUT).await?;
    // The heavy clients run on a runtime of their own, with their own connection pool: in a cluster they are
    // other processes, and sharing the small readers' runtime would time the load generator's own queue
    // (draining 40 big bodies) as kache's latency.
    let client = lhttp::client(args.readers + 8);
    let heavy_client = lhttp::client(2 * args.heavy + 8);
    let heavy_rt = Background(Some(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("heavy-clients")
            .on_thread_start({
                let nice = args.heavy_nice;
                move || lower_own_priority(nice)
            })
            .enable_all()
            .build()
            .context("starting the heavy clients' runtime")?,
    ));
    let base = kache.url.clone();
    let window = Duration::from_secs_f64(args.window_secs);
    let rss_start = kache.rss()?;

    let (mut idle, mut loaded) = (histogram(), histogram());
    let mut errors = 0u64;
    let (heavy_ok, heavy_429) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut rss_peak = rss_start;
    let t0 = Instant::now();
    let mut samples = Vec::new();
    for round in 0..args.rounds {
        ctx.progress.set_message(format!("admission: round {} idle", round + 1));
        let (h, e, s) = readers(&client, &base, args.readers, window, t0).await;
        samples.extend(s.into_iter().map(|s| ("idle", s)));
        idle.add(&h).map_err(|e| anyhow::anyhow!("{e}"))?;
        errors += e;

        ctx.progress.set_message(format!("admission: round {} loaded", round + 1));
        let stop = Arc::new(AtomicBool::new(false));
        let mut heavy = Vec::with_capacity(2 * args.heavy);
        for i in 0..2 * args.heavy {
            let url = if i % 2 == 0 {
                format!("{base}/api/v1/pods?resourceVersion=0&pretty=true")
            } else if args.gzip_cached {
                format!("{base}/api/v1/pods?resourceVersion=0")
            } else {
                // `metadata.name!=-` matches every pod and makes the list filtered, hence never cached.
                format!("{base}/api/v1/pods?resourceVersion=0&fieldSelector=metadata.name%21%3D-")
            };
            let (client, stop, ok, refused) =
                (heavy_client.clone(), stop.clone(), heavy_ok.clone(), heavy_429.clone());
            heavy.push(heavy_rt.handle().spawn(async move {
                while !stop.load(Relaxed) {
                    match lhttp::get(&client, &url, None, i % 2 == 1).await {
                        Ok(_) => ok.fetch_add(1, Relaxed),
                        Err(HttpError::Status { status: StatusCode::TOO_MANY_REQUESTS, .. }) => {
                            refused.fetch_add(1, Relaxed);
                            // client-go waits Retry-After (1 s) before retrying.
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            0
                        }
                        Err(_) => 0,
                    };
                }
            }));
        }
        let pid = kache.pid;
        let sampler = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut peak = 0;
                while !stop.load(Relaxed) {
                    peak = peak.max(rss_bytes(pid).unwrap_or(0));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                peak
            }
        });
        let (h, e, s) = readers(&client, &base, args.readers, window, t0).await;
        samples.extend(s.into_iter().map(|s| ("loaded", s)));
        loaded.add(&h).map_err(|e| anyhow::anyhow!("{e}"))?;
        errors += e;
        stop.store(true, Relaxed);
        for h in heavy {
            let _ = h.await;
        }
        rss_peak = rss_peak.max(sampler.await.unwrap_or(0));
    }
    drop(heavy_rt);
    if let Some(path) = &args.latencies_csv {
        let mut csv = String::from("window,at_ms,latency_ms,kind\n");
        for (window, (at, latency, kind)) in &samples {
            csv.push_str(&format!("{window},{:.3},{:.3},{kind}\n", ms(*at), ms(*latency)));
        }
        std::fs::write(path, csv).with_context(|| format!("writing {}", path.display()))?;
    }
    kache.stop().await;
    sim.stop().await;

    let (li, ll) = (Latency::of(&idle), Latency::of(&loaded));
    let mut table = Table::new(
        format!(
            "Small readers alone and beside {} pretty + {} gzip full lists ({} pods)",
            args.heavy, args.heavy, args.pods
        ),
        &["window", "requests", "p50 ms", "p90 ms", "p99 ms", "max ms"],
    );
    for (name, l) in [("idle", li), ("loaded", ll)] {
        table.row(vec![
            name.into(),
            l.count.to_string(),
            fmt_num(l.p50_ms),
            fmt_num(l.p90_ms),
            fmt_num(l.p99_ms),
            fmt_num(l.max_ms),
        ]);
    }
    report.tables.push(table);
    report.figure(
        "Admission: small readers' p99, loaded ÷ idle",
        if li.p99_ms > 0.0 { ll.p99_ms / li.p99_ms } else { 0.0 },
        "×",
        Some(P99_RATIO_GOAL),
        format!("p99 {} ms loaded vs {} ms idle, same run", fmt_num(ll.p99_ms), fmt_num(li.p99_ms)),
    );
    report.figure(
        "Admission: small readers' p50, loaded ÷ idle",
        if li.p50_ms > 0.0 { ll.p50_ms / li.p50_ms } else { 0.0 },
        "×",
        None,
        format!("p50 {} ms loaded vs {} ms idle", fmt_num(ll.p50_ms), fmt_num(li.p50_ms)),
    );
    report.figure(
        "Admission: heavy lists served / refused with 429",
        heavy_ok.load(Relaxed) as f64,
        "lists",
        None,
        format!("{} refused (429, retried after 1 s)", heavy_429.load(Relaxed)),
    );
    report.figure(
        "Admission: kache RSS peak under the heavy load",
        rss_peak as f64 / 1048576.0,
        "MiB",
        None,
        format!("{} MiB after sync", fmt_num(rss_start as f64 / 1048576.0)),
    );
    for _ in 0..errors {
        report.error("admission: a small reader's request failed");
    }
    Ok(())
}

/// Raises the calling thread's nice value by `by` (Linux: per thread, through rustix as kache's producers
/// do); a failure leaves the thread as it was and says so once.
fn lower_own_priority(by: i32) {
    if by == 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid();
        let lowered = rustix::process::getpriority_process(Some(tid))
            .and_then(|now| rustix::process::setpriority_process(Some(tid), (now + by).clamp(-20, 19)));
        if let Err(e) = lowered {
            eprintln!("admission: could not lower the heavy clients' priority: {e}");
        }
    }
}

/// A runtime owned by an async function: dropped without blocking (a runtime dropped in async context panics).
struct Background(Option<tokio::runtime::Runtime>);

impl Background {
    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("present until dropped").handle()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One small read: when it started (since the run's start), how long it took, and its kind.
type Sample = (Duration, Duration, &'static str);

/// `n` closed-loop small readers for `window`: latencies, errors and each read's [`Sample`].
async fn readers(
    client: &Client,
    base: &str,
    n: usize,
    window: Duration,
    t0: Instant,
) -> (Histogram<u64>, u64, Vec<Sample>) {
    let deadline = Instant::now() + window;
    let mut set = tokio::task::JoinSet::new();
    for r in 0..n {
        let (client, base) = (client.clone(), base.to_string());
        set.spawn(async move {
            let (mut h, mut errors, mut samples) = (histogram(), 0u64, Vec::new());
            let mut i = r;
            while Instant::now() < deadline {
                let url = if i % 2 == 0 {
                    format!("{base}/api/v1/namespaces/ns-{}/pods?resourceVersion=0", i % 50)
                } else {
                    format!("{base}/api/v1/namespaces/ns-{}/pods?resourceVersion=0&limit=1", i % 50)
                };
                let at = t0.elapsed();
                match lhttp::get(&client, &url, None, false).await {
                    Ok(f) => {
                        record(&mut h, f.elapsed);
                        samples.push((at, f.elapsed, if i % 2 == 0 { "namespace" } else { "limit1" }));
                    }
                    Err(_) => errors += 1,
                }
                i += 1;
            }
            (h, errors, samples)
        });
    }
    let mut all = histogram();
    let (mut errors, mut samples) = (0, Vec::new());
    for (h, e, s) in set.join_all().await {
        let _ = all.add(&h);
        errors += e;
        samples.extend(s);
    }
    (all, errors, samples)
}
