//! The `talon-gateway` binary as a real process: it binds port 0, reports its URLs in
//! the ready file, serves a ranged read through a sandbox cluster, and exits 0 on
//! SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sha2::{Digest, Sha256};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, expected, wait_for};

/// Kills the child if the test fails before it is stopped.
struct Gateway(Child);

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_writes_its_ready_file_serves_and_stops_on_sigterm() {
    let object = GeneratedObject::new("data", "weights.bin", 700 << 10, 9);
    let cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("gateway.json");
    let mut gateway = Gateway(
        Command::new(env!("CARGO_BIN_EXE_talon-gateway"))
            .args(["--s3-listen", "127.0.0.1:0"])
            .args(["--azure-listen", "127.0.0.1:0"])
            .args(["--admin-listen", "127.0.0.1:0"])
            .arg("--origin-s3-endpoint")
            .arg(cluster.origin.s3_url().unwrap())
            .args(["--origin-s3-access-key", talon_testkit::ACCESS_KEY])
            .args(["--origin-s3-secret-key", talon_testkit::SECRET_KEY])
            .arg("--coordinator")
            .arg(cluster.coordinator.url())
            .arg("--block-size")
            .arg(cluster.config().geometry.block_size().to_string())
            .arg("--anonymous")
            .arg("--ready-file")
            .arg(&ready)
            .env("TALON_LOG", "warn")
            .env("TALON_CLUSTER_SECRET", cluster.cluster_secret_text())
            .stdin(Stdio::null())
            .spawn()
            .expect("start talon-gateway"),
    );

    let urls: serde_json::Value = wait_for("the ready file", Duration::from_secs(30), || {
        let ready = ready.clone();
        async move {
            let text = std::fs::read_to_string(&ready).ok()?;
            serde_json::from_str(&text).ok()
        }
    })
    .await;
    let s3 = urls["s3"].as_str().expect("s3 url");
    assert!(
        urls["azure"]
            .as_str()
            .is_some_and(|u| u.starts_with("http://127.0.0.1:"))
    );
    let admin = urls["admin"].as_str().expect("admin url");
    assert!(!s3.ends_with(":0"), "{s3} is the bound port, not 0");

    let health = reqwest::get(format!("{admin}/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);

    let range = 100_000..400_000u64;
    let reply = reqwest::Client::new()
        .get(format!("{s3}/data/weights.bin"))
        .header("range", format!("bytes={}-{}", range.start, range.end - 1))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 206);
    let body = reply.bytes().await.unwrap();
    assert_eq!(
        hex::encode(Sha256::digest(&body)),
        hex::encode(Sha256::digest(expected(&object, range)))
    );

    let pid = gateway.0.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(sent.success());
    let status = wait_for("the gateway to exit", Duration::from_secs(30), || {
        let status = gateway.0.try_wait().ok().flatten();
        async move { status }
    })
    .await;
    assert!(status.success(), "exit status after SIGTERM: {status}");
}

#[test]
fn an_origin_url_it_cannot_read_stops_the_binary_with_the_spellings() {
    for bad in ["http://127.0.0.1:9000", "s3://host/bucket"] {
        let out = Command::new(env!("CARGO_BIN_EXE_talon-gateway"))
            .args(["--s3-listen", "127.0.0.1:0", "--azure-listen", "off"])
            .args(["--admin-listen", "off", "--anonymous", "read-only"])
            .args(["--origin", bad])
            .env("TALON_LOG", "error")
            .env("TALON_CLUSTER_SECRET", "0123456789abcdef0123456789abcdef")
            .stdin(Stdio::null())
            .output()
            .expect("run talon-gateway");
        assert!(!out.status.success(), "{bad} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("s3+http://HOST:PORT") && stderr.contains(bad),
            "{bad}: {stderr}"
        );
    }
}
