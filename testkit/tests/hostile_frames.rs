//! Garbage, truncated and oversized frames sent to a worker's data plane get an error
//! frame and a closed connection (or just a closed connection), never a hang, and the
//! worker keeps serving every other connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use talon_core::cluster_auth::{ClusterSecret, Role};
use talon_core::wire::{ErrorReply, HEADER_LEN, MAGIC, MessageType, ReadRangeRequest, StatRequest};
use talon_core::{ErrorCode, Message, ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::raw::{RawAnswer, RawConnection};
use talon_testkit::{Cluster, ClusterConfig, assert_reads_back, expected};

const BLOCK: u64 = 256 << 10;
/// Longer than the sandbox's frame timeout (2 s), so a worker that waits for it is
/// seen to answer; short enough that a hang fails the test quickly.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

fn object() -> GeneratedObject {
    GeneratedObject::new("data", "target.bin", 3 * BLOCK + 500, 71)
}

fn id() -> ObjectId {
    ObjectId::s3("data", "target.bin").unwrap()
}

fn read_request(cluster: &Cluster, offset_in_object: u64, len: u32) -> ReadRangeRequest {
    let object = object();
    let block_offset = offset_in_object / BLOCK * BLOCK;
    ReadRangeRequest {
        block: cluster.block_id(
            &id(),
            &ObjectVersion::from_etag(&object.etag()).unwrap(),
            block_offset,
        ),
        object_size: object.size,
        offset: offset_in_object - block_offset,
        len,
    }
}

fn header(ty: u8, request_id: u32, payload_len: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..2].copy_from_slice(&MAGIC.to_be_bytes());
    h[2] = 1;
    h[3] = ty;
    h[8..12].copy_from_slice(&request_id.to_be_bytes());
    h[12..16].copy_from_slice(&payload_len.to_be_bytes());
    h
}

/// Sends `bytes` on a fresh connection and expects the worker to end the connection
/// within [`ANSWER_WITHIN`], after at most one error frame; returns that frame's code.
async fn rejected(
    secret: &ClusterSecret,
    addr: SocketAddr,
    bytes: &[u8],
    then_eof: bool,
    what: &str,
) -> Option<ErrorCode> {
    // As an authenticated peer (one that may ingest): what the frames themselves earn.
    let mut conn = RawConnection::authenticated(addr, secret, Role::Ingester).await;
    // The worker may close before reading everything; that is its right.
    let _ = conn.send(bytes).await;
    if then_eof {
        let _ = conn.finish_writing().await;
    }
    let (answers, end) = conn.reader.until_end(ANSWER_WITHIN).await;
    assert!(
        matches!(end, RawAnswer::Closed | RawAnswer::Failed(_)),
        "{what}: the connection was not closed: {end:?} (after {answers:?})"
    );
    assert!(
        answers.len() <= 1,
        "{what}: more than one answer: {answers:?}"
    );
    answers.into_iter().next().map(|a| match a {
        RawAnswer::Frame(f) => match f.message {
            Message::Error(ErrorReply { code, .. }) => code,
            other => panic!("{what}: answered {other:?}, not an error"),
        },
        other => panic!("{what}: answered {other:?}, not an error"),
    })
}

/// The worker answers a well-formed read on a fresh connection, byte for byte.
async fn still_serves(cluster: &Cluster, addr: SocketAddr) {
    let mut conn = RawConnection::authenticated(addr, cluster.cluster_secret(), Role::Reader).await;
    let req = read_request(cluster, BLOCK + 1000, 4500);
    let range = BLOCK + 1000..BLOCK + 5500;
    conn.send(&Message::ReadRange(req).encode(99).unwrap())
        .await
        .unwrap();
    match conn.next(ANSWER_WITHIN).await {
        RawAnswer::Data { request_id, bytes } => {
            assert_eq!(request_id, 99);
            assert!(
                bytes == expected(&object(), range),
                "the bytes of a fresh read"
            );
        }
        other => panic!("a fresh connection was not served: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_frames_get_an_error_or_a_close_and_the_worker_keeps_serving() {
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object()],
        ..ClusterConfig::default()
    })
    .await;
    let addr = cluster.worker(0).addr;
    let secret = cluster.cluster_secret().clone();
    let valid = Message::ReadRange(read_request(&cluster, 100, 1000))
        .encode(5)
        .unwrap();

    // Not our protocol at all.
    let code = rejected(
        &secret,
        addr,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        false,
        "HTTP",
    )
    .await;
    assert_eq!(code, Some(ErrorCode::InvalidRequest), "bad magic");
    // A bad magic in an otherwise valid frame.
    let mut bad = valid.clone();
    bad[0] ^= 0xFF;
    assert_eq!(
        rejected(&secret, addr, &bad, false, "bad magic").await,
        Some(ErrorCode::InvalidRequest)
    );
    // Another protocol version.
    let mut bad = valid.clone();
    bad[2] = 2;
    assert_eq!(
        rejected(&secret, addr, &bad, false, "version 2").await,
        Some(ErrorCode::Unsupported)
    );
    // A message type nobody defined.
    let code = rejected(&secret, addr, &header(0x42, 1, 8), false, "unknown type").await;
    assert_eq!(code, Some(ErrorCode::Unsupported));
    // Undefined flag bits, and a non-zero reserved field.
    let mut bad = valid.clone();
    bad[5] = 0x80;
    assert_eq!(
        rejected(&secret, addr, &bad, false, "flags").await,
        Some(ErrorCode::InvalidRequest)
    );
    let mut bad = valid.clone();
    bad[7] = 1;
    assert_eq!(
        rejected(&secret, addr, &bad, false, "reserved").await,
        Some(ErrorCode::InvalidRequest)
    );
    // A header announcing a payload over the type's cap: refused at once, not awaited
    // (the answer says "too large", not "timed out").
    let code = rejected(
        &secret,
        addr,
        &header(MessageType::Stat.as_u8(), 3, 1 << 30),
        false,
        "1 GiB Stat",
    )
    .await;
    assert_eq!(code, Some(ErrorCode::TooLarge));
    let code = rejected(
        &secret,
        addr,
        &header(MessageType::Ping.as_u8(), 3, 9),
        false,
        "9-byte Ping",
    )
    .await;
    assert_eq!(code, Some(ErrorCode::TooLarge));
    // A reply sent as a request, with its payload.
    let reply = Message::ReadRangeReply(vec![7; 64]).encode(4).unwrap();
    assert_eq!(
        rejected(&secret, addr, &reply, false, "a reply").await,
        Some(ErrorCode::InvalidRequest)
    );
    // A ReadRange whose range crosses the end of its block (the length patched after
    // encoding, which refuses to build it).
    let mut bad = valid.clone();
    let n = bad.len();
    bad[n - 4..].copy_from_slice(&(BLOCK as u32).to_be_bytes());
    let code = rejected(&secret, addr, &bad, false, "range across the block").await;
    assert_eq!(code, Some(ErrorCode::InvalidRequest));
    // ... and one past the end of the object.
    let past = Message::ReadRange(read_request(&cluster, 3 * BLOCK, 100))
        .encode(6)
        .unwrap();
    let mut bad = past.clone();
    let n = bad.len();
    bad[n - 4..].copy_from_slice(&1000u32.to_be_bytes());
    let code = rejected(&secret, addr, &bad, false, "range past the object").await;
    assert_eq!(code, Some(ErrorCode::RangeNotSatisfiable));
    // A payload that does not parse (a Stat of garbage).
    let mut bad = header(MessageType::Stat.as_u8(), 8, 32).to_vec();
    bad.extend_from_slice(&[0xAB; 32]);
    assert_eq!(
        rejected(&secret, addr, &bad, false, "garbage Stat").await,
        Some(ErrorCode::InvalidRequest)
    );
    // A header, then the client hangs up: nothing to answer, the connection just ends.
    let code = rejected(
        &secret,
        addr,
        &header(MessageType::Stat.as_u8(), 9, 100),
        true,
        "header then EOF",
    )
    .await;
    assert_eq!(code, None, "no one is left to answer");
    // Half a frame, or fewer bytes than a header, then silence: the frame timeout
    // answers and closes (both at once, to wait for it once).
    let (half_frame, half_header) = tokio::join!(
        rejected(
            &secret,
            addr,
            &valid[..valid.len() / 2],
            false,
            "half a frame"
        ),
        rejected(&secret, addr, &valid[..7], false, "half a header"),
    );
    assert_eq!(half_frame, Some(ErrorCode::Timeout));
    assert_eq!(half_header, Some(ErrorCode::Timeout));

    still_serves(&cluster, addr).await;
    let client = cluster.client().await;
    assert_reads_back(&client, &id(), &object(), 0..object().size).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_or_hostile_connection_does_not_stop_the_others() {
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object()],
        ..ClusterConfig::default()
    })
    .await;
    let addr = cluster.worker(0).addr;
    let secret = cluster.cluster_secret().clone();
    // A connection stuck in the middle of a frame, held open while others are served.
    let valid = Message::Stat(StatRequest {
        object: id(),
        expected_version: None,
        max_age_ms: None,
        first_read: None,
    })
    .encode(1)
    .unwrap();
    let mut stalled = RawConnection::authenticated(addr, &secret, Role::Reader).await;
    stalled.send(&valid[..HEADER_LEN + 3]).await.unwrap();
    // Fifty connections of garbage at once.
    let garbage: Vec<_> = (0..50u8)
        .map(|i| {
            let secret = secret.clone();
            tokio::spawn(async move {
                let bytes: Vec<u8> = (0..200u32)
                    .map(|j| (j as u8).wrapping_mul(31) ^ i)
                    .collect();
                rejected(&secret, addr, &bytes, false, &format!("garbage {i}")).await
            })
        })
        .collect();
    let client = cluster.client().await;
    assert_reads_back(&client, &id(), &object(), 1..object().size - 1).await;
    still_serves(&cluster, addr).await;
    for g in garbage {
        g.await.unwrap();
    }
    // The stalled connection is answered by the frame timeout, then closed.
    let (answers, end) = stalled.reader.until_end(ANSWER_WITHIN).await;
    assert!(
        matches!(end, RawAnswer::Closed | RawAnswer::Failed(_)),
        "{end:?}"
    );
    assert!(
        matches!(
            answers.as_slice(),
            [RawAnswer::Frame(f)] if matches!(f.message, Message::Error(ErrorReply { code: ErrorCode::Timeout, .. }))
        ),
        "{answers:?}"
    );
    still_serves(&cluster, addr).await;
    // A reply type sent as a request is refused on a connection that stays usable.
    let mut conn = RawConnection::authenticated(addr, &secret, Role::Reader).await;
    conn.send(&Message::Pong { nonce: 5 }.encode(10).unwrap())
        .await
        .unwrap();
    conn.send(&Message::Ping { nonce: 6 }.encode(11).unwrap())
        .await
        .unwrap();
    match conn.next(ANSWER_WITHIN).await {
        RawAnswer::Frame(f) => {
            assert_eq!(f.header.request_id(), 10);
            assert!(
                matches!(
                    f.message,
                    Message::Error(ErrorReply {
                        code: ErrorCode::InvalidRequest,
                        ..
                    })
                ),
                "{f:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    match conn.next(ANSWER_WITHIN).await {
        RawAnswer::Frame(f) => {
            assert_eq!(f.header.request_id(), 11);
            assert_eq!(f.message, Message::Pong { nonce: 6 });
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_hold_up_no_one_else() {
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object()],
        ..ClusterConfig::default()
    })
    .await;
    let addr = cluster.worker(0).addr;
    let client = cluster.client().await;
    assert_reads_back(&client, &id(), &object(), 0..object().size).await;
    // Eight connections ask for 64 whole blocks each (16 MiB of answers apiece, far
    // more than loopback's socket buffers hold) and never read a byte: their writers
    // sit on full sockets. The worker runs on this test's two runtime threads, so a
    // writer that blocked a thread while waiting would starve everyone else.
    let mut sleepers = Vec::new();
    for c in 0..8u32 {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut requests = Vec::new();
        for i in 0..64u32 {
            let request = Message::ReadRange(read_request(&cluster, 0, BLOCK as u32));
            requests.extend_from_slice(&request.encode(c * 100 + i + 1).unwrap());
        }
        tokio::io::AsyncWriteExt::write_all(&mut stream, &requests)
            .await
            .unwrap();
        sleepers.push(stream);
    }
    assert_reads_back(&client, &id(), &object(), 1..object().size - 1).await;
    still_serves(&cluster, addr).await;
    drop(sleepers);
    still_serves(&cluster, addr).await;
}
