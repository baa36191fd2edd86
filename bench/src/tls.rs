//! HTTPS for the benches' arms: a throwaway certificate for 127.0.0.1 that the
//! servers under test present (the gateway's `--tls-cert`, nginx's `ssl_certificate`)
//! and the client trusts, and the client's connector.
//!
//! The certificate is made with the `openssl` command (an ECDSA P-256 key, as a
//! production certificate would most often be, valid two days, the loopback address
//! as its subject alternative name). The client is rustls with its `ring` provider,
//! the gateway's own TLS stack; it offers TLS 1.3 and 1.2 and verifies the chain and
//! the address, as an SDK would.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls;

use crate::harness_error::{HarnessError, HarnessResult};

/// A certificate and key for `127.0.0.1` on disk, and a client that trusts it.
#[derive(Debug, Clone)]
pub struct BenchTls {
    /// PEM certificate (self-signed).
    pub cert: PathBuf,
    /// PEM private key of [`cert`](Self::cert).
    pub key: PathBuf,
    client: ClientTls,
}

/// The client side: rustls trusting the bench's certificate.
#[derive(Clone)]
pub struct ClientTls(TlsConnector);

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls(rustls)")
    }
}

impl BenchTls {
    /// Makes `bench-tls.crt` and `bench-tls.key` in `dir` and a connector trusting
    /// exactly that certificate.
    ///
    /// # Errors
    /// [`HarnessError::Config`] when `openssl` is missing or fails, or its
    /// certificate does not load.
    pub fn make(dir: &Path) -> HarnessResult<BenchTls> {
        let cert = dir.join("bench-tls.crt");
        let key = dir.join("bench-tls.key");
        let out = Command::new("openssl")
            .args(["req", "-x509", "-days", "2", "-nodes"])
            .args(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
            .args(["-subj", "/CN=talon-bench"])
            .args(["-addext", "subjectAltName=IP:127.0.0.1"])
            // An end-entity certificate that is its own trust anchor (webpki refuses a
            // CA certificate as the server's).
            .args(["-addext", "basicConstraints=critical,CA:FALSE"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .map_err(|e| {
                HarnessError::Config(format!(
                    "the HTTPS arms need the openssl command (apt-get install -y openssl): {e}"
                ))
            })?;
        if !out.status.success() {
            return Err(HarnessError::Config(format!(
                "openssl could not make the bench's certificate: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let pem = std::fs::read(&cert)
            .map_err(|e| HarnessError::io(format!("reading {}", cert.display()), e))?;
        let mut roots = rustls::RootCertStore::empty();
        for der in CertificateDer::pem_slice_iter(&pem) {
            let der = der
                .map_err(|e| HarnessError::Config(format!("{} is not PEM: {e}", cert.display())))?;
            roots.add(der).map_err(|e| {
                HarnessError::Config(format!("{} does not load: {e}", cert.display()))
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| HarnessError::Config(format!("TLS client: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(BenchTls {
            cert,
            key,
            client: ClientTls(TlsConnector::from(Arc::new(config))),
        })
    }

    /// The client side, for [`ObjectTarget::over_tls`](crate::http_load::ObjectTarget::over_tls).
    pub fn client(&self) -> ClientTls {
        self.client.clone()
    }
}

impl ClientTls {
    /// The TLS handshake over `stream` with the server at `addr` (`host:port`), its
    /// name checked against the certificate.
    ///
    /// # Errors
    /// A message naming the address when the host is not a name or an address, or
    /// the handshake fails.
    pub async fn handshake(
        &self,
        addr: &str,
        stream: TcpStream,
    ) -> Result<TlsStream<TcpStream>, String> {
        let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned())
            .map_err(|e| format!("'{host}' is not a TLS server name: {e}"))?;
        self.0
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS handshake with {addr}: {e}"))
    }
}

impl ClientTls {
    /// Connects to `addr` once and says what the handshake agreed, for the reports.
    ///
    /// # Errors
    /// As [`handshake`](Self::handshake), or the connection failing.
    pub async fn agreed(&self, addr: &str) -> Result<String, String> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        Ok(negotiated(&self.handshake(addr, tcp).await?))
    }
}

/// The protocol version and cipher suite a connection agreed, for the reports
/// (`TLSv1_3 TLS13_AES_256_GCM_SHA384`).
pub fn negotiated(stream: &TlsStream<TcpStream>) -> String {
    let (_, session) = stream.get_ref();
    format!(
        "{} {}",
        session
            .protocol_version()
            .map_or_else(|| "?".to_owned(), |v| format!("{v:?}")),
        session
            .negotiated_cipher_suite()
            .map_or_else(|| "?".to_owned(), |s| format!("{:?}", s.suite())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_load::{Auth, Connection, ObjectTarget, fetch};
    use rustls_pki_types::PrivateKeyDer;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-connection HTTPS server with `tls`' certificate: answers one request
    /// `200 hello`.
    async fn serve_once(tls: &BenchTls) -> (u16, tokio::task::JoinHandle<()>) {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.cert)
            .and_then(Iterator::collect)
            .unwrap_or_else(|e| panic!("{e}"));
        let key = PrivateKeyDer::from_pem_file(&tls.key).unwrap_or_else(|e| panic!("{e}"));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| b.with_no_client_auth().with_single_cert(chain, key))
            .unwrap_or_else(|e| panic!("{e}"));
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map_or(0, |a| a.port());
        let server = tokio::spawn(async move {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let Ok(mut stream) = acceptor.accept(tcp).await else {
                return;
            };
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
                .await;
            let _ = stream.flush().await;
        });
        (port, server)
    }

    #[tokio::test]
    async fn the_client_reads_over_tls_from_a_server_with_the_certificate() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let tls = BenchTls::make(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let (port, server) = serve_once(&tls).await;
        let agreed = tls
            .client()
            .agreed(&format!("127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(agreed.starts_with("TLSv1_3 "), "{agreed}");
        // `agreed` used the one connection the server takes: serve again.
        server.await.unwrap_or_else(|e| panic!("{e}"));
        let (port, server) = serve_once(&tls).await;
        let url = format!("https://127.0.0.1:{port}");
        let target = ObjectTarget::s3(&url, "b", "k", Auth::Anonymous)
            .unwrap_or_else(|e| panic!("{e}"))
            .over_tls(tls.client());
        let mut conn = Connection::to(&target)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let got = fetch(
            &mut conn,
            target.get(None).unwrap_or_else(|e| panic!("{e}")),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.status, http::StatusCode::OK);
        assert_eq!(got.body.concat(), b"hello");
        drop(conn);
        server.await.unwrap_or_else(|e| panic!("{e}"));
    }

    #[tokio::test]
    async fn a_server_whose_certificate_names_another_host_is_refused() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let tls = BenchTls::make(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let (port, server) = serve_once(&tls).await;
        // The certificate names 127.0.0.1 only.
        let tcp = TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let refused = tls
            .client()
            .handshake(&format!("localhost:{port}"), tcp)
            .await
            .err()
            .unwrap_or_default();
        assert!(
            refused.contains("TLS handshake with localhost"),
            "{refused}"
        );
        assert!(refused.to_lowercase().contains("certificate"), "{refused}");
        server.abort();
        // And another certificate's client refuses this server.
        let other_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let other = BenchTls::make(other_dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let (port, server) = serve_once(&tls).await;
        let tcp = TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = format!("127.0.0.1:{port}");
        assert!(other.client().handshake(&addr, tcp).await.is_err());
        server.abort();
    }
}
