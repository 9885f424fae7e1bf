//! The user of a verified client certificate: subject CommonName = user, Organization = groups, as the
//! apiserver's x509 authenticator (`CommonNameUserConversion`) maps it.
//!
//! A minimal DER walker over the certificate's `tbsCertificate` up to the subject: the TLS handshake has
//! already verified the certificate, but the bytes still come from a client, so every step is checked and
//! malformed input is `None`, never a panic (property-tested below).

/// DER tags used here.
const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const INTEGER: u8 = 0x02;
const VERSION: u8 = 0xa0;
const UTF8_STRING: u8 = 0x0c;
const PRINTABLE_STRING: u8 = 0x13;
const T61_STRING: u8 = 0x14;
const IA5_STRING: u8 = 0x16;
const BMP_STRING: u8 = 0x1e;
/// id-at-commonName (2.5.4.3) and id-at-organizationName (2.5.4.10), DER-encoded.
const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
const OID_O: &[u8] = &[0x55, 0x04, 0x0a];

/// The subject fields authentication uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    /// The last CommonName (Go's `pkix.Name` keeps the last one).
    pub common_name: String,
    pub organizations: Vec<String>,
}

/// One TLV: (tag, contents, rest).
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None; // high tag numbers never occur in the fields read here
    }
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None; // indefinite lengths are not DER; > 4 GiB is not a certificate
        }
        let (bytes, after) = rest.split_at(n);
        rest = after;
        bytes.iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b))
    };
    if rest.len() < len {
        return None;
    }
    let (contents, rest) = rest.split_at(len);
    Some((tag, contents, rest))
}

fn expect(input: &[u8], want: u8) -> Option<(&[u8], &[u8])> {
    let (tag, contents, rest) = tlv(input)?;
    (tag == want).then_some((contents, rest))
}

/// Decodes a directory string value.
fn string(tag: u8, bytes: &[u8]) -> Option<String> {
    match tag {
        UTF8_STRING | PRINTABLE_STRING | IA5_STRING => String::from_utf8(bytes.to_vec()).ok(),
        T61_STRING => Some(bytes.iter().map(|&b| char::from(b)).collect()),
        BMP_STRING if bytes.len().is_multiple_of(2) => {
            let units: Vec<u16> = bytes.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// The subject of a DER certificate.
pub fn subject(der: &[u8]) -> Option<Subject> {
    let (cert, _) = expect(der, SEQUENCE)?;
    let (tbs, _) = expect(cert, SEQUENCE)?;
    let mut rest = tbs;
    if rest.first() == Some(&VERSION) {
        rest = tlv(rest)?.2;
    }
    rest = expect(rest, INTEGER)?.1; // serialNumber
    rest = expect(rest, SEQUENCE)?.1; // signature
    rest = expect(rest, SEQUENCE)?.1; // issuer
    rest = expect(rest, SEQUENCE)?.1; // validity
    let (mut rdns, _) = expect(rest, SEQUENCE)?; // subject
    let mut out = Subject::default();
    while !rdns.is_empty() {
        let (mut set, after) = expect(rdns, SET)?;
        rdns = after;
        while !set.is_empty() {
            let (attr, after) = expect(set, SEQUENCE)?;
            set = after;
            let (oid, value) = expect(attr, OID)?;
            let (tag, value, _) = tlv(value)?;
            let Some(value) = string(tag, value) else { continue };
            if oid == OID_CN {
                out.common_name = value;
            } else if oid == OID_O {
                out.organizations.push(value);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A DER TLV with a definite length.
    fn der(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match contents.len() {
            n if n < 0x80 => out.push(n as u8),
            n if n < 0x100 => out.extend([0x81, n as u8]),
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend_from_slice(contents);
        out
    }

    fn attr(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
        der(SET, &der(SEQUENCE, &[der(OID, oid), der(tag, value)].concat()))
    }

    fn cert(subject_rdns: &[Vec<u8>]) -> Vec<u8> {
        let tbs = [
            der(VERSION, &der(INTEGER, &[2])),
            der(INTEGER, &[1, 2, 3]),
            der(SEQUENCE, &der(OID, &[0x2a, 0x86, 0x48])),
            der(SEQUENCE, &attr(OID_CN, UTF8_STRING, b"ca")),
            der(SEQUENCE, &[der(0x17, b"250101000000Z"), der(0x17, b"350101000000Z")].concat()),
            der(SEQUENCE, &subject_rdns.concat()),
            der(SEQUENCE, &[0; 200]), // subjectPublicKeyInfo stand-in (forces a long length)
        ]
        .concat();
        der(SEQUENCE, &[der(SEQUENCE, &tbs), der(SEQUENCE, &[]), der(0x03, &[0])].concat())
    }

    #[test]
    fn common_name_and_organizations() {
        let c = cert(&[
            attr(OID_O, PRINTABLE_STRING, b"dev"),
            attr(OID_CN, UTF8_STRING, b"alice"),
            attr(OID_O, UTF8_STRING, b"ops"),
            attr(&[0x55, 0x04, 0x06], PRINTABLE_STRING, b"NL"),
        ]);
        let s = subject(&c).expect("parses");
        assert_eq!(s.common_name, "alice");
        assert_eq!(s.organizations, ["dev", "ops"]);
    }

    #[test]
    fn issuer_is_not_the_subject_and_last_cn_wins() {
        let c = cert(&[attr(OID_CN, UTF8_STRING, b"first"), attr(OID_CN, BMP_STRING, &[0, b'b', 0, b'o'])]);
        assert_eq!(subject(&c).expect("parses").common_name, "bo");
        assert_eq!(subject(&cert(&[])).expect("parses"), Subject::default());
    }

    #[test]
    fn malformed_input_is_none() {
        let c = cert(&[attr(OID_CN, UTF8_STRING, b"alice")]);
        for cut in 0..c.len() {
            assert_eq!(subject(&c[..cut]), None, "truncated at {cut}");
        }
        assert_eq!(subject(&[0x30, 0x80, 0, 0]), None, "indefinite length");
        assert_eq!(subject(&[0x30, 0x85, 1, 1, 1, 1, 1]), None, "oversized length");
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = subject(&bytes);
        }

        #[test]
        fn never_panics_on_mutated_certificates(i in 0usize..400, b in any::<u8>()) {
            let mut c = cert(&[attr(OID_CN, UTF8_STRING, b"alice"), attr(OID_O, UTF8_STRING, b"g")]);
            let i = i % c.len();
            c[i] = b;
            let _ = subject(&c);
        }
    }
}
