//! Building answers: failures with their extra headers, small response helpers, and
//! relaying an origin's answer to a client.

use axum::body::Body;
use axum::response::Response;
use futures_util::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use talon_protocols::Error;

use crate::metrics::Outcome;

/// A failed request: the error, and headers its answer carries (`Content-Range` on a
/// 416, `ETag` on a 304).
#[derive(Debug)]
pub struct Failure {
    /// The error.
    pub error: Error,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
}

/// Runs a request's handler within `deadline`, the time to the start of its response.
///
/// A handler that streams an upload body (`streams_upload`) is not bounded in total: a
/// large upload on a slow link may take longer than any fixed deadline (SEC-14). Its
/// body is bounded by the upload idle timeout instead, and the origin's answer by the
/// origin client's own timeouts.
pub async fn within_deadline(
    deadline: std::time::Duration,
    streams_upload: bool,
    handler: impl std::future::Future<Output = (Outcome, Result<Response, Failure>)>,
) -> (Outcome, Result<Response, Failure>) {
    if streams_upload {
        return handler.await;
    }
    match tokio::time::timeout(deadline, handler).await {
        Ok(r) => r,
        Err(_) => (
            Outcome::Failed,
            Err(Error::new(
                talon_protocols::ErrorKind::Timeout,
                "Your request took too long to answer; try again.",
            )
            .into()),
        ),
    }
}

impl Failure {
    /// A failure with extra headers.
    pub fn with_headers(error: Error, headers: Vec<(&'static str, String)>) -> Failure {
        Failure { error, headers }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure {
            error,
            headers: Vec::new(),
        }
    }
}

/// Sets a header, skipping values that are not valid header text.
pub fn set_header(headers: &mut HeaderMap, name: &str, value: &str) {
    // from_bytes, not from_str: a UTF-8 value (a Content-Disposition file name) is valid
    // header text; control characters are still refused.
    if let (Ok(n), Ok(v)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_bytes(value.as_bytes()),
    ) {
        headers.insert(n, v);
    }
}

/// A response with a status and body.
pub fn answer(status: StatusCode, body: Body) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp
}

/// A header's text value (visible ASCII only).
pub fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A header's value as UTF-8 text, for values that are passed on rather than parsed
/// (a Content-Disposition may carry a UTF-8 file name).
pub fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .map(str::to_owned)
}

/// Headers of an origin answer that a client may see; everything else (its request ids,
/// its server, connection management) is the gateway's own.
const RELAYED_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "content-range",
    "content-md5",
    "etag",
    "last-modified",
    "location",
    "x-ms-error-code",
    "x-ms-blob-type",
    "x-ms-request-server-encrypted",
    "x-ms-blob-content-md5",
];

fn relayed(name: &str) -> bool {
    RELAYED_HEADERS.contains(&name)
        || (name.starts_with("x-amz-") && name != "x-amz-request-id" && name != "x-amz-id-2")
        || (name.starts_with("x-ms-meta-"))
}

/// Relays an origin's answer (status, the headers a client may see, the body streamed).
pub fn relay(resp: reqwest::Response) -> Response {
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut headers = HeaderMap::new();
    for (name, value) in resp.headers() {
        if relayed(name.as_str()) {
            headers.append(name.clone(), value.clone());
        }
    }
    let body = Body::from_stream(
        resp.bytes_stream()
            .map(|r| r.map_err(std::io::Error::other)),
    );
    let mut out = answer(status, body);
    *out.headers_mut() = headers;
    out
}
