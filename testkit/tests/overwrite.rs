//! An object overwritten at the origin is served with its new bytes once the metadata
//! TTL has passed, and no read ever returns a mix of the two versions: a read pinned to
//! the old version gets the old bytes (from the cache) or a version-mismatch error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use talon_cache_client::CacheClientError;
use talon_core::{ErrorCode, ObjectId};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, ReadOutcome, expected, read_through, wait_for};

const PAGE: u64 = 16 << 10;
const BLOCK: u64 = 256 << 10;

fn is_version_mismatch(e: &CacheClientError) -> bool {
    matches!(
        e,
        CacheClientError::Refused {
            code: ErrorCode::VersionMismatch,
            ..
        }
    )
}

/// The property every read pinned to `version` must have: all of that version's bytes,
/// or a prefix of them and then a version mismatch. Returns whether it succeeded.
fn check_pinned(outcome: &ReadOutcome, want: &[u8], what: &str) -> bool {
    let ok = outcome.check(want, what);
    if let Some(e) = &outcome.error {
        assert!(is_version_mismatch(e), "{what}: {e}");
    }
    ok
}

async fn start(objects: &[&GeneratedObject]) -> (Cluster, talon_cache_client::CacheClient) {
    let cluster = Cluster::start(ClusterConfig {
        generated: objects.iter().map(|o| (*o).clone()).collect(),
        ..ClusterConfig::default()
    })
    .await;
    let client = cluster.client().await;
    (cluster, client)
}

/// Polls stat until it reports a version other than `old`.
async fn wait_for_new_version(
    client: &talon_cache_client::CacheClient,
    id: &ObjectId,
    old: &str,
) -> talon_cache_client::ObjectStat {
    wait_for(
        "stat to report the new version",
        Duration::from_secs(10),
        || async move {
            let stat = client.stat(id).await.ok()?;
            (stat.version.as_str() != old).then_some(stat)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overwritten_object_is_served_new_and_old_pins_never_mix() {
    let size = 6 * BLOCK + 3 * PAGE + 10;
    let old = GeneratedObject::new("data", "ver.bin", size, 51);
    // The new version: same size, other bytes (the case a mix would hide best).
    let new_bytes = expected(&GeneratedObject::new("data", "ver.bin", size, 52), 0..size);
    let (cluster, client) = start(&[&old]).await;
    let id = ObjectId::s3("data", "ver.bin").unwrap();
    let v1 = client.stat(&id).await.unwrap().version;
    assert_eq!(v1.as_str(), talon_core::canonical_etag(&old.etag()));
    // Blocks 0..3 fully cached at the old version; the rest never read.
    let cached = 0..3 * BLOCK;
    let got = read_through(&client, &id, &v1, size, cached.clone())
        .await
        .unwrap("the old version");
    assert!(got == expected(&old, cached.clone()));

    let s3 = cluster.origins().s3.unwrap();
    let etag = s3
        .put("data", "ver.bin", Bytes::from(new_bytes.clone()), None)
        .await
        .unwrap();
    assert_ne!(etag, old.etag());
    let stat = wait_for_new_version(&client, &id, talon_core::canonical_etag(&old.etag())).await;
    assert_eq!(
        stat.version.as_str(),
        talon_core::canonical_etag(&etag),
        "stat reports the put's ETag"
    );
    assert_eq!(stat.size, size);
    let v2 = stat.version;

    // The new version reads back whole, over the blocks cached at the old one too.
    let got = read_through(&client, &id, &v2, size, 0..size)
        .await
        .unwrap("the new version");
    assert!(got == new_bytes, "the new version's bytes");

    // Pinned to the old version: the cached blocks still give the old bytes...
    let got = read_through(&client, &id, &v1, size, cached.clone())
        .await
        .unwrap("the old version's cached blocks after the overwrite");
    assert!(got == expected(&old, cached.clone()));
    // ...and a range reaching past them gives old bytes, then a version mismatch.
    let range = 2 * BLOCK + 5..5 * BLOCK;
    let outcome = read_through(&client, &id, &v1, size, range.clone()).await;
    assert!(
        !check_pinned(
            &outcome,
            &expected(&old, range),
            "old version past the cache"
        ),
        "old bytes the cache does not hold cannot be read after the overwrite"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_across_an_overwrite_get_one_version_or_a_mismatch() {
    let size = 5 * BLOCK + 1;
    let old = GeneratedObject::new("data", "race.bin", size, 53);
    // The new version is shorter, with other bytes.
    let new_size = 4 * BLOCK + 3 * PAGE + 7;
    let new_bytes = expected(
        &GeneratedObject::new("data", "race.bin", new_size, 54),
        0..new_size,
    );
    let (cluster, client) = start(&[&old]).await;
    let id = ObjectId::s3("data", "race.bin").unwrap();
    let old_reads = Arc::new(AtomicU32::new(0));

    let readers: Vec<_> = (0..4u64)
        .map(|r| {
            let (client, id, old, new_bytes, old_reads) = (
                client.clone(),
                id.clone(),
                old.clone(),
                new_bytes.clone(),
                old_reads.clone(),
            );
            tokio::spawn(async move {
                // Read whatever version stat reports, a different range each time, until
                // the new version was read back twice.
                let mut new_reads = 0;
                let mut i = 0u64;
                while new_reads < 2 {
                    i += 1;
                    let stat = client.stat(&id).await.unwrap();
                    let start = (r * 40_000 + i * 16_411) % (stat.size / 2);
                    let range = start..stat.size - i % 3;
                    let is_old = stat.version.as_str() == talon_core::canonical_etag(&old.etag());
                    let want = if is_old {
                        assert_eq!(stat.size, size);
                        expected(&old, range.clone())
                    } else {
                        assert_eq!(stat.size, new_size);
                        new_bytes[range.start as usize..range.end as usize].to_vec()
                    };
                    let outcome = read_through(&client, &id, &stat.version, stat.size, range).await;
                    let what = format!("reader {r}, read {i} at {}", stat.version);
                    if check_pinned(&outcome, &want, &what) {
                        if is_old {
                            old_reads.fetch_add(1, Ordering::SeqCst);
                        } else {
                            new_reads += 1;
                        }
                    }
                }
            })
        })
        .collect();

    wait_for(
        "old-version reads before the overwrite",
        Duration::from_secs(10),
        || {
            let n = old_reads.load(Ordering::SeqCst);
            async move { (n >= 8).then_some(()) }
        },
    )
    .await;
    let etag = cluster
        .origins()
        .s3
        .unwrap()
        .put("data", "race.bin", Bytes::from(new_bytes.clone()), None)
        .await
        .unwrap();
    let stat = wait_for_new_version(&client, &id, talon_core::canonical_etag(&old.etag())).await;
    assert_eq!(stat.version.as_str(), talon_core::canonical_etag(&etag));
    for reader in readers {
        tokio::time::timeout(Duration::from_secs(30), reader)
            .await
            .expect("a reader never read the new version")
            .unwrap();
    }
}
