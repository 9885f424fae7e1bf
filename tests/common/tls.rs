//! TLS helpers of the integration tests: a per-test PKI (no key is committed) and a GET over TLS with a
//! client certificate.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};

use super::Resp;

/// A CA, kache's serving certificate and client certificates, generated per test (none committed).
pub struct Pki {
    pub ca_pem: String,
    pub ca_der: rustls_pki_types::CertificateDer<'static>,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Pki {
    pub fn new(name: &str) -> Self {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("self-signed CA");
        Self { ca_pem: cert.pem(), ca_der: cert.der().clone(), issuer: rcgen::Issuer::new(params, key) }
    }

    /// (certificate PEM/DER, key) for a server (`sans`) or a client (`cn`, `orgs`).
    pub fn issue(
        &self,
        sans: &[&str],
        cn: &str,
        orgs: &[&str],
        client: bool,
    ) -> (rcgen::Certificate, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().expect("key");
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(sans).expect("params");
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            params.distinguished_name.push(rcgen::DnType::OrganizationName, *o);
        }
        params.extended_key_usages = vec![if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        }];
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        (cert, key)
    }
}

/// GET over TLS (HTTP/1.1) with an optional client certificate and bearer token, and more headers.
pub async fn tls_get(
    addr: std::net::SocketAddr,
    ca: &rustls_pki_types::CertificateDer<'static>,
    client_cert: Option<&(rcgen::Certificate, rcgen::KeyPair)>,
    token: Option<&str>,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Resp, String> {
    use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).expect("CA");
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let mut config = match client_cert {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .expect("client cert"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").expect("name");
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut req = Request::get(path).header("host", "localhost");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(req.body(Empty::<Bytes>::new()).expect("request"))
        .await
        .map_err(|e| e.to_string())?;
    let (status, headers) = (resp.status(), resp.headers().clone());
    let body = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok(Resp { status, headers, body })
}
