//! Write-through on the cache route: a small PutObject / Put Blob goes to the origin
//! first, then its bytes are pushed into the cache at the version the origin answered,
//! so the writer's next read is a hit — no origin GET — and returns exactly what was
//! written. Turned off (`write_through_max_bytes: 0`) the same read is an origin fill.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use sha2::{Digest, Sha256};
use talon_core::cluster_auth::Role;
use talon_gateway::config::{
    AzureFront, Backend, Identities, IdentitiesFile, Limits, Route, S3Front,
};
use talon_gateway::{GatewayConfig, RunningGateway};
use talon_origin_stub::generated::GeneratedObject;
use talon_protocols::s3::request::S3Addressing;
use talon_testkit::{Cluster, ClusterConfig};

async fn gateway(cluster: &Cluster, write_through_max_bytes: u64) -> RunningGateway {
    let identities = Identities::from_parts(IdentitiesFile {
        s3: Vec::new(),
        azure: None,
        anonymous: talon_protocols::access::AnonymousAccess::ReadWrite,
        public: Vec::new(),
    })
    .unwrap();
    let cache = cluster.client_with(|c| c.role = Role::Ingester).await;
    cluster.sync_client(&cache).await;
    talon_gateway::start(GatewayConfig {
        s3: Some(S3Front {
            listen: "127.0.0.1:0".parse().unwrap(),
            route: Route::Cache,
            backend: Backend::S3,
            addressing: S3Addressing::PathStyle,
            region: "us-east-1".into(),
        }),
        azure: Some(AzureFront {
            listen: "127.0.0.1:0".parse().unwrap(),
            route: Route::Cache,
            backend: Backend::Azure,
            addressing: Default::default(),
        }),
        admin_listen: None,
        origins: cluster.origins(),
        cache: Some(cache),
        identities,
        freshness: talon_gateway::Freshness::within(Duration::from_millis(200)),
        limits: Limits {
            write_through_max_bytes,
            ..Limits::default()
        },
        tls: None,
        acl_file: None,
        cache_status: true,
        access_log: None,
    })
    .await
    .unwrap()
}

fn body(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

async fn sandbox() -> Cluster {
    Cluster::start(ClusterConfig {
        workers: 3,
        // A bucket and a container named "data" exist at the origin.
        generated: vec![GeneratedObject::new("data", "seed.bin", 1000, 1)],
        ..ClusterConfig::default()
    })
    .await
}

/// PUTs `data` through the front at `url` (S3 or Azure), then GETs it back; returns
/// the bytes read and how many origin GETs the read caused.
async fn put_then_get(cluster: &Cluster, url: &str, azure: bool, data: &[u8]) -> (Vec<u8>, u64) {
    let client = reqwest::Client::new();
    let mut put = client.put(url).body(data.to_vec());
    if azure {
        put = put
            .header("x-ms-version", "2025-01-05")
            .header("x-ms-blob-type", "BlockBlob");
    }
    let resp = put.send().await.unwrap();
    assert!(resp.status().is_success(), "PUT {url}: {}", resp.status());
    let gets = cluster.origin_gets();
    let mut get = client.get(url);
    if azure {
        get = get.header("x-ms-version", "2025-01-05");
    }
    let resp = get.send().await.unwrap();
    assert_eq!(resp.status(), 200, "GET {url}");
    let bytes = resp.bytes().await.unwrap().to_vec();
    (bytes, cluster.origin_gets() - gets)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_small_put_is_read_back_from_the_cache_without_an_origin_get() {
    let cluster = sandbox().await;
    let gw = gateway(&cluster, 8 << 20).await;
    // Three blocks of the sandbox's geometry (256 KiB), the last one short.
    let data = body(600 << 10, 3);
    let s3 = format!("{}/data/written.bin", gw.s3_url().unwrap());
    let (got, gets) = put_then_get(&cluster, &s3, false, &data).await;
    assert_eq!(sha(&got), sha(&data));
    assert_eq!(gets, 0, "the S3 read after the write was a cache hit");

    let data = body(100 << 10, 9);
    let azure = format!("{}/data/written-blob.bin", gw.azure_url().unwrap());
    let (got, gets) = put_then_get(&cluster, &azure, true, &data).await;
    assert_eq!(sha(&got), sha(&data));
    assert_eq!(gets, 0, "the Azure read after the write was a cache hit");

    // An overwrite is a new version: the next read returns the new bytes, still a hit.
    let newer = body(600 << 10, 200);
    let (got, gets) = put_then_get(&cluster, &s3, false, &newer).await;
    assert_eq!(sha(&got), sha(&newer));
    assert_eq!(gets, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn without_write_through_the_read_after_a_put_fills_from_the_origin() {
    let cluster = sandbox().await;
    let gw = gateway(&cluster, 0).await;
    let data = body(300 << 10, 5);
    let s3 = format!("{}/data/unwritten.bin", gw.s3_url().unwrap());
    let (got, gets) = put_then_get(&cluster, &s3, false, &data).await;
    assert_eq!(sha(&got), sha(&data));
    assert!(gets > 0, "the read was an origin fill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_put_above_the_threshold_is_not_kept() {
    let cluster = sandbox().await;
    let gw = gateway(&cluster, 64 << 10).await;
    let data = body(200 << 10, 8);
    let s3 = format!("{}/data/large.bin", gw.s3_url().unwrap());
    let (got, gets) = put_then_get(&cluster, &s3, false, &data).await;
    assert_eq!(sha(&got), sha(&data));
    assert!(
        gets > 0,
        "above the threshold the read fills from the origin"
    );
}
