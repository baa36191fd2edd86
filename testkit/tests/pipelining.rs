//! Requests pipelined on one connection (written back to back, more than the worker's
//! pipeline depth) are all answered, in request order, each echoing its request id —
//! however long each takes (cold reads behind warm ones, pings, stats, errors).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use talon_cache_client::DeadlineBudget;
use talon_core::wire::{ErrorReply, ReadRangeRequest, StatRequest};
use talon_core::{ErrorCode, Message, ObjectId, ObjectVersion};
use talon_origin_stub::faults::FaultConfig;
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::raw::{RawAnswer, RawConnection};
use talon_testkit::{Cluster, ClusterConfig, assert_reads_back, expected, wait_for};
use tokio::sync::Barrier;

const PAGE: u64 = 16 << 10;
const BLOCK: u64 = 256 << 10;

/// What each pipelined request must be answered with.
enum Want {
    Bytes(Vec<u8>),
    Pong(u64),
    Stat { size: u64, version: String },
    Error(ErrorCode),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_all_answered_in_order_with_their_ids() {
    let object = GeneratedObject::new("data", "pipe.bin", 16 * BLOCK + 321, 81);
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let id = ObjectId::s3("data", "pipe.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    // Block 0 warm; the rest cold, behind a slow origin, so later (warm) answers are
    // ready long before earlier (cold) ones.
    let client = cluster.client().await;
    assert_reads_back(&client, &id, &object, 0..BLOCK).await;
    cluster
        .origin
        .faults()
        .set(FaultConfig {
            latency_ms: 30,
            ..FaultConfig::default()
        })
        .unwrap();

    let read = |offset_in_object: u64, len: u64| {
        let block_offset = offset_in_object / BLOCK * BLOCK;
        let req = ReadRangeRequest {
            block: cluster.block_id(&id, &version, block_offset),
            object_size: object.size,
            offset: offset_in_object - block_offset,
            len: len as u32,
        };
        let want = expected(&object, offset_in_object..offset_in_object + len);
        (Message::ReadRange(req), Want::Bytes(want))
    };
    let mut requests = Vec::new();
    for i in 0..150u64 {
        requests.push(match i % 6 {
            // Cold reads in blocks 1..16 (some share pages, some the last short page).
            0 => read(
                BLOCK * (1 + i % 15) + (i * 977) % (BLOCK - 3 * PAGE),
                2 * PAGE + i,
            ),
            // Warm reads of block 0.
            1 | 4 => read((i * 1231) % (BLOCK - 20_000), 1 + i * 100),
            2 => (Message::Ping { nonce: i }, Want::Pong(i)),
            3 => (
                Message::Stat(StatRequest {
                    object: id.clone(),
                    expected_version: None,
                    max_age_ms: None,
                    first_read: None,
                }),
                Want::Stat {
                    size: object.size,
                    version: talon_core::canonical_etag(&object.etag()).to_owned(),
                },
            ),
            _ if i % 12 == 5 => {
                // A well-formed read of an object that does not exist: an error frame,
                // in its turn, and the connection goes on.
                let missing = ObjectId::s3("data", "missing.bin").unwrap();
                let req = ReadRangeRequest {
                    block: cluster.block_id(&missing, &version, 0),
                    object_size: 1000,
                    offset: 0,
                    len: 10,
                };
                (Message::ReadRange(req), Want::Error(ErrorCode::NotFound))
            }
            // The end of the object, and an empty read.
            _ if i % 24 == 11 => read(object.size - 321, 321),
            _ => read(BLOCK + 5, 0),
        });
    }
    // Distinct, unordered request ids.
    let ids: Vec<u32> = (0..requests.len() as u32)
        .map(|i| 0x8000_0000 ^ i.wrapping_mul(2_654_435_761))
        .collect();
    let mut bytes = Vec::new();
    for ((message, _), id) in requests.iter().zip(&ids) {
        bytes.extend_from_slice(&message.encode(*id).unwrap());
    }

    let conn = RawConnection::authenticated(
        cluster.worker(0).addr,
        cluster.cluster_secret(),
        talon_core::cluster_auth::Role::Reader,
    )
    .await;
    let (mut writer, mut reader) = (conn.writer, conn.reader);
    // All of them back to back, in one write, while the answers are read.
    let sender = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        writer.write_all(&bytes).await.unwrap();
        writer
    });
    for (i, ((_, want), id)) in requests.iter().zip(&ids).enumerate() {
        let answer = reader.next(Duration::from_secs(30)).await;
        match (answer, want) {
            (RawAnswer::Data { request_id, bytes }, Want::Bytes(want)) => {
                assert_eq!(request_id, *id, "request {i}: id");
                assert!(bytes == *want, "request {i}: bytes");
            }
            (RawAnswer::Frame(f), want) => {
                assert_eq!(f.header.request_id(), *id, "request {i}: id");
                match (f.message, want) {
                    (Message::Pong { nonce }, Want::Pong(n)) => assert_eq!(nonce, *n),
                    (Message::StatReply(r), Want::Stat { size, version }) => {
                        assert_eq!((r.size, r.version.as_str()), (*size, version.as_str()));
                    }
                    (Message::Error(ErrorReply { code, .. }), Want::Error(c)) => {
                        assert_eq!(code, *c, "request {i}")
                    }
                    (other, _) => panic!("request {i}: unexpected answer {other:?}"),
                }
            }
            (other, _) => panic!("request {i}: unexpected answer {other:?}"),
        }
    }
    let mut writer = sender.await.unwrap();
    // Nothing more comes; the connection still works.
    let _ = &mut writer;
    let ping = Message::Ping { nonce: 77 }.encode(1).unwrap();
    {
        use tokio::io::AsyncWriteExt;
        writer.write_all(&ping).await.unwrap();
    }
    match reader.next(Duration::from_secs(10)).await {
        RawAnswer::Frame(f) => {
            assert_eq!(f.header.request_id(), 1);
            assert_eq!(f.message, Message::Pong { nonce: 77 });
        }
        other => panic!("after the pipeline: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_reads_is_pipelined_on_the_clients_few_connections() {
    let object = GeneratedObject::new("data", "burst.bin", 4 * BLOCK, 82);
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let id = ObjectId::s3("data", "burst.bin").unwrap();
    let client = cluster.client().await;
    let barrier = Arc::new(Barrier::new(64));
    let readers: Vec<_> = (0..64u64)
        .map(|i| {
            let (client, id, object, barrier) =
                (client.clone(), id.clone(), object.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                assert_reads_back(&client, &id, &object, i * 1000..i * 1000 + 5000).await;
            })
        })
        .collect();
    for r in readers {
        r.await.unwrap();
    }
    // The reads pipeline on CacheClientConfig's default of 2 per worker; the stats
    // before them (one object, one stat at the origin) on their own lane's few.
    let config = talon_cache_client::CacheClientConfig::new(
        "http://unused",
        cluster.config().geometry,
        cluster.cluster_secret().clone(),
    );
    let most = config.connections_per_worker + config.stat_connections_per_worker;
    let open = cluster.worker_metric(0, "talon_worker_connections");
    assert!(open <= most as f64, "{open} connections open to one worker");
}

/// A read waiting for the origin does not hold up hits sent after it: answers come in
/// order on a connection, so the client keeps stats (which wait for the origin when
/// the worker does not know the object) off the connections reads pipeline on. Before
/// 2026-12-05 every request shared two connections taken in turn, and every other hit
/// waited for the stalled read's stat (the dataset bench's cold epoch, origin at 50 ms:
/// a p50 of two origin round trips).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_are_not_queued_behind_a_read_waiting_for_the_origin() {
    let warm = GeneratedObject::new("data", "warm.bin", BLOCK, 83);
    // In a bucket of its own: nothing the warm read brings along (a listing of its
    // folder) tells the worker of it, so its read starts with a stat at the origin.
    let cold = GeneratedObject::new("cold", "cold.bin", BLOCK, 84);
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![warm.clone(), cold.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let (warm_id, cold_id) = (
        ObjectId::s3("data", "warm.bin").unwrap(),
        ObjectId::s3("cold", "cold.bin").unwrap(),
    );
    // Deadlines past the origin's stall: the cold read waits rather than fails over.
    let patient = Duration::from_secs(120);
    let client = cluster
        .client_with(|c| {
            c.deadlines =
                DeadlineBudget::from_total(patient).with_worker(Some(patient), Some(patient));
        })
        .await;
    assert_reads_back(&client, &warm_id, &warm, 0..BLOCK).await;
    // Origin requests the worker has sent (counted when sent), whatever the kind.
    let asked = |cluster: &Cluster| {
        ["fetched", "read"]
            .map(|r| {
                cluster.worker_metric(
                    0,
                    &format!("talon_worker_stat_origin_requests_total{{result=\"{r}\"}}"),
                )
            })
            .iter()
            .sum::<f64>()
            + cluster.worker_metric(0, "talon_worker_origin_requests_total")
    };
    let before = asked(&cluster);
    // The origin holds every answer for a minute from now on.
    cluster
        .origin
        .faults()
        .set(FaultConfig {
            latency_ms: 60_000,
            ..FaultConfig::default()
        })
        .unwrap();
    let stalled = {
        let (client, cold_id, cold) = (client.clone(), cold_id.clone(), cold.clone());
        tokio::spawn(async move { assert_reads_back(&client, &cold_id, &cold, 0..PAGE).await })
    };
    wait_for(
        "the cold read to reach the origin",
        Duration::from_secs(10),
        || async { (asked(&cluster) > before).then_some(()) },
    )
    .await;
    // Hits, one after another, each on a connection with nothing in flight: all done
    // while the cold read still waits (in turn, every other one waited for it), and
    // none of them asks the origin.
    let origin_before = cluster.origin_gets();
    tokio::time::timeout(Duration::from_secs(20), async {
        for i in 0..8 {
            assert_reads_back(&client, &warm_id, &warm, i * PAGE..(i + 1) * PAGE).await;
        }
    })
    .await
    .expect("hits queued behind the read waiting for the origin");
    assert_eq!(
        cluster.origin_gets(),
        origin_before,
        "the hits went to the origin"
    );
    assert!(!stalled.is_finished(), "the cold read is still waiting");
    stalled.abort();
}
