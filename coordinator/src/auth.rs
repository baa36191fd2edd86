//! Who may call the coordinator's API (SEC-04 of the security review: anyone on the
//! host registered a worker at an address of their choosing and every gateway placed
//! blocks on it).
//!
//! Every `/v1/` request carries `x-talon-auth: <role> <unix seconds> <signature>`, the
//! cluster secret's HMAC over role, method, path, timestamp and body
//! ([`talon_core::cluster_auth`]). The coordinator accepts it within
//! [`MAX_CLOCK_SKEW`] of its clock, then checks the role:
//! - reads (`GET /v1/...`) are open to every role;
//! - register and heartbeat need the `worker` role;
//! - drain needs `worker` (the worker's own id, see the membership's instance binding)
//!   or `admin`.
//! - a reader's circuit report (`POST /v1/readers/{id}/circuits`) needs `reader`,
//!   `ingester` or `admin`; it only informs the member view, never placement.
//!
//! `/healthz`, `/readyz` and `/metrics` stay open: they reveal no addresses and change
//! nothing. The secret itself never travels; traffic is not encrypted.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use talon_core::cluster_auth::{ClusterSecret, Role, parse_api_auth_header};

use talon_coordinator_client::error::CoordinatorError;

/// How far a signed request's timestamp may be from the coordinator's clock.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);

pub use talon_coordinator_client::secret::AUTH_HEADER;

/// Largest request body the API reads, in bytes.
const MAX_BODY: usize = 64 * 1024;

/// The verified signer of a request, in the request's extensions for the handlers.
#[derive(Debug, Clone, Copy)]
pub struct Signer(pub Role);

pub use talon_coordinator_client::secret::{
    ClusterSecretArgs, load_secret, random_secret, unix_now,
};

/// The roles that may make a request, by method and path.
fn allowed(method: &Method, path: &str) -> &'static [Role] {
    if method == Method::GET {
        return &Role::ALL;
    }
    if path.ends_with("/drain") {
        return &[Role::Worker, Role::Admin];
    }
    if path == "/v1/warm" || path.starts_with("/v1/warm/") {
        // A warm job makes every worker fetch from the origin: admins and ingesters.
        return &[Role::Ingester, Role::Admin];
    }
    if path == "/v1/invalidations" || path == "/v1/freshness" {
        // What every gateway and worker forgets, or how long it trusts what it
        // learned: the admin's alone.
        return &[Role::Admin];
    }
    if path == "/v1/pins" {
        // What every worker keeps from eviction: the admin's alone.
        return &[Role::Admin];
    }
    if path.starts_with("/v1/readers/") {
        // What readers saw of the workers: any role that reads may say.
        return &[Role::Reader, Role::Ingester, Role::Admin];
    }
    &[Role::Worker]
}

/// Checks the signature of every `/v1/` request; see the module docs.
pub(crate) async fn require_signature(
    State(secret): State<ClusterSecret>,
    req: Request,
    next: Next,
) -> Response {
    if !req.uri().path().starts_with("/v1/") {
        return next.run(req).await;
    }
    match verify(&secret, req).await {
        Ok(req) => next.run(req).await,
        Err(e) => crate::server::ApiError(e).into_response(),
    }
}

async fn verify(secret: &ClusterSecret, req: Request) -> Result<Request, CoordinatorError> {
    let (mut parts, body) = req.into_parts();
    let header = parts
        .headers
        .get(AUTH_HEADER)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            CoordinatorError::Unauthenticated(format!(
                "sign the request with the cluster secret ({AUTH_HEADER})"
            ))
        })?;
    let (role, ts, signature) = parse_api_auth_header(header).ok_or_else(|| {
        CoordinatorError::Unauthenticated(format!(
            "{AUTH_HEADER} is not '<role> <unix seconds> <hex>'"
        ))
    })?;
    let now = unix_now();
    if now.abs_diff(ts) > MAX_CLOCK_SKEW.as_secs() {
        return Err(CoordinatorError::Unauthenticated(
            "the signature's time is more than 5 minutes from the coordinator's clock".into(),
        ));
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| CoordinatorError::InvalidRequest("the body is too large".into()))?;
    let path = parts.uri.path().to_owned();
    if !secret.verify_api_signature(role, parts.method.as_str(), &path, ts, &bytes, signature) {
        return Err(CoordinatorError::Unauthenticated(
            "the signature does not match: another cluster secret?".into(),
        ));
    }
    if !allowed(&parts.method, &path).contains(&role) {
        return Err(CoordinatorError::Forbidden(format!(
            "the {} role may not {} {path}",
            role.name(),
            parts.method
        )));
    }
    parts.extensions.insert(Signer(role));
    Ok(Request::from_parts(parts, Body::from(bytes)))
}
