//! A cache client never places blocks with another scoring than the cluster's: a
//! membership that names another placement version (here, a coordinator from before the
//! field, which is version 1) is refused at start and ignored on a refresh, so a mixed
//! upgrade cannot split the cache into two disagreeing placements.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use talon_cache_client::{CacheClient, CacheClientConfig, CacheClientError};
use talon_coordinator_client::epoch::placement_epoch;
use talon_coordinator_client::placement::{PLACEMENT_VERSION, PlacementMember};
use talon_core::BlockGeometry;
use talon_core::cluster_auth::ClusterSecret;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A coordinator's `GET /v1/members` answer listing `ids`, with the placement version
/// named (`Some`) or absent, as a coordinator from before the field answers.
fn members_body(ids: &[&str], version: Option<u32>) -> String {
    let members: Vec<serde_json::Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            serde_json::json!({
                "id": id, "addr": format!("127.0.0.1:{}", 9 + i), "weight": 1, "zone": "",
                "state": "live", "last_heartbeat_ms_ago": 0, "bytes_cached": 0,
                "capacity_bytes": 0, "hits": 0, "misses": 0,
            })
        })
        .collect();
    let mut body = serde_json::json!({ "epoch": 7, "members": members });
    if let Some(v) = version {
        body["placement_version"] = v.into();
    }
    body.to_string()
}

/// Serves `GET /v1/members` on loopback, answering what `answer` says for each
/// request: (the members' ids, the version named or absent).
async fn coordinator_answering(
    answer: impl Fn() -> (Vec<&'static str>, Option<u32>) + Send + Sync + 'static,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                // One request per connection: read its head, answer, close.
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                assert!(head.starts_with(b"GET /v1/members "), "{head:?}");
                let (ids, version) = answer();
                let body = members_body(&ids, version);
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    url
}

fn config(url: String) -> CacheClientConfig {
    let mut config = CacheClientConfig::new(
        url,
        BlockGeometry::DEFAULT,
        ClusterSecret::new(&[7u8; 32]).unwrap(),
    );
    // Refreshes only when the test asks.
    config.membership_refresh = std::time::Duration::from_secs(3600);
    config
}

fn epoch_of(ids: &[&str]) -> u64 {
    let members: Vec<PlacementMember> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| PlacementMember::new(*id, format!("127.0.0.1:{}", 9 + i), 1))
        .collect();
    placement_epoch(&members)
}

#[tokio::test]
async fn a_membership_of_another_placement_version_is_refused_at_start() {
    for version in [None, Some(1), Some(PLACEMENT_VERSION + 1)] {
        let url = coordinator_answering(move || (vec!["w1"], version)).await;
        match CacheClient::connect(config(url)).await {
            Err(CacheClientError::NoMembership(why)) => {
                assert!(why.contains("must not mix"), "{version:?}: {why}")
            }
            Ok(_) => panic!("{version:?}: a membership of another version was used"),
            Err(other) => panic!("{version:?}: {other}"),
        }
    }
    // The same answer naming this version is taken: the refusal is the version's.
    let url = coordinator_answering(|| (vec!["w1"], Some(PLACEMENT_VERSION))).await;
    let client = CacheClient::connect(config(url)).await.unwrap();
    assert_eq!(client.epoch(), epoch_of(&["w1"]));
}

#[tokio::test]
async fn a_refresh_of_another_placement_version_keeps_the_last_snapshot() {
    // 0: this version, two workers; 1: an old coordinator listing one; 2: this version,
    // one worker.
    let phase = Arc::new(AtomicU32::new(0));
    let served = phase.clone();
    let url = coordinator_answering(move || match served.load(Ordering::SeqCst) {
        0 => (vec!["w1", "w2"], Some(PLACEMENT_VERSION)),
        1 => (vec!["w1"], None),
        _ => (vec!["w1"], Some(PLACEMENT_VERSION)),
    })
    .await;
    let client = CacheClient::connect(config(url)).await.unwrap();
    assert_eq!(client.epoch(), epoch_of(&["w1", "w2"]));

    // The old coordinator's answer is not used: the client keeps the snapshot it had.
    phase.store(1, Ordering::SeqCst);
    client.refresh_membership().await;
    assert_eq!(client.epoch(), epoch_of(&["w1", "w2"]));

    // The same change from a coordinator of this version is taken.
    phase.store(2, Ordering::SeqCst);
    client.refresh_membership().await;
    assert_eq!(client.epoch(), epoch_of(&["w1"]));
}
