//! A running worker: its listeners, its membership agent and its shutdown.
//!
//! [`start`] opens the block store (rebuilding the index from disk), binds the data plane
//! and the admin listener (`/metrics`, `/healthz`, `/readyz`), and, when a coordinator is
//! configured, registers and heartbeats (bytes cached, hits, misses), registering again
//! whenever the coordinator has forgotten it. [`RunningWorker::shutdown`] drains: it
//! tells the coordinator to take the worker out of placement, stops accepting, finishes
//! the answers in flight, then returns.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use talon_coordinator_client::api::{HeartbeatRequest, RegisterRequest};
use talon_coordinator_client::client::CoordinatorClient;
use talon_coordinator_client::local_endpoint::{LocalEndpoint, host_identity};
use talon_core::cluster_auth::{ClusterSecret, Role};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::block_store::{BlockStore, Pins};
use crate::data_plane::{self, DataPlaneConfig, PlaneKind, Services};
use crate::descriptors::DescriptorBudget;
use crate::error::{Result, WorkerError};
use crate::loader::{Loader, LoaderConfig};
use crate::metrics::WorkerMetrics;
use crate::origins::{Origins, StatCache};

/// How this worker announces itself to a coordinator.
#[derive(Debug, Clone)]
pub struct MembershipConfig {
    /// The coordinator's base URL.
    pub coordinator_url: String,
    /// Unique worker id.
    pub id: String,
    /// Address readers connect to; default: the bound data-plane address.
    pub advertise_addr: Option<String>,
    /// Placement weight (relative share of blocks).
    pub weight: u32,
    /// Failure-domain label.
    pub zone: String,
    /// Heartbeat period.
    pub heartbeat_interval: Duration,
}

/// Everything a worker needs to run.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Data eviction passes over within its share ([`Pins`]).
    pub pins: Pins,
    /// Data-plane listen address (port 0 picks one).
    pub listen: SocketAddr,
    /// Admin listen address, if any.
    pub admin_listen: Option<SocketAddr>,
    /// Folder of the block store.
    pub cache_dir: PathBuf,
    /// Byte budget of the block store.
    pub capacity_bytes: u64,
    /// Page size, bytes (a power of two).
    pub page_size: u64,
    /// Origin clients.
    pub origins: Origins,
    /// Metadata TTL for Stats without a max age.
    pub stat_ttl: Duration,
    /// TTL of not-found answers.
    pub negative_stat_ttl: Duration,
    /// Bounds of the metadata table (found objects, bytes, not-found answers).
    pub metadata: talon_metadata_cache::Limits,
    /// The miss path's tuning.
    pub loader: LoaderConfig,
    /// The data plane's limits.
    pub data_plane: DataPlaneConfig,
    /// Where to offer the local socket to readers on this host (the co-located fast
    /// path: cached reads answered with the block file's descriptor); `None` for none.
    /// A socket that cannot be bound is logged and skipped: readers then use TCP.
    pub local_socket: Option<PathBuf>,
    /// Coordinator membership; `None` for a standalone worker.
    pub membership: Option<MembershipConfig>,
    /// The cluster secret: data-plane peers prove they know it in the Hello exchange,
    /// and the worker signs its coordinator calls with it.
    pub cluster_secret: ClusterSecret,
    /// Open descriptors this worker may use, which bounds its blocks and connections
    /// ([`crate::descriptors`]); `None`: the process's open-files limit (a process that
    /// runs several workers gives each its share).
    pub open_files: Option<u64>,
    /// Most cached blocks at once ([`crate::block_store::DEFAULT_MAX_BLOCKS`] by default);
    /// each is an open file, so the open-files limit may lower it
    /// ([`crate::descriptors`]). A dataset of small objects is one block per object.
    pub max_blocks: usize,
}

/// A running worker.
#[derive(Debug)]
pub struct RunningWorker {
    /// Where the data plane listens.
    pub addr: SocketAddr,
    /// Where the admin endpoints listen.
    pub admin_addr: Option<SocketAddr>,
    /// The data plane serving (io_uring rings or Tokio).
    pub plane: PlaneKind,
    /// The local socket, when one is served.
    pub local_socket: Option<PathBuf>,
    services: Arc<Services>,
    membership: Option<(CoordinatorClient, String, String)>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningWorker {
    /// The counters.
    pub fn metrics(&self) -> &Arc<WorkerMetrics> {
        &self.services.metrics
    }

    /// The block store.
    pub fn store(&self) -> &Arc<BlockStore> {
        self.services.loader.store()
    }

    /// The Prometheus text `/metrics` serves.
    pub fn metrics_text(&self) -> String {
        render_metrics(&self.services)
    }

    /// Drains and stops: leaves placement, stops accepting, finishes in-flight answers.
    pub async fn shutdown(self) {
        if let Some((client, id, instance)) = &self.membership
            && let Err(e) = client.drain(id, instance).await
        {
            tracing::warn!(error = %e, "could not tell the coordinator this worker is draining");
        }
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }

    /// Stops at once without draining or telling the coordinator (a crash, for tests).
    pub fn abort(self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Starts a worker.
///
/// # Errors
/// The store cannot be opened or a listener cannot bind.
pub async fn start(mut config: WorkerConfig) -> Result<RunningWorker> {
    let max_blocks = match config
        .open_files
        .or_else(crate::descriptors::open_files_limit)
    {
        Some(limit) => {
            let planes = 1 + usize::from(config.local_socket.is_some());
            let budget = DescriptorBudget::plan(
                limit,
                config.max_blocks,
                config.data_plane.max_connections,
                config.data_plane.max_unauthenticated,
                planes,
                config.loader.max_origin_requests,
            )?;
            // Said once, at start: a limit below the caps lowers them (raise it for more).
            tracing::info!(
                limit,
                max_blocks = budget.max_blocks,
                max_connections = budget.max_connections,
                wanted_connections = config.data_plane.max_connections,
                max_unauthenticated = budget.max_unauthenticated,
                "descriptor budget"
            );
            config.data_plane.max_connections = budget.max_connections;
            config.data_plane.max_unauthenticated = budget.max_unauthenticated;
            budget.max_blocks
        }
        None => config.max_blocks,
    };
    let (dir, page, cap, pins) = (
        config.cache_dir.clone(),
        config.page_size,
        config.capacity_bytes,
        config.pins.clone(),
    );
    let store = tokio::task::spawn_blocking(move || {
        BlockStore::open_capped(&dir, page, cap, pins, max_blocks)
    })
    .await
    .map_err(|e| WorkerError::Unavailable(format!("opening the store failed: {e}")))??;
    let store = Arc::new(store);
    let metrics = Arc::new(WorkerMetrics::new());
    let origins = Arc::new(config.origins.clone());
    let stats = Arc::new(
        StatCache::with_limits(
            origins.clone(),
            config.stat_ttl,
            config.negative_stat_ttl,
            config.metadata,
        )
        .with_retry(crate::origin_retry::RetryPolicy::of(&config.loader)),
    );
    let loader = Arc::new(Loader::new(
        store,
        origins,
        stats.clone(),
        config.loader.clone(),
        metrics.clone(),
    ));
    let services = Arc::new(Services {
        secret: config.cluster_secret.clone(),
        worker_id: config
            .membership
            .as_ref()
            .map(|m| m.id.clone())
            .unwrap_or_default(),
        loader,
        stats,
        metrics,
    });

    let (shutdown, shutdown_rx) = watch::channel(false);
    let plane = data_plane::start(
        config.listen,
        services.clone(),
        config.data_plane.clone(),
        shutdown_rx.clone(),
    )
    .await?;
    let addr = plane.addr;
    services.metrics.set_data_plane(plane.kind);
    let mut tasks = vec![plane.task];
    let local_socket = match &config.local_socket {
        Some(path) => match data_plane::start_local(
            path,
            services.clone(),
            config.data_plane.clone(),
            shutdown_rx.clone(),
        )
        .await
        {
            Ok(task) => {
                tasks.push(task);
                Some(path.clone())
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "no local socket: readers on this host will use TCP");
                None
            }
        },
        None => None,
    };
    let local = match (&local_socket, host_identity()) {
        (Some(path), Some(host)) => LocalEndpoint {
            host,
            socket: path.to_string_lossy().into_owned(),
        },
        _ => LocalEndpoint::default(),
    };

    let admin_addr = match config.admin_listen {
        Some(a) => {
            let l = TcpListener::bind(a)
                .await
                .map_err(|e| WorkerError::io("binding the admin listener", e))?;
            let bound = l
                .local_addr()
                .map_err(|e| WorkerError::io("reading the admin address", e))?;
            tasks.push(tokio::spawn(admin(
                l,
                services.clone(),
                shutdown_rx.clone(),
            )));
            Some(bound)
        }
        None => None,
    };

    let membership = match &config.membership {
        Some(m) => {
            let client = CoordinatorClient::new(m.coordinator_url.clone())
                .map_err(|e| WorkerError::InvalidRequest(format!("coordinator URL: {e}")))?
                .with_auth(config.cluster_secret.clone(), Role::Worker);
            let instance = instance_id(&config.cache_dir)?;
            let registration = RegisterRequest {
                instance: instance.clone(),
                data_plane: plane.kind.name().to_owned(),
                id: m.id.clone(),
                addr: m.advertise_addr.clone().unwrap_or_else(|| addr.to_string()),
                weight: m.weight.max(1),
                zone: m.zone.clone(),
                capacity_bytes: config.capacity_bytes,
                placement_version: talon_coordinator_client::placement::PLACEMENT_VERSION,
                page_size: config.page_size,
                local,
            };
            tasks.push(tokio::spawn(agent(
                client.clone(),
                registration,
                m.heartbeat_interval,
                services.clone(),
                shutdown_rx.clone(),
            )));
            Some((client, m.id.clone(), instance))
        }
        None => None,
    };
    tracing::info!(
        %addr,
        admin = %admin_addr.map_or_else(|| "off".to_owned(), |a| a.to_string()),
        "worker serving"
    );
    Ok(RunningWorker {
        addr,
        admin_addr,
        plane: plane.kind,
        local_socket,
        services,
        membership,
        shutdown,
        tasks,
    })
}

/// This worker's instance identity, which binds its id at the coordinator: random on
/// the first start, then kept in the cache folder (file `instance`), so a restart over
/// the same cache is the same instance and a second worker with the same id is not.
fn instance_id(cache_dir: &std::path::Path) -> Result<String> {
    let path = cache_dir.join("instance");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let text = text.trim();
        if (16..=128).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(text.to_owned());
        }
    }
    let mut bytes = [0u8; 16];
    getrandom::getrandom(&mut bytes)
        .map_err(|e| WorkerError::Unavailable(format!("no randomness for the instance id: {e}")))?;
    let id = hex::encode(bytes);
    let tmp = cache_dir.join("instance.tmp");
    std::fs::write(&tmp, &id)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| WorkerError::io("writing the instance id", e))?;
    Ok(id)
}

/// Registers, then heartbeats every interval until shutdown; registers again when the
/// coordinator has forgotten the worker (it restarted, or the worker was expired).
async fn agent(
    client: CoordinatorClient,
    registration: RegisterRequest,
    interval: Duration,
    services: Arc<Services>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut registered = false;
    let warm = Arc::new(crate::warm_tasks::WarmReports::default());
    loop {
        if !registered {
            match client.register(&registration).await {
                Ok(r) => {
                    registered = true;
                    tracing::info!(epoch = r.epoch, "registered with the coordinator");
                }
                Err(e) => tracing::warn!(error = %e, "registration failed; retrying"),
            }
        } else {
            let stats = services.loader.store().stats();
            let (hits, misses) = services.metrics.hit_miss();
            let beat = HeartbeatRequest {
                bytes_cached: stats.used_bytes,
                capacity_bytes: stats.capacity_bytes,
                hits,
                misses,
                draining: false,
                instance: registration.instance.clone(),
                warm_done: warm.take(),
            };
            match client.heartbeat_or_register(&registration, &beat).await {
                Ok(talon_coordinator_client::client::Report::Heartbeat(answer)) => {
                    if services.loader.store().set_cluster_pins(&answer.pins) {
                        tracing::info!(prefixes = ?answer.pins, "cluster pins changed");
                    }
                    let invalidated = services.stats.invalidations().update(
                        answer
                            .invalidations
                            .iter()
                            .map(|i| (i.prefix.as_str(), i.at_unix_ms)),
                    );
                    if invalidated > 0 {
                        tracing::info!(new = invalidated, "cluster invalidations received");
                    }
                    let rules = answer
                        .freshness
                        .iter()
                        .map(|r| (r.prefix.as_str(), r.max_staleness_ms));
                    if services.stats.freshness().update(rules) {
                        tracing::info!(rules = ?answer.freshness, "cluster freshness rules changed");
                    }
                    warm.start(&services.loader, answer.warm);
                }
                Ok(talon_coordinator_client::client::Report::Registered(_)) => {
                    warm.give_back(beat.warm_done);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "heartbeat failed");
                    warm.give_back(beat.warm_done);
                }
            }
        }
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// Every metric, the store's gauges and the metadata cache's counts refreshed.
fn render_metrics(services: &Services) -> String {
    services
        .metrics
        .metadata_cache(services.stats.table_stats());
    services
        .metrics
        .origin_request_limit(services.stats.origin_request_limit());
    services.metrics.cluster_rules(
        services.stats.invalidations().len(),
        services.stats.freshness().len(),
    );
    services.metrics.render(
        services.loader.store().stats(),
        services.stats.origin_requests(),
    )
}

/// `/metrics`, `/healthz`, `/readyz`.
async fn admin(
    listener: TcpListener,
    services: Arc<Services>,
    mut shutdown: watch::Receiver<bool>,
) {
    use axum::routing::get;
    let metrics_services = services.clone();
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let s = metrics_services.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "text/plain; version=0.0.4",
                        )],
                        render_metrics(&s),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(|| async { "ready\n" }));
    let stop = async move {
        let _ = shutdown.changed().await;
    };
    talon_listener::serve_router(listener, talon_listener::ListenerLimits::admin(), app, stop)
        .await;
}

/// Raises this process's open-files soft limit to its hard limit and returns the limit
/// now in force (`None` when unlimited or unknown). A worker keeps up to two descriptors
/// open per cached block and three per connection ([`crate::descriptors`]), so a
/// default soft limit of 1,024 would cap it far below its byte budget. Failure is
/// logged, not fatal.
pub fn raise_open_files_limit() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if let (Some(current), Some(maximum)) = (limit.current, limit.maximum)
        && current < maximum
    {
        let raised = Rlimit {
            current: Some(maximum),
            maximum: Some(maximum),
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                tracing::debug!(from = current, to = maximum, "raised the open-files limit");
                return Some(maximum);
            }
            Err(e) => {
                tracing::warn!(current, maximum, error = %e, "cannot raise the open-files limit");
                return Some(current);
            }
        }
    }
    limit.current
}

#[cfg(test)]
mod open_files_tests {
    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let raised = super::raise_open_files_limit();
        let now = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(raised, now.current);
        assert_eq!(now.current, now.maximum);
    }
}
