//! Bytes of heap the worker's in-memory block index takes per cached block and per page,
//! measured exactly with a counting global allocator.
//!
//! ```text
//! cargo run --release -p talon-worker --example index_footprint -- [--blocks 10000] [--dir DIR] [--metadata-objects N] [--json]
//! ```
//!
//! Prints a table, or with `--json` one JSON object (what `scripts/memory_footprint.py`
//! reads). `--dir` is where the scratch stores go (default: the temporary folder; a
//! tmpfs such as /dev/shm makes the fills' fsyncs free). Each block holds the paths of
//! its two files, so the folder's path length is part of its bytes; it is reported.
//!
//! Every figure is the change in live heap bytes across an operation done through the
//! public API of [`BlockStore`], divided by how many times it was done: `N` blocks created
//! with `get_or_create` (each its own object: bucket `bench`, a key of 40 bytes unless
//! stated, a quoted 32-hex-digit ETag as the version), then pages filled the way the
//! worker's miss path fills them (`plan`, `reserve`, `commit_fill`, `finish_fill`, `plan`,
//! `verify`). Figures include the hash tables' and queues' spare capacity at that `N`
//! (they grow by doubling), so they move by tens of bytes with `N`.
//!
//! "requested" counts the bytes asked of the allocator; "malloc" adds glibc's per-chunk
//! rounding (request + 8 rounded up to 16, at least 32), which is what the process's
//! memory actually grows by. Kernel memory is not counted: each cached block also holds
//! one open file descriptor (its `.blk` file).
//!
//! Page geometry: 1 MiB pages (the worker's default); blocks of 1, 64, 256 and 1024 pages
//! (1 MiB to 1 GiB). Block files are created empty (sparse), and the fill measurements use
//! a separate store of 4 KiB pages, so the run writes only a few MiB. `N` blocks keep `N`
//! files open: raise `ulimit -n` above `N` first.
//!
//! The coordinator's per-worker tables are measured too: its membership table (one
//! `register` per worker) and the placement table every gateway and cache client holds.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use talon_coordinator::membership::Membership;
use talon_coordinator_client::api::RegisterRequest;
use talon_coordinator_client::placement::{PlacementMember, RendezvousPlacement};
use talon_core::{BlockId, ObjectId, ObjectVersion};
use talon_worker::block_store::{Block, BlockStore, FillPlan};

/// `System`, counting the bytes and chunks alive.
struct Counting;

static REQUESTED: AtomicI64 = AtomicI64::new(0);
static CHUNKS: AtomicI64 = AtomicI64::new(0);
static ALLOCATIONS: AtomicI64 = AtomicI64::new(0);

/// glibc's chunk for a request on 64-bit Linux: the request plus the 8-byte size
/// header, rounded up to 16, at least 32 bytes.
fn chunk(size: usize) -> i64 {
    ((size + 8).div_ceil(16) * 16).max(32) as i64
}

fn count(size: usize, sign: i64) {
    REQUESTED.fetch_add(sign * size as i64, Ordering::Relaxed);
    CHUNKS.fetch_add(sign * chunk(size), Ordering::Relaxed);
    ALLOCATIONS.fetch_add(sign, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to `System`; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we pass on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size(), 1);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size(), 1);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator (so from `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        count(layout.size(), -1);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; `new_size` is checked by the caller.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(layout.size(), -1);
            count(new_size, 1);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Live heap at one moment.
#[derive(Clone, Copy)]
struct Live {
    requested: i64,
    chunks: i64,
    allocations: i64,
}

fn live() -> Live {
    Live {
        requested: REQUESTED.load(Ordering::Relaxed),
        chunks: CHUNKS.load(Ordering::Relaxed),
        allocations: ALLOCATIONS.load(Ordering::Relaxed),
    }
}

/// Growth between two moments, per item.
#[derive(Clone, Copy)]
struct PerItem {
    requested: f64,
    malloc: f64,
    allocations: f64,
}

impl PerItem {
    fn between(before: Live, after: Live, items: usize) -> PerItem {
        let n = items.max(1) as f64;
        PerItem {
            requested: (after.requested - before.requested) as f64 / n,
            malloc: (after.chunks - before.chunks) as f64 / n,
            allocations: (after.allocations - before.allocations) as f64 / n,
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "requested": round2(self.requested),
            "malloc": round2(self.malloc),
            "allocations": round2(self.allocations),
        })
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

const MIB: u64 = 1 << 20;
const BUCKET: &str = "bench";
/// An S3 ETag as S3 returns it: an MD5 in hex, with its quotes (34 bytes).
const ETAG: &str = "\"9b2cf535f27731c974343645a3985328\"";

/// An object key of exactly `len` bytes (at least 20), distinct for every `i`.
fn key(i: usize, len: usize) -> String {
    let stem = format!("part-{i:010}.bin");
    let dirs = len.saturating_sub(stem.len() + 1).max(1);
    format!("{}/{stem}", "d".repeat(dirs))
}

fn block_id(i: usize, key_len: usize, block_size: u64) -> Result<BlockId> {
    Ok(BlockId::new(
        ObjectId::s3(BUCKET, key(i, key_len))?,
        ObjectVersion::new(ETAG)?,
        0,
        block_size,
    )?)
}

/// Heap per block for `n` blocks of `pages` pages of 1 MiB, created empty.
fn per_block(base: &Path, n: usize, pages: u32, key_len: usize) -> Result<PerItem> {
    let dir = tempfile::tempdir_in(base)?;
    let block_size = u64::from(pages) * MIB;
    let store = Arc::new(BlockStore::open(dir.path(), MIB, 1 << 50)?);
    // The ids are built first so that only the store's own copies are counted.
    let ids = (0..n)
        .map(|i| block_id(i, key_len, block_size))
        .collect::<Result<Vec<_>>>()?;
    let before = live();
    for id in &ids {
        store
            .get_or_create(id, block_size)
            .context("creating a block (is `ulimit -n` above the block count?)")?;
    }
    let after = live();
    if store.stats().blocks != n as u64 {
        bail!(
            "expected {n} blocks, the store holds {}",
            store.stats().blocks
        );
    }
    Ok(PerItem::between(before, after, n))
}

/// Fills `pages` of `block` as the worker's miss path does, then serves them once.
fn fill(store: &Arc<BlockStore>, block: &Block, pages: std::ops::Range<u32>) -> Result<()> {
    let FillPlan::Fill { pages, done } = block.plan(pages.clone(), pages.end, u32::MAX) else {
        bail!("pages {pages:?} were expected to be absent");
    };
    let Some(reservation) = store.reserve(block, pages.clone()) else {
        bail!("no room for a fill");
    };
    let span = block.page_bytes(pages.start).start..block.page_bytes(pages.end - 1).end;
    let data = vec![0x5a_u8; (span.end - span.start) as usize];
    store.commit_fill(block, pages.clone(), &data, reservation)?;
    block.finish_fill(pages.clone(), done, Ok(()));
    if !matches!(
        block.plan(pages.clone(), pages.end, u32::MAX),
        FillPlan::Ready
    ) {
        bail!("pages {pages:?} not present after their fill");
    }
    if !store.verify(block, pages)? {
        bail!("a filled page failed verification");
    }
    Ok(())
}

/// What filling pages adds: 4 KiB pages, `n` blocks of 64 pages; first page 0 of each
/// block, then pages 1..8 of each.
fn per_fill(base: &Path, n: usize) -> Result<(PerItem, PerItem)> {
    let dir = tempfile::tempdir_in(base)?;
    let page = 4096;
    let block_size = 64 * page;
    let store = Arc::new(BlockStore::open(dir.path(), page, 1 << 40)?);
    let blocks = (0..n)
        .map(|i| Ok(store.get_or_create(&block_id(i, 40, block_size)?, block_size)?))
        .collect::<Result<Vec<_>>>()?;
    let before = live();
    for block in &blocks {
        fill(&store, block, 0..1)?;
    }
    let first = live();
    for block in &blocks {
        fill(&store, block, 1..8)?;
    }
    let more = live();
    Ok((
        PerItem::between(before, first, n),
        PerItem::between(first, more, n * 7),
    ))
}

/// What the eviction policy keeps per cached block once evictions have filled its ghost
/// queue: a store with room for `n` one-page blocks (4 KiB pages) takes `3 n` more.
fn per_block_ghosts(base: &Path, n: usize) -> Result<PerItem> {
    let dir = tempfile::tempdir_in(base)?;
    let page = 4096;
    let probe = BlockStore::open(dir.path(), page, 1 << 40)?;
    // What one filled one-page block counts against the budget.
    let unit = probe.block_overhead(1) / 3;
    let cost = page.div_ceil(unit) * unit + probe.block_overhead(1);
    drop(probe);
    let store = Arc::new(BlockStore::open(dir.path(), page, cost * n as u64)?);
    let add = |i: usize| -> Result<()> {
        let block = store.get_or_create(&block_id(i, 40, page)?, page)?;
        fill(&store, &block, 0..1)
    };
    for i in 0..n {
        add(i)?;
    }
    if store.stats().evictions != 0 {
        bail!("the store evicted before it was full; the cost estimate is off");
    }
    let full = live();
    for i in n..4 * n {
        add(i)?;
    }
    let churned = live();
    let stats = store.stats();
    if stats.blocks != n as u64 || stats.evictions != 3 * n as u64 {
        bail!(
            "expected {n} blocks and {} evictions, got {} and {}",
            3 * n,
            stats.blocks,
            stats.evictions
        );
    }
    Ok(PerItem::between(full, churned, n))
}

/// The coordinator's membership table and a gateway's placement table, per worker.
fn per_worker(m: usize) -> (PerItem, PerItem) {
    let membership = Membership::new(Duration::from_secs(3));
    let now = Instant::now();
    let requests: Vec<RegisterRequest> = (0..m)
        .map(|i| RegisterRequest {
            id: format!("worker-{i:04}"),
            addr: format!("10.0.{}.{}:7101", i / 250, i % 250 + 1),
            weight: 1,
            zone: "us-east-1a".into(),
            capacity_bytes: 64 << 30,
            instance: format!("{i:016x}"),
            data_plane: String::new(),
            placement_version: talon_coordinator_client::placement::PLACEMENT_VERSION,
            page_size: 0,
            local: Default::default(),
        })
        .collect();
    let before = live();
    for req in &requests {
        let _ = membership.register(req, now);
    }
    let after = live();
    let table = PerItem::between(before, after, m);
    let before = live();
    let members: Vec<PlacementMember> = requests
        .iter()
        .map(RegisterRequest::placement_member)
        .collect();
    let placement = RendezvousPlacement::new(members);
    let after = live();
    let placed = PerItem::between(before, after, placement.len());
    (table, placed)
}

/// Heap per object of the one metadata cache (`talon-metadata-cache`), as the worker
/// and the gateway fill it (the origin's metadata kept as a `CompactInfo`): `objects` S3 objects with keys of 63 bytes in bucket `bench`, a quoted
/// 32-hex-digit ETag, a time and `application/octet-stream`, no other headers. The
/// table's own capacity is sized for `objects`, so its spare room is in the figure.
fn per_metadata_entry(objects: usize) -> (PerItem, PerItem) {
    use talon_metadata_cache::{Limits, MetadataCache};
    use talon_protocols::origin::{CompactInfo, ObjectInfo};
    // A bound 5% over the objects: quick_cache's is approximate (per shard).
    let limits = Limits {
        max_entries: objects + objects / 20,
        max_bytes: objects as u64 * 4096,
        max_missing: 1,
    };
    let info = |i: usize| ObjectInfo {
        size: 100_000 + i as u64,
        etag: format!("\"{:032x}\"", i as u128 * 7_919),
        last_modified: Some(std::time::SystemTime::UNIX_EPOCH),
        content_type: Some("application/octet-stream".into()),
        headers: Default::default(),
    };
    let key = |i: usize| {
        ObjectId::s3(
            BUCKET,
            format!("imagenet/train/n{:08}/sample-{i:026}.jpeg", i % 1000),
        )
        .expect("a valid key")
    };
    let now = Instant::now();
    let before = live();
    // Both keep ObjectInfo compact (CompactInfo) since 2026-12-04; the gateway's table
    // holds the same type, measured apart so that a change to one shows.
    let worker: MetadataCache<ObjectId, CompactInfo> =
        MetadataCache::new(limits, |id, info| id.held_bytes() + info.held_bytes());
    for i in 0..objects {
        worker.insert(key(i), now, CompactInfo::from_info(&info(i)));
    }
    let after = live();
    let in_worker = PerItem::between(before, after, objects);
    assert_eq!(worker.stats().entries as usize, objects, "nothing evicted");
    drop(worker);
    let before = live();
    let gateway: MetadataCache<ObjectId, CompactInfo> =
        MetadataCache::new(limits, |id, info| id.held_bytes() + info.held_bytes());
    for i in 0..objects {
        gateway.insert(key(i), now, CompactInfo::from_info(&info(i)));
    }
    let after = live();
    (in_worker, PerItem::between(before, after, objects))
}

/// The value after `flag`, if given.
fn flag(args: &[String], flag: &str) -> Option<String> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).cloned()
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let n = match flag(&args, "--blocks") {
        Some(v) => v.parse::<usize>().context("--blocks needs a number")?,
        None => 10_000,
    };
    let base = flag(&args, "--dir").map_or_else(std::env::temp_dir, PathBuf::from);
    let fills = (n / 20).clamp(10, 500);
    let ghosts = (n / 10).clamp(10, 1_000);
    let workers = 1_000;
    // Each block holds the paths of its two files; their length is part of its bytes.
    let block_path_len = tempfile::tempdir_in(&base)?
        .path()
        .join("blocks")
        .join(format!("{}.blk", block_id(0, 40, MIB)?.storage_name()))
        .as_os_str()
        .len();

    let geometries = [1_u32, 64, 256, 1024];
    let mut blocks = Vec::new();
    for &pages in &geometries {
        blocks.push((pages, per_block(&base, n, pages, 40)?));
    }
    let long_key = per_block(&base, n, 1, 200)?;
    let (first_fill, more_fills) = per_fill(&base, fills)?;
    let ghost = per_block_ghosts(&base, ghosts)?;
    let (member, placement) = per_worker(workers);
    let metadata_objects = match flag(&args, "--metadata-objects") {
        Some(v) => v
            .parse::<usize>()
            .context("--metadata-objects needs a number")?,
        None => 1_000_000,
    };
    let (meta_worker, meta_gateway) = per_metadata_entry(metadata_objects);

    let one = blocks[0].1;
    let big = blocks[geometries.len() - 1].1;
    let spread = f64::from(geometries[geometries.len() - 1] - geometries[0]);
    let slope = |a: f64, b: f64, d: f64| (b - a) / d;
    let per_page = PerItem {
        requested: slope(one.requested, big.requested, spread),
        malloc: slope(one.malloc, big.malloc, spread),
        allocations: slope(one.allocations, big.allocations, spread),
    };
    let per_key_byte = PerItem {
        requested: slope(one.requested, long_key.requested, 160.0),
        malloc: slope(one.malloc, long_key.malloc, 160.0),
        allocations: slope(one.allocations, long_key.allocations, 160.0),
    };

    if json {
        let by_pages: serde_json::Map<String, serde_json::Value> = blocks
            .iter()
            .map(|(pages, b)| (pages.to_string(), b.json()))
            .collect();
        let out = serde_json::json!({
            "blocks": n,
            "page_size": MIB,
            "key_len": 40,
            "version_len": ETAG.len(),
            "bucket_len": BUCKET.len(),
            "block_path_len": block_path_len,
            "per_block_by_pages": by_pages,
            "per_page": per_page.json(),
            "per_key_byte": per_key_byte.json(),
            "fill_blocks": fills,
            "first_fill_per_block": first_fill.json(),
            "later_fill_per_page": more_fills.json(),
            "ghost_blocks": ghosts,
            "ghosts_per_cached_block": ghost.json(),
            "workers": workers,
            "coordinator_per_worker": member.json(),
            "placement_per_worker": placement.json(),
            "metadata_objects": metadata_objects,
            "metadata_per_object_worker": meta_worker.json(),
            "metadata_per_object_gateway": meta_gateway.json(),
        });
        println!("{out}");
        return Ok(());
    }
    println!(
        "{n} blocks per measurement; 1 MiB pages; bucket of {} bytes, key of 40, version of {}; \
         block file paths of {block_path_len} bytes\n",
        BUCKET.len(),
        ETAG.len()
    );
    println!("| what | requested B | malloc B | allocations |");
    println!("|---|---:|---:|---:|");
    let row = |what: &str, p: &PerItem| {
        println!(
            "| {what} | {:.1} | {:.1} | {:.2} |",
            p.requested, p.malloc, p.allocations
        );
    };
    for (pages, b) in &blocks {
        row(&format!("per block of {pages} page(s) ({pages} MiB)"), b);
    }
    row("per page (slope, 1 to 1024 pages)", &per_page);
    row("per extra byte of key (40 to 200 bytes)", &per_key_byte);
    row(
        &format!("first fill of a block, per block ({fills} blocks, 4 KiB pages)"),
        &first_fill,
    );
    row("later fills, per page filled", &more_fills);
    row(
        &format!("ghost queue once full, per cached block ({ghosts} blocks)"),
        &ghost,
    );
    row(
        &format!("coordinator membership, per worker ({workers} workers)"),
        &member,
    );
    row(
        "placement table (gateway, cache client), per worker",
        &placement,
    );
    row(
        &format!("metadata cache, per object, worker ({metadata_objects} objects, 64-byte keys)"),
        &meta_worker,
    );
    row("metadata cache, per object, gateway", &meta_gateway);
    Ok(())
}
