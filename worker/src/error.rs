//! The worker's error type and its mapping to wire error codes.

use std::io;
use std::sync::Arc;

use talon_core::ErrorCode;

/// Everything that can go wrong while serving a request or running the worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The request is malformed or names something this worker cannot serve.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The range lies outside the block or the object.
    #[error("range not satisfiable: {0}")]
    RangeNotSatisfiable(String),
    /// A request names a size for an object version other than the one the cached
    /// block was made for; one of the two is wrong (the loader asks the origin which).
    #[error(
        "invalid request: object size {requested} differs from the {recorded} recorded for this version"
    )]
    ObjectSizeConflict {
        /// The size the request names.
        requested: u64,
        /// The size the cached block was made for.
        recorded: u64,
    },
    /// The origin refused or failed; its kind says how (not found, version mismatch,
    /// throttled, ...).
    #[error("origin: {0}")]
    Origin(#[from] talon_protocols::Error),
    /// A local disk operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The cause.
        source: io::Error,
    },
    /// A vocabulary error from talon-core (bad block geometry, bad names).
    #[error("{0}")]
    Core(#[from] talon_core::Error),
    /// The worker is shutting down or overloaded; try another worker.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A fill shared by several requests failed; this is its error.
    #[error("{0}")]
    Shared(Arc<WorkerError>),
}

impl WorkerError {
    /// An I/O error with context.
    pub fn io(context: &'static str, source: io::Error) -> WorkerError {
        WorkerError::Io { context, source }
    }

    /// Whether this is the process (or the system) running out of open files.
    pub fn is_out_of_descriptors(&self) -> bool {
        matches!(self, WorkerError::Io { source, .. }
            if matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)))
    }

    /// Whether this is an I/O error that timed out (a peer too slow).
    pub fn is_timeout(&self) -> bool {
        matches!(self, WorkerError::Io { source, .. } if source.kind() == io::ErrorKind::TimedOut)
    }

    /// The error frame code a client receives for this error.
    pub fn frame_code(&self) -> ErrorCode {
        match self {
            WorkerError::InvalidRequest(_) | WorkerError::ObjectSizeConflict { .. } => {
                ErrorCode::InvalidRequest
            }
            WorkerError::RangeNotSatisfiable(_) => ErrorCode::RangeNotSatisfiable,
            WorkerError::Origin(e) => match e.kind().frame_code() {
                // The origin's own internal failures are origin errors to the client.
                ErrorCode::Internal => ErrorCode::OriginError,
                code => code,
            },
            WorkerError::Io { .. } => ErrorCode::Internal,
            WorkerError::Core(e) => e.code(),
            WorkerError::Unavailable(_) => ErrorCode::Unavailable,
            WorkerError::Shared(inner) => inner.frame_code(),
        }
    }

    /// Whether the origin answered that it is throttling (SlowDown, ServerBusy).
    pub fn is_origin_throttling(&self) -> bool {
        match self {
            WorkerError::Origin(e) => e.kind() == talon_protocols::ErrorKind::SlowDown,
            WorkerError::Shared(inner) => inner.is_origin_throttling(),
            _ => false,
        }
    }

    /// Whether the origin failed in a way worth retrying (throttling, 5xx, resets,
    /// cut bodies).
    pub fn is_retryable_origin_failure(&self) -> bool {
        match self {
            WorkerError::Origin(e) => e.kind().is_retryable_read(),
            WorkerError::Shared(inner) => inner.is_retryable_origin_failure(),
            _ => false,
        }
    }
}

/// Shorthand for the worker's results.
pub type Result<T, E = WorkerError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use talon_protocols::ErrorKind;

    #[test]
    fn origin_kinds_map_to_frame_codes() {
        let origin = |k| WorkerError::Origin(talon_protocols::Error::new(k, "x"));
        assert_eq!(
            origin(ErrorKind::NoSuchKey).frame_code(),
            ErrorCode::NotFound
        );
        assert_eq!(
            origin(ErrorKind::PreconditionFailed).frame_code(),
            ErrorCode::VersionMismatch
        );
        assert_eq!(
            origin(ErrorKind::SlowDown).frame_code(),
            ErrorCode::OriginThrottled
        );
        assert_eq!(
            origin(ErrorKind::ServiceUnavailable).frame_code(),
            ErrorCode::Unavailable
        );
        assert_eq!(
            origin(ErrorKind::InternalError).frame_code(),
            ErrorCode::OriginError
        );
        assert_eq!(
            origin(ErrorKind::IncompleteBody).frame_code(),
            ErrorCode::OriginError
        );
        assert!(origin(ErrorKind::SlowDown).is_retryable_origin_failure());
        assert!(origin(ErrorKind::IncompleteBody).is_retryable_origin_failure());
        assert!(!origin(ErrorKind::NoSuchKey).is_retryable_origin_failure());
        let shared = WorkerError::Shared(Arc::new(origin(ErrorKind::NoSuchKey)));
        assert_eq!(shared.frame_code(), ErrorCode::NotFound);
    }
}
