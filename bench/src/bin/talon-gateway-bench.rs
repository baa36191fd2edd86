//! `talon-gateway-bench`: the gateway's HTTP runtime around delays the
//! bench controls, then a deliberately slow consumer with the gateway's
//! memory sampled. A regression floor, not a capacity claim.
//!
//! It starts real processes on loopback from the release binaries: the
//! origin stub, a coordinator, a worker, and two gateways (an S3 front on
//! the cache route, another on the origin route). Between the cache
//! gateway and the worker sits a delay line inside the bench (the worker
//! advertises the line's address), which forwards every chunk the worker
//! sends `D` ms after it arrived. Then:
//!
//! 1. **Delay sweeps.** For each `D` (default 0, 1, 5, 20 ms), a closed
//!    loop of `--concurrency` signed S3 GETs of random aligned ranges
//!    (default 1 MiB of a 64 MiB object) runs for a warmup and a measured
//!    window: on the cache route with `D` in the delay line (after warming
//!    the cache), on the origin route with `D` as the stub's latency fault.
//!    Each point reports rps, MiB/s, p50, p99, max, errors, and the ceiling
//!    Little's law allows, `concurrency / (trips × D + L0)`, where `L0` is
//!    the route's mean latency at `D = 0` and `trips` is how many delayed
//!    round trips one request makes (1 on either route: the worker's answer,
//!    or the origin's answer to the gateway's one GET). The
//!    achieved fraction of that ceiling is the evidence that throughput
//!    follows the delay instead of collapsing under it.
//! 2. **Slow consumer.** A large generated object (default 1 GiB) is
//!    streamed through each gateway to a reader that paces itself (default
//!    32 MiB/s) for a stated time (default 15 s) while the gateway's RSS is
//!    read from `/proc` every 250 ms. Growth (max − start) beyond a bound
//!    (default 64 MiB) fails the run: a gateway must hold a slow reader's
//!    body with bounded memory.
//!
//! Every response is checked in full: status, length, `Content-Range`, and
//! the SHA-256 of the body against the generator's bytes. The first wrong
//! response stops the run and is printed verbatim; the run exits 1.
//!
//! Output: progress lines on stderr, markdown tables at the end, and JSON
//! Lines (one per point, with the host and commit) in
//! `bench/results/gateway-bench.jsonl` (and on stdout with `--json`, the
//! tables then going to stderr).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use talon_core::Backend;

use anyhow::{Context, bail};
use clap::Parser;
use talon_bench::delay_line::DelayLine;
use talon_bench::deployment::{
    BenchSetup, Coordinator, Gateway, GatewaySpec, Geometry, Route, Stub, Worker, WorkerSpec,
    client_auth, run_bench,
};
use talon_bench::host::{HostInfo, load_line};
use talon_bench::http_load::{
    Length, LoadOutcome, LoadSpec, ObjectTarget, Pick, paced_read, run_load,
};
use talon_bench::results::JsonLines;
use talon_bench::summary::{LatencySummary, fmt_latency, little_ceiling, mib};
use talon_bench::verify::ExpectedRanges;
use talon_bench::watch::Watched;
use talon_core::parse_byte_size;
use talon_loadgen::procfs::load_average;
use talon_loadgen::stats::thousands;
use talon_origin_stub::faults::FaultConfig;
use talon_origin_stub::generated::GeneratedObject;

/// The gateway's HTTP runtime around controlled worker and origin delays,
/// then a slow consumer with the gateway's RSS sampled.
///
/// Starts the origin stub, a coordinator, a worker behind a delay line and
/// two gateways (S3 front; cache route and origin route) from the release
/// binaries (build them with `cargo build --release --bins`), sweeps the
/// delays, streams a large object to a slow reader, and prints markdown
/// tables; JSON Lines go to --out. Exits 1 on any wrong response or when
/// the gateway's RSS grows past --rss-bound.
#[derive(Debug, Parser)]
#[command(name = "talon-gateway-bench", version)]
struct Args {
    /// Requests in flight, one per keep-alive connection.
    #[arg(long, env = "TALON_GATEWAY_BENCH_CONCURRENCY", default_value_t = 16)]
    concurrency: usize,

    /// Delays swept, milliseconds, comma-separated (0 is always measured
    /// first: it is the base of the Little's-law ceiling).
    #[arg(
        long,
        env = "TALON_GATEWAY_BENCH_DELAYS_MS",
        value_delimiter = ',',
        default_value = "0,1,5,20"
    )]
    delays_ms: Vec<u64>,

    /// Routes swept: cache (delay in the relay between gateway and worker),
    /// origin (delay as the origin stub's latency). Comma-separated.
    #[arg(
        long,
        env = "TALON_GATEWAY_BENCH_ROUTES",
        value_delimiter = ',',
        default_value = "cache,origin",
        value_parser = parse_route
    )]
    routes: Vec<Route>,

    /// Bytes per ranged GET (KiB/MiB suffixes allowed); offsets are
    /// multiples of it.
    #[arg(long, env = "TALON_GATEWAY_BENCH_RANGE_SIZE", default_value = "1MiB", value_parser = parse_byte_size)]
    range_size: u64,

    /// Size of the generated object the ranges are read from.
    #[arg(long, env = "TALON_GATEWAY_BENCH_OBJECT_SIZE", default_value = "64MiB", value_parser = parse_byte_size)]
    object_size: u64,

    /// Unmeasured load before each point's window, seconds.
    #[arg(long, env = "TALON_GATEWAY_BENCH_WARMUP_S", default_value = "1", value_parser = parse_secs)]
    warmup_s: Duration,

    /// Measured window of each point, seconds.
    #[arg(long, env = "TALON_GATEWAY_BENCH_WINDOW_S", default_value = "5", value_parser = parse_secs)]
    window_s: Duration,

    /// Size of the generated object streamed to the slow consumer.
    #[arg(long, env = "TALON_GATEWAY_BENCH_STREAM_SIZE", default_value = "1GiB", value_parser = parse_byte_size)]
    stream_size: u64,

    /// The slow consumer's read rate, bytes per second (KiB/MiB suffixes).
    #[arg(long, env = "TALON_GATEWAY_BENCH_SLOW_RATE", default_value = "32MiB", value_parser = parse_byte_size)]
    slow_rate: u64,

    /// How long the slow consumer reads on each route, seconds (it stops
    /// earlier if the object ends).
    #[arg(long, env = "TALON_GATEWAY_BENCH_SLOW_S", default_value = "15", value_parser = parse_secs)]
    slow_s: Duration,

    /// Largest acceptable growth of the gateway's RSS while it streams to
    /// the slow consumer (max − start); more fails the run.
    #[arg(long, env = "TALON_GATEWAY_BENCH_RSS_BOUND", default_value = "64MiB", value_parser = parse_byte_size)]
    rss_bound: u64,

    /// How often the gateway's RSS is read, milliseconds.
    #[arg(
        long,
        env = "TALON_GATEWAY_BENCH_RSS_INTERVAL_MS",
        default_value_t = 250
    )]
    rss_interval_ms: u64,

    /// Block size of the cache cluster.
    #[arg(long, env = "TALON_GATEWAY_BENCH_BLOCK_SIZE", default_value = "64MiB", value_parser = parse_byte_size)]
    block_size: u64,

    /// Seed of the range picker.
    #[arg(long, env = "TALON_GATEWAY_BENCH_SEED", default_value_t = 1)]
    seed: u64,

    /// JSON Lines file (default: bench/results/gateway-bench.jsonl in the
    /// repository).
    #[arg(long, env = "TALON_GATEWAY_BENCH_OUT")]
    out: Option<PathBuf>,

    /// Also print the JSON Lines on stdout (the tables then go to stderr).
    #[arg(long, env = "TALON_GATEWAY_BENCH_JSON")]
    json: bool,

    /// Keep the temporary folder (every process's log, configs, caches)
    /// instead of removing it at exit; its path is printed.
    #[arg(long, env = "TALON_GATEWAY_BENCH_KEEP_DIR")]
    keep_dir: bool,

    /// Folder of the Talon binaries (default: this binary's folder).
    #[arg(long, env = "TALON_GATEWAY_BENCH_BIN_DIR")]
    bin_dir: Option<PathBuf>,
}

fn parse_route(s: &str) -> Result<Route, String> {
    match s.trim() {
        "cache" => Ok(Route::Cache),
        "origin" => Ok(Route::Origin),
        other => Err(format!("unknown route '{other}' (cache, origin)")),
    }
}

fn parse_secs(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !(secs.is_finite() && secs >= 0.0) {
        return Err(format!("'{s}' is not a number of seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn progress(message: &str) {
    eprintln!("[gateway-bench] {message}");
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One point of a delay sweep, for the table.
struct Point {
    route: Route,
    delay_ms: u64,
    trips: u32,
    outcome: LoadOutcome,
    latency: Option<LatencySummary>,
    ceiling: Option<f64>,
}

/// One slow-consumer run, for the table.
struct SlowRow {
    route: Route,
    bytes: u64,
    read_s: f64,
    complete: bool,
    rss_start: u64,
    rss_max: u64,
    rss_end: u64,
    ok: bool,
}

/// The cache route's parts besides the gateway.
struct CacheSide {
    relay: DelayLine,
    gateway: Gateway,
    worker: Worker,
    _coordinator: Coordinator,
}

fn delays(args: &Args) -> Vec<u64> {
    let mut d = args.delays_ms.clone();
    d.push(0);
    d.sort_unstable();
    d.dedup();
    d
}

fn validate(args: &Args) -> anyhow::Result<()> {
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    if args.range_size == 0 || args.range_size > args.object_size {
        bail!("--range-size must be between 1 byte and --object-size");
    }
    if args.window_s.is_zero() {
        bail!("--window-s must be more than 0");
    }
    if args.slow_rate == 0 {
        bail!("--slow-rate must be more than 0");
    }
    if args.routes.is_empty() {
        bail!("--routes names no route");
    }
    if !args.block_size.is_power_of_two() {
        bail!("--block-size must be a power of two");
    }
    Ok(())
}

async fn run(args: Args) -> anyhow::Result<bool> {
    validate(&args)?;
    let began = Instant::now();
    let load_at_start = load_average();
    let BenchSetup {
        binaries,
        host,
        mut lines,
        tmp,
    } = BenchSetup::new(
        "gateway-bench",
        args.bin_dir.as_deref(),
        args.out.clone(),
        args.json,
        args.keep_dir,
    )?;
    let dir = tmp.path();

    let ranged = GeneratedObject::new("bench", "ranges.bin", args.object_size, 1);
    let streamed = GeneratedObject::new("bench", "stream.bin", args.stream_size, 2);
    progress(&format!("host: {}", host.describe()));
    for (k, v) in talon_bench::deployment::passed_through_env() {
        progress(&format!("passed to the parts: {k}={v}"));
    }
    progress("starting the origin stub");
    let stub = Stub::start(&binaries, dir, &[ranged.clone(), streamed.clone()]).await?;

    let mut cache_side = None;
    if args.routes.contains(&Route::Cache) {
        progress("starting a coordinator, a worker behind the delay line, the cache gateway");
        let mut coordinator = Coordinator::start(
            &binaries,
            dir,
            "coordinator",
            Geometry {
                block_size: args.block_size,
                page_size: 1 << 20,
            },
        )
        .await?;
        let relay = DelayLine::bind(([127, 0, 0, 1], 0).into()).await?;
        let coordinator_url = coordinator.url.clone();
        let worker = Worker::start(
            &binaries,
            dir,
            &stub,
            &mut coordinator,
            WorkerSpec {
                origin_request_limit: None,
                max_blocks: None,
                id: "worker",
                coordinator: &coordinator_url,
                advertise: Some(relay.local_addr().to_string()),
                capacity: args.object_size + args.stream_size + (256 << 20),
                page_size: 1 << 20,
                host: None,
            },
        )
        .await?;
        relay.set_upstream(
            worker
                .addr
                .parse()
                .with_context(|| format!("the worker's address '{}'", worker.addr))?,
        );
        let gateway = Gateway::start(
            &binaries,
            dir,
            &stub,
            GatewaySpec {
                origin_request_limit: None,
                name: "gateway-cache",
                front: Backend::S3,
                route: Route::Cache,
                coordinator: Some(&coordinator_url),
                block_size: args.block_size,
                // The worker is modelled as remote, behind the delay line: over TCP.
                local_reads: false,
                max_staleness_ms: None,
                hedge_budget: None,
                host: None,
                unsigned_reads: false,
                tls: None,
                read_ahead_objects: None,
            },
        )
        .await?;
        cache_side = Some(CacheSide {
            relay,
            gateway,
            worker,
            _coordinator: coordinator,
        });
    }
    let origin_gateway = if args.routes.contains(&Route::Origin) {
        progress("starting the origin gateway");
        Some(
            Gateway::start(
                &binaries,
                dir,
                &stub,
                GatewaySpec {
                    origin_request_limit: None,
                    name: "gateway-origin",
                    front: Backend::S3,
                    route: Route::Origin,
                    coordinator: None,
                    block_size: args.block_size,
                    local_reads: false,
                    max_staleness_ms: None,
                    hedge_budget: None,
                    host: None,
                    unsigned_reads: false,
                    tls: None,
                    read_ahead_objects: None,
                },
            )
            .await?,
        )
    } else {
        None
    };

    progress(&format!(
        "computing the SHA-256 of every {} range of the {} object",
        human_bytes(args.range_size),
        human_bytes(args.object_size)
    ));
    let expected = Arc::new(ExpectedRanges::new(ranged.clone(), args.range_size));
    let auth = client_auth(Backend::S3)?;
    let mut points: Vec<Point> = Vec::new();
    let mut failure: Option<String> = None;

    'routes: for &route in &args.routes {
        let (gateway, trips, injected) = match (route, &cache_side, &origin_gateway) {
            (Route::Cache, Some(c), _) => (&c.gateway, 1u32, "worker (delay line)"),
            (Route::Origin, _, Some(g)) => (g, 1u32, "origin (stub latency)"),
            _ => continue,
        };
        let target = Arc::new(ObjectTarget::s3(
            &gateway.url,
            &ranged.bucket,
            &ranged.key,
            auth.clone(),
        )?);
        let mut pids = vec![("gateway".to_owned(), vec![gateway.process.pid()])];
        if let (Route::Cache, Some(c)) = (route, &cache_side) {
            pids.push(("worker".to_owned(), vec![c.worker.process.pid()]));
        }
        pids.push(("stub".to_owned(), vec![stub.process.pid()]));
        let watch: Vec<(String, Watched)> = pids
            .into_iter()
            .map(|(n, p)| (n, Watched::new(p, false)))
            .collect();
        if route == Route::Cache {
            progress(&format!(
                "warming the cache: every one of {} ranges once",
                expected.len()
            ));
            let warm = run_load(LoadSpec {
                target: target.clone(),
                expected: expected.clone(),
                concurrency: args.concurrency,
                pick: Pick::EachOnce,
                length: Length::Requests(expected.len() as u64),
                watch: Vec::new(),
            })
            .await;
            if let Some(e) = warm.first_error {
                failure = Some(format!("warming the cache: {e}"));
                break 'routes;
            }
        }
        let mut base: Option<Duration> = None;
        for delay_ms in delays(&args) {
            let delay = Duration::from_millis(delay_ms);
            match (route, &cache_side) {
                (Route::Cache, Some(c)) => c.relay.set_delay(delay),
                _ => {
                    stub.set_faults(&FaultConfig {
                        latency_ms: delay_ms,
                        ..FaultConfig::default()
                    })
                    .await?
                }
            }
            let outcome = run_load(LoadSpec {
                target: target.clone(),
                expected: expected.clone(),
                concurrency: args.concurrency,
                pick: Pick::Random {
                    seed: args.seed.wrapping_add(delay_ms * 1000),
                },
                length: Length::Window {
                    warmup: args.warmup_s,
                    window: args.window_s,
                },
                watch: watch.clone(),
            })
            .await;
            let latency = LatencySummary::of(&outcome.latencies);
            if delay_ms == 0 {
                base = latency
                    .as_ref()
                    .map(|l| Duration::from_secs_f64(l.mean_us / 1e6));
            }
            let ceiling = base.and_then(|b| little_ceiling(args.concurrency, b, delay * trips));
            let point = Point {
                route,
                delay_ms,
                trips,
                outcome,
                latency,
                ceiling,
            };
            progress(&point_line(&point));
            lines.emit(&point_json(&args, &host, &point, injected, base))?;
            let error = point.outcome.first_error.clone();
            points.push(point);
            if let Some(e) = error {
                failure = Some(e);
                break 'routes;
            }
        }
        match (route, &cache_side) {
            (Route::Cache, Some(c)) => c.relay.set_delay(Duration::ZERO),
            _ => stub.set_faults(&FaultConfig::default()).await?,
        }
    }

    let mut slow_rows = Vec::new();
    if failure.is_none() {
        for &route in &args.routes {
            let gateway = match (route, &cache_side, &origin_gateway) {
                (Route::Cache, Some(c), _) => &c.gateway,
                (Route::Origin, _, Some(g)) => g,
                _ => continue,
            };
            match slow_consumer(&args, &host, &mut lines, route, gateway, &streamed, &auth).await? {
                Ok(row) => slow_rows.push(row),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
    }

    let tables = render(
        &args,
        &host,
        &points,
        &slow_rows,
        began.elapsed(),
        (load_at_start, load_average()),
    );
    if args.json {
        eprintln!("{tables}");
    } else {
        println!("{tables}");
    }
    eprintln!("JSON Lines: {}", lines.path().display());
    let rss_failed = slow_rows.iter().any(|r| !r.ok);
    if let Some(e) = &failure {
        eprintln!(
            "\nFAILED: a request went wrong; the run stopped there. The first failure, verbatim:\n{e}"
        );
    }
    if rss_failed {
        eprintln!(
            "\nFAILED: the gateway's RSS grew by more than {} while it streamed to the slow consumer",
            human_bytes(args.rss_bound)
        );
    }
    Ok(failure.is_none() && !rss_failed)
}

/// Streams the large object through `gateway` to a paced reader while
/// sampling the gateway's RSS. The inner `Err` is a failed response.
async fn slow_consumer(
    args: &Args,
    host: &HostInfo,
    lines: &mut JsonLines,
    route: Route,
    gateway: &Gateway,
    object: &GeneratedObject,
    auth: &talon_bench::http_load::Auth,
) -> anyhow::Result<Result<SlowRow, String>> {
    let target = ObjectTarget::s3(&gateway.url, &object.bucket, &object.key, auth.clone())?;
    let set = Watched::new(vec![gateway.process.pid()], false);
    let rss_start = set.read().rss_bytes();
    progress(&format!(
        "slow consumer, {} route: reading {} at {}/s for up to {:.0} s; gateway RSS {:.1} MiB",
        route.name(),
        human_bytes(object.size),
        human_bytes(args.slow_rate),
        args.slow_s.as_secs_f64(),
        mib(rss_start)
    ));
    let samples: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(Vec::new()));
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let sampler = {
        let samples = samples.clone();
        let set = set.clone();
        let every = Duration::from_millis(args.rss_interval_ms.max(10));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let rss = set.read().rss_bytes();
                        samples.lock().unwrap_or_else(|p| p.into_inner()).push(rss);
                    }
                    _ = stopped.changed() => break,
                }
            }
        })
    };
    let started = Instant::now();
    let mut next_report = Duration::from_secs(5);
    let shown = samples.clone();
    let read = paced_read(&target, object, args.slow_rate, args.slow_s, |bytes| {
        let t = started.elapsed();
        if t >= next_report {
            next_report += Duration::from_secs(5);
            let rss = shown
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .last()
                .copied()
                .unwrap_or(0);
            progress(&format!(
                "  {:>4.1} s: {} read ({:.1} MiB/s), gateway RSS {:.1} MiB",
                t.as_secs_f64(),
                human_bytes(bytes),
                mib(bytes) / t.as_secs_f64(),
                mib(rss)
            ));
        }
    })
    .await;
    let _ = stop.send(true);
    let _ = sampler.await;
    let samples = samples.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let read = match read {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    let rss_end = samples.last().copied().unwrap_or(rss_start);
    let rss_max = samples.iter().copied().fold(rss_start, u64::max);
    let growth = rss_max.saturating_sub(rss_start);
    let ok = growth <= args.rss_bound;
    let row = SlowRow {
        route,
        bytes: read.verdict.bytes,
        read_s: read.elapsed.as_secs_f64(),
        complete: read.complete,
        rss_start,
        rss_max,
        rss_end,
        ok,
    };
    progress(&format!(
        "slow consumer, {} route: {} read in {:.1} s ({}), RSS start {:.1} / max {:.1} / end {:.1} MiB, growth {:.1} MiB (bound {:.0}): {}",
        route.name(),
        human_bytes(row.bytes),
        row.read_s,
        if row.complete {
            "whole object"
        } else {
            "time limit"
        },
        mib(rss_start),
        mib(rss_max),
        mib(rss_end),
        mib(growth),
        mib(args.rss_bound),
        if ok { "ok" } else { "TOO MUCH" }
    ));
    lines.emit(&serde_json::json!({
        "bench": "gateway-bench",
        "kind": "slow-consumer",
        "route": route.name(),
        "protocol": "s3",
        "object_bytes": object.size,
        "rate_bytes_per_s": args.slow_rate,
        "limit_s": args.slow_s.as_secs_f64(),
        "read_s": row.read_s,
        "bytes_read": row.bytes,
        "whole_object": row.complete,
        "sha256_of_bytes_read": read.verdict.sha256,
        "rss_interval_ms": args.rss_interval_ms,
        "rss_samples": samples.len(),
        "rss_start_mib": mib(rss_start),
        "rss_max_mib": mib(rss_max),
        "rss_end_mib": mib(rss_end),
        "rss_growth_mib": mib(growth),
        "rss_bound_mib": mib(args.rss_bound),
        "ok": ok,
        "loadavg_1m": load_average(),
        "host": host,
        "unix_time_s": unix_now(),
    }))?;
    Ok(Ok(row))
}

fn human_bytes(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{} GiB", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 20 {
        format!("{:.1} MiB", mib(b))
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

fn cores_busy(o: &LoadOutcome, name: &str) -> Option<f64> {
    let secs = o.elapsed.as_secs_f64();
    o.cpu
        .iter()
        .find(|c| c.name == name)
        .filter(|_| secs > 0.0)
        .map(|c| c.total_s() / secs)
}

fn point_line(p: &Point) -> String {
    let o = &p.outcome;
    let lat = |f: fn(&LatencySummary) -> f64| {
        p.latency
            .as_ref()
            .map_or_else(|| "-".into(), |l| fmt_latency(f(l)))
    };
    format!(
        "{} route, delay {:>2} ms: {} rps, {:.0} MiB/s, p50 {}, p99 {}, max {}, errors {}{}",
        p.route.name(),
        p.delay_ms,
        thousands(o.rps()),
        o.mib_per_s(),
        lat(|l| l.p50_us),
        lat(|l| l.p99_us),
        lat(|l| l.max_us),
        o.errors,
        p.ceiling
            .map(|c| format!(
                ", {:.0}% of the Little ceiling {} rps",
                100.0 * o.rps() / c,
                thousands(c)
            ))
            .unwrap_or_default()
    )
}

fn point_json(
    args: &Args,
    host: &HostInfo,
    p: &Point,
    injected: &str,
    base: Option<Duration>,
) -> serde_json::Value {
    let o = &p.outcome;
    serde_json::json!({
        "bench": "gateway-bench",
        "kind": "delay-sweep",
        "route": p.route.name(),
        "protocol": "s3",
        "delay_injected_at": injected,
        "delay_ms": p.delay_ms,
        "delayed_round_trips_per_request": p.trips,
        "concurrency": args.concurrency,
        "range_bytes": args.range_size,
        "object_bytes": args.object_size,
        "warmup_s": args.warmup_s.as_secs_f64(),
        "window_s": o.elapsed.as_secs_f64(),
        "requests": o.requests,
        "rps": o.rps(),
        "mib_per_s": o.mib_per_s(),
        "latency_us": p.latency,
        "errors": o.errors,
        "first_error": o.first_error,
        "base_latency_us": base.map(|b| b.as_secs_f64() * 1e6),
        "little_ceiling_rps": p.ceiling,
        "achieved_fraction": p.ceiling.map(|c| o.rps() / c),
        "gateway_cores_busy": cores_busy(o, "gateway"),
        "worker_cores_busy": cores_busy(o, "worker"),
        "stub_cores_busy": cores_busy(o, "stub"),
        "client_cores_busy": o.client_cpu.as_ref().map(|c| c.total_s() / o.elapsed.as_secs_f64().max(1e-9)),
        "cpu": o.cpu,
        "loadavg_1m": load_average(),
        "host": host,
        "unix_time_s": unix_now(),
    })
}

fn render(
    args: &Args,
    host: &HostInfo,
    points: &[Point],
    slow: &[SlowRow],
    took: Duration,
    loads: (Option<f64>, Option<f64>),
) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "\n## Gateway bench: delay sweeps\n\n{} signed S3 GETs in flight, {} ranges at random aligned offsets of a {} object, {:.0} s warmup + {:.0} s measured per point.\n\n",
        args.concurrency,
        human_bytes(args.range_size),
        human_bytes(args.object_size),
        args.warmup_s.as_secs_f64(),
        args.window_s.as_secs_f64()
    ));
    out.push_str("| route | delay at | D | trips | rps | MiB/s | p50 | p99 | max | errors | Little ceiling | achieved | gateway cores |\n");
    out.push_str("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    for p in points {
        let o = &p.outcome;
        let lat = |f: fn(&LatencySummary) -> f64| {
            p.latency
                .as_ref()
                .map_or_else(|| "-".into(), |l| fmt_latency(f(l)))
        };
        out.push_str(&format!(
            "| {} | {} | {} ms | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |\n",
            p.route.name(),
            match p.route {
                Route::Cache => "worker",
                Route::Origin => "origin",
            },
            p.delay_ms,
            p.trips,
            thousands(o.rps()),
            o.mib_per_s(),
            lat(|l| l.p50_us),
            lat(|l| l.p99_us),
            lat(|l| l.max_us),
            o.errors,
            p.ceiling
                .map_or_else(|| "-".into(), |c| format!("{} rps", thousands(c))),
            p.ceiling
                .map_or_else(|| "-".into(), |c| format!("{:.0}%", 100.0 * o.rps() / c)),
            cores_busy(o, "gateway").map_or_else(|| "-".into(), |c| format!("{c:.2}")),
        ));
    }
    out.push_str(
        "\nLittle ceiling = concurrency / (trips × D + L0), L0 = the route's mean latency at D = 0. \
         trips: delayed round trips per request (cache: the worker's answer; origin: the answer to the gateway's one GET). \
         Achieved above 100%: at D = 0 the host was CPU-bound, so L0 holds queueing that time spent in the delay displaces. \
         What shows the runtime follows the delay is that throughput stays near or above the ceiling: \
         a runtime that serialised on the delay would fall far below it.\n",
    );
    if !slow.is_empty() {
        out.push_str(&format!(
            "\n## Gateway bench: slow consumer\n\nA {} object read whole through the gateway at {}/s for up to {:.0} s; gateway RSS read every {} ms.\n\n",
            human_bytes(args.stream_size),
            human_bytes(args.slow_rate),
            args.slow_s.as_secs_f64(),
            args.rss_interval_ms
        ));
        out.push_str(
            "| route | read | in | RSS start | RSS max | RSS end | growth | bound | verdict |\n",
        );
        out.push_str("|---|--:|--:|--:|--:|--:|--:|--:|---|\n");
        for r in slow {
            out.push_str(&format!(
                "| {} | {}{} | {:.1} s | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.0} MiB | {} |\n",
                r.route.name(),
                human_bytes(r.bytes),
                if r.complete { " (all)" } else { "" },
                r.read_s,
                mib(r.rss_start),
                mib(r.rss_max),
                mib(r.rss_end),
                mib(r.rss_max.saturating_sub(r.rss_start)),
                mib(args.rss_bound),
                if r.ok { "flat" } else { "GREW" }
            ));
        }
    }
    out.push_str(&format!(
        "\nHost: {}. Total time {:.0} s. {} Loopback, one shared host: a regression floor, not a capacity claim.\n",
        host.describe(),
        took.as_secs_f64(),
        load_line(loads)
    ));
    out
}

#[tokio::main]
async fn main() -> ExitCode {
    run_bench("talon-gateway-bench", run(Args::parse())).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_flags_parse_and_zero_is_always_swept_first() {
        Args::command().debug_assert();
        let args = Args::try_parse_from(["talon-gateway-bench"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(delays(&args), vec![0, 1, 5, 20]);
        assert_eq!(args.routes, vec![Route::Cache, Route::Origin]);
        assert_eq!(args.slow_rate, 32 << 20);
        let args = Args::try_parse_from(["x", "--delays-ms", "20,5", "--routes", "origin"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(delays(&args), vec![0, 5, 20]);
        assert_eq!(args.routes, vec![Route::Origin]);
        assert!(Args::try_parse_from(["x", "--routes", "nowhere"]).is_err());
        assert!(Args::try_parse_from(["x", "--window-s", "-1"]).is_err());
    }
}
