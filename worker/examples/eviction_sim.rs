//! Hit ratios of the worker's eviction policies on synthetic block-access traces.
//!
//! ```text
//! cargo run --release -p talon-worker --example eviction_sim
//! ```
//!
//! Each workload is a seeded trace of block ids: Zipf-distributed accesses over a
//! universe of blocks, optionally interrupted by one-pass scans over blocks never seen
//! again (an epoch over a dataset larger than the cache). The cache holds a fixed number
//! of equal-sized blocks, as a worker with 256 MiB blocks and a 64 GiB budget holds 256.
//! Prints a table and, with `--json`, one JSON object per row.

use talon_worker::eviction::{Lru, S3Fifo, simulate, zipf_with_scans};

struct Workload {
    name: &'static str,
    universe: u64,
    exponent: f64,
    scan_every: usize,
    scan_len: u64,
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let workloads = [
        Workload {
            name: "zipf 0.8, no scans",
            universe: 4_000,
            exponent: 0.8,
            scan_every: 0,
            scan_len: 0,
        },
        Workload {
            name: "zipf 1.0, no scans",
            universe: 4_000,
            exponent: 1.0,
            scan_every: 0,
            scan_len: 0,
        },
        Workload {
            name: "zipf 1.0 + scans of 1x cache",
            universe: 4_000,
            exponent: 1.0,
            scan_every: 2_000,
            scan_len: 256,
        },
        Workload {
            name: "zipf 1.0 + scans of 2x cache",
            universe: 4_000,
            exponent: 1.0,
            scan_every: 2_000,
            scan_len: 512,
        },
        Workload {
            name: "zipf 0.8 + scans of 4x cache",
            universe: 4_000,
            exponent: 0.8,
            scan_every: 4_000,
            scan_len: 1_024,
        },
    ];
    let capacity = 256;
    let len = 200_000;
    if !json {
        println!("cache of {capacity} blocks, {len} accesses per trace, seed 42\n");
        println!("| workload | LRU hit ratio | S3-FIFO hit ratio | difference |");
        println!("|---|---|---|---|");
    }
    for w in &workloads {
        let trace = zipf_with_scans(42, len, w.universe, w.exponent, w.scan_every, w.scan_len);
        let lru = simulate(&mut Lru::default(), &trace, capacity);
        let s3 = simulate(&mut S3Fifo::default(), &trace, capacity);
        if json {
            println!(
                "{{\"workload\":\"{}\",\"capacity_blocks\":{capacity},\"accesses\":{len},\"lru\":{lru:.4},\"s3fifo\":{s3:.4}}}",
                w.name
            );
        } else {
            println!(
                "| {} | {:.1}% | {:.1}% | {:+.1} pts |",
                w.name,
                lru * 100.0,
                s3 * 100.0,
                (s3 - lru) * 100.0
            );
        }
    }
}
