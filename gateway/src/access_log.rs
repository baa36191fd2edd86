//! The access log: one JSON object per line for every request a front answered, to a
//! file (appended) or standard output, so that an operator can see who asked for what
//! and how it was served without metrics (the first-hour review's F6).
//!
//! The fields, in this order (a field the request never reached is `null`):
//!
//! | field | what |
//! |---|---|
//! | `time` | when the answer started, UTC, RFC 3339 with milliseconds |
//! | `request_id` | the id the client sees (`x-amz-request-id`, `x-ms-request-id`) |
//! | `protocol` | `s3` or `azure` |
//! | `operation` | `GetObject`, `Get Blob`, ..., `Unknown` when refused before classified |
//! | `identity` | the S3 access key id, `sharedkey:ACCOUNT` or `sas:ACCOUNT`; `null`: anonymous or not authenticated |
//! | `method` | the HTTP method |
//! | `bucket`, `key` | the bucket (container) and key (blob), decoded |
//! | `range` | the `Range` (or `x-ms-range`) header as sent |
//! | `status` | the HTTP status |
//! | `bytes` | the answer's `Content-Length`, when it has one |
//! | `outcome` | `hit`, `fill`, `fallback`, `bypass`, `origin` or `failed`, as the metrics count it |
//! | `ms` | milliseconds from the request's arrival to the answer's start |
//!
//! Off unless asked for (`--access-log`): without it the servers keep no record and
//! the hit path does no extra work.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::Serialize;

use crate::error::GatewayError;

/// Where access log lines go.
pub struct AccessLog {
    out: Mutex<std::io::LineWriter<Box<dyn Write + Send>>>,
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLog").finish_non_exhaustive()
    }
}

/// One line of the access log.
#[derive(Debug, Serialize)]
pub struct AccessLine<'a> {
    /// When the answer started (RFC 3339, UTC, milliseconds).
    pub time: String,
    /// The request id the client sees.
    pub request_id: Option<&'a str>,
    /// `s3` or `azure`.
    pub protocol: &'a str,
    /// The operation's name.
    pub operation: &'a str,
    /// The caller.
    pub identity: Option<&'a str>,
    /// The HTTP method.
    pub method: &'a str,
    /// The bucket (container).
    pub bucket: Option<&'a str>,
    /// The key (blob name).
    pub key: Option<&'a str>,
    /// The range header as sent.
    pub range: Option<&'a str>,
    /// The HTTP status.
    pub status: u16,
    /// The answer's length, when known.
    pub bytes: Option<u64>,
    /// How it was served.
    pub outcome: &'a str,
    /// Milliseconds to the answer's start.
    pub ms: f64,
}

impl AccessLog {
    /// The log at `target`: `-` for standard output, otherwise a file, created if
    /// missing and appended to.
    ///
    /// # Errors
    /// [`GatewayError::Config`] when the file cannot be opened.
    pub fn open(target: &Path) -> Result<AccessLog, GatewayError> {
        let out: Box<dyn Write + Send> = if target == Path::new("-") {
            Box::new(std::io::stdout())
        } else {
            Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(target)
                    .map_err(|e| {
                        GatewayError::Config(format!("--access-log {}: {e}", target.display()))
                    })?,
            )
        };
        Ok(AccessLog {
            out: Mutex::new(std::io::LineWriter::new(out)),
        })
    }

    /// Writes `line`. A write that fails is logged, never the request's failure.
    pub fn write(&self, line: &AccessLine<'_>) {
        let Ok(mut text) = serde_json::to_vec(line) else {
            return;
        };
        text.push(b'\n');
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = out.write_all(&text) {
            tracing::warn!(error = %e, "writing the access log failed");
        }
    }
}
