//! What counting a block's reads costs a piece (the hot-block decision runs once per
//! piece of a block with more than one owner): a block read once among many, one read
//! hot, and spreading off.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use talon_cache_client::HotBlockConfig;
use talon_cache_client::hot_blocks::HotBlocks;

const BLOCK: u64 = 4 << 20;
const PIECE: u64 = 2 << 20;

fn keys(n: u64) -> Vec<[u8; 32]> {
    (0..n)
        .map(|i| {
            let mut k = [0u8; 32];
            let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            k[..8].copy_from_slice(&h.to_le_bytes());
            k[8..16].copy_from_slice(&h.rotate_left(29).to_le_bytes());
            k
        })
        .collect()
}

fn bench_note_read(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_blocks/note_read");
    let cold = keys(100_000);
    let counted = HotBlocks::new(HotBlockConfig::TWO_OWNERS);
    let mut i = 0usize;
    group.bench_function("cold_blocks", |b| {
        b.iter(|| {
            i = (i + 1) % cold.len();
            black_box(counted.note_read(black_box(&cold[i]), PIECE, BLOCK))
        })
    });
    let hot = keys(1)[0];
    group.bench_function("one_hot_block", |b| {
        b.iter(|| black_box(counted.note_read(black_box(&hot), PIECE, BLOCK)))
    });
    let off = HotBlocks::new(HotBlockConfig::OFF);
    group.bench_function("off", |b| {
        b.iter(|| black_box(off.note_read(black_box(&hot), PIECE, BLOCK)))
    });
    group.finish();
}

criterion_group!(benches, bench_note_read);
criterion_main!(benches);
