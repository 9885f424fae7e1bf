//! TLS for the front: rustls with aws-lc-rs, ALPN `h2` and `http/1.1`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// ALPN protocols offered to clients, preferred first. kubectl negotiates h2 and falls back to http/1.1
/// for upgrades (exec, attach, port-forward), which only exist on HTTP/1.1.
const ALPN: &[&[u8]] = &[b"h2", b"http/1.1"];

/// Failure to set up the front's TLS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file could not be read or holds no PEM certificate.
    #[error("reading TLS certificate {path:?}: {reason}")]
    Certificate { path: PathBuf, reason: String },
    /// The key file could not be read or holds no PEM private key.
    #[error("reading TLS key {path:?}: {reason}")]
    Key { path: PathBuf, reason: String },
    /// The client CA bundle (`--client-ca`) could not be read or used.
    #[error("reading client CA {path:?}: {reason}")]
    ClientCa { path: PathBuf, reason: String },
    /// rustls refused the certificate and key (mismatch, unsupported algorithm).
    #[error("invalid TLS certificate or key: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Server-side TLS configuration. Cheap to clone.
#[derive(Clone)]
pub struct TlsConfig {
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig").finish_non_exhaustive()
    }
}

// === impl TlsConfig ===

impl TlsConfig {
    /// Loads a PEM certificate chain and private key (`--tls-cert`, `--tls-key`).
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let (chain, key_der) = load_pair(cert, key)?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key_der)?;
        Ok(Self::from_server_config(config))
    }

    /// As [`TlsConfig::from_pem_files`], also verifying client certificates against the CA bundle `ca`
    /// (`--client-ca`, k-sec). Clients without a certificate still connect (bearer-token clients); a
    /// certificate that does not verify fails the handshake. The handler finds the verified leaf in
    /// [`ConnInfo::client_cert`](super::ConnInfo::client_cert).
    pub fn with_client_ca(cert: &Path, key: &Path, ca: &Path) -> Result<Self, TlsError> {
        let (chain, key_der) = load_pair(cert, key)?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(client_verifier(ca)?)
            .with_single_cert(chain, key_der)?;
        Ok(Self::from_server_config(config))
    }

    /// Serves whatever certificate `resolver` returns (k-sec: a certificate reloaded when its files
    /// change), verifying client certificates against `client_ca` when given.
    pub fn from_resolver(
        resolver: Arc<dyn rustls::server::ResolvesServerCert>,
        client_ca: Option<&Path>,
    ) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = ServerConfig::builder_with_provider(provider).with_safe_default_protocol_versions()?;
        let config = match client_ca {
            Some(ca) => builder.with_client_cert_verifier(client_verifier(ca)?).with_cert_resolver(resolver),
            None => builder.with_no_client_auth().with_cert_resolver(resolver),
        };
        Ok(Self::from_server_config(config))
    }
}

/// A verifier of client certificates against the PEM bundle `ca` that lets clients without one connect.
fn client_verifier(ca: &Path) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let ca_err = |reason: String| TlsError::ClientCa { path: ca.into(), reason };
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_file_iter(ca).map_err(|e| ca_err(e.to_string()))? {
        roots.add(der.map_err(|e| ca_err(e.to_string()))?).map_err(|e| ca_err(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(ca_err("no certificate found".into()));
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .allow_unauthenticated()
            .build()
            .map_err(|e| ca_err(e.to_string()))?;
    Ok(verifier)
}

impl TlsConfig {
    /// Uses a prepared rustls configuration (e.g. one that verifies client certificates). ALPN is set to
    /// `h2, http/1.1` when the configuration has none.
    pub(crate) fn from_server_config(mut config: ServerConfig) -> Self {
        if config.alpn_protocols.is_empty() {
            config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        }
        Self { acceptor: TlsAcceptor::from(Arc::new(config)) }
    }

    pub(super) fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}

/// A PEM certificate chain and its private key.
pub(crate) type CertAndKey = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

pub(crate) fn load_pair(cert: &Path, key: &Path) -> Result<CertAndKey, TlsError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Certificate { path: cert.into(), reason: e.to_string() })?;
    if chain.is_empty() {
        return Err(TlsError::Certificate { path: cert.into(), reason: "no certificate found".into() });
    }
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| TlsError::Key { path: key.into(), reason: e.to_string() })?;
    Ok((chain, key_der))
}

/// `--tls-cert` / `--tls-key` for the `serve` command (`#[command(flatten)]`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct TlsFlags {
    /// PEM certificate chain to serve TLS with (ALPN h2, http/1.1); plain HTTP (h1 and h2c) without it.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl TlsFlags {
    /// The TLS configuration, or `None` for plain HTTP.
    pub fn load(&self) -> Result<Option<TlsConfig>, TlsError> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => TlsConfig::from_pem_files(cert, key).map(Some),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_are_clear_errors() {
        let err =
            TlsConfig::from_pem_files(Path::new("/nonexistent/cert.pem"), Path::new("/nonexistent/key.pem"))
                .expect_err("no such file");
        assert!(matches!(err, TlsError::Certificate { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/cert.pem"));
        assert!(TlsFlags::default().load().expect("no TLS").is_none());
    }

    #[test]
    fn garbage_pem_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert, "not a certificate").expect("write");
        std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
            .expect("write");
        assert!(TlsConfig::from_pem_files(&cert, &key).is_err());
    }
}
