//! The error type of the gateway benches' harness: starting real Talon
//! processes, waiting for them, and talking to their control endpoints.
//!
//! Failures *during* a measured run (a wrong status, a short body, a bad
//! checksum, a lost connection) are not errors of this type: they are
//! counted per request and reported verbatim, and the binary then fails the
//! run.

use std::path::PathBuf;
use std::time::Duration;

/// Why the harness could not set up or drive a deployment.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A flag or a combination of flags makes no sense.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A binary the bench runs is not where it was looked for.
    #[error(
        "{name} is not built (looked for {path}); build every binary first with \
         `cargo build --release --bins`"
    )]
    MissingBinary {
        /// The binary's name.
        name: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A process could not be started.
    #[error("cannot start {name}: {source}")]
    Spawn {
        /// The process's name in the harness.
        name: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A process exited while it was still needed. `log` is the end of its
    /// log file.
    #[error("{name} exited ({status}) {when}; the end of its log:\n{log}")]
    Exited {
        /// The process's name in the harness.
        name: String,
        /// Its exit status.
        status: String,
        /// When it was noticed (e.g. "before it was ready").
        when: String,
        /// The last lines it logged.
        log: String,
    },
    /// A condition did not become true in time.
    #[error("timed out after {:.1} s waiting for {what}", .after.as_secs_f64())]
    Timeout {
        /// What was waited for.
        what: String,
        /// How long.
        after: Duration,
    },
    /// A local file or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A control request (readiness, membership, fault settings) got an
    /// answer the harness cannot use; the message quotes it.
    #[error("{0}")]
    Control(String),
}

impl HarnessError {
    /// An [`HarnessError::Io`] for `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}

/// Results of the harness.
pub type HarnessResult<T> = std::result::Result<T, HarnessError>;
