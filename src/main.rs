//! `talon`: the one binary. `talon up` starts a whole local deployment in one process on
//! loopback: an origin (the origin stub over a local folder, or a real S3 or Azure
//! account), a coordinator, workers with their own cache folders, and the gateway with
//! an S3 and an Azure Blob endpoint in front of them. `talon gateway | worker |
//! coordinator | origin | loadgen` run one part each, `talon status` shows a cluster and `talon warm` fills its cache, with the flags of the part's own
//! binary (`talon-gateway`, ... remain as aliases); every part shares one start-up path
//! (`talon_process`: logs, ready file, drain on SIGTERM).

mod banner;
mod coordinator_args;
mod freshness;
mod invalidate;
mod output;
mod pin;
mod status;
mod up_state;
mod warm;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use talon_cache_client::{CacheClient, CacheClientConfig};
use talon_coordinator::CoordinatorConfig;
use talon_core::{BlockGeometry, parse_byte_size, parse_duration};
use talon_gateway::config::{
    AzureFront, Backend, Identities, IdentitiesFile, Limits, Route, S3Front, S3Key,
};
use talon_origin_stub::generated::GeneratedObject;
use talon_origin_stub::{DEFAULT_AZURE_ACCOUNT, EMULATOR_AZURE_KEY, StubConfig};
use talon_protocols::access::AnonymousAccess;
use talon_protocols::azure::shared_key::AccountKey;
use talon_protocols::origin::check::{OriginCheckMode, check_origins};
use talon_protocols::origin::{OriginClient, OriginConfig, Origins};
use talon_protocols::origin_spec::{OriginSettings, OriginSpec};
use talon_protocols::s3::request::S3Addressing;
use talon_protocols::s3::sigv4::S3Credentials;
use talon_worker::WorkerConfig;
use talon_worker::data_plane::DataPlaneConfig;
use talon_worker::loader::LoaderConfig;
use talon_worker::service::MembershipConfig;

/// Talon: a distributed read-through cache for object stores.
#[derive(Debug, Parser)]
#[command(name = "talon", version, after_help = talon_process::LOG_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a whole local deployment on loopback: origin, coordinator, workers, gateway.
    #[command(after_help = talon_process::LOG_HELP)]
    Up(UpArgs),
    /// Run a gateway: the S3 and Azure Blob fronts of a cluster, reading through its
    /// cache (or straight from the origin) and writing to the origin once.
    #[command(after_help = talon_process::LOG_HELP)]
    Gateway(talon_gateway::cli::Args),
    /// Run a cache worker: a block store on local disk, filled from the origin on a
    /// miss, serving the cluster's wire protocol.
    #[command(after_help = talon_process::LOG_HELP)]
    Worker(talon_worker::cli::Args),
    /// Run a coordinator: worker membership, the placement epoch and the admin API.
    #[command(after_help = talon_process::LOG_HELP)]
    Coordinator(talon_coordinator::cli::Args),
    /// Run an origin that speaks S3 and Azure Blob over a folder and generated objects
    /// (for tests, demos and benches).
    #[command(after_help = talon_process::LOG_HELP)]
    Origin(talon_origin_stub::cli::Args),
    /// Drive a worker's data plane or an HTTP server with range reads and report
    /// throughput, latency percentiles and the server's CPU.
    Loadgen(talon_loadgen::cli::Args),
    /// Show a cluster as its coordinator knows it: the epoch, every worker (address,
    /// state, last heartbeat, bytes cached, hit ratio) and the totals.
    #[command(after_help = talon_process::LOG_HELP)]
    Status(status::StatusArgs),
    /// Fill the cache before a job reads it: a prefix (s3://BUCKET/PREFIX, filled by the
    /// workers) or named objects, with progress and a table (or --json) at the end.
    #[command(after_help = talon_process::LOG_HELP)]
    Warm(warm::WarmArgs),
    /// List, add or remove the cluster's pinned prefixes (kept from eviction on every
    /// worker within its --pin-share).
    #[command(after_help = talon_process::LOG_HELP)]
    Pin(pin::PinArgs),
    /// Make every gateway and worker forget what it learned under prefixes (object
    /// metadata, listing pages) within a heartbeat, or list the invalidations in force.
    #[command(after_help = talon_process::LOG_HELP)]
    Invalidate(invalidate::InvalidateArgs),
    /// List, add or remove the cluster's per-prefix staleness bounds (PREFIX=DURATION or
    /// PREFIX=immutable), which every gateway and worker applies instead of its own.
    #[command(after_help = talon_process::LOG_HELP)]
    Freshness(freshness::FreshnessArgs),
}

/// `talon up`'s data folder, and where the operator tools look for its state file.
const DEFAULT_DATA_DIR: &str = "talon-data";

#[derive(Debug, clap::Args)]
struct UpArgs {
    /// Folder served by the local origin; its top-level folders are buckets
    /// (containers). Created with a small sample when it does not exist. It also holds
    /// the workers' caches (`.talon-cache`) and the ACLs clients set
    /// (`.talon-acls.json`).
    #[arg(long, env = "TALON_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    /// A real origin instead of the local folder: `s3` (AWS, region from AWS_REGION),
    /// `s3://HOST[:PORT]` (https), `s3+http://HOST:PORT`, `az://ACCOUNT`
    /// (ACCOUNT.blob.core.windows.net) or `az+http://HOST:PORT/ACCOUNT`. Credentials
    /// come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AZURE_STORAGE_KEY.
    #[arg(long, env = "TALON_ORIGIN")]
    origin: Option<String>,
    /// With --origin: check it at start with one signed request (ListBuckets, List
    /// Containers); `fail` refuses to start and says why, `warn` starts and says it in
    /// /readyz and the log until it passes, `off` does not check.
    #[arg(
        long,
        env = "TALON_ORIGIN_CHECK",
        default_value = "fail",
        value_parser = |s: &str| s.parse::<OriginCheckMode>()
    )]
    origin_check: OriginCheckMode,
    /// Say in a `Cache-Status` response header (RFC 9211) how each answer was served
    /// (`talon; hit`, `talon; fwd=miss; stored`, ...); `--cache-status false`: no header.
    #[arg(long, env = "TALON_CACHE_STATUS", default_value_t = true, action = clap::ArgAction::Set)]
    cache_status: bool,
    /// Write one JSON line per answered request (time, request id, identity,
    /// operation, bucket, key, range, status, bytes, outcome, ms) to this file, appended,
    /// or `-` for standard output (where the banner goes too). Off by default.
    #[arg(long, env = "TALON_ACCESS_LOG")]
    access_log: Option<PathBuf>,
    /// Number of workers.
    #[arg(long, env = "TALON_WORKERS", default_value_t = 2)]
    workers: usize,
    /// Folder of the workers' caches (default: `.talon-cache` inside the data folder).
    #[arg(long, env = "TALON_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Byte budget of each worker's cache.
    #[arg(long, env = "TALON_CAPACITY", default_value = "1GiB", value_parser = parse_byte_size)]
    capacity: u64,
    /// Block size of the cluster.
    #[arg(long, env = "TALON_BLOCK_SIZE", default_value = "64MiB", value_parser = parse_byte_size)]
    block_size: u64,
    /// Page size of the workers.
    #[arg(long, env = "TALON_PAGE_SIZE", default_value = "1MiB", value_parser = parse_byte_size)]
    page_size: u64,
    /// Address every endpoint binds to.
    #[arg(long, env = "TALON_BIND", default_value = "127.0.0.1")]
    bind: IpAddr,
    /// S3 endpoint port.
    #[arg(long, env = "TALON_S3_PORT", default_value_t = 9000)]
    s3_port: u16,
    /// Azure Blob endpoint port.
    #[arg(long, env = "TALON_AZURE_PORT", default_value_t = 10000)]
    azure_port: u16,
    /// Gateway admin port (/metrics, /healthz, /readyz).
    #[arg(long, env = "TALON_ADMIN_PORT", default_value_t = 9300)]
    admin_port: u16,
    /// Coordinator port (the operator tools' default, `talon status` and `talon warm`
    /// with no flags, is this one on loopback; 0: any free port, which the state file
    /// `DATA_DIR/.talon-up.json` names for them).
    #[arg(long, env = "TALON_COORDINATOR_PORT", default_value_t = 7000)]
    coordinator_port: u16,
    /// The cluster's status page (read-only, no authentication: every worker, its state
    /// and what it caches) on this port of --bind; 0: any free port (the banner names it).
    #[arg(long, env = "TALON_STATUS_PORT", default_value_t = 9301)]
    status_port: u16,
    /// The S3 region clients sign for (any name; their SDK's region must match).
    #[arg(long, env = "TALON_REGION", default_value = "us-east-1")]
    region: String,
    /// The staleness bound: a change made at the origin other than through this
    /// gateway (a file edited in the folder, a write to the real account) is seen by
    /// reads at most this long after it; writes through the gateway are seen at once.
    /// Within it a re-read costs the origin nothing, so a longer bound is fewer origin
    /// requests. `500ms`, `5s`, `2m`, `1h`.
    #[arg(long, env = "TALON_MAX_STALENESS", default_value = "1s", value_parser = parse_duration)]
    max_staleness: Duration,
    /// The S3 client identity ACCESS_KEY:SECRET every S3 request must be signed with.
    /// The default is the well-known development identity `talon:talon` (like MinIO's
    /// `minioadmin`); prefer the environment variable to the flag, which other local
    /// users can read in the process list.
    #[arg(
        long,
        env = "TALON_S3_CREDENTIALS",
        default_value = "talon:talon",
        hide_env_values = true
    )]
    s3_credentials: String,
    /// What unsigned requests may do on both fronts: none (the default), read (GET,
    /// HEAD and listings) or read-write. `--anonymous` alone means read.
    #[arg(
        long,
        env = "TALON_ANONYMOUS",
        default_value = "none",
        num_args = 0..=1,
        default_missing_value = "read"
    )]
    anonymous: AnonymousAccess,
    /// PEM certificate chain: serve both fronts over HTTPS (with --tls-key).
    #[arg(long, env = "TALON_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "TALON_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Write the endpoints as JSON to this file once everything is up (for scripts).
    #[arg(long, env = "TALON_READY_FILE")]
    ready_file: Option<PathBuf>,
    /// The cluster secret to use (for `talon warm` and `talon status` against this
    /// deployment); without it a fresh random one is used and never shown.
    #[command(flatten)]
    cluster: talon_coordinator::auth::ClusterSecretArgs,
}

/// Refuses, before anything is created or started, two of `talon up`'s ports that are
/// the same or one that another process holds, naming the flag (a listener that fails
/// later says only its address, after the sample folder and the workers exist).
fn check_ports(args: &UpArgs) -> anyhow::Result<()> {
    let ports = [
        ("--s3-port", args.s3_port),
        ("--azure-port", args.azure_port),
        ("--admin-port", args.admin_port),
        ("--coordinator-port", args.coordinator_port),
        ("--status-port", args.status_port),
    ];
    // Two flags with one port are wrong whatever else runs here, so they are said first.
    for (i, (flag, port)) in ports.iter().enumerate() {
        if *port == 0 {
            continue;
        }
        if let Some((other, _)) = ports[..i].iter().find(|(_, p)| p == port) {
            anyhow::bail!("{other} and {flag} are both {port}: give each its own port");
        }
    }
    for (flag, port) in ports.iter().filter(|(_, port)| *port != 0) {
        let addr = SocketAddr::new(args.bind, *port);
        if let Err(e) = std::net::TcpListener::bind(addr) {
            anyhow::bail!(
                "{flag} {port}: cannot listen on {addr} ({e}): free it, or give another port (0: any free one)"
            );
        }
    }
    Ok(())
}

/// Whether `a` and `b` name one folder (a missing one is not an existing other).
fn same_folder(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Takes `<dir>/.talon-up.lock` for this process's lifetime (the lock goes with the
/// returned file), creating `dir`; refuses when another process holds it, naming
/// `flag`, the one to change.
fn lock_folder(dir: &Path, flag: &str) -> anyhow::Result<std::fs::File> {
    let path = dir.join(".talon-up.lock");
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            anyhow::bail!(
                "another talon up (pid {}) is using {}: stop it first, or give this one \
                 another {flag}",
                holder
                    .trim()
                    .parse::<u32>()
                    .map_or("?".to_owned(), |p| p.to_string()),
                dir.display()
            );
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("locking {}", path.display()));
        }
    }
    use std::io::Write as _;
    file.set_len(0)?;
    write!(file, "{}", std::process::id())?;
    Ok(file)
}

/// Writes the sample data set into a new folder.
fn write_sample(dir: &Path) -> anyhow::Result<()> {
    let demo = dir.join("demo");
    std::fs::create_dir_all(demo.join("tables"))
        .with_context(|| format!("creating {}", demo.display()))?;
    std::fs::write(
        demo.join("hello.txt"),
        "Hello from Talon. This file lives in the 'demo' bucket of your data folder.\n",
    )?;
    let mut csv = String::from("id,square,cube\n");
    for i in 0..1000u64 {
        csv.push_str(&format!("{i},{},{}\n", i * i, i * i * i));
    }
    std::fs::write(demo.join("tables/numbers.csv"), csv)?;
    Ok(())
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Parses `--origin` into origin clients.
async fn real_origin(spec: &str) -> anyhow::Result<Origins> {
    let settings = OriginSettings::from_env().map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    let spec = OriginSpec::parse(spec, &settings.s3_region)
        .map_err(|e| anyhow::anyhow!("--origin: {}", e.message()))?;
    Origins::from_specs(&[spec], &settings)?
        .with_default_s3_credentials(&|name| std::env::var(name).ok())
        .await
        .map_err(|e| anyhow::anyhow!("origin credentials: {}", e.message()))?
        .with_default_azure_credentials(&|name| std::env::var(name).ok(), None)
        .await
        .map_err(|e| anyhow::anyhow!("Azure origin credentials: {}", e.message()))
}

/// Where `talon up`'s parts listen, for the banner and the ready file.
struct Endpoints {
    s3: String,
    azure: String,
    admin: String,
    coordinator: String,
    /// The cluster's status page.
    status: String,
    /// Each worker's admin URL (`/metrics`, `/healthz`, `/readyz`), in worker order.
    workers: Vec<String>,
    origin: String,
}

async fn up(args: UpArgs) -> anyhow::Result<()> {
    let credentials = args
        .s3_credentials
        .split_once(':')
        .filter(|(a, s)| !a.is_empty() && !s.is_empty())
        .context("--s3-credentials is not ACCESS_KEY:SECRET")?;
    let loopback = |port| SocketAddr::new(args.bind, port);
    let any_port = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), 0);
    // Settings that could never work are refused before anything starts.
    let geometry = BlockGeometry::new(args.block_size, args.page_size)
        .context("--block-size and --page-size")?;
    anyhow::ensure!(
        args.workers >= 1,
        "--workers 0: a deployment needs at least one worker to cache anything"
    );
    anyhow::ensure!(
        args.capacity >= args.block_size,
        "--capacity {} bytes is less than one --block-size ({} bytes): no block could ever be cached; \
         give each worker at least one block",
        args.capacity,
        args.block_size
    );
    anyhow::ensure!(
        !args.data_dir.exists() || args.data_dir.is_dir(),
        "--data-dir {} is a file, not a folder: name a folder (it is created if missing)",
        args.data_dir.display()
    );
    check_ports(&args)?;
    // A real origin is checked before anything is created or started.
    let mut origin_problems = Vec::new();
    let mut real = match &args.origin {
        Some(spec) => {
            let origins = real_origin(spec).await?;
            origin_problems = check_origins(&origins, args.origin_check)
                .await
                .map_err(|e| anyhow::anyhow!("--origin {spec}: {}", e.message()))?;
            Some(origins)
        }
        None => None,
    };
    let cache_root = args
        .cache_dir
        .clone()
        .unwrap_or_else(|| args.data_dir.join(".talon-cache"));
    // Only a data folder this run creates gets the sample (taking the locks below may
    // create it).
    let new_data_dir = !args.data_dir.exists();
    // One `talon up` per data folder (a second would serve it from a second origin,
    // and replace or remove the first one's state file) and per cache folder (a second
    // would share the workers' files). One lock when the two are one folder: a second
    // lock of the same file from this process would be refused.
    let data_lock = lock_folder(&args.data_dir, "--data-dir")?;
    let cache_lock = if same_folder(&cache_root, &args.data_dir) {
        None
    } else {
        match lock_folder(&cache_root, "--cache-dir") {
            Ok(lock) => Some(lock),
            Err(e) => {
                // Refused: a data folder this run made for its lock goes again.
                if new_data_dir {
                    drop(data_lock);
                    let _ = std::fs::remove_file(args.data_dir.join(".talon-up.lock"));
                    let _ = std::fs::remove_dir(&args.data_dir);
                }
                return Err(e);
            }
        }
    };
    let _locks = (data_lock, cache_lock);

    // The origin: a real account (checked above), or the stub over the data folder.
    let (origins, origin_name, stub) = match &args.origin {
        Some(spec) => (real.take().unwrap_or_default(), spec.clone(), None),
        None => {
            if new_data_dir {
                write_sample(&args.data_dir)?;
                tracing::info!(dir = %args.data_dir.display(), "created the data folder with a sample");
            }
            // The stub speaks only to this process: random credentials, a random
            // Azure key and a random admin token, none of them written down, so other
            // local users cannot go around the gateway to the folder (SEC-13, SEC-19).
            let origin_secret = |n: usize| {
                let mut bytes = vec![0u8; n];
                getrandom::getrandom(&mut bytes)
                    .map(|()| bytes)
                    .map_err(|e| anyhow::anyhow!("no randomness for the origin's credentials: {e}"))
            };
            let origin_s3 = (
                format!(
                    "TALONUP{}",
                    hex::encode(origin_secret(8)?).to_ascii_uppercase()
                ),
                hex::encode(origin_secret(24)?),
            );
            let origin_key = AccountKey::from_base64(&base64_encode(&origin_secret(64)?))
                .map_err(|e| anyhow::anyhow!("the origin key: {}", e.message()))?;
            let stub = talon_origin_stub::start(StubConfig {
                s3_credentials: [origin_s3.clone()].into_iter().collect(),
                azure_key: Some(origin_key.clone()),
                admin_token: Some(hex::encode(origin_secret(24)?)),
                data_dir: Some(args.data_dir.clone()),
                // The sample's generated 64 MiB object joins the sample's bucket only:
                // a folder of the user's own is served as it is, with no extra bucket.
                generated: if args.data_dir.join("demo").is_dir() {
                    vec![GeneratedObject::new(
                        "demo",
                        "random-64MiB.bin",
                        64 << 20,
                        0,
                    )]
                } else {
                    Vec::new()
                },
                s3_listen: Some(any_port),
                azure_listen: Some(any_port),
                admin_listen: Some(any_port),
                ..StubConfig::default()
            })
            .await
            .context("starting the origin stub")?;
            let s3 = OriginClient::new(OriginConfig::S3 {
                endpoint: stub.s3_url().unwrap_or_default(),
                region: "us-east-1".into(),
                credentials: Some(S3Credentials {
                    access_key: origin_s3.0,
                    secret_key: origin_s3.1,
                    session_token: None,
                }),
                virtual_hosted: false,
            })?;
            let azure = OriginClient::new(OriginConfig::Azure {
                endpoint: stub.azure_url().unwrap_or_default(),
                account: DEFAULT_AZURE_ACCOUNT.into(),
                key: Some(origin_key),
                sas: None,
            })?;
            let origins = Origins {
                s3: Some(s3),
                azure: Some((DEFAULT_AZURE_ACCOUNT.into(), azure)),
            };
            (
                origins,
                format!("the folder {}", args.data_dir.display()),
                Some(stub),
            )
        }
    };

    // One cluster secret per run unless one is given: the coordinator's API and every
    // worker connection require it, so nothing internal is open to other local users. A
    // secret made here is written only into the state file (mode 0600) in the data
    // folder, for the operator tools of the same user.
    let given_secret =
        args.cluster.cluster_secret_file.is_some() || args.cluster.cluster_secret.is_some();
    let (cluster_secret, made_secret) = if given_secret {
        (args.cluster.load()?, None)
    } else {
        let mut bytes = [0u8; 32];
        getrandom::getrandom(&mut bytes)
            .map_err(|e| anyhow::anyhow!("no randomness for the cluster secret: {e}"))?;
        let text = hex::encode(bytes);
        (
            talon_core::cluster_auth::ClusterSecret::new(text.as_bytes())?,
            Some(text),
        )
    };
    let coordinator = talon_coordinator::start(CoordinatorConfig {
        listen: loopback(args.coordinator_port),
        status_listen: Some(loopback(args.status_port)),
        cluster_secret: cluster_secret.clone(),
        heartbeat_interval: Duration::from_millis(500),
        expiry: Duration::from_secs(3),
        // Warm jobs list their prefixes at this deployment's origin.
        origins: Some(origins.clone()),
        // Every part (and `talon warm` later) takes the geometry from here.
        geometry: Some(talon_coordinator_client::api::ClusterGeometry {
            block_size: args.block_size,
            page_size: args.page_size,
        }),
        ..CoordinatorConfig::default()
    })
    .await
    .context("starting the coordinator")?;
    let mut workers = Vec::new();
    let open_files_share = talon_worker::descriptors::raise_open_files_limit()
        .map(|limit| limit / (args.workers as u64 + 1));
    for i in 0..args.workers {
        let worker = talon_worker::start(WorkerConfig {
            pins: Default::default(),
            cluster_secret: cluster_secret.clone(),
            listen: any_port,
            // Each worker's /metrics on a port of its own, which the banner prints.
            admin_listen: Some(loopback(0)),
            cache_dir: cache_root.join(format!("w{i}")),
            // The gateway runs in this process: it reads cached blocks through the
            // workers' local sockets (the co-located fast path).
            local_socket: Some(std::path::absolute(
                cache_root.join(format!("w{i}")).join("local.sock"),
            )?),
            capacity_bytes: args.capacity,
            page_size: args.page_size,
            origins: origins.clone(),
            // The gateway's bound governs its own Stats (each carries its max age);
            // the workers keep what they learn as long (a shorter TTL would sweep
            // entries the gateway may still ask for).
            stat_ttl: args.max_staleness,
            negative_stat_ttl: Duration::from_millis(500),
            metadata: talon_worker::origins::DEFAULT_STAT_CACHE_LIMITS,
            loader: LoaderConfig::default(),
            data_plane: DataPlaneConfig::default(),
            // The workers share this process's descriptors with the gateway, the
            // coordinator and the origin: each takes an equal share.
            open_files: open_files_share,
            max_blocks: talon_worker::block_store::DEFAULT_MAX_BLOCKS,
            membership: Some(MembershipConfig {
                coordinator_url: coordinator.url(),
                id: format!("w{i}"),
                advertise_addr: None,
                weight: 1,
                zone: String::new(),
                heartbeat_interval: Duration::from_millis(500),
            }),
        })
        .await
        .with_context(|| format!("starting worker {i}"))?;
        workers.push(worker);
    }
    // Wait until the coordinator places blocks on every worker before taking requests.
    let coordinator_client =
        talon_coordinator_client::client::CoordinatorClient::new(coordinator.url())?.with_auth(
            cluster_secret.clone(),
            talon_core::cluster_auth::Role::Reader,
        );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let live = coordinator_client
            .members()
            .await
            .map(|m| m.placement().len())
            .unwrap_or(0);
        if live == workers.len() {
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "workers did not join the coordinator"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut cache_config =
        CacheClientConfig::new(coordinator.url(), geometry, cluster_secret.clone());
    cache_config.origin_fallback = Some(origins.clone());
    // The gateway pushes small uploads into the cache after the origin stored them
    // (write-through), which the ingester role allows.
    cache_config.role = talon_core::cluster_auth::Role::Ingester;
    let cache = CacheClient::connect(cache_config)
        .await
        .context("connecting the gateway to the cluster")?;

    // The conventions of the local emulators: signed requests with well-known
    // development credentials, anonymous access only when asked for.
    let mut identities = Identities::from_parts(IdentitiesFile {
        s3: vec![S3Key::unrestricted(credentials.0, credentials.1)],
        azure: None,
        anonymous: args.anonymous,
        public: Vec::new(),
    })?;
    identities.azure.key = Some(
        AccountKey::from_base64(EMULATOR_AZURE_KEY)
            .map_err(|e| anyhow::anyhow!("the emulator key: {}", e.message()))?,
    );
    let (s3_backend, azure_backend) = match (&origins.s3, &origins.azure) {
        (Some(_), Some(_)) => (Backend::S3, Backend::Azure),
        (Some(_), None) => (Backend::S3, Backend::S3),
        _ => (Backend::Azure, Backend::Azure),
    };
    let mut gateway = talon_gateway::start(talon_gateway::GatewayConfig {
        s3: Some(S3Front {
            listen: loopback(args.s3_port),
            route: Route::Cache,
            backend: s3_backend,
            addressing: S3Addressing::PathStyle,
            region: args.region.clone(),
        }),
        azure: Some(AzureFront {
            listen: loopback(args.azure_port),
            route: Route::Cache,
            backend: azure_backend,
            addressing: Default::default(),
        }),
        admin_listen: Some(loopback(args.admin_port)),
        origins: origins.clone(),
        cache: Some(cache),
        identities,
        freshness: talon_gateway::Freshness::within(args.max_staleness),
        limits: Limits::default(),
        tls: match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some(talon_listener::Tls::from_pem_files(cert, key)?),
            _ => None,
        },
        // Canned ACLs clients set (a public-read bucket or object) outlive a restart.
        acl_file: Some(args.data_dir.join(".talon-acls.json")),
        cache_status: args.cache_status,
        access_log: args.access_log.clone(),
    })
    .await
    .context("starting the gateway")?;
    if !origin_problems.is_empty() {
        gateway.set_not_ready(Some(origin_problems.join("; ")));
        gateway.keep_checking_origins(origins.clone(), talon_gateway::cli::ORIGIN_RECHECK);
    }
    let endpoints = Endpoints {
        s3: gateway.s3_url().unwrap_or_default(),
        azure: gateway.azure_url().unwrap_or_default(),
        admin: gateway
            .admin_addr
            .map(|a| format!("http://{a}"))
            .unwrap_or_default(),
        coordinator: coordinator.url(),
        status: coordinator
            .status_addr
            .map(|a| format!("http://{a}/"))
            .unwrap_or_default(),
        workers: workers
            .iter()
            .filter_map(|w| w.admin_addr.map(|a| format!("http://{a}")))
            .collect(),
        origin: origin_name,
    };
    if let Some(path) = &args.ready_file {
        let ready = serde_json::json!({
            "s3": endpoints.s3,
            "azure": endpoints.azure,
            "azure_account": DEFAULT_AZURE_ACCOUNT,
            "admin": endpoints.admin,
            "coordinator": endpoints.coordinator,
            "status": endpoints.status,
            "workers": endpoints.workers,
            "origin_s3": stub.as_ref().and_then(|s| s.s3_url()),
            "origin_azure": stub.as_ref().and_then(|s| s.azure_url()),
            "origin_admin": stub.as_ref().and_then(|s| s.admin_url()),
        });
        talon_process::write_ready_file(path, &ready)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    up_state::UpState {
        pid: std::process::id(),
        coordinator: endpoints.coordinator.clone(),
        s3: endpoints.s3.clone(),
        azure: endpoints.azure.clone(),
        admin: endpoints.admin.clone(),
        status: endpoints.status.clone(),
        workers: endpoints.workers.clone(),
        block_size: args.block_size,
        cluster_secret: made_secret,
        cluster_secret_file: args
            .cluster
            .cluster_secret_file
            .as_ref()
            .map(|f| std::path::absolute(f).unwrap_or_else(|_| f.clone())),
    }
    .write(&args.data_dir)?;
    let example = match &args.origin {
        Some(_) => None,
        None => banner::example_object(&args.data_dir),
    };
    banner::print_banner(&endpoints, &args, credentials, example.as_ref());
    talon_process::shutdown_signal().await;
    tracing::info!(
        "shutting down: finishing open requests (up to 10 s; Ctrl-C again stops at once)"
    );
    tokio::spawn(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("talon: stopped at once (second Ctrl-C)");
            std::process::exit(130);
        }
    });
    up_state::UpState::remove(&args.data_dir);
    gateway.shutdown().await;
    for w in workers {
        w.shutdown().await;
    }
    coordinator.shutdown().await;
    if let Some(stub) = stub {
        stub.shutdown().await;
    }
    Ok(())
}

fn main() -> ExitCode {
    let command = Cli::parse().command;
    if let Command::Loadgen(args) = command {
        // The load generator sizes and starts its own runtime.
        return talon_loadgen::cli::run(args);
    }
    talon_process::init_logs();
    talon_process::tune_allocator();
    match run(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => talon_process::exit_with_error("talon", e.as_ref()),
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        match command {
            Command::Up(args) => {
                // The workers run in this process: they need a descriptor per cached
                // block.
                talon_worker::service::raise_open_files_limit();
                up(args).await
            }
            Command::Gateway(args) => talon_gateway::cli::run(args).await,
            Command::Worker(args) => talon_worker::cli::run(args).await,
            Command::Coordinator(args) => talon_coordinator::cli::run(args).await,
            Command::Origin(args) => talon_origin_stub::cli::run(args).await,
            Command::Status(args) => status::status(args).await,
            Command::Warm(args) => warm::warm(args).await,
            Command::Pin(args) => pin::pin(args).await,
            Command::Invalidate(args) => invalidate::invalidate(args).await,
            Command::Freshness(args) => freshness::freshness(args).await,
            Command::Loadgen(_) => unreachable!("handled above"),
        }
    })
}
