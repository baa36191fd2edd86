//! SEC-07 of the security review: a cache client's reads share one budget of buffered
//! piece bytes. With a budget of one piece, concurrent reads wider than it all complete
//! with the right bytes, and a stream left unread holds the budget, so the next read
//! waits (instead of the process growing) until the stalled one is dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures_util::StreamExt;
use talon_core::{ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, assert_reads_back, expected, wait_for};

const PIECE: u64 = 64 << 10;

fn object() -> GeneratedObject {
    GeneratedObject::new("data", "budget.bin", 16 * PIECE, 5)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_share_one_budget_and_a_stalled_reader_holds_only_its_share() {
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object()],
        ..ClusterConfig::default()
    })
    .await;
    let client = cluster
        .client_with(|c| {
            c.max_request_bytes = PIECE;
            c.max_buffered_bytes = PIECE;
        })
        .await;
    let id = ObjectId::s3("data", "budget.bin").unwrap();
    let version = ObjectVersion::from_etag(&object().etag()).unwrap();
    // Several reads at once, each wider than the budget: all complete, all correct.
    let reads: Vec<_> = (0..4)
        .map(|i| {
            let (client, id) = (client.clone(), id.clone());
            tokio::spawn(async move {
                assert_reads_back(&client, &id, &object(), i * PIECE..(i + 8) * PIECE).await;
            })
        })
        .collect();
    for r in reads {
        r.await.unwrap();
    }
    // A stream that is polled once and then left alone, its first piece kept: the
    // piece's bytes hold the whole budget (a share travels with the bytes)...
    let mut stalled = client
        .read_range(&id, &version, object().size, 0..16 * PIECE)
        .unwrap();
    let first = stalled.next().await.unwrap().unwrap();
    assert_eq!(&first[..], &expected(&object(), 0..PIECE)[..]);
    // ... so another read waits rather than adding to what the process holds.
    let mut second = client
        .read_range(&id, &version, object().size, 0..PIECE)
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), second.next())
            .await
            .is_err(),
        "a read went past the budget"
    );
    // Dropping the bytes and the stalled stream frees its share, and the waiting read
    // is served.
    drop(first);
    drop(stalled);
    let piece = tokio::time::timeout(Duration::from_secs(10), second.next())
        .await
        .expect("the freed budget serves the waiting read")
        .unwrap()
        .unwrap();
    assert_eq!(&piece[..], &expected(&object(), 0..PIECE)[..]);
}

/// Issue 13, "overload is said": a read whose first piece finds no room in the budget
/// for the admission wait is refused as overloaded (a gateway answers SlowDown or
/// ServerBusy with Retry-After), before anything is asked of a worker; a read that
/// starts once there is room again is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_finds_no_room_for_its_first_piece_is_refused_as_overloaded() {
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object()],
        ..ClusterConfig::default()
    })
    .await;
    let client = cluster
        .client_with(|c| {
            c.max_request_bytes = PIECE;
            c.max_buffered_bytes = PIECE;
            c.admission_wait = Duration::from_millis(300);
        })
        .await;
    let id = ObjectId::s3("data", "budget.bin").unwrap();
    let version = ObjectVersion::from_etag(&object().etag()).unwrap();
    let size = object().size;
    let mut stalled = client
        .read_range(&id, &version, size, 0..4 * PIECE)
        .unwrap();
    let first = stalled.next().await.unwrap().unwrap();
    // The worker counts an answer (sent, or handed over on the local socket) once it
    // is done with it, which may be after the reader has it.
    let answers = "talon_worker_read_duration_seconds_count";
    let served = wait_for(
        "the worker to count the first piece",
        Duration::from_secs(10),
        || async {
            let n = cluster.worker_metric(0, answers);
            (n >= 1.0).then_some(n)
        },
    )
    .await;
    let mut refused = client.read_range(&id, &version, size, 0..PIECE).unwrap();
    let error = tokio::time::timeout(Duration::from_secs(30), refused.next())
        .await
        .expect("the refusal comes after the admission wait")
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(error, talon_cache_client::CacheClientError::Overloaded(_)),
        "{error}"
    );
    assert_eq!(error.kind(), talon_protocols::ErrorKind::SlowDown);
    assert!(refused.next().await.is_none(), "a refused read ends there");
    assert_eq!(
        cluster.worker_metric(0, answers),
        served,
        "nothing was asked of the worker for the refused read"
    );
    drop(first);
    drop(stalled);
    assert_reads_back(&client, &id, &object(), 0..PIECE).await;
}
