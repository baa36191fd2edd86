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
use crate::metrics::Outcome;

/// What an access log line needs of a request that the server does not keep: taken by
/// the front before the request is handed over, only when the access log is on.
#[derive(Debug)]
pub struct Asked {
    method: http::Method,
    range: Option<String>,
}

impl Asked {
    /// The method and the range header `range_header` of `req`.
    pub fn of<B>(req: &http::Request<B>, range_header: &str) -> Asked {
        Asked {
            method: req.method().clone(),
            range: req
                .headers()
                .get(range_header)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        }
    }
}

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

    /// Writes the line of a request `protocol`'s front answered (`handled`, served as
    /// `outcome`, arrived at `started`).
    pub fn record(
        &self,
        protocol: &str,
        handled: &talon_protocols::server::Handled,
        asked: &Asked,
        outcome: Outcome,
        started: std::time::Instant,
    ) {
        let record = handled.record.as_ref();
        fn text(v: Option<&String>) -> Option<&str> {
            v.map(String::as_str)
        }
        self.write(&AccessLine {
            time: talon_protocols::dates::format_iso8601_millis(std::time::SystemTime::now()),
            request_id: text(record.map(|r| &r.request_id)),
            protocol,
            operation: handled.operation,
            identity: text(record.and_then(|r| r.identity.as_ref())),
            method: asked.method.as_str(),
            bucket: text(record.and_then(|r| r.bucket.as_ref())),
            key: text(record.and_then(|r| r.key.as_ref())),
            range: asked.range.as_deref(),
            status: handled.response.status().as_u16(),
            bytes: handled
                .response
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok()),
            outcome: outcome.name(),
            ms: started.elapsed().as_secs_f64() * 1000.0,
        });
    }

    /// Writes `line`. A write that fails is logged, never the request's failure.
    fn write(&self, line: &AccessLine<'_>) {
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
