//! The relist storm against any apiserver: `readers` consistent full lists (resourceVersion unset, what
//! informers send when they relist together after an outage) started at once, directly and through kache,
//! while the foreign writer moves the global revision (so the listed resource is quiet, as in a real
//! cluster). Measures the time until the last list is read, each list's latency, and what reached the
//! upstream through kache (forwarded lists, revision probes, proof watches).

use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::Procs;
use super::metrics::{self, Counters};
use super::setup::Target;
use crate::http::{self, Client};
use crate::procs::KacheProc;
use crate::results::{Latency, histogram, record};

/// What one storm did.
pub struct Storm {
    /// From the first request sent to the last list read whole.
    pub wall: Duration,
    pub latency: Latency,
    pub errors: u64,
    /// Lists answered 429 (kache's in-flight byte budget, `--max-read-bytes-inflight`, or the apiserver's
    /// overload answer): real clients retry them after `Retry-After`; not counted in `errors`.
    pub throttled: u64,
    /// The distinct reasons of the failed lists (status and message, or the transport error).
    pub reasons: std::collections::BTreeSet<String>,
    /// kache's counters over the storm (zero for the direct target).
    pub counters: Counters,
    /// CPU seconds over the storm, per measured process.
    pub cpu: Vec<(String, f64)>,
}

/// Sends `readers` GETs of `path` at once to `target`; counts kache's upstream requests over them.
pub async fn run(
    client: &Client,
    target: &Target,
    path: &str,
    readers: usize,
    kache: &KacheProc,
    procs: &Procs,
) -> Storm {
    let before = metrics::scrape(client, kache.metrics_url.as_deref()).await;
    let cpu0 = procs.cpu();
    let started = Instant::now();
    let url = http::url(&target.base, path, "");
    let mut set = JoinSet::new();
    for _ in 0..readers {
        let (client, url, bearer) = (client.clone(), url.clone(), target.bearer.clone());
        set.spawn(async move {
            let send = http::Send { bearer: bearer.as_deref(), ..Default::default() };
            let s = Instant::now();
            http::request(&client, http::Method::GET, &url, &send).await.map(|_| s.elapsed())
        });
    }
    let mut hist = histogram();
    let mut errors = 0;
    let mut throttled = 0;
    let mut reasons = std::collections::BTreeSet::new();
    while let Some(done) = set.join_next().await {
        match done {
            Ok(Ok(d)) => record(&mut hist, d),
            Ok(Err(http::HttpError::Status { status, .. })) if status.as_u16() == 429 => throttled += 1,
            Ok(Err(e)) => {
                errors += 1;
                reasons.insert(format!("{e:#}").chars().take(200).collect());
            }
            Err(e) => {
                errors += 1;
                reasons.insert(format!("task: {e}"));
            }
        }
    }
    let wall = started.elapsed();
    let cpu1 = procs.cpu();
    let cpu = cpu1.iter().map(|(n, v1)| (n.clone(), v1 - cpu0.get(n).copied().unwrap_or(*v1))).collect();
    let after = metrics::scrape(client, kache.metrics_url.as_deref()).await;
    Storm {
        wall,
        latency: Latency::of(&hist),
        errors,
        throttled,
        reasons,
        counters: after.minus(&before),
        cpu,
    }
}
