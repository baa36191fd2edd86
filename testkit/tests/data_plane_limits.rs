//! The data plane's own limits, on whichever plane the run uses (both in CI): the
//! connection cap holds further connections in the accept queue until one ends, and an
//! idle connection is closed after the idle timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use talon_core::cluster_auth::Role;
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::raw::{RawAnswer, RawConnection};
use talon_testkit::{Cluster, ClusterConfig, WorkerProcess};

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
