//! The list/watch loop of one resource, as an explicit state machine (kube-runtime's `watcher.rs` is the model).
//!
//! Invariants:
//! - The store is only ever replaced by a complete state (initial-events-end bookmark or last list page), built to
//!   the side while the previous state keeps serving.
//! - Events are applied in stream order, once per batch of already-available frames; the store skips events at
//!   or below its resourceVersion, so a re-watch that replays an event cannot apply it twice.
//! - `rv` in `Resume`/`Watching` is the last resourceVersion the store has been brought to by this stream: a
//!   re-watch from it loses nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::backoff::Backoff;
use super::config::{ReflectorConfig, SHORT_WATCH};
use super::decode::{self, DecodeError, WatchEvent};
use super::request::{self, ReflectError};
use super::status::{StatusCell, SyncState};
use super::stream::WatchStream;
use crate::metrics::Metrics;
use crate::resource::ResourceInfo;
use crate::store::{EventType, Key, Object, Writer};
use crate::upstream::Transport;

/// Where the reflector is.
#[derive(Debug)]
pub(crate) enum State {
    /// Start a full sync: a streaming list when the upstream supports it, else a paginated list.
    Sync,
    /// A streaming list is delivering its initial events; they accumulate to the side.
    InitialEvents { stream: WatchStream, side: HashMap<Key, Arc<Object>>, progress: Progress },
    /// A paginated consistent list; `continue_token` is the next page (`None`: the first).
    Listing { continue_token: Option<String>, side: Vec<Arc<Object>>, progress: Progress },
    /// The store is complete at `rv`; open a watch from there.
    Resume { rv: u64 },
    /// Following a watch; the store is at `rv`; `events` counts the events and bookmarks of this stream that
    /// advanced it.
    Watching { stream: WatchStream, rv: u64, opened: Instant, events: u64 },
    /// Waiting `delay` after a failure, then `then`.
    Backoff { delay: Duration, then: Box<State> },
}

// === impl State ===

impl State {
    pub(crate) fn sync_state(&self) -> SyncState {
        match self {
            Self::Sync => SyncState::Starting,
            Self::InitialEvents { .. } => SyncState::InitialEvents,
            Self::Listing { .. } => SyncState::Listing,
            Self::Resume { .. } => SyncState::Resuming,
            Self::Watching { .. } => SyncState::Watching,
            Self::Backoff { .. } => SyncState::Backoff,
        }
    }

    fn listing() -> Self {
        Self::Listing { continue_token: None, side: Vec::new(), progress: Progress::new() }
    }
}

/// Timing of a long initial sync, for progress logs.
#[derive(Debug)]
pub(crate) struct Progress {
    started: Instant,
    last_log: Instant,
}

impl Progress {
    fn new() -> Self {
        let now = Instant::now();
        Self { started: now, last_log: now }
    }

    fn maybe_log(&mut self, info: &ResourceInfo, objects: usize, every: Duration) {
        let now = Instant::now();
        if now.saturating_duration_since(self.last_log) >= every {
            self.last_log = now;
            let elapsed = now.saturating_duration_since(self.started);
            info!(resource = %info.gvr, objects, ?elapsed, "initial sync in progress");
        }
    }
}

/// One resource's reflector: owns the store's writer.
pub(crate) struct Reflector {
    transport: Arc<dyn Transport>,
    writer: Writer,
    info: ResourceInfo,
    config: Arc<ReflectorConfig>,
    status: Arc<StatusCell>,
    backoff: Backoff,
    /// Cleared once the upstream rejected a streaming list; later syncs use paginated lists.
    watch_list: bool,
    /// The store has been synced once; later full syncs are relists.
    synced_once: bool,
    /// Freshness proofs offered by readers ([`crate::store::Store::offer_progress`]), applied while watching.
    offers: tokio::sync::watch::Receiver<(u64, u64)>,
    /// Where upstream errors are counted (`kache_upstream_errors_total`).
    metrics: Metrics,
}

// === impl Reflector ===

impl Reflector {
    pub(crate) fn new(
        transport: Arc<dyn Transport>,
        writer: Writer,
        config: Arc<ReflectorConfig>,
        status: Arc<StatusCell>,
    ) -> Self {
        let info = writer.store().info().clone();
        let backoff = Backoff::new(&config);
        let watch_list = config.watch_list;
        let offers = writer.store().offered_progress();
        Self {
            transport,
            writer,
            info,
            config,
            status,
            backoff,
            watch_list,
            synced_once: false,
            offers,
            metrics: Metrics::default(),
        }
    }

    /// Counts upstream errors in `metrics` (the registry's) instead of an instance of its own.
    pub(crate) fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Runs the loop forever (the task is aborted to stop it).
    pub(crate) async fn run(mut self) {
        let mut state = State::Sync;
        let mut shown = None;
        loop {
            let now = state.sync_state();
            if shown != Some(now) {
                self.status.set_state(now);
                // Re-watching (every few minutes per resource) is routine; everything else is worth a line.
                if matches!(now, SyncState::Resuming | SyncState::Watching) && self.synced_once {
                    debug!(resource = %self.info.gvr, state = now.as_str(), "reflector state");
                } else {
                    info!(resource = %self.info.gvr, state = now.as_str(), "reflector state");
                }
                shown = Some(now);
            }
            state = self.step(state).await;
        }
    }

    /// Performs one transition.
    pub(crate) async fn step(&mut self, state: State) -> State {
        match state {
            State::Sync => self.start_sync().await,
            State::InitialEvents { stream, side, progress } => {
                self.initial_events(stream, side, progress).await
            }
            State::Listing { continue_token, side, progress } => {
                self.list_page(continue_token, side, progress).await
            }
            State::Resume { rv } => self.resume(rv).await,
            State::Watching { stream, rv, opened, events } => self.watch(stream, rv, opened, events).await,
            State::Backoff { delay, then } => {
                tokio::time::sleep(delay).await;
                *then
            }
        }
    }

    /// Records a failure and backs off before `then`.
    fn fail(&mut self, error: ReflectError, then: State) -> State {
        error.record(&self.metrics);
        if error.is_bad_bytes() {
            self.status.add_bad_frames(1);
        }
        let delay = self.backoff.next_delay(error.retry_after());
        warn!(resource = %self.info.gvr, %error, ?delay, "upstream request failed; backing off");
        if error.is_rejection() && !self.synced_once {
            self.status.set_rejected(true);
        }
        self.status.set_error(error.to_string());
        State::Backoff { delay, then: Box::new(then) }
    }

    /// A streaming list failed in a way a paginated list may not: use lists from now on.
    fn fall_back(&mut self, error: ReflectError) -> State {
        error.record(&self.metrics);
        if error.is_bad_bytes() {
            self.status.add_bad_frames(1);
        }
        warn!(resource = %self.info.gvr, %error, "streaming list not usable; falling back to a paginated list");
        self.status.set_error(error.to_string());
        self.watch_list = false;
        State::listing()
    }

    fn watch_timeout_secs(&self) -> u64 {
        let min = self.config.min_watch_timeout.as_secs().max(1);
        min + rand::rng().random_range(0..min)
    }

    /// Publishes a complete state in one swap.
    fn publish(
        &mut self,
        objects: impl IntoIterator<Item = Arc<Object>>,
        count: usize,
        rv: u64,
        started: Instant,
    ) {
        self.writer.replace(objects, rv);
        if self.synced_once {
            self.status.add_relist();
        }
        self.synced_once = true;
        self.status.set_rejected(false);
        self.backoff.reset();
        self.status.add_events(0);
        let elapsed = started.elapsed();
        self.writer.store().record_full_list(elapsed);
        info!(resource = %self.info.gvr, objects = count, rv, ?elapsed, "synced");
    }

    /// Applies a batch of changes in one publish.
    fn flush(&mut self, batch: &mut Vec<(EventType, Arc<Object>)>) {
        if batch.is_empty() {
            return;
        }
        let outcome = self.writer.apply(batch.drain(..));
        if outcome.unknown_deletes > 0 {
            debug!(resource = %self.info.gvr, n = outcome.unknown_deletes, "deletions of unknown objects skipped");
        }
        self.status.add_events(outcome.applied as u64);
    }

    async fn start_sync(&mut self) -> State {
        if !self.watch_list {
            return State::listing();
        }
        let req =
            request::watch_list(&self.info.gvr, self.config.selector.as_deref(), self.watch_timeout_secs());
        match request::open_watch(&*self.transport, req, &self.config).await {
            Ok((stream, warnings)) => {
                self.writer.learn_warnings(warnings);
                State::InitialEvents { stream, side: HashMap::new(), progress: Progress::new() }
            }
            Err(e) if e.is_rejection() => self.fall_back(e),
            Err(e) => self.fail(e, State::Sync),
        }
    }

    async fn initial_events(
        &mut self,
        mut stream: WatchStream,
        mut side: HashMap<Key, Arc<Object>>,
        mut progress: Progress,
    ) -> State {
        let mut lines = Vec::new();
        let read = stream.next_batch(self.config.max_batch, &mut lines).await;
        let mut lines = lines.into_iter();
        while let Some(line) = lines.next() {
            match decode::decode_event(line, &self.info) {
                Ok(WatchEvent::Change(EventType::Deleted, object)) => {
                    side.remove(&object.key);
                }
                Ok(WatchEvent::Change(_, object)) => {
                    side.insert(object.key.clone(), object);
                }
                Ok(WatchEvent::Bookmark { rv, initial_events_end: true, tail }) => {
                    if let Some(tail) = tail {
                        self.writer.learn_bookmark_tail(tail);
                    }
                    let count = side.len();
                    self.publish(side.into_values(), count, rv, progress.started);
                    let (mut rv, mut events) = (rv, 0);
                    // Lines after the bookmark in this batch are already live events.
                    if let Some(next) = self.live_lines(lines, &mut rv, &mut events) {
                        return next;
                    }
                    return match read {
                        Ok(true) => State::Watching { stream, rv, opened: Instant::now(), events },
                        _ => State::Resume { rv },
                    };
                }
                Ok(WatchEvent::Bookmark { .. }) => {
                    // An apiserver that streams lists annotates the first bookmark; an ordinary one first means
                    // it ignored `sendInitialEvents` (and would never send the end marker).
                    return self
                        .fall_back(ReflectError::NoInitialEventsEnd("an ordinary bookmark came first"));
                }
                Ok(WatchEvent::Error(status)) => {
                    let error = ReflectError::Api(status);
                    return if error.is_rejection() {
                        self.fall_back(error)
                    } else {
                        self.fail(error, State::Sync)
                    };
                }
                Err(DecodeError::Object(e)) => self.skip_object(&e.to_string()),
                Err(e) => return self.fall_back(e.into()),
            }
        }
        progress.maybe_log(&self.info, side.len(), self.config.progress_log_interval);
        match read {
            Ok(true) => State::InitialEvents { stream, side, progress },
            Ok(false) => self.fall_back(ReflectError::NoInitialEventsEnd("the stream ended")),
            Err(e) if e.is_bad_bytes() => self.fall_back(e),
            Err(e) => self.fail(e, State::Sync),
        }
    }

    fn skip_object(&mut self, error: &str) {
        self.status.add_bad_frames(1);
        warn!(resource = %self.info.gvr, error, "skipping an object the upstream sent without usable metadata");
    }

    async fn list_page(
        &mut self,
        continue_token: Option<String>,
        mut side: Vec<Arc<Object>>,
        mut progress: Progress,
    ) -> State {
        let req = request::list(
            &self.info.gvr,
            self.config.selector.as_deref(),
            self.config.page_size,
            continue_token.as_deref(),
        );
        let page = match request::fetch(&*self.transport, req, &self.config).await {
            Ok((body, warnings)) => {
                self.writer.learn_warnings(warnings);
                decode::decode_list(&body, &self.info).map_err(ReflectError::from)
            }
            Err(e) => Err(e),
        };
        match page {
            Ok(page) => {
                if page.skipped > 0 {
                    self.status.add_bad_frames(page.skipped as u64);
                    warn!(resource = %self.info.gvr, n = page.skipped, "skipped list items without usable metadata");
                }
                side.extend(page.items);
                match page.continue_token {
                    Some(token) => {
                        progress.maybe_log(&self.info, side.len(), self.config.progress_log_interval);
                        State::Listing { continue_token: Some(token), side, progress }
                    }
                    None => {
                        let count = side.len();
                        self.publish(side, count, page.rv, progress.started);
                        State::Resume { rv: page.rv }
                    }
                }
            }
            Err(e) if e.is_gone() && continue_token.is_some() => {
                e.record(&self.metrics);
                info!(resource = %self.info.gvr, "continue token expired; restarting the list");
                State::listing()
            }
            Err(e) => self.fail(e, State::Listing { continue_token, side, progress }),
        }
    }

    async fn resume(&mut self, rv: u64) -> State {
        let req =
            request::watch(&self.info.gvr, self.config.selector.as_deref(), rv, self.watch_timeout_secs());
        match request::open_watch(&*self.transport, req, &self.config).await {
            Ok((stream, warnings)) => {
                self.writer.learn_warnings(warnings);
                State::Watching { stream, rv, opened: Instant::now(), events: 0 }
            }
            Err(e) if e.is_gone() => {
                e.record(&self.metrics);
                info!(resource = %self.info.gvr, rv, "resourceVersion expired; relisting");
                State::Sync
            }
            Err(e) => self.fail(e, State::Resume { rv }),
        }
    }

    async fn watch(
        &mut self,
        mut stream: WatchStream,
        mut rv: u64,
        opened: Instant,
        mut events: u64,
    ) -> State {
        let mut lines = Vec::new();
        // Reading is cancel-safe: an offer taken instead loses no line.
        let next = tokio::select! {
            read = stream.next_batch(self.config.max_batch, &mut lines) => Ok(read),
            offered = self.offers.changed() => Err(offered.is_ok()),
        };
        let read = match next {
            Ok(read) => read,
            Err(offered) => {
                if offered {
                    let (from, upto) = *self.offers.borrow_and_update();
                    self.apply_offer(from, upto, &mut rv);
                }
                return State::Watching { stream, rv, opened, events };
            }
        };
        if let Some(next) = self.live_lines(lines.into_iter(), &mut rv, &mut events) {
            return next;
        }
        match read {
            Ok(true) => State::Watching { stream, rv, opened, events },
            Ok(false) => {
                let lived = opened.elapsed();
                if events == 0 && lived < SHORT_WATCH {
                    return self.fail(ReflectError::ShortWatch(lived), State::Resume { rv });
                }
                self.status.add_watch_restart();
                debug!(resource = %self.info.gvr, rv, "watch closed; re-watching");
                State::Resume { rv }
            }
            Err(e @ ReflectError::Stalled(_)) => {
                // A quiet resource may get no bookmark at all while the RV does not move: not an error.
                info!(resource = %self.info.gvr, rv, error = %e, "watch silent; re-watching from the last resourceVersion");
                self.status.add_watch_restart();
                State::Resume { rv }
            }
            Err(e) => {
                // Unusable bytes (an oversized or truncated frame) count as bad frames and back off like any
                // failure: an upstream that sends the same broken frame again must not be re-watched in a loop.
                self.status.add_watch_restart();
                self.fail(e, State::Resume { rv })
            }
        }
    }

    /// Applies a reader's proof that the upstream has no event of this resource in `(from, upto]`: a store at
    /// `from` or beyond (and not past `upto`) is then the state at `upto`, exactly like after a bookmark.
    fn apply_offer(&mut self, from: u64, upto: u64, rv: &mut u64) {
        let at = self.writer.store().resource_version();
        if at >= from && upto > at && *rv >= from {
            debug!(resource = %self.info.gvr, from, upto, "freshness proof applied as progress");
            self.writer.progress(upto);
            *rv = (*rv).max(upto);
        }
    }

    /// Handles live watch lines: changes are batched into one store publish, a bookmark flushes the batch and
    /// advances the resourceVersion, an ERROR or an unparseable frame ends the stream (the returned state, a
    /// backoff unless the ERROR is a 410; `None`: keep reading).
    fn live_lines(
        &mut self,
        lines: impl Iterator<Item = Bytes>,
        rv: &mut u64,
        events: &mut u64,
    ) -> Option<State> {
        let mut batch = Vec::new();
        let mut outcome = None;
        for line in lines {
            match decode::decode_event(line, &self.info) {
                Ok(WatchEvent::Change(kind, object)) => {
                    // Only progress counts: an upstream replaying stale events and closing at once is a short
                    // watch (backed off), not a live one to re-open immediately.
                    if object.resource_version > *rv {
                        *rv = object.resource_version;
                        *events += 1;
                    }
                    batch.push((kind, object));
                }
                Ok(WatchEvent::Bookmark { rv: at, tail, .. }) => {
                    if let Some(tail) = tail {
                        self.writer.learn_bookmark_tail(tail);
                    }
                    self.flush(&mut batch);
                    self.writer.progress(at);
                    self.status.add_events(0);
                    if at > *rv {
                        *rv = at;
                        *events += 1;
                    }
                }
                Ok(WatchEvent::Error(status)) => {
                    let error = ReflectError::Api(status);
                    outcome = Some(if error.is_gone() {
                        error.record(&self.metrics);
                        info!(resource = %self.info.gvr, rv = *rv, "watch expired (410); relisting");
                        State::Sync
                    } else {
                        self.status.add_watch_restart();
                        self.fail(error, State::Resume { rv: *rv })
                    });
                    break;
                }
                Err(DecodeError::Object(e)) => self.skip_object(&e.to_string()),
                Err(e) => {
                    // Counted as a bad frame by `fail`; backed off, since the upstream may send it again.
                    self.status.add_watch_restart();
                    warn!(resource = %self.info.gvr, rv = *rv, error = %e, "unparseable watch frame; re-watching from the last good resourceVersion");
                    outcome = Some(self.fail(e.into(), State::Resume { rv: *rv }));
                    break;
                }
            }
        }
        self.flush(&mut batch);
        outcome
    }
}
