//! The authenticated cluster on the data plane (SEC-05 and SEC-11 of the security
//! review): a peer must finish the Hello exchange with the cluster secret before any
//! other frame; a wrong secret, a replayed Hello, a request before Hello or an Ingest
//! from a reader get an error frame and a closed connection, and nothing reaches the
//! origin or the worker's store; a reader refuses a "worker" that cannot prove the
//! secret; a frame dribbled in byte by byte is cut at its deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use talon_core::cluster_auth::{ClusterSecret, HELLO_VERSION, HelloSide, Role};
use talon_core::wire::{IngestMeta, IngestRequest, ReadRangeRequest};
use talon_core::{ErrorCode, Message, ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::raw::{RawAnswer, RawConnection};
use talon_testkit::{Cluster, ClusterConfig};

const BLOCK: u64 = 256 << 10;
const WITHIN: Duration = Duration::from_secs(10);

fn object() -> GeneratedObject {
    GeneratedObject::new("data", "secret.bin", 2 * BLOCK, 9)
}

async fn cluster() -> Cluster {
    Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object()],
        ..ClusterConfig::default()
    })
    .await
}

fn read(cluster: &Cluster) -> ReadRangeRequest {
    ReadRangeRequest {
        block: cluster.block_id(
            &ObjectId::s3("data", "secret.bin").unwrap(),
            &ObjectVersion::from_etag(&object().etag()).unwrap(),
            0,
        ),
        object_size: object().size,
        offset: 0,
        len: 4096,
    }
}

/// What a refused connection got: one error frame's code, and then the end.
async fn refusal(conn: &mut RawConnection) -> ErrorCode {
    let (answers, end) = conn.reader.until_end(WITHIN).await;
    assert!(
        matches!(end, RawAnswer::Closed | RawAnswer::Failed(_)),
        "the connection stays open: {end:?} after {answers:?}"
    );
    let codes: Vec<ErrorCode> = answers
        .iter()
        .filter_map(|a| match a {
            RawAnswer::Frame(f) => match &f.message {
                Message::Error(e) => Some(e.code),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(codes.len(), 1, "{answers:?}");
    codes[0]
}

/// Nothing was read from the origin and nothing was cached.
fn untouched(cluster: &Cluster) {
    assert_eq!(
        cluster.origin_gets(),
        0,
        "a refused peer made the worker read the origin"
    );
    let file = cluster.block_file(0, &read(cluster).block);
    assert!(!file.exists(), "a refused peer left {}", file.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_before_hello_is_refused() {
    let cluster = cluster().await;
    let addr = cluster.worker(0).addr;
    for first in [
        Message::ReadRange(read(&cluster)),
        Message::Ping { nonce: 1 },
        Message::HelloProof { proof: [0; 32] },
    ] {
        let mut conn = RawConnection::connect(addr).await;
        conn.send(&first.encode(3).unwrap()).await.unwrap();
        assert_eq!(
            refusal(&mut conn).await,
            ErrorCode::Unauthenticated,
            "{first:?}"
        );
    }
    untouched(&cluster);
}

/// The peer side of Hello by hand: returns the worker's nonce after checking nothing.
async fn hello(conn: &mut RawConnection, role: Role, nonce: [u8; 16]) -> [u8; 16] {
    let hello = Message::Hello {
        version: HELLO_VERSION,
        role,
        nonce,
    };
    conn.send(&hello.encode(1).unwrap()).await.unwrap();
    match conn.next(WITHIN).await {
        RawAnswer::Frame(f) => match f.message {
            Message::HelloReply { nonce, .. } => nonce,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_or_a_replayed_hello_is_refused() {
    let cluster = cluster().await;
    let addr = cluster.worker(0).addr;
    // Another cluster's secret.
    let other = ClusterSecret::new(b"not this cluster's secret").unwrap();
    let mut conn = RawConnection::connect(addr).await;
    let nonce = *b"peer-nonce-00001";
    let worker_nonce = hello(&mut conn, Role::Reader, nonce).await;
    let proof = other.hello_proof(HelloSide::Peer, Role::Reader, "w0", &nonce, &worker_nonce);
    let mut bytes = Message::HelloProof { proof }.encode(2).unwrap();
    bytes.extend(Message::ReadRange(read(&cluster)).encode(3).unwrap());
    conn.send(&bytes).await.unwrap();
    assert_eq!(refusal(&mut conn).await, ErrorCode::Unauthenticated);

    // A valid exchange recorded on one connection...
    let secret = cluster.cluster_secret();
    let mut first = RawConnection::connect(addr).await;
    let worker_nonce = hello(&mut first, Role::Reader, nonce).await;
    let proof = secret.hello_proof(HelloSide::Peer, Role::Reader, "w0", &nonce, &worker_nonce);
    let recorded = Message::HelloProof { proof }.encode(2).unwrap();
    first.send(&recorded).await.unwrap();
    assert!(
        matches!(first.next(WITHIN).await, RawAnswer::Frame(f) if f.message == Message::Welcome)
    );
    // ... and replayed on another: the worker's new nonce makes the proof worthless.
    let mut replay = RawConnection::connect(addr).await;
    let fresh = hello(&mut replay, Role::Reader, nonce).await;
    assert_ne!(
        fresh, worker_nonce,
        "every connection gets a fresh worker nonce"
    );
    let mut bytes = recorded.clone();
    bytes.extend(Message::ReadRange(read(&cluster)).encode(3).unwrap());
    replay.send(&bytes).await.unwrap();
    assert_eq!(refusal(&mut replay).await, ErrorCode::Unauthenticated);
    // A proof for one role does not serve another.
    let mut conn = RawConnection::connect(addr).await;
    let worker_nonce = hello(&mut conn, Role::Ingester, nonce).await;
    let proof = secret.hello_proof(HelloSide::Peer, Role::Reader, "w0", &nonce, &worker_nonce);
    conn.send(&Message::HelloProof { proof }.encode(2).unwrap())
        .await
        .unwrap();
    assert_eq!(refusal(&mut conn).await, ErrorCode::Unauthenticated);
    untouched(&cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_may_not_ingest() {
    let cluster = cluster().await;
    let addr = cluster.worker(0).addr;
    let req = read(&cluster);
    let ingest = Message::Ingest(IngestRequest {
        meta: IngestMeta {
            block: req.block.clone(),
            object_size: object().size,
            offset: 0,
        },
        data: b"EVIL".repeat(1024),
    });
    let mut conn = RawConnection::authenticated(addr, cluster.cluster_secret(), Role::Reader).await;
    conn.send(&ingest.encode(7).unwrap()).await.unwrap();
    assert_eq!(refusal(&mut conn).await, ErrorCode::Forbidden);
    untouched(&cluster);
    // The reader's reads still work, with the origin's bytes.
    let mut conn = RawConnection::authenticated(addr, cluster.cluster_secret(), Role::Reader).await;
    conn.send(&Message::ReadRange(req).encode(8).unwrap())
        .await
        .unwrap();
    match conn.next(WITHIN).await {
        RawAnswer::Data { bytes, .. } => {
            assert_eq!(bytes, talon_testkit::expected(&object(), 0..4096));
        }
        other => panic!("{other:?}"),
    }
}

/// A "worker" that answers Hello without knowing the secret (SEC-04's fake worker):
/// the cache client's connection refuses it before sending a single request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_refuses_a_worker_that_cannot_prove_the_secret() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (requests_tx, requests_rx) = tokio::sync::oneshot::channel::<usize>();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = sock.read(&mut buf).await.unwrap();
        let hello = Message::HelloReply {
            nonce: [7; 16],
            proof: [0xAB; 32],
            worker: "w0".into(),
        };
        let _ = n;
        sock.write_all(&hello.encode(0).unwrap()).await.unwrap();
        // Whatever the peer sends next: a proof would be a protocol step, a request a bug.
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(WITHIN, sock.read_to_end(&mut rest)).await;
        let _ = requests_tx.send(rest.len());
    });
    let secret = ClusterSecret::new(b"the reader's real cluster secret").unwrap();
    let err = talon_cache_client::connection::Connection::connect(
        &talon_cache_client::connection::Endpoint::Tcp(addr.to_string()),
        "w0",
        Duration::from_secs(5),
        &secret,
        Role::Reader,
    )
    .await
    .err()
    .expect("refused");
    assert!(
        err.to_string().contains("cannot prove the cluster secret"),
        "{err}"
    );
    assert_eq!(
        requests_rx.await.unwrap(),
        0,
        "the reader sent nothing more"
    );
}

/// SEC-11: the frame deadline runs from a frame's first byte, so one byte every 500 ms
/// (each read well inside the 2 s frame timeout) is still cut at about 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_dribbled_byte_by_byte_is_cut_at_its_deadline() {
    let cluster = cluster().await;
    let addr: SocketAddr = cluster.worker(0).addr;
    let mut conn = RawConnection::authenticated(addr, cluster.cluster_secret(), Role::Reader).await;
    let frame = Message::ReadRange(read(&cluster)).encode(9).unwrap();
    let started = Instant::now();
    let mut cut = false;
    for byte in &frame[..frame.len() - 1] {
        // Paces the peer; what is asserted is the worker's answer below.
        tokio::time::sleep(Duration::from_millis(500)).await;
        if conn.send(&[*byte]).await.is_err() {
            cut = true;
            break;
        }
        if started.elapsed() > Duration::from_secs(8) {
            break;
        }
    }
    let (answers, end) = conn.reader.until_end(WITHIN).await;
    assert!(
        cut || matches!(end, RawAnswer::Closed | RawAnswer::Failed(_)),
        "still open after {:?}: {answers:?} {end:?}",
        started.elapsed()
    );
    assert!(
        answers.iter().any(|a| matches!(a, RawAnswer::Frame(f) if matches!(&f.message, Message::Error(e) if e.code == ErrorCode::Timeout))),
        "{answers:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

/// SEC-05: reads of versions the origin does not have (here by an authenticated reader)
/// fail without leaving a block file each behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_fills_leave_no_empty_block_files() {
    let cluster = cluster().await;
    let addr = cluster.worker(0).addr;
    let mut conn = RawConnection::authenticated(addr, cluster.cluster_secret(), Role::Reader).await;
    for i in 0..20u32 {
        let mut req = read(&cluster);
        req.block = cluster.block_id(
            &ObjectId::s3("data", "secret.bin").unwrap(),
            &ObjectVersion::new(format!("\"fake-{i}\"")).unwrap(),
            0,
        );
        conn.send(&Message::ReadRange(req).encode(100 + i).unwrap())
            .await
            .unwrap();
        match conn.next(WITHIN).await {
            RawAnswer::Frame(f) => assert!(matches!(f.message, Message::Error(_)), "{f:?}"),
            other => panic!("{other:?}"),
        }
    }
    let blocks = cluster.block_file(0, &read(&cluster).block);
    let dir = blocks.parent().unwrap();
    let left = std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
    assert_eq!(
        left,
        0,
        "failed fills left {left} files in {}",
        dir.display()
    );
}
