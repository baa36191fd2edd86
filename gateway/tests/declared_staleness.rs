//! Declared staleness through a whole sandbox cluster: one setting (T) bounds how late
//! a read sees a write made at the origin, whatever the workers' own metadata TTL, and
//! stale-if-error serves the last known version, flagged, while the origin fails. And
//! what that costs the origin in requests: one per cold object, none within T, however
//! many gateways; never more per prefix than the workers' limit allows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use talon_gateway::config::{
    AzureFront, Backend, Identities, IdentitiesFile, Limits, Route, S3Front,
};
use talon_gateway::{Freshness, GatewayConfig, RunningGateway};
use talon_origin_stub::faults::{FaultConfig, FaultKind};
use talon_origin_stub::generated::GeneratedObject;
use talon_protocols::s3::request::S3Addressing;
use talon_testkit::{Cluster, ClusterConfig, http_get, metric};

/// A cluster of `workers` with bucket `data` at its origin, and a gateway in front of it
/// declaring `t`.
async fn data_bucket_behind_a_gateway(workers: usize, t: Duration) -> (Cluster, RunningGateway) {
    let cluster = Cluster::start(ClusterConfig {
        workers,
        ..ClusterConfig::default()
    })
    .await;
    let gw = gateway(&cluster, Freshness::within(t)).await;
    let origins = cluster.origins();
    origins
        .s3
        .as_ref()
        .unwrap()
        .create_bucket("data")
        .await
        .unwrap();
    (cluster, gw)
}

async fn gateway(cluster: &Cluster, freshness: Freshness) -> RunningGateway {
    gateway_with(cluster, freshness, Limits::default()).await
}

async fn gateway_with(cluster: &Cluster, freshness: Freshness, limits: Limits) -> RunningGateway {
    let identities = Identities::from_parts(IdentitiesFile {
        s3: Vec::new(),
        azure: None,
        anonymous: talon_protocols::access::AnonymousAccess::ReadWrite,
        public: Vec::new(),
    })
    .unwrap();
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
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        origins: cluster.origins(),
        cache: Some(cluster.client().await),
        identities,
        freshness,
        limits,
        tls: None,
        acl_file: None,
        cache_status: true,
        access_log: None,
    })
    .await
    .unwrap()
}

/// The object's URL on both fronts.
fn urls(gw: &RunningGateway, key: &str) -> [String; 2] {
    [
        format!("{}/data/{key}", gw.s3_url().unwrap()),
        format!("{}/data/{key}", gw.azure_url().unwrap()),
    ]
}

async fn get(url: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(url)
        .header("x-ms-version", "2025-01-05")
        .send()
        .await
        .unwrap()
}

/// Status, ETag and bytes of a GET.
async fn read(url: &str) -> (u16, String, Bytes) {
    let resp = get(url).await;
    let status = resp.status().as_u16();
    let etag = resp
        .headers()
        .get("etag")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, etag, resp.bytes().await.unwrap())
}

/// One figure of the gateway's `talon_gateway_metadata_cache` in a `/metrics` text.
fn metadata_cache(metrics: &str, what: &str) -> f64 {
    metric(
        metrics,
        &format!("talon_gateway_metadata_cache{{what=\"{what}\"}}"),
    )
    .unwrap_or_else(|| panic!("no {what} in {metrics}"))
}

/// The sum of a worker counter over every worker, for one label set.
fn worker_total(cluster: &Cluster, sample: &str) -> f64 {
    (0..cluster.workers.len())
        .map(|i| cluster.worker_metric(i, sample))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_at_the_origin_is_seen_within_t_though_the_workers_trust_metadata_for_a_minute() {
    // Workers that would keep object metadata for a minute on their own: T must bound
    // both layers (before, a read could lag by the gateway's TTL plus the workers').
    let cluster = Cluster::start(ClusterConfig {
        stat_ttl: Duration::from_secs(60),
        generated: vec![GeneratedObject::new("data", "seed.bin", 10, 1)],
        origin_fallback: true,
        ..ClusterConfig::default()
    })
    .await;
    let t = Duration::from_millis(400);
    let gw = gateway(&cluster, Freshness::within(t)).await;
    let origins = cluster.origins();
    let s3 = origins.s3.as_ref().unwrap();
    let v1 = Bytes::from(vec![1u8; 100_000]);
    let etag1 = s3.put("data", "doc.bin", v1.clone(), None).await.unwrap();
    for url in urls(&gw, "doc.bin") {
        let (status, etag, body) = read(&url).await;
        assert_eq!((status, body.as_ref()), (200, v1.as_ref()), "{url}");
        assert!(talon_protocols::conditional::same_version(&etag, &etag1));
    }

    // Overwritten at the origin, not through the gateway.
    let v2 = Bytes::from(vec![2u8; 70_000]);
    let etag2 = s3.put("data", "doc.bin", v2.clone(), None).await.unwrap();
    let written = Instant::now();
    // The contract is about time: any read that starts T after the write sees it.
    tokio::time::sleep_until((written + t).into()).await;
    for url in urls(&gw, "doc.bin") {
        let (status, etag, body) = read(&url).await;
        assert_eq!(status, 200, "{url}");
        assert!(
            talon_protocols::conditional::same_version(&etag, &etag2),
            "{url}: {etag}, the write was {etag2}"
        );
        assert_eq!(body.as_ref(), v2.as_ref(), "{url}");
    }
    // The workers revalidated what they held (a conditional HEAD found the new
    // version) rather than answering from their minute-long TTL.
    let changed = worker_total(
        &cluster,
        "talon_worker_stat_origin_requests_total{result=\"changed\"}",
    );
    assert!(
        changed >= 1.0,
        "revalidations that found a change: {changed}"
    );

    // Unchanged for another T: the revalidation is a 304, and the version stays.
    let unchanged_before = worker_total(
        &cluster,
        "talon_worker_stat_origin_requests_total{result=\"unchanged\"}",
    );
    let since = Instant::now();
    tokio::time::sleep_until((since + t).into()).await;
    let [s3_url, _] = urls(&gw, "doc.bin");
    let (status, etag, body) = read(&s3_url).await;
    assert_eq!((status, body.as_ref()), (200, v2.as_ref()));
    assert!(talon_protocols::conditional::same_version(&etag, &etag2));
    let unchanged = worker_total(
        &cluster,
        "talon_worker_stat_origin_requests_total{result=\"unchanged\"}",
    );
    assert!(
        unchanged > unchanged_before,
        "{unchanged_before} -> {unchanged}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_origin_fails_the_last_known_version_serves_flagged_and_only_when_allowed() {
    let object = GeneratedObject::new("data", "model.bin", 300_000, 5);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![object.clone()],
        // As a gateway's own cache client: a read no worker can serve may go to the
        // origin (route `cache`).
        origin_fallback: true,
        ..ClusterConfig::default()
    })
    .await;
    let t = Duration::from_millis(300);
    let stale_ok = gateway(
        &cluster,
        Freshness {
            max_staleness: t,
            stale_if_error: Duration::from_secs(60),
        },
    )
    .await;
    let strict = gateway(&cluster, Freshness::within(t)).await;
    let expected = talon_testkit::expected(&object, 0..300_000);
    for gw in [&stale_ok, &strict] {
        for url in urls(gw, "model.bin") {
            let (status, _, body) = read(&url).await;
            assert_eq!((status, body.as_ref()), (200, expected.as_slice()), "{url}");
        }
    }
    let read_at = Instant::now();

    // Every origin request now fails with a 500.
    cluster
        .origin
        .faults()
        .set(FaultConfig {
            error_rate: 1.0,
            error_kinds: vec![FaultKind::Internal],
            ..FaultConfig::default()
        })
        .unwrap();
    tokio::time::sleep_until((read_at + t).into()).await;

    for url in urls(&stale_ok, "model.bin") {
        let resp = get(&url).await;
        assert_eq!(resp.status(), 200, "{url}");
        assert_eq!(
            resp.headers()["x-talon-stale"],
            "revalidation-failed",
            "{url}"
        );
        let age: u64 = resp.headers()["age"].to_str().unwrap().parse().unwrap();
        assert!(age < 60, "{url}: age {age}");
        assert_eq!(
            resp.bytes().await.unwrap().as_ref(),
            expected.as_slice(),
            "{url}"
        );
    }
    let metrics = http_get(&format!("http://{}/metrics", stale_ok.admin_addr.unwrap())).await;
    assert_eq!(
        metric(&metrics, "talon_gateway_stale_served_total"),
        Some(2.0),
        "{metrics}"
    );

    // Without stale-if-error the same read is the origin's failure, in each
    // protocol's words, and nothing was served stale.
    let [s3_url, azure_url] = urls(&strict, "model.bin");
    let resp = get(&s3_url).await;
    assert_eq!(resp.status(), 500);
    assert!(resp.headers().get("x-talon-stale").is_none());
    let body = resp.text().await.unwrap();
    assert!(body.contains("<Code>InternalError</Code>"), "{body}");
    let resp = get(&azure_url).await;
    assert_eq!(resp.status(), 500);
    assert_eq!(resp.headers()["x-ms-error-code"], "InternalError");
    let metrics = http_get(&format!("http://{}/metrics", strict.admin_addr.unwrap())).await;
    assert_eq!(
        metric(&metrics, "talon_gateway_stale_served_total"),
        Some(0.0)
    );

    // The origin answers again: fresh, unflagged.
    cluster.origin.faults().set(FaultConfig::default()).unwrap();
    for url in urls(&stale_ok, "model.bin") {
        let resp = get(&url).await;
        assert_eq!(resp.status(), 200, "{url}");
        assert!(resp.headers().get("x-talon-stale").is_none(), "{url}");
        assert!(resp.headers().get("age").is_none(), "{url}");
        assert_eq!(resp.bytes().await.unwrap().as_ref(), expected.as_slice());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_pinned_to_a_version_the_origin_replaced_starts_again_on_the_new_one() {
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![GeneratedObject::new("data", "seed.bin", 10, 1)],
        origin_fallback: true,
        ..ClusterConfig::default()
    })
    .await;
    // The gateway trusts metadata for a minute: it still names the old version when
    // the origin has moved on, and a worker's fill pinned to it is refused.
    let gw = gateway(&cluster, Freshness::within(Duration::from_secs(60))).await;
    let origins = cluster.origins();
    let s3 = origins.s3.as_ref().unwrap();
    let [s3_url, _] = urls(&gw, "s3.bin");
    let [_, azure_url] = urls(&gw, "azure.bin");
    for (key, url) in [("s3.bin", s3_url), ("azure.bin", azure_url)] {
        let v1 = Bytes::from(vec![1u8; 600_000]);
        let v2 = Bytes::from(vec![2u8; 600_000]);
        s3.put("data", key, v1.clone(), None).await.unwrap();
        // The first block (256 KiB) is cached at v1, with v1's metadata.
        let resp = reqwest::Client::new()
            .get(&url)
            .header("range", "bytes=0-99")
            .header("x-ms-version", "2025-01-05")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 206, "{url}");
        assert_eq!(resp.bytes().await.unwrap(), v1.slice(0..100));

        let etag2 = s3.put("data", key, v2.clone(), None).await.unwrap();
        // A range in the second block, not cached: its fill pinned to v1 is refused,
        // and the read starts again (nothing was sent yet) on v2 instead of failing
        // with 412 though the client set no condition.
        let resp = reqwest::Client::new()
            .get(&url)
            .header("range", "bytes=400000-400099")
            .header("x-ms-version", "2025-01-05")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 206, "{url}");
        let etag = resp.headers()["etag"].to_str().unwrap().to_owned();
        assert!(
            talon_protocols::conditional::same_version(&etag, &etag2),
            "{url}: {etag}"
        );
        assert_eq!(resp.bytes().await.unwrap(), v2.slice(400_000..400_100));
    }
}

/// What reads cost the origin (the stub's own request count, every operation): a cold
/// GET is one origin request, whole or ranged within the first block, through either
/// front (the object's metadata home, the owner of its first block, learns the
/// metadata and the first bytes from one GET and keeps them; the read is then a hit);
/// a cold HEAD is one HEAD; any re-read within T costs nothing. Before, a cold GET was
/// a HEAD and then a GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_read_costs_the_origin_one_request_and_a_warm_one_none() {
    let (cluster, gw) = data_bucket_behind_a_gateway(3, Duration::from_secs(300)).await;
    let origins = cluster.origins();
    let s3 = origins.s3.as_ref().unwrap();
    let stub = cluster.origin.metrics();
    let body = |seed: u8| -> Bytes { (0..100_000u32).map(|i| (i as u8) ^ seed).collect() };
    // (name, Range header, the bytes it asks for)
    let cases: [(&str, Option<&str>, std::ops::Range<usize>); 3] = [
        ("whole", None, 0..100_000),
        ("bounded range", Some("bytes=1000-50999"), 1000..51_000),
        ("open range", Some("bytes=5000-"), 5000..100_000),
    ];
    let mut seed = 0u8;
    for (front, base) in [
        ("s3", gw.s3_url().unwrap()),
        ("azure", gw.azure_url().unwrap()),
    ] {
        for (case, range, want) in &cases {
            seed += 1;
            let key = format!("cold-{front}-{seed}.bin");
            let bytes = body(seed);
            s3.put("data", &key, bytes.clone(), None).await.unwrap();
            let url = format!("{base}/data/{key}");
            let get = || {
                let mut req = reqwest::Client::new()
                    .get(&url)
                    .header("x-ms-version", "2025-01-05");
                if let Some(r) = range {
                    req = req.header("range", *r);
                }
                req.send()
            };
            for pass in ["cold", "warm"] {
                let before = stub.requests_total();
                let resp = get().await.unwrap();
                assert!(
                    resp.status().is_success(),
                    "{front} {case} {pass}: {}",
                    resp.status()
                );
                let got = resp.bytes().await.unwrap();
                assert_eq!(got.as_ref(), &bytes[want.clone()], "{front} {case} {pass}");
                let spent = stub.requests_total() - before;
                let expected = if pass == "cold" { 1 } else { 0 };
                assert_eq!(
                    spent,
                    expected,
                    "{front} {case} {pass}: {spent} origin requests (HEADs {} / {}, GETs {} / {})",
                    stub.requests_of(talon_core::Backend::S3, "HeadObject"),
                    stub.requests_of(talon_core::Backend::Azure, "GetBlobProperties"),
                    stub.requests_of(talon_core::Backend::S3, "GetObject"),
                    stub.requests_of(talon_core::Backend::Azure, "GetBlob"),
                );
            }
        }
        // A cold HEAD: one HEAD, no bytes.
        seed += 1;
        let key = format!("cold-{front}-{seed}.bin");
        s3.put("data", &key, body(seed), None).await.unwrap();
        let before = stub.requests_total();
        let resp = reqwest::Client::new()
            .head(format!("{base}/data/{key}"))
            .header("x-ms-version", "2025-01-05")
            .send()
            .await
            .unwrap();
        assert!(
            resp.status().is_success(),
            "{front} HEAD: {}",
            resp.status()
        );
        assert_eq!(stub.requests_total() - before, 1, "{front}: a cold HEAD");
    }
    // The GETs of first bytes were counted as such by the workers.
    let reads = worker_total(
        &cluster,
        "talon_worker_stat_origin_requests_total{result=\"read\"}",
    );
    assert_eq!(reads, 6.0, "metadata fetched with the first bytes");
    // The gateway's metadata cache answered every warm read, and holds the 8 objects.
    let metrics = http_get(&format!("http://{}/metrics", gw.admin_addr.unwrap())).await;
    let held = |what: &str| metadata_cache(&metrics, what);
    assert_eq!(held("entries"), 8.0);
    assert_eq!(held("hits"), 6.0, "the six warm reads");
    assert_eq!(held("misses"), 8.0, "the eight cold ones");
    assert_eq!(held("evictions"), 0.0);
    assert!(held("bytes") > 0.0);
}

/// The gateway's metadata is bounded by entries (and bytes): past the bound it evicts
/// entries one at a time, never the whole table (it was cleared whole past 100,000
/// objects, so every object's next read asked again), and every read stays right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_cache_keeps_its_bound_by_evicting_entries_not_itself() {
    let cluster = Cluster::start(ClusterConfig::default()).await;
    let gw = gateway_with(
        &cluster,
        Freshness::within(Duration::from_secs(300)),
        Limits {
            metadata_entries: 20,
            ..Limits::default()
        },
    )
    .await;
    let origins = cluster.origins();
    let s3 = origins.s3.as_ref().unwrap();
    s3.create_bucket("data").await.unwrap();
    for i in 0..100u32 {
        let body = Bytes::from(format!("object {i}").repeat(10));
        s3.put("data", &format!("many/{i}"), body.clone(), None)
            .await
            .unwrap();
        let (status, _, got) = read(&format!("{}/data/many/{i}", gw.s3_url().unwrap())).await;
        assert_eq!((status, got), (200, body), "object {i}");
    }
    let metrics = http_get(&format!("http://{}/metrics", gw.admin_addr.unwrap())).await;
    let held = |what: &str| metadata_cache(&metrics, what);
    assert!(held("entries") <= 20.0, "{metrics}");
    assert!(
        held("entries") >= 10.0,
        "most of the bound is used: {metrics}"
    );
    assert!(held("evictions") >= 80.0, "{metrics}");
}

/// Fleet-wide, once per bound: three gateways read the same objects, and the origin is
/// asked for each object once (the owner of its first block is its metadata home, and
/// what one gateway's read brought there answers the others), the bytes included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_reading_the_same_objects_cost_the_origin_one_request_each() {
    let cluster = Cluster::start(ClusterConfig {
        workers: 3,
        ..ClusterConfig::default()
    })
    .await;
    let t = Freshness::within(Duration::from_secs(300));
    let gateways = [
        gateway(&cluster, t).await,
        gateway(&cluster, t).await,
        gateway(&cluster, t).await,
    ];
    let origins = cluster.origins();
    let s3 = origins.s3.as_ref().unwrap();
    s3.create_bucket("data").await.unwrap();
    let objects = 30u32;
    for i in 0..objects {
        let body = Bytes::from(format!("shared object {i} ").repeat(50));
        s3.put("data", &format!("shared/{i}"), body, None)
            .await
            .unwrap();
    }
    let stub = cluster.origin.metrics();
    let before = stub.requests_total();
    for gw in &gateways {
        for i in 0..objects {
            let (status, _, got) = read(&format!("{}/data/shared/{i}", gw.s3_url().unwrap())).await;
            assert_eq!(status, 200);
            assert_eq!(got, Bytes::from(format!("shared object {i} ").repeat(50)));
        }
    }
    assert_eq!(
        stub.requests_total() - before,
        u64::from(objects),
        "one origin request per object, for three gateways"
    );
}

/// The sum of the workers' `talon_worker_origin_request_limit` for one outcome.
fn limited(cluster: &Cluster, outcome: &str) -> f64 {
    worker_total(
        cluster,
        &format!("talon_worker_origin_request_limit{{outcome=\"{outcome}\"}}"),
    )
}

/// The origin is protected: with the workers' per-prefix limit under an origin that
/// throttles (the stub's S3-like model), a burst of cold reads of one folder queues at
/// the workers instead of tripping the origin: every read gets its bytes and the origin
/// never answers SlowDown. Without the limit (`TALON_TEST_NO_ORIGIN_LIMIT=1`) the same
/// reads trip it and clients get its 503 SlowDown: this test fails (2026-12-04).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_cold_reads_queues_under_the_limit_and_never_trips_a_throttling_origin() {
    let limit = std::env::var("TALON_TEST_NO_ORIGIN_LIMIT")
        .is_err()
        .then_some(talon_protocols::origin::request_limit::RequestLimit {
            per_second: 10,
            burst: 1,
            queue: Duration::from_secs(30),
        });
    let cluster = Cluster::start(ClusterConfig {
        workers: 2,
        origin_request_limit: limit,
        ..ClusterConfig::default()
    })
    .await;
    let gw = gateway(&cluster, Freshness::within(Duration::from_secs(300))).await;
    let origins = cluster.origins();
    let s3 = origins.s3.as_ref().unwrap();
    s3.create_bucket("data").await.unwrap();
    let objects = 60u32;
    let body = |i: u32| Bytes::from(format!("dataset sample {i} ").repeat(40));
    for i in 0..objects {
        s3.put("data", &format!("set/{i}.bin"), body(i), None)
            .await
            .unwrap();
    }
    // 30 requests a second at most, one second's worth at once: the two workers'
    // 10 a second each stay under it.
    cluster
        .origin
        .faults()
        .set(FaultConfig {
            throttle_rps: Some(30),
            ..FaultConfig::default()
        })
        .unwrap();
    let stub = cluster.origin.metrics();
    let before = stub.requests_total();
    let base = gw.s3_url().unwrap();
    let mut readers = tokio::task::JoinSet::new();
    for reader in 0..12u32 {
        let base = base.clone();
        readers.spawn(async move {
            let mut got = Vec::new();
            for i in (reader..objects).step_by(12) {
                let (status, _, bytes) = read(&format!("{base}/data/set/{i}.bin")).await;
                got.push((i, status, bytes));
            }
            got
        });
    }
    let mut answered = 0;
    while let Some(got) = readers.join_next().await {
        for (i, status, bytes) in got.unwrap() {
            assert_eq!(status, 200, "object {i}");
            assert_eq!(bytes, body(i), "object {i}");
            answered += 1;
        }
    }
    assert_eq!(answered, objects);
    assert_eq!(stub.faults_of("throttled"), 0, "the origin never throttled");
    assert_eq!(
        stub.requests_total() - before,
        u64::from(objects),
        "one origin request per cold object"
    );
    assert!(limited(&cluster, "queued") > 0.0, "reads waited their turn");
    assert_eq!(limited(&cluster, "refused"), 0.0);
}

/// Past the queue a read is refused in the protocol's terms — S3 `503 SlowDown`,
/// Azure `503 ServerBusy` — and nothing reaches the origin for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_queue_a_read_is_answered_slowdown_and_nothing_reaches_the_origin() {
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        origin_request_limit: Some(talon_protocols::origin::request_limit::RequestLimit {
            per_second: 1,
            burst: 1,
            queue: Duration::ZERO,
        }),
        ..ClusterConfig::default()
    })
    .await;
    let gw = gateway(&cluster, Freshness::within(Duration::from_secs(300))).await;
    let origins = cluster.origins();
    let s3 = origins.s3.as_ref().unwrap();
    s3.create_bucket("data").await.unwrap();
    let stub = cluster.origin.metrics();
    for (front, base, code) in [
        ("s3", gw.s3_url().unwrap(), "SlowDown"),
        ("azure", gw.azure_url().unwrap(), "ServerBusy"),
    ] {
        for i in 0..6 {
            s3.put(
                "data",
                &format!("{front}/{i}"),
                Bytes::from(vec![i; 100]),
                None,
            )
            .await
            .unwrap();
        }
        let before = stub.requests_total();
        let refused_before = limited(&cluster, "refused");
        // Six cold reads of one folder at once: one turn a second, no queue.
        let answers = futures_util::future::join_all((0..6u8).map(|i| {
            let url = format!("{base}/data/{front}/{i}");
            async move {
                let resp = get(&url).await;
                let status = resp.status().as_u16();
                let header = resp
                    .headers()
                    .get("x-ms-error-code")
                    .map(|v| v.to_str().unwrap().to_owned());
                (i, status, header, resp.bytes().await.unwrap())
            }
        }))
        .await;
        let mut served = 0;
        for (i, status, header, body) in answers {
            match status {
                200 => {
                    assert_eq!(body, Bytes::from(vec![i; 100]), "{front} {i}");
                    served += 1;
                }
                503 => {
                    let text = String::from_utf8_lossy(&body);
                    assert!(
                        text.contains(&format!("<Code>{code}</Code>")),
                        "{front} {i}: {text}"
                    );
                    if front == "azure" {
                        assert_eq!(header.as_deref(), Some(code));
                    }
                }
                other => panic!("{front} {i}: status {other}"),
            }
        }
        assert!((1..6).contains(&served), "{front}: {served} of 6 served");
        assert_eq!(
            stub.requests_total() - before,
            served,
            "{front}: only the served reads reached the origin"
        );
        assert!(limited(&cluster, "refused") - refused_before >= (6 - served) as f64);
        assert_eq!(stub.faults_of("throttled"), 0);
    }
}

/// Revalidation that scales: a pass over a folder after T, in shuffled order, costs the
/// origin a listing page per worker instead of a HEAD per object (before 2026-12-04:
/// 200 HEADs). Generated objects, last modified long ago, so a listing can vouch for
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shuffled_pass_after_t_is_revalidated_from_listing_pages_not_a_head_each() {
    let objects = 200u64;
    let generated: Vec<GeneratedObject> = (0..objects)
        .map(|i| GeneratedObject::new("data", format!("epoch/{i:04}.bin"), 1000 + i, i))
        .collect();
    let cluster = Cluster::start(ClusterConfig {
        workers: 3,
        generated: generated.clone(),
        ..ClusterConfig::default()
    })
    .await;
    let t = Duration::from_secs(4);
    let gw = gateway(&cluster, Freshness::within(t)).await;
    let base = gw.s3_url().unwrap();
    let pass = |order: Vec<u64>| {
        let (base, generated) = (base.clone(), generated.clone());
        async move {
            let mut readers = tokio::task::JoinSet::new();
            for chunk in order.chunks(25) {
                let (base, generated, chunk) = (base.clone(), generated.clone(), chunk.to_vec());
                readers.spawn(async move {
                    for i in chunk {
                        let o = &generated[i as usize];
                        let (status, _, got) = read(&format!("{base}/data/{}", o.key)).await;
                        assert_eq!(status, 200, "{}", o.key);
                        assert_eq!(
                            got.as_ref(),
                            talon_testkit::expected(o, 0..o.size).as_slice()
                        );
                    }
                });
            }
            while let Some(done) = readers.join_next().await {
                done.unwrap();
            }
        }
    };
    let stub = cluster.origin.metrics();
    let before = stub.requests_total();
    pass((0..objects).collect()).await;
    let cold = stub.requests_total() - before;
    assert_eq!(cold, objects, "one request per cold object");
    // Past T every entry is due, at the gateway and at the workers.
    let read_at = Instant::now();
    tokio::time::sleep(t.saturating_sub(read_at.elapsed()) + Duration::from_millis(500)).await;
    let mut shuffled: Vec<u64> = (0..objects).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..shuffled.len()).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        shuffled.swap(i, (state >> 33) as usize % (i + 1));
    }
    let head_objects = || stub.requests_of(talon_core::Backend::S3, "HeadObject");
    let (before, heads_before) = (stub.requests_total(), head_objects());
    pass(shuffled).await;
    let after_t = stub.requests_total() - before;
    let listed = worker_total(
        &cluster,
        "talon_worker_stat_origin_requests_total{result=\"listed\"}",
    );
    let heads = head_objects() - heads_before;
    let why = format!("{after_t} origin requests after T ({listed} listings, {heads} HEADs)");
    // Each worker lists the folder (one page) when the first of its keys comes due;
    // the readers of its other keys meanwhile wait for that listing: 3 requests, never
    // a HEAD (a few more only if a listing ends while keys it kept are being read).
    assert!(listed >= 3.0, "each worker listed: {why}");
    assert_eq!(heads, 0, "{why}");
    assert!(after_t <= 6, "{why}");
}

/// Listings are cached within T like metadata: the same page asked again costs the
/// origin nothing, a write made at the origin shows within T, and a write through this
/// gateway shows at once (before 2026-12-04 every listing went to the origin).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_is_answered_from_memory_within_t_and_shows_a_write_through_the_gateway() {
    let (cluster, gw) = data_bucket_behind_a_gateway(1, Duration::from_secs(300)).await;
    let origins = cluster.origins();
    let s3 = origins.s3.as_ref().unwrap();
    for i in 0..5 {
        s3.put("data", &format!("ls/{i}"), Bytes::from_static(b"x"), None)
            .await
            .unwrap();
    }
    let stub = cluster.origin.metrics();
    let s3_listing = format!("{}/data?list-type=2&prefix=ls/", gw.s3_url().unwrap());
    let azure_listing = format!(
        "{}/data?restype=container&comp=list&prefix=ls/",
        gw.azure_url().unwrap()
    );
    // (status, keys listed, origin requests it cost)
    let list = |url: String, tag: &'static str| async move {
        let before = stub.requests_total();
        let (status, _, body) = read(&url).await;
        let text = String::from_utf8_lossy(&body).into_owned();
        (
            status,
            text.matches(tag).count(),
            stub.requests_total() - before,
        )
    };
    assert_eq!(list(s3_listing.clone(), "<Key>").await, (200, 5, 1));
    assert_eq!(list(s3_listing.clone(), "<Key>").await, (200, 5, 0));
    // Another front is another request of the origin, then kept too.
    assert_eq!(list(azure_listing.clone(), "<Name>").await, (200, 5, 1));
    assert_eq!(list(azure_listing.clone(), "<Name>").await, (200, 5, 0));
    // Written at the origin: seen within T, not before it has passed.
    s3.put("data", "ls/5", Bytes::from_static(b"x"), None)
        .await
        .unwrap();
    assert_eq!(list(s3_listing.clone(), "<Key>").await, (200, 5, 0));
    // Written through the gateway: the next listing asks the origin, and shows both.
    let put = reqwest::Client::new()
        .put(format!("{}/data/ls/6", gw.s3_url().unwrap()))
        .body("y")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 200);
    assert_eq!(list(s3_listing.clone(), "<Key>").await, (200, 7, 1));
    assert_eq!(list(s3_listing, "<Key>").await, (200, 7, 0));
    let metrics = http_get(&format!("http://{}/metrics", gw.admin_addr.unwrap())).await;
    let listing = |what: &str| {
        metric(
            &metrics,
            &format!("talon_gateway_listing_cache{{what=\"{what}\"}}"),
        )
        .unwrap_or_else(|| panic!("no {what} in {metrics}"))
    };
    assert_eq!(listing("hits"), 4.0, "{metrics}");
    assert_eq!(
        listing("misses"),
        3.0,
        "two cold pages, one after the write: {metrics}"
    );
    assert_eq!(listing("entries"), 2.0, "{metrics}");
}

/// `talon invalidate` (the coordinator's `POST /v1/invalidations`): within a heartbeat
/// every gateway and worker stops answering what it learned under the prefix, metadata
/// and listings alike, so a read sees an overwrite made at the origin long before T;
/// what lies outside the prefix stays cached. Only the admin role may invalidate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidation_reaches_every_gateway_and_worker_within_a_heartbeat() {
    let (cluster, gw) = data_bucket_behind_a_gateway(2, Duration::from_secs(300)).await;
    let origins = cluster.origins();
    let s3 = origins.s3.as_ref().unwrap();
    let v = |what: &str| Bytes::from(format!("{what} ").repeat(100));
    for key in ["inv/a", "keep/c"] {
        s3.put("data", key, v("first"), None).await.unwrap();
    }
    let [a, c] = [
        urls(&gw, "inv/a")[0].clone(),
        urls(&gw, "keep/c")[0].clone(),
    ];
    let listing = format!("{}/data?list-type=2&prefix=inv/", gw.s3_url().unwrap());
    let keys = |body: &Bytes| String::from_utf8_lossy(body).matches("<Key>").count();
    assert_eq!(read(&a).await.2, v("first"));
    assert_eq!(read(&c).await.2, v("first"));
    assert_eq!(keys(&read(&listing).await.2), 1);
    // Changed at the origin: within T nothing shows.
    for key in ["inv/a", "keep/c"] {
        s3.put("data", key, v("second"), None).await.unwrap();
    }
    s3.put("data", "inv/b", v("new"), None).await.unwrap();
    assert_eq!(read(&a).await.2, v("first"));
    assert_eq!(keys(&read(&listing).await.2), 1);
    // Only an admin may invalidate; a refusal changes nothing.
    let reader = cluster.coordinator_client(talon_core::cluster_auth::Role::Reader);
    assert!(reader.invalidate("s3/data/inv/").await.is_err());
    let admin = cluster.coordinator_client(talon_core::cluster_auth::Role::Admin);
    assert!(
        admin
            .invalidations()
            .await
            .unwrap()
            .invalidations
            .is_empty()
    );
    assert!(admin.invalidate("s3/").await.is_err(), "names no bucket");
    let view = admin.invalidate("s3/data/inv/").await.unwrap();
    assert_eq!(view.invalidations.len(), 1);
    // Within a heartbeat (100 ms here; the gateway's membership poll as often).
    let sees = wait_for_new(&a, v("second")).await;
    assert!(sees < Duration::from_secs(5), "took {sees:?}");
    assert_eq!(keys(&read(&listing).await.2), 2, "the listing shows inv/b");
    // Outside the prefix: still the cached version, and no origin request for it.
    let stub = cluster.origin.metrics();
    let before = stub.requests_total();
    assert_eq!(read(&c).await.2, v("first"));
    assert_eq!(stub.requests_total(), before);
    // The worker's own table was invalidated too: it revalidated, counted as changed.
    assert!(
        worker_total(
            &cluster,
            "talon_worker_stat_origin_requests_total{result=\"changed\"}"
        ) >= 1.0
    );
}

/// Reads `url` until it answers `want`; how long that took.
async fn wait_for_new(url: &str, want: Bytes) -> Duration {
    let started = Instant::now();
    talon_testkit::wait_for("the new version", Duration::from_secs(10), || {
        let want = want.clone();
        async move { (read(url).await.2 == want).then_some(()) }
    })
    .await;
    started.elapsed()
}

/// `talon freshness` (the coordinator's `PUT /v1/freshness`): a per-prefix bound every
/// gateway and worker applies instead of its own T. Under an `immutable` prefix and one
/// of five minutes a re-read after T costs the origin nothing; elsewhere it revalidates.
/// Only the admin role may set them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freshness_rule_reaches_every_gateway_and_worker_and_sets_the_bound_there() {
    use talon_coordinator_client::api::{FreshnessRequest, FreshnessRule};
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        ..ClusterConfig::default()
    })
    .await;
    let t = Duration::from_millis(300);
    let gw = gateway(&cluster, Freshness::within(t)).await;
    let origins = cluster.origins();
    let s3 = origins.s3.as_ref().unwrap();
    s3.create_bucket("data").await.unwrap();
    let keys = ["frozen/a", "slow/b", "plain/c"];
    for key in keys {
        s3.put("data", key, Bytes::from(key.repeat(50)), None)
            .await
            .unwrap();
    }
    let rules = FreshnessRequest {
        rules: vec![
            FreshnessRule {
                prefix: "s3/data/frozen/".into(),
                max_staleness_ms: None,
            },
            FreshnessRule {
                prefix: "s3/data/slow/".into(),
                max_staleness_ms: Some(300_000),
            },
        ],
        expect_version: Some(0),
    };
    let reader = cluster.coordinator_client(talon_core::cluster_auth::Role::Reader);
    assert!(reader.set_freshness(&rules).await.is_err());
    let admin = cluster.coordinator_client(talon_core::cluster_auth::Role::Admin);
    assert_eq!(admin.set_freshness(&rules).await.unwrap().version, 1);
    let gateway_metrics = format!("http://{}/metrics", gw.admin_addr.unwrap());
    talon_testkit::wait_for(
        "the rules in the worker and the gateway",
        Duration::from_secs(10),
        || async {
            let w = cluster.worker_metric(0, "talon_worker_cluster_rules{kind=\"freshness\"}");
            let g = metric(
                &http_get(&gateway_metrics).await,
                "talon_gateway_cluster_rules{kind=\"freshness\"}",
            );
            (w == 2.0 && g == Some(2.0)).then_some(())
        },
    )
    .await;
    let stub = cluster.origin.metrics();
    for key in keys {
        let (status, _, got) = read(&urls(&gw, key)[0]).await;
        assert_eq!((status, got), (200, Bytes::from(key.repeat(50))));
    }
    // Past T (the entries' age is the condition).
    let read_at = Instant::now();
    tokio::time::sleep(t * 2).await;
    assert!(read_at.elapsed() > t);
    for (key, asked) in [("frozen/a", 0), ("slow/b", 0)] {
        let before = stub.requests_total();
        let (status, _, got) = read(&urls(&gw, key)[0]).await;
        assert_eq!((status, got), (200, Bytes::from(key.repeat(50))));
        assert_eq!(stub.requests_total() - before, asked, "{key}");
    }
    let before = stub.requests_total();
    assert_eq!(read(&urls(&gw, "plain/c")[0]).await.0, 200);
    assert!(
        stub.requests_total() - before >= 1,
        "plain/c revalidated after T"
    );
    // A write through this gateway is seen by it at once, and still once T has passed
    // without a read in between: under the prefix's own bound the write bounds what
    // the workers may answer as long (before, the write was forgotten after T and a
    // worker's entry from before it came back).
    let put = reqwest::Client::new()
        .put(urls(&gw, "slow/b")[0].clone())
        .body("rewritten")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 200);
    let written_at = Instant::now();
    tokio::time::sleep(t * 2).await;
    assert!(written_at.elapsed() > t);
    let (status, _, got) = read(&urls(&gw, "slow/b")[0]).await;
    assert_eq!((status, got), (200, Bytes::from_static(b"rewritten")));
}
