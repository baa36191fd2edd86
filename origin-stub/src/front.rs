//! What both protocol fronts of the stub share: its state, how a request that does not
//! succeed ends, blocking store work, and fault injection. The fronts themselves are
//! `talon-protocols`' servers over [`crate::backend::StubBackend`].

use std::sync::Arc;

use talon_protocols::answer::Failure;
use talon_protocols::azure::auth::AzureIdentity;
use talon_protocols::azure::request::AzureAddressing;
use talon_protocols::s3::auth::S3Identities;
use talon_protocols::s3::request::S3Addressing;
use talon_protocols::{Error, ErrorKind, Result};

use crate::faults::{FaultKind, Faults};
use crate::metrics::Metrics;
use crate::store::ObjectStore;

/// Everything a request handler needs, shared by all connections.
#[derive(Debug)]
pub struct StubState {
    /// The objects.
    pub store: Arc<ObjectStore>,
    /// Live fault settings.
    pub faults: Faults,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// The region S3 reports.
    pub region: String,
    /// How S3 requests name buckets.
    pub s3_addressing: S3Addressing,
    /// How Azure requests name the account.
    pub azure_addressing: AzureAddressing,
    /// Who may call the S3 front (no secrets: anonymous, signatures unchecked).
    pub s3_identities: S3Identities,
    /// The Azure account served and its key (no key: anonymous).
    pub azure_identity: AzureIdentity,
    /// The Azure account's base URL, written into listings.
    pub azure_endpoint: String,
}

/// How a request ends when it does not succeed.
#[derive(Debug)]
pub enum Outcome {
    /// Answer with the protocol's error.
    Failure(Failure),
    /// Close the connection without an answer (fault injection).
    Reset,
}

impl From<Error> for Outcome {
    fn from(error: Error) -> Outcome {
        Outcome::Failure(Failure {
            error,
            headers: Vec::new(),
        })
    }
}

impl From<Failure> for Outcome {
    fn from(f: Failure) -> Outcome {
        Outcome::Failure(f)
    }
}

/// Runs blocking store work off the reactor.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        Error::new(
            ErrorKind::InternalError,
            format!("a storage task failed: {e}"),
        )
    })?
}

/// Applies the injected faults to a request before it is handled: sleeps for the
/// configured latency, then fails it if the dice say so. Returns whether a GET body
/// should be truncated.
///
/// # Errors
/// [`Outcome::Reset`], or a `SlowDown` / `InternalError` failure.
pub async fn apply_faults(
    faults: &Faults,
    metrics: &Metrics,
) -> std::result::Result<bool, Outcome> {
    let (latency, fault) = faults.draw();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if faults.throttled() {
        metrics.fault("throttled");
        return Err(Error::new(ErrorKind::SlowDown, "Please reduce your request rate.").into());
    }
    let Some(kind) = fault else { return Ok(false) };
    metrics.fault(kind.name());
    match kind {
        FaultKind::Slowdown => {
            Err(Error::new(ErrorKind::SlowDown, "Please reduce your request rate.").into())
        }
        FaultKind::Internal => Err(Error::new(
            ErrorKind::InternalError,
            "We encountered an internal error. Please try again.",
        )
        .into()),
        FaultKind::Reset => Err(Outcome::Reset),
        FaultKind::Truncate => Ok(true),
    }
}
