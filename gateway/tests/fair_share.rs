//! Issue 8's exhaustion suite, "200 readers that never read": clients that stop reading
//! hold the gateway's buffered piece bytes until the write-stall timeout cuts them. With
//! one budget for everyone, a few such clients held all of it and every other client's
//! read waited for that timeout. Each client address now has a share of the budget: the
//! stalled clients fill their shares, and another client — on either front — is served
//! while they still hold them; `/metrics` shows what they hold.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use sha2::{Digest, Sha256};
use talon_cache_client::{CacheClient, ReaderId};
use talon_gateway::config::{
    AzureFront, Backend, Identities, IdentitiesFile, Limits, Route, S3Front,
};
use talon_gateway::{GatewayConfig, RunningGateway};
use talon_origin_stub::generated::GeneratedObject;
use talon_protocols::s3::request::S3Addressing;
use talon_testkit::{Cluster, ClusterConfig, expected, wait_for};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

const PIECE: u64 = 256 << 10;
const BUDGET: u64 = 32 * PIECE;
const SHARE: u64 = 2 * PIECE;

fn big() -> GeneratedObject {
    GeneratedObject::new("data", "big.bin", 32 << 20, 11)
}

async fn gateway(cache: CacheClient, cluster: &Cluster) -> RunningGateway {
    let identities = Identities::from_parts(IdentitiesFile {
        s3: Vec::new(),
        azure: None,
        anonymous: talon_protocols::access::AnonymousAccess::ReadOnly,
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
            backend: Backend::S3,
            addressing: Default::default(),
        }),
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        origins: cluster.origins(),
        cache: Some(cache),
        identities,
        freshness: talon_gateway::Freshness::within(Duration::from_secs(60)),
        limits: Limits {
            // Far longer than the test: the stalled clients are not cut while it runs.
            write_stall_timeout: Duration::from_secs(300),
            ..Limits::default()
        },
        tls: None,
        acl_file: None,
        cache_status: true,
        access_log: None,
    })
    .await
    .unwrap()
}

/// A client at `source` that asks for the whole big object and never reads.
async fn stalled_reader(source: IpAddr, front: SocketAddr, path: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.bind(SocketAddr::new(source, 0)).unwrap();
    let mut conn = socket.connect(front).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nx-ms-version: 2025-01-05\r\n\r\n");
    conn.write_all(request.as_bytes()).await.unwrap();
    conn
}

/// GETs 1 MiB of the big object from 127.0.0.1 and checks its bytes.
async fn normal_read(url: String) {
    let client = reqwest::Client::builder()
        .local_address("127.0.0.1".parse::<IpAddr>().unwrap())
        .build()
        .unwrap();
    let resp = client
        .get(url)
        .header("range", "bytes=4194304-5242879")
        .header("x-ms-version", "2025-01-05")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 206);
    let got = resp.bytes().await.unwrap();
    assert_eq!(
        hex::encode(Sha256::digest(&got)),
        hex::encode(Sha256::digest(expected(&big(), 4 << 20..5 << 20)))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn clients_that_never_read_hold_only_their_share_of_the_buffer_budget() {
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![big()],
        ..ClusterConfig::default()
    })
    .await;
    let cache = cluster
        .client_with(|c| {
            c.max_request_bytes = PIECE;
            c.read_window = 4;
            c.max_buffered_bytes = BUDGET;
            c.max_buffered_bytes_per_reader = SHARE;
        })
        .await;
    cluster.sync_client(&cache).await;
    let gw = gateway(cache.clone(), &cluster).await;
    let (s3, azure) = (gw.s3_addr.unwrap(), gw.azure_addr.unwrap());
    let azure_path = format!(
        "/{}/data/big.bin",
        gw.azure_url().unwrap().rsplit('/').next().unwrap()
    );
    // Four stalled clients on each front, from four addresses per front, each wanting
    // far more than the whole budget.
    let sources: Vec<IpAddr> = (2..10)
        .map(|i| format!("127.0.0.{i}").parse().unwrap())
        .collect();
    let mut stalled = Vec::new();
    for (i, source) in sources.iter().enumerate() {
        for _ in 0..2 {
            stalled.push(if i < 4 {
                stalled_reader(*source, s3, "/data/big.bin").await
            } else {
                stalled_reader(*source, azure, &azure_path).await
            });
        }
    }
    // They take what they can until their connections' buffers are full and they stop
    // moving: every stalled client its full share (or, without shares, the whole
    // budget), and no piece granted room for a while.
    let readers: Vec<ReaderId> = sources.iter().map(|s| ReaderId::from_ip(*s)).collect();
    let mut still = (0, 0);
    wait_for(
        "the stalled clients to hold the budget",
        Duration::from_secs(120),
        || {
            let full = readers
                .iter()
                .all(|r| cache.buffered_bytes(Some(*r)) >= SHARE)
                || cache.buffered_bytes(None) >= BUDGET;
            let grants = cache.budget_grants();
            still = if grants == still.0 {
                (grants, still.1 + 1)
            } else {
                (grants, 0)
            };
            // 50 polls, 10 ms apart, without a grant.
            std::future::ready((full && still.1 >= 50).then_some(()))
        },
    )
    .await;
    assert!(
        cache.buffered_bytes(None) <= sources.len() as u64 * SHARE,
        "the stalled clients hold more than their shares"
    );
    // Another client is served on both fronts while they still hold them.
    let read = async {
        normal_read(format!("http://{s3}/data/big.bin")).await;
        normal_read(format!("http://{azure}{azure_path}")).await;
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("a client was kept waiting by others' buffered bytes");
    // A client already holding its whole share is told to come back, in its
    // protocol's words, once its read has waited the admission wait (issue 13,
    // "overload is said"); what the stalled clients hold is unchanged.
    for (source, url, code) in [
        (sources[0], format!("http://{s3}/data/big.bin"), "SlowDown"),
        (
            sources[4],
            format!("http://{azure}{azure_path}"),
            "ServerBusy",
        ),
    ] {
        let resp = reqwest::Client::builder()
            .local_address(source)
            .build()
            .unwrap()
            .get(url)
            .header("range", "bytes=0-1048575")
            .header("x-ms-version", "2025-01-05")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 503, "{code}");
        assert_eq!(resp.headers()["retry-after"], "1", "{code}");
        if let Some(azure_code) = resp.headers().get("x-ms-error-code") {
            assert_eq!(azure_code, code);
        }
        let body = resp.text().await.unwrap();
        assert!(body.contains(&format!("<Code>{code}</Code>")), "{body}");
    }
    for r in &readers {
        assert_eq!(
            cache.buffered_bytes(Some(*r)),
            SHARE,
            "a stalled client was cut"
        );
    }
    // Operators see what is held on the admin listener.
    let metrics = reqwest::get(format!("http://{}/metrics", gw.admin_addr.unwrap()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let held = sources.len() as u64 * SHARE;
    assert!(
        metrics.contains(&format!("talon_gateway_read_budget_held_bytes {held}")),
        "{metrics}"
    );
    drop(stalled);
}
