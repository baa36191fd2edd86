//! The admin HTTP API (axum): routes, handlers, and how errors become JSON
//! answers. The routes and bodies are described in [`talon_coordinator_client::api`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::de::DeserializeOwned;

use crate::CoordinatorConfig;
use crate::membership::Membership;
use crate::metrics::{self, Metrics};
use crate::shared_membership::SharedMembership;
use talon_coordinator_client::api::{
    CircuitsReport, CircuitsResponse, ClusterGeometry, DrainRequest, DrainResponse, ErrorBody,
    HeartbeatRequest, HeartbeatResponse, RegisterRequest, RegisterResponse,
};
use talon_coordinator_client::error::CoordinatorError;

/// What every handler shares.
#[derive(Debug)]
pub(crate) struct AppState {
    pub(crate) membership: Arc<Membership>,
    /// Membership in etcd, mirrored into `membership` (`None`: memory only).
    pub(crate) shared: Option<Arc<SharedMembership>>,
    /// Warm jobs and the tasks they hand to workers.
    pub(crate) warm: Arc<crate::warm::WarmJobs>,
    /// The cluster's pinned prefixes.
    pub(crate) pins: Arc<crate::pins::ClusterPins>,
    /// The cluster's invalidations.
    pub(crate) invalidations: Arc<crate::invalidations::ClusterInvalidations>,
    /// The cluster's per-prefix freshness.
    pub(crate) freshness: Arc<crate::freshness::ClusterFreshness>,
    /// Warm jobs in etcd, mirrored into `warm` (`None`: memory only).
    pub(crate) shared_warm: Option<Arc<crate::shared_warm::SharedWarmJobs>>,
    pub(crate) metrics: Metrics,
    pub(crate) config: CoordinatorConfig,
    /// True while serving; false before start and once shutdown began.
    pub(crate) ready: AtomicBool,
}

/// The whole admin API.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/workers/register", post(register))
        .route("/v1/workers/{id}/heartbeat", post(heartbeat))
        .route("/v1/workers/{id}/drain", post(drain))
        .route("/v1/members", get(members))
        .route("/v1/members/{id}", get(member))
        .route("/v1/cluster", get(cluster))
        .route("/v1/readers/{id}/circuits", post(circuits))
        .route("/v1/warm", post(warm_start).get(warm_list))
        .route("/v1/pins", get(pins_get).put(pins_set))
        .route("/v1/invalidations", get(invalidations_get).post(invalidate))
        .route("/v1/freshness", get(freshness_get).put(freshness_set))
        .route("/v1/warm/{id}", get(warm_view).delete(warm_cancel))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.config.cluster_secret.clone(),
            crate::auth::require_signature,
        ))
        .with_state(state)
}

/// A failed API request, answered with the error's status and a JSON `{"error": ...}`.
pub(crate) struct ApiError(pub(crate) CoordinatorError);

impl From<CoordinatorError> for ApiError {
    fn from(e: CoordinatorError) -> ApiError {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.status_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = ErrorBody {
            error: self.0.to_string(),
        };
        (status, Json(body)).into_response()
    }
}

/// Parses a JSON body; an empty body is `{}`. Errors map through `wrap`.
fn parse_body<T: DeserializeOwned>(
    body: &[u8],
    wrap: fn(String) -> CoordinatorError,
) -> Result<T, CoordinatorError> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body)
        .map_err(|e| wrap(format!("body is not valid JSON for this request: {e}")))
}

async fn register(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Json<RegisterResponse>, ApiError> {
    let req: RegisterRequest = match parse_body(&body, CoordinatorError::InvalidRegistration) {
        Ok(req) => req,
        Err(e) => {
            state.membership.record_rejected_registration();
            return Err(e.into());
        }
    };
    // A worker that says no page size (one from before the field) is not checked.
    if req.page_size != 0
        && let Err(e) = ClusterGeometry::page_size_for(state.config.geometry, Some(req.page_size))
    {
        state.membership.record_rejected_registration();
        return Err(e.into());
    }
    let epoch = match &state.shared {
        Some(shared) => shared.register(&req, Instant::now()).await?,
        None => state.membership.register(&req, Instant::now())?,
    };
    Ok(Json(RegisterResponse {
        epoch,
        heartbeat_interval_ms: millis(state.config.heartbeat_interval),
        expiry_ms: millis(state.config.expiry),
    }))
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

async fn heartbeat(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<HeartbeatResponse>, ApiError> {
    let stats: HeartbeatRequest = parse_body(&body, CoordinatorError::InvalidRequest)?;
    let mut answer = match &state.shared {
        Some(shared) => shared.heartbeat(&id, &stats, Instant::now()).await?,
        None => state.membership.heartbeat(&id, &stats, Instant::now())?,
    };
    match &state.shared_warm {
        Some(shared) => shared.complete(&id, &stats.warm_done).await,
        None => state.warm.complete(&id, &stats.warm_done),
    }
    answer.pins = state.pins.prefixes();
    answer.invalidations = state.invalidations.current();
    answer.freshness = state.freshness.rules();
    // Placement is built only while a job runs: a heartbeat is otherwise no costlier.
    if answer.state == talon_coordinator_client::api::MemberState::Live && state.warm.any_running()
    {
        let placement = state.membership.snapshot(Instant::now()).placement();
        answer.warm = state.warm.take(&id, &placement);
    }
    Ok(Json(answer))
}

async fn drain(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    signer: Option<axum::Extension<crate::auth::Signer>>,
    body: Bytes,
) -> Result<Json<DrainResponse>, ApiError> {
    let req: DrainRequest = parse_body(&body, CoordinatorError::InvalidRequest)?;
    // An admin drains any worker; a worker only itself (its instance must match).
    let instance = match signer {
        Some(axum::Extension(crate::auth::Signer(talon_core::cluster_auth::Role::Admin))) => None,
        _ => Some(req.instance.as_str()),
    };
    let epoch = match &state.shared {
        Some(shared) => shared.drain(&id, instance, Instant::now()).await?,
        None => state.membership.drain(&id, instance)?,
    };
    Ok(Json(DrainResponse { epoch }))
}

async fn circuits(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<CircuitsResponse>, ApiError> {
    let report: CircuitsReport = parse_body(&body, CoordinatorError::InvalidRequest)?;
    let epoch = state
        .membership
        .report_circuits(&id, report, Instant::now())?;
    Ok(Json(CircuitsResponse { epoch }))
}

async fn warm_start(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Json<talon_coordinator_client::api::WarmJobView>, ApiError> {
    let req: talon_coordinator_client::api::WarmRequest =
        parse_body(&body, CoordinatorError::InvalidRequest)?;
    if req.source.len() > talon_coordinator_client::api::MAX_WARM_SOURCE_LEN {
        return Err(CoordinatorError::InvalidRequest("warm source too long".into()).into());
    }
    let Some(origins) = &state.config.origins else {
        return Err(CoordinatorError::InvalidRequest(
            "this coordinator has no origin to list a warm source at (start it with --origin)"
                .into(),
        )
        .into());
    };
    let objects = if req.source.is_empty() {
        if req.objects.is_empty()
            || req.objects.len() > talon_coordinator_client::api::MAX_WARM_OBJECTS
        {
            return Err(CoordinatorError::InvalidRequest(format!(
                "name a source or between 1 and {} objects",
                talon_coordinator_client::api::MAX_WARM_OBJECTS
            ))
            .into());
        }
        crate::warm::head_objects(origins, &req.objects).await?
    } else {
        crate::warm::list_source(origins, &req.source).await?
    };
    let source = if req.source.is_empty() {
        format!("{} objects", req.objects.len())
    } else {
        req.source.clone()
    };
    let plan = crate::warm::WarmPlan::new(&source, objects, req.block_size, req.budget_bytes)
        .map_err(CoordinatorError::InvalidRequest)?;
    let view = match &state.shared_warm {
        Some(shared) => shared.start(&plan).await?,
        None => {
            let placement = state.membership.snapshot(Instant::now()).placement();
            state
                .warm
                .start(&plan, &placement)
                .map_err(CoordinatorError::InvalidRequest)?
        }
    };
    Ok(Json(view))
}

async fn pins_get(
    State(state): State<Arc<AppState>>,
) -> Json<talon_coordinator_client::api::PinsView> {
    Json(state.pins.get())
}

async fn pins_set(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Json<talon_coordinator_client::api::PinsView>, ApiError> {
    let req: talon_coordinator_client::api::PinsRequest =
        parse_body(&body, CoordinatorError::InvalidRequest)?;
    if let Some(origins) = &state.config.origins {
        let current = state.pins.get().prefixes;
        let added: Vec<&str> = req
            .prefixes
            .iter()
            .filter(|p| !current.contains(p))
            .map(String::as_str)
            .collect();
        crate::pins::check_pinned_buckets(origins, &added).await?;
    }
    Ok(Json(state.pins.set(&req).await?))
}

async fn freshness_get(
    State(state): State<Arc<AppState>>,
) -> Json<talon_coordinator_client::api::FreshnessView> {
    Json(state.freshness.get())
}

async fn freshness_set(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Json<talon_coordinator_client::api::FreshnessView>, ApiError> {
    let req: talon_coordinator_client::api::FreshnessRequest =
        parse_body(&body, CoordinatorError::InvalidRequest)?;
    Ok(Json(state.freshness.set(&req).await?))
}

async fn invalidations_get(
    State(state): State<Arc<AppState>>,
) -> Json<talon_coordinator_client::api::InvalidationsView> {
    Json(state.invalidations.view())
}

async fn invalidate(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Json<talon_coordinator_client::api::InvalidationsView>, ApiError> {
    let req: talon_coordinator_client::api::InvalidateRequest =
        parse_body(&body, CoordinatorError::InvalidRequest)?;
    Ok(Json(state.invalidations.invalidate(&req.prefix).await?))
}

async fn warm_list(
    State(state): State<Arc<AppState>>,
) -> Json<talon_coordinator_client::api::WarmJobsResponse> {
    Json(talon_coordinator_client::api::WarmJobsResponse {
        jobs: state.warm.list(),
    })
}

fn no_job(id: &str) -> ApiError {
    CoordinatorError::Api {
        status: 404,
        message: format!("no warm job {id}"),
    }
    .into()
}

async fn warm_view(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<talon_coordinator_client::api::WarmJobView>, ApiError> {
    let n: u64 = id.parse().map_err(|_| no_job(&id))?;
    state.warm.view(n).map(Json).ok_or_else(|| no_job(&id))
}

async fn warm_cancel(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<talon_coordinator_client::api::WarmJobView>, ApiError> {
    let n: u64 = id.parse().map_err(|_| no_job(&id))?;
    let cancelled = match &state.shared_warm {
        Some(shared) => shared.cancel(n).await?,
        None => state.warm.cancel(n),
    };
    cancelled.map(Json).ok_or_else(|| no_job(&id))
}

async fn members(State(state): State<Arc<AppState>>) -> Response {
    let mut answer = state.membership.snapshot(Instant::now()).members_response();
    answer.invalidations = state.invalidations.current();
    answer.freshness = state.freshness.rules();
    answer.geometry = state.config.geometry;
    Json(answer).into_response()
}

async fn member(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let snap = state.membership.snapshot(Instant::now());
    match snap.member(&id) {
        Some(m) => Ok(Json(m).into_response()),
        None => Err(CoordinatorError::UnknownWorker(id).into()),
    }
}

async fn cluster(State(state): State<Arc<AppState>>) -> Response {
    Json(state.membership.snapshot(Instant::now()).cluster()).into_response()
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<Arc<AppState>>) -> (StatusCode, &'static str) {
    if state.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn metrics_text(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        state.metrics.render(),
    )
        .into_response()
}

async fn not_found() -> (StatusCode, Json<ErrorBody>) {
    (
        StatusCode::NOT_FOUND,
        Json(ErrorBody {
            error: "no such endpoint; see the talon_coordinator_client::api docs".into(),
        }),
    )
}
