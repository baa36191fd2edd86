//! The co-located fast path: a worker's local socket hands a reader on the same host
//! the block file's descriptor, and the reader reads the bytes itself. The bytes must be
//! exactly the origin's, whichever way they travel; an evicted block must not be pulled
//! out from under a read; a broken local socket must cost a TCP round trip, never a
//! failed read; and the socket must demand the cluster secret like the TCP plane.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::PathBuf;
use std::time::Duration;

use talon_cache_client::connection::{Answer, Connection, Endpoint};
use talon_core::cluster_auth::{ClusterSecret, Role};
use talon_core::wire::ReadRangeRequest;
use talon_core::{Message, ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, expected, read_through, wait_for};

const PAGE: u64 = 16 << 10;
const BLOCK: u64 = 256 << 10;

/// A cluster of `workers` whose workers offer their local sockets, the origin holding
/// `object`.
async fn local_cluster(workers: usize, object: &GeneratedObject) -> Cluster {
    Cluster::start(ClusterConfig {
        workers,
        generated: vec![object.clone()],
        local_sockets: true,
        ..ClusterConfig::default()
    })
    .await
}

fn sum_metric(cluster: &Cluster, name: &str) -> f64 {
    (0..cluster.config().workers)
        .map(|i| cluster.worker_metric(i, name))
        .sum()
}

fn local_socket(cluster: &Cluster, i: usize) -> PathBuf {
    cluster
        .worker(i)
        .local_socket
        .clone()
        .expect("the worker serves a local socket")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_reads_on_this_host_are_handed_off_and_equal_the_origins_bytes() {
    let size = 5 * BLOCK + 3 * PAGE + 99;
    let object = GeneratedObject::new("data", "local.bin", size, 41);
    let cluster = local_cluster(2, &object).await;
    let id = ObjectId::s3("data", "local.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    let ranges = [0..size, PAGE - 7..3 * BLOCK + 11, size - 99..size, 0..1];
    let local = cluster.client().await;
    let tcp = cluster.client_with(|c| c.local_reads = false).await;

    // Cold, then warm, through the local socket: the right bytes. A cold piece is
    // answered with the bytes its fill fetched (written into the block behind the
    // answer); once written, the worker sends no payload byte itself.
    for pass in ["fill", "hit"] {
        let (sent, handoffs, behind) = (
            sum_metric(&cluster, "talon_worker_cache_bytes_served_total"),
            sum_metric(&cluster, "talon_worker_file_handoffs_total"),
            sum_metric(&cluster, "talon_worker_written_behind_answers_total"),
        );
        for range in ranges.clone() {
            let bytes = read_through(&local, &id, &version, size, range.clone())
                .await
                .unwrap(pass);
            assert!(
                bytes == expected(&object, range.clone()),
                "{pass} {range:?}"
            );
        }
        assert_eq!(
            sum_metric(&cluster, "talon_worker_cache_bytes_served_total"),
            sent,
            "{pass}: no payload byte was sent from a block file"
        );
        if pass == "fill" {
            assert!(
                sum_metric(&cluster, "talon_worker_written_behind_answers_total") > behind,
                "cold pieces are answered from their fetched bytes"
            );
            cluster.fills_settled().await;
        } else {
            assert!(sum_metric(&cluster, "talon_worker_file_handoffs_total") >= handoffs + 4.0);
        }
    }

    // The same reads over TCP: the same bytes, sent by the workers.
    let gets = cluster.origin_gets();
    let (sent, handoffs) = (
        sum_metric(&cluster, "talon_worker_cache_bytes_served_total"),
        sum_metric(&cluster, "talon_worker_file_handoffs_total"),
    );
    for range in ranges {
        let bytes = read_through(&tcp, &id, &version, size, range.clone())
            .await
            .unwrap("tcp");
        assert!(bytes == expected(&object, range.clone()), "tcp {range:?}");
    }
    assert_eq!(cluster.origin_gets(), gets, "all hits");
    assert!(sum_metric(&cluster, "talon_worker_cache_bytes_served_total") > sent);
    assert_eq!(
        sum_metric(&cluster, "talon_worker_file_handoffs_total"),
        handoffs,
        "a client with local reads off never gets a descriptor"
    );
}

/// Waits until the workers have counted `n` file handoffs (a worker counts one after
/// its frame is sent, so the reader may finish first), and says how many they counted.
async fn handoffs_reach(cluster: &Cluster, n: f64) -> f64 {
    wait_for(
        &format!("{n} file handoffs counted"),
        Duration::from_secs(10),
        || async {
            let now = sum_metric(cluster, "talon_worker_file_handoffs_total");
            (now >= n).then_some(now)
        },
    )
    .await
}

/// Reads `range` of `object` (`size` bytes) through `client` and checks its bytes.
async fn read_checked(
    client: &talon_cache_client::CacheClient,
    object: &GeneratedObject,
    size: u64,
    range: std::ops::Range<u64>,
) {
    let id = ObjectId::s3(&object.bucket, &object.key).unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    let bytes = read_through(client, &id, &version, size, range.clone())
        .await
        .unwrap("read");
    assert!(bytes == expected(object, range.clone()), "{range:?}");
}

/// A client whose held files last a minute, so that no hold ends during a test.
async fn holding_client(cluster: &Cluster) -> talon_cache_client::CacheClient {
    cluster
        .client_with(|c| c.held_files.hold = Duration::from_secs(60))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_blocks_vouched_bytes_are_read_again_without_asking_its_worker() {
    let size = 2 * BLOCK + 5 * PAGE;
    let object = GeneratedObject::new("data", "held.bin", size, 43);
    let cluster = local_cluster(1, &object).await;
    let id = ObjectId::s3("data", "held.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    let client = holding_client(&cluster).await;
    let handoffs = || sum_metric(&cluster, "talon_worker_file_handoffs_total");
    let read = |range| read_checked(&client, &object, size, range);
    read(0..size).await;
    cluster.fills_settled().await;
    let origin = (cluster.origin_gets(), cluster.origin_heads());
    // The first hits are handed over, and vouch for what they name.
    let before = handoffs();
    read(PAGE..BLOCK + 3).await;
    // Two pieces (one per block), each handed off.
    let vouched = handoffs_reach(&cluster, before + 2.0).await;
    assert_eq!(
        vouched,
        before + 2.0,
        "hits on the local socket are handed off"
    );
    let talon_cache_client::HeldFileStats {
        reads: held_reads,
        held,
        ..
    } = client.held_file_stats();
    assert_eq!(held, 2, "one file per block");
    // Within what was vouched: read again from the held files, the worker not asked.
    for _ in 0..5 {
        read(PAGE + 100..BLOCK).await;
        read(BLOCK..BLOCK + 3).await;
    }
    assert_eq!(handoffs(), vouched, "no worker was asked");
    assert_eq!(client.held_file_stats().reads, held_reads + 10);
    // Bytes never vouched for are asked of the worker, then held too.
    read(0..PAGE).await;
    assert_eq!(handoffs_reach(&cluster, vouched + 1.0).await, vouched + 1.0);
    read(0..10).await;
    assert_eq!(handoffs(), vouched + 1.0);
    // With no hold, every piece is asked.
    let asking = cluster
        .client_with(|c| c.held_files.hold = Duration::ZERO)
        .await;
    for _ in 0..3 {
        let bytes = read_through(&asking, &id, &version, size, 0..10)
            .await
            .unwrap("no hold");
        assert!(bytes == expected(&object, 0..10));
    }
    assert_eq!(handoffs_reach(&cluster, vouched + 4.0).await, vouched + 4.0);
    assert_eq!(
        asking.held_file_stats(),
        talon_cache_client::HeldFileStats::default()
    );
    assert_eq!(
        (cluster.origin_gets(), cluster.origin_heads()),
        origin,
        "every read after the fill was a hit: the origin was asked nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_a_held_file_do_not_keep_a_dead_workers_circuit_closed() {
    let object = GeneratedObject::new("data", "dead.bin", BLOCK, 45);
    let mut cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object.clone()],
        local_sockets: true,
        origin_fallback: true,
        ..ClusterConfig::default()
    })
    .await;
    let client = holding_client(&cluster).await;
    let read = |range| read_checked(&client, &object, BLOCK, range);
    read(0..BLOCK).await;
    cluster.fills_settled().await;
    read(PAGE..2 * PAGE).await;
    assert_eq!(client.held_file_stats().held, 1, "the block's file is held");
    cluster.kill_worker(0);
    // Held bytes keep coming from the held file; the rest fails on the dead worker and
    // comes from the origin. The held reads are no answer of the worker's: its failures
    // stay consecutive and its circuit opens.
    for _ in 0..3 {
        let origin = (cluster.origin_gets(), cluster.origin_heads());
        read(PAGE..2 * PAGE).await;
        assert_eq!(
            (cluster.origin_gets(), cluster.origin_heads()),
            origin,
            "a held read asks the origin nothing"
        );
        read(0..PAGE).await;
        assert!(
            cluster.origin_gets() > origin.0,
            "the rest comes from the origin"
        );
    }
    let views = client.worker_health();
    assert!(
        views.iter().any(|w| w.opened >= 1),
        "the dead worker's circuit opened: {views:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_file_changed_behind_the_workers_back_is_not_read_again() {
    let object = GeneratedObject::new("data", "rot.bin", BLOCK, 44);
    let cluster = local_cluster(1, &object).await;
    let id = ObjectId::s3("data", "rot.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    let client = holding_client(&cluster).await;
    let all = 0..BLOCK;
    let first = read_through(&client, &id, &version, BLOCK, all.clone())
        .await
        .unwrap("fill");
    assert!(first == expected(&object, all.clone()));
    cluster.fills_settled().await;
    let hit = read_through(&client, &id, &version, BLOCK, all.clone())
        .await
        .unwrap("hit");
    assert!(hit == expected(&object, all.clone()));
    assert_eq!(client.held_file_stats().held, 1, "the block's file is held");

    // Bit rot "repaired" by someone else: bytes of a vouched page rewritten in place.
    // Writing moves the file's modification time; set explicitly, as the file clock
    // may not tick between the fill and this write.
    let path = cluster.block_file(0, &cluster.block_id(&id, &version, 0));
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&[0xAA; 64], PAGE + 10).unwrap();
    file.set_modified(std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(7))
        .unwrap();
    drop(file);
    let gets = cluster.origin_gets();
    let again = read_through(&client, &id, &version, BLOCK, all.clone())
        .await
        .unwrap("after the change");
    assert!(
        again == expected(&object, all),
        "the changed file was not read from the held descriptor"
    );
    assert!(
        cluster.origin_gets() > gets,
        "the worker re-verified the page, dropped it and fetched it again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_off_block_file_keeps_its_bytes_after_eviction() {
    // Room for about three blocks: reading five more evicts the first. Every fill is
    // durable before its answer, so that the first (cold) read is answered with the
    // block file's descriptor rather than the fetched bytes.
    let objects: Vec<GeneratedObject> = (0..6)
        .map(|i| GeneratedObject::new("data", format!("evict-{i}.bin"), BLOCK, 50 + i))
        .collect();
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        capacity_bytes: 3 * BLOCK + BLOCK / 2,
        generated: objects.clone(),
        local_sockets: true,
        loader: talon_worker::loader::LoaderConfig {
            write_behind_bytes: 0,
            ..ClusterConfig::default().loader
        },
        ..ClusterConfig::default()
    })
    .await;
    let secret = cluster.cluster_secret().clone();
    let conn = Connection::connect(
        &Endpoint::Local(local_socket(&cluster, 0)),
        "w0",
        Duration::from_secs(5),
        &secret,
        Role::Reader,
    )
    .await
    .unwrap();
    let id = ObjectId::s3("data", "evict-0.bin").unwrap();
    let version = ObjectVersion::from_etag(&objects[0].etag()).unwrap();
    let block = cluster.block_id(&id, &version, 0);
    let read = Message::ReadRange(ReadRangeRequest {
        block: block.clone(),
        object_size: BLOCK,
        offset: PAGE,
        len: u32::try_from(BLOCK - 2 * PAGE).unwrap(),
    });
    let Answer::File {
        file,
        offset,
        len,
        from_origin,
    } = conn
        .call(
            &read,
            &talon_cache_client::DeadlineBudget::default().worker,
            std::time::Instant::now() + Duration::from_secs(5),
            None,
        )
        .await
        .unwrap()
    else {
        panic!("a cached read on the local socket is handed off");
    };
    assert_eq!(
        (offset, u64::from(len), from_origin),
        (PAGE, BLOCK - 2 * PAGE, true)
    );
    let path = cluster.block_file(0, &block);
    assert!(path.exists());

    // Fill the cache with the other objects until the first block is evicted.
    let client = cluster.client().await;
    for object in &objects[1..] {
        let other = ObjectId::s3("data", &object.key).unwrap();
        let v = ObjectVersion::from_etag(&object.etag()).unwrap();
        let bytes = read_through(&client, &other, &v, BLOCK, 0..BLOCK)
            .await
            .unwrap("filler");
        assert!(bytes == expected(object, 0..BLOCK));
    }
    assert!(
        !path.exists(),
        "the first block was evicted and its file unlinked"
    );
    assert!(cluster.worker_metric(0, "talon_worker_evictions_total") >= 1.0);

    // The descriptor still reads the block's bytes, and cannot write them.
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, offset).unwrap();
    assert!(bytes == expected(&objects[0], PAGE..BLOCK - PAGE));
    assert!(
        file.write_at(b"x", offset).is_err(),
        "the handed-off descriptor is read-only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_local_socket_costs_a_tcp_read_not_an_error() {
    let size = 3 * BLOCK;
    let object = GeneratedObject::new("data", "nosock.bin", size, 61);
    let cluster = local_cluster(2, &object).await;
    // The sockets vanish (an operator's cleanup, another mount namespace's view):
    // readers find nothing at the advertised paths.
    for i in 0..2 {
        std::fs::remove_file(local_socket(&cluster, i)).unwrap();
    }
    let client = cluster.client().await;
    let id = ObjectId::s3("data", "nosock.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    for _ in 0..2 {
        let bytes = read_through(&client, &id, &version, size, 0..size)
            .await
            .unwrap("over tcp");
        assert!(bytes == expected(&object, 0..size));
        // The cold pass's pages written behind it: the second pass is then served from
        // the block files (a read of pages still being written is answered from the
        // fill's bytes, since 2026-12-06, and counted apart).
        cluster.fills_settled().await;
    }
    assert_eq!(
        sum_metric(&cluster, "talon_worker_file_handoffs_total"),
        0.0
    );
    // Counted once a reply is written whole, which may be just after the reader has
    // its bytes: waited for, not read once.
    talon_testkit::wait_for(
        "the TCP bytes to be counted",
        Duration::from_secs(10),
        || {
            let served = sum_metric(&cluster, "talon_worker_cache_bytes_served_total");
            std::future::ready((served >= size as f64).then_some(()))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_socket_is_owner_only_and_demands_the_cluster_secret() {
    let object = GeneratedObject::new("data", "secret.bin", BLOCK, 71);
    let cluster = local_cluster(1, &object).await;
    let path = local_socket(&cluster, 0);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "only the worker's user may connect");

    let wrong = ClusterSecret::new(b"not this cluster's secret at all").unwrap();
    let refused = Connection::connect(
        &Endpoint::Local(path.clone()),
        "w0",
        Duration::from_secs(5),
        &wrong,
        Role::Reader,
    )
    .await;
    assert!(refused.is_err(), "another secret is refused");

    // A request before the Hello exchange gets an error frame, never a descriptor.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut raw = tokio::net::UnixStream::connect(&path).await.unwrap();
    let id = ObjectId::s3("data", "secret.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    let read = Message::ReadRange(ReadRangeRequest {
        block: cluster.block_id(&id, &version, 0),
        object_size: BLOCK,
        offset: 0,
        len: 16,
    });
    raw.write_all(&read.encode(1).unwrap()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut answer))
        .await
        .expect("the worker closes the connection")
        .unwrap();
    let header = talon_core::wire::FrameHeader::decode(answer[..16].try_into().unwrap()).unwrap();
    assert_eq!(
        header.message_type(),
        talon_core::wire::MessageType::Error,
        "an unauthenticated request is refused"
    );
    assert_eq!(
        cluster.worker_metric(0, "talon_worker_file_handoffs_total"),
        0.0
    );
    assert_eq!(cluster.origin_gets(), 0, "nothing was read on its behalf");
}

/// Reads one whole frame (header, then payload) from `sock`.
async fn read_frame(sock: &mut tokio::net::UnixStream) -> Message {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; talon_core::wire::HEADER_LEN];
    sock.read_exact(&mut head).await.unwrap();
    let header = talon_core::wire::FrameHeader::decode(&head).unwrap();
    let mut payload = vec![0u8; header.payload_len() as usize];
    sock.read_exact(&mut payload).await.unwrap();
    Message::decode(&header, &payload).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_silent_on_its_local_socket_sends_the_piece_to_the_next_worker() {
    use talon_core::cluster_auth::HelloSide;
    use tokio::io::AsyncWriteExt;
    let object = GeneratedObject::new("data", "silent.bin", BLOCK, 81);
    let cluster = local_cluster(2, &object).await;
    let id = ObjectId::s3("data", "silent.bin").unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    let block = cluster.block_id(&id, &version, 0);
    let owner = cluster.placement().await.locate_top_k(&block, 1)[0]
        .id
        .clone();
    let owner_id = owner.clone();
    let (owner, other) = {
        let i = cluster.worker_index(&owner);
        (i, 1 - i)
    };
    // The owner's local socket is replaced by one that completes the Hello exchange
    // (it knows the cluster secret) and then never answers.
    let path = local_socket(&cluster, owner);
    std::fs::remove_file(&path).unwrap();
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let secret = cluster.cluster_secret().clone();
    let (accepted_tx, mut accepted) = tokio::sync::mpsc::unbounded_channel::<()>();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let _ = accepted_tx.send(());
            let Message::Hello { role, nonce, .. } = read_frame(&mut sock).await else {
                panic!("a Hello first")
            };
            let worker_nonce = [9u8; 16];
            let reply = Message::HelloReply {
                nonce: worker_nonce,
                proof: secret.hello_proof(
                    HelloSide::Worker,
                    role,
                    &owner_id,
                    &nonce,
                    &worker_nonce,
                ),
                worker: owner_id.clone(),
            };
            sock.write_all(&reply.encode(0).unwrap()).await.unwrap();
            let Message::HelloProof { .. } = read_frame(&mut sock).await else {
                panic!("then the proof")
            };
            sock.write_all(&Message::Welcome.encode(0).unwrap())
                .await
                .unwrap();
            held.push(sock);
        }
    });
    let client = cluster
        .client_with(|c| {
            c.deadlines = talon_cache_client::DeadlineBudget::from_total(Duration::from_secs(3))
                .with_worker(
                    Some(Duration::from_millis(500)),
                    Some(Duration::from_millis(500)),
                );
        })
        .await;
    let owner_sent = cluster.worker_metric(owner, "talon_worker_cache_bytes_served_total");
    let bytes = read_through(&client, &id, &version, BLOCK, 0..BLOCK)
        .await
        .unwrap("through the next worker");
    assert!(bytes == expected(&object, 0..BLOCK));
    assert!(
        accepted.try_recv().is_ok(),
        "the owner's local socket was asked"
    );
    assert_eq!(
        cluster.worker_metric(owner, "talon_worker_cache_bytes_served_total"),
        owner_sent,
        "the silent owner was not asked again over TCP"
    );
    assert!(
        cluster.worker_metric(other, "talon_worker_file_handoffs_total")
            + cluster.worker_metric(other, "talon_worker_written_behind_answers_total")
            >= 1.0,
        "the next worker answered the piece"
    );
    silent.abort();
}
