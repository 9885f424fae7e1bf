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
    /// Address kache serves on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where to write the kubeconfig that points kubectl at kache.
    #[arg(long, default_value = "kache-demo.kubeconfig")]
    kubeconfig_out: PathBuf,
    /// Random seed of the dataset.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    common: CommonArgs,
}

pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let sim = Sim::builder()
        .foreign_writes(args.foreign_writes)
        .start()
        .await
        .context("starting the simulated apiserver")?;
    println!("simulated apiserver on {}", sim.url());

    let w = Workload {
        namespaces: args.namespaces.max(1),
        pods: args.pods,
        nodes: args.nodes.max(1),
        churn_per_sec: args.churn,
        seed: args.seed,
    };
    println!("seeding {} pods over {} namespaces and {} nodes...", w.pods, w.namespaces, w.nodes);
    let started = Instant::now();
    // One object at a time, so a large dataset never sits in memory as JSON trees.
    let total = sim.seed(&w).map_err(|e| anyhow::anyhow!("seeding the simulated apiserver: {e:?}"))?;
    println!("seeded {total} objects in {:.1?}", started.elapsed());

    let (stop_churn, stop_rx) = tokio::sync::watch::channel(false);
    let churn = (args.churn > 0.0).then(|| tokio::spawn(workload::churn(sim.url(), w.clone(), stop_rx)));

    let config = args.common.clone().into_config(UpstreamSource::Url(sim.url()))?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding --listen {}", args.listen))?;
    let metrics = crate::bind_metrics(&args.common.metrics_listen).await?;
    let kache = Kache::start_with_metrics(config, listener, metrics).await?;
    let sync_started = Instant::now();
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
    println!(
        "kache synced {} resources in {:.1?}",
        kache.registry().statuses().len(),
        sync_started.elapsed()
    );

    let kubeconfig = kubeconfig(&kache.url(), &sim.url());
    std::fs::write(&args.kubeconfig_out, kubeconfig)
        .with_context(|| format!("writing {}", args.kubeconfig_out.display()))?;
    let kc = args.kubeconfig_out.display();
    println!();
    println!("kache:    {}", kache.url());
    println!("upstream: {} (the simulated apiserver)", sim.url());
    if let Some(m) = kache.metrics_url() {
        println!("metrics:  {m}/metrics   health: {m}/readyz?verbose");
    }
    println!("kubeconfig: {kc}  (contexts: kache-demo, kache-demo-upstream)");
    println!();
    println!("Try:");
    println!("  kubectl --kubeconfig {kc} get pods -A | head");
    println!("  kubectl --kubeconfig {kc} get pods -n ns-0 -l app=api --chunk-size=50 -o name");
    println!("  kubectl --kubeconfig {kc} get pods -A --field-selector spec.nodeName=node-0 -o name | head");
    println!("  kubectl --kubeconfig {kc} get --raw '/api/v1/pods?limit=2' | head -c 600");
    println!("  kubectl --kubeconfig {kc} get pods -A -w --output-watch-events");
    println!("  time kubectl --kubeconfig {kc} --context kache-demo-upstream get pods -A -o name | wc -l");
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
