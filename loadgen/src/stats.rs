//! Recording samples while the run goes, and the report at the end.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::error::LoadError;

/// Highest latency the histograms hold exactly: one hour, in nanoseconds.
/// Anything slower is recorded as one hour.
const MAX_TRACKED_NS: u64 = 3_600_000_000_000;

/// Samples a connection buffers before merging them into the shared
/// histograms (bounds lock traffic to one acquisition per this many).
const FLUSH_EVERY: usize = 512;

fn new_histogram() -> Result<Histogram<u64>, LoadError> {
    // Three significant digits: any percentile is within 0.1% of the truth.
    Histogram::new_with_bounds(1, MAX_TRACKED_NS, 3)
        .map_err(|e| LoadError::Config(format!("cannot create a histogram: {e}")))
}

struct Histograms {
    latency: Histogram<u64>,
    service: Histogram<u64>,
    lag: Histogram<u64>,
}

/// The instants of one completed request.
///
/// `intended` is when the request was due (the send time in closed loop);
/// `ready` the earliest moment the client *could* have sent it (`intended`,
/// or later if every in-flight slot of the connection was busy then: the
/// latest slot release before the send, a bound that never flatters the
/// server); `sent` when it was written; `done` when the last payload byte
/// arrived.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) intended: Instant,
    pub(crate) ready: Instant,
    pub(crate) sent: Instant,
    pub(crate) done: Instant,
}

impl Timing {
    /// What the server is charged: the wait for a slot that its slowness
    /// caused (`ready - intended`) plus the service time (`done - sent`).
    /// The client's own lateness between `ready` and `sent` (its timer
    /// waking late) is not charged.
    pub(crate) fn latency(&self) -> Duration {
        self.service() + self.ready.saturating_duration_since(self.intended)
    }

    /// From the actual send to the last byte.
    pub(crate) fn service(&self) -> Duration {
        self.done.saturating_duration_since(self.sent)
    }

    /// The load generator's own sending delay.
    pub(crate) fn lag(&self) -> Duration {
        self.sent.saturating_duration_since(self.ready)
    }
}

/// Counters and histograms shared by every connection of a run.
pub(crate) struct Recorder {
    /// Requests completed, warmup included (for the progress line).
    pub(crate) progress_requests: AtomicU64,
    /// Payload bytes received, warmup included.
    pub(crate) progress_bytes: AtomicU64,
    /// Failed requests, any phase.
    pub(crate) errors: AtomicU64,
    first_error: Mutex<Option<String>>,
    window: Mutex<(u64, u64)>,
    hists: Mutex<Histograms>,
    /// Connections that completed at least one request inside the window.
    served_conns: AtomicU64,
}

/// A connection's private buffer of window samples.
#[derive(Default)]
pub(crate) struct Samples {
    buf: Vec<(u64, u64, u64)>,
    requests: u64,
    bytes: u64,
    /// This connection completed a request inside the window...
    served: bool,
    /// ...and the recorder has counted it.
    counted: bool,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Recorder {
    pub(crate) fn new() -> Result<Self, LoadError> {
        Ok(Self {
            progress_requests: AtomicU64::new(0),
            progress_bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            first_error: Mutex::new(None),
            window: Mutex::new((0, 0)),
            hists: Mutex::new(Histograms {
                latency: new_histogram()?,
                service: new_histogram()?,
                lag: new_histogram()?,
            }),
            served_conns: AtomicU64::new(0),
        })
    }

    /// A request completed with its full, checked payload. Its latency is
    /// sampled if it was due inside the window `[warm_end, end)`; it counts
    /// towards throughput if it *completed* inside the window (so a server
    /// that falls behind an offered rate shows its real throughput, not the
    /// offered one).
    pub(crate) fn completed(
        &self,
        local: &mut Samples,
        t: Timing,
        bytes: u64,
        (warm_end, end): (Instant, Instant),
    ) {
        self.progress_requests.fetch_add(1, Ordering::Relaxed);
        self.progress_bytes.fetch_add(bytes, Ordering::Relaxed);
        if t.intended >= warm_end && t.intended < end {
            local
                .buf
                .push((nanos(t.latency()), nanos(t.service()), nanos(t.lag())));
        }
        if t.done >= warm_end && t.done < end {
            local.requests += 1;
            local.bytes += bytes;
            local.served = true;
        }
        if local.buf.len() >= FLUSH_EVERY {
            self.flush(local);
        }
    }

    /// Merges a connection's buffered samples.
    pub(crate) fn flush(&self, local: &mut Samples) {
        if local.served && !local.counted {
            local.counted = true;
            self.served_conns.fetch_add(1, Ordering::Relaxed);
        }
        if local.buf.is_empty() && local.requests == 0 {
            return;
        }
        {
            let mut h = lock(&self.hists);
            for &(lat, svc, lag) in &local.buf {
                h.latency.saturating_record(lat.min(MAX_TRACKED_NS));
                h.service.saturating_record(svc.min(MAX_TRACKED_NS));
                h.lag.saturating_record(lag.min(MAX_TRACKED_NS));
            }
        }
        let mut w = lock(&self.window);
        w.0 += local.requests;
        w.1 += local.bytes;
        local.buf.clear();
        local.requests = 0;
        local.bytes = 0;
    }

    /// `count` requests failed; `message` (built only if it is the first)
    /// is kept verbatim for the report.
    pub(crate) fn error(&self, count: u64, message: impl FnOnce() -> String) {
        if count == 0 {
            return;
        }
        self.errors.fetch_add(count, Ordering::Relaxed);
        let mut first = lock(&self.first_error);
        if first.is_none() {
            *first = Some(message());
        }
    }

    /// Window requests and bytes, latency and service-time summaries (the
    /// latter `None` without samples), the error count and the first error.
    pub(crate) fn finish(&self) -> Finished {
        let (requests, bytes) = *lock(&self.window);
        let h = lock(&self.hists);
        Finished {
            requests,
            bytes,
            latency: Latency::from_histogram(&h.latency),
            service: Latency::from_histogram(&h.service),
            lag: Latency::from_histogram(&h.lag),
            errors: self.errors.load(Ordering::Relaxed),
            first_error: lock(&self.first_error).clone(),
            served_conns: self.served_conns.load(Ordering::Relaxed),
        }
    }
}

/// What the recorder holds at the end of a run.
pub(crate) struct Finished {
    pub(crate) requests: u64,
    pub(crate) bytes: u64,
    pub(crate) latency: Option<Latency>,
    pub(crate) service: Option<Latency>,
    pub(crate) lag: Option<Latency>,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
    pub(crate) served_conns: u64,
}

/// A latency distribution, in microseconds. Percentiles come from an HDR
/// histogram with three significant digits (within 0.1% of the exact
/// sample).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Samples in the distribution.
    pub samples: u64,
    /// Fastest.
    pub min_us: f64,
    /// Arithmetic mean (hides the tail; read the percentiles).
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// 99.99th percentile.
    pub p9999_us: f64,
    /// Slowest.
    pub max_us: f64,
}

impl Latency {
    fn from_histogram(h: &Histogram<u64>) -> Option<Self> {
        if h.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Some(Self {
            samples: h.len(),
            min_us: us(h.min()),
            mean_us: h.mean() / 1000.0,
            p50_us: us(h.value_at_quantile(0.5)),
            p90_us: us(h.value_at_quantile(0.9)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            p9999_us: us(h.value_at_quantile(0.9999)),
            max_us: us(h.max()),
        })
    }
}

/// CPU and memory of a set of processes across the measured window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcFigures {
    /// The processes summed.
    pub pids: Vec<u32>,
    /// User-mode CPU seconds in the window.
    pub user_s: f64,
    /// Kernel-mode CPU seconds in the window.
    pub kernel_s: f64,
    /// (user + kernel) / window length: how many cores were kept busy.
    pub cores_busy: f64,
    /// CPU microseconds per completed window request.
    pub cpu_per_request_us: Option<f64>,
    /// Resident memory at the end of the window, MiB.
    pub rss_mib: f64,
    /// Highest resident memory seen by the once-a-second samples, MiB.
    pub rss_max_mib: f64,
}

/// Everything one run measured; one JSON line with `--json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The run completed with samples and without a single failed request.
    /// When false, `latency_us` is absent: latency is not reported for a run
    /// that had errors.
    pub ok: bool,
    /// The target's label.
    pub target: String,
    /// `talon-wire` or `http/1.1`.
    pub protocol: String,
    /// Address and object, or URL.
    pub endpoint: String,
    /// Connections asked for.
    pub conns: usize,
    /// Connections the server admitted (connected, and on the wire protocol through
    /// the Hello exchange) before the run started. A run with fewer than `conns` is
    /// refused: figures "at 1024 connections" must have had 1024 connections.
    #[serde(default)]
    pub admitted_conns: usize,
    /// Connections that completed at least one request inside the measured window;
    /// fewer than `conns` also refuses the run (some connections were starved).
    #[serde(default)]
    pub served_conns: u64,
    /// Requests in flight per connection (1 for HTTP).
    pub depth: usize,
    /// Bytes per request.
    pub range_size: u32,
    /// Block size, bytes.
    pub block_size: u64,
    /// Blocks the offsets spread over.
    pub blocks: u64,
    /// Object size as the server reported it, bytes.
    pub object_size: u64,
    /// Offered rate (requests/s) for a constant-rate run; absent in closed loop.
    pub offered_rps: Option<f64>,
    /// Warmup, seconds (not sampled).
    pub warmup_s: f64,
    /// The measured window, seconds.
    pub window_s: f64,
    /// Requests answered in full inside the window (last byte received in
    /// it): the throughput figures. Latency samples are the requests *due*
    /// in the window (`latency_us.samples`), which a server that falls
    /// behind an offered rate answers partly after it.
    pub requests: u64,
    /// Payload bytes of the requests answered in the window.
    pub bytes: u64,
    /// `requests / window_s`.
    pub rps: f64,
    /// `bytes / window_s`, MiB/s.
    pub mib_per_s: f64,
    /// Latency from the (intended) send time to the last payload byte;
    /// absent when `ok` is false.
    pub latency_us: Option<Latency>,
    /// Constant-rate runs only: from the actual send to the last byte. The
    /// gap to `latency_us` is time spent waiting for a free in-flight slot,
    /// i.e. the queue a stalled server builds.
    pub service_time_us: Option<Latency>,
    /// Constant-rate runs only: how late the load generator itself sent
    /// requests that had a free slot (its timer waking late, or its threads
    /// busy). Not charged to the server; if large, the client is the limit.
    pub client_send_lag_us: Option<Latency>,
    /// Failed requests (error frames, bad replies, lost connections,
    /// unanswered at the drain deadline), warmup included.
    pub errors: u64,
    /// The first failure, verbatim.
    pub first_error: Option<String>,
    /// The server's CPU and RSS, with `--server-pid`.
    pub server: Option<ProcFigures>,
    /// The load generator's own CPU: if it nears `client_threads` cores,
    /// the client, not the server, may be the limit.
    pub client: Option<ProcFigures>,
    /// Runtime threads of the load generator.
    pub client_threads: usize,
    /// CPUs this host offers the load generator.
    pub host_cpus: usize,
    /// The host's CPU model.
    pub host_cpu_model: Option<String>,
    /// The host's kernel release.
    pub host_kernel: Option<String>,
    /// The host's one-minute load average when the run started (other work
    /// on a shared machine competes with client and server).
    pub host_load_1m: Option<f64>,
    /// Things a reader of the figures should know (e.g. a busy client).
    pub warnings: Vec<String>,
    /// When the run ended, Unix seconds.
    pub unix_time_s: u64,
}

/// `1234567.8` → `1,234,568`.
pub fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let n = x.round() as i128;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// A latency in µs as a table cell: `84.2 µs`, `1,243 µs`.
pub fn fmt_us(us: f64) -> String {
    if us < 100.0 {
        format!("{us:.1} µs")
    } else {
        format!("{} µs", thousands(us))
    }
}

/// One markdown table, a row per report. Failed runs show `refused` in the
/// latency columns and their first error below the table.
pub fn markdown_table(reports: &[Report]) -> String {
    let mut out = String::from(
        "| target | protocol | conns (admitted / served) | depth | offered | rps | MiB/s | p50 | p99 | p99.9 | max | errors | server CPU user / kernel s | server cores busy | server RSS MiB | client cores busy |\n\
         |---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    let mut notes = Vec::new();
    for r in reports {
        let lat = |f: fn(&Latency) -> f64| match (&r.latency_us, r.ok) {
            (Some(l), true) => fmt_us(f(l)),
            _ => "refused".into(),
        };
        let server = r.server.as_ref();
        let cell = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        let conns = format!("{} ({} / {})", r.conns, r.admitted_conns, r.served_conns);
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.target,
            r.protocol,
            conns,
            r.depth,
            r.offered_rps
                .map(|x| format!("{} rps", thousands(x)))
                .unwrap_or_else(|| "closed loop".into()),
            thousands(r.rps),
            r.mib_per_s,
            lat(|l| l.p50_us),
            lat(|l| l.p99_us),
            lat(|l| l.p999_us),
            lat(|l| l.max_us),
            r.errors,
            cell(server.map(|s| format!("{:.2} / {:.2}", s.user_s, s.kernel_s))),
            cell(server.map(|s| format!("{:.2}", s.cores_busy))),
            cell(server.map(|s| format!("{:.1}", s.rss_max_mib))),
            cell(r.client.as_ref().map(|c| format!("{:.2}", c.cores_busy))),
        ));
        if let Some(e) = &r.first_error {
            notes.push(format!(
                "- {} (conns {}, depth {}): FAILED, {} failed request(s); first error: {e}",
                r.target, r.conns, r.depth, r.errors
            ));
        } else if !r.ok {
            notes.push(format!(
                "- {} (conns {}, depth {}): FAILED, no samples in the window",
                r.target, r.conns, r.depth
            ));
        }
        for w in &r.warnings {
            notes.push(format!(
                "- {} (conns {}, depth {}): {w}",
                r.target, r.conns, r.depth
            ));
        }
    }
    if !notes.is_empty() {
        out.push('\n');
        out.push_str(&notes.join("\n"));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_format() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1234567.8), "1,234,568");
        assert_eq!(thousands(-1000.0), "-1,000");
        assert_eq!(fmt_us(84.23), "84.2 µs");
        assert_eq!(fmt_us(1243.0), "1,243 µs");
    }

    #[test]
    fn recorder_keeps_window_samples_and_first_error() {
        let r = Recorder::new().unwrap_or_else(|e| panic!("{e}"));
        let mut local = Samples::default();
        let start = Instant::now();
        let warm_end = start + Duration::from_secs(1);
        for i in 1..=1000u64 {
            let intended = start + Duration::from_millis(i * 2);
            let t = Timing {
                intended,
                ready: intended,
                sent: intended,
                done: intended + Duration::from_micros(i),
            };
            r.completed(
                &mut local,
                t,
                10,
                (warm_end, start + Duration::from_secs(10)),
            );
        }
        r.flush(&mut local);
        r.error(2, || "first".into());
        r.error(1, || "second".into());
        let f = r.finish();
        assert_eq!((f.requests, f.bytes, f.errors), (501, 5010, 3));
        assert_eq!(f.first_error.as_deref(), Some("first"));
        let l = f.latency.unwrap_or_else(|| panic!("no latency"));
        assert_eq!(l.samples, 501);
        assert!((l.p50_us - 750.0).abs() < 1.0, "{}", l.p50_us);
        assert!((l.max_us - 1000.0).abs() < 1.0, "{}", l.max_us);
        assert!((l.min_us - 500.0).abs() < 0.5, "{}", l.min_us);
        // One connection served in the window, however many times it flushed.
        r.flush(&mut local);
        assert_eq!(r.finish().served_conns, 1);
        let mut idle = Samples::default();
        r.flush(&mut idle);
        assert_eq!(
            r.finish().served_conns,
            1,
            "a connection with no window request"
        );
    }

    #[test]
    fn timing_charges_slot_waits_but_not_client_lag() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        // Due at 0, a slot freed at 5 ms, sent at 7 ms, done at 10 ms.
        let t = Timing {
            intended: ms(0),
            ready: ms(5),
            sent: ms(7),
            done: ms(10),
        };
        assert_eq!(t.latency(), Duration::from_millis(8));
        assert_eq!(t.service(), Duration::from_millis(3));
        assert_eq!(t.lag(), Duration::from_millis(2));
    }

    #[test]
    fn failed_runs_show_no_latency() {
        let r = Report {
            ok: false,
            target: "t".into(),
            protocol: "talon-wire".into(),
            endpoint: "e".into(),
            conns: 1,
            admitted_conns: 1,
            served_conns: 0,
            depth: 1,
            range_size: 1,
            block_size: 1,
            blocks: 1,
            object_size: 1,
            offered_rps: None,
            warmup_s: 0.0,
            window_s: 1.0,
            requests: 5,
            bytes: 5,
            rps: 5.0,
            mib_per_s: 0.0,
            latency_us: None,
            service_time_us: None,
            client_send_lag_us: None,
            errors: 1,
            first_error: Some("worker answered NotFound: gone".into()),
            server: None,
            client: None,
            client_threads: 1,
            host_cpus: 1,
            host_cpu_model: None,
            host_kernel: None,
            host_load_1m: None,
            warnings: vec![],
            unix_time_s: 0,
        };
        let t = markdown_table(&[r]);
        assert!(t.contains("refused"), "{t}");
        assert!(t.contains("worker answered NotFound: gone"), "{t}");
    }
}
