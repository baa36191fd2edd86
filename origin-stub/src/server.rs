//! The HTTP/1.1 server loop shared by the S3, Azure and admin listeners: accepts
//! connections up to a limit, serves each with hyper, and drains in-flight requests on
//! shutdown.
//!
//! Handlers return `Err(ConnectionReset)` to have the connection closed without an
//! answer, which is how the `reset` fault reaches the client.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use talon_protocols::expect_continue::ContinueRisk;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::body::ResponseBody;

/// A handler's request to drop the connection without answering.
#[derive(Debug, thiserror::Error)]
#[error("connection reset (fault injection)")]
pub struct ConnectionReset;

/// What a handler returns.
pub type HandlerResult = Result<Response<ResponseBody>, ConnectionReset>;

/// How long shutdown waits for in-flight requests before closing connections.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send its request headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Spawns [`serve`] on the runtime with a limit of `max_connections` at once.
pub fn spawn<H, F>(
    listener: TcpListener,
    handler: H,
    shutdown: watch::Receiver<bool>,
    max_connections: usize,
) -> tokio::task::JoinHandle<()>
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = HandlerResult> + Send + 'static,
{
    tokio::spawn(serve(
        listener,
        handler,
        shutdown,
        Arc::new(Semaphore::new(max_connections)),
    ))
}

/// Serves `listener` until `shutdown` turns true, then drains.
pub async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    mut shutdown: watch::Receiver<bool>,
    connections: Arc<Semaphore>,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = HandlerResult> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    loop {
        let permit = tokio::select! {
            _ = shutdown.changed() => break,
            permit = connections.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let service = service_fn(move |req: Request<Incoming>| {
            let handler = handler.clone();
            async move {
                // An answer that leaves an expected body unread closes the connection
                // (see `talon_protocols::expect_continue`).
                let risk = ContinueRisk::of(req.headers());
                let mut resp = handler(req, peer).await?;
                let status = resp.status();
                risk.apply(status, resp.headers_mut());
                Ok::<_, ConnectionReset>(resp)
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .max_headers(256)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain timeout; closing them");
    }
}

/// A fresh request id: 16 upper-case hex digits.
pub fn new_request_id() -> String {
    format!("{:016X}", fastrand::u64(..))
}

/// Total size of the request headers, names plus values, in bytes.
pub fn header_bytes(headers: &http::HeaderMap) -> usize {
    headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum()
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM: the signals a binary drains and exits on.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
