//! `talon-testkit`: a cluster sandbox for tests.
//!
//! [`Cluster::start`] starts, in this process and on loopback, an origin stub (S3 and
//! Azure over generated objects), a coordinator and N workers with their own cache
//! folders, and returns once every worker is live in the coordinator's membership: it
//! waits on that condition, never on a sleep. Tests then read through
//! [`Cluster::client`], kill and restart workers, and check the origin's counters to
//! prove what reached it. Every integration test of the cluster, and later the
//! gateway's, uses it.
//!
//! It owns nothing of production; it is a dev-dependency only.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use talon_cache_client::{CacheClient, CacheClientConfig};
use talon_coordinator::{CoordinatorConfig, RunningCoordinator};
use talon_core::BlockGeometry;
use talon_origin_stub::generated::GeneratedObject;
use talon_origin_stub::metrics::Protocol;
use talon_origin_stub::{EMULATOR_AZURE_KEY, RunningStub, StubConfig};
use talon_protocols::azure::shared_key::AccountKey;
use talon_protocols::origin::{OriginClient, OriginConfig, Origins};
use talon_protocols::s3::sigv4::S3Credentials;
use talon_worker::data_plane::DataPlaneConfig;
use talon_worker::loader::LoaderConfig;
use talon_worker::service::MembershipConfig;
use talon_worker::{RunningWorker, WorkerConfig};

/// The S3 credentials of the sandbox's origin.
pub const ACCESS_KEY: &str = "TESTKITACCESSKEY";
/// The S3 secret of the sandbox's origin.
pub const SECRET_KEY: &str = "testkit-secret";

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Number of workers.
    pub workers: usize,
    /// Block and page sizes (small in tests).
    pub geometry: BlockGeometry,
    /// Byte budget of each worker.
    pub capacity_bytes: u64,
    /// Objects the origin generates.
    pub generated: Vec<GeneratedObject>,
    /// Heartbeat period of the workers.
    pub heartbeat_interval: Duration,
    /// The coordinator drops a worker silent for this long.
    pub expiry: Duration,
    /// Metadata TTL of the workers.
    pub stat_ttl: Duration,
    /// The workers' miss-path tuning.
    pub loader: LoaderConfig,
    /// Whether cache clients may fall back to the origin.
    pub origin_fallback: bool,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            workers: 3,
            geometry: BlockGeometry::new(256 << 10, 16 << 10).unwrap_or(BlockGeometry::DEFAULT),
            capacity_bytes: 64 << 20,
            generated: Vec::new(),
            heartbeat_interval: Duration::from_millis(100),
            expiry: Duration::from_millis(600),
            stat_ttl: Duration::from_millis(300),
            loader: LoaderConfig {
                retry_backoff: Duration::from_millis(5),
                ..LoaderConfig::default()
            },
            origin_fallback: false,
        }
    }
}

/// A worker slot: running, or stopped with its folder kept for a restart.
#[derive(Debug)]
pub struct WorkerSlot {
    /// The worker's id in the membership.
    pub id: String,
    /// Its cache folder (kept across restarts).
    pub cache_dir: PathBuf,
    /// The running worker, if any.
    pub running: Option<RunningWorker>,
}

/// A running sandbox.
#[derive(Debug)]
pub struct Cluster {
    /// The origin stub.
    pub origin: RunningStub,
    /// The coordinator.
    pub coordinator: RunningCoordinator,
    /// The workers.
    pub workers: Vec<WorkerSlot>,
    config: ClusterConfig,
    _dirs: tempfile::TempDir,
}

/// Polls `check` until it returns `Some`, failing after `timeout` with `what`.
///
/// # Panics
/// When the deadline passes: this is a test helper.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

impl Cluster {
    /// Starts the whole sandbox and waits until every worker is live.
    ///
    /// # Panics
    /// When anything fails to start: this is a test helper.
    pub async fn start(config: ClusterConfig) -> Cluster {
        let dirs = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let mut credentials = std::collections::BTreeMap::new();
        credentials.insert(ACCESS_KEY.to_owned(), SECRET_KEY.to_owned());
        let origin = talon_origin_stub::start(StubConfig {
            data_dir: Some(dirs.path().join("origin")),
            generated: config.generated.clone(),
            s3_credentials: credentials,
            azure_key: AccountKey::from_base64(EMULATOR_AZURE_KEY).ok(),
            ..StubConfig::default()
        })
        .await
        .unwrap_or_else(|e| panic!("origin stub: {e}"));
        let coordinator = talon_coordinator::start(CoordinatorConfig {
            heartbeat_interval: config.heartbeat_interval,
            expiry: config.expiry,
            ..CoordinatorConfig::default()
        })
        .await
        .unwrap_or_else(|e| panic!("coordinator: {e}"));
        let mut cluster = Cluster {
            origin,
            coordinator,
            workers: Vec::new(),
            config: config.clone(),
            _dirs: dirs,
        };
        for i in 0..config.workers {
            let slot = WorkerSlot {
                id: format!("w{i}"),
                cache_dir: cluster._dirs.path().join(format!("worker-{i}")),
                running: None,
            };
            cluster.workers.push(slot);
            cluster.start_worker(i).await;
        }
        cluster.wait_for_live(config.workers).await;
        cluster
    }

    /// Origin clients for the sandbox's stub (S3 with credentials, Azure with the key).
    pub fn origins(&self) -> Origins {
        let s3 = OriginClient::new(OriginConfig::S3 {
            endpoint: self.origin.s3_url().unwrap_or_default(),
            region: "us-east-1".into(),
            credentials: Some(S3Credentials {
                access_key: ACCESS_KEY.into(),
                secret_key: SECRET_KEY.into(),
                session_token: None,
            }),
            virtual_hosted: false,
        })
        .ok();
        let azure = OriginClient::new(OriginConfig::Azure {
            endpoint: self.origin.azure_url().unwrap_or_default(),
            account: talon_origin_stub::DEFAULT_AZURE_ACCOUNT.into(),
            key: AccountKey::from_base64(EMULATOR_AZURE_KEY).ok(),
            sas: None,
        })
        .ok()
        .map(|c| (talon_origin_stub::DEFAULT_AZURE_ACCOUNT.to_owned(), c));
        Origins { s3, azure }
    }

    fn worker_config(&self, i: usize) -> WorkerConfig {
        let slot = &self.workers[i];
        WorkerConfig {
            listen: "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")),
            admin_listen: None,
            cache_dir: slot.cache_dir.clone(),
            capacity_bytes: self.config.capacity_bytes,
            page_size: self.config.geometry.page_size(),
            origins: self.origins(),
            stat_ttl: self.config.stat_ttl,
            negative_stat_ttl: self.config.stat_ttl,
            loader: self.config.loader.clone(),
            data_plane: DataPlaneConfig {
                frame_timeout: Duration::from_secs(2),
                ..DataPlaneConfig::default()
            },
            membership: Some(MembershipConfig {
                coordinator_url: self.coordinator.url(),
                id: slot.id.clone(),
                advertise_addr: None,
                weight: 1,
                zone: String::new(),
                heartbeat_interval: self.config.heartbeat_interval,
            }),
        }
    }

    /// Starts (or restarts, on its kept folder) worker `i`.
    ///
    /// # Panics
    /// When it fails to start.
    pub async fn start_worker(&mut self, i: usize) {
        let config = self.worker_config(i);
        let worker = talon_worker::start(config)
            .await
            .unwrap_or_else(|e| panic!("worker {i}: {e}"));
        self.workers[i].running = Some(worker);
    }

    /// Kills worker `i` at once: no drain, no goodbye to the coordinator, open
    /// connections cut (what a crash looks like to everyone else).
    pub fn kill_worker(&mut self, i: usize) {
        if let Some(w) = self.workers[i].running.take() {
            w.abort();
        }
    }

    /// Waits until the coordinator lists exactly `n` live workers.
    ///
    /// # Panics
    /// After 10 s.
    pub async fn wait_for_live(&self, n: usize) {
        let url = self.coordinator.url();
        wait_for(
            &format!("{n} live workers"),
            Duration::from_secs(10),
            || {
                let url = url.clone();
                async move {
                    let client = talon_coordinator::client::CoordinatorClient::new(url).ok()?;
                    let members = client.members().await.ok()?;
                    (members.placement().len() == n).then_some(())
                }
            },
        )
        .await;
    }

    /// A cache client of this cluster.
    ///
    /// # Panics
    /// When it cannot connect.
    pub async fn client(&self) -> CacheClient {
        let mut config = CacheClientConfig::new(self.coordinator.url(), self.config.geometry);
        config.membership_refresh = Duration::from_millis(100);
        config.request_timeout = Duration::from_secs(5);
        config.max_request_bytes = self.config.geometry.block_size();
        if self.config.origin_fallback {
            config.origin_fallback = Some(self.origins());
        }
        CacheClient::connect(config)
            .await
            .unwrap_or_else(|e| panic!("cache client: {e}"))
    }

    /// GetObject requests the origin has served over S3.
    pub fn origin_gets(&self) -> u64 {
        self.origin.metrics().requests_of(Protocol::S3, "GetObject")
            + self
                .origin
                .metrics()
                .requests_of(Protocol::Azure, "GetBlob")
    }

    /// HEAD requests the origin has served.
    pub fn origin_heads(&self) -> u64 {
        self.origin
            .metrics()
            .requests_of(Protocol::S3, "HeadObject")
            + self
                .origin
                .metrics()
                .requests_of(Protocol::Azure, "GetBlobProperties")
    }

    /// The sandbox's configuration.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }
}
