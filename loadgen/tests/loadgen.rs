//! talon-loadgen against a real worker (in-process, loopback, standalone
//! with an origin stub), against the stub over HTTP, and against fake
//! servers that misbehave in the ways the tool must catch.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use talon_core::cluster_auth::HelloSide;
use talon_core::wire::{ErrorReply, StatReply};
use talon_core::wire::{Event, FrameDecoder, encode_read_range_reply_header};
use talon_core::{ErrorCode, Message, ObjectId, ObjectVersion};
use talon_loadgen::{LoadConfig, Report, Target};
use talon_origin_stub::generated::GeneratedObject;
use talon_origin_stub::{RunningStub, StubConfig};
use talon_protocols::origin::{OriginClient, OriginConfig, Origins};
use talon_worker::data_plane::DataPlaneConfig;
use talon_worker::loader::LoaderConfig;
use talon_worker::{RunningWorker, WorkerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const BLOCK: u64 = 4 << 20;

async fn stub() -> RunningStub {
    talon_origin_stub::start(StubConfig {
        generated: vec![GeneratedObject::new("bench", "block.bin", BLOCK, 1)],
        azure_listen: None,
        admin_listen: None,
        ..StubConfig::default()
    })
    .await
    .unwrap_or_else(|e| panic!("stub: {e}"))
}

async fn worker(stub: &RunningStub, dir: &std::path::Path) -> RunningWorker {
    let s3 = OriginClient::new(OriginConfig::S3 {
        endpoint: stub.s3_url().unwrap_or_default(),
        region: "us-east-1".into(),
        credentials: None,
        virtual_hosted: false,
    })
    .unwrap_or_else(|e| panic!("origin client: {e}"));
    talon_worker::start(WorkerConfig {
        pins: Default::default(),
        listen: "127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")),
        admin_listen: None,
        cache_dir: dir.to_owned(),
        capacity_bytes: 64 << 20,
        page_size: 1 << 20,
        origins: Origins {
            s3: Some(s3),
            azure: None,
        },
        stat_ttl: Duration::from_secs(60),
        negative_stat_ttl: Duration::from_secs(1),
        metadata: talon_worker::origins::DEFAULT_STAT_CACHE_LIMITS,
        loader: LoaderConfig::default(),
        data_plane: DataPlaneConfig::default(),
        membership: None,
        local_socket: None,
        cluster_secret: secret(),
        open_files: None,
        max_blocks: talon_worker::block_store::DEFAULT_MAX_BLOCKS,
    })
    .await
    .unwrap_or_else(|e| panic!("worker: {e}"))
}

/// The cluster secret of the worker under load.
fn secret() -> talon_core::cluster_auth::ClusterSecret {
    talon_core::cluster_auth::ClusterSecret::new(b"the loadgen tests' cluster secret")
        .unwrap_or_else(|e| panic!("{e}"))
}

fn wire(addr: SocketAddr, key: &str) -> LoadConfig {
    let mut c = LoadConfig::new(Target::Wire {
        addr: addr.to_string(),
        object: ObjectId::from_key_path(key).unwrap_or_else(|e| panic!("{e}")),
        secret: secret(),
    });
    c.duration = Duration::from_millis(800);
    c.warmup = Duration::from_millis(200);
    c.drain_timeout = Duration::from_secs(5);
    c
}

async fn run(c: &LoadConfig) -> Report {
    talon_loadgen::run(c)
        .await
        .unwrap_or_else(|e| panic!("run could not start: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_closed_loop_against_a_real_worker() {
    let stub = stub().await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let worker = worker(&stub, dir.path()).await;
    let mut c = wire(worker.addr, "s3/bench/block.bin");
    c.conns = 3;
    c.depth = 8;
    c.prefetch = true;
    c.server_pids = vec![std::process::id()];
    let r = run(&c).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.errors, 0);
    assert_eq!(r.object_size, BLOCK);
    assert!(r.requests > 10, "{}", r.requests);
    assert_eq!(r.bytes, r.requests * 65536);
    let l = r
        .latency_us
        .as_ref()
        .unwrap_or_else(|| panic!("no latency"));
    assert!(l.p50_us > 0.0 && l.p50_us <= l.p99_us && l.p99_us <= l.max_us);
    let server = r
        .server
        .as_ref()
        .unwrap_or_else(|| panic!("no server figures"));
    assert!(server.rss_mib > 0.0 && server.user_s + server.kernel_s > 0.0);
    assert!(r.client.is_some());
    assert!(
        r.service_time_us.is_none(),
        "closed loop has no separate service time"
    );
    // The report is one JSON line that parses back.
    let line = serde_json::to_string(&r).unwrap_or_default();
    assert!(!line.contains('\n'));
    let back: Report = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((back.requests, back.errors, back.conns), (r.requests, 0, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constant_rate_and_several_blocks() {
    let stub = talon_origin_stub::start(StubConfig {
        generated: vec![GeneratedObject::new(
            "bench",
            "three.bin",
            2 * BLOCK + 100_000,
            3,
        )],
        azure_listen: None,
        admin_listen: None,
        ..StubConfig::default()
    })
    .await
    .unwrap_or_else(|e| panic!("stub: {e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let worker = worker(&stub, dir.path()).await;
    let mut c = wire(worker.addr, "s3/bench/three.bin");
    c.blocks = 3; // the last block holds 100,000 bytes: still room for 64 KiB
    c.conns = 2;
    c.depth = 4;
    c.rate = Some(500.0);
    c.prefetch = true;
    let r = run(&c).await;
    assert!(r.ok, "{r:?}");
    // 500/s for 0.8 s: about 400 due in the window.
    let samples = r.latency_us.as_ref().map_or(0, |l| l.samples);
    assert!((350..=450).contains(&samples), "{samples}");
    assert!(r.service_time_us.is_some() && r.client_send_lag_us.is_some());
    // More blocks than the object has is refused before any load.
    c.blocks = 4;
    let err = talon_loadgen::run(&c)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("fewer than --blocks 4"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_object_is_refused_with_the_workers_words() {
    let stub = stub().await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let worker = worker(&stub, dir.path()).await;
    let c = wire(worker.addr, "s3/bench/nope.bin");
    let err = talon_loadgen::run(&c)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("NotFound"), "{err}");
    // Nothing listening: a connect error, not a hang or a panic.
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = closed.local_addr().unwrap_or_else(|e| panic!("{e}"));
    drop(closed);
    let err = talon_loadgen::run(&wire(addr, "s3/bench/block.bin"))
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("cannot connect"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_range_reads_against_the_origin_stub() {
    let stub = stub().await;
    let url = format!("{}/bench/block.bin", stub.s3_url().unwrap_or_default());
    let mut c = LoadConfig::new(Target::Http { url: url.clone() });
    c.duration = Duration::from_millis(800);
    c.warmup = Duration::from_millis(200);
    c.conns = 2;
    c.label = Some("origin-stub".into());
    let r = run(&c).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(
        (r.protocol.as_str(), r.depth, r.object_size),
        ("http/1.1", 1, BLOCK)
    );
    assert!(r.requests > 5);
    // At a constant rate: 200/s for 0.8 s is about 160 due in the window.
    c.rate = Some(200.0);
    let r = run(&c).await;
    assert!(r.ok, "{r:?}");
    let samples = r.latency_us.as_ref().map_or(0, |l| l.samples);
    assert!((140..=180).contains(&samples), "{samples}");
    assert!(r.client_send_lag_us.is_some());
    // A missing object is refused up front.
    let mut c = LoadConfig::new(Target::Http {
        url: format!("{}/bench/nope.bin", stub.s3_url().unwrap_or_default()),
    });
    c.duration = Duration::from_millis(200);
    let err = talon_loadgen::run(&c)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("404"), "{err}");
}

/// How a fake worker answers ReadRange requests.
#[derive(Clone, Copy)]
enum Fake {
    /// Replies to the requests of each read in reverse order (ids still
    /// right): a client that matched replies by position would fail.
    Reversed,
    /// Answers the third request with an error frame.
    ErrorOnThird,
    /// Sends one byte less than asked.
    Short,
    /// Echoes the wrong request id.
    WrongId,
}

/// Batches of two or more replies a [`Fake::Reversed`] worker sent reversed.
static REVERSED_BATCHES: AtomicUsize = AtomicUsize::new(0);

/// A fake worker: answers Stat, then ReadRange as `mode` says.
/// The fake worker's Hello nonce (fixed: this is a test double, not a worker).
const WORKER_NONCE: [u8; 16] = *b"fake-worker-nonc";

async fn fake_worker(mode: Fake) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut decoder = FrameDecoder::new();
                let mut buf = vec![0u8; 64 << 10];
                let mut pending: Vec<(u32, u32)> = Vec::new();
                let mut served = 0u32;
                let mut worker_nonce = None;
                loop {
                    let n = match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let mut input = &buf[..n];
                    let mut out = Vec::new();
                    while let Ok(Some(Event::Frame(f))) = decoder.decode(&mut input) {
                        let id = f.header.request_id();
                        match f.message {
                            Message::Stat(_) => {
                                let reply = Message::StatReply(StatReply {
                                    size: BLOCK,
                                    version: ObjectVersion::new("\"v1\"")
                                        .unwrap_or_else(|e| panic!("{e}")),
                                    last_modified_ms: 0,
                                    content_type: String::new(),
                                    headers: Default::default(),
                                    age_ms: None,
                                });
                                out.extend(reply.encode(id).unwrap_or_default());
                            }
                            Message::ReadRange(req) => pending.push((id, req.len)),
                            // The worker's side of the Hello exchange, as a real one answers.
                            Message::Hello { role, nonce, .. } => {
                                worker_nonce = Some((role, nonce));
                                let proof = secret().hello_proof(
                                    HelloSide::Worker,
                                    role,
                                    "",
                                    &nonce,
                                    &WORKER_NONCE,
                                );
                                let reply = Message::HelloReply {
                                    nonce: WORKER_NONCE,
                                    proof,
                                    worker: String::new(),
                                };
                                out.extend(reply.encode(id).unwrap_or_default());
                            }
                            Message::HelloProof { proof } => {
                                let Some((role, nonce)) = worker_nonce else {
                                    return;
                                };
                                if !secret().verify_hello_proof(
                                    HelloSide::Peer,
                                    role,
                                    "",
                                    &nonce,
                                    &WORKER_NONCE,
                                    &proof,
                                ) {
                                    return;
                                }
                                out.extend(Message::Welcome.encode(id).unwrap_or_default());
                            }
                            _ => return,
                        }
                    }
                    let batch = match mode {
                        Fake::Reversed => {
                            if pending.len() >= 2 {
                                REVERSED_BATCHES.fetch_add(1, Ordering::Relaxed);
                            }
                            pending.drain(..).rev().collect()
                        }
                        _ => std::mem::take(&mut pending),
                    };
                    for (id, len) in batch {
                        served += 1;
                        let (reply_id, reply_len) = match mode {
                            Fake::Short => (id, len - 1),
                            Fake::WrongId => (id.wrapping_add(1000), len),
                            _ => (id, len),
                        };
                        if matches!(mode, Fake::ErrorOnThird) && served == 3 {
                            let e = Message::Error(ErrorReply::new(
                                ErrorCode::Unavailable,
                                "fake worker: draining, try elsewhere",
                            ));
                            out.extend(e.encode(id).unwrap_or_default());
                            continue;
                        }
                        let header = encode_read_range_reply_header(reply_id, reply_len, false)
                            .unwrap_or_else(|e| panic!("{e}"));
                        out.extend_from_slice(&header);
                        out.resize(out.len() + reply_len as usize, 0xAB);
                    }
                    if sock.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_are_matched_by_request_id_not_position() {
    let addr = fake_worker(Fake::Reversed).await;
    let mut c = wire(addr, "s3/bench/block.bin");
    c.depth = 8;
    let r = run(&c).await;
    assert!(r.ok, "{r:?}");
    assert!(r.requests > 20, "{r:?}");
    assert!(
        REVERSED_BATCHES.load(Ordering::Relaxed) > 0,
        "nothing was answered out of order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_frames_fail_the_run_and_hide_latency() {
    let addr = fake_worker(Fake::ErrorOnThird).await;
    let r = run(&wire(addr, "s3/bench/block.bin")).await;
    assert!(!r.ok);
    assert_eq!(r.errors, 1);
    assert!(r.latency_us.is_none(), "latency reported for a failed run");
    let e = r.first_error.unwrap_or_default();
    assert!(
        e.contains("Unavailable: fake worker: draining, try elsewhere"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_replies_and_wrong_ids_fail_the_run() {
    for (mode, want) in [
        (Fake::Short, "65535 bytes; 65536 were asked for"),
        (Fake::WrongId, "not in flight"),
    ] {
        let addr = fake_worker(mode).await;
        let r = run(&wire(addr, "s3/bench/block.bin")).await;
        assert!(!r.ok);
        assert!(r.errors >= 1 && r.latency_us.is_none());
        let e = r.first_error.unwrap_or_default();
        assert!(e.contains(want), "{e}");
    }
}
