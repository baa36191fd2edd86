//! Uploads through the gateway are verified before the origin commits them (SEC-01 of
//! the security review): the same signed and spoilt `aws-chunked` uploads the origin
//! stub is held to (talon-testkit's `signed_upload::REFUSALS`), sent to the gateway's S3
//! front, and the stub's store looked at afterwards. A refused upload must leave the old
//! object as it was and create no new one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use talon_gateway::config::{Backend, Identities, IdentitiesFile, Limits, Route, S3Front, S3Key};
use talon_gateway::{GatewayConfig, RunningGateway};
use talon_origin_stub::{RunningStub, StubConfig};
use talon_protocols::ErrorKind;
use talon_protocols::origin::{OriginClient, OriginConfig, Origins};
use talon_protocols::s3::request::S3Addressing;
use talon_protocols::s3::sigv4::S3Credentials;
use talon_testkit::signed_upload::{self, CHUNK, Mode, Spoil, UploadTarget, payload};

const ORIGIN_KEY: (&str, &str) = ("ORIGINKEY", "origin-secret");
const CLIENT_KEY: (&str, &str) = ("CLIENTKEY", "client/secret+key");
const REGION: &str = "us-east-1";
const BUCKET: &str = "uploads";

struct Env {
    stub: RunningStub,
    origin: OriginClient,
    gateway: RunningGateway,
    target: UploadTarget,
    http: reqwest::Client,
}

async fn env() -> Env {
    let stub = talon_origin_stub::start(StubConfig {
        s3_credentials: BTreeMap::from([(ORIGIN_KEY.0.to_owned(), ORIGIN_KEY.1.to_owned())]),
        ..StubConfig::default()
    })
    .await
    .unwrap();
    std::fs::create_dir_all(stub.data_dir().join(BUCKET)).unwrap();
    let origin = OriginClient::new(OriginConfig::S3 {
        endpoint: stub.s3_url().unwrap(),
        region: REGION.into(),
        credentials: Some(S3Credentials {
            access_key: ORIGIN_KEY.0.into(),
            secret_key: ORIGIN_KEY.1.into(),
            session_token: None,
        }),
        virtual_hosted: false,
    })
    .unwrap();
    let gateway = talon_gateway::start(GatewayConfig {
        s3: Some(S3Front {
            listen: "127.0.0.1:0".parse().unwrap(),
            route: Route::Origin,
            backend: Backend::S3,
            addressing: S3Addressing::PathStyle,
            region: REGION.into(),
        }),
        azure: None,
        admin_listen: None,
        origins: Origins {
            s3: Some(origin.clone()),
            azure: None,
        },
        cache: None,
        identities: Identities::from_parts(IdentitiesFile {
            s3: vec![S3Key::unrestricted(CLIENT_KEY.0, CLIENT_KEY.1)],
            ..IdentitiesFile::default()
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
    .unwrap();
    let target = UploadTarget {
        endpoint: gateway.s3_url().unwrap(),
        bucket: BUCKET.into(),
        access_key: CLIENT_KEY.0.into(),
        secret_key: CLIENT_KEY.1.into(),
        region: REGION.into(),
    };
    Env {
        stub,
        origin,
        gateway,
        target,
        http: reqwest::Client::new(),
    }
}

impl Env {
    /// The bytes the origin stores under `key`.
    async fn stored(&self, key: &str) -> Vec<u8> {
        let resp = self.origin.get(BUCKET, key, None, None).await.unwrap();
        let mut body = resp.body;
        let mut out = Vec::new();
        while let Some(c) = body.next().await {
            out.extend_from_slice(&c.unwrap());
        }
        out
    }

    async fn assert_absent(&self, key: &str, what: &str) {
        let err = self.origin.head(BUCKET, key).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NoSuchKey, "{what} created {key}");
        assert!(
            !self.stub.data_dir().join(BUCKET).join(key).exists(),
            "{what} left a file at the origin"
        );
    }
}

#[tokio::test]
async fn valid_signed_uploads_reach_the_origin_whole() {
    let env = env().await;
    for (i, mode) in [Mode::Signed, Mode::SignedTrailer, Mode::UnsignedTrailer]
        .into_iter()
        .enumerate()
    {
        for pieces in [None, Some(7)] {
            let key = format!("ok/{i}-{pieces:?}.bin");
            let data = payload(2 * CHUNK + 33, i as u8);
            let up = signed_upload::build(&env.target, &key, &data, mode, Spoil::None);
            let answer = signed_upload::send(&env.http, up, pieces).await;
            assert_eq!(answer.status, 200, "{mode:?} {pieces:?}: {}", answer.body);
            assert_eq!(env.stored(&key).await, data, "{mode:?} {pieces:?}");
        }
    }
    env.gateway.shutdown().await;
}

/// Every refusal the stub makes, the gateway makes too, and the origin's store is as it
/// was: the old object untouched, no new object, whether the body arrives in one piece
/// or dribbles in (the order in which SEC-01's extra byte released the rest).
#[tokio::test]
async fn spoilt_uploads_are_refused_and_change_nothing_at_the_origin() {
    let env = env().await;
    let key = "victim/object one.bin";
    let old = payload(5000, 99);
    env.origin
        .put(BUCKET, key, Bytes::from(old.clone()), None)
        .await
        .unwrap();
    let fresh = "victim/never-written.bin";
    let new = payload(3 * CHUNK + 10, 1);
    for &(mode, spoil, status, code) in signed_upload::REFUSALS {
        for pieces in [None, Some(7)] {
            for target in [key, fresh] {
                let up = signed_upload::build(&env.target, target, &new, mode, spoil);
                let answer = signed_upload::send(&env.http, up, pieces).await;
                assert_eq!(
                    (answer.status, answer.code()),
                    (status, Some(code)),
                    "{mode:?} {spoil:?} {pieces:?} on {target}: {}",
                    answer.body
                );
            }
            let what = format!("{mode:?} {spoil:?} {pieces:?}");
            assert_eq!(env.stored(key).await, old, "{what} changed the object");
            env.assert_absent(fresh, &what).await;
        }
    }
    env.gateway.shutdown().await;
}

/// SEC-01 exactly as the review reproduced it: the headers of a valid signed streaming
/// PUT of 16 bytes, reused with one 17-byte chunk under a bogus signature.
#[tokio::test]
async fn a_forged_chunk_one_byte_too_long_stores_nothing() {
    let env = env().await;
    let key = "poc-chunked.txt";
    let up = signed_upload::build(
        &env.target,
        key,
        &[b'X'; 16],
        Mode::Signed,
        Spoil::ForgedLongChunk,
    );
    // The byte past the announced length in a write of its own, after the rest.
    let answer = signed_upload::send(&env.http, up.clone(), Some(up.body.len() - 1)).await;
    env.assert_absent(key, "the forged chunk").await;
    assert_eq!(
        (answer.status, answer.code()),
        (400, Some("IncompleteBody")),
        "{}",
        answer.body
    );
    env.gateway.shutdown().await;
}
