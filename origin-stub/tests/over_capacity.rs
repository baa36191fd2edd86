//! The stub's fronts answer a connection over their cap as the gateway's do (one
//! protocol rule, `talon_protocols::answer::over_capacity_answer`): 503 SlowDown (S3)
//! or ServerBusy (Azure) with `Retry-After`, unread, then closed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use talon_origin_stub::StubConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A request on a fresh connection to `addr`, and everything read until it closes
/// (or, with `keep`, until the answer's head, the connection then returned open).
async fn ask(addr: SocketAddr, path: &str, keep: bool) -> (String, TcpStream) {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nx-ms-version: 2025-01-05\r\n\r\n");
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    let read = async {
        while !(keep && got.ends_with(b"\r\n\r\n")) {
            match conn.read(&mut byte).await {
                Ok(0) | Err(_) => break,
                Ok(_) => got.push(byte[0]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("an answer");
    (String::from_utf8_lossy(&got).into_owned(), conn)
}

#[tokio::test]
async fn a_connection_over_the_stubs_cap_gets_its_protocols_slow_down() {
    let stub = talon_origin_stub::start(StubConfig {
        max_connections: 1,
        ..StubConfig::default()
    })
    .await
    .unwrap();
    for (addr, path, code) in [
        (stub.s3_addr.unwrap(), "/absent/key", "SlowDown"),
        (
            stub.azure_addr.unwrap(),
            "/devstoreaccount1/absent/blob",
            "ServerBusy",
        ),
    ] {
        let (head, _held) = ask(addr, path, true).await;
        assert!(
            !head.starts_with("HTTP/1.1 503"),
            "the first is served: {head}"
        );
        let (answer, _) = ask(addr, path, false).await;
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("retry-after: 1"),
            "{answer}"
        );
        assert!(answer.contains(&format!("<Code>{code}</Code>")), "{answer}");
    }
}
