//! Relaying an origin's answer to a client, for the operations the gateway passes on
//! as they are, and the answer of a front that is not configured. Failures, error
//! answers and the header helpers are the protocols' ([`talon_protocols::answer`]),
//! shared with the origin stub.

use axum::response::Response;
use futures_util::StreamExt;
use http::{HeaderMap, StatusCode};
use talon_protocols::answer::{ProtocolFront as _, answer};
use talon_protocols::server::{AnswerBody, stream_body};

/// Relays an origin's answer (status, the headers a client may see, the body streamed).
pub fn relay(resp: reqwest::Response) -> Response<AnswerBody> {
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut headers = HeaderMap::new();
    for (name, value) in resp.headers() {
        if talon_protocols::relay::client_may_see(name.as_str()) {
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
pub fn no_front(front: talon_core::Backend) -> Response {
    let status = match front {
        talon_core::Backend::S3 => talon_protocols::ErrorKind::NotImplemented.s3_status(),
        talon_core::Backend::Azure => talon_protocols::ErrorKind::NotImplemented.azure_status(),
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
