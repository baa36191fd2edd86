//! Issue 13's crash-in-fill suite: a `talon-worker` process killed at each point of a
//! page fill (its bytes written, synced, the metadata written, renamed: the crash
//! points of `talon_worker::crash_points`), again and again, each time restarted on the
//! same cache folder. After every restart every byte it serves is right, and every page
//! its recovered index calls present passes its checksum when first served
//! (`talon_worker_corrupt_pages_total` stays 0): the index agrees with the disk.
//!
//! `TALON_CRASH_IN_FILL_ITERATIONS` sets the number of crashes (CI: 48; the full run in
//! docs/reliability.md: 100).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use talon_cache_client::CacheClient;
use talon_core::cluster_auth::Role;
use talon_core::{ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, WorkerProcess, expected, read_through, wait_for};
use talon_worker::crash_points::{CRASH_AT_ENV, CrashPoint};

const BLOCK: u64 = 256 << 10;

fn object(i: usize) -> GeneratedObject {
    GeneratedObject::new(
        "data",
        format!("fill{i}.bin"),
        3 * BLOCK + 1000 * i as u64,
        700 + i as u64,
    )
}

/// Starts the worker process on `cache` (armed to crash when `crash` says) and waits
/// until the coordinator lists it at its new address and `client` reads from it.
async fn start(
    cluster: &Cluster,
    client: Option<&CacheClient>,
    cache: &Path,
    crash: Option<String>,
) -> WorkerProcess {
    let env: Vec<(&str, &str)> = crash
        .as_deref()
        .map(|c| vec![(CRASH_AT_ENV, c)])
        .unwrap_or_default();
    let process = WorkerProcess::start_logged(cluster, "w0", cache, &[], &env).await;
    let coordinator = cluster.coordinator_client(Role::Reader);
    wait_for(
        "the coordinator to list the restarted worker",
        Duration::from_secs(10),
        || async {
            let m = coordinator.member("w0").await.ok()?;
            (m.addr == process.addr).then_some(())
        },
    )
    .await;
    if let Some(client) = client {
        cluster.sync_client(client).await;
    }
    process
}

/// Reads the whole object; its bytes must be a prefix of the object's (whole when the
/// read succeeded). Returns whether it succeeded.
async fn read(client: &CacheClient, object: &GeneratedObject, what: &str) -> bool {
    let id = ObjectId::s3(object.bucket.clone(), object.key.clone()).unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    read_through(client, &id, &version, object.size, 0..object.size)
        .await
        .check(&expected(object, 0..object.size), what)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_anywhere_in_a_fill_serves_nothing_wrong_after_a_restart() {
    let iterations: usize = std::env::var("TALON_CRASH_IN_FILL_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    let objects: Vec<GeneratedObject> = (0..iterations).map(object).collect();
    let cluster = Cluster::start(ClusterConfig {
        workers: 0,
        generated: objects.clone(),
        local_sockets: false,
        ..ClusterConfig::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let mut process = start(&cluster, None, &cache, None).await;
    let client = cluster.client().await;
    cluster.sync_client(&client).await;
    process.kill();

    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut crashes = std::collections::BTreeMap::<&str, usize>::new();
    for (i, fresh) in objects.iter().enumerate() {
        // A point of the fill, and which pass of it crashes: a fresh object's three
        // blocks pass each point at least three times (a page per write).
        let point = CrashPoint::ALL[i % CrashPoint::ALL.len()];
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let pass = 1 + seed % 3;
        let armed = format!("{}:{pass}", point.name());
        process.kill();
        process = start(&cluster, Some(&client), &cache, Some(armed.clone())).await;
        let crashed = read(
            &client,
            fresh,
            &format!("a read that crashes the worker ({armed})"),
        )
        .await;
        wait_for(
            &format!("the worker to crash at {armed}"),
            Duration::from_secs(10),
            || std::future::ready(process.has_exited().then_some(())),
        )
        .await;
        assert!(
            !crashed || process.log().contains("crash point is armed"),
            "{armed}: {}",
            process.log()
        );
        *crashes.entry(point.name()).or_default() += 1;

        // Restarted on the same folder: what it recovered serves right, and the read
        // that crashed it now completes.
        drop(process);
        process = start(&cluster, Some(&client), &cache, None).await;
        for earlier in objects[..=i].iter().rev().take(3) {
            assert!(
                read(
                    &client,
                    earlier,
                    &format!("a read after the crash at {armed}")
                )
                .await,
                "{}: a read failed after the restart",
                earlier.key
            );
        }
        assert_eq!(
            process.metric("talon_worker_corrupt_pages_total").await,
            0.0,
            "a page the recovered index calls present failed its checksum ({armed})"
        );
    }
    // Everything, once more, from the last restart.
    for o in &objects {
        assert!(read(&client, o, "the final read").await, "{}", o.key);
    }
    assert_eq!(
        process.metric("talon_worker_corrupt_pages_total").await,
        0.0
    );
    eprintln!("{iterations} crashes in fills, by point: {crashes:?}");
}
