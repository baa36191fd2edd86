//! Read-ahead: the pieces ahead of a sequential reader are filled by their workers
//! before the reader asks (the wire's Prefetch), each fetched from the origin once, and
//! a worker keeps its background fills within its bounds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use sha2::{Digest, Sha256};
use talon_cache_client::CacheClient;
use talon_core::cluster_auth::Role;
use talon_core::wire::{PrefetchOutcome, ReadRangeRequest};
use talon_core::{BlockId, Message, ObjectId, ObjectVersion};
use talon_origin_stub::faults::FaultConfig;
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::raw::{RawAnswer, RawConnection};
use talon_testkit::{Cluster, ClusterConfig, expected, wait_for};
use talon_worker::loader::LoaderConfig;
use talon_worker::prefetch::PrefetchBounds;

const BLOCK: u64 = 256 << 10;
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Reads `range` whole and says where its pieces came from: `(bytes, hits, fills)`.
async fn read(
    client: &CacheClient,
    id: &ObjectId,
    version: &ObjectVersion,
    size: u64,
    range: std::ops::Range<u64>,
) -> (Vec<u8>, u64, u64) {
    use futures_util::StreamExt;
    let (mut stream, sources) = client.read_range_tracked(id, version, size, range).unwrap();
    let mut out = Vec::new();
    while let Some(piece) = stream.next().await {
        out.extend_from_slice(&piece.unwrap());
    }
    (out, sources.hits(), sources.fills())
}

/// Makes the origin wait `ms` before every answer.
fn origin_latency(cluster: &Cluster, ms: u64) {
    cluster
        .origin
        .faults()
        .set(FaultConfig {
            latency_ms: ms,
            ..FaultConfig::default()
        })
        .unwrap();
}

/// Every worker's `talon_worker_prefetches_total` for `outcome`, summed.
fn prefetches(cluster: &Cluster, outcome: &str) -> u64 {
    (0..cluster.workers.len())
        .map(|i| {
            cluster.worker_metric(
                i,
                &format!("talon_worker_prefetches_total{{outcome=\"{outcome}\"}}"),
            ) as u64
        })
        .sum()
}

/// Waits until every prefetch `client` sent was answered, and returns its tallies.
async fn prefetches_answered(client: &CacheClient) -> talon_cache_client::ReadAheadStats {
    wait_for(
        "every prefetch to be answered",
        Duration::from_secs(20),
        || async {
            let s = client.read_ahead_stats();
            (s.present + s.started + s.declined + s.failed == s.sent).then_some(s)
        },
    )
    .await
}

async fn prefetched_fills_end(cluster: &Cluster, started: u64) {
    wait_for(
        "every started prefetch to end",
        Duration::from_secs(20),
        || async {
            let ended = prefetches(cluster, "filled")
                + prefetches(cluster, "failed")
                + prefetches(cluster, "not_cached");
            (ended >= started).then_some(())
        },
    )
    .await;
}

/// A cold object read whole, in order, with a window of 2 pieces: the pieces past the
/// window are prefetched (the workers start filling them before the reader asks), the
/// bytes are the object's, and every piece is fetched from the origin exactly once
/// however the prefetch and the read's own request meet on the worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_object_read_in_order_is_filled_ahead_and_each_piece_fetched_once() {
    let size = 40 * BLOCK + 4321;
    let object = GeneratedObject::new("data", "scan.bin", size, 61);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    // 2 ms per origin request, so that fills overlap as they would against a real one.
    origin_latency(&cluster, 2);
    let client = cluster
        .client_with(|c| {
            c.read_window = 2;
            c.read_ahead_pieces = 6;
        })
        .await;
    let id = ObjectId::s3("data", "scan.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    let before = cluster.origin_gets();
    let (bytes, _, fills) = read(&client, &id, &version, size, 0..size).await;
    assert_eq!(
        sha(&bytes),
        sha(&expected(&object, 0..size)),
        "the object's bytes"
    );
    let pieces = size.div_ceil(BLOCK);
    let stats = prefetches_answered(&client).await;
    assert!(
        stats.started > 0,
        "the workers started fills ahead of the reader: {stats:?}"
    );
    assert_eq!(stats.failed, 0, "no prefetch failed: {stats:?}");
    assert!(
        fills < pieces,
        "pieces prefetched before the read asked came without a fill of the read's own: {fills} of {pieces}"
    );
    prefetched_fills_end(&cluster, stats.started).await;
    assert_eq!(
        cluster.origin_gets() - before,
        pieces,
        "each piece fetched from the origin once: {stats:?}"
    );
    // Read again: all hits, and nothing prefetched (a read of cached bytes sends none).
    let sent = prefetches_answered(&client).await.sent;
    let (again, hits, fills) = read(&client, &id, &version, size, 0..size).await;
    assert_eq!(sha(&again), sha(&bytes));
    assert_eq!((hits, fills), (pieces, 0));
    assert_eq!(
        client.read_ahead_stats().sent,
        sent,
        "a warm read prefetches nothing"
    );
    assert_eq!(cluster.origin_gets() - before, pieces);
}

/// Consecutive ranged reads of a cold object (as `download_fileobj` or a Parquet scan
/// send them): the read that continues a filled one has the range past its end filled
/// before it is asked, so the next range is all hits, and no piece is fetched twice.
/// Reading with read-ahead off, the same ranges are all fills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consecutive_ranges_have_the_next_range_filled_before_it_is_asked() {
    let size = 24 * BLOCK;
    let ahead = GeneratedObject::new("data", "ranges.bin", size, 62);
    let plain = GeneratedObject::new("data", "plain.bin", size, 63);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![ahead.clone(), plain.clone()],
        ..ClusterConfig::default()
    })
    .await;
    for (object, read_ahead) in [(&ahead, 4), (&plain, 0)] {
        let client = cluster
            .client_with(|c| {
                c.read_window = 4;
                c.read_ahead_pieces = read_ahead;
            })
            .await;
        let id = ObjectId::s3("data", &object.key).unwrap();
        let version = ObjectVersion::from_etag(&object.etag()).unwrap();
        let before = cluster.origin_gets();
        // Two ranges of one block each: the first fills, the second continues it.
        for range in [0..BLOCK, BLOCK..2 * BLOCK] {
            let (bytes, _, fills) = read(&client, &id, &version, size, range.clone()).await;
            assert_eq!(sha(&bytes), sha(&expected(object, range.clone())));
            assert_eq!(fills, 1, "{range:?} is cold");
        }
        let started = prefetches_answered(&client).await.started;
        prefetched_fills_end(&cluster, prefetches(&cluster, "started")).await;
        // The next range, of the read-ahead's 4 pieces past the second's end.
        let next = 2 * BLOCK..6 * BLOCK;
        let (bytes, hits, fills) = read(&client, &id, &version, size, next.clone()).await;
        assert_eq!(sha(&bytes), sha(&expected(object, next.clone())));
        if read_ahead > 0 {
            assert_eq!(
                started, 4,
                "the 4 pieces past the second range's end were prefetched"
            );
            assert_eq!(
                (hits, fills),
                (4, 0),
                "the next range was filled before it was asked"
            );
        } else {
            assert_eq!(started, 0);
            assert_eq!(
                (hits, fills),
                (0, 4),
                "without read-ahead the next range is cold"
            );
        }
        // That range continued the scan too: the 4 pieces past it are filled ahead.
        let answered = prefetches_answered(&client).await;
        prefetched_fills_end(&cluster, prefetches(&cluster, "started")).await;
        let last = 6 * BLOCK..10 * BLOCK;
        let (bytes, hits, _) = read(&client, &id, &version, size, last.clone()).await;
        assert_eq!(sha(&bytes), sha(&expected(object, last)));
        let read_ahead_hits = if read_ahead > 0 { 4 } else { 0 };
        assert_eq!(hits, read_ahead_hits, "{answered:?}");
        prefetches_answered(&client).await;
        prefetched_fills_end(&cluster, prefetches(&cluster, "started")).await;
        // Each block the scan or its read-ahead touched was fetched once: blocks 0 to
        // 9, and with read-ahead the 4 past the last range (prefetched as it was read).
        let touched = if read_ahead > 0 { 14 } else { 10 };
        assert_eq!(
            cluster.origin_gets() - before,
            touched,
            "one origin GET per block touched"
        );
    }
}

/// A worker answers a Prefetch at once, fills in the background within its bounds (per
/// object and in all), declines beyond them, and says so; a prefetched range is then
/// served without another origin request, and a Prefetch of present pages starts
/// nothing. A bad Prefetch is refused as a bad ReadRange would be, and fetches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_fills_a_prefetch_in_the_background_within_its_bounds() {
    let size = 8 * BLOCK;
    let object = GeneratedObject::new("data", "pre.bin", size, 64);
    let other = GeneratedObject::new("data", "other.bin", size, 65);
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object.clone(), other.clone()],
        loader: LoaderConfig {
            prefetch: PrefetchBounds {
                fills: 2,
                fills_per_object: 1,
            },
            ..ClusterConfig::default().loader
        },
        ..ClusterConfig::default()
    })
    .await;
    // A slow origin: the first fills are still running when the next prefetches come.
    origin_latency(&cluster, 500);
    let block = |o: &GeneratedObject, n: u64| block_request(o, n).block;
    let request = |o: &GeneratedObject, n: u64| block_request(o, n);
    let addr = cluster.worker(0).addr;
    let mut conn = reader(&cluster).await;
    let before = cluster.origin_gets();
    let mut prefetch = async |o: &GeneratedObject, n: u64, id: u32| match ask(
        &mut conn,
        Message::Prefetch(request(o, n)),
        id,
    )
    .await
    {
        Message::PrefetchAck(outcome) => outcome,
        other => panic!("not a PrefetchAck: {other:?}"),
    };
    // Block 0 of `object` starts; block 1 of the same object is over its bound; block
    // 0 of `other` starts (the second fill in all); block 1 of `other` is over both.
    assert_eq!(prefetch(&object, 0, 1).await, PrefetchOutcome::Started);
    assert_eq!(prefetch(&object, 1, 2).await, PrefetchOutcome::Declined);
    assert_eq!(prefetch(&other, 0, 3).await, PrefetchOutcome::Started);
    assert_eq!(prefetch(&other, 1, 4).await, PrefetchOutcome::Declined);
    prefetched_fills_end(&cluster, 2).await;
    assert_eq!(
        cluster.origin_gets() - before,
        2,
        "two fills, two origin GETs"
    );
    // Present now: a prefetch starts nothing; the bounds are free again, so the
    // declined block starts now.
    assert_eq!(prefetch(&object, 0, 5).await, PrefetchOutcome::Present);
    assert_eq!(prefetch(&object, 1, 6).await, PrefetchOutcome::Started);
    prefetched_fills_end(&cluster, 3).await;
    assert_eq!(prefetches(&cluster, "declined"), 2);
    assert_eq!(cluster.origin_gets() - before, 3);
    // The prefetched blocks are served from the cache.
    for n in [0, 1] {
        let req = request(&object, n);
        match RawConnection::read_once(addr, cluster.cluster_secret(), req, ANSWER_WITHIN).await {
            RawAnswer::Data { bytes, .. } => {
                let range = n * BLOCK..(n + 1) * BLOCK;
                assert_eq!(sha(&bytes), sha(&expected(&object, range)));
            }
            other => panic!("the read was not answered with data: {other:?}"),
        }
    }
    assert_eq!(
        cluster.origin_gets() - before,
        3,
        "the prefetched blocks were hits"
    );
    // A Prefetch naming a range outside its object (the size patched below the
    // block's offset) is refused as a bad frame, and fetches nothing.
    let mut frame = Message::Prefetch(request(&object, 3)).encode(9).unwrap();
    let at = frame.len() - 20;
    frame[at..at + 8].copy_from_slice(&1u64.to_be_bytes());
    conn.send(&frame).await.unwrap();
    match conn.next(ANSWER_WITHIN).await {
        RawAnswer::Frame(f) => assert!(
            matches!(f.message, Message::Error(_)),
            "refused: {:?}",
            f.message
        ),
        other => panic!("the bad prefetch was not refused: {other:?}"),
    }
    assert_eq!(
        cluster.origin_gets() - before,
        3,
        "the refused prefetch fetched nothing"
    );
    assert!(!cluster.block_file(0, &block(&object, 3)).exists());
}

/// A ReadRange of block `n` (whole) of `object` in the sandbox's S3 bucket.
fn block_request(object: &GeneratedObject, n: u64) -> ReadRangeRequest {
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    let id = ObjectId::s3(object.bucket.clone(), object.key.clone()).unwrap();
    ReadRangeRequest {
        block: BlockId::new(id, version, n * BLOCK, BLOCK).unwrap(),
        object_size: object.size,
        offset: 0,
        len: BLOCK.min(object.size - n * BLOCK) as u32,
    }
}

/// A connection to the sandbox's first worker, authenticated as a reader.
async fn reader(cluster: &Cluster) -> RawConnection {
    RawConnection::authenticated(
        cluster.worker(0).addr,
        cluster.cluster_secret(),
        Role::Reader,
    )
    .await
}

/// Sends `message` as request `id` and returns the control frame answering it.
async fn ask(conn: &mut RawConnection, message: Message, id: u32) -> Message {
    conn.send(&message.encode(id).unwrap()).await.unwrap();
    match conn.next(ANSWER_WITHIN).await {
        RawAnswer::Frame(frame) => frame.message,
        other => panic!("request {id}: not a frame: {other:?}"),
    }
}

/// A prefetch never fetches what its worker cannot keep: with a cache smaller than the
/// range, the fill ends "not cached" having asked the origin nothing, where a read of
/// the same range is still served (passed through from the origin, one GET).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetch_the_worker_cannot_keep_fetches_nothing() {
    let size = 2 * BLOCK;
    let object = GeneratedObject::new("data", "big.bin", size, 66);
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        capacity_bytes: 64 << 10,
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let request = block_request(&object, 0);
    let addr = cluster.worker(0).addr;
    let mut conn = reader(&cluster).await;
    let before = cluster.origin_gets();
    assert_eq!(
        ask(&mut conn, Message::Prefetch(request.clone()), 1).await,
        Message::PrefetchAck(PrefetchOutcome::Started)
    );
    wait_for("the prefetch to end", Duration::from_secs(20), || async {
        (prefetches(&cluster, "not_cached") == 1).then_some(())
    })
    .await;
    assert_eq!(
        cluster.origin_gets(),
        before,
        "nothing fetched that could not be kept"
    );
    match RawConnection::read_once(addr, cluster.cluster_secret(), request, ANSWER_WITHIN).await {
        RawAnswer::Data { bytes, .. } => assert_eq!(sha(&bytes), sha(&expected(&object, 0..BLOCK))),
        other => panic!("the read was not answered with data: {other:?}"),
    }
    assert_eq!(
        cluster.origin_gets(),
        before + 1,
        "the read itself passed through"
    );
}
