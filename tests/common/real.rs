//! The real Kubernetes 1.36 apiservers the testbed builds from Go modules (`testbed/`) —
//! k8s.io/sample-apiserver (flunders and fischers; `testbed/apiserver/start.sh`) and the
//! CustomResourceDefinition apiserver (`start-crd.sh`), each on its own etcd — started and stopped with
//! their own scripts, and HTTP clients for them and for kache in front of them.
//!
//! The binaries are built by `testbed/build.sh`, which `scripts/install-test-deps.sh` runs (as `test.sh`
//! does first) and links at `target/testbed-bin`; no test builds them. Run state lives under the cargo
//! target dir; the guard stops exactly what it started when dropped, also when the test fails. Missing
//! binaries (or bash, curl, python3) skip the test, or fail it under `KACHE_REQUIRE_TOOLS=1` (see `tools`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::Resp;
use super::tools;
use kache::upstream::Upstream;
use serde_json::Value;

/// What start.sh, stop.sh and compact.sh run.
const NEEDED: [&str; 3] = ["bash", "curl", "python3"];
/// The tests of the one test binary start their apiservers one at a time: a port start.sh found free is
/// bound only later, so two concurrent runs may pick the same one. Held only while start.sh runs (a few
/// seconds).
static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// Bound on one whole response or one watch line: a hang guard, not a timing assertion. Generous: on two
/// cores the suite's heaviest tests run beside a cluster that has just started, and a read kache decides
/// from memory is bounded well below this by its cutoff (docs/consistency.md).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
/// What to do when the testbed's binaries are missing.
pub const BUILD_HINT: &str =
    "run scripts/install-test-deps.sh (test.sh does), which builds them with testbed/build.sh (needs Go)";

/// The directory of the testbed's binaries: `$TESTBED_BIN`, else `target/testbed-bin` (the link
/// `scripts/install-test-deps.sh` makes to `testbed/build.sh`'s output).
pub fn testbed_bin() -> PathBuf {
    match std::env::var_os("TESTBED_BIN") {
        Some(dir) => PathBuf::from(dir),
        None => target_dir().join("testbed-bin"),
    }
}

/// A binary of the testbed: `$ENV_VAR` when it names an existing file, else `NAME` in [`testbed_bin`];
/// `None` when it is not there.
pub fn testbed_tool(env_var: &str, name: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env_var).map(PathBuf::from).filter(|p| p.exists()) {
        return Some(p);
    }
    Some(testbed_bin().join(name)).filter(|p| p.is_file())
}

/// The directory holding start.sh, stop.sh, compact.sh.
pub fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testbed/apiserver")
}

/// The cargo target dir this test binary was built into (`target/debug/deps/<test>` → `target`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors().nth(3).map(PathBuf::from).expect("the test binary lives under the target dir")
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Which of the real apiservers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// k8s.io/sample-apiserver: flunders and fischers (`start.sh`).
    Sample,
    /// k8s.io/apiextensions-apiserver: CRDs and custom resources (`start-crd.sh`).
    Crd,
}

impl Flavor {
    fn script(self) -> &'static str {
        match self {
            Flavor::Sample => "start.sh",
            Flavor::Crd => "start-crd.sh",
        }
    }

    /// The testbed binaries its script runs.
    fn binaries(self) -> &'static [&'static str] {
        match self {
            Flavor::Sample => &["etcd", "sample-apiserver", "informer-check", "kube-proto"],
            Flavor::Crd => &["etcd", "crd-apiserver"],
        }
    }

    /// The prefix of the variables the script prints (`APISERVER_URL`, `CRD_APISERVER_URL`).
    fn prefix(self) -> &'static str {
        match self {
            Flavor::Sample => "",
            Flavor::Crd => "CRD_",
        }
    }
}

/// A running real apiserver; dropping it runs `stop.sh`.
pub struct RealApiserver {
    scripts: PathBuf,
    run_dir: PathBuf,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// A kubeconfig for it (insecure-skip-tls-verify, any token).
    pub kubeconfig: PathBuf,
    /// The client-go informer checker (printed by `start.sh` only).
    pub informer_check: Option<PathBuf>,
    /// The apiserver process [`RealApiserver::restart_apiserver`] started in place of start.sh's.
    restarted: std::sync::Mutex<Option<std::process::Child>>,
}

impl RealApiserver {
    /// Starts etcd and the sample apiserver in `<target>/real-apiserver/<name>`; `None` when the test must
    /// skip (after saying why; under `KACHE_REQUIRE_TOOLS=1` this panics instead).
    pub fn start(name: &str) -> Option<RealApiserver> {
        Self::start_flavor(Flavor::Sample, name)
    }

    /// As [`RealApiserver::start`], for either apiserver.
    pub fn start_flavor(flavor: Flavor, name: &str) -> Option<RealApiserver> {
        let scripts = scripts_dir();
        let bin = testbed_bin();
        if let Some(name) = flavor.binaries().iter().find(|b| !bin.join(b).is_file()) {
            tools::missing(&format!("the testbed's {name} is not built in {}: {BUILD_HINT}", bin.display()));
            return None;
        }
        if let Some(tool) = NEEDED.iter().find(|t| !on_path(t)) {
            tools::missing(&format!(
                "{tool} is not installed (testbed/apiserver's scripts need bash, curl, python3)"
            ));
            return None;
        }
        let run_dir = target_dir().join("real-apiserver").join(name);
        // A run killed before its guard dropped may have left servers behind, and start.sh would reuse them.
        stop(&scripts, &run_dir);
        let _ = std::fs::remove_dir_all(&run_dir);
        std::fs::create_dir_all(&run_dir).expect("create the run dir");
        // The guard exists before start.sh runs: whatever it started is stopped if it fails half-way.
        let mut api = RealApiserver {
            scripts,
            run_dir,
            url: String::new(),
            kubeconfig: PathBuf::new(),
            informer_check: None,
            restarted: std::sync::Mutex::new(None),
        };
        let out = {
            let _one_at_a_time = STARTING.lock().unwrap_or_else(|p| p.into_inner());
            Command::new("bash")
                .arg(api.scripts.join(flavor.script()))
                .arg(&api.run_dir)
                .env("TESTBED_BIN", &bin)
                .output()
                .expect("run start.sh")
        };
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{} {} failed: {stdout}{}\napiserver.log: {}",
            flavor.script(),
            api.run_dir.display(),
            String::from_utf8_lossy(&out.stderr),
            api.log_tail()
        );
        let var = |name: &str| {
            let name = format!("{}{name}", flavor.prefix());
            stdout.lines().find_map(|l| l.strip_prefix(name.as_str())?.strip_prefix('=')).map(str::to_owned)
        };
        let required = |name: &str| {
            var(name).unwrap_or_else(|| panic!("{} printed no {name}: {stdout}", flavor.script()))
        };
        api.url = required("APISERVER_URL");
        api.kubeconfig = PathBuf::from(required("APISERVER_KUBECONFIG"));
        api.informer_check = var("INFORMER_CHECK").map(PathBuf::from);
        Some(api)
    }

    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The apiserver's serving certificate and key (self-signed for 127.0.0.1): kache serves TLS with them.
    pub fn serving_cert(&self) -> (PathBuf, PathBuf) {
        (self.run_dir.join("certs/apiserver.crt"), self.run_dir.join("certs/apiserver.key"))
    }

    /// Compacts etcd at `revision` as kube-apiserver's compactor does (`compact.sh`).
    pub fn compact(&self, revision: u64) {
        let out = Command::new("bash")
            .arg(self.scripts.join("compact.sh"))
            .arg(&self.run_dir)
            .arg(revision.to_string())
            .output()
            .expect("run compact.sh");
        assert!(
            out.status.success(),
            "compact.sh {revision}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Restarts the apiserver process alone, as a rolling restart of a control plane does: etcd, its data
    /// and the port stay; the new process has a fresh watch cache (watches from before it get 410 Gone).
    /// Runs exactly the command line start.sh ran (read from `/proc`), so it needs Linux.
    pub async fn restart_apiserver(&self) {
        let pid_file = self.run_dir.join("apiserver.pid");
        let pid = std::fs::read_to_string(&pid_file).expect("apiserver.pid").trim().to_owned();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("the apiserver's command line");
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let mut previous = self.restarted.lock().unwrap_or_else(|p| p.into_inner()).take();
        match previous.as_mut() {
            // One this guard started: kill and reap it.
            Some(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            None => {
                // As stop.sh: TERM, then KILL if it has not exited within 5 s. A process that exited but
                // was not reaped yet (a zombie under whichever process adopted it) counts as exited.
                let exited = |pid: &str| {
                    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
                        stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'))
                    })
                };
                let status = Command::new("kill").arg(&pid).status().expect("kill runs");
                assert!(status.success(), "kill {pid}");
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                while !exited(&pid) && std::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                if !exited(&pid) {
                    let _ = Command::new("kill").args(["-9", &pid]).status();
                }
                super::eventually("the old apiserver exits", RESPONSE_TIMEOUT, || {
                    let gone = exited(&pid);
                    async move { gone }
                })
                .await;
            }
        }
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.run_dir.join("apiserver.log"))
            .expect("apiserver.log");
        let child = Command::new(&args[0])
            .args(&args[1..])
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("the apiserver starts again");
        std::fs::write(&pid_file, child.id().to_string()).expect("apiserver.pid");
        *self.restarted.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
        let api = Endpoint::from_kubeconfig("apiserver", &self.kubeconfig).await;
        super::eventually("the restarted apiserver is ready", Duration::from_secs(90), || {
            let api = api.clone();
            async move {
                let req = Request::get("/readyz").body(kache::front::body::empty()).expect("request");
                matches!(api.client.send(req).await, Ok(r) if r.status() == StatusCode::OK)
            }
        })
        .await;
    }

    /// The last lines of the apiserver's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.run_dir.join("apiserver.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for RealApiserver {
    fn drop(&mut self) {
        // A restarted apiserver is this process's child: reap it, so stop.sh does not wait on a zombie.
        if let Some(mut child) = self.restarted.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(self.run_dir.join("apiserver.pid"));
        }
        stop(&self.scripts, &self.run_dir);
    }
}

fn stop(scripts: &Path, run_dir: &Path) {
    if run_dir.is_dir() {
        let _ = Command::new("bash").arg(scripts.join("stop.sh")).arg(run_dir).status();
    }
}

/// A kubeconfig for `server` that skips TLS verification and carries no credentials.
pub fn write_kubeconfig(path: &Path, server: &str) {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{server}\", \
         insecure-skip-tls-verify: true}}}}]\nusers: [{{name: u, user: {{}}}}]\n\
         contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n"
    );
    std::fs::write(path, text).expect("write kubeconfig");
}

// === Endpoint ===

/// One side of a differential test: the apiserver directly, or kache. Both are reached the same way, with
/// kache's own upstream client (HTTP/2 over TLS, built from a kubeconfig).
#[derive(Clone)]
pub struct Endpoint {
    pub name: &'static str,
    client: Upstream,
}

impl Endpoint {
    pub async fn from_kubeconfig(name: &'static str, kubeconfig: &Path) -> Endpoint {
        kache::upstream::install_crypto_provider();
        let client = Upstream::from_kubeconfig(Some(kubeconfig)).await.expect("client from kubeconfig");
        Endpoint { name, client }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&serde_json::Value>,
    ) -> http::Response<Incoming> {
        let mut req = Request::builder().method(method).uri(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let body = match body {
            Some(v) => {
                if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
                    req = req.header(header::CONTENT_TYPE, "application/json");
                }
                kache::front::body::full(serde_json::to_vec(v).expect("JSON"))
            }
            None => kache::front::body::empty(),
        };
        let req = req.body(body).expect("request");
        tokio::time::timeout(RESPONSE_TIMEOUT, self.client.send(req))
            .await
            .unwrap_or_else(|_| panic!("{}: no response to {path} within {RESPONSE_TIMEOUT:?}", self.name))
            .unwrap_or_else(|e| panic!("{}: {path}: {e}", self.name))
    }

    /// A request that may fail (the upstream restarting): `None` when no whole response came.
    pub async fn try_request(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: &serde_json::Value,
    ) -> Option<Resp> {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::CONTENT_TYPE, content_type)
            .body(kache::front::body::full(serde_json::to_vec(body).expect("JSON")))
            .expect("request");
        let resp = tokio::time::timeout(RESPONSE_TIMEOUT, self.client.send(req)).await.ok()?.ok()?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let body =
            tokio::time::timeout(RESPONSE_TIMEOUT, resp.into_body().collect()).await.ok()?.ok()?.to_bytes();
        Some(Resp { status, headers, body })
    }

    /// A GET that may fail (the upstream restarting): `None` when no whole response came.
    pub async fn try_get(&self, path: &str) -> Option<Resp> {
        let req = Request::builder().uri(path).body(kache::front::body::empty()).expect("request");
        let resp = tokio::time::timeout(RESPONSE_TIMEOUT, self.client.send(req)).await.ok()?.ok()?;
        let (status, headers) = (resp.status(), resp.headers().clone());
        let body =
            tokio::time::timeout(RESPONSE_TIMEOUT, resp.into_body().collect()).await.ok()?.ok()?.to_bytes();
        Some(Resp { status, headers, body })
    }

    /// A request, its response read whole.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&serde_json::Value>,
    ) -> Resp {
        let resp = self.send(method, path, headers, body).await;
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = tokio::time::timeout(RESPONSE_TIMEOUT, resp.into_body().collect())
            .await
            .unwrap_or_else(|_| {
                panic!("{}: body of {path} not complete within {RESPONSE_TIMEOUT:?}", self.name)
            })
            .unwrap_or_else(|e| panic!("{}: body of {path}: {e}", self.name))
            .to_bytes();
        Resp { status, headers, body }
    }

    /// A write with a JSON body of `content_type` (`application/json`, `application/merge-patch+json`).
    pub async fn write(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: &serde_json::Value,
    ) -> Resp {
        self.request(method, path, &[("content-type", content_type)], Some(body)).await
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.request(Method::GET, path, &[], None).await
    }

    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        self.request(Method::GET, path, headers, None).await
    }

    /// Starts a watch; its lines are read with [`Watch::line`].
    pub async fn watch(&self, path: &str, headers: &[(&str, &str)]) -> Watch {
        let resp = self.send(Method::GET, path, headers, None).await;
        let status = resp.status();
        let headers = resp.headers().clone();
        Watch {
            side: self.name,
            path: path.to_owned(),
            status,
            headers,
            body: resp.into_body(),
            buf: BytesMut::new(),
        }
    }
}

/// A watch response being read line by line (one JSON event per line).
pub struct Watch {
    side: &'static str,
    path: String,
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: Incoming,
    buf: BytesMut,
}

impl Watch {
    /// The next line (without its newline); `None` when the stream ended.
    pub async fn line(&mut self) -> Option<Bytes> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line = self.buf.split_to(i + 1);
                return Some(line.freeze().slice(..i));
            }
            let frame =
                tokio::time::timeout(RESPONSE_TIMEOUT, self.body.frame()).await.unwrap_or_else(|_| {
                    panic!("{}: no watch event on {} within {RESPONSE_TIMEOUT:?}", self.side, self.path)
                });
            match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => panic!("{}: watch {} broke: {e}", self.side, self.path),
                None if self.buf.is_empty() => return None,
                None => return Some(self.buf.split().freeze()),
            }
        }
    }

    /// The next length-prefixed frame of a protobuf watch (`;stream=watch`: a 4-byte big-endian length,
    /// then a `WatchEvent`), without its length; `None` when the stream ended.
    pub async fn frame(&mut self) -> Option<Bytes> {
        loop {
            if self.buf.len() >= 4 {
                let n = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
                if self.buf.len() >= 4 + n {
                    return Some(self.buf.split_to(4 + n).freeze().slice(4..));
                }
            }
            let frame =
                tokio::time::timeout(RESPONSE_TIMEOUT, self.body.frame()).await.unwrap_or_else(|_| {
                    panic!("{}: no watch frame on {} within {RESPONSE_TIMEOUT:?}", self.side, self.path)
                });
            match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => panic!("{}: watch {} broke: {e}", self.side, self.path),
                None => return None,
            }
        }
    }

    /// Everything up to the end of the stream (an error answer's body).
    pub async fn rest(&mut self) -> Bytes {
        let mut out = BytesMut::new();
        while let Some(line) = self.line().await {
            out.extend_from_slice(&line);
            out.extend_from_slice(b"\n");
        }
        out.freeze()
    }

    /// The next `n` lines; panics when the stream ends first.
    pub async fn lines(&mut self, n: usize) -> Vec<Bytes> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            match self.line().await {
                Some(line) => out.push(line),
                None => panic!("{}: watch {} ended after {} of {n} lines", self.side, self.path, out.len()),
            }
        }
        out
    }
}

/// An object's `metadata.resourceVersion` as a number.
pub fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no rv: {v}"))
}

/// Creates `obj` at `path` directly on the apiserver; returns its resourceVersion.
pub async fn create(api: &Endpoint, path: &str, obj: &Value) -> u64 {
    let r = api.write(Method::POST, path, "application/json", obj).await;
    assert_eq!(r.status, StatusCode::CREATED, "POST {path}: {}", String::from_utf8_lossy(&r.body));
    rv_of(&r.json())
}
