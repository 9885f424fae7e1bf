//! The read matrix through a chain: client → kache B → kache A → kube-apiserver, both `--auth=delegated` and
//! serving TLS, B's upstream being A (a kubeconfig naming A, trusting the cluster's CA).
//!
//! The identities each hop sees: B authenticates its client (a TokenReview it sends through A, which
//! forwards it with B's own token) and authorizes what it serves from memory as that client. What B forwards
//! reaches A with the client's own bearer token (and the client's `Impersonate-*` headers), so A
//! authenticates and authorizes the client again, not B; a certificate client of B reaches A as B's token
//! plus `Impersonate-*` naming the certificate's user. B's own credentials are the admin's token
//! (`system:masters`): had either hop authorized B's identity instead of its client's, users with fewer
//! rights than the admin would read more through the chain than directly, and the matrix would show it.

use super::{Fixture, fixture, read_matrix};
use crate::common;

use kache::app::{Kache, UpstreamSource};
use kache::auth::AuthSettings;
use kache::upstream::discovery::{Selection, parse_resource_specs};

/// The resources the matrix reads: B caches them (A caches every resource), the rest B forwards.
const B_RESOURCES: &str = "pods,secrets,configmaps,nodes,deployments.apps";

/// kache B in front of the kache `a`, with the admin's token as its own credentials, caching `resources`
/// only.
async fn kache_b(f: &Fixture, a: &Kache, resources: &str) -> Kache {
    let admin_token = std::path::PathBuf::from(f.cluster.var("KUBE_ADMIN_TOKEN_KUBECONFIG"));
    let to_a = f.kubeconfig_via("b-to-a", &admin_token, &a.url());
    f.cluster
        .start_kache(|config| {
            f.cluster.delegated(config);
            config.upstream = UpstreamSource::Kubeconfig(Some(to_a));
            config.selection = only(resources);
            // Exactly `resources`: the rest is forwarded to A, never cached on a first read.
            config.lazy = false;
        })
        .await
}

fn only(resources: &str) -> Selection {
    Selection { include: Some(parse_resource_specs(resources).expect("resource specs")), exclude: Vec::new() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_matrix_through_a_chain_answers_as_the_apiserver() {
    let _one = common::cluster::one_at_a_time().await;
    let Some(f) = fixture().await else { return };
    let b = kache_b(&f, &f.kache, B_RESOURCES).await;
    let (b_memory, b_forwarded) = (b.stats().memory(), b.stats().forwarded());
    let diffs = read_matrix(&f, &b.url()).await;
    assert!(b.stats().memory() > b_memory, "B served allowed reads from its memory");
    assert!(b.stats().forwarded() > b_forwarded, "B forwarded the consistent gets to A");
    assert!(diffs.is_empty(), "{} differences through the chain:\n{}", diffs.len(), diffs.join("\n"));
    b.shutdown().await;

    // The control: an A that authorizes the kache in front of it instead of the user B names in
    // `Impersonate-*` (it ignores those headers, as kache did before it implemented impersonation), behind
    // a B that forwards what it does not cache (Secrets). The matrix must catch the certificate user
    // without rights reading Secrets through it.
    let leaky_a = f
        .cluster
        .start_kache(|config| {
            f.cluster.delegated(config);
            config.auth = AuthSettings { control_ignore_impersonation: true, ..AuthSettings::delegated() };
            config.selection = only("pods,secrets");
        })
        .await;
    let b = kache_b(&f, &leaky_a, "pods").await;
    let diffs = read_matrix(&f, &b.url()).await;
    let leak = "dave (certificate) /api/v1/namespaces/team-a/secrets?resourceVersion=0: kube-apiserver 403 Forbidden kache 200 OK";
    assert!(diffs.iter().any(|d| d.starts_with(leak)), "the matrix catches the leaky chain: {diffs:#?}");
    b.shutdown().await;
    leaky_a.shutdown().await;
}
