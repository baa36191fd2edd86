//! How the S3, Azure and admin listeners serve: each handler runs on `talon-listener`
//! (header-read and write-stall timeouts, connection caps, drain on shutdown), with the
//! `Expect: 100-continue` rule applied to every answer.
//!
//! Handlers return `Err(ConnectionReset)` to have the connection closed without an
//! answer, which is how the `reset` fault reaches the client.

use std::future::Future;
use std::net::SocketAddr;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use talon_listener::ListenerLimits;
use talon_protocols::expect_continue::ContinueRisk;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::body::ResponseBody;

/// A handler's request to drop the connection without answering.
#[derive(Debug, thiserror::Error)]
#[error("connection reset (fault injection)")]
pub struct ConnectionReset;

/// What a handler returns.
pub type HandlerResult = Result<Response<ResponseBody>, ConnectionReset>;

/// Spawns [`serve`] on the runtime with a limit of `max_connections` at once; a
/// connection over it is answered in `front`'s words (503 SlowDown or ServerBusy with
/// `Retry-After`, as the gateway's fronts do) when one is given, else closed.
pub fn spawn<H, F>(
    listener: TcpListener,
    handler: H,
    shutdown: watch::Receiver<bool>,
    max_connections: usize,
    front: Option<talon_core::Backend>,
) -> tokio::task::JoinHandle<()>
where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = HandlerResult> + Send + 'static,
{
    tokio::spawn(serve(listener, handler, shutdown, max_connections, front))
}

/// Serves `listener` through `talon-listener` (its timeouts and caps) until `shutdown`
/// turns true, then drains; see [`spawn`] for `front`.
pub async fn serve<H, F>(
    listener: TcpListener,
    handler: H,
    mut shutdown: watch::Receiver<bool>,
    max_connections: usize,
    front: Option<talon_core::Backend>,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = HandlerResult> + Send + 'static,
{
    let limits = ListenerLimits {
        max_connections,
        max_connections_per_peer: max_connections,
        over_capacity_answer: front.map(talon_protocols::answer::over_capacity_answer),
        ..ListenerLimits::default()
    };
    let service = move |peer: SocketAddr| {
        let handler = handler.clone();
        service_fn(move |req: Request<Incoming>| {
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
        })
    };
    let stop = async move {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    talon_listener::serve(listener, limits, service, stop).await;
}
