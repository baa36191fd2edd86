//! What spreading hot blocks over their top-k owners does to a cluster's hit ratio
//! and to how evenly its workers are loaded (issue 13, "hot blocks have more than one
//! home").
//!
//! ```text
//! cargo run --release -p talon-worker --example hot_blocks_sim [-- --json]
//! ```
//!
//! A seeded Zipf trace of block reads arrives at a fixed rate through several
//! gateways in turn. Each gateway decides with the cache client's own [`HotBlocks`]
//! (the code the gateway runs) which of a block's rendezvous owners to ask; the
//! workers are S3-FIFO caches of equal-sized blocks placed by the coordinator's own
//! [`RendezvousPlacement`]. A read that misses on the worker asked is one origin
//! read. Reported per row: the cluster's hit ratio, origin reads, the busiest worker's
//! reads against the mean (1.00 is perfectly even), and the busiest worker's share
//! of the hottest block's reads.

use talon_cache_client::HotBlockConfig;
use talon_cache_client::hot_blocks::HotBlocks;
use talon_coordinator_client::placement::{PlacementMember, RendezvousPlacement};
use talon_core::{BlockId, ObjectId, ObjectVersion};
use talon_worker::eviction::{S3Fifo, SimulatedCache, zipf_with_scans};

const WORKERS: usize = 8;
const GATEWAYS: usize = 4;
/// Blocks each worker holds (a 64 GiB disk of 256 MiB blocks).
const CAPACITY: usize = 256;
const UNIVERSE: u64 = 8_000;
const ACCESSES: usize = 400_000;
/// Block reads per second across all gateways (the trace's clock): 1,000 is each
/// gateway reading about 1 GiB/s of 4 MiB blocks; 20,000 is twenty times busier.
const RATES: [usize; 2] = [1_000, 20_000];

struct Row {
    workload: &'static str,
    rate: usize,
    owners: usize,
    reads_per_second: u32,
    hit_ratio: f64,
    origin_reads: u64,
    busiest_over_mean: f64,
    hottest_block_busiest_share: f64,
}

/// The placement key of the simulation's block `n`: the first 256 MiB block of
/// object `sim/b<n>`.
fn key(n: u64) -> [u8; 32] {
    let object = ObjectId::s3("sim", format!("b{n}")).expect("a valid key");
    let version = ObjectVersion::from_etag("\"v1\"").expect("a valid etag");
    BlockId::new(object, version, 0, 256 << 20)
        .expect("a valid block")
        .placement_key()
}

fn run(
    workload: &'static str,
    rate: usize,
    trace: &[u64],
    keys: &[[u8; 32]],
    config: HotBlockConfig,
) -> Row {
    let placement = RendezvousPlacement::new(
        (0..WORKERS)
            .map(|w| PlacementMember::new(format!("w{w}"), format!("10.0.0.{w}:7000"), 1))
            .collect(),
    );
    let index_of = |addr: &str| -> usize {
        addr.rsplit('.')
            .next()
            .and_then(|p| p.split(':').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let gateways: Vec<HotBlocks> = (0..GATEWAYS).map(|_| HotBlocks::new(config)).collect();
    let mut workers: Vec<SimulatedCache<S3Fifo<u64>>> = (0..WORKERS)
        .map(|_| SimulatedCache::new(S3Fifo::default(), CAPACITY))
        .collect();
    let mut reads = [0u64; WORKERS];
    let mut hottest = [0u64; WORKERS];
    let mut hits = 0u64;
    for (i, &block) in trace.iter().enumerate() {
        let window = (i / rate) as u64;
        let gateway = &gateways[i % GATEWAYS];
        let key = &keys[block as usize];
        let homes = config.owners.max(1);
        let ranked = placement.locate_top_k_key(key, homes);
        let turn = gateway.note_read_in(key, 1, 1, window).unwrap_or(0);
        let asked = index_of(&ranked[turn % ranked.len()].addr);
        reads[asked] += 1;
        if block == 0 {
            hottest[asked] += 1;
        }
        if workers[asked].access(block) {
            hits += 1;
        }
    }
    let mean = ACCESSES as f64 / WORKERS as f64;
    let busiest = reads.iter().copied().max().unwrap_or(0) as f64;
    let hottest_total: u64 = hottest.iter().sum();
    Row {
        workload,
        rate,
        owners: config.owners,
        reads_per_second: config.reads_per_second,
        hit_ratio: hits as f64 / trace.len() as f64,
        origin_reads: trace.len() as u64 - hits,
        busiest_over_mean: busiest / mean,
        hottest_block_busiest_share: hottest.iter().copied().max().unwrap_or(0) as f64
            / hottest_total.max(1) as f64,
    }
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let keys: Vec<[u8; 32]> = (0..UNIVERSE).map(key).collect();
    let configs = [
        HotBlockConfig::OFF,
        HotBlockConfig::TWO_OWNERS,
        HotBlockConfig {
            owners: 3,
            reads_per_second: 8,
        },
    ];
    let mut rows = Vec::new();
    for (workload, exponent) in [("zipf 0.8", 0.8), ("zipf 1.0", 1.0), ("zipf 1.2", 1.2)] {
        let trace = zipf_with_scans(42, ACCESSES, UNIVERSE, exponent, 0, 0);
        for rate in RATES {
            for config in configs {
                rows.push(run(workload, rate, &trace, &keys, config));
            }
        }
    }
    if json {
        for r in &rows {
            println!(
                "{{\"workload\":\"{}\",\"rate\":{},\"owners\":{},\"reads_per_second\":{},\"hit_ratio\":{:.4},\"origin_reads\":{},\"busiest_over_mean\":{:.3},\"hottest_block_busiest_share\":{:.3}}}",
                r.workload,
                r.rate,
                r.owners,
                r.reads_per_second,
                r.hit_ratio,
                r.origin_reads,
                r.busiest_over_mean,
                r.hottest_block_busiest_share
            );
        }
        return;
    }
    println!(
        "{WORKERS} workers of {CAPACITY} blocks (S3-FIFO), {GATEWAYS} gateways, {UNIVERSE} blocks, \
         {ACCESSES} reads, seed 42\n"
    );
    println!(
        "| workload | reads/s (all gateways) | homes (k) | hot past (reads/s per gateway) | hit ratio | origin reads | busiest worker / mean | busiest worker's share of the hottest block |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let threshold = if r.owners > 1 {
            r.reads_per_second.to_string()
        } else {
            "off".into()
        };
        println!(
            "| {} | {} | {} | {} | {:.1}% | {} | {:.2} | {:.0}% |",
            r.workload,
            r.rate,
            r.owners,
            threshold,
            r.hit_ratio * 100.0,
            r.origin_reads,
            r.busiest_over_mean,
            r.hottest_block_busiest_share * 100.0
        );
    }
}
