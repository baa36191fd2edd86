//! SEC-05's last part: the first requester of a block no longer decides its object
//! size for good. A block cached for a wrong size is discarded as soon as a request
//! with the origin's size arrives, and that read is served; a request whose size the
//! origin contradicts is refused (and changes nothing).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use talon_core::wire::ReadRangeRequest;
use talon_core::{ErrorCode, Message, ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::raw::{RawAnswer, RawConnection};
use talon_testkit::{Cluster, ClusterConfig, expected};

const BLOCK: u64 = 256 << 10;

fn object() -> GeneratedObject {
    GeneratedObject::new("data", "sized.bin", 3 * BLOCK + 500, 12)
}

async fn read(cluster: &Cluster, object_size: u64, offset: u64, len: u32) -> RawAnswer {
    let block = cluster.block_id(
        &ObjectId::s3("data", "sized.bin").unwrap(),
        &ObjectVersion::from_etag(&object().etag()).unwrap(),
        BLOCK,
    );
    let req = ReadRangeRequest {
        block,
        object_size,
        offset,
        len,
    };
    RawConnection::read_once(
        cluster.worker(0).addr,
        cluster.cluster_secret(),
        req,
        Duration::from_secs(10),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_first_object_size_does_not_lock_the_object_out() {
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object()],
        ..ClusterConfig::default()
    })
    .await;
    let size = object().size;
    // The first requester says the object ends 1,000 bytes into block 1: the block is
    // made 1,000 bytes long and its first page filled (those bytes are the origin's).
    let wrong = BLOCK + 1000;
    match read(&cluster, wrong, 0, 100).await {
        RawAnswer::Data { bytes, .. } => {
            assert!(bytes == expected(&object(), BLOCK..BLOCK + 100))
        }
        other => panic!("the first read: {other:?}"),
    }
    // A reader with the right size is served, the whole range, from the origin's bytes.
    match read(&cluster, size, 0, 60_000).await {
        RawAnswer::Data { bytes, .. } => assert!(
            bytes == expected(&object(), BLOCK..BLOCK + 60_000),
            "the bytes of the corrected block"
        ),
        other => panic!("a read with the origin's size was not served: {other:?}"),
    }
    let block = cluster.worker(0).store().get(&cluster.block_id(
        &ObjectId::s3("data", "sized.bin").unwrap(),
        &ObjectVersion::from_etag(&object().etag()).unwrap(),
        BLOCK,
    ));
    assert_eq!(
        block.map(|b| b.object_size),
        Some(size),
        "the block now has the origin's size"
    );
    // Now the wrong size is the one refused, and the block stays as it is.
    match read(&cluster, wrong, 0, 100).await {
        RawAnswer::Frame(f) => match f.message {
            Message::Error(e) => assert_eq!(e.code, ErrorCode::InvalidRequest, "{e:?}"),
            other => panic!("a wrong size was answered {other:?}"),
        },
        other => panic!("a wrong size: {other:?}"),
    }
    match read(&cluster, size, 100_000, 1000).await {
        RawAnswer::Data { bytes, .. } => {
            assert!(bytes == expected(&object(), BLOCK + 100_000..BLOCK + 101_000))
        }
        other => panic!("the right size after a refused wrong one: {other:?}"),
    }
}
