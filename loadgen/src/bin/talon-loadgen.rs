//! `talon-loadgen`: an alias of `talon loadgen`, kept for scripts and benches that name
//! the tool's own binary. The tool is in `talon_loadgen::cli`.

use std::process::ExitCode;

use clap::Parser;

/// Load generator for a Talon worker's data plane or an HTTP server (the same as
/// `talon loadgen`).
#[derive(Debug, Parser)]
#[command(name = "talon-loadgen", version)]
struct Cli {
    #[command(flatten)]
    args: talon_loadgen::cli::Args,
}

fn main() -> ExitCode {
    talon_loadgen::cli::run(Cli::parse().args)
}
