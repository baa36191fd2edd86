//! Layer 1 on Tokio: the portable plane, and the fallback when io_uring is unavailable.
//! One listener, a task per connection on Tokio's work-stealing pool, readiness from
//! epoll. The protocol itself is [`super::connection`]'s.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use super::DataPlaneConfig;
use super::connection::{SocketReader, SocketWriter, serve_connection};
use super::requests::Services;

/// Serves the data plane on `listener` until `shutdown` turns true, then drains: the
/// connections stop reading and finish the answers they owe (at most 10 s).
pub async fn serve(
    listener: TcpListener,
    services: Arc<Services>,
    config: DataPlaneConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let limit = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let config = Arc::new(config);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let permit = tokio::select! {
            _ = shutdown.changed() => break,
            p = limit.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let (stream, peer) = tokio::select! {
            _ = shutdown.changed() => break,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
        };
        let (services, config, shutdown) = (services.clone(), config.clone(), shutdown.clone());
        connections.spawn(async move {
            services.metrics.connection(1);
            if let Err(e) = connection(stream, &services, &config, shutdown).await {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
            services.metrics.connection(-1);
            drop(permit);
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

async fn connection(
    stream: TcpStream,
    services: &Arc<Services>,
    config: &DataPlaneConfig,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let bulk_fd: Arc<OwnedFd> = Arc::new(stream.as_fd().try_clone_to_owned()?);
    serve_connection(
        TokioSocket(&stream),
        TokioSocket(&stream),
        bulk_fd,
        services,
        config,
        shutdown,
    )
    .await
}

/// A Tokio socket, read and written through readiness (`&TcpStream` for both halves:
/// Tokio's readiness is per direction).
struct TokioSocket<'a>(&'a TcpStream);

impl SocketReader for TokioSocket<'_> {
    async fn read(&mut self, mut buf: Vec<u8>, timeout: Duration) -> (io::Result<usize>, Vec<u8>) {
        let stream = self.0;
        let read = async {
            loop {
                stream.readable().await?;
                buf.clear();
                match stream.try_read_buf(&mut buf) {
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

impl SocketWriter for TokioSocket<'_> {
    fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    fn try_write(&self, op: &mut dyn FnMut() -> io::Result<usize>) -> io::Result<usize> {
        self.0.try_io(Interest::WRITABLE, op)
    }

    async fn writable(&self, timeout: Duration) -> io::Result<()> {
        match tokio::time::timeout(timeout, self.0.writable()).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer stopped reading",
            )),
        }
    }
}
