use http::Method;
use serde_json::{Value, json};

use crate::common::*;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

async fn five(env: &Env) -> Vec<u64> {
    let mut rvs = Vec::new();
    for n in ["f1", "f2", "f3", "f4", "f5"] {
        rvs.push(env.cm("default", n).await);
    }
    rvs
}

fn token_json(tok: &str) -> Value {
    use base64::Engine;
    let raw =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(tok).expect("base64url without padding");
    serde_json::from_slice(&raw).expect("token json")
}

#[tokio::test]
async fn d1_d2_consistent_list_and_pages() {
    let env = start().await;
    let rvs = five(&env).await;
    // An unrelated write elsewhere moves the global revision; a consistent list reports it.
    env.cm("kube-system", "other").await;
    let now = env.sim.revision();
    let l = env.get(CMS).await.json();
    assert_eq!((rv_of(&l), names(&l).len()), (now, 5));
    assert!(l["metadata"].get("continue").is_none());

    let p1 = env.get(&format!("{CMS}?limit=2")).await.json();
    assert_eq!(names(&p1), ["f1", "f2"]);
    assert_eq!(p1["metadata"]["remainingItemCount"], json!(3));
    let tok = p1["metadata"]["continue"].as_str().expect("token").to_string();
    assert_eq!(token_json(&tok), json!({"v": "meta.k8s.io/v1", "rv": now, "start": "/f2\u{0}"}));
    // The token's raw JSON keeps the apiserver's field order and escapes.
    assert!(tok.starts_with("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6"));
    let p2 = env.get(&format!("{CMS}?limit=2&continue={tok}")).await.json();
    assert_eq!((names(&p2), rv_of(&p2)), (vec!["f3".to_string(), "f4".to_string()], now));
    assert_eq!(p2["metadata"]["remainingItemCount"], json!(1));
    let tok2 = p2["metadata"]["continue"].as_str().expect("token");
    let p3 = env.get(&format!("{CMS}?limit=2&continue={tok2}")).await.json();
    assert_eq!(names(&p3), ["f5"]);
    assert!(p3["metadata"].get("continue").is_none() && p3["metadata"].get("remainingItemCount").is_none());
    // A page ending on the last key has no token.
    let exact = env.get(&format!("{CMS}?limit=5")).await.json();
    assert!(exact["metadata"].get("continue").is_none());
    let _ = rvs;
}

#[tokio::test]
async fn d3_d6_d14_validation_422() {
    let env = start().await;
    for (q, msg) in [
        (
            "resourceVersionMatch=NotOlderThan",
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ),
        (
            "resourceVersion=0&resourceVersionMatch=Exact",
            "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
        ),
        (
            "resourceVersionMatch=Exact&continue=x",
            "resourceVersionMatch is forbidden when continue is provided",
        ),
    ] {
        let r = env.get(&format!("{CMS}?{q}")).await;
        assert_eq!(r.code(), 422, "{q}: {}", r.text());
        let s = r.json();
        assert_eq!(s["reason"], "Invalid");
        assert_eq!(s["details"]["group"], "meta.k8s.io");
        assert_eq!(s["details"]["kind"], "ListOptions");
        assert!(s["message"].as_str().expect("message").contains(msg), "{q}: {s}");
    }
}

#[tokio::test]
async fn d4_d5_rv0_ignores_limit() {
    let env = start().await;
    five(&env).await;
    for q in ["resourceVersion=0&limit=2", "resourceVersion=0&resourceVersionMatch=NotOlderThan&limit=2"] {
        let l = env.get(&format!("{CMS}?{q}")).await.json();
        assert_eq!(names(&l).len(), 5, "{q}");
        assert!(l["metadata"].get("continue").is_none(), "{q}");
        assert_eq!(rv_of(&l), env.sim.revision());
    }
}

#[tokio::test]
async fn d7_d8_not_older_than_serves_latest() {
    let env = start().await;
    let rvs = five(&env).await;
    env.sim.merge_patch("configmaps", Some("default"), "f1", json!({"data": {"x": "y"}})).expect("patch");
    let now = env.sim.revision();
    let l = env.get(&format!("{CMS}?resourceVersion={}", rvs[0])).await.json();
    assert_eq!((rv_of(&l), names(&l).len()), (now, 5));
    assert_eq!(l["items"][0]["data"]["x"], "y", "latest state, not the state at N");
    let l = env
        .get(&format!("{CMS}?resourceVersion={}&resourceVersionMatch=NotOlderThan&limit=1", rvs[1]))
        .await
        .json();
    assert_eq!((rv_of(&l), names(&l)), (now, vec!["f1".to_string()]));
    let tok = l["metadata"]["continue"].as_str().expect("token");
    assert_eq!(token_json(tok)["rv"], json!(now));
    assert_eq!(l["metadata"]["remainingItemCount"], json!(4));
}

#[tokio::test]
async fn d9_d10_exact_reads_from_history() {
    let env = start().await;
    let rvs = five(&env).await;
    env.sim.delete("configmaps", Some("default"), "f1").expect("delete");
    for q in [
        format!("resourceVersion={}&limit=10", rvs[1]),
        format!("resourceVersion={}&resourceVersionMatch=Exact", rvs[1]),
    ] {
        let l = env.get(&format!("{CMS}?{q}")).await.json();
        assert_eq!(rv_of(&l), rvs[1], "{q}");
        assert_eq!(names(&l), ["f1", "f2"], "{q}: state at N, including the since-deleted f1");
    }
    // Exact with a limit pages at N.
    let l =
        env.get(&format!("{CMS}?resourceVersion={}&resourceVersionMatch=Exact&limit=1", rvs[2])).await.json();
    assert_eq!(names(&l), ["f1"]);
    assert_eq!(l["metadata"]["remainingItemCount"], json!(2));
    let tok = l["metadata"]["continue"].as_str().expect("token");
    assert_eq!(token_json(tok)["rv"], json!(rvs[2]));
}

#[tokio::test]
async fn d11_d12_d13_continue_rules() {
    let env = start().await;
    five(&env).await;
    let p1 = env.get(&format!("{CMS}?limit=2")).await.json();
    let first_rv = rv_of(&p1);
    let tok = p1["metadata"]["continue"].as_str().expect("token").to_string();
    env.cm("default", "f0").await; // sorts first, created after the first page
    env.cm("default", "f9").await;
    let p2 = env.get(&format!("{CMS}?limit=10&continue={tok}")).await.json();
    assert_eq!((names(&p2), rv_of(&p2)), (vec!["f3".to_string(), "f4".into(), "f5".into()], first_rv));
    // RV=0 with continue is accepted; served from the cache it ignores the limit.
    let p = env.get(&format!("{CMS}?limit=1&resourceVersion=0&continue={tok}")).await.json();
    assert_eq!(names(&p), ["f3", "f4", "f5"]);
    // D13.
    let r = env.get(&format!("{CMS}?continue={tok}&resourceVersion=3")).await;
    assert_eq!(r.code(), 400);
    assert_eq!(r.json()["message"], "specifying resource version is not allowed when using continue");
    // D12: rv -1 continues at the latest revision from the token's key.
    use base64::Engine;
    let minus = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(br#"{"v":"meta.k8s.io/v1","rv":-1,"start":"f2\u0000"}"#);
    let p = env.get(&format!("{CMS}?limit=2&continue={minus}")).await.json();
    assert_eq!(names(&p), ["f3", "f4"]);
    assert_eq!(rv_of(&p), env.sim.revision());
    assert_eq!(
        token_json(p["metadata"]["continue"].as_str().expect("token"))["rv"],
        json!(env.sim.revision())
    );
}

#[tokio::test]
async fn bad_continue_tokens_are_400() {
    let env = start().await;
    use base64::Engine;
    let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    for (tok, msg) in [
        (
            "%25%25".to_string(),
            "invalid continue token: continue key is not valid: illegal base64 data at input byte 0",
        ),
        (
            enc(r#"{"v":"v2","rv":1,"start":"a"}"#),
            "invalid continue token: continue key is not valid: server does not recognize this encoded version v2",
        ),
        (
            enc(r#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#),
            "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ),
        (
            enc(r#"{"v":"meta.k8s.io/v1","rv":1,"start":""}"#),
            "invalid continue token: continue key is not valid: encoded start key empty (version meta.k8s.io/v1)",
        ),
        (
            enc(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"../x"}"#),
            "invalid continue token: continue key is not valid: ../x",
        ),
    ] {
        let r = env.get(&format!("{CMS}?continue={tok}")).await;
        assert_eq!(
            (r.code(), r.json()["message"].as_str().unwrap_or("").to_string()),
            (400, msg.to_string())
        );
        assert_eq!(r.json()["reason"], "BadRequest");
    }
}

#[tokio::test]
async fn compaction_gives_410_for_exact_and_continue() {
    let env = start().await;
    let rvs = five(&env).await;
    let p1 = env.get(&format!("{CMS}?limit=2")).await.json();
    let tok = p1["metadata"]["continue"].as_str().expect("token").to_string();
    env.cm("default", "f6").await;
    env.sim.compact(None);
    let r = env.get(&format!("{CMS}?resourceVersion={}&resourceVersionMatch=Exact", rvs[2])).await;
    assert_eq!(r.code(), 410);
    assert_eq!(
        r.text(),
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"The resourceVersion for the provided list is too old.\",\"reason\":\"Expired\",\"code\":410}\n"
    );
    let r = env.get(&format!("{CMS}?resourceVersion={}&limit=1", rvs[2])).await;
    assert_eq!(r.code(), 410);
    let r = env.get(&format!("{CMS}?limit=2&continue={tok}")).await;
    assert_eq!(r.code(), 410);
    let s = r.json();
    assert_eq!(s["reason"], "Expired");
    assert!(s["message"].as_str().expect("msg").starts_with("The provided continue parameter is too old"));
    let new_tok = s["metadata"]["continue"].as_str().expect("inconsistent token");
    assert_eq!(token_json(new_tok), json!({"v": "meta.k8s.io/v1", "rv": -1, "start": "f2\u{0}"}));
    let rest = env.get(&format!("{CMS}?limit=10&continue={new_tok}")).await.json();
    assert_eq!(names(&rest), ["f3", "f4", "f5", "f6"]);
    // The compacted revision itself is still readable.
    let c = env.sim.revision();
    let l = env.get(&format!("{CMS}?resourceVersion={c}&resourceVersionMatch=Exact")).await;
    assert_eq!(l.code(), 200);
}

#[tokio::test]
async fn future_rv_waits_then_504() {
    let env = start().await;
    let future = env.sim.revision() + 100;
    for q in [
        format!("resourceVersion={future}"),
        format!("resourceVersion={future}&resourceVersionMatch=NotOlderThan"),
        format!("resourceVersion={future}&resourceVersionMatch=Exact"),
    ] {
        let r = env.get(&format!("{CMS}?{q}")).await;
        assert_eq!(r.code(), 504, "{q}");
        assert_eq!(r.headers["retry-after"], "1");
        let s = r.json();
        assert_eq!(
            s["message"],
            format!("Timeout: Too large resource version: {future}, current: {}", env.sim.revision())
        );
        assert_eq!(s["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
        assert_eq!(s["details"]["retryAfterSeconds"], 1);
    }
    // A revision reached while waiting is served.
    let next = env.sim.revision() + 1;
    let path = format!("{CMS}?resourceVersion={next}");
    let (r, _) = tokio::join!(env.get(&path), env.cm("default", "late"));
    assert_eq!(r.code(), 200, "{}", r.text());
    assert_eq!(names(&r.json()), ["late"]);
}

#[tokio::test]
async fn pages_never_show_later_writes() {
    let env = start().await;
    for i in 0..40 {
        env.cm("default", &format!("c{i:02}")).await;
    }
    let first = env.get(&format!("{CMS}?limit=3")).await.json();
    let first_rv = rv_of(&first);
    let writer = async {
        for i in 0..40 {
            env.cm("default", &format!("c{i:02}x")).await;
            env.sim.delete("configmaps", Some("default"), &format!("c{i:02}")).expect("delete");
        }
    };
    let reader = async {
        let mut seen = names(&first);
        let mut tok = first["metadata"]["continue"].as_str().expect("token").to_string();
        loop {
            let p = env.get(&format!("{CMS}?limit=3&continue={tok}")).await.json();
            assert_eq!(rv_of(&p), first_rv, "every page at the first page's revision");
            seen.extend(names(&p));
            match p["metadata"]["continue"].as_str() {
                Some(t) => tok = t.to_string(),
                None => break,
            }
            tokio::task::yield_now().await;
        }
        seen
    };
    let (_, seen) = tokio::join!(writer, reader);
    let expected: Vec<String> = (0..40).map(|i| format!("c{i:02}")).collect();
    assert_eq!(seen, expected, "the snapshot of the first page, nothing created later");
}

#[tokio::test]
async fn selectors_with_limit_and_non_recursive_reads() {
    let env = start().await;
    for (n, l) in [("a", "x"), ("b", "y"), ("foo", "x"), ("foobar", "y")] {
        let r = env.post(CMS, json!({"metadata": {"name": n, "labels": {"l": l}}})).await;
        assert_eq!(r.code(), 201);
    }
    let l = env.get(&format!("{CMS}?labelSelector=l%3Dx&limit=1")).await.json();
    assert_eq!(names(&l), ["a"]);
    assert!(l["metadata"]["continue"].is_string());
    assert!(l["metadata"].get("remainingItemCount").is_none(), "no count with a selector");
    // A full page is followed by a token even when nothing later matches.
    let l = env
        .get(&format!(
            "{CMS}?labelSelector=l%3Dy&limit=1&continue={}",
            l["metadata"]["continue"].as_str().expect("t")
        ))
        .await
        .json();
    assert_eq!(names(&l), ["b"]);
    assert!(l["metadata"]["continue"].is_string());
    // metadata.name=foo is a single-key read: no foobar, no token.
    let l = env.get(&format!("{CMS}?fieldSelector=metadata.name%3Dfoo&limit=1")).await.json();
    assert_eq!(names(&l), ["foo"]);
    assert!(l["metadata"].get("continue").is_none());
    assert_eq!(rv_of(&l), env.sim.revision());
    let l = env
        .get("/api/v1/configmaps?fieldSelector=metadata.namespace%3Ddefault,metadata.name%3Dnone")
        .await
        .json();
    assert_eq!(names(&l).len(), 0);
    assert_eq!(l["items"], json!([]));
    let r = env.get(&format!("{CMS}?fieldSelector=data.x%3D1")).await;
    assert_eq!(
        (r.code(), r.json()["message"].clone()),
        (
            400,
            json!("\"data.x\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")
        )
    );
    let r = env.get("/api/v1/pods?fieldSelector=spec.foo%3D1").await;
    assert_eq!(r.json()["message"], "field label not supported: spec.foo");
    let r = env.get(&format!("{CMS}?labelSelector=a%20in%20(")).await;
    assert_eq!(r.code(), 400);
}

#[tokio::test]
async fn key_order_is_storage_byte_order() {
    let env = start().await;
    env.ns("kube").await;
    env.ns("kube-a").await;
    env.cm("kube", "z").await;
    env.cm("kube-system", "a").await;
    env.cm("kube-a", "m").await;
    let l = env.get("/api/v1/configmaps").await.json();
    let got: Vec<String> = l["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            format!(
                "{}/{}",
                i["metadata"]["namespace"].as_str().expect("ns"),
                i["metadata"]["name"].as_str().expect("n")
            )
        })
        .collect();
    assert_eq!(got, ["kube-a/m", "kube-system/a", "kube/z"]);
    // Cluster-wide tokens carry namespace/name.
    let l = env.get("/api/v1/configmaps?limit=1").await.json();
    assert_eq!(token_json(l["metadata"]["continue"].as_str().expect("t"))["start"], "/kube-a/m\u{0}");
}

#[tokio::test]
async fn wire_format_pretty_compact_gzip() {
    let env = start().await;
    let r =
        env.send(Method::GET, "/api/v1/namespaces/default/pods", None, &[("user-agent", "curl/8.5.0")]).await;
    let rv = env.sim.revision();
    assert_eq!(
        r.text(),
        format!(
            "{{\n  \"kind\": \"PodList\",\n  \"apiVersion\": \"v1\",\n  \"metadata\": {{\n    \"resourceVersion\": \"{rv}\"\n  }},\n  \"items\": []\n}}"
        )
    );
    let r = env.get("/api/v1/namespaces/default/pods").await;
    assert_eq!(
        r.text(),
        format!(
            "{{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"{rv}\"}},\"items\":[]}}\n"
        )
    );
    assert_eq!(r.headers["content-type"], "application/json");
    // Large responses are gzipped only for the exact token.
    let big = "x".repeat(4096);
    for i in 0..40 {
        let r = env.post(CMS, json!({"metadata": {"name": format!("big{i}")}, "data": {"v": big}})).await;
        assert_eq!(r.code(), 201);
    }
    let r = env.send(Method::GET, CMS, None, &[("accept-encoding", "gzip")]).await;
    assert_eq!(r.headers["content-encoding"], "gzip");
    let mut d = flate2::read::GzDecoder::new(&r.body[..]);
    let mut s = String::new();
    std::io::Read::read_to_string(&mut d, &mut s).expect("gunzip");
    assert_eq!(names(&serde_json::from_str(&s).expect("json")).len(), 40);
    let r = env.send(Method::GET, CMS, None, &[("accept-encoding", "gzip;q=1.0")]).await;
    assert!(r.headers.get("content-encoding").is_none());
    let r = env.send(Method::GET, &format!("{CMS}?limit=1"), None, &[("accept-encoding", "gzip")]).await;
    assert!(r.headers.get("content-encoding").is_none(), "small responses are not compressed");
}

#[tokio::test]
async fn custom_resource_lists_keep_type_meta_and_sort_keys() {
    let env = start().await;
    let r = env.post("/apis/example.com/v1/namespaces/default/widgets", json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"b": 1, "a": 2}})).await;
    assert_eq!(r.code(), 201, "{}", r.text());
    assert!(r.text().starts_with(
        "{\"apiVersion\":\"example.com/v1\",\"kind\":\"Widget\",\"metadata\":{\"creationTimestamp\""
    ));
    let l = env.get("/apis/example.com/v1/namespaces/default/widgets").await;
    let rv = env.sim.revision();
    assert!(l.text().starts_with(
        "{\"apiVersion\":\"example.com/v1\",\"items\":[{\"apiVersion\":\"example.com/v1\",\"kind\":\"Widget\""
    ));
    assert!(l.text().ends_with(&format!(
        "\"kind\":\"WidgetList\",\"metadata\":{{\"continue\":\"\",\"resourceVersion\":\"{rv}\"}}}}\n"
    )));
    let g = env.post("/apis/example.com/v1/gadgets", json!({"metadata": {"name": "g"}})).await;
    assert_eq!(g.code(), 201);
    assert!(g.json()["metadata"].get("namespace").is_none());
    let r =
        env.post("/apis/example.com/v1/namespaces/default/gadgets", json!({"metadata": {"name": "g"}})).await;
    assert_eq!(r.code(), 404);
}
