//! `talon-listener`: the HTTP/1.1 listener every Talon server runs its routes on — the
//! gateway's S3 and Azure fronts and its admin listener, the coordinator's API, the
//! worker's admin listener — so that each has the same timeouts and caps (SEC-06 of the
//! security review: with `axum::serve`, which sets no timer, a half-sent header held a
//! connection forever and 4,096 of them froze a front).
//!
//! What every connection gets ([`ListenerLimits`]):
//! - a header-read timeout, through hyper's own timer. hyper starts it whenever the
//!   connection is ready for a request, so the same bound cuts a request head sent too
//!   slowly (slowloris) and a keep-alive connection idle between requests;
//! - a write-stall timeout: a response whose bytes the peer does not take for that long
//!   is cut, so a reader that never reads frees what it holds;
//! - a cap on open connections per listener and per peer address. A connection over a
//!   cap is accepted and closed at once, so it never waits in the kernel's backlog
//!   ahead of well-behaved clients; a listener given an
//!   [`over_capacity_answer`](ListenerLimits::over_capacity_answer) writes it first
//!   (the protocol's "slow down" with `Retry-After`), without reading the request, for
//!   at most [`MAX_REFUSING`] such connections at once;
//! - a cap on the number of request headers;
//! - graceful shutdown: on the shutdown signal the listener stops accepting, lets
//!   requests in flight finish for [`ListenerLimits::drain_timeout`], then closes.
//!
//! - optionally TLS ([`Tls`], rustls): the handshake is bounded by the header-read
//!   timeout too, and a failed one closes the connection.
//!
//! It owns no routes, no protocol and no authentication: callers hand it a hyper
//! service ([`serve`]) or an axum router ([`serve_router`]).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

/// Why a listener cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum ListenerError {
    /// The certificate or key cannot be read or used.
    #[error("TLS: {0}")]
    Tls(String),
}

/// A certificate chain and its private key for TLS, as rustls uses them.
#[derive(Clone)]
pub struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls(<certificate and key>)")
    }
}

impl Tls {
    /// Reads a PEM certificate chain (leaf first) and a PEM private key (PKCS#8, PKCS#1
    /// or SEC1). HTTP/1.1 only; TLS 1.2 and 1.3.
    ///
    /// # Errors
    /// [`ListenerError::Tls`] when a file cannot be read, holds no certificate or key,
    /// or the key does not fit the certificate.
    pub fn from_pem_files(
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> Result<Tls, ListenerError> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let read = |p: &std::path::Path| {
            std::fs::read(p)
                .map_err(|e| ListenerError::Tls(format!("reading {}: {e}", p.display())))
        };
        let cert_pem = read(cert)?;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| ListenerError::Tls(format!("{}: {e}", cert.display())))?;
        if chain.is_empty() {
            return Err(ListenerError::Tls(format!(
                "{} holds no certificate",
                cert.display()
            )));
        }
        let key_der = PrivateKeyDer::from_pem_slice(&read(key)?)
            .map_err(|e| ListenerError::Tls(format!("{}: {e}", key.display())))?;
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ListenerError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key_der)
            .map_err(|e| ListenerError::Tls(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        })
    }
}

/// Timeouts and caps of one listener.
#[derive(Debug, Clone)]
pub struct ListenerLimits {
    /// Longest wait for a complete request head, from the moment the connection is ready
    /// for a request: bounds both a slowly sent header and an idle keep-alive connection.
    pub header_read_timeout: Duration,
    /// Longest time a response write may make no progress before the connection is cut.
    pub write_stall_timeout: Duration,
    /// Most open connections on this listener.
    pub max_connections: usize,
    /// Most open connections from one peer IP address.
    pub max_connections_per_peer: usize,
    /// Most request headers.
    pub max_headers: usize,
    /// How long requests in flight may finish after shutdown is asked for.
    pub drain_timeout: Duration,
    /// TLS, when the listener speaks HTTPS.
    pub tls: Option<Tls>,
    /// A whole HTTP/1.1 response (status line, headers with `Connection: close`, body)
    /// written to a plain-text connection over a cap before it is closed, so that the
    /// client is told to come back instead of seeing a reset; `None` closes at once.
    pub over_capacity_answer: Option<Arc<[u8]>>,
}

/// Connections over a cap being answered at once; past this they are closed unanswered
/// (answering costs a task and a socket for up to [`REFUSAL_TIME`]).
pub const MAX_REFUSING: usize = 64;

/// The longest a connection over a cap is kept to write the answer and let the client
/// read it.
pub const REFUSAL_TIME: Duration = Duration::from_secs(1);

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            header_read_timeout: Duration::from_secs(10),
            write_stall_timeout: Duration::from_secs(30),
            max_connections: 4096,
            max_connections_per_peer: 512,
            max_headers: 128,
            drain_timeout: Duration::from_secs(10),
            tls: None,
            over_capacity_answer: None,
        }
    }
}

impl ListenerLimits {
    /// Limits for an internal admin listener (metrics, health, the coordinator's API):
    /// the default timeouts, fewer connections.
    pub fn admin() -> ListenerLimits {
        ListenerLimits {
            max_connections: 256,
            max_connections_per_peer: 64,
            ..ListenerLimits::default()
        }
    }
}

/// Counts open connections per peer address.
#[derive(Debug, Default)]
struct PeerCounts(Mutex<HashMap<IpAddr, usize>>);

/// One connection's place in [`PeerCounts`]; gives it back on drop.
struct PeerSlot {
    counts: Arc<PeerCounts>,
    ip: IpAddr,
}

impl PeerCounts {
    fn take(self: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<PeerSlot> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(ip).or_default();
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            counts: self.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut map = self.counts.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// A connection whose writes fail once they have made no progress for `stall`.
pub struct StallGuard<T> {
    inner: T,
    stall: Duration,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<T> StallGuard<T> {
    /// Wraps a connection.
    pub fn new(inner: T, stall: Duration) -> StallGuard<T> {
        StallGuard {
            inner,
            stall,
            timer: None,
        }
    }

    /// Called when a write returned Pending: arms the stall timer or reports it expired.
    fn stalled(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let stall = self.stall;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer took no response bytes within the write-stall timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StallGuard<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StallGuard<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Ready(r) => {
                self.timer = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.stalled(cx).map(|r| r.map(|()| 0)),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => {
                self.timer = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.stalled(cx).map(|r| r.map(|()| 0)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(r) => {
                self.timer = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.stalled(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Serves HTTP/1.1 on `listener` until `shutdown` completes, then drains.
///
/// `service` makes the hyper service of one connection from its peer's address.
pub async fn serve<F, S, B>(
    listener: TcpListener,
    limits: ListenerLimits,
    service: F,
    shutdown: impl Future<Output = ()>,
) where
    F: Fn(SocketAddr) -> S,
    S: hyper::service::Service<http::Request<Incoming>, Response = http::Response<B>>
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let peers = Arc::new(PeerCounts::default());
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: back off rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
            },
        };
        let Some(slots) = admit(&permits, &peers, &limits, peer) else {
            tracing::debug!(%peer, "connection refused: over a connection cap");
            if limits.tls.is_none()
                && let Some(answer) = limits.over_capacity_answer.clone()
                && let Ok(slot) = refusing.clone().try_acquire_owned()
            {
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(REFUSAL_TIME, refuse(stream, &answer)).await;
                    drop(slot);
                });
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let guarded = StallGuard::new(stream, limits.write_stall_timeout);
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_headers(limits.max_headers);
        let service = service(peer);
        match &limits.tls {
            None => {
                let conn = graceful.watch(http.serve_connection(TokioIo::new(guarded), service));
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, %peer, "connection ended with an error");
                    }
                    drop(slots);
                });
            }
            Some(tls) => {
                let (acceptor, handshake_timeout) =
                    (tls.acceptor.clone(), limits.header_read_timeout);
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let stream =
                        match tokio::time::timeout(handshake_timeout, acceptor.accept(guarded))
                            .await
                        {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(error = %e, %peer, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                return;
                            }
                        };
                    let conn = watcher.watch(http.serve_connection(TokioIo::new(stream), service));
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, %peer, "connection ended with an error");
                    }
                    drop(slots);
                });
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(limits.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain timeout; closing them");
    }
}

/// Writes `answer` to a connection over a cap, then reads (and drops) what the client
/// sends until it closes, so that its request arriving after the close does not make
/// the kernel reset the connection before the client has read the answer.
async fn refuse(mut stream: tokio::net::TcpStream, answer: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if stream.write_all(answer).await.is_err() || stream.shutdown().await.is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    let mut left = 64 << 10;
    while left > 0 {
        match stream.read(&mut sink).await {
            Ok(0) | Err(_) => return,
            Ok(n) => left -= n.min(left),
        }
    }
}

fn admit(
    permits: &Arc<Semaphore>,
    peers: &Arc<PeerCounts>,
    limits: &ListenerLimits,
    peer: SocketAddr,
) -> Option<(OwnedSemaphorePermit, PeerSlot)> {
    let permit = permits.clone().try_acquire_owned().ok()?;
    let slot = peers.take(peer.ip(), limits.max_connections_per_peer.max(1))?;
    Some((permit, slot))
}

/// Serves an axum router; handlers find the peer's address as
/// `ConnectInfo<SocketAddr>`.
pub async fn serve_router(
    listener: TcpListener,
    limits: ListenerLimits,
    router: axum::Router,
    shutdown: impl Future<Output = ()>,
) {
    let service = move |peer: SocketAddr| {
        let router = router.clone();
        hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            let mut router = router.clone();
            tower_service::Service::call(&mut router, req)
        })
    };
    serve(listener, limits, service, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_slots_are_given_back() {
        let counts = Arc::new(PeerCounts::default());
        let ip: IpAddr = [127, 0, 0, 1].into();
        let a = counts.take(ip, 2).expect("first");
        let _b = counts.take(ip, 2).expect("second");
        assert!(counts.take(ip, 2).is_none(), "over the cap");
        assert!(
            counts.take([127, 0, 0, 2].into(), 2).is_some(),
            "another peer"
        );
        drop(a);
        assert!(counts.take(ip, 2).is_some(), "a slot came back");
    }
}
