//! `talon origin` (and its alias, the `talon-origin-stub` binary): serves a folder (and
//! generated objects) over S3 and Azure Blob, from the command line.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::faults::{FaultConfig, FaultKind};
use crate::generated::{GeneratedObject, GeneratedSet, parse_size};
use crate::{DEFAULT_AZURE_ACCOUNT, StubConfig};
use anyhow::{Context, bail};
use talon_protocols::azure::request::AzureAddressing;
use talon_protocols::azure::shared_key::AccountKey;
use talon_protocols::s3::request::S3Addressing;

/// One origin that speaks S3 and Azure Blob over the same objects: a folder whose
/// top-level folders are buckets (containers), plus generated objects of any size.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folder to serve; its top-level folders are buckets. Writes land here. Default: a
    /// temporary folder removed at exit.
    #[arg(long, env = "TALON_STUB_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// A generated object, BUCKET/KEY=SIZE[,SEED] (SIZE in bytes or with KiB/MiB/GiB/TiB).
    /// Its content is a pure function of bucket, key and seed and costs no memory.
    /// Repeatable; in the environment, separate several with ';'.
    #[arg(long = "generate", env = "TALON_STUB_GENERATE", value_delimiter = ';')]
    generate: Vec<GeneratedObject>,

    /// A dataset of generated objects, BUCKET/PREFIX=COUNT,MIN-MAX[,SEED]: COUNT objects
    /// PREFIX0000000 … (7-digit indexes) with sizes drawn from MIN..=MAX by index, e.g.
    /// `data/train/=1000000,4KiB-256KiB` (about 100 bytes of index per object, at most
    /// 10 million). Repeatable; in the environment, separate several with ';'.
    #[arg(
        long = "generate-set",
        env = "TALON_STUB_GENERATE_SET",
        value_delimiter = ';'
    )]
    generate_set: Vec<GeneratedSet>,

    /// S3 listener address ("off" to disable).
    #[arg(long, env = "TALON_STUB_S3_LISTEN", default_value = "127.0.0.1:9000")]
    s3_listen: String,

    /// Azure Blob listener address ("off" to disable).
    #[arg(
        long,
        env = "TALON_STUB_AZURE_LISTEN",
        default_value = "127.0.0.1:10000"
    )]
    azure_listen: String,

    /// Admin listener (/metrics, /healthz, /readyz, /admin/faults) ("off" to disable).
    #[arg(
        long,
        env = "TALON_STUB_ADMIN_LISTEN",
        default_value = "127.0.0.1:9100"
    )]
    admin_listen: String,

    /// Changing faults (`PUT /admin/faults`) needs `Authorization: Bearer TOKEN`.
    /// Without it, fault injection is open to whoever reaches --admin-listen, which is
    /// therefore refused on any address but loopback.
    #[arg(long, env = "TALON_STUB_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,

    /// Serve S3 virtual-hosted requests for BUCKET.DOMAIN (path-style always works).
    #[arg(long, alias = "domain", env = "TALON_STUB_S3_DOMAIN")]
    s3_domain: Option<String>,

    /// Serve Azure requests for ACCOUNT.blob.DOMAIN / ACCOUNT.DOMAIN host names
    /// (emulator path-style URLs always work).
    #[arg(long, env = "TALON_STUB_AZURE_DOMAIN")]
    azure_domain: Option<String>,

    /// The region S3 reports.
    #[arg(long, env = "TALON_STUB_REGION", default_value = "us-east-1")]
    region: String,

    /// S3 credentials ACCESS_KEY:SECRET; with any, every S3 request must be signed
    /// (SigV4 header or presigned). Repeatable; ',' separates several in the environment.
    #[arg(
        long = "s3-credentials",
        env = "TALON_STUB_S3_CREDENTIALS",
        value_delimiter = ','
    )]
    s3_credentials: Vec<String>,

    /// Azure storage account name.
    #[arg(long, env = "TALON_STUB_AZURE_ACCOUNT", default_value = DEFAULT_AZURE_ACCOUNT)]
    azure_account: String,

    /// Azure account key (base64); with it, every Azure request needs Shared Key or SAS.
    #[arg(long, env = "TALON_STUB_AZURE_KEY")]
    azure_key: Option<String>,

    /// Latency added to every request, in milliseconds.
    #[arg(long, env = "TALON_STUB_LATENCY_MS", default_value_t = 0)]
    latency_ms: u64,

    /// Cap on each response body's rate, bytes per second (KiB/MiB/GiB suffixes allowed).
    #[arg(long, env = "TALON_STUB_BANDWIDTH")]
    bandwidth: Option<String>,

    /// Probability (0..1) that a request fails with one of --error-kinds.
    #[arg(long, env = "TALON_STUB_ERROR_RATE", default_value_t = 0.0)]
    error_rate: f64,

    /// Failures to inject: slowdown (503), internal (500), reset (connection closed),
    /// truncate (GET body cut halfway).
    #[arg(
        long,
        env = "TALON_STUB_ERROR_KINDS",
        value_delimiter = ',',
        default_value = "slowdown"
    )]
    error_kinds: Vec<FaultKind>,

    /// Requests per second above which requests are answered 503 SlowDown / ServerBusy,
    /// as S3 throttles a prefix (about 5,500 GETs and HEADs a second); off by default.
    #[arg(long, env = "TALON_STUB_THROTTLE_RPS")]
    throttle_rps: Option<u64>,

    /// Most concurrent connections per listener.
    #[arg(long, env = "TALON_STUB_MAX_CONNECTIONS", default_value_t = 4096)]
    max_connections: usize,

    /// Once listening, write the endpoints as JSON to this file (atomically).
    #[arg(long, env = "TALON_STUB_READY_FILE")]
    ready_file: Option<PathBuf>,
}

fn listen_addr(value: &str, flag: &str) -> anyhow::Result<Option<SocketAddr>> {
    if value == "off" {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .with_context(|| format!("{flag} '{value}' is not an address like 127.0.0.1:9000"))
}

fn config(args: &Args) -> anyhow::Result<StubConfig> {
    let mut s3_credentials = BTreeMap::new();
    for c in &args.s3_credentials {
        let Some((ak, sk)) = c
            .split_once(':')
            .filter(|(a, s)| !a.is_empty() && !s.is_empty())
        else {
            bail!("--s3-credentials '{c}' is not ACCESS_KEY:SECRET");
        };
        s3_credentials.insert(ak.to_owned(), sk.to_owned());
    }
    let azure_key = match &args.azure_key {
        Some(k) => Some(
            AccountKey::from_base64(k)
                .map_err(|e| anyhow::anyhow!("--azure-key: {}", e.message()))?,
        ),
        None => None,
    };
    let bandwidth = match &args.bandwidth {
        Some(b) => Some(parse_size(b).map_err(|e| anyhow::anyhow!("--bandwidth: {e}"))?),
        None => None,
    };
    Ok(StubConfig {
        data_dir: args.data_dir.clone(),
        generated: args
            .generate
            .iter()
            .cloned()
            .chain(args.generate_set.iter().flat_map(GeneratedSet::objects))
            .collect(),
        s3_listen: listen_addr(&args.s3_listen, "--s3-listen")?,
        azure_listen: listen_addr(&args.azure_listen, "--azure-listen")?,
        admin_listen: listen_addr(&args.admin_listen, "--admin-listen")?,
        s3_addressing: match &args.s3_domain {
            Some(domain) => S3Addressing::VirtualHosted {
                domain: domain.to_ascii_lowercase(),
            },
            None => S3Addressing::PathStyle,
        },
        azure_addressing: match &args.azure_domain {
            Some(domain) => AzureAddressing::HostStyle {
                domain: domain.to_ascii_lowercase(),
            },
            None => AzureAddressing::PathStyle,
        },
        region: args.region.clone(),
        s3_credentials,
        azure_account: args.azure_account.clone(),
        azure_key,
        faults: FaultConfig {
            latency_ms: args.latency_ms,
            bandwidth_bytes_per_sec: bandwidth,
            error_rate: args.error_rate,
            error_kinds: args.error_kinds.clone(),
            throttle_rps: args.throttle_rps,
            fail_next: 0,
        },
        max_connections: args.max_connections,
        admin_token: admin_token(args)?,
    })
}

/// The fault-injection token, refused missing where the admin listener is reachable
/// from another host: an open `PUT /admin/faults` there lets anyone break the origin.
fn admin_token(args: &Args) -> anyhow::Result<Option<String>> {
    let token = args.admin_token.clone().filter(|t| !t.is_empty());
    let listen = listen_addr(&args.admin_listen, "--admin-listen")?;
    if let Some(addr) = listen
        && token.is_none()
        && !addr.ip().is_loopback()
    {
        anyhow::bail!(
            "--admin-listen {addr} without --admin-token (TALON_STUB_ADMIN_TOKEN) would let \
             anyone who reaches it inject faults: give a token, or listen on loopback"
        );
    }
    Ok(token)
}

/// Runs the part with `args` until SIGTERM or SIGINT, then drains.
///
/// # Errors
/// A configuration that does not hold, or a listener that cannot start.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let config = config(&args)?;
    let stub = crate::start(config).await?;
    let s3 = stub.s3_url().unwrap_or_default();
    let azure = stub
        .azure_addr
        .map(|a| format!("http://{a}"))
        .unwrap_or_default();
    let admin = stub.admin_url().unwrap_or_default();
    tracing::info!(data_dir = %stub.data_dir().display(), %s3, %azure, %admin, "origin stub listening");
    if let Some(path) = &args.ready_file {
        let ready = serde_json::json!({
            "s3": s3,
            "azure": azure,
            "admin": admin,
            "azure_account": args.azure_account,
            "data_dir": stub.data_dir(),
        });
        talon_process::write_ready_file(path, &ready)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    talon_process::shutdown_signal().await;
    tracing::info!("shutting down: draining in-flight requests");
    stub.shutdown().await;
    Ok(())
}
