//! A hot block has more than one home (issue 13): a block a client reads faster than
//! its threshold is read from its first two owners in turn, each filling it once from
//! the origin; a block read at an ordinary rate stays on its owner; with spreading off
//! every read goes to the owner. Real workers, a real origin stub, bytes checked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use talon_cache_client::{CacheClient, HotBlockConfig};
use talon_core::{ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, read_whole_checked, wait_for};

const BLOCK: u64 = 256 << 10;
const READS: usize = 30;
/// Answers a worker has finished (sent, or handed over on its local socket).
const ANSWERS: &str = "talon_worker_read_duration_seconds_count";

fn hot() -> GeneratedObject {
    GeneratedObject::new("data", "hot.bin", BLOCK, 31)
}

fn cold() -> GeneratedObject {
    GeneratedObject::new("data", "cold.bin", BLOCK, 32)
}

fn id_of(object: &GeneratedObject) -> ObjectId {
    ObjectId::s3(object.bucket.clone(), object.key.clone()).unwrap()
}

fn version_of(object: &GeneratedObject) -> ObjectVersion {
    ObjectVersion::from_etag(&object.etag()).unwrap()
}

async fn read_checked(client: &CacheClient, object: &GeneratedObject) {
    read_whole_checked(client, object, &object.key).await;
}

/// Each worker's finished answers, once they add up to `total` (a worker counts an
/// answer after the reader may already have it).
async fn answers(cluster: &Cluster, total: f64) -> Vec<f64> {
    wait_for(
        "the workers to count every answer",
        Duration::from_secs(10),
        || async {
            let counts: Vec<f64> = (0..3).map(|i| cluster.worker_metric(i, ANSWERS)).collect();
            (counts.iter().sum::<f64>() >= total).then_some(counts)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_block_is_read_from_its_first_two_owners_and_a_cold_one_from_its_owner() {
    let cluster = Cluster::start(ClusterConfig {
        workers: 3,
        generated: vec![hot(), cold()],
        ..ClusterConfig::default()
    })
    .await;
    let placement = cluster.placement().await;
    let owners = |o: &GeneratedObject| -> Vec<usize> {
        let block = cluster.block_id(&id_of(o), &version_of(o), 0);
        placement
            .locate_top_k(&block, 3)
            .iter()
            .map(|m| cluster.worker_index(&m.id))
            .collect()
    };
    let (hot_owners, cold_owners) = (owners(&hot()), owners(&cold()));

    // Spreading off: every read of the hot block goes to its owner, one origin fill.
    let plain = cluster
        .client_with(|c| c.hot_blocks = HotBlockConfig::OFF)
        .await;
    cluster.sync_client(&plain).await;
    for _ in 0..READS {
        read_checked(&plain, &hot()).await;
    }
    let before = answers(&cluster, READS as f64).await;
    assert_eq!(before[hot_owners[0]], READS as f64, "{before:?}");
    assert_eq!(cluster.origin_gets(), 1);
    assert_eq!(plain.hot_reads_spread(), 0);

    // Spreading over two owners: past the threshold the reads take turns.
    let spreading = cluster
        .client_with(|c| {
            c.hot_blocks = HotBlockConfig {
                owners: 2,
                reads_per_second: 2,
            }
        })
        .await;
    cluster.sync_client(&spreading).await;
    read_checked(&spreading, &cold()).await;
    let after_cold = answers(&cluster, (READS + 1) as f64).await;
    assert_eq!(
        after_cold[cold_owners[0]] - before[cold_owners[0]],
        1.0,
        "a block read once stays on its owner: {after_cold:?}"
    );
    for _ in 0..READS {
        read_checked(&spreading, &hot()).await;
    }
    let after = answers(&cluster, (2 * READS + 1) as f64).await;
    let served: Vec<f64> = hot_owners
        .iter()
        .map(|&w| after[w] - after_cold[w])
        .collect();
    assert_eq!(served[0] + served[1], READS as f64, "{served:?}");
    assert_eq!(served[2], 0.0, "the third owner is not a home: {served:?}");
    assert!(
        served[1] >= 10.0 && served[0] >= 10.0,
        "both homes serve the hot block: {served:?}"
    );
    assert_eq!(spreading.hot_reads_spread(), served[1] as u64);
    // The second home filled the block once; the cold block was filled once.
    assert_eq!(cluster.origin_gets(), 3);
}

/// With zones, a hot block's homes span zones and a reader asks the one in its own
/// zone: a reader in the zone of the block's second home reads it there, not from the
/// owner, once the block is hot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_reads_a_hot_block_from_its_home_in_the_readers_zone() {
    let cluster = Cluster::start(ClusterConfig {
        workers: 3,
        generated: vec![hot()],
        zones: vec!["a".into(), "b".into(), "c".into()],
        ..ClusterConfig::default()
    })
    .await;
    let placement = cluster.placement().await;
    let block = cluster.block_id(&id_of(&hot()), &version_of(&hot()), 0);
    let homes = talon_coordinator_client::zones::homes(&placement, &block.placement_key(), 2);
    assert_ne!(
        homes[0].zone, homes[1].zone,
        "the two homes are in two zones"
    );
    let (owner, near) = (
        cluster.worker_index(&homes[0].id),
        cluster.worker_index(&homes[1].id),
    );
    let reader_zone = homes[1].zone.clone();
    let reader = cluster
        .client_with(|c| {
            c.zone = reader_zone;
            c.hot_blocks = HotBlockConfig {
                owners: 2,
                reads_per_second: 2,
            };
        })
        .await;
    cluster.sync_client(&reader).await;
    for _ in 0..READS {
        read_checked(&reader, &hot()).await;
    }
    let served = answers(&cluster, READS as f64).await;
    // The reads before the block was hot went to its owner; every one after, to the
    // home in the reader's zone.
    assert!(served[owner] <= 3.0, "{served:?}");
    assert_eq!(served[owner] + served[near], READS as f64, "{served:?}");
    assert_eq!(reader.hot_reads_spread(), served[near] as u64);
}
