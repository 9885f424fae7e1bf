//! kache's own counters, scraped from its /metrics before and after each batch: where answers came from
//! and what reached the upstream.

use crate::http::{self, Client};

/// Counter sums of one scrape (or the difference of two).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    /// `kache_encoding_total{served="memory"}`.
    pub memory: f64,
    /// `kache_encoding_total{served="forwarded"}`.
    pub forwarded: f64,
    /// `kache_forwarded_requests_total{kind="read"}`: reads passed through.
    pub forwarded_reads: f64,
    /// `kache_freshness_upstream_probes_total`: revision probes for consistent reads.
    pub probes: f64,
    /// `kache_freshness_proofs_total`: proof watches opened upstream.
    pub proofs: f64,
    /// `kache_freshness_upstream_censuses_total`: metadata-only consistent lists sent upstream.
    pub censuses: f64,
    /// `kache_too_large_resource_version_total`: 504s kache answered itself.
    pub too_large: f64,
    /// `kache_etcd_requests_total` (the etcd oracle's revision reads, progress requests, verifications and
    /// watches).
    pub etcd_requests: f64,
    /// `kache_etcd_proven_total`: consistent reads the etcd oracle proved.
    pub etcd_proven: f64,
    /// Whether a scrape succeeded (a kache without a metrics listener reports nothing).
    pub seen: bool,
}

impl Counters {
    /// Requests kache sent upstream for reads: forwarded reads, probes, proof watches and censuses.
    pub fn upstream_requests(&self) -> f64 {
        self.forwarded_reads + self.probes + self.proofs + self.censuses
    }

    pub fn minus(&self, before: &Counters) -> Counters {
        Counters {
            memory: self.memory - before.memory,
            forwarded: self.forwarded - before.forwarded,
            forwarded_reads: self.forwarded_reads - before.forwarded_reads,
            probes: self.probes - before.probes,
            proofs: self.proofs - before.proofs,
            censuses: self.censuses - before.censuses,
            too_large: self.too_large - before.too_large,
            etcd_requests: self.etcd_requests - before.etcd_requests,
            etcd_proven: self.etcd_proven - before.etcd_proven,
            seen: self.seen && before.seen,
        }
    }

    pub fn add(&mut self, d: &Counters) {
        self.memory += d.memory;
        self.forwarded += d.forwarded;
        self.forwarded_reads += d.forwarded_reads;
        self.probes += d.probes;
        self.proofs += d.proofs;
        self.censuses += d.censuses;
        self.too_large += d.too_large;
        self.etcd_requests += d.etcd_requests;
        self.etcd_proven += d.etcd_proven;
        self.seen |= d.seen;
    }

    /// `93% (186 of 200)`, or `—` without metrics.
    pub fn memory_share(&self) -> String {
        let total = self.memory + self.forwarded;
        if !self.seen || total <= 0.0 {
            return "—".into();
        }
        format!("{:.0}% ({} of {})", 100.0 * self.memory / total, self.memory, total)
    }

    /// Upstream requests (forwarded reads + probes + proof watches) per client request.
    pub fn upstream_per(&self, requests: u64) -> String {
        if !self.seen || requests == 0 {
            return "—".into();
        }
        let up = self.upstream_requests();
        let censuses =
            if self.censuses > 0.0 { format!(", {} censuses", self.censuses) } else { String::new() };
        format!(
            "{:.2} ({} forwarded, {} probes, {} proofs{censuses})",
            up / requests as f64,
            self.forwarded_reads,
            self.probes,
            self.proofs
        )
    }
}

/// Scrapes kache's /metrics; all zero and `seen = false` when there is none or it fails.
pub async fn scrape(client: &Client, metrics_url: Option<&str>) -> Counters {
    let Some(base) = metrics_url else { return Counters::default() };
    let url = http::url(base, "/metrics", "");
    let send = http::Send { keep_body: true, ..Default::default() };
    match http::request(client, http::Method::GET, &url, &send).await {
        Ok(f) => parse(&String::from_utf8_lossy(&f.body.unwrap_or_default())),
        Err(_) => Counters::default(),
    }
}

/// Sums the counters kache exposes in Prometheus text format.
pub fn parse(text: &str) -> Counters {
    let mut c = Counters { seen: true, ..Counters::default() };
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, value)) = line.rsplit_once(' ') else { continue };
        let Ok(v) = value.parse::<f64>() else { continue };
        let (name, labels) = key.split_once('{').unwrap_or((key, ""));
        match name {
            "kache_encoding_total" if labels.contains("served=\"memory\"") => c.memory += v,
            "kache_encoding_total" if labels.contains("served=\"forwarded\"") => c.forwarded += v,
            "kache_forwarded_requests_total" if labels.contains("kind=\"read\"") => c.forwarded_reads += v,
            "kache_freshness_upstream_probes_total" => c.probes += v,
            "kache_freshness_proofs_total" => c.proofs += v,
            "kache_freshness_upstream_censuses_total" => c.censuses += v,
            "kache_too_large_resource_version_total" => c.too_large += v,
            "kache_etcd_requests_total" => c.etcd_requests += v,
            "kache_etcd_proven_total" => c.etcd_proven += v,
            _ => {}
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_the_counters_by_label() {
        let text = "# HELP x\nkache_encoding_total{encoding=\"json\",served=\"memory\"} 7\n\
                    kache_encoding_total{encoding=\"gzip\",served=\"memory\"} 2\n\
                    kache_encoding_total{encoding=\"json\",served=\"forwarded\"} 3\n\
                    kache_forwarded_requests_total{kind=\"read\",code=\"200\"} 3\n\
                    kache_forwarded_requests_total{kind=\"write\",code=\"200\"} 5\n\
                    kache_freshness_upstream_probes_total 4\n\
                    kache_etcd_requests_total{kind=\"revision\"} 5\n\
                    kache_etcd_requests_total{kind=\"progress\"} 1\n\
                    kache_etcd_proven_total 6\n";
        let c = parse(text);
        assert_eq!((c.memory, c.forwarded, c.forwarded_reads, c.probes), (9.0, 3.0, 3.0, 4.0));
        assert_eq!(c.memory_share(), "75% (9 of 12)");
        assert_eq!((c.etcd_requests, c.etcd_proven), (6.0, 6.0));
        assert_eq!(c.minus(&c).memory, 0.0);
    }
}
