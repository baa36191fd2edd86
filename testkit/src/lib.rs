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
//!
//! Besides the sandbox it holds the small helpers the acceptance tests share: reading a
//! range through the cache and checking it against a [`GeneratedObject`]
//! ([`read_through`], [`ReadOutcome::check`], [`expected`]), the allocated size of a
//! cache folder ([`allocated_bytes`]), a raw data-plane connection for hostile and
//! pipelined frames ([`raw::RawConnection`]), and the `talon-worker` binary run as a real
//! process against the sandbox ([`WorkerProcess`]), and signed `aws-chunked` uploads
//! with their spoilt variants for every server that verifies uploads
//! ([`signed_upload`]). The origin client's one conformance suite
//! ([`origin_conformance`]) runs against the stub and against servers nobody here wrote,
//! started as processes by [`independent_origins`] (moto's S3 server, Azurite).

pub mod credential_endpoints;
pub mod etcd;
pub mod fault_proxy;
pub mod independent_origins;
pub mod origin_conformance;
pub mod raw;
pub mod signed_upload;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use talon_cache_client::{CacheClient, CacheClientConfig, CacheClientError};
use talon_coordinator::{CoordinatorConfig, RunningCoordinator};
use talon_coordinator_client::placement::RendezvousPlacement;
use talon_core::Backend;
use talon_core::cluster_auth::{ClusterSecret, Role};
use talon_core::{BlockGeometry, BlockId, ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
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
    /// Whether workers offer their local socket (`<cache dir>/local.sock`), which this
    /// process's cache clients then use for cached reads (the co-located fast path, as
    /// under `talon up`). Off: every read goes over the TCP data plane. The default is
    /// [`LOCAL_SOCKETS_ENV`]'s: `scripts/test.sh` runs the suite once over TCP (the
    /// default plane) and once over the local sockets (with the Tokio plane forced).
    pub local_sockets: bool,
    /// Each worker's zone, by index (a worker past the end declares none).
    pub zones: Vec<String>,
    /// Where the coordinator keeps its state (memory, or a test's etcd).
    pub coordinator_state: talon_coordinator::StateConfig,
    /// Each worker's per-prefix limit on its origin requests (its own, as a
    /// process's); none by default.
    pub origin_request_limit: Option<talon_protocols::origin::request_limit::RequestLimit>,
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
            local_sockets: local_sockets_by_default(),
            zones: Vec::new(),
            coordinator_state: talon_coordinator::StateConfig::Memory,
            origin_request_limit: None,
        }
    }
}

/// Set to `1` to make clusters offer local sockets by default ([`ClusterConfig::local_sockets`]).
pub const LOCAL_SOCKETS_ENV: &str = "TALON_TEST_LOCAL_SOCKETS";

fn local_sockets_by_default() -> bool {
    std::env::var(LOCAL_SOCKETS_ENV).is_ok_and(|v| v.trim() == "1")
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
    /// The cluster secret as a worker process reads it (`TALON_CLUSTER_SECRET`).
    secret_text: String,
    _dirs: tempfile::TempDir,
}

/// 128 random bits for names and secrets in tests (std's randomly keyed hasher).
fn rand_u128() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let half = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u8(0);
        u128::from(h.finish())
    };
    (half() << 64) | half()
}

/// Set by the test runner (scripts/test.sh) to the data plane every worker of this run
/// must serve on: `io_uring`, `tokio`, or `default` (io_uring where the probe passes,
/// else tokio). The conformance suite runs once per plane; this makes a run that
/// silently served on the other plane fail instead of passing twice on one.
pub const EXPECT_DATA_PLANE_ENV: &str = "TALON_TEST_EXPECT_DATA_PLANE";

/// The plane [`EXPECT_DATA_PLANE_ENV`] asks for, resolved; `None` when unset.
pub fn expected_data_plane() -> Option<&'static str> {
    match std::env::var(EXPECT_DATA_PLANE_ENV).ok()?.as_str() {
        "io_uring" => Some("io_uring"),
        "tokio" => Some("tokio"),
        "default" => {
            let forced = talon_worker::data_plane::PlaneRequest::from_env()
                == talon_worker::data_plane::PlaneRequest::ForceTokio;
            if forced || talon_worker::data_plane::probe_io_uring().is_err() {
                Some("tokio")
            } else {
                Some("io_uring")
            }
        }
        other => panic!("{EXPECT_DATA_PLANE_ENV}={other}: expected io_uring, tokio or default"),
    }
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

/// Origin clients for both of `origin`'s protocols, signed with the sandbox's keys.
fn origins_of(origin: &talon_origin_stub::RunningStub) -> Origins {
    let s3 = OriginClient::new(OriginConfig::S3 {
        endpoint: origin.s3_url().unwrap_or_default(),
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
        endpoint: origin.azure_url().unwrap_or_default(),
        account: talon_origin_stub::DEFAULT_AZURE_ACCOUNT.into(),
        key: AccountKey::from_base64(EMULATOR_AZURE_KEY).ok(),
        sas: None,
    })
    .ok()
    .map(|c| (talon_origin_stub::DEFAULT_AZURE_ACCOUNT.to_owned(), c));
    Origins { s3, azure }
}

/// The coordinator of a sandbox: its timings and state, warm jobs listed at `origins`.
fn coordinator_config(
    config: &ClusterConfig,
    cluster_secret: ClusterSecret,
    origins: Origins,
) -> CoordinatorConfig {
    CoordinatorConfig {
        cluster_secret,
        heartbeat_interval: config.heartbeat_interval,
        expiry: config.expiry,
        state: config.coordinator_state.clone(),
        origins: Some(origins),
        ..CoordinatorConfig::default()
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
        let secret_text = format!("testkit-cluster-{:032x}", rand_u128());
        let cluster_secret = ClusterSecret::new(secret_text.as_bytes())
            .unwrap_or_else(|e| panic!("cluster secret: {e}"));
        let coordinator = talon_coordinator::start(coordinator_config(
            &config,
            cluster_secret,
            origins_of(&origin),
        ))
        .await
        .unwrap_or_else(|e| panic!("coordinator: {e}"));
        let mut cluster = Cluster {
            secret_text,
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
        origins_of(&self.origin)
    }

    fn worker_config(&self, i: usize) -> WorkerConfig {
        let slot = &self.workers[i];
        WorkerConfig {
            // No pin of the worker's own; the cluster's pins may hold half.
            pins: talon_worker::block_store::Pins::new(Vec::new(), 0.5, self.config.capacity_bytes),
            listen: "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")),
            admin_listen: None,
            cache_dir: slot.cache_dir.clone(),
            capacity_bytes: self.config.capacity_bytes,
            page_size: self.config.geometry.page_size(),
            origins: match self.config.origin_request_limit {
                Some(limit) => self.origins().with_request_limit(limit),
                None => self.origins(),
            },
            stat_ttl: self.config.stat_ttl,
            negative_stat_ttl: self.config.stat_ttl,
            metadata: talon_worker::origins::DEFAULT_STAT_CACHE_LIMITS,
            loader: self.config.loader.clone(),
            data_plane: DataPlaneConfig {
                frame_timeout: Duration::from_secs(2),
                ..DataPlaneConfig::default()
            },
            cluster_secret: self.cluster_secret().clone(),
            open_files: None,
            max_blocks: talon_worker::block_store::DEFAULT_MAX_BLOCKS,
            local_socket: self
                .config
                .local_sockets
                .then(|| slot.cache_dir.join("local.sock")),
            membership: Some(MembershipConfig {
                coordinator_url: self.coordinator.url(),
                id: slot.id.clone(),
                advertise_addr: None,
                weight: 1,
                zone: self.config.zones.get(i).cloned().unwrap_or_default(),
                heartbeat_interval: self.config.heartbeat_interval,
            }),
        }
    }

    /// Adds a worker (a new slot with its own folder) that advertises `advertise_addr`
    /// as its data plane, e.g. a [`fault_proxy::FaultProxy`] in front of it, starts it
    /// and waits until it is live. Returns its slot and its real data-plane address.
    ///
    /// # Panics
    /// When it fails to start.
    pub async fn add_worker_advertising(
        &mut self,
        advertise_addr: std::net::SocketAddr,
    ) -> (usize, std::net::SocketAddr) {
        let i = self.workers.len();
        self.workers.push(WorkerSlot {
            id: format!("w{i}"),
            cache_dir: self._dirs.path().join(format!("worker-{i}")),
            running: None,
        });
        let mut config = self.worker_config(i);
        if let Some(m) = &mut config.membership {
            m.advertise_addr = Some(advertise_addr.to_string());
        }
        let worker = talon_worker::start(config)
            .await
            .unwrap_or_else(|e| panic!("worker {i}: {e}"));
        let real = worker.addr;
        self.workers[i].running = Some(worker);
        self.wait_for_live(i + 1).await;
        (i, real)
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
        if let Some(expected) = expected_data_plane() {
            assert_eq!(
                worker.plane.name(),
                expected,
                "worker {i} serves on the wrong data plane ({EXPECT_DATA_PLANE_ENV})"
            );
        }
        self.workers[i].running = Some(worker);
    }

    /// Kills worker `i` at once: no drain, no goodbye to the coordinator, open
    /// connections cut (what a crash looks like to everyone else).
    ///
    /// Unlike a real crash, work the worker had already spawned (a request's origin
    /// fetch and its write to the cache folder) may still finish in the background:
    /// restart a worker on its folder only once no read was in flight on it, or use
    /// [`WorkerProcess`] for a real crash.
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
        let secret = self.cluster_secret().clone();
        wait_for(
            &format!("{n} live workers"),
            Duration::from_secs(10),
            || {
                let (url, secret) = (url.clone(), secret.clone());
                async move {
                    let client = talon_coordinator_client::client::CoordinatorClient::new(url)
                        .ok()?
                        .with_auth(secret.clone(), Role::Reader);
                    let members = client.members().await.ok()?;
                    (members.placement().len() == n).then_some(())
                }
            },
        )
        .await;
    }

    /// Another coordinator of this cluster (same secret, state and origins): with
    /// [`ClusterConfig::coordinator_state`] on etcd, it serves the same cluster; the
    /// workers keep heartbeating to the first.
    ///
    /// # Panics
    /// When it cannot start.
    pub async fn start_coordinator(&self) -> RunningCoordinator {
        talon_coordinator::start(coordinator_config(
            &self.config,
            self.cluster_secret().clone(),
            self.origins(),
        ))
        .await
        .unwrap_or_else(|e| panic!("coordinator: {e}"))
    }

    /// The cluster secret the coordinator and the workers require.
    pub fn cluster_secret(&self) -> &ClusterSecret {
        self.coordinator.cluster_secret()
    }

    /// The cluster secret as text, for processes that read `TALON_CLUSTER_SECRET`.
    pub fn cluster_secret_text(&self) -> &str {
        &self.secret_text
    }

    /// A coordinator client signing as `role`.
    ///
    /// # Panics
    /// When the client cannot be built.
    pub fn coordinator_client(
        &self,
        role: Role,
    ) -> talon_coordinator_client::client::CoordinatorClient {
        talon_coordinator_client::client::CoordinatorClient::new(self.coordinator.url())
            .unwrap_or_else(|e| panic!("coordinator client: {e}"))
            .with_auth(self.cluster_secret().clone(), role)
    }

    /// A cache client of this cluster.
    ///
    /// # Panics
    /// When it cannot connect.
    pub async fn client(&self) -> CacheClient {
        self.client_with(|_| {}).await
    }

    /// A cache client of this cluster, its configuration adjusted by `adjust` first.
    ///
    /// It holds no handed-over block file (`held_files.hold` zero): these suites check
    /// the workers, so every piece is asked of one, on TCP and on the local socket
    /// alike; a test of the held files sets a hold itself.
    ///
    /// # Panics
    /// When it cannot connect.
    pub async fn client_with(&self, adjust: impl FnOnce(&mut CacheClientConfig)) -> CacheClient {
        let mut config = CacheClientConfig::new(
            self.coordinator.url(),
            self.config.geometry,
            self.cluster_secret().clone(),
        );
        config.held_files.hold = Duration::ZERO;
        config.membership_refresh = Duration::from_millis(100);
        config.max_request_bytes = self.config.geometry.block_size();
        if self.config.origin_fallback {
            config.origin_fallback = Some(self.origins());
        }
        adjust(&mut config);
        CacheClient::connect(config)
            .await
            .unwrap_or_else(|e| panic!("cache client: {e}"))
    }

    /// GetObject requests the origin has served over S3.
    pub fn origin_gets(&self) -> u64 {
        self.origin.metrics().requests_of(Backend::S3, "GetObject")
            + self.origin.metrics().requests_of(Backend::Azure, "GetBlob")
    }

    /// HEAD requests the origin has served.
    pub fn origin_heads(&self) -> u64 {
        self.origin.metrics().requests_of(Backend::S3, "HeadObject")
            + self
                .origin
                .metrics()
                .requests_of(Backend::Azure, "GetBlobProperties")
    }

    /// The sandbox's configuration.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }
}

impl Cluster {
    /// The running worker `i`.
    ///
    /// # Panics
    /// When worker `i` is stopped.
    pub fn worker(&self, i: usize) -> &RunningWorker {
        self.workers[i]
            .running
            .as_ref()
            .unwrap_or_else(|| panic!("worker {i} is not running"))
    }

    /// The index of the worker slot whose membership id is `id`.
    ///
    /// # Panics
    /// When no slot has that id.
    pub fn worker_index(&self, id: &str) -> usize {
        self.workers
            .iter()
            .position(|w| w.id == id)
            .unwrap_or_else(|| panic!("no worker slot has the id {id}"))
    }

    /// The coordinator's placement now (live members only), as a cache client builds it.
    ///
    /// # Panics
    /// When the coordinator cannot be reached.
    pub async fn placement(&self) -> RendezvousPlacement {
        self.coordinator_client(Role::Reader)
            .members()
            .await
            .unwrap_or_else(|e| panic!("members: {e}"))
            .placement()
    }

    /// Refreshes `client`'s membership until its epoch is the coordinator's (after a
    /// worker was dropped or came back), so its next reads go to the current owners.
    ///
    /// # Panics
    /// After 10 s.
    pub async fn sync_client(&self, client: &CacheClient) {
        wait_for(
            "the client's membership to reach the coordinator's epoch",
            Duration::from_secs(10),
            || async {
                let epoch = self.placement().await.epoch();
                client.refresh_membership().await;
                (client.epoch() == epoch).then_some(())
            },
        )
        .await;
    }

    /// The id of block `block_offset` of `object` at `version`, in this cluster's
    /// geometry.
    ///
    /// # Panics
    /// When the offset is not a block boundary.
    pub fn block_id(
        &self,
        object: &ObjectId,
        version: &ObjectVersion,
        block_offset: u64,
    ) -> BlockId {
        BlockId::new(
            object.clone(),
            version.clone(),
            block_offset,
            self.config.geometry.block_size(),
        )
        .unwrap_or_else(|e| panic!("block id: {e}"))
    }

    /// Where worker `i` keeps the bytes of `block`
    /// (`<cache_dir>/blocks/<storage name>.blk`).
    pub fn block_file(&self, i: usize, block: &BlockId) -> PathBuf {
        self.workers[i]
            .cache_dir
            .join("blocks")
            .join(format!("{}.blk", block.storage_name()))
    }

    /// The value of the Prometheus metric `name` (e.g. `talon_worker_fills_in_flight`)
    /// of the running worker `i`.
    ///
    /// # Panics
    /// When the worker is stopped or has no such metric.
    pub fn worker_metric(&self, i: usize, name: &str) -> f64 {
        let w = self.worker(i);
        let text = w.metrics_text();
        metric(&text, name).unwrap_or_else(|| panic!("worker {i} has no metric {name}"))
    }

    /// Waits until no running worker has a fill in flight, so that pages reads were
    /// answered with are written behind and present (see
    /// [`WorkerProcess::fills_settled`]).
    ///
    /// # Panics
    /// When fills are still in flight after 10 s.
    pub async fn fills_settled(&self) {
        for i in 0..self.workers.len() {
            if self.workers[i].running.is_none() {
                continue;
            }
            wait_for(
                "the workers' fills to settle",
                Duration::from_secs(10),
                || async {
                    (self.worker_metric(i, "talon_worker_fills_in_flight") == 0.0).then_some(())
                },
            )
            .await;
        }
    }

    /// Body bytes the origin has sent in GET answers (S3 and Azure), from its metrics.
    pub fn origin_get_bytes(&self) -> u64 {
        self.origin
            .metrics()
            .render()
            .lines()
            .filter(|l| l.starts_with("talon_origin_get_bytes_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }
}

/// The value of the unlabelled sample `name` in a Prometheus text exposition.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The body of a plain HTTP/1.1 GET of `url` (`http://host:port/path`), for admin
/// endpoints.
///
/// # Panics
/// On any failure, or after 5 s.
pub async fn http_get(url: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("not an http URL: {url}"));
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(host).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        std::io::Result::Ok(out)
    };
    let raw = tokio::time::timeout(Duration::from_secs(5), fetch)
        .await
        .unwrap_or_else(|_| panic!("GET {url} timed out"))
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let text = String::from_utf8_lossy(&raw).into_owned();
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "GET {url}: {}",
        text.lines().next().unwrap_or_default()
    );
    text.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

/// The bytes `range` of a generated object, as the origin serves them.
pub fn expected(object: &GeneratedObject, range: Range<u64>) -> Vec<u8> {
    let len = usize::try_from(range.end - range.start).unwrap_or_else(|e| panic!("{e}"));
    let mut buf = vec![0u8; len];
    object.fill(range.start, &mut buf);
    buf
}

/// What one read through the cache delivered: the bytes received, in order, and the
/// error that ended the stream, if one did.
#[derive(Debug)]
pub struct ReadOutcome {
    /// Every byte the stream yielded before it ended.
    pub bytes: Vec<u8>,
    /// The error that ended it (`None`: the stream ended cleanly).
    pub error: Option<CacheClientError>,
}

impl ReadOutcome {
    /// Checks the property every read must have: the bytes received are a prefix of
    /// `expected`, and a stream that ended without an error delivered all of it (never
    /// wrong bytes, never short bytes reported as success). Returns whether the read
    /// succeeded.
    ///
    /// # Panics
    /// When the property does not hold.
    pub fn check(&self, expected: &[u8], what: &str) -> bool {
        assert!(
            self.bytes.len() <= expected.len(),
            "{what}: {} bytes received for a range of {}",
            self.bytes.len(),
            expected.len()
        );
        if let Some(at) = first_difference(&self.bytes, expected) {
            panic!(
                "{what}: wrong byte at offset {at} of the range ({} bytes received, error: {:?})",
                self.bytes.len(),
                self.error
            );
        }
        if self.error.is_none() {
            assert_eq!(
                self.bytes.len(),
                expected.len(),
                "{what}: the stream ended without an error after {} of {} bytes",
                self.bytes.len(),
                expected.len()
            );
            true
        } else {
            false
        }
    }

    /// The bytes, asserting the read succeeded.
    ///
    /// # Panics
    /// When it failed.
    pub fn unwrap(self, what: &str) -> Vec<u8> {
        if let Some(e) = &self.error {
            panic!("{what}: read failed after {} bytes: {e}", self.bytes.len());
        }
        self.bytes
    }
}

fn first_difference(got: &[u8], expected: &[u8]) -> Option<usize> {
    got.iter().zip(expected).position(|(a, b)| a != b)
}

/// Reads `range` of an object of `size` bytes at `version` through `client`, collecting
/// the stream; a request refused before streaming counts as an error with no bytes.
pub async fn read_through(
    client: &CacheClient,
    object: &ObjectId,
    version: &ObjectVersion,
    size: u64,
    range: Range<u64>,
) -> ReadOutcome {
    let mut stream = match client.read_range(object, version, size, range) {
        Ok(s) => s,
        Err(e) => {
            return ReadOutcome {
                bytes: Vec::new(),
                error: Some(e),
            };
        }
    };
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => bytes.extend_from_slice(&c),
            Err(e) => {
                return ReadOutcome {
                    bytes,
                    error: Some(e),
                };
            }
        }
    }
    ReadOutcome { bytes, error: None }
}

/// Shared by the readers of a crash test: counts the bytes they received and the reads
/// that finished, and holds the readers told to pause (after some bytes) until
/// [`Gate::open`], so a test can act while they are certainly mid-stream.
#[derive(Debug, Clone)]
pub struct Gate {
    received: Arc<AtomicU64>,
    waiting: Arc<AtomicUsize>,
    finished: Arc<AtomicUsize>,
    open: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Gate {
        Gate {
            received: Arc::default(),
            waiting: Arc::default(),
            finished: Arc::default(),
            open: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }

    /// Bytes received by every reader so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::SeqCst)
    }

    /// Readers waiting at the gate now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Reads that have ended (successfully or not).
    pub fn finished(&self) -> usize {
        self.finished.load(Ordering::SeqCst)
    }

    /// Lets the waiting readers (and any that reach their pause later) go on.
    pub fn open(&self) {
        self.open.send_replace(true);
    }
}

/// Reads the whole of the generated S3 object `object` through `client` at its version
/// and checks every byte against it; panics naming `what` on an error or a wrong byte.
pub async fn read_whole_checked(client: &CacheClient, object: &GeneratedObject, what: &str) {
    let id = ObjectId::s3(object.bucket.clone(), object.key.clone())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let version =
        ObjectVersion::from_etag(&object.etag()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let bytes = read_through(client, &id, &version, object.size, 0..object.size)
        .await
        .unwrap(what);
    assert!(
        bytes == expected(object, 0..object.size),
        "{what}: wrong bytes"
    );
}

/// [`read_through`], counting into `gate`, and, with `pause_after`, stopping once at
/// least that many bytes were received until the gate opens.
pub async fn read_through_gated(
    client: &CacheClient,
    object: &ObjectId,
    version: &ObjectVersion,
    size: u64,
    range: Range<u64>,
    gate: &Gate,
    pause_after: Option<u64>,
) -> ReadOutcome {
    let outcome = async {
        let mut stream = match client.read_range(object, version, size, range) {
            Ok(s) => s,
            Err(e) => {
                return ReadOutcome {
                    bytes: Vec::new(),
                    error: Some(e),
                };
            }
        };
        let mut bytes = Vec::new();
        let mut pause_after = pause_after;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(c) => {
                    bytes.extend_from_slice(&c);
                    gate.received.fetch_add(c.len() as u64, Ordering::SeqCst);
                }
                Err(e) => {
                    return ReadOutcome {
                        bytes,
                        error: Some(e),
                    };
                }
            }
            if pause_after.is_some_and(|p| bytes.len() as u64 >= p) {
                pause_after = None;
                let mut open = gate.open.subscribe();
                gate.waiting.fetch_add(1, Ordering::SeqCst);
                let _ = open.wait_for(|o| *o).await;
                gate.waiting.fetch_sub(1, Ordering::SeqCst);
            }
        }
        ReadOutcome { bytes, error: None }
    }
    .await;
    gate.finished.fetch_add(1, Ordering::SeqCst);
    outcome
}

/// Reads `range` of the generated `object` (at its generated version) through `client`
/// and asserts every byte equals the origin's.
///
/// # Panics
/// When the read fails or any byte differs.
pub async fn assert_reads_back(
    client: &CacheClient,
    id: &ObjectId,
    object: &GeneratedObject,
    range: Range<u64>,
) {
    let version = ObjectVersion::from_etag(&object.etag()).unwrap_or_else(|e| panic!("{e}"));
    let what = format!("{id} bytes {range:?}");
    let outcome = read_through(client, id, &version, object.size, range.clone()).await;
    assert!(
        outcome.check(&expected(object, range), &what),
        "{what}: read failed: {:?}",
        outcome.error
    );
}

/// The bytes allocated on disk (`st_blocks * 512`, what `du` counts) by the files under
/// `dir`, recursively; 0 for a missing folder. Files that vanish while it walks (an
/// eviction, a metadata rename) are skipped.
pub fn allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0;
    for entry in entries.flatten() {
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if meta.is_dir() {
            total += allocated_bytes(&entry.path());
        } else {
            total += meta.blocks() * 512;
        }
    }
    total
}

/// The `talon-worker` binary of this build: next to the test executable's folder
/// (`target/<profile>/`), else under the workspace's `target/debug/`.
///
/// # Panics
/// When it has not been built, saying how to build it.
pub fn worker_binary() -> PathBuf {
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(profile_dir) = exe.parent().and_then(Path::parent)
    {
        candidates.push(profile_dir.join("talon-worker"));
    }
    candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/talon-worker"));
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "the talon-worker binary is not built (looked at {candidates:?}); \
                 build it first with `cargo build -p talon-worker` \
                 (scripts/test.sh builds every binary)"
            )
        })
}

/// A cluster (origin stub, coordinator) whose one worker is a `talon-worker` process
/// with its cache in `cache_dir`, started with `env` and its log kept
/// ([`WorkerProcess::start_logged`]), listed by the coordinator, and a client that
/// knows it: for tests that arm one of the worker's hooks or look at its disk.
///
/// # Panics
/// As [`Cluster::start`] and [`WorkerProcess::start`].
pub async fn cluster_of_one_worker_process(
    generated: Vec<GeneratedObject>,
    cache_dir: &Path,
    env: &[(&str, &str)],
) -> (Cluster, WorkerProcess, CacheClient) {
    let cluster = Cluster::start(ClusterConfig {
        workers: 0,
        generated,
        local_sockets: false,
        ..ClusterConfig::default()
    })
    .await;
    let process = WorkerProcess::start_logged(&cluster, "w0", cache_dir, &[], env).await;
    cluster.wait_for_live(1).await;
    let client = cluster.client().await;
    cluster.sync_client(&client).await;
    (cluster, process, client)
}

/// A `talon-worker` process started from the binary against a sandbox. Dropping it
/// kills the process.
#[derive(Debug)]
pub struct WorkerProcess {
    /// The worker's id in the membership.
    pub id: String,
    /// Its data-plane address, from its ready file.
    pub addr: String,
    /// Its cache folder.
    pub cache_dir: PathBuf,
    /// Its admin base URL (`http://addr`), from its ready file.
    pub admin_url: String,
    /// The data plane it serves on (`io_uring` or `tokio`), from its ready file.
    pub data_plane: String,
    child: Child,
}

impl WorkerProcess {
    /// Starts the binary as worker `id` of `cluster` (same geometry, budget, heartbeat
    /// and TTLs as the in-process workers; both origins; data plane on a free loopback
    /// port; admin on another) with its cache under `cache_dir`, and waits for its
    /// ready file. Does not wait for the coordinator to list it.
    ///
    /// # Panics
    /// When the binary is missing or the process does not become ready in 20 s.
    pub async fn start(cluster: &Cluster, id: &str, cache_dir: &Path) -> WorkerProcess {
        WorkerProcess::start_with(cluster, id, cache_dir, &[], &[], false, None).await
    }

    /// [`WorkerProcess::start_logged`] under an open-files limit of `open_files` (soft
    /// and hard, set by util-linux's `prlimit` before the binary runs).
    ///
    /// # Panics
    /// As [`WorkerProcess::start`]; when `/usr/bin/prlimit` is missing.
    pub async fn start_limited(
        cluster: &Cluster,
        id: &str,
        cache_dir: &Path,
        open_files: u64,
    ) -> WorkerProcess {
        WorkerProcess::start_with(
            cluster,
            id,
            cache_dir,
            &[],
            &[],
            true,
            Some((open_files, open_files)),
        )
        .await
    }

    /// [`WorkerProcess::start_logged`] with `args`, under a soft open-files limit of
    /// `soft` and a hard one of `hard` (set by `prlimit`).
    ///
    /// # Panics
    /// As [`WorkerProcess::start_limited`].
    pub async fn start_with_limits(
        cluster: &Cluster,
        id: &str,
        cache_dir: &Path,
        args: &[&str],
        (soft, hard): (u64, u64),
    ) -> WorkerProcess {
        WorkerProcess::start_with(cluster, id, cache_dir, args, &[], true, Some((soft, hard))).await
    }

    /// [`WorkerProcess::start`] with more arguments and environment variables, and
    /// the process's standard error written to [`WorkerProcess::log_path`] instead of
    /// this test's (read it with [`WorkerProcess::log`]).
    ///
    /// # Panics
    /// As [`WorkerProcess::start`].
    pub async fn start_logged(
        cluster: &Cluster,
        id: &str,
        cache_dir: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> WorkerProcess {
        WorkerProcess::start_with(cluster, id, cache_dir, args, env, true, None).await
    }

    /// Where [`WorkerProcess::start_logged`] writes the process's log.
    pub fn log_path(&self) -> PathBuf {
        self.cache_dir.with_extension("log")
    }

    /// The log written so far ([`WorkerProcess::start_logged`] only).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    async fn start_with(
        cluster: &Cluster,
        id: &str,
        cache_dir: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        logged: bool,
        open_files: Option<(u64, u64)>,
    ) -> WorkerProcess {
        let binary = worker_binary();
        let config = cluster.config();
        std::fs::create_dir_all(cache_dir).unwrap_or_else(|e| panic!("cache folder: {e}"));
        let ready = cache_dir.with_extension("ready.json");
        let _ = std::fs::remove_file(&ready);
        let mut cmd = match open_files {
            Some((soft, hard)) => {
                let prlimit = Path::new("/usr/bin/prlimit");
                assert!(
                    prlimit.exists(),
                    "prlimit is required: apt-get install util-linux"
                );
                let mut cmd = Command::new(prlimit);
                cmd.arg(format!("--nofile={soft}:{hard}"))
                    .arg("--")
                    .arg(&binary);
                cmd
            }
            None => Command::new(&binary),
        };
        cmd.env_clear()
            .env("TALON_LOG", "warn")
            .env("TALON_CLUSTER_SECRET", &cluster.secret_text)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .args(["--admin-listen", "127.0.0.1:0"])
            .arg("--cache-dir")
            .arg(cache_dir)
            .arg("--capacity")
            .arg(config.capacity_bytes.to_string())
            .arg("--page-size")
            .arg(config.geometry.page_size().to_string())
            .arg("--coordinator")
            .arg(cluster.coordinator.url())
            .args(["--id", id])
            .arg("--heartbeat-interval-ms")
            .arg(config.heartbeat_interval.as_millis().to_string())
            .arg("--s3-endpoint")
            .arg(cluster.origin.s3_url().unwrap_or_default())
            .args(["--s3-access-key", ACCESS_KEY, "--s3-secret-key", SECRET_KEY])
            .arg("--azure-endpoint")
            .arg(cluster.origin.azure_url().unwrap_or_default())
            .args(["--azure-account", talon_origin_stub::DEFAULT_AZURE_ACCOUNT])
            .args(["--azure-key", EMULATOR_AZURE_KEY])
            .arg("--stat-ttl-ms")
            .arg(config.stat_ttl.as_millis().to_string())
            .arg("--negative-stat-ttl-ms")
            .arg(config.stat_ttl.as_millis().to_string())
            .arg("--readahead-pages")
            .arg(config.loader.readahead_pages.to_string())
            .arg("--max-fill-pages")
            .arg(config.loader.max_fill_pages.to_string())
            .args(["--frame-timeout-ms", "2000"])
            .arg("--ready-file")
            .arg(&ready)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // The escape hatch reaches the process too, so a suite run on the Tokio plane
        // runs its worker processes on it.
        if let Ok(v) = std::env::var(talon_worker::data_plane::FORCE_TOKIO_ENV) {
            cmd.env(talon_worker::data_plane::FORCE_TOKIO_ENV, v);
        }
        cmd.args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        if logged {
            let log = std::fs::File::create(cache_dir.with_extension("log"))
                .unwrap_or_else(|e| panic!("log file: {e}"));
            cmd.env("TALON_LOG", "info").stderr(Stdio::from(log));
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        let mut process = WorkerProcess {
            id: id.to_owned(),
            addr: String::new(),
            cache_dir: cache_dir.to_owned(),
            admin_url: String::new(),
            data_plane: String::new(),
            child,
        };
        let (addr, admin, plane) = wait_for(
            "the talon-worker process's ready file",
            Duration::from_secs(20),
            || {
                let exited = process.child.try_wait().ok().flatten();
                let ready = ready.clone();
                async move {
                    if let Some(status) = exited {
                        panic!("talon-worker exited before it was ready: {status}");
                    }
                    let text = std::fs::read(&ready).ok()?;
                    let json: serde_json::Value = serde_json::from_slice(&text).ok()?;
                    let addr = json.get("addr")?.as_str()?.to_owned();
                    let admin = json.get("admin")?.as_str()?.to_owned();
                    let plane = json.get("data_plane")?.as_str()?.to_owned();
                    Some((addr, admin, plane))
                }
            },
        )
        .await;
        if env.is_empty()
            && let Some(expected) = expected_data_plane()
        {
            assert_eq!(
                plane, expected,
                "talon-worker {id} serves on the wrong data plane"
            );
        }
        process.addr = addr;
        process.admin_url = admin;
        process.data_plane = plane;
        process
    }

    /// The value of the Prometheus metric `name` on the process's `/metrics`.
    ///
    /// # Panics
    /// When the endpoint cannot be read or does not carry the metric.
    pub async fn metric(&self, name: &str) -> f64 {
        let text = http_get(&format!("{}/metrics", self.admin_url)).await;
        metric(&text, name).unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
    }

    /// Waits until no fill is in flight, so that pages a read was answered with are
    /// written behind and present (the worker answers a cold read before its pages
    /// are durable): a read after this of those pages is a hit.
    ///
    /// # Panics
    /// When fills are still in flight after 10 s.
    pub async fn fills_settled(&self) {
        wait_for(
            "the worker's fills to settle",
            Duration::from_secs(10),
            || async { (self.metric("talon_worker_fills_in_flight").await == 0.0).then_some(()) },
        )
        .await;
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process with SIGKILL (no drain, no goodbye) and reaps it.
    ///
    /// # Panics
    /// When it cannot be killed.
    pub fn kill(&mut self) {
        self.child
            .kill()
            .unwrap_or_else(|e| panic!("SIGKILL talon-worker: {e}"));
        let _ = self.child.wait();
    }

    /// Whether the process has exited.
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if !self.has_exited() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
