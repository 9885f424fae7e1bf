//! `--auth=delegated` in front of a real kube-apiserver 1.36 with RBAC: every read of a matrix (users and a
//! group allowed in one namespace and denied in another, cluster-wide reads, secrets, a service account's
//! token, client certificates, impersonation) answered through kache as the apiserver answers it directly —
//! the same status, and for refusals the same Status body byte for byte. kache authenticates with
//! TokenReview and authorizes reads from memory with SubjectAccessReview against the real apiserver.
//! `chain`: the same matrix through a kache behind a kache; `tokens`: expired and revoked service-account
//! tokens.

mod chain;
mod tokens;

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::json;

use common::Resp;
use common::cluster::Cluster;
use common::real::Endpoint;
use kache::app::Kache;

struct Fixture {
    cluster: Arc<Cluster>,
    kache: Kache,
    dir: tempfile::TempDir,
}

async fn fixture() -> Option<Fixture> {
    let cluster = tokio::task::spawn_blocking(Cluster::shared).await.expect("cluster start")?;
    let kache = cluster.start_kache(|config| cluster.delegated(config)).await;
    Some(Fixture { cluster, kache, dir: tempfile::tempdir().expect("temp dir") })
}

impl Fixture {
    /// The apiserver and kache, each reached with the credentials of `kubeconfig` (its server replaced).
    async fn sides(&self, name: &str, kubeconfig: &Path) -> (Endpoint, Endpoint) {
        self.sides_via(name, kubeconfig, &self.kache.url()).await
    }

    /// The apiserver and the kache at `front` (which serves the cluster CA's certificate), each reached with
    /// the credentials of `kubeconfig`.
    async fn sides_via(&self, name: &str, kubeconfig: &Path, front: &str) -> (Endpoint, Endpoint) {
        let via = self.kubeconfig_via(name, kubeconfig, front);
        (
            Endpoint::from_kubeconfig("kube-apiserver", kubeconfig).await,
            Endpoint::from_kubeconfig("kache", &via).await,
        )
    }

    /// `kubeconfig` (the apiserver's) with `front` as its server.
    fn kubeconfig_via(&self, name: &str, kubeconfig: &Path, front: &str) -> PathBuf {
        let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
        let via = self.dir.path().join(format!("{name}.kubeconfig"));
        std::fs::write(&via, text.replace(self.cluster.url(), front)).expect("write kubeconfig");
        via
    }

    /// A service-account token of `namespace/name` from a TokenRequest with `spec` (the admin asks).
    async fn request_token(&self, namespace: &str, name: &str, spec: serde_json::Value) -> String {
        let admin = Endpoint::from_kubeconfig("kube-apiserver", &self.cluster.admin_kubeconfig()).await;
        let path = format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token");
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
        let resp = admin.write(Method::POST, &path, "application/json", &body).await;
        assert_eq!(resp.status, StatusCode::CREATED, "POST {path}: {}", String::from_utf8_lossy(&resp.body));
        resp.json()["status"]["token"].as_str().expect("a token").to_owned()
    }

    /// A kubeconfig with a client certificate for user `user` (no groups), signed by the cluster's CA with
    /// `openssl`, for the apiserver.
    fn certificate_kubeconfig(&self, user: &str) -> PathBuf {
        let pki = self.cluster.dir().join("pki");
        let file = |ext: &str| self.dir.path().join(format!("{user}-cert.{ext}"));
        let openssl = |args: &[&str]| {
            let out = std::process::Command::new("openssl").args(args).output().expect("openssl runs");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let (key, csr, crt, ext) = (file("key"), file("csr"), file("crt"), file("ext"));
        let path = |p: &Path| p.to_str().expect("a UTF-8 path").to_owned();
        std::fs::write(&ext, "extendedKeyUsage=clientAuth\n").expect("write extensions");
        let subject = format!("/CN={user}");
        openssl(&[
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &path(&key),
            "-subj",
            &subject,
            "-out",
            &path(&csr),
        ]);
        let (ca, ca_key) = (path(&pki.join("ca.crt")), path(&pki.join("ca.key")));
        openssl(&[
            "x509",
            "-req",
            "-in",
            &path(&csr),
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-set_serial",
            "4242",
            "-days",
            "1",
            "-extfile",
            &path(&ext),
            "-out",
            &path(&crt),
        ]);
        let kubeconfig = self.dir.path().join(format!("{user}-cert-direct.kubeconfig"));
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{}\", certificate-authority: \"{ca}\"}}}}]\n\
                 users: [{{name: u, user: {{client-certificate: \"{}\", client-key: \"{}\"}}}}]\n\
                 contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n",
                self.cluster.url(),
                path(&crt),
                path(&key)
            ),
        )
        .expect("write kubeconfig");
        kubeconfig
    }

    /// A kubeconfig with `token` (and the cluster's CA) for the apiserver.
    fn token_kubeconfig(&self, name: &str, token: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{name}-direct.kubeconfig"));
        let ca = self.cluster.dir().join("pki/ca.crt");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{}\", certificate-authority: \"{}\"}}}}]\n\
                 users: [{{name: u, user: {{token: \"{token}\"}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n\
                 current-context: c\n",
                self.cluster.url(),
                ca.display()
            ),
        )
        .expect("write kubeconfig");
        path
    }
}

/// The reads of the matrix: RV=0 lists and gets kache answers from memory, a consistent get it forwards.
const READS: [&str; 9] = [
    "/api/v1/namespaces/team-a/pods?resourceVersion=0",
    "/api/v1/namespaces/team-b/pods?resourceVersion=0",
    "/api/v1/pods?resourceVersion=0",
    "/api/v1/namespaces/team-a/secrets?resourceVersion=0",
    "/api/v1/namespaces/team-b/secrets?resourceVersion=0",
    "/api/v1/namespaces/team-a/configmaps/web-config?resourceVersion=0",
    "/api/v1/namespaces/team-c/configmaps/web-config",
    "/api/v1/nodes?resourceVersion=0",
    "/apis/apps/v1/namespaces/team-b/deployments?resourceVersion=0",
];

/// Status equal; refusals byte for byte; lists with the same item names.
fn check(diffs: &mut Vec<String>, who: &str, path: &str, a: &Resp, v: &Resp) {
    if a.status != v.status {
        diffs.push(format!(
            "{who} {path}: kube-apiserver {} kache {}: {}",
            a.status,
            v.status,
            String::from_utf8_lossy(&v.body)
        ));
    } else if a.status != StatusCode::OK && a.body != v.body {
        diffs.push(format!(
            "{who} {path} ({}): kube-apiserver {} / kache {}",
            a.status,
            String::from_utf8_lossy(&a.body),
            String::from_utf8_lossy(&v.body)
        ));
    } else if a.status == StatusCode::OK {
        let names = |r: &Resp| {
            let v = r.json();
            let mut n: Vec<String> = match v["items"].as_array() {
                Some(items) => {
                    items.iter().map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_owned()).collect()
                }
                None => vec![v["metadata"]["name"].as_str().unwrap_or("").to_owned()],
            };
            n.sort();
            n
        };
        if names(a) != names(v) {
            diffs.push(format!("{who} {path}: different objects"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_matrix_answers_as_the_apiserver() {
    let _one = common::cluster::one_at_a_time().await;
    let Some(f) = fixture().await else { return };
    let diffs = read_matrix(&f, &f.kache.url()).await;
    assert!(f.kache.stats().memory() > 0, "allowed reads were served from memory");
    assert!(diffs.is_empty(), "{} differences:\n{}", diffs.len(), diffs.join("\n"));
}

/// Every read of the matrix through the kache at `front` and directly: the differences.
async fn read_matrix(f: &Fixture, front: &str) -> Vec<String> {
    let mut diffs = Vec::new();
    // Users of the static token file, the admin's client certificate, and a service account's token.
    let admin = f.cluster.admin_kubeconfig();
    let sa_token = f.request_token("team-a", "reader", json!({"expirationSeconds": 3600})).await;
    let mut users: Vec<(String, PathBuf)> = vec![("kubernetes-admin (certificate)".into(), admin.clone())];
    for user in ["ADMIN_TOKEN", "ALICE", "BOB", "CAROL", "DAVE"] {
        users.push((user.to_lowercase(), PathBuf::from(f.cluster.var(&format!("KUBE_{user}_KUBECONFIG")))));
    }
    // A certificate user with no rights of their own: through a chain, B forwards them to A with its own
    // credentials (the admin's) and `Impersonate-User`.
    users.push(("dave (certificate)".into(), f.certificate_kubeconfig("dave")));
    users.push(("team-a/reader (service account)".into(), f.token_kubeconfig("reader", &sa_token)));
    users.push(("no such token".into(), f.token_kubeconfig("bogus", "not-a-valid-token")));
    for (who, kubeconfig) in &users {
        let (api, via) = f.sides_via(&who.replace([' ', '(', ')', '/'], "_"), kubeconfig, front).await;
        for path in READS {
            let (a, v) = (api.get(path).await, via.get(path).await);
            check(&mut diffs, who, path, &a, &v);
        }
        // A watch: its status, and a refusal's body.
        let path = "/api/v1/namespaces/team-b/pods?watch=1&resourceVersion=0&timeoutSeconds=1";
        let (a, v) = (api.get(path).await, via.get(path).await);
        if a.status != v.status || (a.status != StatusCode::OK && a.body != v.body) {
            diffs.push(format!(
                "{who} {path}: kube-apiserver {} kache {}: {}",
                a.status,
                v.status,
                String::from_utf8_lossy(&v.body)
            ));
        }
    }
    // Impersonation (`kubectl --as`, `--as-group`): an admin acting as alice gets alice's answers; alice may
    // not impersonate.
    let admin_token = PathBuf::from(f.cluster.var("KUBE_ADMIN_TOKEN_KUBECONFIG"));
    let alice = PathBuf::from(f.cluster.var("KUBE_ALICE_KUBECONFIG"));
    for (who, kubeconfig, headers) in [
        ("admin as alice", &admin_token, vec![("impersonate-user", "alice")]),
        (
            "admin as carol's group",
            &admin_token,
            vec![("impersonate-user", "someone"), ("impersonate-group", "kache:readers")],
        ),
        ("alice as bob", &alice, vec![("impersonate-user", "bob")]),
    ] {
        let (api, via) = f.sides_via(&who.replace(' ', "_"), kubeconfig, front).await;
        for path in READS {
            let (a, v) = (api.get_with(path, &headers).await, via.get_with(path, &headers).await);
            check(&mut diffs, who, path, &a, &v);
        }
    }
    diffs
}

/// A client presenting both a client certificate and a bearer token is the certificate's user, as the
/// apiserver's authenticator chain decides (the certificate authenticator runs before the token ones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_and_a_token_authenticate_as_the_certificate() {
    let _one = common::cluster::one_at_a_time().await;
    let Some(f) = fixture().await else { return };
    let pki = f.cluster.dir().join("pki");
    let alice_token = f.cluster.var("KUBE_ALICE_TOKEN").to_owned();
    let both = f.dir.path().join("both.kubeconfig");
    std::fs::write(
        &both,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{}\", certificate-authority: \"{}\"}}}}]\n\
             users: [{{name: u, user: {{token: \"{alice_token}\", client-certificate: \"{}\", client-key: \"{}\"}}}}]\n\
             contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n",
            f.cluster.url(),
            pki.join("ca.crt").display(),
            pki.join("admin.crt").display(),
            pki.join("admin.key").display()
        ),
    )
    .expect("write kubeconfig");
    let (api, via) = f.sides("both", &both).await;
    let mut diffs = Vec::new();
    for path in [
        "/api/v1/namespaces/kube-system/secrets?resourceVersion=0",
        "/api/v1/namespaces/team-b/pods?resourceVersion=0",
    ] {
        let (a, v) = (api.get(path).await, via.get(path).await);
        assert_eq!(
            a.status,
            StatusCode::OK,
            "the apiserver takes the certificate's user: {}",
            String::from_utf8_lossy(&a.body)
        );
        check(&mut diffs, "certificate and token", path, &a, &v);
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// `kache demo --cluster DIR` in front of the running cluster: the kubeconfig it writes reaches kache as the
/// cluster's users, and kubectl through it answers each user as the apiserver does (alice reads team-a and is
/// refused team-b, dave is refused secrets), with the same words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_demo_answers_each_user_as_the_apiserver() {
    let Some(cluster) = tokio::task::spawn_blocking(Cluster::shared).await.expect("cluster start") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("demo.kubeconfig");
    let mut demo = std::process::Command::new(env!("CARGO_BIN_EXE_kache"))
        .arg("demo")
        .arg("--cluster")
        .arg(cluster.dir())
        .args([
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
            "--resources",
            "pods,secrets,configmaps",
        ])
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kache demo starts");
    let stdout = demo.stdout.take().expect("piped stdout");
    let output = tokio::task::spawn_blocking(move || {
        use std::io::BufRead as _;
        let mut out = String::new();
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            out.push_str(&line);
            out.push('\n');
            if line == "Ctrl-C stops the demo." {
                break;
            }
        }
        out
    })
    .await
    .expect("demo output");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _demo = Kill(demo);
    assert!(output.contains("Ctrl-C stops the demo."), "the demo did not come up:\n{output}");
    assert!(output.contains("--auth=delegated"), "{output}");

    let kubectl = |kc: &Path, context: Option<&str>, args: &[&str]| {
        let mut cmd = std::process::Command::new(cluster.var("KUBECTL"));
        cmd.arg("--kubeconfig").arg(kc);
        if let Some(c) = context {
            cmd.args(["--context", c]);
        }
        let out = cmd.args(args).output().expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let direct = |user: &str| PathBuf::from(cluster.var(&format!("KUBE_{user}_KUBECONFIG")));
    for (user, context, args) in [
        ("ALICE", "kache-demo-alice", ["get", "pods", "-n", "team-a", "-o", "name"]),
        ("ALICE", "kache-demo-alice", ["get", "pods", "-n", "team-b", "-o", "name"]),
        ("DAVE", "kache-demo-dave", ["get", "secrets", "-n", "team-a", "-o", "name"]),
        ("ADMIN_TOKEN", "kache-demo", ["get", "secrets", "-n", "team-a", "-o", "name"]),
    ] {
        let through = kubectl(&kubeconfig, Some(context), &args);
        let reference = kubectl(&direct(user), None, &args);
        assert_eq!(through, reference, "{context} {args:?}: through the demo's kache vs directly");
    }
    // The allowed read lists something, the refused one says so.
    assert!(
        kubectl(&kubeconfig, Some("kache-demo-alice"), &["get", "pods", "-n", "team-a", "-o", "name"])
            .1
            .contains("pod/")
    );
    assert!(
        kubectl(&kubeconfig, Some("kache-demo-alice"), &["get", "pods", "-n", "team-b"])
            .2
            .contains("forbidden")
    );
}
