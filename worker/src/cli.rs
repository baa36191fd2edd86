//! `talon worker` (and its alias, the `talon-worker` binary): one cache worker, from the
//! command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::data_plane::{DataPlaneConfig, PlaneRequest};
use crate::loader::LoaderConfig;
use crate::origins::Origins;
use crate::service::{MembershipConfig, WorkerConfig};
use anyhow::Context;
use talon_core::{parse_byte_size, parse_duration};
use talon_protocols::azure::shared_key::AccountKey;
use talon_protocols::origin_spec::{OriginSettings, OriginSpec};
use talon_protocols::s3::sigv4::S3Credentials;

/// A Talon cache worker: serves byte ranges of cached blocks from local disk with
/// sendfile, fetching absent pages from the origin.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Data-plane listen address (16-byte-frame protocol).
    #[arg(long, env = "TALON_WORKER_LISTEN", default_value = "127.0.0.1:7101")]
    listen: SocketAddr,
    /// Admin listen address (/metrics, /healthz, /readyz); "off" to disable.
    #[arg(
        long,
        env = "TALON_WORKER_ADMIN_LISTEN",
        default_value = "127.0.0.1:7201"
    )]
    admin_listen: String,
    /// Folder of the block store.
    #[arg(long, env = "TALON_WORKER_CACHE_DIR", default_value = "talon-cache")]
    cache_dir: PathBuf,
    /// Byte budget of the block store (bytes on disk, as du counts them), e.g. 64GiB.
    #[arg(long, env = "TALON_WORKER_CAPACITY", default_value = "64GiB", value_parser = parse_byte_size)]
    capacity: u64,
    /// The local socket for readers on this host (a gateway beside the worker): cached
    /// reads are answered with the block file's descriptor and the reader reads the
    /// bytes itself, so they cross no socket. "auto" = <cache-dir>/local.sock, "off" =
    /// none, or a path (at most 107 bytes once absolute). Same Hello and limits as the
    /// data plane; the socket file is owner-only.
    #[arg(long, env = "TALON_WORKER_LOCAL_SOCKET", default_value = "auto")]
    local_socket: String,
    /// Most cached blocks at once. Each is an open file (two once handed to a reader on
    /// this host), so the open-files limit lowers it (the worker raises its soft limit to
    /// the hard one at start, and says the blocks it plans for); a dataset of small
    /// objects is one block per object, so a million-object dataset on two workers
    /// wants 500,000 here and an open-files limit above a million.
    #[arg(long, env = "TALON_WORKER_MAX_BLOCKS", default_value_t = crate::block_store::DEFAULT_MAX_BLOCKS)]
    max_blocks: usize,
    /// Page size: the unit of presence and of origin fetches (power of two), e.g. 1MiB.
    /// Taken from the coordinator when left out (its --page-size; 1MiB standalone);
    /// given, it must equal the coordinator's: the worker refuses to start, or the
    /// coordinator refuses its registration.
    #[arg(long, env = "TALON_WORKER_PAGE_SIZE", value_parser = parse_byte_size)]
    page_size: Option<u64>,

    /// Coordinator URL (http://host:port); without it the worker runs standalone.
    #[arg(long, env = "TALON_WORKER_COORDINATOR")]
    coordinator: Option<String>,
    /// Unique worker id (default: worker-<data-plane port>).
    #[arg(long, env = "TALON_WORKER_ID")]
    id: Option<String>,
    /// Address readers use to reach the data plane (default: the bound address).
    #[arg(long, env = "TALON_WORKER_ADVERTISE_ADDR")]
    advertise_addr: Option<String>,
    /// Placement weight, proportional to capacity.
    #[arg(long, env = "TALON_WORKER_WEIGHT", default_value_t = 1)]
    weight: u32,
    /// Failure-domain label.
    #[arg(long, env = "TALON_WORKER_ZONE", default_value = "")]
    zone: String,
    /// Pin a prefix: blocks of objects whose key path starts with it (s3/BUCKET/PREFIX,
    /// az/ACCOUNT/CONTAINER/PREFIX) are passed over by eviction while the pinned blocks
    /// hold at most --pin-share of the capacity. Repeat or separate with commas. The
    /// cluster's pins (`talon pin`, the coordinator's PUT /v1/pins) come with each
    /// heartbeat and count against the same share.
    #[arg(long, env = "TALON_WORKER_PIN", value_delimiter = ',')]
    pin: Vec<String>,
    /// The share of --capacity pinned blocks (--pin and the cluster's pins) may hold
    /// (0 to 1); past it the oldest are evicted like any block.
    #[arg(long, env = "TALON_WORKER_PIN_SHARE", default_value_t = 0.5)]
    pin_share: f64,
    /// Heartbeat period, milliseconds.
    #[arg(
        long,
        env = "TALON_WORKER_HEARTBEAT_INTERVAL_MS",
        default_value_t = 1000
    )]
    heartbeat_interval_ms: u64,

    /// The origins, as URLs (repeat the flag or separate with commas; at most one S3
    /// and one Azure): s3, s3://HOST, s3+http://HOST:PORT, az://ACCOUNT,
    /// az+http://HOST:PORT/ACCOUNT, az+https://HOST/ACCOUNT. Credentials come from
    /// the flags below (AWS_*, AZURE_STORAGE_KEY).
    #[arg(long, env = "TALON_WORKER_ORIGIN", value_delimiter = ',')]
    origin: Vec<String>,
    /// S3 origin endpoint, e.g. https://s3.eu-west-1.amazonaws.com or
    /// http://127.0.0.1:9000; the same as `--origin`, kept for existing command lines.
    #[arg(
        long = "origin-s3-endpoint",
        visible_alias = "s3-endpoint",
        env = "TALON_WORKER_S3_ENDPOINT"
    )]
    s3_endpoint: Option<String>,
    /// S3 signing region.
    #[arg(
        long = "origin-s3-region",
        visible_alias = "s3-region",
        env = "AWS_REGION",
        default_value = "us-east-1"
    )]
    s3_region: String,
    /// S3 access key (anonymous without).
    #[arg(
        long = "origin-s3-access-key",
        visible_alias = "s3-access-key",
        env = "AWS_ACCESS_KEY_ID"
    )]
    s3_access_key: Option<String>,
    /// S3 secret key.
    #[arg(
        long = "origin-s3-secret-key",
        visible_alias = "s3-secret-key",
        env = "AWS_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    s3_secret_key: Option<String>,
    /// The session token of temporary S3 keys. Without keys, the origin's credentials
    /// come from AWS's default chain (web identity, container, instance profile) and are
    /// refreshed before they expire (docs/security.md).
    #[arg(
        long = "origin-s3-session-token",
        visible_alias = "s3-session-token",
        env = "AWS_SESSION_TOKEN",
        hide_env_values = true
    )]
    s3_session_token: Option<String>,
    /// Check each origin at start with one signed request (ListBuckets, List
    /// Containers): `fail` refuses to start and says why; `warn` starts and logs it;
    /// `off` does not check.
    #[arg(
        long,
        env = "TALON_WORKER_ORIGIN_CHECK",
        default_value = "fail",
        value_parser = |s: &str| s.parse::<talon_protocols::origin::check::OriginCheckMode>()
    )]
    origin_check: talon_protocols::origin::check::OriginCheckMode,
    /// Put the bucket in the host name (virtual-hosted addressing).
    #[arg(
        long = "origin-s3-virtual-hosted",
        visible_alias = "s3-virtual-hosted",
        env = "TALON_WORKER_S3_VIRTUAL_HOSTED"
    )]
    s3_virtual_hosted: bool,
    /// Azure Blob account URL, e.g. https://acct.blob.core.windows.net or
    /// http://127.0.0.1:10000/devstoreaccount1, with --azure-account; the same as
    /// `--origin`, kept for existing command lines.
    #[arg(
        long = "origin-azure-endpoint",
        visible_alias = "azure-endpoint",
        env = "TALON_WORKER_AZURE_ENDPOINT"
    )]
    azure_endpoint: Option<String>,
    /// Azure storage account name.
    #[arg(
        long = "origin-azure-account",
        visible_alias = "azure-account",
        env = "AZURE_STORAGE_ACCOUNT",
        default_value = "devstoreaccount1"
    )]
    azure_account: String,
    /// Azure account key (base64). Without it (or a SAS file), the Azure origin's
    /// credentials come from workload identity, a service principal or a managed
    /// identity (`AZURE_*`, `IDENTITY_*`), refreshed before they expire; anonymous where
    /// none is found.
    #[arg(
        long = "origin-azure-key",
        visible_alias = "azure-key",
        env = "AZURE_STORAGE_KEY",
        hide_env_values = true
    )]
    azure_key: Option<String>,
    /// A file holding a SAS for the Azure origin, read again before the SAS expires.
    #[arg(
        long = "origin-azure-sas-file",
        visible_alias = "azure-sas-file",
        env = "TALON_WORKER_AZURE_SAS_FILE"
    )]
    azure_sas_file: Option<std::path::PathBuf>,
    /// Requests per second this process may send the origin under one prefix (a
    /// bucket and a key's folder), reads, HEADs, listings and writes together: S3
    /// throttles about 3,500 writes and 5,500 reads per second per prefix. Past it,
    /// requests queue for up to --origin-request-queue, then the client is answered
    /// 503 SlowDown (S3) or ServerBusy (Azure) and nothing reaches the origin. 0: no
    /// limit.
    #[arg(long, env = "TALON_WORKER_ORIGIN_REQUESTS_PER_PREFIX", default_value_t = talon_protocols::origin::request_limit::DEFAULT_REQUESTS_PER_PREFIX)]
    origin_requests_per_prefix: u32,
    /// How long a request to the origin may wait for its turn under
    /// --origin-requests-per-prefix (e.g. 1s, 250ms).
    #[arg(long, env = "TALON_WORKER_ORIGIN_REQUEST_QUEUE", default_value = "1s", value_parser = parse_duration)]
    origin_request_queue: std::time::Duration,

    /// Object metadata TTL, milliseconds, for Stat requests that do not say how old an
    /// answer they accept (a gateway's do: its --max-staleness-ms governs).
    #[arg(long, env = "TALON_WORKER_STAT_TTL_MS", default_value_t = 5000)]
    stat_ttl_ms: u64,
    /// TTL of not-found answers, milliseconds (also caps a Stat's max age for them).
    #[arg(
        long,
        env = "TALON_WORKER_NEGATIVE_STAT_TTL_MS",
        default_value_t = 1000
    )]
    negative_stat_ttl_ms: u64,
    /// Most objects whose metadata the worker keeps (beyond it the least useful are
    /// evicted one at a time; their next Stat asks the origin again).
    #[arg(
        long,
        env = "TALON_WORKER_METADATA_ENTRIES",
        default_value_t = 1_000_000
    )]
    metadata_entries: usize,
    /// About the most memory that metadata takes.
    #[arg(long, env = "TALON_WORKER_METADATA_BYTES", default_value = "512MiB", value_parser = parse_byte_size)]
    metadata_bytes: u64,
    /// Pages fetched beyond a read's last page (0: none; the cache client already asks
    /// for the pieces ahead of a reader).
    #[arg(long, env = "TALON_WORKER_READAHEAD_PAGES", default_value_t = 0)]
    readahead_pages: u32,
    /// Fetched bytes that may be answered before they are durable in the cache at once
    /// (write-behind: a cold read waits for the origin, not the disk; the pages count
    /// as cached once synced), until synced and sent. Beyond it a fill is durable
    /// before it is answered; 0: always.
    #[arg(long, env = "TALON_WORKER_WRITE_BEHIND_BYTES", default_value = "64MiB", value_parser = parse_byte_size)]
    write_behind_bytes: u64,
    /// Most fills started ahead of sequential readers (their Prefetch) at once; beyond
    /// it a prefetch is declined and the reader fills the pages when it gets there. 0:
    /// decline every prefetch.
    #[arg(long, env = "TALON_WORKER_PREFETCH_FILLS", default_value_t = crate::prefetch::DEFAULT_PREFETCH_FILLS)]
    prefetch_fills: usize,
    /// Most of those fills for one object at once.
    #[arg(long, env = "TALON_WORKER_PREFETCH_FILLS_PER_OBJECT", default_value_t = crate::prefetch::DEFAULT_PREFETCH_FILLS_PER_OBJECT)]
    prefetch_fills_per_object: usize,
    /// Most pages one origin fetch covers.
    #[arg(long, env = "TALON_WORKER_MAX_FILL_PAGES", default_value_t = 16)]
    max_fill_pages: u32,
    /// Most origin requests in flight.
    #[arg(long, env = "TALON_WORKER_MAX_ORIGIN_REQUESTS", default_value_t = 64)]
    max_origin_requests: usize,
    /// Retries of a transient origin failure.
    #[arg(long, env = "TALON_WORKER_ORIGIN_RETRIES", default_value_t = 3)]
    origin_retries: u32,

    /// Most open data-plane connections that have proved the cluster secret (a peer
    /// whose proof is verified waits for one to end).
    #[arg(long, env = "TALON_WORKER_MAX_CONNECTIONS", default_value_t = 4096)]
    max_connections: usize,
    /// Most data-plane connections still in their Hello exchange, kept apart from the
    /// authenticated ones; over it a new connection is closed at once.
    #[arg(long, env = "TALON_WORKER_MAX_UNAUTHENTICATED", default_value_t = 1024)]
    max_unauthenticated: usize,
    /// Most of those one address may hold once that pool is half full (below half, a
    /// burst from one address is let in whole).
    #[arg(
        long,
        env = "TALON_WORKER_MAX_UNAUTHENTICATED_PER_PEER",
        default_value_t = 32
    )]
    max_unauthenticated_per_peer: usize,
    /// The Hello exchange must finish within this many milliseconds of the connection's
    /// start.
    #[arg(long, env = "TALON_WORKER_HELLO_TIMEOUT_MS", default_value_t = 3_000)]
    hello_timeout_ms: u64,
    /// Most pipelined requests in flight per connection.
    #[arg(long, env = "TALON_WORKER_PIPELINE_DEPTH", default_value_t = 64)]
    pipeline_depth: usize,
    /// Once a frame starts, the rest must arrive within this many milliseconds of its
    /// first byte; the Hello exchange must finish within it too.
    #[arg(long, env = "TALON_WORKER_FRAME_TIMEOUT_MS", default_value_t = 10_000)]
    frame_timeout_ms: u64,
    /// Idle connections are closed after this many milliseconds.
    #[arg(long, env = "TALON_WORKER_IDLE_TIMEOUT_MS", default_value_t = 120_000)]
    idle_timeout_ms: u64,

    #[command(flatten)]
    cluster: talon_coordinator_client::secret::ClusterSecretArgs,

    /// Once listening, write {"addr": .., "admin": .., "data_plane": .., "rings": ..}
    /// to this file (atomically).
    #[arg(long, env = "TALON_WORKER_READY_FILE")]
    ready_file: Option<PathBuf>,

    /// io_uring ring threads, each pinned to a core with its own SO_REUSEPORT listener;
    /// 0 = one per core this process may run on.
    #[arg(long, env = "TALON_WORKER_DATA_PLANE_RINGS", default_value_t = 0)]
    data_plane_rings: usize,
    /// Pin each ring thread to its own core (the design; true). false lets the
    /// scheduler move rings to idle cores, for a host shared with other busy processes.
    #[arg(
        long,
        env = "TALON_WORKER_DATA_PLANE_PIN_RINGS",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    data_plane_pin_rings: bool,
    /// Serve on the Tokio plane even where io_uring works (the escape hatch);
    /// TALON_WORKER_FORCE_TOKIO_DATA_PLANE=1 does the same.
    #[arg(long)]
    force_tokio_data_plane: bool,
    /// How resident ranges are sent: sendfile (the default) or copy (pread + send),
    /// kept to measure against (docs/data-plane.md).
    #[arg(
        long,
        env = "TALON_WORKER_LAYER2",
        default_value = "sendfile",
        hide = true
    )]
    layer2: crate::data_plane::Layer2,
    /// How each io_uring ring is set up: coop (the default), defer or plain, kept to
    /// measure against (docs/data-plane.md).
    #[arg(
        long,
        env = "TALON_WORKER_RING_SETUP",
        default_value = "coop",
        hide = true
    )]
    ring_setup: crate::data_plane::RingSetup,
    /// Test hook: act as if the io_uring probe failed with this reason.
    #[arg(long, env = "TALON_WORKER_TEST_FAIL_IO_URING_PROBE", hide = true)]
    test_fail_io_uring_probe: Option<String>,
}

async fn origins(args: &Args) -> anyhow::Result<Origins> {
    let settings = OriginSettings {
        s3_region: args.s3_region.clone(),
        s3_credentials: match (&args.s3_access_key, &args.s3_secret_key) {
            (Some(ak), Some(sk)) => Some(S3Credentials {
                access_key: ak.clone(),
                secret_key: sk.clone(),
                session_token: args.s3_session_token.clone(),
            }),
            _ => None,
        },
        s3_virtual_hosted: args.s3_virtual_hosted,
        azure_key: match &args.azure_key {
            Some(k) => Some(
                AccountKey::from_base64(k)
                    .map_err(|e| anyhow::anyhow!("--origin-azure-key: {}", e.message()))?,
            ),
            None => None,
        },
        request_limit: talon_protocols::origin::request_limit::RequestLimit::from_flags(
            args.origin_requests_per_prefix,
            args.origin_request_queue,
        ),
    };
    let mut specs = Vec::new();
    for url in &args.origin {
        specs.push(
            OriginSpec::parse(url, &args.s3_region)
                .map_err(|e| anyhow::anyhow!("--origin: {}", e.message()))?,
        );
    }
    if let Some(endpoint) = &args.s3_endpoint {
        specs.push(OriginSpec::S3 {
            endpoint: endpoint.clone(),
        });
    }
    if let Some(endpoint) = &args.azure_endpoint {
        specs.push(OriginSpec::Azure {
            endpoint: endpoint.clone(),
            account: args.azure_account.clone(),
        });
    }
    let Origins { s3, azure } = Origins::from_specs(&specs, &settings)?
        .with_default_s3_credentials(&|name| std::env::var(name).ok())
        .await
        .map_err(|e| anyhow::anyhow!("origin credentials: {}", e.message()))?
        .with_default_azure_credentials(
            &|name| std::env::var(name).ok(),
            args.azure_sas_file.as_deref(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("Azure origin credentials: {}", e.message()))?;
    if s3.is_none() && azure.is_none() {
        tracing::warn!("no origin configured (--origin URL): only cached pages can be served");
    }
    let origins = Origins { s3, azure };
    talon_protocols::origin::check::check_origins(&origins, args.origin_check)
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    Ok(origins)
}

/// The page size this worker keeps presence by: the cluster's, as its coordinator
/// publishes it, or --page-size (else 1 MiB) where there is none or the coordinator
/// cannot be reached at start (a different one is then refused at registration).
///
/// # Errors
/// --page-size given and not the cluster's: the message names both; a coordinator that
/// refuses this worker's cluster secret.
async fn cluster_page_size(
    args: &Args,
    secret: &talon_core::cluster_auth::ClusterSecret,
) -> anyhow::Result<u64> {
    use talon_coordinator_client::api::ClusterGeometry;
    let Some(url) = &args.coordinator else {
        return Ok(ClusterGeometry::page_size_for(None, args.page_size)?);
    };
    let client = talon_coordinator_client::client::CoordinatorClient::new(url.clone())
        .map_err(|e| anyhow::anyhow!("--coordinator {url}: {e}"))?
        .with_auth(secret.clone(), talon_core::cluster_auth::Role::Worker);
    match client.members().await {
        Ok(members) => Ok(ClusterGeometry::page_size_for(
            members.geometry,
            args.page_size,
        )?),
        // A coordinator that answers but refuses this process will refuse it forever.
        Err(
            e @ (talon_coordinator_client::error::CoordinatorError::Unauthenticated(_)
            | talon_coordinator_client::error::CoordinatorError::Forbidden(_)),
        ) => anyhow::bail!(
            "the coordinator at {url} refused this worker ({e}): give the cluster's secret \
             (--cluster-secret-file or TALON_CLUSTER_SECRET)"
        ),
        Err(e) => {
            tracing::warn!(
                coordinator = %url,
                error = %e,
                "could not ask the coordinator for the cluster's page size; using --page-size"
            );
            Ok(ClusterGeometry::page_size_for(None, args.page_size)?)
        }
    }
}

/// Runs the part with `args` until SIGTERM or SIGINT, then drains.
///
/// # Errors
/// A configuration that does not hold, or a listener that cannot start.
pub async fn run(args: Args) -> anyhow::Result<()> {
    crate::service::raise_open_files_limit();
    let admin_listen = match args.admin_listen.as_str() {
        "off" => None,
        a => Some(
            a.parse::<SocketAddr>()
                .with_context(|| format!("--admin-listen '{a}'"))?,
        ),
    };
    let cluster_secret = args.cluster.load()?;
    let local_socket = match args.local_socket.as_str() {
        "off" => None,
        "auto" => Some(std::path::absolute(args.cache_dir.join("local.sock"))?),
        path => Some(std::path::absolute(path)?),
    };
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.pin_share),
        "--pin-share must be between 0 and 1"
    );
    if let Some(problem) = args
        .pin
        .iter()
        .find_map(|p| talon_coordinator_client::api::pin_prefix_problem(p))
    {
        anyhow::bail!("--pin: {problem}");
    }
    let page_size = cluster_page_size(&args, &cluster_secret).await?;
    // Every block is an open file: take what the hard limit allows before planning.
    crate::descriptors::raise_open_files_limit();
    let config = WorkerConfig {
        pins: crate::block_store::Pins::new(args.pin.clone(), args.pin_share, args.capacity),
        local_socket,
        cluster_secret,
        open_files: None,
        max_blocks: args.max_blocks,
        listen: args.listen,
        admin_listen,
        cache_dir: args.cache_dir.clone(),
        capacity_bytes: args.capacity,
        page_size,
        origins: origins(&args).await?,
        stat_ttl: Duration::from_millis(args.stat_ttl_ms),
        negative_stat_ttl: Duration::from_millis(args.negative_stat_ttl_ms),
        metadata: talon_metadata_cache::Limits {
            max_entries: args.metadata_entries,
            max_bytes: args.metadata_bytes,
            max_missing: (args.metadata_entries / 10).max(1),
        },
        loader: LoaderConfig {
            readahead_pages: args.readahead_pages,
            max_fill_pages: args.max_fill_pages.max(1),
            max_origin_requests: args.max_origin_requests.max(1),
            origin_retries: args.origin_retries,
            write_behind_bytes: args.write_behind_bytes,
            prefetch: crate::prefetch::PrefetchBounds {
                fills: args.prefetch_fills,
                fills_per_object: args.prefetch_fills_per_object.max(1),
            },
            ..LoaderConfig::default()
        },
        data_plane: DataPlaneConfig {
            max_connections: args.max_connections.max(1),
            max_unauthenticated: args.max_unauthenticated.max(1),
            max_unauthenticated_per_peer: args.max_unauthenticated_per_peer.max(1),
            hello_timeout: Duration::from_millis(args.hello_timeout_ms.max(1)),
            pipeline_depth: args.pipeline_depth.max(1),
            frame_timeout: Duration::from_millis(args.frame_timeout_ms),
            idle_timeout: Duration::from_millis(args.idle_timeout_ms),
            plane: if args.force_tokio_data_plane {
                PlaneRequest::ForceTokio
            } else {
                PlaneRequest::from_env()
            },
            rings: args.data_plane_rings,
            pin_rings: args.data_plane_pin_rings,
            ring_setup: args.ring_setup,
            simulated_probe_failure: args.test_fail_io_uring_probe.clone(),
            layer2: args.layer2,
            ..DataPlaneConfig::default()
        },
        membership: args.coordinator.as_ref().map(|url| MembershipConfig {
            coordinator_url: url.clone(),
            id: args
                .id
                .clone()
                .unwrap_or_else(|| format!("worker-{}", args.listen.port())),
            advertise_addr: args.advertise_addr.clone(),
            weight: args.weight,
            zone: args.zone.clone(),
            heartbeat_interval: Duration::from_millis(args.heartbeat_interval_ms.max(10)),
        }),
    };
    let worker = crate::service::start(config).await?;
    if let Some(path) = &args.ready_file {
        let ready = serde_json::json!({
            "addr": worker.addr.to_string(),
            "admin": worker.admin_addr.map(|a| format!("http://{a}")),
            "data_plane": worker.plane.name(),
            "rings": worker.plane.rings(),
            "local_socket": worker.local_socket.as_ref().map(|p| p.display().to_string()),
        });
        talon_process::write_ready_file(path, &ready)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    talon_process::shutdown_signal().await;
    tracing::info!("draining");
    worker.shutdown().await;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: super::Args,
    }

    fn parse(argv: &[&str]) -> super::Args {
        Cli::try_parse_from([&["talon-worker"], argv].concat())
            .unwrap()
            .args
    }

    /// The origin flags are named as the gateway's; the older spellings still parse to
    /// the same setting.
    #[test]
    fn the_origin_flags_have_the_gateways_names_and_keep_the_old_ones() {
        for (new, old) in [
            ("--origin-s3-access-key", "--s3-access-key"),
            ("--origin-azure-account", "--azure-account"),
            ("--origin-s3-endpoint", "--s3-endpoint"),
        ] {
            let a = parse(&[new, "x"]);
            let b = parse(&[old, "x"]);
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{new} and {old}");
        }
        let args = parse(&[
            "--origin-s3-access-key",
            "AK",
            "--origin-azure-account",
            "acct",
        ]);
        assert_eq!(args.s3_access_key.as_deref(), Some("AK"));
        assert_eq!(args.azure_account, "acct");
    }
}
