//! The S3 front of the stub: `talon-protocols`' S3 server over the stub's store.

use std::net::SocketAddr;
use std::sync::Arc;

use http::Request;
use hyper::body::Incoming;
use talon_protocols::s3::server::{S3Server, ServerLimits};

use crate::backend::StubBackend;
use crate::front::StubState;
use crate::server::{ConnectionReset, HandlerResult};
use talon_core::Backend;

/// The owner id written into listings.
const OWNER_ID: &str = "talon-origin-stub";

/// Handles one S3 request.
pub async fn handle(
    state: Arc<StubState>,
    req: Request<Incoming>,
    _peer: SocketAddr,
) -> HandlerResult {
    let backend = StubBackend::new(state.clone(), Backend::S3);
    let server = S3Server {
        addressing: &state.s3_addressing,
        identities: &state.s3_identities,
        // The stub keeps no ACLs: `private` only, as before.
        acls: None,
        region: &state.region,
        owner_id: OWNER_ID,
        server_name: "talon-origin-stub",
        limits: ServerLimits::default(),
        log_requests: false,
    };
    let handled = talon_protocols::s3::server::handle(&server, &backend, req).await;
    if backend.reset() {
        return Err(ConnectionReset);
    }
    Ok(handled.response)
}
