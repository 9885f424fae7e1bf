//! The kache binary: parses flags, binds listeners and runs [`kache::app`]. Nothing else lives here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use mimalloc::MiMalloc;

use kache::app::{Config, HugePages, Kache, UpstreamSource};
use kache::auth::{AuthMode, AuthSettings, ListenCheck, check_listen};
use kache::fresh::{Fallback, Prefer};
use kache::front::server::{LimitFlags, TlsConfig, parse_duration};
use kache::upstream::discovery::{Selection, parse_resource_specs};

/// mimalloc, built with its transparent huge pages (MADV_HUGEPAGE on its arenas): scans of a big heap take fewer
/// TLB misses with them (docs/decisions/0012-transparent-huge-pages.md). Whether the kernel may use them is
/// decided at run time by the size of the caches (`--huge-pages`, docs/decisions/0021-memory-per-cached-byte.md):
/// below it, the 2 MiB rounding of every range of heap touched doubled a small kache's memory.
#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

/// Collects the calling thread's mimalloc heap: its free pages are released and their memory returned to
/// the OS (`kache::app::idle_collect`).
#[allow(unsafe_code)]
fn collect_heap() {
    // SAFETY: `mi_collect` takes no pointer and only touches the calling thread's heap and the arenas,
    // under mimalloc's own synchronisation; the binary's global allocator is that mimalloc.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

#[cfg(feature = "demo")]
mod demo;

#[derive(Parser, Debug)]
#[command(
    name = "kache",
    version,
    about = "A read replica for the Kubernetes API: get, list and watch from memory"
)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Log level or filter (RUST_LOG syntax), e.g. `info` or `kache=debug`.
    #[arg(long, global = true, default_value = "info", env = "KACHE_LOG")]
    log_level: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve a read replica of an upstream kube-apiserver.
    Serve(ServeArgs),
    /// Start a simulated apiserver with a realistic dataset and kache in front of it.
    #[cfg(feature = "demo")]
    Demo(demo::DemoArgs),
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// Plain `http://host:port` upstream (tests, or chaining behind another kache on a trusted network).
    #[arg(long, conflicts_with = "kubeconfig")]
    upstream: Option<String>,
    /// Kubeconfig of the upstream (default: KUBECONFIG, else ~/.kube/config, else in-cluster config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use instead of its current context (as `kubectl --context`).
    #[arg(long, conflicts_with = "upstream")]
    context: Option<String>,
    /// Address to serve the Kubernetes API on: `HOST:PORT`, e.g. `127.0.0.1:8080`, `localhost:8080`,
    /// `0.0.0.0:6443`, `[::1]:8080`.
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = parse_listen)]
    listen: SocketAddr,
    #[command(flatten)]
    auth: AuthArgs,
    #[command(flatten)]
    common: CommonArgs,
}

/// Client authentication and authorization (see docs/security.md).
#[derive(clap::Args, Debug, Clone)]
struct AuthArgs {
    /// `none`: kache's own upstream credentials serve everyone (loopback only); `delegated`: clients
    /// authenticate with bearer tokens (TokenReview) and every read from memory is authorized with a
    /// SubjectAccessReview.
    #[arg(long, value_enum, default_value = "none")]
    auth: AuthMode,
    /// Allow `--auth=none` on a non-loopback --listen address (logged as a warning).
    #[arg(long)]
    auth_none_allow_non_loopback: bool,
    /// Audiences bearer tokens must be valid for (comma-separated; default: the upstream's API audiences).
    #[arg(long, value_delimiter = ',')]
    auth_audiences: Vec<String>,
    /// How long an authenticated token review is cached (never past the token's own `exp` by more than
    /// 10 s).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    auth_token_ttl: Duration,
    /// How long a rejected token is cached.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    auth_token_failure_ttl: Duration,
    /// How long an allowing SubjectAccessReview is cached.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    auth_allow_ttl: Duration,
    /// How long a denying SubjectAccessReview is cached.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    auth_deny_ttl: Duration,
    /// Entries in the token cache and in the decision cache (each).
    #[arg(long, default_value_t = kache::auth::DEFAULT_CACHE_ENTRIES)]
    auth_cache_entries: usize,
    /// Sustained requests per second per client (user, or IP under --auth=none); 0 = unlimited.
    #[arg(long, default_value_t = 0.0)]
    client_qps: f64,
    /// Requests a client may burst above --client-qps.
    #[arg(long, default_value_t = 100)]
    client_burst: u32,
    /// Concurrent watches per client; 0 = unlimited.
    #[arg(long, default_value_t = 0)]
    client_max_watches: usize,
    /// TokenReviews per second one source address may cause with tokens kache has not seen (429 above);
    /// 0 = unlimited.
    #[arg(long, default_value_t = kache::auth::DEFAULT_REVIEWS_PER_ADDRESS.qps)]
    auth_reviews_per_address_qps: f64,
    /// Burst of TokenReviews per source address.
    #[arg(long, default_value_t = kache::auth::DEFAULT_REVIEWS_PER_ADDRESS.burst)]
    auth_reviews_per_address_burst: u32,
    /// SubjectAccessReviews per second one user may cause with reads whose decision is not cached; past it
    /// the reads are forwarded (the upstream authorizes them). 0 = unlimited.
    #[arg(long, default_value_t = kache::auth::DEFAULT_ACCESS_REVIEWS_PER_USER.qps)]
    auth_access_reviews_per_user_qps: f64,
    /// Burst of SubjectAccessReviews per user.
    #[arg(long, default_value_t = kache::auth::DEFAULT_ACCESS_REVIEWS_PER_USER.burst)]
    auth_access_reviews_per_user_burst: u32,
}

impl AuthArgs {
    fn settings(&self) -> AuthSettings {
        AuthSettings {
            mode: self.auth,
            audiences: self.auth_audiences.iter().filter(|a| !a.is_empty()).cloned().collect(),
            token_ttl: self.auth_token_ttl,
            token_failure_ttl: self.auth_token_failure_ttl,
            allow_ttl: self.auth_allow_ttl,
            deny_ttl: self.auth_deny_ttl,
            cache_entries: self.auth_cache_entries,
            clients: kache::auth::ClientLimitSettings {
                qps: self.client_qps,
                burst: self.client_burst,
                max_watches: self.client_max_watches,
            },
            reviews_per_address: kache::auth::ClientLimitSettings {
                qps: self.auth_reviews_per_address_qps,
                burst: self.auth_reviews_per_address_burst,
                max_watches: 0,
            },
            access_reviews_per_user: kache::auth::ClientLimitSettings {
                qps: self.auth_access_reviews_per_user_qps,
                burst: self.auth_access_reviews_per_user_burst,
                max_watches: 0,
            },
            control_ignore_impersonation: false,
        }
    }
}

/// Flags shared by `serve` and `demo`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct CommonArgs {
    /// Address of the metrics and health listener (/metrics, /healthz, /livez, /readyz); `off` disables it.
    #[arg(long, default_value = kache::metrics::DEFAULT_METRICS_LISTEN)]
    pub(crate) metrics_listen: String,
    /// Resources cached up front, e.g. `pods,nodes,apps/v1/deployments,example.com/v1/widgets`
    /// (default: every discovered resource that supports list and watch).
    #[arg(long)]
    resources: Option<String>,
    /// Mirror a resource filtered: `RESOURCE:fieldSelector=SELECTOR` or `RESOURCE:labelSelector=SELECTOR`,
    /// e.g. `pods:fieldSelector=spec.nodeName=$(NODE_NAME)` for a node-local kache. Repeat the flag to
    /// combine selectors (ANDed). Reads the selection does not cover are forwarded.
    #[arg(long = "resource-selector", value_name = "RESOURCE:KIND=SELECTOR")]
    resource_selectors: Vec<String>,
    /// Resources never cached (always forwarded).
    #[arg(long)]
    exclude: Option<String>,
    /// Do not start caching a resource on its first read (only `--resources` are cached).
    #[arg(long)]
    no_lazy: bool,
    /// Serve TLS with this certificate (PEM); needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Private key (PEM) for --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// CA bundle (PEM) that client certificates are verified against (`--auth=delegated`: CN = user,
    /// O = groups); clients without a certificate still connect and use bearer tokens.
    #[arg(long, requires = "tls_cert")]
    client_ca: Option<PathBuf>,
    /// How much later than forwarding it a consistent read (resourceVersion unset, or a page ahead of the
    /// cache) may be answered, to take its cost off the upstream: a proof of freshness by the upstream's
    /// bookmark takes ~1-1.25 s, and the apiserver itself may hold a consistent read up to 3 s.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    consistent_read_latency_bound: Duration,
    /// What consistent reads favour: `offload` (the upstream's cost, within the latency bound) or `latency`
    /// (the client's: served from memory only where that is as fast as forwarding). Neither ever costs the
    /// upstream more than the same read direct.
    #[arg(long, default_value = "offload", value_parser = ["offload", "latency"])]
    consistent_read_prefer: String,
    /// What a consistent read does when the cache cannot be proven fresh in time: forward it upstream, or 429.
    #[arg(long, default_value = "forward", value_parser = ["forward", "429"])]
    consistent_read_fallback: String,
    /// Prove big consistent lists and WatchLists of a quiet resource (one whose store is behind the upstream's
    /// revision because other resources were written) by a census: a consistent metadata-only list of the
    /// resource compared with the store. `false` forwards such lists and proves WatchLists with a bookmark.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    consistent_census: bool,
    /// etcd client URLs (comma-separated): etcd becomes the freshness oracle of consistent reads, as for the
    /// apiserver's own watch cache (docs/consistency.md). kache needs read and watch on the cached resources'
    /// key prefixes only. Off by default.
    #[arg(long, value_delimiter = ',')]
    etcd_endpoints: Vec<String>,
    /// TLS client certificate (PEM) for etcd.
    #[arg(long, requires = "etcd_key")]
    etcd_cert: Option<PathBuf>,
    /// TLS client key (PEM) for etcd.
    #[arg(long, requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// CA (PEM) of etcd's serving certificate; TLS to etcd (https:// endpoints) needs it.
    #[arg(long)]
    etcd_ca: Option<PathBuf>,
    /// The apiserver's --etcd-prefix.
    #[arg(long, default_value = "/registry")]
    etcd_prefix: String,
    /// The key prefix of a resource whose prefix is not the apiserver's default (repeatable):
    /// RESOURCE.GROUP=/registry/... (a core resource: RESOURCE=/registry/...).
    #[arg(long = "etcd-resource-prefix")]
    etcd_resource_prefixes: Vec<String>,
    /// Period of watch bookmarks sent to clients that ask for them (the apiserver uses 1 minute).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    watch_bookmark_interval: Duration,
    /// Indexed watch dispatch: a watcher that pins a name, pods' spec.nodeName or a namespace is woken only
    /// by events that can concern it. `false` wakes every watcher for every event (for comparison).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    watch_index: bool,
    /// How long the event history and retained snapshots are kept (the apiserver's 75 s).
    #[arg(long, default_value = "75s", value_parser = parse_duration)]
    history_window: Duration,
    /// How long the upstream may be unreachable before /readyz fails (it passes again at the next answer).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    upstream_unreachable_grace: Duration,
    /// Transparent huge pages for the heap: `auto` allows them once the stores and their protobuf messages
    /// hold 256 MiB (fewer TLB misses in big scans) and forbids them below 128 MiB (each 2 MiB of heap
    /// touched would be resident); `on` leaves the allocator's choice (always); `off` never.
    #[arg(long, value_enum, default_value = "auto")]
    huge_pages: HugePages,
    /// How often at most each thread returns the heap it freed to the OS as it goes idle (the allocator
    /// keeps a burst's freed pages otherwise); `0s` never does.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    heap_collect_interval: Duration,
    #[command(flatten)]
    limits: LimitFlags,
}

impl CommonArgs {
    fn into_config(self, upstream: UpstreamSource) -> anyhow::Result<Config> {
        let mut config = Config::for_url(String::new());
        config.upstream = upstream;
        let include = match &self.resources {
            Some(specs) => {
                Some(parse_resource_specs(specs).map_err(|e| anyhow::anyhow!("--resources: {e}"))?)
            }
            None => None,
        };
        let exclude = match &self.exclude {
            Some(specs) => parse_resource_specs(specs).map_err(|e| anyhow::anyhow!("--exclude: {e}"))?,
            None => Vec::new(),
        };
        config.selection = Selection { include, exclude };
        config.mirror_selectors = kache::app::parse_mirror_selectors(&self.resource_selectors)
            .map_err(|e| anyhow::anyhow!("--resource-selector: {e}"))?;
        config.lazy = !self.no_lazy;
        config.freshness.latency_bound = self.consistent_read_latency_bound;
        config.freshness.prefer =
            if self.consistent_read_prefer == "latency" { Prefer::Latency } else { Prefer::Offload };
        config.freshness.census = self.consistent_census;
        config.freshness.fallback = if self.consistent_read_fallback == "429" {
            Fallback::TooManyRequests
        } else {
            Fallback::Forward
        };
        if !self.etcd_endpoints.is_empty() {
            let etcd = kache::fresh::etcd::EtcdConfig {
                endpoints: self.etcd_endpoints,
                cert: self.etcd_cert,
                key: self.etcd_key,
                ca: self.etcd_ca,
                prefix: self.etcd_prefix,
                resource_prefixes: self.etcd_resource_prefixes,
            };
            etcd.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
            config.freshness.etcd = Some(etcd);
        }
        config.handler.watch.bookmark_interval = self.watch_bookmark_interval;
        config.handler.watch.indexed = self.watch_index;
        config.reflector.store.history_window = self.history_window;
        config.reflector.store.retain_window = self.history_window;
        config.unreachable_grace = self.upstream_unreachable_grace;
        config.huge_pages = self.huge_pages;
        config.limits = self.limits.into();
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            // The serving certificate follows its files (rotation in place): loaded and checked here, watched
            // by the running kache (`Config::tls_reload`), not by flag parsing.
            let reloading =
                kache::auth::ReloadingCert::load(cert, key).context("loading --tls-cert/--tls-key")?;
            config.tls = Some(
                TlsConfig::from_resolver(reloading.clone(), self.client_ca.as_deref())
                    .context("loading --client-ca")?,
            );
            config.tls_reload = Some(reloading);
        }
        Ok(config)
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let common = match &cli.command {
        Command::Serve(args) => &args.common,
        #[cfg(feature = "demo")]
        Command::Demo(args) => &args.common,
    };
    common.huge_pages.apply_at_start();
    kache::app::idle_collect::install(collect_heap, common.heap_collect_interval);
    init_logging(&cli.log_format, &cli.log_level);
    kache::upstream::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(kache::app::idle_collect::on_idle)
        .build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => serve(args).await,
            #[cfg(feature = "demo")]
            Command::Demo(args) => demo::run(args).await,
        }
    })
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let upstream = match (args.upstream, args.context) {
        (Some(url), _) => UpstreamSource::Url(url),
        (None, Some(context)) => UpstreamSource::KubeconfigContext(args.kubeconfig, context),
        (None, None) => UpstreamSource::Kubeconfig(args.kubeconfig),
    };
    match check_listen(args.auth.auth, args.listen, args.auth.auth_none_allow_non_loopback)? {
        ListenCheck::Ok => {}
        ListenCheck::ForcedNonLoopback => tracing::warn!(
            listen = %args.listen,
            "--auth=none on a non-loopback address: every client that can connect reads with kache's \
             upstream credentials"
        ),
    }
    let mut config = args.common.clone().into_config(upstream)?;
    config.auth = args.auth.settings();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| bind_error("--listen", &args.listen.to_string(), &e))?;
    let metrics = bind_metrics(&args.common.metrics_listen).await?;
    let kache = Kache::start_with_metrics(config, listener, metrics).await?;
    let metrics = kache.metrics_url().unwrap_or_else(|| "off".to_owned());
    tracing::info!(url = %kache.url(), %metrics, "kache serving");
    kache.run_until(shutdown_signal()).await;
    Ok(())
}

/// `--listen`: `HOST:PORT` with an IP address or a host name (`localhost:8080`), resolved now. A name that
/// resolves to several addresses binds the first IPv4 one (as `localhost` means 127.0.0.1 to most clients).
pub(crate) fn parse_listen(value: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = value.parse() {
        return Ok(addr);
    }
    if !value.contains(':') {
        return Err(format!("{value:?} has no port: use HOST:PORT, e.g. 127.0.0.1:8080"));
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(value)
        .map_err(|e| format!("{value:?} is not HOST:PORT with a known host: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| format!("{value:?} resolves to no address"))
}

/// Binds the metrics listener unless it is `off`.
pub(crate) async fn bind_metrics(addr: &str) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    if addr == "off" {
        return Ok(None);
    }
    let resolved = parse_listen(addr).map_err(|e| anyhow::anyhow!("--metrics-listen: {e}"))?;
    let listener = tokio::net::TcpListener::bind(resolved)
        .await
        .map_err(|e| bind_error("--metrics-listen", addr, &e))?;
    Ok(Some(listener))
}

/// A listener that could not be bound, said with the flag that chose the address and what to do about it.
pub(crate) fn bind_error(flag: &str, addr: &str, err: &std::io::Error) -> anyhow::Error {
    let hint = match err.kind() {
        std::io::ErrorKind::AddrInUse => {
            format!("another process listens there: pass {flag} with a free port")
        }
        std::io::ErrorKind::PermissionDenied => {
            format!("ports below 1024 need privileges: pass {flag} with a port above 1023")
        }
        std::io::ErrorKind::AddrNotAvailable => {
            format!("no interface of this machine has that address: pass {flag} with one of its addresses")
        }
        _ => format!("pass {flag} with another address"),
    };
    anyhow::anyhow!("cannot listen on {addr} ({flag}): {err}; {hint}")
}

/// Completes on SIGINT or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutdown requested");
}

fn init_logging(format: &str, level: &str) {
    let format = format.parse().unwrap_or(kache::metrics::LogFormat::Text);
    if let Err(e) = kache::metrics::init_tracing(format, level) {
        eprintln!("kache: {e}");
        std::process::exit(2);
    }
}
