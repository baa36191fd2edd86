//! The admin API end to end: a real coordinator on 127.0.0.1:0, driven through the
//! typed client and raw HTTP.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use talon_coordinator::auth::{AUTH_HEADER, unix_now};
use talon_coordinator::{CoordinatorConfig, CoordinatorError, RunningCoordinator};
use talon_coordinator_client::api::{
    ClusterGeometry, ErrorBody, HeartbeatRequest, MemberState, MembersResponse, RegisterRequest,
};
use talon_coordinator_client::client::{CoordinatorClient, Report};
use talon_coordinator_client::epoch::placement_epoch;
use talon_coordinator_client::placement::{PLACEMENT_VERSION, PlacementMember};
use talon_core::cluster_auth::{ClusterSecret, Role, api_auth_header};

fn reg(id: &str, port: u16, weight: u32) -> RegisterRequest {
    RegisterRequest {
        id: id.into(),
        addr: format!("127.0.0.1:{port}"),
        weight,
        zone: "z1".into(),
        capacity_bytes: 1 << 30,
        instance: String::new(),
        data_plane: String::new(),
        placement_version: PLACEMENT_VERSION,
        page_size: 0,
        local: Default::default(),
    }
}

/// The `x-talon-auth` value for a raw request signed as `role`.
fn sign(c: &RunningCoordinator, role: Role, method: &str, path: &str, body: &[u8]) -> String {
    api_auth_header(c.cluster_secret(), role, method, path, unix_now(), body)
}

/// A raw signed request, as a non-Rust client would send it.
async fn raw(
    c: &RunningCoordinator,
    role: Role,
    method: reqwest::Method,
    path: &str,
    body: &'static str,
) -> reqwest::Response {
    reqwest::Client::new()
        .request(method.clone(), format!("{}{path}", c.url()))
        .header(
            AUTH_HEADER,
            sign(c, role, method.as_str(), path, body.as_bytes()),
        )
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn start_with(heartbeat_ms: u64, expiry_ms: u64) -> (RunningCoordinator, CoordinatorClient) {
    let config = CoordinatorConfig {
        heartbeat_interval: Duration::from_millis(heartbeat_ms),
        expiry: Duration::from_millis(expiry_ms),
        ..CoordinatorConfig::default()
    };
    let coordinator = talon_coordinator::start(config).await.unwrap();
    let client = CoordinatorClient::new(coordinator.url())
        .unwrap()
        .with_auth(coordinator.cluster_secret().clone(), Role::Worker);
    (coordinator, client)
}

async fn json<T: serde::de::DeserializeOwned>(resp: reqwest::Response) -> T {
    let bytes = resp.bytes().await.unwrap();
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&bytes)))
}

/// Long windows: nothing expires during the test.
async fn start() -> (RunningCoordinator, CoordinatorClient) {
    start_with(1000, 600_000).await
}

#[tokio::test]
async fn register_heartbeat_and_read_back() {
    let (coordinator, client) = start().await;
    let r1 = client.register(&reg("w1", 7101, 1)).await.unwrap();
    assert_eq!(r1.heartbeat_interval_ms, 1000);
    assert_eq!(r1.expiry_ms, 600_000);
    assert_eq!(
        r1.epoch,
        placement_epoch(&[PlacementMember::new("w1", "127.0.0.1:7101", 1)])
    );
    let r2 = client.register(&reg("w2", 7102, 2)).await.unwrap();
    assert_ne!(r2.epoch, r1.epoch);

    let stats = HeartbeatRequest {
        bytes_cached: 4096,
        capacity_bytes: 0,
        hits: 30,
        misses: 10,
        draining: false,
        instance: String::new(),
        warm_done: Vec::new(),
    };
    let hb = client.heartbeat("w1", &stats).await.unwrap();
    assert_eq!(hb.epoch, r2.epoch, "a heartbeat does not change the epoch");
    assert_eq!(hb.state, MemberState::Live);

    let members = client.members().await.unwrap();
    assert_eq!(members.epoch, r2.epoch);
    let ids: Vec<&str> = members.members.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["w1", "w2"]);
    let w1 = &members.members[0];
    assert_eq!(w1.addr, "127.0.0.1:7101");
    assert_eq!(
        (w1.weight, w1.zone.as_str(), w1.state),
        (1, "z1", MemberState::Live)
    );
    assert_eq!(
        (w1.bytes_cached, w1.capacity_bytes, w1.hits, w1.misses),
        (4096, 1 << 30, 30, 10)
    );
    assert!(w1.last_heartbeat_ms_ago < 60_000);
    // A reader's placement from this answer carries the same epoch.
    assert_eq!(members.placement().epoch(), members.epoch);
    assert_eq!(members.placement().len(), 2);

    let mut one = client.member("w2").await.unwrap();
    // The heartbeat's age moves on between the two requests (a millisecond is enough).
    assert!(one.last_heartbeat_ms_ago >= members.members[1].last_heartbeat_ms_ago);
    one.last_heartbeat_ms_ago = members.members[1].last_heartbeat_ms_ago;
    assert_eq!(one, members.members[1]);
    assert!(matches!(
        client.member("nope").await,
        Err(CoordinatorError::UnknownWorker(id)) if id == "nope"
    ));

    let cluster = client.cluster().await.unwrap();
    assert_eq!(cluster.epoch, r2.epoch);
    assert_eq!((cluster.workers, cluster.live, cluster.draining), (2, 2, 0));
    assert_eq!(cluster.capacity_bytes, 2 << 30);
    assert_eq!(cluster.bytes_cached, 4096);
    assert_eq!((cluster.hits, cluster.misses), (30, 10));
    assert_eq!(cluster.hit_ratio, 0.75);

    // Raw JSON keys, as a non-Rust client sees them.
    let raw: serde_json::Value = json(
        raw(
            &coordinator,
            Role::Reader,
            reqwest::Method::GET,
            "/v1/members",
            "",
        )
        .await,
    )
    .await;
    let m = &raw["members"][0];
    for key in [
        "id",
        "addr",
        "weight",
        "zone",
        "state",
        "last_heartbeat_ms_ago",
        "bytes_cached",
        "capacity_bytes",
        "hits",
        "misses",
    ] {
        assert!(m.get(key).is_some(), "member JSON lacks {key}: {m}");
    }
    assert_eq!(m["state"], "live");
    assert_eq!(raw["epoch"].as_u64(), Some(r2.epoch));
    coordinator.shutdown().await;
}

#[tokio::test]
async fn drain_removes_from_placement_but_stays_listed() {
    let (coordinator, client) = start().await;
    client.register(&reg("w1", 7101, 1)).await.unwrap();
    client.register(&reg("w2", 7102, 1)).await.unwrap();
    let drained = client.drain("w2", "").await.unwrap();
    assert_eq!(
        drained.epoch,
        placement_epoch(&[PlacementMember::new("w1", "127.0.0.1:7101", 1)])
    );
    let members = client.members().await.unwrap();
    assert_eq!(members.epoch, drained.epoch);
    assert_eq!(members.members.len(), 2);
    assert_eq!(members.members[1].state, MemberState::Draining);
    let placement = members.placement();
    assert_eq!(placement.len(), 1);
    assert_eq!(placement.members()[0].id, "w1");
    // The draining worker keeps heartbeating and learns it is draining.
    let hb = client
        .heartbeat("w2", &HeartbeatRequest::default())
        .await
        .unwrap();
    assert_eq!(hb.state, MemberState::Draining);
    let cluster = client.cluster().await.unwrap();
    assert_eq!((cluster.workers, cluster.live, cluster.draining), (2, 1, 1));
    assert!(matches!(
        client.drain("ghost", "").await,
        Err(CoordinatorError::UnknownWorker(_))
    ));
    coordinator.shutdown().await;
}

#[tokio::test]
async fn unknown_heartbeat_is_404_with_a_json_error() {
    let (coordinator, client) = start().await;
    let resp = raw(
        &coordinator,
        Role::Worker,
        reqwest::Method::POST,
        "/v1/workers/ghost/heartbeat",
        "{}",
    )
    .await;
    assert_eq!(resp.status(), 404);
    let body: ErrorBody = json(resp).await;
    assert!(body.error.contains("ghost"), "{}", body.error);
    assert!(matches!(
        client.heartbeat("ghost", &HeartbeatRequest::default()).await,
        Err(CoordinatorError::UnknownWorker(id)) if id == "ghost"
    ));
    coordinator.shutdown().await;
}

/// Registers `body` raw, as a non-Rust worker would, and checks that it is refused with
/// `status` and a JSON error body, which it returns.
async fn refused_registration(
    coordinator: &RunningCoordinator,
    body: &'static str,
    status: u16,
) -> ErrorBody {
    let resp = raw(
        coordinator,
        Role::Worker,
        reqwest::Method::POST,
        "/v1/workers/register",
        body,
    )
    .await;
    assert_eq!(resp.status(), status, "{body}");
    let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(ct.starts_with("application/json"), "{ct}");
    json(resp).await
}

#[tokio::test]
async fn bad_registrations_are_400_and_add_nobody() {
    let (coordinator, client) = start().await;
    let bodies = [
        "not json",
        "",
        "[]",
        r#"{"addr": "127.0.0.1:7101", "weight": 1}"#,
        r#"{"id": "", "addr": "127.0.0.1:7101", "weight": 1}"#,
        r#"{"id": "w 1", "addr": "127.0.0.1:7101", "weight": 1}"#,
        r#"{"id": "w/1", "addr": "127.0.0.1:7101", "weight": 1}"#,
        r#"{"id": "w1", "addr": "localhost", "weight": 1}"#,
        r#"{"id": "w1", "addr": "127.0.0.1:0", "weight": 1}"#,
        r#"{"id": "w1", "addr": "127.0.0.1:7101", "weight": 0}"#,
        r#"{"id": "w1", "addr": "127.0.0.1:7101", "weight": -1}"#,
        r#"{"id": "w1", "addr": "127.0.0.1:7101", "weight": "1"}"#,
    ];
    for body in bodies {
        let err = refused_registration(&coordinator, body, 400).await;
        assert!(!err.error.is_empty());
    }
    let members = client.members().await.unwrap();
    assert!(members.members.is_empty());
    assert_eq!(members.epoch, 0);
    // Through the typed client, the reason comes back.
    match client.register(&reg("bad id", 7101, 1)).await {
        Err(CoordinatorError::InvalidRegistration(msg)) => assert!(msg.contains("bad id"), "{msg}"),
        other => panic!("{other:?}"),
    }
    let metrics = reqwest::get(format!("{}/metrics", coordinator.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let rejected = bodies.len() + 1;
    assert!(
        metrics.contains(&format!(
            "talon_coordinator_registrations_rejected_total {rejected}"
        )),
        "{metrics}"
    );
    coordinator.shutdown().await;
}

#[tokio::test]
async fn a_worker_of_another_placement_version_is_refused_and_adds_nobody() {
    let (coordinator, client) = start().await;
    // A worker from before the field (version 1), and versions on either side of ours.
    let bodies = [
        r#"{"id": "w1", "addr": "127.0.0.1:7101", "weight": 1}"#,
        r#"{"id": "w1", "addr": "127.0.0.1:7101", "weight": 1, "placement_version": 1}"#,
        r#"{"id": "w1", "addr": "127.0.0.1:7101", "weight": 1, "placement_version": 3}"#,
    ];
    for body in bodies {
        let err = refused_registration(&coordinator, body, 409).await;
        assert!(err.error.contains("must not mix"), "{}", err.error);
    }
    let mut old = reg("w1", 7101, 1);
    old.placement_version = PLACEMENT_VERSION - 1;
    match client.register(&old).await {
        Err(CoordinatorError::Api {
            status: 409,
            message,
        }) => assert!(message.contains("placement version"), "{message}"),
        other => panic!("{other:?}"),
    }
    let members = client.members().await.unwrap();
    assert!(members.members.is_empty());
    assert_eq!(members.epoch, 0);
    // The coordinator's answer names its version, and a reader of it accepts it.
    assert_eq!(members.placement_version, PLACEMENT_VERSION);
    members.checked_placement().unwrap();
    // The same worker with this version joins.
    client.register(&reg("w1", 7101, 1)).await.unwrap();
    assert_eq!(client.members().await.unwrap().members.len(), 1);
    coordinator.shutdown().await;
}

#[tokio::test]
async fn the_cluster_geometry_is_published_and_a_worker_of_another_page_size_is_refused() {
    let geometry = ClusterGeometry {
        block_size: 64 << 20,
        page_size: 1 << 20,
    };
    let coordinator = talon_coordinator::start(CoordinatorConfig {
        geometry: Some(geometry),
        expiry: Duration::from_secs(600),
        ..CoordinatorConfig::default()
    })
    .await
    .unwrap();
    let client = CoordinatorClient::new(coordinator.url())
        .unwrap()
        .with_auth(coordinator.cluster_secret().clone(), Role::Worker);
    assert_eq!(client.members().await.unwrap().geometry, Some(geometry));
    let mut other = reg("w1", 7101, 1);
    other.page_size = 64 << 10;
    match client.register(&other).await {
        Err(CoordinatorError::Api {
            status: 409,
            message,
        }) => assert!(
            message.contains("--page-size 65536 bytes differs from the cluster's 1048576 bytes"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    let members = client.members().await.unwrap();
    assert!(members.members.is_empty());
    assert_eq!(members.epoch, 0);
    // The same page size, or none said (a worker from before the field), joins.
    let mut same = reg("w1", 7101, 1);
    same.page_size = 1 << 20;
    client.register(&same).await.unwrap();
    client.register(&reg("w2", 7102, 1)).await.unwrap();
    assert_eq!(client.members().await.unwrap().members.len(), 2);
    coordinator.shutdown().await;
}

/// Polls `members` until `done` holds or the deadline passes.
async fn wait_for_members(
    client: &CoordinatorClient,
    deadline: Duration,
    done: impl Fn(&MembersResponse) -> bool,
) -> MembersResponse {
    let until = Instant::now() + deadline;
    loop {
        let members = client.members().await.unwrap();
        if done(&members) {
            return members;
        }
        assert!(
            Instant::now() < until,
            "condition not reached in {deadline:?}: {members:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn silent_worker_is_dropped_after_the_window() {
    let (coordinator, client) = start_with(50, 1000).await;
    let w1 = reg("w1", 7101, 1);
    client.register(&w1).await.unwrap();
    client.register(&reg("w2", 7102, 1)).await.unwrap();
    // w1 keeps heartbeating; w2 goes silent.
    let beat_client = client.clone();
    let beating = tokio::spawn(async move {
        loop {
            beat_client
                .heartbeat_or_register(&w1, &HeartbeatRequest::default())
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let members = wait_for_members(&client, Duration::from_secs(10), |m| {
        m.members.iter().all(|m| m.id != "w2")
    })
    .await;
    let ids: Vec<&str> = members.members.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["w1"]);
    assert_eq!(
        members.epoch,
        placement_epoch(&[PlacementMember::new("w1", "127.0.0.1:7101", 1)])
    );
    assert!(matches!(
        client.heartbeat("w2", &HeartbeatRequest::default()).await,
        Err(CoordinatorError::UnknownWorker(_))
    ));
    beating.abort();
    let snap = coordinator.snapshot();
    assert!(snap.counters.expirations >= 1);
    coordinator.shutdown().await;
}

#[tokio::test]
async fn restart_is_rebuilt_by_the_next_heartbeat_round() {
    let (first, client) = start().await;
    let addr = first.addr;
    let workers = [reg("w1", 7101, 1), reg("w2", 7102, 3)];
    for w in &workers {
        client.register(w).await.unwrap();
    }
    let before = client.members().await.unwrap();
    let secret = first.cluster_secret().clone();
    first.shutdown().await;

    // A new coordinator on the same address (and secret) knows nobody.
    let config = CoordinatorConfig {
        listen: addr,
        cluster_secret: secret,
        expiry: Duration::from_secs(600),
        ..CoordinatorConfig::default()
    };
    let second = talon_coordinator::start(config).await.unwrap();
    assert!(client.members().await.unwrap().members.is_empty());
    assert!(matches!(
        client.heartbeat("w1", &HeartbeatRequest::default()).await,
        Err(CoordinatorError::UnknownWorker(_))
    ));
    // Each worker's next report registers it again.
    for w in &workers {
        let report = client
            .heartbeat_or_register(w, &HeartbeatRequest::default())
            .await
            .unwrap();
        assert!(matches!(report, Report::Registered(_)), "{report:?}");
    }
    let after = client.members().await.unwrap();
    assert_eq!(
        after.epoch, before.epoch,
        "the same set gives the same epoch"
    );
    assert_eq!(after.placement(), before.placement());
    // And the round after that is plain heartbeats.
    let report = client
        .heartbeat_or_register(&workers[0], &HeartbeatRequest::default())
        .await
        .unwrap();
    assert!(matches!(report, Report::Heartbeat(_)));
    assert_eq!(report.epoch(), before.epoch);
    second.shutdown().await;
}

#[tokio::test]
async fn health_ready_metrics_and_unknown_routes() {
    let (coordinator, client) = start().await;
    let base = coordinator.url();
    let health = reqwest::get(format!("{base}/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap(), "ok");
    assert_eq!(
        reqwest::get(format!("{base}/readyz"))
            .await
            .unwrap()
            .status(),
        200
    );

    client.register(&reg("w1", 7101, 1)).await.unwrap();
    client
        .heartbeat("w1", &HeartbeatRequest::default())
        .await
        .unwrap();
    let _ = client
        .heartbeat("ghost", &HeartbeatRequest::default())
        .await;
    let metrics = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(metrics.status(), 200);
    let ct = metrics.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(ct.starts_with("text/plain"), "{ct}");
    let text = metrics.text().await.unwrap();
    let epoch = coordinator.membership().epoch().to_string();
    for line in [
        "talon_coordinator_workers{state=\"live\"} 1",
        "talon_coordinator_workers{state=\"draining\"} 0",
        &format!("talon_coordinator_epoch_info{{epoch=\"{epoch}\"}} 1"),
        "talon_coordinator_registrations_total 1",
        "talon_coordinator_heartbeats_total 1",
        "talon_coordinator_heartbeats_unknown_total 1",
        "talon_coordinator_expirations_total 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line:?} missing in\n{text}"
        );
    }

    let missing = reqwest::get(format!("{base}/v2/nothing")).await.unwrap();
    assert_eq!(missing.status(), 404);
    let body: ErrorBody = json(missing).await;
    assert!(!body.error.is_empty());
    coordinator.shutdown().await;
}

#[tokio::test]
async fn bad_config_and_busy_port_are_errors() {
    let bad = CoordinatorConfig {
        heartbeat_interval: Duration::from_secs(5),
        expiry: Duration::from_secs(1),
        ..CoordinatorConfig::default()
    };
    assert!(matches!(
        talon_coordinator::start(bad).await,
        Err(CoordinatorError::InvalidConfig(_))
    ));
    let (running, _) = start().await;
    let busy = CoordinatorConfig {
        listen: running.addr,
        ..CoordinatorConfig::default()
    };
    assert!(matches!(
        talon_coordinator::start(busy).await,
        Err(CoordinatorError::Bind { .. })
    ));
    running.shutdown().await;
}

/// SEC-04 of the security review: without the cluster secret nobody registers,
/// heartbeats, drains or even lists members; a reader cannot mutate; and the registration
/// the review made (`evil` at weight 4294967295) adds nobody.
#[tokio::test]
async fn the_api_requires_the_cluster_secret_and_the_right_role() {
    let (coordinator, client) = start().await;
    client.register(&reg("w1", 7101, 1)).await.unwrap();
    let before = client.members().await.unwrap();
    let url = coordinator.url();
    let evil = r#"{"id":"evil","addr":"127.0.0.1:7999","weight":4294967295}"#;
    let http = reqwest::Client::new();
    // No signature at all.
    for (method, path, body) in [
        (reqwest::Method::POST, "/v1/workers/register", evil),
        (reqwest::Method::POST, "/v1/workers/w1/heartbeat", "{}"),
        (reqwest::Method::POST, "/v1/workers/w1/drain", "{}"),
        (reqwest::Method::GET, "/v1/members", ""),
    ] {
        let resp = http
            .request(method.clone(), format!("{url}{path}"))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{method} {path}");
    }
    // Another cluster's secret, a replay of a signature onto another body, an old stamp.
    let other = ClusterSecret::new(b"some other cluster's secret").unwrap();
    let forged = api_auth_header(
        &other,
        Role::Worker,
        "POST",
        "/v1/workers/register",
        unix_now(),
        evil.as_bytes(),
    );
    let copied = sign(
        &coordinator,
        Role::Worker,
        "POST",
        "/v1/workers/register",
        b"{}",
    );
    let stale = api_auth_header(
        coordinator.cluster_secret(),
        Role::Worker,
        "POST",
        "/v1/workers/register",
        unix_now() - 3600,
        evil.as_bytes(),
    );
    for header in [forged, copied, stale, "worker 1 zz".into()] {
        let resp = http
            .post(format!("{url}/v1/workers/register"))
            .header(AUTH_HEADER, header)
            .body(evil)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
    }
    // A reader may look but not touch.
    for (method, path, body) in [
        (reqwest::Method::POST, "/v1/workers/register", evil),
        (reqwest::Method::POST, "/v1/workers/w1/drain", "{}"),
    ] {
        let resp = raw(&coordinator, Role::Reader, method, path, body).await;
        assert_eq!(resp.status(), 403, "{path}");
    }
    // Signed properly, the review's weight is still refused.
    let resp = raw(
        &coordinator,
        Role::Worker,
        reqwest::Method::POST,
        "/v1/workers/register",
        evil,
    )
    .await;
    assert_eq!(resp.status(), 400);
    let after = client.members().await.unwrap();
    let view = |m: &MembersResponse| {
        (
            m.epoch,
            m.members
                .iter()
                .map(|w| (w.id.clone(), w.addr.clone(), w.weight, w.state))
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(view(&after), view(&before), "nothing changed");
    assert_eq!(after.members[0].state, MemberState::Live);
    // Health and metrics stay open.
    assert_eq!(
        reqwest::get(format!("{url}/healthz"))
            .await
            .unwrap()
            .status(),
        200
    );
    coordinator.shutdown().await;
}

/// A worker id is bound to its first registrant's instance: another instance cannot
/// take it over (new address), heartbeat for it or drain it; an admin can drain.
#[tokio::test]
async fn a_worker_id_is_bound_to_its_first_instance() {
    let (coordinator, client) = start().await;
    let mut first = reg("w1", 7101, 1);
    first.instance = "aaaaaaaaaaaaaaaa".into();
    client.register(&first).await.unwrap();
    let mut hijack = reg("w1", 7999, 1);
    hijack.instance = "bbbbbbbbbbbbbbbb".into();
    assert!(matches!(
        client.register(&hijack).await,
        Err(CoordinatorError::Api { status: 409, .. })
    ));
    let beat = HeartbeatRequest {
        instance: hijack.instance.clone(),
        ..HeartbeatRequest::default()
    };
    assert!(matches!(
        client.heartbeat("w1", &beat).await,
        Err(CoordinatorError::Api { status: 409, .. })
    ));
    assert!(matches!(
        client.drain("w1", &hijack.instance).await,
        Err(CoordinatorError::Api { status: 409, .. })
    ));
    let m = client.member("w1").await.unwrap();
    assert_eq!(
        (m.addr.as_str(), m.state),
        ("127.0.0.1:7101", MemberState::Live)
    );
    // The same instance re-registers (a restart over its cache) freely.
    client.register(&first).await.unwrap();
    let admin = CoordinatorClient::new(coordinator.url())
        .unwrap()
        .with_auth(coordinator.cluster_secret().clone(), Role::Admin);
    admin.drain("w1", "").await.unwrap();
    assert_eq!(
        client.member("w1").await.unwrap().state,
        MemberState::Draining
    );
    coordinator.shutdown().await;
}

#[tokio::test]
async fn the_membership_is_capped() {
    let config = CoordinatorConfig {
        max_members: 2,
        expiry: Duration::from_secs(600),
        ..CoordinatorConfig::default()
    };
    let coordinator = talon_coordinator::start(config).await.unwrap();
    let client = CoordinatorClient::new(coordinator.url())
        .unwrap()
        .with_auth(coordinator.cluster_secret().clone(), Role::Worker);
    client.register(&reg("w1", 7101, 1)).await.unwrap();
    client.register(&reg("w2", 7102, 1)).await.unwrap();
    assert!(matches!(
        client.register(&reg("w3", 7103, 1)).await,
        Err(CoordinatorError::Api { status: 409, .. })
    ));
    client.register(&reg("w2", 7102, 2)).await.unwrap();
    assert_eq!(client.members().await.unwrap().members.len(), 2);
    coordinator.shutdown().await;
}

#[tokio::test]
async fn a_worker_with_a_bad_local_socket_is_refused_and_adds_nobody() {
    let (coordinator, client) = start().await;
    let bodies = [
        // A relative path, an over-long path, a host that is no label, a path without a host.
        r#"{"id": "w1", "addr": "127.0.0.1:7101", "weight": 1, "placement_version": 2, "local": {"host": "b.mnt1", "socket": "local.sock"}}"#,
        concat!(
            r#"{"id": "w1", "addr": "127.0.0.1:7101", "weight": 1, "placement_version": 2, "local": {"host": "b.mnt1", "socket": "/"#,
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            r#""}}"#
        ),
        r#"{"id": "w1", "addr": "127.0.0.1:7101", "weight": 1, "placement_version": 2, "local": {"host": "has space", "socket": "/run/w.sock"}}"#,
        r#"{"id": "w1", "addr": "127.0.0.1:7101", "weight": 1, "placement_version": 2, "local": {"socket": "/run/w.sock"}}"#,
    ];
    for body in bodies {
        let err = refused_registration(&coordinator, body, 400).await;
        assert!(err.error.contains("local."), "{}", err.error);
    }
    let members = client.members().await.unwrap();
    assert!(members.members.is_empty(), "nobody was added");
    assert_eq!(members.epoch, 0);
    // A valid endpoint is kept and listed as registered.
    let mut good = reg("w1", 7101, 1);
    good.local.host = "b00t.mnt4026531840".into();
    good.local.socket = "/run/talon/w1.sock".into();
    client.register(&good).await.unwrap();
    let listed = client.members().await.unwrap();
    assert_eq!(listed.members[0].local, good.local);
    coordinator.shutdown().await;
}

/// A reader's circuit report shows on the member it names, through the typed client
/// and over raw HTTP; a worker may not send one, and a bad one is a 400 that changes
/// nothing.
#[tokio::test]
async fn readers_report_their_circuits_into_the_member_view() {
    use talon_coordinator_client::api::{CircuitsReport, MemberCircuits, WorkerCircuit};
    let (coordinator, client) = start().await;
    client.register(&reg("w1", 7201, 1)).await.unwrap();
    let reader = CoordinatorClient::new(coordinator.url())
        .unwrap()
        .with_auth(coordinator.cluster_secret().clone(), Role::Reader);
    let report = CircuitsReport {
        workers: vec![WorkerCircuit {
            addr: "127.0.0.1:7201".into(),
            state: "open".into(),
            consecutive_failures: 3,
            opened: 1,
            deadlines_missed: 1,
        }],
    };
    reader.report_circuits("gw-a", &report).await.unwrap();
    let expected = MemberCircuits {
        readers: 1,
        open: 1,
        opened: 1,
        deadlines_missed: 1,
    };
    assert_eq!(reader.member("w1").await.unwrap().circuits, expected);
    // A worker does not speak for readers; a bad state is refused: nothing changes.
    let path = "/v1/readers/gw-b/circuits";
    let body = r#"{"workers":[{"addr":"127.0.0.1:7201","state":"open","consecutive_failures":1,"opened":9,"deadlines_missed":9}]}"#;
    let resp = raw(
        &coordinator,
        Role::Worker,
        reqwest::Method::POST,
        path,
        body,
    )
    .await;
    assert_eq!(resp.status(), 403);
    let bad = r#"{"workers":[{"addr":"127.0.0.1:7201","state":"ajar","consecutive_failures":1,"opened":9,"deadlines_missed":9}]}"#;
    let resp = raw(&coordinator, Role::Reader, reqwest::Method::POST, path, bad).await;
    assert_eq!(resp.status(), 400);
    let error: ErrorBody = json(resp).await;
    assert!(error.error.contains("ajar"), "{}", error.error);
    assert_eq!(reader.member("w1").await.unwrap().circuits, expected);
    // The same report over raw HTTP from a second reader adds to the sums.
    let resp = raw(
        &coordinator,
        Role::Reader,
        reqwest::Method::POST,
        path,
        body,
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        reader.member("w1").await.unwrap().circuits,
        MemberCircuits {
            readers: 2,
            open: 2,
            opened: 10,
            deadlines_missed: 10,
        }
    );
    coordinator.shutdown().await;
}
