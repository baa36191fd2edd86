//! A worker never holds more bytes on disk than its budget: while a working set three
//! times the cluster's capacity is read (sequentially, and page by scattered page), the
//! space allocated under each worker's `blocks/` folder, as `du` counts it, stays at
//! or under `capacity_bytes`, and the workers evict to make room.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use talon_core::ObjectId;
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, allocated_bytes, assert_reads_back};

const PAGE: u64 = 16 << 10;
const BLOCK: u64 = 256 << 10;
const CAPACITY: u64 = 2 << 20;

/// Samples the allocated bytes of each folder until stopped; returns each folder's
/// largest sample and the number of samples taken.
fn sample(dirs: Vec<PathBuf>, stop: Arc<AtomicBool>) -> JoinHandle<(Vec<u64>, u32)> {
    std::thread::spawn(move || {
        let mut max = vec![0; dirs.len()];
        let mut samples = 0;
        while !stop.load(Ordering::SeqCst) {
            for (m, dir) in max.iter_mut().zip(&dirs) {
                *m = (*m).max(allocated_bytes(dir));
            }
            samples += 1;
            // The sampling period (not a synchronisation: the reads go on meanwhile).
            std::thread::sleep(Duration::from_millis(2));
        }
        (max, samples)
    })
}

/// How the working set is read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pattern {
    /// Block by block, twice over.
    Sequential,
    /// One page in three, then another one in three: block files full of holes.
    Scattered,
}

/// Reads a working set three times the cluster's capacity with `pattern` while sampling the
/// bytes allocated in each worker's folder; checks every byte read, the peak and final
/// allocation against the budget, and that both workers evicted.
async fn read_twice_the_capacity(pattern: Pattern) {
    let workers = 2;
    // Three times the whole cluster's capacity, in two objects (the last one has a
    // short page): even the scattered reads (two pages in three over both rounds) then
    // fill each worker past its budget when placement gives it a quarter of the blocks.
    let objects = [
        GeneratedObject::new("data", "set-a.bin", 24 * BLOCK, 61),
        GeneratedObject::new("data", "set-b.bin", 24 * BLOCK - PAGE / 2, 62),
    ];
    let working_set: u64 = objects.iter().map(|o| o.size).sum();
    assert!(working_set >= 2 * workers as u64 * CAPACITY - PAGE);
    let cluster = Cluster::start(ClusterConfig {
        workers,
        capacity_bytes: CAPACITY,
        generated: objects.to_vec(),
        ..ClusterConfig::default()
    })
    .await;
    let client = cluster.client().await;
    let dirs: Vec<PathBuf> = cluster
        .workers
        .iter()
        .map(|w| w.cache_dir.join("blocks"))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample(dirs.clone(), stop.clone());

    for round in 0..2u64 {
        for object in &objects {
            let id = ObjectId::s3(object.bucket.clone(), object.key.clone()).unwrap();
            match pattern {
                Pattern::Sequential => {
                    for offset in (0..object.size).step_by(BLOCK as usize) {
                        let range = offset..(offset + BLOCK).min(object.size);
                        assert_reads_back(&client, &id, object, range).await;
                    }
                }
                Pattern::Scattered => {
                    let first = round * 2 * PAGE;
                    for offset in (first..object.size).step_by(3 * PAGE as usize) {
                        let range = offset + 100..(offset + PAGE).min(object.size);
                        assert_reads_back(&client, &id, object, range).await;
                    }
                }
            }
        }
    }

    stop.store(true, Ordering::SeqCst);
    let (max, samples) = sampler.join().unwrap();
    assert!(
        samples >= 5,
        "only {samples} samples were taken during the reads"
    );
    for (i, dir) in dirs.iter().enumerate() {
        let now = allocated_bytes(dir);
        let stats = cluster.worker(i).store().stats();
        assert!(
            max[i] <= CAPACITY,
            "worker {i}: {} bytes allocated at the peak, over its budget of {CAPACITY} \
             ({stats:?})",
            max[i]
        );
        assert!(
            now <= CAPACITY,
            "worker {i}: {now} bytes allocated after the reads"
        );
        assert!(stats.used_bytes <= CAPACITY, "worker {i}: {stats:?}");
        assert!(stats.evictions > 0, "worker {i} evicted nothing: {stats:?}");
        assert!(now > 0, "worker {i} caches something");
    }
    // The cache still serves right after all that eviction.
    let object = &objects[0];
    let id = ObjectId::s3(object.bucket.clone(), object.key.clone()).unwrap();
    assert_reads_back(&client, &id, object, 0..object.size).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_on_disk_stay_within_the_budget_while_twice_the_capacity_is_read() {
    read_twice_the_capacity(Pattern::Sequential).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_on_disk_stay_within_the_budget_when_block_files_are_full_of_holes() {
    read_twice_the_capacity(Pattern::Scattered).await;
}
