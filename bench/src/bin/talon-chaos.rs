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
//! - `hang`: SIGSTOP for `--hang-ms`, then SIGCONT.
//!
//! Every request is classed: right, an error the client saw (an error status, or a
//! body cut off), wrong (a 2xx whose bytes, length or range are not the object's), or
//! stuck (no end within `--stuck-s`). The report gives them overall, for requests that
//! overlapped a fault, and for the rest, with latency percentiles; a table on stderr,
//! one JSON line in `bench/results/chaos.jsonl` (and on stdout with `--json`). It
//! exits 1 on any wrong, stuck or failed request: on route `cache` with a healthy
//! origin there must be none.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, ValueEnum};
use talon_bench::deployment::{
    BenchSetup, Coordinator, Gateway, GatewaySpec, Route, Stub, Worker, WorkerSpec, client_auth,
    run_bench,
};
use talon_bench::http_load::{Connection, ObjectTarget, Protocol, fetch};
use talon_bench::summary::{LatencySummary, fmt_latency, thousands};
use talon_bench::verify::{ExpectedRanges, Received, check_response};
use talon_core::parse_byte_size;
use talon_origin_stub::generated::GeneratedObject;

/// A fault the run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Fault {
    /// SIGKILL a worker, restart it after --down-ms.
    Kill,
    /// SIGSTOP a worker for --hang-ms, then SIGCONT.
    Hang,
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
}

const BLOCK_SIZE: u64 = 4 << 20;
const RANGE_SIZE: u64 = 1 << 20;

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Right,
    Failed,
    Wrong,
    Stuck,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    started: Duration,
    took: Duration,
    verdict: Verdict,
}

/// One object as the readers ask for it: by aligned ranges, and whole.
struct Readable {
    ranged: ExpectedRanges,
    whole: ExpectedRanges,
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
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

fn tally<'a>(samples: impl Iterator<Item = &'a Sample>) -> Tally {
    let mut t = Tally::default();
    let mut took = Vec::new();
    for s in samples {
        t.requests += 1;
        match s.verdict {
            Verdict::Right => t.right += 1,
            Verdict::Failed => t.failed += 1,
            Verdict::Wrong => t.wrong += 1,
            Verdict::Stuck => t.stuck += 1,
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
    let dir = setup.tmp.path().to_owned();
    let mut sizes = vec![4 << 10, 300 << 10, (5 << 20) + 123];
    if args.max_size > sizes[2] {
        sizes.push(args.max_size);
    }
    let objects: Vec<GeneratedObject> = sizes
        .iter()
        .enumerate()
        .map(|(i, size)| GeneratedObject::new("chaos", format!("o{i}.bin"), *size, 40 + i as u64))
        .collect();
    eprintln!("[chaos] {}", setup.host.describe());
    let stub = Stub::start(&setup.binaries, &dir, &objects).await?;
    let mut coordinator = Coordinator::start(&setup.binaries, &dir, "coordinator").await?;
    let coordinator_url = coordinator.url.clone();
    let ids: Vec<String> = (0..args.workers.max(2)).map(|i| format!("w{i}")).collect();
    let mut workers = Vec::new();
    for id in &ids {
        workers.push(Some(
            start_worker(&setup, &dir, &stub, &mut coordinator, id, &coordinator_url).await?,
        ));
    }
    let gateway = |name, front| GatewaySpec {
        name,
        front,
        route: Route::Cache,
        coordinator: Some(&coordinator_url),
        block_size: BLOCK_SIZE,
        local_reads: false,
    };
    let s3 = Gateway::start(&setup.binaries, &dir, &stub, gateway("gw-s3", Protocol::S3)).await?;
    let azure = Gateway::start(
        &setup.binaries,
        &dir,
        &stub,
        gateway("gw-azure", Protocol::Azure),
    )
    .await?;
    let readable: Arc<Vec<Readable>> = Arc::new(
        objects
            .iter()
            .map(|o| -> anyhow::Result<Readable> {
                Ok(Readable {
                    ranged: ExpectedRanges::new(o.clone(), RANGE_SIZE),
                    whole: ExpectedRanges::whole_object(o.clone()),
                    s3: ObjectTarget::s3(&s3.url, &o.bucket, &o.key, client_auth(Protocol::S3)?)?,
                    azure: ObjectTarget::azure(
                        &azure.url,
                        &o.bucket,
                        &o.key,
                        client_auth(Protocol::Azure)?,
                    )?,
                })
            })
            .collect::<anyhow::Result<_>>()?,
    );

    let started = Instant::now();
    let until = started + Duration::from_secs(args.seconds);
    let stuck = Duration::from_secs(args.stuck_s);
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let first_wrong = Arc::new(Mutex::new(None::<String>));
    // Aborted when dropped: a run that ends in an error stops its readers with it.
    let mut readers = tokio::task::JoinSet::new();
    for r in 0..args.readers.max(1) {
        let (readable, samples, first_wrong) =
            (readable.clone(), samples.clone(), first_wrong.clone());
        readers.spawn(async move {
            let mut dice = Dice(0x9e37_79b9_7f4a_7c15 ^ (r as u64 + 1));
            let mut conns: [Option<Connection>; 2] = [None, None];
            while Instant::now() < until {
                let object = &readable[dice.below(readable.len())];
                let azure = dice.below(2) == 1;
                let target = if azure { &object.azure } else { &object.s3 };
                let whole = dice.below(3) == 0;
                let (expected, range) = if whole {
                    (object.whole.expect_range(0), None)
                } else {
                    let k = dice.below(object.ranged.len());
                    (object.ranged.expect_range(k), Some(object.ranged.range(k)))
                };
                let at = Instant::now();
                let slot = &mut conns[usize::from(azure)];
                let verdict = match one_request(slot, target, range, stuck).await {
                    Err(Outcome::Stuck) => Verdict::Stuck,
                    Err(Outcome::Failed(why)) => {
                        eprintln!("[chaos] a request failed: {why}");
                        Verdict::Failed
                    }
                    Ok(got) => {
                        let received = Received {
                            status: got.status,
                            headers: &got.headers,
                            body: &got.body,
                            sha256: got.sha256,
                        };
                        match check_response(&expected, &received) {
                            Ok(()) => Verdict::Right,
                            Err(why) if got.status.is_success() => {
                                first_wrong
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .get_or_insert(why);
                                Verdict::Wrong
                            }
                            Err(why) => {
                                eprintln!("[chaos] an error answer: {}", first_line(&why));
                                Verdict::Failed
                            }
                        }
                    }
                };
                if verdict != Verdict::Right {
                    *slot = None;
                }
                samples
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(Sample {
                        started: at - started,
                        took: at.elapsed(),
                        verdict,
                    });
            }
        });
    }

    // The faults, one at a time, on a random worker.
    let mut windows: Vec<(Fault, Duration, Duration)> = Vec::new();
    let mut dice = Dice(0x5851_f42d_4c95_7f2d);
    let mut turn = 0usize;
    loop {
        tokio::time::sleep(Duration::from_millis(args.every_ms)).await;
        let Some(&fault) = args.faults.get(turn % args.faults.len().max(1)) else {
            break;
        };
        if Instant::now() + fault_length(&args, fault) > until {
            break;
        }
        turn += 1;
        let victim = dice.below(workers.len());
        let id = ids[victim].clone();
        let from = started.elapsed();
        match fault {
            Fault::Kill => {
                if let Some(w) = workers[victim].take() {
                    signal(w.process.pid(), "KILL")?;
                    drop(w);
                }
                tokio::time::sleep(Duration::from_millis(args.down_ms)).await;
                workers[victim] = Some(
                    start_worker(&setup, &dir, &stub, &mut coordinator, &id, &coordinator_url)
                        .await?,
                );
            }
            Fault::Hang => {
                let pid = workers[victim]
                    .as_ref()
                    .map(|w| w.process.pid())
                    .context("a worker slot is empty")?;
                signal(pid, "STOP")?;
                tokio::time::sleep(Duration::from_millis(args.hang_ms)).await;
                signal(pid, "CONT")?;
            }
        }
        let to = started.elapsed();
        eprintln!(
            "[chaos] {fault:?} {id}: {:.1}–{:.1} s",
            from.as_secs_f64(),
            to.as_secs_f64()
        );
        windows.push((fault, from, to));
    }
    while let Some(r) = readers.join_next().await {
        r.context("a reader panicked")?;
    }
    for w in workers.iter_mut().flatten() {
        w.process.ensure_running("at the end of the run")?;
    }

    let samples = samples.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let overlaps = |s: &Sample| {
        windows
            .iter()
            .any(|(_, from, to)| s.started < *to && s.started + s.took > *from)
    };
    let all = tally(samples.iter());
    let during = tally(samples.iter().filter(|s| overlaps(s)));
    let outside = tally(samples.iter().filter(|s| !overlaps(s)));
    let kills = windows.iter().filter(|w| w.0 == Fault::Kill).count();
    let hangs = windows.iter().filter(|w| w.0 == Fault::Hang).count();
    let hung = if hangs > 0 {
        format!(" of {} ms", args.hang_ms)
    } else {
        String::new()
    };
    eprintln!(
        "\n### talon-chaos: {} s, {} workers, {} readers, {kills} kills, {hangs} hangs{hung}\n",
        args.seconds, args.workers, args.readers
    );
    eprintln!("| requests | count | right | failed | wrong | stuck | p50 | p99 | max |");
    eprintln!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, t) in [
        ("all", &all),
        ("overlapping a fault", &during),
        ("outside faults", &outside),
    ] {
        eprintln!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} |",
            thousands(t.requests as f64),
            thousands(t.right as f64),
            t.failed,
            t.wrong,
            t.stuck,
            fmt_latency(t.p50_ms * 1e3),
            fmt_latency(t.p99_ms * 1e3),
            fmt_latency(t.max_ms * 1e3),
        );
    }
    if let Some(why) = first_wrong
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
    {
        eprintln!("\nthe first wrong response: {why}");
    }
    setup.lines.emit(&serde_json::json!({
        "bench": "chaos",
        "host": setup.host,
        "seconds": args.seconds,
        "workers": args.workers,
        "readers": args.readers,
        "faults": args.faults,
        "kills": kills,
        "hangs": hangs,
        "hang_ms": args.hang_ms,
        "down_ms": args.down_ms,
        "max_size": args.max_size,
        "all": all,
        "overlapping_a_fault": during,
        "outside_faults": outside,
    }))?;
    let ok = all.failed == 0 && all.wrong == 0 && all.stuck == 0 && all.requests > 0;
    if !ok {
        eprintln!("\ntalon-chaos: FAILED: a cache failure reached a client");
    }
    Ok(ok)
}

fn fault_length(args: &Args, fault: Fault) -> Duration {
    Duration::from_millis(match fault {
        Fault::Kill => args.down_ms + 2000,
        Fault::Hang => args.hang_ms,
    })
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
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
            *slot = Some(Connection::open(&target.connect).await?);
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
            id,
            coordinator: coordinator_url,
            advertise: None,
            capacity: 1 << 30,
            page_size: 64 << 10,
        },
    )
    .await?)
}
