//! One access policy for both fronts (SEC-02 and SEC-13 of the security review): a
//! front with no credentials does not start unless anonymous access is asked for;
//! anonymous access is read-only unless writes are asked for; S3 credentials never
//! leave the Azure front open over the same data; `response-*` overrides need a
//! signature. Every refusal is checked at the origin's folder too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use talon_gateway::config::{
    AzureAccount, AzureFront, Backend, Identities, IdentitiesFile, Limits, Route, S3Front, S3Key,
};
use talon_gateway::{GatewayConfig, GatewayError, RunningGateway};
use talon_origin_stub::{EMULATOR_AZURE_KEY, RunningStub, StubConfig};
use talon_protocols::access::AnonymousAccess;
use talon_protocols::azure::request::AzureAddressing;
use talon_protocols::origin::{OriginClient, OriginConfig, Origins};
use talon_protocols::s3::request::S3Addressing;

const ACCOUNT: &str = "devstoreaccount1";
const HELLO: &[u8] = b"hello, world";

async fn stub() -> RunningStub {
    let stub = talon_origin_stub::start(StubConfig::default())
        .await
        .unwrap();
    std::fs::create_dir_all(stub.data_dir().join("demo")).unwrap();
    std::fs::write(stub.data_dir().join("demo/hello.txt"), HELLO).unwrap();
    stub
}

fn config(stub: &RunningStub, identities: IdentitiesFile) -> GatewayConfig {
    let s3 = OriginClient::new(OriginConfig::S3 {
        endpoint: stub.s3_url().unwrap(),
        region: "us-east-1".into(),
        credentials: None,
        virtual_hosted: false,
    })
    .unwrap();
    GatewayConfig {
        s3: Some(S3Front {
            listen: "127.0.0.1:0".parse().unwrap(),
            route: Route::Origin,
            backend: Backend::S3,
            addressing: S3Addressing::PathStyle,
            region: "us-east-1".into(),
        }),
        // The Azure front over the S3 origin: the same data as the S3 front.
        azure: Some(AzureFront {
            listen: "127.0.0.1:0".parse().unwrap(),
            route: Route::Origin,
            backend: Backend::S3,
            addressing: AzureAddressing::default(),
        }),
        admin_listen: None,
        origins: Origins {
            s3: Some(s3),
            azure: None,
        },
        cache: None,
        identities: Identities::from_parts(identities).unwrap(),
        freshness: talon_gateway::Freshness::within(Duration::from_millis(100)),
        limits: Limits::default(),
        tls: None,
    }
}

fn s3_keys() -> Vec<S3Key> {
    vec![S3Key {
        access_key: "AK".into(),
        secret_key: "SK".into(),
    }]
}

/// Unsigned requests of every kind against both fronts; returns (what, status).
async fn unsigned(gw: &RunningGateway) -> Vec<(String, u16)> {
    let http = reqwest::Client::new();
    let s3 = gw.s3_url().unwrap();
    let az = gw.azure_url().unwrap();
    let requests = [
        http.get(format!("{s3}/demo/hello.txt")),
        http.put(format!("{s3}/demo/new.txt")).body("x"),
        http.delete(format!("{s3}/demo/hello.txt")),
        http.get(format!("{az}/demo/hello.txt")),
        http.put(format!("{az}/demo/new.txt"))
            .header("x-ms-blob-type", "BlockBlob")
            .body("x"),
        http.delete(format!("{az}/demo/hello.txt")),
        http.put(format!("{az}/newcontainer?restype=container")),
    ];
    let mut out = Vec::new();
    for r in requests {
        let r = r.header("x-ms-version", "2021-08-06").build().unwrap();
        let what = format!("{} {}", r.method(), r.url());
        out.push((what, http.execute(r).await.unwrap().status().as_u16()));
    }
    out
}

fn assert_unchanged(stub: &RunningStub) {
    assert_eq!(
        std::fs::read(stub.data_dir().join("demo/hello.txt")).unwrap(),
        HELLO
    );
    assert!(!stub.data_dir().join("demo/new.txt").exists());
    assert!(!stub.data_dir().join("newcontainer").exists());
}

#[tokio::test]
async fn a_front_without_credentials_refuses_to_start() {
    let stub = stub().await;
    // S3 keys only, the Azure front on: the Azure front has nobody to authenticate.
    let only_s3 = IdentitiesFile {
        s3: s3_keys(),
        ..IdentitiesFile::default()
    };
    let err = talon_gateway::start(config(&stub, only_s3)).await.err();
    assert!(
        matches!(&err, Some(GatewayError::Config(m)) if m.contains("Azure front")),
        "{err:?}"
    );
    let nothing = IdentitiesFile::default();
    let err = talon_gateway::start(config(&stub, nothing)).await.err();
    assert!(
        matches!(&err, Some(GatewayError::Config(m)) if m.contains("S3 front")),
        "{err:?}"
    );
}

#[tokio::test]
async fn with_credentials_neither_front_serves_anyone_anonymous() {
    let stub = stub().await;
    let gw = talon_gateway::start(config(
        &stub,
        IdentitiesFile {
            s3: s3_keys(),
            azure: Some(AzureAccount {
                account: ACCOUNT.into(),
                key: Some(EMULATOR_AZURE_KEY.into()),
            }),
            anonymous: AnonymousAccess::Refused,
        },
    ))
    .await
    .unwrap();
    for (what, status) in unsigned(&gw).await {
        assert!(matches!(status, 401 | 403), "{what}: {status}");
    }
    assert_unchanged(&stub);
    gw.shutdown().await;
}

#[tokio::test]
async fn anonymous_access_is_read_only_unless_writes_are_asked_for() {
    let stub = stub().await;
    let gw = talon_gateway::start(config(
        &stub,
        IdentitiesFile {
            anonymous: AnonymousAccess::ReadOnly,
            ..IdentitiesFile::default()
        },
    ))
    .await
    .unwrap();
    for (what, status) in unsigned(&gw).await {
        let expected = if what.starts_with("GET") { 200 } else { 403 };
        assert_eq!(status, expected, "{what}");
    }
    assert_unchanged(&stub);
    gw.shutdown().await;

    let gw = talon_gateway::start(config(
        &stub,
        IdentitiesFile {
            anonymous: AnonymousAccess::ReadWrite,
            ..IdentitiesFile::default()
        },
    ))
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let put = http
        .put(format!("{}/demo/new.txt", gw.s3_url().unwrap()))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    assert_eq!(
        std::fs::read(stub.data_dir().join("demo/new.txt")).unwrap(),
        b"x"
    );
    gw.shutdown().await;
}

/// SEC-09's last part: an unsigned `response-content-type=text/html` must not turn a
/// readable object into a page served from the gateway's origin.
#[tokio::test]
async fn response_overrides_are_ignored_on_anonymous_requests() {
    let stub = stub().await;
    let gw = talon_gateway::start(config(
        &stub,
        IdentitiesFile {
            anonymous: AnonymousAccess::ReadOnly,
            ..IdentitiesFile::default()
        },
    ))
    .await
    .unwrap();
    let url = format!(
        "{}/demo/hello.txt?response-content-type=text%2Fhtml&response-content-disposition=inline",
        gw.s3_url().unwrap()
    );
    let resp = reqwest::get(url).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_ne!(resp.headers()["content-type"], "text/html");
    assert!(resp.headers().get("content-disposition").is_none());
    gw.shutdown().await;
}
