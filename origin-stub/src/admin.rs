//! The admin listener: `/metrics`, `/healthz`, `/readyz`, and `/admin/faults` to read and
//! change the injected faults while the stub runs.

use std::sync::Arc;

use http::{Method, Request, StatusCode};
use hyper::body::Incoming;

use crate::body;
use crate::faults::FaultConfig;
use crate::front::StubState;
use crate::server::HandlerResult;
use talon_protocols::answer::{answer, set_header};

/// Largest fault-settings document accepted.
const MAX_BODY: usize = 64 * 1024;

/// Handles one admin request. With a `token`, changing faults needs it as a bearer
/// token (SEC-19: otherwise any local user degrades the origin of `talon up`).
pub async fn handle(
    state: Arc<StubState>,
    token: Option<String>,
    req: Request<Incoming>,
) -> HandlerResult {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let authorized = token.as_deref().is_none_or(|t| {
        let sent = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        sent.is_some_and(|s| {
            talon_protocols::s3::sigv4::constant_time_eq(s.as_bytes(), t.as_bytes())
        })
    });
    let resp = match (method, path.as_str()) {
        (Method::PUT, "/admin/faults") if !authorized => json(
            StatusCode::UNAUTHORIZED,
            &serde_json::json!({ "error": "changing faults needs the admin token" }),
        ),
        (Method::GET, "/metrics") => text(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            state.metrics.render(),
        ),
        (Method::GET, "/healthz") => text(StatusCode::OK, "text/plain", "ok\n".into()),
        (Method::GET, "/readyz") => text(StatusCode::OK, "text/plain", "ready\n".into()),
        (Method::GET, "/admin/faults") => json(StatusCode::OK, &state.faults.get()),
        (Method::PUT, "/admin/faults") => match body::read_small(req.into_body(), MAX_BODY).await {
            Ok(bytes) => match serde_json::from_slice::<FaultConfig>(&bytes)
                .map_err(|e| e.to_string())
                .and_then(|c| {
                    state.faults.set(c.clone())?;
                    Ok(c)
                }) {
                Ok(config) => {
                    tracing::info!(
                        latency_ms = config.latency_ms,
                        bandwidth_bytes_per_sec = config.bandwidth_bytes_per_sec.unwrap_or(0),
                        error_rate = config.error_rate,
                        throttle_rps = config.throttle_rps.unwrap_or(0),
                        "faults changed"
                    );
                    json(StatusCode::OK, &config)
                }
                Err(e) => json(StatusCode::BAD_REQUEST, &serde_json::json!({ "error": e })),
            },
            Err(e) => json(
                StatusCode::BAD_REQUEST,
                &serde_json::json!({ "error": e.message() }),
            ),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: /metrics, /healthz, /readyz, /admin/faults\n".into(),
        ),
    };
    Ok(resp)
}

fn text(
    status: StatusCode,
    content_type: &str,
    body: String,
) -> http::Response<body::ResponseBody> {
    let mut resp = answer(status, body::full(body));
    set_header(resp.headers_mut(), "content-type", content_type);
    resp
}

fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> http::Response<body::ResponseBody> {
    let body = serde_json::to_string_pretty(value).unwrap_or_else(|_| "{}".into());
    text(status, "application/json", body)
}
