//! A worker restarted on its cache folder serves its warm pages without going to the
//! origin; pages damaged while it was down (a flipped byte, a truncated block file) are
//! detected, refetched, and served right.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use talon_core::{ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, expected, read_through};

const PAGE: u64 = 16 << 10;
const BLOCK: u64 = 256 << 10;

struct Setup {
    cluster: Cluster,
    client: talon_cache_client::CacheClient,
    object: GeneratedObject,
    id: ObjectId,
    version: ObjectVersion,
}

/// Three workers, an object of 24 blocks (the last one short) read whole, so every
/// worker holds its blocks.
async fn warm_cluster(key: &str) -> Setup {
    let object = GeneratedObject::new("data", key, 23 * BLOCK + 5 * PAGE + 99, 41);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let client = cluster.client().await;
    let id = ObjectId::s3("data", key).unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    let setup = Setup {
        cluster,
        client,
        object,
        id,
        version,
    };
    setup.read_all("the first read").await;
    // Its pages were answered before they were written; a crash before they are would
    // (rightly) lose them.
    setup.cluster.fills_settled().await;
    setup
}

impl Setup {
    async fn read_all(&self, what: &str) {
        let size = self.object.size;
        let got = read_through(&self.client, &self.id, &self.version, size, 0..size)
            .await
            .unwrap(what);
        assert!(
            got == expected(&self.object, 0..size),
            "{what}: bytes differ"
        );
    }

    /// Offsets of the blocks worker `i` owns.
    async fn blocks_of(&self, i: usize) -> Vec<u64> {
        let placement = self.cluster.placement().await;
        let owner = &self.cluster.workers[i].id;
        (0..self.object.size)
            .step_by(BLOCK as usize)
            .filter(|&offset| {
                let block = self.cluster.block_id(&self.id, &self.version, offset);
                &placement.locate(&block).unwrap().id == owner
            })
            .collect()
    }

    /// Kills worker `i` (a crash: nothing in flight), lets `while_down` touch its folder,
    /// restarts it on the same folder and waits until the client uses it again.
    async fn crash_and_restart(&mut self, i: usize, while_down: impl FnOnce(&Cluster)) {
        let n = self.cluster.workers.len();
        let old_addr = self.cluster.worker(i).addr;
        self.cluster.kill_worker(i);
        self.cluster.wait_for_live(n - 1).await;
        while_down(&self.cluster);
        self.cluster.start_worker(i).await;
        self.cluster.wait_for_live(n).await;
        self.cluster.sync_client(&self.client).await;
        let placement = self.cluster.placement().await;
        let member = placement
            .members()
            .iter()
            .find(|m| m.id == self.cluster.workers[i].id)
            .unwrap();
        assert_eq!(member.addr, self.cluster.worker(i).addr.to_string());
        assert_ne!(
            member.addr,
            old_addr.to_string(),
            "it came back on a new port"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_worker_serves_its_warm_pages_without_origin_gets() {
    let mut s = warm_cluster("restart.bin").await;
    let victim = 1;
    assert!(
        !s.blocks_of(victim).await.is_empty(),
        "the victim owns blocks"
    );
    let blocks_before = s.cluster.worker(victim).store().stats().blocks;
    s.crash_and_restart(victim, |_| {}).await;
    let store = s.cluster.worker(victim).store().stats();
    assert_eq!(
        store.blocks, blocks_before,
        "the index was rebuilt from disk"
    );
    let gets = s.cluster.origin_gets();
    s.read_all("the read after the restart").await;
    assert_eq!(
        s.cluster.origin_gets(),
        gets,
        "the restarted worker served its warm pages from disk"
    );
    let (hits, misses) = s.cluster.worker(victim).metrics().hit_miss();
    assert!(hits > 0 && misses == 0, "hits {hits}, misses {misses}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_damaged_while_a_worker_was_down_are_refetched_and_served_right() {
    let mut s = warm_cluster("damaged.bin").await;
    let victim = 1;
    // Two whole blocks the victim owns.
    let size = s.object.size;
    let owned: Vec<u64> = s
        .blocks_of(victim)
        .await
        .into_iter()
        .filter(|&offset| offset + BLOCK <= size)
        .collect();
    assert!(
        owned.len() >= 2,
        "the victim owns two whole blocks to damage"
    );
    // One block gets a flipped byte in page 2; another is truncated in the middle of
    // page 5, losing pages 5..16.
    let corrupt = s.cluster.block_id(&s.id, &s.version, owned[0]);
    let truncate = s.cluster.block_id(&s.id, &s.version, owned[1]);
    let (corrupt_path, truncate_path) = (
        s.cluster.block_file(victim, &corrupt),
        s.cluster.block_file(victim, &truncate),
    );
    s.crash_and_restart(victim, |_| {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&corrupt_path)
            .unwrap();
        let mut byte = [0u8];
        f.read_exact_at(&mut byte, 2 * PAGE + 1234).unwrap();
        f.write_all_at(&[!byte[0]], 2 * PAGE + 1234).unwrap();
        f.sync_all().unwrap();
        let f = OpenOptions::new().write(true).open(&truncate_path).unwrap();
        f.set_len(5 * PAGE + 100).unwrap();
        f.sync_all().unwrap();
    })
    .await;
    let (gets, bytes) = (s.cluster.origin_gets(), s.cluster.origin_get_bytes());
    s.read_all("the read after the damage").await;
    let refetched_gets = s.cluster.origin_gets() - gets;
    let refetched = s.cluster.origin_get_bytes() - bytes;
    assert!(
        refetched_gets >= 2,
        "each damaged block was refetched ({refetched_gets} GETs)"
    );
    // Only the damaged pages came again: one page, and eleven (readahead cannot reach
    // past a present page or the block's end).
    let damaged = PAGE + 11 * PAGE;
    assert!(
        (damaged..=damaged + 2 * PAGE).contains(&refetched),
        "{refetched} bytes refetched for {damaged} damaged"
    );
    let gets = s.cluster.origin_gets();
    s.read_all("the read after the repair").await;
    assert_eq!(
        s.cluster.origin_gets(),
        gets,
        "the repaired pages are cached"
    );
}
