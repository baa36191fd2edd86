//! Placement lookups: `locate` and `locate_top_k(k = 3)` over 8, 64 and 256 workers.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sha2::{Digest, Sha256};
use talon_coordinator_client::placement::{PlacementMember, RendezvousPlacement};
use talon_core::{BlockId, ObjectId, ObjectVersion};

const SIZES: [usize; 3] = [8, 64, 256];

fn placement(n: usize) -> RendezvousPlacement {
    RendezvousPlacement::new(
        (0..n)
            .map(|i| {
                PlacementMember::new(
                    format!("worker-{i:03}"),
                    format!("10.0.{}.{}:7101", i / 250, i % 250 + 1),
                    1 + (i % 4) as u32,
                )
            })
            .collect(),
    )
}

fn keys() -> Vec<[u8; 32]> {
    (0u64..1024)
        .map(|i| Sha256::digest(i.to_be_bytes()).into())
        .collect()
}

fn bench_locate(c: &mut Criterion) {
    let keys = keys();
    let mut group = c.benchmark_group("placement/locate");
    group.throughput(Throughput::Elements(1));
    for n in SIZES {
        let p = placement(n);
        let mut i = 0usize;
        group.bench_with_input(BenchmarkId::from_parameter(n), &p, |b, p| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                black_box(p.locate_key(black_box(&keys[i])))
            })
        });
    }
    group.finish();
}

fn bench_locate_top_k(c: &mut Criterion) {
    let keys = keys();
    let mut group = c.benchmark_group("placement/locate_top_k_3");
    group.throughput(Throughput::Elements(1));
    for n in SIZES {
        let p = placement(n);
        let mut i = 0usize;
        group.bench_with_input(BenchmarkId::from_parameter(n), &p, |b, p| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                black_box(p.locate_top_k_key(black_box(&keys[i]), 3))
            })
        });
    }
    group.finish();
}

/// The whole lookup a reader does per block: placement key, then owner.
fn bench_locate_block(c: &mut Criterion) {
    let p = placement(64);
    let block = BlockId::new(
        ObjectId::s3("bucket", "data/part-0001.parquet").unwrap_or_else(|e| panic!("{e}")),
        ObjectVersion::new("\"etag\"").unwrap_or_else(|e| panic!("{e}")),
        256 << 20,
        256 << 20,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    c.bench_function("placement/locate_block/64", |b| {
        b.iter(|| black_box(p.locate(black_box(&block))))
    });
}

criterion_group!(
    benches,
    bench_locate,
    bench_locate_top_k,
    bench_locate_block
);
criterion_main!(benches);
