//! The origin client's one conformance suite ([`talon_testkit::origin_conformance`])
//! against every origin it is meant for: the origin stub over both protocols, and two
//! servers nobody here wrote, moto's S3 server and Azurite
//! ([`talon_testkit::independent_origins`]), so two copies of one misunderstanding
//! cannot pass each other's tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use talon_origin_stub::{EMULATOR_AZURE_KEY, StubConfig};
use talon_protocols::azure::shared_key::AccountKey;
use talon_protocols::origin::{OriginClient, OriginConfig};
use talon_protocols::s3::sigv4::S3Credentials;
use talon_testkit::independent_origins::{IndependentOrigin, OriginKind};
use talon_testkit::origin_conformance;

const ACCESS_KEY: &str = "AKIACONFORMANCE00001";
const SECRET_KEY: &str = "conformance-secret";

async fn stub() -> talon_origin_stub::RunningStub {
    talon_origin_stub::start(StubConfig {
        s3_credentials: BTreeMap::from([(ACCESS_KEY.to_owned(), SECRET_KEY.to_owned())]),
        azure_key: Some(AccountKey::from_base64(EMULATOR_AZURE_KEY).unwrap()),
        ..StubConfig::default()
    })
    .await
    .expect("the stub starts")
}

#[tokio::test]
async fn the_stub_over_s3() {
    let stub = stub().await;
    let client = OriginClient::new(OriginConfig::S3 {
        endpoint: stub.s3_url().unwrap(),
        region: "us-east-1".into(),
        credentials: Some(S3Credentials {
            access_key: ACCESS_KEY.into(),
            secret_key: SECRET_KEY.into(),
            session_token: None,
        }),
        virtual_hosted: false,
    })
    .unwrap();
    origin_conformance::run(&client, "conformance-s3").await;
    stub.shutdown().await;
}

#[tokio::test]
async fn the_stub_over_azure() {
    let stub = stub().await;
    let client = OriginClient::new(OriginConfig::Azure {
        endpoint: stub.azure_url().unwrap(),
        account: "devstoreaccount1".into(),
        key: Some(AccountKey::from_base64(EMULATOR_AZURE_KEY).unwrap()),
        sas: None,
    })
    .unwrap();
    origin_conformance::run(&client, "conformance-azure").await;
    stub.shutdown().await;
}

#[tokio::test]
async fn motos_s3_server() {
    let Some(moto) = IndependentOrigin::start(OriginKind::Moto) else {
        return;
    };
    // moto 5.2.5 ignores x-amz-copy-source-if-match and a copy's If-None-Match.
    origin_conformance::run_except(
        &moto.client(),
        "conformance-moto",
        &[origin_conformance::KnownGap::CopyConditions],
    )
    .await;
}

#[tokio::test]
async fn azurite() {
    let Some(azurite) = IndependentOrigin::start(OriginKind::Azurite) else {
        return;
    };
    origin_conformance::run(&azurite.client(), "conformance-azurite").await;
}
