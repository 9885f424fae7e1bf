//! gzip as the apiserver applies it: level 1, only for bodies strictly larger than 128 KiB
//! (`responsewriters/compression.go`, `defaultGzipThresholdBytes`).

use std::io::Write as _;

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;

/// The apiserver compresses only payloads strictly larger than this.
pub const GZIP_THRESHOLD_BYTES: usize = 128 * 1024;

/// Whether a body of `len` bytes is compressed when the client accepts gzip.
pub(crate) fn should_compress(len: usize) -> bool {
    len > GZIP_THRESHOLD_BYTES
}

/// Compresses chunks at level 1 into one gzip member.
pub fn compress(chunks: &[Bytes]) -> Bytes {
    let total: usize = chunks.iter().map(Bytes::len).sum();
    let mut enc = GzEncoder::new(Vec::with_capacity(total / 8 + 64), Compression::new(1));
    for chunk in chunks {
        enc.write_all(chunk).expect("writing to a Vec cannot fail");
    }
    Bytes::from(enc.finish().expect("writing to a Vec cannot fail"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn round_trip() {
        let chunks = vec![Bytes::from_static(b"hello "), Bytes::from_static(b"world")];
        let gz = compress(&chunks);
        let mut out = String::new();
        flate2::read::GzDecoder::new(&gz[..]).read_to_string(&mut out).unwrap();
        assert_eq!(out, "hello world");
    }

    #[test]
    fn threshold_is_strict() {
        assert!(!should_compress(GZIP_THRESHOLD_BYTES));
        assert!(should_compress(GZIP_THRESHOLD_BYTES + 1));
    }
}

/// Compresses a stream of chunks on the fly into one gzip member (level 1), yielding compressed output as
/// it accumulates, so a large list is never held whole in either form.
pub(crate) struct GzipChunks<I> {
    inner: I,
    encoder: Option<GzEncoder<Vec<u8>>>,
}

/// Compressed output is handed on once this much has accumulated.
const GZIP_FLUSH_BYTES: usize = 32 * 1024;

impl<I: Iterator<Item = Bytes>> GzipChunks<I> {
    pub fn new(inner: I) -> Self {
        Self {
            inner,
            encoder: Some(GzEncoder::new(Vec::with_capacity(GZIP_FLUSH_BYTES * 2), Compression::new(1))),
        }
    }
}

impl<I: Iterator<Item = Bytes>> Iterator for GzipChunks<I> {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        loop {
            let encoder = self.encoder.as_mut()?;
            match self.inner.next() {
                Some(chunk) => {
                    encoder.write_all(&chunk).expect("writing to a Vec cannot fail");
                    if encoder.get_ref().len() >= GZIP_FLUSH_BYTES {
                        return Some(Bytes::from(std::mem::take(encoder.get_mut())));
                    }
                }
                None => {
                    let encoder = self.encoder.take()?;
                    let rest = encoder.finish().expect("writing to a Vec cannot fail");
                    return (!rest.is_empty()).then(|| Bytes::from(rest));
                }
            }
        }
    }
}

#[cfg(test)]
mod stream_tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn streamed_gzip_round_trips() {
        let chunks: Vec<Bytes> = (0..200).map(|i| Bytes::from(format!("chunk {i} ").repeat(100))).collect();
        let expected: Vec<u8> = chunks.concat();
        let gz: Vec<u8> = GzipChunks::new(chunks.into_iter()).collect::<Vec<_>>().concat();
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut out).unwrap();
        assert_eq!(out, expected);
    }
}
