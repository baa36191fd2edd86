//! The origin client's service-level and pass-through calls against a real stub, for
//! both protocols: listing buckets, checking one, streamed uploads, listings that start
//! after a key, and relaying a request as it is (what the gateway does with operations
//! it does not interpret).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use bytes::Bytes;
use futures_util::StreamExt;
use talon_origin_stub::{EMULATOR_AZURE_KEY, RunningStub, StubConfig};
use talon_protocols::ErrorKind;
use talon_protocols::azure::shared_key::AccountKey;
use talon_protocols::origin::{
    ForwardRequest, ListOptions, OriginBody, OriginClient, OriginConfig,
};
use talon_protocols::s3::sigv4::S3Credentials;

const AK: &str = "AKIASERVICETEST";
const SK: &str = "service-secret";

async fn stub() -> RunningStub {
    let stub = talon_origin_stub::start(StubConfig {
        s3_credentials: BTreeMap::from([(AK.to_owned(), SK.to_owned())]),
        azure_key: Some(AccountKey::from_base64(EMULATOR_AZURE_KEY).unwrap()),
        ..StubConfig::default()
    })
    .await
    .unwrap();
    for b in ["alpha", "beta"] {
        std::fs::create_dir_all(stub.data_dir().join(b)).unwrap();
    }
    stub
}

fn clients(stub: &RunningStub) -> [(&'static str, OriginClient); 2] {
    let s3 = OriginClient::new(OriginConfig::S3 {
        endpoint: stub.s3_url().unwrap(),
        region: "us-east-1".into(),
        credentials: Some(S3Credentials {
            access_key: AK.into(),
            secret_key: SK.into(),
            session_token: None,
        }),
        virtual_hosted: false,
    })
    .unwrap();
    let azure = OriginClient::new(OriginConfig::Azure {
        endpoint: stub.azure_url().unwrap(),
        account: "devstoreaccount1".into(),
        key: Some(AccountKey::from_base64(EMULATOR_AZURE_KEY).unwrap()),
        sas: None,
    })
    .unwrap();
    [("s3", s3), ("azure", azure)]
}

async fn drain(mut body: talon_protocols::origin::ByteStream) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(c) = body.next().await {
        out.extend_from_slice(&c.unwrap());
    }
    out
}

#[tokio::test]
async fn buckets_are_listed_and_checked() {
    let stub = stub().await;
    for (name, client) in clients(&stub) {
        let buckets: Vec<String> = client
            .list_buckets()
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.name)
            .collect();
        assert_eq!(buckets, ["alpha", "beta"], "{name}");
        client.head_bucket("alpha").await.unwrap();
        let err = client.head_bucket("missing").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NoSuchBucket, "{name}");
    }
}

#[tokio::test]
async fn streamed_uploads_store_exactly_the_stream() {
    let stub = stub().await;
    for (name, client) in clients(&stub) {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
        let chunks: Vec<Result<Bytes, std::io::Error>> = data
            .chunks(7_000)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
        let key = format!("streamed/{name}.bin");
        let etag = client
            .put_stream(
                "alpha",
                &key,
                body,
                data.len() as u64,
                &[("content-type", "application/x-test".into())],
            )
            .await
            .unwrap();
        let got = client.get("alpha", &key, None, Some(&etag)).await.unwrap();
        assert_eq!(
            got.info.content_type.as_deref(),
            Some("application/x-test"),
            "{name}"
        );
        assert_eq!(drain(got.body).await, data, "{name}");
    }
}

#[tokio::test]
async fn a_stream_that_fails_stores_nothing() {
    let stub = stub().await;
    for (name, client) in clients(&stub) {
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"half of it")),
            Err(std::io::Error::other("client went away")),
        ];
        let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
        let key = format!("broken/{name}.bin");
        assert!(
            client
                .put_stream("alpha", &key, body, 100, &[])
                .await
                .is_err(),
            "{name}"
        );
        let err = client.head("alpha", &key).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NoSuchKey, "{name}");
    }
}

#[tokio::test]
async fn s3_listings_can_start_after_a_key_and_carry_times() {
    let stub = stub().await;
    let [(_, s3), _] = clients(&stub);
    for k in ["a", "b", "c", "d"] {
        s3.put("beta", k, Bytes::from_static(b"x"), None)
            .await
            .unwrap();
    }
    let page = s3
        .list_with(
            "beta",
            &ListOptions {
                start_after: Some("b"),
                max_keys: Some(10),
                ..ListOptions::default()
            },
        )
        .await
        .unwrap();
    let keys: Vec<&str> = page.objects.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["c", "d"]);
    assert!(page.objects.iter().all(|o| o.last_modified.is_some()));
}

#[tokio::test]
async fn forwarded_requests_are_signed_and_answered_as_they_are() {
    let stub = stub().await;
    let [(_, s3), (_, azure)] = clients(&stub);
    // An S3 multipart upload relayed step by step.
    let resp = s3
        .forward(ForwardRequest {
            method: http::Method::POST,
            bucket: Some("alpha"),
            key: Some("mp/obj"),
            query: "uploads",
            headers: vec![("content-type".into(), "text/plain".into())],
            body: OriginBody::Empty,
        })
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let xml = resp.text().await.unwrap();
    let upload_id = xml
        .split("<UploadId>")
        .nth(1)
        .unwrap()
        .split("</UploadId>")
        .next()
        .unwrap()
        .to_owned();
    let resp = s3
        .forward(ForwardRequest {
            method: http::Method::PUT,
            bucket: Some("alpha"),
            key: Some("mp/obj"),
            query: &format!("partNumber=1&uploadId={upload_id}"),
            headers: Vec::new(),
            body: OriginBody::Bytes(Bytes::from_static(b"only part")),
        })
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let part_etag = resp.headers()["etag"].to_str().unwrap().to_owned();
    let complete = format!(
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{part_etag}</ETag></Part></CompleteMultipartUpload>"
    );
    let resp = s3
        .forward(ForwardRequest {
            method: http::Method::POST,
            bucket: Some("alpha"),
            key: Some("mp/obj"),
            query: &format!("uploadId={upload_id}"),
            headers: Vec::new(),
            body: OriginBody::Bytes(Bytes::from(complete)),
        })
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let got = s3.get("alpha", "mp/obj", None, None).await.unwrap();
    assert!(got.info.etag.ends_with("-1\""));
    assert_eq!(drain(got.body).await, b"only part");
    // Errors come back as the origin sent them.
    let resp = azure
        .forward(ForwardRequest {
            method: http::Method::GET,
            bucket: Some("alpha"),
            key: Some("nope"),
            query: "",
            headers: Vec::new(),
            body: OriginBody::Empty,
        })
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.headers()["x-ms-error-code"], "BlobNotFound");
}

#[tokio::test]
async fn a_checksum_known_only_at_the_end_travels_in_a_trailer_and_is_kept() {
    use talon_protocols::checksum::{ChecksumAlgorithm, checksum};
    let stub = stub().await;
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    for (name, client) in clients(&stub) {
        let pieces: Vec<Result<Bytes, std::io::Error>> = body
            .chunks(7_001)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        client
            .put_stream_with_checksum(
                "alpha",
                "trailed.bin",
                futures_util::stream::iter(pieces),
                body.len() as u64,
                ChecksumAlgorithm::Crc32c,
                &[],
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = client
            .get("alpha", "trailed.bin", None, None)
            .await
            .unwrap();
        assert_eq!(drain(got.body).await, body, "{name}");
        let info = client.head("alpha", "trailed.bin").await.unwrap();
        let want = match name {
            // The S3 side verified the trailer and keeps the checksum.
            "s3" => format!("crc32c:{}", checksum(ChecksumAlgorithm::Crc32c, &body)),
            // Azure has no flexible checksums: a plain upload.
            _ => String::new(),
        };
        assert_eq!(info.headers.checksum, want, "{name}");
    }
    // A stream shorter than announced fails the upload and stores nothing new.
    let [(_, s3), _] = clients(&stub);
    let short =
        futures_util::stream::iter(vec![Ok::<_, std::io::Error>(Bytes::from_static(b"abc"))]);
    assert!(
        s3.put_stream_with_checksum(
            "alpha",
            "short.bin",
            short,
            10,
            ChecksumAlgorithm::Crc32,
            &[]
        )
        .await
        .is_err()
    );
    assert_eq!(
        s3.head("alpha", "short.bin").await.unwrap_err().kind(),
        ErrorKind::NoSuchKey
    );
    stub.shutdown().await;
}
