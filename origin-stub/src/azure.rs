//! The Azure Blob front of the stub: `talon-protocols`' Azure server over the stub's
//! store (the same objects as the S3 front, with containers for buckets and blobs for
//! keys).

use std::net::SocketAddr;
use std::sync::Arc;

use http::Request;
use hyper::body::Incoming;
use talon_protocols::azure::server::AzureServer;
use talon_protocols::server::ServerLimits;

use crate::backend::StubBackend;
use crate::front::StubState;
use crate::server::{ConnectionReset, HandlerResult};
use talon_core::Backend;

/// Handles one Azure Blob request.
pub async fn handle(
    state: Arc<StubState>,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> HandlerResult {
    let backend = StubBackend::new(state.clone(), Backend::Azure);
    let server = AzureServer {
        addressing: &state.azure_addressing,
        identity: &state.azure_identity,
        // The stub keeps no ACLs: `private` only, as before.
        acls: None,
        https: false,
        service_endpoint: Some(&state.azure_endpoint),
        server_name: "talon-origin-stub",
        limits: ServerLimits::default(),
        log_requests: false,
    };
    let handled =
        talon_protocols::azure::server::handle(&server, &backend, req, Some(peer.ip())).await;
    if backend.reset() {
        return Err(ConnectionReset);
    }
    Ok(handled.response)
}
