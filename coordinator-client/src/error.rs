//! The crate's one error type.

use std::net::SocketAddr;

/// Everything that can go wrong in the coordinator library: starting the
/// server, membership operations, and the API client.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// A registration was rejected (bad id, address or weight, or a body
    /// that is not a valid registration). HTTP 400.
    #[error("invalid registration: {0}")]
    InvalidRegistration(String),

    /// A request body other than a registration was not valid. HTTP 400.
    #[error("invalid request: {0}")]
    InvalidRequest(String),

    /// The worker id is not a member (never registered, expired, or the
    /// coordinator restarted). A worker that gets this on a heartbeat must
    /// register again. HTTP 404.
    #[error("unknown worker {0:?}; it must register again")]
    UnknownWorker(String),

    /// The request carries no valid cluster signature (missing, wrong secret, or
    /// outside the time window). HTTP 401.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),

    /// The signer's role may not make this request. HTTP 403.
    #[error("forbidden: {0}")]
    Forbidden(String),

    /// The worker id is bound to another worker instance, or the membership is full.
    /// HTTP 409.
    #[error("conflict: {0}")]
    Conflict(String),

    /// A worker or a membership uses another placement scoring than this process
    /// ([`crate::placement::PLACEMENT_VERSION`]); readers of two versions would place
    /// every block differently. HTTP 409.
    #[error(
        "placement version {0} differs from this process's {ours}: a cluster must not mix \
         placement versions (upgrade every process together)",
        ours = crate::placement::PLACEMENT_VERSION
    )]
    PlacementVersion(u32),

    /// A part was started with another block or page size than the cluster's (the
    /// coordinator's `--block-size` / `--page-size`): the message names both values.
    /// Readers of two block sizes would place and cache every block twice. HTTP 409.
    #[error("{0}")]
    GeometryMismatch(String),

    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// The shared state store (etcd) could not be reached or refused; nothing changed.
    /// HTTP 503: the caller retries, as a worker's next heartbeat does.
    #[error("state store unavailable: {0}")]
    StateStore(String),

    /// The listener could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },

    /// The client could not reach the coordinator or read its answer.
    #[error("coordinator request failed: {}", talon_core::error_line(.0))]
    Transport(#[from] reqwest::Error),

    /// The coordinator answered with an error status the client does not
    /// map to a more specific variant.
    #[error("coordinator answered {status}: {message}")]
    Api {
        /// HTTP status code.
        status: u16,
        /// The `error` field of the body, or the body itself.
        message: String,
    },

    /// The coordinator's answer was not the expected JSON.
    #[error("unexpected answer from the coordinator: {0}")]
    Decode(String),
}

impl CoordinatorError {
    /// The HTTP status the admin API answers this error with.
    pub fn status_code(&self) -> u16 {
        match self {
            Self::InvalidRegistration(_) | Self::InvalidRequest(_) => 400,
            Self::Unauthenticated(_) => 401,
            Self::Forbidden(_) => 403,
            Self::UnknownWorker(_) => 404,
            Self::Conflict(_) | Self::PlacementVersion(_) | Self::GeometryMismatch(_) => 409,
            Self::StateStore(_) => 503,
            Self::Api { status, .. } => *status,
            Self::InvalidConfig(_) | Self::Bind { .. } | Self::Transport(_) | Self::Decode(_) => {
                500
            }
        }
    }
}
