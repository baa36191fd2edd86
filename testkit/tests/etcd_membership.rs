//! Coordinators sharing membership through a real three-member etcd cluster (Debian's
//! `etcd-server`, started by the test on loopback) — issue 14: the same epoch for the
//! same members on every coordinator, a killed coordinator and a killed etcd member
//! leaving the cluster answering, a worker that stops heartbeating expiring once,
//! everywhere, and etcd reached over TLS with client certificates (and refused without
//! the right ones).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use talon_coordinator::etcd::EtcdTls;
use talon_coordinator::{CoordinatorConfig, CoordinatorError, RunningCoordinator, StateConfig};
use talon_coordinator_client::api::{HeartbeatRequest, MemberState, RegisterRequest};
use talon_coordinator_client::client::CoordinatorClient;
use talon_coordinator_client::epoch::placement_epoch;
use talon_coordinator_client::placement::{PLACEMENT_VERSION, PlacementMember};
use talon_core::cluster_auth::{ClusterSecret, Role};
use talon_testkit::etcd::EtcdCluster;
use talon_testkit::wait_for;

const SECRET: &str = "etcd-membership-test-secret-0123456789";

fn secret() -> ClusterSecret {
    ClusterSecret::new(SECRET.as_bytes()).unwrap()
}

async fn coordinator(etcd: &EtcdCluster, expiry: Duration) -> RunningCoordinator {
    let tls = etcd.tls.as_ref().map(|t| t.coordinator());
    coordinator_over(etcd, expiry, tls).await.unwrap()
}

async fn coordinator_over(
    etcd: &EtcdCluster,
    expiry: Duration,
    tls: Option<EtcdTls>,
) -> Result<RunningCoordinator, CoordinatorError> {
    talon_coordinator::start(CoordinatorConfig {
        cluster_secret: secret(),
        heartbeat_interval: Duration::from_millis(200),
        expiry,
        state: StateConfig::Etcd {
            endpoints: etcd.endpoints(),
            prefix: "/talon-test/".into(),
            tls,
        },
        ..CoordinatorConfig::default()
    })
    .await
}

fn client(c: &RunningCoordinator, role: Role) -> CoordinatorClient {
    CoordinatorClient::new(c.url())
        .unwrap()
        .with_auth(secret(), role)
}

fn registration(id: &str, port: u16, instance: &str) -> RegisterRequest {
    RegisterRequest {
        id: id.into(),
        addr: format!("127.0.0.1:{port}"),
        weight: 1,
        zone: "z1".into(),
        capacity_bytes: 1 << 30,
        instance: instance.into(),
        data_plane: "tokio".into(),
        placement_version: PLACEMENT_VERSION,
        page_size: 0,
        local: Default::default(),
    }
}

fn beat(instance: &str) -> HeartbeatRequest {
    HeartbeatRequest {
        instance: instance.into(),
        ..HeartbeatRequest::default()
    }
}

/// Waits until coordinator `c` lists exactly `ids` (sorted); returns its epoch.
async fn lists(c: &RunningCoordinator, ids: &[&str]) -> u64 {
    wait_for(
        &format!("{} to list {ids:?}", c.url()),
        Duration::from_secs(10),
        || async {
            let snap = c.snapshot();
            let got: Vec<&str> = snap.members.iter().map(|m| m.id.as_str()).collect();
            (got == ids).then_some(snap.epoch)
        },
    )
    .await
}

/// Two coordinators on `etcd`, worker w1 registered through the first and listed by
/// the second.
async fn two_sharing_w1(etcd: &EtcdCluster) -> (RunningCoordinator, RunningCoordinator) {
    let a = coordinator(etcd, Duration::from_secs(5)).await;
    let b = coordinator(etcd, Duration::from_secs(5)).await;
    client(&a, Role::Worker)
        .register(&registration("w1", 7101, "i1"))
        .await
        .unwrap();
    lists(&b, &["w1"]).await;
    (a, b)
}

/// The epoch of live workers `ids` registered by [`registration`] on these ports.
fn epoch_of(live: &[(&str, u16)]) -> u64 {
    let members: Vec<PlacementMember> = live
        .iter()
        .map(|(id, port)| PlacementMember::new(*id, format!("127.0.0.1:{port}"), 1))
        .collect();
    placement_epoch(&members)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_coordinator_lists_the_same_members_with_the_same_epoch() {
    let etcd = EtcdCluster::start().await;
    let a = coordinator(&etcd, Duration::from_secs(5)).await;
    let b = coordinator(&etcd, Duration::from_secs(5)).await;
    let (wa, wb) = (client(&a, Role::Worker), client(&b, Role::Worker));
    wa.register(&registration("w1", 7101, "i1")).await.unwrap();
    wa.register(&registration("w2", 7102, "i2")).await.unwrap();
    wb.register(&registration("w3", 7103, "i3")).await.unwrap();
    let want = epoch_of(&[("w1", 7101), ("w2", 7102), ("w3", 7103)]);
    assert_eq!(lists(&a, &["w1", "w2", "w3"]).await, want);
    assert_eq!(lists(&b, &["w1", "w2", "w3"]).await, want);

    // One id, one instance, whichever coordinator is asked.
    let stolen = wb
        .register(&registration("w1", 7199, "other"))
        .await
        .unwrap_err();
    assert_eq!(stolen.status_code(), 409, "{stolen}");
    assert!(
        stolen
            .to_string()
            .contains("another running worker instance"),
        "{stolen}"
    );
    assert_eq!(
        a.snapshot().member("w1").unwrap().addr,
        "127.0.0.1:7101",
        "the refused registration changed nothing"
    );

    // A drain through one coordinator is seen by the other.
    client(&b, Role::Admin).drain("w2", "").await.unwrap();
    let drained = epoch_of(&[("w1", 7101), ("w3", 7103)]);
    wait_for("a to see w2 draining", Duration::from_secs(10), || async {
        let snap = a.snapshot();
        (snap.member("w2")?.state == MemberState::Draining && snap.epoch == drained).then_some(())
    })
    .await;
    assert_eq!(b.snapshot().epoch, drained);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_coordinator_leaves_the_others_serving_and_a_new_one_starts_whole() {
    let etcd = EtcdCluster::start().await;
    let (a, b) = two_sharing_w1(&etcd).await;
    a.shutdown().await;

    // The worker's next heartbeat goes to b, which knows it.
    let wb = client(&b, Role::Worker);
    wb.heartbeat("w1", &beat("i1")).await.unwrap();
    wb.register(&registration("w2", 7102, "i2")).await.unwrap();
    lists(&b, &["w1", "w2"]).await;

    // A coordinator started now reads the whole membership before it answers.
    let c = coordinator(&etcd, Duration::from_secs(5)).await;
    assert_eq!(
        c.snapshot().epoch,
        epoch_of(&[("w1", 7101), ("w2", 7102)]),
        "{:?}",
        c.snapshot().members
    );
    b.shutdown().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_etcd_member_leaves_the_cluster_answering() {
    let mut etcd = EtcdCluster::start().await;
    let a = coordinator(&etcd, Duration::from_secs(5)).await;
    let w = client(&a, Role::Worker);
    w.register(&registration("w1", 7101, "i1")).await.unwrap();
    // The first endpoint is the one the coordinator asks first.
    etcd.kill(0);
    // An election may be under way: the cluster answers again within its timeout.
    wait_for(
        "a registration through two of three etcd members",
        Duration::from_secs(10),
        || async { w.register(&registration("w2", 7102, "i2")).await.ok() },
    )
    .await;
    w.heartbeat("w1", &beat("i1")).await.unwrap();
    assert_eq!(
        lists(&a, &["w1", "w2"]).await,
        epoch_of(&[("w1", 7101), ("w2", 7102)])
    );
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_stops_heartbeating_expires_once_everywhere() {
    let etcd = EtcdCluster::start().await;
    let expiry = Duration::from_millis(1500);
    let a = coordinator(&etcd, expiry).await;
    let b = coordinator(&etcd, expiry).await;
    let (wa, wb) = (client(&a, Role::Worker), client(&b, Role::Worker));
    wa.register(&registration("silent", 7101, "i1"))
        .await
        .unwrap();
    wa.register(&registration("alive", 7102, "i2"))
        .await
        .unwrap();
    lists(&b, &["alive", "silent"]).await;

    // "alive" heartbeats, alternately through each coordinator; "silent" never does.
    let beating = tokio::spawn(async move {
        for i in 0u32.. {
            let c = if i % 2 == 0 { &wa } else { &wb };
            c.heartbeat("alive", &beat("i2")).await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let want = epoch_of(&[("alive", 7102)]);
    assert_eq!(lists(&a, &["alive"]).await, want);
    assert_eq!(lists(&b, &["alive"]).await, want);
    assert_eq!(a.snapshot().counters.expirations, 1);
    assert_eq!(b.snapshot().counters.expirations, 1);
    // Gone for good: its heartbeat is answered "register again" by both.
    for c in [&a, &b] {
        let late = client(c, Role::Worker)
            .heartbeat("silent", &beat("i1"))
            .await;
        assert!(
            matches!(late, Err(CoordinatorError::UnknownWorker(_))),
            "{late:?}"
        );
    }
    // "alive" outlived several leases.
    assert_eq!(
        a.snapshot().member("alive").unwrap().state,
        MemberState::Live
    );
    beating.abort();
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinators_reach_etcd_over_tls_with_a_client_certificate_and_only_so() {
    let etcd = EtcdCluster::start_tls().await;
    let tls = etcd.tls.clone().unwrap();
    let (a, b) = two_sharing_w1(&etcd).await;
    let want = epoch_of(&[("w1", 7101)]);
    assert_eq!(b.snapshot().epoch, want, "shared over TLS");

    // Plain HTTP to a TLS-only etcd, no client certificate, a certificate of another
    // CA, and a CA that did not sign etcd's certificate: each coordinator fails to start
    // with the state store's error.
    let other_ca = tls.stranger.0.parent().unwrap().join("other-ca.crt");
    let refused = [
        ("plain HTTP", None),
        (
            "no client certificate",
            Some(EtcdTls {
                ca: tls.ca.clone(),
                client: None,
            }),
        ),
        (
            "a stranger's certificate",
            Some(EtcdTls {
                ca: tls.ca.clone(),
                client: Some(tls.stranger.clone()),
            }),
        ),
        (
            "the wrong CA",
            Some(EtcdTls {
                ca: other_ca,
                client: Some(tls.client.clone()),
            }),
        ),
    ];
    for (what, settings) in refused {
        match coordinator_over(&etcd, Duration::from_secs(5), settings).await {
            Err(CoordinatorError::StateStore(e)) => {
                assert!(e.contains("no etcd endpoint answered"), "{what}: {e}")
            }
            Err(e) => panic!("{what}: refused for another reason: {e}"),
            Ok(_) => panic!("{what}: a coordinator started"),
        }
    }
    // Nothing changed: the same single member, on both coordinators.
    assert_eq!(lists(&a, &["w1"]).await, want);
    assert_eq!(lists(&b, &["w1"]).await, want);
    a.shutdown().await;
    b.shutdown().await;
}
