//! `talon coordinator` (and its alias, the `talon-coordinator` binary): worker
//! membership, the placement epoch and the admin API, from the command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::CoordinatorConfig;
use anyhow::Context;

/// Talon's coordinator: tracks which workers are alive (register, heartbeat, expiry,
/// drain), publishes the membership epoch, and serves the admin API and /metrics.
/// With --state memory (the default) membership is soft state in this process, rebuilt
/// from the next heartbeats after a restart; with --state etcd://… it lives in etcd and
/// every coordinator given the same etcd serves the same cluster.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address of the admin API (HTTP/JSON under /v1, plus /healthz, /readyz, /metrics).
    /// Port 0 picks a free port (see --ready-file).
    #[arg(
        long,
        env = "TALON_COORDINATOR_LISTEN",
        default_value = "127.0.0.1:7000"
    )]
    listen: SocketAddr,

    /// How often workers are told to heartbeat, in milliseconds.
    #[arg(
        long,
        env = "TALON_COORDINATOR_HEARTBEAT_INTERVAL_MS",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    heartbeat_interval_ms: u64,

    /// A worker missing heartbeats this long is dropped, in milliseconds. Must be longer
    /// than --heartbeat-interval-ms; a few intervals is sensible.
    #[arg(long, env = "TALON_COORDINATOR_EXPIRY_MS", default_value_t = 5000)]
    expiry_ms: u64,

    #[command(flatten)]
    cluster: crate::auth::ClusterSecretArgs,

    /// Most workers at once; registrations beyond are refused.
    #[arg(long, env = "TALON_COORDINATOR_MAX_MEMBERS", default_value_t = 1024)]
    max_members: usize,

    /// Where membership lives: memory (this process only), or
    /// etcd://HOST:PORT[,HOST:PORT...] (shared by every coordinator pointed at it:
    /// a lease per worker, a watch per coordinator; docs/operations.md).
    #[arg(long, env = "TALON_COORDINATOR_STATE", default_value = "memory")]
    state: String,

    /// Serve a read-only status page (cluster, workers) at this address, without
    /// authentication: it shows worker addresses, so bind it where only operators reach
    /// it. Off by default.
    #[arg(long, env = "TALON_COORDINATOR_STATUS_LISTEN")]
    status_listen: Option<SocketAddr>,

    /// Origins that warm jobs list their prefixes at, as URLs (s3, s3+http://HOST:PORT,
    /// az://ACCOUNT, az+http://HOST:PORT/ACCOUNT; comma-separated or repeated).
    /// Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION and
    /// AZURE_STORAGE_KEY. Without any, POST /v1/warm is refused.
    #[arg(long, env = "TALON_COORDINATOR_ORIGIN", value_delimiter = ',')]
    origin: Vec<String>,

    /// PEM bundle of the CA that etcd's certificates are checked against: talk to etcd
    /// over TLS (only those CAs are trusted). Without it, etcd is reached over plain
    /// HTTP, which only a trusted network should carry.
    #[arg(long, env = "TALON_ETCD_CA")]
    etcd_ca: Option<PathBuf>,

    /// PEM certificate of this coordinator, for an etcd that requires client
    /// certificates (its --client-cert-auth); needs --etcd-ca and --etcd-key.
    #[arg(long, env = "TALON_ETCD_CERT", requires_all = ["etcd_ca", "etcd_key"])]
    etcd_cert: Option<PathBuf>,

    /// PEM private key of --etcd-cert.
    #[arg(long, env = "TALON_ETCD_KEY", requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,

    /// The prefix of the coordinator's keys in etcd (one cluster per prefix).
    #[arg(
        long,
        env = "TALON_COORDINATOR_STATE_PREFIX",
        default_value = "/talon/"
    )]
    state_prefix: String,

    /// The cluster's block size: gateways and `talon warm` split objects into blocks of
    /// it, and take it from here (a part given another refuses to start). A power of two.
    #[arg(long, env = "TALON_COORDINATOR_BLOCK_SIZE", default_value = "256MiB", value_parser = talon_core::size::parse_byte_size)]
    block_size: u64,
    /// The workers' page size (their unit of presence and of origin fetches): workers
    /// take it from here; one given another is refused. A power of two, at most
    /// --block-size.
    #[arg(long, env = "TALON_COORDINATOR_PAGE_SIZE", default_value = "1MiB", value_parser = talon_core::size::parse_byte_size)]
    page_size: u64,
    /// Once listening, write {"url": "http://HOST:PORT"} to this file (atomically), so a
    /// test or script that started the coordinator on port 0 can find it.
    #[arg(long, env = "TALON_COORDINATOR_READY_FILE")]
    ready_file: Option<PathBuf>,
}

/// Runs the part with `args` until SIGTERM or SIGINT, then drains.
///
/// # Errors
/// A configuration that does not hold, or a listener that cannot start.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let cluster_secret = args.cluster.load()?;
    talon_core::BlockGeometry::new(args.block_size, args.page_size).context(
        "--block-size and --page-size must be powers of two, the page no larger than the block",
    )?;
    let config = CoordinatorConfig {
        listen: args.listen,
        cluster_secret,
        max_members: args.max_members,
        heartbeat_interval: Duration::from_millis(args.heartbeat_interval_ms),
        expiry: Duration::from_millis(args.expiry_ms),
        state: crate::StateConfig::parse(&args.state, &args.state_prefix)?.with_tls(
            args.etcd_ca.map(|ca| crate::etcd::EtcdTls {
                ca,
                client: args.etcd_cert.zip(args.etcd_key),
            }),
        )?,
        status_listen: args.status_listen,
        origins: warm_origins(&args.origin)?,
        geometry: Some(talon_coordinator_client::api::ClusterGeometry {
            block_size: args.block_size,
            page_size: args.page_size,
        }),
    };
    let coordinator = crate::start(config).await?;
    let url = coordinator.url();
    if let Some(status) = coordinator.status_addr {
        tracing::info!(url = %format!("http://{status}/"), "status page listening");
    }
    tracing::info!(
        %url,
        heartbeat_interval_ms = args.heartbeat_interval_ms,
        expiry_ms = args.expiry_ms,
        state = %args.state,
        block_size = args.block_size,
        page_size = args.page_size,
        "coordinator listening"
    );
    if let Some(path) = &args.ready_file {
        talon_process::write_ready_file(path, &serde_json::json!({ "url": url }))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    talon_process::shutdown_signal().await;
    tracing::info!("shutting down");
    coordinator.shutdown().await;
    Ok(())
}

/// The origins of `--origin`, for warm jobs; `None` when there are none.
fn warm_origins(urls: &[String]) -> anyhow::Result<Option<talon_protocols::origin::Origins>> {
    use talon_protocols::origin_spec::{OriginSettings, OriginSpec};
    if urls.is_empty() {
        return Ok(None);
    }
    let settings = OriginSettings::from_env().map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    let specs = urls
        .iter()
        .map(|u| OriginSpec::parse(u, &settings.s3_region))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("--origin: {}", e.message()))?;
    Ok(Some(talon_protocols::origin::Origins::from_specs(
        &specs, &settings,
    )?))
}
