//! Real clients through kache in front of the real 1.36 cluster (the testbed), each compared with the same
//! client talking to the apiserver directly: kube-rs here, the official Python client in
//! [`python`]. kache runs with `--auth=delegated` and serves TLS with the apiserver's certificate, so a
//! client's kubeconfig for the cluster reaches kache with only its server changed; each client uses a token
//! user of the testbed and the cluster's RBAC decides what it may read.
//!
//! kube-rs: reflectors (list-then-watch, paginated, and streaming lists) on pods (carol, who may read every
//! namespace through her group) and nodes (the admin's token) converge to what a consistent list directly
//! from the apiserver holds, also after a pod is created, scheduled, run and deleted by the cluster; a
//! paginated consistent list through kache holds what the apiserver holds at the list's revision; gets agree;
//! bob writes through kache and reads his own writes; and every refusal (alice and dave reading what RBAC
//! denies them, alice writing) is the apiserver's own Status.

use crate::common;

mod python;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, GetParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use common::cluster::Cluster;
use common::eventually;
use kache::app::Kache;

/// How long a reflector may take to reach the apiserver's state: a hang guard, not a timing assertion.
const CONVERGE: Duration = Duration::from_secs(90);
/// The page size of the paginated lists (the shared cluster holds ~30 pods in 4 namespaces).
const PAGE: u32 = 7;

/// `namespace/name` → resourceVersion of each object.
type State = BTreeMap<String, String>;

fn state<'a, K: ResourceExt + 'a>(objects: impl IntoIterator<Item = &'a K>) -> State {
    objects
        .into_iter()
        .map(|o| {
            let key = format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
            (key, o.resource_version().unwrap_or_default())
        })
        .collect()
}

/// A kube-rs client with the credentials of `kubeconfig`, its server replaced by `server` (kache) if given.
async fn client(kubeconfig: &Path, server: Option<&str>) -> Client {
    kache::upstream::install_crypto_provider();
    let mut kc = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", kubeconfig.display()));
    if let Some(server) = server {
        for named in &mut kc.clusters {
            if let Some(cluster) = named.cluster.as_mut() {
                cluster.server = Some(server.to_owned());
            }
        }
    }
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", kubeconfig.display()));
    Client::try_from(config).expect("client")
}

/// One user's clients: `direct` to the apiserver, `via` kache.
struct User {
    direct: Client,
    via: Client,
}

async fn user(cluster: &Cluster, kache: &Kache, name: &str) -> User {
    let kubeconfig = std::path::PathBuf::from(cluster.var(&format!("KUBE_{name}_KUBECONFIG")));
    User { direct: client(&kubeconfig, None).await, via: client(&kubeconfig, Some(&kache.url())).await }
}

/// Runs a reflector of `api` (through kache) with `config` until it holds what a consistent list of
/// `direct` holds; the watcher's errors are collected and must be none.
async fn reflector_converges<K>(what: &str, api: Api<K>, direct: &Api<K>, config: watcher::Config)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, writer) = reflector::store::<K>();
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = errors.clone();
    let consumer = tokio::spawn(watcher(api, config).default_backoff().reflect(writer).for_each(move |r| {
        if let Err(e) = r {
            seen.lock().expect("errors lock").push(e.to_string());
        }
        async {}
    }));
    tokio::time::timeout(CONVERGE, store.wait_until_ready())
        .await
        .unwrap_or_else(|_| panic!("{what}: the reflector is not ready within {CONVERGE:?}"))
        .expect("the store lives");
    converges(what, &store, direct).await;
    consumer.abort();
    assert_eq!(*errors.lock().expect("errors lock"), Vec::<String>::new(), "{what}: no watcher error");
}

/// Waits until `store` holds exactly what a consistent list of `direct` holds at that moment.
async fn converges<K>(what: &str, store: &Store<K>, direct: &Api<K>)
where
    K: Resource + Clone + DeserializeOwned + Debug,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let mut last = (State::new(), State::new());
    let check = async {
        loop {
            let want = state(&direct.list(&ListParams::default()).await.expect("direct list").items);
            let got = state(store.state().iter().map(|o| o.as_ref()));
            if got == want {
                return;
            }
            last = (got, want);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    if tokio::time::timeout(CONVERGE, check).await.is_err() {
        let (got, want) = &last;
        let missing: Vec<_> = want.iter().filter(|(k, v)| got.get(*k) != Some(v)).take(5).collect();
        let extra: Vec<_> = got.iter().filter(|(k, v)| want.get(*k) != Some(v)).take(5).collect();
        panic!("{what}: the reflector did not converge; missing/stale {missing:?}, extra/stale {extra:?}");
    }
}

/// Every page of a consistent list of `api`, `PAGE` at a time (or at `rv` exactly); the list's revision.
async fn paged<K>(what: &str, api: &Api<K>, rv: Option<&str>) -> (State, String)
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let (mut items, mut token, mut list_rv, mut pages) = (State::new(), None::<String>, None, 0);
    loop {
        let mut params = ListParams::default().limit(PAGE);
        if let Some(t) = &token {
            params = params.continue_token(t);
        } else if let Some(rv) = rv {
            params = params.at(rv).matching(kube::api::VersionMatch::Exact);
        }
        let page = api.list(&params).await.unwrap_or_else(|e| panic!("{what}: page {pages}: {e}"));
        pages += 1;
        let page_rv = page.metadata.resource_version.clone().expect("a list's revision");
        assert_eq!(
            list_rv.get_or_insert_with(|| page_rv.clone()),
            &page_rv,
            "{what}: one list, one revision"
        );
        assert!(page.items.len() <= PAGE as usize, "{what}: a page of {} > {PAGE}", page.items.len());
        for (k, v) in state(&page.items) {
            assert!(items.insert(k.clone(), v).is_none(), "{what}: {k} listed twice");
        }
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            assert!(pages > 1, "{what}: the list was paginated ({} items)", items.len());
            return (items, list_rv.expect("one page at least"));
        }
    }
}

/// The Status a kube-rs call failed with (panics when it did not fail with one).
fn refusal<T: Debug>(what: &str, r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("{what}: expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_through_kache_matches_the_cluster() {
    // It creates and deletes a pod of the shared cluster: the byte-for-byte comparisons wait.
    let _one = common::cluster::one_at_a_time().await;
    let Some(cluster) = tokio::task::spawn_blocking(Cluster::shared).await.expect("cluster start") else {
        return;
    };
    let kache = cluster.start_kache(|config| cluster.delegated(config)).await;
    let carol = user(&cluster, &kache, "CAROL").await;
    let admin = user(&cluster, &kache, "ADMIN_TOKEN").await;

    // Reflectors: carol's pods of every namespace, the admin's nodes; each start mode of kube-rs.
    let modes = [
        ("list-then-watch", watcher::Config::default()),
        ("paginated list-then-watch", watcher::Config::default().page_size(PAGE)),
        ("streaming lists", watcher::Config::default().streaming_lists()),
    ];
    for (mode, config) in modes {
        let (via, direct) = (Api::<Pod>::all(carol.via.clone()), Api::<Pod>::all(carol.direct.clone()));
        reflector_converges(&format!("pods, {mode}"), via, &direct, config.clone()).await;
        let (via, direct) = (Api::<Node>::all(admin.via.clone()), Api::<Node>::all(admin.direct.clone()));
        reflector_converges(&format!("nodes, {mode}"), via, &direct, config).await;
    }

    // A reflector through the cluster's own work on a pod: created, bound by the scheduler, run by kwok,
    // deleted (each a watch event the reflector must apply).
    let (store, writer) = reflector::store::<Pod>();
    let pods_via = Api::<Pod>::all(carol.via.clone());
    let consumer = tokio::spawn(
        watcher(pods_via.clone(), watcher::Config::default().streaming_lists())
            .default_backoff()
            .reflect(writer)
            .for_each(|_| async {}),
    );
    let pods_direct = Api::<Pod>::all(carol.direct.clone());
    converges("pods before the new pod", &store, &pods_direct).await;
    let bob = user(&cluster, &kache, "BOB").await;
    let team_b = Api::<Pod>::namespaced(bob.via.clone(), "team-b");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kube-rs-client", "labels": {"kache-test": "kube-rs"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .expect("a pod");
    team_b.create(&PostParams::default(), &pod).await.expect("bob creates a pod through kache");
    eventually("the new pod runs", CONVERGE, || async {
        let p = team_b.get("kube-rs-client").await.expect("bob reads his pod through kache");
        p.status.and_then(|s| s.phase).as_deref() == Some("Running")
    })
    .await;
    converges("pods with the new pod running", &store, &pods_direct).await;
    team_b.delete("kube-rs-client", &DeleteParams::default().grace_period(0)).await.expect("delete");
    eventually("the new pod is gone", CONVERGE, || async {
        team_b.get_opt("kube-rs-client").await.expect("get").is_none()
    })
    .await;
    converges("pods after the delete", &store, &pods_direct).await;
    consumer.abort();

    // A paginated consistent list through kache holds the apiserver's pods at the list's revision.
    let (got, rv) = paged("carol's pods through kache", &pods_via, None).await;
    let (want, _) = paged("carol's pods directly, at the same revision", &pods_direct, Some(&rv)).await;
    assert_eq!(got, want, "the pages through kache at {rv} vs the apiserver's at {rv}");

    // Gets: consistent (forwarded) and from memory (resourceVersion=0) agree with the apiserver's.
    let (name, ns) = {
        let p = got.keys().next().expect("the cluster has pods");
        let (ns, name) = p.split_once('/').expect("ns/name");
        (name.to_owned(), ns.to_owned())
    };
    let (via, direct) =
        (Api::<Pod>::namespaced(carol.via.clone(), &ns), Api::<Pod>::namespaced(carol.direct, &ns));
    let want = direct.get(&name).await.expect("direct get");
    assert_eq!(via.get(&name).await.expect("get through kache"), want, "consistent get of {ns}/{name}");
    eventually(&format!("a get of {ns}/{name} from memory equals the apiserver's"), CONVERGE, || async {
        via.get_with(&name, &GetParams::any()).await.expect("get RV=0 through kache")
            == direct.get(&name).await.expect("direct get")
    })
    .await;

    // Bob writes through kache and reads his own writes (a get, a list, after a patch too).
    let cms = Api::<ConfigMap>::namespaced(bob.via.clone(), "team-b");
    let _ = cms.delete("kube-rs-own-write", &DeleteParams::default()).await;
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kube-rs-own-write", "labels": {"kache-test": "kube-rs"}},
        "data": {"round": "0"}
    }))
    .expect("a config map");
    let mut written = cms.create(&PostParams::default(), &cm).await.expect("bob creates through kache");
    for round in 1..=3 {
        let read = cms.get("kube-rs-own-write").await.expect("bob's get");
        assert_eq!(
            read.resource_version(),
            written.resource_version(),
            "round {round}: the get sees the write"
        );
        let listed = cms.list(&ListParams::default().labels("kache-test=kube-rs")).await.expect("bob's list");
        let rv = |s: Option<String>| s.and_then(|r| r.parse::<u64>().ok()).expect("a resourceVersion");
        assert!(
            rv(listed.metadata.resource_version.clone()) >= rv(written.resource_version()),
            "round {round}: the list is at least as new as the write"
        );
        assert_eq!(state(&listed.items), state([&written]), "round {round}: the list holds the write");
        let patch = serde_json::json!({"data": {"round": round.to_string()}});
        written = cms
            .patch("kube-rs-own-write", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("bob patches through kache");
    }
    let direct_cm = Api::<ConfigMap>::namespaced(bob.direct.clone(), "team-b");
    assert_eq!(
        direct_cm.get("kube-rs-own-write").await.expect("direct get"),
        written,
        "the apiserver holds it"
    );
    cms.delete("kube-rs-own-write", &DeleteParams::default()).await.expect("delete");

    // Refusals: the apiserver's own Status, through kache as directly.
    let alice = user(&cluster, &kache, "ALICE").await;
    let dave = user(&cluster, &kache, "DAVE").await;
    let lp = ListParams::default();
    for (what, direct, via) in [
        (
            "alice lists team-b's pods",
            refusal("direct", Api::<Pod>::namespaced(alice.direct.clone(), "team-b").list(&lp).await),
            refusal("via", Api::<Pod>::namespaced(alice.via.clone(), "team-b").list(&lp).await),
        ),
        (
            "dave lists every pod",
            refusal("direct", Api::<Pod>::all(dave.direct.clone()).list(&lp).await),
            refusal("via", Api::<Pod>::all(dave.via.clone()).list(&lp).await),
        ),
        (
            "dave lists nodes",
            refusal("direct", Api::<Node>::all(dave.direct.clone()).list(&lp).await),
            refusal("via", Api::<Node>::all(dave.via.clone()).list(&lp).await),
        ),
        (
            "alice gets a team-b pod from memory",
            refusal(
                "direct",
                Api::<Pod>::namespaced(alice.direct.clone(), "team-b").get_with("x", &GetParams::any()).await,
            ),
            refusal(
                "via",
                Api::<Pod>::namespaced(alice.via.clone(), "team-b").get_with("x", &GetParams::any()).await,
            ),
        ),
        (
            "alice creates a config map in team-a",
            refusal(
                "direct",
                Api::<ConfigMap>::namespaced(alice.direct.clone(), "team-a")
                    .create(&PostParams::default(), &cm)
                    .await,
            ),
            refusal(
                "via",
                Api::<ConfigMap>::namespaced(alice.via.clone(), "team-a")
                    .create(&PostParams::default(), &cm)
                    .await,
            ),
        ),
    ] {
        assert_eq!(direct.code, 403, "{what}: the apiserver refuses: {direct:?}");
        assert_eq!(via, direct, "{what}: through kache vs directly");
    }
    // A refused watch: kube-rs's watcher reports the apiserver's Status.
    let watch_refusal = |api: Api<Pod>, config: watcher::Config| async move {
        // The watcher announces `Init` before its first list.
        let mut stream = watcher(api, config).boxed();
        loop {
            match stream.next().await {
                Some(Ok(watcher::Event::Init)) => continue,
                Some(Err(
                    watcher::Error::InitialListFailed(kube::Error::Api(s))
                    | watcher::Error::WatchStartFailed(kube::Error::Api(s)),
                )) => return *s,
                other => panic!("expected a refusal, got {other:?}"),
            }
        }
    };
    for config in [watcher::Config::default(), watcher::Config::default().streaming_lists()] {
        let direct = watch_refusal(Api::namespaced(alice.direct.clone(), "team-b"), config.clone()).await;
        let via = watch_refusal(Api::namespaced(alice.via.clone(), "team-b"), config.clone()).await;
        assert_eq!((direct.code, &via), (403, &direct), "alice's watcher of team-b's pods, {config:?}");
    }

    assert!(kache.stats().memory() > 0, "kache answered reads from memory");
    kache.shutdown().await;
}
