//! A byte flipped in a block file behind a running worker is never served (issue 13's
//! corruption suite, bounded): the worker sees that the file changed (its size, times
//! or inode), re-verifies the pages' CRC32C before it serves them, drops the damaged
//! page, refetches it from the origin, and counts it in
//! `talon_worker_corrupt_pages_total`. Each flip comes before the read: a flip between
//! a page's check and its `sendfile` would be served (docs/reliability.md says so).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::FileExt;
use std::path::Path;

use talon_core::{ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, assert_reads_back};

const BLOCK: u64 = 256 << 10;
const PAGE: u64 = 16 << 10;

/// Inverts the byte at `offset` of the file at `path` (a write, as a failing disk or a
/// stray process would make it).
fn flip(path: &Path, offset: u64) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, offset).unwrap();
    file.write_all_at(&[!byte[0]], offset).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_flipped_behind_a_running_worker_are_refetched_and_never_served() {
    let object = GeneratedObject::new("data", "flip.bin", 3 * BLOCK, 77);
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let client = cluster.client().await;
    let id = ObjectId::s3(object.bucket.clone(), object.key.clone()).unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    assert_reads_back(&client, &id, &object, 0..object.size).await;
    let corrupt = || cluster.worker_metric(0, "talon_worker_corrupt_pages_total");
    assert_eq!(corrupt(), 0.0);

    // One page of each block, a different one each time; the whole object is read
    // after each flip, every byte checked.
    for (round, block_offset) in [0, BLOCK, 2 * BLOCK].into_iter().enumerate() {
        let block = cluster.block_id(&id, &version, block_offset);
        let page = 1 + 3 * round as u64;
        flip(&cluster.block_file(0, &block), page * PAGE + 7);
        let gets = cluster.origin_gets();
        assert_reads_back(&client, &id, &object, 0..object.size).await;
        assert_eq!(
            corrupt(),
            (round + 1) as f64,
            "the flipped page was found and dropped"
        );
        assert!(cluster.origin_gets() > gets, "and fetched again");
        // The next read is a hit again: the refetched page is on disk, right.
        let gets = cluster.origin_gets();
        assert_reads_back(&client, &id, &object, 0..object.size).await;
        assert_eq!(cluster.origin_gets(), gets, "the page was mended on disk");
    }
}
