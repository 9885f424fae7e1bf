//! The testbed's real control plane (`scripts/cluster.sh`: etcd, kube-apiserver 1.36 with real
//! authentication and RBAC, the controller-manager, the scheduler, simulated nodes and a workload), started
//! for the tests that need it and stopped when the last of them drops it.
//!
//! One cluster serves every test of the binary that runs while it is up ([`Cluster::shared`]): starting one
//! takes tens of seconds. The binaries come from `testbed/build.sh` (see [`super::real::testbed_bin`]); no
//! test builds them. `KACHE_TESTBED_NODES` sets the node count (default [`DEFAULT_NODES`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, Weak};

use std::time::Duration;

use kache::app::{Config, Kache, UpstreamSource};
use kache::auth::AuthSettings;
use kache::front::server::TlsConfig;

use super::real::{BUILD_HINT, target_dir, testbed_bin};
use super::tools;

/// Nodes of the tests' cluster: enough for scheduling to spread pods, small enough for two cores.
pub const DEFAULT_NODES: usize = 10;
/// The binaries `scripts/cluster.sh` runs.
const BINARIES: [&str; 5] = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"];

/// A running cluster; dropping the last handle runs `scripts/cluster.sh down`.
pub struct Cluster {
    dir: PathBuf,
    env: HashMap<String, String>,
}

static SHARED: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());

/// The tests that run a cluster run one at a time: two clusters starting together on two cores slow each
/// other past their start-up deadlines, and ports picked free by one script may be taken by the other's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Held for the whole of a test that runs a cluster (see [`ONE_AT_A_TIME`]).
pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().await
}

// === impl Cluster ===

impl Cluster {
    /// The cluster the running tests share, started if none is up; `None` (after [`tools::missing`]) when the
    /// testbed is not built.
    pub fn shared() -> Option<Arc<Cluster>> {
        let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cluster) = shared.upgrade() {
            return Some(cluster);
        }
        let nodes =
            std::env::var("KACHE_TESTBED_NODES").ok().and_then(|n| n.parse().ok()).unwrap_or(DEFAULT_NODES);
        let cluster = Arc::new(Self::start("shared", nodes)?);
        *shared = Arc::downgrade(&cluster);
        Some(cluster)
    }

    /// A cluster of its own under `target/testbed-cluster/NAME-N` (N counts the starts of this process).
    pub fn start(name: &str, nodes: usize) -> Option<Cluster> {
        Self::start_with(name, nodes, &[])
    }

    /// As [`Cluster::start`], with more arguments of `cluster.sh up` (e.g. `--no-clients`).
    pub fn start_with(name: &str, nodes: usize, args: &[&str]) -> Option<Cluster> {
        let bin = testbed_bin();
        if let Some(missing) = BINARIES.iter().find(|b| !bin.join(b).is_file()) {
            tools::missing(&format!(
                "the testbed's {missing} is not built in {}: {BUILD_HINT}",
                bin.display()
            ));
            return None;
        }
        // A directory of its own per start in this process: the previous cluster of the same name may still
        // be stopping (its last handle dropped outside the lock) while the next one starts.
        static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = target_dir().join("testbed-cluster").join(format!("{name}-{n}"));
        // A run killed before its guard dropped may have left a cluster behind: start afresh.
        cluster_sh(&["down"], &dir);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the cluster's directory");
        let mut cluster = Cluster { dir, env: HashMap::new() };
        let nodes = nodes.to_string();
        cluster.run(&[&["up"][..], &["--nodes", &nodes], args].concat());
        Some(cluster)
    }

    /// (Re)starts the controller-manager, the scheduler and the nodes with `url` as their server (trusting
    /// `ca`), and waits as `up` does: every node Ready, every Deployment's pods Running.
    pub fn clients_via(&mut self, url: &str, ca: &Path) {
        let ca = ca.to_string_lossy();
        self.run(&["clients", "--via-url", url, "--via-ca", &ca]);
    }

    /// `cluster.sh COMMAND DIR ARGS…` (`args[0]` is the command), which must succeed; then reads `DIR/env`.
    fn run(&mut self, args: &[&str]) {
        let out = cluster_sh(args, &self.dir);
        assert!(
            out.status.success(),
            "scripts/cluster.sh {} {} failed:\n{}{}",
            args.join(" "),
            self.dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let env = std::fs::read_to_string(self.dir.join("env")).expect("cluster.sh wrote DIR/env");
        self.env = parse_env(&env);
    }

    /// Stops `component` (`etcd`, `kube-apiserver`, …: `cluster.sh stop`, by the PID its start recorded) and
    /// starts it again with `up` (same ports, same data), which waits as at the start.
    pub fn restart(&mut self, component: &str) {
        let out = cluster_sh(&["stop", component], &self.dir);
        assert!(
            out.status.success(),
            "cluster.sh stop {component}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.run(&["up"]);
    }

    /// The CA that signed every certificate of the cluster.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("pki/ca.crt")
    }

    /// kache in front of this cluster with the admin's kubeconfig, `tweak`ed, started on a loopback port and
    /// synced (a hang guard of 180 s).
    pub async fn start_kache(&self, tweak: impl FnOnce(&mut Config)) -> Kache {
        let mut config = Config::for_url(String::new());
        config.upstream = UpstreamSource::Kubeconfig(Some(self.admin_kubeconfig()));
        tweak(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let kache = Kache::start(config, listener).await.expect("kache starts");
        tokio::time::timeout(Duration::from_secs(180), kache.wait_synced()).await.unwrap_or_else(|_| {
            panic!("kache syncs every resource of the cluster: {:?}", kache.registry().statuses())
        });
        kache
    }

    /// `--auth=delegated` as the cluster's own clients meet it: kache serves TLS with the apiserver's own
    /// certificate (they trust the cluster's CA) and accepts client certificates of that CA.
    pub fn delegated(&self, config: &mut Config) {
        let pki = self.dir.join("pki");
        config.auth = AuthSettings::delegated();
        config.tls = Some(
            TlsConfig::with_client_ca(&pki.join("apiserver.crt"), &pki.join("apiserver.key"), &self.ca())
                .expect("the apiserver's certificate serves kache"),
        );
    }

    /// A variable of `DIR/env`; panics naming it when cluster.sh did not write it.
    pub fn var(&self, name: &str) -> &str {
        self.env
            .get(name)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("{name} is not in {}/env", self.dir.display()))
    }

    /// A variable of `DIR/env`, if written.
    pub fn try_var(&self, name: &str) -> Option<&str> {
        self.env.get(name).map(String::as_str)
    }

    /// `https://127.0.0.1:PORT` of the kube-apiserver.
    pub fn url(&self) -> &str {
        self.var("KUBE_APISERVER_URL")
    }

    /// A kubeconfig of a cluster administrator (system:masters).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        PathBuf::from(self.var("KUBE_ADMIN_KUBECONFIG"))
    }

    /// The cluster's directory (logs, certificates, kubeconfigs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last lines of a component's log in the cluster's directory (`kube-apiserver`, `etcd`, …).
    pub fn log_tail(&self, component: &str) -> String {
        let text = std::fs::read_to_string(self.dir.join(format!("{component}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        cluster_sh(&["down"], &self.dir);
    }
}

/// Runs `scripts/cluster.sh COMMAND DIR REST…` (`args` = COMMAND, REST…) on the testbed's binaries.
fn cluster_sh(args: &[&str], dir: &Path) -> Output {
    let (command, rest) = args.split_first().expect("a cluster.sh command");
    Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster.sh"))
        .arg(command)
        .arg(dir)
        .args(rest)
        .env("TESTBED_BIN", testbed_bin())
        .output()
        .expect("run scripts/cluster.sh")
}

/// `KEY=VALUE` lines (optionally quoted, `export ` allowed), as cluster.sh writes them.
fn parse_env(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("export ").unwrap_or(line);
            if line.starts_with('#') {
                return None;
            }
            let (k, v) = line.split_once('=')?;
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(v);
            Some((k.trim().to_owned(), v.to_owned()))
        })
        .collect()
}
