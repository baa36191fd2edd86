//! One load run, start to report.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::config::{LoadConfig, Target};
use crate::error::{LoadError, Result};
use crate::http::{self, HttpCtx, HttpTarget};
use crate::procfs::{self, ProcSample, ProcessSet};
use crate::schedule::{Pacer, Times};
use crate::stats::{ProcFigures, Recorder, Report};
use crate::wire::{self, WireCtx};

/// Connections opened at once while setting up (a burst of thousands of
/// SYNs overflows a listen backlog and adds seconds of retransmits).
const CONNECT_CONCURRENCY: usize = 64;

/// Share of its runtime threads above which the load generator warns that
/// it may be the bottleneck.
const CLIENT_BUSY_WARNING: f64 = 0.8;

/// What one set of readings across the window gives.
struct Window {
    t0: Instant,
    t1: Instant,
    server: Option<(ProcSample, ProcSample, u64)>,
    client: Option<(ProcSample, ProcSample)>,
    server_error: Option<String>,
}

async fn sample_window(times: Times, server: Option<ProcessSet>) -> Window {
    tokio::time::sleep_until(times.warm_end).await;
    let t0 = Instant::now();
    let mut server_error = None;
    let s0 = server.as_ref().and_then(|s| match s.sample() {
        Ok(x) => Some(x),
        Err(e) => {
            server_error = Some(e.to_string());
            None
        }
    });
    let c0 = procfs::sample_self();
    let mut rss_max = s0.map_or(0, |s| s.rss_bytes);
    let mut tick = tokio::time::interval_at(t0 + Duration::from_secs(1), Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if let Some(Ok(s)) = server.as_ref().map(|s| s.sample()) {
                    rss_max = rss_max.max(s.rss_bytes);
                }
            }
            _ = tokio::time::sleep_until(times.end) => break,
        }
    }
    let t1 = Instant::now();
    let s1 = server.as_ref().and_then(|s| match s.sample() {
        Ok(x) => Some(x),
        Err(e) => {
            server_error.get_or_insert(e.to_string());
            None
        }
    });
    let c1 = procfs::sample_self();
    Window {
        t0,
        t1,
        server: match (s0, s1) {
            (Some(a), Some(b)) => Some((a, b, rss_max.max(b.rss_bytes))),
            _ => None,
        },
        client: c0.zip(c1),
        server_error,
    }
}

fn figures(
    pids: Vec<u32>,
    a: &ProcSample,
    b: &ProcSample,
    rss_max: u64,
    secs: f64,
    requests: u64,
) -> ProcFigures {
    let (user, kernel) = b.cpu_since(a);
    let cpu = user + kernel;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    ProcFigures {
        pids,
        user_s: user.as_secs_f64(),
        kernel_s: kernel.as_secs_f64(),
        cores_busy: cpu.as_secs_f64() / secs,
        cpu_per_request_us: (requests > 0).then(|| cpu.as_secs_f64() * 1e6 / requests as f64),
        rss_mib: mib(b.rss_bytes),
        rss_max_mib: mib(rss_max),
    }
}

/// Prints a progress line on stderr once a second until `stop` is set.
async fn progress(recorder: Arc<Recorder>, times: Times, stop: tokio::sync::watch::Receiver<bool>) {
    let mut stop = stop;
    let mut tick =
        tokio::time::interval_at(times.start + Duration::from_secs(1), Duration::from_secs(1));
    let (mut last_req, mut last_bytes, mut last_t) = (0u64, 0u64, times.start);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let now = Instant::now();
        let req = recorder.progress_requests.load(Ordering::Relaxed);
        let bytes = recorder.progress_bytes.load(Ordering::Relaxed);
        let errors = recorder.errors.load(Ordering::Relaxed);
        let dt = (now - last_t).as_secs_f64().max(1e-9);
        // The phase of the second just reported (its middle).
        let mid = last_t + (now - last_t) / 2;
        let phase = if mid < times.warm_end {
            "warmup"
        } else if mid < times.end {
            "measure"
        } else {
            "drain"
        };
        eprintln!(
            "talon-loadgen [{:>4.0}s {phase:<7}] {:>9} rps {:>9.1} MiB/s  errors {errors}",
            (now - times.start).as_secs_f64(),
            crate::stats::thousands((req - last_req) as f64 / dt),
            (bytes - last_bytes) as f64 / dt / (1024.0 * 1024.0),
        );
        (last_req, last_bytes, last_t) = (req, bytes, now);
    }
}

async fn connect_all<T, F, Fut>(n: usize, f: F) -> Result<Vec<T>>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    let mut next = 0;
    let mut set = JoinSet::new();
    while next < n || !set.is_empty() {
        while next < n && set.len() < CONNECT_CONCURRENCY {
            let fut = f(next);
            let i = next;
            set.spawn(async move { (i, fut.await) });
            next += 1;
        }
        if let Some(joined) = set.join_next().await {
            let (i, r) =
                joined.map_err(|e| LoadError::Config(format!("a connect task failed: {e}")))?;
            out[i] = Some(r?);
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// Runs the load described by `config` and reports what it measured.
///
/// Errors (a [`LoadError`]) only when the run cannot start: bad flags, an
/// unreachable target, an object that does not exist, a server process
/// that cannot be read. Failures during the run are counted in the report,
/// whose `ok` is then false and which then carries no latency figures.
pub async fn run(config: &LoadConfig) -> Result<Report> {
    config.validate()?;
    if let Some(limit) = procfs::open_files_limit() {
        let need = config.conns as u64 + 64;
        if limit < need {
            return Err(LoadError::Config(format!(
                "--conns {} needs about {need} open files and the limit is {limit}; \
                 raise it (ulimit -n) first",
                config.conns
            )));
        }
    }
    let recorder = Arc::new(Recorder::new()?);
    let load_before = procfs::load_average();
    let server = if config.server_pids.is_empty() {
        None
    } else {
        Some(ProcessSet::resolve(
            &config.server_pids,
            config.server_children,
        )?)
    };
    let server_pids = server.as_ref().map(|s| s.pids().to_vec());

    enum Conns {
        Wire(Arc<WireCtx>, Vec<tokio::net::TcpStream>),
        Http(
            Arc<HttpCtx>,
            Vec<hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>>>,
        ),
    }
    let (object_size, conns) = match &config.target {
        Target::Wire {
            addr,
            object,
            secret,
        } => {
            let prepared = wire::prepare(
                addr,
                secret,
                object,
                config.block_size,
                config.blocks,
                config.range_size,
                config.prefetch,
                config.connect_timeout,
            )
            .await?;
            let timeout = config.connect_timeout;
            let streams = connect_all(config.conns, |_| {
                let (addr, secret) = (addr.clone(), secret.clone());
                async move { wire::connect_worker(&addr, &secret, timeout).await }
            })
            .await?;
            let ctx = Arc::new(WireCtx {
                addr: addr.clone(),
                templates: prepared.templates,
                range_size: config.range_size,
                align: config.align,
                depth: config.depth,
                conns: config.conns,
                seed: config.seed,
                recorder: recorder.clone(),
            });
            (prepared.object_size, Conns::Wire(ctx, streams))
        }
        Target::Http { url } => {
            let target = HttpTarget::parse(url)?;
            let object_size = http::head_size(&target, config.connect_timeout).await?;
            let span = config.blocks * config.block_size;
            let last_block_start = (config.blocks - 1) * config.block_size;
            if object_size < last_block_start + u64::from(config.range_size) {
                return Err(LoadError::Config(format!(
                    "{url} is {object_size} bytes: too small for --blocks {} of --block-size {} \
                     with --range-size {}",
                    config.blocks, config.block_size, config.range_size
                )));
            }
            if config.prefetch {
                http::prefetch(&target, span.min(object_size), config.connect_timeout).await?;
            }
            let timeout = config.connect_timeout;
            let senders = connect_all(config.conns, |_| {
                let target = target.clone();
                async move {
                    let stream = wire::connect(&target.connect, timeout).await?;
                    http::handshake(&target, stream).await
                }
            })
            .await?;
            let ctx = Arc::new(HttpCtx {
                target,
                object_size,
                block_size: config.block_size,
                blocks: config.blocks,
                range_size: config.range_size,
                align: config.align,
                seed: config.seed,
                recorder: recorder.clone(),
            });
            (object_size, Conns::Http(ctx, senders))
        }
    };

    let admitted_conns = match &conns {
        Conns::Wire(_, streams) => streams.len(),
        Conns::Http(_, senders) => senders.len(),
    };
    let start = Instant::now();
    let warm_end = start + config.warmup;
    let end = warm_end + config.duration;
    let times = Times {
        start,
        warm_end,
        end,
        drain_deadline: end + config.drain_timeout,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let progress_task = config
        .progress
        .then(|| tokio::spawn(progress(recorder.clone(), times, stop_rx)));
    let sampler = tokio::spawn(sample_window(times, server));

    let mut tasks = JoinSet::new();
    match conns {
        Conns::Wire(ctx, streams) => {
            for (i, stream) in streams.into_iter().enumerate() {
                let pacer = Pacer::new(times, config.rate, config.conns, i);
                tasks.spawn(wire::run_connection(ctx.clone(), stream, pacer, i));
            }
        }
        Conns::Http(ctx, senders) => {
            for (i, sender) in senders.into_iter().enumerate() {
                let pacer = Pacer::new(times, config.rate, config.conns, i);
                tasks.spawn(http::run_connection(ctx.clone(), sender, pacer, i));
            }
        }
    }
    while let Some(joined) = tasks.join_next().await {
        if let Err(e) = joined {
            recorder.error(1, || format!("a connection task failed: {e}"));
        }
    }
    let window = sampler
        .await
        .map_err(|e| LoadError::Config(format!("the sampler task failed: {e}")))?;
    let _ = stop_tx.send(true);
    if let Some(p) = progress_task {
        let _ = p.await;
    }

    let finished = recorder.finish();
    let secs = (window.t1 - window.t0).as_secs_f64().max(1e-9);
    let client_threads = tokio::runtime::Handle::current().metrics().num_workers();
    let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut warnings = Vec::new();
    let server_figures = window.server.map(|(a, b, rss_max)| {
        figures(
            server_pids.clone().unwrap_or_default(),
            &a,
            &b,
            rss_max,
            secs,
            finished.requests,
        )
    });
    if let Some(e) = &window.server_error {
        warnings.push(format!("server CPU/RSS not reported: {e}"));
    }
    let client_figures = window.client.map(|(a, b)| {
        figures(
            vec![std::process::id()],
            &a,
            &b,
            b.rss_bytes,
            secs,
            finished.requests,
        )
    });
    if let Some(c) = &client_figures {
        let capacity = client_threads.min(host_cpus) as f64;
        if c.cores_busy >= CLIENT_BUSY_WARNING * capacity {
            warnings.push(format!(
                "the load generator kept {:.2} of {capacity} usable cores busy: it may be the \
                 bottleneck, so these figures may understate the server",
                c.cores_busy
            ));
        }
    }
    let rps = finished.requests as f64 / secs;
    if let Some(offered) = config.rate
        && rps < 0.95 * offered
    {
        warnings.push(format!(
            "achieved {} rps of the {} offered",
            crate::stats::thousands(rps),
            crate::stats::thousands(offered)
        ));
    }
    let all_served = admitted_conns == config.conns && finished.served_conns == config.conns as u64;
    let ok =
        finished.errors == 0 && finished.requests > 0 && finished.latency.is_some() && all_served;
    let first_error = finished
        .first_error
        .or_else(|| {
            (finished.requests == 0 || finished.latency.is_none())
                .then(|| "no request completed in the measured window: no samples".to_owned())
        })
        .or_else(|| {
            (!all_served).then(|| {
                format!(
                    "only {admitted_conns} of {} connections were admitted and {} served a                      request in the measured window: the figures would not be for {}                      connections",
                    config.conns, finished.served_conns, config.conns
                )
            })
        });
    Ok(Report {
        ok,
        target: config.label(),
        protocol: config.target.protocol().to_owned(),
        endpoint: config.target.describe(),
        conns: config.conns,
        admitted_conns,
        served_conns: finished.served_conns,
        depth: config.depth,
        range_size: config.range_size,
        block_size: config.block_size,
        blocks: config.blocks,
        object_size,
        offered_rps: config.rate,
        warmup_s: config.warmup.as_secs_f64(),
        window_s: secs,
        requests: finished.requests,
        bytes: finished.bytes,
        rps,
        mib_per_s: finished.bytes as f64 / secs / (1024.0 * 1024.0),
        latency_us: if ok { finished.latency } else { None },
        service_time_us: if ok && config.rate.is_some() {
            finished.service
        } else {
            None
        },
        client_send_lag_us: if ok && config.rate.is_some() {
            finished.lag
        } else {
            None
        },
        errors: finished.errors,
        first_error,
        server: server_figures,
        client: client_figures,
        client_threads,
        host_cpus,
        host_cpu_model: procfs::cpu_model(),
        host_kernel: procfs::kernel_release(),
        host_load_1m: load_before,
        warnings,
        unix_time_s: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    })
}
