//! Which data plane a `talon-worker` process serves on, and that it says so: io_uring
//! by default with one `SO_REUSEPORT` listener per ring, Tokio when forced by the
//! environment or when the io_uring probe fails (a visible warning), and the plane in
//! the ready file, in `/metrics` and in the coordinator's member view.

use std::time::Duration;

use talon_core::cluster_auth::Role;
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{Cluster, ClusterConfig, WorkerProcess, metric, wait_for};

/// Sockets listening on TCP `port` on this host (IPv4 and IPv6), from /proc.
fn listeners_on(port: u16) -> usize {
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (fields.get(1), fields.get(3)) else {
                continue;
            };
            let local_port = local
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            // 0A: TCP_LISTEN.
            if *state == "0A" && local_port == Some(port) {
                n += 1;
            }
        }
    }
    n
}

/// The CPUs each ring thread (`talon-ring-N`) of process `pid` may run on, as
/// `/proc` lists them ("3", "0-1"), and the process's own list.
fn ring_cpus(pid: u32) -> (Vec<String>, String) {
    let allowed = |status: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    let process = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mut rings = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the worker's threads");
    for task in tasks.filter_map(Result::ok) {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.starts_with("talon-ring-") {
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            rings.push(allowed(&status));
        }
    }
    (rings, allowed(&process))
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {addr}"))
}

async fn cluster() -> Cluster {
    Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![GeneratedObject::new("gen", "planes.bin", 1 << 20, 9)],
        ..ClusterConfig::default()
    })
    .await
}

/// The member view's `data_plane` for worker `id`, once it is listed.
async fn member_plane(cluster: &Cluster, id: &str) -> String {
    let client = cluster.coordinator_client(Role::Reader);
    wait_for("the member listed", Duration::from_secs(10), || {
        let client = client.clone();
        async move {
            let members = client.members().await.ok()?;
            members
                .members
                .into_iter()
                .find(|m| m.id == id)
                .map(|m| m.data_plane)
        }
    })
    .await
}

#[tokio::test]
async fn the_default_plane_is_io_uring_with_one_listener_per_ring() {
    talon_worker::data_plane::probe_io_uring()
        .expect("this machine kind has io_uring: the default plane must be io_uring here");
    let cluster = cluster().await;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let process = WorkerProcess::start_logged(
        &cluster,
        "wring",
        &dir.path().join("cache"),
        &["--data-plane-rings", "3"],
        &[(talon_worker::data_plane::FORCE_TOKIO_ENV, "0")],
    )
    .await;
    assert_eq!(process.data_plane, "io_uring");
    assert_eq!(
        listeners_on(port_of(&process.addr)),
        3,
        "one SO_REUSEPORT listener per ring on the data-plane port"
    );
    let metrics = talon_testkit::http_get(&format!("{}/metrics", process.admin_url)).await;
    assert_eq!(
        metric(&metrics, "talon_worker_data_plane{plane=\"io_uring\"}"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(metric(&metrics, "talon_worker_data_plane_rings"), Some(3.0));
    assert_eq!(member_plane(&cluster, "wring").await, "io_uring");
    let log = process.log();
    assert!(log.contains("data plane on io_uring"), "{log}");
    // Each ring is pinned to one core (when the process may use more than one).
    let (rings, all) = ring_cpus(process.pid());
    assert_eq!(rings.len(), 3, "{rings:?}");
    if all.contains(['-', ',']) {
        assert!(
            rings.iter().all(|cpus| !cpus.contains(['-', ','])),
            "rings {rings:?}, process {all}"
        );
    }
    // Cooperative task running is the measured default, and this kernel has it.
    assert!(log.contains("setup=coop"), "{log}");
    assert!(!log.contains("refuses this ring set-up"), "{log}");
    assert!(
        !log.contains("WARN"),
        "no warning on the default path:\n{log}"
    );
}

#[tokio::test]
async fn the_environment_override_serves_on_tokio() {
    let cluster = cluster().await;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let process = WorkerProcess::start_logged(
        &cluster,
        "wforced",
        &dir.path().join("cache"),
        &[],
        &[(talon_worker::data_plane::FORCE_TOKIO_ENV, "1")],
    )
    .await;
    assert_eq!(process.data_plane, "tokio");
    assert_eq!(listeners_on(port_of(&process.addr)), 1);
    assert_eq!(
        process
            .metric("talon_worker_data_plane{plane=\"tokio\"}")
            .await,
        1.0
    );
    assert_eq!(process.metric("talon_worker_data_plane_rings").await, 0.0);
    assert_eq!(member_plane(&cluster, "wforced").await, "tokio");
    let log = process.log();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("forced")),
        "no warning that the plane was forced:\n{log}"
    );
}

#[tokio::test]
async fn a_failed_probe_serves_on_tokio_with_a_warning_saying_why() {
    let cluster = cluster().await;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let process = WorkerProcess::start_logged(
        &cluster,
        "wnoring",
        &dir.path().join("cache"),
        &[],
        &[
            (talon_worker::data_plane::FORCE_TOKIO_ENV, "0"),
            (
                "TALON_WORKER_TEST_FAIL_IO_URING_PROBE",
                "setting up a ring failed: Operation not permitted (os error 1)",
            ),
        ],
    )
    .await;
    assert_eq!(process.data_plane, "tokio");
    assert_eq!(listeners_on(port_of(&process.addr)), 1);
    assert_eq!(member_plane(&cluster, "wnoring").await, "tokio");
    let log = process.log();
    let warning = log
        .lines()
        .find(|l| l.contains("WARN") && l.contains("io_uring is unavailable"))
        .unwrap_or_else(|| panic!("no fallback warning in:\n{log}"));
    assert!(warning.contains("Operation not permitted"), "{warning}");
}

#[tokio::test]
async fn the_copy_layer2_serves_the_same_bytes() {
    serves_the_same_bytes_with("copy", &["--layer2", "copy"], "layer2=copy").await;
}

#[tokio::test]
async fn the_io_uring_read_and_send_layer2_serves_the_same_bytes() {
    serves_the_same_bytes_with("uring", &["--layer2", "uring"], "layer2=uring").await;
}

// The rings set up the other ways (kept to measure against), and rings
// the scheduler may move between cores, serve what the default does.
#[tokio::test]
async fn plain_rings_serve_the_same_bytes() {
    serves_the_same_bytes_with("plain", &["--ring-setup", "plain"], "setup=plain").await;
}

#[tokio::test]
async fn deferred_rings_serve_the_same_bytes() {
    serves_the_same_bytes_with("defer", &["--ring-setup", "defer"], "setup=defer").await;
}

#[tokio::test]
async fn unpinned_rings_serve_the_same_bytes() {
    let flags = ["--data-plane-pin-rings", "false"];
    let process = serves_the_same_bytes_with("unpinned", &flags, "data plane on io_uring").await;
    let (rings, all) = ring_cpus(process.pid());
    assert!(!rings.is_empty());
    assert!(
        rings.iter().all(|cpus| *cpus == all),
        "rings {rings:?}, process {all}"
    );
}

/// A worker started with `flags` on the io_uring plane (its log saying `logged`)
/// answers a fill and hits with the object's bytes. Returns the process, still running.
async fn serves_the_same_bytes_with(name: &str, flags: &[&str], logged: &str) -> WorkerProcess {
    use talon_core::wire::ReadRangeRequest;
    use talon_core::{Message, ObjectId, ObjectVersion};
    use talon_testkit::raw::{RawAnswer, RawConnection};
    let cluster = cluster().await;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let process = WorkerProcess::start_logged(
        &cluster,
        &format!("w{name}"),
        &dir.path().join("cache"),
        flags,
        &[(talon_worker::data_plane::FORCE_TOKIO_ENV, "0")],
    )
    .await;
    let log = process.log();
    assert!(log.contains(logged), "{log}");
    assert_eq!(process.data_plane, "io_uring");
    let object = GeneratedObject::new("gen", "planes.bin", 1 << 20, 9);
    let block_size = cluster.config().geometry.block_size();
    let addr: std::net::SocketAddr = process.addr.parse().expect("an address");
    let mut conn = RawConnection::authenticated(addr, cluster.cluster_secret(), Role::Reader).await;
    // A fill, then hits of ranges across pages, the same ranges twice.
    for (i, (offset, len)) in [(0u64, 1000u32), (5000, 70_000), (0, 1000), (5000, 70_000)]
        .into_iter()
        .enumerate()
    {
        let req = Message::ReadRange(ReadRangeRequest {
            block: cluster.block_id(
                &ObjectId::s3("gen", "planes.bin").expect("an id"),
                &ObjectVersion::from_etag(&object.etag()).expect("a version"),
                block_size,
            ),
            object_size: object.size,
            offset,
            len,
        });
        let id = i as u32 + 1;
        conn.send(&req.encode(id).expect("a frame"))
            .await
            .expect("sent");
        match conn.next(Duration::from_secs(10)).await {
            RawAnswer::Data { request_id, bytes } => {
                assert_eq!(request_id, id);
                let start = block_size + offset;
                assert!(
                    bytes == talon_testkit::expected(&object, start..start + u64::from(len)),
                    "read {i}: the bytes differ"
                );
            }
            other => panic!("read {i}: {other:?}"),
        }
    }
    process
}
