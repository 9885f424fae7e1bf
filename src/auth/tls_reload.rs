//! The serving certificate, reloaded when its files change (cert-manager and kubelet rotate them in
//! place): a rustls [`ResolvesServerCert`] over an [`ArcSwap`], and a poller of the files' modification
//! times. A change that does not load (half-written files, a key that does not match) keeps the old
//! certificate and is retried at the next poll.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;

use crate::front::server::{TlsError, load_pair};

/// How often the certificate files are checked for changes.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// What identifies one version of the files: modification time and length of each.
type Stamp = [(Option<SystemTime>, u64); 2];

/// A serving certificate that follows its files.
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    current: ArcSwap<CertifiedKey>,
    stamp: Mutex<Stamp>,
}

impl std::fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCert").field("cert", &self.cert).field("key", &self.key).finish()
    }
}

fn stamp_of(path: &Path) -> (Option<SystemTime>, u64) {
    match std::fs::metadata(path) {
        Ok(m) => (m.modified().ok(), m.len()),
        Err(_) => (None, 0),
    }
}

fn load(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let (chain, key_der) = load_pair(cert, key)?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    Ok(CertifiedKey::from_der(chain, key_der, &provider)?)
}

// === impl ReloadingCert ===

impl ReloadingCert {
    /// Loads the certificate now; fails like `--tls-cert`/`--tls-key` loading does.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<Self>, TlsError> {
        let stamp = [stamp_of(cert), stamp_of(key)];
        let current = ArcSwap::from_pointee(load(cert, key)?);
        Ok(Arc::new(Self { cert: cert.into(), key: key.into(), current, stamp: Mutex::new(stamp) }))
    }

    /// Reloads when either file changed since the last successful load. `Ok(true)`: a new certificate is
    /// served from the next handshake on; `Err`: the files changed but do not load (the old one stays).
    pub(crate) fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let now = [stamp_of(&self.cert), stamp_of(&self.key)];
        let mut stamp = self.stamp.lock().unwrap_or_else(|e| e.into_inner());
        if *stamp == now {
            return Ok(false);
        }
        let loaded = load(&self.cert, &self.key)?;
        self.current.store(Arc::new(loaded));
        *stamp = now;
        Ok(true)
    }

    /// The certificate served now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }

    /// Polls the files every `interval` until `stop`.
    pub fn spawn_watch(
        self: Arc<Self>,
        interval: Duration,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                match self.reload_if_changed() {
                    Ok(true) => tracing::info!(cert = %self.cert.display(), "serving certificate reloaded"),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "serving certificate changed but does not load; keeping the old one")
                    }
                }
            }
        })
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, cn: &str) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let cert = params.self_signed(&key).expect("cert");
        std::fs::write(dir.join("tls.crt"), cert.pem()).expect("write");
        std::fs::write(dir.join("tls.key"), key.serialize_pem()).expect("write");
        cert.der().to_vec()
    }

    /// Moves both files' mtimes forward so the change is seen whatever the file system's granularity.
    fn touch(dir: &Path, secs: u64) {
        for f in ["tls.crt", "tls.key"] {
            let file = std::fs::File::options().write(true).open(dir.join(f)).expect("open");
            file.set_modified(SystemTime::now() + Duration::from_secs(secs)).expect("set mtime");
        }
    }

    #[test]
    fn follows_the_files_and_keeps_the_old_certificate_on_bad_input() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let first = write_pair(dir.path(), "first");
        let r = ReloadingCert::load(&cert, &key).expect("loads");
        assert_eq!(r.current().cert[0].as_ref(), first.as_slice());
        assert!(!r.reload_if_changed().expect("unchanged"), "no change, no reload");

        let second = write_pair(dir.path(), "second");
        touch(dir.path(), 10);
        assert!(r.reload_if_changed().expect("reloads"));
        assert_eq!(r.current().cert[0].as_ref(), second.as_slice());

        // A half-written rotation: the new certificate with the old key does not load; the old pair stays.
        let old_key = std::fs::read(&key).expect("read");
        write_pair(dir.path(), "third");
        std::fs::write(&key, old_key).expect("write");
        touch(dir.path(), 20);
        assert!(r.reload_if_changed().is_err(), "mismatched key is refused");
        assert_eq!(r.current().cert[0].as_ref(), second.as_slice());
    }

    #[test]
    fn missing_files_fail_at_start() {
        let err = ReloadingCert::load(Path::new("/nonexistent/c"), Path::new("/nonexistent/k"))
            .expect_err("no files");
        assert!(matches!(err, TlsError::Certificate { .. }));
    }
}
