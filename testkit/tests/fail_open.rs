//! A sick worker costs a read latency, never an error and never a wrong byte
//! (issue 13): a worker that stops mid-answer, one whose connection is cut mid-answer,
//! and one that answers nothing at all, each behind a fault proxy in front of a real
//! worker; and a real `talon-worker` process frozen with SIGSTOP under load. The piece's
//! deadline budget moves a read on; the bytes a cut answer delivered are kept and only
//! the rest is asked of the next owner; a worker that missed a deadline has its circuit
//! opened, is skipped, and is let back in by a probe once it answers again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use talon_cache_client::{CacheClient, CircuitState, DeadlineBudget, HealthConfig, HedgeConfig};
use talon_core::{ObjectId, ObjectVersion};
use talon_origin_stub::faults::FaultConfig;
use talon_origin_stub::generated::GeneratedObject;
use talon_protocols::ErrorKind;
use talon_testkit::fault_proxy::{Fault, FaultProxy};
use talon_testkit::{
    Cluster, ClusterConfig, WorkerProcess, read_through, read_whole_checked, wait_for,
};
use talon_worker::loader::LoaderConfig;

const BLOCK: u64 = 256 << 10;
/// The piece's whole budget in these tests: a read that takes longer is stuck.
const BUDGET: Duration = Duration::from_secs(10);
const FIRST_BYTE: Duration = Duration::from_millis(800);
const STALL: Duration = Duration::from_millis(300);

fn objects(n: usize) -> Vec<GeneratedObject> {
    (0..n)
        .map(|i| GeneratedObject::new("data", format!("o{i}.bin"), BLOCK, 100 + i as u64))
        .collect()
}

fn id_of(object: &GeneratedObject) -> ObjectId {
    ObjectId::s3(object.bucket.clone(), object.key.clone()).unwrap()
}

fn version_of(object: &GeneratedObject) -> ObjectVersion {
    ObjectVersion::from_etag(&object.etag()).unwrap()
}

/// Two plain workers and a third, `w2`, reached only through a fault proxy; every read
/// over TCP (the proxy sits on the TCP path).
async fn cluster_with_a_proxied_worker(generated: Vec<GeneratedObject>) -> (Cluster, FaultProxy) {
    let mut cluster = Cluster::start(ClusterConfig {
        workers: 2,
        generated,
        local_sockets: false,
        ..ClusterConfig::default()
    })
    .await;
    let proxy = FaultProxy::bind().await;
    let (_, real) = cluster.add_worker_advertising(proxy.addr()).await;
    proxy.forward_to(real);
    (cluster, proxy)
}

/// One plain worker `w0` and two, `w1` and `w2`, reached only through fault proxies
/// (returned in that order); every read over TCP.
async fn cluster_with_two_proxied_workers(
    generated: Vec<GeneratedObject>,
    origin_fallback: bool,
) -> (Cluster, FaultProxy, FaultProxy) {
    let mut cluster = Cluster::start(ClusterConfig {
        workers: 1,
        generated,
        local_sockets: false,
        origin_fallback,
        ..ClusterConfig::default()
    })
    .await;
    let (p1, p2) = (FaultProxy::bind().await, FaultProxy::bind().await);
    for proxy in [&p1, &p2] {
        let (_, real) = cluster.add_worker_advertising(proxy.addr()).await;
        proxy.forward_to(real);
    }
    (cluster, p1, p2)
}

/// A client with the tests' budget, whose circuits open for `backoff` first.
async fn client(cluster: &Cluster, backoff: Duration) -> CacheClient {
    let client = cluster
        .client_with(|c| {
            c.deadlines =
                DeadlineBudget::from_total(BUDGET).with_worker(Some(FIRST_BYTE), Some(STALL));
            c.health = HealthConfig {
                min_backoff: backoff,
                ..HealthConfig::default()
            };
        })
        .await;
    cluster.sync_client(&client).await;
    client
}

/// The first-byte deadline of the hedging tests: far above any hedge threshold this
/// machine can produce, so that only a hedge ends a silent read before it.
const HEDGE_FIRST_BYTE: Duration = Duration::from_secs(6);

/// A client that hedges a piece once its first byte is later than the median first
/// byte it learned from the worker (the median, not the p99: one learning read slowed by
/// this busy machine would otherwise lift the threshold past the first-byte deadline,
/// and nothing would be hedged), and no sooner than `min_delay`; circuits stay open a
/// minute.
async fn hedging_client(cluster: &Cluster, min_delay: Duration) -> CacheClient {
    let client = cluster
        .client_with(|c| {
            c.deadlines = DeadlineBudget::from_total(Duration::from_secs(30))
                .with_worker(Some(HEDGE_FIRST_BYTE), Some(STALL));
            c.health = HealthConfig {
                min_backoff: Duration::from_secs(60),
                ..HealthConfig::default()
            };
            c.hedge = HedgeConfig {
                min_samples: 16,
                max_fraction: 1.0,
                min_delay,
                quantile: 0.5,
            };
        })
        .await;
    cluster.sync_client(&client).await;
    client
}

/// Reads `objects` in turn, 32 reads and then on until the client has learned how fast
/// their owner (`owner`, its data-plane address) begins its answers: a learning read
/// hedged away (on a busy machine) times no first byte of it, and an unlearned owner is
/// never hedged (CI once had it unlearned after 32 reads: the silent reads then waited
/// for their deadline).
async fn learn_latency(client: &CacheClient, objects: &[GeneratedObject], owner: &str) {
    let mut reads = 0;
    while reads < 32 || client.hedge_threshold(owner).is_none() {
        assert!(reads < 256, "{owner}'s latency was never learned");
        read_checked(
            client,
            &objects[reads % objects.len()],
            "a read to learn w2's latency",
        )
        .await;
        reads += 1;
    }
}

/// The objects whose only block `w2` (behind the proxy) owns, with the slot of the
/// worker next in rendezvous order.
async fn owned_by_the_proxied_worker(
    cluster: &Cluster,
    objects: &[GeneratedObject],
) -> Vec<(GeneratedObject, usize)> {
    let placement = cluster.placement().await;
    objects
        .iter()
        .filter_map(|o| {
            let block = cluster.block_id(&id_of(o), &version_of(o), 0);
            let owners = placement.locate_top_k(&block, 2);
            (owners[0].id == "w2").then(|| (o.clone(), cluster.worker_index(&owners[1].id)))
        })
        .collect()
}

/// Fills the cache with `objects` through a client with the default budget, so that
/// the tests' tight deadlines only ever meet hits (a fill on this 2-core machine, with
/// other tests running, may take longer than they allow).
async fn warm(cluster: &Cluster, objects: &[GeneratedObject]) {
    let client = cluster.client().await;
    cluster.sync_client(&client).await;
    for o in objects {
        read_checked(&client, o, "warm-up").await;
    }
}

/// Reads the whole object and checks every byte; returns how long it took.
async fn read_checked(client: &CacheClient, object: &GeneratedObject, what: &str) -> Duration {
    let started = Instant::now();
    read_whole_checked(client, object, what).await;
    let took = started.elapsed();
    assert!(
        took < BUDGET,
        "{what}: the read took {took:?}, past its deadline budget {BUDGET:?}"
    );
    took
}

fn circuit_of(client: &CacheClient, proxy: &FaultProxy) -> (CircuitState, u64) {
    let addr = proxy.addr().to_string();
    client
        .worker_health()
        .into_iter()
        .find(|w| w.addr == addr)
        .map(|w| (w.state, w.deadlines_missed))
        .unwrap_or((CircuitState::Closed, 0))
}

/// Bytes worker `i` has answered: from its block files, or from a fill's fetched bytes
/// while they were written behind (a cold piece).
fn served(cluster: &Cluster, i: usize) -> u64 {
    (cluster.worker_metric(i, "talon_worker_cache_bytes_served_total")
        + cluster.worker_metric(i, "talon_worker_written_behind_answer_bytes_total")) as u64
}

/// Waits until worker `i` has counted `rest` bytes served since `before` (it counts an
/// answer once its send returns, which may be after the reader has it all), and checks
/// that it is exactly that: the next owner was asked for the rest of the piece, not
/// the whole piece again.
async fn next_serves_exactly(cluster: &Cluster, i: usize, before: u64, rest: u64) {
    let counted = wait_for(
        "the next owner to count its answer",
        Duration::from_secs(5),
        || async {
            let n = served(cluster, i) - before;
            (n > 0).then_some(n)
        },
    )
    .await;
    assert_eq!(
        counted, rest,
        "the next owner was asked for exactly the rest"
    );
}

/// The setup both resumption tests share: a cluster with `w2` behind the proxy, a
/// client whose circuits open for `backoff`, and an object `w2` owns, cached there.
/// Then one read of it with `fault` on `w2`'s answers, checked: every byte right, the
/// piece continued once with `kept` bytes of the cut answer kept, and the next owner
/// asked for exactly the rest.
async fn read_through_a_cut(
    fault: Fault,
    kept: std::ops::Range<u64>,
    backoff: Duration,
) -> (Cluster, FaultProxy, CacheClient, GeneratedObject) {
    let all = objects(24);
    let (cluster, proxy) = cluster_with_a_proxied_worker(all.clone()).await;
    let client = client(&cluster, backoff).await;
    let owned = owned_by_the_proxied_worker(&cluster, &all).await;
    let (object, next) = owned.first().cloned().expect("w2 owns some object");
    warm(&cluster, std::slice::from_ref(&object)).await;

    proxy.set(fault);
    let next_served = served(&cluster, next);
    read_checked(&client, &object, &format!("a read through {fault:?}")).await;
    let stats = client.fail_open_stats();
    assert_eq!(stats.resumed, 1, "the piece was continued once: {stats:?}");
    assert!(
        kept.contains(&stats.kept_bytes),
        "the bytes before the fault were kept: {stats:?}"
    );
    next_serves_exactly(&cluster, next, next_served, BLOCK - stats.kept_bytes).await;
    (cluster, proxy, client, object)
}

/// A worker that sends part of a cached answer and then goes silent: the read keeps
/// the bytes it got, asks the next owner for exactly the rest (its served bytes say so),
/// and the stalled worker's circuit opens, so the next read skips it without waiting.
/// Once the worker answers again, a probe closes the circuit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_that_stalls_mid_answer_costs_only_the_rest_and_is_skipped_until_it_recovers() {
    // A backoff long enough that the read below certainly comes while the circuit is
    // open.
    let (_cluster, proxy, client, object) = read_through_a_cut(
        Fault::StallAfter(100_000),
        1..100_000,
        Duration::from_secs(3),
    )
    .await;
    let (state, missed) = circuit_of(&client, &proxy);
    assert_eq!(
        state,
        CircuitState::Open,
        "one missed deadline opens the circuit"
    );
    assert!(missed >= 1);

    // Skipped while open: nothing more reaches the stalled worker.
    let asked = proxy.requested_bytes();
    read_checked(&client, &object, "a read while the circuit is open").await;
    assert_eq!(
        proxy.requested_bytes(),
        asked,
        "the open circuit was skipped"
    );
    assert!(client.fail_open_stats().skipped >= 1);

    // It answers again: a probe (a real read) closes the circuit.
    proxy.set(Fault::Pass);
    wait_for(
        "a probe to close the recovered worker's circuit",
        Duration::from_secs(20),
        || async {
            read_checked(&client, &object, "a read while the worker recovers").await;
            (circuit_of(&client, &proxy).0 == CircuitState::Closed).then_some(())
        },
    )
    .await;
    assert!(
        proxy.requested_bytes() > asked,
        "the probe reached the worker"
    );
}

/// A worker whose connection dies mid-answer: the bytes before the cut are kept and
/// the rest comes from the next owner; one broken connection does not open the circuit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_connection_cut_mid_answer_resumes_at_the_exact_byte() {
    let (_cluster, proxy, client, _) = read_through_a_cut(
        Fault::CutAfter(150_000),
        100_001..150_000,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(circuit_of(&client, &proxy), (CircuitState::Closed, 0));
}

/// A worker that answers nothing (its connections open, its answers never arriving):
/// a read costs one deadline once (the first-byte deadline on a pooled connection, the
/// shorter connect deadline on a new one, whose Hello never completes), then the
/// circuit is open and the reads of the other objects it owns go straight to their
/// next owners.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_owner_costs_one_first_byte_deadline_then_is_skipped() {
    let all = objects(24);
    let (cluster, proxy) = cluster_with_a_proxied_worker(all.clone()).await;
    // No probe during the test: every read below must skip the worker.
    let client = client(&cluster, Duration::from_secs(60)).await;
    let owned = owned_by_the_proxied_worker(&cluster, &all).await;
    assert!(owned.len() >= 2, "w2 owns at least two objects");
    let owned_objects: Vec<GeneratedObject> = owned.iter().map(|(o, _)| o.clone()).collect();
    warm(&cluster, &owned_objects).await;
    // Connect the pool through the proxy first, so the fault meets a live connection.
    read_checked(&client, &owned[0].0, "a read through w2").await;

    proxy.set(Fault::StallAfter(0));
    let first = read_checked(&client, &owned[1].0, "a read whose owner is silent").await;
    let connect = DeadlineBudget::from_total(BUDGET).worker.connect;
    assert!(
        first >= connect.min(FIRST_BYTE),
        "the read waited for a deadline ({first:?})"
    );
    assert_eq!(circuit_of(&client, &proxy).0, CircuitState::Open);
    let asked = proxy.requested_bytes();
    for (object, _) in &owned {
        read_checked(&client, object, "a read of another of its objects").await;
    }
    assert_eq!(
        proxy.requested_bytes(),
        asked,
        "nothing more was asked of it"
    );
    assert_eq!(client.fail_open_stats().resumed, 0);
    // The coordinator's member view says so: one reader skips w2.
    let coordinator = cluster.coordinator_client(talon_core::cluster_auth::Role::Admin);
    let circuits = wait_for(
        "the client's circuit report to reach the coordinator",
        Duration::from_secs(5),
        || async {
            let c = coordinator.member("w2").await.ok()?.circuits;
            (c.open == 1).then_some(c)
        },
    )
    .await;
    assert_eq!((circuits.readers, circuits.opened), (1, 1), "{circuits:?}");
    let w0 = coordinator.member("w0").await.unwrap().circuits;
    assert_eq!(w0.open, 0, "a healthy worker is not reported open: {w0:?}");
}

/// The hang of the issue, on a real worker process: SIGSTOP it while eight readers
/// read objects it owns, SIGCONT it after three seconds. No read fails, none waits for
/// the whole stop: the longest read is bounded by the first-byte deadline, not the
/// stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_worker_process_fails_no_read_and_holds_none_for_the_whole_stop() {
    let all = objects(24);
    let cluster = Cluster::start(ClusterConfig {
        workers: 2,
        generated: all.clone(),
        local_sockets: false,
        ..ClusterConfig::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let process = WorkerProcess::start(&cluster, "w2", &dir.path().join("cache")).await;
    cluster.wait_for_live(3).await;
    let client = client(&cluster, Duration::from_millis(200)).await;
    let placement = cluster.placement().await;
    let owned: Vec<GeneratedObject> = all
        .iter()
        .filter(|o| {
            placement
                .locate(&cluster.block_id(&id_of(o), &version_of(o), 0))
                .is_some_and(|m| m.id == "w2")
        })
        .cloned()
        .collect();
    assert!(!owned.is_empty(), "the process owns some objects");
    warm(&cluster, &all).await;

    let stop = Duration::from_secs(3);
    let stopped = Instant::now();
    signal(process.pid(), "STOP");
    let mut readers = Vec::new();
    for r in 0..8 {
        let (client, objects) = (client.clone(), owned.clone());
        readers.push(tokio::spawn(async move {
            let mut longest = Duration::ZERO;
            let mut reads = 0;
            while stopped.elapsed() < stop + Duration::from_secs(1) {
                let object = &objects[(r + reads) % objects.len()];
                longest =
                    longest.max(read_checked(&client, object, "a read across the stop").await);
                reads += 1;
            }
            (reads, longest)
        }));
    }
    // Resume it when the stop is over (the readers run across it).
    tokio::time::sleep_until((stopped + stop).into()).await;
    signal(process.pid(), "CONT");
    let mut longest = Duration::ZERO;
    let mut reads = 0;
    for r in readers {
        let (n, l) = r.await.unwrap();
        reads += n;
        longest = longest.max(l);
    }
    assert!(reads > 8, "the readers kept reading ({reads} reads)");
    assert!(
        longest < stop,
        "a read was held {longest:?}, the whole stop ({stop:?}): the first-byte deadline \
         ({FIRST_BYTE:?}) did not move it on"
    );
    eprintln!("{reads} reads across a {stop:?} stop; the longest took {longest:?}");
}

fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// An origin that throttles (503 SlowDown on every request) is asked by one worker
/// only, within that worker's bounded retries: the read is not tried again through the
/// other owners (each would ask the same origin again), and it fails with SlowDown, the
/// answer a client must back off on. The worker is not blamed for it: its circuit stays
/// closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_throttled_origin_is_asked_through_one_worker_only_and_the_read_says_slow_down() {
    let object = GeneratedObject::new("data", "throttled.bin", BLOCK, 300);
    let cluster = Cluster::start(ClusterConfig {
        workers: 3,
        generated: vec![object.clone()],
        local_sockets: false,
        // Even with the origin as the cache client's last resort.
        origin_fallback: true,
        ..ClusterConfig::default()
    })
    .await;
    let client = client(&cluster, Duration::from_secs(60)).await;
    cluster
        .origin
        .faults()
        .set(FaultConfig {
            error_rate: 1.0,
            ..FaultConfig::default()
        })
        .unwrap();
    let gets = cluster.origin_gets();
    let before = cluster.origin.metrics().requests_total();
    let outcome = read_through(
        &client,
        &id_of(&object),
        &version_of(&object),
        object.size,
        0..object.size,
    )
    .await;
    assert!(outcome.bytes.is_empty(), "no byte of a throttled read");
    let error = outcome.error.expect("the read fails");
    assert_eq!(error.kind(), ErrorKind::SlowDown, "{error}");
    // One worker's fill: its first GET and its bounded retries, nothing else (no
    // other owner's fill, no fallback GET).
    let tries = u64::from(LoaderConfig::default().origin_retries) + 1;
    assert_eq!(
        (
            cluster.origin_gets() - gets,
            cluster.origin.metrics().requests_total() - before
        ),
        (tries, tries),
        "the origin was asked through one worker only"
    );
    let stats = client.fail_open_stats();
    assert_eq!((stats.retries, stats.fallbacks), (0, 0), "{stats:?}");
    assert!(
        client
            .worker_health()
            .iter()
            .all(|w| w.state == CircuitState::Closed && w.consecutive_failures == 0),
        "{:?}",
        client.worker_health()
    );
}

/// A read whose first owner answers never claims the probe of a worker further down
/// its list: after a worker recovers, the first read that actually asks it is the probe,
/// and it closes the circuit. (A probe claimed and never used left the worker skipped.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_probe_is_claimed_only_by_a_read_that_asks_the_recovered_worker() {
    let all = objects(24);
    let (cluster, proxy) = cluster_with_a_proxied_worker(all.clone()).await;
    warm(&cluster, &all).await;
    // Circuits may probe as soon as they open: what is tested is who claims the probe.
    let client = client(&cluster, Duration::from_millis(1)).await;
    let placement = cluster.placement().await;
    let owners = |o: &GeneratedObject| -> Vec<String> {
        placement
            .locate_top_k(&cluster.block_id(&id_of(o), &version_of(o), 0), 2)
            .iter()
            .map(|m| m.id.clone())
            .collect()
    };
    let first = all
        .iter()
        .find(|o| owners(o)[0] == "w2")
        .expect("w2 owns one");
    let second = all
        .iter()
        .find(|o| owners(o)[1] == "w2")
        .expect("w2 is second for one");
    read_checked(&client, first, "a read through w2").await;
    proxy.set(Fault::StallAfter(0));
    read_checked(&client, first, "a read whose owner is silent").await;
    assert_ne!(circuit_of(&client, &proxy).0, CircuitState::Closed);

    proxy.set(Fault::Pass);
    // Its first owner answers: w2, second on its list, is not asked and not probed.
    let asked = proxy.requested_bytes();
    read_checked(&client, second, "a read whose first owner answers").await;
    assert_eq!(proxy.requested_bytes(), asked, "w2 was not asked");
    // The next read that needs w2 asks it, as the probe, and closes the circuit.
    read_checked(&client, first, "the probe").await;
    assert!(proxy.requested_bytes() > asked, "w2 was asked");
    assert_eq!(circuit_of(&client, &proxy).0, CircuitState::Closed);
}

/// A hedged read (issue 13, item 3): once the client knows how fast `w2` usually
/// begins its answers, a piece whose first byte from `w2` is later than that is asked
/// of the next owner too, and the next owner's complete answer is taken without waiting
/// for `w2`'s first-byte deadline. The request to `w2` is left to finish on its own:
/// it misses its deadline and opens `w2`'s circuit, so later reads skip `w2` instead of
/// being hedged around it forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_first_byte_is_hedged_to_the_next_owner_and_the_silent_worker_is_still_found_out() {
    let all = objects(48);
    let (cluster, proxy) = cluster_with_a_proxied_worker(all.clone()).await;
    let owned: Vec<GeneratedObject> = owned_by_the_proxied_worker(&cluster, &all)
        .await
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    assert!(owned.len() >= 2, "w2 owns at least two objects");
    warm(&cluster, &all).await;
    let client = hedging_client(&cluster, Duration::from_millis(20)).await;
    let addr = proxy.addr().to_string();
    learn_latency(&client, &owned, &addr).await;
    // (A learning read may itself have been hedged, on this busy machine: count from
    // here.)
    let before = client.fail_open_stats();

    proxy.set(Fault::StallAfter(0));
    read_checked(&client, &owned[0], "a read whose owner went silent").await;
    let stats = client.fail_open_stats();
    assert_eq!(
        (
            stats.hedged - before.hedged,
            stats.hedges_won - before.hedges_won
        ),
        (1, 1),
        "the piece was hedged and the next owner's answer taken: {stats:?}, {:?}, \
         w2's threshold {:?}",
        client.worker_health(),
        client.hedge_threshold(&addr)
    );
    // The silent request still meets its deadline in the background and opens the
    // circuit.
    wait_for(
        "the silent worker's circuit to open",
        HEDGE_FIRST_BYTE * 2,
        || async { (circuit_of(&client, &proxy).0 == CircuitState::Open).then_some(()) },
    )
    .await;
    let asked = proxy.requested_bytes();
    read_checked(&client, &owned[1], "a read after the circuit opened").await;
    assert_eq!(
        proxy.requested_bytes(),
        asked,
        "the silent worker was skipped"
    );
    assert_eq!(
        client.fail_open_stats().hedged,
        stats.hedged,
        "no hedge once it is skipped"
    );
}

/// A silent owner under concurrent reads, with more of its pieces in flight than the
/// hedge budget covers: the hedged ones are won by the next owner, and three such
/// latency outliers open the owner's circuit, which closes its connections, so the
/// pieces that were not hedged move on at once instead of each waiting for the
/// first-byte deadline (the circuit shows no missed deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outliers_open_the_circuit_and_the_pieces_waiting_on_the_worker_move_on_at_once() {
    let all = objects(64);
    let (cluster, proxy) = cluster_with_a_proxied_worker(all.clone()).await;
    let owned: Vec<GeneratedObject> = owned_by_the_proxied_worker(&cluster, &all)
        .await
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    // More pieces in flight at once than the budget saves hedges for (10).
    let concurrent = 14;
    assert!(owned.len() >= concurrent, "w2 owns {} objects", owned.len());
    warm(&cluster, &all).await;
    let client = hedging_client(&cluster, Duration::from_millis(20)).await;
    learn_latency(&client, &owned, &proxy.addr().to_string()).await;
    let before = client.fail_open_stats();

    proxy.set(Fault::StallAfter(0));
    let reads: Vec<_> = owned[..concurrent]
        .iter()
        .cloned()
        .map(|object| {
            let client = client.clone();
            tokio::spawn(async move {
                read_checked(&client, &object, "a read whose owner went silent").await;
            })
        })
        .collect();
    for r in reads {
        r.await.unwrap();
    }
    let stats = client.fail_open_stats();
    let hedged = stats.hedged - before.hedged;
    assert!(
        (3..concurrent as u64).contains(&hedged),
        "some pieces were hedged, not all: {stats:?}"
    );
    let (state, missed) = circuit_of(&client, &proxy);
    assert_eq!(state, CircuitState::Open, "the outliers opened the circuit");
    assert_eq!(
        missed, 0,
        "no piece waited for its first-byte deadline: the open circuit closed the \
         silent worker's connections"
    );
}

/// Reads given up while their connection to the owner is being opened (the read
/// review's RP-01): the owner's Hello answers are held, so each read waits in the
/// connect, and it is dropped there (a client that went away, a response deadline).
/// More such reads than the pool keeps connections per worker, then the worker answers
/// again: the next read of its object is served by it at once. (The connect slot a
/// dropped connect held was never given back: after two, the pool waited for a
/// connection nobody was opening and every read the worker owned hung for good, with
/// no circuit opened and no origin fallback.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_dropped_while_their_connection_opens_leave_the_worker_reachable() {
    let all = objects(24);
    let (cluster, proxy) = cluster_with_a_proxied_worker(all.clone()).await;
    let owned = owned_by_the_proxied_worker(&cluster, &all).await;
    let (object, _) = owned.first().cloned().expect("w2 owns some object");
    warm(&cluster, std::slice::from_ref(&object)).await;
    // A fresh client: no connection to w2 yet.
    let client = client(&cluster, Duration::from_secs(60)).await;
    let per_worker = talon_cache_client::CacheClientConfig::new(
        "http://unused",
        cluster.config().geometry,
        cluster.cluster_secret().clone(),
    )
    .connections_per_worker;

    proxy.set(Fault::StallAfter(0));
    for _ in 0..per_worker {
        let asked = proxy.requested_bytes();
        let read = {
            let (client, object) = (client.clone(), object.clone());
            tokio::spawn(async move { read_whole_checked(&client, &object, "dropped").await })
        };
        // Its Hello reached the worker; the answer is held: the read is in the connect.
        wait_for("the read's Hello to reach w2", BUDGET, || async {
            (proxy.requested_bytes() > asked).then_some(())
        })
        .await;
        read.abort();
        assert!(
            read.await.unwrap_err().is_cancelled(),
            "dropped mid-connect"
        );
    }

    proxy.set(Fault::Pass);
    let asked = proxy.requested_bytes();
    tokio::time::timeout(
        BUDGET,
        read_whole_checked(&client, &object, "after the drops"),
    )
    .await
    .expect("a read of w2's object after reads dropped mid-connect hung");
    assert!(proxy.requested_bytes() > asked, "w2 was asked");
    let stats = client.fail_open_stats();
    assert_eq!(
        (stats.fallbacks, stats.retries),
        (0, 0),
        "w2 served it: {stats:?}"
    );
    assert_eq!(circuit_of(&client, &proxy), (CircuitState::Closed, 0));
}

/// A hedge that completes after the owner's request failed (the read review's RP-03):
/// the owner `w2` is silent, the piece is hedged to the next owner `w1`, whose answer
/// is held; then `w2`'s connection is cut and only then `w1` answers in full. Its answer
/// is the piece: the third worker is not asked. (The failed first answer won the tie
/// and the complete hedge was thrown away: another owner or the origin was asked again,
/// and with no third owner and no fallback the read failed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hedge_that_completes_after_the_owner_failed_is_the_answer() {
    let all = objects(64);
    let (cluster, p1, p2) = cluster_with_two_proxied_workers(all.clone(), false).await;
    let placement = cluster.placement().await;
    let owned: Vec<GeneratedObject> = all
        .iter()
        .filter(|o| {
            let block = cluster.block_id(&id_of(o), &version_of(o), 0);
            let owners = placement.locate_top_k(&block, 2);
            owners[0].id == "w2" && owners[1].id == "w1"
        })
        .cloned()
        .collect();
    assert!(owned.len() >= 2, "w2 then w1 own some objects");
    warm(&cluster, &all).await;
    // Hedged no sooner than 250 ms: well above a busy machine's hit latency, so that no
    // learning read is hedged (three outliers would open w2's circuit before the test).
    let client = hedging_client(&cluster, Duration::from_millis(250)).await;
    learn_latency(&client, &owned, &p2.addr().to_string()).await;
    assert_eq!(circuit_of(&client, &p2).0, CircuitState::Closed);
    let before = client.fail_open_stats();
    let w0_reads = cluster.worker_metric(0, "talon_worker_read_duration_seconds_count");
    let gets = cluster.origin_gets();

    p2.set(Fault::StallAfter(0));
    p1.set(Fault::StallAfter(0));
    let read = {
        let (client, object) = (client.clone(), owned[0].clone());
        tokio::spawn(async move { read_checked(&client, &object, "a hedged read").await })
    };
    wait_for("the piece to be hedged to w1", BUDGET, || async {
        (client.fail_open_stats().hedged > before.hedged).then_some(())
    })
    .await;
    // The owner fails first: its connection is cut, and the client has heard of it.
    p2.set(Fault::CutAfter(0));
    let w2 = p2.addr().to_string();
    wait_for("w2's failure to be noted", BUDGET, || async {
        client
            .worker_health()
            .iter()
            .any(|w| w.addr == w2 && w.consecutive_failures > 0)
            .then_some(())
    })
    .await;
    p1.set(Fault::Pass);
    read.await.unwrap();
    let stats = client.fail_open_stats();
    assert_eq!(
        (
            stats.hedges_won - before.hedges_won,
            stats.retries - before.retries
        ),
        (1, 0),
        "the hedge's answer was the piece: {stats:?}"
    );
    assert_eq!(
        cluster.worker_metric(0, "talon_worker_read_duration_seconds_count"),
        w0_reads,
        "the third worker was not asked"
    );
    assert_eq!(
        cluster.origin_gets(),
        gets + 1,
        "the origin was asked once, by w1's fill of the hedge, not again"
    );
}

/// A piece whose workers' share of the budget runs out while a healthy worker is still
/// within its own deadlines (the read review's RP-07): the owner `w2` is silent and
/// misses its first-byte deadline, which leaves the next owner `w1` less time than that
/// deadline; `w1` (held too) has not missed anything when the share ends. The read goes
/// to the origin, `w2` is charged, and `w1` is not: its circuit stays closed and its
/// connection stays up. (The spent budget was charged to `w1` as a missed deadline,
/// which opened its circuit and cut every connection to it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spent_budget_is_not_charged_to_the_worker_that_happens_to_hold_the_piece() {
    let all = objects(64);
    let (cluster, p1, p2) = cluster_with_two_proxied_workers(all.clone(), true).await;
    let placement = cluster.placement().await;
    let object = all
        .iter()
        .find(|o| {
            let owners = placement.locate_top_k(&cluster.block_id(&id_of(o), &version_of(o), 0), 2);
            owners[0].id == "w2" && owners[1].id == "w1"
        })
        .cloned()
        .expect("w2 then w1 own some object");
    warm(&cluster, &all).await;
    let client = cluster
        .client_with(|c| {
            let mut budget =
                DeadlineBudget::from_total(BUDGET).with_worker(Some(FIRST_BYTE), Some(STALL));
            // The next owner gets less than its first-byte deadline.
            budget.workers_share = FIRST_BYTE + FIRST_BYTE / 2;
            c.deadlines = budget;
            // One connection per worker, opened before the faults.
            c.connections_per_worker = 1;
            c.health = HealthConfig {
                min_backoff: Duration::from_secs(60),
                ..HealthConfig::default()
            };
        })
        .await;
    cluster.sync_client(&client).await;
    // Both connections open and proven before the faults.
    let of_w1 = all
        .iter()
        .find(|o| {
            placement
                .locate(&cluster.block_id(&id_of(o), &version_of(o), 0))
                .is_some_and(|m| m.id == "w1")
        })
        .expect("w1 owns some object");
    read_checked(&client, &object, "a read through w2").await;
    read_checked(&client, of_w1, "a read through w1").await;
    let health = |proxy: &FaultProxy| {
        let addr = proxy.addr().to_string();
        client.worker_health().into_iter().find(|w| w.addr == addr)
    };

    p2.set(Fault::StallAfter(0));
    p1.set(Fault::StallAfter(0));
    let fallbacks = client.fail_open_stats().fallbacks;
    read_checked(&client, &object, "a read whose owners are held").await;
    assert_eq!(
        client.fail_open_stats().fallbacks,
        fallbacks + 1,
        "the origin answered"
    );
    assert_eq!(
        circuit_of(&client, &p2),
        (CircuitState::Open, 1),
        "w2 missed its deadline"
    );
    let w1 = health(&p1);
    assert!(
        w1.as_ref().is_none_or(|w| w.state == CircuitState::Closed
            && w.consecutive_failures == 0
            && w.deadlines_missed == 0),
        "w1 was charged with the spent budget: {w1:?}"
    );
}
