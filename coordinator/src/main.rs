//! `talon-coordinator`: an alias of `talon coordinator`, kept for scripts and deployments that
//! name the part's own binary. The part is in `talon_coordinator::cli`.

use clap::Parser;

/// Talon's coordinator: worker membership, the placement epoch and the admin API (the same as `talon coordinator`).
#[derive(Debug, Parser)]
#[command(name = "talon-coordinator", version)]
struct Cli {
    #[command(flatten)]
    args: talon_coordinator::cli::Args,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    talon_process::init_logs();
    talon_coordinator::cli::run(Cli::parse().args).await
}
