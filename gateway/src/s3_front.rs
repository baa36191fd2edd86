//! The S3 front: unmodified S3 clients (boto3, the aws CLI, aws-sdk-rust, rclone,
//! DuckDB) talk to it as to S3.
//!
//! The protocol is `talon-protocols`' S3 server ([`talon_protocols::s3::server`]); this
//! front gives it the gateway as its backend ([`GatewayBackend`]: reads through the
//! front's route, writes to the origin once, listings from the origin, and against an
//! S3 origin the operations the gateway does not interpret relayed as they are) and
//! counts what it served.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::response::Response;
use http::Request;
use talon_cache_client::ReaderId;
use talon_core::Backend;
use talon_protocols::s3::server::S3Server;

use crate::Gateway;
use crate::access_log::Asked;
use crate::backend::GatewayBackend;

const OWNER_ID: &str = "talon-gateway";
const PROTOCOL: &str = "s3";

/// Handles one S3 request.
pub async fn handle(gw: Arc<Gateway>, req: Request<Body>) -> Response {
    let started = Instant::now();
    let Some(front) = gw.s3.as_ref() else {
        return crate::reply::no_front(Backend::S3);
    };
    let reader = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|peer| ReaderId::from_ip(peer.0.ip()));
    let backend = GatewayBackend::new(gw.clone(), PROTOCOL, front.route, front.backend, reader);
    let asked = gw.access_log.is_some().then(|| Asked::of(&req, "range"));
    let identities = gw.identities();
    let server = S3Server {
        addressing: &front.addressing,
        identities: &identities.s3,
        acls: gw.acls.as_ref(),
        region: &front.region,
        owner_id: OWNER_ID,
        server_name: "talon-gateway",
        limits: gw.limits.server_limits(),
        log_requests: asked.is_some(),
    };
    let handled = talon_protocols::s3::server::handle(&server, &backend, req).await;
    backend.answer(handled, started, asked)
}
