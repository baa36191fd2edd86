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

/// The whole HTTP/1.1 answer a front's listener writes to a connection over its
/// connection cap, without reading the request
/// ([`ListenerLimits::over_capacity_answer`](talon_listener::ListenerLimits::over_capacity_answer)):
/// the protocol's throttling error — 503 SlowDown (S3) or ServerBusy (Azure) — with
/// `Retry-After`, a request id and `Connection: close`, so that the client's SDK backs
/// off and retries instead of seeing a reset connection.
pub fn over_capacity_answer(front: talon_protocols::answer::Front) -> std::sync::Arc<[u8]> {
    use talon_protocols::answer::{ErrorContext, Front, error_answer};
    let request_id = front.new_request_id();
    let error = talon_protocols::Error::new(
        talon_protocols::ErrorKind::SlowDown,
        "the gateway is at its connection limit",
    );
    let resp = error_answer(
        front,
        Failure::from(error),
        ErrorContext {
            is_head: false,
            // Its body is never read: the answer says the connection closes.
            has_body: true,
            request_id: &request_id,
            resource: "/",
            subject: Default::default(),
        },
    );
    let status = resp.status();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
    .into_bytes();
    let id_header = match front {
        Front::S3 => "x-amz-request-id",
        Front::Azure => "x-ms-request-id",
    };
    let body = resp.body();
    let length = body.len().to_string();
    let extra = [
        (id_header, request_id.as_bytes()),
        ("content-length", length.as_bytes()),
    ];
    let headers = resp
        .headers()
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .chain(extra);
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out.into()
}

#[cfg(test)]
mod over_capacity_tests {
    use super::*;
    use talon_protocols::answer::Front;

    #[test]
    fn the_answer_over_the_cap_is_each_protocols_slow_down_and_closes() {
        for (front, code) in [(Front::S3, "SlowDown"), (Front::Azure, "ServerBusy")] {
            let raw = over_capacity_answer(front);
            let text = String::from_utf8_lossy(&raw);
            let (head, body) = text.split_once("\r\n\r\n").unwrap_or_default();
            assert!(
                head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
                "{head}"
            );
            let head = head.to_ascii_lowercase();
            for line in ["retry-after: 1", "connection: close"] {
                assert!(head.contains(line), "{front:?}: no {line} in {head}");
            }
            assert!(
                head.contains(&format!("content-length: {}", body.len())),
                "{head}"
            );
            assert!(body.contains(&format!("<Code>{code}</Code>")), "{body}");
        }
    }
}
