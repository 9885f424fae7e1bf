//! What an apiserver run needs around the measurement: the kubeconfig's server and token, resource paths,
//! seeding, kache's self-signed certificate, and the foreign writer.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use tokio::sync::{Semaphore, watch};

use super::Args;
use crate::http::{self, Client, HttpError, StatusCode};

/// Concurrent creates while seeding (the apiserver writes each to etcd).
const SEED_CONCURRENCY: usize = 16;
/// Lines of the notes annotation (~1.7 KiB): with labels and what the apiserver adds (uid, timestamps,
/// managedFields) a 2.5 KiB object, as tests/it/real_apiserver.rs seeds them.
const NOTE_LINES: usize = 40;
/// Foreign writes in flight at most; beyond it a tick is skipped and counted as an error.
const WRITER_IN_FLIGHT: usize = 64;
/// Name of the object the foreign writer patches.
const FOREIGN_NAME: &str = "lt-foreign";

/// A base URL and the credentials requests to it carry.
pub struct Target {
    pub base: String,
    pub bearer: Option<String>,
}

impl Target {
    pub fn send(&self, gzip: bool) -> http::Send<'_> {
        http::Send { gzip, bearer: self.bearer.as_deref(), ..Default::default() }
    }
}

// === kubeconfig ===

/// What the load tool reads from a kubeconfig (kache reads the file itself, with kube-rs).
pub struct Kubeconfig {
    pub server: String,
    pub token: Option<String>,
    pub insecure: bool,
}

/// The first cluster's `server`, the first user's `token` and `insecure-skip-tls-verify`, from block or
/// flow YAML by key (a kubeconfig with several contexts, client certificates or exec plugins is beyond
/// this: the tool says so rather than guessing).
pub fn read_kubeconfig(path: &Path) -> anyhow::Result<Kubeconfig> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse_kubeconfig(&text).with_context(|| format!("{}: no cluster server", path.display()))
}

/// The value of the first `key:` that is a whole key (not the end of another word, as in `apiserver`).
fn yaml_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.match_indices(key).find_map(|(at, _)| {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_') {
            return None;
        }
        let rest = text[at + key.len()..].strip_prefix(':')?.trim_start();
        let v = if let Some(q) = rest.strip_prefix('"') {
            &q[..q.find('"')?]
        } else {
            let end = rest.find([',', '}', '\n', ' ']).unwrap_or(rest.len());
            &rest[..end]
        };
        Some(v.trim())
    })
}

fn parse_kubeconfig(text: &str) -> Option<Kubeconfig> {
    if text.contains("client-certificate") || text.contains("exec:") {
        eprintln!(
            "note: the kubeconfig's client certificate / exec credentials are not used by the load tool"
        );
    }
    Some(Kubeconfig {
        server: yaml_value(text, "server")?.trim_end_matches('/').to_string(),
        token: yaml_value(text, "token").map(str::to_string),
        insecure: yaml_value(text, "insecure-skip-tls-verify") == Some("true"),
    })
}

// === resource paths ===

/// `group/version/plural` as URL paths.
pub struct ResourcePath {
    prefix: String,
    group: String,
    version: String,
    plural: String,
}

impl ResourcePath {
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        let parts: Vec<&str> = s.split('/').collect();
        let (group, version, plural) = match parts.as_slice() {
            [v, p] => (String::new(), v.to_string(), p.to_string()),
            [g, v, p] => (g.to_string(), v.to_string(), p.to_string()),
            _ => bail!("{s}: want group/version/plural or v1/plural"),
        };
        let prefix =
            if group.is_empty() { format!("/api/{version}") } else { format!("/apis/{group}/{version}") };
        Ok(Self { prefix, group, version, plural })
    }

    pub fn all(&self) -> String {
        format!("{}/{}", self.prefix, self.plural)
    }

    pub fn namespaced(&self, ns: &str) -> String {
        format!("{}/namespaces/{ns}/{}", self.prefix, self.plural)
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// kache's `--resources` spelling.
    pub fn kache_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}/{}", self.api_version(), self.plural)
        }
    }
}

// === seeding ===

/// Objects a consistent list counts (`limit=1`: items plus `remainingItemCount`).
pub async fn count(client: &Client, t: &Target, path: &str) -> anyhow::Result<usize> {
    let f = http::request(client, http::Method::GET, &http::url(&t.base, path, "limit=1"), &t.send(false))
        .await
        .with_context(|| format!("counting {path}"))?;
    let head = &f.head[..];
    let remaining = memchr::memmem::find(head, b"\"remainingItemCount\":")
        .and_then(|at| {
            let rest = &head[at + 21..];
            let end = rest.iter().position(|b| !b.is_ascii_digit()).unwrap_or(rest.len());
            std::str::from_utf8(&rest[..end]).ok()?.parse::<usize>().ok()
        })
        .unwrap_or(0);
    let has_item = memchr::memmem::find(head, b"\"items\":[{").is_some();
    Ok(remaining + usize::from(has_item))
}

/// Where a seeded object carries its bytes (`--object-shape`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// In an annotation (`metadata`): any kind takes it.
    Annotation,
    /// In `spec.flunderReference` (the sample apiserver's flunders), as real objects carry theirs in spec.
    Spec,
}

fn object(shape: Shape, api_version: &str, kind: &str, ns: &str, name: &str, i: usize) -> serde_json::Value {
    let notes: String =
        (0..NOTE_LINES).map(|k| format!("line {k:02} of the notes of {name} in {ns}; ")).collect();
    let labels = serde_json::json!({"app": if i.is_multiple_of(3) { "db" } else { "web" }, "idx": (i % 10).to_string()});
    match shape {
        Shape::Annotation => serde_json::json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": {"example.com/notes": notes}},
        }),
        Shape::Spec => serde_json::json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"referenceType": "Flunder", "flunderReference": notes},
        }),
    }
}

fn seeded_name(i: usize) -> String {
    format!("lt-{i:05}")
}

/// Creates `lt-NNNNN` in `lt-(N % namespaces)` for N below `--objects` (already existing ones are kept);
/// returns how many were created.
pub async fn seed(client: &Client, t: &Target, res: &ResourcePath, args: &Args) -> anyhow::Result<usize> {
    let gate = Arc::new(Semaphore::new(SEED_CONCURRENCY));
    let created = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut set = tokio::task::JoinSet::new();
    let namespaces = args.namespaces.max(1);
    for i in 0..args.objects {
        let permit = gate.clone().acquire_owned().await.expect("the semaphore is never closed");
        let ns = format!("lt-{}", i % namespaces);
        let body = serde_json::to_vec(&object(
            args.object_shape,
            &res.api_version(),
            &args.kind,
            &ns,
            &seeded_name(i),
            i,
        ))?;
        let url = http::url(&t.base, &res.namespaced(&ns), "");
        let (client, bearer, created, failed) =
            (client.clone(), t.bearer.clone(), created.clone(), failed.clone());
        set.spawn(async move {
            let send = http::Send {
                content_type: Some("application/json"),
                body: Bytes::from(body),
                bearer: bearer.as_deref(),
                ..Default::default()
            };
            match http::request(&client, http::Method::POST, &url, &send).await {
                Ok(_) => {
                    created.fetch_add(1, Relaxed);
                }
                Err(HttpError::Status { status: StatusCode::CONFLICT, .. }) => {}
                Err(e) => {
                    if failed.fetch_add(1, Relaxed) < 3 {
                        eprintln!("seeding {url}: {e}");
                    }
                }
            }
            drop(permit);
        });
    }
    set.join_all().await;
    let failed = failed.load(Relaxed);
    if failed > 0 {
        bail!("{failed} of {} creates failed", args.objects);
    }
    Ok(created.load(Relaxed) as usize)
}

/// Patches one seeded object (the uncached gzip case: the list changes before each request).
pub async fn touch(client: &Client, t: &Target, args: &Args, n: u64) -> Result<(), HttpError> {
    let body = format!(r#"{{"metadata":{{"annotations":{{"loadtest/touch":"{n}"}}}}}}"#);
    let res = ResourcePath::parse(&args.resource).expect("parsed at start");
    let url = http::url(&t.base, &format!("{}/{}", res.namespaced(&args.namespace), args.name), "");
    let send = http::Send {
        content_type: Some("application/merge-patch+json"),
        body: Bytes::from(body),
        bearer: t.bearer.as_deref(),
        ..Default::default()
    };
    http::request(client, http::Method::PATCH, &url, &send).await.map(|_| ())
}

// === kache's certificate ===

/// A self-signed certificate for 127.0.0.1 and localhost, written to `dir` (none is committed).
pub fn self_signed(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let key = rcgen::KeyPair::generate().context("generating a key")?;
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .context("certificate parameters")?;
    let cert = params.self_signed(&key).context("self-signing")?;
    let (c, k) = (dir.join("kache.crt"), dir.join("kache.key"));
    std::fs::write(&c, cert.pem())?;
    std::fs::write(&k, key.serialize_pem())?;
    Ok((c, k))
}

// === the foreign writer ===

/// Merge patches to one object of another resource at a settable rate (open loop: a slow write does not
/// lower the rate; beyond [`WRITER_IN_FLIGHT`] a tick is dropped and counted as an error).
pub struct ForeignWriter {
    rate: watch::Sender<f64>,
    done: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
}

impl ForeignWriter {
    /// Creates the object (when writes are allowed) and starts the writer at rate 0.
    pub async fn start(
        client: &Client,
        t: &Target,
        res: &ResourcePath,
        kind: &str,
        allowed: bool,
    ) -> anyhow::Result<Self> {
        let (rate, mut rx) = watch::channel(0.0f64);
        let done = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let writer = Self { rate, done: done.clone(), errors: errors.clone() };
        if !allowed {
            return Ok(writer);
        }
        let body = serde_json::json!({"apiVersion": res.api_version(), "kind": kind, "metadata": {"name": FOREIGN_NAME}});
        let send = http::Send {
            content_type: Some("application/json"),
            body: Bytes::from(serde_json::to_vec(&body)?),
            bearer: t.bearer.as_deref(),
            ..Default::default()
        };
        match http::request(client, http::Method::POST, &http::url(&t.base, &res.all(), ""), &send).await {
            Ok(_) | Err(HttpError::Status { status: StatusCode::CONFLICT, .. }) => {}
            Err(e) => bail!("creating the foreign writer's {kind}: {e}"),
        }
        let url = http::url(&t.base, &format!("{}/{FOREIGN_NAME}", res.all()), "");
        let (client, bearer) = (client.clone(), t.bearer.clone());
        tokio::spawn(async move {
            let gate = Arc::new(Semaphore::new(WRITER_IN_FLIGHT));
            let mut n = 0u64;
            loop {
                let r = *rx.borrow_and_update();
                if r <= 0.0 {
                    if rx.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
                let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / r));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        c = rx.changed() => { if c.is_err() { return; } break; }
                    }
                    n += 1;
                    let Ok(permit) = gate.clone().try_acquire_owned() else {
                        errors.fetch_add(1, Relaxed);
                        continue;
                    };
                    let body = format!(r#"{{"metadata":{{"annotations":{{"loadtest/n":"{n}"}}}}}}"#);
                    let (client, url, bearer, done, errors) =
                        (client.clone(), url.clone(), bearer.clone(), done.clone(), errors.clone());
                    tokio::spawn(async move {
                        let send = http::Send {
                            content_type: Some("application/merge-patch+json"),
                            body: Bytes::from(body),
                            bearer: bearer.as_deref(),
                            ..Default::default()
                        };
                        match http::request(&client, http::Method::PATCH, &url, &send).await {
                            Ok(_) => done.fetch_add(1, Relaxed),
                            Err(_) => errors.fetch_add(1, Relaxed),
                        };
                        drop(permit);
                    });
                }
            }
        });
        Ok(writer)
    }

    pub fn set_rate(&self, r: f64) {
        self.rate.send_replace(r);
    }

    /// Writes completed so far.
    pub fn done(&self) -> u64 {
        self.done.load(Relaxed)
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flow_and_block_kubeconfigs() {
        let flow = "clusters: [{name: apiserver, cluster: {server: \"https://127.0.0.1:58631\", \
                    insecure-skip-tls-verify: true}}]\nusers: [{name: any, user: {token: any-token}}]\n";
        let k = parse_kubeconfig(flow).expect("flow");
        assert_eq!(k.server, "https://127.0.0.1:58631");
        assert_eq!(k.token.as_deref(), Some("any-token"));
        assert!(k.insecure);
        let block =
            "clusters:\n- cluster:\n    server: https://10.0.0.1:6443/\n  name: c\nusers:\n- name: u\n";
        let k = parse_kubeconfig(block).expect("block");
        assert_eq!(k.server, "https://10.0.0.1:6443");
        assert_eq!(k.token, None);
        assert!(!k.insecure);
    }

    #[test]
    fn resource_paths() {
        let r = ResourcePath::parse("wardle.example.com/v1beta1/flunders").expect("gvr");
        assert_eq!(r.all(), "/apis/wardle.example.com/v1beta1/flunders");
        assert_eq!(r.namespaced("a"), "/apis/wardle.example.com/v1beta1/namespaces/a/flunders");
        assert_eq!(r.kache_resource(), "wardle.example.com/v1beta1/flunders");
        let core = ResourcePath::parse("v1/pods").expect("core");
        assert_eq!(core.all(), "/api/v1/pods");
        assert_eq!(core.kache_resource(), "pods");
    }

    #[test]
    fn seeded_objects_are_of_realistic_size() {
        for shape in [Shape::Annotation, Shape::Spec] {
            let n = serde_json::to_vec(&object(shape, "g/v", "Flunder", "lt-0", &seeded_name(1), 1))
                .expect("json")
                .len();
            // The apiserver adds ~0.6 KiB (uid, resourceVersion, timestamps, managedFields).
            assert!((1_800..2_500).contains(&n), "{shape:?}: {n} bytes");
        }
    }
}
