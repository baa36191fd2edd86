//! Issue 13's disk suite: a cache disk that fills up, a cache folder removed under a
//! running `talon-worker` process, and cached pages that cannot be read back (the
//! worker's `TALON_WORKER_FAIL_PAGE_READS` hook: `EIO` as a failing disk gives it).
//! The worker degrades to serving from the origin (never an error frame, never a
//! wrong byte), says so in its metrics, and caches again without a restart once the
//! disk allows it.
//!
//! The full disk is a real one: a 1 MiB tmpfs mounted by the test as the worker's
//! cache folder (the test needs root, as CI runs it), while the worker's byte budget
//! is 64 MiB, so its fills meet `ENOSPC` rather than its own budget.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use talon_cache_client::CacheClient;
use talon_core::{ObjectId, ObjectVersion};
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::{
    WorkerProcess, cluster_of_one_worker_process, expected, http_get, read_through, wait_for,
};
use talon_worker::read_faults::FAIL_PAGE_READS_ENV;

const BLOCK: u64 = 256 << 10;

fn objects(prefix: &str, n: usize) -> Vec<GeneratedObject> {
    (0..n)
        .map(|i| GeneratedObject::new("data", format!("{prefix}{i}.bin"), BLOCK, 400 + i as u64))
        .collect()
}

/// Reads the whole object through the worker (the client has no origin fallback: an
/// error frame would fail the read) and checks every byte.
async fn read_checked(client: &CacheClient, object: &GeneratedObject) {
    let id = ObjectId::s3(object.bucket.clone(), object.key.clone()).unwrap();
    let version = ObjectVersion::from_etag(&object.etag()).unwrap();
    let bytes = read_through(client, &id, &version, object.size, 0..object.size)
        .await
        .unwrap(&format!("a read of {}", object.key));
    assert!(
        bytes == expected(object, 0..object.size),
        "{}: wrong bytes",
        object.key
    );
}

/// The worker's counters: `(hits, pass-throughs for disk errors, disk errors, error
/// frames)`.
async fn counters(process: &WorkerProcess) -> (f64, f64, f64, f64) {
    let text = http_get(&format!("{}/metrics", process.admin_url)).await;
    let sum = |prefix: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (
        sum("talon_worker_hits_total "),
        sum("talon_worker_pass_through_total{reason=\"disk_error\"}"),
        sum("talon_worker_disk_errors_total{"),
        sum("talon_worker_error_frames_total "),
    )
}

/// A tmpfs of `size` mounted at a fresh folder, unmounted when dropped.
struct Tmpfs {
    dir: PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("cache");
        std::fs::create_dir_all(&dir).unwrap();
        run(
            "mount",
            &["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"],
            &dir,
        );
        Tmpfs {
            dir,
            _parent: parent,
        }
    }

    fn resize(&self, size: &str) {
        run("mount", &["-o", &format!("remount,size={size}")], &self.dir);
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

fn run(program: &str, args: &[&str], path: &Path) {
    let status = Command::new(program)
        .args(args)
        .arg(path)
        .status()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        status.success(),
        "{program} {args:?} {} failed: the disk suite mounts a tmpfs and needs root",
        path.display()
    );
}

/// A cache disk that is full: every read is still served by the worker, from the
/// origin, with every byte right, and the metrics say why; once the disk has room
/// again, reads are cached and the next ones are hits, with no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cache_disk_serves_from_the_origin_and_caches_again_once_it_has_room() {
    let all = objects("full", 8);
    let disk = Tmpfs::mount("1m");
    let (_cluster, process, client) =
        cluster_of_one_worker_process(all.clone(), &disk.dir, &[]).await;
    // 2 MiB of objects on a 1 MiB disk, twice.
    for object in all.iter().chain(&all) {
        read_checked(&client, object).await;
    }
    // A fill answered before it was written meets the full disk behind its answer.
    process.fills_settled().await;
    let (_, passed, disk_errors, error_frames) = counters(&process).await;
    assert!(passed >= 1.0, "no read was served past the full disk");
    assert!(disk_errors >= 1.0, "the disk errors are not counted");
    assert_eq!(error_frames, 0.0, "a read was refused");

    disk.resize("64m");
    for object in &all {
        read_checked(&client, object).await;
    }
    process.fills_settled().await;
    let (hits, passed, _, _) = counters(&process).await;
    for object in &all {
        read_checked(&client, object).await;
    }
    let (hits_after, passed_after, _, error_frames) = counters(&process).await;
    assert_eq!(
        hits_after - hits,
        all.len() as f64,
        "with room again, every object was cached and then hit"
    );
    assert_eq!(
        passed_after, passed,
        "nothing passed through once there was room"
    );
    assert_eq!(error_frames, 0.0);
}

/// The cache folder removed under the running worker: a new object is still served
/// (the worker makes the folder again) and cached (its next read is a hit), and an
/// object cached before is still served right (from the file it holds open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_folder_removed_under_the_worker_is_made_again_without_a_restart() {
    let all = objects("gone", 2);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let (_cluster, process, client) = cluster_of_one_worker_process(all.clone(), &cache, &[]).await;
    let (before, after) = (&all[0], &all[1]);
    read_checked(&client, before).await;

    std::fs::remove_dir_all(&cache).unwrap();
    read_checked(&client, after).await;
    process.fills_settled().await;
    assert!(
        cache.join("blocks").is_dir(),
        "the folder was not made again"
    );
    let (hits, _, _, _) = counters(&process).await;
    read_checked(&client, after).await;
    read_checked(&client, before).await;
    let (hits_after, _, _, error_frames) = counters(&process).await;
    assert_eq!(hits_after - hits, 2.0, "both reads were hits");
    assert_eq!(error_frames, 0.0, "a read was refused");
}

/// Pages that cannot be read back (the first three page reads of a restarted worker
/// fail with `EIO`): every read is still served right by that worker, the pages are
/// dropped and refetched from the origin (counted as disk errors of op `read`), and
/// once the disk reads again the refetched pages are hits, with no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_pages_that_cannot_be_read_back_are_refetched_and_served_right() {
    let all = objects("eio", 4);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let (cluster, mut process, client) =
        cluster_of_one_worker_process(all.clone(), &cache, &[]).await;
    for object in &all {
        read_checked(&client, object).await;
    }
    let filled = cluster.origin_gets();
    assert_eq!(filled, all.len() as u64, "one fill per object");
    process.fills_settled().await;

    // Restarted on the same folder: its first page reads check every cached page's
    // checksum, and the first three of them fail.
    process.kill();
    drop(process);
    let process =
        WorkerProcess::start_logged(&cluster, "w0", &cache, &[], &[(FAIL_PAGE_READS_ENV, "3")])
            .await;
    let coordinator = cluster.coordinator_client(talon_core::cluster_auth::Role::Reader);
    wait_for(
        "the coordinator to list the restarted worker",
        std::time::Duration::from_secs(10),
        || async {
            let m = coordinator.member("w0").await.ok()?;
            (m.addr == process.addr).then_some(())
        },
    )
    .await;
    cluster.sync_client(&client).await;
    for object in &all {
        read_checked(&client, object).await;
    }
    let text = http_get(&format!("{}/metrics", process.admin_url)).await;
    let unreadable = talon_testkit::metric(&text, "talon_worker_disk_errors_total{op=\"read\"}");
    assert_eq!(unreadable, Some(3.0), "the failed reads are counted");
    let (_, _, _, error_frames) = counters(&process).await;
    assert_eq!(error_frames, 0.0, "a read was refused");
    let refetched = cluster.origin_gets() - filled;
    assert!(
        (1..=3).contains(&refetched),
        "the dropped pages were refetched: {refetched} origin GETs"
    );
    assert!(
        process.log().contains("could not be read back"),
        "{}",
        process.log()
    );

    // The disk reads again: everything is a hit, nothing more from the origin.
    process.fills_settled().await;
    let (hits, _, _, _) = counters(&process).await;
    for object in &all {
        read_checked(&client, object).await;
    }
    let (hits_after, _, _, error_frames) = counters(&process).await;
    assert_eq!(hits_after - hits, all.len() as f64, "every read was a hit");
    assert_eq!(cluster.origin_gets() - filled, refetched);
    assert_eq!(error_frames, 0.0);
}
