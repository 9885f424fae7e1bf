//! kache-loadtest: end-to-end load generator for kache. Runs the sim and kache as subprocesses, talks HTTP
//! only, and reports Markdown, JSON and SVG plots; `report` generates BENCHMARKS.md from the JSON.
//!
//! - `kache-loadtest run loadtest/scenarios/list.toml …` — run scenario files (see loadtest/README.md).
//! - `kache-loadtest smoke` — every scenario kind for a few seconds at tiny sizes (CI; fails only on errors).
//! - `kache-loadtest report --json loadtest/out/*.json` — BENCHMARKS.md, its charts and the JSON behind it.

mod admission;
mod apiserver;
mod cluster;
mod ctx;
mod http;
mod list;
mod mixed;
mod plot;
mod procs;
mod proxy;
mod relay;
mod report;
mod results;
mod scenario;
mod soak;
mod statics;
mod storm;
mod table;
mod watch;
mod writer;

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use clap::{Parser, Subcommand};

use crate::ctx::Ctx;
use crate::procs::Bins;
use crate::results::RunReport;
use crate::scenario::ScenarioFile;

/// The smoke scenario, built in so `smoke` works from any directory.
const SMOKE: &str = include_str!("../scenarios/smoke.toml");

#[derive(Parser, Debug)]
#[command(name = "kache-loadtest", version, about = "Load test kache against the sim and a static baseline")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Run scenario files; writes <out>/<name>.json and .md, and SVG plots.
    Run(RunArgs),
    /// Run every scenario kind briefly at tiny sizes; fails only on errors, never on speed.
    Smoke(BinArgs),
    /// Benchmark any apiserver (a kubeconfig): directly and through kache, same run, same transport.
    Apiserver(apiserver::Args),
    /// A real cluster's readers (kubelets, controllers, informer storms, kubectl, namespace lists), directly
    /// and through kache, with the apiserver's and etcd's CPU: a cluster of `scripts/cluster.sh up DIR`.
    Cluster(cluster::Args),
    /// `kubectl get pods -A` as Tables: through kache vs direct to the sim, and Table ÷ JSON.
    Table(table::Args),
    /// Small readers' latency alone and beside 20 pretty + 20 gzip full lists (admission of heavy reads).
    Admission(admission::Args),
    /// Soak sim + kache with mixed reads, watches, churn, reconnect storms and upstream faults; RSS and CPU
    /// series.
    Soak(soak::Args),
    /// Generate BENCHMARKS.md and its charts from run JSON files.
    Report(ReportArgs),
    /// A TLS-terminating byte relay (no HTTP): the transport floor a forwarded read is compared with.
    Relay(relay::Args),
}

#[derive(clap::Args, Debug)]
struct BinArgs {
    /// kache binary (default: $CARGO_TARGET_DIR/release/kache, else target/release/kache).
    #[arg(long)]
    kache_bin: Option<PathBuf>,
    /// kache-sim binary (default: next to kache's default).
    #[arg(long)]
    sim_bin: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Scenario files (TOML).
    #[arg(required = true)]
    scenarios: Vec<PathBuf>,
    /// Where JSON, Markdown and subprocess logs go.
    #[arg(long, default_value = "loadtest/out")]
    out: PathBuf,
    /// Where SVG plots go.
    #[arg(long, default_value = "loadtest/out/plots")]
    plots: PathBuf,
    #[command(flatten)]
    bins: BinArgs,
}

#[derive(clap::Args, Debug)]
struct ReportArgs {
    /// Run JSON files: `--json loadtest/out/*.json`.
    #[arg(long = "json", required = true, num_args = 1..)]
    json: Vec<PathBuf>,
    /// The Markdown file to write.
    #[arg(long, default_value = "BENCHMARKS.md")]
    out: PathBuf,
    /// Where the SVG charts go.
    #[arg(long, default_value = report::CHARTS_DIR)]
    charts: PathBuf,
    /// Where the JSON behind the page and the machine's description are kept (replaced by this report's).
    #[arg(long, default_value = report::RUNS_DIR)]
    runs_dir: PathBuf,
    /// Markdown describing the machine the runs were taken on (default: the runs dir's, when the JSON comes
    /// from there; else this machine).
    #[arg(long)]
    machine: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run(args).await,
        Command::Smoke(bins) => smoke(bins).await,
        Command::Apiserver(args) => apiserver::run(args).await,
        Command::Table(args) => table::run(args).await,
        Command::Cluster(args) => cluster::run(args).await,
        Command::Soak(args) => soak::cli(args).await,
        Command::Admission(args) => admission::cli(args).await,
        Command::Report(args) => report_cmd(args),
        Command::Relay(args) => relay::run(args).await,
    }
}

pub(crate) fn command_line() -> String {
    let mut args: Vec<String> = std::env::args().collect();
    if let Some(first) = args.first_mut()
        && let Some(name) = Path::new(first).file_name().and_then(|n| n.to_str())
    {
        *first = name.to_string();
    }
    args.join(" ")
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let bins = Bins::resolve(args.bins.kache_bin, args.bins.sim_bin, false)?;
    let mut failed = 0;
    for path in &args.scenarios {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let file = ScenarioFile::parse(&text).with_context(|| format!("parsing {}", path.display()))?;
        let logs = args.out.join("logs").join(&file.name);
        std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
        let ctx = Ctx::new(bins.clone(), logs);
        let report = run_file(&ctx, &file).await;
        ctx.progress.finish_and_clear();
        let json = args.out.join(format!("{}.json", file.name));
        std::fs::write(&json, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", json.display()))?;
        let plots = plot::draw_all(&report.series, &args.plots)?;
        let md = report.markdown(Some(&args.plots.display().to_string()));
        std::fs::write(args.out.join(format!("{}.md", file.name)), &md)?;
        println!("{md}");
        println!("wrote {} and {} plot(s)", json.display(), plots.len());
        failed += report.error_count;
    }
    if failed > 0 {
        eprintln!("{failed} error(s) during the run (see the report)");
    }
    Ok(())
}

/// Runs every section of a scenario file; a failing section is recorded as an error, the rest still run.
async fn run_file(ctx: &Ctx, file: &ScenarioFile) -> RunReport {
    let started = Instant::now();
    let mut report = RunReport {
        scenario: file.name.clone(),
        description: file.description.clone(),
        command: command_line(),
        started_unix: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        ..RunReport::default()
    };
    if !file.list.is_empty()
        && let Err(e) = list::run(ctx, &file.list, &mut report).await
    {
        report.error(format!("list: {e:#}"));
    }
    if !file.watch.is_empty()
        && let Err(e) = watch::run(ctx, &file.watch, &mut report).await
    {
        report.error(format!("watch: {e:#}"));
    }
    if !file.storm.is_empty()
        && let Err(e) = storm::run(ctx, &file.storm, &mut report).await
    {
        report.error(format!("storm: {e:#}"));
    }
    if !file.mixed.is_empty()
        && let Err(e) = mixed::run(ctx, &file.mixed, &mut report).await
    {
        report.error(format!("mixed: {e:#}"));
    }
    report.duration_secs = started.elapsed().as_secs_f64();
    report
}

async fn smoke(bins: BinArgs) -> anyhow::Result<()> {
    // The smoke run measures nothing (it fails only on errors), so CI's debug build is enough for it.
    let bins = Bins::resolve(bins.kache_bin, bins.sim_bin, true)?;
    let file = ScenarioFile::parse(SMOKE).context("the built-in smoke scenario")?;
    let dir = std::env::temp_dir().join(format!("kache-loadtest-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let ctx = Ctx::new(bins, dir.clone());
    let mut report = run_file(&ctx, &file).await;
    if let Err(e) = soak::run(&ctx, &soak::Spec::smoke(), &mut report).await {
        report.error(format!("soak: {e:#}"));
    }
    ctx.progress.finish_and_clear();
    plot::draw_all(&report.series, &dir)?;
    println!("{}", report.markdown(None));
    if report.error_count > 0 {
        anyhow::bail!("smoke run: {} error(s); logs in {}", report.error_count, dir.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("smoke run: every scenario ran without errors");
    Ok(())
}

fn report_cmd(args: ReportArgs) -> anyhow::Result<()> {
    report::publish(&report::Publish {
        json: args.json,
        out: args.out,
        charts: args.charts,
        runs_dir: args.runs_dir,
        machine: args.machine,
    })
}
