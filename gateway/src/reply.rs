//! Relaying an origin's answer to a client, for the operations the gateway passes on
//! as they are, and the answer of a front that is not configured. Failures, error
//! answers and the header helpers are the protocols' ([`talon_protocols::answer`]),
//! shared with the origin stub.

use axum::response::Response;
use futures_util::StreamExt;
use http::{HeaderMap, StatusCode};
pub use talon_protocols::answer::{Failure, answer, header, header_text, set_header};
use talon_protocols::server::{AnswerBody, stream_body};

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
pub fn relay(resp: reqwest::Response) -> Response<AnswerBody> {
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut headers = HeaderMap::new();
    for (name, value) in resp.headers() {
        if relayed(name.as_str()) {
            headers.append(name.clone(), value.clone());
        }
    }
    let body = stream_body(
        resp.bytes_stream()
            .map(|r| r.map_err(std::io::Error::other)),
    );
    let mut out = answer(status, body);
    *out.headers_mut() = headers;
    out
}

/// The answer on a listener whose front is not configured: `NotImplemented` in that
/// protocol's status, stamped like every answer.
pub fn no_front(front: talon_protocols::answer::Front) -> Response {
    let status = match front {
        talon_protocols::answer::Front::S3 => {
            talon_protocols::ErrorKind::NotImplemented.s3_status()
        }
        talon_protocols::answer::Front::Azure => {
            talon_protocols::ErrorKind::NotImplemented.azure_status()
        }
    };
    let mut resp = answer(status, axum::body::Body::empty());
    front.stamp(
        resp.headers_mut(),
        &front.new_request_id(),
        "",
        "talon-gateway",
    );
    resp
}
