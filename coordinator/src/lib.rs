//! `talon-coordinator`: who the workers are and where each block lives.
//!
//! It owns worker [`membership`] as soft state (register, heartbeat, expiry,
//! drain), the membership [`epoch`], [`placement`] (weighted rendezvous
//! hashing of a `BlockId` over the live workers, frozen by golden
//! [`vectors`]), the admin HTTP API (axum, JSON bodies in [`api`]) with
//! [`metrics`] in the Prometheus text format. The API's bodies, its typed [`client`],
//! placement and the epoch are `talon-coordinator-client`'s (re-exported here), so
//! that workers and cache clients link them without this server.
//!
//! It does not own block data, the data plane or reads: the coordinator is
//! never on a read's path. Readers fetch the member list, build a
//! [`placement::RendezvousPlacement`] themselves and talk to workers
//! directly. By default nothing is persisted: after a restart, membership is rebuilt
//! from the next round of heartbeats (see [`api`] for the worker's side). With
//! [`StateConfig::Etcd`] membership, warm jobs and the cluster's [`pins`] live in etcd, shared by every
//! coordinator of the cluster ([`shared_membership`], [`shared_warm`]).
//!
//! Start one in-process with [`start`], or run the `talon-coordinator` binary.

pub mod auth;
pub mod cli;
pub mod etcd;
pub mod freshness;
pub mod invalidations;
pub mod membership;
pub mod metrics;
pub mod pins;
mod server;
pub mod shared_document;
use shared_document::ClusterDocument;
pub mod shared_membership;
pub mod shared_warm;
mod status_page;
pub mod warm;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use talon_core::cluster_auth::ClusterSecret;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::membership::{Membership, MembershipSnapshot};
use crate::metrics::Metrics;
use crate::server::AppState;
use crate::shared_membership::SharedMembership;
use crate::shared_warm::SharedWarmJobs;
pub use talon_coordinator_client::error::CoordinatorError;

/// How long [`RunningCoordinator::shutdown`] waits for in-flight requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How to run a coordinator.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// Admin API address; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The cluster secret every API request must be signed with (see [`auth`]).
    pub cluster_secret: ClusterSecret,
    /// Most members at once; a registration beyond is refused (409).
    pub max_members: usize,
    /// How often workers are told to heartbeat.
    pub heartbeat_interval: Duration,
    /// A worker that has not heartbeated for this long is dropped. Must be
    /// longer than `heartbeat_interval` (a few intervals is sensible).
    pub expiry: Duration,
    /// Where membership lives: this process's memory, or etcd.
    pub state: StateConfig,
    /// Where the read-only status page listens, unauthenticated (the `status_page` module);
    /// `None`: no page.
    pub status_listen: Option<SocketAddr>,
    /// The origins warm jobs list their prefixes at ([`warm`]); `None`: no warm jobs.
    pub origins: Option<talon_protocols::origin::Origins>,
    /// The cluster's block and page size, published in `GET /v1/members` for every
    /// gateway, worker and `talon warm` to take; a worker registering with another
    /// page size is refused. `None` publishes nothing (each part keeps its own).
    pub geometry: Option<talon_coordinator_client::api::ClusterGeometry>,
}

/// Where a coordinator keeps membership.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StateConfig {
    /// In this process's memory (one coordinator; rebuilt from heartbeats after a
    /// restart).
    #[default]
    Memory,
    /// In etcd, shared by every coordinator given the same endpoints and prefix.
    Etcd {
        /// `host:port` of each etcd member.
        endpoints: Vec<String>,
        /// The prefix of every key (`/talon/` by default).
        prefix: String,
        /// TLS to etcd (`None`: plain HTTP, for a trusted network only).
        tls: Option<etcd::EtcdTls>,
    },
}

impl StateConfig {
    /// Parses `memory` or `etcd://host:port[,host:port…]`.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidConfig`] for anything else.
    pub fn parse(spec: &str, prefix: &str) -> Result<StateConfig, CoordinatorError> {
        if spec == "memory" {
            return Ok(StateConfig::Memory);
        }
        let Some(hosts) = spec.strip_prefix("etcd://") else {
            return Err(CoordinatorError::InvalidConfig(format!(
                "--state {spec:?}: expected memory or etcd://host:port[,host:port...]"
            )));
        };
        let endpoints: Vec<String> = hosts
            .split(',')
            .map(|h| h.trim().trim_end_matches('/').to_owned())
            .filter(|h| !h.is_empty())
            .collect();
        if endpoints.is_empty() || endpoints.iter().any(|e| !e.contains(':')) {
            return Err(CoordinatorError::InvalidConfig(format!(
                "--state {spec:?}: each etcd endpoint is host:port"
            )));
        }
        Ok(StateConfig::Etcd {
            endpoints,
            prefix: prefix.to_owned(),
            tls: None,
        })
    }

    /// The same state, reached over `tls` (`None`: unchanged).
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidConfig`] for TLS with memory state (nothing to reach).
    pub fn with_tls(self, tls: Option<etcd::EtcdTls>) -> Result<StateConfig, CoordinatorError> {
        match (self, tls) {
            (state, None) => Ok(state),
            (
                StateConfig::Etcd {
                    endpoints, prefix, ..
                },
                tls,
            ) => Ok(StateConfig::Etcd {
                endpoints,
                prefix,
                tls,
            }),
            (StateConfig::Memory, Some(_)) => Err(CoordinatorError::InvalidConfig(
                "--etcd-ca is for --state etcd://…".into(),
            )),
        }
    }
}

impl Default for CoordinatorConfig {
    /// Loopback on a free port, a fresh random cluster secret (take it from
    /// [`RunningCoordinator::cluster_secret`]), at most 1,024 members, heartbeats every
    /// second, expiry after 5 s.
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            cluster_secret: auth::random_secret(),
            max_members: 1024,
            heartbeat_interval: Duration::from_millis(1000),
            expiry: Duration::from_millis(5000),
            state: StateConfig::Memory,
            status_listen: None,
            origins: None,
            geometry: None,
        }
    }
}

impl CoordinatorConfig {
    /// Checks that the intervals make sense.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidConfig`] when the heartbeat interval is 0
    /// or the expiry is not longer than it.
    pub fn validate(&self) -> Result<(), CoordinatorError> {
        if self.heartbeat_interval.is_zero() {
            return Err(CoordinatorError::InvalidConfig(
                "the heartbeat interval must be more than 0".into(),
            ));
        }
        if self.expiry <= self.heartbeat_interval {
            return Err(CoordinatorError::InvalidConfig(format!(
                "the expiry ({} ms) must be longer than the heartbeat interval ({} ms)",
                self.expiry.as_millis(),
                self.heartbeat_interval.as_millis()
            )));
        }
        Ok(())
    }

    /// How often the background task drops silent members: a quarter of the
    /// expiry, at least 10 ms.
    pub fn sweep_interval(&self) -> Duration {
        (self.expiry / 4).max(Duration::from_millis(10))
    }
}

/// A running coordinator.
#[derive(Debug)]
pub struct RunningCoordinator {
    /// Where the admin API listens.
    pub addr: SocketAddr,
    /// Where the status page listens, if it does.
    pub status_addr: Option<SocketAddr>,
    state: Arc<AppState>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningCoordinator {
    /// `http://addr`, the base URL for [`client::CoordinatorClient`].
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The live member table, for in-process callers and tests.
    pub fn membership(&self) -> &Arc<Membership> {
        &self.state.membership
    }

    /// The cluster secret the API requires (for in-process callers and tests).
    pub fn cluster_secret(&self) -> &ClusterSecret {
        &self.state.config.cluster_secret
    }

    /// A snapshot of the membership now.
    pub fn snapshot(&self) -> MembershipSnapshot {
        self.state.membership.snapshot(Instant::now())
    }

    /// Stops accepting, lets in-flight requests finish (bounded), stops the
    /// expiry task, and returns.
    pub async fn shutdown(self) {
        self.state.ready.store(false, Ordering::Release);
        let _ = self.shutdown.send(true);
        for mut task in self.tasks {
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut task)
                .await
                .is_err()
            {
                tracing::warn!("requests still running after the shutdown grace period");
                task.abort();
            }
        }
    }
}

/// Starts a coordinator: binds `config.listen`, serves the admin API and
/// sweeps silent members until [`RunningCoordinator::shutdown`].
///
/// # Errors
/// [`CoordinatorError::InvalidConfig`] for bad intervals,
/// [`CoordinatorError::Bind`] when the address cannot be bound.
pub async fn start(config: CoordinatorConfig) -> Result<RunningCoordinator, CoordinatorError> {
    config.validate()?;
    let listener =
        TcpListener::bind(config.listen)
            .await
            .map_err(|source| CoordinatorError::Bind {
                addr: config.listen,
                source,
            })?;
    let addr = listener
        .local_addr()
        .map_err(|source| CoordinatorError::Bind {
            addr: config.listen,
            source,
        })?;
    let mut membership = Membership::new(config.expiry).with_max_members(config.max_members);
    if matches!(config.state, StateConfig::Etcd { .. }) {
        membership = membership.mirror();
    }
    let membership = Arc::new(membership);
    let warm = Arc::new(warm::WarmJobs::default());
    let (shared, shared_warm, pins, invalidations, freshness) = match &config.state {
        StateConfig::Memory => (
            None,
            None,
            Arc::new(pins::ClusterPins::default()),
            Arc::new(invalidations::ClusterInvalidations::default()),
            Arc::new(freshness::ClusterFreshness::default()),
        ),
        StateConfig::Etcd {
            endpoints,
            prefix,
            tls,
        } => {
            let prefix = if prefix.ends_with('/') {
                prefix.clone()
            } else {
                format!("{prefix}/")
            };
            let etcd = Arc::new(etcd::Etcd::new(endpoints, tls.as_ref())?);
            let shared = Arc::new(SharedMembership::new(
                etcd.clone(),
                &prefix,
                membership.clone(),
            ));
            let members = shared.load().await?;
            let pins = Arc::new(pins::ClusterPins::shared(etcd.clone(), &prefix));
            pins.document().load().await?;
            let invalidations = Arc::new(invalidations::ClusterInvalidations::shared(
                etcd.clone(),
                &prefix,
            ));
            invalidations.document().load().await?;
            let freshness = Arc::new(freshness::ClusterFreshness::shared(etcd.clone(), &prefix));
            freshness.document().load().await?;
            let shared_warm = Arc::new(SharedWarmJobs::new(
                etcd,
                &prefix,
                warm.clone(),
                membership.clone(),
            ));
            let jobs = shared_warm.load().await?;
            tracing::info!(
                ?endpoints,
                prefix,
                members,
                warm_jobs = jobs,
                "membership, warm jobs, pins, invalidations and freshness shared through etcd"
            );
            (
                Some(shared),
                Some(shared_warm),
                pins,
                invalidations,
                freshness,
            )
        }
    };
    let state = Arc::new(AppState {
        metrics: Metrics::new(membership.clone(), warm.clone()),
        membership,
        shared: shared.clone(),
        shared_warm: shared_warm.clone(),
        pins: pins.clone(),
        invalidations: invalidations.clone(),
        freshness: freshness.clone(),
        warm,
        config: config.clone(),
        ready: false.into(),
    });
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    if let Some(shared) = shared {
        tasks.push(tokio::spawn(shared.mirror(shutdown_rx.clone())));
    }
    if let Some(shared_warm) = shared_warm {
        tasks.push(tokio::spawn(shared_warm.mirror(shutdown_rx.clone())));
    }
    // Returns at once when the pins are in memory.
    tasks.push(tokio::spawn(
        pins.document().clone().mirror(shutdown_rx.clone()),
    ));
    tasks.push(tokio::spawn(
        invalidations.document().clone().mirror(shutdown_rx.clone()),
    ));
    tasks.push(tokio::spawn(
        freshness.document().clone().mirror(shutdown_rx.clone()),
    ));

    let mut stop = shutdown_rx.clone();
    let serve = talon_listener::serve_router(
        listener,
        talon_listener::ListenerLimits::admin(),
        server::router(state.clone()),
        async move {
            let _ = stop.wait_for(|s| *s).await;
        },
    );
    let server_task = tokio::spawn(serve);
    let mut status_addr = None;
    if let Some(listen) = config.status_listen {
        let listener =
            TcpListener::bind(listen)
                .await
                .map_err(|source| CoordinatorError::Bind {
                    addr: listen,
                    source,
                })?;
        status_addr = listener.local_addr().ok();
        let mut stop = shutdown_rx.clone();
        tasks.push(tokio::spawn(talon_listener::serve_router(
            listener,
            talon_listener::ListenerLimits::admin(),
            status_page::router(state.clone()),
            async move {
                let _ = stop.wait_for(|s| *s).await;
            },
        )));
    }

    let sweeper = tokio::spawn(sweep(
        state.membership.clone(),
        config.sweep_interval(),
        shutdown_rx,
    ));
    state.ready.store(true, Ordering::Release);
    tasks.extend([server_task, sweeper]);
    Ok(RunningCoordinator {
        addr,
        status_addr,
        state,
        shutdown,
        tasks,
    })
}

/// Drops silent members every `every` until shutdown.
async fn sweep(membership: Arc<Membership>, every: Duration, mut stop: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                membership.expire(Instant::now());
            }
            _ = stop.wait_for(|s| *s) => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_specs_parse_or_say_why_not() {
        assert_eq!(
            StateConfig::parse("memory", "/t/").ok(),
            Some(StateConfig::Memory)
        );
        assert_eq!(
            StateConfig::parse("etcd://a:2379, b:2379/", "/t/").ok(),
            Some(StateConfig::Etcd {
                endpoints: vec!["a:2379".into(), "b:2379".into()],
                prefix: "/t/".into(),
                tls: None,
            })
        );
        let tls = etcd::EtcdTls {
            ca: "/ca.pem".into(),
            client: None,
        };
        assert!(StateConfig::Memory.with_tls(Some(tls.clone())).is_err());
        assert!(matches!(
            StateConfig::parse("etcd://a:1", "/t/").and_then(|s| s.with_tls(Some(tls))),
            Ok(StateConfig::Etcd { tls: Some(_), .. })
        ));
        for bad in ["etcd://", "etcd://hostonly", "redis://a:1", ""] {
            assert!(StateConfig::parse(bad, "/t/").is_err(), "{bad}");
        }
    }

    #[test]
    fn config_validation() {
        assert!(CoordinatorConfig::default().validate().is_ok());
        let zero = CoordinatorConfig {
            heartbeat_interval: Duration::ZERO,
            ..CoordinatorConfig::default()
        };
        assert!(zero.validate().is_err());
        let short = CoordinatorConfig {
            expiry: Duration::from_millis(1000),
            ..CoordinatorConfig::default()
        };
        assert!(short.validate().is_err());
        assert_eq!(
            CoordinatorConfig::default().sweep_interval(),
            Duration::from_millis(1250)
        );
    }
}
