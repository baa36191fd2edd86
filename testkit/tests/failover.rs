//! A worker that dies mid-stream costs no correctness: every read in flight ends with
//! the right bytes (retried on the next worker) or a clean error, never wrong or short
//! bytes; the coordinator drops the dead worker after the heartbeat window; only its
//! blocks move (rendezvous placement), the others stay warm where they were; and reads
//! after the drop succeed from the remaining workers. Once with an in-process worker
//! aborted (tasks killed, connections cut, no drain), once with the real `talon-worker`
//! binary killed with SIGKILL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use talon_coordinator_client::placement::RendezvousPlacement;
use talon_core::wire::ReadRangeRequest;
use talon_core::{Message, ObjectId, ObjectVersion};
use talon_origin_stub::faults::FaultConfig;
use talon_origin_stub::generated::GeneratedObject;
use talon_testkit::raw::{RawAnswer, RawConnection};
use talon_testkit::{
    Cluster, ClusterConfig, Gate, ReadOutcome, WorkerProcess, expected, read_through,
    read_through_gated, wait_for,
};
use tokio::task::JoinHandle;

const BLOCK: u64 = 256 << 10;

/// A warm object (read fully before the crash) and a cold one (read while the worker
/// dies, through a slow origin so fills are in flight).
fn objects() -> (GeneratedObject, GeneratedObject) {
    (
        GeneratedObject::new("data", "warm.bin", 48 * BLOCK + 1000, 31),
        GeneratedObject::new("data", "cold.bin", 64 * BLOCK, 32),
    )
}

fn id_of(object: &GeneratedObject) -> ObjectId {
    ObjectId::s3(object.bucket.clone(), object.key.clone()).unwrap()
}

fn version_of(object: &GeneratedObject) -> ObjectVersion {
    ObjectVersion::from_etag(&object.etag()).unwrap()
}

type Reader = JoinHandle<(String, ReadOutcome)>;

/// Three readers of the warm object that pause a quarter in, and three free-running
/// readers of the cold one.
fn start_readers(
    client: &talon_cache_client::CacheClient,
    warm: &GeneratedObject,
    cold: &GeneratedObject,
    gate: &Gate,
) -> Vec<Reader> {
    let mut readers = Vec::new();
    for (object, pause_after) in [
        (warm, Some(warm.size / 4)),
        (warm, Some(warm.size / 4)),
        (warm, Some(warm.size / 4)),
        (cold, None),
        (cold, None),
        (cold, None),
    ] {
        let (client, gate, object) = (client.clone(), gate.clone(), object.clone());
        readers.push(tokio::spawn(async move {
            let outcome = read_through_gated(
                &client,
                &id_of(&object),
                &version_of(&object),
                object.size,
                0..object.size,
                &gate,
                pause_after,
            )
            .await;
            (object.key.clone(), outcome)
        }));
    }
    readers
}

/// Every read that was in flight ends with the object's bytes: the checks of
/// [`ReadOutcome::check`] (never wrong, never short), and, with two workers left and
/// three attempts per piece, success.
async fn finish_readers(readers: Vec<Reader>, warm: &GeneratedObject, cold: &GeneratedObject) {
    for reader in readers {
        let (key, outcome) = tokio::time::timeout(Duration::from_secs(60), reader)
            .await
            .expect("a read in flight when the worker died hung")
            .unwrap();
        let object = if key == warm.key { warm } else { cold };
        let ok = outcome.check(
            &expected(object, 0..object.size),
            &format!("{key} read across the crash"),
        );
        assert!(
            ok,
            "{key}: a read in flight when a worker died failed although two workers were \
             left to retry on: {:?}",
            outcome.error
        );
    }
}

/// Every block's owner after the drop: unchanged unless it was the victim's.
/// Returns the blocks (offset, object) the victim owned.
fn check_only_victims_blocks_moved(
    cluster: &Cluster,
    before: &RendezvousPlacement,
    after: &RendezvousPlacement,
    victim: &str,
    objects: &[&GeneratedObject],
) -> Vec<(GeneratedObject, u64)> {
    assert_eq!(before.len(), after.len() + 1);
    assert!(after.members().iter().all(|m| m.id != victim));
    let mut moved = Vec::new();
    let mut stayed = 0;
    for object in objects {
        let (id, version) = (id_of(object), version_of(object));
        for offset in (0..object.size).step_by(BLOCK as usize) {
            let block = cluster.block_id(&id, &version, offset);
            let old = before.locate(&block).unwrap();
            let new = after.locate(&block).unwrap();
            if old.id == victim {
                // Its next choice in the old ranking: where a reader retried it.
                assert_eq!(new.id, before.locate_top_k(&block, 2)[1].id);
                moved.push(((*object).clone(), offset));
            } else {
                assert_eq!(old.id, new.id, "{block} moved although its owner is alive");
                stayed += 1;
            }
        }
    }
    assert!(
        !moved.is_empty() && stayed > 0,
        "the victim owned some blocks, not all"
    );
    moved
}

/// After the drop: the survivors' blocks of the warm object are still cached where they
/// were (no origin GET), the victim's blocks are served right by their new owners (and
/// cached there), and the cold object reads back whole.
async fn check_reads_after_the_drop(
    cluster: &Cluster,
    client: &talon_cache_client::CacheClient,
    after: &RendezvousPlacement,
    moved: &[(GeneratedObject, u64)],
    warm: &GeneratedObject,
    cold: &GeneratedObject,
) {
    let (id, version) = (id_of(warm), version_of(warm));
    let gets = cluster.origin_gets();
    for offset in (0..warm.size).step_by(BLOCK as usize) {
        if moved.iter().any(|(o, m)| o.key == warm.key && *m == offset) {
            continue;
        }
        let range = offset..(offset + BLOCK).min(warm.size);
        let got = read_through(client, &id, &version, warm.size, range.clone())
            .await
            .unwrap(&format!("surviving block at {offset}"));
        assert!(got == expected(warm, range), "surviving block at {offset}");
    }
    assert_eq!(
        cluster.origin_gets(),
        gets,
        "blocks whose owner survived stayed warm on it"
    );
    for (object, offset) in moved {
        let (id, version) = (id_of(object), version_of(object));
        let range = *offset..(offset + BLOCK).min(object.size);
        let got = read_through(client, &id, &version, object.size, range.clone())
            .await
            .unwrap(&format!("moved block {} at {offset}", object.key));
        assert!(got == expected(object, range), "moved block at {offset}");
        // Answered before written: the pages are present once the fill settles.
        cluster.fills_settled().await;
        let block = cluster.block_id(&id, &version, *offset);
        let owner = after.locate(&block).unwrap();
        let stored = cluster
            .worker(cluster.worker_index(&owner.id))
            .store()
            .get(&block)
            .unwrap_or_else(|| panic!("{block} is not cached on its new owner {}", owner.id));
        assert!(
            stored.all_present(0..stored.pages),
            "{block} on {}",
            owner.id
        );
    }
    let got = read_through(
        client,
        &id_of(cold),
        &version_of(cold),
        cold.size,
        0..cold.size,
    )
    .await
    .unwrap("the cold object after the drop");
    assert!(
        got == expected(cold, 0..cold.size),
        "the cold object after the drop"
    );
}

async fn warm_up(client: &talon_cache_client::CacheClient, warm: &GeneratedObject) {
    let got = read_through(
        client,
        &id_of(warm),
        &version_of(warm),
        warm.size,
        0..warm.size,
    )
    .await
    .unwrap("warm-up");
    assert!(got == expected(warm, 0..warm.size), "warm-up");
}

fn slow_origin(cluster: &Cluster, latency_ms: u64) {
    cluster
        .origin
        .faults()
        .set(FaultConfig {
            latency_ms,
            ..FaultConfig::default()
        })
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_stream_costs_no_correctness_and_only_its_blocks_move() {
    let (warm, cold) = objects();
    let mut cluster = Cluster::start(ClusterConfig {
        generated: vec![warm.clone(), cold.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let client = cluster.client().await;
    warm_up(&client, &warm).await;
    let before = cluster.placement().await;
    let victim = 1;

    slow_origin(&cluster, 50);
    let gate = Gate::new();
    let readers = start_readers(&client, &warm, &cold, &gate);
    // Mid-stream, certainly: three readers hold a quarter of their object and wait, and
    // the victim is fetching pages for the others.
    wait_for(
        "readers mid-stream and a fill in flight on the victim",
        Duration::from_secs(20),
        || {
            let ready = gate.waiting() == 3
                && cluster.worker_metric(victim, "talon_worker_fills_in_flight") > 0.0;
            async move { ready.then_some(()) }
        },
    )
    .await;
    assert_eq!(gate.finished(), 0, "no read had ended before the kill");
    cluster.kill_worker(victim);
    gate.open();
    finish_readers(readers, &warm, &cold).await;

    cluster.wait_for_live(2).await;
    let after = cluster.placement().await;
    let moved = check_only_victims_blocks_moved(&cluster, &before, &after, "w1", &[&warm, &cold]);
    slow_origin(&cluster, 0);
    cluster.sync_client(&client).await;
    check_reads_after_the_drop(&cluster, &client, &after, &moved, &warm, &cold).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_killed_with_sigkill_mid_stream_costs_no_correctness() {
    let (warm, cold) = objects();
    let cluster = Cluster::start(ClusterConfig {
        workers: 2,
        generated: vec![warm.clone(), cold.clone()],
        ..ClusterConfig::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut process = WorkerProcess::start(&cluster, "wp", &dir.path().join("cache")).await;
    cluster.wait_for_live(3).await;
    let client = cluster.client().await;
    cluster.sync_client(&client).await;
    warm_up(&client, &warm).await;
    let before = cluster.placement().await;
    assert!(
        before
            .members()
            .iter()
            .any(|m| m.id == "wp" && m.addr == process.addr)
    );

    slow_origin(&cluster, 50);
    let gate = Gate::new();
    let readers = start_readers(&client, &warm, &cold, &gate);
    wait_for(
        "readers mid-stream and a fill in flight in the process",
        Duration::from_secs(20),
        || {
            let (gate, process) = (&gate, &process);
            async move {
                (gate.waiting() == 3 && process.metric("talon_worker_fills_in_flight").await > 0.0)
                    .then_some(())
            }
        },
    )
    .await;
    assert_eq!(gate.finished(), 0, "no read had ended before the kill");
    process.kill();
    assert!(process.has_exited());
    gate.open();
    finish_readers(readers, &warm, &cold).await;

    cluster.wait_for_live(2).await;
    let after = cluster.placement().await;
    let moved = check_only_victims_blocks_moved(&cluster, &before, &after, "wp", &[&warm, &cold]);
    slow_origin(&cluster, 0);
    cluster.sync_client(&client).await;
    check_reads_after_the_drop(&cluster, &client, &after, &moved, &warm, &cold).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_cuts_its_connections_instead_of_answering() {
    let object = GeneratedObject::new("data", "pending.bin", 2 * BLOCK, 33);
    let mut cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated: vec![object.clone()],
        ..ClusterConfig::default()
    })
    .await;
    // The fill takes at least 3 s, so it is certainly in flight when the worker dies.
    slow_origin(&cluster, 3000);
    let addr = cluster.worker(0).addr;
    let mut conn = RawConnection::authenticated(
        addr,
        cluster.cluster_secret(),
        talon_core::cluster_auth::Role::Reader,
    )
    .await;
    let block = cluster.block_id(&id_of(&object), &version_of(&object), BLOCK);
    let request = Message::ReadRange(ReadRangeRequest {
        block,
        object_size: object.size,
        offset: 100,
        len: 1000,
    });
    conn.send(&request.encode(7).unwrap()).await.unwrap();
    wait_for("the fill in flight", Duration::from_secs(10), || {
        let n = cluster.worker_metric(0, "talon_worker_fills_in_flight");
        async move { (n > 0.0).then_some(()) }
    })
    .await;
    cluster.kill_worker(0);
    // A crash answers nothing more: the connection ends (well before the fill would
    // have finished), it does not deliver the reply later.
    match conn.next(Duration::from_secs(10)).await {
        RawAnswer::Closed | RawAnswer::ClosedMidFrame | RawAnswer::Failed(_) => {}
        other => panic!("a killed worker's connection went on: {other:?}"),
    }
    // Soon nothing at its address speaks for this cluster any more. An in-process kill
    // aborts the worker's tasks, which drop its listeners a moment later (a process
    // that dies closes them at once); and a bare connect can succeed regardless: the
    // kernel may hand the freed port to another test's listener, or to the connect
    // itself as its source port. So the check is that no Hello is answered.
    let secret = cluster.cluster_secret().clone();
    wait_for(
        "the killed worker's address to answer no Hello",
        Duration::from_secs(10),
        || {
            let secret = secret.clone();
            async move {
                let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
                    return Some(());
                };
                talon_cache_client::hello::authenticate(
                    &mut stream,
                    &secret,
                    talon_core::cluster_auth::Role::Reader,
                    None,
                    Duration::from_secs(1),
                )
                .await
                .is_err()
                .then_some(())
            }
        },
    )
    .await;
}
