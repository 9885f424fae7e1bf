//! The official Kubernetes Python client through kache in front of the real cluster: runs
//! tests/python/real_cluster_test.py (lists of pods, config maps and nodes across namespaces, a paginated
//! list with `_continue`, a watch from a resourceVersion, gets, refusals), each call compared with the same
//! call made directly to the apiserver with the same user's token. The client lives in the venv that
//! `scripts/install-test-deps.sh` creates (see `crate::python`).

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::cluster::Cluster;

/// The script may not run longer than this: a hang guard.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_through_kache_matches_the_cluster() {
    let python = crate::python::venv_python();
    if !crate::python::client_installed(&python) {
        common::tools::missing(&format!(
            "the Python kubernetes client is not in {} (scripts/install-test-deps.sh creates that venv)",
            python.display()
        ));
        return;
    }
    // It writes config maps in team-b: the byte-for-byte comparisons of the shared cluster wait.
    let _one = common::cluster::one_at_a_time().await;
    let Some(cluster) = tokio::task::spawn_blocking(Cluster::shared).await.expect("cluster start") else {
        return;
    };
    let kache = cluster.start_kache(|config| cluster.delegated(config)).await;
    let mut command = Command::new(&python);
    command
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/real_cluster_test.py"))
        .env("KACHE_URL", kache.url())
        .env("APISERVER_URL", cluster.url())
        .env("KUBE_CA", cluster.ca())
        .env("PYTHONUNBUFFERED", "1");
    for user in ["ADMIN", "ALICE", "BOB", "CAROL", "DAVE"] {
        let var = format!("KUBE_{user}_TOKEN");
        command.env(&var, cluster.var(&var));
    }
    let run = tokio::task::spawn_blocking(move || command.output());
    let out = tokio::time::timeout(SCRIPT_TIMEOUT, run)
        .await
        .unwrap_or_else(|_| panic!("the script did not finish within {SCRIPT_TIMEOUT:?}"))
        .expect("joined")
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the Python checks failed ({}):\n{stdout}\n{stderr}", out.status);
    assert_eq!(stdout.lines().last(), Some("5 passed, 0 failed"), "{stdout}\n{stderr}");
    assert!(kache.stats().memory() > 0, "kache answered from memory");
    kache.shutdown().await;
}
