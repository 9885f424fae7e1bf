//! Protobuf watch frames: each a 4-byte big-endian length and a `WatchEvent` whose object is the enveloped
//! message (`runtime/serializer/protobuf`'s stream framing), built from the cached message of each object
//! version ([`crate::serve::protobuf::ProtoTarget::message`]).
//!
//! A store event's frame is built once per event and encoding: the full object's in `Event::proto_frame`,
//! the others (metadata view, selector transitions) in the shared table ([`super::shared`]), exactly as the
//! JSON lines. An empty frame marks an event that could not be transcoded: the watcher then ends its stream
//! (the client re-watches), since a stream that has started cannot be forwarded.

use std::sync::Arc;

use bytes::Bytes;

use super::frame::{FrameType, rewrite_resource_version, top_level_member};
use crate::codec::proto as pb;
use crate::codec::status::ApiError;
use crate::metrics::Metrics;
use crate::resource::Gvr;
use crate::serve::protobuf::ProtoTarget;
use crate::store::{Event, Object};

/// A watcher's protobuf encoding: what its objects are encoded as, and the resource (for failure counts).
#[derive(Clone, Debug)]
pub struct ProtoWatch {
    pub target: ProtoTarget,
    pub gvr: Gvr,
    /// The kache's metrics (`kache_protobuf_transcode_failures_total`).
    pub metrics: Metrics,
}

// === impl ProtoWatch ===

impl ProtoWatch {
    /// The frame of `object` as an event of type `kind`; empty when it cannot be transcoded.
    pub(crate) fn object_frame(&self, kind: FrameType, object: &Object) -> Bytes {
        self.frame(kind.as_str(), self.target.message(object, &self.gvr, &self.metrics))
    }

    /// The shared frame of a store event as is, in the full view: built once per event.
    pub(crate) fn shared_full_frame(&self, event: &Event) -> Bytes {
        event
            .proto_frame
            .get_or_init(|| {
                let frame = self.object_frame(event.kind.into(), &event.object);
                (!frame.is_empty()).then_some(frame)
            })
            .clone()
            .unwrap_or_default()
    }

    /// The DELETED frame of an object leaving a selection: the previous object at the event's RV.
    pub(crate) fn departure_frame(&self, prev: &Object, rv: u64) -> Bytes {
        let raw = match top_level_member(&prev.raw, b"metadata") {
            Some(range) => rewrite_resource_version(&prev.raw, range, rv),
            None => prev.raw.to_vec(),
        };
        self.frame(FrameType::Deleted.as_str(), self.target.message_of_json(&raw, &self.gvr, &self.metrics))
    }

    /// The BOOKMARK frame of a bookmark object given as JSON.
    pub(crate) fn bookmark_frame(&self, json: &[u8]) -> Bytes {
        self.frame(FrameType::Bookmark.as_str(), self.target.message_of_json(json, &self.gvr, &self.metrics))
    }

    fn frame(&self, event_type: &str, message: Option<Bytes>) -> Bytes {
        let Some(message) = message else { return Bytes::new() };
        let (api_version, kind) = self.target.type_meta();
        Bytes::from(pb::watch_frame(event_type, api_version, kind, &message))
    }

    /// Whether every object of `objects` can be transcoded (transcoding them now, into their cells):
    /// checked before a watch starts, so that one that cannot be served is forwarded instead.
    pub fn ready<'a>(&self, objects: impl IntoIterator<Item = &'a Arc<Object>>) -> bool {
        objects.into_iter().all(|o| self.target.message(o, &self.gvr, &self.metrics).is_some())
    }
}

/// The ERROR frame of `err` (a protobuf `Status`).
pub fn error_frame(err: &ApiError) -> Bytes {
    Bytes::from(pb::status_watch_frame(err))
}
