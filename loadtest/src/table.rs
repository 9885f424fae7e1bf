//! `kache-loadtest table`: what `kubectl get pods -A` costs (issue 20). The sim is seeded with `--pods`
//! pods, kache caches pods in front of it, and each case is fetched from both in alternating rounds, as
//! kubectl asks: `Accept: application/json;as=Table;v=v1;g=meta.k8s.io,…`, `includeObject=Object`,
//! `Accept-Encoding: gzip` (Go's transport adds it), whole (`--chunk-size=0`) and in pages of 500 (kubectl's
//! default). The same lists as JSON give the Table ÷ JSON ratio; kache's resident memory before the first
//! Table and after the run, and its `kache_table_row_cache_bytes`, give the cost of the cached rows.
//!
//! Measures the server part end to end (request sent → last byte read), not kubectl's printing.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::ctx::{Ctx, SYNC_TIMEOUT};
use crate::http::{self, Client};
use crate::procs::{self, Bins};
use crate::scenario::Cluster;

/// kubectl's Accept header for `get` (Table v1, Table v1beta1, then JSON).
const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
/// kubectl's default `--chunk-size`.
const KUBECTL_CHUNK: usize = 500;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Pods the sim is seeded with.
    #[arg(long, default_value_t = 10_000)]
    pub pods: usize,
    #[arg(long, default_value_t = 100)]
    pub namespaces: usize,
    #[arg(long, default_value_t = 50)]
    pub nodes: usize,
    /// Rounds; each fetches every case once from each target (first target alternating).
    #[arg(long, default_value_t = 7)]
    pub rounds: usize,
    /// kache binary (default: $CARGO_TARGET_DIR/release/kache).
    #[arg(long)]
    pub kache_bin: Option<std::path::PathBuf>,
    /// kache-sim binary (default: next to kache's default).
    #[arg(long)]
    pub sim_bin: Option<std::path::PathBuf>,
}

/// One measured request shape.
struct Case {
    name: &'static str,
    accept: Option<&'static str>,
    query: &'static str,
    /// Follow continue tokens with this page size (0: one whole list).
    chunk: usize,
}

const CASES: &[Case] = &[
    Case {
        name: "Table, whole (kubectl get pods -A --chunk-size=0)",
        accept: Some(TABLE_ACCEPT),
        query: "includeObject=Object",
        chunk: 0,
    },
    Case {
        name: "Table, pages of 500 (kubectl get pods -A)",
        accept: Some(TABLE_ACCEPT),
        query: "includeObject=Object",
        chunk: KUBECTL_CHUNK,
    },
    Case {
        name: "JSON, whole (kubectl get pods -A -o json --chunk-size=0)",
        accept: Some("application/json"),
        query: "",
        chunk: 0,
    },
    Case {
        name: "JSON, pages of 500 (kubectl get pods -A -o json)",
        accept: Some("application/json"),
        query: "",
        chunk: KUBECTL_CHUNK,
    },
];

/// Fetches one case from `base`: every page when it is chunked. Returns the time and the bytes on the wire.
async fn fetch(client: &Client, base: &str, case: &Case) -> anyhow::Result<(Duration, u64)> {
    let started = Instant::now();
    let mut bytes = 0;
    let mut query = match (case.query, case.chunk) {
        ("", 0) => String::new(),
        (q, 0) => q.to_owned(),
        ("", n) => format!("limit={n}"),
        (q, n) => format!("{q}&limit={n}"),
    };
    let base_query = query.clone();
    loop {
        let url = http::url(base, "/api/v1/pods", &query);
        let got = http::get(client, &url, case.accept, true).await.with_context(|| format!("GET {url}"))?;
        bytes += got.bytes;
        match (case.chunk, http::continue_token(&got.head)) {
            (n, Some(token)) if n > 0 => query = http::with_continue(&base_query, &token),
            _ => return Ok((started.elapsed(), bytes)),
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Reads one gauge from kache's /metrics.
async fn gauge(client: &Client, metrics_url: Option<&str>, name: &str) -> Option<f64> {
    let url = format!("{}/metrics", metrics_url?);
    let got = http::request(
        client,
        hyper::Method::GET,
        &url,
        &http::Send { keep_body: true, ..http::Send::default() },
    )
    .await
    .ok()?;
    let body = got.body?;
    String::from_utf8_lossy(&body)
        .lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let bins = Bins::resolve(args.kache_bin.clone(), args.sim_bin.clone(), false)?;
    let dir = std::env::temp_dir().join(format!("kache-loadtest-table-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let ctx = Ctx::new(bins, dir.clone());
    let cluster = Cluster {
        pods: args.pods,
        namespaces: args.namespaces,
        nodes: args.nodes,
        churn: 0.0,
        foreign_writes: 0.0,
    };
    ctx.say(format!("seeding the sim with {} pods", args.pods));
    let sim = procs::start_sim(&ctx.bins, &cluster, &ctx.log("sim")).await?;
    let mut kache = procs::start_kache(&ctx.bins, &sim.url, "pods", &ctx.log("kache")).await?;
    kache.wait_synced(1, SYNC_TIMEOUT).await?;
    let client = http::client(8);
    // Warm both (connections, kache's first consistent-read proof) with JSON, before memory is read.
    for _ in 0..2 {
        fetch(&client, &kache.url, &CASES[2]).await?;
        fetch(&client, &sim.url, &CASES[2]).await?;
    }
    let rss_before = kache.rss()?;
    let targets = [("kache", kache.url.clone()), ("sim (direct)", sim.url.clone())];
    let mut times = vec![vec![Vec::new(); targets.len()]; CASES.len()];
    let mut sizes = vec![vec![0u64; targets.len()]; CASES.len()];
    ctx.progress.set_length((args.rounds * CASES.len() * targets.len()) as u64);
    for round in 0..args.rounds {
        for (c, case) in CASES.iter().enumerate() {
            for k in 0..targets.len() {
                let t = (k + round) % targets.len();
                let (took, bytes) = fetch(&client, &targets[t].1, case).await?;
                times[c][t].push(took);
                sizes[c][t] = bytes;
                ctx.progress.inc(1);
            }
        }
    }
    let rss_after = kache.rss()?;
    let rows_bytes = gauge(&client, kache.metrics_url.as_deref(), "kache_table_row_cache_bytes").await;
    ctx.progress.finish_and_clear();

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("## Table (kubectl get) — {} pods, {} namespaces\n", args.pods, args.namespaces);
    println!(
        "`{}`; {cpus} CPUs, load average at the end: {}; median of {} rounds, gzip on (as kubectl).\n",
        crate::command_line(),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        args.rounds
    );
    println!("| case | kache | sim (direct) | direct ÷ kache | bytes on the wire (kache / direct) |");
    println!("|---|---|---|---|---|");
    let med: Vec<Vec<Duration>> =
        times.iter().map(|per| per.iter().map(|v| median(v.clone())).collect()).collect();
    for (c, case) in CASES.iter().enumerate() {
        let (k, d) = (med[c][0], med[c][1]);
        println!(
            "| {} | {} | {} | {:.1}× | {} / {} |",
            case.name,
            ms(k),
            ms(d),
            d.as_secs_f64() / k.as_secs_f64().max(1e-9),
            sizes[c][0],
            sizes[c][1]
        );
    }
    let ratio = |t: usize, j: usize, target: usize| {
        med[t][target].as_secs_f64() / med[j][target].as_secs_f64().max(1e-9)
    };
    println!();
    println!(
        "Table ÷ JSON list time through kache: whole {:.2}×, pages {:.2}× (direct: {:.2}×, {:.2}×).",
        ratio(0, 2, 0),
        ratio(1, 3, 0),
        ratio(0, 2, 1),
        ratio(1, 3, 1)
    );
    println!(
        "kache RSS {} MiB before the first Table, {} MiB after; cached rows: {}.",
        rss_before / (1 << 20),
        rss_after / (1 << 20),
        rows_bytes.map_or("n/a".to_owned(), |b| format!(
            "{:.1} MiB ({:.0} B per pod)",
            b / 1048576.0,
            b / args.pods as f64
        ))
    );
    kache.stop().await;
    sim.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
