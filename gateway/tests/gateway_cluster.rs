//! The gateway in front of a whole sandbox cluster: reads through each front equal the
//! origin's bytes, the second read is a hit at the origin's counters, and each route
//! does what it says.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use talon_gateway::config::{
    AzureFront, Backend, Identities, IdentitiesFile, Limits, Route, S3Front, S3Key,
};
use talon_gateway::{GatewayConfig, RunningGateway};
use talon_origin_stub::generated::GeneratedObject;
use talon_protocols::s3::request::S3Addressing;
use talon_protocols::s3::sigv4::{S3Credentials, SignedBody, sign_request};
use talon_testkit::{Cluster, ClusterConfig};

const AK: &str = "GATEWAYCLIENT";
const SK: &str = "gateway-client-secret";

async fn gateway(
    cluster: &Cluster,
    route: Route,
    s3_backend: Backend,
    azure_backend: Backend,
) -> RunningGateway {
    gateway_saying_cache_status(cluster, route, s3_backend, azure_backend, true).await
}

async fn gateway_saying_cache_status(
    cluster: &Cluster,
    route: Route,
    s3_backend: Backend,
    azure_backend: Backend,
    cache_status: bool,
) -> RunningGateway {
    let cache = cluster.client().await;
    gateway_over(
        cluster,
        cache,
        route,
        s3_backend,
        azure_backend,
        cache_status,
    )
    .await
}

async fn gateway_over(
    cluster: &Cluster,
    cache: talon_cache_client::CacheClient,
    route: Route,
    s3_backend: Backend,
    azure_backend: Backend,
    cache_status: bool,
) -> RunningGateway {
    gateway_with_limits(
        cluster,
        cache,
        route,
        (s3_backend, azure_backend),
        cache_status,
        Limits::default(),
        Vec::new(),
    )
    .await
}

/// A gateway whose S3 front also takes `more_keys` beside the unrestricted [`AK`].
async fn gateway_with_limits(
    cluster: &Cluster,
    cache: talon_cache_client::CacheClient,
    route: Route,
    (s3_backend, azure_backend): (Backend, Backend),
    cache_status: bool,
    limits: Limits,
    more_keys: Vec<S3Key>,
) -> RunningGateway {
    let identities = Identities::from_parts(IdentitiesFile {
        s3: [S3Key::unrestricted(AK, SK)]
            .into_iter()
            .chain(more_keys)
            .collect(),
        azure: None,
        anonymous: talon_protocols::access::AnonymousAccess::ReadWrite,
        public: Vec::new(),
    })
    .unwrap();
    talon_gateway::start(GatewayConfig {
        s3: Some(S3Front {
            listen: "127.0.0.1:0".parse().unwrap(),
            route,
            backend: s3_backend,
            addressing: S3Addressing::PathStyle,
            region: "us-east-1".into(),
        }),
        azure: Some(AzureFront {
            listen: "127.0.0.1:0".parse().unwrap(),
            route,
            backend: azure_backend,
            addressing: Default::default(),
        }),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        origins: cluster.origins(),
        cache: Some(cache),
        identities,
        freshness: talon_gateway::Freshness::within(Duration::from_millis(200)),
        limits,
        tls: None,
        acl_file: None,
        cache_status,
        access_log: None,
    })
    .await
    .unwrap()
}

async fn s3_get(gw: &RunningGateway, path: &str, range: Option<&str>) -> reqwest::Response {
    s3_get_as(gw, path, range, (AK, SK)).await
}

/// A GET signed with `(access_key, secret_key)`.
async fn s3_get_as(
    gw: &RunningGateway,
    path: &str,
    range: Option<&str>,
    (access_key, secret_key): (&str, &str),
) -> reqwest::Response {
    let url = format!("{}{path}", gw.s3_url().unwrap());
    let host = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let mut headers = vec![("host", host.clone())];
    if let Some(r) = range {
        headers.push(("range", r.to_owned()));
    }
    let refs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let creds = S3Credentials {
        access_key: access_key.into(),
        secret_key: secret_key.into(),
        session_token: None,
    };
    let signed = sign_request(
        "GET",
        &url,
        &refs,
        SignedBody::Bytes(&[]),
        &creds,
        "us-east-1",
        SystemTime::now(),
    )
    .unwrap();
    let mut req = reqwest::Client::new().get(&url);
    for (k, v) in headers.iter().filter(|(k, _)| *k != "host") {
        req = req.header(*k, v);
    }
    for (k, v) in signed {
        req = req.header(k, v);
    }
    req.send().await.unwrap()
}

/// An anonymous ranged Get Blob through the Azure front.
async fn azure_get(gw: &RunningGateway, path: &str, range: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{}{path}", gw.azure_url().unwrap()))
        .header("x-ms-version", "2025-01-05")
        .header("x-ms-range", range)
        .send()
        .await
        .unwrap()
}

fn expected(object: &GeneratedObject, start: u64, end: u64) -> Vec<u8> {
    let mut buf = vec![0u8; (end - start) as usize];
    object.fill(start, &mut buf);
    buf
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_front_reads_through_the_cache_and_hits_the_second_time() {
    let object = GeneratedObject::new("data", "big.bin", 1_000_000, 3);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let gw = gateway(&cluster, Route::Cache, Backend::S3, Backend::Azure).await;
    let resp = s3_get(&gw, "/data/big.bin", Some("bytes=100-300099")).await;
    assert_eq!(resp.status(), 206);
    // RFC 9211's Cache-Status says the first read was filled, the second a hit.
    assert_eq!(resp.headers()["cache-status"], "talon; fwd=miss; stored");
    assert_eq!(resp.headers()["content-range"], "bytes 100-300099/1000000");
    assert_eq!(resp.headers()["etag"].to_str().unwrap(), object.etag());
    assert_eq!(resp.bytes().await.unwrap(), expected(&object, 100, 300_100));
    let gets = cluster.origin_gets();
    let resp = s3_get(&gw, "/data/big.bin", Some("bytes=100-300099")).await;
    assert_eq!(resp.headers()["cache-status"], "talon; hit");
    assert_eq!(resp.bytes().await.unwrap(), expected(&object, 100, 300_100));
    assert_eq!(
        cluster.origin_gets(),
        gets,
        "the second read is served by the cache"
    );
    let whole = s3_get(&gw, "/data/big.bin", None).await;
    assert_eq!(whole.status(), 200);
    assert_eq!(
        whole.bytes().await.unwrap(),
        expected(&object, 0, 1_000_000)
    );
    let missing = s3_get(&gw, "/data/nope.bin", None).await;
    assert_eq!(missing.status(), 404);
    assert!(missing.headers().get("cache-status").is_none());
    assert!(
        missing
            .text()
            .await
            .unwrap()
            .contains("<Code>NoSuchKey</Code>")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_status_off_leaves_the_header_out() {
    let object = GeneratedObject::new("data", "quiet.bin", 10_000, 5);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let gw =
        gateway_saying_cache_status(&cluster, Route::Cache, Backend::S3, Backend::Azure, false)
            .await;
    for _ in 0..2 {
        let resp = s3_get(&gw, "/data/quiet.bin", None).await;
        assert_eq!(resp.status(), 200);
        assert!(resp.headers().get("cache-status").is_none());
        assert_eq!(resp.bytes().await.unwrap(), expected(&object, 0, 10_000));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_front_reads_an_s3_origin_and_s3_front_an_azure_origin() {
    let object = GeneratedObject::new("data", "cross.bin", 700_000, 9);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let gw = gateway(&cluster, Route::Cache, Backend::Azure, Backend::S3).await;
    // Azure client, S3 origin (anonymous Azure access is allowed by this gateway).
    let resp = azure_get(&gw, "/data/cross.bin", "bytes=10-1009").await;
    assert_eq!(resp.status(), 206);
    assert!(resp.headers().contains_key("x-ms-request-id"));
    assert_eq!(resp.headers()["cache-status"], "talon; fwd=miss; stored");
    assert_eq!(resp.bytes().await.unwrap(), expected(&object, 10, 1010));
    let again = azure_get(&gw, "/data/cross.bin", "bytes=10-1009").await;
    assert_eq!(again.headers()["cache-status"], "talon; hit");
    assert_eq!(again.bytes().await.unwrap(), expected(&object, 10, 1010));
    // S3 client, Azure origin.
    let resp = s3_get(&gw, "/data/cross.bin", Some("bytes=-1000")).await;
    assert_eq!(resp.status(), 206);
    assert_eq!(
        resp.bytes().await.unwrap(),
        expected(&object, 699_000, 700_000)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_written_at_the_origin_come_back_through_the_cache_on_both_fronts() {
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![GeneratedObject::new("data", "other.bin", 10, 1)],
        ..ClusterConfig::default()
    })
    .await;
    // Written straight at the origin (Azure side), not through the gateway, so the
    // gateway's read-your-writes rule does not apply: the metadata the fronts return
    // below travelled in the workers' stat replies.
    let origins = cluster.origins();
    let (_, azure) = origins.azure.as_ref().unwrap();
    let body = bytes::Bytes::from_static(b"hello");
    azure
        .put_stream(
            "data",
            "meta.txt",
            body.clone().into(),
            body.len() as u64,
            &[
                ("x-ms-meta-colour", "blue".into()),
                ("x-ms-meta-owner", "talon".into()),
                ("content-md5", "XUFAKrxLKna5cZ2REBfFkg==".into()),
                ("x-ms-blob-content-encoding", "gzip".into()),
                ("x-ms-blob-content-language", "en".into()),
                (
                    "x-ms-blob-content-disposition",
                    "attachment; filename=\"hi.txt\"".into(),
                ),
                ("x-ms-blob-cache-control", "max-age=60".into()),
            ],
        )
        .await
        .unwrap();
    let gw = gateway(&cluster, Route::Cache, Backend::Azure, Backend::Azure).await;
    let heads_before = cluster.origin_heads();

    let url = format!("{}/data/meta.txt", gw.azure_url().unwrap());
    let http = reqwest::Client::new();
    let props = http
        .head(&url)
        .header("x-ms-version", "2025-01-05")
        .send()
        .await
        .unwrap();
    assert_eq!(props.status(), 200);
    assert_eq!(props.headers()["x-ms-meta-colour"], "blue");
    assert_eq!(props.headers()["x-ms-meta-owner"], "talon");
    assert_eq!(props.headers()["content-md5"], "XUFAKrxLKna5cZ2REBfFkg==");
    assert_eq!(props.headers()["content-encoding"], "gzip");
    assert_eq!(props.headers()["content-language"], "en");
    assert_eq!(
        props.headers()["content-disposition"],
        "attachment; filename=\"hi.txt\""
    );
    assert_eq!(props.headers()["cache-control"], "max-age=60");
    let ranged = http
        .get(&url)
        .header("x-ms-version", "2025-01-05")
        .header("x-ms-range", "bytes=1-2")
        .send()
        .await
        .unwrap();
    assert_eq!(ranged.status(), 206);
    assert_eq!(
        ranged.headers()["x-ms-blob-content-md5"],
        "XUFAKrxLKna5cZ2REBfFkg==",
        "a range carries the blob's MD5 under its own name"
    );
    assert!(!ranged.headers().contains_key("content-md5"));
    assert_eq!(ranged.bytes().await.unwrap(), &b"el"[..]);

    // The S3 front gives the same metadata under its own prefix.
    let got = s3_get(&gw, "/data/meta.txt", None).await;
    assert_eq!(got.status(), 200);
    assert_eq!(got.headers()["x-amz-meta-colour"], "blue");
    assert_eq!(got.headers()["x-amz-meta-owner"], "talon");
    assert_eq!(got.headers()["cache-control"], "max-age=60");
    assert_eq!(got.headers()["content-encoding"], "gzip");
    assert!(
        !got.headers().contains_key("content-md5"),
        "S3 does not return Content-MD5"
    );
    assert_eq!(got.bytes().await.unwrap(), &b"hello"[..]);
    assert_eq!(
        cluster.origin_heads(),
        heads_before + 1,
        "one HEAD by the owning worker; the gateway asked the cache"
    );

    // List Blobs with include=metadata, over an Azure origin (its listing carries the
    // metadata) and over an S3 origin (the gateway asks each object's with a HEAD).
    let over_s3 = gateway(&cluster, Route::Cache, Backend::S3, Backend::S3).await;
    for gw in [&gw, &over_s3] {
        let list = format!(
            "{}/data?restype=container&comp=list&include=metadata&prefix=meta",
            gw.azure_url().unwrap()
        );
        let xml = http
            .get(&list)
            .header("x-ms-version", "2025-01-05")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            xml.contains("<Metadata><colour>blue</colour><owner>talon</owner></Metadata>"),
            "{xml}"
        );
        let plain = http
            .get(list.replace("&include=metadata", ""))
            .header("x-ms-version", "2025-01-05")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!plain.contains("<Metadata>"), "{plain}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_ranges_carry_their_own_md5_when_asked() {
    use base64::Engine as _;
    use md5::Digest as _;
    let object = GeneratedObject::new("data", "md5.bin", 12 << 20, 4);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let gw = gateway(&cluster, Route::Cache, Backend::S3, Backend::S3).await;
    let url = format!("{}/data/md5.bin", gw.azure_url().unwrap());
    let get = |range: Option<&'static str>| {
        let mut req = reqwest::Client::new()
            .get(&url)
            .header("x-ms-version", "2025-01-05")
            .header("x-ms-range-get-content-md5", "true");
        if let Some(r) = range {
            req = req.header("x-ms-range", r);
        }
        req.send()
    };
    let size = 12u64 << 20;
    for (range, start, end) in [
        ("bytes=100-1099", 100, 1100),
        ("bytes=0-4194303", 0, 4 << 20),
        ("bytes=12582000-", 12_582_000, size),
    ] {
        let resp = get(Some(range)).await.unwrap();
        assert_eq!(resp.status(), 206, "{range}");
        let digest = resp.headers()["content-md5"].to_str().unwrap().to_owned();
        let body = resp.bytes().await.unwrap();
        let want = expected(&object, start, end);
        assert_eq!(body, want, "{range}");
        assert_eq!(
            digest,
            base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(&want)),
            "{range}"
        );
    }
    // Azure refuses the header without a range, or with one over 4 MiB, before reading
    // (or filling) anything.
    let gets = cluster.origin_gets();
    for range in [None, Some("bytes=0-4194304"), Some("bytes=5000000-")] {
        let resp = get(range).await.unwrap();
        assert_eq!(resp.status(), 400, "{range:?}");
        assert!(
            resp.text()
                .await
                .unwrap()
                .contains("<Code>InvalidHeaderValue</Code>"),
            "{range:?}"
        );
    }
    assert_eq!(
        cluster.origin_gets(),
        gets,
        "nothing was read for a refusal"
    );
}

/// The gateway's `talon_gateway_held_block_files{what="..."}`.
async fn held_block_files(gw: &RunningGateway, what: &str) -> f64 {
    let text = talon_testkit::http_get(&format!("http://{}/metrics", gw.admin_addr.unwrap())).await;
    talon_testkit::metric(
        &text,
        &format!("talon_gateway_held_block_files{{what=\"{what}\"}}"),
    )
    .unwrap_or_else(|| panic!("no held_block_files {what} in {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_block_files_are_sent_from_their_mapping_only_when_nothing_reads_the_bytes() {
    use md5::Digest as _;
    let size = 3u64 << 20;
    let object = GeneratedObject::new("data", "mapped.bin", size, 61);
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object.clone()],
        local_sockets: true,
        ..ClusterConfig::default()
    })
    .await;
    let cache = cluster
        .client_with(|c| c.held_files.hold = Duration::from_secs(60))
        .await;
    let gw = gateway_over(
        &cluster,
        cache,
        Route::Cache,
        Backend::S3,
        Backend::S3,
        true,
    )
    .await;
    let sha = |b: &[u8]| sha2::Sha256::digest(b);
    let whole = s3_get(&gw, "/data/mapped.bin", None).await;
    assert_eq!(whole.status(), 200);
    assert_eq!(
        sha(&whole.bytes().await.unwrap()),
        sha(&expected(&object, 0, size))
    );
    cluster.fills_settled().await;
    let gets = cluster.origin_gets();
    // The first hit is handed over and vouches for its bytes; the next ones are read
    // from the held file, and over plain HTTP sent from its mapped pages.
    let (start, end) = (1000u64, 2_501_000u64);
    let range = format!("bytes={start}-{}", end - 1);
    let want = sha(&expected(&object, start, end));
    for _ in 0..4 {
        let resp = s3_get(&gw, "/data/mapped.bin", Some(&range)).await;
        assert_eq!(resp.status(), 206);
        assert_eq!(sha(&resp.bytes().await.unwrap()), want);
    }
    let (reads, mapped) = (
        held_block_files(&gw, "reads").await,
        held_block_files(&gw, "mapped_reads").await,
    );
    assert!(
        mapped >= 3.0,
        "held reads were sent from the mapping: {mapped}"
    );
    assert_eq!(reads, mapped, "and every held read of the S3 front was");
    let plain = azure_get(&gw, "/data/mapped.bin", &range).await;
    assert_eq!(plain.status(), 206);
    assert_eq!(sha(&plain.bytes().await.unwrap()), want);
    let mapped = held_block_files(&gw, "mapped_reads").await;
    assert!(mapped > reads, "the Azure front's bodies too");

    // Azure's range MD5 reads the bytes in the gateway: held, but copied.
    let (start, end) = (1000u64, 1_001_000u64);
    let md5_range = format!("bytes={start}-{}", end - 1);
    let reads = held_block_files(&gw, "reads").await;
    let resp = reqwest::Client::new()
        .get(format!("{}/data/mapped.bin", gw.azure_url().unwrap()))
        .header("x-ms-version", "2025-01-05")
        .header("x-ms-range", &md5_range)
        .header("x-ms-range-get-content-md5", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 206);
    let digest = resp.headers()["content-md5"].to_str().unwrap().to_owned();
    let body = resp.bytes().await.unwrap();
    let want = expected(&object, start, end);
    assert_eq!(sha(&body), sha(&want));
    use base64::Engine as _;
    assert_eq!(
        digest,
        base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(&want))
    );
    assert!(held_block_files(&gw, "reads").await > reads, "a held read");
    assert_eq!(
        held_block_files(&gw, "mapped_reads").await,
        mapped,
        "not from the mapping"
    );
    assert_eq!(
        cluster.origin_gets(),
        gets,
        "every read after the fill was a hit"
    );
}

/// The gateway's `talon_gateway_read_ahead_prefetches{outcome="..."}`.
async fn read_ahead_prefetches(gw: &RunningGateway, outcome: &str) -> f64 {
    let text = talon_testkit::http_get(&format!("http://{}/metrics", gw.admin_addr.unwrap())).await;
    talon_testkit::metric(
        &text,
        &format!("talon_gateway_read_ahead_prefetches{{outcome=\"{outcome}\"}}"),
    )
    .unwrap_or_else(|| panic!("no read_ahead_prefetches {outcome} in {text}"))
}

/// Waits until every prefetch the gateway sent was answered and every fill the workers
/// started for them ended; returns how many were started.
async fn prefetches_done(cluster: &Cluster, gw: &RunningGateway) -> f64 {
    talon_testkit::wait_for(
        "the prefetches to be answered",
        Duration::from_secs(20),
        || async {
            let sent = read_ahead_prefetches(gw, "sent").await;
            let mut answered = 0.0;
            for outcome in ["present", "started", "declined", "failed"] {
                answered += read_ahead_prefetches(gw, outcome).await;
            }
            (sent > 0.0 && answered == sent).then_some(())
        },
    )
    .await;
    let started = read_ahead_prefetches(gw, "started").await;
    talon_testkit::wait_for(
        "the prefetched fills to end",
        Duration::from_secs(20),
        || async {
            let filled: f64 = (0..cluster.workers.len())
                .map(|i| {
                    cluster.worker_metric(i, "talon_worker_prefetches_total{outcome=\"filled\"}")
                })
                .sum();
            (filled >= started).then_some(())
        },
    )
    .await;
    started
}

/// Consecutive ranged GETs of a cold object through the S3 front, as `download_fileobj`
/// or a Parquet scan send them: once a range continues a filled one, the workers fill
/// the ranges past it before they are asked, so the next range is a hit
/// (`Cache-Status`) that costs the origin nothing, with the object's bytes; the
/// gateway's metrics count the prefetches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consecutive_ranged_gets_find_the_next_range_filled_ahead() {
    const BLOCK: u64 = 256 << 10;
    let object = GeneratedObject::new("data", "scan.bin", 12 * BLOCK, 71);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let gw = gateway(&cluster, Route::Cache, Backend::S3, Backend::Azure).await;
    let range = |n: u64, blocks: u64| format!("bytes={}-{}", n * BLOCK, (n + blocks) * BLOCK - 1);
    for n in [0, 1] {
        let resp = s3_get(&gw, "/data/scan.bin", Some(&range(n, 1))).await;
        assert_eq!(resp.status(), 206);
        assert_eq!(resp.headers()["cache-status"], "talon; fwd=miss; stored");
        assert!(resp.bytes().await.unwrap() == expected(&object, n * BLOCK, (n + 1) * BLOCK));
    }
    // The second range continued the first: the blocks past it are being filled.
    let started = prefetches_done(&cluster, &gw).await;
    assert_eq!(started, 8.0, "the 8 blocks past the second range");
    // Blocks 0 and 1 read, 2 to 9 prefetched: one origin GET each.
    assert_eq!(cluster.origin_gets(), 10);
    let resp = s3_get(&gw, "/data/scan.bin", Some(&range(2, 2))).await;
    assert_eq!(resp.status(), 206);
    assert_eq!(
        resp.headers()["cache-status"],
        "talon; hit",
        "the next range was filled before it was asked"
    );
    assert!(resp.bytes().await.unwrap() == expected(&object, 2 * BLOCK, 4 * BLOCK));
    // That range continued the scan too: its read-ahead reaches the object's last two
    // blocks, and no block is fetched twice.
    assert_eq!(
        prefetches_done(&cluster, &gw).await,
        10.0,
        "and the last two"
    );
    let resp = s3_get(&gw, "/data/scan.bin", Some(&range(4, 8))).await;
    assert_eq!(resp.headers()["cache-status"], "talon; hit");
    assert!(resp.bytes().await.unwrap() == expected(&object, 4 * BLOCK, 12 * BLOCK));
    assert_eq!(
        cluster.origin_gets(),
        12,
        "each of the 12 blocks fetched once"
    );
}

/// The gateway's `talon_gateway_read_ahead_objects{outcome="..."}`.
async fn listed_read_ahead(gw: &RunningGateway, outcome: &str) -> f64 {
    let text = talon_testkit::http_get(&format!("http://{}/metrics", gw.admin_addr.unwrap())).await;
    talon_testkit::metric(
        &text,
        &format!("talon_gateway_read_ahead_objects{{outcome=\"{outcome}\"}}"),
    )
    .unwrap_or_else(|| panic!("no read_ahead_objects {outcome} in {text}"))
}

/// Waits until every fetch ahead the gateway started has ended; returns how many were
/// started.
async fn fetches_ahead_done(gw: &RunningGateway) -> f64 {
    talon_testkit::wait_for(
        "the fetches ahead to end",
        Duration::from_secs(20),
        || async {
            let started = listed_read_ahead(gw, "started").await;
            let ended =
                listed_read_ahead(gw, "fetched").await + listed_read_ahead(gw, "failed").await;
            (ended == started).then_some(started)
        },
    )
    .await
}

/// A sandbox cluster holding `objects`, and a gateway in front of it that fetches up to
/// four objects ahead of a reader in key order and also takes `more_keys`.
async fn reading_ahead(
    objects: &[GeneratedObject],
    more_keys: Vec<S3Key>,
) -> (Cluster, RunningGateway) {
    let cluster = Cluster::start(ClusterConfig {
        generated: objects.to_vec(),
        ..ClusterConfig::default()
    })
    .await;
    let cache = cluster.client().await;
    let gw = gateway_with_limits(
        &cluster,
        cache,
        Route::Cache,
        (Backend::S3, Backend::Azure),
        true,
        Limits {
            read_ahead_objects: 4,
            ..Limits::default()
        },
        more_keys,
    )
    .await;
    (cluster, gw)
}

/// 40 objects of 8 KiB under `train/` of bucket `data`, listed through a gateway that
/// fetches up to four objects ahead of a reader in key order.
async fn listed_dataset() -> (Cluster, RunningGateway, Vec<GeneratedObject>) {
    let objects: Vec<GeneratedObject> = (0..40)
        .map(|i| GeneratedObject::new("data", format!("train/{i:03}.bin"), 8192, 100 + i))
        .collect();
    let (cluster, gw) = reading_ahead(&objects, Vec::new()).await;
    let listing = s3_get(&gw, "/data?list-type=2&prefix=train/", None).await;
    assert_eq!(listing.status(), 200);
    let listing = listing.text().await.unwrap();
    assert_eq!(listing.matches("<Key>").count(), 40, "{listing}");
    assert_eq!(
        cluster
            .origin
            .metrics()
            .requests_of(Backend::S3, "ListObjectsV2"),
        1
    );
    (cluster, gw, objects)
}

/// A loader that lists its prefix and reads the objects in key order finds the next
/// ones fetched ahead of it: from its third read on, the next four objects are asked of
/// the origin before the reader asks for them (one GET each, no HEAD), the next read
/// asks the origin nothing, and over the whole pass every object costs the origin
/// exactly one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_in_key_order_finds_the_next_listed_objects_fetched_ahead() {
    let (cluster, gw, objects) = listed_dataset().await;
    let read = |i: usize| {
        let (gw, object) = (&gw, &objects[i]);
        async move {
            let resp = s3_get(gw, &format!("/data/{}", object.key), None).await;
            assert_eq!(resp.status(), 200, "{}", object.key);
            let status = resp.headers()["cache-status"].to_str().unwrap().to_owned();
            assert!(
                resp.bytes().await.unwrap() == expected(object, 0, 8192),
                "{}",
                object.key
            );
            status
        }
    };
    for i in 0..2 {
        assert_eq!(read(i).await, "talon; fwd=miss; stored");
    }
    assert_eq!(listed_read_ahead(&gw, "started").await, 0.0);
    read(2).await;
    assert_eq!(fetches_ahead_done(&gw).await, 4.0, "objects 3 to 6");
    assert_eq!(listed_read_ahead(&gw, "fetched").await, 4.0);
    assert_eq!(cluster.origin_gets(), 7, "three reads, four fetched ahead");
    assert_eq!(cluster.origin_heads(), 0);
    // Its bytes are on the worker already: reading it asks the origin nothing. (The
    // first read of bytes a stat fetched is the one reported as their fill, whoever
    // asked for them: `Cache-Status` says `fwd=miss; stored` once more.)
    cluster.fills_settled().await;
    read(3).await;
    assert_eq!(fetches_ahead_done(&gw).await, 5.0, "and object 7 after it");
    assert_eq!(
        cluster.origin_gets(),
        8,
        "the next object was cached before it was asked"
    );
    for i in 4..40 {
        read(i).await;
    }
    fetches_ahead_done(&gw).await;
    assert_eq!(
        cluster.origin_gets(),
        40,
        "each object fetched once, none past the listing"
    );
    assert_eq!(cluster.origin_heads(), 0);
    assert_eq!(listed_read_ahead(&gw, "failed").await, 0.0);
}

/// A shuffled reader of the same listing fetches nothing ahead: each object costs the
/// origin the one GET its own read sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shuffled_reader_is_not_fetched_ahead() {
    let (cluster, gw, objects) = listed_dataset().await;
    // A stride of 17 through 40 keys: never two recent reads just before the next.
    for i in 0..40 {
        let object = &objects[i * 17 % 40];
        let resp = s3_get(&gw, &format!("/data/{}", object.key), None).await;
        assert_eq!(resp.status(), 200);
        assert!(resp.bytes().await.unwrap() == expected(object, 0, 8192));
    }
    assert_eq!(listed_read_ahead(&gw, "started").await, 0.0);
    assert_eq!(cluster.origin_gets(), 40);
    assert_eq!(cluster.origin_heads(), 0);
}

/// A reader whose grants cover only `train/` never makes the gateway fetch anything
/// else ahead of it: the bucket listed whole by another identity puts `valid/` right
/// after `train/`, and reading `train/` in key order fetches ahead only its own objects
/// (10 origin GETs for 10 objects; before the grants were asked, the four objects of
/// `valid/` after the last one were fetched too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_ahead_fetches_only_what_the_reader_may_read() {
    const TRAIN_ONLY: (&str, &str) = ("TRAINONLY", "train-only-secret");
    let objects: Vec<GeneratedObject> = ["train", "valid"]
        .into_iter()
        .flat_map(|folder| {
            (0..10).map(move |i| {
                GeneratedObject::new("data", format!("{folder}/{i:03}.bin"), 4096, 300 + i)
            })
        })
        .collect();
    let train_only: S3Key = serde_json::from_value(serde_json::json!({
        "access_key": TRAIN_ONLY.0,
        "secret_key": TRAIN_ONLY.1,
        "grants": [{"bucket": "data", "prefix": "train/", "actions": ["read", "list"]}],
    }))
    .unwrap();
    let (cluster, gw) = reading_ahead(&objects, vec![train_only]).await;
    let listing = s3_get(&gw, "/data?list-type=2", None).await;
    assert_eq!(listing.text().await.unwrap().matches("<Key>").count(), 20);
    let outside = s3_get_as(&gw, "/data/valid/000.bin", None, TRAIN_ONLY).await;
    assert_eq!(outside.status(), 403, "the grant covers train/ only");
    for object in &objects[..10] {
        let resp = s3_get_as(&gw, &format!("/data/{}", object.key), None, TRAIN_ONLY).await;
        assert_eq!(resp.status(), 200, "{}", object.key);
        assert!(resp.bytes().await.unwrap() == expected(object, 0, 4096));
    }
    assert_eq!(fetches_ahead_done(&gw).await, 7.0, "train/003 to train/009");
    assert!(listed_read_ahead(&gw, "not_allowed").await >= 1.0);
    assert_eq!(
        cluster.origin_gets(),
        10,
        "nothing of valid/ was fetched for this reader"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_blob_keeps_plain_and_x_ms_blob_content_headers() {
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![GeneratedObject::new("data", "other.bin", 10, 1)],
        ..ClusterConfig::default()
    })
    .await;
    let gw = gateway(&cluster, Route::Cache, Backend::S3, Backend::Azure).await;
    let url = format!("{}/data/report.csv", gw.azure_url().unwrap());
    let http = reqwest::Client::new();
    // Put Blob takes Content-Language and Cache-Control plainly or as x-ms-blob-*
    // (which wins); Content-Disposition only as x-ms-blob-*, here with a UTF-8 name.
    let disposition = "attachment; filename=\"späť.csv\"";
    let put = http
        .put(&url)
        .header("x-ms-version", "2025-01-05")
        .header("x-ms-blob-type", "BlockBlob")
        .header("content-language", "fr")
        .header("cache-control", "no-cache")
        .header("x-ms-blob-cache-control", "max-age=5")
        .header(
            "x-ms-blob-content-disposition",
            reqwest::header::HeaderValue::from_bytes(disposition.as_bytes()).unwrap(),
        )
        .body("a,b\n")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201, "{}", put.text().await.unwrap());
    let props = http
        .head(&url)
        .header("x-ms-version", "2025-01-05")
        .send()
        .await
        .unwrap();
    assert_eq!(props.status(), 200);
    assert_eq!(props.headers()["content-language"], "fr");
    assert_eq!(props.headers()["cache-control"], "max-age=5");
    assert_eq!(
        props.headers()["content-disposition"].as_bytes(),
        disposition.as_bytes()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_full_object_checksum_comes_through_the_cache_when_asked() {
    use base64::Engine as _;
    use sha2::Digest as _;
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![GeneratedObject::new("data", "other.bin", 10, 1)],
        ..ClusterConfig::default()
    })
    .await;
    // Written at the origin with a SHA-256 checksum it verifies and keeps.
    let body = bytes::Bytes::from(vec![7u8; 300_000]);
    let sha = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(&body));
    let origins = cluster.origins();
    origins
        .s3
        .as_ref()
        .unwrap()
        .put_stream(
            "data",
            "summed.bin",
            body.clone().into(),
            body.len() as u64,
            &[("x-amz-checksum-sha256", sha.clone())],
        )
        .await
        .unwrap();
    let gw = gateway(&cluster, Route::Cache, Backend::S3, Backend::Azure).await;
    let url = format!("{}/data/summed.bin", gw.s3_url().unwrap());
    let http = reqwest::Client::new();
    for method in [reqwest::Method::HEAD, reqwest::Method::GET] {
        let resp = http
            .request(method.clone(), &url)
            .header("x-amz-checksum-mode", "ENABLED")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["x-amz-checksum-sha256"],
            sha.as_str(),
            "{method}"
        );
        assert_eq!(resp.headers()["x-amz-checksum-type"], "FULL_OBJECT");
        if method == reqwest::Method::GET {
            assert_eq!(resp.bytes().await.unwrap(), body);
        }
    }
    // Not asked for, or a range: no checksum (it would not describe the bytes).
    let plain = http.get(&url).send().await.unwrap();
    assert!(!plain.headers().contains_key("x-amz-checksum-sha256"));
    let ranged = http
        .get(&url)
        .header("x-amz-checksum-mode", "ENABLED")
        .header("range", "bytes=0-99")
        .send()
        .await
        .unwrap();
    assert_eq!(ranged.status(), 206);
    assert!(!ranged.headers().contains_key("x-amz-checksum-sha256"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_origin_route_never_touches_the_cache() {
    let object = GeneratedObject::new("data", "direct.bin", 100_000, 1);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let gw = gateway(&cluster, Route::Origin, Backend::S3, Backend::Azure).await;
    let heads = cluster.origin_heads();
    for range in [
        None,
        Some("bytes=-1000"),
        Some("bytes=99000-"),
        Some("bytes=5-9"),
    ] {
        let before = cluster.origin_gets();
        let resp = s3_get(&gw, "/data/direct.bin", range).await;
        let (start, end) = match range {
            None => (0, 100_000),
            Some("bytes=5-9") => (5, 10),
            Some(_) => (99_000, 100_000),
        };
        assert_eq!(resp.status(), if range.is_some() { 206 } else { 200 });
        if range.is_some() {
            assert_eq!(
                resp.headers()["content-range"],
                format!("bytes {start}-{}/100000", end - 1)
            );
        }
        assert_eq!(resp.bytes().await.unwrap(), expected(&object, start, end));
        assert_eq!(
            cluster.origin_gets(),
            before + 1,
            "every read goes to the origin"
        );
    }
    assert_eq!(
        cluster.origin_heads(),
        heads,
        "a GET is one origin request: its metadata comes from the answer"
    );
    // Past the end: the origin's 416 is answered with the size, as S3 does.
    let resp = s3_get(&gw, "/data/direct.bin", Some("bytes=100000-")).await;
    assert_eq!(resp.status(), 416);
    assert_eq!(resp.headers()["content-range"], "bytes */100000");
    // A suffix range at an Azure origin (which has none) still works, in two steps.
    let over_azure = gateway(&cluster, Route::Origin, Backend::Azure, Backend::Azure).await;
    let heads = cluster.origin_heads();
    let resp = s3_get(&over_azure, "/data/direct.bin", Some("bytes=-10")).await;
    assert_eq!(resp.status(), 206);
    assert_eq!(
        resp.bytes().await.unwrap(),
        expected(&object, 99_990, 100_000)
    );
    assert_eq!(cluster.origin_heads(), heads + 1);
    let used: u64 = cluster
        .workers
        .iter()
        .filter_map(|w| w.running.as_ref())
        .map(|w| w.store().stats().used_bytes)
        .sum();
    assert_eq!(used, 0, "nothing was cached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reads_its_own_writes_through_the_cache() {
    let seed = GeneratedObject::new("data", "seed.bin", 1000, 1);
    // Workers that trust object metadata for a minute: without read-your-writes the
    // reads below would see the versions they remember.
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![seed],
        stat_ttl: Duration::from_secs(60),
        ..ClusterConfig::default()
    })
    .await;
    let gw = gateway(&cluster, Route::Cache, Backend::S3, Backend::Azure).await;
    let url = format!("{}/data/rw.bin", gw.s3_url().unwrap());
    let http = reqwest::Client::new();
    let head = |http: reqwest::Client, url: String| async move {
        http.head(&url).send().await.unwrap().status().as_u16()
    };

    // Missing, then written: the worker's remembered "not found" does not hide it.
    assert_eq!(head(http.clone(), url.clone()).await, 404);
    let v1 = vec![1u8; 300_000];
    let put = http.put(&url).body(v1.clone()).send().await.unwrap();
    assert_eq!(put.status(), 200);
    assert_eq!(head(http.clone(), url.clone()).await, 200);
    let got = http.get(&url).send().await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().await.unwrap(), v1);

    // Overwritten: the next read is the new version, bytes and ETag.
    let v2 = vec![2u8; 200_000];
    let put = http.put(&url).body(v2.clone()).send().await.unwrap();
    assert_eq!(put.status(), 200);
    let new_etag = put.headers()["etag"].clone();
    let got = http.get(&url).send().await.unwrap();
    assert_eq!(got.headers()["etag"], new_etag);
    assert_eq!(got.bytes().await.unwrap(), v2);

    // Deleted: gone.
    let deleted = http.delete(&url).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    assert_eq!(head(http.clone(), url.clone()).await, 404);
    assert_eq!(http.get(&url).send().await.unwrap().status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_upload_that_expected_100_continue_ends_its_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![GeneratedObject::new("data", "seed.bin", 10, 1)],
        ..ClusterConfig::default()
    })
    .await;
    let gw = gateway(&cluster, Route::Cache, Backend::S3, Backend::Azure).await;
    let addr = gw.s3_addr.unwrap();
    // An empty PUT that asks for 100-continue: hyper never sends the 100 (the body is
    // never read), so the gateway must not leave the client guessing on a reused
    // connection.
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(
        format!(
            "PUT /data/empty.txt HTTP/1.1\r\nhost: {addr}\r\ncontent-length: 0\r\nexpect: 100-continue\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut answer))
        .await
        .expect("the gateway closes the connection after answering")
        .unwrap();
    let text = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(text.contains("connection: close"), "{text}");
    // A plain empty PUT keeps its connection.
    let plain = reqwest::Client::new()
        .put(format!("{}/data/empty2.txt", gw.s3_url().unwrap()))
        .header("content-length", "0")
        .body(Vec::<u8>::new())
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 200);
    assert!(plain.headers().get("connection").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_no_worker_answers_route_cache_reads_the_origin_and_cache_only_refuses() {
    let object = GeneratedObject::new("data", "orphan.bin", 700_000, 9);
    let mut cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object.clone()],
        // The cache client may fall back: whether a read does is the route's to say.
        origin_fallback: true,
        ..ClusterConfig::default()
    })
    .await;
    let cache = gateway(&cluster, Route::Cache, Backend::S3, Backend::Azure).await;
    let cache_only = gateway(&cluster, Route::CacheOnly, Backend::S3, Backend::Azure).await;
    let worker_addr = cluster.worker(0).addr.to_string();
    cluster.kill_worker(0);
    let (gets, heads) = (cluster.origin_gets(), cluster.origin_heads());
    // cache-only: the cache or an error, and nothing is asked of the origin.
    let resp = s3_get(&cache_only, "/data/orphan.bin", Some("bytes=10-300009")).await;
    assert_eq!(resp.status(), 503);
    let body = resp.text().await.unwrap();
    assert!(body.contains("<Code>ServiceUnavailable</Code>"), "{body}");
    assert_eq!(
        (cluster.origin_gets(), cluster.origin_heads()),
        (gets, heads)
    );
    // cache: the origin answers instead, every byte right, and the read is labelled a
    // fallback.
    let resp = s3_get(&cache, "/data/orphan.bin", Some("bytes=10-300009")).await;
    assert_eq!(resp.status(), 206);
    assert_eq!(
        resp.headers()["cache-status"],
        "talon; fwd=miss; detail=fallback"
    );
    assert_eq!(resp.bytes().await.unwrap(), expected(&object, 10, 300_010));
    assert!(cluster.origin_gets() > gets);
    let resp = azure_get(&cache, "/data/orphan.bin", "bytes=10-1009").await;
    assert_eq!(resp.status(), 206);
    assert_eq!(
        resp.headers()["cache-status"],
        "talon; fwd=miss; detail=fallback"
    );
    assert_eq!(resp.bytes().await.unwrap(), expected(&object, 10, 1010));
    let admin = cache.admin_addr.unwrap();
    let metrics = talon_testkit::http_get(&format!("http://{admin}/metrics")).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.contains("operation=\"GetObject\"") && l.contains("outcome=\"fallback\"")),
        "{metrics}"
    );
    // The fail-open tallies and the dead worker's circuit are on /metrics.
    let fallbacks = talon_testkit::metric(&metrics, "talon_gateway_fail_open{event=\"fallbacks\"}");
    assert!(fallbacks.is_some_and(|n| n >= 1.0), "{metrics}");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("talon_gateway_worker_circuit_opened{worker=\"w")),
        "{metrics}"
    );
    // Labelled by worker id: the open /metrics names no data-plane address (red-team
    // RT-08: they are what a process squatting a dead worker's address needs).
    assert!(
        !metrics.contains(&worker_addr),
        "/metrics names {worker_addr}: {metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_version_reached_by_every_path_names_the_same_blocks() {
    use talon_core::{ObjectId, ObjectVersion};
    let object = GeneratedObject::new("data", "versions.bin", 300_000, 4);
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let gw = gateway(&cluster, Route::Cache, Backend::S3, Backend::S3).await;
    let id = ObjectId::s3("data", "versions.bin").unwrap();
    let origins = cluster.origins();
    let s3 = origins.s3.as_ref().unwrap();
    let listing = s3
        .list_with(
            "data",
            &talon_protocols::origin::ListOptions {
                prefix: "versions",
                delimiter: None,
                token: None,
                start_after: None,
                max_keys: None,
                include_metadata: false,
            },
        )
        .await
        .unwrap();
    let client = cluster.client().await;
    let resp = s3_get(&gw, "/data/versions.bin", Some("bytes=0-99")).await;
    assert_eq!(resp.status(), 206);
    let through_gateway = resp.headers()["etag"].to_str().unwrap().to_owned();
    assert_eq!(resp.bytes().await.unwrap(), expected(&object, 0, 100));
    let etags = [
        ("the generator", object.etag()),
        (
            "an origin HEAD",
            s3.head("data", "versions.bin").await.unwrap().etag,
        ),
        ("an origin listing", listing.objects[0].etag.clone()),
        (
            "an Azure HEAD of the same object",
            origins
                .azure
                .as_ref()
                .unwrap()
                .1
                .head("data", "versions.bin")
                .await
                .unwrap()
                .etag,
        ),
        (
            "a worker's stat",
            client.stat(&id).await.unwrap().version.as_str().to_owned(),
        ),
        ("the gateway's answer", through_gateway),
    ];
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    assert!(
        !version.as_str().contains('"'),
        "the canonical form has no quotes"
    );
    for (path, etag) in &etags {
        assert_eq!(
            ObjectVersion::from_etag(etag).unwrap(),
            version,
            "{path} gave the ETag {etag}"
        );
    }
    // The gateway's read filled the block under that very id.
    let block = cluster.block_id(&id, &version, 0);
    assert!(
        cluster.block_file(0, &block).is_file(),
        "no block file for {block:?}"
    );
}

/// An origin that throttles every request: both fronts answer their protocol's 503
/// (S3 `SlowDown`, Azure `ServerBusy`) with `Retry-After`, and each request reaches the
/// origin once, through the one worker that owns the object's metadata; before, every
/// owner asked in turn and then the gateway itself (four requests for one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttling_origin_gets_503_with_retry_after_on_both_fronts_and_no_more_load() {
    let object = GeneratedObject::new("data", "busy.bin", 300_000, 12);
    let cluster = Cluster::start(ClusterConfig {
        generated: vec![object.clone()],
        origin_fallback: true,
        ..ClusterConfig::default()
    })
    .await;
    let gw = gateway(&cluster, Route::Cache, Backend::S3, Backend::S3).await;
    cluster
        .origin
        .faults()
        .set(talon_origin_stub::faults::FaultConfig {
            error_rate: 1.0,
            ..Default::default()
        })
        .unwrap();
    let asked = || cluster.origin.metrics().requests_total();
    let before = asked();
    let resp = s3_get(&gw, "/data/busy.bin", Some("bytes=0-99")).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body = resp.text().await.unwrap();
    assert!(body.contains("<Code>SlowDown</Code>"), "{body}");
    assert_eq!(asked() - before, 1, "one origin request for one S3 request");
    let before = asked();
    let resp = reqwest::Client::new()
        .get(format!("{}/data/busy.bin", gw.azure_url().unwrap()))
        .header("x-ms-version", "2025-01-05")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(resp.headers()["x-ms-error-code"], "ServerBusy");
    assert_eq!(
        asked() - before,
        1,
        "one origin request for one Azure request"
    );
}
