//! `--auth=delegated` against the sim with its authentication and authorization on: an authorization
//! matrix (users × get/list/watch × namespaced/cluster-wide × allowed/denied), served from memory and
//! forwarded, with the upstream itself as the oracle; and revocation within the configured TTLs.
//!
//! kache's own identity (for the reflectors and the reviews) is a `system:masters` token in a kubeconfig,
//! so every decision about a client is the upstream's, never kache's.

use crate::common;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;
use serde_json::json;

use common::auth::{KACHE_TOKEN, difference, names, token as user_token};
use common::tls::{Pki, tls_get};
use common::{Resp, client};
use kache::app::{Config, Kache, UpstreamSource};
use kache::auth::{AuthMode, AuthSettings};
use kache::upstream::discovery::{Selection, parse_resource_specs};
use kache_sim::SimHandle;
use kache_sim::auth::Rule;

/// Bound on how long a revocation may take to show (the TTLs below are far shorter); not a timing
/// assertion, a hang guard.
const CONVERGE_WITHIN: Duration = Duration::from_secs(20);
/// TTLs the revocation test configures.
const TINY_TTL: Duration = Duration::from_millis(200);

/// alice: pods in namespace `a` (get, list, watch). bob: pods everywhere (list, watch) and nodes (get).
/// carol: nothing but the bootstrap policy.
fn rules() -> Vec<Rule> {
    vec![
        Rule::new("alice-pods-a")
            .user("alice")
            .verbs(&["get", "list", "watch"])
            .api_groups(&[""])
            .resources(&["pods"])
            .namespaces(&["a"]),
        Rule::new("bob-pods").user("bob").verbs(&["list", "watch"]).api_groups(&[""]).resources(&["pods"]),
        Rule::new("bob-nodes").user("bob").verbs(&["get"]).api_groups(&[""]).resources(&["nodes"]),
    ]
}

async fn start_sim() -> SimHandle {
    let users = [("alice", false), ("bob", false), ("carol", false), ("root", true)];
    let sim = common::auth::start_sim(&users, rules(), false).await;
    for n in ["n1", "n2"] {
        sim.create("nodes", None, json!({"metadata": {"name": n}})).expect("node");
    }
    sim
}

/// A kubeconfig naming the sim with kache's token.
fn kubeconfig(dir: &Path, sim: &SimHandle) -> std::path::PathBuf {
    common::auth::kubeconfig(dir, "kubeconfig", &sim.url(), KACHE_TOKEN)
}

/// kache in delegated mode; `cached` resources are served from memory, everything else is forwarded.
async fn start_kache(kubeconfig: &Path, cached: &str, auth: AuthSettings) -> Kache {
    common::auth::start(common::auth::config(kubeconfig, cached, auth), !cached.is_empty()).await
}

/// A GET as the owner of `token` (none: anonymous), reading a watch only up to its first event line.
async fn request(base: &str, path: &str, token: Option<&str>) -> Resp {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    common::auth::request(base, path, &headers).await
}

/// The requests of the matrix: (label, path). All at resourceVersion=0 so that kache answers from memory.
fn matrix_paths() -> Vec<(&'static str, &'static str)> {
    vec![
        ("get ns a", "/api/v1/namespaces/a/pods/p-a-0?resourceVersion=0"),
        ("list ns a", "/api/v1/namespaces/a/pods?resourceVersion=0"),
        ("watch ns a", "/api/v1/namespaces/a/pods?watch=1&resourceVersion=0"),
        ("get ns b", "/api/v1/namespaces/b/pods/p-b-0?resourceVersion=0"),
        ("get ns b missing", "/api/v1/namespaces/b/pods/missing?resourceVersion=0"),
        ("list ns b", "/api/v1/namespaces/b/pods?resourceVersion=0"),
        ("watch ns b", "/api/v1/namespaces/b/pods?watch=1&resourceVersion=0"),
        ("list all pods", "/api/v1/pods?resourceVersion=0"),
        ("watch all pods", "/api/v1/pods?watch=1&resourceVersion=0"),
        ("get node", "/api/v1/nodes/n1?resourceVersion=0"),
        ("list nodes", "/api/v1/nodes?resourceVersion=0"),
        ("watch nodes", "/api/v1/nodes?watch=1&resourceVersion=0"),
    ]
}

/// Runs the matrix against `kache`, with the sim answering the same requests as the oracle. Returns the
/// mismatches and how many cases the upstream allowed.
async fn run_matrix(sim: &SimHandle, kache: &Kache) -> (Vec<String>, usize) {
    let mut failures = Vec::new();
    let mut allowed = 0;
    let tokens: Vec<Option<String>> = ["alice", "bob", "carol"]
        .iter()
        .map(|u| Some(user_token(u)))
        .chain([None, Some("not-a-token".to_owned())])
        .collect();
    for token in &tokens {
        for (label, path) in matrix_paths() {
            let want = request(&sim.url(), path, token.as_deref()).await;
            let got = request(&kache.url(), path, token.as_deref()).await;
            let who = token.as_deref().unwrap_or("anonymous");
            if want.status == StatusCode::OK {
                allowed += 1;
            }
            // A watch's first event is one of the objects; a get or list is exactly the same set.
            let all = if path.contains("watch=1") && want.status == StatusCode::OK {
                Some(names(&request(&sim.url(), &path.replace("watch=1&", ""), token.as_deref()).await))
            } else {
                None
            };
            let same = |w: &[String], g: &[String]| match &all {
                Some(all) => g.len() == 1 && g.iter().all(|n| all.contains(n)),
                None => w == g,
            };
            failures.extend(difference(&format!("{who} {label}"), &want, &got, same));
        }
    }
    (failures, allowed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_matrix_from_memory_and_forwarded() {
    kache::upstream::install_crypto_provider();
    let sim = start_sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = kubeconfig(dir.path(), &sim);

    let memory = start_kache(&kubeconfig, "pods,nodes", AuthSettings::delegated()).await;
    let (failures, allowed) = run_matrix(&sim, &memory).await;
    assert!(failures.is_empty(), "kache differs from the upstream (from memory):\n{}", failures.join("\n"));
    assert!(allowed >= 10, "the matrix has allowed cases too ({allowed})");
    assert!(
        memory.stats().memory() >= allowed as u64,
        "allowed reads were served from memory ({} of {allowed})",
        memory.stats().memory()
    );

    let forwarded = start_kache(&kubeconfig, "", AuthSettings::delegated()).await;
    let (failures, _) = run_matrix(&sim, &forwarded).await;
    assert!(failures.is_empty(), "kache differs from the upstream (forwarded):\n{}", failures.join("\n"));
    assert_eq!(forwarded.stats().memory(), 0, "nothing is cached: every read was forwarded");
    assert!(forwarded.stats().forwarded() > 0);

    // The oracle can fail: kache with `--auth=none` (its own, privileged credentials for everyone) leaks.
    let open = start_kache(&kubeconfig, "pods,nodes", AuthSettings::default()).await;
    let (failures, _) = run_matrix(&sim, &open).await;
    assert!(
        failures.iter().any(|f| f.contains("kache 200 OK upstream 403")),
        "the matrix detects data the upstream would refuse: {failures:?}"
    );

    memory.shutdown().await;
    forwarded.shutdown().await;
    open.shutdown().await;
    sim.shutdown().await;
}

/// Lazy caching starts only after authorization: a read of a resource not cached yet is forwarded, and
/// kache starts caching that resource only when the upstream authorized it (neither 401 nor 403). A refused
/// client cannot make kache cache anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_caching_starts_only_after_an_authorized_read() {
    kache::upstream::install_crypto_provider();
    let sim = start_sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = common::auth::config(&kubeconfig(dir.path(), &sim), "pods", AuthSettings::delegated());
    config.lazy = true;
    let kache = common::auth::start(config, true).await;
    let caching_nodes = || kache.registry().statuses().iter().any(|s| s.gvr.resource == "nodes");
    assert!(!caching_nodes(), "nodes are not cached before any read");

    let refused = request(&kache.url(), "/api/v1/nodes/n1", Some(&user_token("carol"))).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "carol may not read nodes: {refused:?}");
    assert!(!caching_nodes(), "a read the upstream refused starts no caching");

    let allowed = request(&kache.url(), "/api/v1/nodes/n1", Some(&user_token("bob"))).await;
    assert_eq!(allowed.status, StatusCode::OK, "bob may get nodes: {allowed:?}");
    assert!(caching_nodes(), "an authorized read starts caching its resource");

    kache.shutdown().await;
    sim.shutdown().await;
}

/// Polls `path` as `token` until it answers `want`; panics after [`CONVERGE_WITHIN`].
async fn converges(kache: &Kache, path: &str, token: &str, want: StatusCode) {
    let deadline = tokio::time::Instant::now() + CONVERGE_WITHIN;
    loop {
        let got = request(&kache.url(), path, Some(token)).await.status;
        if got == want {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{path} still {got}, want {want}");
        tokio::time::sleep(TINY_TTL / 4).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_takes_effect_within_the_ttls() {
    kache::upstream::install_crypto_provider();
    let sim = start_sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = kubeconfig(dir.path(), &sim);
    let settings = AuthSettings {
        mode: AuthMode::Delegated,
        token_ttl: TINY_TTL,
        token_failure_ttl: TINY_TTL,
        allow_ttl: TINY_TTL,
        deny_ttl: TINY_TTL,
        ..AuthSettings::default()
    };
    let kache = start_kache(&kubeconfig, "pods,nodes", settings).await;
    let auth = sim.auth().expect("sim auth on");
    let alice = user_token("alice");
    let path = "/api/v1/namespaces/a/pods?resourceVersion=0";

    assert_eq!(request(&kache.url(), path, Some(&alice)).await.status, StatusCode::OK);
    // Served from the decision cache now; revoking upstream must win once the TTL is over.
    let before = kache.stats().memory();
    assert_eq!(request(&kache.url(), path, Some(&alice)).await.status, StatusCode::OK);
    assert!(kache.stats().memory() > before);
    auth.set_rules(rules().into_iter().filter(|r| r.name != "alice-pods-a").collect());
    converges(&kache, path, &alice, StatusCode::FORBIDDEN).await;
    // Granting again works the same way (the deny was cached for its own TTL).
    auth.set_rules(rules());
    converges(&kache, path, &alice, StatusCode::OK).await;
    // A revoked token stops authenticating.
    assert!(auth.revoke_token(&alice));
    converges(&kache, path, &alice, StatusCode::UNAUTHORIZED).await;
    let resp = request(&kache.url(), path, Some(&alice)).await;
    assert_eq!(resp.json()["message"], "Unauthorized");

    kache.shutdown().await;
    sim.shutdown().await;
}

// --- client certificates ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_authenticate_as_cn_and_are_authorized() {
    kache::upstream::install_crypto_provider();
    let sim = start_sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = kubeconfig(dir.path(), &sim);
    let pki = Pki::new("kache-test-ca");
    let (server, server_key) = pki.issue(&["localhost"], "kache", &[], false);
    let (cert, key, ca) = (dir.path().join("tls.crt"), dir.path().join("tls.key"), dir.path().join("ca.crt"));
    std::fs::write(&cert, server.pem()).expect("write");
    std::fs::write(&key, server_key.serialize_pem()).expect("write");
    std::fs::write(&ca, &pki.ca_pem).expect("write");

    let mut config = Config::for_url(String::new());
    config.upstream = UpstreamSource::Kubeconfig(Some(kubeconfig.clone()));
    config.selection =
        Selection { include: Some(parse_resource_specs("pods,nodes").expect("specs")), exclude: Vec::new() };
    config.lazy = false;
    config.auth = AuthSettings::delegated();
    config.tls = Some(kache::front::server::TlsConfig::with_client_ca(&cert, &key, &ca).expect("tls config"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let kache = Kache::start(config, listener).await.expect("kache starts");
    tokio::time::timeout(Duration::from_secs(30), kache.wait_synced()).await.expect("kache syncs");
    let addr = kache.addr();

    let alice = pki.issue(&[], "alice", &["team"], true);
    let allowed = "/api/v1/namespaces/a/pods?resourceVersion=0";
    let denied = "/api/v1/namespaces/b/pods?resourceVersion=0";
    let got = tls_get(addr, &pki.ca_der, Some(&alice), None, allowed, &[]).await.expect("TLS request");
    assert_eq!(got.status, StatusCode::OK, "{:?}", got.body);
    let want = request(&sim.url(), allowed, Some(&user_token("alice"))).await;
    assert_eq!(names(&got), names(&want), "a certificate user sees what the same user sees upstream");
    let got = tls_get(addr, &pki.ca_der, Some(&alice), None, denied, &[]).await.expect("TLS request");
    assert_eq!(got.status, StatusCode::FORBIDDEN);
    assert_eq!(
        got.json()["message"],
        r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "b""#
    );

    // No certificate and no token: 401; a bearer token over TLS still works.
    let got = tls_get(addr, &pki.ca_der, None, None, allowed, &[]).await.expect("TLS request");
    assert_eq!(got.status, StatusCode::UNAUTHORIZED);
    let got = tls_get(addr, &pki.ca_der, None, Some(&user_token("alice")), allowed, &[]).await.expect("TLS");
    assert_eq!(got.status, StatusCode::OK);

    // A certificate from another CA claiming system:masters never gets data.
    let rogue = Pki::new("rogue-ca").issue(&[], "root", &["system:masters"], true);
    // (An Err is the handshake refusing it, which is the expected outcome.)
    if let Ok(resp) = tls_get(addr, &pki.ca_der, Some(&rogue), None, denied, &[]).await {
        assert_ne!(resp.status, StatusCode::OK, "a rogue certificate read data");
    }

    kache.shutdown().await;
    sim.shutdown().await;
}

// --- per-client limits ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_client_rate_and_watch_limits_answer_429_with_retry_after() {
    kache::upstream::install_crypto_provider();
    let sim = start_sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = kubeconfig(dir.path(), &sim);
    let mut settings = AuthSettings::delegated();
    settings.clients = kache::auth::ClientLimitSettings { qps: 0.01, burst: 3, max_watches: 1 };
    let kache = start_kache(&kubeconfig, "pods,nodes", settings).await;
    let (alice, bob) = (user_token("alice"), user_token("bob"));

    // One watch per client: alice's second watch is refused while the first is open; bob is unaffected.
    let watch = "/api/v1/namespaces/a/pods?watch=1&resourceVersion=0";
    let mut req = Request::get(format!("{}{watch}", kache.url()));
    req = req.header("authorization", format!("Bearer {alice}"));
    let open = client().request(req.body(Empty::<Bytes>::new()).expect("request")).await.expect("response");
    assert_eq!(open.status(), StatusCode::OK);
    let second = request(&kache.url(), watch, Some(&alice)).await;
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(second.headers.get("retry-after").expect("Retry-After"), "1");
    assert_eq!(second.json()["reason"], "TooManyRequests");
    let bobs = request(&kache.url(), "/api/v1/pods?watch=1&resourceVersion=0", Some(&bob)).await;
    assert_eq!(bobs.status, StatusCode::OK);

    // The rate: a burst of 3 (alice used 2 above), then 429 with how long to wait at 0.01 qps.
    let list = "/api/v1/namespaces/a/pods?resourceVersion=0";
    assert_eq!(request(&kache.url(), list, Some(&alice)).await.status, StatusCode::OK);
    let limited = request(&kache.url(), list, Some(&alice)).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.json()["message"], "Too many requests, please try again later.");
    let wait: u32 = limited.headers["retry-after"].to_str().expect("ascii").parse().expect("seconds");
    assert!((1..=100).contains(&wait), "retry after {wait}");
    assert_eq!(
        request(&kache.url(), list, Some(&bob)).await.status,
        StatusCode::OK,
        "bob has his own bucket"
    );

    drop(open);
    kache.shutdown().await;
    sim.shutdown().await;
}

/// Each token kache has not seen costs an upstream TokenReview: a flood of distinct junk tokens from one
/// address is refused (429) before it reaches the upstream, while tokens already reviewed keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_token_floods_are_budgeted_per_address_before_review() {
    kache::upstream::install_crypto_provider();
    let sim = start_sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = kubeconfig(dir.path(), &sim);
    let mut settings = AuthSettings::delegated();
    settings.reviews_per_address = kache::auth::ClientLimitSettings { qps: 0.01, burst: 3, max_watches: 0 };
    let kache = start_kache(&kubeconfig, "pods", settings).await;
    let path = "/api/v1/namespaces/a/pods?resourceVersion=0";
    let alice = user_token("alice");
    assert_eq!(request(&kache.url(), path, Some(&alice)).await.status, StatusCode::OK, "review 1 of 3");
    for junk in ["junk-1", "junk-2"] {
        assert_eq!(request(&kache.url(), path, Some(junk)).await.status, StatusCode::UNAUTHORIZED);
    }
    let refused = request(&kache.url(), path, Some("junk-3")).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "the budget is spent");
    assert_eq!(refused.json()["reason"], "TooManyRequests");
    assert!(refused.headers.contains_key("retry-after"));
    // A rejected token is cached as rejected: no review, still 401.
    assert_eq!(request(&kache.url(), path, Some("junk-1")).await.status, StatusCode::UNAUTHORIZED);
    // A reviewed token needs no review: still served.
    assert_eq!(request(&kache.url(), path, Some(&alice)).await.status, StatusCode::OK);
    kache.shutdown().await;
    sim.shutdown().await;
}

/// The value of the counter line `series` (name and labels, as exposed) in `kache`'s metrics; 0 if absent.
fn counter(kache: &Kache, series: &str) -> f64 {
    kache.metrics().render().lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok()).unwrap_or(0.0)
}

/// One client reading ever new names (each a decision kache has not cached) cannot make kache send more
/// SubjectAccessReviews than its per-user budget: past it, its reads are forwarded and the upstream
/// authorizes them itself. Every answer is the upstream's (200 for alice's namespace, 403 elsewhere): no
/// 429 the apiserver would not give, and the budget's use is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_new_decisions_costs_at_most_the_review_budget() {
    kache::upstream::install_crypto_provider();
    let sim = start_sim().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = kubeconfig(dir.path(), &sim);
    let budget = kache::auth::ClientLimitSettings { qps: 1.0, burst: 20, max_watches: 0 };
    let settings = AuthSettings { access_reviews_per_user: budget, ..AuthSettings::delegated() };
    let kache = start_kache(&kubeconfig, "pods", settings).await;
    let alice = user_token("alice");
    const READS: usize = 120;
    let started = std::time::Instant::now();
    for i in 0..READS {
        // Alternating an allowed and a denied namespace, each read a name never read before.
        let ns = if i % 2 == 0 { "a" } else { "b" };
        let path = format!("/api/v1/namespaces/{ns}/pods/flood-{i}?resourceVersion=0");
        let through = request(&kache.url(), &path, Some(&alice)).await;
        let direct = request(&sim.url(), &path, Some(&alice)).await;
        assert_eq!(through.status, direct.status, "{path}: {}", String::from_utf8_lossy(&through.body));
        assert_ne!(through.status, StatusCode::TOO_MANY_REQUESTS, "{path}");
    }
    let reviews = counter(&kache, "kache_auth_cache_total{result=\"miss\",decision=\"allow\"}")
        + counter(&kache, "kache_auth_cache_total{result=\"miss\",decision=\"deny\"}");
    // The token review is one of the misses; the rest are access reviews within burst + rate × time.
    let allowed = 1.0 + f64::from(budget.burst) + budget.qps * started.elapsed().as_secs_f64().ceil();
    assert!(reviews <= allowed, "{reviews} reviews sent for {READS} reads, budget {allowed}");
    let over = counter(&kache, "kache_limit_rejections_total{limit=\"access_reviews\"}");
    assert!(over >= 1.0, "reads past the budget are counted: {}", kache.metrics().render());
    // One user's budget is tracked (the limiter's map is bounded and shown).
    let tracked = counter(&kache, "kache_limit_tracked_clients{limit=\"access_reviews\"}");
    assert_eq!(tracked, 1.0, "{}", kache.metrics().render());
}
