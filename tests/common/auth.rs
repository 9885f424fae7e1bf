//! Helpers of the tests of kache with authentication on (tests/auth.rs, tests/impersonation.rs): a
//! kubeconfig with a token, kache started from it, reads that stop a watch at its first event.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use serde_json::Value;

use kache::app::{Config, Kache, UpstreamSource};
use kache::auth::AuthSettings;
use kache::upstream::discovery::{Selection, parse_resource_specs};

use super::{Resp, client, get_with};

/// A kubeconfig naming `server` with `token`.
pub fn kubeconfig(dir: &Path, name: &str, server: &str, token: &str) -> PathBuf {
    let path = dir.join(name);
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
    );
    std::fs::write(&path, text).expect("write kubeconfig");
    path
}

/// kache's configuration: upstream from `kubeconfig`, `cached` resources (comma-separated) served from
/// memory, everything else forwarded.
pub fn config(kubeconfig: &Path, cached: &str, auth: AuthSettings) -> Config {
    let mut config = Config::for_url(String::new());
    config.upstream = UpstreamSource::Kubeconfig(Some(kubeconfig.to_owned()));
    config.selection = Selection {
        include: Some(parse_resource_specs(cached).expect("resource specs")),
        exclude: Vec::new(),
    };
    config.lazy = false;
    config.auth = auth;
    config
}

/// kache started with `config` (and a metrics listener); waits for the sync when `cached`.
pub async fn start(config: Config, cached: bool) -> Kache {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let kache = Kache::start_with_metrics(config, listener, Some(metrics)).await.expect("kache starts");
    if cached {
        tokio::time::timeout(Duration::from_secs(30), kache.wait_synced()).await.expect("kache syncs");
    }
    kache
}

/// A GET with `headers`, reading a watch only up to its first event line.
pub async fn request(base: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    if !path.contains("watch=1") {
        return get_with(base, path, headers).await;
    }
    let mut req = Request::get(format!("{base}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client().request(req.body(Empty::<Bytes>::new()).expect("request")).await.expect("response");
    let (status, headers) = (resp.status(), resp.headers().clone());
    let mut body = resp.into_body();
    let mut data = Vec::new();
    let read = async {
        while !data.contains(&b'\n') {
            match body.frame().await {
                Some(Ok(frame)) => data.extend_from_slice(frame.data_ref().map_or(&[][..], |d| d)),
                _ => break,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.expect("a watch answers within 10 s");
    let first = data.split(|b| *b == b'\n').next().unwrap_or_default().to_vec();
    Resp { status, headers, body: Bytes::from(first) }
}

/// Names of the objects in a get, list or first watch event.
pub fn names(resp: &Resp) -> Vec<String> {
    let v = resp.json();
    let name = |o: &Value| o["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let mut out: Vec<String> = match (v.get("items"), v.get("object")) {
        (Some(Value::Array(items)), _) => items.iter().map(name).collect(),
        (_, Some(object)) => vec![name(object)],
        _ => vec![name(&v)],
    };
    out.sort();
    out
}

/// How `got` (kache) differs from `want` (the upstream) for the case `what`: the status, then for a 200 the
/// object names (`same_names(upstream, kache)` decides), else the Status `message`, `reason` and `code`.
/// `None` when they agree.
pub fn difference(
    what: &str,
    want: &Resp,
    got: &Resp,
    same_names: impl FnOnce(&[String], &[String]) -> bool,
) -> Option<String> {
    if got.status != want.status {
        return Some(format!("{what}: kache {} upstream {}", got.status, want.status));
    }
    if want.status == http::StatusCode::OK {
        let (w, g) = (names(want), names(got));
        return (!same_names(&w, &g)).then(|| format!("{what}: kache {g:?} upstream {w:?}"));
    }
    let (w, g) = (want.json(), got.json());
    let fields: Vec<String> = ["message", "reason", "code"]
        .iter()
        .filter(|f| w[**f] != g[**f])
        .map(|f| format!("{what}: {f} kache {} upstream {}", g[*f], w[*f]))
        .collect();
    (!fields.is_empty()).then(|| fields.join("\n"))
}
