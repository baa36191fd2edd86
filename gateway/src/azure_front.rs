//! The Azure Blob front: unmodified Azure SDK clients (azure-storage-blob with an
//! endpoint override, rclone) talk to it as to a storage account.
//!
//! The protocol is `talon-protocols`' Azure server ([`talon_protocols::azure::server`]);
//! this front gives it the gateway as its backend ([`GatewayBackend`]: reads through
//! the front's route, Put Blob and Delete Blob to the origin once, listings from the
//! origin, and against an Azure origin block uploads and container operations relayed
//! as they are) and counts what it served.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::response::Response;
use http::Request;
use talon_cache_client::ReaderId;
use talon_core::Backend;
use talon_protocols::azure::server::AzureServer;

use crate::Gateway;
use crate::access_log::Asked;
use crate::backend::GatewayBackend;

const PROTOCOL: &str = "azure";

/// Handles one Azure Blob request.
pub async fn handle(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Body>) -> Response {
    let started = Instant::now();
    let Some(front) = gw.azure.as_ref() else {
        return crate::reply::no_front(Backend::Azure);
    };
    let backend = GatewayBackend::new(
        gw.clone(),
        PROTOCOL,
        front.route,
        front.backend,
        Some(ReaderId::from_ip(peer.ip())),
    );
    let asked = gw
        .access_log
        .is_some()
        .then(|| Asked::of(&req, talon_protocols::relay::AZURE_RANGE));
    let identities = gw.identities();
    let server = AzureServer {
        addressing: &front.addressing,
        identity: &identities.azure,
        acls: gw.acls.as_ref(),
        https: gw.https,
        service_endpoint: None,
        server_name: "talon-gateway",
        limits: gw.limits.server_limits(),
        log_requests: asked.is_some(),
    };
    let handled =
        talon_protocols::azure::server::handle(&server, &backend, req, Some(peer.ip())).await;
    backend.answer(handled, started, asked)
}
