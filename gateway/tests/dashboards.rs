//! The Grafana dashboard (`deploy/grafana/talon.json`) and the Prometheus alert rules
//! (`deploy/prometheus/talon-alerts.yml`) ask only for series the binaries export: a
//! coordinator, a `talon-worker` process and a gateway are started and scraped over
//! HTTP, and every `talon_*` name in a query must be a series of a metric one of them
//! declares (a counter's `_total`, a histogram's `_bucket`, `_sum` or `_count`, a
//! gauge's own name). A metric renamed in code fails this test until the dashboards
//! follow. Labelled metrics appear once they have a value, so the test first sends the
//! gateway an upload and a read through the cache. (The queries' syntax is checked by
//! promtool: scripts/check_monitoring.sh.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use talon_gateway::GatewayConfig;
use talon_gateway::config::{Backend, Identities, IdentitiesFile, Limits, Route, S3Front};
use talon_origin_stub::generated::GeneratedObject;
use talon_protocols::s3::request::S3Addressing;
use talon_testkit::{Cluster, ClusterConfig, WorkerProcess, http_get};

fn repo_file(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every `talon_…` name in `text`.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(found) = text[at..].find("talon_") {
        let start = at + found;
        let before_ok =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = text[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(text.len(), |n| start + n);
        if before_ok {
            names.insert(text[start..end].to_owned());
        }
        at = end;
    }
    names
}

/// The series names a Prometheus text exposition's `# TYPE` lines declare.
fn series_declared(exposition: &str) -> BTreeSet<String> {
    let mut series = BTreeSet::new();
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
            continue;
        };
        match kind {
            "counter" => {
                series.insert(format!("{}_total", name.trim_end_matches("_total")));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    series.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                series.insert(name.to_owned());
            }
        }
    }
    series
}

/// The queries of every panel of the dashboard.
fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<String> {
    let mut queries = Vec::new();
    let mut stack = vec![dashboard];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(expr)) = map.get("expr") {
                    queries.push(expr.clone());
                }
                if let Some(serde_json::Value::String(q)) = map.get("definition") {
                    queries.push(q.clone());
                }
                stack.extend(map.values());
            }
            serde_json::Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    queries
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_alerts_ask_for_is_exported() {
    let object = GeneratedObject::new("data", "dash.bin", 256 << 10, 5);
    let cluster = Cluster::start(ClusterConfig {
        workers: 0,
        generated: vec![object.clone()],
        local_sockets: false,
        ..ClusterConfig::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let worker = WorkerProcess::start(&cluster, "w0", &dir.path().join("cache")).await;
    cluster.wait_for_live(1).await;
    let identities = Identities::from_parts(IdentitiesFile {
        s3: Vec::new(),
        azure: None,
        anonymous: talon_protocols::access::AnonymousAccess::ReadWrite,
        public: Vec::new(),
    })
    .unwrap();
    let gateway = talon_gateway::start(GatewayConfig {
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
        identities,
        freshness: talon_gateway::Freshness::within(Duration::from_millis(200)),
        limits: Limits::default(),
        tls: None,
        acl_file: None,
        cache_status: true,
        access_log: None,
    })
    .await
    .unwrap();

    let s3 = gateway.s3_url().unwrap();
    let http = reqwest::Client::new();
    let put = http
        .put(format!("{s3}/data/dash-upload.bin"))
        .body(vec![7u8; 4096])
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.status());
    let got = http
        .get(format!("{s3}/{}/{}", object.bucket, object.key))
        .send()
        .await
        .unwrap();
    assert!(got.status().is_success(), "{}", got.status());
    assert_eq!(got.bytes().await.unwrap().len() as u64, object.size);

    let scraped = [
        (
            "coordinator",
            http_get(&format!("{}/metrics", cluster.coordinator.url())).await,
        ),
        (
            "worker",
            http_get(&format!("{}/metrics", worker.admin_url)).await,
        ),
        (
            "gateway",
            http_get(&format!("http://{}/metrics", gateway.admin_addr.unwrap())).await,
        ),
    ];
    let mut exported = BTreeSet::new();
    for (what, text) in &scraped {
        let declared = series_declared(text);
        assert!(
            declared
                .iter()
                .any(|s| s.starts_with(&format!("talon_{what}"))),
            "the {what} declares no talon_{what}_* metric:\n{text}"
        );
        exported.extend(declared);
    }

    let dashboard: serde_json::Value =
        serde_json::from_str(&repo_file("deploy/grafana/talon.json")).unwrap();
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 20, "only {} queries found", queries.len());
    let alerts = repo_file("deploy/prometheus/talon-alerts.yml");
    let mut asked: Vec<(&str, String)> = Vec::new();
    for q in &queries {
        asked.extend(names_in(q).into_iter().map(|n| ("dashboard", n)));
    }
    asked.extend(names_in(&alerts).into_iter().map(|n| ("alert rules", n)));
    assert!(asked.len() > 20, "{asked:?}");
    let missing: Vec<_> = asked
        .iter()
        .filter(|(_, name)| !exported.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "asked for but not exported: {missing:?}\nexported: {exported:?}"
    );
}

#[test]
fn names_are_found_whole_and_series_follow_their_type() {
    assert_eq!(
        names_in("rate(talon_a_total[5m]) / xtalon_b + talon_c{x=\"talon_d\"}"),
        ["talon_a_total", "talon_c", "talon_d"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    let declared =
        series_declared("# TYPE talon_x counter\n# TYPE talon_y histogram\n# TYPE talon_z gauge\n");
    assert!(declared.contains("talon_x_total") && !declared.contains("talon_x"));
    assert!(declared.contains("talon_y_bucket") && !declared.contains("talon_y"));
    assert!(declared.contains("talon_z"));
}
