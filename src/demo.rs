//! `kache demo`: the simulated upstream with a realistic dataset, kache in front of it, and a kubeconfig.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio::time::Instant;

use anyhow::Context as _;

use kache::app::{Kache, UpstreamSource};
use kache_sim::Sim;
use kache_sim::workload::{self, Workload};

use crate::CommonArgs;

mod cluster;
mod measure;

#[derive(clap::Args, Debug)]
pub(crate) struct DemoArgs {
    /// Pods in the simulated cluster.
    #[arg(long, default_value_t = 10_000)]
    pods: usize,
    /// Namespaces the pods are spread over.
    #[arg(long, default_value_t = 100)]
    namespaces: usize,
    /// Nodes the pods are scheduled on.
    #[arg(long, default_value_t = 50)]
    nodes: usize,
    /// Pod creates/updates/deletes per second in the simulated cluster.
    #[arg(long, default_value_t = 5.0)]
    churn: f64,
    /// Background writes per second to node leases and events in the simulated cluster: a real cluster's
    /// global resourceVersion moves all the time through them, so most resources are quiet (0 = off).
    #[arg(long, default_value_t = 10.0)]
    foreign_writes: f64,
    /// Milliseconds the simulated apiserver adds per MiB of a list response, as a kube-apiserver spends
    /// encoding every object for every list (measured ~9); 0 answers as fast as the simulator can, which
    /// is faster than any apiserver.
    #[arg(long, default_value_t = kache_sim::sim::APISERVER_LIST_COST_PER_MIB.as_secs_f64() * 1e3)]
    upstream_list_ms_per_mib: f64,
    /// Address kache serves on (`HOST:PORT`, e.g. `localhost:8080`).
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = crate::parse_listen)]
    listen: SocketAddr,
    /// Where to write the kubeconfig that points kubectl at kache (context kache-demo) and at the
    /// simulated apiserver (context kache-demo-upstream).
    #[arg(long, default_value = "kache-demo.kubeconfig")]
    kubeconfig_out: PathBuf,
    /// Random seed of the dataset.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Instead of the simulator, a real Kubernetes 1.36 control plane in DIR (`scripts/cluster.sh up DIR`:
    /// kube-apiserver, etcd, controller-manager, scheduler, `--nodes` simulated nodes; started here when DIR
    /// has no cluster and the script is at hand). kache serves it with `--auth=delegated`: each user's reads
    /// are authorized by the cluster's RBAC.
    #[arg(long, value_name = "DIR")]
    cluster: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) common: CommonArgs,
}

pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    if let Some(dir) = args.cluster.clone() {
        return cluster::run(args, dir).await;
    }
    // Bound first, so that a port in use is reported before any seeding.
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| crate::bind_error("--listen", &args.listen.to_string(), &e))?;
    let metrics = crate::bind_metrics(&args.common.metrics_listen).await?;
    let list_cost = Some(args.upstream_list_ms_per_mib)
        .filter(|ms| ms.is_finite() && *ms > 0.0)
        .map(|ms| Duration::from_secs_f64(ms / 1e3));
    let sim = Sim::builder()
        .foreign_writes(args.foreign_writes)
        .kubelets(false)
        .list_cost_per_mib(list_cost)
        .start()
        .await
        .context("starting the simulated apiserver")?;
    println!("simulated apiserver (kache-sim) on {}", sim.url());
    match list_cost {
        Some(c) => println!(
            "its lists take {:.0} ms per MiB, as a kube-apiserver's (--upstream-list-ms-per-mib)",
            c.as_secs_f64() * 1e3
        ),
        None => println!("its lists take no modelled time: it answers faster than any apiserver"),
    }

    let w = Workload {
        namespaces: args.namespaces.max(1),
        pods: args.pods,
        nodes: args.nodes.max(1),
        churn_per_sec: args.churn,
        seed: args.seed,
    };
    println!(
        "seeding {} pods of {} Deployments over {} namespaces and {} nodes...",
        w.pods,
        w.namespaces * workload::apps::APPS_IN_ORDER.len(),
        w.namespaces,
        w.nodes
    );
    let started = Instant::now();
    // One object at a time, so a large dataset never sits in memory as JSON trees.
    let total = sim
        .seed_cluster(&w)
        .map_err(|e| anyhow::anyhow!("seeding the simulated apiserver: {}", e.message))?;
    println!("seeded {total} objects in {:.1?}", started.elapsed());

    let config = args.common.clone().into_config(UpstreamSource::Url(sim.url()))?;
    let kache = Kache::start_with_metrics(config, listener, metrics).await?;
    let sync_started = Instant::now();
    wait_synced(&kache).await;
    println!(
        "kache synced {} resources in {:.1?}",
        kache.registry().statuses().len(),
        sync_started.elapsed()
    );

    // Before churn starts, so that the sim's counters see only the reads and kache.
    println!();
    match measure::compare(&sim, &kache.url(), MEASURED_LIST).await {
        Ok(c) => c.lines().iter().for_each(|l| println!("{l}")),
        Err(e) => println!("measuring {MEASURED_LIST} failed: {e:#}"),
    }
    let (stop_churn, stop_rx) = tokio::sync::watch::channel(false);
    let churn = (args.churn > 0.0).then(|| tokio::spawn(workload::churn(sim.url(), w.clone(), stop_rx)));

    std::fs::write(&args.kubeconfig_out, kubeconfig(&kache.url(), &sim.url()))
        .with_context(|| format!("writing {}", args.kubeconfig_out.display()))?;
    let kc = std::path::absolute(&args.kubeconfig_out).unwrap_or_else(|_| args.kubeconfig_out.clone());
    println!();
    println!("{LIMITS}");
    println!();
    println!("kache:      {}", kache.url());
    println!("upstream:   {} (the simulated apiserver: context kache-demo-upstream)", sim.url());
    if let Some(m) = kache.metrics_url() {
        println!("metrics:    {m}/metrics   health: {m}/readyz?verbose");
    }
    println!("kubeconfig: {}", kc.display());
    println!();
    println!("Try (copy and paste into another terminal):");
    println!();
    for line in try_next(&kc.display().to_string(), &sim.url()) {
        println!("  {line}");
    }
    println!();
    println!("Ctrl-C stops the demo.");

    kache.run_until(crate::shutdown_signal()).await;
    let _ = stop_churn.send(true);
    if let Some(churn) = churn {
        let _ = churn.await;
    }
    sim.shutdown().await;
    Ok(())
}

/// Waits until every resource of `kache` synced, printing the count each second.
async fn wait_synced(kache: &Kache) {
    let mut last_print = Instant::now();
    loop {
        let statuses = kache.registry().statuses();
        if !statuses.is_empty() && kache.registry().all_synced() {
            break;
        }
        if last_print.elapsed() > Duration::from_secs(1) {
            let synced = statuses.iter().filter(|s| s.synced).count();
            println!("syncing: {synced}/{} resources synced", statuses.len());
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The list the demo measures direct and through kache: every pod, what a controller's relist reads.
const MEASURED_LIST: &str = "/api/v1/pods";

/// What the demo's simulated cluster cannot do, said once at start (the sim answers each with a Status
/// saying the same).
const LIMITS: &str = "This simulated cluster has no kubelets: exec, attach, port-forward and logs say so; no server-side apply.";

/// The commands printed under "Try": a short block that works when pasted as is.
fn try_next(kubeconfig: &str, upstream: &str) -> Vec<String> {
    vec![
        format!("export KUBECONFIG={kubeconfig}"),
        "kubectl get deploy,rs,pods -n ns-0 | head -20".to_string(),
        "kubectl get pods -A -l app=api --field-selector spec.nodeName=node-0".to_string(),
        "kubectl explain pods.spec.containers.resources".to_string(),
        "kubectl get pods -A -w --output-watch-events | head -20".to_string(),
        "# every pod as an informer relists, through kache, then direct; then what the upstream served"
            .to_string(),
        format!("time kubectl get --raw '{MEASURED_LIST}?resourceVersion=0' | wc -c"),
        format!(
            "time kubectl --context kache-demo-upstream get --raw '{MEASURED_LIST}?resourceVersion=0' | wc -c"
        ),
        format!("curl -s {upstream}/sim/served"),
    ]
}

fn kubeconfig(kache: &str, upstream: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kache-demo
  cluster:
    server: {kache}
- name: kache-demo-upstream
  cluster:
    server: {upstream}
contexts:
- name: kache-demo
  context:
    cluster: kache-demo
    user: demo
    namespace: default
- name: kache-demo-upstream
  context:
    cluster: kache-demo-upstream
    user: demo
    namespace: default
current-context: kache-demo
users:
- name: demo
  user: {{}}
"
    )
}
