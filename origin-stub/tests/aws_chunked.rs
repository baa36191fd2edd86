//! `aws-chunked` uploads over real HTTP to an authenticated stub, framed and signed by
//! aws-sigv4 itself (seed signature, `sign_chunk`, `sign_trailer`), so the stub's decoder
//! is checked against an implementation it does not share code with.
//!
//! What a user relies on: the stored object is exactly the decoded payload (the framing
//! never reaches it), and a bad upload — tampered data, a wrong checksum, a cut body —
//! is refused with the right S3 error and changes nothing that was stored before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use bytes::Bytes;
use futures_util::StreamExt;
use md5::Digest as _;
use talon_origin_stub::{RunningStub, StubConfig};
use talon_protocols::checksum::{ChecksumAlgorithm, checksum};
use talon_protocols::origin::{OriginClient, OriginConfig};
use talon_protocols::s3::sigv4::S3Credentials;
use talon_testkit::signed_upload::{
    self, Answer, CHUNK, CRC_TRAILER, Mode, Spoil, Upload, UploadTarget, payload,
};

const ACCESS_KEY: &str = "AKIACHUNKEDTEST";
const SECRET_KEY: &str = "chunked/secret+key";
const REGION: &str = "us-east-1";
const BUCKET: &str = "chunked";

struct Env {
    stub: RunningStub,
    origin: OriginClient,
    http: reqwest::Client,
}

async fn env() -> Env {
    let stub = talon_origin_stub::start(StubConfig {
        s3_credentials: BTreeMap::from([(ACCESS_KEY.to_owned(), SECRET_KEY.to_owned())]),
        ..StubConfig::default()
    })
    .await
    .expect("stub starts");
    std::fs::create_dir_all(stub.data_dir().join(BUCKET)).unwrap();
    let origin = OriginClient::new(OriginConfig::S3 {
        endpoint: stub.s3_url().unwrap(),
        region: REGION.into(),
        credentials: Some(S3Credentials {
            access_key: ACCESS_KEY.into(),
            secret_key: SECRET_KEY.into(),
            session_token: None,
        }),
        virtual_hosted: false,
    })
    .unwrap();
    Env {
        stub,
        origin,
        http: reqwest::Client::new(),
    }
}

impl Env {
    /// The stored bytes of `key`, read with a signed GET.
    async fn stored(&self, key: &str) -> Vec<u8> {
        let resp = self.origin.get(BUCKET, key, None, None).await.unwrap();
        let mut body = resp.body;
        let mut out = Vec::new();
        while let Some(c) = body.next().await {
            out.extend_from_slice(&c.unwrap());
        }
        assert_eq!(resp.info.size, out.len() as u64);
        out
    }

    async fn send(&self, up: Upload) -> Answer {
        signed_upload::send(&self.http, up, None).await
    }

    async fn send_in_pieces(&self, up: Upload, pieces: usize) -> Answer {
        signed_upload::send(&self.http, up, Some(pieces)).await
    }
}

fn assert_error(answer: &Answer, status: u16, code: &str) {
    assert_eq!(
        (answer.status, answer.code()),
        (status, Some(code)),
        "{}",
        answer.body
    );
}

fn build(stub: &RunningStub, key: &str, data: &[u8], mode: Mode, spoil: Spoil) -> Upload {
    let target = UploadTarget {
        endpoint: stub.s3_url().unwrap(),
        bucket: BUCKET.into(),
        access_key: ACCESS_KEY.into(),
        secret_key: SECRET_KEY.into(),
        region: REGION.into(),
    };
    signed_upload::build(&target, key, data, mode, spoil)
}

fn md5_etag(bytes: &[u8]) -> String {
    format!("\"{}\"", hex::encode(md5::Md5::digest(bytes)))
}

#[tokio::test]
async fn uploads_signed_by_aws_sigv4_store_exactly_the_payload() {
    let env = env().await;
    let cases = [
        (Mode::Signed, 3 * CHUNK + 100),
        (Mode::Signed, CHUNK),
        (Mode::Signed, 0),
        (Mode::SignedTrailer, 2 * CHUNK + 1),
        (Mode::SignedTrailer, 5),
        (Mode::UnsignedTrailer, 4 * CHUNK + 3),
        (Mode::UnsignedTrailer, 0),
    ];
    for (i, (mode, len)) in cases.into_iter().enumerate() {
        let key = format!("ok/{mode:?} {i}+ü.bin");
        let data = payload(len, i as u8);
        let up = build(&env.stub, &key, &data, mode, Spoil::None);
        assert!(up.body.len() > data.len(), "the body is framed");
        let answer = env.send(up).await;
        assert_eq!(answer.status, 200, "{mode:?} {len}: {}", answer.body);
        let etag = answer.headers.get("etag").unwrap().to_str().unwrap();
        assert_eq!(etag, md5_etag(&data), "the ETag is the MD5 of the payload");
        if mode.trailer() {
            assert_eq!(
                answer
                    .headers
                    .get(CRC_TRAILER)
                    .and_then(|v| v.to_str().ok()),
                Some(checksum(ChecksumAlgorithm::Crc32, &data).as_str()),
                "the verified trailer checksum is echoed"
            );
        }
        assert_eq!(env.stored(&key).await, data, "{mode:?} {len}");
        let info = env.origin.head(BUCKET, &key).await.unwrap();
        assert_eq!(info.size, len as u64);
        assert_eq!(
            info.content_type.as_deref(),
            Some("application/octet-stream")
        );
    }
    env.stub.shutdown().await;
}

#[tokio::test]
async fn framing_split_across_reads_decodes_the_same() {
    let env = env().await;
    for (i, mode) in [Mode::Signed, Mode::SignedTrailer, Mode::UnsignedTrailer]
        .into_iter()
        .enumerate()
    {
        let key = format!("pieces/{i}.bin");
        let data = payload(2 * CHUNK + 77, 40 + i as u8);
        let up = build(&env.stub, &key, &data, mode, Spoil::None);
        let answer = env.send_in_pieces(up, 7).await;
        assert_eq!(answer.status, 200, "{mode:?}: {}", answer.body);
        assert_eq!(env.stored(&key).await, data, "{mode:?}");
    }
    env.stub.shutdown().await;
}

/// Every refused upload leaves the object stored before it untouched.
#[tokio::test]
async fn bad_uploads_are_refused_and_change_nothing() {
    let env = env().await;
    let key = "victim/object one.bin";
    let old = payload(5000, 99);
    let old_etag = env
        .origin
        .put(BUCKET, key, Bytes::from(old.clone()), None)
        .await
        .unwrap();
    let fresh = "victim/never-written.bin";
    let new = payload(3 * CHUNK + 10, 1);

    for &(mode, spoil, status, code) in signed_upload::REFUSALS {
        for target in [key, fresh] {
            let up = build(&env.stub, target, &new, mode, spoil);
            let answer = env.send(up).await;
            assert_eq!(
                (answer.status, answer.code()),
                (status, Some(code)),
                "{mode:?} {spoil:?} on {target}: {}",
                answer.body
            );
            assert_error(&answer, status, code);
        }
        assert_eq!(
            env.stored(key).await,
            old,
            "{mode:?} {spoil:?} changed the stored object"
        );
        assert_eq!(env.origin.head(BUCKET, key).await.unwrap().etag, old_etag);
        let gone = env.origin.head(BUCKET, fresh).await.unwrap_err();
        assert_eq!(
            gone.kind(),
            talon_protocols::ErrorKind::NoSuchKey,
            "{mode:?} {spoil:?} created an object"
        );
    }
    // The same upload, unspoiled, goes through: the refusals were about the spoiling.
    let answer = env
        .send(build(
            &env.stub,
            key,
            &new,
            Mode::SignedTrailer,
            Spoil::None,
        ))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(env.stored(key).await, new);
    env.stub.shutdown().await;
}
