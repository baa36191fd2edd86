//! Bucket, container and key names through the gateway (SEC-03 of the security review):
//! a name outside the S3 or Azure rules is refused at the front with the protocol's
//! error and nothing reaches the origin (its request counter and its folder are
//! unchanged); a key with URL syntax in it is stored under exactly that key.
//!
//! Requests go out on raw sockets, so the paths arrive byte for byte as written here
//! (an HTTP client library would normalise `..` and friends before sending).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use talon_gateway::config::{
    AzureFront, Backend, Identities, IdentitiesFile, Limits, Route, S3Front,
};
use talon_gateway::{GatewayConfig, RunningGateway};
use talon_origin_stub::{RunningStub, StubConfig};
use talon_protocols::access::AnonymousAccess;
use talon_protocols::azure::request::AzureAddressing;
use talon_protocols::origin::{OriginClient, OriginConfig, Origins};
use talon_protocols::s3::request::S3Addressing;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ACCOUNT: &str = "devstoreaccount1";

/// A gateway open to anonymous writes, so that only the names decide.
async fn env() -> (RunningStub, RunningGateway) {
    let stub = talon_origin_stub::start(StubConfig::default())
        .await
        .unwrap();
    std::fs::create_dir_all(stub.data_dir().join("demo")).unwrap();
    std::fs::write(stub.data_dir().join("demo/hello.txt"), b"hello").unwrap();
    let s3 = OriginClient::new(OriginConfig::S3 {
        endpoint: stub.s3_url().unwrap(),
        region: "us-east-1".into(),
        credentials: None,
        virtual_hosted: false,
    })
    .unwrap();
    let azure = OriginClient::new(OriginConfig::Azure {
        endpoint: format!("{}/{ACCOUNT}", stub.azure_url().unwrap()),
        account: ACCOUNT.into(),
        key: None,
        sas: None,
    })
    .unwrap();
    let gateway = talon_gateway::start(GatewayConfig {
        s3: Some(S3Front {
            listen: "127.0.0.1:0".parse().unwrap(),
            route: Route::Origin,
            backend: Backend::S3,
            addressing: S3Addressing::VirtualHosted {
                domain: "s3.local".into(),
            },
            region: "us-east-1".into(),
        }),
        azure: Some(AzureFront {
            listen: "127.0.0.1:0".parse().unwrap(),
            route: Route::Origin,
            backend: Backend::Azure,
            addressing: AzureAddressing::default(),
        }),
        admin_listen: None,
        origins: Origins {
            s3: Some(s3),
            azure: Some((ACCOUNT.into(), azure)),
        },
        cache: None,
        identities: Identities::from_parts(IdentitiesFile {
            anonymous: AnonymousAccess::ReadWrite,
            ..IdentitiesFile::default()
        })
        .unwrap(),
        freshness: talon_gateway::Freshness::within(Duration::from_millis(100)),
        limits: Limits::default(),
        tls: None,
        acl_file: None,
        cache_status: true,
        access_log: None,
    })
    .await
    .unwrap();
    (stub, gateway)
}

/// Sends one request exactly as written; returns the status and the whole answer.
async fn raw(
    addr: SocketAddr,
    method: &str,
    target: &str,
    host: &str,
    body: &[u8],
) -> (u16, String) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {target} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {}\r\nx-ms-version: 2021-08-06\r\nx-ms-blob-type: BlockBlob\r\nconnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut answer))
        .await
        .expect("an answer")
        .unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// The names of everything in the origin's folder, recursively.
fn folder(stub: &RunningStub) -> Vec<String> {
    fn walk(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
            if p.is_dir() {
                walk(&p, base, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(stub.data_dir(), stub.data_dir(), &mut out);
    out.sort();
    out
}

#[tokio::test]
async fn hostile_bucket_names_are_refused_before_the_origin_sees_anything() {
    let (stub, gw) = env().await;
    let s3 = gw.s3_addr.unwrap();
    let host = s3.to_string();
    let long = "b".repeat(256);
    let cases: Vec<(&str, String, &[u8])> = vec![
        ("PUT", "/newbkt%3Fx".into(), b""),
        ("PUT", "/victim%3Fpolicy".into(), b"{}"),
        ("DELETE", "/demo%3FpublicAccessBlock".into(), b""),
        ("DELETE", "/demo%3Fx%3D/hello.txt".into(), b""),
        ("GET", "/demo%23x/hello.txt".into(), b""),
        ("GET", "/%2E%2E/demo/hello.txt".into(), b""),
        ("GET", "/../demo/hello.txt".into(), b""),
        ("GET", "/evil.example%40demo/hello.txt".into(), b""),
        ("GET", "/demo%3A81/hello.txt".into(), b""),
        ("GET", "/de%5Cmo/hello.txt".into(), b""),
        ("GET", "/de%01mo/hello.txt".into(), b""),
        ("GET", "/de%2Fmo/hello.txt".into(), b""),
        ("GET", format!("/{long}/hello.txt"), b""),
        ("PUT", "/Legacy_But_New".into(), b""),
    ];
    let before = (stub.metrics().requests_total(), folder(&stub));
    for (method, path, body) in &cases {
        let (status, text) = raw(s3, method, path, &host, body).await;
        assert_eq!(status, 400, "{method} {path}: {text}");
        assert!(
            text.contains("<Code>InvalidBucketName</Code>"),
            "{method} {path}: {text}"
        );
    }
    // Virtual-hosted: the bucket comes from the host name.
    for bad in ["evil@demo.s3.local", "de_mo%3F.s3.local"] {
        let (status, text) = raw(s3, "GET", "/hello.txt", bad, b"").await;
        assert_eq!(status, 400, "{bad}: {text}");
    }
    let az = gw.azure_addr.unwrap();
    let host = az.to_string();
    for path in [
        "/devstoreaccount1/bad%3Fx?restype=container",
        "/devstoreaccount1/demo%23x/hello.txt",
        "/devstoreaccount1/%2E%2E/hello.txt",
        "/devstoreaccount1/Demo/hello.txt",
        "/devstoreaccount1/de%40mo/hello.txt",
        "/devstore%3Faccount1/demo/hello.txt",
    ] {
        for method in ["GET", "PUT", "DELETE"] {
            let (status, text) = raw(az, method, path, &host, b"x").await;
            assert_eq!(status, 400, "{method} {path}: {text}");
            assert!(
                text.contains("<Code>InvalidResourceName</Code>"),
                "{method} {path}: {text}"
            );
        }
    }
    assert_eq!(
        (stub.metrics().requests_total(), folder(&stub)),
        before,
        "a refused name reached the origin"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn keys_with_url_syntax_are_stored_under_exactly_that_key() {
    let (stub, gw) = env().await;
    let s3 = gw.s3_addr.unwrap();
    let host = s3.to_string();
    for (encoded, key) in [
        ("a%3Fpolicy", "a?policy"),
        ("a%23b", "a#b"),
        ("u%40h%3A1", "u@h:1"),
        ("x%2Fy", "x/y"),
        ("sp%20ace%2Bplus", "sp ace+plus"),
    ] {
        let (status, text) = raw(
            s3,
            "PUT",
            &format!("/demo/{encoded}"),
            &host,
            key.as_bytes(),
        )
        .await;
        assert_eq!(status, 200, "{key}: {text}");
        let stored = std::fs::read(stub.data_dir().join("demo").join(key)).unwrap();
        assert_eq!(stored, key.as_bytes(), "{key}");
        let (status, text) = raw(s3, "GET", &format!("/demo/{encoded}"), &host, b"").await;
        assert_eq!(status, 200, "{key}: {text}");
        assert!(text.ends_with(key), "{key}: {text}");
    }
    let before = (stub.metrics().requests_total(), folder(&stub));
    let long = "k".repeat(1025);
    for path in [
        "/demo/%2E%2E/escape".to_owned(),
        "/demo/a/%2e%2e/hello.txt".to_owned(),
        "/demo/a/./b".to_owned(),
        format!("/demo/{long}"),
    ] {
        let (status, text) = raw(s3, "PUT", &path, &host, b"x").await;
        assert!(
            (400..500).contains(&status),
            "{path} was not refused: {text}"
        );
    }
    assert_eq!(
        (stub.metrics().requests_total(), folder(&stub)),
        before,
        "a refused key reached the origin"
    );
    gw.shutdown().await;
}
