//! `talon warm`: fills a cluster's cache with named objects before a job reads them,
//! with progress on stderr and, at the end, a table for a person or one JSON line for a
//! script (`--json`).
//!
//! Each object is read whole through the cache client, as a reader would: the workers
//! that own its blocks fetch what they lack from the origin, pinned to the version the
//! stat announced, and keep it. The bytes also travel to this process, which drops
//! them; a worker-side warm that keeps them on the workers, and warming a prefix from a
//! listing, are issue 14's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt as _;
use talon_cache_client::{CacheClient, CacheClientConfig};
use talon_core::{BlockGeometry, ObjectId, parse_byte_size};

/// `talon warm`'s flags.
#[derive(Debug, clap::Args)]
pub struct WarmArgs {
    /// Objects to warm, as key paths: s3/BUCKET/KEY or az/ACCOUNT/CONTAINER/BLOB.
    #[arg(required = true)]
    objects: Vec<String>,
    #[command(flatten)]
    target: crate::coordinator_args::CoordinatorArgs,
    /// The cluster's block size: the gateways' --block-size (the blocks warmed are the
    /// blocks they read only if it is the same).
    #[arg(long, env = "TALON_BLOCK_SIZE", default_value = "256MiB", value_parser = parse_byte_size)]
    block_size: u64,
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
    let ids = args
        .objects
        .iter()
        .map(|o| ObjectId::from_key_path(o).with_context(|| format!("'{o}' is not a key path")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let geometry = BlockGeometry::new(args.block_size, args.block_size)
        .context("--block-size must be a power of two")?;
    let config = CacheClientConfig::new(
        args.target.coordinator.clone(),
        geometry,
        args.target.cluster.load()?,
    );
    let client = CacheClient::connect(config)
        .await
        .with_context(|| format!("connecting to the cluster at {}", args.target.coordinator))?;
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
        println!("{line}");
    } else {
        print!("{}", table(&warmed, seconds));
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
