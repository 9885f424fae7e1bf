//! Test helpers: a sim on an ephemeral port and a small hyper client.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kache_sim::{Crd, Sim, SimBuilder, SimHandle};
use serde_json::{Value, json};

/// How long a test waits for an event that must arrive (generous: CI machines are slow).
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Env {
    pub sim: SimHandle,
    http: Client<HttpConnector, Full<Bytes>>,
}

pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text()))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn code(&self) -> u16 {
        self.status.as_u16()
    }
}

pub fn builder() -> SimBuilder {
    Sim::builder()
        .crd(Crd::parse("example.com/v1/Widget/widgets/Namespaced").expect("crd"))
        .crd(Crd::parse("example.com/v1/Gadget/gadgets/Cluster").expect("crd"))
        .wait_timeout(Duration::from_millis(300))
        .compaction_interval(None)
}

pub async fn start() -> Env {
    start_with(builder()).await
}

pub async fn start_with(b: SimBuilder) -> Env {
    let sim = b.start().await.expect("sim starts");
    let http = Client::builder(TokioExecutor::new()).build_http();
    Env { sim, http }
}

impl Env {
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut b = Request::builder().method(method).uri(format!("{}{}", self.sim.url(), path));
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let has_ct = headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
        if body.is_some() && !has_ct {
            b = b.header("content-type", "application/json");
        }
        let data = body.map(|v| Bytes::from(serde_json::to_vec(v).expect("json"))).unwrap_or_default();
        let r = self.http.request(b.body(Full::new(data)).expect("request")).await.expect("response");
        let (parts, body) = r.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Resp { status: parts.status, headers: parts.headers, body }
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send(Method::GET, path, None, &[]).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Resp {
        self.send(Method::POST, path, Some(&body), &[]).await
    }

    /// Creates a configmap in `ns` and returns its resourceVersion.
    pub async fn cm(&self, ns: &str, name: &str) -> u64 {
        let r = self
            .post(&format!("/api/v1/namespaces/{ns}/configmaps"), json!({"metadata": {"name": name}}))
            .await;
        assert_eq!(r.code(), 201, "{}", r.text());
        rv_of(&r.json())
    }

    pub async fn ns(&self, name: &str) {
        let r = self.post("/api/v1/namespaces", json!({"metadata": {"name": name}})).await;
        assert_eq!(r.code(), 201, "{}", r.text());
    }

    /// Opens a watch stream.
    pub async fn watch(&self, path: &str) -> Watch {
        let (ct, w) = self.stream(path).await;
        assert_eq!(ct, "application/json");
        w
    }

    /// Opens any streaming response (200 expected); returns its content type.
    pub async fn stream(&self, path: &str) -> (String, Watch) {
        let req = Request::builder()
            .uri(format!("{}{}", self.sim.url(), path))
            .body(Full::new(Bytes::new()))
            .expect("request");
        let r = self.http.request(req).await.expect("response");
        assert_eq!(r.status(), 200, "stream {path}");
        let ct = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        (ct, Watch { body: r.into_body(), buf: Vec::new() })
    }
}

pub fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no rv in {v}"))
}

pub fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {list}"))
        .iter()
        .map(|i| i["metadata"]["name"].as_str().expect("name").to_string())
        .collect()
}

pub struct Watch {
    body: Incoming,
    buf: Vec<u8>,
}

impl Watch {
    /// The next event line as raw text, or None when the stream ended.
    pub async fn next_line(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(String::from_utf8_lossy(&line[..line.len() - 1]).into_owned());
            }
            let frame =
                tokio::time::timeout(EVENT_TIMEOUT, self.body.frame()).await.expect("event within timeout");
            match frame {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        self.buf.extend_from_slice(&d);
                    }
                }
                _ => return None,
            }
        }
    }

    /// The next event, parsed.
    pub async fn next(&mut self) -> Value {
        let line = self.next_line().await.expect("stream still open");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad event line {line:?}: {e}"))
    }

    /// (type, name, rv) of the next event.
    pub async fn next_summary(&mut self) -> (String, String, u64) {
        let ev = self.next().await;
        let ty = ev["type"].as_str().expect("type").to_string();
        let name = ev["object"]["metadata"]["name"].as_str().unwrap_or("").to_string();
        (ty, name, rv_of(&ev["object"]))
    }

    /// Waits for the end of the stream.
    pub async fn end(&mut self) {
        assert_eq!(self.next_line().await, None, "stream should end");
    }
}
