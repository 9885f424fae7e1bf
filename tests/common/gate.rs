//! A TCP relay in front of an upstream that a test can close and open again: closed, it cuts every
//! connection it carries and drops new ones at once (the upstream looks down); open, it relays bytes.

use std::net::SocketAddr;

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The relay; dropping it stops it.
pub struct Gate {
    addr: SocketAddr,
    open: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Gate {
    /// A gate in front of `upstream` (`http://HOST:PORT`), open.
    pub async fn start(upstream: &str) -> Gate {
        let target = upstream.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the gate");
        let addr = listener.local_addr().expect("the gate's address");
        let (open, watch_open) = watch::channel(true);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { return };
                if !*watch_open.borrow() {
                    drop(client);
                    continue;
                }
                let mut closed = watch_open.clone();
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&target).await else { return };
                    tokio::select! {
                        _ = copy_bidirectional(&mut client, &mut server) => {}
                        _ = closed.wait_for(|open| !*open) => {}
                    }
                });
            }
        });
        Gate { addr, open, task }
    }

    /// `http://ADDR` of the gate.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Cuts every connection and refuses new ones until [`Gate::open`].
    pub fn close(&self) {
        self.open.send_replace(false);
    }

    /// Relays again.
    pub fn open(&self) {
        self.open.send_replace(true);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.task.abort();
    }
}
