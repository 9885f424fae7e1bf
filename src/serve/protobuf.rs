//! Protobuf (`application/vnd.kubernetes.protobuf`) served from memory.
//!
//! kache keeps its JSON store and transcodes each object version to its protobuf message on first use
//! (`codec::proto`, a schema derived from the Kubernetes types), caching the message in the version itself
//! ([`crate::store::ProtoCells`]). A get is the message in the `k8s\0` + `runtime.Unknown` envelope; a list is
//! the list kind's envelope around its `ListMeta` and the cached item messages, copied into bounded chunks; a
//! watch frame is built once per event (see `watch::stream`). Selectors, indexes, pagination, snapshots and
//! history work unchanged because they run on the JSON store.
//!
//! What is served: objects of kinds with a protobuf schema ([`crate::codec::proto::proto_kind`]) and the v1
//! `PartialObjectMetadata[List]` views of every cached resource (custom resources included: the metadata
//! view has a protobuf form whatever the kind). Everything else negotiated as protobuf is forwarded: custom
//! resources' objects (the CRD handler cannot encode unstructured objects in protobuf; the upstream answers),
//! the v1beta1 views, and any read whose objects fail to transcode (counted in
//! `kache_protobuf_transcode_failures_total`), so a protobuf client never sees a kache-only answer.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::codec::proto::{self as pb, ProtoKind};
use crate::codec::{gzip, list as listcodec};
use crate::front::body::{self, Body};
use crate::metrics::Metrics;
use crate::resource::{Gvr, ResourceInfo};
use crate::serve::admit::{self, Admission};
use crate::serve::gzcache::GzipCache;
use crate::serve::list::{NotServed, Record, ResponseOptions};
use crate::serve::watch::frame::top_level_member;
use crate::store::Object;

/// `meta.k8s.io/v1`, the group version of the metadata views.
const META_V1: &str = "meta.k8s.io/v1";

/// What the objects of a protobuf response are encoded as.
#[derive(Clone, Debug)]
pub enum ProtoTarget {
    /// The resource's own kind (and its list kind).
    Object(Arc<ProtoKind>),
    /// `PartialObjectMetadata` (`PartialObjectMetadataList` for lists).
    Metadata,
}

// === impl ProtoTarget ===

impl ProtoTarget {
    /// The target for the resource's own kind; `None` when kache has no protobuf schema for it (custom
    /// resources, kinds outside the schema): such reads are forwarded.
    pub(crate) fn for_object(info: &ResourceInfo) -> Option<Self> {
        if info.list_items_have_type_meta {
            return None;
        }
        pb::proto_kind(&info.gvr.group, &info.gvr.version, &info.kind).map(|k| Self::Object(Arc::new(k)))
    }

    /// The envelope's (apiVersion, kind) of one object.
    pub fn type_meta(&self) -> (&str, &str) {
        match self {
            Self::Object(k) => (k.api_version(), k.kind()),
            Self::Metadata => (META_V1, "PartialObjectMetadata"),
        }
    }

    /// The envelope's (apiVersion, kind) of a list.
    pub(crate) fn list_type_meta(&self) -> (&str, &str) {
        match self {
            Self::Object(k) => (k.api_version(), k.list_kind()),
            Self::Metadata => (META_V1, "PartialObjectMetadataList"),
        }
    }

    /// The cached message of `object` in this target, transcoded on first use; `None` (counted once per
    /// version) when it cannot be transcoded.
    pub fn message(&self, object: &Object, gvr: &Gvr, metrics: &Metrics) -> Option<Bytes> {
        match self {
            Self::Object(kind) => object
                .proto
                .full(metrics.proto_bytes(), || counted(gvr, metrics, kind.encode_object(&object.raw))),
            Self::Metadata => object.proto.meta(metrics.proto_bytes(), || {
                let metadata = metadata_of(&object.raw, Some(object.metadata_range.clone()));
                counted(gvr, metrics, partial_message(metadata))
            }),
        }
    }

    /// The message of an object given as JSON bytes (not cached: bookmarks, departures at a rewritten RV).
    pub(crate) fn message_of_json(&self, json: &[u8], gvr: &Gvr, metrics: &Metrics) -> Option<Bytes> {
        let encoded = match self {
            Self::Object(kind) => kind.encode_object(json),
            Self::Metadata => partial_message(metadata_of(json, None)),
        };
        counted(gvr, metrics, encoded).map(Bytes::from)
    }
}

/// Counts a failed transcode of `gvr` (and logs why); the message otherwise.
fn counted<E: std::fmt::Display>(
    gvr: &Gvr,
    metrics: &Metrics,
    encoded: Result<Vec<u8>, E>,
) -> Option<Vec<u8>> {
    match encoded {
        Ok(message) => Some(message),
        Err(e) => {
            tracing::warn!(resource = %gvr, error = %e, "object not transcodable to protobuf; forwarding");
            metrics.protobuf_transcode_failed(gvr);
            None
        }
    }
}

/// The `metadata` value of an object's JSON: the recorded range when it is an object span, else scanned.
fn metadata_of(raw: &[u8], recorded: Option<std::ops::Range<u32>>) -> &[u8] {
    let recorded = recorded
        .and_then(|r| raw.get(r.start as usize..r.end as usize))
        .filter(|m| m.first() == Some(&b'{') && m.last() == Some(&b'}'));
    recorded.or_else(|| top_level_member(raw, b"metadata").map(|r| &raw[r])).unwrap_or(b"{}")
}

/// A `PartialObjectMetadata` message: its only field, `metadata` (1), the object's `ObjectMeta`.
fn partial_message(metadata_json: &[u8]) -> Result<Vec<u8>, pb::TranscodeError> {
    pb::encode_object_meta(metadata_json).map(|meta| pb::partial_object_metadata_message(&meta))
}

// === responses ===

/// A get: the object's message in its envelope.
pub(crate) fn get_response(
    target: &ProtoTarget,
    object: &Object,
    gvr: &Gvr,
    metrics: &Metrics,
    opts: ResponseOptions,
) -> Option<Response<Body>> {
    let message = target.message(object, gvr, metrics)?;
    let (api_version, kind) = target.type_meta();
    Some(respond_whole(StatusCode::OK, Bytes::from(pb::envelope(api_version, kind, &message)), opts.gzip))
}

/// A complete protobuf body, gzipped (level 1) when accepted and over the apiserver's threshold.
pub(crate) fn respond_whole(status: StatusCode, bytes: Bytes, gzip_ok: bool) -> Response<Body> {
    let builder = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, HeaderValue::from_static(pb::MEDIA_TYPE))
        .header(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    let (builder, body) = if gzip_ok && gzip::should_compress(bytes.len()) {
        let compressed = gzip::compress(&[bytes]);
        let builder = builder
            .header(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"))
            .header(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        (builder.header(header::CONTENT_LENGTH, compressed.len()), body::full(compressed))
    } else {
        (builder.header(header::CONTENT_LENGTH, bytes.len()), body::full(bytes))
    };
    builder.body(body).expect("static headers are valid")
}

/// A list's body: the envelope and `ListMeta` (`prefix`), each item's field header and cached message,
/// and `suffix`; cut into chunks of about [`listcodec::LIST_CHUNK_BYTES`] as the body is sent.
pub(crate) struct ProtoListChunks {
    prefix: Option<Bytes>,
    items: std::vec::IntoIter<Bytes>,
    suffix: Option<Bytes>,
    len: usize,
}

// === impl ProtoListChunks ===

impl ProtoListChunks {
    /// Transcodes (or takes from the cells) every item's message first — a list kind's envelope states its
    /// length — and fails when one cannot be transcoded: the whole list is then forwarded.
    pub fn new(
        target: &ProtoTarget,
        gvr: &Gvr,
        metrics: &Metrics,
        meta: &listcodec::ListMeta,
        items: &[Arc<Object>],
    ) -> Option<Self> {
        let messages: Vec<Bytes> =
            items.iter().map(|o| target.message(o, gvr, metrics)).collect::<Option<Vec<Bytes>>>()?;
        let lens: Vec<usize> = messages.iter().map(Bytes::len).collect();
        let rv = meta.resource_version.to_string();
        let list_meta = pb::ListMeta {
            resource_version: &rv,
            continue_token: meta.continue_token.as_deref().unwrap_or(""),
            remaining_item_count: meta.remaining_item_count,
        };
        let (api_version, list_kind) = target.list_type_meta();
        let (prefix, suffix) = pb::list_parts(api_version, list_kind, &list_meta, &lens);
        let mut scratch = Vec::with_capacity(16);
        let headers: usize = lens
            .iter()
            .map(|&len| {
                scratch.clear();
                pb::list_item_header(len, &mut scratch);
                scratch.len() + len
            })
            .sum();
        let len = prefix.len() + headers + suffix.len();
        Some(Self {
            prefix: Some(Bytes::from(prefix)),
            items: messages.into_iter(),
            suffix: Some(Bytes::from(suffix)),
            len,
        })
    }

    /// The exact number of bytes the chunks add up to.
    pub(crate) fn total_len(&self) -> usize {
        self.len
    }
}

impl Iterator for ProtoListChunks {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        let mut out = Vec::with_capacity(listcodec::LIST_CHUNK_BYTES + listcodec::CHUNK_SLACK);
        if let Some(prefix) = self.prefix.take() {
            out.extend_from_slice(&prefix);
        }
        let mut items = 0;
        while out.len() < listcodec::LIST_CHUNK_BYTES {
            // A message that would not fit starts the next chunk: grown, the buffer would double (see
            // `CHUNK_SLACK`). A field header takes at most 11 bytes.
            if let Some(next) = self.items.as_slice().first()
                && items > 0
                && out.len() + 11 + next.len() > out.capacity()
            {
                break;
            }
            items += 1;
            match self.items.next() {
                Some(message) => {
                    pb::list_item_header(message.len(), &mut out);
                    out.extend_from_slice(&message);
                }
                None => {
                    if let Some(suffix) = self.suffix.take() {
                        out.extend_from_slice(&suffix);
                    }
                    break;
                }
            }
        }
        if out.is_empty() { None } else { Some(Bytes::from(out)) }
    }
}

/// Where a list's protobuf body may be shared from (see [`crate::serve::list::serve_list`]).
pub(crate) struct ListCache<'a> {
    pub cache: &'a GzipCache,
    pub key: String,
}

/// A list response in protobuf, streamed with bounded buffers, gzipped as the apiserver would (through the
/// gzip cache for whole resources/namespaces at a current snapshot), charged to `budget` until its body ends.
pub(crate) async fn list_response(
    chunks: ProtoListChunks,
    opts: ResponseOptions,
    cache: Option<ListCache<'_>>,
    record: Option<Record>,
    rv: u64,
    mut admission: Admission<'_>,
) -> Result<Response<Body>, NotServed> {
    let len = chunks.total_len();
    let charge = admission.charge(len).map_err(|_| NotServed::Overloaded)?;
    let builder = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, HeaderValue::from_static(pb::MEDIA_TYPE))
        .header(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    let (builder, body) = if opts.gzip && gzip::should_compress(len) {
        let builder = builder
            .header(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"))
            .header(header::VARY, HeaderValue::from_static("Accept-Encoding"));
        match cache {
            Some(ListCache { cache, key }) => {
                let compressed = cache.get_or_compress(&admission.producers(), &key, rv, chunks).await;
                (builder.header(header::CONTENT_LENGTH, compressed.len()), body::full(compressed))
            }
            // Compressed on the fly: a heavy body, admitted like the JSON ones.
            None => {
                let slot = admission.heavy().map_err(|_| NotServed::Overloaded)?;
                let body = admit::offloaded(admission.producers(), gzip::GzipChunks::new(chunks));
                (
                    builder,
                    match slot {
                        Some(slot) => body::guarded(body, slot),
                        None => body,
                    },
                )
            }
        }
    } else {
        let body = match record {
            Some(record) => record.body(len, chunks).await,
            None => body::stream_iter(chunks),
        };
        (builder.header(header::CONTENT_LENGTH, len), body)
    };
    let resp = builder.body(body).expect("static headers are valid");
    Ok(match charge {
        Some(charge) => admit::hold(resp, charge),
        None => resp,
    })
}
