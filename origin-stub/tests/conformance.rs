//! The ObjectBackend conformance suite against the origin stub's store (a real folder
//! on disk), served by the stub itself.

use talon_origin_stub::{StubConfig, start};
use talon_protocols::testing::suite::{self, Endpoint, Keys};

#[tokio::test]
async fn the_stub_store_conforms() {
    let keys = Keys::local();
    let data = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let stub = start(StubConfig {
        data_dir: Some(data.path().to_owned()),
        s3_credentials: [(keys.s3.access_key.clone(), keys.s3.secret_key.clone())].into(),
        azure_account: keys.account.clone(),
        azure_key: Some(keys.account_key.clone()),
        region: keys.region.clone(),
        ..StubConfig::default()
    })
    .await
    .unwrap_or_else(|e| panic!("starting the stub: {e}"));
    let endpoint = Endpoint {
        s3_url: stub.s3_url().unwrap_or_default(),
        azure_url: stub.azure_url().unwrap_or_default(),
        keys,
    };
    suite::run(&endpoint, "stub", &[]).await.assert_passed();
}
