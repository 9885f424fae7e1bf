//! The demo's measurement: one list read direct from the simulated apiserver and through kache, with its
//! time, its bytes and the upstream's work for it (requests and bytes the sim served meanwhile).
//!
//! Time alone would mislead here: the sim answers lists from memory as fast as kache does, while a real
//! apiserver encodes every object for every list. What the demo can show honestly is the upstream's work,
//! so it prints both and says which one carries over to a real cluster.

use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;

use kache_sim::SimHandle;

/// Reads per side; the median is reported (one slow read from a busy machine does not decide it).
const READS: usize = 3;

/// One side's reads of the list.
pub(crate) struct Side {
    /// Median time to the last byte.
    pub(crate) time: Duration,
    /// Body bytes of one read (uncompressed JSON).
    pub(crate) bytes: u64,
    /// Bytes the sim served per read (its responses to the reader and to kache meanwhile).
    pub(crate) upstream_bytes: u64,
}

/// One read, direct and through kache.
pub(crate) struct Row {
    pub(crate) label: &'static str,
    pub(crate) direct: Side,
    pub(crate) kache: Side,
}

/// The same reads, direct and through kache.
pub(crate) struct Comparison {
    pub(crate) path: &'static str,
    pub(crate) rows: Vec<Row>,
}

/// The reads compared: the list as informers relist it (from any cache) and as kubectl reads it
/// (consistent, no resourceVersion).
const READ_KINDS: &[(&str, &str)] =
    &[("resourceVersion=0 (informers)", "?resourceVersion=0"), ("consistent (kubectl get)", "")];

/// Reads `path` [`READS`] times per kind from the sim, then from kache, counting what the sim served for
/// each. Nothing else may talk to the sim over HTTP meanwhile except kache itself (churn starts after this).
pub(crate) async fn compare(
    sim: &SimHandle,
    kache_url: &str,
    path: &'static str,
) -> anyhow::Result<Comparison> {
    let mut rows = Vec::new();
    for (label, query) in READ_KINDS {
        let target = format!("{path}{query}");
        let direct =
            side(sim, &sim.url(), &target).await.context("reading the list from the simulated apiserver")?;
        let kache = side(sim, kache_url, &target).await.context("reading the list through kache")?;
        rows.push(Row { label, direct, kache });
    }
    Ok(Comparison { path, rows })
}

async fn side(sim: &SimHandle, base: &str, path: &str) -> anyhow::Result<Side> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let (_, bytes_before) = sim.served();
    let mut times = Vec::with_capacity(READS);
    let mut bytes = 0;
    for _ in 0..READS {
        let req = http::Request::get(format!("{base}{path}"))
            .header(http::header::ACCEPT, "application/json")
            .body(Empty::new())
            .context("building the request")?;
        let started = Instant::now();
        let resp = client.request(req).await?;
        anyhow::ensure!(resp.status().is_success(), "GET {path} answered {}", resp.status());
        let mut body = resp.into_body();
        bytes = 0;
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                bytes += data.len() as u64;
            }
        }
        times.push(started.elapsed());
    }
    times.sort();
    let (_, bytes_after) = sim.served();
    Ok(Side { time: times[READS / 2], bytes, upstream_bytes: (bytes_after - bytes_before) / READS as u64 })
}

// === impl Comparison ===

impl Comparison {
    /// The lines `kache demo` prints: per read, its time and what the upstream served for it, direct and
    /// through kache.
    pub(crate) fn lines(&self) -> Vec<String> {
        let bytes = self.rows.first().map_or(0, |r| r.direct.bytes);
        let ms = |s: &Side| format!("{:.0} ms", s.time.as_secs_f64() * 1e3);
        let mut out = vec![
            format!("GET {} ({} of JSON), median of {READS} reads:", self.path, human_bytes(bytes)),
            format!("  {:<30}{:^24}{:^24}", "", "direct", "through kache").trim_end().to_string(),
            format!("  {:<30}{:>10}{:>14}{:>10}{:>14}", "", "time", "upstream", "time", "upstream"),
        ];
        for r in &self.rows {
            out.push(format!(
                "  {:<30}{:>10}{:>14}{:>10}{:>14}",
                r.label,
                ms(&r.direct),
                human_bytes(r.direct.upstream_bytes),
                ms(&r.kache),
                human_bytes(r.kache.upstream_bytes),
            ));
        }
        out.extend(
            [
                "(upstream: the bytes the simulated apiserver served per read, in all its requests: curl its /sim/served)",
                "kache serves resourceVersion=0 from memory, always. A consistent read it serves from memory when a census",
                "(a metadata-only list of the upstream) proves it current and costs less than forwarding the read; this",
                "simulator builds metadata views more slowly than an apiserver does, so here kache often forwards them.",
            ]
            .map(String::from),
        );
        out
    }
}

/// Bytes in decimal units, as people quote list sizes.
pub(crate) fn human_bytes(n: u64) -> String {
    let n = n as f64;
    if n >= 1e6 {
        format!("{:.1} MB", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1} kB", n / 1e3)
    } else {
        format!("{n:.0} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_like_list_sizes() {
        assert_eq!(human_bytes(36_123_456), "36.1 MB");
        assert_eq!(human_bytes(2_048), "2.0 kB");
        assert_eq!(human_bytes(0), "0 B");
    }
}
