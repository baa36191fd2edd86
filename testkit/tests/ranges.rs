//! Any byte range read through the cache equals the origin's bytes: random ranges that
//! cross page and block boundaries and end on the last, short page; S3 and Azure
//! objects; and an object larger than 4 GiB read near, across and at the end of the
//! 4 GiB mark (never whole).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ops::Range;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use talon_core::{ObjectId, ObjectVersion};
use talon_origin_stub::DEFAULT_AZURE_ACCOUNT;
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, expected, read_through};

const PAGE: u64 = 16 << 10;
const BLOCK: u64 = 256 << 10;
const FOUR_GIB: u64 = 1 << 32;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A deterministic runner: the same cases on every run, shrunk on failure.
fn runner(cases: u32) -> TestRunner {
    TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    )
}

/// Ranges of an object of `size` bytes that start near a page or block boundary, the
/// end of the object or one of `anchors`, with lengths from one byte to three blocks.
fn ranges(size: u64, anchors: Vec<u64>) -> impl Strategy<Value = Range<u64>> {
    let pages = size / PAGE;
    let anchor = prop_oneof![
        (0..=pages).prop_map(|k| k * PAGE),
        (0..=size / BLOCK).prop_map(|k| k * BLOCK),
        Just(size),
        proptest::sample::select(anchors),
    ];
    let len = prop_oneof![
        1..=64u64,
        PAGE - 40..=PAGE + 40,
        1..=2 * PAGE,
        BLOCK - 100..=BLOCK + 100,
        1..=3 * BLOCK,
    ];
    (anchor, -64i64..=64, len).prop_map(move |(anchor, jitter, len)| {
        let start = anchor.saturating_add_signed(jitter).min(size - 1);
        start..(start + len).min(size)
    })
}

/// Reads every range the runner draws through the cache and compares each byte.
fn check_random_ranges(
    rt: &tokio::runtime::Runtime,
    cluster: &Cluster,
    id: &ObjectId,
    object: &GeneratedObject,
    cases: u32,
    anchors: Vec<u64>,
) {
    let client = rt.block_on(cluster.client());
    let stat = rt.block_on(client.stat(id)).unwrap();
    assert_eq!(stat.size, object.size, "{id}: size");
    assert_eq!(
        stat.version.as_str(),
        talon_core::canonical_etag(&object.etag()),
        "{id}: version"
    );
    let ran = std::sync::atomic::AtomicU32::new(0);
    runner(cases)
        .run(&ranges(object.size, anchors), |range| {
            ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let outcome = rt.block_on(read_through(
                &client,
                id,
                &stat.version,
                object.size,
                range.clone(),
            ));
            let want = expected(object, range.clone());
            prop_assert!(
                outcome.error.is_none(),
                "{id} {range:?}: {:?}",
                outcome.error
            );
            prop_assert!(
                outcome.bytes == want,
                "{id} {range:?}: the bytes differ from the origin's"
            );
            Ok(())
        })
        .unwrap();
    assert!(ran.into_inner() >= cases, "every case ran");
}

#[test]
fn random_ranges_of_s3_and_azure_objects_equal_the_origin() {
    // Five blocks, three pages and a short page of 1234 bytes.
    let size = 5 * BLOCK + 3 * PAGE + 1234;
    let s3 = GeneratedObject::new("data", "dir/random.bin", size, 11);
    let azure = GeneratedObject::new("azdata", "nested/path/blob.bin", size - 4321, 12);
    let rt = runtime();
    let cluster = rt.block_on(Cluster::start(ClusterConfig {
        generated: vec![s3.clone(), azure.clone()],
        ..ClusterConfig::default()
    }));
    check_random_ranges(
        &rt,
        &cluster,
        &ObjectId::s3("data", "dir/random.bin").unwrap(),
        &s3,
        32,
        vec![size - 1234, size - 1],
    );
    check_random_ranges(
        &rt,
        &cluster,
        &ObjectId::azure(DEFAULT_AZURE_ACCOUNT, "azdata", "nested/path/blob.bin").unwrap(),
        &azure,
        32,
        vec![azure.size - azure.size % PAGE],
    );
    assert!(cluster.origin_gets() > 0, "the reads reached the origin");
}

#[test]
fn an_object_over_4_gib_reads_right_near_across_and_after_4_gib() {
    // 4 GiB, three more blocks and a last block of 5000 bytes (one short page).
    let size = FOUR_GIB + 3 * BLOCK + 5000;
    let object = GeneratedObject::new("big", "huge.bin", size, 4);
    let rt = runtime();
    let cluster = rt.block_on(Cluster::start(ClusterConfig {
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    }));
    let client = rt.block_on(cluster.client());
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    let fixed = [
        FOUR_GIB - 1..FOUR_GIB,
        FOUR_GIB..FOUR_GIB + 1,
        FOUR_GIB - 100..FOUR_GIB + 100,
        FOUR_GIB - PAGE / 2..FOUR_GIB + BLOCK + PAGE / 2,
        (1 << 31) - 10..(1 << 31) + 10,
        FOUR_GIB + 3 * BLOCK - 10..size,
        size - 5000..size,
        size - 1..size,
        0..100,
    ];
    for backend in [
        ObjectId::s3("big", "huge.bin").unwrap(),
        ObjectId::azure(DEFAULT_AZURE_ACCOUNT, "big", "huge.bin").unwrap(),
    ] {
        let stat = rt.block_on(client.stat(&backend)).unwrap();
        assert_eq!(
            stat.size, size,
            "{backend}: a size over 4 GiB survives the stat"
        );
        assert_eq!(stat.version, version);
        for range in &fixed {
            let got = rt
                .block_on(read_through(
                    &client,
                    &backend,
                    &version,
                    size,
                    range.clone(),
                ))
                .unwrap(&format!("{backend} {range:?}"));
            assert!(
                got == expected(&object, range.clone()),
                "{backend} {range:?}: the bytes differ from the origin's"
            );
        }
    }
    let anchors = vec![
        FOUR_GIB - BLOCK,
        FOUR_GIB - PAGE,
        FOUR_GIB,
        FOUR_GIB + PAGE,
        FOUR_GIB + BLOCK,
        size - 5000,
    ];
    // Random ranges, anchored at the 4 GiB mark and the end (the block and page anchors
    // of `ranges` spread over the whole object).
    check_random_ranges(
        &rt,
        &cluster,
        &ObjectId::s3("big", "huge.bin").unwrap(),
        &object,
        32,
        anchors,
    );
}
