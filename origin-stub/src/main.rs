//! `talon-origin-stub`: an alias of `talon origin`, kept for scripts and deployments that
//! name the part's own binary. The part is in `talon_origin_stub::cli`.

use clap::Parser;

/// One origin that speaks S3 and Azure Blob over a folder and generated objects (the same as `talon origin`).
#[derive(Debug, Parser)]
#[command(name = "talon-origin-stub", version, after_help = talon_process::LOG_HELP)]
struct Cli {
    #[command(flatten)]
    args: talon_origin_stub::cli::Args,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    talon_process::init_logs();
    match talon_origin_stub::cli::run(Cli::parse().args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => talon_process::exit_with_error("talon-origin-stub", e.as_ref()),
    }
}
