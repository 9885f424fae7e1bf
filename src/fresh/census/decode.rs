//! Reading a protobuf census as it arrives: the `runtime.Unknown` envelope and the list inside it give every
//! length up front (`raw`, then each `items` entry), so each item is decoded as soon as its last byte
//! arrives and handed on; only an item split between two chunks is copied, and only until it is whole.

use std::borrow::Cow;
use std::ops::ControlFlow;

use crate::codec::proto::{Malformed, Value, last_len_field, len_fields};

/// The envelope every Kubernetes protobuf object starts with, followed by a `runtime.Unknown`.
pub(super) const PROTOBUF_MAGIC: &[u8] = b"k8s\0";

/// The largest list entry (one object's metadata, or the list's own) a census decodes: the apiserver refuses
/// request bodies over 3 MiB (`MaxRequestBodyBytes`), so no stored object's metadata is larger. This bounds
/// what a protobuf census holds at once, whatever the size of the list.
pub(crate) const MAX_ENTRY_BYTES: usize = 3 << 20;
/// An entry buffer that grew past this for a big entry is released once the entry is decoded, so one big
/// object does not keep a census holding megabytes for the rest of the list.
const KEEP_BUFFER_BYTES: usize = 64 << 10;
/// A field's key and length varints: ten bytes each at most.
const MAX_HEADER_BYTES: usize = 20;

// Field numbers of the messages a protobuf census reads (k8s.io/apimachinery generated.proto).
/// `runtime.Unknown.raw`.
pub(super) const UNKNOWN_RAW: u64 = 2;
/// `PartialObjectMetadataList.metadata` (ListMeta), `.items`.
pub(super) const LIST_METADATA: u64 = 1;
pub(super) const LIST_ITEMS: u64 = 2;
/// `ListMeta.resourceVersion`, `.continue`, `.remainingItemCount`.
const LIST_META_RV: u64 = 2;
const LIST_META_CONTINUE: u64 = 3;
const LIST_META_REMAINING: u64 = 4;
/// `PartialObjectMetadata.metadata` (ObjectMeta).
const ITEM_METADATA: u64 = 1;
/// `ObjectMeta.name`, `.namespace`, `.resourceVersion`.
const META_NAME: u64 = 1;
const META_NAMESPACE: u64 = 3;
const META_RV: u64 = 6;

/// One listed object as decoded from the answer, borrowing its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ItemRef<'a> {
    pub(crate) namespace: Option<Cow<'a, str>>,
    pub(crate) name: Cow<'a, str>,
    pub(crate) rv: u64,
}

/// The list's metadata, as far as it has been read (proto3: a later field overrides an earlier one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ListMeta {
    /// Whether a `metadata` entry has been read.
    pub(crate) seen: bool,
    resource_version: Option<Box<str>>,
    /// Whether the upstream answered one page (a non-empty `continue`).
    pub(crate) more: bool,
    /// The page's `remainingItemCount`.
    pub(crate) remaining: Option<u64>,
}

impl ListMeta {
    /// The list's `resourceVersion`, which must be a number.
    pub(crate) fn rv(&self) -> Result<u64, String> {
        number(self.resource_version.as_deref().unwrap_or(""))
    }

    /// Reads one protobuf `ListMeta` entry into `self`.
    pub(crate) fn merge_protobuf(&mut self, payload: &[u8]) -> Result<(), String> {
        self.seen = true;
        for f in crate::codec::proto::fields(payload) {
            match f.map_err(malformed)? {
                (LIST_META_RV, Value::Len(v)) => self.resource_version = Some(utf8(v)?.into()),
                (LIST_META_CONTINUE, Value::Len(c)) => self.more = !c.is_empty(),
                (LIST_META_REMAINING, Value::Varint(n)) => self.remaining = Some(n),
                _ => {}
            }
        }
        Ok(())
    }
}

/// Decodes one protobuf `PartialObjectMetadata` list entry.
pub(crate) fn protobuf_item(payload: &[u8]) -> Result<ItemRef<'_>, String> {
    let meta = last_len_field(payload, ITEM_METADATA)
        .map_err(malformed)?
        .ok_or_else(|| bad("an item without metadata"))?;
    let (mut name, mut namespace, mut rv) = (None, None, None);
    for f in len_fields(meta) {
        match f.map_err(malformed)? {
            (META_NAME, v) => name = Some(utf8(v)?),
            (META_NAMESPACE, v) => namespace = Some(utf8(v)?),
            (META_RV, v) => rv = Some(utf8(v)?),
            _ => {}
        }
    }
    Ok(ItemRef {
        namespace: namespace.filter(|ns| !ns.is_empty()).map(Cow::Borrowed),
        name: Cow::Borrowed(name.ok_or_else(|| bad("an item without a name"))?),
        rv: number(rv.unwrap_or(""))?,
    })
}

pub(crate) fn number(s: &str) -> Result<u64, String> {
    s.parse().map_err(|_| format!("census: resourceVersion {s:?} is not a number"))
}

fn utf8(b: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(b).map_err(|_| "census: a string field is not UTF-8".to_owned())
}

pub(crate) fn bad(what: &str) -> String {
    format!("census: malformed protobuf ({what})")
}

pub(crate) fn malformed(_: Malformed) -> String {
    "census: malformed protobuf".to_owned()
}

/// Where the decoder is in the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// This many bytes of [`PROTOBUF_MAGIC`] read.
    Magic(usize),
    /// At a field's key (its key and length varints go to `header` until whole).
    Header,
    /// Skipping this many bytes of a field no census reads.
    Skip(usize),
    /// Skipping a varint field, this many bytes into it.
    SkipVarint(usize),
    /// Reading a list entry of `len` bytes: an item, or the list's metadata.
    Entry { item: bool, len: usize },
}

/// A field's key as read: its number and what follows it.
enum Head {
    More,
    Bad,
    Field { number: u64, kind: Kind },
}

enum Kind {
    Varint,
    Fixed(usize),
    Len(usize),
}

/// A varint at the front of `b`: `Ok(None)` while it is incomplete, `Err` past ten bytes (as
/// [`crate::codec::proto::fields`] reads them).
fn varint(b: &[u8]) -> Result<Option<(u64, usize)>, ()> {
    let mut v = 0u64;
    for i in 0..10 {
        let Some(&byte) = b.get(i) else { return Ok(None) };
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((v, i + 1)));
        }
    }
    Err(())
}

/// The field key (and length) at the front of `b`, and how many bytes it takes.
fn head(b: &[u8]) -> (Head, usize) {
    let (key, k) = match varint(b) {
        Ok(Some(v)) => v,
        Ok(None) => return (Head::More, 0),
        Err(()) => return (Head::Bad, 0),
    };
    let kind = match key & 7 {
        0 => Kind::Varint,
        1 => Kind::Fixed(8),
        5 => Kind::Fixed(4),
        2 => match varint(&b[k..]) {
            Ok(Some((len, l))) => match usize::try_from(len) {
                Ok(len) => return (Head::Field { number: key >> 3, kind: Kind::Len(len) }, k + l),
                Err(_) => return (Head::Bad, 0),
            },
            Ok(None) => return (Head::More, 0),
            Err(()) => return (Head::Bad, 0),
        },
        // Groups (3, 4) are not used by Kubernetes; anything else is malformed.
        _ => return (Head::Bad, 0),
    };
    (Head::Field { number: key >> 3, kind }, k)
}

/// An incremental decoder of a protobuf `PartialObjectMetadataList` in its envelope.
#[derive(Debug)]
pub(crate) struct Proto {
    state: State,
    header: [u8; MAX_HEADER_BYTES],
    header_len: usize,
    /// The entry being read, when it spans chunks.
    entry: Vec<u8>,
    /// Bytes of `runtime.Unknown.raw` (the list) left, while inside it.
    raw_left: Option<usize>,
    raw_seen: bool,
    pub(crate) meta: ListMeta,
    /// Bytes fed so far, and the answer's length as the envelope gives it (once `raw` starts).
    read: usize,
    expected: Option<usize>,
}

impl Default for Proto {
    fn default() -> Self {
        Self {
            state: State::Magic(0),
            header: [0; MAX_HEADER_BYTES],
            header_len: 0,
            entry: Vec::new(),
            raw_left: None,
            raw_seen: false,
            meta: ListMeta::default(),
            read: 0,
            expected: None,
        }
    }
}

// === impl Proto ===

impl Proto {
    /// Bytes this decoder holds (its entry buffer).
    pub(crate) fn held(&self) -> usize {
        self.entry.capacity()
    }

    /// The answer's length: what the envelope announces once the list starts (the fields after the list, two
    /// empty strings, are not counted), else what was read.
    pub(crate) fn length(&self) -> usize {
        self.expected.unwrap_or(0).max(self.read)
    }

    /// Decodes `data`, the next bytes of the answer, handing each item to `sink`. Returns how many bytes were
    /// consumed: all of them, unless `sink` broke off right after an item (feed the rest later).
    pub(crate) fn feed(
        &mut self,
        data: &[u8],
        sink: &mut dyn FnMut(ItemRef<'_>) -> ControlFlow<()>,
    ) -> Result<usize, String> {
        let mut pos = 0;
        while pos < data.len() {
            let avail = &data[pos..];
            match self.state {
                State::Magic(n) => {
                    let take = (PROTOBUF_MAGIC.len() - n).min(avail.len());
                    if avail[..take] != PROTOBUF_MAGIC[n..n + take] {
                        return Err(bad("no envelope"));
                    }
                    pos += self.consume(take)?;
                    self.state =
                        if n + take == PROTOBUF_MAGIC.len() { State::Header } else { State::Magic(n + take) };
                }
                State::Header if self.header_len == 0 => match head(avail) {
                    (Head::Field { number, kind }, used) => {
                        pos += self.consume(used)?;
                        if let ControlFlow::Break(()) = self.field(number, kind, sink)? {
                            return Ok(pos);
                        }
                    }
                    (Head::More, _) => {
                        // A header split between chunks: at most 20 bytes, else `head` would have decided.
                        self.header[..avail.len()].copy_from_slice(avail);
                        self.header_len = avail.len();
                        pos += self.consume(avail.len())?;
                    }
                    (Head::Bad, _) => return Err(bad("a field key")),
                },
                State::Header => {
                    self.header[self.header_len] = avail[0];
                    self.header_len += 1;
                    pos += self.consume(1)?;
                    match head(&self.header[..self.header_len]) {
                        (Head::Field { number, kind }, _) => {
                            self.header_len = 0;
                            if let ControlFlow::Break(()) = self.field(number, kind, sink)? {
                                return Ok(pos);
                            }
                        }
                        (Head::More, _) if self.header_len < MAX_HEADER_BYTES => {}
                        _ => return Err(bad("a field key")),
                    }
                }
                State::Skip(n) => {
                    let take = n.min(avail.len());
                    pos += self.consume(take)?;
                    self.state = if take == n { self.at_field() } else { State::Skip(n - take) };
                }
                State::SkipVarint(n) => {
                    pos += self.consume(1)?;
                    self.state = if avail[0] & 0x80 == 0 {
                        self.at_field()
                    } else if n + 1 < 10 {
                        State::SkipVarint(n + 1)
                    } else {
                        return Err(bad("a varint"));
                    };
                }
                State::Entry { item, len } => {
                    if self.entry.is_empty() && avail.len() >= len {
                        // Whole in this chunk: decoded in place.
                        pos += self.consume(len)?;
                        self.state = self.at_field();
                        if let ControlFlow::Break(()) = self.entry(item, &avail[..len], sink)? {
                            return Ok(pos);
                        }
                    } else {
                        if self.entry.is_empty() {
                            // Exactly the entry's bytes: what the bound promises, not a doubled capacity.
                            self.entry.reserve_exact(len);
                        }
                        let take = (len - self.entry.len()).min(avail.len());
                        self.entry.extend_from_slice(&avail[..take]);
                        pos += self.consume(take)?;
                        if self.entry.len() == len {
                            self.state = self.at_field();
                            let entry = std::mem::take(&mut self.entry);
                            let flow = self.entry(item, &entry, sink);
                            self.entry = entry;
                            self.entry.clear();
                            if self.entry.capacity() > KEEP_BUFFER_BYTES {
                                self.entry = Vec::new();
                            }
                            if let ControlFlow::Break(()) = flow? {
                                return Ok(pos);
                            }
                        }
                    }
                }
            }
        }
        Ok(pos)
    }

    /// Checks that the answer ended where it may: after the whole list and its envelope.
    pub(crate) fn finish(&self) -> Result<(), String> {
        match self.state {
            State::Magic(_) => Err(bad("no envelope")),
            State::Header if self.header_len == 0 && self.raw_left.is_none() => {
                if self.raw_seen {
                    Ok(())
                } else {
                    Err(bad("no object"))
                }
            }
            _ => Err(malformed(Malformed)),
        }
    }

    /// Counts `n` bytes read, inside the list if the decoder is in it (a field may not run past its end).
    fn consume(&mut self, n: usize) -> Result<usize, String> {
        self.read += n;
        if let Some(left) = &mut self.raw_left {
            *left = left.checked_sub(n).ok_or_else(|| malformed(Malformed))?;
        }
        Ok(n)
    }

    /// The state at the next field: leaving the list where it ends.
    fn at_field(&mut self) -> State {
        if self.raw_left == Some(0) {
            self.raw_left = None;
        }
        State::Header
    }

    /// Starts reading a field whose key (and length) was just read.
    fn field(
        &mut self,
        number: u64,
        kind: Kind,
        sink: &mut dyn FnMut(ItemRef<'_>) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, String> {
        let fits = |n: usize| self.raw_left.is_none_or(|left| n <= left);
        let in_list = self.raw_left.is_some();
        self.state = match kind {
            Kind::Varint => State::SkipVarint(0),
            Kind::Fixed(n) if fits(n) => State::Skip(n),
            Kind::Len(len) if fits(len) => {
                if !in_list && number == UNKNOWN_RAW {
                    // Proto3 would take the last; no encoder writes two, and the first is compared already.
                    if self.raw_seen {
                        return Err(bad("two objects in one envelope"));
                    }
                    self.raw_seen = true;
                    self.raw_left = Some(len);
                    self.expected = Some(self.read + len);
                    self.at_field()
                } else if in_list && (number == LIST_METADATA || number == LIST_ITEMS) {
                    if len > MAX_ENTRY_BYTES {
                        return Err(format!("census: a list entry of {len} bytes (over {MAX_ENTRY_BYTES})"));
                    }
                    let item = number == LIST_ITEMS;
                    if len == 0 {
                        self.state = self.at_field();
                        return self.entry(item, &[], sink);
                    }
                    State::Entry { item, len }
                } else if len == 0 {
                    self.at_field()
                } else {
                    State::Skip(len)
                }
            }
            _ => return Err(malformed(Malformed)),
        };
        Ok(ControlFlow::Continue(()))
    }

    /// Decodes one whole list entry.
    fn entry(
        &mut self,
        item: bool,
        payload: &[u8],
        sink: &mut dyn FnMut(ItemRef<'_>) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, String> {
        if item {
            Ok(sink(protobuf_item(payload)?))
        } else {
            self.meta.merge_protobuf(payload)?;
            Ok(ControlFlow::Continue(()))
        }
    }
}
