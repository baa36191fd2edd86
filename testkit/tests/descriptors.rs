//! A worker under a low open-files limit (the read review's RP-05, the red-team
//! review's RT-02): it splits the limit between cached blocks and connections at
//! start, so a dataset of many small objects (a block each, whatever the byte budget)
//! never runs it out of descriptors: every read is served, its admin endpoint keeps
//! answering, and nothing is logged or counted as a disk failure. Before the budget,
//! the blocks took every descriptor: new blocks failed as if the disk had, and the
//! admin listener could not accept while the worker kept heartbeating.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, WorkerProcess, http_get, read_whole_checked};

const LIMIT: u64 = 600;

/// Answers /healthz within a few seconds (a worker out of descriptors accepts nothing).
async fn healthy(process: &WorkerProcess, when: &str) {
    let url = format!("{}/healthz", process.admin_url);
    let answer = tokio::time::timeout(Duration::from_secs(5), http_get(&url)).await;
    assert!(
        answer.is_ok_and(|a| a.contains("ok")),
        "/healthz did not answer {when}"
    );
}

fn open_descriptors(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as u64
}

/// `count` objects of 2 KiB (a block each) at the origin of a cluster with no worker yet.
async fn small_objects(count: u64) -> (Vec<GeneratedObject>, Cluster) {
    let objects: Vec<GeneratedObject> = (0..count)
        .map(|i| GeneratedObject::new("small", format!("o{i}"), 2048, i))
        .collect();
    let cluster = Cluster::start(ClusterConfig {
        workers: 0,
        generated: objects.clone(),
        local_sockets: false,
        ..ClusterConfig::default()
    })
    .await;
    (objects, cluster)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_small_objects_never_run_a_worker_out_of_descriptors() {
    let (objects, cluster) = small_objects(700).await;
    let dir = tempfile::tempdir().unwrap();
    let process =
        WorkerProcess::start_limited(&cluster, "w0", &dir.path().join("cache"), LIMIT).await;
    cluster.wait_for_live(1).await;
    let client = cluster.client().await;
    cluster.sync_client(&client).await;
    healthy(&process, "at start").await;

    for pass in ["first", "second"] {
        for object in &objects {
            read_whole_checked(&client, object, &format!("the {pass} read")).await;
        }
        healthy(&process, &format!("after the {pass} pass")).await;
        let open = open_descriptors(process.pid());
        assert!(open < LIMIT, "{open} descriptors open of {LIMIT}");
    }
    let log = process.log();
    assert!(log.contains("descriptor budget"), "{log}");
    assert!(
        !log.contains("Too many open files"),
        "the worker ran out of descriptors:\n{log}"
    );
    for (metric, what) in [
        (
            "talon_worker_disk_errors_total{op=\"create\"}",
            "disk errors",
        ),
        (
            "talon_worker_pass_through_total{reason=\"no_descriptors\"}",
            "reads passed through for want of descriptors",
        ),
    ] {
        assert_eq!(process.metric(metric).await, 0.0, "{what}");
    }
    assert!(
        process.metric("talon_worker_evictions_total").await > 0.0,
        "the block cap, not the byte budget, evicted"
    );
}

/// The soft open-files limit of process `pid`, from `/proc/PID/limits`.
fn soft_open_files(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

/// A worker takes the open-files limit its hard limit allows (every block is an open
/// file: a soft limit of 600 under a hard one of 4,096 held a dataset of small objects
/// to a few hundred blocks), and `--max-blocks` bounds its blocks below what the
/// descriptors would allow: past it, blocks are evicted one at a time and every read is
/// still right.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_raises_its_open_files_limit_and_keeps_to_max_blocks() {
    let (objects, cluster) = small_objects(80).await;
    let dir = tempfile::tempdir().unwrap();
    let process = WorkerProcess::start_with_limits(
        &cluster,
        "w0",
        &dir.path().join("cache"),
        &["--max-blocks", "64"],
        (LIMIT, 4096),
    )
    .await;
    cluster.wait_for_live(1).await;
    assert_eq!(
        soft_open_files(process.pid()),
        4096,
        "the soft limit raised"
    );
    let client = cluster.client().await;
    cluster.sync_client(&client).await;
    for object in &objects {
        read_whole_checked(&client, object, "a read past --max-blocks").await;
    }
    let evicted = process.metric("talon_worker_evictions_total").await;
    assert!(
        evicted >= 16.0,
        "80 objects through a cap of 64 blocks evicted {evicted}"
    );
    healthy(&process, "after the reads").await;
}
