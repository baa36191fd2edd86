//! Micro-benchmarks of the hot, per-request work in `talon-core`: key path
//! parsing, bitmap queries, page math and frame encode/decode.
//!
//! `cargo bench -p talon-core --bench core_benches` to measure;
//! append `-- --test` for a quick smoke run.

#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use talon_core::wire::{FrameDecoder, FrameHeader, HEADER_LEN, ReadRangeRequest};
use talon_core::{BlockGeometry, BlockId, Message, ObjectId, ObjectVersion, PresentBitmap};

fn identity(c: &mut Criterion) {
    let key = "s3/my-bucket/warehouse/events/date=2024-05-01/part-00017.parquet";
    c.bench_function("identity/from_key_path", |b| {
        b.iter(|| ObjectId::from_key_path(black_box(key)).unwrap())
    });
    let id = ObjectId::from_key_path(key).unwrap();
    c.bench_function("identity/key_path", |b| {
        b.iter(|| black_box(&id).key_path())
    });
    let block = BlockId::new(
        id,
        ObjectVersion::new("\"9b2cf535f2\"").unwrap(),
        1 << 30,
        256 << 20,
    )
    .unwrap();
    c.bench_function("identity/placement_key", |b| {
        b.iter(|| black_box(&block).placement_key())
    });
    // The worker's block index is keyed by the digest; the hex name is made only for
    // file names (what a hit looked up before 2026-12-05).
    c.bench_function("identity/storage_key", |b| {
        b.iter(|| black_box(&block).storage_key())
    });
    c.bench_function("identity/storage_name", |b| {
        b.iter(|| black_box(&block).storage_name())
    });
}

fn bitmap(c: &mut Criterion) {
    let mut half = PresentBitmap::new(1024).unwrap();
    for page in (0..1024).filter(|p| (p / 16) % 2 == 0) {
        half.set(page).unwrap();
    }
    let mut full = PresentBitmap::new(1024).unwrap();
    full.set_range(0..1024).unwrap();
    c.bench_function("bitmap/set_1024", |b| {
        b.iter(|| {
            let mut bm = PresentBitmap::new(1024).unwrap();
            for page in 0..1024 {
                bm.set(black_box(page)).unwrap();
            }
            bm
        })
    });
    c.bench_function("bitmap/all_present_1024", |b| {
        b.iter(|| black_box(&full).all_present(black_box(0..1024)).unwrap())
    });
    c.bench_function("bitmap/first_absent_run_walk", |b| {
        b.iter(|| {
            let mut from = 0;
            let mut runs = 0;
            while let Some(run) = black_box(&half).first_absent_run(from) {
                from = run.end;
                runs += 1;
            }
            runs
        })
    });
    c.bench_function("bitmap/to_bytes_1024", |b| {
        b.iter(|| black_box(&half).to_bytes())
    });
    let bytes = half.to_bytes();
    c.bench_function("bitmap/from_bytes_1024", |b| {
        b.iter(|| PresentBitmap::from_bytes(1024, black_box(&bytes)).unwrap())
    });
}

fn geometry(c: &mut Criterion) {
    let geo = BlockGeometry::default();
    let size = (5u64 << 30) + 12_345;
    c.bench_function("block/page_count", |b| {
        b.iter(|| geo.page_count(black_box(5 << 30), black_box(size)).unwrap())
    });
    c.bench_function("block/split_range_3_blocks", |b| {
        b.iter(|| {
            geo.split_range(black_box((1 << 28) - 100..(3 << 28) + 100), size)
                .unwrap()
                .count()
        })
    });
}

fn wire(c: &mut Criterion) {
    let header = talon_core::wire::encode_read_range_reply_header(7, 65536, false).unwrap();
    c.bench_function("wire/header_decode", |b| {
        b.iter(|| FrameHeader::decode(black_box(&header)).unwrap())
    });
    let decoded = FrameHeader::decode(&header).unwrap();
    c.bench_function("wire/header_encode", |b| {
        b.iter(|| black_box(&decoded).encode())
    });

    let block = BlockId::new(
        ObjectId::s3(
            "my-bucket",
            "warehouse/events/date=2024-05-01/part-00017.parquet",
        )
        .unwrap(),
        ObjectVersion::new("\"9b2cf535f27731c974343645a3985328\"").unwrap(),
        1 << 30,
        256 << 20,
    )
    .unwrap();
    let request = Message::ReadRange(ReadRangeRequest {
        block,
        object_size: 5 << 30,
        offset: 1 << 20,
        len: 65536,
    });
    let mut buf = Vec::with_capacity(256);
    c.bench_function("wire/read_range_encode", |b| {
        b.iter(|| {
            buf.clear();
            black_box(&request)
                .encode_into(7, talon_core::wire::Flags::NONE, &mut buf)
                .unwrap();
        })
    });
    let frame = request.encode(7).unwrap();
    c.bench_function("wire/read_range_decode", |b| {
        b.iter(|| {
            let bytes = black_box(&frame);
            let header = FrameHeader::decode(bytes[..HEADER_LEN].try_into().unwrap()).unwrap();
            Message::decode(&header, &bytes[HEADER_LEN..]).unwrap()
        })
    });
    c.bench_function("wire/read_range_frame_decoder", |b| {
        b.iter(|| {
            let mut decoder = FrameDecoder::new();
            let mut input = &black_box(&frame)[..];
            decoder.decode(&mut input).unwrap()
        })
    });
}

criterion_group!(benches, identity, bitmap, geometry, wire);
criterion_main!(benches);
