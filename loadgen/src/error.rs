//! The crate's error type.

/// Why a load run could not start or could not be measured.
///
/// Failures *during* the measured run (error frames, lost connections, wrong
/// lengths) are not errors of this type: they are counted in the
/// [`Report`](crate::Report), which then marks the run as failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A flag or a combination of flags makes no sense.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The target could not be reached.
    #[error("cannot connect to {addr}: {error}")]
    Connect {
        /// The address dialled.
        addr: String,
        /// The cause (shown in the message, so not also chained as a source).
        error: std::io::Error,
    },
    /// Connecting took longer than the connect timeout.
    #[error("connecting to {addr} timed out after {secs:.1} s")]
    ConnectTimeout {
        /// The address dialled.
        addr: String,
        /// The timeout.
        secs: f64,
    },
    /// A socket failed while setting the run up (stat, prefetch).
    #[error("{what}: {error}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause (shown in the message, so not also chained as a source).
        error: std::io::Error,
    },
    /// The server answered the set-up requests with something other than the
    /// protocol allows, or with an error. The message is the server's own,
    /// verbatim where it sent one.
    #[error("{0}")]
    Server(String),
    /// Reading a process's figures from `/proc` failed.
    #[error("reading /proc for pid {pid}: {message}")]
    Proc {
        /// The process.
        pid: u32,
        /// What went wrong.
        message: String,
    },
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, LoadError>;
