//! The gateway in front of origins that bend HTTP: one that ignores `Range` and one
//! whose partial answers do not state the object's size (`bytes a-b/*`). A client must
//! never get bytes other than the ones the answer announces.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use talon_gateway::config::{
    AzureFront, Backend, Identities, IdentitiesFile, Limits, Route, S3Front,
};
use talon_gateway::{GatewayConfig, RunningGateway};
use talon_protocols::origin::{OriginClient, OriginConfig, Origins};
use talon_protocols::range::RangeSpec;
use talon_protocols::s3::request::S3Addressing;

const BODY: &[u8] = b"0123456789";

/// How the fake origin answers a ranged GET.
#[derive(Clone, Copy)]
enum Bend {
    /// 200 with the whole object.
    IgnoresRange,
    /// 206 with the range, its total unstated.
    UnknownTotal,
}

/// An S3-ish origin with one object of [`BODY`] at any path. HEAD answers are GET
/// answers without the body (hyper drops it and keeps Content-Length).
async fn fake_origin(bend: Bend) -> String {
    let app = axum::Router::new().fallback(move |headers: HeaderMap| async move {
        let range = headers
            .get("range")
            .and_then(|v| v.to_str().ok())
            .and_then(RangeSpec::parse)
            .and_then(|s| s.resolve(BODY.len() as u64).ok());
        let mut resp: Response = match (bend, range) {
            (Bend::UnknownTotal, Some(r)) => {
                let mut resp = (
                    StatusCode::PARTIAL_CONTENT,
                    BODY[r.start as usize..r.end as usize].to_vec(),
                )
                    .into_response();
                let value = format!("bytes {}-{}/*", r.start, r.last());
                resp.headers_mut()
                    .insert("content-range", value.parse().unwrap());
                resp
            }
            _ => (StatusCode::OK, BODY.to_vec()).into_response(),
        };
        let h = resp.headers_mut();
        h.insert("etag", "\"v1\"".parse().unwrap());
        h.insert(
            "last-modified",
            "Mon, 30 Nov 2026 12:00:00 GMT".parse().unwrap(),
        );
        resp
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn gateway(origin: String) -> RunningGateway {
    let s3 = OriginClient::new(OriginConfig::S3 {
        endpoint: origin,
        region: "us-east-1".into(),
        credentials: None,
        virtual_hosted: false,
    })
    .unwrap();
    talon_gateway::start(GatewayConfig {
        s3: Some(S3Front {
            listen: "127.0.0.1:0".parse().unwrap(),
            route: Route::Origin,
            backend: Backend::S3,
            addressing: S3Addressing::PathStyle,
            region: "us-east-1".into(),
        }),
        azure: None::<AzureFront>,
        admin_listen: None,
        origins: Origins {
            s3: Some(s3),
            azure: None,
        },
        cache: None,
        identities: Identities::from_parts(IdentitiesFile {
            s3: Vec::new(),
            azure: None,
            anonymous: talon_protocols::access::AnonymousAccess::ReadOnly,
            public: Vec::new(),
        })
        .unwrap(),
        freshness: talon_gateway::Freshness::within(Duration::from_millis(200)),
        limits: Limits::default(),
        tls: None,
        acl_file: None,
        cache_status: true,
        access_log: None,
    })
    .await
    .unwrap()
}

async fn get(gw: &RunningGateway, range: Option<&str>) -> (u16, HeaderMap, Vec<u8>) {
    let mut req = reqwest::Client::new().get(format!("{}/bkt/k", gw.s3_url().unwrap()));
    if let Some(r) = range {
        req = req.header("range", r);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn an_origin_that_ignores_range_is_an_error_never_the_wrong_bytes() {
    let gw = gateway(fake_origin(Bend::IgnoresRange).await).await;
    let (status, _, body) = get(&gw, Some("bytes=2-4")).await;
    assert_eq!(status, 500, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("<Code>InternalError</Code>"));
    // The whole object is still fine.
    let (status, _, body) = get(&gw, None).await;
    assert_eq!((status, body.as_slice()), (200, BODY));
}

#[tokio::test]
async fn a_partial_answer_without_the_size_is_completed_with_a_head() {
    let gw = gateway(fake_origin(Bend::UnknownTotal).await).await;
    let (status, headers, body) = get(&gw, Some("bytes=2-4")).await;
    assert_eq!(status, 206);
    assert_eq!(headers["content-range"], "bytes 2-4/10");
    assert_eq!(body, b"234");
}
