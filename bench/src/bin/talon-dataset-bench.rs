//! `talon-dataset-bench`: a dataset of many small objects read epoch after epoch, through
//! Talon and straight from the origin, counting what each epoch costs the origin.
//!
//! One origin stub serves a generated dataset (`--generate-set`: `--objects` objects of
//! `--sizes` under one prefix, no disk), modeled as S3 is: `--origin-latency-ms` before
//! every answer and a throttle of `--throttle-rps` requests a second (503 `SlowDown` /
//! `ServerBusy` past it; S3's is about 5,500 GETs and HEADs a second per prefix). Talon is
//! one coordinator, `--workers` workers and, per front (S3 and Azure), `--gateways`
//! gateways on the cache route with `--max-staleness-ms` (T); each worker and gateway
//! keeps its origin requests under its share of the throttle
//! (`--origin-requests-per-prefix`).
//!
//! Epochs, per front: `cold` (key order, nothing cached), `warm` (shuffled, right after),
//! `after-t` (shuffled, once T has passed since the front was last read through Talon). Each epoch runs
//! twice, through Talon and straight to the stub (the direct arm: the same client, the
//! same signatures, no cache), in an order that flips from epoch to epoch and front to
//! front. Per epoch and arm: objects a second, p50/p99 of each delivering request, the
//! origin's requests per object (from the stub's own counters), the 503s the client saw,
//! objects still throttled after eight attempts, the RSS of the gateways and workers, and
//! the CPU per object of Talon's processes, the stub and the load generator (all on the
//! same cores, so a CPU-bound arm's throughput is what its CPU per object allows).
//! Every body is compared with the generator's bytes; a wrong one stops the run (exit 1).
//!
//! With `--list-first` each epoch starts as a loader's does, with a listing of the prefix
//! through every endpoint of the arm (counted in the origin's requests, not in the epoch's
//! time); `--read-ahead-objects` sets the gateways' read-ahead of listed keys.
//!
//! Not measured: a dataset larger than the workers' disks, more than one host.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use talon_bench::http_load::ProtocolLabel;
use talon_core::Backend;
use talon_loadgen::procfs::{self, ProcSample, ProcessSet};

use anyhow::bail;
use clap::Parser;
use talon_bench::dataset_load::{
    Endpoint, EpochOutcome, EpochSpec, Order, ThrottleRetry, run_epoch,
};
use talon_bench::deployment::{
    BenchSetup, Coordinator, Gateway, GatewaySpec, Geometry, Route, Stub, Worker, WorkerSpec,
    client_auth, run_bench,
};
use talon_bench::http_load::control_request;
use talon_bench::summary::{LatencySummary, fmt_latency, mib};
use talon_loadgen::stats::thousands;
use talon_origin_stub::faults::FaultConfig;
use talon_origin_stub::generated::GeneratedSet;

/// A dataset of many small objects, epoch after epoch, through Talon and straight to the
/// origin (order-swapped), counting the origin's requests per object; a table, then JSON
/// Lines in --out. Build the release binaries first (`just dataset-bench` does).
#[derive(Debug, Parser)]
#[command(name = "talon-dataset-bench", version)]
struct Args {
    /// Objects in the dataset.
    #[arg(long, env = "TALON_DATASET_BENCH_OBJECTS", default_value_t = 1_000_000)]
    objects: u64,

    /// Sizes, drawn per object from MIN-MAX (bytes, KiB, MiB).
    #[arg(long, env = "TALON_DATASET_BENCH_SIZES", default_value = "4KiB-256KiB")]
    sizes: String,

    /// Keep-alive connections per epoch, spread over the front's endpoints.
    #[arg(long, env = "TALON_DATASET_BENCH_CONNECTIONS", default_value_t = 64)]
    connections: usize,

    /// Gateways per front.
    #[arg(long, env = "TALON_DATASET_BENCH_GATEWAYS", default_value_t = 2)]
    gateways: usize,

    /// Workers.
    #[arg(long, env = "TALON_DATASET_BENCH_WORKERS", default_value_t = 2)]
    workers: usize,

    /// Origin model: milliseconds before every answer.
    #[arg(
        long,
        env = "TALON_DATASET_BENCH_ORIGIN_LATENCY_MS",
        default_value_t = 2
    )]
    origin_latency_ms: u64,

    /// Origin model: requests a second past which the stub answers 503 (0: none).
    #[arg(long, env = "TALON_DATASET_BENCH_THROTTLE_RPS", default_value_t = 5500)]
    throttle_rps: u64,

    /// The gateways' declared staleness bound T, milliseconds (default: the gateway's own).
    #[arg(long, env = "TALON_DATASET_BENCH_MAX_STALENESS_MS")]
    max_staleness_ms: Option<u64>,

    /// Fronts, in the order run.
    #[arg(long, env = "TALON_DATASET_BENCH_FRONTS", value_delimiter = ',', default_value = "s3,azure", value_parser = parse_front)]
    fronts: Vec<Backend>,

    /// Epochs, from cold, warm, after-t (in that order; after-t waits for T).
    #[arg(long, env = "TALON_DATASET_BENCH_EPOCHS", value_delimiter = ',', default_value = "cold,warm,after-t", value_parser = parse_epoch)]
    epochs: Vec<Epoch>,

    /// Start each epoch as a loader does: list the dataset's prefix through every
    /// endpoint of the arm (pages of 1,000; counted in the origin's requests, not in the
    /// epoch's time or CPU). The cold promise is then checked on GETs and HEADs per
    /// object.
    #[arg(long, env = "TALON_DATASET_BENCH_LIST_FIRST")]
    list_first: bool,

    /// The gateways' `--read-ahead-objects`: objects fetched ahead of a reader going
    /// through a listed prefix in key order (default: the gateway's own, none).
    #[arg(long, env = "TALON_DATASET_BENCH_READ_AHEAD_OBJECTS")]
    read_ahead_objects: Option<usize>,

    /// Seed of the dataset's sizes and bytes, and of the shuffles.
    #[arg(long, env = "TALON_DATASET_BENCH_SEED", default_value_t = 7)]
    seed: u64,

    /// JSON Lines file (default: bench/results/dataset-bench.jsonl).
    #[arg(long, env = "TALON_DATASET_BENCH_OUT")]
    out: Option<PathBuf>,

    /// Also print the JSON Lines on stdout.
    #[arg(long, env = "TALON_DATASET_BENCH_JSON")]
    json: bool,

    /// Keep the temporary folder (logs, caches).
    #[arg(long, env = "TALON_DATASET_BENCH_KEEP_DIR")]
    keep_dir: bool,

    /// Folder of the Talon binaries (default: this binary's folder).
    #[arg(long, env = "TALON_DATASET_BENCH_BIN_DIR")]
    bin_dir: Option<PathBuf>,

    /// Exit 1 unless Talon's arm kept the request promises: a cold epoch at most 1.0
    /// origin request per object, a warm epoch inside T none, no 503 and no failed object
    /// through Talon (what CI's smoke run checks).
    #[arg(long, env = "TALON_DATASET_BENCH_CHECK")]
    check: bool,
}

/// One epoch of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
enum Epoch {
    /// Nothing cached; key order.
    Cold,
    /// Right after the cold epoch; shuffled.
    Warm,
    /// Once T has passed since the front was last read through Talon; shuffled.
    AfterT,
}

impl Epoch {
    fn label(self) -> &'static str {
        match self {
            Epoch::Cold => "cold",
            Epoch::Warm => "warm",
            Epoch::AfterT => "after-t",
        }
    }

    fn order(self, seed: u64) -> Order {
        match self {
            Epoch::Cold => Order::Sequential,
            Epoch::Warm => Order::Shuffled { seed },
            Epoch::AfterT => Order::Shuffled { seed: seed + 1 },
        }
    }
}

fn parse_epoch(s: &str) -> Result<Epoch, String> {
    match s.trim() {
        "cold" => Ok(Epoch::Cold),
        "warm" => Ok(Epoch::Warm),
        "after-t" => Ok(Epoch::AfterT),
        other => Err(format!("'{other}' is not cold, warm or after-t")),
    }
}

fn parse_front(s: &str) -> Result<Backend, String> {
    match s.trim() {
        "s3" => Ok(Backend::S3),
        "azure" => Ok(Backend::Azure),
        other => Err(format!("'{other}' is not s3 or azure")),
    }
}

/// The gateway's own default T, for the output when --max-staleness-ms is not given.
const GATEWAY_DEFAULT_T: Duration = Duration::from_secs(5);

fn progress(message: &str) {
    eprintln!("[dataset-bench] {message}");
}

/// The stub's counters that matter here.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
struct OriginCounts {
    requests: u64,
    gets: u64,
    heads: u64,
    lists: u64,
    throttled: u64,
}

impl OriginCounts {
    fn since(self, earlier: OriginCounts) -> OriginCounts {
        OriginCounts {
            requests: self.requests.saturating_sub(earlier.requests),
            gets: self.gets.saturating_sub(earlier.gets),
            heads: self.heads.saturating_sub(earlier.heads),
            lists: self.lists.saturating_sub(earlier.lists),
            throttled: self.throttled.saturating_sub(earlier.throttled),
        }
    }
}

/// Reads the stub's `/metrics`: requests by operation, and throttled answers.
async fn origin_counts(stub: &Stub) -> anyhow::Result<OriginCounts> {
    let url = format!("{}/metrics", stub.admin_url);
    let (status, text) = control_request(http::Method::GET, &url, None).await?;
    if status != http::StatusCode::OK {
        bail!("GET {url} answered {status}");
    }
    let mut counts = OriginCounts::default();
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(n) = value.trim().parse::<f64>() else {
            continue;
        };
        let n = n as u64;
        if series.starts_with("talon_origin_requests_total{") {
            counts.requests += n;
            let operation = series
                .split("operation=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or("");
            match operation {
                "GetObject" | "GetBlob" => counts.gets += n,
                "HeadObject" | "GetBlobProperties" => counts.heads += n,
                o if o.starts_with("List") => counts.lists += n,
                _ => {}
            }
        } else if series == "talon_origin_faults_total{kind=\"throttled\"}" {
            counts.throttled += n;
        }
    }
    Ok(counts)
}

/// The series of the gateways' and workers' `/metrics` that say where Talon's origin
/// requests came from (for the JSON: a HEAD in a cold epoch is explained by them).
const TALON_SERIES: [&str; 10] = [
    "talon_worker_evictions_total",
    "talon_worker_hits_total",
    "talon_worker_misses_total",
    "talon_worker_written_behind_answers_total",
    "talon_worker_pass_through",
    "talon_gateway_read_ahead_objects{",
    "talon_gateway_fail_open{",
    "talon_gateway_origin_request_limit{",
    "talon_worker_stat_origin_requests",
    "talon_worker_origin_request_limit{",
];

/// The [`TALON_SERIES`] of every process at `admin_urls`, summed by series.
async fn talon_counters(
    admin_urls: impl Iterator<Item = &str>,
) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for admin in admin_urls {
        let url = format!("{admin}/metrics");
        let Ok((http::StatusCode::OK, text)) = control_request(http::Method::GET, &url, None).await
        else {
            continue;
        };
        for line in text.lines() {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            if !TALON_SERIES.iter().any(|p| series.starts_with(p)) {
                continue;
            }
            if let Ok(v) = value.trim().parse::<f64>() {
                *out.entry(series.to_owned()).or_insert(0.0) += v;
            }
        }
    }
    out
}

/// One row of the result: an epoch of one arm through one front.
#[derive(Debug, serde::Serialize)]
struct Row {
    epoch: Epoch,
    front: &'static str,
    arm: &'static str,
    order: &'static str,
    /// Whether the epoch ended within T of the cold epoch's start (every entry learned
    /// then still inside its bound).
    inside_t: bool,
    objects: u64,
    requests: u64,
    mib: f64,
    elapsed_s: f64,
    objects_per_s: f64,
    latency: Option<LatencySummary>,
    origin: OriginCounts,
    origin_requests_per_object: f64,
    client_503s: u64,
    failed_objects: u64,
    gateways_rss_mib: f64,
    workers_rss_mib: f64,
    /// CPU (user + kernel) per object the epoch read, milliseconds: Talon's gateways and
    /// workers together, the origin stub, and this load generator (every process on
    /// the same cores: what one arm costs beside the other).
    cpu_ms_per_object: CpuPerObject,
    /// How the gateways' and workers' origin-related counters moved in the epoch.
    talon_counters: std::collections::BTreeMap<String, f64>,
}

struct Deployment {
    stub: Stub,
    _coordinator: Coordinator,
    workers: Vec<Worker>,
    gateways: Vec<(Backend, Gateway)>,
}

/// CPU per object of an epoch, milliseconds, by who spent it.
#[derive(Debug, serde::Serialize)]
struct CpuPerObject {
    talon: f64,
    origin: f64,
    client: f64,
}

/// CPU readings of an epoch's processes, taken before and after it.
struct CpuReadings {
    talon: ProcessSet,
    origin: ProcessSet,
    before: [ProcSample; 3],
}

impl CpuReadings {
    fn start(deployment: &Deployment) -> anyhow::Result<CpuReadings> {
        let talon: Vec<u32> = deployment
            .gateways
            .iter()
            .map(|(_, g)| g.process.pid())
            .chain(deployment.workers.iter().map(|w| w.process.pid()))
            .collect();
        let talon = ProcessSet::resolve(&talon, false)?;
        let origin = ProcessSet::resolve(&[deployment.stub.process.pid()], false)?;
        let before = [
            talon.sample()?,
            origin.sample()?,
            procfs::sample_self().unwrap_or_default(),
        ];
        Ok(CpuReadings {
            talon,
            origin,
            before,
        })
    }

    fn per_object(&self, objects: u64) -> anyhow::Result<CpuPerObject> {
        let after = [
            self.talon.sample()?,
            self.origin.sample()?,
            procfs::sample_self().unwrap_or_default(),
        ];
        let ms = |i: usize| {
            let (user, kernel) = after[i].cpu_since(&self.before[i]);
            (user + kernel).as_secs_f64() * 1000.0 / objects.max(1) as f64
        };
        Ok(CpuPerObject {
            talon: ms(0),
            origin: ms(1),
            client: ms(2),
        })
    }
}

impl Deployment {
    fn rss_mib(pids: impl Iterator<Item = u32>) -> f64 {
        pids.filter_map(talon_loadgen::procfs::footprint)
            .map(|f| mib(f.rss_bytes))
            .sum()
    }

    fn endpoints(&self, front: Backend, arm: Arm) -> anyhow::Result<Vec<Endpoint>> {
        let auth = client_auth(front)?;
        Ok(match arm {
            Arm::Talon => self
                .gateways
                .iter()
                .filter(|(p, _)| *p == front)
                .map(|(_, g)| Endpoint {
                    protocol: front,
                    base: g.url.clone(),
                    auth: auth.clone(),
                })
                .collect(),
            Arm::Direct => vec![Endpoint {
                protocol: front,
                base: match front {
                    Backend::S3 => self.stub.s3_url.clone(),
                    Backend::Azure => self.stub.azure_url.clone(),
                },
                auth,
            }],
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arm {
    Talon,
    Direct,
}

impl Arm {
    fn label(self) -> &'static str {
        match self {
            Arm::Talon => "talon",
            Arm::Direct => "direct",
        }
    }
}

fn validate(args: &Args) -> anyhow::Result<GeneratedSet> {
    if args.connections == 0 || args.gateways == 0 || args.workers == 0 {
        bail!("--connections, --gateways and --workers must be at least 1");
    }
    if args.fronts.is_empty() || args.epochs.is_empty() {
        bail!("--fronts and --epochs name at least one each");
    }
    let set: GeneratedSet = format!("data/train/={},{},{}", args.objects, args.sizes, args.seed)
        .parse()
        .map_err(|e: String| anyhow::anyhow!(e))?;
    Ok(set)
}

/// Each process's share of the origin's throttle: four fifths of it, split among the
/// workers (they send nearly every origin request; a gateway sends one only when no
/// worker can answer, and is given the same share).
fn origin_share(args: &Args) -> Option<u32> {
    (args.throttle_rps > 0).then(|| {
        let share = args.throttle_rps * 4 / 5 / args.workers as u64;
        share.clamp(1, u64::from(u32::MAX)) as u32
    })
}

async fn start(args: &Args, set: &GeneratedSet, setup: &BenchSetup) -> anyhow::Result<Deployment> {
    let dir = setup.tmp.path();
    let binaries = &setup.binaries;
    progress(&format!(
        "starting the origin stub with {} objects of {} under data/train/",
        thousands(set.count as f64),
        args.sizes
    ));
    let stub = Stub::start_with_sets(binaries, dir, std::slice::from_ref(set)).await?;
    stub.set_faults(&FaultConfig {
        latency_ms: args.origin_latency_ms,
        throttle_rps: (args.throttle_rps > 0).then_some(args.throttle_rps),
        ..FaultConfig::default()
    })
    .await?;
    let mut coordinator = Coordinator::start(
        binaries,
        dir,
        "coordinator",
        Geometry {
            block_size: 256 << 20,
            page_size: 1 << 20,
        },
    )
    .await?;
    let coordinator_url = coordinator.url.clone();
    // Room for the whole dataset on every worker, whatever the placement.
    let dataset_bytes = set.count.saturating_mul(set.max_size.min(1 << 20));
    let capacity = dataset_bytes.saturating_add(1 << 30);
    let share = origin_share(args);
    let mut workers = Vec::new();
    for i in 0..args.workers {
        let id = format!("worker-{i}");
        progress(&format!("starting {id}"));
        workers.push(
            Worker::start(
                binaries,
                dir,
                &stub,
                &mut coordinator,
                WorkerSpec {
                    id: &id,
                    coordinator: &coordinator_url,
                    advertise: None,
                    capacity,
                    page_size: 1 << 20,
                    host: None,
                    origin_request_limit: share,
                    // Every object is a block, through each front: room for all of them
                    // on every worker (the open-files limit may lower it; the worker's log
                    // says to what).
                    max_blocks: Some(
                        usize::try_from(set.count)
                            .unwrap_or(usize::MAX)
                            .saturating_mul(args.fronts.len()),
                    ),
                },
            )
            .await?,
        );
    }
    let mut gateways = Vec::new();
    for &front in &args.fronts {
        for i in 0..args.gateways {
            let name = format!("gateway-{}-{i}", front.label().to_ascii_lowercase());
            progress(&format!("starting {name}"));
            let gateway = Gateway::start(
                binaries,
                dir,
                &stub,
                GatewaySpec {
                    name: &name,
                    front,
                    route: Route::Cache,
                    coordinator: Some(&coordinator_url),
                    block_size: 256 << 20,
                    local_reads: true,
                    max_staleness_ms: args.max_staleness_ms,
                    hedge_budget: None,
                    host: None,
                    origin_request_limit: share,
                    unsigned_reads: false,
                    tls: None,
                    read_ahead_objects: args.read_ahead_objects,
                },
            )
            .await?;
            gateways.push((front, gateway));
        }
    }
    Ok(Deployment {
        stub,
        _coordinator: coordinator,
        workers,
        gateways,
    })
}

async fn run_one(
    deployment: &Deployment,
    set: &Arc<GeneratedSet>,
    args: &Args,
    epoch: Epoch,
    front: Backend,
    arm: Arm,
    inside_t: impl Fn() -> bool,
) -> anyhow::Result<(Row, Option<String>)> {
    let endpoints = deployment.endpoints(front, arm)?;
    let admin_urls = || {
        deployment
            .gateways
            .iter()
            .map(|(_, g)| g.admin_url.as_str())
            .chain(deployment.workers.iter().map(|w| w.admin_url.as_str()))
    };
    let counters_before = talon_counters(admin_urls()).await;
    let before = origin_counts(&deployment.stub).await?;
    if args.list_first {
        for endpoint in &endpoints {
            let (keys, _) = endpoint
                .list_all(&set.bucket, &set.prefix)
                .await
                .map_err(anyhow::Error::msg)?;
            if keys != set.count {
                bail!(
                    "{} listed {keys} keys under {}/{}, the dataset has {}",
                    endpoint.base,
                    set.bucket,
                    set.prefix,
                    set.count
                );
            }
        }
    }
    // The epoch's reads only: a listing's CPU is the loader's start, not a read's.
    let cpu = CpuReadings::start(deployment)?;
    let outcome: EpochOutcome = run_epoch(EpochSpec {
        set: set.clone(),
        endpoints,
        connections: args.connections,
        order: epoch.order(args.seed),
        retry: ThrottleRetry::default(),
    })
    .await;
    let cpu_ms_per_object = cpu.per_object(outcome.objects)?;
    let origin = origin_counts(&deployment.stub).await?.since(before);
    let mut moved = talon_counters(admin_urls()).await;
    for (series, value) in &mut moved {
        *value -= counters_before.get(series).copied().unwrap_or(0.0);
    }
    moved.retain(|_, v| *v != 0.0);
    let per_object = if outcome.objects == 0 {
        0.0
    } else {
        origin.requests as f64 / outcome.objects as f64
    };
    let row = Row {
        epoch,
        front: front.label(),
        arm: arm.label(),
        order: epoch.order(args.seed).label(),
        inside_t: inside_t(),
        objects: outcome.objects,
        requests: outcome.requests,
        mib: mib(outcome.bytes),
        elapsed_s: outcome.elapsed.as_secs_f64(),
        objects_per_s: outcome.objects_per_s(),
        latency: LatencySummary::of(&outcome.latencies),
        origin,
        origin_requests_per_object: per_object,
        client_503s: outcome.throttled,
        failed_objects: outcome.failed,
        gateways_rss_mib: Deployment::rss_mib(
            deployment.gateways.iter().map(|(_, g)| g.process.pid()),
        ),
        workers_rss_mib: Deployment::rss_mib(deployment.workers.iter().map(|w| w.process.pid())),
        cpu_ms_per_object,
        talon_counters: moved,
    };
    Ok((row, outcome.first_error))
}

fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| epoch | front | arm | objects/s | MiB/s | p50 | p99 | origin req/object | GET | HEAD | LIST | client 503s | failed | gateways RSS | workers RSS | CPU ms/object: Talon · origin · client |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let (p50, p99) = r.latency.as_ref().map_or(("-".into(), "-".into()), |l| {
            (fmt_latency(l.p50_us), fmt_latency(l.p99_us))
        });
        let rss = |arm: &str, v: f64| {
            if arm == "talon" {
                format!("{v:.0} MiB")
            } else {
                "-".into()
            }
        };
        out.push_str(&format!(
            "| {}{} | {} | {} | {} | {:.1} | {} | {} | {:.4} | {} | {} | {} | {} | {} | {} | {} | {:.3} · {:.3} · {:.3} |\n",
            r.epoch.label(),
            if r.inside_t { " (inside T)" } else { "" },
            r.front,
            r.arm,
            thousands(r.objects_per_s),
            r.mib / r.elapsed_s.max(1e-9),
            p50,
            p99,
            r.origin_requests_per_object,
            r.origin.gets,
            r.origin.heads,
            r.origin.lists,
            r.client_503s,
            r.failed_objects,
            rss(r.arm, r.gateways_rss_mib),
            rss(r.arm, r.workers_rss_mib),
            r.cpu_ms_per_object.talon,
            r.cpu_ms_per_object.origin,
            r.cpu_ms_per_object.client,
        ));
    }
    out
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let set = Arc::new(validate(&args)?);
    let setup = BenchSetup::new(
        "dataset-bench",
        args.bin_dir.as_deref(),
        args.out.clone(),
        args.json,
        args.keep_dir,
    )?;
    progress(&format!("host: {}", setup.host.describe()));
    let t = args
        .max_staleness_ms
        .map_or(GATEWAY_DEFAULT_T, Duration::from_millis);
    let deployment = start(&args, &set, &setup).await?;
    let mut lines = setup.lines;
    lines.emit(&serde_json::json!({
        "kind": "setup",
        "host": setup.host,
        "objects": set.count,
        "sizes": args.sizes,
        "connections": args.connections,
        "gateways_per_front": args.gateways,
        "workers": args.workers,
        "origin_latency_ms": args.origin_latency_ms,
        "throttle_rps": args.throttle_rps,
        "origin_requests_per_prefix_per_process": origin_share(&args),
        "max_staleness_ms": t.as_millis() as u64,
        "list_first": args.list_first,
        "read_ahead_objects": args.read_ahead_objects,
    }))?;
    let mut rows = Vec::new();
    // When each front was last read through Talon: an epoch after T waits for T to pass
    // since then (the warm epoch's revalidations renewed what the cold one learned).
    let mut last_read: Vec<(Backend, Instant)> = Vec::new();
    let mut cold_started: Vec<(Backend, Instant)> = Vec::new();
    let mut wrong = None;
    'epochs: for (e, &epoch) in args.epochs.iter().enumerate() {
        for (f, &front) in args.fronts.iter().enumerate() {
            if epoch == Epoch::AfterT
                && let Some((_, ended)) = last_read.iter().find(|(p, _)| *p == front)
            {
                let due = *ended + t + Duration::from_secs(1);
                let now = Instant::now();
                if due > now {
                    progress(&format!(
                        "waiting {:.0} s for T to pass since the {} front was last read through Talon",
                        (due - now).as_secs_f64(),
                        front.label()
                    ));
                    tokio::time::sleep_until(due.into()).await;
                }
            }
            let arms = if (e + f) % 2 == 0 {
                [Arm::Talon, Arm::Direct]
            } else {
                [Arm::Direct, Arm::Talon]
            };
            if epoch == Epoch::Cold {
                cold_started.push((front, Instant::now()));
            }
            for arm in arms {
                progress(&format!(
                    "{} epoch, {} front, {} arm: {} objects over {} connections",
                    epoch.label(),
                    front.label(),
                    arm.label(),
                    thousands(set.count as f64),
                    args.connections
                ));
                let started = cold_started
                    .iter()
                    .find(|(p, _)| *p == front)
                    .map(|(_, s)| *s);
                let inside = || {
                    epoch != Epoch::Cold
                        && arm == Arm::Talon
                        && started.is_some_and(|s| s.elapsed() < t)
                };
                let (row, error) =
                    run_one(&deployment, &set, &args, epoch, front, arm, inside).await?;
                progress(&format!(
                    "  {} objects/s, {:.4} origin requests per object, {} client 503s",
                    thousands(row.objects_per_s),
                    row.origin_requests_per_object,
                    row.client_503s
                ));
                lines.emit(&serde_json::json!({"kind": "epoch", "row": &row}))?;
                rows.push(row);
                if arm == Arm::Talon {
                    last_read.retain(|(p, _)| *p != front);
                    last_read.push((front, Instant::now()));
                }
                if let Some(e) = error {
                    wrong = Some(e);
                    break 'epochs;
                }
            }
        }
    }
    let text = table(&rows);
    if args.json {
        eprintln!("{text}");
    } else {
        println!("{text}");
    }
    progress(&format!("JSON Lines: {}", lines.path().display()));
    if let Some(e) = wrong {
        eprintln!("[dataset-bench] a wrong answer stopped the run: {e}");
        return Ok(false);
    }
    if args.check {
        let broken = broken_promises(&rows);
        for b in &broken {
            eprintln!("[dataset-bench] check: {b}");
        }
        return Ok(broken.is_empty());
    }
    Ok(true)
}

/// The request promises Talon's arm broke in `rows` (`--check`), each said in a line.
fn broken_promises(rows: &[Row]) -> Vec<String> {
    let mut broken = Vec::new();
    for r in rows.iter().filter(|r| r.arm == Arm::Talon.label()) {
        let at = format!("{} epoch through the {} front", r.epoch.label(), r.front);
        // A loader's own listing (`--list-first`) is one request per page, through
        // either arm: the promise is about what reading an object costs.
        let reads_per_object = (r.origin.gets + r.origin.heads) as f64 / r.objects.max(1) as f64;
        if r.epoch == Epoch::Cold && reads_per_object > 1.0 {
            broken.push(format!(
                "{at}: {reads_per_object:.4} origin GETs and HEADs per object, more than one"
            ));
        }
        if r.inside_t && r.origin.requests > 0 {
            broken.push(format!(
                "{at}, inside T: {} origin requests, none expected",
                r.origin.requests
            ));
        }
        if r.client_503s > 0 || r.failed_objects > 0 {
            broken.push(format!(
                "{at}: {} 503 answers and {} objects never delivered",
                r.client_503s, r.failed_objects
            ));
        }
    }
    broken
}

#[tokio::main]
async fn main() -> ExitCode {
    run_bench("talon-dataset-bench", run(Args::parse())).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_flags_parse_with_their_defaults() {
        Args::command().debug_assert();
        let args = Args::parse_from(["talon-dataset-bench"]);
        let set = validate(&args).expect("the defaults are valid");
        assert_eq!(
            (set.count, set.min_size, set.max_size),
            (1_000_000, 4096, 262_144)
        );
        assert_eq!(args.fronts, [Backend::S3, Backend::Azure]);
        assert_eq!(args.epochs, [Epoch::Cold, Epoch::Warm, Epoch::AfterT]);
        assert_eq!(origin_share(&args), Some(2200));
        let off = Args::parse_from(["talon-dataset-bench", "--throttle-rps", "0"]);
        assert_eq!(origin_share(&off), None);
        assert!(Args::try_parse_from(["talon-dataset-bench", "--epochs", "hot"]).is_err());
    }
}
