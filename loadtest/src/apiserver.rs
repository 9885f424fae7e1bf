//! Any apiserver as the target (`kache-loadtest apiserver --kubeconfig K`): the testbed's
//! (`testbed/apiserver/start.sh`, `scripts/cluster.sh`) or a user's cluster. kache (a release binary) is
//! started in front of it with `--kubeconfig K`, serving TLS with a certificate generated here, and every case is sent to both — the
//! apiserver directly and through kache — in alternating batches, over the same transport (HTTP/1.1 over
//! TLS, one client, certificates not verified on either side). Gets, which kache forwards, also go through a
//! TLS byte relay started here (`kache-loadtest relay`): the transport floor of any forwarded read.
//!
//! Read-only unless `--allow-writes`: then it seeds objects of realistic size (about 2.5 KiB) and runs
//! the foreign writer (merge patches to another resource, which move the global resourceVersion without
//! touching the measured one — what leases and events do in a real cluster).
//!
//! Per (phase, case, target): p50, p99 and mean over all requests, and for kache the share of answers
//! served from memory (`kache_encoding_total{served}`) and the upstream requests it sent per read
//! (`kache_forwarded_requests_total{kind="read"}` + `kache_freshness_upstream_probes_total` + proof
//! watches), read from its /metrics before and after each batch; CPU time of kache and of the upstream
//! processes given with `--upstream-pid` (the apiserver, etcd) over each batch.

mod fanout;
pub(crate) mod metrics;
pub(crate) mod setup;
mod storm;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use hdrhistogram::Histogram;

use crate::http::{self, Client};
use crate::procs::{self, KacheOpts, Upstream};
use crate::results::{Latency, RunReport, Table, fmt_bytes, fmt_num, histogram, median, record};

use self::metrics::Counters;
use self::setup::{ResourcePath, Target};

/// Idle connections kept per target.
const POOL_IDLE: usize = 16;
/// A resource's initial sync through kache (10k objects of 2.5 KiB from a busy real apiserver).
const SYNC_TIMEOUT: Duration = Duration::from_secs(600);
/// A get batch holds this many times `--batch-requests` requests (gets are short; their medians need samples).
const GET_WEIGHT: usize = 10;
/// Label selector no object carries: the filter runs over every object and returns nothing.
const SELECTOR_NOTHING: &str = "labelSelector=loadtest%2Fnone%3Dx";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Kubeconfig of the apiserver under test (its server, token and insecure-skip-tls-verify are read;
    /// kache gets the file itself).
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// The measured resource, `group/version/plural` (or `v1/plural` for the core group).
    #[arg(long, default_value = "wardle.example.com/v1beta1/flunders")]
    pub resource: String,
    /// Its kind (for seeding).
    #[arg(long, default_value = "Flunder")]
    pub kind: String,
    /// The resource the foreign writer patches (cluster-scoped), `group/version/plural`.
    #[arg(long, default_value = "wardle.example.com/v1alpha1/fischers")]
    pub foreign_resource: String,
    /// Its kind.
    #[arg(long, default_value = "Fischer")]
    pub foreign_kind: String,
    /// Allow writes to the apiserver: seeding `--objects` and the foreign writer. Without it the run is
    /// read-only and skips the cases that need writes.
    #[arg(long)]
    pub allow_writes: bool,
    /// Where the seeded objects carry their ~1.8 KiB of notes: `spec` (in `spec.flunderReference`, as real
    /// objects carry their bytes in spec and status; the sample apiserver's flunders only) or `annotation`
    /// (in an annotation, inside `metadata`: any kind).
    #[arg(long, value_enum, default_value_t = setup::Shape::Annotation)]
    pub object_shape: setup::Shape,
    /// Objects to seed (`lt-NNNNN` in namespaces `lt-0`…; existing ones are kept).
    #[arg(long, default_value_t = 10_000)]
    pub objects: usize,
    /// Namespaces the seeded objects are spread over (100 objects each at the defaults).
    #[arg(long, default_value_t = 100)]
    pub namespaces: usize,
    /// Namespace of the namespace-list and get cases (default: `lt-0`, the seeded one).
    #[arg(long, default_value = "lt-0")]
    pub namespace: String,
    /// Object of the get case (in `--namespace`).
    #[arg(long, default_value = "lt-00000")]
    pub name: String,
    /// Relist storm: this many consistent full lists at once through kache (0: no storm).
    #[arg(long, default_value_t = 100)]
    pub storm_readers: usize,
    /// The same storm sent directly to the apiserver: fewer by default, since each direct full list costs
    /// the apiserver its whole serialisation at once (100 of 20 MB would take minutes and gigabytes on a
    /// small machine shared with other work); the report compares per-list figures.
    #[arg(long, default_value_t = 20)]
    pub storm_direct_readers: usize,
    /// Foreign writes per second during the storm (the listed resource stays quiet, as in a real cluster).
    #[arg(long, default_value_t = 10.0)]
    pub storm_foreign_rate: f64,
    /// Watch fan-out: this many watches of `--namespace` directly and as many through kache, at once, while
    /// `--get-name` is patched (needs `--allow-writes`; 0: no fan-out).
    #[arg(long, default_value_t = 100)]
    pub fanout_watchers: usize,
    /// Patches per second during the fan-out.
    #[arg(long, default_value_t = 10.0)]
    pub fanout_rate: f64,
    /// Seconds of patches during the fan-out.
    #[arg(long, default_value_t = 10.0)]
    pub fanout_secs: f64,
    /// Foreign writes per second, one phase each (0 = quiet; > 0 needs `--allow-writes`).
    #[arg(long, value_delimiter = ',', default_value = "0,10,100")]
    pub foreign_rates: Vec<f64>,
    /// Rounds per phase; each round visits every (case, target) once, the first target alternating.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Requests per batch (closed loop, one at a time).
    #[arg(long, default_value_t = 40)]
    pub batch_requests: usize,
    /// A batch stops starting requests after this long.
    #[arg(long, default_value_t = 4.0)]
    pub batch_secs: f64,
    /// Upstream processes whose CPU and memory are read from /proc: `NAME=PID` (repeatable), e.g.
    /// `apiserver=$(cat RUN/apiserver.pid)`.
    #[arg(long = "upstream-pid")]
    pub upstream_pids: Vec<String>,
    /// kache binary (default: $CARGO_TARGET_DIR/release/kache; debug builds are refused).
    #[arg(long)]
    pub kache_bin: Option<PathBuf>,
    /// Run only these cases (comma-separated; all by default), e.g. `--cases get` for the forwarded get
    /// directly, through kache and through the relay in about a minute.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub cases: Vec<CaseKey>,
    /// Do not measure gets through a TLS byte relay (`kache-loadtest relay`, started here as a third target:
    /// the transport floor of a forwarded read).
    #[arg(long)]
    pub no_relay: bool,
    /// Run name: <out>/<name>.json and .md.
    #[arg(long, default_value = "apiserver")]
    pub run_name: String,
    /// Where JSON, Markdown and kache's log go.
    #[arg(long, default_value = "loadtest/out")]
    pub out: PathBuf,
}

/// What `--cases` selects: a request shape of the phases, or the storm or the fan-out.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaseKey {
    Get,
    NamespaceList,
    Page,
    NextPage,
    FullList,
    FullListRv0,
    Selector,
    SelectorRv0,
    GzipCached,
    GzipUncached,
    Storm,
    Fanout,
}

impl Args {
    /// Whether `--cases` lets `key` run.
    fn runs(&self, key: CaseKey) -> bool {
        self.cases.is_empty() || self.cases.contains(&key)
    }
}

/// One request shape.
#[derive(Debug, Clone)]
struct Case {
    key: CaseKey,
    name: &'static str,
    path: String,
    query: String,
    gzip: bool,
    /// Patch one measured object before each request (not timed), so no answer can come from an
    /// encoding cache: the "uncached" gzip row.
    touch: bool,
    /// The page after the first: each batch first reads the first page (`query`, not timed) from its
    /// target, and every request of the batch continues it with that page's token (at its revision).
    continued: bool,
    /// Also measured through the TLS byte relay (the third target), when there is one: reads kache forwards.
    relay: bool,
    /// Requests per batch, in multiples of `--batch-requests` (small reads: more samples for the same time).
    weight: usize,
}

/// Everything measured for one (phase, case, target).
#[derive(Default)]
struct Measure {
    hist: Option<Histogram<u64>>,
    sum_ms: f64,
    ok: u64,
    errors: u64,
    bytes: Vec<f64>,
    /// Deltas of kache's counters over this measure's batches.
    counters: Counters,
    /// CPU seconds over this measure's batches: kache, then each upstream process.
    cpu: BTreeMap<String, f64>,
}

impl Measure {
    fn p(&self) -> Latency {
        self.hist.as_ref().map(Latency::of).unwrap_or_default()
    }
    fn mean(&self) -> f64 {
        if self.ok == 0 { 0.0 } else { self.sum_ms / self.ok as f64 }
    }
}

/// The processes whose CPU is read per batch.
struct Procs {
    list: Vec<(String, u32)>,
}

impl Procs {
    fn cpu(&self) -> BTreeMap<String, f64> {
        self.list
            .iter()
            .filter_map(|(n, pid)| procs::cpu_time(*pid).ok().map(|d| (n.clone(), d.as_secs_f64())))
            .collect()
    }

    fn rss(&self) -> Vec<(String, f64)> {
        self.list
            .iter()
            .filter_map(|(n, pid)| procs::rss_bytes(*pid).ok().map(|b| (n.clone(), b as f64)))
            .collect()
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let kache_bin = procs::resolve_bin(args.kache_bin.clone(), "kache", false)?;
    let kc = setup::read_kubeconfig(&args.kubeconfig)?;
    if !kc.insecure && kc.server.starts_with("https") {
        eprintln!(
            "note: the load tool does not verify certificates (neither the apiserver's nor kache's); it only measures"
        );
    }
    let res = ResourcePath::parse(&args.resource)?;
    let foreign = ResourcePath::parse(&args.foreign_resource)?;
    let logs = args.out.join("logs").join(&args.run_name);
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let client = http::client(POOL_IDLE);
    let target = Target { base: kc.server.clone(), bearer: kc.token.clone() };
    let mut report = RunReport {
        scenario: args.run_name.clone(),
        description: format!(
            "The apiserver at {} (kubeconfig {}) directly and through kache, same run, same transport \
             (HTTP/1.1 over TLS on both sides; gets also through a TLS byte relay, the transport floor of a \
             forwarded read); {} from kache-loadtest apiserver.",
            kc.server,
            args.kubeconfig.display(),
            match (args.allow_writes, args.object_shape) {
                (false, _) => "read-only",
                (true, setup::Shape::Annotation) =>
                    "writes allowed (seeding objects whose bytes are in an annotation, foreign writer)",
                (true, setup::Shape::Spec) =>
                    "writes allowed (seeding objects whose bytes are in their spec, foreign writer)",
            }
        ),
        command: crate::command_line(),
        started_unix: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        ..RunReport::default()
    };

    if args.allow_writes && args.objects > 0 {
        let t = Instant::now();
        let created = setup::seed(&client, &target, &res, &args).await?;
        eprintln!(
            "seeded: {created} created ({} wanted) in {:.1} s",
            args.objects,
            t.elapsed().as_secs_f64()
        );
    }
    let count = setup::count(&client, &target, &res.all()).await?;
    let one = http::request(
        &client,
        http::Method::GET,
        &http::url(&target.base, &res.all(), "resourceVersion=0"),
        &target.send(false),
    )
    .await
    .context("full list")?;
    let per_object = if count > 0 { one.bytes as f64 / count as f64 } else { 0.0 };
    eprintln!(
        "{count} objects, full list {} ({} per object)",
        fmt_bytes(one.bytes as f64),
        fmt_bytes(per_object)
    );

    // kache in front, serving TLS with a fresh self-signed certificate.
    let (cert, key) = setup::self_signed(&logs)?;
    let mut kache = procs::start_kache_with(
        &kache_bin,
        &KacheOpts {
            upstream: Upstream::Kubeconfig(&args.kubeconfig),
            resources: &res.kache_resource(),
            tls: Some((cert.as_path(), key.as_path())),
            log: &logs.join("kache.log"),
            args: &[],
        },
    )
    .await?;
    let synced = kache.wait_synced(1, SYNC_TIMEOUT).await?;
    let kache_target = Target { base: kache.url.clone(), bearer: None };
    let mut procs_list = vec![("kache".to_string(), kache.pid)];
    // The transport floor of what kache forwards: the same requests through a TLS byte relay.
    let relay = if args.no_relay {
        None
    } else {
        let authority = kc
            .server
            .parse::<::http::Uri>()
            .ok()
            .and_then(|u| Some(format!("{}:{}", u.host()?, u.port_u16().unwrap_or(443))))
            .with_context(|| format!("the kubeconfig's server {:?} has no host", kc.server))?;
        let r = procs::start_relay(&authority, &logs.join("relay.log")).await?;
        procs_list.push(("relay".to_string(), r.pid));
        Some(r)
    };
    let relay_target = relay.as_ref().map(|r| Target { base: r.url.clone(), bearer: kc.token.clone() });
    let mut targets = vec![&target, &kache_target];
    targets.extend(relay_target.as_ref());
    for p in &args.upstream_pids {
        let (n, pid) = p.split_once('=').with_context(|| format!("--upstream-pid {p}: want NAME=PID"))?;
        procs_list.push((n.to_string(), pid.parse().with_context(|| format!("--upstream-pid {p}"))?));
    }
    let procs = Procs { list: procs_list };
    let mut memory = Table::new(
        "Resident memory (VmRSS) of kache and the upstream processes",
        &["when", "process", "RSS", "RSS ÷ JSON of the cached objects"],
    );
    let json_bytes = one.bytes as f64;
    for (n, b) in procs.rss() {
        memory.row(vec!["kache synced".into(), n, fmt_bytes(b), format!("{:.2}×", b / json_bytes.max(1.0))]);
    }
    report.figure(
        format!("kache initial sync of {count} objects from the apiserver"),
        synced.as_secs_f64(),
        "s",
        None,
        format!("process start to the resource's `synced` log line; full list {}", fmt_bytes(json_bytes)),
    );

    let writer =
        setup::ForeignWriter::start(&client, &target, &foreign, &args.foreign_kind, args.allow_writes)
            .await?;
    let mut cases_table = Table::new(
        "Every case and target (latency over all requests; memory share and upstream requests from kache's \
         /metrics; CPU from /proc over the batches of that row)",
        &[
            "foreign writes/s",
            "case",
            "target",
            "requests",
            "errors",
            "bytes",
            "p50 ms",
            "p99 ms",
            "mean ms",
            "÷ direct (p50)",
            "÷ direct (p99)",
            "served from memory",
            "upstream requests per read",
            "CPU ms per request",
        ],
    );
    for &rate in &args.foreign_rates {
        if rate > 0.0 && !args.allow_writes {
            report.error(format!("phase at {rate} foreign writes/s skipped: needs --allow-writes"));
            continue;
        }
        let cases = phase_cases(&res, &args, rate);
        let cases: Vec<Case> =
            cases.into_iter().filter(|c| (!c.touch || args.allow_writes) && args.runs(c.key)).collect();
        if cases.is_empty() {
            continue;
        }
        writer.set_rate(rate);
        // Let the writer and kache settle into the phase's steady state.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let achieved_before = writer.done();
        let t = Instant::now();
        let m = measure_phase(&client, &targets, &cases, &args, &kache, &procs).await;
        let achieved = (writer.done() - achieved_before) as f64 / t.elapsed().as_secs_f64();
        rows(&mut report, &mut cases_table, rate, achieved, &cases, &m, &procs);
        if writer.errors() > 0 {
            report.error(format!("foreign writer: {} failed writes so far", writer.errors()));
        }
    }
    if args.storm_readers > 0 && args.runs(CaseKey::Storm) {
        let rate = if args.allow_writes { args.storm_foreign_rate } else { 0.0 };
        writer.set_rate(rate);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let table = storm_rows(
            &mut report,
            &client,
            [&target, &kache_target],
            &res.all(),
            rate,
            &args,
            &kache,
            &procs,
        )
        .await;
        report.tables.push(table);
    }
    writer.set_rate(0.0);
    if args.fanout_watchers > 0 && args.allow_writes && args.runs(CaseKey::Fanout) {
        let collection = res.namespaced(&args.namespace);
        let spec = fanout::Spec {
            collection: &collection,
            name: &args.name,
            watchers: args.fanout_watchers,
            rate: args.fanout_rate,
            secs: args.fanout_secs,
        };
        let f = fanout::run(&client, [&target, &kache_target], &spec, &procs).await;
        let table = fanout_table(&mut report, &f);
        report.tables.push(table);
    }
    for (n, b) in procs.rss() {
        memory.row(vec!["after the run".into(), n, fmt_bytes(b), format!("{:.2}×", b / json_bytes.max(1.0))]);
    }
    report.tables.push(cases_table);
    report.tables.push(memory);
    let end = metrics::scrape(&client, kache.metrics_url.as_deref()).await;
    if end.seen {
        report.figure(
            "real apiserver: 504s kache answered itself over the whole run",
            end.too_large,
            "",
            Some(0.0),
            "kache_too_large_resource_version_total at the end of the run (foreign writes, pages, storm)"
                .into(),
        );
    }
    kache.stop().await;
    if let Some(r) = relay {
        r.stop().await;
    }
    report.duration_secs = started.elapsed().as_secs_f64();

    let json = args.out.join(format!("{}.json", args.run_name));
    std::fs::write(&json, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let md = report.markdown(None);
    std::fs::write(args.out.join(format!("{}.md", args.run_name)), &md)?;
    println!("{md}");
    println!("wrote {}", json.display());
    if report.error_count > 0 {
        eprintln!("{} error(s) during the run (see the report)", report.error_count);
    }
    Ok(())
}

/// The cases of one phase: everything when quiet, the five consistent reads under foreign writes.
fn phase_cases(res: &ResourcePath, args: &Args, rate: f64) -> Vec<Case> {
    let c = |key, name, path: String, query: &str, gzip, touch| Case {
        key,
        name,
        path,
        query: query.into(),
        gzip,
        touch,
        continued: false,
        relay: false,
        weight: 1,
    };
    let ns = res.namespaced(&args.namespace);
    let get = format!("{ns}/{}", args.name);
    let all = res.all();
    let mut v = vec![
        // Forwarded (a consistent get costs one upstream round trip however it is proven): measured through the
        // relay too, and with more samples (a get takes about a millisecond).
        Case {
            relay: true,
            weight: GET_WEIGHT,
            ..c(CaseKey::Get, "get (consistent)", get, "", false, false)
        },
        c(CaseKey::NamespaceList, "namespace list (consistent)", ns, "", false, false),
        c(CaseKey::Page, "page of 500 (consistent)", all.clone(), "limit=500", false, false),
        Case {
            continued: true,
            ..c(CaseKey::NextPage, "next page of 500 (continued)", all.clone(), "limit=500", false, false)
        },
        c(CaseKey::FullList, "full list (consistent)", all.clone(), "", false, false),
    ];
    if rate == 0.0 {
        v.extend([
            c(CaseKey::FullListRv0, "full list rv=0", all.clone(), "resourceVersion=0", false, false),
            c(
                CaseKey::Selector,
                "selector matching nothing (consistent)",
                all.clone(),
                SELECTOR_NOTHING,
                false,
                false,
            ),
            c(
                CaseKey::SelectorRv0,
                "selector matching nothing rv=0",
                all.clone(),
                &format!("{SELECTOR_NOTHING}&resourceVersion=0"),
                false,
                false,
            ),
            c(
                CaseKey::GzipCached,
                "gzip full list rv=0, cached (repeated, nothing changed)",
                all.clone(),
                "resourceVersion=0",
                true,
                false,
            ),
            c(
                CaseKey::GzipUncached,
                "gzip full list rv=0, uncached (one object patched before each)",
                all,
                "resourceVersion=0",
                true,
                true,
            ),
        ]);
    }
    v
}

/// The targets a case is measured on: direct, through kache, and through the relay when there is one and
/// the case asks for it.
fn case_targets(case: &Case, targets: usize) -> usize {
    if case.relay { targets.min(3) } else { 2 }
}

/// Rounds of batches over every (case, target), the first target rotating.
async fn measure_phase(
    client: &Client,
    targets: &[&Target],
    cases: &[Case],
    args: &Args,
    kache: &procs::KacheProc,
    procs: &Procs,
) -> BTreeMap<(usize, usize), Measure> {
    let mut m: BTreeMap<(usize, usize), Measure> = BTreeMap::new();
    let mut touches = 0u64;
    for round in 0..args.rounds {
        for (ci, case) in cases.iter().enumerate() {
            let n = case_targets(case, targets.len());
            for k in 0..n {
                let ti = (k + round + ci) % n;
                let t = targets[ti];
                let before = metrics::scrape(client, kache.metrics_url.as_deref()).await;
                let cpu0 = procs.cpu();
                let deadline = Instant::now() + Duration::from_secs_f64(args.batch_secs);
                let entry = m.entry((ci, ti)).or_default();
                let hist = entry.hist.get_or_insert_with(histogram);
                // A continued case: the first page's token, from this target (not timed).
                let mut query = case.query.clone();
                if case.continued {
                    let url = http::url(&t.base, &case.path, &case.query);
                    let first = http::request(client, http::Method::GET, &url, &t.send(false)).await;
                    match first.ok().and_then(|f| http::continue_token(&f.head)) {
                        Some(token) => query = http::with_continue(&case.query, &token),
                        None => {
                            entry.errors += 1;
                            continue;
                        }
                    }
                }
                for i in 0..(args.batch_requests * case.weight).max(1) {
                    if i > 0 && Instant::now() >= deadline {
                        break;
                    }
                    if case.touch {
                        touches += 1;
                        // Patched directly on the apiserver, whatever the target: kache sees it by watch.
                        let _ = setup::touch(client, targets[0], args, touches).await;
                    }
                    let s = Instant::now();
                    let r = http::request(
                        client,
                        http::Method::GET,
                        &http::url(&t.base, &case.path, &query),
                        &t.send(case.gzip),
                    )
                    .await;
                    match r {
                        Ok(f) => {
                            let d = s.elapsed();
                            record(hist, d);
                            entry.sum_ms += d.as_secs_f64() * 1000.0;
                            entry.ok += 1;
                            entry.bytes.push(f.bytes as f64);
                        }
                        Err(_) => entry.errors += 1,
                    }
                }
                let cpu1 = procs.cpu();
                for (n, v1) in cpu1 {
                    let v0 = cpu0.get(&n).copied().unwrap_or(v1);
                    *entry.cpu.entry(n).or_default() += v1 - v0;
                }
                if ti == 1 {
                    let after = metrics::scrape(client, kache.metrics_url.as_deref()).await;
                    entry.counters.add(&after.minus(&before));
                }
            }
        }
    }
    m
}

/// Table rows and headline figures of one phase.
fn rows(
    report: &mut RunReport,
    table: &mut Table,
    rate: f64,
    achieved: f64,
    cases: &[Case],
    m: &BTreeMap<(usize, usize), Measure>,
    procs: &Procs,
) {
    let rate_cell = if rate == 0.0 { "0".to_string() } else { format!("{rate} (achieved {achieved:.1})") };
    // A figure names the rate the writer reached: on a busy machine the apiserver may not take the asked one.
    let rate_label = if rate == 0.0 { "0".to_string() } else { format!("{achieved:.0} (of {rate} asked)") };
    for (ci, case) in cases.iter().enumerate() {
        let (Some(d), Some(k)) = (m.get(&(ci, 0)), m.get(&(ci, 1))) else { continue };
        let (pd, pk) = (d.p(), k.p());
        let r = m.get(&(ci, 2));
        let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.2}×", a / b) } else { "—".into() };
        for (ti, x) in [(0, d), (1, k)].into_iter().chain(r.map(|r| (2, r))) {
            let p = x.p();
            let requests = x.ok + x.errors;
            let cpu = procs
                .list
                .iter()
                .filter_map(|(n, _)| {
                    let v = x.cpu.get(n)?;
                    (requests > 0).then(|| format!("{n} {:.2}", v * 1000.0 / requests as f64))
                })
                .collect::<Vec<_>>()
                .join(", ");
            table.row(vec![
                rate_cell.clone(),
                case.name.into(),
                TARGET_NAMES[ti].into(),
                requests.to_string(),
                x.errors.to_string(),
                fmt_bytes(median(&x.bytes)),
                fmt_num(p.p50_ms),
                fmt_num(p.p99_ms),
                fmt_num(x.mean()),
                if ti > 0 { ratio(p.p50_ms, pd.p50_ms) } else { String::new() },
                if ti > 0 { ratio(p.p99_ms, pd.p99_ms) } else { String::new() },
                if ti == 1 { x.counters.memory_share() } else { String::new() },
                if ti == 1 { x.counters.upstream_per(x.ok + x.errors) } else { String::new() },
                cpu,
            ]);
        }
        if pd.p50_ms > 0.0 {
            report.figure(
                format!("real apiserver, {}, {rate_label} foreign writes/s: kache ÷ direct (p50)", case.name),
                pk.p50_ms / pd.p50_ms,
                "×",
                None,
                format!(
                    "p50 {} vs {} ms, p99 {} vs {} ms, mean {} vs {} ms; {} served from memory",
                    fmt_num(pk.p50_ms),
                    fmt_num(pd.p50_ms),
                    fmt_num(pk.p99_ms),
                    fmt_num(pd.p99_ms),
                    fmt_num(k.mean()),
                    fmt_num(d.mean()),
                    k.counters.memory_share()
                ),
            );
        }
        if let Some(r) = r.filter(|_| pd.p50_ms > 0.0) {
            let pr = r.p();
            report.figure(
                format!(
                    "real apiserver, {}, {rate_label} foreign writes/s: TLS byte relay ÷ direct (p50), the floor of a \
                     forwarded read",
                    case.name
                ),
                pr.p50_ms / pd.p50_ms,
                "×",
                None,
                format!(
                    "p50 {} vs {} ms, p99 {} vs {} ms; kache ÷ relay: {} at p50, {} at p99 (the same batches)",
                    fmt_num(pr.p50_ms),
                    fmt_num(pd.p50_ms),
                    fmt_num(pr.p99_ms),
                    fmt_num(pd.p99_ms),
                    ratio(pk.p50_ms, pr.p50_ms),
                    ratio(pk.p99_ms, pr.p99_ms),
                ),
            );
        }
        let relay_errors = r.map_or(0, |r| r.errors);
        if relay_errors > 0 {
            report.error(format!(
                "{} at {rate} foreign writes/s: {relay_errors} errors through the relay",
                case.name
            ));
        }
        if d.errors + k.errors > 0 {
            report.error(format!(
                "{} at {rate} foreign writes/s: {} errors direct, {} through kache",
                case.name, d.errors, k.errors
            ));
        }
    }
}

/// Row labels of the targets, by index.
const TARGET_NAMES: [&str; 3] = ["apiserver direct", "through kache", "through a TLS byte relay"];

/// The relist storm, directly and through kache: a table and the headline figures.
#[allow(clippy::too_many_arguments)]
async fn storm_rows(
    report: &mut RunReport,
    client: &Client,
    targets: [&Target; 2],
    path: &str,
    rate: f64,
    args: &Args,
    kache: &procs::KacheProc,
    procs: &Procs,
) -> Table {
    let mut table = Table::new(
        format!(
            "Relist storm: consistent full lists (resourceVersion unset) started at once, {rate} foreign writes/s \
             (per-list latency; errors: lists that failed, with 429s apart — kache's in-flight byte budget, \
             `--max-read-bytes-inflight`, which clients retry after `Retry-After`; upstream requests from kache's \
             /metrics; CPU from /proc over the storm)"
        ),
        &[
            "target",
            "lists at once",
            "errors",
            "all read s",
            "p50 ms",
            "p99 ms",
            "served from memory",
            "upstream requests",
            "CPU s",
        ],
    );
    for (ti, readers) in [(0, args.storm_direct_readers), (1, args.storm_readers)] {
        if readers == 0 {
            continue;
        }
        let s = storm::run(client, targets[ti], path, readers, kache, procs).await;
        let cpu = s.cpu.iter().map(|(n, v)| format!("{n} {v:.2}")).collect::<Vec<_>>().join(", ");
        let c = &s.counters;
        let upstream = if ti == 1 {
            format!(
                "{} ({} forwarded, {} probes, {} proofs, {} censuses)",
                c.upstream_requests(),
                c.forwarded_reads,
                c.probes,
                c.proofs,
                c.censuses
            )
        } else {
            format!("{readers} (every list)")
        };
        table.row(vec![
            if ti == 0 { "apiserver direct".into() } else { "through kache".into() },
            readers.to_string(),
            if s.throttled > 0 {
                format!("{} (+ {} answered 429)", s.errors, s.throttled)
            } else {
                s.errors.to_string()
            },
            fmt_num(s.wall.as_secs_f64()),
            fmt_num(s.latency.p50_ms),
            fmt_num(s.latency.p99_ms),
            if ti == 1 { c.memory_share() } else { String::new() },
            upstream,
            cpu,
        ]);
        if ti == 1 {
            report.figure(
                format!("real apiserver, relist storm of {readers} consistent full lists: upstream requests"),
                c.upstream_requests(),
                "requests",
                Some(5.0),
                format!(
                    "{} forwarded, {} probes, {} proofs, {} censuses; all read in {} s, p50 {} ms, p99 {} ms; {} foreign writes/s",
                    c.forwarded_reads,
                    c.probes,
                    c.proofs,
                    c.censuses,
                    fmt_num(s.wall.as_secs_f64()),
                    fmt_num(s.latency.p50_ms),
                    fmt_num(s.latency.p99_ms),
                    rate
                ),
            );
        }
        if s.errors > 0 {
            let reasons: Vec<&str> = s.reasons.iter().map(String::as_str).collect();
            report.error(format!(
                "relist storm: {} of {readers} lists failed (target {ti}): {}",
                s.errors,
                reasons.join("; ")
            ));
        }
    }
    table
}

/// The watch fan-out's table and headline figure.
fn fanout_table(report: &mut RunReport, f: &fanout::FanOut) -> Table {
    let mut table = Table::new(
        format!(
            "Watch fan-out: {} watches of one namespace directly and {} through kache, open together, {} patches \
             of one object (delivery latency = event arrival − patch sent; CPU over the fan-out: {})",
            f.watchers,
            f.watchers,
            f.writes,
            f.cpu.iter().map(|(n, v)| format!("{n} {v:.2} s")).collect::<Vec<_>>().join(", ")
        ),
        &["target", "watches", "events received (of expected)", "failed watches", "p50 ms", "p99 ms"],
    );
    let expected = (f.watchers * f.writes) as u64;
    for ti in 0..2 {
        table.row(vec![
            if ti == 0 { "apiserver direct".into() } else { "through kache".into() },
            f.watchers.to_string(),
            format!("{} ({expected})", f.received[ti]),
            f.failed[ti].to_string(),
            fmt_num(f.latency[ti].p50_ms),
            fmt_num(f.latency[ti].p99_ms),
        ]);
        if f.received[ti] < expected || f.failed[ti] > 0 {
            report.error(format!(
                "watch fan-out (target {ti}): {} of {expected} events, {} failed watches",
                f.received[ti], f.failed[ti]
            ));
        }
    }
    if f.latency[0].p50_ms > 0.0 {
        report.figure(
            format!(
                "real apiserver, watch fan-out of {} watches: kache ÷ direct delivery latency (p50)",
                f.watchers
            ),
            f.latency[1].p50_ms / f.latency[0].p50_ms,
            "×",
            None,
            format!(
                "p50 {} vs {} ms, p99 {} vs {} ms",
                fmt_num(f.latency[1].p50_ms),
                fmt_num(f.latency[0].p50_ms),
                fmt_num(f.latency[1].p99_ms),
                fmt_num(f.latency[0].p99_ms)
            ),
        );
    }
    table
}
