//! `talon gateway` (and its alias, the `talon-gateway` binary): the S3 and Azure Blob
//! fronts of a cluster, from the command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{
    AzureFront, Backend, Identities, IdentitiesFile, Limits, Route, S3Front, S3Key,
};
use crate::{Freshness, GatewayConfig, start};
use anyhow::Context;
use talon_cache_client::{CacheClient, CacheClientConfig};
use talon_core::{BlockGeometry, parse_byte_size, parse_duration};
use talon_protocols::access::AnonymousAccess;
use talon_protocols::azure::request::AzureAddressing;
use talon_protocols::azure::shared_key::AccountKey;
use talon_protocols::origin::Origins;
use talon_protocols::origin::check::{OriginCheckMode, check_origins};
use talon_protocols::origin_spec::{OriginSettings, OriginSpec};
use talon_protocols::s3::request::S3Addressing;
use talon_protocols::s3::sigv4::S3Credentials;

/// Talon's gateway: unmodified S3 and Azure Blob clients read through the cache by
/// changing only their endpoint.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// S3 listener ("off" to disable).
    #[arg(
        long,
        env = "TALON_GATEWAY_S3_LISTEN",
        default_value = "127.0.0.1:9000"
    )]
    s3_listen: String,
    /// Azure Blob listener ("off" to disable).
    #[arg(
        long,
        env = "TALON_GATEWAY_AZURE_LISTEN",
        default_value = "127.0.0.1:10000"
    )]
    azure_listen: String,
    /// Admin listener (/metrics, /healthz, /readyz; "off" to disable).
    #[arg(
        long,
        env = "TALON_GATEWAY_ADMIN_LISTEN",
        default_value = "127.0.0.1:9300"
    )]
    admin_listen: String,
    /// How the S3 front reads: cache, cache-only, origin.
    #[arg(long, env = "TALON_GATEWAY_S3_ROUTE", default_value = "cache")]
    s3_route: Route,
    /// How the Azure front reads: cache, cache-only, origin.
    #[arg(long, env = "TALON_GATEWAY_AZURE_ROUTE", default_value = "cache")]
    azure_route: Route,
    /// Which origin the S3 front serves (s3 or azure; default: the S3 origin if set).
    #[arg(long, env = "TALON_GATEWAY_S3_FRONT_ORIGIN")]
    s3_front_origin: Option<Backend>,
    /// Which origin the Azure front serves (s3 or azure; default: the Azure origin if set).
    #[arg(long, env = "TALON_GATEWAY_AZURE_FRONT_ORIGIN")]
    azure_front_origin: Option<Backend>,
    /// Serve S3 virtual-hosted requests for BUCKET.DOMAIN too.
    #[arg(long, env = "TALON_GATEWAY_S3_DOMAIN")]
    s3_domain: Option<String>,
    /// Serve Azure requests for ACCOUNT.blob.DOMAIN host names too.
    #[arg(long, env = "TALON_GATEWAY_AZURE_DOMAIN")]
    azure_domain: Option<String>,
    /// The region the S3 front reports.
    #[arg(long, env = "TALON_GATEWAY_REGION", default_value = "us-east-1")]
    region: String,

    /// The origins, as URLs (repeat the flag or separate with commas; at most one S3
    /// and one Azure): s3, s3://HOST, s3+http://HOST:PORT, az://ACCOUNT,
    /// az+http://HOST:PORT/ACCOUNT, az+https://HOST/ACCOUNT. Credentials come from
    /// the flags below (AWS_*, AZURE_STORAGE_KEY).
    #[arg(long, env = "TALON_GATEWAY_ORIGIN", value_delimiter = ',')]
    origin: Vec<String>,
    /// S3 origin endpoint (e.g. https://s3.eu-west-1.amazonaws.com); the same as
    /// `--origin s3://HOST`, kept for existing command lines.
    #[arg(long, env = "TALON_GATEWAY_ORIGIN_S3_ENDPOINT")]
    origin_s3_endpoint: Option<String>,
    /// S3 origin signing region.
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    origin_s3_region: String,
    /// The gateway's own S3 access key for the origin.
    #[arg(long, env = "AWS_ACCESS_KEY_ID")]
    origin_s3_access_key: Option<String>,
    /// The gateway's own S3 secret for the origin.
    #[arg(long, env = "AWS_SECRET_ACCESS_KEY", hide_env_values = true)]
    origin_s3_secret_key: Option<String>,
    /// The session token of temporary origin keys. Without keys, the origin's
    /// credentials come from AWS's default chain (web identity, container, instance
    /// profile) and are refreshed before they expire (docs/security.md).
    #[arg(long, env = "AWS_SESSION_TOKEN", hide_env_values = true)]
    origin_s3_session_token: Option<String>,
    /// Azure origin account URL (e.g. https://acct.blob.core.windows.net), with
    /// --origin-azure-account; the same as `--origin az://ACCOUNT`, kept for existing
    /// command lines.
    #[arg(long, env = "TALON_GATEWAY_ORIGIN_AZURE_ENDPOINT")]
    origin_azure_endpoint: Option<String>,
    /// Azure origin account name.
    #[arg(
        long,
        env = "AZURE_STORAGE_ACCOUNT",
        default_value = "devstoreaccount1"
    )]
    origin_azure_account: String,
    /// The Azure origin's account key. Without it (or a SAS file), the Azure origin's
    /// credentials come from workload identity, a service principal or a managed
    /// identity (`AZURE_*`, `IDENTITY_*`) and are refreshed before they expire.
    #[arg(long, env = "AZURE_STORAGE_KEY", hide_env_values = true)]
    origin_azure_key: Option<String>,
    /// A file holding a SAS for the Azure origin, read again before the SAS expires (so a
    /// rotated SAS is picked up without a restart).
    #[arg(long, env = "TALON_GATEWAY_ORIGIN_AZURE_SAS_FILE")]
    origin_azure_sas_file: Option<PathBuf>,
    /// Requests per second this process may send the origin under one prefix (a
    /// bucket and a key's folder), reads, HEADs, listings and writes together: S3
    /// throttles about 3,500 writes and 5,500 reads per second per prefix. Past it,
    /// requests queue for up to --origin-request-queue, then the client is answered
    /// 503 SlowDown (S3) or ServerBusy (Azure) and nothing reaches the origin. 0: no
    /// limit.
    #[arg(long, env = "TALON_GATEWAY_ORIGIN_REQUESTS_PER_PREFIX", default_value_t = talon_protocols::origin::request_limit::DEFAULT_REQUESTS_PER_PREFIX)]
    origin_requests_per_prefix: u32,
    /// How long a request to the origin may wait for its turn under
    /// --origin-requests-per-prefix (e.g. 1s, 250ms).
    #[arg(long, env = "TALON_GATEWAY_ORIGIN_REQUEST_QUEUE", default_value = "1s", value_parser = parse_duration)]
    origin_request_queue: std::time::Duration,

    /// Coordinator of the cache cluster (http://host:port).
    #[arg(long, env = "TALON_GATEWAY_COORDINATOR")]
    coordinator: Option<String>,
    /// Bytes of fetched cache pieces all responses together may hold before their
    /// clients take them (a reader that stops reading slows the reads behind it, not the
    /// process's memory).
    #[arg(long, env = "TALON_GATEWAY_BUFFER_BUDGET", default_value = "1GiB", value_parser = parse_byte_size)]
    buffer_budget: u64,
    /// Bytes of that budget the responses to one client address (IPv6: its /64) may
    /// hold together, so that a few clients that stop reading cannot hold all of it.
    /// Default: an eighth of `--buffer-budget`.
    #[arg(long, env = "TALON_GATEWAY_BUFFER_BUDGET_PER_CLIENT", value_parser = parse_byte_size)]
    buffer_budget_per_client: Option<u64>,
    /// How long a response's first piece may wait for room in the buffer budget (the
    /// whole one and its client's share) before the request is answered 503 SlowDown
    /// (S3) or ServerBusy (Azure) with Retry-After (ms).
    #[arg(long, env = "TALON_GATEWAY_BUDGET_WAIT_MS", default_value_t = 2000)]
    budget_wait_ms: u64,
    /// Largest piece of a read asked of a worker at once (bytes); a read is split at
    /// block boundaries and into pieces of at most this size.
    #[arg(long, env = "TALON_GATEWAY_PIECE_SIZE", default_value = "2MiB", value_parser = parse_byte_size)]
    piece_size: u64,
    /// Pieces of one response in flight at once; with --piece-size, the most one
    /// response holds ahead of its client (a slow client's memory bound).
    #[arg(long, env = "TALON_GATEWAY_READ_WINDOW", default_value_t = 4)]
    read_window: usize,
    /// Pieces past a sequential reader's window (a cold object read in order, or
    /// consecutive ranges of one) whose workers are asked to fill them now, holding
    /// nothing in the gateway: up to window + this many fills run for one reader.
    /// 0: none.
    #[arg(long, env = "TALON_GATEWAY_READ_AHEAD_PIECES", default_value_t = 8)]
    read_ahead_pieces: usize,
    /// Each piece's deadline budget through the cache (ms): the workers in rendezvous
    /// order get half of it together and the origin the rest; a worker's connect,
    /// first-byte and stall deadlines are derived from it (1/30, 1/6, 1/15:
    /// docs/reliability.md).
    #[arg(long, env = "TALON_GATEWAY_READ_DEADLINE_MS", default_value_t = 30_000)]
    read_deadline_ms: u64,
    /// A worker's first-byte deadline (ms), replacing the one derived from
    /// --read-deadline-ms: how long a worker may be silent before a piece moves on.
    #[arg(long, env = "TALON_GATEWAY_WORKER_FIRST_BYTE_MS")]
    worker_first_byte_ms: Option<u64>,
    /// A worker's stall deadline (ms), replacing the derived one: how long an answer
    /// may stop mid-body before the rest is asked elsewhere.
    #[arg(long, env = "TALON_GATEWAY_WORKER_STALL_MS")]
    worker_stall_ms: Option<u64>,
    /// Hedged reads: the fraction of pieces that may also be asked of the next owner
    /// when the owner's first byte is later than its recent --hedge-quantile (0 turns
    /// hedging off; it is off anyway with one worker). Docs: docs/reliability.md.
    #[arg(long, env = "TALON_GATEWAY_HEDGE_BUDGET", default_value_t = 0.05)]
    hedge_budget: f64,
    /// The quantile of each worker's recent first-byte latencies past which a piece
    /// is hedged.
    #[arg(long, env = "TALON_GATEWAY_HEDGE_QUANTILE", default_value_t = 0.99)]
    hedge_quantile: f64,
    /// Never hedge a piece sooner than this after asking (ms).
    #[arg(long, env = "TALON_GATEWAY_HEDGE_MIN_DELAY_MS", default_value_t = 250)]
    hedge_min_delay_ms: u64,
    /// Hot blocks: a block read through this gateway more than
    /// --hot-block-reads-per-second times its length in a second is read from this
    /// many homes in turn — its owner and the next in rendezvous order, spanning zones
    /// when workers declare them (1 turns spreading off). Each extra home fills the
    /// block once from the origin. Docs: docs/cache-cluster.md.
    #[arg(long, env = "TALON_GATEWAY_HOT_BLOCK_OWNERS", default_value_t = 2)]
    hot_block_owners: usize,
    /// How many times its length a block must be read in one second to be hot (at
    /// most 1023).
    #[arg(
        long,
        env = "TALON_GATEWAY_HOT_BLOCK_READS_PER_SECOND",
        default_value_t = 8
    )]
    hot_block_reads_per_second: u32,
    /// This gateway's zone (its failure domain, as the workers' --zone): a hot block's
    /// homes span zones and this gateway reads the one in its zone when there is one.
    /// Empty: no preference.
    #[arg(long, env = "TALON_GATEWAY_ZONE", default_value = "")]
    zone: String,
    /// Uploads (PutObject, Put Blob) up to this size are also pushed into the cache
    /// once the origin has stored them, so the writer's next read is a hit; 0 turns
    /// that off. The gateway then joins the cluster in the ingester role.
    #[arg(long, env = "TALON_GATEWAY_WRITE_THROUGH_MAX", default_value = "8MiB", value_parser = parse_byte_size)]
    write_through_max: u64,
    /// Most objects whose metadata the gateway keeps in memory (beyond it the least
    /// useful are evicted one at a time; their next read asks a worker again).
    #[arg(
        long,
        env = "TALON_GATEWAY_METADATA_ENTRIES",
        default_value_t = 1_000_000
    )]
    metadata_entries: usize,
    /// About the most memory that metadata takes.
    #[arg(long, env = "TALON_GATEWAY_METADATA_BYTES", default_value = "512MiB", value_parser = parse_byte_size)]
    metadata_bytes: u64,
    /// Objects fetched into the cache ahead of a reader going through a prefix this
    /// gateway listed, in key order (a loader that does not shuffle), and the most such
    /// fetches in flight; 0 fetches nothing ahead. Each costs an origin request, spent
    /// on a guess where the reader stops. At most 1024.
    #[arg(long, env = "TALON_GATEWAY_READ_AHEAD_OBJECTS", default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=1024))]
    read_ahead_objects: u16,
    /// The largest object fetched ahead of such a reader.
    #[arg(long, env = "TALON_GATEWAY_READ_AHEAD_OBJECT_MAX", default_value = "1MiB", value_parser = parse_byte_size)]
    read_ahead_object_max: u64,
    #[command(flatten)]
    cluster: talon_coordinator_client::secret::ClusterSecretArgs,
    /// The cluster's block size. Taken from the coordinator when left out (its
    /// --block-size); given, it must equal the coordinator's or the gateway refuses to
    /// start.
    #[arg(long, env = "TALON_GATEWAY_BLOCK_SIZE", value_parser = parse_byte_size)]
    block_size: Option<u64>,
    /// On route cache, read what no worker can answer (metadata, then each piece) from
    /// the origin, pinned to the version; route cache-only never does.
    /// `--origin-fallback false` (or `=false`) turns it off.
    #[arg(
        long,
        env = "TALON_GATEWAY_ORIGIN_FALLBACK",
        default_value_t = true,
        num_args = 0..=1,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    origin_fallback: bool,
    /// Check each origin at start with one signed request (ListBuckets, List
    /// Containers): `fail` refuses to start and says why; `warn` starts and says it in
    /// /readyz (503) and the log until the origin passes; `off` does not check.
    #[arg(
        long,
        env = "TALON_GATEWAY_ORIGIN_CHECK",
        default_value = "fail",
        value_parser = |s: &str| s.parse::<OriginCheckMode>()
    )]
    origin_check: OriginCheckMode,
    /// Say in a `Cache-Status` response header (RFC 9211) how each answer was served:
    /// `talon; hit`, `talon; fwd=miss; stored` (filled), `talon; fwd=miss;
    /// detail=fallback`, ... (`--cache-status false`: no header).
    #[arg(long, env = "TALON_GATEWAY_CACHE_STATUS", default_value_t = true, action = clap::ArgAction::Set)]
    cache_status: bool,
    /// Write one JSON line per answered request (time, request id, identity,
    /// operation, bucket, key, range, status, bytes, outcome, ms) to this file, appended,
    /// or `-` for standard output. Off by default.
    #[arg(long, env = "TALON_GATEWAY_ACCESS_LOG")]
    access_log: Option<PathBuf>,
    /// Read cached blocks of workers on this host through their local socket, where
    /// the worker hands over the block file and the bytes cross no socket between the
    /// two (`--local-reads false`: every worker over TCP).
    #[arg(long, env = "TALON_GATEWAY_LOCAL_READS", default_value_t = true, action = clap::ArgAction::Set)]
    local_reads: bool,
    /// With local reads: how long, in milliseconds, a block file a worker handed over
    /// is read again without asking it (only the bytes it vouched for, and only while
    /// the file is unchanged; up to 4,096 files and an eighth of the open-files limit);
    /// 0 asks the worker for every piece. It
    /// bounds how long an evicted block's disk space can outlive its eviction.
    #[arg(long, env = "TALON_GATEWAY_HELD_FILE_MS", default_value_t = 1000)]
    held_file_ms: u64,
    /// With held files: serve bodies sent untouched over plain HTTP from a read-only
    /// mapping of the held file, so the socket write copies each byte once, from the
    /// page cache (HTTPS, and Azure's range MD5, read bytes in the process and are
    /// always copied). The gateway's resident memory then counts the mapped pages of
    /// held files (shared page cache, not its own).
    #[arg(long, env = "TALON_GATEWAY_HELD_FILE_MAPPED", default_value_t = true, action = clap::ArgAction::Set)]
    held_file_mapped: bool,

    /// Client identities and what each may do (JSON: {"s3": [{"access_key", "secret_key",
    /// "grants": [{"bucket", "prefix", "actions": ["read", "list", "write", "delete",
    /// "admin"]}]}], "azure": {"account", "key", "grants", "sas_grants"}, "public":
    /// [grants], "anonymous": "none"|"read"|"read-write"}; docs/security.md). A key
    /// without "grants" may do everything. Reloaded on SIGHUP. A front with no
    /// credentials refuses to start unless anonymous access is allowed.
    #[arg(long, env = "TALON_GATEWAY_IDENTITIES")]
    identities: Option<PathBuf>,
    /// Where the canned ACLs clients set are kept (PutBucketAcl, PutObjectAcl and
    /// `x-amz-acl: public-read` on CreateBucket, PutObject, CopyObject: a public bucket
    /// may be listed, a public object read, without a signature). Without it, ACL
    /// writes other than `private` are refused.
    #[arg(long, env = "TALON_GATEWAY_ACL_FILE")]
    acl_file: Option<PathBuf>,
    /// An S3 client identity ACCESS_KEY:SECRET (repeatable); adds to the file's.
    #[arg(
        long = "s3-credentials",
        env = "TALON_GATEWAY_S3_CREDENTIALS",
        value_delimiter = ','
    )]
    s3_credentials: Vec<String>,
    /// What unauthenticated requests may do on both fronts: none, read (GET, HEAD,
    /// listings) or read-write; `--anonymous` alone means read. Overrides the
    /// identities file's `anonymous`. Default: the identities file's, else none.
    #[arg(long, env = "TALON_GATEWAY_ANONYMOUS", num_args = 0..=1, default_missing_value = "read")]
    anonymous: Option<AnonymousAccess>,

    /// Declared staleness, milliseconds: a read sees a write made elsewhere (at the
    /// origin, or through another gateway) at most this long after it. One setting for
    /// the gateway's metadata cache and the workers' (each Stat says how old an answer
    /// it accepts; the workers' --stat-ttl-ms applies only to requests that do not).
    /// Writes through this gateway are seen at once.
    #[arg(
        long,
        alias = "metadata-ttl-ms",
        env = "TALON_GATEWAY_MAX_STALENESS_MS",
        default_value_t = 5000
    )]
    max_staleness_ms: u64,
    /// The same bound as a duration, as `talon up --max-staleness` takes it (1s, 5m,
    /// 250ms); wins over --max-staleness-ms.
    #[arg(long, env = "TALON_GATEWAY_MAX_STALENESS", value_parser = talon_core::parse_duration)]
    max_staleness: Option<Duration>,
    /// Stale-if-error, milliseconds past --max-staleness-ms: when the origin cannot be
    /// reached (5xx, throttling, timeouts, refused connections) the last known version
    /// of an object may serve this much longer, flagged with `x-talon-stale` and
    /// `Age` headers and counted in `talon_gateway_stale_served_total`. 0 turns it off.
    #[arg(long, env = "TALON_GATEWAY_STALE_IF_ERROR_MS", default_value_t = 0)]
    stale_if_error_ms: u64,
    /// Time until a response starts, milliseconds (not for uploads, which have
    /// --upload-idle-timeout-ms instead).
    #[arg(
        long,
        env = "TALON_GATEWAY_REQUEST_DEADLINE_MS",
        default_value_t = 60_000
    )]
    request_deadline_ms: u64,
    /// Most open connections per listener; one over the cap is closed at once.
    #[arg(long, env = "TALON_GATEWAY_MAX_CONNECTIONS", default_value_t = 4096)]
    max_connections: usize,
    /// Most open connections per listener from one client IP address.
    #[arg(
        long,
        env = "TALON_GATEWAY_MAX_CONNECTIONS_PER_PEER",
        default_value_t = 512
    )]
    max_connections_per_peer: usize,
    /// Longest wait for a complete request head once a connection is ready for one,
    /// milliseconds: bounds slowly sent headers and idle keep-alive connections alike.
    #[arg(
        long,
        env = "TALON_GATEWAY_HEADER_READ_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    header_read_timeout_ms: u64,
    /// Longest time a response may make no progress towards its client before the
    /// connection is cut, milliseconds.
    #[arg(
        long,
        env = "TALON_GATEWAY_WRITE_STALL_TIMEOUT_MS",
        default_value_t = 30_000
    )]
    write_stall_timeout_ms: u64,
    /// Longest pause in an upload's body before the upload fails, milliseconds (an
    /// upload has no total deadline).
    #[arg(
        long,
        env = "TALON_GATEWAY_UPLOAD_IDLE_TIMEOUT_MS",
        default_value_t = 30_000
    )]
    upload_idle_timeout_ms: u64,
    /// PEM certificate chain for HTTPS on both fronts (with --tls-key); the admin
    /// listener stays HTTP.
    #[arg(long, env = "TALON_GATEWAY_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "TALON_GATEWAY_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Once listening, write {"s3", "azure", "admin"} URLs (null when off) to this file,
    /// atomically, so a script that used port 0 can find the gateway.
    #[arg(long, env = "TALON_GATEWAY_READY_FILE")]
    ready_file: Option<PathBuf>,
}

fn listen(value: &str, flag: &str) -> anyhow::Result<Option<SocketAddr>> {
    if value == "off" {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .with_context(|| format!("{flag} '{value}' is not an address"))
}

impl Args {
    /// The declared staleness: --max-staleness, else --max-staleness-ms.
    fn staleness_bound(&self) -> Duration {
        self.max_staleness
            .unwrap_or(Duration::from_millis(self.max_staleness_ms))
    }
}

/// Runs the part with `args` until SIGTERM or SIGINT, then drains.
///
/// # Errors
/// A configuration that does not hold, or a listener that cannot start.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let settings = OriginSettings {
        s3_region: args.origin_s3_region.clone(),
        s3_credentials: match (&args.origin_s3_access_key, &args.origin_s3_secret_key) {
            (Some(a), Some(s)) => Some(S3Credentials {
                access_key: a.clone(),
                secret_key: s.clone(),
                session_token: args.origin_s3_session_token.clone(),
            }),
            _ => None,
        },
        s3_virtual_hosted: false,
        azure_key: match &args.origin_azure_key {
            Some(k) => Some(
                AccountKey::from_base64(k)
                    .map_err(|e| anyhow::anyhow!("azure key: {}", e.message()))?,
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
            OriginSpec::parse(url, &args.origin_s3_region)
                .map_err(|e| anyhow::anyhow!("--origin: {}", e.message()))?,
        );
    }
    if let Some(endpoint) = &args.origin_s3_endpoint {
        specs.push(OriginSpec::S3 {
            endpoint: endpoint.clone(),
        });
    }
    if let Some(endpoint) = &args.origin_azure_endpoint {
        specs.push(OriginSpec::Azure {
            endpoint: endpoint.clone(),
            account: args.origin_azure_account.clone(),
        });
    }
    let Origins {
        s3: s3_origin,
        azure: azure_origin,
    } = Origins::from_specs(&specs, &settings)?
        .with_default_s3_credentials(&|name| std::env::var(name).ok())
        .await
        .map_err(|e| anyhow::anyhow!("origin credentials: {}", e.message()))?
        .with_default_azure_credentials(
            &|name| std::env::var(name).ok(),
            args.origin_azure_sas_file.as_deref(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("Azure origin credentials: {}", e.message()))?;
    anyhow::ensure!(
        s3_origin.is_some() || azure_origin.is_some(),
        "configure an origin: --origin URL (s3+http://HOST:PORT, az://ACCOUNT, ...)"
    );
    let (has_s3, has_azure) = (s3_origin.is_some(), azure_origin.is_some());
    let default_backend = move |preferred: Backend| match (preferred, has_s3, has_azure) {
        (Backend::S3, true, _) | (Backend::Azure, false, true) => preferred,
        (Backend::S3, false, _) => Backend::Azure,
        (Backend::Azure, _, false) => Backend::S3,
        (Backend::Azure, _, true) => Backend::Azure,
    };
    let identities = load_identities(&args)?;
    let origins = Origins {
        s3: s3_origin,
        azure: azure_origin,
    };
    let origin_problems = check_origins(&origins, args.origin_check)
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    let checked_origins = origins.clone();
    let block_size = args
        .block_size
        .unwrap_or(talon_coordinator_client::api::DEFAULT_BLOCK_SIZE);
    let geometry = BlockGeometry::new(block_size, block_size)
        .context("--block-size must be a power of two")?;
    let cache = match &args.coordinator {
        Some(url) => {
            let secret = args.cluster.load()?;
            let mut config = CacheClientConfig::new(url.clone(), geometry, secret);
            config.take_cluster_block_size = args.block_size.is_none();
            config.max_buffered_bytes = args.buffer_budget;
            config.max_buffered_bytes_per_reader = args
                .buffer_budget_per_client
                .unwrap_or(args.buffer_budget / 8);
            config.admission_wait = Duration::from_millis(args.budget_wait_ms);
            if args.write_through_max > 0 {
                config.role = talon_core::cluster_auth::Role::Ingester;
            }
            if args.origin_fallback {
                config.origin_fallback = Some(origins.clone());
            }
            config.local_reads = args.local_reads;
            config.held_files.hold = Duration::from_millis(args.held_file_ms);
            config.held_files.map_files = args.held_file_mapped;
            config.max_request_bytes = args.piece_size.max(4096);
            config.read_window = args.read_window.max(1);
            config.read_ahead_pieces = args.read_ahead_pieces;
            config.deadlines = talon_cache_client::DeadlineBudget::from_total(
                Duration::from_millis(args.read_deadline_ms),
            )
            .with_worker(
                args.worker_first_byte_ms.map(Duration::from_millis),
                args.worker_stall_ms.map(Duration::from_millis),
            );
            if !((0.0..=1.0).contains(&args.hedge_budget)
                && args.hedge_quantile > 0.0
                && args.hedge_quantile <= 1.0)
            {
                anyhow::bail!("--hedge-budget must be in [0, 1] and --hedge-quantile in (0, 1]");
            }
            config.hedge = talon_cache_client::HedgeConfig {
                quantile: args.hedge_quantile,
                min_delay: Duration::from_millis(args.hedge_min_delay_ms),
                max_fraction: args.hedge_budget,
                ..talon_cache_client::HedgeConfig::P99
            };
            if args.hot_block_owners == 0 || !(1..=1023).contains(&args.hot_block_reads_per_second)
            {
                anyhow::bail!(
                    "--hot-block-owners must be at least 1 and --hot-block-reads-per-second in [1, 1023]"
                );
            }
            config.zone = args.zone.clone();
            config.hot_blocks = talon_cache_client::HotBlockConfig {
                owners: args.hot_block_owners,
                reads_per_second: args.hot_block_reads_per_second,
            };
            Some(
                CacheClient::connect(config)
                    .await
                    .context("connecting to the cache cluster")?,
            )
        }
        None => None,
    };
    let config = GatewayConfig {
        s3: listen(&args.s3_listen, "--s3-listen")?.map(|listen| S3Front {
            listen,
            route: args.s3_route,
            backend: args
                .s3_front_origin
                .unwrap_or_else(|| default_backend(Backend::S3)),
            addressing: match &args.s3_domain {
                Some(d) => S3Addressing::VirtualHosted {
                    domain: d.to_ascii_lowercase(),
                },
                None => S3Addressing::PathStyle,
            },
            region: args.region.clone(),
        }),
        azure: listen(&args.azure_listen, "--azure-listen")?.map(|listen| AzureFront {
            listen,
            route: args.azure_route,
            backend: args
                .azure_front_origin
                .unwrap_or_else(|| default_backend(Backend::Azure)),
            addressing: match &args.azure_domain {
                Some(d) => AzureAddressing::HostStyle {
                    domain: d.to_ascii_lowercase(),
                },
                None => AzureAddressing::PathStyle,
            },
        }),
        admin_listen: listen(&args.admin_listen, "--admin-listen")?,
        origins,
        cache,
        identities,
        freshness: Freshness {
            max_staleness: args.staleness_bound(),
            stale_if_error: Duration::from_millis(args.stale_if_error_ms),
        },
        limits: Limits {
            request_deadline: Duration::from_millis(args.request_deadline_ms),
            upload_idle_timeout: Duration::from_millis(args.upload_idle_timeout_ms),
            header_read_timeout: Duration::from_millis(args.header_read_timeout_ms),
            write_stall_timeout: Duration::from_millis(args.write_stall_timeout_ms),
            max_connections: args.max_connections,
            max_connections_per_peer: args.max_connections_per_peer,
            write_through_max_bytes: args.write_through_max,
            metadata_entries: args.metadata_entries,
            metadata_bytes: args.metadata_bytes,
            read_ahead_objects: usize::from(args.read_ahead_objects),
            read_ahead_object_max_bytes: args.read_ahead_object_max,
            ..Limits::default()
        },
        tls: match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some(talon_listener::Tls::from_pem_files(cert, key)?),
            _ => None,
        },
        acl_file: args.acl_file.clone(),
        cache_status: args.cache_status,
        access_log: args.access_log.clone(),
    };
    let mut gateway = start(config).await?;
    if !origin_problems.is_empty() {
        gateway.set_not_ready(Some(origin_problems.join("; ")));
        gateway.keep_checking_origins(checked_origins, ORIGIN_RECHECK);
    }
    let gateway = Arc::new(gateway);
    let reloads = tokio::spawn(reload_identities_on_hangup(args.clone(), gateway.clone()));
    if let Some(path) = &args.ready_file {
        let ready = serde_json::json!({
            "s3": gateway.s3_url(),
            "azure": gateway.azure_url(),
            "admin": gateway.admin_addr.map(|a| format!("http://{a}")),
        });
        talon_process::write_ready_file(path, &ready)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    talon_process::shutdown_signal().await;
    tracing::info!("shutting down");
    reloads.abort();
    let _ = reloads.await;
    match Arc::try_unwrap(gateway) {
        Ok(gateway) => gateway.shutdown().await,
        Err(_) => tracing::warn!("the gateway is still referenced; not draining"),
    }
    Ok(())
}

/// How often an origin that failed its start-up check (`--origin-check warn`) is
/// checked again.
pub const ORIGIN_RECHECK: Duration = Duration::from_secs(30);

/// The identities file (if any) with the flags' keys and anonymous level over it.
fn load_identities(args: &Args) -> anyhow::Result<Identities> {
    let mut file = match &args.identities {
        Some(path) => IdentitiesFile::parse(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?,
        )
        .map_err(|e| anyhow::anyhow!("parsing {}: {}", path.display(), e.message()))?,
        None => IdentitiesFile::default(),
    };
    for c in &args.s3_credentials {
        let (a, s) = c
            .split_once(':')
            .with_context(|| format!("--s3-credentials '{c}' is not KEY:SECRET"))?;
        file.s3.push(S3Key::unrestricted(a, s));
    }
    if let Some(level) = args.anonymous {
        file.anonymous = level;
    }
    Ok(Identities::from_parts(file)?)
}

/// Reads the identities file again on every SIGHUP. A file that does not parse, or
/// would leave a front without credentials, keeps the identities in use and says why.
async fn reload_identities_on_hangup(args: Args, gateway: Arc<crate::RunningGateway>) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP: identities will not be reloaded");
            return;
        }
    };
    let file = args
        .identities
        .as_ref()
        .map_or_else(|| "the flags".to_owned(), |p| p.display().to_string());
    while hangups.recv().await.is_some() {
        let reloaded = load_identities(&args)
            .and_then(|ids| gateway.replace_identities(ids).map_err(anyhow::Error::from));
        match reloaded {
            Ok(()) => {
                gateway.metrics().identities_reloaded(true);
                tracing::info!(from = %file, "identities reloaded");
            }
            Err(e) => {
                gateway.metrics().identities_reloaded(false);
                tracing::error!(from = %file, error = %format!("{e:#}"), "identities not reloaded; the previous ones stay in use");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Args;

    #[derive(Debug, Parser)]
    struct Gateway {
        #[command(flatten)]
        args: Args,
    }

    /// `talon up --max-staleness 1s` and the gateway's own flag take the same duration;
    /// the older `--max-staleness-ms` still works.
    #[test]
    fn the_staleness_bound_is_a_duration_as_talon_up_takes_it() {
        let parse = |extra: &[&str]| {
            let g = Gateway::try_parse_from(
                [
                    &["gateway", "--cluster-secret", "0123456789abcdef0123"],
                    extra,
                ]
                .concat(),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            g.args.staleness_bound()
        };
        assert_eq!(parse(&[]), std::time::Duration::from_secs(5));
        assert_eq!(
            parse(&["--max-staleness", "5m"]),
            std::time::Duration::from_secs(300)
        );
        assert_eq!(
            parse(&["--max-staleness-ms", "250"]),
            std::time::Duration::from_millis(250)
        );
    }

    /// The read review: `--origin-fallback=false`, which the docs tell users to set,
    /// was refused ("unexpected value 'false'"), and the flag was always on.
    #[test]
    fn the_origin_request_limit_is_on_by_default_and_zero_turns_it_off() {
        let parse = |extra: &[&str]| {
            Gateway::try_parse_from(
                [
                    &["gateway", "--cluster-secret", "0123456789abcdef0123"],
                    extra,
                ]
                .concat(),
            )
            .map(|g| {
                (
                    g.args.origin_requests_per_prefix,
                    g.args.origin_request_queue,
                )
            })
            .map_err(|e| e.to_string())
        };
        assert_eq!(parse(&[]), Ok((3_500, std::time::Duration::from_secs(1))));
        assert_eq!(
            parse(&[
                "--origin-requests-per-prefix",
                "0",
                "--origin-request-queue",
                "250ms"
            ]),
            Ok((0, std::time::Duration::from_millis(250)))
        );
        assert!(parse(&["--origin-request-queue", "soon"]).is_err());
    }

    #[test]
    fn origin_fallback_is_turned_off_and_on_as_the_docs_say() {
        let parse = |extra: &[&str]| {
            Gateway::try_parse_from(
                [
                    &["gateway", "--cluster-secret", "0123456789abcdef0123"],
                    extra,
                ]
                .concat(),
            )
            .map(|g| g.args.origin_fallback)
            .map_err(|e| e.to_string())
        };
        assert_eq!(parse(&[]), Ok(true));
        assert_eq!(parse(&["--origin-fallback"]), Ok(true));
        assert_eq!(parse(&["--origin-fallback=false"]), Ok(false));
        assert_eq!(parse(&["--origin-fallback", "false"]), Ok(false));
        assert_eq!(parse(&["--origin-fallback=true"]), Ok(true));
    }
}
