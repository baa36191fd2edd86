//! Writes across protocols through a gateway in front of servers nobody here wrote: an
//! S3 client's multipart upload through the S3 front over Azurite (kept as the blob's
//! blocks), and an Azure client's block upload through the Azure front over moto's S3
//! server (staged as objects). Bytes are compared by SHA-256 through the gateway and at
//! the origin itself. Skipped, saying so, where the servers are not installed
//! (`talon_testkit::independent_origins`); the README's test command installs them and
//! requires them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use sha2::{Digest as _, Sha256};
use talon_gateway::config::{
    AzureFront, Backend, Identities, IdentitiesFile, Limits, Route, S3Front,
};
use talon_gateway::{GatewayConfig, RunningGateway};
use talon_protocols::access::AnonymousAccess;
use talon_protocols::azure::request::AzureAddressing;
use talon_protocols::origin::{OriginClient, Origins};
use talon_protocols::s3::request::S3Addressing;
use talon_testkit::independent_origins::{IndependentOrigin, OriginKind};
use talon_testkit::origin_conformance::create_bucket;

fn pattern(len: usize, tag: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29) ^ tag ^ ((i >> 9) as u8))
        .collect()
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// A gateway with one front over `origin` (route `origin`), open to anonymous writes
/// (the test is about the origin, not about signatures).
async fn gateway(front: Backend, origin: OriginClient, origin_kind: Backend) -> RunningGateway {
    let origins = match origin_kind {
        Backend::S3 => Origins {
            s3: Some(origin),
            azure: None,
        },
        Backend::Azure => Origins {
            s3: None,
            azure: Some(("devstoreaccount1".into(), origin)),
        },
    };
    let (s3, azure) = match front {
        Backend::S3 => (
            Some(S3Front {
                listen: "127.0.0.1:0".parse().unwrap(),
                route: Route::Origin,
                backend: origin_kind,
                addressing: S3Addressing::PathStyle,
                region: "us-east-1".into(),
            }),
            None,
        ),
        Backend::Azure => (
            None,
            Some(AzureFront {
                listen: "127.0.0.1:0".parse().unwrap(),
                route: Route::Origin,
                backend: origin_kind,
                addressing: AzureAddressing::PathStyle,
            }),
        ),
    };
    talon_gateway::start(GatewayConfig {
        s3,
        azure,
        admin_listen: None,
        origins,
        cache: None,
        identities: Identities::from_parts(IdentitiesFile {
            s3: Vec::new(),
            azure: None,
            anonymous: AnonymousAccess::ReadWrite,
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

fn element<'a>(xml: &'a str, tag: &str) -> &'a str {
    let open = format!("<{tag}>");
    let start = xml
        .find(&open)
        .unwrap_or_else(|| panic!("no <{tag}> in {xml}"))
        + open.len();
    let end = xml[start..].find(&format!("</{tag}>")).unwrap() + start;
    &xml[start..end]
}

async fn origin_bytes(client: &OriginClient, bucket: &str, key: &str) -> Vec<u8> {
    use futures_util::StreamExt as _;
    let mut body = client.get(bucket, key, None, None).await.unwrap().body;
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

#[tokio::test]
async fn an_s3_multipart_upload_over_azurite() {
    let Some(azurite) = IndependentOrigin::start(OriginKind::Azurite) else {
        return;
    };
    let origin = azurite.client();
    create_bucket(&origin, "mpu").await;
    let gw = gateway(Backend::S3, origin.clone(), Backend::Azure).await;
    let base = format!("{}/mpu/data/file.bin", gw.s3_url().unwrap());
    let http = reqwest::Client::new();
    let resp = http
        .post(format!("{base}?uploads"))
        .header("content-type", "application/x-parts")
        .header("x-amz-meta-who", "s3")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    let upload = element(&text, "UploadId").to_owned();
    let parts = [pattern(5 << 20, 1), pattern(1, 2)];
    let mut listed = String::new();
    for (i, part) in parts.iter().enumerate() {
        let n = i + 1;
        let resp = http
            .put(format!("{base}?partNumber={n}&uploadId={upload}"))
            .body(part.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
        let etag = resp.headers()["etag"].to_str().unwrap().to_owned();
        assert_eq!(etag, format!("\"{}\"", hex::encode(md5_digest(part))));
        listed.push_str(&format!(
            "<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>"
        ));
    }
    let resp = http
        .get(format!("{base}?uploadId={upload}"))
        .send()
        .await
        .unwrap();
    let text = resp.text().await.unwrap();
    assert_eq!(text.matches("<Part>").count(), 2, "{text}");
    let resp = http
        .post(format!("{base}?uploadId={upload}"))
        .body(format!(
            "<CompleteMultipartUpload>{listed}</CompleteMultipartUpload>"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    let whole: Vec<u8> = parts.concat();
    let got = http.get(&base).send().await.unwrap();
    assert_eq!(
        got.headers()["etag"].to_str().unwrap(),
        element(&text, "ETag").replace("&quot;", "\"")
    );
    assert_eq!(got.headers()["content-type"], "application/x-parts");
    assert_eq!(got.headers()["x-amz-meta-who"], "s3");
    assert_eq!(sha(&got.bytes().await.unwrap()), sha(&whole));
    assert_eq!(
        sha(&origin_bytes(&origin, "mpu", "data/file.bin").await),
        sha(&whole)
    );
    let lists = origin.get_block_list("mpu", "data/file.bin").await.unwrap();
    assert_eq!(
        lists.committed.iter().map(|b| b.1).collect::<Vec<_>>(),
        [5 << 20, 1]
    );
    assert!(lists.uncommitted.is_empty());
}

fn md5_digest(b: &[u8]) -> [u8; 16] {
    use md5::Digest as _;
    md5::Md5::digest(b).into()
}

#[tokio::test]
async fn an_azure_block_upload_over_motos_s3_server() {
    let Some(moto) = IndependentOrigin::start(OriginKind::Moto) else {
        return;
    };
    let origin = moto.client();
    create_bucket(&origin, "blocks").await;
    let gw = gateway(Backend::Azure, origin.clone(), Backend::S3).await;
    let base = format!("{}/blocks/data/blob.bin", gw.azure_url().unwrap());
    let http = reqwest::Client::new();
    let blocks = [pattern(4 << 20, 3), pattern(4 << 20, 4), pattern(1, 5)];
    let ids = ["YmxvY2stMDAw", "YmxvY2stMDAx", "YmxvY2stMDAy"];
    for (id, block) in ids.iter().zip(&blocks) {
        let resp = http
            .put(format!(
                "{base}?comp=block&blockid={}",
                id.replace('=', "%3D")
            ))
            .header("x-ms-version", "2021-08-06")
            .body(block.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201, "{:?}", resp.text().await);
    }
    let list: String = ids
        .iter()
        .map(|id| format!("<Latest>{id}</Latest>"))
        .collect();
    let resp = http
        .put(format!("{base}?comp=blocklist"))
        .header("x-ms-version", "2021-08-06")
        .header("x-ms-blob-content-type", "application/x-blocks")
        .header("x-ms-meta-who", "azure")
        .body(format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>{list}</BlockList>"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201, "{:?}", resp.text().await);
    let whole: Vec<u8> = blocks.concat();
    let got = http
        .get(&base)
        .header("x-ms-version", "2021-08-06")
        .send()
        .await
        .unwrap();
    assert_eq!(got.headers()["content-type"], "application/x-blocks");
    assert_eq!(got.headers()["x-ms-meta-who"], "azure");
    assert_eq!(sha(&got.bytes().await.unwrap()), sha(&whole));
    assert_eq!(
        sha(&origin_bytes(&origin, "blocks", "data/blob.bin").await),
        sha(&whole)
    );
    let info = origin.head("blocks", "data/blob.bin").await.unwrap();
    assert_eq!(info.content_type.as_deref(), Some("application/x-blocks"));
    // The committed list reads back; the staged blocks are gone from moto.
    let resp = http
        .get(format!("{base}?comp=blocklist&blocklisttype=all"))
        .header("x-ms-version", "2021-08-06")
        .send()
        .await
        .unwrap();
    let text = resp.text().await.unwrap();
    assert_eq!(text.matches("<Block>").count(), 3, "{text}");
    let staged = origin
        .list_with(
            "blocks",
            &talon_protocols::origin::ListOptions {
                prefix: ".talon-blocks/",
                delimiter: None,
                token: None,
                start_after: None,
                max_keys: Some(1000),
                include_metadata: false,
            },
        )
        .await
        .unwrap();
    let keys: Vec<&str> = staged.objects.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys.len(), 1, "only the committed list remains: {keys:?}");
    assert!(keys[0].ends_with("/committed"));
}
