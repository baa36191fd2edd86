//! Layer 1 on Tokio: the portable plane, and the fallback when io_uring is unavailable.
//! One listener, a task per connection on Tokio's work-stealing pool, readiness from
//! epoll. The protocol itself is [`super::connection`]'s.
//!
//! The same code serves the worker's local socket (a Unix socket for readers on this
//! host, whatever the TCP plane is): there a ReadRange of cached bytes is answered with
//! the block file's descriptor instead of the bytes ([`TokioStream::HANDS_OFF_FILES`]).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::watch;

use super::DataPlaneConfig;
use super::admission::{Admission, Arriving};
use super::connection::{SocketReader, SocketWriter, serve_connection};
use super::requests::Services;

/// A listener the plane accepts on: TCP, or the local Unix socket.
pub trait TokioListener: Send + 'static {
    /// Its connections.
    type Stream: TokioStream;

    /// The next connection and a name for its peer, for logs.
    fn accept_one(&self) -> impl Future<Output = io::Result<(Self::Stream, String)>> + Send;

    /// The peer's address, for its share of the places of connections still saying
    /// Hello; `None` for the local socket (only the worker's user reaches it).
    fn peer_ip(stream: &Self::Stream) -> Option<std::net::IpAddr>;
}

impl TokioListener for TcpListener {
    type Stream = TcpStream;

    async fn accept_one(&self) -> io::Result<(TcpStream, String)> {
        let (stream, peer) = self.accept().await?;
        let _ = stream.set_nodelay(true);
        Ok((stream, peer.to_string()))
    }

    fn peer_ip(stream: &TcpStream) -> Option<std::net::IpAddr> {
        stream.peer_addr().ok().map(|a| a.ip())
    }
}

impl TokioListener for UnixListener {
    type Stream = UnixStream;

    async fn accept_one(&self) -> io::Result<(UnixStream, String)> {
        let (stream, _) = self.accept().await?;
        let peer = stream
            .peer_cred()
            .ok()
            .and_then(|c| c.pid())
            .map_or_else(|| "local".to_owned(), |pid| format!("local pid {pid}"));
        Ok((stream, peer))
    }

    fn peer_ip(_: &UnixStream) -> Option<std::net::IpAddr> {
        None
    }
}

/// What the plane needs of a Tokio socket (Tokio's readiness is per direction, so one
/// `&` serves both halves).
pub trait TokioStream: AsFd + Send + Sync + 'static {
    /// Whether cached reads are answered with the block file's descriptor (the local
    /// socket) rather than its bytes.
    const HANDS_OFF_FILES: bool;

    /// Waits until the socket has bytes (or an error) to read.
    fn ready_to_read(&self) -> impl Future<Output = io::Result<()>> + Send;

    /// Waits until the socket can take bytes.
    fn ready_to_write(&self) -> impl Future<Output = io::Result<()>> + Send;

    /// A non-blocking read appended to `buf`'s spare capacity.
    fn try_read_into(&self, buf: &mut Vec<u8>) -> io::Result<usize>;

    /// Runs the non-blocking write `op`, clearing write readiness on `WouldBlock`.
    fn try_write_with(&self, op: &mut dyn FnMut() -> io::Result<usize>) -> io::Result<usize>;
}

/// Implements [`TokioStream`] for a Tokio socket type by its inherent methods (TCP and
/// Unix sockets have the same ones, but no trait in common).
macro_rules! tokio_stream {
    ($socket:ty, hands_off_files: $hands_off:expr) => {
        impl TokioStream for $socket {
            const HANDS_OFF_FILES: bool = $hands_off;

            async fn ready_to_read(&self) -> io::Result<()> {
                self.readable().await
            }

            async fn ready_to_write(&self) -> io::Result<()> {
                self.writable().await
            }

            fn try_read_into(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
                self.try_read_buf(buf)
            }

            fn try_write_with(
                &self,
                op: &mut dyn FnMut() -> io::Result<usize>,
            ) -> io::Result<usize> {
                self.try_io(Interest::WRITABLE, op)
            }
        }
    };
}

tokio_stream!(TcpStream, hands_off_files: false);
tokio_stream!(UnixStream, hands_off_files: true);

/// Serves the data plane on `listener` until `shutdown` turns true, then drains: the
/// connections stop reading and finish the answers they owe (at most 10 s).
pub async fn serve<L: TokioListener>(
    listener: L,
    services: Arc<Services>,
    config: DataPlaneConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let admission = Admission::new(&config);
    let config = Arc::new(config);
    let mut connections = tokio::task::JoinSet::new();
    let mut last_warned: Option<std::time::Instant> = None;
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.changed() => break,
            a = listener.accept_one() => match a {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, for example: let connections end first, and
                    // say so at most once a second (it spun and flooded the log).
                    if last_warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
                        tracing::warn!(error = %e, "accept failed");
                        last_warned = Some(std::time::Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let Some(arriving) = admission.arrive(L::peer_ip(&stream)) else {
            tracing::debug!(%peer, "connection refused: too many connections saying Hello");
            continue;
        };
        let (services, config, shutdown) = (services.clone(), config.clone(), shutdown.clone());
        connections.spawn(async move {
            services.metrics.connection(1);
            if let Err(e) = connection(stream, arriving, &services, &config, shutdown).await {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
            services.metrics.connection(-1);
        });
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(10), drain)
        .await
        .is_err()
    {
        tracing::warn!("data-plane connections still open after the drain timeout");
    }
}

async fn connection<S: TokioStream>(
    stream: S,
    arriving: Arriving,
    services: &Arc<Services>,
    config: &DataPlaneConfig,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let bulk_fd: Arc<OwnedFd> = Arc::new(stream.as_fd().try_clone_to_owned()?);
    serve_connection(
        TokioSocket(&stream),
        TokioSocket(&stream),
        bulk_fd,
        arriving,
        services,
        config,
        shutdown,
    )
    .await
}

/// A Tokio socket, read and written through readiness.
struct TokioSocket<'a, S>(&'a S);

impl<S: TokioStream> SocketReader for TokioSocket<'_, S> {
    async fn read(&mut self, mut buf: Vec<u8>, timeout: Duration) -> (io::Result<usize>, Vec<u8>) {
        let stream = self.0;
        let read = async {
            loop {
                stream.ready_to_read().await?;
                buf.clear();
                match stream.try_read_into(&mut buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    r => return r,
                }
            }
        };
        let result = match tokio::time::timeout(timeout, read).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "no bytes in time")),
        };
        (result, buf)
    }
}

impl<S: TokioStream> SocketWriter for TokioSocket<'_, S> {
    fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    fn try_write(&self, op: &mut dyn FnMut() -> io::Result<usize>) -> io::Result<usize> {
        self.0.try_write_with(op)
    }

    fn hands_off_files(&self) -> bool {
        S::HANDS_OFF_FILES
    }

    async fn writable(&self, timeout: Duration) -> io::Result<()> {
        match tokio::time::timeout(timeout, self.0.ready_to_write()).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer stopped reading",
            )),
        }
    }
}
