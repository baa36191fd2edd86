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
//! - a cap on open connections per listener and per peer address (an IPv6 peer's /64,
//!   which one host usually holds whole). When the listener is full, the connection
//!   that has waited longest between requests (one that never finished a request head,
//!   or a keep-alive connection gone quiet) is cut to make room: a few addresses that
//!   open connections and never finish a request cannot lock the listener (the
//!   red-team review's RT-03), while a connection with a request in progress is never
//!   cut for a new one. A connection over a cap with no such room, or over its peer's
//!   cap, is accepted and closed at once, so it never waits in the kernel's backlog
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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

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

/// The address a peer is counted under: an IPv4 address, or an IPv6 address's /64 (one
/// host usually holds a whole /64, so counting its addresses apart would multiply its
/// cap by as many addresses as it cares to use).
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

impl PeerCounts {
    fn take(self: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<PeerSlot> {
        let ip = peer_key(ip);
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

/// The open connections of one listener, for making room: which are between requests
/// and since when.
#[derive(Debug)]
struct Connections {
    base: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<ConnectionState>>>,
}

/// What the listener knows of one connection.
#[derive(Debug)]
struct ConnectionState {
    /// Requests in progress: from the handler's call until the response body is done.
    busy: AtomicUsize,
    /// Nanoseconds after [`Connections::base`] since which it has had none.
    idle_since_ns: AtomicU64,
    /// Told when the connection is cut to make room.
    cut: tokio::sync::Notify,
}

/// A connection's entry in [`Connections`]; removed on drop.
struct Registered {
    connections: Arc<Connections>,
    id: u64,
    state: Arc<ConnectionState>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.connections
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

impl Connections {
    fn new() -> Connections {
        Connections {
            base: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn register(self: &Arc<Self>) -> Registered {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnectionState {
            busy: AtomicUsize::new(0),
            idle_since_ns: AtomicU64::new(self.now_ns()),
            cut: tokio::sync::Notify::new(),
        });
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, state.clone());
        Registered {
            connections: self.clone(),
            id,
            state,
        }
    }

    /// Cuts the connection that has been between requests the longest, if any: it is
    /// told to close and leaves the table at once (so it is not chosen twice). Whether
    /// one was cut.
    fn cut_the_idlest(&self) -> bool {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let idlest = open
            .iter()
            .filter(|(_, c)| c.busy.load(Ordering::Acquire) == 0)
            .min_by_key(|(_, c)| c.idle_since_ns.load(Ordering::Relaxed))
            .map(|(id, _)| *id);
        match idlest.and_then(|id| open.remove(&id)) {
            Some(state) => {
                state.cut.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Marks a connection busy for as long as it lives: made when a request's handler is
/// called, kept by its response's body until that is sent or dropped.
struct Busy {
    connections: Arc<Connections>,
    state: Arc<ConnectionState>,
}

impl Busy {
    fn new(connections: Arc<Connections>, state: Arc<ConnectionState>) -> Busy {
        state.busy.fetch_add(1, Ordering::AcqRel);
        Busy { connections, state }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.state
            .idle_since_ns
            .store(self.connections.now_ns(), Ordering::Relaxed);
        self.state.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's service, marking the connection busy from each call until the
/// response's body is done.
struct Tracked<S> {
    inner: S,
    connections: Arc<Connections>,
    state: Arc<ConnectionState>,
}

pin_project_lite::pin_project! {
    /// A handler's future, holding the connection busy.
    struct TrackedFuture<F> {
        #[pin]
        inner: F,
        busy: Option<Busy>,
    }
}

pin_project_lite::pin_project! {
    /// A response body, holding the connection busy until it is done or dropped.
    pub struct TrackedBody<B> {
        #[pin]
        inner: B,
        busy: Option<Busy>,
    }
}

impl<S, B> hyper::service::Service<http::Request<Incoming>> for Tracked<S>
where
    S: hyper::service::Service<http::Request<Incoming>, Response = http::Response<B>>,
{
    type Response = http::Response<TrackedBody<B>>;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn call(&self, req: http::Request<Incoming>) -> Self::Future {
        let busy = Busy::new(self.connections.clone(), self.state.clone());
        TrackedFuture {
            inner: self.inner.call(req),
            busy: Some(busy),
        }
    }
}

impl<F, B, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = Result<http::Response<TrackedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.inner.poll(cx) {
            Poll::Ready(Ok(response)) => {
                let busy = this.busy.take();
                Poll::Ready(Ok(response.map(|inner| TrackedBody { inner, busy })))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<B: hyper::body::Body> hyper::body::Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = this.inner.poll_frame(cx);
        if let Poll::Ready(None) = frame {
            // Sent whole: the connection is between requests from here.
            this.busy.take();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
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

    /// The connection.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// The connection, unwrapped.
    pub fn into_inner(self) -> T {
        self.inner
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
    let connections = Arc::new(Connections::new());
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
        let over = match admit(&permits, &peers, &limits, peer) {
            Ok(slots) => {
                let accepted = Accepted {
                    stream,
                    peer,
                    slots,
                    registered: connections.register(),
                };
                accepted.serve(&limits, service(peer), graceful.watcher());
                continue;
            }
            Err(over) => over,
        };
        // The listener is full: the connection idle longest makes room, and this one
        // waits (briefly, and only so many at once) for its place.
        if over == Over::Listener
            && let Ok(waiting) = refusing.clone().try_acquire_owned()
            && connections.cut_the_idlest()
        {
            let (permits, peers, limits) = (permits.clone(), peers.clone(), limits.clone());
            let (registered, service, watcher) =
                (connections.register(), service(peer), graceful.watcher());
            tokio::spawn(async move {
                let place = tokio::time::timeout(REFUSAL_TIME, permits.acquire_owned()).await;
                drop(waiting);
                let slot = peers.take(peer.ip(), limits.max_connections_per_peer.max(1));
                match (place, slot) {
                    (Ok(Ok(permit)), Some(slot)) => Accepted {
                        stream,
                        peer,
                        slots: (permit, slot),
                        registered,
                    }
                    .serve(&limits, service, watcher),
                    _ => tracing::debug!(%peer, "connection refused: no place came free"),
                }
            });
            continue;
        }
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
    }
    drop(listener);
    if tokio::time::timeout(limits.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain timeout; closing them");
    }
}

/// The answer to a plain HTTP request on a TLS listener: what nginx says in that case,
/// in this project's words.
const PLAIN_HTTP_ON_TLS: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\n\
content-length: 68\r\nconnection: close\r\n\r\n\
This port speaks HTTPS: send the request to https://, not http://.\r\n";

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

/// Which cap a connection is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Over {
    /// The listener's.
    Listener,
    /// Its peer's.
    Peer,
}

fn admit(
    permits: &Arc<Semaphore>,
    peers: &Arc<PeerCounts>,
    limits: &ListenerLimits,
    peer: SocketAddr,
) -> Result<(OwnedSemaphorePermit, PeerSlot), Over> {
    let slot = peers
        .take(peer.ip(), limits.max_connections_per_peer.max(1))
        .ok_or(Over::Peer)?;
    let permit = permits
        .clone()
        .try_acquire_owned()
        .map_err(|_| Over::Listener)?;
    Ok((permit, slot))
}

/// A connection given its places on the listener.
struct Accepted {
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    slots: (OwnedSemaphorePermit, PeerSlot),
    registered: Registered,
}

impl Accepted {
    /// Serves the connection on a task of its own with `service`, under `limits`, until
    /// it ends, shutdown drains it, or it is cut to make room; then gives its places
    /// back.
    fn serve<S, B>(
        self,
        limits: &ListenerLimits,
        service: S,
        watcher: hyper_util::server::graceful::Watcher,
    ) where
        S: hyper::service::Service<http::Request<Incoming>, Response = http::Response<B>>
            + Send
            + 'static,
        S::Future: Send + 'static,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        B: hyper::body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let Accepted {
            stream,
            peer,
            slots,
            registered,
        } = self;
        let _ = stream.set_nodelay(true);
        let guarded = StallGuard::new(stream, limits.write_stall_timeout);
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_headers(limits.max_headers);
        let service = Tracked {
            inner: service,
            connections: registered.connections.clone(),
            state: registered.state.clone(),
        };
        let tls = limits
            .tls
            .as_ref()
            .map(|tls| (tls.acceptor.clone(), limits.header_read_timeout));
        tokio::spawn(async move {
            let cut = registered.state.clone();
            let served = async {
                match tls {
                    None => {
                        let conn =
                            watcher.watch(http.serve_connection(TokioIo::new(guarded), service));
                        if let Err(e) = conn.await {
                            tracing::debug!(error = %e, %peer, "connection ended with an error");
                        }
                    }
                    Some((acceptor, handshake_timeout)) => {
                        // A plain HTTP request on the TLS port (its first byte a
                        // method's letter, where a TLS record starts with 0x16) is told
                        // where it went wrong, in plain HTTP, instead of getting a TLS
                        // alert a client prints as garbage.
                        let until = tokio::time::Instant::now() + handshake_timeout;
                        let mut first = [0u8; 1];
                        let peeked =
                            tokio::time::timeout_at(until, guarded.get_ref().peek(&mut first))
                                .await;
                        if matches!(peeked, Ok(Ok(1))) && first[0].is_ascii_uppercase() {
                            tracing::debug!(%peer, "plain HTTP on the TLS port");
                            refuse(guarded.into_inner(), PLAIN_HTTP_ON_TLS).await;
                            return;
                        }
                        // One bound for the peek and the handshake together.
                        let stream =
                            match tokio::time::timeout_at(until, acceptor.accept(guarded)).await {
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
                        let conn =
                            watcher.watch(http.serve_connection(TokioIo::new(stream), service));
                        if let Err(e) = conn.await {
                            tracing::debug!(error = %e, %peer, "connection ended with an error");
                        }
                    }
                }
            };
            tokio::select! {
                () = served => {}
                () = cut.cut.notified() => {
                    tracing::debug!(%peer, "connection cut between requests to make room for a new one");
                }
            }
            drop(slots);
            drop(registered);
        });
    }
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

    #[test]
    fn an_ipv6_peer_is_counted_by_its_64() {
        let counts = Arc::new(PeerCounts::default());
        let a: IpAddr = "2001:db8:1:2::1".parse().expect("v6");
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().expect("v6");
        let other: IpAddr = "2001:db8:1:3::1".parse().expect("v6");
        let _first = counts.take(a, 1).expect("first");
        assert!(counts.take(b, 1).is_none(), "the same /64");
        assert!(counts.take(other, 1).is_some(), "another /64");
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("mapped");
        assert_eq!(peer_key(mapped), IpAddr::from([10, 0, 0, 1]));
    }
}
