//! The Hello relay of the red-team review (RT-01): a process that holds no cluster
//! secret binds the address the membership gives a member that is gone (a crashed
//! worker's port, a reused IP) and relays every connection it gets to another, live
//! worker, rewriting the bytes of every answer. The Hello names the worker and both
//! proofs are bound to that name, so the readers refuse the relayed Hello: the reads
//! of the gone member's objects go to their next owners and return the origin's
//! bytes, and the relay never carries a reader's proof, so it never holds a session
//! (an ingester's included) on the live worker. Before the names were bound, the
//! relay served its own bytes for every block of the gone member.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use talon_core::cluster_auth::Role;
use talon_core::wire::{HEADER_LEN, MessageType};
use talon_core::{ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, read_whole_checked};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BLOCK: u64 = 256 << 10;

/// What the relay saw.
#[derive(Debug, Default)]
struct Seen {
    connections: AtomicU64,
    hello_proofs: AtomicU64,
    rewritten: AtomicU64,
}

/// Copies frames from `from` to `to`, calling `each` with every frame's type and
/// payload before it goes on.
async fn frames<R, W>(mut from: R, mut to: W, mut each: impl FnMut(u8, &mut Vec<u8>))
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut head = [0u8; HEADER_LEN];
    while from.read_exact(&mut head).await.is_ok() {
        let len = u32::from_be_bytes([head[12], head[13], head[14], head[15]]) as usize;
        let mut payload = vec![0u8; len];
        if from.read_exact(&mut payload).await.is_err() {
            return;
        }
        each(head[3], &mut payload);
        if to.write_all(&head).await.is_err() || to.write_all(&payload).await.is_err() {
            return;
        }
    }
}

/// Listens on loopback and relays every connection to `target`, frame by frame:
/// counting the peers' HelloProofs and replacing every ReadRangeReply's bytes.
async fn relay(target: SocketAddr, seen: Arc<Seen>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((peer, _)) = listener.accept().await {
            seen.connections.fetch_add(1, Ordering::SeqCst);
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(worker) = TcpStream::connect(target).await else {
                    return;
                };
                let (peer_rd, peer_wr) = peer.into_split();
                let (worker_rd, worker_wr) = worker.into_split();
                let up = frames(peer_rd, worker_wr, |kind, _| {
                    if kind == MessageType::HelloProof as u8 {
                        seen.hello_proofs.fetch_add(1, Ordering::SeqCst);
                    }
                });
                let down = frames(worker_rd, peer_wr, |kind, payload| {
                    if kind == MessageType::ReadRangeReply as u8 {
                        payload.fill(b'!');
                        seen.rewritten.fetch_add(1, Ordering::SeqCst);
                    }
                });
                tokio::select! {
                    () = up => {}
                    () = down => {}
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_at_a_gone_members_address_cannot_pass_for_it() {
    let objects: Vec<GeneratedObject> = (0..24)
        .map(|i| GeneratedObject::new("data", format!("o{i}.bin"), BLOCK, 500 + i))
        .collect();
    let mut cluster = Cluster::start(ClusterConfig {
        workers: 2,
        generated: objects.clone(),
        local_sockets: false,
        ..ClusterConfig::default()
    })
    .await;
    let seen = Arc::new(Seen::default());
    let relay_addr = relay(cluster.worker(0).addr, seen.clone()).await;
    // w2 is placed at the relay's address; the relay never reaches it.
    cluster.add_worker_advertising(relay_addr).await;
    // A gateway's role: it may push its writes into the cache.
    let client = cluster.client_with(|c| c.role = Role::Ingester).await;
    cluster.sync_client(&client).await;
    let placement = cluster.placement().await;
    let of_w2: Vec<&GeneratedObject> = objects
        .iter()
        .filter(|o| {
            let id = ObjectId::s3(o.bucket.clone(), o.key.clone()).unwrap();
            let version = ObjectVersion::from_etag(&o.etag()).unwrap();
            placement
                .locate(&cluster.block_id(&id, &version, 0))
                .is_some_and(|m| m.id == "w2")
        })
        .collect();
    assert!(!of_w2.is_empty(), "w2 owns some objects");

    for object in &of_w2 {
        read_whole_checked(&client, object, "a read of the gone member's object").await;
    }
    assert!(
        seen.connections.load(Ordering::SeqCst) > 0,
        "the reader dialled the relay"
    );
    assert_eq!(
        (
            seen.hello_proofs.load(Ordering::SeqCst),
            seen.rewritten.load(Ordering::SeqCst)
        ),
        (0, 0),
        "the relay carried a reader's proof or an answer"
    );
}
