//! TLS for `--ssl-cert-file PEM --ssl-key-file PEM` (llama-server's
//! names), through rustls: TLS 1.2 and 1.3, HTTP/2 offered by ALPN beside
//! HTTP/1.1. Handshakes run on their own tasks with a deadline, so a slow
//! or silent client cannot hold up the others; the finished streams are
//! handed to axum through a `Listener`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{crypto, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How long a client has to finish its handshake.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// Finished handshakes waiting for axum to take them.
const BACKLOG: usize = 64;

#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// Both flags or neither.
    pub fn from_flags(
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> Result<Option<TlsFiles>, String> {
        match (cert, key) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => Ok(Some(TlsFiles { cert, key })),
            (Some(_), None) => Err(
                "--ssl-cert-file needs --ssl-key-file (the certificate's private key, PEM)".into(),
            ),
            (None, Some(_)) => {
                Err("--ssl-key-file needs --ssl-cert-file (the certificate chain, PEM)".into())
            }
        }
    }
}

/// Reads the PEM files into a rustls configuration; errors name the file
/// and what it lacks.
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, String> {
    let certs = read_certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        format!(
            "--ssl-key-file {}: no usable private key ({e}); give a PEM file with a PKCS#8, PKCS#1 (RSA) or SEC1 (EC) key",
            files.key.display()
        )
    })?;
    let provider = Arc::new(crypto::ring::default_provider());
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "--ssl-cert-file {} and --ssl-key-file {} do not make a usable pair: {e}",
                files.cert.display(),
                files.key.display()
            )
        })?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bad = |e: &dyn std::fmt::Display| {
        format!(
            "--ssl-cert-file {}: {e}; give the PEM certificate chain, server certificate first",
            path.display()
        )
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    if certs.is_empty() {
        return Err(bad(&"no CERTIFICATE block"));
    }
    Ok(certs)
}

/// Accepted TLS connections, for `axum::serve`.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `tcp` (call within the runtime).
    pub fn spawn(tcp: TcpListener, cfg: Arc<ServerConfig>) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(BACKLOG);
        let acceptor = TlsAcceptor::from(cfg);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, retry.
                        eprintln!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_DEADLINE, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        // A client that speaks plain HTTP to the TLS port
                        // lands here: say so, it is the usual mistake.
                        Ok(Err(e)) => eprintln!("TLS handshake with {peer} failed: {e}"),
                        Err(_) => eprintln!(
                            "TLS handshake with {peer} took over {}s; closed",
                            HANDSHAKE_DEADLINE.as_secs()
                        ),
                    }
                });
            }
        });
        Ok(TlsListener { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accept task ended (the runtime is stopping).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
