//! The user of a verified client certificate: subject CommonName = user, Organization = groups, as the
//! apiserver's x509 authenticator (`CommonNameUserConversion`) maps it.
//!
//! The TLS handshake has already verified the certificate, but its bytes still come from a client, so they
//! are read with a maintained X.509 parser (`x509-parser`); anything it rejects is `None`, never a panic
//! (property-tested below).

use x509_parser::der_parser::asn1_rs::Tag;
use x509_parser::x509::AttributeTypeAndValue;

/// The subject fields authentication uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    /// The last CommonName (Go's `pkix.Name` keeps the last one).
    pub common_name: String,
    pub organizations: Vec<String>,
}

/// A directory string as Go's `parseASN1String` reads it: UTF8, Printable, IA5 and Numeric strings as
/// UTF-8, T61 as Latin-1, BMP as UTF-16BE; other types are skipped.
fn string(attr: &AttributeTypeAndValue<'_>) -> Option<String> {
    if let Ok(s) = attr.as_str() {
        return Some(s.to_owned());
    }
    let value = attr.attr_value();
    let data: &[u8] = value.data;
    match value.tag() {
        Tag::T61String => Some(data.iter().map(|&b| char::from(b)).collect()),
        Tag::BmpString if data.len().is_multiple_of(2) => {
            let units: Vec<u16> = data.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// The subject of a DER certificate; `None` when the bytes are not one certificate.
pub fn subject(der: &[u8]) -> Option<Subject> {
    let (rest, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    if !rest.is_empty() {
        return None;
    }
    let name = cert.subject();
    Some(Subject {
        common_name: name.iter_common_name().filter_map(string).last().unwrap_or_default(),
        organizations: name.iter_organization().filter_map(string).collect(),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A self-signed certificate with these subject attributes (in order).
    fn cert(subject: &[(rcgen::DnType, rcgen::DnValue)]) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (t, v) in subject {
            params.distinguished_name.push(t.clone(), v.clone());
        }
        params.self_signed(&key).expect("certificate").der().to_vec()
    }

    fn utf8(s: &str) -> rcgen::DnValue {
        rcgen::DnValue::Utf8String(s.to_owned())
    }

    #[test]
    fn common_name_and_organizations() {
        let c = cert(&[
            (
                rcgen::DnType::OrganizationName,
                rcgen::DnValue::PrintableString("dev".try_into().expect("printable")),
            ),
            (rcgen::DnType::CommonName, utf8("alice")),
            (rcgen::DnType::CountryName, utf8("NL")),
        ]);
        let s = subject(&c).expect("parses");
        assert_eq!(s.common_name, "alice");
        assert_eq!(s.organizations, ["dev"]);
    }

    #[test]
    fn bmp_strings_and_empty_subjects() {
        let c =
            cert(&[(rcgen::DnType::CommonName, rcgen::DnValue::BmpString("bo".try_into().expect("bmp")))]);
        assert_eq!(subject(&c).expect("parses").common_name, "bo");
        assert_eq!(subject(&cert(&[])).expect("parses"), Subject::default());
    }

    #[test]
    fn malformed_input_is_none() {
        let c = cert(&[(rcgen::DnType::CommonName, utf8("alice"))]);
        for cut in (0..c.len()).step_by(7) {
            assert_eq!(subject(&c[..cut]), None, "truncated at {cut}");
        }
        let mut trailing = c.clone();
        trailing.push(0);
        assert_eq!(subject(&trailing), None, "trailing bytes");
        assert_eq!(subject(&[0x30, 0x80, 0, 0]), None, "indefinite length");
        assert_eq!(subject(&[0x30, 0x85, 1, 1, 1, 1, 1]), None, "oversized length");
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = subject(&bytes);
        }

        #[test]
        fn never_panics_on_mutated_certificates(i in 0usize..2000, b in any::<u8>()) {
            static CERT: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
            let mut c = CERT.get_or_init(|| cert(&[(rcgen::DnType::CommonName, utf8("alice"))])).clone();
            let i = i % c.len();
            c[i] = b;
            let _ = subject(&c);
        }
    }
}
