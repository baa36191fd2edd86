//! SEC-12 of the security review: an origin that answers a GET's headers and then sends
//! nothing, or never answers at all, fails the request after the read timeout instead of
//! holding it (and a worker's origin slot) forever. A HEAD still works meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use talon_protocols::ErrorKind;
use talon_protocols::origin::{OriginClient, OriginConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// HEAD answers; GET sends headers (or, for `/silent`, nothing) and stalls.
async fn stalling_origin() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = sock.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    req.extend_from_slice(&buf[..n]);
                }
                let text = String::from_utf8_lossy(&req).into_owned();
                if text.starts_with("HEAD") {
                    let _ = sock
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 1048576\r\netag: \"v1\"\r\n\r\n",
                        )
                        .await;
                } else if !text.contains("/silent") {
                    let _ = sock
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1048576\r\netag: \"v1\"\r\n\r\nfirst bytes")
                        .await;
                }
                // Then nothing, with the connection held open.
                tokio::time::sleep(Duration::from_secs(600)).await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_stalled_origin_fails_the_request_after_the_read_timeout() {
    let endpoint = stalling_origin().await;
    let origin = OriginClient::with_read_timeout(
        OriginConfig::S3 {
            endpoint,
            region: "us-east-1".into(),
            credentials: None,
            virtual_hosted: false,
        },
        Duration::from_millis(300),
    )
    .unwrap();
    assert_eq!(origin.head("bkt", "k").await.unwrap().size, 1 << 20);
    // No answer at all.
    let started = Instant::now();
    let Err(err) = origin.get("bkt", "silent", None, None).await else {
        panic!("a silent origin answered");
    };
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // Headers, then a body that stops.
    let started = Instant::now();
    let resp = origin.get("bkt", "k", None, None).await.unwrap();
    let mut body = resp.body;
    let mut failed = false;
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), body.next())
        .await
        .expect("the body fails, it does not hang")
    {
        if chunk.is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "a stalled body ended as if complete");
    assert!(started.elapsed() < Duration::from_secs(10));
    // The message names no URL (SEC-18).
    assert!(!err.message().contains("http://"), "{}", err.message());
}

/// SEC-17: an origin (or a proxy before it) that ignores `If-Match` and answers another
/// version: a pinned read refuses its bytes instead of filing them under the pinned one.
#[tokio::test]
async fn a_pinned_read_refuses_another_version() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                loop {
                    let n = sock.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    // Always version 2, whatever If-Match said.
                    let _ = sock
                        .write_all(b"HTTP/1.1 206 Partial Content\r\ncontent-length: 4\r\ncontent-range: bytes 0-3/10\r\netag: \"v2\"\r\n\r\nNEW!")
                        .await;
                }
            });
        }
    });
    let origin = OriginClient::new(OriginConfig::S3 {
        endpoint: format!("http://{addr}"),
        region: "us-east-1".into(),
        credentials: None,
        virtual_hosted: false,
    })
    .unwrap();
    let range = talon_protocols::range::ByteRange { start: 0, end: 4 };
    let err = origin
        .get_pinned_range("bkt", "k", range, "\"v1\"")
        .await
        .expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::PreconditionFailed, "{err}");
    let bytes = origin
        .get_pinned_range("bkt", "k", range, "\"v2\"")
        .await
        .unwrap();
    assert_eq!(&bytes[..], b"NEW!");
}
