//! `talon-coordinator`: an alias of `talon coordinator`, kept for scripts and deployments that
//! name the part's own binary. The part is in `talon_coordinator::cli`.

use clap::Parser;

/// Talon's coordinator: worker membership, the placement epoch and the admin API (the same as `talon coordinator`).
#[derive(Debug, Parser)]
#[command(name = "talon-coordinator", version, after_help = talon_process::LOG_HELP)]
struct Cli {
    #[command(flatten)]
    args: talon_coordinator::cli::Args,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    talon_process::init_logs();
    match talon_coordinator::cli::run(Cli::parse().args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => talon_process::exit_with_error("talon-coordinator", e.as_ref()),
    }
}
