//! Readers that go away at any moment (issue: "cancellation at every await point of a
//! read"). Clients of the gateway over a real cluster close their connections at
//! random points — in the middle of the request head, right after it, after some
//! bytes of the body — while others read, half of the objects cold (so fills and
//! stats are cut too). Afterwards nothing has leaked and nothing is broken: the
//! gateway's read budget holds no bytes, this process holds no more sockets and no
//! more tasks than before, and every object reads back whole, byte for byte, through
//! the workers.
//!
//! A leak of this kind (a worker connection being opened when its read was dropped)
//! once left the pool waiting for a connection nobody was opening: every read of that
//! worker then hung (the read review's RP-01).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use sha2::{Digest, Sha256};
use talon_gateway::config::{Backend, Identities, IdentitiesFile, Limits, Route, S3Front};
use talon_gateway::{GatewayConfig, RunningGateway};
use talon_origin_stub::generated::GeneratedObject;
use talon_protocols::access::AnonymousAccess;
use talon_protocols::s3::request::S3Addressing;
use talon_testkit::{Cluster, ClusterConfig, expected, http_get, metric, wait_for};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Readers at once, and reads each gives up.
const READERS: usize = 16;
const READS_EACH: usize = 24;

async fn gateway(cluster: &Cluster) -> RunningGateway {
    talon_gateway::start(GatewayConfig {
        s3: Some(S3Front {
            listen: "127.0.0.1:0".parse().unwrap(),
            route: Route::Cache,
            backend: Backend::S3,
            addressing: S3Addressing::PathStyle,
            region: "us-east-1".into(),
        }),
        azure: None,
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        origins: cluster.origins(),
        cache: Some(cluster.client().await),
        // Unsigned reads: what is tested is the read path, not the signature.
        identities: Identities::from_parts(IdentitiesFile {
            anonymous: AnonymousAccess::ReadOnly,
            ..IdentitiesFile::default()
        })
        .unwrap(),
        freshness: talon_gateway::Freshness::within(Duration::from_millis(200)),
        limits: Limits::default(),
        tls: None,
        acl_file: None,
        cache_status: true,
        access_log: None,
    })
    .await
    .unwrap()
}

fn request(object: &GeneratedObject, range: Option<(u64, u64)>) -> String {
    let range = range
        .map(|(a, b)| format!("range: bytes={a}-{}\r\n", b - 1))
        .unwrap_or_default();
    format!(
        "GET /{}/{} HTTP/1.1\r\nhost: x\r\n{range}connection: close\r\n\r\n",
        object.bucket, object.key
    )
}

/// A whole read over HTTP: status 200 and the object's bytes, by SHA-256.
async fn read_whole(gw: &RunningGateway, object: &GeneratedObject, what: &str) {
    let mut conn = TcpStream::connect(gw.s3_addr.unwrap()).await.unwrap();
    conn.write_all(request(object, None).as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), conn.read_to_end(&mut answer))
        .await
        .unwrap_or_else(|_| panic!("{what}: {}/{} hung", object.bucket, object.key))
        .unwrap();
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&answer[..split]);
    assert!(head.starts_with("HTTP/1.1 200"), "{what}: {head}");
    let body = &answer[split + 4..];
    assert_eq!(
        Sha256::digest(body),
        Sha256::digest(expected(object, 0..object.size)),
        "{what}: wrong bytes for {}",
        object.key
    );
}

/// One reader that gives up: sends the request (or part of it) and closes after a
/// random number of bytes of the answer, or at once.
async fn give_up(addr: std::net::SocketAddr, object: &GeneratedObject, rng: &mut fastrand::Rng) {
    let Ok(mut conn) = TcpStream::connect(addr).await else {
        return;
    };
    let range = rng.bool().then(|| {
        let a = rng.u64(0..object.size);
        (a, rng.u64(a + 1..=object.size))
    });
    let text = request(object, range);
    match rng.u8(0..4) {
        // Half a request head, then gone.
        0 => {
            let _ = conn.write_all(&text.as_bytes()[..text.len() / 2]).await;
        }
        // The whole request, then gone before any answer.
        1 => {
            let _ = conn.write_all(text.as_bytes()).await;
        }
        // Gone after some bytes of the answer (its head, or into the body).
        _ => {
            let _ = conn.write_all(text.as_bytes()).await;
            let mut want = rng.usize(1..(object.size as usize / 2).max(2));
            let mut buf = vec![0u8; 16 << 10];
            while want > 0 {
                match tokio::time::timeout(Duration::from_secs(30), conn.read(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => want = want.saturating_sub(n),
                    _ => break,
                }
            }
        }
    }
    drop(conn);
}

/// Sockets this process holds open (the cluster and the gateway run in it).
fn open_sockets() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_that_go_away_at_any_moment_leak_nothing_and_break_nothing() {
    let objects: Vec<GeneratedObject> = (0..24u64)
        .map(|i| GeneratedObject::new("data", format!("o{i}.bin"), 100_000 + i * 50_000, 900 + i))
        .collect();
    let cluster = Cluster::start(ClusterConfig {
        workers: 3,
        generated: objects.clone(),
        origin_fallback: true,
        ..ClusterConfig::default()
    })
    .await;
    let gw = gateway(&cluster).await;
    // Half the objects warm (hits), half cold (fills and stats cut mid-way too); the
    // pools to every worker opened.
    for object in objects.iter().step_by(2) {
        read_whole(&gw, object, "warm-up").await;
    }
    let admin = format!("http://{}/metrics", gw.admin_addr.unwrap());
    let runtime = tokio::runtime::Handle::current().metrics();
    // The gateway's pool may open connections for stats held up at the origin: each
    // is two sockets in this process (the workers run in it), kept, not leaked; and
    // each lets one more stat reach the origin at once, whose connection the worker's
    // origin client keeps idle (two sockets more: the origin stub runs here too).
    let pooled = || -> usize {
        (0..3)
            .map(|i| cluster.worker_metric(i, "talon_worker_connections") as usize)
            .sum()
    };
    let (sockets, tasks, pooled_before) = (open_sockets(), runtime.num_alive_tasks(), pooled());

    let addr = gw.s3_addr.unwrap();
    let readers: Vec<_> = (0..READERS as u64)
        .map(|seed| {
            let objects = objects.clone();
            tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(seed);
                for _ in 0..READS_EACH {
                    let object = &objects[rng.usize(0..objects.len())];
                    give_up(addr, object, &mut rng).await;
                }
            })
        })
        .collect();
    for r in readers {
        r.await.unwrap();
    }

    // Nothing left held: the read budget, sockets, tasks (each back to where it was,
    // give or take the pool's connections being replaced, and those it added).
    wait_for(
        "the read budget to hold nothing",
        Duration::from_secs(20),
        || async {
            let text = http_get(&admin).await;
            (metric(&text, "talon_gateway_read_budget_held_bytes") == Some(0.0)).then_some(())
        },
    )
    .await;
    wait_for(
        "the sockets to be given back",
        Duration::from_secs(20),
        || async {
            let added = pooled().saturating_sub(pooled_before);
            (open_sockets() <= sockets + 6 + 4 * added).then_some(())
        },
    )
    .await;
    wait_for("the tasks to end", Duration::from_secs(20), || async {
        // Each pooled connection runs a reader and a writer task here, and one task
        // on the worker's side when its plane is Tokio's; each origin connection kept
        // idle, one on either side.
        let added = pooled().saturating_sub(pooled_before);
        (runtime.num_alive_tasks() <= tasks + 6 + 5 * added).then_some(())
    })
    .await;
    // Nothing broken: every object whole, through the workers.
    let before = cluster.origin_gets();
    for object in &objects {
        read_whole(&gw, object, "after the readers went away").await;
    }
    let cold_left = cluster.origin_gets() - before;
    assert!(
        cold_left <= objects.len() as u64,
        "{cold_left} origin reads for {} objects",
        objects.len()
    );
    for object in &objects {
        read_whole(&gw, object, "a hit").await;
    }
    assert_eq!(
        cluster.origin_gets() - before,
        cold_left,
        "the second pass was all hits"
    );
}
