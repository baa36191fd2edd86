//! `talon-worker`: an alias of `talon worker`, kept for scripts and deployments that
//! name the part's own binary. The part is in `talon_worker::cli`.

use clap::Parser;

/// A Talon cache worker (the same as `talon worker`).
#[derive(Debug, Parser)]
#[command(name = "talon-worker", version, after_help = talon_process::LOG_HELP)]
struct Cli {
    #[command(flatten)]
    args: talon_worker::cli::Args,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    talon_process::init_logs();
    talon_process::tune_allocator();
    match talon_worker::cli::run(Cli::parse().args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => talon_process::exit_with_error("talon-worker", e.as_ref()),
    }
}
