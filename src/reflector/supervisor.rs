//! One resource's task, supervised: learn how the upstream lists the resource, create its store, then reflect,
//! restarting the reflector whenever it panics or ends.
//!
//! The reflector runs inside a panic boundary. When it panics (a bug of ours or of a dependency, e.g. in the
//! transport) or returns (its loop never does, so that is a bug too), its [`Writer`](crate::store::Writer) is
//! dropped, which takes the store down: the store stops counting as synced, so reads are forwarded and the
//! resource's `informer-sync-*` readiness check fails, and its watchers end. After a jittered, growing delay
//! (the reflector's own [`Backoff`]: 800 ms doubling to 30 s, forgotten after 2 min without a failure) a new
//! reflector starts on the same store with a new writer, and syncs from scratch before the store serves again.
//!
//! Invariant: at most one writer per store. The old reflector (and with it its writer) is dropped before the
//! boundary returns, so [`Store::reopen`] always succeeds here.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use tracing::{error, warn};

use super::backoff::Backoff;
use super::config::ReflectorConfig;
use super::decode;
use super::machine::Reflector;
use super::registry::StoreMap;
use super::request::{self, ReflectError};
use super::status::{StatusCell, SyncState};
use crate::metrics::Metrics;
use crate::resource::ResourceInfo;
use crate::store::Store;
use crate::upstream::Transport;
use crate::upstream::discovery;

/// Attempts of the `limit=1` probe that learns whether list items carry type meta, before guessing by group.
const PROBE_ATTEMPTS: usize = 3;

/// What one resource's task shares with its registry.
pub(super) struct Resource {
    pub(super) transport: Arc<dyn Transport>,
    pub(super) config: Arc<ReflectorConfig>,
    pub(super) info: ResourceInfo,
    pub(super) status: Arc<StatusCell>,
    pub(super) stores: Arc<StoreMap>,
    pub(super) metrics: Metrics,
}

/// Runs the resource's reflector until the task is aborted, restarting it with backoff when it panics or ends.
pub(super) async fn run_resource(resource: Resource) {
    let mut restart = Backoff::new(&resource.config);
    let mut store = None;
    loop {
        let attempt = AssertUnwindSafe(run_once(&resource, &mut store)).catch_unwind().await;
        // The reflector and its writer are dropped by now: the store (if any) is down.
        let why = match attempt {
            Ok(()) => "ended".to_owned(),
            Err(panic) => format!("panicked: {}", panic_message(&*panic)),
        };
        if resource.status.is_stopped() {
            return;
        }
        let delay = restart.next_delay(None);
        error!(resource = %resource.info.gvr, why, ?delay, "reflector died; its reads are forwarded until it has restarted and resynced");
        resource.status.add_restart();
        resource.status.set_state(SyncState::Restarting);
        resource.status.set_error(format!("reflector {why}; restarting"));
        tokio::time::sleep(delay).await;
    }
}

/// One life of the reflector: on the first, probe the list format and create the store; later, reopen it.
async fn run_once(resource: &Resource, store: &mut Option<Arc<Store>>) {
    let Resource { transport, config, info, status, stores, metrics } = resource;
    let writer = match store {
        Some(store) => store.reopen().expect("the previous writer was dropped with its reflector"),
        None => {
            let mut info = info.clone();
            info.list_items_have_type_meta = learn_type_meta(&**transport, &info, config).await;
            let gvr = info.gvr.clone();
            let (created, writer) = Store::new(info, config.store.clone());
            status.set_store(created.clone());
            stores.insert(gvr, created.clone(), status);
            *store = Some(created);
            writer
        }
    };
    Reflector::new(transport.clone(), writer, config.clone(), status.clone())
        .with_metrics(metrics.clone())
        .run()
        .await;
}

/// The message of a panic payload (`panic!` with a literal or a format string), for the log and the status.
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "a non-string payload"
    }
}

/// Whether list items of the resource carry `kind`/`apiVersion`, from a `limit=1` list; guessed by group when
/// the list is empty or the upstream keeps failing.
async fn learn_type_meta(transport: &dyn Transport, info: &ResourceInfo, config: &ReflectorConfig) -> bool {
    let guess = !discovery::is_builtin_group(&info.gvr.group);
    let mut backoff = Backoff::new(config);
    for _ in 0..PROBE_ATTEMPTS {
        let req = request::list(&info.gvr, None, 1, None);
        let page = match request::fetch(transport, req, config).await {
            Ok((body, _)) => decode::decode_list(&body, info).map_err(ReflectError::from),
            Err(e) => Err(e),
        };
        match page {
            Ok(page) => return page.items_have_type_meta.unwrap_or(guess),
            Err(error) if error.is_rejection() => {
                warn!(resource = %info.gvr, %error, "cannot probe the list format; guessing by group");
                break;
            }
            Err(error) => {
                let delay = backoff.next_delay(error.retry_after());
                warn!(resource = %info.gvr, %error, ?delay, "list format probe failed");
                tokio::time::sleep(delay).await;
            }
        }
    }
    guess
}
