//! One thread for forwarded lists: their upstream connections and their read-ahead pumps.
//!
//! The apiserver writes a JSON list one item (~2 KiB) per HTTP chunk, so hyper's client hands a forwarded
//! 21.5 MiB list over as ~10k frames, each one a wake-up of the connection task and one of the pump that reads
//! it ahead of the client (`forward::readahead`). On the multi-threaded runtime those wake-ups also wake idle
//! workers: measured, 82 ms of kache CPU per such list with two workers against 57 ms with one. Running the
//! connection tasks of forwarded lists and their pumps on one current-thread runtime keeps that ping-pong on
//! one thread; the client's side receives the pump's batches (128 KiB) from there.
//!
//! Only forwarded lists go here (marked [`ForwardedList`]): gets, the reflectors' lists and probes stay on the
//! main runtime, where their callers read them.
//!
//! The thread belongs to one upstream client ([`ForwardThread`], held by its `Upstream`): started with it,
//! stopped and joined when the last clone of that client is dropped, so a kache that stops leaves no
//! thread behind and two kaches in one process share none.

use std::future::Future;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::front::body::BoxError;

/// Marks an upstream request as a forwarded list (a request extension): its connection is one of the
/// forward thread's.
#[derive(Clone, Copy, Debug)]
pub struct ForwardedList;

/// A current-thread runtime on a thread of its own (named `kache-fwd-PORT`, after the upstream's port,
/// as are the runtime's blocking threads), stopped and joined on drop.
#[derive(Debug)]
pub struct ForwardThread {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ForwardThread {
    /// Starts the thread; `None` if it could not be started (forwarded lists then run on the caller's
    /// runtime, as everything else does).
    pub fn start(port: u16) -> Option<ForwardThread> {
        let name = format!("kache-fwd-{port}");
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_park(crate::app::idle_collect::on_idle)
            .thread_name(&name)
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                tracing::warn!(error = %e, "no forward thread: forwarded lists run on the runtime workers");
                return None;
            }
        };
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let started = std::thread::Builder::new().name(name).spawn(move || {
            // Until stopped (or the owner is gone); dropping the runtime then drops its tasks.
            runtime.block_on(async move {
                let _ = stopped.await;
            });
        });
        match started {
            Ok(thread) => Some(ForwardThread { handle, stop: Some(stop), thread: Some(thread) }),
            Err(e) => {
                tracing::warn!(error = %e, "no forward thread: forwarded lists run on the runtime workers");
                None
            }
        }
    }

    /// The runtime's handle (it does not keep the runtime alive: once stopped, what is spawned on it is
    /// dropped unrun).
    pub fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for ForwardThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // Joined, unless the last owner is dropped on the thread itself (it then ends on its own).
        if let Some(thread) = self.thread.take()
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = thread.join();
        }
    }
}

/// Spawns `fut` on the forward thread `on`, or on the current runtime without one.
pub fn spawn<F>(on: Option<&Handle>, fut: F)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match on {
        Some(h) => drop(h.spawn(fut)),
        None => drop(tokio::spawn(fut)),
    }
}

/// hyper's executor for the forward thread's connections.
#[derive(Clone, Debug, Default)]
pub struct OnForwardThread(pub Option<Handle>);

impl<F> hyper::rt::Executor<F> for OnForwardThread
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        spawn(self.0.as_ref(), fut);
    }
}

/// A connector whose connections are made on the forward thread when `forward` is one, so that their
/// sockets are registered with that thread's reactor (their readiness then wakes no other thread);
/// otherwise `inner` as is. One type for every client of an upstream.
#[derive(Clone, Debug)]
pub struct Connector<S> {
    pub inner: S,
    pub forward: Option<Handle>,
}

impl<S> tower::Service<http::Uri> for Connector<S>
where
    S: tower::Service<http::Uri> + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        match &self.forward {
            Some(h) => {
                let joined = h.spawn(connecting);
                Box::pin(async move {
                    match joined.await {
                        Ok(made) => made.map_err(Into::into),
                        Err(e) => Err(Box::new(e) as BoxError),
                    }
                })
            }
            None => Box::pin(async move { connecting.await.map_err(Into::into) }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn spawned_futures_run_on_the_forward_thread() {
        let thread = ForwardThread::start(1).expect("started");
        let (tx, rx) = tokio::sync::oneshot::channel();
        spawn(Some(thread.handle()), async move {
            let _ = tx.send(std::thread::current().name().map(str::to_owned));
        });
        assert_eq!(rx.await.expect("ran").as_deref(), Some("kache-fwd-1"));
    }

    /// Dropped, the thread is stopped and joined; what is spawned on its handle afterwards is dropped unrun.
    #[tokio::test]
    async fn a_dropped_forward_thread_ends() {
        let thread = ForwardThread::start(2).expect("started");
        let handle = thread.handle().clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        spawn(Some(&handle), async move {
            let _keep = tx;
            std::future::pending::<()>().await;
        });
        drop(thread);
        // The pending task was dropped with the runtime: its sender is gone.
        assert!(rx.await.is_err());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        spawn(Some(&handle), async move {
            let _ = tx.send(());
        });
        assert!(rx.await.is_err());
    }

    /// A forwarded list's connection is made on the forward thread (so its socket belongs to that thread's
    /// reactor); every other connection where it is asked for.
    #[tokio::test]
    async fn connections_are_made_on_the_forward_thread_only_when_asked() {
        use tower::{Service as _, ServiceExt as _};
        let thread_of = tower::service_fn(|_: http::Uri| async {
            Ok::<_, std::convert::Infallible>(std::thread::current().name().map(str::to_owned))
        });
        let uri: http::Uri = "http://upstream:1".parse().expect("uri");
        let thread = ForwardThread::start(3).expect("started");
        let mut forward = Connector { inner: thread_of, forward: Some(thread.handle().clone()) };
        let made = forward.ready().await.expect("ready").call(uri.clone()).await.expect("made");
        assert_eq!(made.as_deref(), Some("kache-fwd-3"));
        let mut here = Connector { inner: thread_of, forward: None };
        let made = here.ready().await.expect("ready").call(uri).await.expect("made");
        assert_eq!(made, std::thread::current().name().map(str::to_owned));
    }
}
