//! The cache saves origin traffic: a second read of the same ranges makes no origin GET,
//! and many concurrent readers of one cold page share one origin fetch.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use talon_cache_client::ReadOptions;
use talon_core::{ObjectId, ObjectVersion};
use talon_origin_stub::DEFAULT_AZURE_ACCOUNT;
use talon_origin_stub::faults::FaultConfig;
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{
    Cluster, ClusterConfig, WorkerProcess, cluster_of_one_worker_process, expected, read_through,
};
use talon_worker::sync_holds::HOLD_SYNCS_WHILE_ENV;
use tokio::sync::Barrier;

const PAGE: u64 = 16 << 10;
const BLOCK: u64 = 256 << 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_read_of_the_same_ranges_makes_no_origin_get() {
    let size = 9 * BLOCK + 5 * PAGE + 777;
    let s3 = GeneratedObject::new("data", "hot.bin", size, 21);
    let azure = GeneratedObject::new("azhot", "hot.bin", size, 22);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![s3.clone(), azure.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let client = cluster.client().await;
    let ranges = [
        0..1,
        PAGE - 3..PAGE + 3,
        BLOCK - PAGE / 2..3 * BLOCK + PAGE / 2,
        4 * BLOCK + 123..4 * BLOCK + 5 * PAGE,
        7 * BLOCK - 1..size,
        size - 777..size,
    ];
    for (id, object) in [
        (ObjectId::s3("data", "hot.bin").unwrap(), &s3),
        (
            ObjectId::azure(DEFAULT_AZURE_ACCOUNT, "azhot", "hot.bin").unwrap(),
            &azure,
        ),
    ] {
        let version = ObjectVersion::from_etag(&object.etag()).unwrap();
        let before = cluster.origin_gets();
        for range in &ranges {
            let got = read_through(&client, &id, &version, size, range.clone())
                .await
                .unwrap(&format!("cold {id} {range:?}"));
            assert!(
                got == expected(object, range.clone()),
                "cold {id} {range:?}"
            );
        }
        let cold = cluster.origin_gets();
        assert!(
            cold > before,
            "{id}: the cold reads fetched from the origin"
        );
        for range in &ranges {
            let got = read_through(&client, &id, &version, size, range.clone())
                .await
                .unwrap(&format!("warm {id} {range:?}"));
            assert!(
                got == expected(object, range.clone()),
                "warm {id} {range:?}"
            );
        }
        assert_eq!(
            cluster.origin_gets(),
            cold,
            "{id}: the second read of the same ranges made origin GETs"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_readers_of_one_cold_page_cause_one_origin_fetch() {
    let size = 4 * BLOCK + 100;
    let object = GeneratedObject::new("data", "crowd.bin", size, 23);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let id = ObjectId::s3("data", "crowd.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    // Several clients, so the readers arrive over many connections.
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(cluster.client().await);
    }
    // A slow origin, so the first fetch is still in flight when the others arrive.
    cluster
        .origin
        .faults()
        .set(FaultConfig {
            latency_ms: 300,
            ..FaultConfig::default()
        })
        .unwrap();
    // Page 5 of block 2: every reader asks for a different slice of it.
    let page_start = 2 * BLOCK + 5 * PAGE;
    let before = cluster.origin_gets();
    let barrier = Arc::new(Barrier::new(64));
    let mut readers = Vec::new();
    for i in 0..64u64 {
        let (client, id, version, barrier) = (
            clients[i as usize % clients.len()].clone(),
            id.clone(),
            version.clone(),
            barrier.clone(),
        );
        let range = page_start + i * 97..page_start + PAGE - i * 13;
        readers.push(tokio::spawn(async move {
            barrier.wait().await;
            let outcome = read_through(&client, &id, &version, size, range.clone()).await;
            (range, outcome)
        }));
    }
    for reader in readers {
        let (range, outcome) = reader.await.unwrap();
        let got = outcome.unwrap(&format!("reader of {range:?}"));
        assert!(got == expected(&object, range.clone()), "{range:?}");
    }
    assert_eq!(
        cluster.origin_gets() - before,
        1,
        "64 concurrent readers of one cold page made one origin fetch"
    );
}

/// Reads `range` and says where its pieces came from: `(bytes, hits, fills, fallbacks)`.
async fn read_tracked(
    client: &talon_cache_client::CacheClient,
    id: &ObjectId,
    version: &ObjectVersion,
    size: u64,
    range: std::ops::Range<u64>,
) -> (Vec<u8>, u64, u64, u64) {
    let (stream, sources) = client.read_range_tracked(id, version, size, range).unwrap();
    let chunks: Vec<_> = futures_util::StreamExt::collect(stream).await;
    let bytes: Vec<u8> = chunks
        .into_iter()
        .flat_map(|c| c.unwrap().to_vec())
        .collect();
    (bytes, sources.hits(), sources.fills(), sources.fallbacks())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_say_whether_the_worker_fetched_from_the_origin() {
    let size = 3 * BLOCK;
    let object = GeneratedObject::new("data", "flags.bin", size, 24);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let client = cluster.client().await;
    let id = ObjectId::s3("data", "flags.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    let range = BLOCK - PAGE..2 * BLOCK + PAGE;
    let read = |client: talon_cache_client::CacheClient| {
        let (id, version, range) = (id.clone(), version.clone(), range.clone());
        async move { read_tracked(&client, &id, &version, size, range).await }
    };
    // Cold: every piece (one per block touched) was filled from the origin.
    let (bytes, hits, fills, fallbacks) = read(client.clone()).await;
    assert!(bytes == expected(&object, range.clone()));
    assert_eq!((hits, fills, fallbacks), (0, 3, 0));
    // The fills were answered before they were written; once written, they are hits.
    cluster.fills_settled().await;
    // Warm: every piece was a hit.
    let (bytes, hits, fills, fallbacks) = read(client).await;
    assert!(bytes == expected(&object, range.clone()));
    assert_eq!((hits, fills, fallbacks), (3, 0, 0));
}

/// A cold read is answered from the bytes its fill fetched while they are written into
/// the block behind it (write-behind): every byte right and one origin GET for eight
/// concurrent readers of the same pages (the others wait for the fill rather than fetch
/// again); once written, the pages are in the block file and the next read is a hit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_read_is_answered_while_its_pages_are_written_behind() {
    let size = 2 * BLOCK;
    let object = GeneratedObject::new("data", "behind.bin", size, 26);
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let client = cluster.client().await;
    let id = ObjectId::s3("data", "behind.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    // A slow origin, so that every reader arrives while the first one's fetch is out.
    cluster
        .origin
        .faults()
        .set(FaultConfig {
            latency_ms: 200,
            ..FaultConfig::default()
        })
        .unwrap();
    // The second block's first 4 pages: one fill.
    let range = BLOCK..BLOCK + 4 * PAGE;
    let before = cluster.origin_gets();
    read_together(&client, &object, &id, &version, range.clone(), 8).await;
    assert_eq!(
        cluster.origin_gets() - before,
        1,
        "one fetch for eight readers"
    );
    // The fill's own reader is answered from the fetched bytes; the others too, when
    // they look before the pages are written, else from the block (the test with the
    // syncs held pins that all of them are).
    let behind = cluster.worker_metric(0, "talon_worker_written_behind_answers_total");
    assert!(
        (1.0..=8.0).contains(&behind),
        "{behind} answers from the fetched bytes"
    );
    cluster.fills_settled().await;
    cluster.origin.faults().set(FaultConfig::default()).unwrap();

    let block = cluster.block_id(&id, &version, BLOCK);
    let on_disk = std::fs::read(cluster.block_file(0, &block)).unwrap();
    assert!(
        on_disk.len() as u64 >= 4 * PAGE
            && on_disk[..(4 * PAGE) as usize] == expected(&object, range.clone())[..],
        "the pages written behind the answer are in the block file"
    );
    let (bytes, hits, fills, _) = read_tracked(&client, &id, &version, size, range.clone()).await;
    assert!(bytes == expected(&object, range));
    assert_eq!((hits, fills), (1, 0), "the next read is a hit");
    assert_eq!(cluster.origin_gets() - before, 1, "and fetches nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_block_out_of_the_page_cache_is_sent_from_the_blocking_pool() {
    cold_pages_are_read_off_the_reactor(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_off_block_out_of_the_page_cache_is_read_by_the_reader_from_disk() {
    cold_pages_are_read_off_the_reactor(true).await;
}

/// A hit whose pages left the page cache is still a hit with the right bytes: over TCP
/// the worker's `sendfile` runs on its blocking pool; over the local socket the reader's
/// non-blocking read finds the pages absent and reads them on its own blocking pool.
async fn cold_pages_are_read_off_the_reactor(local_sockets: bool) {
    let size = 2 * BLOCK;
    let object = GeneratedObject::new("data", "cold-pages.bin", size, 25);
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object.clone()],
        local_sockets,
        ..ClusterConfig::default()
    })
    .await;
    let client = cluster.client().await;
    let id = ObjectId::s3("data", "cold-pages.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    let whole = read_through(&client, &id, &version, size, 0..size)
        .await
        .unwrap("fill");
    assert!(whole == expected(&object, 0..size));
    // The fill's bytes may still be being written behind its answer: a write after the
    // pages were pushed out would bring them back (seen once in six runs).
    cluster.fills_settled().await;
    // Push both block files out of the page cache (their pages are durable, so clean).
    let mut cold = true;
    for offset in [0, BLOCK] {
        let path = cluster.block_file(0, &cluster.block_id(&id, &version, offset));
        let file = std::fs::File::open(&path).unwrap();
        file.sync_all().unwrap();
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        cold &= !talon_worker::zero_copy::is_resident(&file, 0, BLOCK);
    }
    let gets = cluster.origin_gets();
    let before = cluster.worker_metric(0, "talon_worker_sends_from_disk_total");
    let handoffs = cluster.worker_metric(0, "talon_worker_file_handoffs_total");
    let again = read_through(&client, &id, &version, size, PAGE..size - PAGE)
        .await
        .unwrap("warm but not in the page cache");
    assert!(again == expected(&object, PAGE..size - PAGE));
    assert_eq!(cluster.origin_gets(), gets, "still a hit: no origin GET");
    if local_sockets {
        assert!(cluster.worker_metric(0, "talon_worker_file_handoffs_total") > handoffs);
        return;
    }
    if cold {
        // The kernel could tell (cachestat) that the pages were gone: the sends went
        // through the blocking pool, not the reactor.
        assert!(cluster.worker_metric(0, "talon_worker_sends_from_disk_total") > before);
    }
}

/// A cold object's first bytes, which its stat's one GET brought with the metadata, are
/// handed to the read that follows from memory while they are written behind the
/// stat's answer: with the worker's syncs held (a disk whose writes queue), the stat
/// and the read are both answered, every byte right, one origin GET, the read flagged
/// as a fill, and no page yet called present (no metadata on disk). Once the syncs go
/// through the block is on disk and the next read is a hit that fetches nothing.
/// (Before 2026-12-06 the stat answered only once the bytes were synced.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_objects_first_bytes_are_read_while_they_are_written_behind_its_stat() {
    let size = 100 << 10;
    let object = GeneratedObject::new("data", "first.bin", size, 27);
    let held = SyncsHeld::start(vec![object.clone()]).await;
    let (cluster, process, client, cache) =
        (&held.cluster, &held.process, &held.client, &held.cache);
    let id = ObjectId::s3("data", "first.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();

    let stat = stat_reading_whole(client, &id, size).await;
    assert_eq!((stat.size, &stat.version), (size, &version));
    let (bytes, hits, fills, _) = read_tracked(client, &id, &version, size, 0..size).await;
    assert!(bytes == expected(&object, 0..size), "wrong bytes");
    assert_eq!((hits, fills), (0, 1), "the read is the stat's fill");
    assert_eq!(cluster.origin_gets(), 1, "the stat's GET brought the bytes");
    assert_eq!(cluster.origin_heads(), 0, "and no HEAD");
    assert_eq!(
        process
            .metric("talon_worker_written_behind_answers_total")
            .await,
        1.0,
        "the read was answered from the first read's bytes"
    );
    let meta = block_meta(cluster, cache, &id, &version);
    assert!(!meta.exists(), "a page was called present before its sync");

    held.release();
    process.fills_settled().await;
    assert!(meta.exists(), "the kept pages are present once synced");
    let on_disk = std::fs::read(meta.with_extension("blk")).unwrap();
    assert!(
        on_disk == expected(&object, 0..size),
        "the block file holds the object"
    );
    let (bytes, hits, fills, _) = read_tracked(client, &id, &version, size, 0..size).await;
    assert!(bytes == expected(&object, 0..size), "wrong bytes");
    assert_eq!((hits, fills), (1, 0), "the next read is a hit");
    assert_eq!(cluster.origin_gets(), 1, "and fetches nothing");
}

/// One `talon-worker` process whose block store's syncs wait while a hold file exists
/// (its `TALON_WORKER_HOLD_SYNCS_WHILE` hook: a disk whose writes queue), held from the
/// start, and a client of it.
struct SyncsHeld {
    cluster: Cluster,
    process: WorkerProcess,
    client: talon_cache_client::CacheClient,
    cache: std::path::PathBuf,
    hold: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl SyncsHeld {
    async fn start(generated: Vec<GeneratedObject>) -> SyncsHeld {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let hold = dir.path().join("hold-syncs");
        std::fs::write(&hold, b"").unwrap();
        let (cluster, process, client) = cluster_of_one_worker_process(
            generated,
            &cache,
            &[(HOLD_SYNCS_WHILE_ENV, hold.to_str().unwrap())],
        )
        .await;
        SyncsHeld {
            cluster,
            process,
            client,
            cache,
            hold,
            _dir: dir,
        }
    }

    /// Lets the held syncs (and every later one) go through.
    fn release(&self) {
        std::fs::remove_file(&self.hold).unwrap();
    }
}

/// Readers that waited for a cold fill's origin fetch are answered from its fetched
/// bytes as soon as it has them, not after their sync: with the worker's syncs held,
/// eight concurrent readers of one cold range (the origin slow enough that all arrive
/// while the fetch is out) are all answered, every byte right, one origin GET, all
/// eight from the fetched bytes, and no page called present yet. (Before 2026-12-06
/// the seven that waited were answered only after the sync.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_waiting_for_a_cold_fill_are_answered_from_its_bytes_before_their_sync() {
    let size = 2 * BLOCK;
    let object = GeneratedObject::new("data", "herd.bin", size, 28);
    let held = SyncsHeld::start(vec![object.clone()]).await;
    let id = ObjectId::s3("data", "herd.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    held.cluster
        .origin
        .faults()
        .set(FaultConfig {
            latency_ms: 300,
            ..FaultConfig::default()
        })
        .unwrap();
    let range = BLOCK..BLOCK + 4 * PAGE;
    read_together(&held.client, &object, &id, &version, range.clone(), 8).await;
    assert_eq!(held.cluster.origin_gets(), 1, "one fetch for eight readers");
    assert_eq!(
        held.process
            .metric("talon_worker_written_behind_answers_total")
            .await,
        8.0,
        "every reader was answered from the fetched bytes"
    );
    let block = held.cluster.block_id(&id, &version, BLOCK);
    let meta = held
        .cache
        .join("blocks")
        .join(format!("{}.meta", block.storage_name()));
    assert!(!meta.exists(), "a page was called present before its sync");
    held.cluster
        .origin
        .faults()
        .set(FaultConfig::default())
        .unwrap();
    held.release();
    held.process.fills_settled().await;
    assert!(meta.exists(), "the pages are present once synced");
    let (bytes, hits, fills, _) =
        read_tracked(&held.client, &id, &version, size, range.clone()).await;
    assert!(bytes == expected(&object, range), "wrong bytes");
    assert_eq!((hits, fills), (1, 0), "the next read is a hit");
    assert_eq!(held.cluster.origin_gets(), 1, "and fetches nothing");
}

/// `n` readers of `range` of `object` released together, each read checked against
/// the object's bytes.
async fn read_together(
    client: &talon_cache_client::CacheClient,
    object: &GeneratedObject,
    id: &ObjectId,
    version: &ObjectVersion,
    range: std::ops::Range<u64>,
    n: usize,
) {
    let barrier = Arc::new(Barrier::new(n));
    let mut readers = Vec::new();
    for _ in 0..n {
        let (client, id, version, barrier, range) = (
            client.clone(),
            id.clone(),
            version.clone(),
            barrier.clone(),
            range.clone(),
        );
        let size = object.size;
        readers.push(tokio::spawn(async move {
            barrier.wait().await;
            read_through(&client, &id, &version, size, range).await
        }));
    }
    for reader in readers {
        // A reader left waiting (for a sync a test holds) fails the test, not hangs it.
        let got = tokio::time::timeout(Duration::from_secs(30), reader)
            .await
            .expect("a reader still waits after 30 s")
            .unwrap()
            .unwrap("a cold reader");
        assert!(got == expected(object, range.clone()), "wrong bytes");
    }
}

/// Without room to write a stat's first bytes behind its answer (`--write-behind-bytes
/// 0`), they are durable before the stat is answered, as before 2026-12-06: the block's
/// metadata is on disk when the stat returns, the read after it is served from the
/// block (no answer from memory), every byte right, one origin GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_write_behind_room_a_stats_first_bytes_are_kept_before_its_answer() {
    let size = 100 << 10;
    let object = GeneratedObject::new("data", "durable-first.bin", size, 29);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let (cluster, process, client) = cluster_of_one_worker_process(
        vec![object.clone()],
        &cache,
        &[("TALON_WORKER_WRITE_BEHIND_BYTES", "0")],
    )
    .await;
    let id = ObjectId::s3("data", "durable-first.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    stat_reading_whole(&client, &id, size).await;
    let meta = block_meta(&cluster, &cache, &id, &version);
    assert!(meta.exists(), "the first bytes were kept before the answer");
    let (bytes, hits, fills, _) = read_tracked(&client, &id, &version, size, 0..size).await;
    assert!(bytes == expected(&object, 0..size), "wrong bytes");
    assert_eq!((hits, fills), (0, 1), "the read is the stat's fill");
    assert_eq!(cluster.origin_gets(), 1, "the stat's GET brought the bytes");
    assert_eq!(cluster.origin_heads(), 0, "and no HEAD");
    assert_eq!(
        process
            .metric("talon_worker_written_behind_answers_total")
            .await,
        0.0,
        "nothing was answered from memory"
    );
}

/// A stat of a cold object that asks for its whole body as the first read (one origin
/// GET for both, when the worker must ask).
async fn stat_reading_whole(
    client: &talon_cache_client::CacheClient,
    id: &ObjectId,
    size: u64,
) -> talon_cache_client::ObjectStat {
    client
        .stat_reading(
            id,
            ReadOptions::default(),
            Some(Duration::from_secs(60)),
            Some(0..size),
        )
        .await
        .unwrap()
}

/// Where the worker process with its cache in `cache` keeps the metadata of the
/// object's first block (its data file: the same path with `.blk`).
fn block_meta(
    cluster: &Cluster,
    cache: &std::path::Path,
    id: &ObjectId,
    version: &ObjectVersion,
) -> std::path::PathBuf {
    let block = cluster.block_id(id, version, 0);
    cache
        .join("blocks")
        .join(format!("{}.meta", block.storage_name()))
}
