//! Pod churn over HTTP: creates, updates (metadata merge patches and status merge patches) and deletes at a
//! steady rate against any apiserver-compatible URL, keeping the population near the workload's pod count.
//!
//! The stop signal is a `tokio::sync::watch::Receiver<bool>`: churn stops when the value becomes `true` or when
//! the sender is dropped, then waits for its in-flight requests (each bounded by [`REQUEST_TIMEOUT`]).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{MissedTickBehavior, interval, timeout};

use super::{Workload, apps, namespace_names, node_names, objects};

/// Requests allowed in flight at once; when reached, the loop waits (the effective rate drops rather than
/// queueing without bound).
const MAX_IN_FLIGHT: usize = 32;
/// Upper bound for one request, so that stopping never hangs on a stalled server.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Page size of the initial pod list (client-go's pager default).
const LIST_PAGE_SIZE: usize = 500;
/// Upper bound on pages read at start (500 × 2000 = one million pods).
const MAX_LIST_PAGES: usize = 2000;
/// Salt so the churn's random stream differs from the seeding stream of the same workload seed.
const CHURN_SEED_SALT: u64 = 0xc4a2_7e5e_ed00_0001;
/// The pace of [`churn_ops`] without a rate: effectively unpaced, bounded by [`MAX_IN_FLIGHT`].
const UNPACED_RATE: f64 = 1_000_000.0;
/// The shortest pause between two operations.
const MIN_PERIOD: Duration = Duration::from_micros(1);
/// Random picks tried to find a pod without a request in flight before creating instead.
const PICK_ATTEMPTS: usize = 4;
/// The annotation that metadata updates bump.
const CHURN_ANNOTATION: &str = "sim.kache.io/churn";

/// What the churn did; failures include timeouts, connection errors and non-2xx answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChurnStats {
    pub creates: u64,
    pub updates: u64,
    pub deletes: u64,
    pub failures: u64,
}

/// The kind of one churn operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Create,
    Update,
    Delete,
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Drives creates/updates/deletes of pods at `w.churn_per_sec` against `base_url` (e.g. `http://127.0.0.1:6443`)
/// until `stop` turns `true` or its sender is dropped.
pub async fn churn(base_url: String, w: Workload, stop: watch::Receiver<bool>) {
    let stats = churn_with_stats(base_url, w, stop).await;
    tracing::info!(
        creates = stats.creates,
        updates = stats.updates,
        deletes = stats.deletes,
        failures = stats.failures,
        "churn stopped"
    );
}

/// [`churn`], returning what it did.
pub async fn churn_with_stats(base_url: String, w: Workload, stop: watch::Receiver<bool>) -> ChurnStats {
    run(base_url, w, stop, None).await
}

/// Issues exactly `ops` operations at `w.churn_per_sec` (as fast as the server answers when the rate is 0 or
/// not finite), waits for all of them, and returns what they did: a deterministic amount of churn for tests
/// and load runs.
pub async fn churn_ops(base_url: String, mut w: Workload, ops: u64) -> ChurnStats {
    if !(w.churn_per_sec.is_finite() && w.churn_per_sec > 0.0) {
        w.churn_per_sec = UNPACED_RATE;
    }
    // The sender stays alive (and false) until the operations are done.
    let (_stop_tx, stop) = watch::channel(false);
    run(base_url, w, stop, Some(ops)).await
}

async fn run(
    base_url: String,
    w: Workload,
    mut stop: watch::Receiver<bool>,
    limit: Option<u64>,
) -> ChurnStats {
    let stats = ChurnStats::default();
    if !(w.churn_per_sec.is_finite() && w.churn_per_sec > 0.0) {
        // Nothing to drive: wait for the stop signal so callers can treat every workload alike.
        while !*stop.borrow_and_update() {
            if stop.changed().await.is_err() {
                break;
            }
        }
        return stats;
    }
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let base = base_url.trim_end_matches('/').to_string();
    let live = list_pods(&client, &base).await;
    let owners = list_owners(&client, &base).await;
    let mut churner = Churner {
        rng: StdRng::seed_from_u64(w.seed ^ CHURN_SEED_SALT),
        namespaces: namespace_names(&w),
        nodes: node_names(&w),
        target: w.pods,
        client,
        base,
        live,
        owners,
        busy: HashSet::new(),
        in_flight: JoinSet::new(),
        stats,
        sequence: 0,
    };
    // Clamped: a huge rate must not round the period to zero (which `interval` refuses).
    let mut ticker = interval(Duration::from_secs_f64(1.0 / w.churn_per_sec).max(MIN_PERIOD));
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        if *stop.borrow_and_update() || limit.is_some_and(|n| churner.sequence >= n) {
            break;
        }
        let full = churner.in_flight.len() >= MAX_IN_FLIGHT;
        tokio::select! {
            changed = stop.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            Some(done) = churner.in_flight.join_next(), if full => churner.record(done),
            _ = ticker.tick(), if !full => churner.issue(),
        }
    }
    while let Some(done) = churner.in_flight.join_next().await {
        churner.record(done);
    }
    churner.stats
}

/// A pod by namespace and name.
type PodKey = (String, String);

/// The churn loop's state. Invariant: a pod in `busy` has a request in flight, and no second request is
/// issued for it until that one completes, so churn never races itself into 404s or conflicts.
struct Churner {
    rng: StdRng,
    namespaces: Vec<String>,
    nodes: Vec<String>,
    target: usize,
    client: HttpClient,
    base: String,
    /// Pods believed to exist (created ones are added when the create is issued).
    live: Vec<PodKey>,
    /// ReplicaSet uids by namespace and name, so that created pods name their owner's real uid.
    owners: HashMap<PodKey, String>,
    busy: HashSet<PodKey>,
    in_flight: JoinSet<(Op, bool, PodKey)>,
    stats: ChurnStats,
    sequence: u64,
}

// === impl Churner ===

impl Churner {
    /// An index into `live` of a pod without a request in flight, if a few random picks find one.
    fn pick_idle(&mut self) -> Option<usize> {
        if self.live.is_empty() {
            return None;
        }
        (0..PICK_ATTEMPTS)
            .map(|_| self.rng.random_range(0..self.live.len()))
            .find(|&i| !self.busy.contains(&self.live[i]))
    }

    /// Issues one operation (without waiting for it).
    fn issue(&mut self) {
        while let Some(done) = self.in_flight.try_join_next() {
            self.record(done);
        }
        self.sequence += 1;
        let mut op = choose_op(&mut self.rng, self.live.len(), self.target);
        let picked = if op == Op::Create { None } else { self.pick_idle() };
        if picked.is_none() {
            op = Op::Create;
        }
        let base = &self.base;
        let (key, request) = match (op, picked) {
            (Op::Update, Some(i)) => {
                let (ns, name) = &self.live[i];
                let pod_uri = format!("{base}/api/v1/namespaces/{ns}/pods/{name}");
                let request = if self.rng.random_bool(0.5) {
                    let patch = json!({"metadata": {"annotations": {CHURN_ANNOTATION: self.sequence.to_string()},
                                                    "labels": {"version": format!("v{}", self.sequence % 5)}}});
                    build(Method::PATCH, &pod_uri, "application/merge-patch+json", &patch)
                } else {
                    let patch = status_patch(&mut self.rng);
                    build(Method::PATCH, &format!("{pod_uri}/status"), "application/merge-patch+json", &patch)
                };
                (self.live[i].clone(), request)
            }
            (Op::Delete, Some(i)) => {
                let key = self.live.swap_remove(i);
                let uri = format!("{base}/api/v1/namespaces/{}/pods/{}", key.0, key.1);
                (key, build_empty(Method::DELETE, &uri))
            }
            _ => {
                let ns = self.namespaces[self.rng.random_range(0..self.namespaces.len())].clone();
                let node = if self.nodes.is_empty() {
                    ""
                } else {
                    self.nodes[self.rng.random_range(0..self.nodes.len())].as_str()
                };
                let name = objects::pod_name(&mut self.rng);
                let mut body = objects::pod(&ns, &name, node, &mut self.rng);
                let owner = apps::owner_name(&body).map(|rs| (ns.clone(), rs.to_string()));
                if let Some(uid) = owner.and_then(|k| self.owners.get(&k)) {
                    apps::set_owner(&mut body, uid);
                }
                let uri = format!("{base}/api/v1/namespaces/{ns}/pods");
                let key = (ns, name);
                self.live.push(key.clone());
                (key, build(Method::POST, &uri, "application/json", &body))
            }
        };
        match request {
            Ok(request) => {
                self.busy.insert(key.clone());
                let client = self.client.clone();
                self.in_flight.spawn(async move {
                    let ok = send(&client, request).await.is_ok_and(|s| s.is_success());
                    (op, ok, key)
                });
            }
            Err(e) => {
                tracing::debug!(error = %e, "churn: cannot build request");
                self.stats.failures += 1;
            }
        }
    }

    fn record(&mut self, done: Result<(Op, bool, PodKey), tokio::task::JoinError>) {
        let Ok((op, ok, key)) = done else {
            self.stats.failures += 1;
            return;
        };
        self.busy.remove(&key);
        if !ok {
            self.stats.failures += 1;
            if op == Op::Create {
                // The pod does not exist after all.
                if let Some(i) = self.live.iter().position(|k| *k == key) {
                    self.live.swap_remove(i);
                }
            }
            return;
        }
        match op {
            Op::Create => self.stats.creates += 1,
            Op::Update => self.stats.updates += 1,
            Op::Delete => self.stats.deletes += 1,
        }
    }
}

/// Half updates, a quarter creates, a quarter deletes, tilted toward the target population.
fn choose_op(rng: &mut impl Rng, live: usize, target: usize) -> Op {
    if live == 0 {
        return Op::Create;
    }
    let tilt = match live.cmp(&target) {
        std::cmp::Ordering::Less => 0.15,
        std::cmp::Ordering::Equal => 0.0,
        std::cmp::Ordering::Greater => -0.15,
    };
    let r: f64 = rng.random();
    if r < 0.25 + tilt {
        Op::Create
    } else if r < 0.5 {
        Op::Delete
    } else {
        Op::Update
    }
}

/// A kubelet-style status update: the conditions list with a fresh transition time.
fn status_patch(rng: &mut impl Rng) -> Value {
    let secs = rng.random_range(0..86_400u32);
    let at = format!("2026-11-22T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60);
    let conditions: Vec<Value> = ["Initialized", "Ready", "ContainersReady", "PodScheduled"]
        .iter()
        .map(|c| json!({"type": c, "status": "True", "lastProbeTime": null, "lastTransitionTime": at}))
        .collect();
    json!({"status": {"conditions": conditions}})
}

fn build(
    method: Method,
    uri: &str,
    content_type: &str,
    body: &Value,
) -> Result<Request<Full<Bytes>>, String> {
    let bytes = serde_json::to_vec(body).map_err(|e| e.to_string())?;
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(bytes)))
        .map_err(|e| e.to_string())
}

fn build_empty(method: Method, uri: &str) -> Result<Request<Full<Bytes>>, String> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::ACCEPT, "application/json")
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())
}

/// Sends a request and reads the whole answer (so the connection is reused), within [`REQUEST_TIMEOUT`].
async fn send(client: &HttpClient, request: Request<Full<Bytes>>) -> Result<StatusCode, String> {
    let exchange = async {
        let response = client.request(request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        response.into_body().collect().await.map_err(|e| e.to_string())?;
        Ok::<_, String>(status)
    };
    match timeout(REQUEST_TIMEOUT, exchange).await {
        Ok(result) => result,
        Err(_) => Err("timed out".to_string()),
    }
}

/// The pods that exist now, read with a paginated list; an unreachable server yields an empty start.
async fn list_pods(client: &HttpClient, base: &str) -> Vec<(String, String)> {
    let mut pods = Vec::new();
    let mut continue_token = String::new();
    for _ in 0..MAX_LIST_PAGES {
        let mut uri = format!("{base}/api/v1/pods?limit={LIST_PAGE_SIZE}");
        if !continue_token.is_empty() {
            uri.push_str("&continue=");
            uri.push_str(&percent_encode(&continue_token));
        }
        let Ok(request) = build_empty(Method::GET, &uri) else { break };
        let page = async {
            let response = client.request(request).await.map_err(|e| e.to_string())?;
            if !response.status().is_success() {
                return Err(format!("list answered {}", response.status()));
            }
            let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
            serde_json::from_slice::<Value>(&body).map_err(|e| e.to_string())
        };
        let list = match timeout(REQUEST_TIMEOUT, page).await {
            Ok(Ok(list)) => list,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "churn: cannot list pods; starting from what was read");
                break;
            }
            Err(_) => break,
        };
        for item in list["items"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let meta = &item["metadata"];
            if let (Some(ns), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str()) {
                pods.push((ns.to_string(), name.to_string()));
            }
        }
        match list["metadata"]["continue"].as_str() {
            Some(token) if !token.is_empty() => continue_token = token.to_string(),
            _ => break,
        }
    }
    pods
}

/// The ReplicaSets that exist now (namespace, name → uid), read in one list; none when the server has
/// none or cannot answer (pods then name an owner that does not exist, as [`objects::pod`] makes them).
async fn list_owners(client: &HttpClient, base: &str) -> HashMap<PodKey, String> {
    let Ok(request) = build_empty(Method::GET, &format!("{base}/apis/apps/v1/replicasets")) else {
        return HashMap::new();
    };
    let list = async {
        let response = client.request(request).await.map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("list answered {}", response.status()));
        }
        let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        serde_json::from_slice::<Value>(&body).map_err(|e| e.to_string())
    };
    let Ok(Ok(list)) = timeout(REQUEST_TIMEOUT, list).await else { return HashMap::new() };
    let items = list["items"].as_array().map(Vec::as_slice).unwrap_or_default();
    items
        .iter()
        .filter_map(|rs| {
            let m = &rs["metadata"];
            let key = (m["namespace"].as_str()?.to_string(), m["name"].as_str()?.to_string());
            Some((key, m["uid"].as_str()?.to_string()))
        })
        .collect()
}

/// Percent-encodes a query value (continue tokens are base64 and may contain `+`, `/`, `=`).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
