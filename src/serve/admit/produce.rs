//! Heavy bodies are produced off the runtime workers, a few at a time, batch by batch.
//!
//! Pretty-printing or gzipping a big list costs a core for as long as its body streams (100k pods: seconds);
//! its chunks are always ready, so a connection task producing them on a runtime worker keeps that worker
//! until tokio's cooperative budget forces a yield, and on a small machine a few such bodies leave nothing
//! for the small requests queued behind them (measured: 40 heavy lists pushed small reads' p99 from 33 ms to
//! 6.8 s on 2 cores). So heavy bodies are produced here instead:
//!
//! - **Never on a runtime worker, and below it**: each batch runs on a producer thread of its own
//!   ([`pool`]) whose OS scheduling priority is lowered (nice +10); the worker only moves finished bytes to
//!   the socket. Small requests find a worker free, and when one wakes up the OS scheduler gives it the core
//!   before the producer: heavy bodies use what light requests leave (measured on 2 cores beside 40 heavy
//!   lists: see docs/decisions/0010-heavy-bodies-on-low-priority-threads.md).
//! - **At most [`producers()`] batches at once per kache** (a fair, FIFO semaphore): the cores heavy
//!   bodies may use together, whatever their number. Permits are taken per batch and released in between, so
//!   the heavy bodies take turns, and a slow client, whose batch waits in its socket, holds no permit.
//! - **Bounded**: a body holds at most one batch (about [`BATCH_BYTES`]) besides what hyper is writing; a
//!   body waiting for a permit holds its iterator only. How many bodies wait is bounded by the read budget's
//!   heavy-body limit (`--max-heavy-bodies-inflight`, 8 per producer: a 429 beyond it, before anything is
//!   sent), so a body waits at most that many batches for its next turn; shown as
//!   `kache_heavy_bodies_waiting`.
//!
//! One pool per kache ([`Producers`], shared by its read budgets), started on first use and stopped (its
//! threads joined) when the kache is dropped; a process runs one kache, whose pool then has its cores.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64 as Counter, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};
use http_body::Frame;
use http_body_util::{BodyExt as _, StreamBody};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::front::body::{Body, BoxError};

/// A batch ends once it has produced this many bytes: large enough that handing a batch to the blocking
/// pool costs little beside producing it (~1 ms of indenting or compressing), small enough that heavy
/// bodies take turns often and each holds little.
pub const BATCH_BYTES: usize = 128 * 1024;

mod pool;

/// Heavy-body batches running at once: half the cores (at least one), so heavy bodies never take every
/// core from the requests behind them. The apiserver has no counterpart: it encodes on the request's
/// goroutine and relies on priority-and-fairness seats instead.
pub fn producers() -> usize {
    crate::front::server::limits::heavy_body_producers()
}

/// The heavy-body producers of one kache: the permits, the threads (started on first use, stopped and joined
/// when the last owner drops them) and their gauges.
pub struct Producers {
    permits: Arc<Semaphore>,
    threads: usize,
    pool: OnceLock<Option<pool::Pool>>,
    /// Heavy bodies waiting for a permit, and batches running (`kache_heavy_bodies_waiting`,
    /// `kache_heavy_bodies_producing`).
    waiting: Arc<Counter>,
    producing: Arc<Counter>,
    counts: Arc<pool::Counts>,
}

impl Default for Producers {
    fn default() -> Self {
        Producers::new(producers())
    }
}

impl std::fmt::Debug for Producers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producers").field("threads", &self.threads).finish_non_exhaustive()
    }
}

impl Producers {
    /// `threads` producers (the threads start with the first batch).
    pub fn new(threads: usize) -> Self {
        Producers {
            permits: Arc::new(Semaphore::new(threads.max(1))),
            threads: threads.max(1),
            pool: OnceLock::new(),
            waiting: Arc::default(),
            producing: Arc::default(),
            counts: Arc::default(),
        }
    }

    /// (waiting, producing) now.
    pub fn heavy_bodies(&self) -> (u64, u64) {
        (self.waiting.load(Ordering::Relaxed), self.producing.load(Ordering::Relaxed))
    }

    /// (lowered, normal) producer threads now (`kache_heavy_body_threads{priority}`).
    pub fn heavy_body_threads(&self) -> (u64, u64) {
        self.counts.get()
    }

    /// Runs `job` on a producer thread. The permit bounds the queued jobs to the pool's capacity, so a job
    /// comes back only if no producer thread could be started: the blocking pool then runs it at normal
    /// priority.
    fn submit(&self, job: pool::Job) {
        let pool = self.pool.get_or_init(|| pool::Pool::start(self.threads, &self.counts));
        let unsent = match pool {
            Some(pool) => pool.submit(job).err(),
            None => Some(job),
        };
        if let Some(job) = unsent {
            tokio::task::spawn_blocking(job);
        }
    }
}

/// A body streaming what `chunks` produces, produced in batches on the kache's `producers` (see the module
/// doc).
pub fn offloaded<I>(producers: Arc<Producers>, chunks: I) -> Body
where
    I: Iterator<Item = Bytes> + Send + Sync + 'static,
{
    let state = State { chunks: Some(chunks), ready: VecDeque::new() };
    let stream = futures_util::stream::unfold((state, producers), |(mut st, producers)| async move {
        if st.ready.is_empty() {
            let chunks = st.chunks.take()?;
            match batch(&producers, chunks).await {
                Ok((rest, produced)) => {
                    st.chunks = rest;
                    st.ready = produced.into();
                }
                Err(e) => return Some((Err(e), (st, producers))),
            }
        }
        let chunk = st.ready.pop_front()?;
        Some((Ok(Frame::data(chunk)), (st, producers)))
    });
    StreamBody::new(stream).boxed()
}

/// Everything `chunks` produces, concatenated, produced in batches like an [`offloaded`] body (the gzip
/// cache compresses whole lists with it, so its compressions share the producers).
pub async fn collect<I>(producers: &Producers, chunks: I) -> Result<Bytes, BoxError>
where
    I: Iterator<Item = Bytes> + Send + 'static,
{
    let mut out = BytesMut::new();
    let mut chunks = Some(chunks);
    while let Some(c) = chunks.take() {
        let (rest, produced) = batch(producers, c).await?;
        for p in produced {
            out.extend_from_slice(&p);
        }
        chunks = rest;
    }
    Ok(out.freeze())
}

struct State<I> {
    /// None once the iterator is exhausted.
    chunks: Option<I>,
    ready: VecDeque<Bytes>,
}

/// Produces up to [`BATCH_BYTES`] from `chunks` on a producer thread once a permit is free; the iterator
/// comes back unless it ended.
async fn batch<I>(producers: &Producers, mut chunks: I) -> Result<(Option<I>, Vec<Bytes>), BoxError>
where
    I: Iterator<Item = Bytes> + Send + 'static,
{
    let permit = {
        let _waiting = Gauge::up(&producers.waiting);
        producers.permits.clone().acquire_owned().await.expect("the producer semaphore is never closed")
    };
    // The permit moves into the batch: if the body is dropped meanwhile, the batch still finishes (it is
    // bounded) before another may start, so at most `producers()` batches ever run.
    let (done, result) = tokio::sync::oneshot::channel();
    let producing = producers.producing.clone();
    producers.submit(Box::new(move || {
        let _permit: OwnedSemaphorePermit = permit;
        let _producing = Gauge::up(&producing);
        let (mut out, mut bytes) = (Vec::new(), 0);
        let produced = loop {
            if bytes >= BATCH_BYTES {
                break (Some(chunks), out);
            }
            match chunks.next() {
                Some(c) => {
                    bytes += c.len();
                    out.push(c);
                }
                None => break (None, out),
            }
        };
        let _ = done.send(produced);
    }));
    // A job that panicked (an iterator bug) drops `done`: the body ends with an error, the thread lives on.
    result.await.map_err(|_| -> BoxError { "producing a response body failed".into() })
}

/// A gauge raised while this lives.
struct Gauge(Arc<Counter>);

impl Gauge {
    fn up(g: &Arc<Counter>) -> Self {
        g.fetch_add(1, Ordering::Relaxed);
        Self(g.clone())
    }
}

impl Drop for Gauge {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
