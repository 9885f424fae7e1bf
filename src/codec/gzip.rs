//! gzip as the apiserver applies it: level 1, only for bodies strictly larger than 128 KiB
//! (`responsewriters/compression.go`, `defaultGzipThresholdBytes`).

use std::io::Write as _;

use bytes::Bytes;
use flate2::Compression;
use flate2::write::GzEncoder;

/// The apiserver compresses only payloads strictly larger than this.
pub const GZIP_THRESHOLD_BYTES: usize = 128 * 1024;

/// Whether a body of `len` bytes is compressed when the client accepts gzip.
pub fn should_compress(len: usize) -> bool {
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
