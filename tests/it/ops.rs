//! Operating kache, black-box: the metrics listener as Prometheus and kubelet see it, the Grafana dashboards
//! against what kache exports, the deploy manifests, and a real Prometheus scraping kache.
//!
//! - `support`: a running metrics listener over a scripted stats source, plain HTTP/1.1 GETs.
//! - `dashboards`: every PromQL metric name in dashboards/*.json is exported.
//! - `metrics_doc`: docs/metrics.md documents every metric.
//! - `docs`: README.md starts with the two commands and stays short; every link of the docs resolves.
//! - `deploy`: deploy/*.yaml parse and carry the fields Kubernetes requires.
//! - `prometheus`: Debian's prometheus scrapes kache; a PromQL query returns kache's series.

pub mod dashboards;
pub mod deploy;
pub mod docs;
pub mod metrics_doc;
pub mod prometheus;
pub mod support;
