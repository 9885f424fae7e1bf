//! kache-sim: a simulated kube-apiserver. Parses flags, starts the sim (seeded with a workload),
//! prints its URL when ready, drives churn, runs until interrupted.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use kache_sim::auth::AuthConfig;
use kache_sim::workload::{Workload, churn};
use kache_sim::{Crd, Sim};

/// A simulated kube-apiserver (list, watch and writes with the apiserver's semantics).
#[derive(Debug, Parser)]
#[command(name = "kache-sim", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Pods to seed (spread over namespaces and nodes).
    #[arg(long, default_value_t = 0)]
    pods: usize,
    /// Namespaces to seed (`ns-0`, ...).
    #[arg(long, default_value_t = 0)]
    namespaces: usize,
    /// Nodes to seed (`node-0`, ...).
    #[arg(long, default_value_t = 0)]
    nodes: usize,
    /// Pod writes per second after seeding (creates, updates, deletes); 0 = none.
    #[arg(long, default_value_t = 0.0)]
    churn: f64,
    /// Seed the pods' owners too: per namespace a Deployment per app and a ReplicaSet per template
    /// generation, as `kache demo` does.
    #[arg(long)]
    owners: bool,
    /// Milliseconds added to each list response per MiB of its body, as a kube-apiserver spends encoding
    /// every object for every list (~9 measured; 0 = none, the sim's own speed).
    #[arg(long, default_value_t = 0.0)]
    list_ms_per_mib: f64,
    /// Seed of the workload's random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Custom resources to serve: group/version/Kind/plural/Namespaced|Cluster (repeatable).
    #[arg(long = "crd", value_parser = Crd::parse)]
    crds: Vec<Crd>,
    /// Background writes per second to leases and events (what moves a real cluster's global revision);
    /// 0 = none.
    #[arg(long, default_value_t = 0.0)]
    foreign_writes: f64,
    /// Period of watch bookmarks, in seconds.
    #[arg(long, default_value_t = 60.0)]
    bookmark_interval: f64,
    /// Period of automatic compaction, in seconds (0 = never).
    #[arg(long, default_value_t = 300.0)]
    compaction_interval: f64,
    /// Static token file (`token,user,uid,"group1,group2"` per line) enabling authentication; every
    /// authenticated user in group system:masters may do anything.
    #[arg(long)]
    token_auth_file: Option<std::path::PathBuf>,
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let auth = match &args.token_auth_file {
        Some(p) => Some(AuthConfig::new().with_token_csv(&std::fs::read_to_string(p)?)?),
        None => None,
    };
    let mut b = Sim::builder()
        .listen(args.listen)
        .bookmark_interval(secs(args.bookmark_interval).max(Duration::from_millis(10)))
        .compaction_interval(Some(secs(args.compaction_interval)).filter(|d| !d.is_zero()))
        .foreign_writes(args.foreign_writes)
        .list_cost_per_mib(
            Some(args.list_ms_per_mib).filter(|ms| ms.is_finite() && *ms > 0.0).map(|ms| secs(ms / 1e3)),
        )
        .auth(auth);
    for c in args.crds {
        b = b.crd(c);
    }
    let sim = b.start().await?;
    let workload = Workload {
        namespaces: args.namespaces,
        pods: args.pods,
        nodes: args.nodes,
        churn_per_sec: args.churn,
        seed: args.seed,
    };
    if args.pods > 0 || args.namespaces > 0 || args.nodes > 0 {
        let n = if args.owners { sim.seed_cluster(&workload)? } else { sim.seed(&workload)? };
        tracing::info!(objects = n, "seeded");
    }
    println!("kache-sim listening on {}", sim.url());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let churner = (args.churn > 0.0).then(|| tokio::spawn(churn(sim.url(), workload, stop_rx)));
    tokio::signal::ctrl_c().await?;
    stop_tx.send_replace(true);
    if let Some(c) = churner {
        let _ = c.await;
    }
    sim.shutdown().await;
    Ok(())
}
