//! A read-only status page for people without Grafana: the cluster's totals and every
//! worker (address, zone, state, plane, last heartbeat, bytes cached, hit ratio, what
//! the readers' circuits say), the warm jobs, and the rules every part applies (the
//! block and page size, pinned prefixes, per-prefix freshness, invalidations in force),
//! refreshed every 5 s in the browser.
//!
//! It is served on its own listener (`--status-listen`, off by default) with no
//! authentication, because a browser cannot sign requests with the cluster secret: it
//! shows worker addresses, so bind it where only operators reach it (loopback, an admin
//! network). It changes nothing. `/` is the page (`assets/status.html`, rendered by its
//! own script from `/status.json`); `/status.json` is the data.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::server::AppState;

/// The page.
const PAGE: &str = include_str!("../assets/status.html");

/// The status listener's routes.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/status.json", get(status))
        .with_state(state)
}

async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            // The page runs only its own inline script and fetches only its own origin.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
            ),
        ],
        PAGE,
    )
}

async fn status(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let snap = state.membership.snapshot(Instant::now());
    // The epoch as a string, here and in the cluster's summary: a JSON number past 2^53
    // loses digits in a browser (the API keeps its number for the Rust clients).
    let mut cluster = serde_json::to_value(snap.cluster()).unwrap_or_default();
    if let Some(epoch) = cluster.get_mut("epoch") {
        *epoch = serde_json::Value::String(snap.epoch.to_string());
    }
    (
        [(header::CACHE_CONTROL, "no-store")],
        Json(serde_json::json!({
            "epoch": snap.epoch.to_string(),
            "cluster": cluster,
            "members": snap.members,
            "warm_jobs": state.warm.list(),
            "geometry": state.config.geometry,
            "pins": state.pins.get().prefixes,
            "freshness": state.freshness.rules(),
            "invalidations": state.invalidations.current(),
        })),
    )
}
