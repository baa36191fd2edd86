//! `talon-worker`: an alias of `talon worker`, kept for scripts and deployments that
//! name the part's own binary. The part is in `talon_worker::cli`.

use clap::Parser;

/// A Talon cache worker (the same as `talon worker`).
#[derive(Debug, Parser)]
#[command(name = "talon-worker", version)]
struct Cli {
    #[command(flatten)]
    args: talon_worker::cli::Args,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    talon_process::init_logs();
    talon_worker::cli::run(Cli::parse().args).await
}
