//! `talon-chaos`: Talon's fail-open promise under injected faults (issue 13,
//! docs/reliability.md). A cache failure must cost a client latency, never an error and
//! never a wrong byte.
//!
//! It starts real processes on loopback from the binaries beside it (the origin stub,
//! a coordinator, `--workers` workers, and two gateways on route `cache`, one with the
//! S3 front and one with the Azure front), then runs `--readers` readers for
//! `--seconds`: each reads objects of mixed sizes (4 KiB to `--max-size`), ranged
//! (aligned 1 MiB ranges) and whole, through either front, and checks every response
//! in full (status, length, `Content-Range`, SHA-256 of the body against the
//! generator's bytes). Meanwhile it injects the faults asked for, one at a time, on a
//! random worker, with `--every-ms` between them:
//!
//! - `kill`: SIGKILL, then a restart on the same cache folder after `--down-ms`;
//! - `hang`: SIGSTOP for `--hang-ms`, then SIGCONT;
//! - `origin`: for `--origin-fault-ms`, the origin fails `--origin-error-rate` of its
//!   requests with a 500, a 503 SlowDown, a reset connection or a truncated body;
//! - `origin-slow`: for `--origin-fault-ms`, every origin request waits
//!   `--origin-latency-ms` first.
//!
//! With `--overwrite-ms`, one more object (`flip.bin`, two blocks) is overwritten at
//! the origin, not through the gateways, that often, alternating between two contents
//! of one size: a response for it is right when it is wholly one of them.
//!
//! Every request is classed: right, wrong (a 2xx whose bytes, length or range are not
//! the object's, or not wholly one version's), stuck (no end within `--stuck-s`), an
//! origin error (during an `origin` window, an error answer in the protocol's terms
//! for an origin failure — 500 InternalError, 503 SlowDown/ServerBusy/ServiceUnavailable
//! with `Retry-After` — or a body cut off: the origin failed and no worker held the
//! bytes), an overwrite abort (a body of `flip.bin` cut off: its version changed
//! mid-response and the old one's bytes were gone), or failed (any other error the
//! client saw). The report gives them overall, for requests that overlapped a fault,
//! and for the rest, with latency percentiles; a table on stderr, one JSON line in
//! `bench/results/chaos.jsonl` (and on stdout with `--json`). It exits 1 on any wrong,
//! stuck or failed request.
//!
//! Every process's resident memory and open descriptors are sampled through the run
//! (`/proc`): the report gives each after the warm-up and at the end. With `--soak`, a
//! growth beyond [`RSS_GROWTH_ALLOWED`] or [`FD_GROWTH_ALLOWED`] also fails the run (a
//! soak is `--soak --faults kill --every-ms <half the run>`: one worker restarted in the
//! middle).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use talon_core::Backend;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use talon_bench::deployment::{
    BenchSetup, Coordinator, Gateway, GatewaySpec, Geometry, ORIGIN_ACCESS_KEY, ORIGIN_SECRET_KEY,
    Route, Stub, Worker, WorkerSpec, client_auth, run_bench,
};
use talon_bench::http_load::{Connection, ObjectTarget, fetch};
use talon_bench::summary::{LatencySummary, fmt_latency};
use talon_bench::verify::{ExpectedRanges, Received, check_response};
use talon_core::parse_byte_size;
use talon_loadgen::procfs::{Footprint, footprint};
use talon_loadgen::stats::thousands;
use talon_origin_stub::faults::{FaultConfig, FaultKind};
use talon_origin_stub::generated::GeneratedObject;

/// A fault the run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Fault {
    /// SIGKILL a worker, restart it after --down-ms.
    Kill,
    /// SIGSTOP a worker for --hang-ms, then SIGCONT.
    Hang,
    /// The origin fails --origin-error-rate of its requests for --origin-fault-ms.
    Origin,
    /// Every origin request waits --origin-latency-ms, for --origin-fault-ms.
    OriginSlow,
}

/// Talon under injected worker faults: every response checked, nothing may fail.
#[derive(Debug, Parser)]
#[command(name = "talon-chaos", version)]
struct Args {
    /// How long the readers run, seconds.
    #[arg(long, env = "TALON_CHAOS_SECONDS", default_value_t = 60)]
    seconds: u64,
    /// Workers in the cluster.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Readers, each with one request in flight per front.
    #[arg(long, default_value_t = 8)]
    readers: usize,
    /// Faults injected, in turn (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "kill,hang")]
    faults: Vec<Fault>,
    /// Pause between two faults, milliseconds.
    #[arg(long, default_value_t = 2000)]
    every_ms: u64,
    /// How long a hung worker stays stopped, milliseconds.
    #[arg(long, default_value_t = 6000)]
    hang_ms: u64,
    /// How long a killed worker stays down before its restart, milliseconds.
    #[arg(long, default_value_t = 500)]
    down_ms: u64,
    /// How long an `origin` or `origin-slow` window lasts, milliseconds.
    #[arg(long, default_value_t = 4000)]
    origin_fault_ms: u64,
    /// The share of origin requests an `origin` window fails (0 to 1).
    #[arg(long, default_value_t = 0.3)]
    origin_error_rate: f64,
    /// What an `origin-slow` window adds to every origin request, milliseconds.
    #[arg(long, default_value_t = 1500)]
    origin_latency_ms: u64,
    /// Overwrite `flip.bin` at the origin this often, milliseconds (0: never).
    #[arg(long, default_value_t = 0)]
    overwrite_ms: u64,
    /// The gateways' declared staleness (`--max-staleness-ms`): a read of `flip.bin`
    /// may start on the version the gateway knew up to this long after an overwrite,
    /// and is then cut when a page it needs is no longer at the origin.
    #[arg(long, default_value_t = 5000)]
    max_staleness_ms: u64,
    /// The gateways' `--hedge-budget`: the share of pieces that may also be asked of
    /// the next owner when the owner's first byte is late (0: no hedged reads).
    #[arg(long, default_value_t = 0.05)]
    hedge_budget: f64,
    /// The largest object (others: 4 KiB, 300 KiB, 5 MiB).
    #[arg(long, default_value = "24MiB", value_parser = parse_byte_size)]
    max_size: u64,
    /// A request with no end after this many seconds is stuck.
    #[arg(long, default_value_t = 60)]
    stuck_s: u64,
    /// Where the Talon binaries are (default: beside this one).
    #[arg(long)]
    bin_dir: Option<std::path::PathBuf>,
    /// JSON Lines output (default bench/results/chaos.jsonl).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Also print the JSON line on stdout.
    #[arg(long)]
    json: bool,
    /// Keep the scratch folder (the processes' logs).
    #[arg(long)]
    keep_dir: bool,
    /// Fail the run when a process's memory or descriptors grew between the warm-up
    /// and the end.
    #[arg(long)]
    soak: bool,
    /// How long after its start a process is first measured for the soak, seconds.
    #[arg(long, default_value_t = 10)]
    warmup_s: u64,
    /// How often every process is measured, milliseconds.
    #[arg(long, default_value_t = 1000)]
    sample_ms: u64,
}

/// With `--soak`, the most a process's RSS may grow from the warm-up to the end: a
/// quarter, plus this many bytes (allocator arenas and pools settle in steps).
const RSS_GROWTH_ALLOWED: u64 = 32 << 20;

/// With `--soak`, the most a process's open descriptors may grow from the warm-up to
/// the end (pooled connections come and go).
const FD_GROWTH_ALLOWED: u64 = 32;

/// The run's processes by name: pid, and when that process started.
type Processes = Arc<Mutex<std::collections::BTreeMap<String, (u32, Instant)>>>;

/// One process's footprint through the run.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Watched {
    pid: u32,
    /// The first measurement at least the warm-up after the process started.
    after_warmup: Option<Footprint>,
    /// The last measurement.
    at_end: Footprint,
    peak_rss_bytes: u64,
}

impl Watched {
    /// Whether it grew beyond what a soak allows; `None` without a warm-up measurement.
    fn grew(&self) -> Option<bool> {
        let base = self.after_warmup?;
        let end = self.at_end;
        Some(
            end.rss_bytes > base.rss_bytes + base.rss_bytes / 4 + RSS_GROWTH_ALLOWED
                || end.open_fds > base.open_fds + FD_GROWTH_ALLOWED,
        )
    }
}

/// Measures every process of `processes` once into `watched`.
fn measure(
    processes: &Processes,
    watched: &Mutex<std::collections::BTreeMap<String, Watched>>,
    warmup: Duration,
) {
    let now: Vec<(String, u32, Instant)> = processes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(name, (pid, since))| (name.clone(), *pid, *since))
        .collect();
    let mut watched = watched.lock().unwrap_or_else(|p| p.into_inner());
    for (name, pid, since) in now {
        let Some(f) = footprint(pid) else { continue };
        let w = watched.entry(name).or_insert(Watched {
            pid,
            after_warmup: None,
            at_end: f,
            peak_rss_bytes: 0,
        });
        if w.pid != pid {
            // Restarted: a new process, measured afresh.
            *w = Watched {
                pid,
                after_warmup: None,
                at_end: f,
                peak_rss_bytes: 0,
            };
        }
        if w.after_warmup.is_none() && since.elapsed() >= warmup {
            w.after_warmup = Some(f);
        }
        w.at_end = f;
        w.peak_rss_bytes = w.peak_rss_bytes.max(f.rss_bytes);
    }
}

const BLOCK_SIZE: u64 = 4 << 20;
const RANGE_SIZE: u64 = 1 << 20;

/// How one request ended, as seen by its reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Right,
    Wrong,
    Stuck,
    /// An error answer; whether it is one an origin failure may cause, in the
    /// protocol's terms.
    ErrorAnswer {
        origin_failure: bool,
    },
    /// The body broke off.
    Cut,
    /// No answer at all (the connection failed before one).
    NoAnswer,
}

/// How one request is judged, once the fault windows are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Right,
    Failed,
    Wrong,
    Stuck,
    OriginError,
    OverwriteAbort,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    started: Duration,
    took: Duration,
    ending: Ending,
    /// Whether it read the object being overwritten.
    flip: bool,
}

/// One object as the readers ask for it: by aligned ranges, and whole; with a second
/// content of the same size when it is being overwritten.
struct Readable {
    ranged: ExpectedRanges,
    whole: ExpectedRanges,
    other: Option<(ExpectedRanges, ExpectedRanges)>,
    s3: ObjectTarget,
    azure: ObjectTarget,
}

#[derive(Debug, Default, serde::Serialize)]
struct Tally {
    requests: u64,
    right: u64,
    failed: u64,
    wrong: u64,
    stuck: u64,
    origin_errors: u64,
    overwrite_aborts: u64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

fn tally<'a>(samples: impl Iterator<Item = (&'a Sample, Verdict)>) -> Tally {
    let mut t = Tally::default();
    let mut took = Vec::new();
    for (s, verdict) in samples {
        t.requests += 1;
        match verdict {
            Verdict::Right => t.right += 1,
            Verdict::Failed => t.failed += 1,
            Verdict::Wrong => t.wrong += 1,
            Verdict::Stuck => t.stuck += 1,
            Verdict::OriginError => t.origin_errors += 1,
            Verdict::OverwriteAbort => t.overwrite_aborts += 1,
        }
        took.push(s.took);
    }
    if let Some(l) = LatencySummary::of(&took) {
        (t.p50_ms, t.p99_ms, t.max_ms) = (l.p50_us / 1e3, l.p99_us / 1e3, l.max_us / 1e3);
    }
    t
}

/// A small deterministic generator per reader (no shared state, reproducible picks).
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

fn signal(pid: u32, name: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .context("running kill")?;
    anyhow::ensure!(status.success(), "kill -{name} {pid} failed");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    run_bench("talon-chaos", chaos(args)).await
}

async fn chaos(args: Args) -> anyhow::Result<bool> {
    let mut setup = BenchSetup::new(
        "chaos",
        args.bin_dir.as_deref(),
        args.out.clone(),
        args.json,
        args.keep_dir,
    )?;
    eprintln!("[chaos] {}", setup.host.describe());
    let objects = chaos_objects(args.max_size);
    let mut cluster = Cluster::start(&setup, &args, &objects).await?;

    // The object overwritten at the origin: two contents of one size, two blocks.
    let flip = (args.overwrite_ms > 0).then(|| {
        let size = BLOCK_SIZE + (1 << 20) + 777;
        [
            GeneratedObject::new("chaos", "flip.bin", size, 90),
            GeneratedObject::new("chaos", "flip.bin", size, 91),
        ]
    });
    let origin = origin_client(&cluster.stub)?;
    if let Some([first, _]) = &flip {
        origin
            .put(&first.bucket, &first.key, generated_bytes(first), None)
            .await
            .context("writing flip.bin")?;
    }
    let readable = Arc::new(cluster.readable(&objects, flip.as_ref())?);

    let clock = Clock::start(Duration::from_secs(args.seconds));
    let readers = Readers::spawn(&args, readable, clock);
    let overwriter = flip.map(|contents| {
        Overwriter::spawn(
            contents,
            origin,
            Duration::from_millis(args.overwrite_ms),
            clock,
        )
    });
    let watched = Arc::new(Mutex::new(BTreeMap::<String, Watched>::new()));
    let sampler = spawn_sampler(&args, &cluster.processes, &watched, clock);
    let windows = inject_faults(&args, &setup, &mut cluster, clock).await?;

    let (samples, first_wrong) = readers.join().await?;
    let overwrites = match overwriter {
        Some(o) => o.join().await?,
        None => Vec::new(),
    };
    sampler.await.context("the sampler panicked")?;
    measure(
        &cluster.processes,
        &watched,
        Duration::from_secs(args.warmup_s),
    );
    let watched = watched.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for w in cluster.workers.iter_mut().flatten() {
        w.process.ensure_running("at the end of the run")?;
    }
    let asked = cluster.what_was_asked().await?;

    let judged = judge(
        &samples,
        &windows,
        &overwrites,
        Duration::from_millis(args.max_staleness_ms),
    );
    let report = ChaosReport {
        all: tally(judged.iter().map(|j| (j.sample, j.verdict))),
        during: tally(
            judged
                .iter()
                .filter(|j| j.during_a_fault)
                .map(|j| (j.sample, j.verdict)),
        ),
        outside: tally(
            judged
                .iter()
                .filter(|j| !j.during_a_fault)
                .map(|j| (j.sample, j.verdict)),
        ),
        windows,
        overwrites: overwrites.len(),
        asked,
        watched,
        first_wrong,
    };
    report.print(&args);
    report.emit(&args, &mut setup)?;
    Ok(report.passed(&args))
}

/// The objects every reader picks from: 4 KiB, 300 KiB, a little over 5 MiB and, when
/// larger, `max_size`.
fn chaos_objects(max_size: u64) -> Vec<GeneratedObject> {
    let mut sizes = vec![4 << 10, 300 << 10, (5 << 20) + 123];
    if max_size > sizes[2] {
        sizes.push(max_size);
    }
    sizes
        .iter()
        .enumerate()
        .map(|(i, size)| GeneratedObject::new("chaos", format!("o{i}.bin"), *size, 40 + i as u64))
        .collect()
}

/// A client of the stub's S3 front with the origin's credentials (the overwriter writes
/// through it, not through the gateways).
fn origin_client(stub: &Stub) -> anyhow::Result<talon_protocols::origin::OriginClient> {
    Ok(talon_protocols::origin::OriginClient::new(
        talon_protocols::origin::OriginConfig::S3 {
            endpoint: stub.s3_url.clone(),
            region: "us-east-1".into(),
            credentials: Some(talon_protocols::s3::sigv4::S3Credentials {
                access_key: ORIGIN_ACCESS_KEY.into(),
                secret_key: ORIGIN_SECRET_KEY.into(),
                session_token: None,
            }),
            virtual_hosted: false,
        },
    )?)
}

/// The run's clock: when the readers started and when they stop.
#[derive(Debug, Clone, Copy)]
struct Clock {
    started: Instant,
    until: Instant,
}

impl Clock {
    fn start(length: Duration) -> Self {
        let started = Instant::now();
        Self {
            started,
            until: started + length,
        }
    }

    fn running(&self) -> bool {
        Instant::now() < self.until
    }
}

/// The deployment under test, all real processes on loopback.
struct Cluster {
    dir: std::path::PathBuf,
    stub: Stub,
    coordinator: Coordinator,
    coordinator_url: String,
    /// The workers' ids, by slot.
    ids: Vec<String>,
    /// The workers by slot; a slot is empty while its worker is down.
    workers: Vec<Option<Worker>>,
    s3: Gateway,
    azure: Gateway,
    /// Every process by name, for the footprint sampler (a restart replaces its pid).
    processes: Processes,
}

impl Cluster {
    /// The origin stub serving `objects`, a coordinator, `--workers` workers (at least
    /// two) and one gateway per front on route `cache`.
    async fn start(
        setup: &BenchSetup,
        args: &Args,
        objects: &[GeneratedObject],
    ) -> anyhow::Result<Self> {
        let dir = setup.tmp.path().to_owned();
        let stub = Stub::start(&setup.binaries, &dir, objects).await?;
        let mut coordinator = Coordinator::start(
            &setup.binaries,
            &dir,
            "coordinator",
            Geometry {
                block_size: BLOCK_SIZE,
                page_size: 64 << 10,
            },
        )
        .await?;
        let coordinator_url = coordinator.url.clone();
        let ids: Vec<String> = (0..args.workers.max(2)).map(|i| format!("w{i}")).collect();
        let mut workers = Vec::new();
        for id in &ids {
            workers.push(Some(
                start_worker(setup, &dir, &stub, &mut coordinator, id, &coordinator_url).await?,
            ));
        }
        let gateway = |name, front| GatewaySpec {
            origin_request_limit: None,
            name,
            front,
            route: Route::Cache,
            coordinator: Some(&coordinator_url),
            block_size: BLOCK_SIZE,
            local_reads: false,
            max_staleness_ms: Some(args.max_staleness_ms),
            hedge_budget: Some(args.hedge_budget),
            host: None,
            unsigned_reads: false,
            tls: None,
            read_ahead_objects: None,
        };
        let s3 =
            Gateway::start(&setup.binaries, &dir, &stub, gateway("gw-s3", Backend::S3)).await?;
        let azure = Gateway::start(
            &setup.binaries,
            &dir,
            &stub,
            gateway("gw-azure", Backend::Azure),
        )
        .await?;
        let mut named = BTreeMap::new();
        let now = Instant::now();
        named.insert("origin-stub".into(), (stub.process.pid(), now));
        named.insert("coordinator".into(), (coordinator.process.pid(), now));
        named.insert("gw-s3".into(), (s3.process.pid(), now));
        named.insert("gw-azure".into(), (azure.process.pid(), now));
        for (id, w) in ids.iter().zip(&workers) {
            if let Some(w) = w {
                named.insert(id.clone(), (w.process.pid(), now));
            }
        }
        Ok(Self {
            dir,
            stub,
            coordinator,
            coordinator_url,
            ids,
            workers,
            s3,
            azure,
            processes: Arc::new(Mutex::new(named)),
        })
    }

    /// Each object as the readers ask for it through either front; `flip`'s first
    /// content with its second as the other right answer.
    fn readable(
        &self,
        objects: &[GeneratedObject],
        flip: Option<&[GeneratedObject; 2]>,
    ) -> anyhow::Result<Vec<Readable>> {
        let target = |o: &GeneratedObject,
                      second: Option<&GeneratedObject>|
         -> anyhow::Result<Readable> {
            Ok(Readable {
                ranged: ExpectedRanges::new(o.clone(), RANGE_SIZE),
                whole: ExpectedRanges::whole_object(o.clone()),
                other: second.map(|b| {
                    (
                        ExpectedRanges::new(b.clone(), RANGE_SIZE),
                        ExpectedRanges::whole_object(b.clone()),
                    )
                }),
                s3: ObjectTarget::s3(&self.s3.url, &o.bucket, &o.key, client_auth(Backend::S3)?)?,
                azure: ObjectTarget::azure(
                    &self.azure.url,
                    &o.bucket,
                    &o.key,
                    client_auth(Backend::Azure)?,
                )?,
            })
        };
        let mut all: Vec<Readable> = objects
            .iter()
            .map(|o| target(o, None))
            .collect::<anyhow::Result<_>>()?;
        if let Some([a, b]) = flip {
            all.push(target(a, Some(b))?);
        }
        Ok(all)
    }

    /// Kills the worker in `slot` and starts it again on its cache folder `down` later.
    async fn restart_worker(
        &mut self,
        setup: &BenchSetup,
        slot: usize,
        down: Duration,
    ) -> anyhow::Result<()> {
        if let Some(w) = self.workers[slot].take() {
            signal(w.process.pid(), "KILL")?;
            drop(w);
        }
        tokio::time::sleep(down).await;
        let id = self.ids[slot].clone();
        let w = start_worker(
            setup,
            &self.dir,
            &self.stub,
            &mut self.coordinator,
            &id,
            &self.coordinator_url,
        )
        .await?;
        self.processes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, (w.process.pid(), Instant::now()));
        self.workers[slot] = Some(w);
        Ok(())
    }

    /// What the gateways' cache clients did through the run, and what the origin was
    /// asked (their `/metrics`).
    async fn what_was_asked(&self) -> anyhow::Result<Asked> {
        let mut fail_open = BTreeMap::<String, u64>::new();
        for gateway in [&self.s3, &self.azure] {
            for (event, n) in
                samples_of(&gateway.admin_url, "talon_gateway_fail_open{event=\"").await?
            {
                *fail_open.entry(event).or_default() += n;
            }
        }
        let origin_requests = samples_of(&self.stub.admin_url, "talon_origin_requests_total{")
            .await?
            .values()
            .sum();
        Ok(Asked {
            fail_open,
            origin_requests,
        })
    }
}

/// The gateways' fail-open events and the origin's request count, at the end.
#[derive(Debug, serde::Serialize)]
struct Asked {
    fail_open: BTreeMap<String, u64>,
    origin_requests: u64,
}

/// A fault injected, and when (from the start of the run).
#[derive(Debug, Clone, Copy)]
struct Window {
    fault: Fault,
    from: Duration,
    to: Duration,
}

/// The readers: `--readers` tasks reading random objects through random fronts until
/// the clock runs out, every answer checked. Aborted when dropped (a run that ends in
/// an error stops its readers with it).
struct Readers {
    tasks: tokio::task::JoinSet<()>,
    samples: Arc<Mutex<Vec<Sample>>>,
    first_wrong: Arc<Mutex<Option<String>>>,
}

impl Readers {
    fn spawn(args: &Args, readable: Arc<Vec<Readable>>, clock: Clock) -> Self {
        let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
        let first_wrong = Arc::new(Mutex::new(None::<String>));
        let stuck = Duration::from_secs(args.stuck_s);
        let mut tasks = tokio::task::JoinSet::new();
        for r in 0..args.readers.max(1) {
            let (readable, samples, first_wrong) =
                (readable.clone(), samples.clone(), first_wrong.clone());
            tasks.spawn(async move {
                let mut dice = Dice(0x9e37_79b9_7f4a_7c15 ^ (r as u64 + 1));
                let mut conns: [Option<Connection>; 2] = [None, None];
                while clock.running() {
                    let sample =
                        read_one(&readable, &mut dice, &mut conns, stuck, &first_wrong, clock)
                            .await;
                    samples
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(sample);
                }
            });
        }
        Self {
            tasks,
            samples,
            first_wrong,
        }
    }

    /// Waits for every reader; the samples, and the first wrong answer's description.
    async fn join(mut self) -> anyhow::Result<(Vec<Sample>, Option<String>)> {
        while let Some(r) = self.tasks.join_next().await {
            r.context("a reader panicked")?;
        }
        let samples = self
            .samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let first_wrong = self
            .first_wrong
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Ok((samples, first_wrong))
    }
}

/// One request of a reader: a random object, front, and whole or one aligned range;
/// the answer checked against every content the object may have.
async fn read_one(
    readable: &[Readable],
    dice: &mut Dice,
    conns: &mut [Option<Connection>; 2],
    stuck: Duration,
    first_wrong: &Mutex<Option<String>>,
    clock: Clock,
) -> Sample {
    let object = &readable[dice.below(readable.len())];
    let azure = dice.below(2) == 1;
    let target = if azure { &object.azure } else { &object.s3 };
    let whole = dice.below(3) == 0;
    let (mut expected, range) = if whole {
        (vec![object.whole.expect_range(0)], None)
    } else {
        let k = dice.below(object.ranged.len());
        (
            vec![object.ranged.expect_range(k)],
            Some(object.ranged.range(k)),
        )
    };
    if let Some((ranged, whole_b)) = &object.other {
        expected.push(match &range {
            None => whole_b.expect_range(0),
            Some(r) => ranged.expect_range((r.start / RANGE_SIZE) as usize),
        });
    }
    let at = Instant::now();
    let slot = &mut conns[usize::from(azure)];
    let ending = match one_request(slot, target, range, stuck).await {
        Err(Outcome::Stuck) => Ending::Stuck,
        Err(Outcome::Failed(why)) => {
            eprintln!("[chaos] a request failed: {why}");
            if why.starts_with("the body broke off") {
                Ending::Cut
            } else {
                Ending::NoAnswer
            }
        }
        Ok(got) => check_answer(&got, &expected, target, first_wrong),
    };
    if ending != Ending::Right {
        *slot = None;
    }
    Sample {
        started: at - clock.started,
        took: at.elapsed(),
        ending,
        flip: object.other.is_some(),
    }
}

/// How an answer ends: right when it is wholly one of the contents the object had;
/// a 2xx that is not is wrong (the first one's reason kept); else an error answer.
fn check_answer(
    got: &talon_bench::http_load::Fetched,
    expected: &[talon_bench::verify::Expectation],
    target: &ObjectTarget,
    first_wrong: &Mutex<Option<String>>,
) -> Ending {
    let received = Received {
        status: got.status,
        headers: &got.headers,
        body: &got.body,
        sha256: got.sha256,
    };
    let checks: Vec<Result<(), String>> = expected
        .iter()
        .map(|e| check_response(e, &received))
        .collect();
    match checks.iter().find_map(|c| c.as_ref().err()) {
        _ if checks.iter().any(Result::is_ok) => Ending::Right,
        Some(why) if got.status.is_success() => {
            first_wrong
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(why.clone());
            Ending::Wrong
        }
        _ => {
            let code = error_code(got);
            let origin_failure = is_origin_failure_answer(got, &code);
            eprintln!(
                "[chaos] an error answer{}: {} {code} to a GET of {}",
                if origin_failure {
                    " (an origin failure's)"
                } else {
                    ""
                },
                got.status.as_u16(),
                target.url(),
            );
            Ending::ErrorAnswer { origin_failure }
        }
    }
}

/// Overwrites of flip.bin at the origin, alternating its two contents; one that fails
/// (in an `origin` window) is simply tried again at the next turn.
struct Overwriter {
    task: tokio::task::JoinSet<()>,
    /// When each overwrite landed, from the start of the run.
    done: Arc<Mutex<Vec<Duration>>>,
}

impl Overwriter {
    fn spawn(
        contents: [GeneratedObject; 2],
        origin: talon_protocols::origin::OriginClient,
        every: Duration,
        clock: Clock,
    ) -> Self {
        let done = Arc::new(Mutex::new(Vec::<Duration>::new()));
        let bodies = contents.each_ref().map(generated_bytes);
        let mut task = tokio::task::JoinSet::new();
        let landed = done.clone();
        task.spawn(async move {
            let mut next = 1;
            while Instant::now() + every < clock.until {
                tokio::time::sleep(every).await;
                let o = &contents[next];
                if origin
                    .put(&o.bucket, &o.key, bodies[next].clone(), None)
                    .await
                    .is_ok()
                {
                    landed
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(clock.started.elapsed());
                    next = 1 - next;
                }
            }
        });
        Self { task, done }
    }

    async fn join(mut self) -> anyhow::Result<Vec<Duration>> {
        while let Some(r) = self.task.join_next().await {
            r.context("the overwriter panicked")?;
        }
        Ok(self.done.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

/// Every process measured every `--sample-ms` (at least 100) until the clock runs out.
fn spawn_sampler(
    args: &Args,
    processes: &Processes,
    watched: &Arc<Mutex<BTreeMap<String, Watched>>>,
    clock: Clock,
) -> tokio::task::JoinHandle<()> {
    let (processes, watched) = (processes.clone(), watched.clone());
    let every = Duration::from_millis(args.sample_ms.max(100));
    let warmup = Duration::from_secs(args.warmup_s);
    tokio::spawn(async move {
        while clock.running() {
            measure(&processes, &watched, warmup);
            tokio::time::sleep(every).await;
        }
    })
}

/// The faults, one at a time with `--every-ms` between them, on a random worker or on
/// the origin, while a whole one still fits before the clock runs out.
async fn inject_faults(
    args: &Args,
    setup: &BenchSetup,
    cluster: &mut Cluster,
    clock: Clock,
) -> anyhow::Result<Vec<Window>> {
    let mut windows = Vec::new();
    let mut dice = Dice(0x5851_f42d_4c95_7f2d);
    let mut turn = 0usize;
    loop {
        tokio::time::sleep(Duration::from_millis(args.every_ms)).await;
        let Some(&fault) = args.faults.get(turn % args.faults.len().max(1)) else {
            break;
        };
        if Instant::now() + fault_length(args, fault) > clock.until {
            break;
        }
        turn += 1;
        let victim = dice.below(cluster.workers.len());
        let from = clock.started.elapsed();
        inject(args, setup, cluster, fault, victim).await?;
        let to = clock.started.elapsed();
        let on = match fault {
            Fault::Kill | Fault::Hang => cluster.ids[victim].as_str(),
            Fault::Origin | Fault::OriginSlow => "the origin",
        };
        eprintln!(
            "[chaos] {fault:?} {on}: {:.1}–{:.1} s",
            from.as_secs_f64(),
            to.as_secs_f64()
        );
        windows.push(Window { fault, from, to });
    }
    Ok(windows)
}

/// One fault, from its start to its end (a worker killed is back, a hung one resumed,
/// the origin healthy again).
async fn inject(
    args: &Args,
    setup: &BenchSetup,
    cluster: &mut Cluster,
    fault: Fault,
    victim: usize,
) -> anyhow::Result<()> {
    match fault {
        Fault::Kill => {
            cluster
                .restart_worker(setup, victim, Duration::from_millis(args.down_ms))
                .await?;
        }
        Fault::Hang => {
            let pid = cluster.workers[victim]
                .as_ref()
                .map(|w| w.process.pid())
                .context("a worker slot is empty")?;
            signal(pid, "STOP")?;
            tokio::time::sleep(Duration::from_millis(args.hang_ms)).await;
            signal(pid, "CONT")?;
        }
        Fault::Origin | Fault::OriginSlow => {
            let faults = if fault == Fault::Origin {
                FaultConfig {
                    error_rate: args.origin_error_rate,
                    error_kinds: vec![
                        FaultKind::Internal,
                        FaultKind::Slowdown,
                        FaultKind::Reset,
                        FaultKind::Truncate,
                    ],
                    ..FaultConfig::default()
                }
            } else {
                FaultConfig {
                    latency_ms: args.origin_latency_ms,
                    ..FaultConfig::default()
                }
            };
            cluster.stub.set_faults(&faults).await?;
            tokio::time::sleep(Duration::from_millis(args.origin_fault_ms)).await;
            cluster.stub.set_faults(&FaultConfig::default()).await?;
        }
    }
    Ok(())
}

/// Each request's verdict once the fault windows and overwrites are known: an error
/// is the origin's only inside an `origin` window, a cut body of flip.bin an overwrite
/// abort only when an overwrite (or one within the declared `staleness` before it)
/// overlapped it.
fn judge<'a>(
    samples: &'a [Sample],
    windows: &[Window],
    overwrites: &[Duration],
    staleness: Duration,
) -> Vec<Judged<'a>> {
    let overlaps = |s: &Sample, kinds: &[Fault]| {
        windows
            .iter()
            .any(|w| kinds.contains(&w.fault) && s.started < w.to && s.started + s.took > w.from)
    };
    let overwritten_during = |s: &Sample| {
        overwrites
            .iter()
            .any(|at| *at + staleness > s.started && *at < s.started + s.took)
    };
    samples
        .iter()
        .map(|s| {
            let verdict = match s.ending {
                Ending::Right => Verdict::Right,
                Ending::Wrong => Verdict::Wrong,
                Ending::Stuck => Verdict::Stuck,
                Ending::ErrorAnswer {
                    origin_failure: true,
                }
                | Ending::Cut
                    if overlaps(s, &[Fault::Origin]) =>
                {
                    Verdict::OriginError
                }
                Ending::Cut if s.flip && overwritten_during(s) => Verdict::OverwriteAbort,
                Ending::ErrorAnswer { .. } | Ending::Cut | Ending::NoAnswer => Verdict::Failed,
            };
            Judged {
                sample: s,
                verdict,
                during_a_fault: overlaps(s, &ALL_FAULTS),
            }
        })
        .collect()
}

/// One request's verdict, and whether it overlapped any fault's window.
#[derive(Debug, Clone, Copy)]
struct Judged<'a> {
    sample: &'a Sample,
    verdict: Verdict,
    during_a_fault: bool,
}

/// Every kind of fault.
const ALL_FAULTS: [Fault; 4] = [Fault::Kill, Fault::Hang, Fault::Origin, Fault::OriginSlow];

/// What a run found: the tallies overall, overlapping a fault and outside, and what
/// surrounds them.
struct ChaosReport {
    all: Tally,
    during: Tally,
    outside: Tally,
    windows: Vec<Window>,
    overwrites: usize,
    asked: Asked,
    watched: BTreeMap<String, Watched>,
    first_wrong: Option<String>,
}

impl ChaosReport {
    fn count(&self, kind: Fault) -> usize {
        self.windows.iter().filter(|w| w.fault == kind).count()
    }

    /// The processes whose memory or descriptors grew beyond what a soak allows.
    fn grown(&self) -> Vec<&String> {
        self.watched
            .iter()
            .filter(|(_, w)| w.grew() == Some(true))
            .map(|(name, _)| name)
            .collect()
    }

    /// The tables a person reads, on stderr.
    fn print(&self, args: &Args) {
        let (kills, hangs) = (self.count(Fault::Kill), self.count(Fault::Hang));
        let (origin_faults, origin_slow) =
            (self.count(Fault::Origin), self.count(Fault::OriginSlow));
        let overwrites = self.overwrites;
        let hung = if hangs > 0 {
            format!(" of {} ms", args.hang_ms)
        } else {
            String::new()
        };
        eprintln!(
            "\n### talon-chaos: {} s, {} workers, {} readers, {kills} kills, {hangs} hangs{hung}, \
             {origin_faults} origin fault windows, {origin_slow} slow-origin windows, {overwrites} overwrites\n",
            args.seconds, args.workers, args.readers
        );
        eprintln!(
            "| requests | count | right | failed | wrong | stuck | origin errors | overwrite aborts | p50 | p99 | max |"
        );
        eprintln!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (name, t) in [
            ("all", &self.all),
            ("overlapping a fault", &self.during),
            ("outside faults", &self.outside),
        ] {
            eprintln!(
                "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                thousands(t.requests as f64),
                thousands(t.right as f64),
                t.failed,
                t.wrong,
                t.stuck,
                t.origin_errors,
                t.overwrite_aborts,
                fmt_latency(t.p50_ms * 1e3),
                fmt_latency(t.p99_ms * 1e3),
                fmt_latency(t.max_ms * 1e3),
            );
        }
        eprintln!(
            "\n| origin requests | piece retries | resumed | skipped (open circuit) | fallbacks | hedged | hedges won |"
        );
        eprintln!("|---:|---:|---:|---:|---:|---:|---:|");
        let event = |name: &str| self.asked.fail_open.get(name).copied().unwrap_or(0);
        eprintln!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            thousands(self.asked.origin_requests as f64),
            event("retries"),
            event("resumed"),
            event("skipped"),
            event("fallbacks"),
            event("hedged"),
            event("hedges_won"),
        );
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / f64::from(1 << 20));
        eprintln!(
            "\n| process | pid | RSS after warm-up | RSS at end | peak RSS | fds after warm-up | fds at end |"
        );
        eprintln!("|---|---:|---:|---:|---:|---:|---:|");
        for (name, w) in &self.watched {
            let (rss0, fds0) = w
                .after_warmup
                .map_or(("–".to_owned(), "–".to_owned()), |f| {
                    (mib(f.rss_bytes), f.open_fds.to_string())
                });
            eprintln!(
                "| {name}{} | {} | {rss0} | {} | {} | {fds0} | {} |",
                if w.grew() == Some(true) {
                    " (grew)"
                } else {
                    ""
                },
                w.pid,
                mib(w.at_end.rss_bytes),
                mib(w.peak_rss_bytes),
                w.at_end.open_fds,
            );
        }
        if let Some(why) = &self.first_wrong {
            eprintln!("\nthe first wrong response: {why}");
        }
    }

    /// The JSON line a script reads (bench/results/chaos.jsonl, and stdout with --json).
    fn emit(&self, args: &Args, setup: &mut BenchSetup) -> anyhow::Result<()> {
        setup.lines.emit(&serde_json::json!({
            "bench": "chaos",
            "host": setup.host,
            "seconds": args.seconds,
            "workers": args.workers,
            "readers": args.readers,
            "faults": args.faults,
            "kills": self.count(Fault::Kill),
            "hangs": self.count(Fault::Hang),
            "hang_ms": args.hang_ms,
            "down_ms": args.down_ms,
            "origin_fault_windows": self.count(Fault::Origin),
            "origin_slow_windows": self.count(Fault::OriginSlow),
            "origin_fault_ms": args.origin_fault_ms,
            "origin_error_rate": args.origin_error_rate,
            "origin_latency_ms": args.origin_latency_ms,
            "overwrites": self.overwrites,
            "overwrite_ms": args.overwrite_ms,
            "soak": args.soak,
            "warmup_s": args.warmup_s,
            "processes": self.watched,
            "max_size": args.max_size,
            "hedge_budget": args.hedge_budget,
            "fail_open": self.asked.fail_open,
            "origin_requests": self.asked.origin_requests,
            "all": self.all,
            "overlapping_a_fault": self.during,
            "outside_faults": self.outside,
        }))?;
        Ok(())
    }

    /// Whether the run passed: requests made, none failed, wrong or stuck; under
    /// `--soak`, no process grew. Says why on stderr when not.
    fn passed(&self, args: &Args) -> bool {
        let mut ok = self.all.failed == 0
            && self.all.wrong == 0
            && self.all.stuck == 0
            && self.all.requests > 0;
        let grown = self.grown();
        if args.soak && !grown.is_empty() {
            eprintln!("\ntalon-chaos: FAILED: memory or descriptors grew in {grown:?}");
            ok = false;
        }
        if !ok {
            eprintln!(
                "\ntalon-chaos: FAILED: a wrong byte, a stuck request, or an error the origin did not cause"
            );
        }
        ok
    }
}

/// The samples of `/metrics` at `admin_url` whose line starts with `prefix`, by what
/// follows the prefix up to the next `"` (a label's value), summed.
async fn samples_of(
    admin_url: &str,
    prefix: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, u64>> {
    let url = format!("{admin_url}/metrics");
    let (status, text) =
        talon_bench::http_load::control_request(hyper::Method::GET, &url, None).await?;
    anyhow::ensure!(status.is_success(), "GET {url}: {status}");
    let mut found = std::collections::BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(prefix) else {
            continue;
        };
        let label = rest.split('"').next().unwrap_or_default().to_owned();
        let value = rest
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        *found.entry(label).or_default() += value as u64;
    }
    Ok(found)
}

fn fault_length(args: &Args, fault: Fault) -> Duration {
    Duration::from_millis(match fault {
        Fault::Kill => args.down_ms + 2000,
        Fault::Hang => args.hang_ms,
        Fault::Origin | Fault::OriginSlow => args.origin_fault_ms,
    })
}

/// Every byte of a generated object (what the overwriter uploads).
fn generated_bytes(object: &GeneratedObject) -> bytes::Bytes {
    let mut buf = vec![0u8; usize::try_from(object.size).unwrap_or(0)];
    object.fill(0, &mut buf);
    buf.into()
}

/// The error code of an error answer: Azure's `x-ms-error-code`, or S3's `<Code>`.
fn error_code(got: &talon_bench::http_load::Fetched) -> String {
    got.headers
        .get("x-ms-error-code")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            let body: Vec<u8> = got.body.iter().flat_map(|b| b.iter().copied()).collect();
            let text = String::from_utf8_lossy(&body);
            let start = text.find("<Code>")? + "<Code>".len();
            let end = text[start..].find("</Code>")? + start;
            Some(text[start..end].to_owned())
        })
        .unwrap_or_default()
}

/// Whether an error answer is what an origin failure may become, in the front's
/// protocol: 500 InternalError, or 503 SlowDown / ServerBusy / ServiceUnavailable with
/// `Retry-After`.
fn is_origin_failure_answer(got: &talon_bench::http_load::Fetched, code: &str) -> bool {
    match got.status.as_u16() {
        500 => code == "InternalError",
        503 => {
            matches!(code, "SlowDown" | "ServerBusy" | "ServiceUnavailable")
                && got.headers.contains_key("retry-after")
        }
        _ => false,
    }
}

enum Outcome {
    Stuck,
    Failed(String),
}

async fn one_request(
    slot: &mut Option<Connection>,
    target: &ObjectTarget,
    range: Option<std::ops::Range<u64>>,
    stuck: Duration,
) -> Result<talon_bench::http_load::Fetched, Outcome> {
    let work = async {
        if slot.as_ref().is_none_or(|c| !c.is_open()) {
            *slot = Some(Connection::to(target).await?);
        }
        let conn = slot.as_mut().ok_or("no connection")?;
        fetch(conn, target.get(range)?).await
    };
    match tokio::time::timeout(stuck, work).await {
        Err(_) => Err(Outcome::Stuck),
        Ok(Err(why)) => Err(Outcome::Failed(why)),
        Ok(Ok(got)) => Ok(got),
    }
}

async fn start_worker(
    setup: &BenchSetup,
    dir: &std::path::Path,
    stub: &Stub,
    coordinator: &mut Coordinator,
    id: &str,
    coordinator_url: &str,
) -> anyhow::Result<Worker> {
    Ok(Worker::start(
        &setup.binaries,
        dir,
        stub,
        coordinator,
        WorkerSpec {
            origin_request_limit: None,
            max_blocks: None,
            id,
            coordinator: coordinator_url,
            advertise: None,
            capacity: 1 << 30,
            page_size: 64 << 10,
            host: None,
        },
    )
    .await?)
}
