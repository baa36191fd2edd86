//! `talon-coordinator`: worker membership, the placement epoch and the admin API.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use talon_coordinator::CoordinatorConfig;

/// Talon's coordinator: tracks which workers are alive (register, heartbeat, expiry,
/// drain), publishes the membership epoch, and serves the admin API and /metrics.
/// Membership is soft state: after a restart it is rebuilt from the next heartbeats.
#[derive(Debug, Parser)]
#[command(name = "talon-coordinator", version)]
struct Args {
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
    cluster: talon_coordinator::auth::ClusterSecretArgs,

    /// Most workers at once; registrations beyond are refused.
    #[arg(long, env = "TALON_COORDINATOR_MAX_MEMBERS", default_value_t = 1024)]
    max_members: usize,

    /// Once listening, write {"url": "http://HOST:PORT"} to this file (atomically), so a
    /// test or script that started the coordinator on port 0 can find it.
    #[arg(long, env = "TALON_COORDINATOR_READY_FILE")]
    ready_file: Option<PathBuf>,
}

/// Writes the ready file through a temporary file in the same folder and a rename, so
/// a reader never sees it half written.
fn write_ready_file(path: &Path, url: &str) -> anyhow::Result<()> {
    let body = serde_json::to_vec(&serde_json::json!({ "url": url }))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, body).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TALON_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let cluster_secret = args.cluster.load()?;
    let config = CoordinatorConfig {
        listen: args.listen,
        cluster_secret,
        max_members: args.max_members,
        heartbeat_interval: Duration::from_millis(args.heartbeat_interval_ms),
        expiry: Duration::from_millis(args.expiry_ms),
    };
    let coordinator = talon_coordinator::start(config).await?;
    let url = coordinator.url();
    tracing::info!(
        %url,
        heartbeat_interval_ms = args.heartbeat_interval_ms,
        expiry_ms = args.expiry_ms,
        "coordinator listening"
    );
    if let Some(path) = &args.ready_file {
        write_ready_file(path, &url)?;
    }
    shutdown_signal().await;
    tracing::info!("shutting down");
    coordinator.shutdown().await;
    Ok(())
}
