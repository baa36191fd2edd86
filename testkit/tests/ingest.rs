//! Ingest: bytes an authenticated ingester pushes into a block are spliced from the
//! socket into a staging file, checksummed, made durable and committed; they read back
//! equal without an origin fetch. A push cut off or stalled halfway commits nothing and
//! leaves nothing on disk, and the pages are then filled from the origin as usual.
//! (A peer in another role, or one that skipped Hello, is refused: cluster_auth.rs.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};
use talon_core::cluster_auth::Role;
use talon_core::wire::{IngestAck, IngestMeta, IngestRequest, ReadRangeRequest};
use talon_core::{BlockId, ErrorCode, Message, ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::raw::{RawAnswer, RawConnection};
use talon_testkit::{Cluster, ClusterConfig, expected};

const BLOCK: u64 = 256 << 10;
/// Longer than the sandbox's frame timeout (2 s).
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

fn object() -> GeneratedObject {
    GeneratedObject::new("data", "pushed.bin", 3 * BLOCK + 500, 5)
}

fn block(cluster: &Cluster, index: u64) -> BlockId {
    cluster.block_id(
        &ObjectId::s3("data", "pushed.bin").unwrap(),
        &ObjectVersion::from_etag(&object().etag()).unwrap(),
        index * BLOCK,
    )
}

/// Bytes unlike the origin's, so a read that returns them can only have been served
/// from the push.
fn pushed_bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ 0x5a)
        .collect()
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Every file under `dir`, as paths relative to it.
fn files_in(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap();
                out.insert(rel.to_string_lossy().into_owned());
            }
        }
    }
    out
}

fn ingest_frame(block: &BlockId, offset: u64, data: Vec<u8>, id: u32) -> Vec<u8> {
    Message::Ingest(IngestRequest {
        meta: IngestMeta {
            block: block.clone(),
            object_size: object().size,
            offset,
        },
        data,
    })
    .encode(id)
    .unwrap()
}

async fn read(cluster: &Cluster, block: &BlockId, offset: u64, len: u32) -> Vec<u8> {
    let req = ReadRangeRequest {
        block: block.clone(),
        object_size: object().size,
        offset,
        len,
    };
    let addr = cluster.worker(0).addr;
    match RawConnection::read_once(addr, cluster.cluster_secret(), req, ANSWER_WITHIN).await {
        RawAnswer::Data { bytes, .. } => bytes,
        other => panic!("the read was not answered with data: {other:?}"),
    }
}

/// An authenticated connection in the ingester role to the sandbox's worker.
async fn ingester(cluster: &Cluster) -> RawConnection {
    RawConnection::authenticated(
        cluster.worker(0).addr,
        cluster.cluster_secret(),
        Role::Ingester,
    )
    .await
}

async fn sandbox() -> Cluster {
    Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object()],
        ..ClusterConfig::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_bytes_read_back_equal_without_an_origin_fetch() {
    let cluster = sandbox().await;
    let dir = cluster.workers[0].cache_dir.clone();
    let mut conn = ingester(&cluster).await;
    // A whole block (256 KiB: far more than one read buffer, so most of it is spliced)
    // and the object's short last block (500 bytes: it comes in with the header).
    let whole = pushed_bytes(BLOCK as usize, 1);
    let tail = pushed_bytes(500, 2);
    conn.send(&ingest_frame(&block(&cluster, 1), 0, whole.clone(), 1))
        .await
        .unwrap();
    conn.send(&ingest_frame(&block(&cluster, 3), 0, tail.clone(), 2))
        .await
        .unwrap();
    for (id, len) in [(1, BLOCK as u32), (2, 500)] {
        match conn.next(ANSWER_WITHIN).await {
            RawAnswer::Frame(f) => {
                assert_eq!(f.header.request_id(), id);
                assert_eq!(f.message, Message::IngestAck(IngestAck { offset: 0, len }));
            }
            other => panic!("push {id}: {other:?}"),
        }
    }
    let gets = cluster.origin_gets();
    assert_eq!(
        sha(&read(&cluster, &block(&cluster, 1), 0, BLOCK as u32).await),
        sha(&whole)
    );
    assert_eq!(
        sha(&read(&cluster, &block(&cluster, 1), 70_000, 9_000).await),
        sha(&whole[70_000..79_000])
    );
    assert_eq!(
        sha(&read(&cluster, &block(&cluster, 3), 0, 500).await),
        sha(&tail)
    );
    assert_eq!(
        cluster.origin_gets(),
        gets,
        "no origin fetch for pushed pages"
    );
    // Only block files, their metadata, the instance id and the local socket: no
    // staging file is left.
    let files = files_in(&dir);
    assert!(
        files.iter().all(|f| f.ends_with(".blk")
            || f.ends_with(".meta")
            || f == "instance"
            || f == "local.sock"),
        "{files:?}"
    );
    assert!(cluster.worker(0).store().get(&block(&cluster, 1)).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_cut_off_or_stalled_halfway_commits_nothing_and_leaves_nothing() {
    let cluster = sandbox().await;
    let dir = cluster.workers[0].cache_dir.clone();
    let target = block(&cluster, 2);
    let before = files_in(&dir);
    let frame = ingest_frame(&target, 0, pushed_bytes(BLOCK as usize, 3), 9);
    let half = frame.len() - (BLOCK as usize) / 2;

    // Cut off: half the bytes, then the end of the stream.
    let mut conn = ingester(&cluster).await;
    conn.send(&frame[..half]).await.unwrap();
    conn.finish_writing().await.unwrap();
    let (answers, end) = conn.reader.until_end(ANSWER_WITHIN).await;
    assert!(
        matches!(end, RawAnswer::Closed | RawAnswer::Failed(_)),
        "{end:?}"
    );
    assert!(
        answers.iter().all(
            |a| !matches!(a, RawAnswer::Frame(f) if matches!(f.message, Message::IngestAck(_)))
        ),
        "a cut push was acknowledged: {answers:?}"
    );

    // Stalled: half the bytes, then nothing, the connection kept open.
    let mut conn = ingester(&cluster).await;
    conn.send(&frame[..half]).await.unwrap();
    let (answers, end) = conn.reader.until_end(ANSWER_WITHIN).await;
    assert!(
        matches!(end, RawAnswer::Closed | RawAnswer::Failed(_)),
        "{end:?}"
    );
    match answers.as_slice() {
        [RawAnswer::Frame(f)] => match &f.message {
            Message::Error(e) => assert_eq!(e.code, ErrorCode::Timeout, "{e:?}"),
            other => panic!("a stalled push was answered {other:?}"),
        },
        other => panic!("a stalled push: {other:?}"),
    }

    // Nothing visible, nothing on disk.
    assert!(cluster.worker(0).store().get(&target).is_none());
    assert_eq!(files_in(&dir), before, "the cache folder changed");
    // The pages are filled from the origin as if no push had happened.
    let gets = cluster.origin_gets();
    let bytes = read(&cluster, &target, 1000, 20_000).await;
    assert_eq!(
        sha(&bytes),
        sha(&expected(&object(), 2 * BLOCK + 1000..2 * BLOCK + 21_000))
    );
    assert!(cluster.origin_gets() > gets, "the read was a fill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn put_object_through_the_cache_client_fills_every_block_for_readers() {
    let cluster = Cluster::start(ClusterConfig {
        workers: 3,
        generated: vec![object()],
        ..ClusterConfig::default()
    })
    .await;
    let id = ObjectId::s3("data", "pushed.bin").unwrap();
    let version = ObjectVersion::from_etag(&object().etag()).unwrap();
    let data = pushed_bytes(object().size as usize, 4);

    // A reader may not push; nothing is sent.
    let reader = cluster.client().await;
    match reader.put_object(&id, &version, &data).await {
        Err(talon_cache_client::CacheClientError::InvalidRequest(m)) => {
            assert!(m.contains("ingester"), "{m}")
        }
        other => panic!("a reader's put_object: {other:?}"),
    }

    let writer = cluster.client_with(|c| c.role = Role::Ingester).await;
    cluster.sync_client(&writer).await;
    writer.put_object(&id, &version, &data).await.unwrap();
    // Pushing again is harmless: present pages are kept, the answer is the same.
    writer.put_object(&id, &version, &data).await.unwrap();

    let gets = cluster.origin_gets();
    cluster.sync_client(&reader).await;
    let size = object().size;
    for range in [0..size, BLOCK - 100..2 * BLOCK + 7, 3 * BLOCK..size] {
        let got = talon_testkit::read_through(&reader, &id, &version, size, range.clone())
            .await
            .unwrap("a read of pushed bytes");
        assert_eq!(
            sha(&got),
            sha(&data[range.start as usize..range.end as usize]),
            "{range:?}"
        );
    }
    assert_eq!(cluster.origin_gets(), gets, "every block was a hit");
}
