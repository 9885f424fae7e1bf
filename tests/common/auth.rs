//! Helpers of the tests of kache with authentication on (tests/it/auth.rs, tests/it/impersonation.rs): a
//! kubeconfig with a token, kache started from it, reads that stop a watch at its first event.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use serde_json::{Value, json};

use kache::app::{Config, UpstreamSource};
use kache::auth::AuthSettings;
use kache::upstream::discovery::{Selection, parse_resource_specs};
use kache_sim::auth::{AuthConfig, Rule, UserInfo};
use kache_sim::{Sim, SimHandle};

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
    // Small consistent reads are forwarded by default; probe so they exercise the memory path.
    config.freshness.probe_small_reads = true;
    config
}

/// kache started with `config` (and a metrics listener); waits for the sync when `cached`.
pub use super::start_with_metrics as start;

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

/// The token of kache's own identity (`system:masters`) in the sims of these tests.
pub const KACHE_TOKEN: &str = "kache-token";

/// A user's static token in these tests.
pub fn token(user: &str) -> String {
    format!("{user}-token")
}

/// A sim with authentication on: kache's token, a token per `(user, in system:masters)`, the `rules`; seeded
/// with namespaces `a` and `b` of two pods each (`p-<ns>-<i>`), and two Secrets each when `secrets`.
pub async fn start_sim(users: &[(&str, bool)], rules: Vec<Rule>, secrets: bool) -> SimHandle {
    let mut auth = AuthConfig::new().with_token(KACHE_TOKEN, UserInfo::new("kache", &["system:masters"]));
    for (user, master) in users {
        let groups: &[&str] = if *master { &["system:masters"] } else { &[] };
        auth = auth.with_token(token(user), UserInfo::new(*user, groups));
    }
    for rule in rules {
        auth = auth.with_rule(rule);
    }
    let sim = Sim::builder()
        .bookmark_interval(Duration::from_millis(100))
        .auth(Some(auth))
        .start()
        .await
        .expect("sim starts");
    for ns in ["a", "b"] {
        sim.create("namespaces", None, json!({"metadata": {"name": ns}})).expect("namespace");
        for i in 0..2 {
            let pod = json!({"metadata": {"name": format!("p-{ns}-{i}")}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
            sim.create("pods", Some(ns), pod).expect("pod");
            if secrets {
                let secret = json!({"metadata": {"name": format!("s-{ns}-{i}")}, "data": {"k": "c2VjcmV0"}});
                sim.create("secrets", Some(ns), secret).expect("secret");
            }
        }
    }
    sim
}
