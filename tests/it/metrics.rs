//! Metrics are instance-scoped: each kache has its own series. Two kaches in this one test process, in
//! front of one sim: reads from the first move the first one's exposition only.

use crate::common;

/// The value of one exact series in a Prometheus rendering (`None`: no such series).
fn series(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// A kache with its metrics listener, synced.
async fn kache_with_metrics(upstream: &str) -> kache::app::Kache {
    let mut config = kache::app::Config::for_url(upstream);
    config.handler.block_timeout = common::TEST_BLOCK_TIMEOUT;
    config.freshness.probe_small_reads = true;
    common::start_with_metrics(config, true).await
}

/// Scrapes `/metrics` of `kache` over HTTP.
async fn scrape(kache: &kache::app::Kache) -> String {
    let url = kache.metrics_url().expect("a metrics listener");
    let resp = common::get(&url, "/metrics").await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    String::from_utf8(resp.body.to_vec()).expect("utf-8 exposition")
}

#[tokio::test]
async fn two_kaches_in_one_process_have_independent_series() {
    let sim = common::start_sim().await;
    for i in 0..3 {
        let pod = common::pod("default", &format!("p-{i}"), &[("app", "web")], "node-1");
        sim.create("pods", Some("default"), pod).expect("pod");
    }
    let (first, second) = (kache_with_metrics(&sim.url()).await, kache_with_metrics(&sim.url()).await);
    let pods = "/api/v1/namespaces/default/pods";
    for _ in 0..2 {
        let resp = common::get(&first.url(), &format!("{pods}?resourceVersion=0")).await;
        assert_eq!(resp.status, 200, "GET {pods}?resourceVersion=0: {}", String::from_utf8_lossy(&resp.body));
    }
    let get = common::get(&first.url(), &format!("{pods}/p-1?resourceVersion=0")).await;
    assert_eq!(get.status, 200, "GET {pods}/p-1: {}", String::from_utf8_lossy(&get.body));

    let (a, b) = (scrape(&first).await, scrape(&second).await);
    let gr = r#"group="",resource="pods""#;
    let lists = format!(r#"apiserver_request_total{{{gr},verb="LIST",code="200",source="memory"}}"#);
    let gets = format!(r#"apiserver_request_total{{{gr},verb="GET",code="200",source="memory"}}"#);
    let cache_lists = format!(r#"apiserver_cache_list_total{{{gr},index=""}}"#);
    let returned = format!("apiserver_cache_list_returned_objects_total{{{gr}}}");
    assert_eq!(series(&a, &lists), Some(2.0), "{lists} of the first kache:\n{a}");
    assert_eq!(series(&a, &gets), Some(1.0), "{gets} of the first kache:\n{a}");
    assert!(series(&a, &returned).unwrap_or(0.0) >= 6.0, "{returned} (2 lists of 3 pods):\n{a}");
    // The second kache served nothing: its request series do not exist, its list series stayed at zero.
    assert_eq!(series(&b, &lists), None, "{lists} of the second kache:\n{b}");
    assert_eq!(series(&b, &gets), None, "{gets} of the second kache:\n{b}");
    assert_eq!(series(&b, &cache_lists).unwrap_or(0.0), 0.0, "{cache_lists} of the second kache:\n{b}");
    assert_eq!(series(&b, &returned).unwrap_or(0.0), 0.0, "{returned} of the second kache:\n{b}");
    // Each kache's own stores are refreshed into its own gauges.
    let objects = format!("kache_store_objects{{{gr}}}");
    assert_eq!(series(&a, &objects), Some(3.0), "{a}");
    assert_eq!(series(&b, &objects), Some(3.0), "{b}");
    first.shutdown().await;
    second.shutdown().await;
}
