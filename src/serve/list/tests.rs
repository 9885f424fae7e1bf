//! Admission of lists before their objects are walked.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use tokio::time::Instant;

use super::*;
use crate::fresh::FreshnessConfig;
use crate::store::{StoreConfig, Writer};
use crate::upstream::Upstream;

/// Pods in the store: ~300 bytes each, so a list of all of them is over the gzip threshold.
const PODS: usize = 2000;

fn store() -> (Arc<Store>, Writer) {
    let info = ResourceInfo::pods();
    let (store, mut writer) = Store::new(info.clone(), StoreConfig::default());
    let pods = (0..PODS).map(|i| {
        let raw = format!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"p{i:05}","namespace":"ns","resourceVersion":"{}","labels":{{"app":"web"}}}},"spec":{{"nodeName":"node-1"}},"status":{{"phase":"Running","podIP":"10.0.0.1"}}}}"#,
            i + 1
        );
        Arc::new(crate::codec::extract::object_from_json(Bytes::from(raw), &info).expect("pod"))
    });
    writer.replace(pods, PODS as u64);
    (store, writer)
}

fn freshness() -> Freshness {
    // Never contacted: rv=0 lists are answered at the current snapshot.
    Freshness::new(Upstream::plain("http://127.0.0.1:1").expect("url"), FreshnessConfig::default())
}

/// An rv=0 list of every pod with a selector that counts the objects it is asked about.
async fn list(
    store: &Arc<Store>,
    budget: &Arc<ReadBudget>,
    response: ResponseOptions,
    walked: &AtomicUsize,
) -> Result<Response<Body>, NotServed> {
    let matches = |_: &Object| {
        walked.fetch_add(1, Ordering::Relaxed);
        true
    };
    let metrics = Metrics::default();
    let q = ListQuery {
        rv: Rv::Any,
        rvm: Match::Unset,
        limit: 0,
        cont: None,
        namespace: None,
        single_name: None,
        has_selector: true,
        matches: &matches,
        response,
        arrived: Instant::now(),
        min_rv: 0,
        block_timeout: std::time::Duration::from_secs(1),
        gzip_cache: None,
        body_cache: None,
        budget: Some(budget),
        view: View::Full,
        proto: None,
        metrics: &metrics,
    };
    serve_list(store, &q, &freshness()).await.map(|(resp, _)| resp)
}

/// A list that cannot fit the byte budget is refused before a single object is looked at (30 refused lists of
/// 100k pods walked them all and held both runtime workers of a 2-core machine for 150 ms at a time).
#[tokio::test]
async fn a_list_over_the_byte_budget_is_refused_before_its_objects_are_walked() {
    let (store, _writer) = store();
    let estimate = read_bytes(&store, PODS);
    // Room for a list and a half, half of it taken.
    let budget = Arc::new(ReadBudget::with_heavy_limit(estimate * 3 / 2, 0));
    let held = budget.try_charge(estimate).expect("room");
    let walked = AtomicUsize::new(0);
    let refused = list(&store, &budget, ResponseOptions::default(), &walked).await;
    assert!(matches!(refused, Err(NotServed::Overloaded)), "{refused:?}");
    assert_eq!(walked.load(Ordering::Relaxed), 0, "refused before the walk");

    // With the room back, the same list walks every object and is served.
    drop(held);
    let served = list(&store, &budget, ResponseOptions::default(), &walked).await.expect("served");
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(walked.load(Ordering::Relaxed), PODS);
}

/// A body produced on the fly (gzipped without the cache, or indented) beyond the heavy-body limit is refused
/// before the walk too; a plain list of the same objects is not a heavy body.
#[tokio::test]
async fn a_produced_body_beyond_the_heavy_limit_is_refused_before_its_objects_are_walked() {
    let (store, _writer) = store();
    assert!(gzip::should_compress(read_bytes(&store, PODS)), "a heavy body if produced");
    let budget = Arc::new(ReadBudget::with_heavy_limit(0, 1));
    let _taken = budget.try_heavy().expect("the only slot");
    let walked = AtomicUsize::new(0);
    for response in
        [ResponseOptions { gzip: true, pretty: false }, ResponseOptions { gzip: false, pretty: true }]
    {
        let refused = list(&store, &budget, response, &walked).await;
        assert!(matches!(refused, Err(NotServed::Overloaded)), "{response:?}: {refused:?}");
    }
    assert_eq!(walked.load(Ordering::Relaxed), 0, "refused before the walk");
    let plain = list(&store, &budget, ResponseOptions::default(), &walked).await.expect("not heavy");
    assert_eq!(plain.status(), StatusCode::OK);
    assert_eq!(walked.load(Ordering::Relaxed), PODS);
}
