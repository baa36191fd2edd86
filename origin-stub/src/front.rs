//! What both protocol fronts share: the stub's state, failures and how they become
//! answers, authentication plumbing, fault handling, and small response helpers.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::{HeaderMap, Response, StatusCode};
pub use talon_protocols::answer::{Failure, answer, header, request_has_body, set_header};
use talon_protocols::azure::auth::AzureIdentity;
use talon_protocols::azure::request::AzureAddressing;
use talon_protocols::content_headers::{CONTENT_HEADERS, stored_value};
use talon_protocols::s3::auth::S3Identities;
use talon_protocols::s3::request::S3Addressing;
use talon_protocols::{Error, ErrorKind, Result};

use talon_protocols::range::ByteRange;

use crate::body::{self, Delivery, ResponseBody};
use crate::faults::{FaultKind, Faults};
use crate::metrics::Metrics;
use crate::metrics::Protocol;
use crate::store::ObjectBody;
use crate::store::ObjectStore;

/// The content headers of a write: [`CONTENT_HEADERS`] read from `prefix<name>`, as
/// [`stored_value`] keeps them.
pub fn content_headers(headers: &HeaderMap, prefix: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for name in CONTENT_HEADERS {
        // UTF-8 is kept (a Content-Disposition file name), as S3 and Azure keep it.
        let Some(value) = headers
            .get(format!("{prefix}{name}"))
            .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        else {
            continue;
        };
        if let Some(value) = stored_value(name, value) {
            out.insert(name.to_owned(), value);
        }
    }
    out
}

/// Sets an object's stored content headers on a read's answer.
pub fn set_content_headers(h: &mut HeaderMap, stored: &BTreeMap<String, String>) {
    for (name, value) in stored {
        set_header(h, name, value);
    }
}

/// Total request header bytes accepted (S3 documents 8 KiB).
pub const MAX_HEADER_BYTES: usize = 8 * 1024;
/// User metadata bytes accepted (S3 documents 2 KiB).
pub const MAX_USER_METADATA_BYTES: usize = 2 * 1024;
/// Largest single upload accepted (S3's limit for PutObject and parts).
pub const MAX_UPLOAD_BYTES: u64 = 5 << 30;
/// Largest XML request body accepted.
pub const MAX_XML_BYTES: usize = 2 << 20;

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

/// A handler's result.
pub type Handled = std::result::Result<Response<ResponseBody>, Outcome>;

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

/// Reads user metadata headers with `prefix` (`x-amz-meta-` or `x-ms-meta-`).
///
/// # Errors
/// [`ErrorKind::MetadataTooLarge`] past 2 KiB.
pub fn user_metadata(headers: &HeaderMap, prefix: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut total = 0;
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix(prefix) {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            total += key.len() + value.len();
            out.insert(key.to_owned(), value);
        }
    }
    if total > MAX_USER_METADATA_BYTES {
        return Err(Error::new(
            ErrorKind::MetadataTooLarge,
            format!(
                "Your metadata headers exceed the maximum allowed metadata size of {MAX_USER_METADATA_BYTES} bytes"
            ),
        ));
    }
    Ok(out)
}

/// Receives an upload's body into a fresh staging file, verified against `claims`:
/// the file to commit and what the body turned out to be.
///
/// # Errors
/// As [`body::receive`]; staging errors.
pub async fn receive_upload(
    state: &StubState,
    body: hyper::body::Incoming,
    claims: talon_protocols::upload::UploadClaims,
    protocol: Protocol,
) -> Result<(crate::store::StagedFile, body::Received)> {
    let store = state.store.clone();
    let mut staged = blocking(move || store.stage()).await?;
    let received = body::receive(body, &mut staged, claims, &state.metrics, protocol).await?;
    Ok((staged, received))
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

/// How a read is to be answered.
#[derive(Debug, Clone, Copy)]
pub struct ReadAnswer<'a> {
    /// The stub (for the live faults and the byte counters).
    pub state: &'a StubState,
    /// Which front answers.
    pub protocol: Protocol,
    /// GET (true) or HEAD (false).
    pub with_body: bool,
    /// Whether the truncation fault hit this request.
    pub truncate: bool,
}

/// The answer to a read of an object of `size` bytes: 200 with the whole object, or 206
/// with `range`; the body streamed under the live faults (bandwidth cap, truncation
/// halfway); `Content-Length` and `Content-Range`. Each front adds its own headers.
pub fn object_answer(
    read: ReadAnswer<'_>,
    object: ObjectBody,
    size: u64,
    range: Option<ByteRange>,
) -> Response<ResponseBody> {
    let (status, start, end) = match range {
        Some(r) => (StatusCode::PARTIAL_CONTENT, r.start, r.end),
        None => (StatusCode::OK, 0, size),
    };
    let body = if read.with_body && end > start {
        let delivery = Delivery {
            bandwidth: read.state.faults.get().bandwidth_bytes_per_sec,
            truncate_after: read.truncate.then_some((end - start) / 2),
            protocol: read.protocol,
        };
        body::object_stream(object, start, end, delivery, read.state.metrics.clone())
    } else {
        body::empty()
    };
    let mut resp = answer(status, body);
    set_header(
        resp.headers_mut(),
        "content-length",
        &(end - start).to_string(),
    );
    if let Some(r) = range {
        set_header(resp.headers_mut(), "content-range", &r.content_range(size));
    }
    resp
}

/// The raw path and query of a request URI.
pub fn path_and_query(uri: &http::Uri) -> (String, String) {
    (uri.path().to_owned(), uri.query().unwrap_or("").to_owned())
}
