//! A Talon cluster across hosts (issue 14): each part in its own network namespace on
//! one bridge — an origin host, a coordinator host, three worker hosts and a gateway
//! host — started from the real binaries, and read through the gateway from this
//! process with every byte checked. A worker host partitioned away costs reads
//! latency, never an error; the membership drops it, and after the partition heals it
//! registers again and serves again. The gateway cut off from the coordinator keeps
//! serving on its last membership.
//!
//! Needs root (`ip netns`) and the debug binaries (`cargo build --workspace --bins`;
//! scripts/test.sh builds them first).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use talon_core::Backend;

use talon_bench::deployment::{
    Binaries, Coordinator, Gateway, GatewaySpec, Geometry, Route, Stub, Worker, WorkerSpec,
    client_auth,
};
use talon_bench::http_load::{Length, LoadSpec, ObjectTarget, Pick, run_load};
use talon_bench::netns::Network;
use talon_bench::verify::ExpectedRanges;
use talon_origin_stub::generated::GeneratedObject;

const BLOCK: u64 = 1 << 20;
const WORKERS: [&str; 3] = ["w1", "w2", "w3"];

fn binaries() -> Binaries {
    // target/debug, beside this test's own target/debug/deps.
    let dir: PathBuf = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .to_owned();
    let b = Binaries::locate(Some(&dir)).unwrap();
    b.require(&[
        "talon-origin-stub",
        "talon-coordinator",
        "talon-worker",
        "talon-gateway",
    ])
    .unwrap_or_else(|e| panic!("{e}: run `cargo build --workspace --bins` first"));
    b
}

fn objects() -> Vec<GeneratedObject> {
    (0..6)
        .map(|i| GeneratedObject::new("data", format!("o{i}.bin"), 3 * BLOCK + 777, 900 + i))
        .collect()
}

/// Reads every object through the gateway, whole and in 256 KiB ranges, checking
/// every byte; panics on any error or wrong byte.
async fn read_all(gateway: &Gateway, objects: &[GeneratedObject], what: &str) {
    for o in objects {
        for expected in [
            ExpectedRanges::whole_object(o.clone()),
            ExpectedRanges::new(o.clone(), 256 << 10),
        ] {
            let n = expected.len() as u64;
            let target = ObjectTarget::s3(
                &gateway.url,
                &o.bucket,
                &o.key,
                client_auth(Backend::S3).unwrap(),
            )
            .unwrap();
            let out = run_load(LoadSpec {
                target: Arc::new(target),
                expected: Arc::new(expected),
                concurrency: 2,
                pick: Pick::EachOnce,
                length: Length::Requests(n),
                watch: Vec::new(),
            })
            .await;
            assert_eq!(out.first_error, None, "{what}: {}", o.key);
            assert_eq!(out.requests, n, "{what}: {}", o.key);
        }
    }
}

/// The coordinator's live members, by id.
async fn live(coordinator: &Coordinator) -> Vec<String> {
    let (status, text) = talon_bench::http_load::control_request(
        http::Method::GET,
        &format!("{}/v1/members", coordinator.url),
        None,
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut ids: Vec<String> = json["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["state"] == "live")
        .filter_map(|m| m["id"].as_str().map(str::to_owned))
        .collect();
    ids.sort();
    ids
}

/// Reads the worker has answered (hits and misses), from its own `/metrics`.
async fn reads_served(worker: &Worker) -> f64 {
    let (_, text) = talon_bench::http_load::control_request(
        http::Method::GET,
        &format!("{}/metrics", worker.admin_url),
        None,
    )
    .await
    .unwrap();
    ["talon_worker_hits_total ", "talon_worker_misses_total "]
        .iter()
        .filter_map(|name| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        })
        .sum()
}

async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_across_hosts_survives_a_partitioned_worker_and_a_lost_coordinator() {
    let net = Network::create(&["origin", "coord", "w1", "w2", "w3", "gw"])
        .unwrap_or_else(|e| panic!("{e}"));
    let bins = binaries();
    let dir = tempfile::tempdir().unwrap();
    let objects = objects();
    let stub = Stub::start_on(&bins, dir.path(), &objects, net.host("origin"))
        .await
        .unwrap();
    // Heartbeats every 200 ms, expiry after 2 s.
    let mut coordinator = Coordinator::start_on(
        &bins,
        dir.path(),
        "coordinator",
        Geometry {
            block_size: BLOCK,
            page_size: 256 << 10,
        },
        net.host("coord"),
    )
    .await
    .unwrap();
    let coordinator_url = coordinator.url.clone();
    let mut workers = Vec::new();
    for id in WORKERS {
        let spec = WorkerSpec {
            origin_request_limit: None,
            max_blocks: None,
            id,
            coordinator: &coordinator_url,
            advertise: None,
            capacity: 256 << 20,
            page_size: 256 << 10,
            host: Some(net.host(id)),
        };
        workers.push(
            Worker::start(&bins, dir.path(), &stub, &mut coordinator, spec)
                .await
                .unwrap(),
        );
    }
    let gateway = Gateway::start(
        &bins,
        dir.path(),
        &stub,
        GatewaySpec {
            origin_request_limit: None,
            name: "gateway",
            front: Backend::S3,
            route: Route::Cache,
            coordinator: Some(&coordinator_url),
            block_size: BLOCK,
            local_reads: false,
            max_staleness_ms: None,
            hedge_budget: None,
            host: Some(net.host("gw")),
            unsigned_reads: false,
            tls: None,
            read_ahead_objects: None,
        },
    )
    .await
    .unwrap();
    assert!(gateway.url.contains(&net.host("gw").ip), "{}", gateway.url);
    read_all(&gateway, &objects, "across hosts, all well").await;
    let w1_before = reads_served(&workers[0]).await;
    assert!(w1_before > 0.0, "w1 owns some blocks and served them");

    // w1's host cut off: reads go on (its pieces move to their next owners), and the
    // membership drops it once its heartbeats stop arriving.
    net.cut("w1").unwrap();
    read_all(&gateway, &objects, "w1 partitioned away").await;
    eventually(
        "the coordinator to drop w1",
        Duration::from_secs(15),
        || async { live(&coordinator).await == ["w2", "w3"] },
    )
    .await;
    read_all(&gateway, &objects, "after the membership dropped w1").await;

    // Healed: w1's next heartbeat is refused (expired), it registers again, and reads
    // reach it again.
    net.heal("w1").unwrap();
    eventually("w1 to rejoin", Duration::from_secs(15), || async {
        live(&coordinator).await == ["w1", "w2", "w3"]
    })
    .await;
    let w1_back = reads_served(&workers[0]).await;
    eventually(
        "w1 to serve reads again",
        Duration::from_secs(15),
        || async {
            read_all(&gateway, &objects, "after w1 rejoined").await;
            reads_served(&workers[0]).await > w1_back
        },
    )
    .await;

    // The coordinator's host cut off: the gateway keeps its last membership and the
    // workers keep serving.
    net.cut("coord").unwrap();
    for round in 0..3 {
        read_all(
            &gateway,
            &objects,
            &format!("coordinator unreachable, round {round}"),
        )
        .await;
    }
    net.heal("coord").unwrap();
    eventually(
        "every worker live again",
        Duration::from_secs(15),
        || async { live(&coordinator).await == ["w1", "w2", "w3"] },
    )
    .await;
    read_all(&gateway, &objects, "all healed").await;
}
