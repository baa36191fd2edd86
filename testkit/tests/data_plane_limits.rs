//! The data plane's own limits, on whichever plane the run uses (both in CI): the
//! connection cap holds further authenticated connections until one ends, connections
//! that never say Hello wait apart and cannot take the readers' places, and an idle
//! connection is closed after the idle timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use talon_core::cluster_auth::Role;
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::raw::{RawAnswer, RawConnection};
use talon_testkit::{Cluster, ClusterConfig, WorkerProcess, wait_for};

async fn cluster() -> Cluster {
    Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![GeneratedObject::new("gen", "limits.bin", 1 << 20, 4)],
        ..ClusterConfig::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_wait_until_one_ends() {
    let cluster = cluster().await;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let process = WorkerProcess::start_logged(
        &cluster,
        "wcap",
        &dir.path().join("cache"),
        &["--max-connections", "2"],
        &[],
    )
    .await;
    let addr: std::net::SocketAddr = process.addr.parse().unwrap();
    let secret = cluster.cluster_secret().clone();
    let first = RawConnection::authenticated(addr, &secret, Role::Reader).await;
    let _second = RawConnection::authenticated(addr, &secret, Role::Reader).await;
    // The third is connected by the kernel but not served: its Hello gets no answer.
    let mut third = tokio::spawn(async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        talon_cache_client::hello::authenticate(
            &mut stream,
            &secret,
            Role::Reader,
            None,
            Duration::from_secs(20),
        )
        .await
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(700), &mut third)
            .await
            .is_err(),
        "a connection beyond the cap was served"
    );
    // One ends: the waiting connection is admitted and authenticated.
    drop(first);
    let done = tokio::time::timeout(Duration::from_secs(10), third)
        .await
        .expect("the waiting connection was admitted once one ended")
        .unwrap();
    assert!(done.is_ok(), "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let cluster = cluster().await;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let process = WorkerProcess::start_logged(
        &cluster,
        "widle",
        &dir.path().join("cache"),
        &["--idle-timeout-ms", "300"],
        &[],
    )
    .await;
    let addr: std::net::SocketAddr = process.addr.parse().unwrap();
    let mut idle = RawConnection::authenticated(addr, cluster.cluster_secret(), Role::Reader).await;
    let started = std::time::Instant::now();
    match idle.next(Duration::from_secs(10)).await {
        RawAnswer::Closed | RawAnswer::Failed(_) => {}
        other => panic!("an idle connection was not closed: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// The red-team review's RT-11: connections that never say Hello held every place of
/// the data plane (each until the Hello deadline), so gateways could not connect:
/// route `cache` quietly read the origin, `cache-only` answered 503. They now wait in a
/// pool of their own (here 64), an address holding at most 32 of it once it is half
/// full: with more of them open than the places, readers from elsewhere authenticate
/// while those are still held, and the ones past their address's share are closed at
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_never_say_hello_do_not_hold_the_readers_places() {
    let cluster = cluster().await;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let process = WorkerProcess::start_logged(
        &cluster,
        "wsquat",
        &dir.path().join("cache"),
        &["--max-connections", "4", "--max-unauthenticated", "64"],
        &[],
    )
    .await;
    let addr: std::net::SocketAddr = process.addr.parse().unwrap();
    // 40 silent connections from another address: more than the places, more than one
    // address's share of the Hello pool.
    let mut silent = Vec::new();
    for _ in 0..40 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(std::net::SocketAddr::from(([127, 0, 0, 2], 0)))
            .unwrap();
        silent.push(socket.connect(addr).await.unwrap());
    }
    // Readers from this address fill every place while the silent ones are open.
    let mut readers = Vec::new();
    for _ in 0..4 {
        readers
            .push(RawConnection::authenticated(addr, cluster.cluster_secret(), Role::Reader).await);
    }
    // Still open, those the pool took: the readers did not wait for their Hello deadline.
    let open_now = |conns: &mut Vec<tokio::net::TcpStream>| {
        conns
            .iter_mut()
            .filter(|c| {
                let mut byte = [0u8; 1];
                matches!(c.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            })
            .count()
    };
    let held = open_now(&mut silent);
    assert!(
        held >= 32,
        "only {held} of the silent connections were still open"
    );
    // Past the address's share, closed at once (read: end of stream).
    let refused = wait_for(
        "the connections past the share to be closed",
        Duration::from_secs(10),
        || {
            let mut n = 0;
            for c in &mut silent {
                let mut byte = [0u8; 1];
                if matches!(c.try_read(&mut byte), Ok(0)) {
                    n += 1;
                }
            }
            async move { (n >= 8).then_some(n) }
        },
    )
    .await;
    assert_eq!(refused, 8, "one address holds 32 places in the Hello pool");
    drop(readers);
}
