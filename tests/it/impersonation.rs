//! Impersonation under `--auth=delegated`, with the sim (which implements the apiserver's impersonation
//! filter) as the oracle: every requester × impersonation × read of the matrix must get the upstream's
//! status, objects and error text, from memory and forwarded; a kache that ignores `Impersonate-*` headers
//! must be caught leaking. Then the chained deployment (a node kache authenticating client certificates in
//! front of a regional kache in front of the sim) with a user limited to one namespace, and `kubectl --as`.

use crate::common;

use std::path::Path;
use std::process::Command;

use http::StatusCode;
use serde_json::Value;

use common::auth::{KACHE_TOKEN, config, difference, kubeconfig, names, request, start, token};
use common::tls::{Pki, tls_get};
use kache::auth::AuthSettings;
use kache_sim::SimHandle;
use kache_sim::auth::Rule;

/// alice: pods in namespace `a`. imp: may impersonate the user alice and the group `team` (nothing else,
/// no reads of its own). The service account `a/reader`: pods in `a`. The group `team`: pods in `b`.
/// carol: nothing. root: `system:masters`. node: the node-level kache's identity (`system:masters`, as a
/// node kache needs list/watch, reviews and impersonation).
fn rules() -> Vec<Rule> {
    let reads = ["get", "list", "watch"];
    vec![
        Rule::new("alice-pods-a")
            .user("alice")
            .verbs(&reads)
            .api_groups(&[""])
            .resources(&["pods"])
            .namespaces(&["a"]),
        Rule::new("reader-pods-a")
            .user("system:serviceaccount:a:reader")
            .verbs(&reads)
            .api_groups(&[""])
            .resources(&["pods"])
            .namespaces(&["a"]),
        Rule::new("team-pods-b")
            .group("team")
            .verbs(&reads)
            .api_groups(&[""])
            .resources(&["pods"])
            .namespaces(&["b"]),
        Rule::new("imp-users")
            .user("imp")
            .verbs(&["impersonate"])
            .api_groups(&[""])
            .resources(&["users"])
            .names(&["alice"]),
        Rule::new("imp-groups")
            .user("imp")
            .verbs(&["impersonate"])
            .api_groups(&[""])
            .resources(&["groups"])
            .names(&["team"]),
    ]
}

async fn start_sim() -> SimHandle {
    let users = [("alice", false), ("imp", false), ("carol", false), ("root", true), ("node", true)];
    common::auth::start_sim(&users, rules(), true).await
}

/// The reads of the matrix, all at resourceVersion=0 so that kache answers cached ones from memory.
const PATHS: &[(&str, &str)] = &[
    ("get pod a", "/api/v1/namespaces/a/pods/p-a-0?resourceVersion=0"),
    ("list pods a", "/api/v1/namespaces/a/pods?resourceVersion=0"),
    ("watch pods a", "/api/v1/namespaces/a/pods?watch=1&resourceVersion=0"),
    ("get pod b", "/api/v1/namespaces/b/pods/p-b-0?resourceVersion=0"),
    ("list pods b", "/api/v1/namespaces/b/pods?resourceVersion=0"),
    ("list all pods", "/api/v1/pods?resourceVersion=0"),
    ("list secrets a", "/api/v1/namespaces/a/secrets?resourceVersion=0"),
    ("get secret a", "/api/v1/namespaces/a/secrets/s-a-0?resourceVersion=0"),
    ("list all secrets", "/api/v1/secrets?resourceVersion=0"),
];

/// Requesters: (label, own user, impersonation headers).
/// Headers as (name, value) pairs.
type Headers = Vec<(&'static str, &'static str)>;

fn requesters() -> Vec<(&'static str, &'static str, Headers)> {
    vec![
        ("root as alice", "root", vec![("impersonate-user", "alice")]),
        ("imp as alice", "imp", vec![("impersonate-user", "alice")]),
        ("imp as alice in team", "imp", vec![("impersonate-user", "alice"), ("impersonate-group", "team")]),
        ("imp as bob", "imp", vec![("impersonate-user", "bob")]),
        (
            "imp as alice in masters",
            "imp",
            vec![("impersonate-user", "alice"), ("impersonate-group", "system:masters")],
        ),
        (
            "imp as alice with extra",
            "imp",
            vec![("impersonate-user", "alice"), ("impersonate-extra-scopes", "x")],
        ),
        ("imp as alice with uid", "imp", vec![("impersonate-user", "alice"), ("impersonate-uid", "u-1")]),
        (
            "root as alice with extra and uid",
            "root",
            vec![
                ("impersonate-user", "alice"),
                ("impersonate-extra-Scopes%2Fx", "y"),
                ("impersonate-uid", "u-1"),
            ],
        ),
        ("alice as root", "alice", vec![("impersonate-user", "root")]),
        ("carol as alice", "carol", vec![("impersonate-user", "alice")]),
        (
            "root as service account a/reader",
            "root",
            vec![("impersonate-user", "system:serviceaccount:a:reader")],
        ),
        ("root as anonymous", "root", vec![("impersonate-user", "system:anonymous")]),
        ("root as masters without a user", "root", vec![("impersonate-group", "system:masters")]),
        ("root as a node", "root", vec![("impersonate-user", "system:node:n1")]),
        (
            "imp as alice with a domain extra",
            "imp",
            vec![("impersonate-user", "alice"), ("impersonate-extra-example.com%2fscope", "x")],
        ),
        ("alice (no impersonation)", "alice", vec![]),
    ]
}

/// Runs the matrix against `base`, with the sim answering the same requests as the oracle. Returns the
/// mismatches and how many cases the upstream allowed.
async fn run_matrix(sim: &SimHandle, base: &str) -> (Vec<String>, usize) {
    let mut failures = Vec::new();
    let mut allowed = 0;
    for (who, user, imp) in requesters() {
        let bearer = format!("Bearer {}", token(user));
        let mut headers = vec![("authorization", bearer.as_str())];
        headers.extend(imp.iter().copied());
        for (label, path) in PATHS {
            let want = request(&sim.url(), path, &headers).await;
            let got = request(base, path, &headers).await;
            if want.status == StatusCode::OK {
                allowed += 1;
            }
            let watch = path.contains("watch=1");
            let same = |w: &[String], g: &[String]| if watch { g.len() == 1 } else { w == g };
            failures.extend(difference(&format!("{who} {label}"), &want, &got, same));
        }
    }
    (failures, allowed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_matrix_from_memory_and_forwarded() {
    kache::upstream::install_crypto_provider();
    let sim = start_sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = kubeconfig(dir.path(), "kubeconfig", &sim.url(), KACHE_TOKEN);

    let memory = start(config(&kc, "pods,secrets", AuthSettings::delegated()), true).await;
    let (failures, allowed) = run_matrix(&sim, &memory.url()).await;
    assert!(failures.is_empty(), "kache differs from the upstream (from memory):\n{}", failures.join("\n"));
    assert!(allowed >= 15, "the matrix has allowed cases too ({allowed})");
    assert!(
        memory.stats().memory() >= allowed as u64,
        "allowed reads were served from memory ({} of {allowed})",
        memory.stats().memory()
    );
    let metrics = common::get(&memory.metrics_url().expect("metrics served"), "/metrics").await;
    let text = String::from_utf8_lossy(&metrics.body);
    for decision in ["allow", "deny", "error"] {
        let series = format!("kache_impersonation_total{{decision=\"{decision}\"}}");
        let line =
            text.lines().find(|l| l.starts_with(&series)).unwrap_or_else(|| panic!("{series} exported"));
        let value: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("a number");
        assert!(value > 0.0, "{series} counted ({line})");
    }

    let forwarded = start(config(&kc, "", AuthSettings::delegated()), false).await;
    let (failures, _) = run_matrix(&sim, &forwarded.url()).await;
    assert!(failures.is_empty(), "kache differs from the upstream (forwarded):\n{}", failures.join("\n"));
    assert_eq!(forwarded.stats().memory(), 0, "nothing is cached: every read was forwarded");

    // The control: a kache that authorizes the requester and ignores its Impersonate-* headers (what
    // kache did before) is caught leaking.
    let control = AuthSettings { control_ignore_impersonation: true, ..AuthSettings::delegated() };
    let leaky = start(config(&kc, "pods,secrets", control), true).await;
    let (failures, _) = run_matrix(&sim, &leaky.url()).await;
    assert!(
        failures.iter().any(|f| f.starts_with("root as alice list all secrets: kache 200 OK upstream 403")),
        "the matrix detects the impersonation leak: {failures:#?}"
    );

    memory.shutdown().await;
    forwarded.shutdown().await;
    leaky.shutdown().await;
    sim.shutdown().await;
}

/// Denials and malformed impersonation: a bearer-token client's go upstream unchanged (the upstream's own
/// answer, whatever its per-requester history); a certificate client's are kache's, worded as a 1.36
/// apiserver that has not seen the requester impersonate before (the sim, fresh, as the oracle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_errors_are_the_apiservers() {
    kache::upstream::install_crypto_provider();
    let sim = start_sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = kubeconfig(dir.path(), "kubeconfig", &sim.url(), KACHE_TOKEN);
    let pki = Pki::new("kache-test-ca");
    let (server, server_key) = pki.issue(&["localhost"], "kache", &[], false);
    let (cert, key, ca) = (dir.path().join("tls.crt"), dir.path().join("tls.key"), dir.path().join("ca.crt"));
    std::fs::write(&cert, server.pem()).expect("write");
    std::fs::write(&key, server_key.serialize_pem()).expect("write");
    std::fs::write(&ca, &pki.ca_pem).expect("write");
    let mut cfg = config(&kc, "pods", AuthSettings::delegated());
    cfg.tls = Some(kache::front::server::TlsConfig::with_client_ca(&cert, &key, &ca).expect("tls config"));
    let kache = start(cfg, true).await;
    let path = "/api/v1/namespaces/a/pods?resourceVersion=0";
    let cases: Vec<(Headers, u16, &str)> = vec![
        (
            vec![("impersonate-user", "bob")],
            403,
            r#"pods is forbidden: User "imp" cannot impersonate-on:user-info:list resource "pods" in API group "" in the namespace "a""#,
        ),
        (
            vec![("impersonate-user", "system:serviceaccount:a:reader")],
            403,
            r#"pods is forbidden: User "imp" cannot impersonate-on:serviceaccount:list resource "pods" in API group "" in the namespace "a""#,
        ),
        (
            vec![("impersonate-group", "team")],
            400,
            r#"requested &user.DefaultInfo{Name:"", UID:"", Groups:[]string{"team"}, Extra:map[string][]string(nil)} without impersonating a user name"#,
        ),
    ];
    // Certificate clients first (kache decides), compared with the fresh sim answering the same user.
    let imp_cert = pki.issue(&[], "imp", &[], true);
    let imp = format!("Bearer {}", token("imp"));
    for (imp_headers, code, message) in &cases {
        let got =
            tls_get(kache.addr(), &pki.ca_der, Some(&imp_cert), None, path, imp_headers).await.expect("TLS");
        let mut headers = vec![("authorization", imp.as_str())];
        headers.extend(imp_headers.iter().copied());
        let want = request(&sim.url(), path, &headers).await;
        assert_eq!(got.status.as_u16(), *code, "{imp_headers:?}: {:?}", got.body);
        assert_eq!(got.json()["message"], *message, "{imp_headers:?}");
        assert_eq!(got.json(), want.json(), "{imp_headers:?}: the upstream's own Status");
    }
    // Bearer clients: whatever the upstream answers, byte for byte.
    for (imp_headers, _, _) in &cases {
        let got = tls_get(kache.addr(), &pki.ca_der, None, Some(&token("imp")), path, imp_headers)
            .await
            .expect("TLS");
        let mut headers = vec![("authorization", imp.as_str())];
        headers.extend(imp_headers.iter().copied());
        let want = request(&sim.url(), path, &headers).await;
        assert_eq!((got.status, &got.body), (want.status, &want.body), "{imp_headers:?}");
    }
    // A certificate client allowed to impersonate reads as that user, from memory.
    let before = kache.stats().memory();
    let as_alice = [("impersonate-user", "alice")];
    let got = tls_get(kache.addr(), &pki.ca_der, Some(&imp_cert), None, path, &as_alice).await.expect("TLS");
    assert_eq!(got.status, StatusCode::OK, "{:?}", got.body);
    assert_eq!(names(&got), ["p-a-0", "p-a-1"]);
    assert!(kache.stats().memory() > before);
    let denied = "/api/v1/namespaces/b/pods?resourceVersion=0";
    let got =
        tls_get(kache.addr(), &pki.ca_der, Some(&imp_cert), None, denied, &as_alice).await.expect("TLS");
    assert_eq!(got.status, StatusCode::FORBIDDEN);
    assert_eq!(
        got.json()["message"],
        r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "b""#
    );
    kache.shutdown().await;
    sim.shutdown().await;
}

/// node kache (client certificates, `--auth=delegated`) → regional kache (`--auth=delegated`, node's token
/// plus the certificate user as `Impersonate-*`) → sim. `dave` (a certificate user, no rights of his own)
/// may impersonate nobody; `alice` (a certificate user) reads pods in `a` only. Whatever each kache
/// caches, nobody reads outside their rights, Secrets included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chained_kaches_keep_the_certificate_users_identity() {
    kache::upstream::install_crypto_provider();
    let sim = start_sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new("kache-node-ca");
    let (server, server_key) = pki.issue(&["localhost"], "kache-node", &[], false);
    let (cert, key, ca) = (dir.path().join("tls.crt"), dir.path().join("tls.key"), dir.path().join("ca.crt"));
    std::fs::write(&cert, server.pem()).expect("write");
    std::fs::write(&key, server_key.serialize_pem()).expect("write");
    std::fs::write(&ca, &pki.ca_pem).expect("write");
    let alice = pki.issue(&[], "alice", &[], true);
    let dave = pki.issue(&[], "dave", &[], true);
    let imp = pki.issue(&[], "imp", &[], true);

    for (regional_cache, node_cache, control) in [
        ("pods,secrets", "", false),
        ("pods,secrets", "pods", false),
        ("", "pods,secrets", false),
        ("pods,secrets", "", true),
    ] {
        let kc = kubeconfig(dir.path(), "regional", &sim.url(), KACHE_TOKEN);
        let auth = AuthSettings { control_ignore_impersonation: control, ..AuthSettings::delegated() };
        let regional = start(config(&kc, regional_cache, auth), !regional_cache.is_empty()).await;
        let node_kc = kubeconfig(dir.path(), "node", &regional.url(), &token("node"));
        let mut node_config = config(&node_kc, node_cache, AuthSettings::delegated());
        node_config.tls =
            Some(kache::front::server::TlsConfig::with_client_ca(&cert, &key, &ca).expect("tls config"));
        let node = start(node_config, !node_cache.is_empty()).await;
        let addr = node.addr();
        let case =
            format!("regional caches {regional_cache:?}, node caches {node_cache:?}, control {control}");

        let mut leaks = Vec::new();
        for (label, path) in PATHS {
            if path.contains("watch=1") {
                continue;
            }
            for (user, client, imp_headers) in [
                ("dave", &dave, vec![]),
                ("alice", &alice, vec![]),
                ("dave as alice", &dave, vec![("impersonate-user", "alice")]),
                ("imp as alice", &imp, vec![("impersonate-user", "alice")]),
            ] {
                let got =
                    tls_get(addr, &pki.ca_der, Some(client), None, path, &imp_headers).await.expect("TLS");
                // What the same user gets from the upstream directly: the oracle.
                let as_user = match user {
                    "dave" | "dave as alice" => "dave",
                    _ => "alice",
                };
                let direct_user = if as_user == "dave" { "carol" } else { "alice" };
                let want = request(
                    &sim.url(),
                    path,
                    &[("authorization", &format!("Bearer {}", token(direct_user)))],
                )
                .await;
                let expect_denied = user == "dave as alice";
                let ok = if expect_denied {
                    got.status == StatusCode::FORBIDDEN
                } else if want.status == StatusCode::OK {
                    got.status == StatusCode::OK && names(&got) == names(&want)
                } else {
                    got.status == want.status
                };
                if !ok {
                    leaks.push(format!(
                        "{user} {label}: got {} {}",
                        got.status,
                        String::from_utf8_lossy(&got.body)
                    ));
                }
            }
        }
        if control {
            assert!(
                leaks.iter().any(|l| l.starts_with("dave list all secrets: got 200")),
                "{case}: the chain test detects a regional kache that drops impersonation: {leaks:#?}"
            );
        } else {
            assert!(leaks.is_empty(), "{case}: reads outside the user's rights:\n{}", leaks.join("\n"));
        }
        node.shutdown().await;
        regional.shutdown().await;
    }
    sim.shutdown().await;
}

// --- kubectl --as ---

async fn kubectl(kubeconfig: &Path, cache: &Path, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(kubeconfig).arg("--cache-dir").arg(cache).args(args);
    cmd.env_remove("KUBECONFIG");
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.expect("joined").expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kubectl --as` through a kache serving TLS to a client-certificate user of `system:masters` (kubectl
/// sends no bearer token over plain HTTP, so the certificate is the credential): kache decides the
/// impersonation itself, serves reads from memory as the impersonated user, and forwards discovery as it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_as_reads_as_the_impersonated_user() {
    if !common::tools::kubectl_available() {
        common::tools::missing("kubectl is not installed (scripts/install-test-deps.sh installs it)");
        return;
    }
    kache::upstream::install_crypto_provider();
    let sim = start_sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = kubeconfig(dir.path(), "kubeconfig", &sim.url(), KACHE_TOKEN);
    let pki = Pki::new("kache-kubectl-ca");
    let (server, server_key) = pki.issue(&["localhost"], "kache", &[], false);
    let (client, client_key) = pki.issue(&[], "root", &["system:masters"], true);
    let file = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path
    };
    let cert = file("tls.crt", server.pem());
    let key = file("tls.key", server_key.serialize_pem());
    let ca = file("ca.crt", pki.ca_pem.clone());
    let client_cert = file("client.crt", client.pem());
    let client_key = file("client.key", client_key.serialize_pem());
    let mut cfg = config(&kc, "pods,secrets", AuthSettings::delegated());
    cfg.tls = Some(kache::front::server::TlsConfig::with_client_ca(&cert, &key, &ca).expect("tls config"));
    let kache = start(cfg, true).await;
    let via_kache = file(
        "via-kache",
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://localhost:{}\n    certificate-authority: {}\nusers:\n- name: u\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
            kache.addr().port(),
            ca.display(),
            client_cert.display(),
            client_key.display()
        ),
    );
    let cache = dir.path().join("cache");
    let run = |args: &'static [&'static str]| {
        let (via_kache, cache) = (via_kache.clone(), cache.clone());
        async move { kubectl(&via_kache, &cache, args).await }
    };
    let forbidden = |stderr: &str, what: &str| {
        assert!(stderr.contains("Error from server (Forbidden)") && stderr.contains(what), "{stderr}");
    };

    let (ok, out, err) = run(&["get", "pods", "-n", "a", "--as", "alice", "-o", "name"]).await;
    assert!(ok, "{err}");
    assert_eq!(out, "pod/p-a-0\npod/p-a-1\n");
    let (ok, out, err) = run(&["get", "pods", "-n", "a", "--as", "alice", "-o", "json"]).await;
    assert!(ok, "{err}");
    let list: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(2));
    let (ok, _, err) = run(&["get", "pods", "-n", "b", "--as", "alice", "-o", "name"]).await;
    assert!(!ok);
    forbidden(&err, r#"User "alice" cannot list resource "pods" in API group "" in the namespace "b""#);
    let (ok, _, err) = run(&["get", "secrets", "-A", "--as", "alice", "-o", "name"]).await;
    assert!(!ok);
    forbidden(&err, r#"User "alice" cannot list resource "secrets" in API group "" at the cluster scope"#);
    let (ok, out, err) =
        run(&["get", "pods", "-n", "b", "--as", "alice", "--as-group", "team", "-o", "name"]).await;
    assert!(ok, "the group team reads namespace b: {err}");
    assert_eq!(out, "pod/p-b-0\npod/p-b-1\n");
    let (ok, out, err) =
        run(&["get", "pods", "-n", "a", "--as", "system:serviceaccount:a:reader", "-o", "name"]).await;
    assert!(ok, "{err}");
    assert_eq!(out, "pod/p-a-0\npod/p-a-1\n");
    let (ok, _, err) =
        run(&["get", "secrets", "-n", "a", "--as", "system:serviceaccount:a:reader", "-o", "name"]).await;
    assert!(!ok);
    forbidden(&err, r#"User "system:serviceaccount:a:reader" cannot list resource "secrets""#);
    // The same user without --as reads everything.
    let (ok, out, err) = run(&["get", "secrets", "-A", "-o", "name"]).await;
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 4);
    kache.shutdown().await;
    sim.shutdown().await;
}
