//! Upstream from a kubeconfig or the in-cluster service account, via kube's `Config` and auth layers on
//! kache's own HTTP/2-capable client (kube's own client is HTTP/1.1 only: kube-client's `HttpsConnector`
//! negotiates no ALPN h2).

use std::path::{Path, PathBuf};
use std::sync::Once;

use hyper_rustls::{FixedServerNameResolver, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tower::ServiceBuilder;

use super::buffered::BufferedConnector;
use super::client::{
    Credentials, Dispatch, HttpService, POOL_IDLE_TIMEOUT, Upstream, UpstreamError, http_connector,
    parse_base,
};
use crate::front::body::BoxError;

/// HTTP/2 connections requests are spread over. kube-apiserver allows 250–1000 concurrent streams per
/// connection; four connections keep a few hundred watches clear of that limit and of head-of-line
/// blocking on one TCP stream.
pub const H2_POOL_SIZE: usize = 4;
/// HTTP/2 pings on upstream connections: a dead apiserver is noticed under idle watches.
const H2_KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);
const H2_KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// Installs aws-lc-rs as the process's rustls crypto provider (idempotent). Call at start-up: with two
/// providers compiled in, rustls cannot pick one by itself.
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Err means another provider was installed first; that one is used, which is fine.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    });
}

// === impl Upstream ===

impl Upstream {
    /// An upstream from a kubeconfig file; without a path, from `KUBECONFIG`, else `~/.kube/config`, else
    /// the in-cluster service account (kube's `Config::infer`).
    pub async fn from_kubeconfig(path: Option<&Path>) -> Result<Self, UpstreamError> {
        Self::from_kubeconfig_context(path, None).await
    }

    /// As [`Upstream::from_kubeconfig`], with the kubeconfig's context `context` instead of its current one.
    pub async fn from_kubeconfig_context(
        path: Option<&Path>,
        context: Option<&str>,
    ) -> Result<Self, UpstreamError> {
        install_crypto_provider();
        let config = load(path, context).await?;
        Self::from_kube_config(config).await
    }

    /// The same upstream as [`Upstream::from_kubeconfig`] (URL, CA, TLS settings) but without kache's
    /// credentials: clients' own `Authorization` passes through (k-sec: `--auth=delegated` forwards
    /// bearer-token clients' requests with their own tokens).
    pub(crate) async fn from_kubeconfig_without_credentials(
        path: Option<&Path>,
        context: Option<&str>,
    ) -> Result<Self, UpstreamError> {
        install_crypto_provider();
        let mut config = load(path, context).await?;
        config.auth_info = Default::default();
        Self::from_kube_config(config).await
    }

    /// An upstream from the in-cluster service account (token file re-read as it rotates, cluster CA).
    pub(crate) async fn in_cluster() -> Result<Self, UpstreamError> {
        install_crypto_provider();
        let config = kube::Config::incluster().map_err(|e| UpstreamError::Config(Box::new(e)))?;
        Self::from_kube_config(config).await
    }

    /// An upstream from a loaded kube `Config`.
    ///
    /// Exec credential plugins run synchronously while the TLS config and auth layer are built, so the build
    /// runs on the blocking pool.
    pub(crate) async fn from_kube_config(config: kube::Config) -> Result<Self, UpstreamError> {
        install_crypto_provider();
        tokio::task::spawn_blocking(move || build(&config))
            .await
            .map_err(|e| UpstreamError::Config(Box::new(e)))?
    }
}

/// What a person can do when no kubeconfig could be used.
const KUBECONFIG_HINT: &str = "pass --kubeconfig FILE (and --context NAME), set KUBECONFIG, or --upstream http://HOST:PORT for a plain upstream";

/// Loads the client configuration from `path` (else `KUBECONFIG`, `~/.kube/config`, the in-cluster service
/// account), with `context` instead of the current context when given. Errors say what was tried and what to
/// do next, once.
async fn load(path: Option<&Path>, context: Option<&str>) -> Result<kube::Config, UpstreamError> {
    let options = KubeConfigOptions { context: context.map(str::to_owned), ..KubeConfigOptions::default() };
    let fail = |what: String| UpstreamError::Config(what.into());
    match (path, context) {
        (Some(path), _) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| fail(format!("reading kubeconfig {}: {}; {KUBECONFIG_HINT}", path.display(), root_cause(&e))))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| fail(format!("kubeconfig {}: {}", path.display(), root_cause(&e))))
        }
        (None, Some(name)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| fail(format!("kubeconfig context {name}: {}; {KUBECONFIG_HINT}", root_cause(&e)))),
        (None, None) => kube::Config::infer().await.map_err(|_| {
            fail(format!(
                "no kubeconfig found (KUBECONFIG is {}, {} does not exist) and not running in a cluster; {KUBECONFIG_HINT}",
                std::env::var("KUBECONFIG").map_or_else(|_| "unset".to_owned(), |v| format!("{v:?}")),
                home_kubeconfig(),
            ))
        }),
    }
}

/// `~/.kube/config`, as kube looks for it.
fn home_kubeconfig() -> String {
    std::env::var("HOME").map_or_else(|_| "~/.kube/config".to_owned(), |h| format!("{h}/.kube/config"))
}

/// The innermost message of an error chain (kube's outer errors repeat their cause with quoting).
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = err;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// How to reach the upstream, as `serve` flags (`#[command(flatten)]`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct UpstreamFlags {
    /// Plain `http://host:port` upstream (tests, chaining behind another kache); client credentials pass
    /// through.
    #[arg(long, conflicts_with_all = ["kubeconfig", "in_cluster"])]
    pub upstream: Option<String>,
    /// Kubeconfig file. Without this flag and without --upstream: KUBECONFIG, then ~/.kube/config, then
    /// the in-cluster service account.
    #[arg(long, conflicts_with = "in_cluster")]
    pub kubeconfig: Option<PathBuf>,
    /// Use the in-cluster service account (token and CA under /var/run/secrets/kubernetes.io).
    #[arg(long)]
    pub in_cluster: bool,
}

impl UpstreamFlags {
    /// Builds the upstream client the flags describe.
    pub async fn connect(&self) -> Result<Upstream, UpstreamError> {
        match (&self.upstream, &self.kubeconfig, self.in_cluster) {
            (Some(url), _, _) => Upstream::plain(url),
            (None, _, true) => Upstream::in_cluster().await,
            (None, path, false) => Upstream::from_kubeconfig(path.as_deref()).await,
        }
    }
}

fn build(config: &kube::Config) -> Result<Upstream, UpstreamError> {
    let config_err = |e: kube::Error| UpstreamError::Config(Box::new(e));
    let base = parse_base(&config.cluster_url.to_string())?;
    let tls = config.rustls_client_config().map_err(config_err)?;
    let auth = config.auth_layer().map_err(config_err)?;
    let extra_headers = config.extra_headers_layer().map_err(config_err)?;
    let server_name = match &config.tls_server_name {
        Some(name) => Some(
            rustls_pki_types::ServerName::try_from(name.clone())
                .map_err(|e| UpstreamError::Config(Box::new(e)))?,
        ),
        None => None,
    };
    let info = &config.auth_info;
    let credentials = if auth.is_some()
        || info.client_certificate.is_some()
        || info.client_certificate_data.is_some()
        || info.exec.is_some()
    {
        Credentials::Own
    } else {
        Credentials::PassThrough
    };

    let forward = super::fwdrt::ForwardThread::start(base.port_u16().unwrap_or(443));
    let forward_handle = forward.as_ref().map(|f| f.handle().clone());
    let client = |http2: bool, forward_thread: bool| {
        let on_thread = forward_handle.clone().filter(|_| forward_thread);
        let builder = HttpsConnectorBuilder::new().with_tls_config(tls.clone()).https_or_http();
        let builder = match &server_name {
            Some(name) => builder.with_server_name_resolver(FixedServerNameResolver::new(name.clone())),
            None => builder,
        };
        // Read through a buffer under TLS (see `buffered`): rustls reads 4 KiB at a time.
        let tcp = BufferedConnector(http_connector());
        let connector = if http2 {
            builder.enable_http1().enable_http2().wrap_connector(tcp)
        } else {
            builder.enable_http1().wrap_connector(tcp)
        };
        let connector = super::fwdrt::Connector { inner: connector, forward: on_thread.clone() };
        let mut builder = if on_thread.is_some() {
            Client::builder(super::fwdrt::OnForwardThread(on_thread))
        } else {
            Client::builder(TokioExecutor::new())
        };
        builder
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .http2_keep_alive_interval(H2_KEEPALIVE_INTERVAL)
            .http2_keep_alive_timeout(H2_KEEPALIVE_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            // Multi-megabyte lists: let the window grow with the bandwidth-delay product instead of
            // stalling on the 64 KiB default.
            .http2_adaptive_window(true)
            .build(connector)
    };
    let pool = (0..H2_POOL_SIZE).map(|_| client(true, false)).collect();
    let dispatch = Dispatch::new(pool, client(false, false), client(false, true));
    let svc = ServiceBuilder::new()
        .layer(extra_headers)
        .option_layer(auth)
        .map_err(BoxError::from)
        .service(dispatch);
    Ok(Upstream::from_parts(base, HttpService::new(svc), H2_POOL_SIZE, credentials, forward))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = r#"
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: secret-token
contexts:
- name: ctx
  context: {cluster: c, user: u, namespace: team}
current-context: ctx
"#;

    #[tokio::test]
    async fn kubeconfig_with_a_token_uses_own_credentials() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config");
        std::fs::write(&path, KUBECONFIG).expect("write kubeconfig");
        let up = Upstream::from_kubeconfig(Some(&path)).await.expect("loads");
        assert_eq!(up.base().to_string(), "https://127.0.0.1:6443/");
        assert_eq!(up.credentials(), Credentials::Own);
    }

    #[tokio::test]
    async fn flags_choose_the_upstream() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cmd {
            #[command(flatten)]
            upstream: UpstreamFlags,
        }
        let flags = Cmd::parse_from(["kache", "--upstream", "http://127.0.0.1:1"]).upstream;
        let up = flags.connect().await.expect("plain");
        assert_eq!(up.credentials(), Credentials::PassThrough);
        assert!(Cmd::try_parse_from(["kache", "--upstream", "http://x:1", "--kubeconfig", "k"]).is_err());
        assert!(Cmd::try_parse_from(["kache", "--in-cluster", "--kubeconfig", "k"]).is_err());
    }

    #[tokio::test]
    async fn missing_kubeconfig_is_a_config_error() {
        let err =
            Upstream::from_kubeconfig(Some(Path::new("/nonexistent/kubeconfig"))).await.expect_err("missing");
        assert!(matches!(err, UpstreamError::Config(_)), "{err:?}");
        assert!(!err.is_retryable());
    }
}
