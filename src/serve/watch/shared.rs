//! Frames that differ from an event's own frame but not between watchers — the PartialObjectMetadata
//! view, and the ADDED/DELETED lines of selector transitions — built once per event and variant and shared.
//!
//! The full-view frames live in `Event::json_frame` and `Event::proto_frame`; these live in a small fixed
//! table of slots ([`SharedFrames`], one per kache, owned by its reads) indexed by the event's address. A slot holds a `Weak<Event>`, which keeps the allocation (not the event) alive, so
//! an address in a slot cannot be reused by another event: comparing addresses is an exact identity test.
//! A slot serves the most recent event that hashed to it; an evicted event's frames are simply rebuilt.

use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;

use crate::store::Event;

/// Slots in the table: enough that the events in flight to watchers at one time rarely collide.
const SLOTS: usize = 256;

/// A frame variant that is the same for every watcher that sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The event as is, in the PartialObjectMetadata view.
    PartialAsIs = 0,
    /// ADDED with the current object (entered a selection), full view.
    Entered = 1,
    /// DELETED with the previous object at the event's RV (left a selection), full view.
    Left = 2,
    PartialEntered = 3,
    PartialLeft = 4,
    /// The same five in protobuf (empty when the object could not be transcoded).
    ProtoPartialAsIs = 5,
    ProtoEntered = 6,
    ProtoLeft = 7,
    ProtoPartialEntered = 8,
    ProtoPartialLeft = 9,
}

const VARIANTS: usize = 10;

struct Slot {
    event: Weak<Event>,
    frames: [Option<Bytes>; VARIANTS],
}

/// The shared frames of one kache's watchers.
pub struct SharedFrames {
    slots: [Mutex<Option<Slot>>; SLOTS],
}

impl Default for SharedFrames {
    fn default() -> Self {
        SharedFrames { slots: [const { Mutex::new(None) }; SLOTS] }
    }
}

impl std::fmt::Debug for SharedFrames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFrames").finish_non_exhaustive()
    }
}

impl SharedFrames {
    /// The `variant` frame of `event`, built by `build` at most once while the event stays in its slot.
    pub fn frame(&self, event: &Arc<Event>, variant: Variant, build: impl FnOnce() -> Bytes) -> Bytes {
        frame_in(&self.slots, event, variant, build)
    }
}

fn frame_in(
    table: &[Mutex<Option<Slot>>; SLOTS],
    event: &Arc<Event>,
    variant: Variant,
    build: impl FnOnce() -> Bytes,
) -> Bytes {
    let addr = Arc::as_ptr(event);
    // Events are heap allocations of more than 64 bytes: drop the low bits before spreading.
    let index = ((addr as usize) >> 6).wrapping_mul(0x9E37_79B9) % SLOTS;
    let mut slot = table[index].lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let same = slot.as_ref().is_some_and(|s| std::ptr::eq(s.event.as_ptr(), addr));
    if !same {
        *slot = Some(Slot { event: Arc::downgrade(event), frames: Default::default() });
    }
    let frames = &mut slot.as_mut().expect("slot was just filled").frames;
    frames[variant as usize].get_or_insert_with(build).clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{EventType, Object};
    use std::sync::OnceLock;
    use tokio::time::Instant;

    fn event(rv: u64) -> Arc<Event> {
        let object = Arc::new(Object {
            key: Arc::from("ns/a"),
            ns_len: 2,
            uid: "u".into(),
            resource_version: rv,
            labels: Box::new([]),
            fields: Box::new([]),
            raw: Bytes::from_static(b"{}"),
            body_offset: 1,
            metadata_range: 0..0,
            proto: Default::default(),
        });
        Arc::new(Event {
            rv,
            kind: EventType::Added,
            object,
            prev: None,
            json_frame: OnceLock::new(),
            proto_frame: OnceLock::new(),
            applied_at: Instant::now(),
        })
    }

    #[test]
    fn built_once_per_event_and_variant() {
        let frames = SharedFrames::default();
        let e = event(1);
        let mut builds = 0;
        let a = frames.frame(&e, Variant::PartialAsIs, || {
            builds += 1;
            Bytes::from_static(b"a")
        });
        let b = frames.frame(&e, Variant::PartialAsIs, || {
            builds += 1;
            Bytes::from_static(b"b")
        });
        assert_eq!((a, b, builds), (Bytes::from_static(b"a"), Bytes::from_static(b"a"), 1));
        let c = frames.frame(&e, Variant::Entered, || Bytes::from_static(b"c"));
        assert_eq!(c, Bytes::from_static(b"c"), "variants are distinct");
    }

    #[test]
    fn a_new_event_never_gets_another_events_frame() {
        // Many short-lived events: addresses get reused by the allocator once an event is gone, but never
        // while a slot still references it.
        let frames = SharedFrames::default();
        for rv in 0..10_000u64 {
            let e = event(rv);
            let want = Bytes::from(rv.to_string());
            assert_eq!(frames.frame(&e, Variant::Left, || want.clone()), want);
        }
    }
}
