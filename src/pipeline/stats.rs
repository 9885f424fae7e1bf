//! Where answers came from, per kache instance: tests use these to prove a read was served from memory or
//! forwarded. The exported counterparts are `kache_encoding_total` and `apiserver_request_total{source}` of
//! the kache's [`Metrics`](crate::metrics::Metrics); these plain counters stay because they count what
//! the series do not separate (reads of cached resources only, YAML and Table apart from JSON, consistent
//! reads not proven fresh).

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crate::front::negotiate;
use crate::metrics;

/// Where answers came from (exported as metrics; tests use them to prove a read was served from memory).
#[derive(Debug, Default)]
pub struct HandlerStats {
    /// Reads answered from memory (including Status errors kache produced itself).
    pub memory: AtomicU64,
    /// Requests forwarded upstream.
    pub forwarded: AtomicU64,
    /// Consistent reads that could not be proven fresh in time (then forwarded or 429).
    pub not_fresh: AtomicU64,
    /// Reads of cached resources answered from memory, by negotiated encoding ([`ResponseEncoding`] index).
    pub encoding_memory: [AtomicU64; ResponseEncoding::COUNT],
    /// Reads of cached resources forwarded upstream, by negotiated encoding.
    pub encoding_forwarded: [AtomicU64; ResponseEncoding::COUNT],
}

/// The encoding negotiated for a read of a cached resource (406s are not counted: no encoding was chosen).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseEncoding {
    Json,
    /// `as=PartialObjectMetadata[List]` (v1 and v1beta1) as JSON.
    PartialMetadata,
    /// `as=Table` (JSON or YAML).
    Table,
    Protobuf,
    Yaml,
    Cbor,
}

// === impl ResponseEncoding ===

impl ResponseEncoding {
    pub(crate) const COUNT: usize = 6;
    pub const ALL: [ResponseEncoding; Self::COUNT] =
        [Self::Json, Self::PartialMetadata, Self::Table, Self::Protobuf, Self::Yaml, Self::Cbor];

    /// The encoding of a negotiation outcome; `None` for a 406.
    pub fn of(n: &negotiate::Negotiated) -> Option<Self> {
        use negotiate::Negotiated as N;
        Some(match n {
            N::Json { .. } => Self::Json,
            N::JsonPartialMetadata { .. } | N::PartialMetadataV1beta1 => Self::PartialMetadata,
            N::Table | N::JsonTable { .. } => Self::Table,
            N::Protobuf(_) => Self::Protobuf,
            N::Yaml => Self::Yaml,
            N::Cbor => Self::Cbor,
            N::NotAcceptable { .. } => return None,
        })
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The `encoding` label of `kache_encoding_total`.
    fn metric(self) -> metrics::Encoding {
        match self {
            Self::Json | Self::PartialMetadata | Self::Table => metrics::Encoding::Json,
            Self::Protobuf => metrics::Encoding::Protobuf,
            Self::Cbor => metrics::Encoding::Cbor,
            Self::Yaml => metrics::Encoding::Other,
        }
    }
}

impl HandlerStats {
    pub fn memory(&self) -> u64 {
        self.memory.load(Relaxed)
    }

    pub fn forwarded(&self) -> u64 {
        self.forwarded.load(Relaxed)
    }

    pub fn not_fresh(&self) -> u64 {
        self.not_fresh.load(Relaxed)
    }

    /// Reads in `encoding` answered from memory.
    pub fn encoding_memory(&self, encoding: ResponseEncoding) -> u64 {
        self.encoding_memory[encoding.index()].load(Relaxed)
    }

    /// Reads in `encoding` forwarded upstream.
    pub fn encoding_forwarded(&self, encoding: ResponseEncoding) -> u64 {
        self.encoding_forwarded[encoding.index()].load(Relaxed)
    }

    /// Counts one read of a cached resource by encoding and source (and exports it).
    pub(super) fn count_encoding(
        &self,
        metrics: &metrics::Metrics,
        encoding: Option<ResponseEncoding>,
        from_memory: bool,
    ) {
        let Some(e) = encoding else { return };
        let (counters, served) = if from_memory {
            (&self.encoding_memory, metrics::Served::Memory)
        } else {
            (&self.encoding_forwarded, metrics::Served::Forwarded)
        };
        counters[e.index()].fetch_add(1, Relaxed);
        metrics.encoding(e.metric(), served);
    }
}
