//! Linearizability of consistent reads through kache: concurrent writers (to the sim directly and through
//! kache) and readers through kache; every consistent read reflects every write acknowledged before the
//! read began. Covers a busy resource (configmaps, written all the time) and a quiet one (secrets, written
//! rarely while other resources move the global revision), with and without the sim's background writes
//! to leases and events (a real cluster's global revision moves on every resource).

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

const WRITERS: usize = 4;

fn configmap(name: &str, seq: u64) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "lin"}, "data": {"seq": seq.to_string()}})
}

/// Merge-patches `data.seq` through kache (a forwarded write); returns when acknowledged.
async fn patch_through(kache: &str, name: &str, seq: u64) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let body = json!({"data": {"seq": seq.to_string()}}).to_string();
    let req = Request::patch(format!("{kache}/api/v1/namespaces/lin/configmaps/{name}"))
        .header("content-type", "application/merge-patch+json")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let resp = client.request(req).await.expect("patch");
    let status = resp.status();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert!(status.is_success(), "patch through kache: {status} {}", String::from_utf8_lossy(&body));
}

/// The `data.seq` of each configmap in a list.
fn seqs(list: &Value) -> Vec<(String, u64)> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            let name = i["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let seq = i["data"]["seq"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
            (name, seq)
        })
        .collect()
}

async fn run(bookmark_interval: Duration, foreign_writes: f64) -> (u64, u64) {
    let sim = kache_sim::Sim::builder()
        .bookmark_interval(bookmark_interval)
        .foreign_writes(foreign_writes)
        .wait_timeout(TEST_BLOCK_TIMEOUT)
        .start()
        .await
        .expect("sim");
    sim.create("namespaces", None, namespace("lin")).expect("ns");
    for w in 0..WRITERS {
        sim.create("configmaps", Some("lin"), configmap(&format!("w{w}"), 0)).expect("cm");
    }
    let kache =
        Arc::new(start_kache(&sim.url(), |c| c.freshness.latency_bound = Duration::from_millis(300)).await);
    let sim = Arc::new(sim);
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));

    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (sim, kache, acked, stop) = (sim.clone(), kache.url(), acked.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let name = format!("w{w}");
            let mut seq = 0;
            while !stop.load(SeqCst) {
                seq += 1;
                if w % 2 == 0 {
                    // Directly to the upstream, behind kache's back.
                    sim.merge_patch(
                        "configmaps",
                        Some("lin"),
                        &name,
                        json!({"data": {"seq": seq.to_string()}}),
                    )
                    .expect("direct write");
                } else {
                    patch_through(&kache, &name, seq).await;
                }
                acked[w].store(seq, SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }));
    }

    // Readers: each consistent list must show, for every writer, a seq ≥ what was acknowledged before it began.
    let url = kache.url();
    for round in 0..60 {
        let before: Vec<u64> = acked.iter().map(|a| a.load(SeqCst)).collect();
        let list = get(&url, "/api/v1/namespaces/lin/configmaps").await;
        assert_eq!(list.status, 200, "round {round}: {}", String::from_utf8_lossy(&list.body));
        for (name, seq) in seqs(&list.json()) {
            let w: usize = name[1..].parse().expect("writer index");
            assert!(
                seq >= before[w],
                "round {round}: {name} at seq {seq} but {} was acknowledged before the read",
                before[w]
            );
        }
        // A quiet resource: one write (directly upstream), then a consistent read through kache must see it.
        if round % 10 == 0 {
            let secret = format!("s{round}");
            sim.create(
                "secrets",
                Some("lin"),
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": "lin"}}),
            )
            .expect("secret");
            let got = get(&url, &format!("/api/v1/namespaces/lin/secrets/{secret}")).await;
            assert_eq!(got.status, 200, "consistent get sees the quiet resource's write");
            let list = get(&url, "/api/v1/namespaces/lin/secrets").await.json();
            let names: Vec<&str> = list["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|i| i["metadata"]["name"].as_str())
                .collect();
            assert!(
                names.contains(&secret.as_str()),
                "consistent list sees the quiet resource's write: {names:?}"
            );
        }
    }
    stop.store(true, SeqCst);
    for w in writers {
        w.await.expect("writer");
    }
    (kache.stats().memory(), kache.stats().not_fresh())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consistent_reads_are_linearizable_with_fast_upstream_bookmarks() {
    let (memory, _) = run(Duration::from_millis(100), 0.0).await;
    assert!(memory > 0, "with frequent upstream bookmarks, consistent reads are served from memory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consistent_reads_are_linearizable_with_apiserver_bookmark_period() {
    // The apiserver's 60 s bookmark period: a quiet resource's store cannot prove itself fresh, so its
    // consistent reads fall back upstream — still linearizable.
    let (_, not_fresh) = run(Duration::from_secs(60), 0.0).await;
    assert!(not_fresh > 0, "quiet-resource reads fell back upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consistent_reads_are_linearizable_under_foreign_churn() {
    // Leases and events written 200 times a second besides the test's own writers: every resource the
    // readers look at is behind the global revision most of the time.
    let (_, not_fresh) = run(Duration::from_secs(60), 200.0).await;
    assert!(not_fresh > 0, "reads that could not be proven fresh were forwarded");
}
