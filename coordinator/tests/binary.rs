//! The `talon-coordinator` binary: port 0 with a ready file, environment fallbacks,
//! and a clean exit on SIGTERM.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_talon-coordinator"))
}

/// Waits (with a deadline) until the ready file exists, then returns its URL.
fn wait_ready(child: &mut Child, path: &Path) -> String {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            return v["url"].as_str().unwrap().to_owned();
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("coordinator exited early: {status}");
        }
        assert!(Instant::now() < until, "no ready file after 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn terminate_and_wait(child: &mut Child) -> std::process::ExitStatus {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("coordinator did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn serves_on_port_zero_and_exits_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready.json");
    let secret_file = dir.path().join("cluster.secret");
    std::fs::write(&secret_file, "a cluster secret for the binary test\n").unwrap();
    let mut child = binary()
        .args(["--listen", "127.0.0.1:0", "--heartbeat-interval-ms", "200"])
        .arg("--ready-file")
        .arg(&ready)
        .arg("--cluster-secret-file")
        .arg(&secret_file)
        .env("TALON_COORDINATOR_EXPIRY_MS", "900")
        .env("TALON_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = wait_ready(&mut child, &ready);
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert!(!url.ends_with(":0"));

    let secret =
        talon_core::cluster_auth::ClusterSecret::new(&std::fs::read(&secret_file).unwrap())
            .unwrap();
    let unsigned = talon_coordinator_client::client::CoordinatorClient::new(&url).unwrap();
    let client = unsigned
        .clone()
        .with_auth(secret, talon_core::cluster_auth::Role::Worker);
    let reg = talon_coordinator_client::api::RegisterRequest {
        id: "w1".into(),
        addr: "127.0.0.1:7101".into(),
        weight: 1,
        zone: String::new(),
        capacity_bytes: 0,
        instance: String::new(),
        data_plane: String::new(),
        placement_version: talon_coordinator_client::placement::PLACEMENT_VERSION,
        page_size: 0,
        local: Default::default(),
    };
    assert!(
        unsigned.register(&reg).await.is_err(),
        "the secret from the file is required"
    );
    let answer = client.register(&reg).await.unwrap();
    assert_eq!(answer.heartbeat_interval_ms, 200);
    assert_eq!(answer.expiry_ms, 900, "the environment fallback was used");
    let health = reqwest::get(format!("{url}/healthz")).await.unwrap();
    assert_eq!(health.text().await.unwrap(), "ok");

    let status = terminate_and_wait(&mut child);
    assert!(status.success(), "{status}");
}

#[test]
fn rejects_inconsistent_intervals() {
    let out = binary()
        .args([
            "--listen",
            "127.0.0.1:0",
            "--heartbeat-interval-ms",
            "1000",
            "--expiry-ms",
            "500",
        ])
        .env(
            "TALON_CLUSTER_SECRET",
            "a cluster secret for the binary test",
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("expiry"), "{stderr}");
}

#[test]
fn help_names_every_flag_and_its_environment_variable() {
    let out = binary().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen",
        "--heartbeat-interval-ms",
        "--expiry-ms",
        "--ready-file",
    ] {
        assert!(help.contains(flag), "{flag} missing in\n{help}");
    }
    for env in [
        "TALON_COORDINATOR_LISTEN",
        "TALON_COORDINATOR_HEARTBEAT_INTERVAL_MS",
        "TALON_COORDINATOR_EXPIRY_MS",
        "TALON_COORDINATOR_READY_FILE",
    ] {
        assert!(help.contains(env), "{env} missing in\n{help}");
    }
    assert!(help.contains("127.0.0.1:7000"));
}
