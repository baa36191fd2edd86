//! `talon warm`: fills a cluster's cache before a job reads it, with progress on stderr
//! and, at the end, a table for a person or one JSON line for a script (`--json`).
//!
//! - **A prefix** (`s3://BUCKET/PREFIX`, `az://ACCOUNT/CONTAINER/PREFIX`) is a warm job
//!   on the coordinator (`POST /v1/warm`): it lists the prefix at the origin and the
//!   workers that own each block fill it themselves, so no byte travels here. This
//!   command follows the job with a progress bar (objects, bytes, rate, ETA) and, on
//!   Ctrl-C, cancels it (the blocks filled stay cached).
//! - **Named objects** (key paths, `s3/BUCKET/KEY`) are read whole through the cache
//!   client, as a reader would: the owners fetch what they lack and keep it; the bytes
//!   also travel to this process, which drops them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt as _;
use talon_cache_client::{CacheClient, CacheClientConfig};
use talon_coordinator_client::api::ClusterGeometry;
use talon_core::{BlockGeometry, ObjectId, parse_byte_size};

/// `talon warm`'s flags.
#[derive(Debug, clap::Args)]
pub struct WarmArgs {
    /// What to warm: one prefix (s3://BUCKET/PREFIX or az://ACCOUNT/CONTAINER/PREFIX, a
    /// job the workers run), or objects as key paths (s3/BUCKET/KEY,
    /// az/ACCOUNT/CONTAINER/BLOB, read through this process).
    #[arg(required_unless_present = "list")]
    objects: Vec<String>,
    /// A file of objects to warm as a job on the workers, one key path per line (blank
    /// lines and lines starting with # are skipped).
    #[arg(long, conflicts_with = "objects")]
    list: Option<std::path::PathBuf>,
    /// For a prefix: fill at most this many bytes (objects in listing order; 0: all).
    #[arg(long, default_value = "0", value_parser = parse_byte_size)]
    budget: u64,
    #[command(flatten)]
    target: crate::coordinator_args::CoordinatorArgs,
    /// The cluster's block size. Taken from the coordinator when left out (its
    /// --block-size, the one every gateway reads by); given, it must equal the
    /// coordinator's or nothing is warmed.
    #[arg(long, env = "TALON_BLOCK_SIZE", value_parser = parse_byte_size)]
    block_size: Option<u64>,
    /// Objects warmed at once.
    #[arg(long, default_value_t = 2)]
    in_flight: usize,
    /// Print one line of JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// One object's warm.
#[derive(Debug, serde::Serialize)]
struct Warmed {
    object: String,
    bytes: u64,
    version: String,
    /// Pieces the cache already held.
    hits: u64,
    /// Pieces a worker fetched from the origin.
    fills: u64,
    seconds: f64,
}

/// Warms every object named, reporting progress each second.
///
/// # Errors
/// A name that is not a key path, a cluster that cannot be reached, or an object that
/// cannot be read (its error names it); the objects warmed before it stay warm.
pub async fn warm(args: WarmArgs) -> anyhow::Result<()> {
    let target = args.target.resolve()?;
    // The blocks warmed are the blocks the gateways read only at the cluster's size.
    let members = target
        .client(talon_core::cluster_auth::Role::Admin)?
        .members()
        .await
        .with_context(|| format!("asking the coordinator at {}", target.url))?;
    let block_size = ClusterGeometry::block_size_for(members.geometry, args.block_size)?;
    if let Some(path) = &args.list {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let objects: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_owned)
            .collect();
        anyhow::ensure!(!objects.is_empty(), "{} names no object", path.display());
        return warm_job(&args, &target, block_size, String::new(), objects).await;
    }
    if let [source] = args.objects.as_slice()
        && (source.starts_with("s3://") || source.starts_with("az://"))
    {
        return warm_job(&args, &target, block_size, source.clone(), Vec::new()).await;
    }
    let ids = args
        .objects
        .iter()
        .map(|o| ObjectId::from_key_path(o).with_context(|| format!("'{o}' is not a key path")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let geometry = BlockGeometry::new(block_size, block_size)
        .context("--block-size must be a power of two")?;
    let at = &target.url;
    let config = CacheClientConfig::new(at.clone(), geometry, target.secret.clone());
    let client = CacheClient::connect(config)
        .await
        .with_context(|| format!("connecting to the cluster at {at}"))?;
    let started = Instant::now();
    let done_bytes = Arc::new(AtomicU64::new(0));
    let done_objects = Arc::new(AtomicU64::new(0));
    let total = ids.len();
    let progress = {
        let (bytes, objects) = (done_bytes.clone(), done_objects.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                let b = bytes.load(Ordering::Relaxed);
                let secs = started.elapsed().as_secs_f64();
                eprintln!(
                    "warm: {}/{total} objects, {:.1} MiB, {:.1} MiB/s",
                    objects.load(Ordering::Relaxed),
                    b as f64 / 1048576.0,
                    b as f64 / 1048576.0 / secs.max(0.001)
                );
            }
        })
    };
    let results: Vec<anyhow::Result<Warmed>> = futures_util::stream::iter(ids)
        .map(|id| {
            let (client, bytes, objects) =
                (client.clone(), done_bytes.clone(), done_objects.clone());
            async move {
                let result = warm_one(&client, &id, &bytes).await;
                objects.fetch_add(1, Ordering::Relaxed);
                result.with_context(|| format!("warming {}", id.key_path()))
            }
        })
        .buffered(args.in_flight.max(1))
        .collect()
        .await;
    progress.abort();
    let warmed = results.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        let line = serde_json::json!({ "objects": warmed, "seconds": seconds });
        crate::output::line(format_args!("{line}"));
    } else {
        crate::output::text(format_args!("{}", table(&warmed, seconds)));
    }
    Ok(())
}

async fn warm_one(
    client: &CacheClient,
    id: &ObjectId,
    progress: &AtomicU64,
) -> anyhow::Result<Warmed> {
    let started = Instant::now();
    let stat = client.stat(id).await?;
    let (mut stream, sources) =
        client.read_range_tracked(id, &stat.version, stat.size, 0..stat.size)?;
    let mut bytes = 0u64;
    while let Some(piece) = stream.next().await {
        let n = piece?.len() as u64;
        bytes += n;
        progress.fetch_add(n, Ordering::Relaxed);
    }
    anyhow::ensure!(bytes == stat.size, "read {bytes} of {} bytes", stat.size);
    Ok(Warmed {
        object: id.key_path(),
        bytes,
        version: stat.version.as_str().to_owned(),
        hits: sources.hits(),
        fills: sources.fills() + sources.fallbacks(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn table(warmed: &[Warmed], seconds: f64) -> String {
    let mut out = String::from(
        "| object | bytes | pieces already cached | pieces filled | seconds |\n|---|---:|---:|---:|---:|\n",
    );
    for w in warmed {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.2} |\n",
            w.object, w.bytes, w.hits, w.fills, w.seconds
        ));
    }
    let bytes: u64 = warmed.iter().map(|w| w.bytes).sum();
    out.push_str(&format!(
        "\n{} objects, {:.1} MiB in {seconds:.2} s ({:.1} MiB/s)\n",
        warmed.len(),
        bytes as f64 / 1048576.0,
        bytes as f64 / 1048576.0 / seconds.max(0.001)
    ));
    out
}

/// Runs a warm job for `source` (or the `objects` named) on the coordinator and follows
/// it to the end.
async fn warm_job(
    args: &WarmArgs,
    target: &crate::coordinator_args::Target,
    block_size: u64,
    source: String,
    objects: Vec<String>,
) -> anyhow::Result<()> {
    let what = if source.is_empty() {
        format!("{} objects", objects.len())
    } else {
        source.clone()
    };
    use talon_coordinator_client::api::{WarmRequest, WarmState};
    let client = target.client(talon_core::cluster_auth::Role::Admin)?;
    let job = client
        .warm_start(&WarmRequest {
            source,
            objects,
            block_size,
            budget_bytes: args.budget,
        })
        .await
        .with_context(|| format!("starting a warm job of {what} at {}", target.url))?;
    if job.objects_over_budget > 0 {
        eprintln!(
            "warm: {} objects are past the budget of {} and left out",
            job.objects_over_budget,
            crate::status::bytes(args.budget)
        );
    }
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut tick = tokio::time::interval(Duration::from_millis(if tty { 250 } else { 1000 }));
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let view = loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut ctrl_c => {
                eprintln!();
                let v = client.warm_cancel(job.id).await?;
                eprintln!("warm: job {} cancelled; the blocks filled stay cached", job.id);
                break v;
            }
        }
        let v = client.warm_job(job.id).await?;
        eprint!("{}", progress_line(&v, tty));
        if v.state != WarmState::Running {
            if tty {
                eprintln!();
            }
            break v;
        }
    };
    if args.json {
        crate::output::line(format_args!("{}", serde_json::to_string(&view)?));
    } else {
        crate::output::text(format_args!("{}", job_table(&view)));
    }
    if let Some(note) = nothing_found(&view) {
        eprintln!("{note}");
    }
    anyhow::ensure!(
        view.errors == 0,
        "{} blocks failed; the first: {}",
        view.errors,
        view.first_error.as_deref().unwrap_or("-")
    );
    anyhow::ensure!(view.state == WarmState::Done, "the job was cancelled");
    Ok(())
}

/// One progress line: a bar, objects, bytes, rate and ETA; redrawn in place on a
/// terminal, one line per second otherwise.
fn progress_line(v: &talon_coordinator_client::api::WarmJobView, tty: bool) -> String {
    const WIDTH: usize = 30;
    let fraction = if v.bytes == 0 {
        1.0
    } else {
        v.bytes_done as f64 / v.bytes as f64
    };
    let filled = ((fraction * WIDTH as f64).round() as usize).min(WIDTH);
    let secs = v.elapsed_ms as f64 / 1000.0;
    let rate = v.bytes_done as f64 / secs.max(0.001);
    let eta = time_left(v);
    let line = format!(
        "[{}{}] {:>5.1}% · {}/{} objects · {} of {} · {}/s · ETA {eta}",
        "#".repeat(filled),
        ".".repeat(WIDTH - filled),
        fraction * 100.0,
        v.objects_done,
        v.objects,
        crate::status::bytes(v.bytes_done),
        crate::status::bytes(v.bytes),
        crate::status::bytes(rate as u64),
    );
    if tty {
        format!("\r{line}\x1b[K")
    } else {
        format!("{line}\n")
    }
}

/// The time a job has left, from the share of it done so far: of its bytes or of its
/// blocks, whichever is further (small objects often finish first, and bytes alone
/// then promised days for a job of seconds); `…` until something is done.
fn time_left(v: &talon_coordinator_client::api::WarmJobView) -> String {
    let share = |done: u64, all: u64| {
        if all == 0 {
            0.0
        } else {
            done as f64 / all as f64
        }
    };
    let done = share(v.bytes_done, v.bytes).max(share(v.blocks_done, v.blocks));
    if done <= 0.0 || v.elapsed_ms == 0 {
        return "…".into();
    }
    if done >= 1.0 {
        return "0 s".into();
    }
    let left = (v.elapsed_ms as f64 / 1000.0) * (1.0 - done) / done;
    match left.round() as u64 {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s.div_ceil(60)),
        s if s < 172_800 => format!("{} h", s.div_ceil(3600)),
        s => format!("{} days", s.div_ceil(86_400)),
    }
}

/// What to say when a finished job found nothing to warm: a mistyped prefix otherwise
/// reads as a job done (a missing bucket is refused before the job starts).
fn nothing_found(v: &talon_coordinator_client::api::WarmJobView) -> Option<String> {
    (v.state == talon_coordinator_client::api::WarmState::Done && v.objects == 0).then(|| {
        format!(
            "warm: nothing at the origin under {}: check the prefix (keys are matched by \
             their start; an object's full key warms that one object)",
            v.source
        )
    })
}

fn job_table(v: &talon_coordinator_client::api::WarmJobView) -> String {
    let secs = v.elapsed_ms as f64 / 1000.0;
    format!(
        "| job | source | state | objects | blocks | bytes | failed blocks | left out (budget) | seconds | rate |\n\
         |---:|---|---|---:|---:|---:|---:|---:|---:|---:|\n\
         | {} | {} | {:?} | {}/{} | {}/{} | {} of {} | {} | {} | {secs:.1} | {}/s |\n",
        v.id,
        v.source,
        v.state,
        v.objects_done,
        v.objects,
        v.blocks_done,
        v.blocks,
        crate::status::bytes(v.bytes_done),
        crate::status::bytes(v.bytes),
        v.errors,
        v.objects_over_budget,
        crate::status::bytes((v.bytes_done as f64 / secs.max(0.001)) as u64),
    )
}

#[cfg(test)]
mod tests {
    use talon_coordinator_client::api::{WarmJobView, WarmState};

    fn job(
        bytes: u64,
        bytes_done: u64,
        blocks: u64,
        blocks_done: u64,
        elapsed_ms: u64,
    ) -> WarmJobView {
        WarmJobView {
            id: 1,
            source: "s3://demo/".into(),
            block_size: 1 << 20,
            state: WarmState::Running,
            objects: blocks,
            objects_done: blocks_done,
            bytes,
            bytes_done,
            blocks,
            blocks_done,
            objects_over_budget: 0,
            errors: 0,
            first_error: None,
            elapsed_ms,
        }
    }

    /// A finished job that found nothing says so (a mistyped prefix); one that found
    /// something, or is still running, does not.
    #[test]
    fn a_job_that_found_nothing_says_so() {
        let mut empty = job(0, 0, 0, 0, 10);
        assert_eq!(super::nothing_found(&empty), None);
        empty.state = WarmState::Done;
        let note = super::nothing_found(&empty).expect("a note");
        assert!(
            note.starts_with("warm: nothing at the origin under s3://demo/"),
            "{note}"
        );
        let mut found = job(100, 100, 1, 1, 10);
        found.state = WarmState::Done;
        assert_eq!(super::nothing_found(&found), None);
    }

    /// The first-hour review's job: 3.8 MiB whose first small object was done after
    /// 3 s of origin latency showed "ETA 750250 s".
    #[test]
    fn the_time_left_follows_the_blocks_done_not_only_the_bytes() {
        let early = super::time_left(&job(3_984_588, 16, 12, 1, 3_000));
        assert_eq!(early, "33 s");
        assert_eq!(super::time_left(&job(3_984_588, 0, 12, 0, 3_000)), "…");
        assert_eq!(
            super::time_left(&job(1 << 40, 1 << 30, 1 << 14, 16, 60_000)),
            "18 h"
        );
        assert_eq!(super::time_left(&job(100, 100, 1, 1, 10)), "0 s");
        assert!(
            super::progress_line(&job(3_984_588, 16, 12, 1, 3_000), false).ends_with("ETA 33 s\n")
        );
    }
}
