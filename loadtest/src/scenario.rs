//! Declarative scenario files (TOML, `loadtest/scenarios/*.toml`): what to run, at which sizes, and which
//! figures to derive with their goals. A file may hold any number of `[[list]]`, `[[watch]]`, `[[storm]]`
//! and `[[mixed]]` entries; each runs against its own freshly started sim and kache.

use serde::Deserialize;

/// One scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub list: Vec<ListSuite>,
    #[serde(default)]
    pub watch: Vec<WatchSpec>,
    #[serde(default)]
    pub storm: Vec<StormSpec>,
    #[serde(default)]
    pub mixed: Vec<MixedSpec>,
}

impl ScenarioFile {
    pub fn parse(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }
}

/// The simulated cluster a suite runs against (`kache-sim --pods --namespaces --nodes --churn --foreign-writes`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    pub pods: usize,
    #[serde(default = "one")]
    pub namespaces: usize,
    #[serde(default)]
    pub nodes: usize,
    /// Pod writes per second the sim performs on its own.
    #[serde(default)]
    pub churn: f64,
    /// Background writes per second to leases and events (`kache-sim --foreign-writes`): what moves a real
    /// cluster's global revision while the pods stay quiet.
    #[serde(default)]
    pub foreign_writes: f64,
}

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// The in-process server answering a prepared body from memory: the physical limit.
    Static,
    /// The simulated apiserver, directly.
    Sim,
    /// kache in front of the sim.
    Kache,
}

impl Target {
    pub fn as_str(self) -> &'static str {
        match self {
            Target::Static => "static",
            Target::Sim => "sim",
            Target::Kache => "kache",
        }
    }
}

/// List suite: one cluster, several request shapes, targets alternated in round-robin batches.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListSuite {
    pub name: String,
    pub cluster: Cluster,
    /// Rounds of batches; every round visits every (case, target) once, so drift hits all alike.
    #[serde(default = "five")]
    pub rounds: usize,
    /// Requests per batch (closed loop).
    #[serde(default = "twenty")]
    pub batch_requests: usize,
    /// A batch stops starting requests after this long (at least one request runs).
    #[serde(default = "five_f")]
    pub batch_max_secs: f64,
    #[serde(default)]
    pub case: Vec<ListCase>,
    #[serde(default)]
    pub figure: Vec<FigureSpec>,
}

/// One request shape.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListCase {
    pub name: String,
    pub path: String,
    #[serde(default)]
    pub query: String,
    #[serde(default)]
    pub accept: Option<String>,
    /// Send `Accept-Encoding: gzip`.
    #[serde(default)]
    pub gzip: bool,
    /// Follow `continue` tokens to the last page; one sample is the whole chain.
    #[serde(default)]
    pub paginate: bool,
    #[serde(default = "one")]
    pub concurrency: usize,
    #[serde(default = "all_targets")]
    pub targets: Vec<Target>,
    /// Open loop: requests per second for the batch instead of a closed loop (latency measured from the
    /// scheduled send time, so a stall is not hidden).
    #[serde(default)]
    pub rate: Option<f64>,
    /// Open-loop batch length.
    #[serde(default = "five_f")]
    pub rate_secs: f64,
    /// Put this case's median on the latency-vs-object-count plot.
    #[serde(default)]
    pub plot: bool,
}

/// Which number of a (case, target) measurement a figure uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stat {
    /// Median of the per-batch medians, in ms.
    Median,
    /// 99th percentile over all requests, in ms.
    P99,
    /// Median response bytes (all pages).
    Bytes,
}

/// A (case, target) measurement a figure refers to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ref {
    pub case: String,
    pub target: Target,
    #[serde(default = "median")]
    pub stat: Stat,
}

/// How a figure combines its references.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Combine {
    /// `a` alone.
    Value,
    /// `a / b`.
    Ratio,
    /// `a - b`.
    Difference,
}

/// A derived figure with its goal (every goal is an upper bound).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FigureSpec {
    pub label: String,
    pub combine: Combine,
    pub a: Ref,
    #[serde(default)]
    pub b: Option<Ref>,
    #[serde(default)]
    pub goal_max: Option<f64>,
}

/// Watch fan-out: W watchers through kache, E upstream writes per second carrying their send time.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchSpec {
    pub name: String,
    pub cluster: Cluster,
    pub watchers: usize,
    pub events_per_sec: f64,
    pub duration_secs: f64,
    /// HTTP/2 streams per connection (client-go multiplexes its watches like this).
    #[serde(default = "five_hundred")]
    pub streams_per_connection: usize,
    /// Quiet time after the last watcher is established before resident memory is read.
    #[serde(default = "two_f")]
    pub settle_secs: f64,
    #[serde(default)]
    pub goal_p99_ms: Option<f64>,
    #[serde(default)]
    pub goal_idle_bytes_per_watcher: Option<f64>,
    /// What each watcher selects (default: all pods of the writer's namespace).
    #[serde(default)]
    pub scope: WatchScope,
    /// Distinct nodes (`scope = "node"`) or namespaces (`scope = "namespace"`) the watchers and the written
    /// pods are spread over; 0 means one per watcher for nodes, the cluster's namespaces for namespaces.
    #[serde(default)]
    pub scope_values: usize,
    /// kache's indexed watch dispatch (`--watch-index`); `false` measures the unindexed fan-out.
    #[serde(default = "yes")]
    pub watch_index: bool,
    /// The watchers ask for protobuf (`Accept: application/vnd.kubernetes.protobuf`, length-prefixed
    /// `WatchEvent` frames) instead of JSON lines.
    #[serde(default)]
    pub protobuf: bool,
}

/// What a watcher of the watch scenario selects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WatchScope {
    /// The writer's namespace (`/api/v1/namespaces/ns-0/pods`): every watcher sees every write.
    #[default]
    Writer,
    /// Every pod of the cluster (`/api/v1/pods`): every watcher sees every write.
    Cluster,
    /// One node's pods (`/api/v1/pods?fieldSelector=spec.nodeName=X`, a kubelet).
    Node,
    /// One namespace's pods (`/api/v1/namespaces/X/pods`, a namespaced controller).
    Namespace,
}

/// How an informer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InformerMode {
    /// List (resourceVersion=0, limit=500, following continue) then watch from the list's resourceVersion.
    ListWatch,
    /// Streaming list: watch with sendInitialEvents=true until the initial-events-end bookmark.
    WatchList,
}

/// Informer storm: K informers start at once right after kache (re)starts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StormSpec {
    pub name: String,
    pub cluster: Cluster,
    pub clients: usize,
    pub mode: InformerMode,
    #[serde(default = "sixty_f")]
    pub timeout_secs: f64,
}

/// Mixed traffic through kache for a fixed time.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixedSpec {
    pub name: String,
    pub cluster: Cluster,
    pub duration_secs: f64,
    /// Closed-loop workers issuing reads (namespace lists, consistent reads, first pages, gets).
    pub readers: usize,
    pub watchers: usize,
    /// Writes through kache (forwarded upstream).
    pub writes_per_sec: f64,
    #[serde(default = "five_hundred")]
    pub sample_ms: usize,
}

fn one() -> usize {
    1
}
fn five() -> usize {
    5
}
fn twenty() -> usize {
    20
}
fn yes() -> bool {
    true
}
fn five_hundred() -> usize {
    500
}
fn two_f() -> f64 {
    2.0
}
fn five_f() -> f64 {
    5.0
}
fn sixty_f() -> f64 {
    60.0
}
fn median() -> Stat {
    Stat::Median
}
fn all_targets() -> Vec<Target> {
    vec![Target::Static, Target::Sim, Target::Kache]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_section() {
        let text = r#"
            name = "t"
            [[list]]
            name = "s"
            cluster = { pods = 10, namespaces = 2 }
            [[list.case]]
            name = "full"
            path = "/api/v1/pods"
            targets = ["kache", "static"]
            [[list.figure]]
            label = "ratio"
            combine = "ratio"
            a = { case = "full", target = "kache" }
            b = { case = "full", target = "static", stat = "p99" }
            goal_max = 1.5
            [[watch]]
            name = "w"
            cluster = { pods = 0 }
            watchers = 3
            events_per_sec = 10
            duration_secs = 1
            [[storm]]
            name = "st"
            cluster = { pods = 5 }
            clients = 2
            mode = "watch-list"
            [[mixed]]
            name = "m"
            cluster = { pods = 5, churn = 1.5 }
            duration_secs = 1
            readers = 1
            watchers = 1
            writes_per_sec = 1
        "#;
        let f = ScenarioFile::parse(text).expect("valid scenario");
        assert_eq!(f.list[0].case[0].targets, vec![Target::Kache, Target::Static]);
        assert_eq!(f.list[0].rounds, 5);
        assert_eq!(f.list[0].figure[0].b.as_ref().map(|b| b.stat), Some(Stat::P99));
        assert_eq!(f.watch[0].streams_per_connection, 500);
        assert_eq!(f.storm[0].mode, InformerMode::WatchList);
        assert_eq!(f.mixed[0].cluster.churn, 1.5);
        assert_eq!(f.mixed[0].cluster.namespaces, 1);
    }

    #[test]
    fn committed_scenarios_parse() {
        for (name, text) in [
            ("list", include_str!("../scenarios/list.toml")),
            ("selector", include_str!("../scenarios/selector.toml")),
            ("consistent", include_str!("../scenarios/consistent.toml")),
            ("foreign", include_str!("../scenarios/foreign.toml")),
            ("watch", include_str!("../scenarios/watch.toml")),
            ("storm", include_str!("../scenarios/storm.toml")),
            ("mixed", include_str!("../scenarios/mixed.toml")),
            ("smoke", include_str!("../scenarios/smoke.toml")),
        ] {
            let f = ScenarioFile::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(f.name, name);
            // Every figure refers to cases of its own suite.
            for s in &f.list {
                for fig in &s.figure {
                    for r in std::iter::once(&fig.a).chain(fig.b.as_ref()) {
                        assert!(
                            s.case.iter().any(|c| c.name == r.case && c.targets.contains(&r.target)),
                            "{name}: {}",
                            fig.label
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn rejects_unknown_fields() {
        assert!(ScenarioFile::parse("name = \"t\"\nbogus = 1\n").is_err());
    }
}
