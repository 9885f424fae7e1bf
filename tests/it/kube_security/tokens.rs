//! Service-account tokens the apiserver no longer accepts, through kache and directly:
//! - expired: a token whose `exp` is past (minted with the testbed's service-account signing key), refused
//!   by both with the same 401 Status; the same token with a future `exp` is accepted by both, which proves
//!   the minting right and the refusal due to the expiry alone;
//! - expiring: a token read with through kache (its review cached) that then expires: kache refuses it
//!   within 10 s of the apiserver (it keeps a review no longer than the token's `exp` allows), not a whole
//!   token TTL (2 min) later;
//! - revoked: a token bound to a Secret, and one of a ServiceAccount, read with, then the Secret and the
//!   ServiceAccount deleted: once the apiserver refuses them, kache refuses them too within its token
//!   cache's TTL.

use super::{Fixture, fixture};
use crate::common;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{Method, StatusCode};
use serde_json::{Value, json};

use common::Resp;
use common::real::Endpoint;
use kache::app::Kache;
use kache::auth::AuthSettings;
use kache::upstream::discovery::{Selection, parse_resource_specs};

/// What the tokens read: team-a's pods, from kache's memory (the service account `team-a/reader` may).
const READ: &str = "/api/v1/namespaces/team-a/pods?resourceVersion=0";
/// The token cache's TTL of the revocation test's kache: short, so that the test waits seconds, not the
/// default two minutes; the bound the test checks scales with it.
const TOKEN_TTL: Duration = Duration::from_secs(15);
/// Beyond [`TOKEN_TTL`], for a loaded machine: kache's next review after the TTL must reach the apiserver
/// and come back.
const MARGIN: Duration = Duration::from_secs(10);
/// How long the apiserver may take to refuse a revoked token: its informers see the deletion, then its own
/// token cache (10 s) lets go of the token.
const APISERVER_REVOCATION: Duration = Duration::from_secs(60);

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs() as i64
}

/// `token` (a JWT the apiserver issued) with its claims `edit`ed, signed again with `key` (RS256, as the
/// apiserver signs with `--service-account-signing-key-file`), by `openssl`.
fn resign(token: &str, key: &Path, edit: impl FnOnce(&mut Value)) -> String {
    let mut parts = token.split('.');
    let (header, payload) = (parts.next().expect("a JWT header"), parts.next().expect("a JWT payload"));
    let mut claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("base64url claims"))
            .expect("JSON claims");
    edit(&mut claims);
    let input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).expect("JSON")));
    let mut openssl = Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl runs");
    openssl.stdin.take().expect("piped stdin").write_all(input.as_bytes()).expect("write to openssl");
    let out = openssl.wait_with_output().expect("openssl output");
    assert!(out.status.success(), "openssl dgst -sign: {}", String::from_utf8_lossy(&out.stderr));
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(&out.stdout))
}

/// Sets a token's issue and expiry times (seconds since the epoch).
fn times(issued_at: i64, expires: i64) -> impl FnOnce(&mut Value) {
    move |c: &mut Value| {
        c["iat"] = json!(issued_at);
        c["nbf"] = json!(issued_at);
        c["exp"] = json!(expires);
    }
}

/// The apiserver and the fixture's kache, each with `token`.
async fn sides(f: &Fixture, name: &str, token: &str) -> (Endpoint, Endpoint) {
    let kubeconfig = f.token_kubeconfig(name, token);
    f.sides(name, &kubeconfig).await
}

fn show(r: &Resp) -> String {
    format!("{} {}", r.status, String::from_utf8_lossy(&r.body))
}

/// A 401 as the apiserver answers a token it does not accept.
fn assert_unauthorized(who: &str, r: &Resp) {
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{who} GET {READ}: {}", show(r));
    let status = r.json();
    assert_eq!((&status["kind"], &status["code"]), (&json!("Status"), &json!(401)), "{who}: {}", show(r));
    assert_eq!(status["reason"], "Unauthorized", "{who}: {}", show(r));
}

/// Both refuse the read with the same 401.
async fn assert_both_refuse(who: &str, api: &Endpoint, via: &Endpoint) {
    let (a, v) = (api.get(READ).await, via.get(READ).await);
    assert_unauthorized("kube-apiserver", &a);
    assert_unauthorized("kache", &v);
    assert_eq!(a.body, v.body, "{who}: kube-apiserver {} / kache {}", show(&a), show(&v));
}

/// Waits, at most `bound`, until `side` refuses the read.
async fn until_refused(what: &str, side: &Endpoint, bound: Duration) {
    common::eventually(what, bound, || {
        let side = side.clone();
        async move { side.get(READ).await.status == StatusCode::UNAUTHORIZED }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_refused_as_the_apiserver_refuses_it() {
    let _one = common::cluster::one_at_a_time().await;
    let Some(f) = fixture().await else { return };
    let key = std::path::PathBuf::from(f.cluster.var("KUBE_SERVICE_ACCOUNT_KEY"));
    let issued = f.request_token("team-a", "reader", json!({"expirationSeconds": 3600})).await;
    let now = unix_now();
    // Well past any clock-skew leeway of the validator.
    let expired = resign(&issued, &key, times(now - 7200, now - 3600));
    let valid = resign(&issued, &key, times(now - 60, now + 3600));

    let (api, via) = sides(&f, "minted-valid", &valid).await;
    let (a, v) = (api.get(READ).await, via.get(READ).await);
    assert_eq!(a.status, StatusCode::OK, "the re-signed token is valid to the apiserver: {}", show(&a));
    assert_eq!(v.status, StatusCode::OK, "and to kache: {}", show(&v));

    let (api, via) = sides(&f, "minted-expired", &expired).await;
    assert_both_refuse("the same Status", &api, &via).await;
}

/// A token that expires while kache holds its review: kache stops serving it at most 20 s after the
/// apiserver does (its review kept 10 s past `exp`, of an apiserver whose own token cache may answer from a
/// 10 s old acceptance), where a review kept the whole default token TTL would serve it two minutes after
/// its first use: past the apiserver's refusal (65–75 s after it: `exp` 5 s away, a minute's leeway, its
/// cache) by more than the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_expiring_while_cached_is_refused_with_the_apiserver() {
    let _one = common::cluster::one_at_a_time().await;
    let Some(f) = fixture().await else { return };
    /// kache's longest hold of an expired token's review (`auth::expiry::PAST_EXPIRY_TTL`).
    const PAST_EXPIRY: Duration = Duration::from_secs(10);
    const LIFETIME: i64 = 5;
    let key = std::path::PathBuf::from(f.cluster.var("KUBE_SERVICE_ACCOUNT_KEY"));
    let issued = f.request_token("team-a", "reader", json!({"expirationSeconds": 3600})).await;
    let now = unix_now();
    let expiring = resign(&issued, &key, times(now - 60, now + LIFETIME));
    let (api, via) = sides(&f, "minted-expiring", &expiring).await;
    let (a, v) = (api.get(READ).await, via.get(READ).await);
    assert_eq!(a.status, StatusCode::OK, "the token is valid to the apiserver: {}", show(&a));
    assert_eq!(v.status, StatusCode::OK, "and to kache, which caches its review: {}", show(&v));
    // The service-account validator allows a minute of clock skew past `exp` (go-jose's default leeway),
    // then the apiserver's token cache may hold its last acceptance 10 s more.
    let expired_by = Duration::from_secs(LIFETIME as u64 + 60) + APISERVER_REVOCATION;
    until_refused("the apiserver refuses the token once it expired", &api, expired_by).await;
    // kache's last review may have met the apiserver's last cached acceptance (up to 10 s before the
    // apiserver refused), then kept it PAST_EXPIRY: twice PAST_EXPIRY, plus the margin.
    let bound = 2 * PAST_EXPIRY + MARGIN;
    until_refused(&format!("kache refuses the expired token within {bound:?} of the apiserver"), &via, bound)
        .await;
    assert_both_refuse("the expired token", &api, &via).await;
}

/// Creates `obj` at `path` as the admin; its uid.
async fn create(admin: &Endpoint, path: &str, obj: Value) -> String {
    let r = admin.write(Method::POST, path, "application/json", &obj).await;
    assert_eq!(r.status, StatusCode::CREATED, "POST {path}: {}", show(&r));
    r.json()["metadata"]["uid"].as_str().expect("a uid").to_owned()
}

async fn delete(admin: &Endpoint, path: &str) {
    let r = admin.request(Method::DELETE, path, &[], None).await;
    assert_eq!(r.status, StatusCode::OK, "DELETE {path}: {}", show(&r));
}

/// A kache like the fixture's, caching pods only, with [`TOKEN_TTL`].
async fn short_ttl_kache(f: &Fixture) -> Kache {
    f.cluster
        .start_kache(|config| {
            f.cluster.delegated(config);
            config.auth = AuthSettings { token_ttl: TOKEN_TTL, ..AuthSettings::delegated() };
            config.selection = Selection {
                include: Some(parse_resource_specs("pods").expect("resource specs")),
                exclude: Vec::new(),
            };
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_is_refused_within_the_token_ttl() {
    let _one = common::cluster::one_at_a_time().await;
    let Some(f) = fixture().await else { return };
    let kache = short_ttl_kache(&f).await;
    let admin = Endpoint::from_kubeconfig("kube-apiserver", &f.cluster.admin_kubeconfig()).await;
    let ns = "/api/v1/namespaces/team-a";

    // A token of team-a/reader bound to a Secret, and one of a service account of its own (allowed to view
    // team-a).
    let secret = "kache-revoked-binding";
    let secret_uid = create(
        &admin,
        &format!("{ns}/secrets"),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret}}),
    )
    .await;
    let bound = f
        .request_token(
            "team-a",
            "reader",
            json!({"expirationSeconds": 3600,
                   "boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": secret, "uid": secret_uid}}),
        )
        .await;
    let account = "kache-revoked";
    create(
        &admin,
        &format!("{ns}/serviceaccounts"),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}),
    )
    .await;
    let binding = "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings";
    create(
        &admin,
        binding,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": account},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": "team-a"}]}),
    )
    .await;
    let own = f.request_token("team-a", account, json!({"expirationSeconds": 3600})).await;

    let mut cases = Vec::new();
    let before = kache.stats().memory();
    for (who, token, revoke) in [
        ("token bound to a Secret", &bound, format!("{ns}/secrets/{secret}")),
        ("token of a deleted service account", &own, format!("{ns}/serviceaccounts/{account}")),
    ] {
        let name = who.replace(' ', "_");
        let kubeconfig = f.token_kubeconfig(&name, token);
        let (api, via) = f.sides_via(&name, &kubeconfig, &kache.url()).await;
        // RBAC takes a moment to see the new RoleBinding: wait until the apiserver allows the read.
        common::eventually(&format!("{who}: the apiserver allows GET {READ}"), APISERVER_REVOCATION, || {
            let api = api.clone();
            async move { api.get(READ).await.status == StatusCode::OK }
        })
        .await;
        let v = via.get(READ).await;
        assert_eq!(v.status, StatusCode::OK, "{who}: kache allows GET {READ} too: {}", show(&v));
        cases.push((who, revoke, api, via));
    }
    assert!(kache.stats().memory() > before, "kache served the tokens' reads from memory");

    for (who, revoke, api, via) in &cases {
        delete(&admin, revoke).await;
        let what = format!("{who}: the apiserver refuses it once {revoke} is deleted");
        until_refused(&what, api, APISERVER_REVOCATION).await;
        // From here on kache may serve the token only while its review is cached: at most TOKEN_TTL.
        let bound = TOKEN_TTL + MARGIN;
        until_refused(&format!("{who}: kache refuses it within {bound:?} of the apiserver"), via, bound)
            .await;
        assert_both_refuse(who, api, via).await;
    }
    delete(&admin, &format!("{binding}/{account}")).await;
    kache.shutdown().await;
}
