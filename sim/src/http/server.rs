//! The accept loop: HTTP/1.1 and h2c on one listener, with upgrades, and connection dropping for
//! restarts.

use std::convert::Infallible;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::http::{State, handle};

/// Open connections are bounded; further clients wait in the listen backlog.
const MAX_CONNECTIONS: usize = 4096;

/// Serves until `shutdown` turns true. Each connection ends when it closes, on shutdown, or when the
/// admin API bumps `drop_connections` (restart).
pub async fn run(listener: TcpListener, state: Arc<State>, shutdown: watch::Receiver<bool>) {
    let mut stop = shutdown.clone();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = stop.wait_for(|s| *s) => return,
        };
        tokio::select! {
            r = listener.accept() => {
                let Ok((stream, _)) = r else { continue };
                let _ = stream.set_nodelay(true);
                let (state, shutdown) = (state.clone(), shutdown.clone());
                tokio::spawn(async move {
                    connection(stream, state, shutdown).await;
                    drop(permit);
                });
            }
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

async fn connection(stream: tokio::net::TcpStream, state: Arc<State>, mut shutdown: watch::Receiver<bool>) {
    let mut drop_rx = state.admin.drop_connections.subscribe();
    drop_rx.borrow_and_update();
    let svc = service_fn(move |req| {
        let st = state.clone();
        async move { Ok::<_, Infallible>(handle(st, req).await) }
    });
    let builder = Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc);
    tokio::select! {
        // Connection errors (resets, bad requests) end only this connection.
        _ = conn => {}
        _ = drop_rx.changed() => {}
        _ = shutdown.wait_for(|s| *s) => {}
    }
}
