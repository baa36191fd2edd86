//! The gateway's listeners are bounded (SEC-06) and uploads are bounded by progress, not
//! by total time (SEC-14): a half-sent header is cut on the fronts and the admin
//! listener; an upload slower than the request deadline still succeeds as long as its
//! body keeps moving; an upload whose body stops fails and stores nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use talon_gateway::config::{Backend, Identities, IdentitiesFile, Limits, Route, S3Front};
use talon_gateway::{GatewayConfig, RunningGateway};
use talon_origin_stub::{RunningStub, StubConfig};
use talon_protocols::access::AnonymousAccess;
use talon_protocols::origin::{OriginClient, OriginConfig, Origins};
use talon_protocols::s3::request::S3Addressing;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn env(limits: Limits) -> (RunningStub, RunningGateway) {
    let stub = talon_origin_stub::start(StubConfig::default())
        .await
        .unwrap();
    std::fs::create_dir_all(stub.data_dir().join("demo")).unwrap();
    let s3 = OriginClient::new(OriginConfig::S3 {
        endpoint: stub.s3_url().unwrap(),
        region: "us-east-1".into(),
        credentials: None,
        virtual_hosted: false,
    })
    .unwrap();
    let gw = talon_gateway::start(GatewayConfig {
        s3: Some(S3Front {
            listen: "127.0.0.1:0".parse().unwrap(),
            route: Route::Origin,
            backend: Backend::S3,
            addressing: S3Addressing::PathStyle,
            region: "us-east-1".into(),
        }),
        azure: None,
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        origins: Origins {
            s3: Some(s3),
            azure: None,
        },
        cache: None,
        identities: Identities::from_parts(IdentitiesFile {
            anonymous: AnonymousAccess::ReadWrite,
            ..IdentitiesFile::default()
        })
        .unwrap(),
        freshness: talon_gateway::Freshness::within(Duration::from_millis(100)),
        limits,
        tls: None,
        acl_file: None,
        cache_status: true,
        access_log: None,
    })
    .await
    .unwrap();
    (stub, gw)
}

async fn read_until_closed(conn: &mut TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), conn.read_to_end(&mut out))
        .await
        .expect("the gateway closes the connection")
        .ok();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn half_sent_headers_are_cut_on_the_front_and_the_admin_listener() {
    let (_stub, gw) = env(Limits {
        header_read_timeout: Duration::from_millis(300),
        ..Limits::default()
    })
    .await;
    for addr in [gw.s3_addr.unwrap(), gw.admin_addr.unwrap()] {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"GET /demo/x HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        read_until_closed(&mut conn).await;
    }
    gw.shutdown().await;
}

/// The body arrives in two halves with a pause between them longer than the request
/// deadline (the pause only paces the client; nothing waits on it).
async fn paced_put(gw: &RunningGateway, key: &str, pause: Duration) -> String {
    let mut conn = TcpStream::connect(gw.s3_addr.unwrap()).await.unwrap();
    conn.write_all(
        format!("PUT /demo/{key} HTTP/1.1\r\nhost: x\r\ncontent-length: 8\r\nconnection: close\r\n\r\nfirst")
            .as_bytes(),
    )
    .await
    .unwrap();
    tokio::time::sleep(pause).await;
    let _ = conn.write_all(b"end").await;
    read_until_closed(&mut conn).await
}

#[tokio::test]
async fn uploads_are_bounded_by_progress_not_by_total_time() {
    let (stub, gw) = env(Limits {
        request_deadline: Duration::from_millis(200),
        upload_idle_timeout: Duration::from_secs(5),
        ..Limits::default()
    })
    .await;
    let answer = paced_put(&gw, "slow.txt", Duration::from_millis(600)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        std::fs::read(stub.data_dir().join("demo/slow.txt")).unwrap(),
        b"firstend"
    );
    gw.shutdown().await;

    let (stub, gw) = env(Limits {
        upload_idle_timeout: Duration::from_millis(200),
        ..Limits::default()
    })
    .await;
    let answer = paced_put(&gw, "stalled.txt", Duration::from_secs(2)).await;
    assert!(answer.contains("RequestTimeout"), "{answer}");
    assert!(!stub.data_dir().join("demo/stalled.txt").exists());
    gw.shutdown().await;
}

/// A connection over the front's connection cap is told to come back in the
/// protocol's words (issue 13, "overload is said, not hidden"): 503 SlowDown with
/// `Retry-After` and `Connection: close`, before the gateway reads its request, where
/// it used to be closed unanswered (a reset to the client's SDK).
#[tokio::test]
async fn a_connection_over_the_cap_gets_slow_down_with_retry_after() {
    let (stub, gw) = env(Limits {
        max_connections: 1,
        ..Limits::default()
    })
    .await;
    let front = gw.s3_addr.unwrap();
    // The one connection the cap allows, busy with a request in progress: an upload
    // whose body has not all come (a connection between requests would be cut to make
    // room for the new one instead).
    let mut held = TcpStream::connect(front).await.unwrap();
    held.write_all(
        b"PUT /demo/slow.txt HTTP/1.1\r\nHost: x\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\ncontent-length: 100\r\n\r\nfirst",
    )
    .await
    .unwrap();
    // Streaming to the origin: the request is in progress.
    talon_testkit::wait_for(
        "the upload to reach the origin",
        Duration::from_secs(10),
        || async {
            (stub
                .metrics()
                .requests_of(talon_core::Backend::S3, "PutObject")
                > 0)
            .then_some(())
        },
    )
    .await;

    let mut over = TcpStream::connect(front).await.unwrap();
    over.write_all(b"GET /demo/absent HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut over).await;
    let lower = answer.to_ascii_lowercase();
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    for line in ["retry-after: 1", "connection: close", "x-amz-request-id: "] {
        assert!(lower.contains(line), "no {line} in {answer}");
    }
    assert!(answer.contains("<Code>SlowDown</Code>"), "{answer}");
    drop(held);
    gw.shutdown().await;
}
