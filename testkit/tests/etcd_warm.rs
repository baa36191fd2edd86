//! Warm jobs shared through a real three-member etcd cluster (issue 14): a job started on
//! one coordinator is handed to workers that heartbeat to another, outlives the
//! coordinator that started it, is seen whole by a coordinator started afterwards, and a
//! cancel through any coordinator stops it everywhere. The cluster's pins, set through
//! one coordinator, reach workers that heartbeat to another.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use talon_coordinator::RunningCoordinator;
use talon_coordinator::StateConfig;
use talon_coordinator_client::api::{PinsRequest, WarmJobView, WarmRequest, WarmState};
use talon_coordinator_client::client::CoordinatorClient;
use talon_core::cluster_auth::Role;
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::etcd::EtcdCluster;
use talon_testkit::{Cluster, ClusterConfig, read_whole_checked, wait_for};

const BLOCK: u64 = 256 << 10;

fn dataset() -> Vec<GeneratedObject> {
    (0..4)
        .map(|i| GeneratedObject::new("data", format!("warm/part-{i}.bin"), 2 * BLOCK + 7, 30 + i))
        .chain([GeneratedObject::new("data", "later/one.bin", BLOCK + 1, 99)])
        .collect()
}

fn request(source: &str) -> WarmRequest {
    WarmRequest {
        source: source.into(),
        objects: Vec::new(),
        block_size: BLOCK,
        budget_bytes: 0,
    }
}

fn admin(cluster: &Cluster, c: &RunningCoordinator) -> CoordinatorClient {
    CoordinatorClient::new(c.url())
        .unwrap()
        .with_auth(cluster.cluster_secret().clone(), Role::Admin)
}

/// Waits until `client` shows job `id` in `state`; returns its view.
async fn job_in(client: &CoordinatorClient, id: u64, state: WarmState) -> WarmJobView {
    wait_for(
        &format!("warm job {id} to be {state:?}"),
        Duration::from_secs(20),
        || async {
            let v = client.warm_job(id).await.ok()?;
            (v.state == state).then_some(v)
        },
    )
    .await
}

/// What two views of one job must agree on (not the elapsed time).
fn figures(v: &WarmJobView) -> (u64, WarmState, u64, u64, u64, u64, u64) {
    (
        v.id,
        v.state,
        v.objects,
        v.objects_done,
        v.blocks_done,
        v.bytes_done,
        v.errors,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_job_lives_in_etcd_and_every_coordinator_serves_it() {
    let etcd = EtcdCluster::start().await;
    let objects = dataset();
    let mut cluster = Cluster::start(ClusterConfig {
        workers: 2,
        generated: objects.clone(),
        coordinator_state: StateConfig::Etcd {
            endpoints: etcd.endpoints(),
            prefix: "/talon-warm-test/".into(),
            tls: None,
        },
        ..ClusterConfig::default()
    })
    .await;
    // The workers heartbeat to the cluster's first coordinator, A, only.
    let a = admin(&cluster, &cluster.coordinator);

    // B starts a job, then dies at once: A hands the tasks and records them.
    let b = cluster.start_coordinator().await;
    let job = admin(&cluster, &b)
        .warm_start(&request("s3://data/warm/"))
        .await
        .unwrap();
    assert_eq!((job.objects, job.blocks), (4, 12), "{job:?}");
    b.shutdown().await;
    let done = job_in(&a, job.id, WarmState::Done).await;
    assert_eq!(
        (done.objects_done, done.blocks_done, done.errors),
        (4, 12, 0),
        "{done:?}"
    );
    assert_eq!(done.bytes_done, 4 * (2 * BLOCK + 7));
    let fetched = cluster.origin_gets();
    assert!(fetched >= 12, "every block was filled: {fetched} GETs");

    // The warmed objects are all hits: every byte right and no origin GET.
    let client = cluster.client().await;
    cluster.sync_client(&client).await;
    for o in &objects[..4] {
        read_whole_checked(&client, o, &o.key).await;
    }
    assert_eq!(cluster.origin_gets(), fetched, "the reads were all hits");

    // A coordinator started afterwards reads the job whole from etcd.
    let c = cluster.start_coordinator().await;
    let c_admin = admin(&cluster, &c);
    let seen = c_admin.warm_job(job.id).await.unwrap();
    assert_eq!(figures(&seen), figures(&done), "{seen:?}");

    // With no worker up, a job started on C and cancelled through a fourth
    // coordinator is cancelled on A too; the workers, back, are handed none of it.
    cluster.kill_worker(0);
    cluster.kill_worker(1);
    let stopped = c_admin
        .warm_start(&request("s3://data/warm/part-0"))
        .await
        .unwrap();
    assert_ne!(stopped.id, job.id, "job ids are unique across coordinators");
    let d = cluster.start_coordinator().await;
    let cancelled = admin(&cluster, &d).warm_cancel(stopped.id).await.unwrap();
    assert_eq!(cancelled.state, WarmState::Cancelled);
    job_in(&a, stopped.id, WarmState::Cancelled).await;
    job_in(&c_admin, stopped.id, WarmState::Cancelled).await;
    cluster.start_worker(0).await;
    cluster.start_worker(1).await;
    cluster.wait_for_live(2).await;
    // A job after it runs to the end: the workers heartbeated and took tasks again, and
    // would have been handed the cancelled job's first (tasks go out in job order).
    let later = a.warm_start(&request("s3://data/later/")).await.unwrap();
    job_in(&c_admin, later.id, WarmState::Done).await;
    for client in [&a, &c_admin] {
        let v = client.warm_job(stopped.id).await.unwrap();
        assert_eq!((v.state, v.blocks_done), (WarmState::Cancelled, 0), "{v:?}");
    }

    // Pins set through D reach the workers, which heartbeat to A, and C lists them.
    let set = admin(&cluster, &d)
        .set_pins(&PinsRequest {
            prefixes: vec!["s3/data/warm/".into()],
            expect_version: Some(0),
        })
        .await
        .unwrap();
    wait_for(
        "the workers to take D's pins",
        Duration::from_secs(10),
        || async {
            (0..2)
                .all(|i| cluster.worker(i).store().cluster_pins() == set.prefixes)
                .then_some(())
        },
    )
    .await;
    wait_for("C to list D's pins", Duration::from_secs(10), || async {
        (c_admin.pins().await.ok()? == set).then_some(())
    })
    .await;
    // So does an invalidation made through D (one etcd document, like the pins).
    let made = admin(&cluster, &d)
        .invalidate("s3/data/warm/")
        .await
        .unwrap();
    assert_eq!(made.invalidations.len(), 1);
    wait_for(
        "C to list D's invalidation",
        Duration::from_secs(10),
        || async { (c_admin.invalidations().await.ok()? == made).then_some(()) },
    )
    .await;
    c.shutdown().await;
    d.shutdown().await;
}
