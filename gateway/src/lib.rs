//! `talon-gateway`: the S3 and Azure Blob front ends of Talon, for unmodified SDK
//! clients.
//!
//! It owns the HTTP fronts (an S3 listener and an Azure Blob listener, each optional,
//! each with a route: through the cache, cache only, or straight to the origin), client
//! authentication against configured identities, translation between the fronts and the
//! origin (an S3 client can read an Azure origin and the other way round), streaming
//! with bounded memory, and the gateway's metrics. It does not own caching (the cluster,
//! reached through `talon-cache-client`), the protocols' formats (`talon-protocols`), or
//! the origin.

pub mod access_log;
pub mod azure_front;
pub mod backend;
pub mod blocks_over_s3;
pub mod cache_status;
pub mod cli;
pub mod config;
pub mod copies;
pub mod error;
pub mod listed_read_ahead;
pub mod listings;
pub mod metrics;
pub mod multipart_over_azure;
pub mod objects;
pub mod reply;
pub mod s3_front;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use talon_protocols::expect_continue::ContinueRisk;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{AzureFront, Identities, Limits, S3Front};
pub use crate::error::GatewayError;
use crate::metrics::GatewayMetrics;
pub use crate::objects::Freshness;
use crate::objects::Objects;

/// Everything a gateway serves.
pub struct GatewayConfig {
    /// The S3 front, if any.
    pub s3: Option<S3Front>,
    /// The Azure Blob front, if any.
    pub azure: Option<AzureFront>,
    /// Admin listener (`/metrics`, `/healthz`, `/readyz`).
    pub admin_listen: Option<SocketAddr>,
    /// The origins.
    pub origins: talon_protocols::origin::Origins,
    /// The cache cluster; required unless every front routes to the origin.
    pub cache: Option<talon_cache_client::CacheClient>,
    /// Who may call.
    pub identities: Identities,
    /// How stale object metadata may be, in this gateway and in the workers it asks
    /// (declared staleness), and whether the last known version may serve when the
    /// origin cannot be reached.
    pub freshness: Freshness,
    /// Protective limits.
    pub limits: Limits,
    /// TLS for both fronts (the admin listener stays plain HTTP); `None` for HTTP.
    pub tls: Option<talon_listener::Tls>,
    /// Where the canned ACLs clients set (PutBucketAcl, `x-amz-acl`) are kept; `None`:
    /// ACL writes other than `private` are refused.
    pub acl_file: Option<std::path::PathBuf>,
    /// Whether answers carry a `Cache-Status` header (RFC 9211) saying how this gateway
    /// served them: a hit, a fill, a fallback to the origin ([`cache_status`]).
    pub cache_status: bool,
    /// Where the access log goes (`-`: standard output); `None`: no access log
    /// ([`access_log`]).
    pub access_log: Option<std::path::PathBuf>,
}

/// The shared state of a gateway's handlers.
pub struct Gateway {
    /// Whether the fronts speak HTTPS.
    https: bool,
    s3: Option<S3Front>,
    azure: Option<AzureFront>,
    /// Who may call: replaced whole when the identities file is reloaded, so a request
    /// sees one version from start to end.
    identities: std::sync::RwLock<Arc<Identities>>,
    acls: Option<talon_protocols::access::Acls>,
    /// Whether answers carry `Cache-Status` ([`cache_status`]).
    cache_status: bool,
    /// One line per answered request, when configured.
    access_log: Option<access_log::AccessLog>,
    /// Why `/readyz` says not ready (an origin that failed its check, when the process
    /// was told to start anyway); `None`: ready.
    not_ready: std::sync::RwLock<Option<String>>,
    objects: Objects,
    limits: Limits,
    metrics: Arc<GatewayMetrics>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("objects", &self.objects)
            .finish_non_exhaustive()
    }
}

/// A running gateway.
#[derive(Debug)]
pub struct RunningGateway {
    /// Where the S3 front listens.
    pub s3_addr: Option<SocketAddr>,
    /// Where the Azure front listens.
    pub azure_addr: Option<SocketAddr>,
    /// Where the admin endpoints listen.
    pub admin_addr: Option<SocketAddr>,
    state: Arc<Gateway>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningGateway {
    fn scheme(&self) -> &'static str {
        if self.state.https { "https" } else { "http" }
    }

    /// `http://addr` (or `https://`) of the S3 front.
    pub fn s3_url(&self) -> Option<String> {
        self.s3_addr.map(|a| format!("{}://{a}", self.scheme()))
    }

    /// The Azure account URL (`http://addr/<account>`, or `https://`).
    pub fn azure_url(&self) -> Option<String> {
        self.azure_addr.map(|a| {
            format!(
                "{}://{a}/{}",
                self.scheme(),
                self.state.identities().azure.account
            )
        })
    }

    /// The metrics.
    pub fn metrics(&self) -> &GatewayMetrics {
        &self.state.metrics
    }

    /// Says on `/readyz` (503 with `why`) that this gateway is not ready; `None`: ready.
    pub fn set_not_ready(&self, why: Option<String>) {
        *self
            .state
            .not_ready
            .write()
            .unwrap_or_else(|p| p.into_inner()) = why;
    }

    /// Checks `origins` every `period` until shutdown ([`OriginClient::check_at_start`]
    /// again), keeping `/readyz` and the log saying what is wrong until it is right: for
    /// a gateway started with `--origin-check warn` over an origin that failed it.
    ///
    /// [`OriginClient::check_at_start`]: talon_protocols::origin::OriginClient::check_at_start
    pub fn keep_checking_origins(
        &mut self,
        origins: talon_protocols::origin::Origins,
        period: std::time::Duration,
    ) {
        let state = self.state.clone();
        let mut shutdown = self.shutdown.subscribe();
        self.tasks.push(tokio::spawn(async move {
            loop {
                let checks = origins
                    .check_at_start(talon_protocols::origin::check::START_CHECK_TIMEOUT)
                    .await;
                let problems: Vec<String> = checks.into_iter().filter_map(|c| c.problem).collect();
                let why = (!problems.is_empty()).then(|| problems.join("; "));
                match &why {
                    Some(why) => tracing::warn!(problem = %why, "the origin is not ready"),
                    None => tracing::info!("the origin passed its check"),
                }
                let done = why.is_none();
                *state.not_ready.write().unwrap_or_else(|p| p.into_inner()) = why;
                if done {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep(period) => {}
                    _ = shutdown.changed() => return,
                }
            }
        }));
    }

    /// Replaces who may call (a reloaded identities file). Requests in flight finish
    /// with the identities they started with; connections stay open.
    ///
    /// # Errors
    /// [`GatewayError::Config`] when a front would have no credentials and no
    /// anonymous access; the identities in use stay.
    pub fn replace_identities(&self, identities: Identities) -> Result<(), GatewayError> {
        let state = &self.state;
        let identities = for_fronts(identities, state.s3.as_ref(), state.azure.is_some())?;
        *state
            .identities
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(identities);
        Ok(())
    }

    /// Stops accepting and finishes the responses in flight (bounded), then returns.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, GatewayError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| GatewayError::Bind { addr, source })
}

fn spawn_front(
    listener: TcpListener,
    router: axum::Router,
    limits: talon_listener::ListenerLimits,
    mut shutdown: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let stop = async move {
            let _ = shutdown.changed().await;
        };
        talon_listener::serve_router(listener, limits, router, stop).await;
    })
}

/// Checks `identities` against the fronts that listen and gives the S3 front's region
/// to its signature check.
fn for_fronts(
    mut identities: Identities,
    s3: Option<&S3Front>,
    azure: bool,
) -> Result<Identities, GatewayError> {
    identities.check_fronts(s3.is_some(), azure)?;
    if let Some(front) = s3
        && !identities.s3.regions.contains(&front.region)
    {
        identities.s3.regions.push(front.region.clone());
    }
    Ok(identities)
}

impl Gateway {
    /// Who may call, now.
    fn identities(&self) -> Arc<Identities> {
        self.identities
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Starts a gateway.
///
/// # Errors
/// [`GatewayError::Config`] when a front routes through the cache without a cache
/// client; [`GatewayError::Bind`].
pub async fn start(config: GatewayConfig) -> Result<RunningGateway, GatewayError> {
    let needs_cache = [
        config.s3.as_ref().map(|f| f.route),
        config.azure.as_ref().map(|f| f.route),
    ]
    .into_iter()
    .flatten()
    .any(|r| r != config::Route::Origin);
    if needs_cache && config.cache.is_none() {
        return Err(GatewayError::Config(
            "a front routes through the cache but no cache cluster is configured".into(),
        ));
    }
    let identities = for_fronts(
        config.identities,
        config.s3.as_ref(),
        config.azure.is_some(),
    )?;
    let state = Arc::new(Gateway {
        https: config.tls.is_some(),
        s3: config.s3.clone(),
        azure: config.azure.clone(),
        identities: std::sync::RwLock::new(Arc::new(identities)),
        acls: config
            .acl_file
            .as_ref()
            .map(talon_protocols::access::Acls::open)
            .transpose()
            .map_err(|e| GatewayError::Config(format!("--acl-file: {}", e.message())))?,
        cache_status: config.cache_status,
        access_log: config
            .access_log
            .as_deref()
            .map(access_log::AccessLog::open)
            .transpose()?,
        not_ready: std::sync::RwLock::new(None),
        objects: Objects::new(
            config.origins,
            config.cache,
            config.freshness,
            config.limits.write_through_max_bytes,
            talon_metadata_cache::Limits {
                max_entries: config.limits.metadata_entries,
                max_bytes: config.limits.metadata_bytes,
                max_missing: (config.limits.metadata_entries / 10).max(1),
            },
            listed_read_ahead::ListedReadAhead::new(
                config.limits.read_ahead_objects,
                config.limits.read_ahead_object_max_bytes,
            ),
        ),
        limits: config.limits.clone(),
        metrics: Arc::new(GatewayMetrics::new()),
    });
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let mut s3_addr = None;
    if let Some(front) = &config.s3 {
        let listener = bind(front.listen).await?;
        s3_addr = listener.local_addr().ok();
        let router = axum::Router::new()
            .fallback(|State(gw): State<Arc<Gateway>>, req: Request| async move {
                let risk = ContinueRisk::of(req.headers());
                close_if(risk, s3_front::handle(gw, req).await)
            })
            .with_state(state.clone());
        tasks.push(spawn_front(
            listener,
            router,
            talon_listener::ListenerLimits {
                tls: config.tls.clone(),
                over_capacity_answer: Some(talon_protocols::answer::over_capacity_answer(
                    talon_core::Backend::S3,
                )),
                ..config.limits.listener()
            },
            shutdown_rx.clone(),
        ));
    }
    let mut azure_addr = None;
    if let Some(front) = &config.azure {
        let listener = bind(front.listen).await?;
        azure_addr = listener.local_addr().ok();
        let router = axum::Router::new()
            .fallback(
                |State(gw): State<Arc<Gateway>>,
                 ConnectInfo(peer): ConnectInfo<SocketAddr>,
                 req: Request| async move {
                    let risk = ContinueRisk::of(req.headers());
                    close_if(risk, azure_front::handle(gw, peer, req).await)
                },
            )
            .with_state(state.clone());
        tasks.push(spawn_front(
            listener,
            router,
            talon_listener::ListenerLimits {
                tls: config.tls.clone(),
                over_capacity_answer: Some(talon_protocols::answer::over_capacity_answer(
                    talon_core::Backend::Azure,
                )),
                ..config.limits.listener()
            },
            shutdown_rx.clone(),
        ));
    }
    let mut admin_addr = None;
    if let Some(addr) = config.admin_listen {
        let listener = bind(addr).await?;
        admin_addr = listener.local_addr().ok();
        let gw = state.clone();
        let ready = state.clone();
        let router = axum::Router::new()
            .route(
                "/metrics",
                axum::routing::get(move || {
                    let gw = gw.clone();
                    async move {
                        gw.metrics.metadata_cache(
                            gw.objects.metadata_stats(),
                            gw.objects.listings().stats(),
                        );
                        gw.metrics
                            .origin_request_limit(gw.objects.origin_request_limit());
                        if let Some(stats) = gw.objects.origin_credential_stats() {
                            gw.metrics.origin_credentials("s3", stats);
                        }
                        if let Some(stats) = gw.objects.azure_origin_credential_stats() {
                            gw.metrics.origin_credentials("azure", stats);
                        }
                        let (invalidations, freshness) = gw.objects.cluster_rules();
                        gw.metrics.cluster_rules(invalidations, freshness);
                        if let Some(cache) = gw.objects.cache() {
                            gw.metrics.read_budget_held(cache.buffered_bytes(None));
                            gw.metrics.fail_open(
                                cache.fail_open_stats(),
                                &cache.members(),
                                &cache.worker_health(),
                            );
                            gw.metrics.hot_reads_spread(cache.hot_reads_spread());
                            gw.metrics.held_block_files(cache.held_file_stats());
                            gw.metrics.read_ahead(cache.read_ahead_stats());
                            gw.metrics.listed_read_ahead(gw.objects.read_ahead_stats());
                        }
                        (
                            [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                            gw.metrics.render(),
                        )
                    }
                }),
            )
            .route("/healthz", axum::routing::get(|| async { "ok\n" }))
            .route(
                "/readyz",
                axum::routing::get(move || {
                    let why = ready
                        .not_ready
                        .read()
                        .unwrap_or_else(|p| p.into_inner())
                        .clone();
                    async move {
                        match why {
                            None => (http::StatusCode::OK, "ready\n".to_owned()),
                            Some(why) => {
                                (http::StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n"))
                            }
                        }
                    }
                }),
            );
        tasks.push(spawn_front(
            listener,
            router,
            talon_listener::ListenerLimits {
                header_read_timeout: config.limits.header_read_timeout,
                write_stall_timeout: config.limits.write_stall_timeout,
                ..talon_listener::ListenerLimits::admin()
            },
            shutdown_rx.clone(),
        ));
    }
    let shown = |a: Option<SocketAddr>| a.map_or_else(|| "off".to_owned(), |a| a.to_string());
    tracing::info!(
        s3 = %shown(s3_addr),
        azure = %shown(azure_addr),
        admin = %shown(admin_addr),
        "gateway serving"
    );
    Ok(RunningGateway {
        s3_addr,
        azure_addr,
        admin_addr,
        state,
        shutdown,
        tasks,
    })
}

/// Adds `Connection: close` where the request's [`ContinueRisk`] says the body may be
/// unread.
fn close_if(risk: ContinueRisk, mut resp: axum::response::Response) -> axum::response::Response {
    let status = resp.status();
    risk.apply(status, resp.headers_mut());
    resp
}
