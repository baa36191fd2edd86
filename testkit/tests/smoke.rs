//! The sandbox starts and a read through the cluster returns the origin's bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures_util::StreamExt;
use talon_core::ObjectId;
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_through_the_cluster_equal_the_origin_and_hit_the_second_time() {
    let size = 3 * (256 << 10) + 12_345;
    let object = GeneratedObject::new("data", "obj.bin", size, 5);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let client = cluster.client().await;
    let id = ObjectId::s3("data", "obj.bin").unwrap();
    let stat = client.stat(&id).await.unwrap();
    assert_eq!(stat.size, size);
    assert_eq!(
        stat.version.as_str(),
        talon_core::canonical_etag(&object.etag())
    );
    let range = 100_000..size - 7;
    let read = |client: talon_cache_client::CacheClient| {
        let (id, version, range) = (id.clone(), stat.version.clone(), range.clone());
        async move {
            let mut s = client.read_range(&id, &version, size, range).unwrap();
            let mut out = Vec::new();
            while let Some(chunk) = s.next().await {
                out.extend_from_slice(&chunk.unwrap());
            }
            out
        }
    };
    let mut expected = vec![0u8; (range.end - range.start) as usize];
    object.fill(range.start, &mut expected);
    assert_eq!(read(client.clone()).await, expected);
    let gets = cluster.origin_gets();
    assert!(gets > 0);
    assert_eq!(read(client.clone()).await, expected);
    assert_eq!(
        cluster.origin_gets(),
        gets,
        "a second read makes no origin GET"
    );
}
