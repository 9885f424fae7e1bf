//! Readiness a Kubernetes Service can trust: `/readyz` fails until the first discovery succeeded and every
//! configured resource is synced, and while the upstream has been unreachable for longer than the grace;
//! it passes again once the upstream answers. `/livez` passes throughout (a restart would not fix the
//! upstream).

use std::time::Duration;

use kache::app::Config;
use kache::upstream::discovery::{Selection, parse_resource_specs};

use crate::common::gate::Gate;
use crate::common::{self, eventually, get, start_sim, start_with_metrics};

/// A short grace so that the tests see the check fail soon; the ask interval stays the product's.
const GRACE: Duration = Duration::from_millis(500);
/// How long a readiness change may take to show: an ask interval, the grace, and slack for a loaded machine.
const SETTLE: Duration = Duration::from_secs(30);

fn pods_only(config: &mut Config) {
    config.selection =
        Selection { include: Some(parse_resource_specs("pods").expect("spec")), exclude: Vec::new() };
    config.lazy = false;
    config.unreachable_grace = GRACE;
}

async fn status(metrics: &str, path: &str) -> (u16, String) {
    let r = get(metrics, path).await;
    (r.status.as_u16(), String::from_utf8_lossy(&r.body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_never_ready_and_always_live() {
    // Nothing listens on port 1 of the loopback address.
    let mut config = Config::for_url("http://127.0.0.1:1");
    pods_only(&mut config);
    let kache = start_with_metrics(config, false).await;
    let metrics = kache.metrics_url().expect("a metrics listener");
    let (code, body) = status(&metrics, "/readyz?verbose").await;
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("[-]discovery failed"), "discovery has not succeeded: {body}");
    assert!(body.ends_with("readyz check failed\n"), "{body}");
    eventually("the upstream check fails past its grace", SETTLE, || async {
        status(&metrics, "/readyz/upstream").await.0 == 500
    })
    .await;
    let (code, body) = status(&metrics, "/readyz/upstream").await;
    assert_eq!(code, 500);
    assert!(body.contains("has not answered") && body.contains("refused"), "the reason is shown: {body}");
    let (code, body) = status(&metrics, "/readyz/discovery").await;
    assert_eq!(code, 500);
    assert!(body.contains("discovering the upstream's resources failed"), "{body}");
    assert_eq!(status(&metrics, "/livez").await, (200, "ok".to_owned()), "liveness does not depend on it");
    assert_eq!(status(&metrics, "/readyz").await.0, 500, "still not ready");
    kache.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_a_flapping_upstream() {
    let sim = start_sim().await;
    common::seed_pods(&sim, &["a"], 3);
    let gate = Gate::start(&sim.url()).await;
    let mut config = Config::for_url(gate.url());
    pods_only(&mut config);
    let kache = start_with_metrics(config, true).await;
    let metrics = kache.metrics_url().expect("a metrics listener");
    eventually("ready once discovered and synced", SETTLE, || async {
        status(&metrics, "/readyz").await == (200, "ok".to_owned())
    })
    .await;
    let (_, body) = status(&metrics, "/readyz?verbose").await;
    for check in ["[+]ping ok", "[+]discovery ok", "[+]upstream ok", "[+]informer-sync-pods ok"] {
        assert!(body.contains(check), "{check} in {body}");
    }
    for round in 0..2 {
        gate.close();
        eventually(&format!("not ready while the upstream is down (round {round})"), SETTLE, || async {
            status(&metrics, "/readyz").await.0 == 500
        })
        .await;
        let (_, body) = status(&metrics, "/readyz?verbose").await;
        assert!(body.contains("[-]upstream failed"), "{body}");
        assert_eq!(status(&metrics, "/livez").await.0, 200, "live while the upstream is down");
        gate.open();
        eventually(&format!("ready again once the upstream answers (round {round})"), SETTLE, || async {
            status(&metrics, "/readyz").await.0 == 200
        })
        .await;
    }
    // Reads work again through the reopened upstream.
    let r = get(&kache.url(), "/api/v1/namespaces/a/pods").await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    kache.shutdown().await;
}
