//! `talon loadgen` (and its alias, the `talon-loadgen` binary): drives a Talon
//! worker's data plane (or, for comparison, an HTTP server) with range reads and reports
//! throughput, latency percentiles and the server's CPU and memory. See the crate docs
//! for what it measures and what it does not.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::{LoadConfig, Report, Target, markdown_table};
use anyhow::Context;
use talon_core::{ObjectId, parse_byte_size};

/// Load generator for a Talon worker's data plane.
///
/// Opens --conns connections, learns the object's size and version with one
/// Stat, then sends ReadRange requests of --range-size bytes at random
/// --align-ed offsets inside the first --blocks blocks, --depth in flight per
/// connection (closed loop) or at a constant --rate. Prints a progress line
/// on stderr every second and a markdown table at the end (with --json, one
/// JSON line on stdout and the table on stderr). A run with any failed
/// request or no samples exits 1 and prints the first error verbatim; its
/// latency is not reported.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Worker data-plane address, HOST:PORT (Talon wire protocol).
    #[arg(
        long,
        env = "TALON_LOADGEN_ADDR",
        conflicts_with = "http",
        required_unless_present_any = ["http", "summarize"]
    )]
    addr: Option<String>,

    /// Object to read, as a key path: s3/BUCKET/KEY or az/ACCOUNT/CONTAINER/BLOB.
    /// It must exist at the worker's origin.
    #[arg(
        long,
        env = "TALON_LOADGEN_OBJECT",
        default_value = "s3/bench/block.bin"
    )]
    object: String,

    /// File holding the cluster secret (the worker's --cluster-secret-file); each wire
    /// connection authenticates with it before the load.
    #[arg(long, env = "TALON_CLUSTER_SECRET_FILE")]
    cluster_secret_file: Option<std::path::PathBuf>,

    /// Instead of a worker, an HTTP/1.1 URL answering Range requests
    /// (http://host:port/path). One request in flight per keep-alive
    /// connection: --depth must be 1.
    #[arg(long, env = "TALON_LOADGEN_HTTP")]
    http: Option<String>,

    /// Block size, bytes or with KiB/MiB/GiB (a power of two; for a worker, a
    /// multiple of its page size).
    #[arg(long, env = "TALON_LOADGEN_BLOCK_SIZE", default_value = "4MiB", value_parser = parse_byte_size)]
    block_size: u64,

    /// Reads are spread over the first N blocks of the object.
    #[arg(long, env = "TALON_LOADGEN_BLOCKS", default_value_t = 1)]
    blocks: u64,

    /// Offsets are multiples of this many bytes (a power of two).
    #[arg(long, env = "TALON_LOADGEN_ALIGN", default_value = "4KiB", value_parser = parse_byte_size)]
    align: u64,

    /// Bytes per request, bytes or with KiB/MiB.
    #[arg(long, env = "TALON_LOADGEN_RANGE_SIZE", default_value = "64KiB", value_parser = parse_byte_size)]
    range_size: u64,

    /// Connections, all opened before the clock starts.
    #[arg(long, env = "TALON_LOADGEN_CONNS", default_value_t = 1)]
    conns: usize,

    /// Requests in flight per connection (pipelined; wire protocol only).
    #[arg(long, env = "TALON_LOADGEN_DEPTH", default_value_t = 1)]
    depth: usize,

    /// Measured window, seconds.
    #[arg(long, env = "TALON_LOADGEN_DURATION", default_value = "10", value_parser = parse_secs)]
    duration: Duration,

    /// Load before the window, seconds; its requests are not sampled.
    #[arg(long, env = "TALON_LOADGEN_WARMUP", default_value = "3", value_parser = parse_secs)]
    warmup: Duration,

    /// Constant offered rate, requests per second across all connections;
    /// latency is then measured from each request's intended send time.
    /// Without it: closed loop at --depth per connection.
    #[arg(long, env = "TALON_LOADGEN_RATE")]
    rate: Option<f64>,

    /// Server process(es) whose CPU (user, kernel) and RSS are sampled from
    /// /proc across the window; comma-separated or repeated.
    #[arg(long, env = "TALON_LOADGEN_SERVER_PID", value_delimiter = ',')]
    server_pid: Vec<u32>,

    /// Also sample the children of --server-pid (e.g. nginx's workers).
    #[arg(long, env = "TALON_LOADGEN_SERVER_CHILDREN")]
    server_children: bool,

    /// Before the clock starts, read the chosen blocks end to end once
    /// (makes a worker's pages present); not measured.
    #[arg(long, env = "TALON_LOADGEN_PREFETCH")]
    prefetch: bool,

    /// Seed of the offset generator (connection i uses seed + i).
    #[arg(long, env = "TALON_LOADGEN_SEED", default_value_t = 1)]
    seed: u64,

    /// Runtime threads of the load generator (default: the CPU count).
    #[arg(long, env = "TALON_LOADGEN_THREADS")]
    threads: Option<usize>,

    /// Limit on opening one connection, seconds.
    #[arg(long, env = "TALON_LOADGEN_CONNECT_TIMEOUT", default_value = "10", value_parser = parse_secs)]
    connect_timeout: Duration,

    /// After the window, how long replies still owed are awaited, seconds;
    /// one still missing then is a failed request.
    #[arg(long, env = "TALON_LOADGEN_DRAIN_TIMEOUT", default_value = "10", value_parser = parse_secs)]
    drain_timeout: Duration,

    /// Name of the target in the report (default: its address).
    #[arg(long, env = "TALON_LOADGEN_LABEL")]
    label: Option<String>,

    /// Print the report as one JSON line on stdout (the table goes to stderr).
    #[arg(long, env = "TALON_LOADGEN_JSON")]
    json: bool,

    /// No progress line.
    #[arg(long, env = "TALON_LOADGEN_QUIET")]
    quiet: bool,

    /// Print one markdown table of the reports in this JSON Lines file (from
    /// --json runs) and exit; no load is run.
    #[arg(long, value_name = "FILE")]
    summarize: Option<PathBuf>,
}

fn parse_secs(s: &str) -> Result<Duration, String> {
    let x: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    Duration::try_from_secs_f64(x)
        .map_err(|_| format!("'{s}' is not a non-negative number of seconds"))
}

/// The cluster secret from --cluster-secret-file or TALON_CLUSTER_SECRET.
fn load_secret(
    file: Option<&std::path::Path>,
) -> anyhow::Result<talon_core::cluster_auth::ClusterSecret> {
    let bytes = match file {
        Some(path) => std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        None => std::env::var("TALON_CLUSTER_SECRET")
            .map(String::into_bytes)
            .map_err(|_| {
                anyhow::anyhow!("--addr needs --cluster-secret-file or TALON_CLUSTER_SECRET")
            })?,
    };
    Ok(talon_core::cluster_auth::ClusterSecret::new(&bytes)?)
}

fn config(args: &Args) -> anyhow::Result<LoadConfig> {
    let target = match (&args.addr, &args.http) {
        (Some(addr), None) => Target::Wire {
            addr: addr.clone(),
            object: ObjectId::from_key_path(&args.object)
                .with_context(|| format!("--object '{}'", args.object))?,
            secret: load_secret(args.cluster_secret_file.as_deref())?,
        },
        (None, Some(url)) => Target::Http { url: url.clone() },
        _ => anyhow::bail!("give exactly one of --addr and --http"),
    };
    let range_size = u32::try_from(args.range_size)
        .map_err(|_| anyhow::anyhow!("--range-size {} is too large", args.range_size))?;
    let mut c = LoadConfig::new(target);
    c.label = args.label.clone();
    c.block_size = args.block_size;
    c.blocks = args.blocks;
    c.align = args.align;
    c.range_size = range_size;
    c.conns = args.conns;
    c.depth = args.depth;
    c.duration = args.duration;
    c.warmup = args.warmup;
    c.rate = args.rate;
    c.server_pids = args.server_pid.clone();
    c.server_children = args.server_children;
    c.prefetch = args.prefetch;
    c.seed = args.seed;
    c.connect_timeout = args.connect_timeout;
    c.drain_timeout = args.drain_timeout;
    c.progress = !args.quiet;
    c.validate()?;
    Ok(c)
}

fn summarize(path: &PathBuf) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut reports = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let r: Report = serde_json::from_str(line).with_context(|| {
            format!(
                "{} line {}: not a talon-loadgen report",
                path.display(),
                i + 1
            )
        })?;
        reports.push(r);
    }
    print!("{}", markdown_table(&reports));
    Ok(())
}

/// Runs the load and prints its report; the exit code says whether every request
/// succeeded.
pub fn run(args: Args) -> ExitCode {
    match real_main(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("talon-loadgen: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn real_main(args: &Args) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.summarize {
        summarize(path)?;
        return Ok(ExitCode::SUCCESS);
    }
    let config = config(args)?;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(n) = args.threads {
        anyhow::ensure!(n > 0, "--threads must be at least 1");
        builder.worker_threads(n);
    }
    let runtime = builder.build().context("starting the runtime")?;
    let report = runtime.block_on(crate::run(&config))?;
    let table = markdown_table(std::slice::from_ref(&report));
    if args.json {
        let line = serde_json::to_string(&report)?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
        eprint!("{table}");
    } else {
        print!("{table}");
    }
    if report.ok {
        Ok(ExitCode::SUCCESS)
    } else {
        let why = report.first_error.as_deref().unwrap_or("no samples");
        eprintln!(
            "talon-loadgen: run FAILED ({} failed request(s), {} samples); latency not reported. First error: {why}",
            report.errors, report.requests
        );
        Ok(ExitCode::FAILURE)
    }
}
