//! `talon-gateway`: an alias of `talon gateway`, kept for scripts and deployments that
//! name the part's own binary. The part is in `talon_gateway::cli`.

use clap::Parser;

/// Talon's S3 and Azure Blob gateway (the same as `talon gateway`).
#[derive(Debug, Parser)]
#[command(name = "talon-gateway", version)]
struct Cli {
    #[command(flatten)]
    args: talon_gateway::cli::Args,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    talon_process::init_logs();
    talon_gateway::cli::run(Cli::parse().args).await
}
