//! `talon-gateway-proxy-bench`: the gateway's S3 and Azure adapters end to
//! end, on the cache route and the origin route, against one origin.
//!
//! Four deployments run at once against ONE dual-protocol origin stub:
//! S3 × Azure fronts × cache and origin routes. Each cache deployment is
//! its own coordinator, worker and gateway (route `cache`); each origin
//! deployment is a gateway with route `origin`. Two more arms frame them:
//!
//! * **control**: the same client straight to the stub's S3 API, no
//!   gateway: the origin's own ceiling under the origin model;
//! * **peers**, in front of the stub's S3 API and warmed like the cache arms:
//!   nginx as a caching reverse proxy (`proxy_cache` + `slice`, slices the
//!   size of the ranges) with `sendfile on`, the same nginx with `sendfile
//!   off` (each cached byte copied once through its user space: the floor
//!   for a gateway that relays bytes, as hyper cannot send a file), and
//!   Varnish (whole objects cached in memory, ranges cut from them). Each is
//!   skipped, with a line saying so, when it is not installed.
//!
//! The origin model is the stub's fault injection: a first-byte latency on
//! every request and a bandwidth cap on every response body (defaults 2 ms
//! and 256 MiB/s), so the origin is slower than loopback but a run stays
//! short. The stub runs without credentials, so it checks no signature on
//! either protocol and both adapters face an identical backend; the
//! gateways still sign their origin requests.
//!
//! The client is this crate's own, on hyper's HTTP/1.1 connection API
//! ([`talon_bench::http_load`]): a fixed number of workers, one keep-alive
//! connection each, GETs of aligned ranges (default 1 MiB) at random
//! offsets of a 64 MiB generated object. Gateway arms authenticate like the
//! SDKs (SigV4 for S3, Shared Key for Azure) and the gateways verify every
//! signature; the control arm signs too (the stub does not check); the
//! nginx arm is anonymous (nginx cannot verify either). Every response is
//! verified: status 206, length, `Content-Range`, SHA-256 against the
//! generator's bytes. A wrong one stops the run, is printed verbatim, and
//! the run exits 1.
//!
//! Rounds are paired and order-swapped: every round runs every arm for the
//! same number of requests, in the listed order in even rounds and reversed
//! in odd ones, so drift on the machine lands on all arms alike. Every arm
//! is warmed (each range read once) before round 1; the warmup is not
//! measured. CPU is `utime + stime` from `/proc/PID/stat` of the arm's own
//! processes (gateway, worker, coordinator; nginx's master and workers)
//! across the arm's measured time; the stub's CPU is reported separately.
//! Percentiles are over every measured request of every round, pooled.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use talon_bench::http_load::ProtocolLabel;
use talon_core::Backend;

use anyhow::bail;
use clap::Parser;
use talon_bench::deployment::{
    BenchSetup, Coordinator, Gateway, GatewaySpec, Geometry, Route, Stub, Worker, WorkerSpec,
    client_auth, run_bench,
};
use talon_bench::host::{HostInfo, load_line};
use talon_bench::http_load::{Auth, Length, LoadOutcome, LoadSpec, ObjectTarget, Pick, run_load};
use talon_bench::nginx::{Nginx, find_nginx};
use talon_bench::rounds::round_order;
use talon_bench::summary::{LatencySummary, fmt_latency, median, mib, spread};
use talon_bench::tls::BenchTls;
use talon_bench::varnish::{Varnish, find_varnishd};
use talon_bench::verify::ExpectedRanges;
use talon_bench::watch::Watched;
use talon_core::parse_byte_size;
use talon_loadgen::procfs::load_average;
use talon_loadgen::stats::thousands;
use talon_origin_stub::faults::FaultConfig;
use talon_origin_stub::generated::{GeneratedObject, GeneratedSet};

/// What the client is, for the output.
const CLIENT: &str = "talon-bench's own HTTP/1.1 client on hyper (conn::http1), one keep-alive connection per worker, no pipelining";

/// S3 × Azure fronts × cache and origin routes of the gateway, against one
/// origin stub, with a control arm (no gateway) and an nginx peer arm.
///
/// Starts every process from the release binaries (build them with `cargo
/// build --release --bins`), warms every arm, runs --rounds paired,
/// order-swapped rounds of --requests verified 1 MiB range GETs per arm,
/// and prints a markdown table; JSON Lines go to --out. Exits 1 on any
/// wrong response.
#[derive(Debug, Parser)]
#[command(name = "talon-gateway-proxy-bench", version)]
struct Args {
    /// Requests in flight per arm, one per keep-alive connection.
    #[arg(long, env = "TALON_PROXY_BENCH_CONCURRENCY", default_value_t = 8)]
    concurrency: usize,

    /// Measured requests per arm per round.
    #[arg(long, env = "TALON_PROXY_BENCH_REQUESTS", default_value_t = 2000)]
    requests: u64,

    /// Rounds (arm order reversed every other round; use an even number).
    #[arg(long, env = "TALON_PROXY_BENCH_ROUNDS", default_value_t = 4)]
    rounds: usize,

    /// Bytes per ranged GET; offsets are multiples of it.
    #[arg(long, env = "TALON_PROXY_BENCH_RANGE_SIZE", default_value = "1MiB", value_parser = parse_byte_size)]
    range_size: u64,

    /// Whole GETs (no `Range` header, answered 200) of an object of --object-size
    /// instead of ranges: the small-object point (`--whole-object --object-size 4KiB`).
    #[arg(long, env = "TALON_PROXY_BENCH_WHOLE_OBJECT")]
    whole_object: bool,

    /// With --whole-object: read this many distinct objects of --object-size (a
    /// generated set under `bench/small/`), each request one at random, instead of
    /// one object again and again: the small-object point over distinct objects
    /// (`--whole-object --object-size 4KiB --range-size 4KiB --objects 1000`).
    #[arg(long, env = "TALON_PROXY_BENCH_OBJECTS", default_value_t = 1)]
    objects: u64,

    /// Cold reads: after the rounds, this many fresh objects of --cold-size are each
    /// read whole once through the S3 cache gateway (first reader: the worker fills
    /// from the origin), once through the S3 cache gateway reading over TCP (another
    /// fresh object), and once straight from the stub, in rotating order; 0 = none.
    #[arg(long, env = "TALON_PROXY_BENCH_COLD_READS", default_value_t = 0)]
    cold_reads: usize,

    /// Size of each cold-read object.
    #[arg(long, env = "TALON_PROXY_BENCH_COLD_SIZE", default_value = "64MiB", value_parser = parse_byte_size)]
    cold_size: u64,

    /// Size of the generated object.
    #[arg(long, env = "TALON_PROXY_BENCH_OBJECT_SIZE", default_value = "64MiB", value_parser = parse_byte_size)]
    object_size: u64,

    /// Origin model: latency the stub adds before answering each request,
    /// milliseconds.
    #[arg(long, env = "TALON_PROXY_BENCH_ORIGIN_LATENCY_MS", default_value_t = 2)]
    origin_latency_ms: u64,

    /// Origin model: cap on each response body's rate, bytes per second
    /// (KiB/MiB/GiB suffixes); "off" for none.
    #[arg(long, env = "TALON_PROXY_BENCH_ORIGIN_BANDWIDTH", default_value = "256MiB", value_parser = parse_bandwidth)]
    origin_bandwidth: Bandwidth,

    /// Block size of the cache clusters.
    #[arg(long, env = "TALON_PROXY_BENCH_BLOCK_SIZE", default_value = "64MiB", value_parser = parse_byte_size)]
    block_size: u64,

    /// Skip the nginx peer arms.
    #[arg(long, env = "TALON_PROXY_BENCH_NO_NGINX")]
    no_nginx: bool,

    /// Skip the arm that reads the S3 cache cluster over TCP (local reads off).
    #[arg(long, env = "TALON_PROXY_BENCH_NO_TCP_ARM")]
    no_tcp_arm: bool,

    /// Skip the unsigned arms: for each cache cluster a second gateway that also takes
    /// unsigned reads, driven without a signature, beside the signed arm; the
    /// difference between the two is what verifying the signature costs.
    #[arg(long, env = "TALON_PROXY_BENCH_NO_UNSIGNED_ARMS")]
    no_unsigned_arms: bool,

    /// HTTPS arms as well: the S3 cache cluster read by a gateway with `--tls-cert`,
    /// and nginx's slice cache with `ssl` (a certificate for 127.0.0.1 made with the
    /// `openssl` command; the client is rustls and checks it).
    #[arg(long, env = "TALON_PROXY_BENCH_TLS")]
    tls: bool,

    /// Skip the Varnish peer arm.
    #[arg(long, env = "TALON_PROXY_BENCH_NO_VARNISH")]
    no_varnish: bool,

    /// nginx worker processes (default: one per core).
    #[arg(long, env = "TALON_PROXY_BENCH_NGINX_WORKERS")]
    nginx_workers: Option<usize>,

    /// Seed of the range picker.
    #[arg(long, env = "TALON_PROXY_BENCH_SEED", default_value_t = 1)]
    seed: u64,

    /// JSON Lines file (default: bench/results/gateway-proxy-bench.jsonl in
    /// the repository).
    #[arg(long, env = "TALON_PROXY_BENCH_OUT")]
    out: Option<PathBuf>,

    /// Also print the JSON Lines on stdout (the table then goes to stderr).
    #[arg(long, env = "TALON_PROXY_BENCH_JSON")]
    json: bool,

    /// Keep the temporary folder (every process's log, configs, caches)
    /// instead of removing it at exit; its path is printed.
    #[arg(long, env = "TALON_PROXY_BENCH_KEEP_DIR")]
    keep_dir: bool,

    /// Folder of the Talon binaries (default: this binary's folder).
    #[arg(long, env = "TALON_PROXY_BENCH_BIN_DIR")]
    bin_dir: Option<PathBuf>,
}

/// A bandwidth cap in bytes per second; `None` is no cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bandwidth(Option<u64>);

fn parse_bandwidth(s: &str) -> Result<Bandwidth, String> {
    if s.trim() == "off" {
        return Ok(Bandwidth(None));
    }
    match parse_byte_size(s)? {
        0 => Err("the bandwidth must be positive (or \"off\")".into()),
        n => Ok(Bandwidth(Some(n))),
    }
}

fn progress(message: &str) {
    eprintln!("[gateway-proxy-bench] {message}");
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One arm: what it talks to and whose CPU it is charged.
struct Arm {
    /// For tables: `S3, cache`.
    name: String,
    /// For JSON: `s3-cache`.
    key: String,
    protocol: Backend,
    /// `cache`, `origin`, `direct` (control), `nginx`.
    path: &'static str,
    target: Arc<ObjectTarget>,
    /// The arm's own processes, by role (`gateway`, `worker`, …).
    processes: Vec<(String, Watched)>,
    /// The per-round outcomes, in round order.
    rounds: Vec<LoadOutcome>,
}

/// An arm before its warmup: name, key, protocol, path, target, pids.
struct PendingArm {
    name: String,
    key: String,
    protocol: Backend,
    path: &'static str,
    target: ObjectTarget,
    pids: Vec<(&'static str, u32)>,
    /// Whether the arm's CPU includes its processes' children (a peer's workers).
    with_children: bool,
}

/// The deployments, kept alive until the run ends (dropping them kills
/// every process).
struct Deployments {
    stub: Stub,
    _clusters: Vec<(Coordinator, Worker)>,
    _gateways: Vec<Gateway>,
    _nginx: Vec<Nginx>,
    _varnish: Option<Varnish>,
}

fn validate(args: &Args) -> anyhow::Result<()> {
    if args.concurrency == 0 || args.requests == 0 || args.rounds == 0 {
        bail!("--concurrency, --requests and --rounds must be at least 1");
    }
    if args.range_size == 0 || args.range_size > args.object_size {
        bail!("--range-size must be between 1 byte and --object-size");
    }
    if args.whole_object && args.range_size != args.object_size {
        bail!("--whole-object reads the whole object: give --range-size equal to --object-size");
    }
    if args.objects == 0 || (args.objects > 1 && !args.whole_object) {
        bail!("--objects must be at least 1, and more than 1 only with --whole-object");
    }
    if !args.block_size.is_power_of_two() {
        bail!("--block-size must be a power of two");
    }
    Ok(())
}

fn origin_model(args: &Args) -> serde_json::Value {
    serde_json::json!({
        "latency_ms_per_request": args.origin_latency_ms,
        "bandwidth_bytes_per_sec_per_response": args.origin_bandwidth.0,
        "credentials_checked": false,
    })
}

fn origin_model_line(args: &Args) -> String {
    format!(
        "Origin model: the stub adds {} ms before every request and caps every response body at {}; \
         it checks no signature (both protocols alike).",
        args.origin_latency_ms,
        args.origin_bandwidth
            .0
            .map_or_else(|| "no limit".to_owned(), |b| format!("{:.0} MiB/s", mib(b)))
    )
}

async fn run(args: Args) -> anyhow::Result<bool> {
    validate(&args)?;
    let began = Instant::now();
    let load_at_start = load_average();
    let BenchSetup {
        binaries,
        host,
        mut lines,
        tmp,
    } = BenchSetup::new(
        "gateway-proxy-bench",
        args.bin_dir.as_deref(),
        args.out.clone(),
        args.json,
        args.keep_dir,
    )?;
    progress(&format!("host: {}", host.describe()));
    for (k, v) in talon_bench::deployment::passed_through_env() {
        progress(&format!("passed to the parts: {k}={v}"));
    }

    let object = GeneratedObject::new("bench", "proxy.bin", args.object_size, 3);
    // Cold-read objects: two per cold read (one per cache arm), never read before.
    let cold_objects: Vec<GeneratedObject> = (0..args.cold_reads * 2)
        .map(|i| {
            GeneratedObject::new(
                "bench",
                format!("cold-{i}.bin"),
                args.cold_size,
                100 + i as u64,
            )
        })
        .collect();
    let small = small_set(&args);
    let deployed = Deployer::deploy(
        &args,
        &binaries,
        tmp.path(),
        &object,
        &cold_objects,
        small.as_ref(),
    )
    .await?;

    progress(&format!(
        "computing the SHA-256 of every {} range of the {} MiB object",
        human_bytes(args.range_size),
        args.object_size >> 20
    ));
    let expected = Arc::new(if let Some(set) = &small {
        ExpectedRanges::whole_objects((0..set.count).map(|i| set.object(i)).collect())
            .ok_or_else(|| anyhow::anyhow!("--objects: the set is empty"))?
    } else if args.whole_object {
        ExpectedRanges::whole_object(object.clone())
    } else {
        ExpectedRanges::new(object.clone(), args.range_size)
    });
    let stub_set = Watched::new(vec![deployed.deployments.stub.process.pid()], false);
    let Some(mut arms) = warm(&args, deployed.arms, &expected).await else {
        return Ok(false);
    };
    if !measure_rounds(&args, &host, &mut arms, &expected, &stub_set, &mut lines).await? {
        return Ok(false);
    }
    let Some(cold) =
        cold_reads(&args, &host, &deployed.cold_arms, &cold_objects, &mut lines).await?
    else {
        return Ok(false);
    };
    drop(deployed.deployments);

    let mut rows = Vec::new();
    for arm in &arms {
        let s = ArmSummary::of(arm);
        lines.emit(&summary_json(&args, &host, arm, &s))?;
        rows.push((arm.name.clone(), s));
    }
    let table = render(
        &args,
        &host,
        &rows,
        began.elapsed(),
        (load_at_start, load_average()),
    );
    let table = table + &render_cold(&args, &cold);
    if args.json {
        eprintln!("{table}");
    } else {
        println!("{table}");
    }
    eprintln!("JSON Lines: {}", lines.path().display());
    Ok(true)
}

/// What [`Deployer::deploy`] started: the processes, the arms to warm and measure, and
/// the endpoints cold reads go through, by name.
struct Deployed {
    deployments: Deployments,
    arms: Vec<PendingArm>,
    cold_arms: Vec<(&'static str, String)>,
}

/// How one arm's gateway differs from the plain one (local reads, signed requests
/// only, plain HTTP).
#[derive(Clone, Copy)]
struct GatewayVariant<'t> {
    /// Reads the worker through its local socket (`false`: over TCP).
    local_reads: bool,
    /// Also takes unsigned reads.
    unsigned_reads: bool,
    /// Serves HTTPS with this certificate.
    tls: Option<&'t BenchTls>,
}

impl GatewayVariant<'_> {
    const PLAIN: GatewayVariant<'static> = GatewayVariant {
        local_reads: true,
        unsigned_reads: false,
        tls: None,
    };
}

/// Starts every arm's processes on loopback: the origin stub (with the origin model),
/// per protocol a cache cluster and an origin-route gateway, the control arm, and the
/// peers (nginx, Varnish) where installed and not left out.
struct Deployer<'a> {
    args: &'a Args,
    binaries: &'a talon_bench::deployment::Binaries,
    dir: &'a std::path::Path,
    object: &'a GeneratedObject,
    arms: Vec<PendingArm>,
    cold_arms: Vec<(&'static str, String)>,
    clusters: Vec<(Coordinator, Worker)>,
    gateways: Vec<Gateway>,
    /// The HTTPS arms' certificate and client (`--tls`).
    tls: Option<BenchTls>,
}

impl<'a> Deployer<'a> {
    async fn deploy(
        args: &'a Args,
        binaries: &'a talon_bench::deployment::Binaries,
        dir: &'a std::path::Path,
        object: &'a GeneratedObject,
        cold_objects: &[GeneratedObject],
        small: Option<&GeneratedSet>,
    ) -> anyhow::Result<Deployed> {
        progress("starting the origin stub");
        let stub_objects: Vec<GeneratedObject> = std::iter::once(object.clone())
            .chain(cold_objects.iter().cloned())
            .collect();
        let sets: Vec<GeneratedSet> = small.into_iter().cloned().collect();
        let stub = Stub::start_with_objects_and_sets(binaries, dir, &stub_objects, &sets).await?;
        stub.set_faults(&FaultConfig {
            latency_ms: args.origin_latency_ms,
            bandwidth_bytes_per_sec: args.origin_bandwidth.0,
            ..FaultConfig::default()
        })
        .await?;
        progress(&origin_model_line(args));

        let tls = if args.tls {
            let tls = BenchTls::make(dir)?;
            progress(&format!(
                "HTTPS arms: certificate {} for 127.0.0.1",
                tls.cert.display()
            ));
            Some(tls)
        } else {
            None
        };
        let mut d = Deployer {
            args,
            binaries,
            dir,
            object,
            arms: Vec::new(),
            cold_arms: Vec::new(),
            clusters: Vec::new(),
            gateways: Vec::new(),
            tls,
        };
        for protocol in [Backend::S3, Backend::Azure] {
            d.cache_arms(&stub, protocol).await?;
        }
        for protocol in [Backend::S3, Backend::Azure] {
            d.origin_arm(&stub, protocol).await?;
        }
        d.arms.push(PendingArm {
            name: "control: S3 straight to the stub".into(),
            key: "control-s3-direct".into(),
            protocol: Backend::S3,
            path: "direct",
            target: target(Backend::S3, &stub.s3_url, object, client_auth(Backend::S3)?)?,
            pids: Vec::new(),
            with_children: false,
        });
        d.cold_arms
            .push(("straight from the origin (the stub)", stub.s3_url.clone()));
        let upstream = stub.s3_url.trim_start_matches("http://").to_owned();
        let nginx = d.nginx_arms(&upstream).await?;
        let varnish = d.varnish_arm(&upstream).await?;
        Ok(Deployed {
            deployments: Deployments {
                stub,
                _clusters: d.clusters,
                _gateways: d.gateways,
                _nginx: nginx,
                _varnish: varnish,
            },
            arms: d.arms,
            cold_arms: d.cold_arms,
        })
    }

    /// A gateway of this deployment's shape on route `cache` (or `origin` without a
    /// coordinator).
    async fn gateway(
        &self,
        stub: &Stub,
        name: &str,
        front: Backend,
        coordinator: Option<&str>,
        variant: GatewayVariant<'_>,
    ) -> anyhow::Result<Gateway> {
        Ok(Gateway::start(
            self.binaries,
            self.dir,
            stub,
            GatewaySpec {
                origin_request_limit: None,
                name,
                front,
                route: if coordinator.is_some() {
                    Route::Cache
                } else {
                    Route::Origin
                },
                coordinator,
                block_size: self.args.block_size,
                local_reads: variant.local_reads,
                max_staleness_ms: None,
                hedge_budget: None,
                host: None,
                unsigned_reads: variant.unsigned_reads,
                tls: variant.tls,
                read_ahead_objects: None,
            },
        )
        .await?)
    }

    /// One protocol's cache cluster (coordinator, worker, gateway reading the worker's
    /// disk through its local socket) and its arm; for S3, unless `--no-tcp-arm`, a
    /// second gateway on the same cluster reading over TCP, as one on another host would
    /// (what the local socket saves).
    async fn cache_arms(&mut self, stub: &Stub, protocol: Backend) -> anyhow::Result<()> {
        let args = self.args;
        let p = protocol.label().to_ascii_lowercase();
        progress(&format!(
            "starting the {} cache deployment (coordinator, worker, gateway)",
            protocol.label()
        ));
        let mut coordinator = Coordinator::start(
            self.binaries,
            self.dir,
            &format!("coordinator-{p}"),
            Geometry {
                block_size: args.block_size,
                page_size: 1 << 20,
            },
        )
        .await?;
        let coordinator_url = coordinator.url.clone();
        let worker = Worker::start(
            self.binaries,
            self.dir,
            stub,
            &mut coordinator,
            WorkerSpec {
                origin_request_limit: None,
                max_blocks: None,
                id: &format!("worker-{p}"),
                coordinator: &coordinator_url,
                advertise: None,
                capacity: args.object_size * 2
                    + (args.objects - 1) * (1 << 20)
                    + args.cold_size * 2 * args.cold_reads as u64
                    + (64 << 20),
                page_size: 1 << 20,
                host: None,
            },
        )
        .await?;
        let cluster_pids = |gateway: &Gateway| {
            vec![
                ("gateway", gateway.process.pid()),
                ("worker", worker.process.pid()),
                ("coordinator", coordinator.process.pid()),
            ]
        };
        let gateway = self
            .gateway(
                stub,
                &format!("gateway-{p}-cache"),
                protocol,
                Some(&coordinator_url),
                GatewayVariant::PLAIN,
            )
            .await?;
        self.arms.push(PendingArm {
            name: format!("{}, cache", protocol.label()),
            key: format!("{p}-cache"),
            protocol,
            path: "cache",
            target: target(protocol, &gateway.url, self.object, client_auth(protocol)?)?,
            pids: cluster_pids(&gateway),
            with_children: false,
        });
        if protocol == Backend::S3 {
            self.cold_arms
                .push(("through the cache (local socket)", gateway.url.clone()));
        }
        self.gateways.push(gateway);
        if !args.no_unsigned_arms {
            let unsigned = self
                .gateway(
                    stub,
                    &format!("gateway-{p}-cache-unsigned"),
                    protocol,
                    Some(&coordinator_url),
                    GatewayVariant {
                        unsigned_reads: true,
                        ..GatewayVariant::PLAIN
                    },
                )
                .await?;
            self.arms.push(PendingArm {
                name: format!("{}, cache, unsigned", protocol.label()),
                key: format!("{p}-cache-unsigned"),
                protocol,
                path: "cache",
                target: target(protocol, &unsigned.url, self.object, Auth::Anonymous)?,
                pids: cluster_pids(&unsigned),
                with_children: false,
            });
            self.gateways.push(unsigned);
        }
        if protocol == Backend::S3 && !args.no_tcp_arm {
            let tcp = self
                .gateway(
                    stub,
                    "gateway-s3-cache-tcp",
                    protocol,
                    Some(&coordinator_url),
                    GatewayVariant {
                        local_reads: false,
                        ..GatewayVariant::PLAIN
                    },
                )
                .await?;
            self.arms.push(PendingArm {
                name: "S3, cache over TCP (local reads off)".into(),
                key: "s3-cache-tcp".into(),
                protocol,
                path: "cache",
                target: target(protocol, &tcp.url, self.object, client_auth(protocol)?)?,
                pids: cluster_pids(&tcp),
                with_children: false,
            });
            self.cold_arms
                .push(("through the cache over TCP", tcp.url.clone()));
            self.gateways.push(tcp);
        }
        if let (Backend::S3, Some(tls)) = (protocol, self.tls.clone()) {
            let https = self
                .gateway(
                    stub,
                    "gateway-s3-cache-https",
                    protocol,
                    Some(&coordinator_url),
                    GatewayVariant {
                        tls: Some(&tls),
                        ..GatewayVariant::PLAIN
                    },
                )
                .await?;
            self.arms.push(PendingArm {
                name: "S3, cache over HTTPS".into(),
                key: "s3-cache-https".into(),
                protocol,
                path: "cache",
                target: target(protocol, &https.url, self.object, client_auth(protocol)?)?
                    .over_tls(tls.client()),
                pids: cluster_pids(&https),
                with_children: false,
            });
            self.gateways.push(https);
        }
        self.clusters.push((coordinator, worker));
        Ok(())
    }

    /// One protocol's gateway on route `origin` (no cache) and its arm.
    async fn origin_arm(&mut self, stub: &Stub, protocol: Backend) -> anyhow::Result<()> {
        let p = protocol.label().to_ascii_lowercase();
        progress(&format!(
            "starting the {} origin deployment (gateway)",
            protocol.label()
        ));
        let gateway = self
            .gateway(
                stub,
                &format!("gateway-{p}-origin"),
                protocol,
                None,
                GatewayVariant {
                    local_reads: false,
                    ..GatewayVariant::PLAIN
                },
            )
            .await?;
        self.arms.push(PendingArm {
            name: format!("{}, origin", protocol.label()),
            key: format!("{p}-origin"),
            protocol,
            path: "origin",
            target: target(protocol, &gateway.url, self.object, client_auth(protocol)?)?,
            pids: vec![("gateway", gateway.process.pid())],
            with_children: false,
        });
        self.gateways.push(gateway);
        Ok(())
    }

    /// nginx's slice cache in front of the stub, with sendfile on (nginx's default for
    /// a slice cache) and off (every cached byte read into nginx's buffers and written:
    /// one copy through user space, as a relaying gateway must). None when nginx is not
    /// installed or `--no-nginx`.
    async fn nginx_arms(&mut self, upstream: &str) -> anyhow::Result<Vec<Nginx>> {
        let args = self.args;
        let mut nginx = Vec::new();
        if args.no_nginx {
            progress("nginx arms: skipped (--no-nginx)");
            return Ok(nginx);
        }
        let Some(binary) = find_nginx() else {
            progress(
                "nginx arms: SKIPPED, nginx is not installed (as root: apt-get install -y nginx; \
                 `just gateway-proxy-bench` installs it)",
            );
            return Ok(nginx);
        };
        let workers = args
            .nginx_workers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let mut kinds = vec![
            (
                true,
                None,
                "peer: nginx slice cache (S3, anonymous)",
                "nginx-slice-cache",
                "nginx",
            ),
            (
                false,
                None,
                "peer: nginx slice cache, sendfile off",
                "nginx-slice-cache-copy",
                "nginx-copy",
            ),
        ];
        if let Some(tls) = &self.tls {
            kinds.push((
                true,
                Some(tls.clone()),
                "peer: nginx slice cache over HTTPS",
                "nginx-slice-cache-https",
                "nginx-https",
            ));
        }
        for (sendfile, tls, name, key, folder) in kinds {
            progress(&format!("starting {name} ({})", binary.display()));
            let n = Nginx::start(
                &binary,
                &self.dir.join(folder),
                upstream,
                args.range_size,
                workers,
                sendfile,
                tls.as_ref(),
            )
            .await?;
            let mut arm_target = target(Backend::S3, &n.url, self.object, Auth::Anonymous)?;
            if let Some(tls) = &tls {
                arm_target = arm_target.over_tls(tls.client());
            }
            self.arms.push(PendingArm {
                name: name.into(),
                key: key.into(),
                protocol: Backend::S3,
                path: "nginx",
                target: arm_target,
                pids: vec![("nginx", n.process.pid())],
                with_children: true,
            });
            nginx.push(n);
        }
        Ok(nginx)
    }

    /// Varnish in front of the stub; None when it is not installed or `--no-varnish`.
    async fn varnish_arm(&mut self, upstream: &str) -> anyhow::Result<Option<Varnish>> {
        if self.args.no_varnish {
            progress("varnish arm: skipped (--no-varnish)");
            return Ok(None);
        }
        let Some(binary) = find_varnishd() else {
            progress(
                "varnish arm: SKIPPED, varnishd is not installed (as root: apt-get install -y \
                 varnish; `just gateway-proxy-bench` installs it)",
            );
            return Ok(None);
        };
        progress(&format!("starting varnish ({})", binary.display()));
        let v = Varnish::start(
            &binary,
            &self.dir.join("varnish"),
            upstream,
            self.args.object_size * 2 + (64 << 20),
        )
        .await?;
        self.arms.push(PendingArm {
            name: "peer: varnish (S3, anonymous)".into(),
            key: "varnish".into(),
            protocol: Backend::S3,
            path: "varnish",
            target: target(Backend::S3, &v.url, self.object, Auth::Anonymous)?,
            pids: vec![("varnish", v.process.pid())],
            with_children: true,
        });
        Ok(Some(v))
    }
}

/// Warms every arm: each range once (fills the caches, opens the gateways' origin
/// connections), not measured. None, with the failure printed, when a warm-up read
/// went wrong.
async fn warm(
    args: &Args,
    arms: Vec<PendingArm>,
    expected: &Arc<ExpectedRanges>,
) -> Option<Vec<Arm>> {
    let mut ready = Vec::new();
    for PendingArm {
        name,
        key,
        protocol,
        path,
        target,
        pids,
        with_children,
    } in arms
    {
        progress(&format!(
            "warming {name}: each of {} ranges once",
            expected.len()
        ));
        if let Some(tls) = &target.tls {
            match tls.agreed(&target.connect).await {
                Ok(agreed) => progress(&format!("{name}: TLS agreed {agreed}")),
                Err(e) => {
                    eprintln!("{name}: {e}");
                    return None;
                }
            }
        }
        let target = Arc::new(target);
        let warm = run_load(LoadSpec {
            target: target.clone(),
            expected: expected.clone(),
            concurrency: args.concurrency,
            pick: Pick::EachOnce,
            length: Length::Requests(expected.len() as u64),
            watch: Vec::new(),
        })
        .await;
        if let Some(e) = warm.first_error {
            eprintln!("\nFAILED while warming {name}; the failure, verbatim:\n{e}");
            return None;
        }
        // nginx's set is its master and whatever children it has at each
        // reading (workers, cache manager, the short-lived cache loader).
        let processes = pids
            .iter()
            .map(|&(role, pid)| (role.to_owned(), Watched::new(vec![pid], with_children)))
            .collect();
        ready.push(Arm {
            name,
            key,
            protocol,
            path,
            target,
            processes,
            rounds: Vec::new(),
        });
    }
    Some(ready)
}

/// The measured rounds: every arm once per round, the order reversed every other
/// round, each round's line printed and written. False, with the failure printed, when
/// a response went wrong (the run stops there).
async fn measure_rounds(
    args: &Args,
    host: &HostInfo,
    arms: &mut [Arm],
    expected: &Arc<ExpectedRanges>,
    stub_set: &Watched,
    lines: &mut talon_bench::results::JsonLines,
) -> anyhow::Result<bool> {
    progress(&format!(
        "{} rounds × {} arms × {} requests, concurrency {}, arm order reversed every other round",
        args.rounds,
        arms.len(),
        args.requests,
        args.concurrency
    ));
    for round in 0..args.rounds {
        for (position, i) in round_order(arms.len(), round).into_iter().enumerate() {
            let arm = &mut arms[i];
            let outcome = run_load(LoadSpec {
                target: arm.target.clone(),
                expected: expected.clone(),
                concurrency: args.concurrency,
                pick: Pick::Random {
                    seed: args
                        .seed
                        .wrapping_add((round as u64) << 32)
                        .wrapping_add((i as u64) << 16),
                },
                length: Length::Requests(args.requests),
                watch: arm
                    .processes
                    .iter()
                    .cloned()
                    .chain([(STUB.to_owned(), stub_set.clone())])
                    .collect(),
            })
            .await;
            let latency = LatencySummary::of(&outcome.latencies);
            progress(&format!(
                "round {}/{} #{}: {:<40} {:>6} rps, p50 {}, p99 {}, arm CPU/req {}{}",
                round + 1,
                args.rounds,
                position + 1,
                arm.name,
                thousands(outcome.rps()),
                latency
                    .as_ref()
                    .map_or_else(|| "-".into(), |l| fmt_latency(l.p50_us)),
                latency
                    .as_ref()
                    .map_or_else(|| "-".into(), |l| fmt_latency(l.p99_us)),
                arm_cpu_s(&outcome)
                    .filter(|_| outcome.requests > 0)
                    .map(|s| s * 1e6 / outcome.requests as f64)
                    .map_or_else(|| "-".into(), |us| format!("{us:.0} µs")),
                if outcome.errors > 0 { ", FAILED" } else { "" }
            ));
            lines.emit(&round_json(
                args, host, arm, round, position, &outcome, &latency,
            ))?;
            let failure = outcome.first_error.clone();
            arm.rounds.push(outcome);
            if let Some(e) = failure {
                eprintln!(
                    "\nFAILED: a response of {} (round {}) went wrong; the run stopped. Verbatim:\n{e}",
                    arms[i].name,
                    round + 1
                );
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// One cold-read arm's whole-GET times, seconds, in object order.
struct ColdArm {
    name: String,
    seconds: Vec<f64>,
}

/// Reads each fresh object whole once per arm (the cache arms each get their own
/// object: the first read of it is the cold one), rotating which arm goes first, and
/// verifies every byte. `None` when a read failed (reported on stderr).
async fn cold_reads(
    args: &Args,
    host: &HostInfo,
    arms: &[(&str, String)],
    objects: &[GeneratedObject],
    lines: &mut talon_bench::results::JsonLines,
) -> anyhow::Result<Option<Vec<ColdArm>>> {
    let mut out: Vec<ColdArm> = arms
        .iter()
        .map(|(name, _)| ColdArm {
            name: (*name).to_owned(),
            seconds: Vec::new(),
        })
        .collect();
    if args.cold_reads == 0 {
        return Ok(Some(out));
    }
    progress(&format!(
        "cold reads: {} × {} whole GETs of fresh {} objects",
        args.cold_reads,
        arms.len(),
        human_bytes(args.cold_size)
    ));
    for i in 0..args.cold_reads {
        let n = arms.len();
        for j in 0..n {
            let a = (i + j) % n;
            let (name, url) = &arms[a];
            // Arm a reads object 2i or 2i+1: each cache arm a fresh one; the stub
            // keeps no cache, so it reads the first.
            let object = &objects[2 * i + usize::from(a == 1)];
            let expected = Arc::new(ExpectedRanges::whole_object(object.clone()));
            let target = Arc::new(target(Backend::S3, url, object, client_auth(Backend::S3)?)?);
            let outcome = run_load(LoadSpec {
                target,
                expected,
                concurrency: 1,
                pick: Pick::EachOnce,
                length: Length::Requests(1),
                watch: Vec::new(),
            })
            .await;
            if let Some(e) = outcome.first_error {
                eprintln!("\nFAILED: a cold read {name} went wrong. Verbatim:\n{e}");
                return Ok(None);
            }
            let seconds = outcome.elapsed.as_secs_f64();
            progress(&format!(
                "cold read {}/{}: {name:<40} {:.0} ms",
                i + 1,
                args.cold_reads,
                seconds * 1e3
            ));
            lines.emit(&serde_json::json!({
                "bench": "gateway-proxy-bench",
                "kind": "cold",
                "arm": name,
                "object": object.key,
                "object_bytes": object.size,
                "read": i,
                "position": j,
                "seconds": seconds,
                "origin_model": origin_model(args),
                "host": host,
                "unix_time_s": unix_now(),
            }))?;
            out[a].seconds.push(seconds);
        }
    }
    Ok(Some(out))
}

fn render_cold(args: &Args, cold: &[ColdArm]) -> String {
    let Some(straight) = cold
        .last()
        .and_then(|a| median(&a.seconds))
        .filter(|_| args.cold_reads > 0)
    else {
        return String::new();
    };
    let mut out = format!(
        "\n## Cold reads\n\nA fresh {} object read whole, once per arm, {} times (arm order rotating).\n\n\
         | arm | median | min | max | against straight from the origin |\n|---|--:|--:|--:|--:|\n",
        human_bytes(args.cold_size),
        args.cold_reads
    );
    for arm in cold {
        let (lo, hi) = arm
            .seconds
            .iter()
            .fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        let m = median(&arm.seconds).unwrap_or(f64::NAN);
        out.push_str(&format!(
            "| {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.2}× |\n",
            arm.name,
            m * 1e3,
            lo * 1e3,
            hi * 1e3,
            m / straight
        ));
    }
    out
}

fn target(
    protocol: Backend,
    url: &str,
    object: &GeneratedObject,
    auth: Auth,
) -> anyhow::Result<ObjectTarget> {
    Ok(match protocol {
        Backend::S3 => ObjectTarget::s3(url, &object.bucket, &object.key, auth)?,
        Backend::Azure => ObjectTarget::azure(url, &object.bucket, &object.key, auth)?,
    })
}

/// `--objects`' distinct objects (more than one): a generated set under
/// `bench/small/` in the bench's bucket, every object --object-size bytes.
fn small_set(args: &Args) -> Option<GeneratedSet> {
    (args.objects > 1).then(|| GeneratedSet {
        bucket: "bench".into(),
        prefix: "small/".into(),
        count: args.objects,
        min_size: args.object_size,
        max_size: args.object_size,
        seed: 5,
    })
}

fn human_bytes(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

/// The name the stub's CPU is recorded under.
const STUB: &str = "stub";

/// CPU of the arm's own processes (everything watched but the stub);
/// `None` for an arm without processes (the control) or a failed sample.
fn arm_cpu_s(o: &LoadOutcome) -> Option<f64> {
    let own: Vec<f64> = o
        .cpu
        .iter()
        .filter(|c| c.name != STUB)
        .map(|c| c.total_s())
        .collect();
    (!own.is_empty()).then(|| own.iter().sum())
}

fn cpu_s(o: &LoadOutcome, name: &str) -> Option<f64> {
    o.cpu.iter().find(|c| c.name == name).map(|c| c.total_s())
}

fn cpu_per_request_us(o: &LoadOutcome, name: &str) -> Option<f64> {
    let s = cpu_s(o, name)?;
    (o.requests > 0).then(|| s * 1e6 / o.requests as f64)
}

fn round_json(
    args: &Args,
    host: &HostInfo,
    arm: &Arm,
    round: usize,
    position: usize,
    o: &LoadOutcome,
    latency: &Option<LatencySummary>,
) -> serde_json::Value {
    let secs = o.elapsed.as_secs_f64().max(1e-9);
    serde_json::json!({
        "bench": "gateway-proxy-bench",
        "kind": "round",
        "arm": arm.name,
        "arm_key": arm.key,
        "protocol": arm.protocol.name(),
        "path": arm.path,
        "auth": arm.target.auth.name(),
        "client": CLIENT,
        "round": round,
        "position_in_round": position,
        "concurrency": args.concurrency,
        "range_bytes": args.range_size,
        "object_bytes": args.object_size,
        "whole_object": args.whole_object,
        "objects": args.objects,
        "requests": o.requests,
        "elapsed_s": o.elapsed.as_secs_f64(),
        "rps": o.rps(),
        "mib_per_s": o.mib_per_s(),
        "latency_us": latency,
        "errors": o.errors,
        "first_error": o.first_error,
        "arm_processes": arm
            .processes
            .iter()
            .map(|(role, set)| serde_json::json!({"role": role, "pids": set.pids()}))
            .collect::<Vec<_>>(),
        "arm_cpu_s": arm_cpu_s(o),
        "arm_cpu_s_by_process": o
            .cpu
            .iter()
            .filter(|c| c.name != STUB)
            .map(|c| (c.name.clone(), c.total_s()))
            .collect::<std::collections::BTreeMap<_, _>>(),
        "arm_cores_busy": arm_cpu_s(o).map(|c| c / secs),
        "arm_cpu_per_request_us": arm_cpu_s(o)
            .filter(|_| o.requests > 0)
            .map(|c| c * 1e6 / o.requests as f64),
        "stub_cpu_s": cpu_s(o, STUB),
        "stub_cores_busy": cpu_s(o, STUB).map(|c| c / secs),
        "stub_cpu_per_request_us": cpu_per_request_us(o, STUB),
        "client_cores_busy": o.client_cpu.as_ref().map(|c| c.total_s() / secs),
        "origin_model": origin_model(args),
        "loadavg_1m": load_average(),
        "host": host,
        "unix_time_s": unix_now(),
    })
}

/// An arm over all its rounds.
struct ArmSummary {
    rps: Vec<f64>,
    mib_per_s: Vec<f64>,
    pooled: Option<LatencySummary>,
    requests: u64,
    elapsed_s: f64,
    arm_cpu_s: Option<f64>,
    stub_cpu_s: Option<f64>,
    client_cpu_s: Option<f64>,
}

impl ArmSummary {
    fn of(arm: &Arm) -> ArmSummary {
        let all: Vec<Duration> = arm
            .rounds
            .iter()
            .flat_map(|o| o.latencies.iter().copied())
            .collect();
        let sum = |name: &str| -> Option<f64> {
            arm.rounds
                .iter()
                .map(|o| cpu_s(o, name))
                .sum::<Option<f64>>()
        };
        ArmSummary {
            rps: arm.rounds.iter().map(LoadOutcome::rps).collect(),
            mib_per_s: arm.rounds.iter().map(LoadOutcome::mib_per_s).collect(),
            pooled: LatencySummary::of(&all),
            requests: arm.rounds.iter().map(|o| o.requests).sum(),
            elapsed_s: arm.rounds.iter().map(|o| o.elapsed.as_secs_f64()).sum(),
            arm_cpu_s: arm.rounds.iter().map(arm_cpu_s).sum::<Option<f64>>(),
            stub_cpu_s: sum(STUB),
            client_cpu_s: arm
                .rounds
                .iter()
                .map(|o| o.client_cpu.as_ref().map(|c| c.total_s()))
                .sum::<Option<f64>>(),
        }
    }

    fn per_request_us(&self, cpu: Option<f64>) -> Option<f64> {
        cpu.filter(|_| self.requests > 0)
            .map(|c| c * 1e6 / self.requests as f64)
    }

    /// CPU seconds per GiB served, for ranges of `range_bytes`.
    fn per_gib_s(&self, cpu: Option<f64>, range_bytes: u64) -> Option<f64> {
        self.per_request_us(cpu)
            .filter(|_| range_bytes > 0)
            .map(|us| us / 1e6 * (1u64 << 30) as f64 / range_bytes as f64)
    }

    fn busy(&self, cpu: Option<f64>) -> Option<f64> {
        cpu.filter(|_| self.elapsed_s > 0.0)
            .map(|c| c / self.elapsed_s)
    }
}

fn summary_json(args: &Args, host: &HostInfo, arm: &Arm, s: &ArmSummary) -> serde_json::Value {
    let (lo, hi) = spread(&s.rps).unwrap_or((0.0, 0.0));
    serde_json::json!({
        "bench": "gateway-proxy-bench",
        "kind": "summary",
        "arm": arm.name,
        "arm_key": arm.key,
        "protocol": arm.protocol.name(),
        "path": arm.path,
        "auth": arm.target.auth.name(),
        "client": CLIENT,
        "rounds": arm.rounds.len(),
        "requests_per_round": args.requests,
        "concurrency": args.concurrency,
        "range_bytes": args.range_size,
        "object_bytes": args.object_size,
        "whole_object": args.whole_object,
        "objects": args.objects,
        "rps_median": median(&s.rps),
        "rps_min": lo,
        "rps_max": hi,
        "rps_per_round": s.rps,
        "mib_per_s_median": median(&s.mib_per_s),
        "latency_us_pooled": s.pooled,
        "percentiles": "pooled over every measured request of every round",
        "arm_cpu_per_request_us": s.per_request_us(s.arm_cpu_s),
        "arm_cpu_s_per_gib": s.per_gib_s(s.arm_cpu_s, args.range_size),
        "arm_cores_busy": s.busy(s.arm_cpu_s),
        "stub_cpu_per_request_us": s.per_request_us(s.stub_cpu_s),
        "stub_cores_busy": s.busy(s.stub_cpu_s),
        "client_cores_busy": s.busy(s.client_cpu_s),
        "origin_model": origin_model(args),
        "loadavg_1m": load_average(),
        "host": host,
        "unix_time_s": unix_now(),
    })
}

fn render(
    args: &Args,
    host: &HostInfo,
    rows: &[(String, ArmSummary)],
    took: Duration,
    loads: (Option<f64>, Option<f64>),
) -> String {
    let workload = if args.objects > 1 {
        format!(
            "Whole GETs of {} distinct {} objects, one at random each",
            thousands(args.objects as f64),
            human_bytes(args.object_size)
        )
    } else if args.whole_object {
        format!("Whole GETs of a {} object", human_bytes(args.object_size))
    } else {
        format!(
            "{} ranges at random aligned offsets of a {} object",
            human_bytes(args.range_size),
            human_bytes(args.object_size)
        )
    };
    let mut out = format!(
        "\n## Gateway proxy bench: S3 and Azure, cache and origin routes\n\n\
         {workload}, concurrency {}, {} measured requests per arm per round, {} paired order-swapped rounds.\n\n",
        args.concurrency,
        thousands(args.requests as f64),
        args.rounds
    );
    out.push_str(&format!(
        "| arm | rps median [min–max] of {} | MiB/s | p50 | p99 | CPU/req | CPU-s/GiB | cores busy | stub CPU/req | client cores |\n",
        args.rounds
    ));
    out.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    let dash = || "-".to_owned();
    for (name, s) in rows {
        let (lo, hi) = spread(&s.rps).unwrap_or((0.0, 0.0));
        out.push_str(&format!(
            "| {} | {} [{}–{}] | {:.0} | {} | {} | {} | {} | {} | {} | {} |\n",
            name,
            thousands(median(&s.rps).unwrap_or(0.0)),
            thousands(lo),
            thousands(hi),
            median(&s.mib_per_s).unwrap_or(0.0),
            s.pooled
                .as_ref()
                .map_or_else(dash, |l| fmt_latency(l.p50_us)),
            s.pooled
                .as_ref()
                .map_or_else(dash, |l| fmt_latency(l.p99_us)),
            s.per_request_us(s.arm_cpu_s)
                .map_or_else(dash, |us| format!("{us:.0} µs")),
            s.per_gib_s(s.arm_cpu_s, args.range_size)
                .map_or_else(dash, |c| format!("{c:.2}")),
            s.busy(s.arm_cpu_s).map_or_else(dash, |c| format!("{c:.2}")),
            s.per_request_us(s.stub_cpu_s)
                .map_or_else(dash, |us| format!("{us:.0} µs")),
            s.busy(s.client_cpu_s)
                .map_or_else(dash, |c| format!("{c:.2}")),
        ));
    }
    out.push_str(&signature_costs(rows));
    out.push_str(&format!(
        "\n{}\n\
         Client: {CLIENT}. Gateway arms sign (SigV4 / Shared Key) and the gateways verify, except the unsigned arms (a gateway on the same cluster that also takes unsigned reads); the control arm signs (unchecked); the peers are anonymous.\n\
         p50/p99: pooled over every measured request of every round. CPU/req and cores busy: utime+stime of the arm's processes \
         (cache: gateway + worker + coordinator; origin: gateway; nginx: master + workers; varnish: manager + cache process) over the arm's measured time, \
         and per GiB served; the stub separately; \
         client = this bench's own process.\n\
         Host: {}. Total time {:.0} s. {} Loopback, one shared host, synthetic origin: relative numbers, not a capacity claim.\n",
        origin_model_line(args),
        host.describe(),
        took.as_secs_f64(),
        load_line(loads)
    ));
    out
}

/// One line per protocol whose cache route ran signed and unsigned: what verifying the
/// signature costs, as the CPU per request between the two arms and its share of the
/// signed request's. Empty when no such pair ran.
fn signature_costs(rows: &[(String, ArmSummary)]) -> String {
    let cpu = |name: &str| {
        rows.iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, s)| s.per_request_us(s.arm_cpu_s))
    };
    let mut out = String::new();
    for protocol in [Backend::S3, Backend::Azure] {
        let signed = format!("{}, cache", protocol.label());
        let (Some(signed_us), Some(unsigned_us)) =
            (cpu(&signed), cpu(&format!("{signed}, unsigned")))
        else {
            continue;
        };
        let cost = signed_us - unsigned_us;
        out.push_str(&format!(
            "\nWhat the signature costs ({}): {cost:.1} µs of the signed request's {signed_us:.1} µs ({:.1}%).",
            match protocol {
                Backend::S3 => "SigV4",
                Backend::Azure => "Shared Key",
            },
            100.0 * cost / signed_us
        ));
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

#[tokio::main]
async fn main() -> ExitCode {
    run_bench("talon-gateway-proxy-bench", run(Args::parse())).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_flags_parse_with_their_defaults() {
        Args::command().debug_assert();
        let args =
            Args::try_parse_from(["talon-gateway-proxy-bench"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(args.origin_bandwidth, Bandwidth(Some(256 << 20)));
        let args = Args::try_parse_from(["x", "--origin-bandwidth", "off", "--rounds", "2"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((args.origin_bandwidth, args.rounds), (Bandwidth(None), 2));
        assert!(Args::try_parse_from(["x", "--origin-bandwidth", "0"]).is_err());
    }

    fn summary(requests: u64, cpu_s: f64) -> ArmSummary {
        ArmSummary {
            rps: vec![1.0],
            mib_per_s: vec![1.0],
            pooled: None,
            requests,
            elapsed_s: 1.0,
            arm_cpu_s: Some(cpu_s),
            stub_cpu_s: None,
            client_cpu_s: None,
        }
    }

    #[test]
    fn the_signatures_cost_is_the_cpu_between_the_signed_and_unsigned_arms() {
        let rows = vec![
            ("S3, cache".to_owned(), summary(1_000, 0.080)),
            ("S3, cache, unsigned".to_owned(), summary(2_000, 0.152)),
            ("Azure, cache".to_owned(), summary(1_000, 0.090)),
        ];
        let text = signature_costs(&rows);
        assert!(
            text.contains("(SigV4): 4.0 µs of the signed request's 80.0 µs (5.0%)"),
            "{text}"
        );
        assert!(
            !text.contains("Shared Key"),
            "no unsigned Azure arm ran: {text}"
        );
        assert_eq!(signature_costs(&rows[..1]), "");
    }
}
