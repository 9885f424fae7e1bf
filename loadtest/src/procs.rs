//! The systems under test as subprocesses (so kache's resident memory and CPU time can be read from
//! /proc), and the /proc readers.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::scenario::Cluster;

/// How long the sim may take to seed (300k pods take a while on a busy 2-core machine).
const SIM_START_TIMEOUT: Duration = Duration::from_secs(900);
/// What the sim prints on stdout once it serves.
const SIM_READY_PREFIX: &str = "kache-sim listening on ";
/// What kache logs (JSON log format) when a resource's initial sync completes.
const SYNCED_MARK: &str = "\"message\":\"synced\"";
/// kache's log filter: quiet except for reflector progress, which readiness is read from.
const KACHE_LOG_LEVEL: &str = "warn,kache::reflector=info";
/// Connections kache accepts: enough for every watcher and client a scenario opens.
const KACHE_MAX_CONNECTIONS: &str = "30000";
/// Seed of the sim's workload, fixed so that runs are comparable.
const WORKLOAD_SEED: &str = "1";

/// The release binaries under test.
#[derive(Debug, Clone)]
pub struct Bins {
    pub kache: PathBuf,
    pub sim: PathBuf,
}

// === impl Bins ===

impl Bins {
    /// Explicit paths, else `$CARGO_TARGET_DIR/release/…` (or `target/release/…`), else — only when
    /// `allow_debug` (the smoke run, which measures nothing) — the debug build. A debug binary is refused
    /// otherwise, also when passed explicitly: its figures would be labelled as release figures.
    pub fn resolve(kache: Option<PathBuf>, sim: Option<PathBuf>, allow_debug: bool) -> anyhow::Result<Self> {
        Ok(Self {
            kache: resolve_bin(kache, "kache", allow_debug)?,
            sim: resolve_bin(sim, "kache-sim", allow_debug)?,
        })
    }
}

/// One binary: explicit, else the release build, else (when allowed) the debug build.
pub fn resolve_bin(explicit: Option<PathBuf>, name: &str, allow_debug: bool) -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    let path = explicit.unwrap_or_else(|| {
        let release = dir.join("release").join(name);
        if release.is_file() || !allow_debug { release } else { dir.join("debug").join(name) }
    });
    if !path.is_file() {
        bail!(
            "{} not found: build it first (cargo build --release -p kache -p kache-sim) or pass \
             --kache-bin/--sim-bin",
            path.display()
        );
    }
    if !allow_debug && is_debug_build(&path) {
        bail!(
            "{} is a debug build: figures from it would be meaningless (build with --release, or pass a \
             release binary with --kache-bin/--sim-bin)",
            path.display()
        );
    }
    Ok(path)
}

/// Whether `path` is cargo's debug output (`…/debug/<bin>`, also through symlinks). Cargo's profile is not
/// recorded in the binary itself (release keeps line tables here too), so its location is the evidence.
fn is_debug_build(path: &Path) -> bool {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    [path, real.as_path()]
        .iter()
        .any(|p| p.parent().and_then(|d| d.file_name()).is_some_and(|n| n == "debug"))
}

/// A running kache-sim.
pub struct SimProc {
    child: Child,
    pub url: String,
}

/// Starts the sim seeded with `cluster` and waits until it serves.
pub async fn start_sim(bins: &Bins, cluster: &Cluster, log: &Path) -> anyhow::Result<SimProc> {
    let mut child = Command::new(&bins.sim)
        .args(["--listen", "127.0.0.1:0", "--seed", WORKLOAD_SEED])
        .args(["--pods", &cluster.pods.to_string()])
        .args(["--namespaces", &cluster.namespaces.to_string()])
        .args(["--nodes", &cluster.nodes.to_string()])
        .args(["--churn", &cluster.churn.to_string()])
        .args(["--foreign-writes", &cluster.foreign_writes.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bins.sim.display()))?;
    let url = ready(&mut child, SIM_READY_PREFIX, SIM_START_TIMEOUT, "the sim", log).await?;
    Ok(SimProc { child, url })
}

/// The rest of the line `child` prints on stdout starting with `prefix` once it serves (its URL), awaited up
/// to `timeout`; stdout is drained after it so the child never blocks on a full pipe.
async fn ready(
    child: &mut Child,
    prefix: &str,
    timeout: Duration,
    what: &str,
    log: &Path,
) -> anyhow::Result<String> {
    let stdout = child.stdout.take().with_context(|| format!("{what}: no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let url = tokio::time::timeout(timeout, async {
        while let Some(line) = lines.next_line().await? {
            if let Some(url) = line.strip_prefix(prefix) {
                return Ok::<_, std::io::Error>(Some(url.trim().to_string()));
            }
        }
        Ok(None)
    })
    .await
    .with_context(|| format!("{what} did not start in time"))??
    .with_context(|| format!("{what} exited before serving (see {})", log.display()))?;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(url)
}

impl SimProc {
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// A running `kache serve`.
pub struct KacheProc {
    child: Child,
    pub url: String,
    /// kache's metrics listener (`/metrics`), when this kache has `--metrics-listen`.
    pub metrics_url: Option<String>,
    pub pid: u32,
    synced: watch::Receiver<usize>,
    started: Instant,
}

/// Where kache's upstream is and how it serves.
pub struct KacheOpts<'a> {
    /// `--upstream URL` (plain HTTP, the sim) or `--kubeconfig PATH` (TLS, a real apiserver).
    pub upstream: Upstream<'a>,
    pub resources: &'a str,
    /// `--tls-cert`, `--tls-key`: kache serves HTTPS with them.
    pub tls: Option<(&'a Path, &'a Path)>,
    pub log: &'a Path,
    /// Further `kache serve` flags.
    pub args: &'a [&'a str],
}

/// kache's upstream.
pub enum Upstream<'a> {
    Url(&'a str),
    Kubeconfig(&'a Path),
}

/// Starts kache in front of `upstream`, caching `resources` only, logging to `log`.
pub async fn start_kache(
    bins: &Bins,
    upstream: &str,
    resources: &str,
    log: &Path,
) -> anyhow::Result<KacheProc> {
    start_kache_with(
        &bins.kache,
        &KacheOpts { upstream: Upstream::Url(upstream), resources, tls: None, log, args: &[] },
    )
    .await
}

/// Starts `kache serve` as `opts` say.
pub async fn start_kache_with(bin: &Path, opts: &KacheOpts<'_>) -> anyhow::Result<KacheProc> {
    let port = free_port()?;
    let scheme = if opts.tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://127.0.0.1:{port}");
    let mut cmd = Command::new(bin);
    cmd.args(["--log-format", "json", "--log-level", KACHE_LOG_LEVEL, "serve"]);
    match opts.upstream {
        Upstream::Url(u) => cmd.args(["--upstream", u]),
        Upstream::Kubeconfig(k) => cmd.arg("--kubeconfig").arg(k),
    };
    cmd.args(["--listen", &format!("127.0.0.1:{port}"), "--resources", opts.resources, "--no-lazy"])
        .args(["--max-connections", KACHE_MAX_CONNECTIONS])
        .args(opts.args);
    if let Some((cert, key)) = opts.tls {
        cmd.arg("--tls-cert").arg(cert).arg("--tls-key").arg(key);
    }
    let mut metrics_url = None;
    if kache_has_flag(bin, "--metrics-listen") {
        let mport = free_port()?;
        cmd.args(["--metrics-listen", &format!("127.0.0.1:{mport}")]);
        metrics_url = Some(format!("http://127.0.0.1:{mport}"));
    }
    let log = opts.log;
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let pid = child.id().context("kache exited at once")?;
    let stderr = child.stderr.take().context("kache stderr")?;
    let (tx, synced) = watch::channel(0usize);
    let mut file =
        tokio::fs::File::create(log).await.with_context(|| format!("creating {}", log.display()))?;
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains(SYNCED_MARK) {
                tx.send_modify(|n| *n += 1);
            }
            let _ = file.write_all(line.as_bytes()).await;
            let _ = file.write_all(b"\n").await;
        }
        let _ = file.flush().await;
    });
    Ok(KacheProc { child, url, metrics_url, pid, synced, started })
}

impl KacheProc {
    /// Waits until `n` resources logged their initial sync; returns the time since the process started.
    pub async fn wait_synced(&mut self, n: usize, timeout: Duration) -> anyhow::Result<Duration> {
        let waited = tokio::time::timeout(timeout, self.synced.wait_for(|s| *s >= n)).await;
        match waited {
            Ok(Ok(_)) => Ok(self.started.elapsed()),
            Ok(Err(_)) => bail!("kache exited before syncing"),
            Err(_) => bail!("kache did not sync {n} resources within {timeout:?}"),
        }
    }

    pub fn rss(&self) -> anyhow::Result<u64> {
        rss_bytes(self.pid)
    }

    /// This kache's RSS and its [`rss_parts`], from one read of /proc/PID/status.
    pub fn rss_with_parts(&self) -> anyhow::Result<(u64, Vec<(&'static str, u64)>)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        let rss = parse_vmrss(&status).ok_or_else(|| anyhow::anyhow!("no VmRSS for pid {}", self.pid))?;
        Ok((rss, rss_parts(&status)))
    }

    pub fn cpu(&self) -> anyhow::Result<Duration> {
        cpu_time(self.pid)
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// How long the relay may take to listen.
const RELAY_START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `kache-loadtest relay` (this binary as a subprocess): a TLS byte relay, the transport floor of a
/// forwarded read.
pub struct RelayProc {
    child: Child,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    pub pid: u32,
}

/// Starts the relay in front of `upstream` (`host:port`, TLS) on a free port and waits until it listens.
pub async fn start_relay(upstream: &str, log: &Path) -> anyhow::Result<RelayProc> {
    let exe = std::env::current_exe().context("the load tool's own path")?;
    let mut child = Command::new(&exe)
        .args(["relay", "--listen", "127.0.0.1:0", "--upstream", upstream])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {} relay", exe.display()))?;
    let pid = child.id().context("the relay exited at once")?;
    let url = ready(&mut child, crate::relay::READY_PREFIX, RELAY_START_TIMEOUT, "the relay", log).await?;
    Ok(RelayProc { child, url, pid })
}

impl RelayProc {
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Whether `kache serve --help` lists `flag` (flags added by other work are used when present).
fn kache_has_flag(bin: &Path, flag: &str) -> bool {
    std::process::Command::new(bin)
        .args(["serve", "--help"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(flag))
        .unwrap_or(false)
}

/// A port nobody listens on right now (bound and released; the race with other processes is accepted).
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding an ephemeral port")?;
    Ok(l.local_addr()?.port())
}

/// Resident set size of `pid` (VmRSS in /proc/PID/status).
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_vmrss(&status).context("no VmRSS in /proc status")
}

fn parse_vmrss(status: &str) -> Option<u64> {
    status_kib(status, "VmRSS:").map(|kib| kib * 1024)
}

/// The parts of a resident set (`RssAnon`: heap and stacks; `RssFile`: code and libraries mapped from
/// their files; `RssShmem`), in bytes, from a /proc/PID/status.
fn rss_parts(status: &str) -> Vec<(&'static str, u64)> {
    ["RssAnon", "RssFile", "RssShmem"]
        .into_iter()
        .filter_map(|name| Some((name, status_kib(status, &format!("{name}:"))? * 1024)))
        .collect()
}

fn status_kib(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// User plus system CPU time of `pid` (/proc/PID/stat utime + stime).
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = parse_cpu_ticks(&stat).context("malformed /proc stat")?;
    Ok(Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64))
}

fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name may contain spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12 here.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// `sysconf(_SC_CLK_TCK)` via getconf (100 on Linux in practice).
fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .filter(|t| *t > 0)
            .unwrap_or(100)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_vmrss() {
        assert_eq!(parse_vmrss("Name:\tx\nVmRSS:\t  1234 kB\nVmSwap: 0 kB\n"), Some(1234 * 1024));
        assert_eq!(parse_vmrss("Name:\tx\n"), None);
    }

    #[test]
    fn reads_cpu_ticks_past_odd_names() {
        let stat = "42 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 300 45 0 0 20 0";
        assert_eq!(parse_cpu_ticks(stat), Some(345));
        assert_eq!(parse_cpu_ticks("42 (x) S 1"), None);
    }

    #[test]
    fn debug_builds_are_recognised_by_their_directory() {
        assert!(is_debug_build(Path::new("/x/target/debug/kache")));
        assert!(!is_debug_build(Path::new("/x/target/release/kache")));
        assert!(resolve_bin(Some("/nonexistent/target/debug/kache".into()), "kache", false).is_err());
    }

    #[test]
    fn reads_own_process() {
        let pid = std::process::id();
        assert!(rss_bytes(pid).expect("own rss") > 0);
        assert!(cpu_time(pid).is_ok());
    }
}
