//! `kache demo --cluster DIR`: kache in front of a real control plane (the testbed's `scripts/cluster.sh`),
//! with delegated authentication, and a kubeconfig whose contexts are the cluster's test users through kache
//! and the admin directly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use tokio::time::Instant;

use kache::app::{Kache, UpstreamSource};
use kache::auth::{AuthMode, AuthSettings};
use kache::front::server::TlsConfig;

use super::DemoArgs;

/// The script that starts a testbed cluster, relative to a checkout's root.
const CLUSTER_SCRIPT: &str = "scripts/cluster.sh";

/// The cluster's env file (`KEY=VALUE` lines; `%q`-quoted plain words).
fn read_env(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v.trim();
            let v = v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')).unwrap_or(v);
            (k.trim().to_string(), v.to_string())
        })
        .collect())
}

pub(super) async fn run(args: DemoArgs, dir: PathBuf) -> anyhow::Result<()> {
    let env_file = dir.join("env");
    if !env_file.exists() {
        if !Path::new(CLUSTER_SCRIPT).exists() {
            bail!(
                "{} holds no cluster and {CLUSTER_SCRIPT} is not here: run `{CLUSTER_SCRIPT} up {}` from kache's \
                 checkout (it needs Go to build the control plane once)",
                dir.display(),
                dir.display()
            );
        }
        println!(
            "starting a Kubernetes 1.36 cluster in {} ({} nodes; the first build of its binaries takes ~20 min)",
            dir.display(),
            args.nodes
        );
        let status = std::process::Command::new(CLUSTER_SCRIPT)
            .arg("up")
            .arg(&dir)
            .args(["--nodes", &args.nodes.to_string()])
            .status()
            .with_context(|| format!("running {CLUSTER_SCRIPT}"))?;
        if !status.success() {
            bail!("{CLUSTER_SCRIPT} up {} failed ({status}); its logs are in that directory", dir.display());
        }
    }
    let env = read_env(&env_file)?;
    let get = |k: &str| env.get(k).cloned().with_context(|| format!("{}: no {k}", env_file.display()));
    let (apiserver, admin_kc) = (get("KUBE_APISERVER_URL")?, get("KUBE_ADMIN_KUBECONFIG")?);

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| crate::bind_error("--listen", &args.listen.to_string(), &e))?;
    let metrics = crate::bind_metrics(&args.common.metrics_listen).await?;
    let mut config = args.common.clone().into_config(UpstreamSource::Kubeconfig(Some(admin_kc.into())))?;
    config.auth = AuthSettings { mode: AuthMode::Delegated, ..AuthSettings::default() };
    // TLS with the apiserver's own certificate (it names 127.0.0.1 and localhost; the kubeconfig trusts the
    // cluster's CA), and client certificates of that CA: kubectl sends no token over plain HTTP.
    if config.tls.is_none() {
        let pki = dir.join("pki");
        config.tls = Some(
            TlsConfig::with_client_ca(
                &pki.join("apiserver.crt"),
                &pki.join("apiserver.key"),
                &pki.join("ca.crt"),
            )
            .with_context(|| format!("the cluster's serving certificate in {}", pki.display()))?,
        );
    }
    let kache = Kache::start_with_metrics(config, listener, metrics).await?;
    let started = Instant::now();
    super::wait_synced(&kache).await;
    println!(
        "kache synced {} resources of {apiserver} in {:.1?}",
        kache.registry().statuses().len(),
        started.elapsed()
    );

    let kc = std::path::absolute(&args.kubeconfig_out).unwrap_or_else(|_| args.kubeconfig_out.clone());
    std::fs::write(&kc, kubeconfig(&kache.url(), &apiserver, &env)?)
        .with_context(|| format!("writing {}", kc.display()))?;
    println!();
    println!(
        "kache:      {} (--auth=delegated: the cluster's TokenReview and RBAC judge every read)",
        kache.url()
    );
    println!("upstream:   {apiserver} (context kache-demo-upstream: the admin, directly)");
    if let Some(m) = kache.metrics_url() {
        println!("metrics:    {m}/metrics   health: {m}/readyz?verbose");
    }
    println!("kubeconfig: {}", kc.display());
    println!(
        "users:      admin (context kache-demo), alice (views team-a), dave (no role): testbed/README.md"
    );
    println!();
    println!("Try (copy and paste into another terminal):");
    println!();
    for line in try_next(&kc.display().to_string(), &dir.display().to_string()) {
        println!("  {line}");
    }
    println!();
    println!("The cluster keeps running when the demo stops: {CLUSTER_SCRIPT} down {}", dir.display());
    println!("Ctrl-C stops the demo.");
    kache.run_until(crate::shutdown_signal()).await;
    Ok(())
}

fn try_next(kubeconfig: &str, dir: &str) -> Vec<String> {
    vec![
        format!("export KUBECONFIG={kubeconfig}"),
        "kubectl get nodes | head; kubectl get deploy,pods -n team-a".to_string(),
        "kubectl --context kache-demo-alice get pods -n team-a        # allowed by RBAC, from memory"
            .to_string(),
        "kubectl --context kache-demo-alice get pods -n team-b        # Forbidden, as the apiserver says it"
            .to_string(),
        "kubectl --context kache-demo-dave get secrets -A             # Forbidden".to_string(),
        "kubectl get pods -A -w --output-watch-events | head -20".to_string(),
        "kubectl scale deploy/web -n team-a --replicas=5              # writes are forwarded".to_string(),
        "time kubectl get --raw '/api/v1/pods?resourceVersion=0' | wc -c".to_string(),
        "time kubectl --context kache-demo-upstream get --raw '/api/v1/pods?resourceVersion=0' | wc -c"
            .to_string(),
        format!("scripts/cluster.sh down {dir}                             # when done"),
    ]
}

/// Contexts: kache-demo (admin's token), kache-demo-alice, kache-demo-dave (through kache), and
/// kache-demo-upstream (the admin's token, directly, verifying the cluster's CA).
fn kubeconfig(kache: &str, apiserver: &str, env: &BTreeMap<String, String>) -> anyhow::Result<String> {
    let token = |u: &str| {
        env.get(&format!("KUBE_{u}_TOKEN"))
            .cloned()
            .with_context(|| format!("the cluster's env has no KUBE_{u}_TOKEN"))
    };
    let ca = env.get("KUBE_CA").context("the cluster's env has no KUBE_CA")?;
    let (admin, alice, dave) = (token("ADMIN")?, token("ALICE")?, token("DAVE")?);
    Ok(format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kache-demo
  cluster:
    server: {kache}
    certificate-authority: {ca}
- name: kache-demo-upstream
  cluster:
    server: {apiserver}
    certificate-authority: {ca}
contexts:
- name: kache-demo
  context: {{cluster: kache-demo, user: admin, namespace: default}}
- name: kache-demo-alice
  context: {{cluster: kache-demo, user: alice, namespace: team-a}}
- name: kache-demo-dave
  context: {{cluster: kache-demo, user: dave, namespace: default}}
- name: kache-demo-upstream
  context: {{cluster: kache-demo-upstream, user: admin, namespace: default}}
current-context: kache-demo
users:
- name: admin
  user: {{token: {admin}}}
- name: alice
  user: {{token: {alice}}}
- name: dave
  user: {{token: {dave}}}
"
    ))
}
