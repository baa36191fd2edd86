//! Warm jobs (issue 14): the coordinator lists a prefix at the origin, splits it into
//! blocks, and the workers that own them fill them from the origin on their own; after
//! the job, a reader's every piece is a hit and the origin sees no more GETs. Only the
//! admin and ingester roles may start one; a budget leaves objects out; a cancelled
//! job hands out nothing more.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures_util::StreamExt as _;
use talon_coordinator_client::api::{WarmJobView, WarmRequest, WarmState};
use talon_core::cluster_auth::Role;
use talon_core::{ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, expected, wait_for};

const BLOCK: u64 = 256 << 10;

fn dataset() -> Vec<GeneratedObject> {
    (0..5)
        .map(|i| {
            GeneratedObject::new(
                "data",
                format!("warm/part-{i}.bin"),
                2 * BLOCK + BLOCK / 2,
                70 + i,
            )
        })
        .chain([GeneratedObject::new("data", "elsewhere.bin", BLOCK, 99)])
        .collect()
}

fn request(budget_bytes: u64) -> WarmRequest {
    WarmRequest {
        source: "s3://data/warm/".into(),
        objects: Vec::new(),
        block_size: BLOCK,
        budget_bytes,
    }
}

async fn finished(cluster: &Cluster, id: u64) -> WarmJobView {
    let admin = cluster.coordinator_client(Role::Admin);
    wait_for(
        "the warm job to finish",
        Duration::from_secs(20),
        || async {
            let v = admin.warm_job(id).await.ok()?;
            (v.state != WarmState::Running).then_some(v)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_job_fills_every_block_on_its_owner_and_the_next_reads_are_all_hits() {
    let objects = dataset();
    let cluster = Cluster::start(ClusterConfig {
        workers: 3,
        generated: objects.clone(),
        ..ClusterConfig::default()
    })
    .await;

    // A reader may not make the workers fetch a dataset.
    let refused = cluster
        .coordinator_client(Role::Reader)
        .warm_start(&request(0))
        .await
        .unwrap_err();
    assert_eq!(refused.status_code(), 403, "{refused}");
    let admin = cluster.coordinator_client(Role::Admin);
    assert!(admin.warm_jobs().await.unwrap().jobs.is_empty());
    assert_eq!(cluster.origin_gets(), 0, "nothing was fetched");

    let job = admin.warm_start(&request(0)).await.unwrap();
    assert_eq!((job.objects, job.blocks), (5, 15), "{job:?}");
    let done = finished(&cluster, job.id).await;
    assert_eq!(done.state, WarmState::Done, "{done:?}");
    assert_eq!(
        (done.objects_done, done.blocks_done, done.errors),
        (5, 15, 0),
        "{done:?}"
    );
    assert_eq!(done.bytes_done, done.bytes);
    let fetched = cluster.origin_gets();
    assert!(
        fetched >= 15,
        "each block was filled from the origin: {fetched} GETs"
    );

    // Every piece of every warmed object is now a hit, and the origin sees nothing.
    let client = cluster.client().await;
    cluster.sync_client(&client).await;
    for o in &objects[..5] {
        let id = ObjectId::s3(o.bucket.clone(), o.key.clone()).unwrap();
        let version = ObjectVersion::from_etag(&o.etag()).unwrap();
        let (mut stream, sources) = client
            .read_range_tracked(&id, &version, o.size, 0..o.size)
            .unwrap();
        let mut bytes = Vec::new();
        while let Some(piece) = stream.next().await {
            bytes.extend_from_slice(&piece.unwrap());
        }
        assert!(bytes == expected(o, 0..o.size), "{}: wrong bytes", o.key);
        assert_eq!((sources.fills(), sources.fallbacks()), (0, 0), "{}", o.key);
        assert!(sources.hits() >= 3, "{}", o.key);
    }
    assert_eq!(
        cluster.origin_gets(),
        fetched,
        "the reads cost the origin nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_leaves_objects_out_and_a_cancelled_job_stops() {
    let cluster = Cluster::start(ClusterConfig {
        workers: 2,
        generated: dataset(),
        ..ClusterConfig::default()
    })
    .await;
    let admin = cluster.coordinator_client(Role::Admin);
    // Room for two of the five objects.
    let budget = 2 * (2 * BLOCK + BLOCK / 2) + 1;
    let job = admin.warm_start(&request(budget)).await.unwrap();
    assert_eq!((job.objects, job.objects_over_budget), (2, 3), "{job:?}");
    let done = finished(&cluster, job.id).await;
    assert_eq!(done.bytes_done, 2 * (2 * BLOCK + BLOCK / 2));
    assert!(done.bytes_done <= budget, "never past its budget");

    let second = admin.warm_start(&request(0)).await.unwrap();
    // A reader may not cancel it either: refused, and the job is untouched.
    let refused = cluster
        .coordinator_client(Role::Reader)
        .warm_cancel(second.id)
        .await
        .unwrap_err();
    assert_eq!(refused.status_code(), 403, "{refused}");
    assert_ne!(
        admin.warm_job(second.id).await.unwrap().state,
        WarmState::Cancelled
    );
    let cancelled = admin.warm_cancel(second.id).await.unwrap();
    assert_ne!(cancelled.state, WarmState::Running);
    let listed = admin.warm_jobs().await.unwrap().jobs;
    assert_eq!(listed.len(), 2);
    // Unknown jobs are a 404 for a view and a cancel alike.
    assert_eq!(admin.warm_job(999).await.unwrap_err().status_code(), 404);
    assert_eq!(admin.warm_cancel(999).await.unwrap_err().status_code(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_of_objects_is_warmed_and_a_missing_one_is_refused_whole() {
    let objects = dataset();
    let cluster = Cluster::start(ClusterConfig {
        workers: 2,
        generated: objects.clone(),
        ..ClusterConfig::default()
    })
    .await;
    let admin = cluster.coordinator_client(Role::Admin);
    let named = |names: &[&str]| WarmRequest {
        source: String::new(),
        objects: names.iter().map(|n| (*n).to_owned()).collect(),
        block_size: BLOCK,
        budget_bytes: 0,
    };
    // One name the origin lacks: the whole request is refused and nothing is queued.
    let refused = admin
        .warm_start(&named(&["s3/data/elsewhere.bin", "s3/data/nope.bin"]))
        .await
        .unwrap_err();
    assert_eq!(refused.status_code(), 400, "{refused}");
    assert!(admin.warm_jobs().await.unwrap().jobs.is_empty());

    let job = admin
        .warm_start(&named(&[
            "s3/data/elsewhere.bin",
            "s3/data/warm/part-0.bin",
        ]))
        .await
        .unwrap();
    assert_eq!((job.objects, job.blocks), (2, 4), "{job:?}");
    assert_eq!(job.source, "2 objects");
    let done = finished(&cluster, job.id).await;
    assert_eq!((done.state, done.bytes_done), (WarmState::Done, done.bytes));
}
