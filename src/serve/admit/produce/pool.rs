//! The heavy-body producer threads: dedicated, and at a lowered OS scheduling priority.
//!
//! Why not tokio's blocking pool: its threads run at the priority of everything else, so on a small machine
//! a producer indenting or compressing a 100k-pod list competes as an equal with the runtime workers that
//! answer small requests, and a small request that wakes up while the producer holds the core waits for the
//! scheduler's next turn (measured: small reads' p99 2.7× idle beside 40 heavy lists on 2 cores). Nice
//! values cannot be set on the blocking pool's threads, which also run unrelated blocking work. So heavy
//! batches run here, on [`producers()`](super::producers) threads of their own whose nice value is raised
//! by [`NICE`] (Linux: per thread, `setpriority(PRIO_PROCESS, tid, …)` through rustix, already in the dependency
//! graph, as the workspace allows no `unsafe`; lowering one's own priority needs no privilege): a runtime worker that wakes up preempts a producer, and a producer still has the core
//! whenever nothing else wants it, so heavy bodies slow down only while light requests run.
//!
//! Bounded: jobs are admitted by the producer permits (one per running or queued batch), so the queue never
//! holds more than `producers()` jobs; its capacity is that, and a send never waits.
//! `kache_heavy_body_threads{priority}` counts the threads, by whether lowering their priority succeeded.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// How much the producers' nice value is raised above the process's (0 → 10): CFS weighs a nice-10 thread
/// about 1/10 of a nice-0 one, so light requests on the runtime workers win the core when they want it,
/// while producers still make progress beside a busy worker instead of starving (nice 19 would leave them
/// ~1.5 %, and on a machine loaded by other work heavy lists would stall for good).
pub(crate) const NICE: i32 = 10;

/// A batch to run on a producer thread.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// Producer threads running, by whether lowering their priority succeeded (`kache_heavy_body_threads{priority}`).
#[derive(Debug, Default)]
pub(crate) struct Counts {
    lowered: AtomicU64,
    normal: AtomicU64,
}

impl Counts {
    /// (lowered, normal) producer threads now.
    pub(crate) fn get(&self) -> (u64, u64) {
        (self.lowered.load(Ordering::Relaxed), self.normal.load(Ordering::Relaxed))
    }
}

/// One kache's producer threads: they end, and are joined, when the pool is dropped.
pub(crate) struct Pool {
    /// Closed on drop: the threads then find the queue empty and closed, and end.
    jobs: Option<SyncSender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

// === impl Pool ===

impl Pool {
    /// Starts `threads` producers counted in `counts`; None if not one could be spawned (callers then use
    /// the blocking pool).
    pub fn start(threads: usize, counts: &Arc<Counts>) -> Option<Pool> {
        let (jobs, rx) = sync_channel::<Job>(threads.max(1));
        let rx = Arc::new(Mutex::new(rx));
        let mut started = Vec::new();
        for i in 0..threads.max(1) {
            let (rx, counts) = (rx.clone(), counts.clone());
            let spawned =
                std::thread::Builder::new().name(format!("kache-heavy-{i}")).spawn(move || run(&rx, &counts));
            match spawned {
                Ok(thread) => started.push(thread),
                Err(e) => tracing::warn!(error = %e, "could not start a heavy-body producer thread"),
            }
        }
        (!started.is_empty()).then_some(Pool { jobs: Some(jobs), threads: started })
    }

    /// Queues `job`; it comes back if the queue is full, which the producer permits rule out.
    pub(crate) fn submit(&self, job: Job) -> Result<(), Job> {
        let Some(jobs) = &self.jobs else { return Err(job) };
        jobs.try_send(job).map_err(|e| match e {
            TrySendError::Full(job) | TrySendError::Disconnected(job) => job,
        })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        drop(self.jobs.take());
        // Each thread finishes the job it runs (bounded: one batch) and ends. Not joined from a producer
        // thread itself (the last owner dropped there): that one ends on its own.
        let me = std::thread::current().id();
        for thread in self.threads.drain(..) {
            if thread.thread().id() != me {
                let _ = thread.join();
            }
        }
    }
}

/// A producer thread: lowers its own priority, then runs jobs until the pool is dropped. A job that panics
/// is contained (its caller sees its result channel closed) so the thread lives on.
fn run(jobs: &Mutex<Receiver<Job>>, counts: &Counts) {
    let counter = if lower_own_priority() { &counts.lowered } else { &counts.normal };
    counter.fetch_add(1, Ordering::Relaxed);
    loop {
        // The lock is held only to receive; the job runs without it.
        let Some(job) = next(jobs) else { break };
        let _ = catch_unwind(AssertUnwindSafe(job));
    }
    counter.fetch_sub(1, Ordering::Relaxed);
}

/// The next job, `None` once the pool is dropped. When none is queued the thread goes idle: its heap is
/// collected (at most once per interval, [`crate::app::idle_collect`]), and once more if it is still idle an
/// interval later, so the last burst's pages are returned even when the first collection came too soon
/// after the one before. Collections run without the lock.
fn next(jobs: &Mutex<Receiver<Job>>) -> Option<Job> {
    match lock(jobs).try_recv() {
        Ok(job) => return Some(job),
        Err(TryRecvError::Disconnected) => return None,
        Err(TryRecvError::Empty) => {}
    }
    crate::app::idle_collect::on_idle();
    if let Some(every) = crate::app::idle_collect::interval() {
        match lock(jobs).recv_timeout(every) {
            Ok(job) => return Some(job),
            Err(RecvTimeoutError::Disconnected) => return None,
            Err(RecvTimeoutError::Timeout) => crate::app::idle_collect::on_idle(),
        }
    }
    lock(jobs).recv().ok()
}

/// The queue's receiver (a job that panicked never holds it, but a poisoned lock is still usable).
fn lock(jobs: &Mutex<Receiver<Job>>) -> MutexGuard<'_, Receiver<Job>> {
    jobs.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Raises the calling thread's nice value by [`NICE`]; false where that is not possible.
#[cfg(target_os = "linux")]
fn lower_own_priority() -> bool {
    // On Linux, PRIO_PROCESS with a thread id addresses that thread alone.
    let tid = rustix::thread::gettid();
    let Ok(now) = rustix::process::getpriority_process(Some(tid)) else { return false };
    rustix::process::setpriority_process(Some(tid), (now + NICE).min(19)).is_ok()
}

#[cfg(not(target_os = "linux"))]
fn lower_own_priority() -> bool {
    false
}

/// The calling thread's nice value (tests: the producers run at a lowered priority).
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn own_nice() -> i32 {
    rustix::process::getpriority_process(Some(rustix::thread::gettid()))
        .expect("one's own priority is readable")
}
