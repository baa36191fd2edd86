//! The coordinator's status page (`--status-listen`), rendered by a real browser:
//! headless Chromium (Debian's `chromium`) loads it, its script fetches `status.json`,
//! and the DOM it leaves shows every worker with its state and the cluster's totals.
//! The page's listener serves the page and its data only, never the admin API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use talon_coordinator::{CoordinatorConfig, RunningCoordinator};
use talon_coordinator_client::api::RegisterRequest;
use talon_coordinator_client::client::CoordinatorClient;
use talon_coordinator_client::placement::PLACEMENT_VERSION;
use talon_core::cluster_auth::Role;

fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("TALON_CHROMIUM") {
        return PathBuf::from(p);
    }
    for p in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if std::path::Path::new(p).is_file() {
            return PathBuf::from(p);
        }
    }
    panic!("this test needs Chromium: apt-get install chromium (or set TALON_CHROMIUM)");
}

/// The DOM headless Chromium has once the page's script has run.
fn rendered_dom(url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=5000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn registration(id: &str, port: u16, zone: &str) -> RegisterRequest {
    RegisterRequest {
        id: id.into(),
        addr: format!("127.0.0.1:{port}"),
        weight: 1,
        zone: zone.into(),
        capacity_bytes: 3 << 30,
        instance: format!("{id}-instance"),
        data_plane: "io_uring".into(),
        placement_version: PLACEMENT_VERSION,
        page_size: 0,
        local: Default::default(),
    }
}

async fn coordinator() -> RunningCoordinator {
    talon_coordinator::start(CoordinatorConfig {
        status_listen: Some("127.0.0.1:0".parse().unwrap()),
        // The workers here heartbeat once (at registration) and a headless browser can
        // take seconds to render on a loaded host: with the default 5 s a worker
        // expired between two renders (seen once in CI). Expiry is not under test.
        expiry: std::time::Duration::from_secs(600),
        geometry: Some(talon_coordinator_client::api::ClusterGeometry {
            block_size: 64 << 20,
            page_size: 1 << 20,
        }),
        ..CoordinatorConfig::default()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_renders_every_worker_and_the_totals() {
    let c = coordinator().await;
    let worker = CoordinatorClient::new(c.url())
        .unwrap()
        .with_auth(c.cluster_secret().clone(), Role::Worker);
    worker
        .register(&registration("w-east", 7101, "east"))
        .await
        .unwrap();
    // One worker is "1 worker" (the page said "1 workers" before 2026-12-05).
    let one = rendered_dom(&format!("http://{}/", c.status_addr.unwrap()));
    assert!(one.contains("1 worker (1 live, 0 draining)"), "{one}");
    worker
        .register(&registration("w-west", 7102, "west"))
        .await
        .unwrap();
    worker.drain("w-west", "w-west-instance").await.unwrap();
    let admin = CoordinatorClient::new(c.url())
        .unwrap()
        .with_auth(c.cluster_secret().clone(), Role::Admin);
    admin
        .set_pins(&talon_coordinator_client::api::PinsRequest {
            prefixes: vec!["s3/models/llama/".into()],
            expect_version: None,
        })
        .await
        .unwrap();
    let page = format!("http://{}/", c.status_addr.unwrap());

    // Without the script the page holds no worker: what the browser shows below is
    // what the page's script rendered from status.json.
    let raw = reqwest::get(&page).await.unwrap();
    assert_eq!(raw.status(), 200);
    let csp = raw.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(!raw.text().await.unwrap().contains("w-east"));

    let dom = rendered_dom(&page);
    assert!(dom.contains("2 workers (1 live, 1 draining)"), "{dom}");
    // The rules every part applies: the geometry and the pins (an operator could not
    // see the pins anywhere but the API before).
    assert!(
        dom.contains("Blocks of 64.0 MiB, pages of 1.0 MiB"),
        "{dom}"
    );
    assert!(dom.contains("Pinned: s3/models/llama/"), "{dom}");
    assert!(
        dom.contains("6.0 GiB cached") || dom.contains("of 6.0 GiB"),
        "{dom}"
    );
    for (id, zone, state) in [("w-east", "east", "live"), ("w-west", "west", "draining")] {
        let row = dom
            .split("<tr")
            .find(|r| r.contains(&format!("data-worker=\"{id}\"")))
            .unwrap_or_else(|| panic!("no row for {id}: {dom}"));
        for text in [id, zone, state, "io_uring", "3.0 GiB"] {
            assert!(row.contains(text), "{id}'s row lacks {text}: {row}");
        }
    }

    // The page's listener is not the API: no member list, no registration there.
    let status = c.status_addr.unwrap();
    let api = reqwest::get(format!("http://{status}/v1/members"))
        .await
        .unwrap();
    assert_eq!(api.status(), 404);
    let post = reqwest::Client::new()
        .post(format!("http://{status}/v1/workers/register"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert!(post.status().is_client_error(), "{}", post.status());
    assert_eq!(c.snapshot().members.len(), 2, "nothing changed");
    c.shutdown().await;
}

#[tokio::test]
async fn without_the_flag_there_is_no_page() {
    let c = talon_coordinator::start(CoordinatorConfig::default())
        .await
        .unwrap();
    assert_eq!(c.status_addr, None);
    c.shutdown().await;
}
