//! The transport floor of a forwarded read: a TLS-terminating byte relay with no HTTP in it.
//!
//! It accepts TLS from the client, opens one TLS connection to the upstream per client connection, and
//! copies bytes both ways. Any proxy that terminates TLS (kache's forwarder included) pays at least this:
//! one decryption and one encryption each way, two more sockets, and a third process to schedule. A
//! forwarded read through kache compared with the same read through this relay shows what kache's HTTP
//! handling adds above the floor; compared with the direct read, what any TLS hop costs on the machine.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// What the relay prints on stdout, followed by its URL, once it listens.
pub const READY_PREFIX: &str = "kache-loadtest relay listening on ";

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Address to listen on (TLS).
    #[arg(long, default_value = "127.0.0.1:18450")]
    pub listen: SocketAddr,
    /// The upstream's `host:port` (spoken to over TLS; its certificate is not verified, as with the
    /// benchmark kubeconfigs' `insecure-skip-tls-verify`).
    #[arg(long)]
    pub upstream: String,
    /// PEM certificate to serve; a self-signed one is generated when absent.
    #[arg(long, requires = "key")]
    pub cert: Option<PathBuf>,
    /// PEM private key for `--cert`.
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let (certs, key) = server_identity(&args)?;
    let acceptor = acceptor(certs, key)?;
    let listener = TcpListener::bind(args.listen).await?;
    println!("{READY_PREFIX}https://{}", listener.local_addr()?);
    eprintln!("relay: https://{} -> {}", listener.local_addr()?, args.upstream);
    serve(listener, acceptor, args.upstream).await
}

fn acceptor(certs: Vec<CertificateDer<'static>>, key: PrivateKeyDer<'static>) -> anyhow::Result<TlsAcceptor> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    Ok(TlsAcceptor::from(Arc::new(server)))
}

/// Relays every connection `listener` accepts to `upstream` (`host:port`, over TLS).
async fn serve(listener: TcpListener, acceptor: TlsAcceptor, upstream: String) -> anyhow::Result<()> {
    let connector = TlsConnector::from(Arc::new(crate::http::tls_client_config()));
    let host = upstream.rsplit_once(':').map_or(upstream.as_str(), |(h, _)| h).to_string();
    let name = ServerName::try_from(host).context("upstream host")?;
    loop {
        let (tcp, _) = listener.accept().await?;
        let (acceptor, connector, name, upstream) =
            (acceptor.clone(), connector.clone(), name.clone(), upstream.clone());
        tokio::spawn(async move {
            if let Err(e) = relay_one(tcp, acceptor, connector, name, &upstream).await {
                eprintln!("relay: connection ended: {e:#}");
            }
        });
    }
}

async fn relay_one(
    tcp: TcpStream,
    acceptor: TlsAcceptor,
    connector: TlsConnector,
    name: ServerName<'static>,
    upstream: &str,
) -> anyhow::Result<()> {
    tcp.set_nodelay(true)?;
    let mut down = acceptor.accept(tcp).await?;
    let up_tcp = TcpStream::connect(upstream).await?;
    up_tcp.set_nodelay(true)?;
    let mut up = connector.connect(name, up_tcp).await?;
    tokio::io::copy_bidirectional(&mut down, &mut up).await?;
    Ok(())
}

fn server_identity(args: &Args) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    use rustls::pki_types::pem::PemObject as _;
    match (&args.cert, &args.key) {
        (Some(cert), Some(key)) => {
            let certs = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
            let key = PrivateKeyDer::from_pem_file(key)?;
            Ok((certs, key))
        }
        _ => self_signed(),
    }
}

/// A self-signed identity for 127.0.0.1 and localhost, in memory.
fn self_signed() -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])?;
    let key = PrivateKeyDer::try_from(cert.signing_key.serialize_der())
        .map_err(|e| anyhow::anyhow!("generated key: {e}"))?;
    Ok((vec![cert.cert.der().clone()], key))
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    #[tokio::test]
    async fn bytes_cross_the_relay_both_ways_over_tls() {
        // The upstream: a TLS server answering every byte it reads with that byte plus one.
        let (certs, key) = self_signed().expect("certificate");
        let upstream_tls = acceptor(certs, key).expect("upstream acceptor");
        let upstream = TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
        let upstream_addr = upstream.local_addr().expect("upstream address");
        tokio::spawn(async move {
            let (tcp, _) = upstream.accept().await.expect("accept");
            let mut tls = upstream_tls.accept(tcp).await.expect("upstream handshake");
            let mut buf = [0u8; 4096];
            loop {
                let n = tls.read(&mut buf).await.expect("upstream read");
                if n == 0 {
                    break;
                }
                let answer: Vec<u8> = buf[..n].iter().map(|b| b.wrapping_add(1)).collect();
                tls.write_all(&answer).await.expect("upstream write");
                tls.flush().await.expect("upstream flush");
            }
        });

        let (certs, key) = self_signed().expect("certificate");
        let relay = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let relay_addr = relay.local_addr().expect("relay address");
        tokio::spawn(serve(relay, acceptor(certs, key).expect("relay acceptor"), upstream_addr.to_string()));

        let connector = TlsConnector::from(Arc::new(crate::http::tls_client_config()));
        let tcp = TcpStream::connect(relay_addr).await.expect("connect to the relay");
        let name = ServerName::try_from("127.0.0.1").expect("name");
        let mut client = connector.connect(name, tcp).await.expect("client handshake");
        let sent: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        client.write_all(&sent).await.expect("client write");
        client.flush().await.expect("client flush");
        let mut got = vec![0u8; sent.len()];
        client.read_exact(&mut got).await.expect("the relayed answer");
        let want: Vec<u8> = sent.iter().map(|b| b.wrapping_add(1)).collect();
        assert_eq!(got, want);
    }
}
