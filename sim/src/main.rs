//! kache-sim: a simulated kube-apiserver. Parses flags, starts the sim, prints its URL, runs until
//! interrupted.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use kache_sim::{Crd, Sim};

/// A simulated kube-apiserver (list, watch and writes with the apiserver's semantics).
#[derive(Debug, Parser)]
#[command(name = "kache-sim", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Custom resources to serve: group/version/Kind/plural/Namespaced|Cluster (repeatable).
    #[arg(long = "crd", value_parser = Crd::parse)]
    crds: Vec<Crd>,
    /// Period of watch bookmarks, in seconds.
    #[arg(long, default_value_t = 60.0)]
    bookmark_interval: f64,
    /// Period of automatic compaction, in seconds (0 = never).
    #[arg(long, default_value_t = 300.0)]
    compaction_interval: f64,
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let args = Args::parse();
    let mut b = Sim::builder()
        .listen(args.listen)
        .bookmark_interval(secs(args.bookmark_interval).max(Duration::from_millis(10)))
        .compaction_interval(Some(secs(args.compaction_interval)).filter(|d| !d.is_zero()));
    for c in args.crds {
        b = b.crd(c);
    }
    let sim = b.start().await?;
    println!("kache-sim listening on {}", sim.url());
    tokio::signal::ctrl_c().await?;
    sim.shutdown().await;
    Ok(())
}
