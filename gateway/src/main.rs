//! `talon-gateway`: an alias of `talon gateway`, kept for scripts and deployments that
//! name the part's own binary. The part is in `talon_gateway::cli`.

use clap::Parser;

/// Talon's S3 and Azure Blob gateway (the same as `talon gateway`).
#[derive(Debug, Parser)]
#[command(name = "talon-gateway", version, after_help = talon_process::LOG_HELP)]
struct Cli {
    #[command(flatten)]
    args: talon_gateway::cli::Args,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    talon_process::init_logs();
    talon_process::tune_allocator();
    match talon_gateway::cli::run(Cli::parse().args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => talon_process::exit_with_error("talon-gateway", e.as_ref()),
    }
}
