//! The official Kubernetes Python client through kache: runs tests/python/client_test.py (paginated lists,
//! also under foreign writes between pages, as a real cluster's leases and events make them),
//! watch resumed by resourceVersion after a dropped connection and across a kache restart, 410 handling)
//! against kache in front of a seeded sim. The client lives in a venv under the cargo target dir that
//! `scripts/install-test-deps.sh` creates; the test prints SKIPPED when that venv is missing (and fails
//! instead under `KACHE_REQUIRE_TOOLS=1`, as in CI).

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;

use kache::app::{Config, Kache};
use kache_sim::workload::Workload;

use common::{TEST_BLOCK_TIMEOUT, start_sim};

/// The script may not run longer than this.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);
/// Lines buffered from the script's stdout before its reader thread waits.
const LINE_BUFFER: usize = 256;
/// The line by which the script asks for a kache restart.
const RESTART_REQUEST: &str = "@@restart-kache";
/// The line by which the script sets the sim's foreign writes per second (`@@foreign-writes RATE`).
const FOREIGN_WRITES_REQUEST: &str = "@@foreign-writes ";

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's python, where install-test-deps.sh puts it (`$CARGO_TARGET_DIR/py-venv`, else `target/`).
pub(crate) fn venv_python() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("target"));
    let target = if target.is_absolute() { target } else { manifest_dir().join(target) };
    target.join("py-venv/bin/python")
}

pub(crate) fn client_installed(python: &Path) -> bool {
    Command::new(python).args(["-c", "import kubernetes"]).output().is_ok_and(|o| o.status.success())
}

/// kache in front of `upstream` on `addr` (port 0: ephemeral), synced.
async fn start_kache_on(upstream: &str, addr: SocketAddr) -> Kache {
    let mut config = Config::for_url(upstream);
    config.handler.block_timeout = TEST_BLOCK_TIMEOUT;
    config.handler.watch.wait_timeout = TEST_BLOCK_TIMEOUT;
    config.freshness.latency_bound = Duration::from_secs(2);
    // Small consistent reads are forwarded by default; probe so these clients exercise the memory path.
    config.freshness.probe_small_reads = true;
    let mut attempt = 0;
    let listener = loop {
        match TcpListener::bind(addr).await {
            Ok(l) => break l,
            // The previous kache's port may take a moment to be released.
            Err(_) if attempt < 50 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("binding {addr}: {e}"),
        }
    };
    let kache = Kache::start(config, listener).await.expect("kache starts");
    tokio::time::timeout(Duration::from_secs(30), kache.wait_synced()).await.expect("kache syncs");
    kache
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_through_kache() {
    let python = venv_python();
    if !client_installed(&python) {
        common::tools::missing(&format!(
            "the Python kubernetes client is not in {} (scripts/install-test-deps.sh creates that venv)",
            python.display()
        ));
        return;
    }
    let sim = start_sim().await;
    let workload = Workload { namespaces: 3, pods: 90, nodes: 2, churn_per_sec: 0.0, seed: 5 };
    sim.seed(&workload).expect("seeded");
    let first = start_kache_on(&sim.url(), SocketAddr::from(([127, 0, 0, 1], 0))).await;
    let addr = first.addr();
    let url = first.url();
    let mut kache = Some(first);

    let mut child = Command::new(&python)
        .arg(manifest_dir().join("tests/python/client_test.py"))
        .env("KACHE_URL", &url)
        .env("SIM_URL", sim.url())
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python starts");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, mut lines) = mpsc::channel::<String>(LINE_BUFFER);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.blocking_send(line).is_err() {
                return;
            }
        }
    });

    let mut output = Vec::new();
    let run = async {
        while let Some(line) = lines.recv().await {
            println!("python: {line}");
            if line == RESTART_REQUEST {
                if let Some(old) = kache.take() {
                    old.shutdown().await;
                }
                kache = Some(start_kache_on(&sim.url(), addr).await);
                writeln!(stdin, "restarted").and_then(|()| stdin.flush()).expect("answer the script");
            } else if let Some(rate) = line.strip_prefix(FOREIGN_WRITES_REQUEST) {
                sim.set_foreign_writes(rate.trim().parse().expect("a rate per second"));
                writeln!(stdin, "ok").and_then(|()| stdin.flush()).expect("answer the script");
            } else {
                output.push(line);
            }
        }
    };
    if tokio::time::timeout(SCRIPT_TIMEOUT, run).await.is_err() {
        let _ = child.kill();
        panic!("the script did not finish within {SCRIPT_TIMEOUT:?}: {output:?}");
    }
    let status =
        tokio::task::spawn_blocking(move || child.wait()).await.expect("joined").expect("python exits");
    assert!(status.success(), "the Python checks failed (see their output above): {output:?}");
    assert_eq!(output.last().map(String::as_str), Some("6 passed, 0 failed"), "{output:?}");
    let kache = kache.expect("kache runs");
    assert!(kache.stats().memory() > 0, "kache answered from memory");
    kache.shutdown().await;
    sim.shutdown().await;
}
