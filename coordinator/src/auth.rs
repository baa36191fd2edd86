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
//!
//! `/healthz`, `/readyz` and `/metrics` stay open: they reveal no addresses and change
//! nothing. The secret itself never travels; traffic is not encrypted.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use talon_core::cluster_auth::{ClusterSecret, Role, parse_api_auth_header};

use crate::error::CoordinatorError;

/// How far a signed request's timestamp may be from the coordinator's clock.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);

/// The header that carries the signature.
pub const AUTH_HEADER: &str = "x-talon-auth";

/// Largest request body the API reads, in bytes.
const MAX_BODY: usize = 64 * 1024;

/// The verified signer of a request, in the request's extensions for the handlers.
#[derive(Debug, Clone, Copy)]
pub struct Signer(pub Role);

/// A fresh random secret (32 random bytes, hex): `talon up` and tests make one per run.
pub fn random_secret() -> ClusterSecret {
    let mut bytes = [0u8; 32];
    if getrandom::getrandom(&mut bytes).is_err() {
        // The OS gave no randomness; std's hasher keys are seeded from it too, so
        // this is a last resort, never silent predictability from a constant.
        use std::hash::{BuildHasher, Hasher};
        for chunk in bytes.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0x0074_616c_6f6e);
            chunk.copy_from_slice(&h.finish().to_le_bytes()[..chunk.len()]);
        }
    }
    #[allow(clippy::expect_used)]
    ClusterSecret::new(hex::encode(bytes).as_bytes()).expect("64 hex characters are long enough")
}

/// Reads a cluster secret file (`--cluster-secret-file`), or takes the secret from the
/// environment value (`TALON_CLUSTER_SECRET`) when no file is given.
///
/// # Errors
/// [`CoordinatorError::InvalidConfig`] when neither is given, the file cannot be read,
/// or the secret is shorter than 16 bytes.
pub fn load_secret(
    file: Option<&Path>,
    env_value: Option<&str>,
) -> Result<ClusterSecret, CoordinatorError> {
    let bytes = match (file, env_value) {
        (Some(path), _) => std::fs::read(path).map_err(|e| {
            CoordinatorError::InvalidConfig(format!(
                "reading the cluster secret {}: {e}",
                path.display()
            ))
        })?,
        (None, Some(v)) => v.as_bytes().to_vec(),
        (None, None) => {
            return Err(CoordinatorError::InvalidConfig(
                "no cluster secret: give --cluster-secret-file or TALON_CLUSTER_SECRET".into(),
            ));
        }
    };
    ClusterSecret::new(&bytes).map_err(|e| CoordinatorError::InvalidConfig(e.to_string()))
}

/// The cluster secret's flags, shared by every binary of a cluster
/// (`#[command(flatten)]`).
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterSecretArgs {
    /// File holding the cluster secret (at least 16 bytes), the same for the
    /// coordinator, every worker and every gateway of a cluster.
    #[arg(long, env = "TALON_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: Option<std::path::PathBuf>,
    /// The cluster secret itself, when no file is given (kept out of the process list).
    #[arg(
        long = "cluster-secret",
        env = "TALON_CLUSTER_SECRET",
        hide = true,
        hide_env_values = true
    )]
    pub cluster_secret: Option<String>,
}

impl ClusterSecretArgs {
    /// The secret the flags name ([`load_secret`]).
    ///
    /// # Errors
    /// As [`load_secret`].
    pub fn load(&self) -> Result<ClusterSecret, CoordinatorError> {
        load_secret(
            self.cluster_secret_file.as_deref(),
            self.cluster_secret.as_deref(),
        )
    }
}

/// Seconds since the Unix epoch now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The roles that may make a request, by method and path.
fn allowed(method: &Method, path: &str) -> &'static [Role] {
    if method == Method::GET {
        return &Role::ALL;
    }
    if path.ends_with("/drain") {
        return &[Role::Worker, Role::Admin];
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
        Err(e) => e.into_response(),
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
