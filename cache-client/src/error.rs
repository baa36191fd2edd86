//! The cache client's error type.

use talon_core::ErrorCode;
use talon_protocols::ErrorKind;

/// Why a stat or a read failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CacheClientError {
    /// A worker answered with an error frame that retrying elsewhere cannot change
    /// (not found, version mismatch, range, invalid request).
    #[error("worker refused: {code:?}: {message}")]
    Refused {
        /// The error frame's code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
    /// Every worker tried failed (refused with a transient error, timed out, or cut the
    /// connection) and no origin fallback was allowed or it failed too.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A worker missed a deadline of the piece's budget (no first byte, a stall
    /// mid-body, or the budget ran out); the piece moves on to the next worker or the
    /// origin.
    #[error("deadline exceeded: {0}")]
    DeadlineExceeded(String),
    /// The piece's deadline budget ran out before this worker could answer within its
    /// own deadlines (earlier owners spent it, or a connect was still pending): the
    /// piece moves on, and the worker is not blamed (its circuit hears nothing).
    #[error("deadline budget spent: {0}")]
    BudgetSpent(String),
    /// The origin answered (fallback path).
    #[error("origin: {0}")]
    Origin(String, ErrorKind),
    /// The request is invalid before anything is sent (range past the end, bad sizes).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// No membership could be obtained from the coordinator and none was known.
    #[error("no cluster membership: {0}")]
    NoMembership(String),
    /// This client's own read budget had no room for the read's first piece within
    /// [`CacheClientConfig::admission_wait`](crate::CacheClientConfig::admission_wait):
    /// the reader should come back later (a gateway answers its protocol's throttling
    /// error). Nothing was asked of any worker.
    #[error("overloaded: {0}")]
    Overloaded(String),
    /// The cluster's block size (as its coordinator publishes it) differs from the
    /// one this client was given: [`connect`](crate::CacheClient::connect) refuses,
    /// naming both.
    #[error("{0}")]
    GeometryMismatch(String),
}

impl CacheClientError {
    /// The object-store error kind a gateway reports for this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            CacheClientError::Refused { code, .. } => ErrorKind::from_frame_code(*code),
            CacheClientError::Unavailable(_)
            | CacheClientError::DeadlineExceeded(_)
            | CacheClientError::BudgetSpent(_)
            | CacheClientError::NoMembership(_) => ErrorKind::ServiceUnavailable,
            CacheClientError::Origin(_, kind) => kind.of_an_origin_read(),
            CacheClientError::InvalidRequest(_) => ErrorKind::InvalidRange,
            CacheClientError::Overloaded(_) => ErrorKind::SlowDown,
            CacheClientError::GeometryMismatch(_) => ErrorKind::InternalError,
        }
    }

    /// Whether another worker (or the origin) might succeed where this failed.
    pub fn is_transient(&self) -> bool {
        match self {
            CacheClientError::Refused { code, .. } => code.is_transient(),
            CacheClientError::Unavailable(_)
            | CacheClientError::DeadlineExceeded(_)
            | CacheClientError::BudgetSpent(_)
            | CacheClientError::NoMembership(_) => true,
            CacheClientError::Origin(_, kind) => kind.is_retryable(),
            // Another worker has no more room in this client's budget.
            CacheClientError::InvalidRequest(_)
            | CacheClientError::Overloaded(_)
            | CacheClientError::GeometryMismatch(_) => false,
        }
    }
}

impl From<talon_protocols::Error> for CacheClientError {
    fn from(e: talon_protocols::Error) -> Self {
        CacheClientError::Origin(e.message().to_owned(), e.kind())
    }
}

/// Shorthand.
pub type Result<T, E = CacheClientError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// An origin body cut off during a fallback read is the origin's failure (500),
    /// not the reader's bad request (400); other origin answers pass through.
    #[test]
    fn an_origin_body_cut_off_is_reported_as_the_origins_failure() {
        let origin = |kind| CacheClientError::from(talon_protocols::Error::new(kind, "x"));
        assert_eq!(
            origin(ErrorKind::IncompleteBody).kind(),
            ErrorKind::InternalError
        );
        assert_eq!(
            origin(ErrorKind::NoSuchBucket).kind(),
            ErrorKind::NoSuchBucket
        );
        assert_eq!(
            CacheClientError::Refused {
                code: ErrorKind::IncompleteBody.frame_code(),
                message: "x".into()
            }
            .kind(),
            ErrorKind::InternalError
        );
    }
}
