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

/// The identities file is read again on SIGHUP: a widened grant applies to the next
/// request on the connection already open; a file that does not parse is refused, said
/// in `/metrics`, and the grants in use stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_identities_file_and_a_broken_one_keeps_the_old() {
    use talon_protocols::origin::{ForwardRequest, OriginBody, OriginClient, OriginConfig};
    use talon_protocols::s3::sigv4::S3Credentials;

    let stub = talon_origin_stub::start(talon_origin_stub::StubConfig::default())
        .await
        .unwrap();
    std::fs::create_dir_all(stub.data_dir().join("data/a")).unwrap();
    std::fs::write(stub.data_dir().join("data/a/one.txt"), "one").unwrap();
    std::fs::write(stub.data_dir().join("data/two.txt"), "two").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let identities = dir.path().join("identities.json");
    let grant = |prefix: &str| {
        format!(
            r#"{{"s3": [{{"access_key": "k", "secret_key": "s", "grants": [{{"bucket": "data", "prefix": "{prefix}", "actions": ["read"]}}]}}]}}"#
        )
    };
    std::fs::write(&identities, grant("a/")).unwrap();
    let ready = dir.path().join("gateway.json");
    let mut gateway = Gateway(
        Command::new(env!("CARGO_BIN_EXE_talon-gateway"))
            .args(["--s3-listen", "127.0.0.1:0", "--azure-listen", "off"])
            .args(["--admin-listen", "127.0.0.1:0", "--s3-route", "origin"])
            .arg("--origin-s3-endpoint")
            .arg(stub.s3_url().unwrap())
            .arg("--identities")
            .arg(&identities)
            .arg("--ready-file")
            .arg(&ready)
            .env("TALON_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("start talon-gateway"),
    );
    let urls: serde_json::Value = wait_for("the ready file", Duration::from_secs(30), || {
        let ready = ready.clone();
        async move { serde_json::from_str(&std::fs::read_to_string(&ready).ok()?).ok() }
    })
    .await;
    let admin = urls["admin"].as_str().unwrap().to_owned();
    let client = OriginClient::new(OriginConfig::S3 {
        endpoint: urls["s3"].as_str().unwrap().to_owned(),
        region: "us-east-1".into(),
        credentials: Some(S3Credentials {
            access_key: "k".into(),
            secret_key: "s".into(),
            session_token: None,
        }),
        virtual_hosted: false,
    })
    .unwrap();
    let get = |key: &'static str| {
        let client = &client;
        async move {
            let r = client
                .forward(ForwardRequest {
                    method: reqwest::Method::GET,
                    bucket: Some("data"),
                    key: Some(key),
                    query: "",
                    headers: Vec::new(),
                    body: OriginBody::Empty,
                })
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let reloads = |outcome: &'static str| {
        let admin = admin.clone();
        async move {
            let text = talon_testkit::http_get(&format!("{admin}/metrics")).await;
            talon_testkit::metric(
                &text,
                &format!("talon_gateway_identities_reloads_total{{outcome=\"{outcome}\"}}"),
            )
            .unwrap_or(0.0)
        }
    };
    let hangup = |child: &Child| {
        let sent = Command::new("kill")
            .args(["-HUP", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    };

    assert_eq!(get("a/one.txt").await, (200, "one".to_owned()));
    assert_eq!(get("two.txt").await.0, 403);

    std::fs::write(&identities, grant("")).unwrap();
    hangup(&gateway.0);
    wait_for("the reload", Duration::from_secs(30), || async {
        (reloads("applied").await == 1.0).then_some(())
    })
    .await;
    assert_eq!(get("two.txt").await, (200, "two".to_owned()));

    std::fs::write(&identities, r#"{"s3": [{"access_key": "k", "grants": "#).unwrap();
    hangup(&gateway.0);
    wait_for("the refused reload", Duration::from_secs(30), || async {
        (reloads("refused").await == 1.0).then_some(())
    })
    .await;
    assert_eq!(get("two.txt").await, (200, "two".to_owned()));
    assert_eq!(reloads("applied").await, 1.0);
    assert!(
        gateway.0.try_wait().unwrap().is_none(),
        "the gateway exited"
    );
}
