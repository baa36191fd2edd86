//! The cluster's pins (issue 14): a prefix pinned through the coordinator's API reaches
//! the workers with their heartbeats and keeps its blocks through churn that evicts
//! everything else; unpinned, the same churn evicts them. Only the admin role may change
//! the pins, and a refused change changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use talon_coordinator_client::api::PinsRequest;
use talon_core::cluster_auth::Role;
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, read_whole_checked, wait_for};

const BLOCK: u64 = 256 << 10;

fn pins(prefixes: &[&str], expect_version: Option<u64>) -> PinsRequest {
    PinsRequest {
        prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
        expect_version,
    }
}

/// Waits until worker 0 holds exactly `prefixes` as the cluster's pins.
async fn worker_pins(cluster: &Cluster, prefixes: &[&str]) {
    wait_for(
        &format!("the worker to take the pins {prefixes:?}"),
        Duration::from_secs(10),
        || async { (cluster.worker(0).store().cluster_pins() == prefixes).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_pinned_through_the_coordinator_survives_churn_and_unpinned_does_not() {
    let keep = GeneratedObject::new("data", "keep/model.bin", 2 * BLOCK, 1);
    let churn: Vec<GeneratedObject> = (0..24)
        .map(|i| GeneratedObject::new("data", format!("churn/{i}.bin"), BLOCK, 10 + i))
        .collect();
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        // Room for about eight blocks; pins may hold half of it.
        capacity_bytes: 8 * (BLOCK + (16 << 10)),
        generated: churn.iter().cloned().chain([keep.clone()]).collect(),
        ..ClusterConfig::default()
    })
    .await;
    let admin = cluster.coordinator_client(Role::Admin);

    // Refused: another role, a prefix that names no bucket, a stale version. Nothing
    // changes, on the coordinator or on the worker.
    for role in [Role::Reader, Role::Ingester, Role::Worker] {
        let refused = cluster
            .coordinator_client(role)
            .set_pins(&pins(&["s3/data/keep/"], None))
            .await
            .unwrap_err();
        assert_eq!(refused.status_code(), 403, "{role:?}: {refused}");
    }
    let bad = admin
        .set_pins(&pins(&["data/keep/"], None))
        .await
        .unwrap_err();
    assert_eq!(bad.status_code(), 400, "{bad}");
    let stale = admin
        .set_pins(&pins(&["s3/data/keep/"], Some(3)))
        .await
        .unwrap_err();
    assert_eq!(stale.status_code(), 409, "{stale}");
    let seen = cluster
        .coordinator_client(Role::Reader)
        .pins()
        .await
        .unwrap();
    assert_eq!((seen.prefixes.len(), seen.version), (0, 0));

    let set = admin
        .set_pins(&pins(&["s3/data/keep/"], Some(0)))
        .await
        .unwrap();
    assert_eq!(set.version, 1);
    worker_pins(&cluster, &["s3/data/keep/"]).await;
    assert!(
        cluster.worker(0).store().cluster_pins() == ["s3/data/keep/"],
        "the refused changes did not reach the worker"
    );

    let client = cluster.client().await;
    cluster.sync_client(&client).await;
    read_whole_checked(&client, &keep, "keep").await;
    // Its pages are answered before they are written; pinned once written.
    cluster.fills_settled().await;
    let store = cluster.worker(0).store().clone();
    assert!(
        store.stats().pinned_bytes >= 2 * BLOCK,
        "{:?}",
        store.stats()
    );

    // Churn well past the capacity, each object read twice (so that it is not a
    // one-hit wonder the policy drops first).
    let churn_all = || async {
        for o in &churn {
            read_whole_checked(&client, o, &o.key).await;
            read_whole_checked(&client, o, &o.key).await;
        }
    };
    churn_all().await;
    assert!(store.stats().evictions >= 10, "{:?}", store.stats());
    let before = cluster.origin_gets();
    read_whole_checked(&client, &keep, "keep, pinned, after churn").await;
    assert_eq!(
        cluster.origin_gets(),
        before,
        "the pinned prefix stayed cached"
    );

    // Unpinned: the worker takes the empty list, and the same churn evicts it.
    admin.set_pins(&pins(&[], Some(1))).await.unwrap();
    worker_pins(&cluster, &[]).await;
    assert_eq!(store.stats().pinned_bytes, 0);
    churn_all().await;
    churn_all().await;
    let before = cluster.origin_gets();
    read_whole_checked(&client, &keep, "keep, unpinned, after churn").await;
    assert!(
        cluster.origin_gets() > before,
        "unpinned, the prefix was evicted like the rest"
    );
}
