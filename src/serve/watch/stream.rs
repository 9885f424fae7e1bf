//! One watcher: a state machine polled by the HTTP body, so a watcher costs no task and no queue.
//!
//! Invariants:
//! - The broadcast receiver is subscribed when the watcher is built, *before* the snapshot or history is
//!   read, so no event can fall between them; live signals with RV ≤ `position` are skipped.
//! - `position` is the RV up to which the client has been told everything (events, history, snapshot,
//!   store progress). A BOOKMARK always carries `position`, so it never claims an RV whose events are still
//!   unsent: bookmarks travel in the same ordered stream as events.
//! - Store progress (an upstream bookmark or an applied freshness proof) is passed on as a BOOKMARK at
//!   once, at most one per [`PROGRESS_BOOKMARK_GAP`]; a progress that comes sooner is sent when the gap
//!   ends (whatever `position` is then). A kache downstream thus learns the proven revision promptly.
//! - Memory per watcher is O(1): a lagging receiver is closed (the shared ring overwrote what it did not
//!   send), initial events are read from the snapshot in bounded batches, and a resume replays the history
//!   through a cursor into the store's shared log (never a copy of the tail, however far back it starts).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::bookmark::{BookmarkShape, DISPATCH_TICK, PROGRESS_BOOKMARK_GAP, next_bookmark};
use super::error::StartError;
use super::filter::{Filter, Transition};
use super::frame::{self, FrameType, WatchView};
use super::proto::ProtoWatch;
use super::shared::{self, Variant};
use super::stats::{self, ActiveGuard, EndReason};
use crate::metrics::{Metrics, WatcherGuard};
use crate::store::{Cursor, Event, IndexGuard, Key, Signal, Snapshot, Store, Subscription, TooOld};

/// Initial events are sent in frames of about this size (one object may exceed it). The apiserver does not
/// flush between initial events either; batching saves a chunk header and a poll per object.
const INITIAL_FRAME_BYTES: usize = 64 << 10;

/// While replaying the history, a watcher checks every this many replayed events whether the live ring already
/// overwrote a signal it has not received: such a watcher would be closed as slow on reaching the live phase,
/// so it is closed at once instead of replaying the rest for nothing (in a reconnect storm, that is the work
/// of watchers that cannot keep up). Amortises the ring's lock over many events.
const REPLAY_LAG_CHECK: u32 = 64;

/// Upper bound on a watch's lifetime, whatever `timeoutSeconds` says (a week: far beyond any client's).
const MAX_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);

/// Where a watch starts (resolved from resourceVersion and sendInitialEvents as
/// staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go: watchCache.getAllEventsSinceLocked does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Send the state of a snapshot as ADDED events, then live events after the snapshot's RV.
    Snapshot {
        /// Wait until the store reaches this RV first (RV=N with sendInitialEvents): 504 after the wait timeout.
        wait_for: Option<u64>,
        /// Send the `k8s.io/initial-events-end` bookmark after the initial events (sendInitialEvents=true,
        /// when the client allows bookmarks).
        end_bookmark: bool,
    },
    /// Replay every history event with RV > `rv` (410 when older than the history), then live events.
    /// `None` starts at the store's current RV ("start anywhere").
    Resume { rv: Option<u64> },
}

/// Everything a watcher needs, resolved from the request.
#[derive(Debug, Clone)]
pub struct WatchSpec {
    pub start: Start,
    pub filter: Filter,
    pub view: WatchView,
    /// allowWatchBookmarks.
    pub bookmarks: bool,
    /// How long the watch lives (timeoutSeconds or the default lifetime); zero ends it at once.
    pub timeout: Duration,
    pub bookmark_interval: Duration,
    /// How long a sendInitialEvents watch waits for the store to reach its RV.
    pub wait_timeout: Duration,
    /// Subscribe to the ring of the index value the filter pins, if any (see [`super::WatchConfig`]).
    pub indexed: bool,
    /// Frames in protobuf (`view` is then `Full` or `PartialObjectMetadata`, matching the target).
    pub proto: Option<ProtoWatch>,
    /// A consistent WatchList proven by a census starts from exactly the snapshot the census matched.
    pub matched: Option<Matched>,
    /// The kache's table of frames shared between watchers.
    pub frames: Arc<shared::SharedFrames>,
}

pub use crate::fresh::Matched;

enum Phase {
    /// sendInitialEvents at a resourceVersion the store has not reached: wait for it, then the snapshot.
    Wait {
        rv: u64,
        end_bookmark: bool,
    },
    /// The start failed: send this ERROR event, then end.
    Failed(StartError),
    Initial {
        snapshot: Arc<Snapshot>,
        cursor: Option<Key>,
        end_bookmark: bool,
    },
    /// Replaying the history after the start RV, lazily from the shared log.
    Replay {
        events: Cursor<Arc<Event>>,
        /// Events replayed since the last lag check (see [`REPLAY_LAG_CHECK`]).
        unchecked: u32,
    },
    Live,
    Done,
}

/// One watch stream's state.
pub struct Watcher {
    store: Arc<Store>,
    rx: broadcast::Receiver<Signal>,
    /// The capacity of `rx`'s ring (a receiver further behind has lost signals).
    ring_capacity: usize,
    /// Present iff `rx` is an index ring's: the watcher's place in the index.
    index: Option<IndexGuard>,
    filter: Filter,
    view: WatchView,
    /// The kache's frames shared between watchers.
    frames: Arc<shared::SharedFrames>,
    /// Present iff the client negotiated protobuf.
    proto: Option<ProtoWatch>,
    /// Present iff the client allows bookmarks.
    bookmark: Option<BookmarkShape>,
    phase: Phase,
    /// See the module invariants.
    position: u64,
    /// Periodic bookmarks go out only once `position` passed this (the watcher's start RV).
    floor: u64,
    /// The store generation the watcher started on; a Reset to a newer one ends it.
    generation: u64,
    deadline: Instant,
    next_bookmark: Option<Instant>,
    /// The highest RV a bookmark of this watcher carried.
    bookmarked: u64,
    /// Table watches: the next Table frame is the watcher's first (it carries the column definitions).
    table_headers: bool,
    /// When this watcher last sent a bookmark (the progress bookmarks' rate bound).
    last_bookmark: Option<Instant>,
    /// A progress bookmark held back by [`PROGRESS_BOOKMARK_GAP`] is due then.
    progress_due: Option<Instant>,
    bookmark_interval: Duration,
    wait_timeout: Duration,
    /// Wakes the watcher at `min(next_bookmark, progress_due, deadline)` (only the deadline before the live
    /// phase).
    timer: Pin<Box<Sleep>>,
    token: CancellationToken,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    _active: ActiveGuard,
    /// This watcher in the resource's `kache_watchers`; closing it as slow counts there too.
    metrics: WatcherGuard,
    /// The kache's metrics (`apiserver_watch_list_duration_seconds`).
    recorder: Metrics,
    /// When the watch started (`apiserver_watch_list_duration_seconds` runs to its initial-events-end).
    started: Instant,
    /// The history to replay after the initial events (a start from a matched snapshot, [`Matched`]).
    after_initial: Option<Cursor<Arc<Event>>>,
}

// === impl Watcher ===

impl Watcher {
    /// Subscribes to the store now (before any history or snapshot read, see the module invariants).
    pub fn new(recorder: &Metrics, store: Arc<Store>, spec: WatchSpec, shutdown: CancellationToken) -> Self {
        let key = if spec.indexed { spec.filter.index_key() } else { None };
        let Subscription { rx, capacity: ring_capacity, index } = store.subscribe_indexed(key);
        let metrics = WatcherGuard::new(recorder, store.info());
        let now = Instant::now();
        // `timeoutSeconds` is client input: an absurd value must not overflow the clock.
        let deadline = now.checked_add(spec.timeout.min(MAX_LIFETIME)).unwrap_or(now);
        let bookmark = spec
            .bookmarks
            .then(|| BookmarkShape::new(store.info(), spec.view.clone(), store.bookmark_tail()));
        let next = if spec.bookmarks { next_bookmark(now, spec.bookmark_interval, deadline) } else { None };
        let mut watcher = Self {
            rx,
            ring_capacity,
            index,
            filter: spec.filter,
            view: spec.view,
            frames: spec.frames,
            proto: spec.proto,
            bookmark,
            phase: Phase::Done,
            position: 0,
            floor: 0,
            generation: 0,
            deadline,
            next_bookmark: next,
            bookmarked: 0,
            table_headers: true,
            last_bookmark: None,
            progress_due: None,
            bookmark_interval: spec.bookmark_interval,
            wait_timeout: spec.wait_timeout,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            shutdown: Box::pin(shutdown.clone().cancelled_owned()),
            token: shutdown,
            store,
            _active: ActiveGuard::new(recorder),
            metrics,
            recorder: recorder.clone(),
            started: now,
            after_initial: None,
        };
        match (spec.start, spec.matched) {
            (Start::Snapshot { end_bookmark, .. }, Some(matched)) => {
                watcher.start_matched(matched, end_bookmark)
            }
            (start, _) => watcher.start(start),
        }
        watcher
    }

    /// Resolves the start right after subscribing (at request time), so that what the watch replays
    /// does not depend on when the body is first polled.
    fn start(&mut self, start: Start) {
        match start {
            Start::Snapshot { wait_for: Some(rv), end_bookmark } if self.store.resource_version() < rv => {
                self.phase = Phase::Wait { rv, end_bookmark };
            }
            Start::Snapshot { end_bookmark, .. } => self.take_snapshot(end_bookmark),
            Start::Resume { rv: Some(rv) } => match self.store.history_after(rv) {
                Ok((events, generation)) => self.resume(rv, events, generation),
                Err(too_old) => self.phase = Phase::Failed(too_old.into()),
            },
            Start::Resume { rv: None } => {
                // "Start anywhere": at the current state, with nothing to replay.
                let state = self.store.load();
                self.resume(state.snapshot.rv, Cursor::default(), state.generation);
            }
        }
    }

    /// Whether the watcher writes protobuf frames.
    pub(crate) fn is_proto(&self) -> bool {
        self.proto.is_some()
    }

    /// For a protobuf watcher, whether every object its initial state or replayed history holds can be
    /// transcoded (transcoding them now, into their cells); a watch that cannot be served from memory is then
    /// forwarded before anything is sent. (Events that arrive later and fail end the stream instead.)
    pub(crate) fn proto_ready(&self) -> bool {
        let Some(proto) = &self.proto else { return true };
        match &self.phase {
            Phase::Initial { snapshot, cursor: None, .. } => match self.filter.range_after(None) {
                Some(range) => proto
                    .ready(snapshot.objects.range(range).map(|(_, o)| o).filter(|o| self.filter.matches(o))),
                None => true,
            },
            Phase::Replay { events, .. } => {
                let events: Vec<Arc<Event>> = events.clone().collect();
                proto.ready(events.iter().map(|e| &e.object))
            }
            _ => true,
        }
    }

    /// Starts from a snapshot a census matched ([`Matched`]): its state as the state at the census's
    /// revision (the initial-events-end bookmark carries it), then the store's events after that revision
    /// (those between the snapshot and the census undo each other and are skipped like any event at or
    /// before `position`). A store rebuilt by a relist since the census has lost that history: the watch ends
    /// with 410 and the client lists again.
    fn start_matched(&mut self, matched: Matched, end_bookmark: bool) {
        let rv = matched.snapshot.rv;
        match self.store.history_after(rv) {
            Ok((events, generation)) if generation == matched.generation => {
                self.generation = generation;
                self.position = matched.rv;
                self.floor = matched.rv;
                self.after_initial = Some(events);
                self.phase = Phase::Initial { snapshot: matched.snapshot, cursor: None, end_bookmark };
            }
            Ok(_) => {
                let oldest = self.store.resource_version();
                self.phase = Phase::Failed(TooOld { requested: rv, oldest }.into());
            }
            Err(too_old) => self.phase = Phase::Failed(too_old.into()),
        }
    }

    fn take_snapshot(&mut self, end_bookmark: bool) {
        let state = self.store.load();
        self.generation = state.generation;
        self.position = state.snapshot.rv;
        self.floor = state.snapshot.rv;
        self.phase = Phase::Initial { snapshot: state.snapshot.clone(), cursor: None, end_bookmark };
    }

    /// The next chunk of the response body; `None` ends the stream.
    pub async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if matches!(self.phase, Phase::Done) {
                return None;
            }
            let now = Instant::now();
            if self.token.is_cancelled() || now >= self.deadline {
                return self.finish(EndReason::Normal);
            }
            match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Done => return None,
                Phase::Failed(e) => return self.fail(e),
                Phase::Wait { rv, end_bookmark } => {
                    // Restored first: if this future is dropped while waiting, the next poll waits again.
                    self.phase = Phase::Wait { rv, end_bookmark };
                    tokio::select! {
                        biased;
                        _ = &mut self.shutdown => {}
                        _ = &mut self.timer => {}
                        reached = self.store.wait_for(rv, self.wait_timeout) => match reached {
                            Ok(()) => self.take_snapshot(end_bookmark),
                            Err(e) => return self.fail(e.into()),
                        },
                    }
                }
                Phase::Initial { snapshot, cursor, end_bookmark } => {
                    if let Some(frame) = self.initial(snapshot, cursor, end_bookmark) {
                        return Some(frame);
                    }
                }
                Phase::Replay { mut events, unchecked } => {
                    if unchecked >= REPLAY_LAG_CHECK && self.lagged() {
                        return self.finish(EndReason::Slow);
                    }
                    let before = events.remaining();
                    let frame = events.by_ref().find_map(|event| self.on_event(&event));
                    let replayed = u32::try_from(before - events.remaining()).unwrap_or(u32::MAX);
                    let unchecked = if unchecked >= REPLAY_LAG_CHECK {
                        replayed
                    } else {
                        unchecked.saturating_add(replayed)
                    };
                    match frame {
                        Some(frame) => {
                            self.phase = Phase::Replay { events, unchecked };
                            stats::record_events(&self.recorder, 1);
                            return Some(frame);
                        }
                        None => self.enter_live(None),
                    }
                }
                Phase::Live => {
                    self.phase = Phase::Live;
                    if self.progress_due.is_some_and(|t| t <= now) {
                        self.progress_due = None;
                        self.reset_timer();
                        if let Some(frame) = self.progress_bookmark(now) {
                            return Some(frame);
                        }
                    }
                    if self.next_bookmark.is_some_and(|t| t <= now)
                        && let Some(frame) = self.bookmark_due(now)
                    {
                        return Some(frame);
                    }
                    if let Some(frame) = self.live().await {
                        return Some(frame);
                    }
                }
            }
        }
    }

    fn resume(&mut self, rv: u64, events: Cursor<Arc<Event>>, generation: u64) {
        self.generation = generation;
        self.position = rv;
        self.floor = rv;
        self.phase = Phase::Replay { events, unchecked: 0 };
    }

    /// One frame of initial events, or the end of them (the initial-events-end bookmark, if due).
    fn initial(&mut self, snapshot: Arc<Snapshot>, cursor: Option<Key>, end_bookmark: bool) -> Option<Bytes> {
        let mut out = BytesMut::new();
        let mut last = cursor;
        let mut count = 0;
        if let Some(range) = self.filter.range_after(last.as_ref()) {
            for (key, object) in snapshot.objects.range(range) {
                last = Some(key.clone());
                if !self.filter.matches(object) {
                    continue;
                }
                match self.view.clone() {
                    WatchView::Table(table) => {
                        frame::put_table_frame(
                            &mut out,
                            FrameType::Added,
                            &table,
                            object,
                            self.table_headers,
                        );
                        self.table_headers = false;
                    }
                    view => match &self.proto {
                        Some(proto) => {
                            let frame = proto.object_frame(FrameType::Added, object);
                            if frame.is_empty() {
                                return self.untranscodable();
                            }
                            out.extend_from_slice(&frame);
                        }
                        None => frame::put_object_frame(&mut out, FrameType::Added, object, view),
                    },
                }
                count += 1;
                if out.len() >= INITIAL_FRAME_BYTES {
                    break;
                }
            }
        }
        let exhausted = out.len() < INITIAL_FRAME_BYTES;
        if !exhausted {
            stats::record_events(&self.recorder, count);
            self.phase = Phase::Initial { snapshot, cursor: last, end_bookmark };
            return Some(out.freeze());
        }
        stats::record_events(&self.recorder, count);
        match (&self.bookmark, end_bookmark) {
            (Some(shape), true) => {
                match &self.proto {
                    Some(proto) => {
                        let frame = proto.bookmark_frame(&shape.object_json(self.position, true));
                        if frame.is_empty() {
                            return self.untranscodable();
                        }
                        out.extend_from_slice(&frame);
                    }
                    None => shape.put_frame_headers(&mut out, self.position, true, self.table_headers),
                }
                self.table_headers = false;
                stats::record_bookmark(&self.recorder);
                self.recorder.watch_list_done(self.store.info(), self.started.elapsed());
                // The apiserver re-queues a watch-list watcher for the next dispatcher tick.
                let now = Instant::now();
                self.bookmarked = self.position;
                self.last_bookmark = Some(now);
                self.enter_live(next_bookmark(now, DISPATCH_TICK.min(self.bookmark_interval), self.deadline));
            }
            _ => self.enter_live(None),
        }
        if let Some(events) = self.after_initial.take() {
            // Started from a matched snapshot: what the store applied after it comes next, in order.
            self.phase = Phase::Replay { events, unchecked: 0 };
        }
        if out.is_empty() { None } else { Some(out.freeze()) }
    }

    /// Starts the live phase; `next` overrides the next bookmark time.
    fn enter_live(&mut self, next: Option<Instant>) {
        if next.is_some() {
            self.next_bookmark = next;
        }
        self.phase = Phase::Live;
        self.reset_timer();
    }

    fn reset_timer(&mut self) {
        let wake =
            [self.next_bookmark, self.progress_due].into_iter().flatten().fold(self.deadline, Instant::min);
        self.timer.as_mut().reset(wake);
    }

    /// A periodic bookmark is due: send one if the RV moved past the start, and schedule the next.
    fn bookmark_due(&mut self, now: Instant) -> Option<Bytes> {
        self.next_bookmark = next_bookmark(now, self.bookmark_interval, self.deadline);
        self.reset_timer();
        self.catch_up();
        if self.position <= self.floor {
            return None;
        }
        self.send_bookmark(now)
    }

    /// The store's proven revision moved `position`: a bookmark now, or when the rate bound allows
    /// (see the module invariants). Nothing when bookmarks are not allowed or one already carried it.
    fn progress_bookmark(&mut self, now: Instant) -> Option<Bytes> {
        self.catch_up();
        if self.bookmark.is_none() || self.position <= self.floor.max(self.bookmarked) {
            return None;
        }
        match self.last_bookmark.map(|t| t + PROGRESS_BOOKMARK_GAP) {
            Some(allowed) if now < allowed => {
                if self.progress_due.is_none() {
                    self.progress_due = Some(allowed);
                    self.reset_timer();
                }
                None
            }
            _ => self.send_bookmark(now),
        }
    }

    /// The BOOKMARK at `position` (which every sent event precedes).
    fn send_bookmark(&mut self, now: Instant) -> Option<Bytes> {
        let frame = match &self.proto {
            Some(proto) => {
                let frame = proto.bookmark_frame(&self.bookmark.as_ref()?.object_json(self.position, false));
                if frame.is_empty() {
                    return self.untranscodable();
                }
                frame
            }
            None => {
                let mut frame = BytesMut::new();
                self.bookmark.as_ref()?.put_frame_headers(
                    &mut frame,
                    self.position,
                    false,
                    self.table_headers,
                );
                frame.freeze()
            }
        };
        self.table_headers = false;
        stats::record_bookmark(&self.recorder);
        self.bookmarked = self.position;
        self.last_bookmark = Some(now);
        self.progress_due = None;
        // One bookmark serves a periodic one due at the same time.
        if self.next_bookmark.is_some_and(|t| t <= now) {
            self.next_bookmark = next_bookmark(now, self.bookmark_interval, self.deadline);
        }
        self.reset_timer();
        Some(frame)
    }

    /// Whether the live ring overwrote a signal this watcher has not received yet (it can only be closed as
    /// slow now). The ring holds its capacity rounded up to a power of two (tokio's `broadcast`).
    fn lagged(&self) -> bool {
        self.rx.len() > self.ring_capacity.next_power_of_two()
    }

    /// An indexed watcher's ring carries only the events that can concern it, so its `position` would
    /// stall between them: when the ring holds nothing unreceived, every event up to the store's
    /// dispatched revision has been seen, and `position` moves there (the store's invariant, dispatch.rs).
    /// Called before a bookmark, so an indexed watcher's bookmarks carry what an unindexed one's would.
    fn catch_up(&mut self) {
        if self.index.is_some() && matches!(self.phase, Phase::Live) {
            let dispatched = self.store.dispatched_rv();
            if self.rx.is_empty() && dispatched > self.position {
                self.position = dispatched;
            }
        }
    }

    /// Waits for the next live frame. `None` with the phase still `Live` means "loop again" (a timer fired
    /// or a signal produced nothing); `Done` means the stream ends.
    async fn live(&mut self) -> Option<Bytes> {
        loop {
            let signal = match self.rx.try_recv() {
                Ok(signal) => signal,
                Err(TryRecvError::Empty) => {
                    tokio::select! {
                        biased;
                        _ = &mut self.shutdown => return self.finish(EndReason::Normal),
                        _ = &mut self.timer => return None,
                        received = self.rx.recv() => match received {
                            Ok(signal) => signal,
                            Err(RecvError::Lagged(_)) => return self.finish(EndReason::Slow),
                            Err(RecvError::Closed) => return self.finish(EndReason::Normal),
                        },
                    }
                }
                Err(TryRecvError::Lagged(_)) => return self.finish(EndReason::Slow),
                Err(TryRecvError::Closed) => return self.finish(EndReason::Normal),
            };
            match signal {
                Signal::Event(event) => {
                    if let Some(frame) = self.on_event(&event) {
                        stats::record_events(&self.recorder, 1);
                        return Some(frame);
                    }
                    if matches!(self.phase, Phase::Done) {
                        // The event ended the stream (a protobuf watch's object that cannot be transcoded):
                        // end it now, not at the next event.
                        return None;
                    }
                }
                Signal::Progress(rv) if rv > self.position => {
                    self.position = rv;
                    if let Some(frame) = self.progress_bookmark(Instant::now()) {
                        return Some(frame);
                    }
                }
                Signal::Progress(_) => {}
                Signal::Reset { generation } if generation > self.generation => {
                    // The store was rebuilt from a relist: like the apiserver's terminateAllWatchers, end the
                    // stream; the client re-watches, and an RV older than the relist gets 410.
                    return self.finish(EndReason::Reset);
                }
                Signal::Reset { .. } => {}
            }
        }
    }

    /// The frame (if any) this watcher sends for a store event, advancing `position`.
    fn on_event(&mut self, event: &Arc<Event>) -> Option<Bytes> {
        if event.rv <= self.position {
            return None;
        }
        self.position = event.rv;
        let view = self.view.clone();
        if let WatchView::Table(table) = view {
            return self.table_event(event, &table);
        }
        if self.proto.is_some() {
            let frame = self.proto_event(event);
            return match frame {
                Some(frame) if frame.is_empty() => self.untranscodable(),
                frame => frame,
            };
        }
        let partial = view == WatchView::PartialObjectMetadata;
        // Every frame here is the same for all watchers that send it: built once per event and variant.
        let (variant, kind) = match self.filter.transition(event) {
            Transition::Skip => return None,
            Transition::AsIs if !partial => return Some(frame::shared_frame(event)),
            Transition::AsIs => (Variant::PartialAsIs, event.kind.into()),
            Transition::Entered => {
                (if partial { Variant::PartialEntered } else { Variant::Entered }, FrameType::Added)
            }
            Transition::Left => {
                let prev = event.prev.as_deref()?;
                let variant = if partial { Variant::PartialLeft } else { Variant::Left };
                return Some(
                    self.frames.frame(event, variant, || frame::departure_frame(prev, event.rv, view)),
                );
            }
        };
        Some(self.frames.frame(event, variant, || frame::object_frame(kind, &event.object, view)))
    }

    /// A store event's protobuf frame (`None`: nothing to send; empty: it could not be transcoded). Each
    /// frame is the same for all watchers that send it: built once per event and variant, as JSON lines.
    fn proto_event(&self, event: &Arc<Event>) -> Option<Bytes> {
        let proto = self.proto.as_ref()?;
        let partial = self.view == WatchView::PartialObjectMetadata;
        let (variant, kind) = match self.filter.transition(event) {
            Transition::Skip => return None,
            Transition::AsIs if !partial => return Some(proto.shared_full_frame(event)),
            Transition::AsIs => (Variant::ProtoPartialAsIs, event.kind.into()),
            Transition::Entered => {
                (if partial { Variant::ProtoPartialEntered } else { Variant::ProtoEntered }, FrameType::Added)
            }
            Transition::Left => {
                let prev = event.prev.as_deref()?;
                let variant = if partial { Variant::ProtoPartialLeft } else { Variant::ProtoLeft };
                return Some(self.frames.frame(event, variant, || proto.departure_frame(prev, event.rv)));
            }
        };
        Some(self.frames.frame(event, variant, || proto.object_frame(kind, &event.object)))
    }

    /// An object of this protobuf watch could not be transcoded: the stream ends (the client re-watches;
    /// the failure is counted in `kache_protobuf_transcode_failures_total`).
    fn untranscodable(&mut self) -> Option<Bytes> {
        tracing::warn!(resource = %self.store.info().gvr, "ending a protobuf watch: an object is not transcodable");
        self.finish(EndReason::Normal)
    }

    /// A store event as a one-row Table (per watcher: only its first event carries the column definitions,
    /// and ages are rendered now; the row's cells come from the row cache).
    fn table_event(&mut self, event: &Arc<Event>, table: &crate::codec::table::TableView) -> Option<Bytes> {
        let headers = self.table_headers;
        let frame = match self.filter.transition(event) {
            Transition::Skip => return None,
            Transition::AsIs => {
                let mut out = BytesMut::new();
                frame::put_table_frame(&mut out, event.kind.into(), table, &event.object, headers);
                out.freeze()
            }
            Transition::Entered => {
                let mut out = BytesMut::new();
                frame::put_table_frame(&mut out, FrameType::Added, table, &event.object, headers);
                out.freeze()
            }
            Transition::Left => {
                frame::table_departure_frame(event.prev.as_deref()?, event.rv, table, headers)
            }
        };
        self.table_headers = false;
        Some(frame)
    }

    /// Ends the watch with the ERROR event of `e`.
    fn fail(&mut self, e: StartError) -> Option<Bytes> {
        let reason = match e {
            StartError::Expired(_) => EndReason::Expired,
            StartError::TooLarge(_) => EndReason::TooLarge,
        };
        self.finish(reason);
        match self.proto {
            Some(_) => Some(super::proto::error_frame(&e.to_api_error())),
            None => Some(e.frame()),
        }
    }

    fn finish(&mut self, reason: EndReason) -> Option<Bytes> {
        stats::record_end(&self.recorder, reason);
        if reason == EndReason::Slow {
            self.metrics.slow_closed();
        }
        self.phase = Phase::Done;
        None
    }
}
