//! The worker's Prometheus metrics: hits, misses, bytes served from cache and from the
//! origin, fills in flight, evictions, connections, and per-request latency histograms.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::block_store::StoreStats;
use crate::origins::StatOriginRequests;

/// The `op` labels of `talon_worker_disk_errors_total`.
const DISK_OPS: [&str; 3] = ["create", "store", "read"];

/// The `reason` labels of `talon_worker_pass_through_total`.
const PASS_THROUGH_REASONS: [&str; 3] = ["no_room", "disk_error", "no_descriptors"];

/// The `outcome` labels of `talon_worker_prefetches_total`: how a Prefetch was answered
/// (`present`, `started`, `declined`) and how a started fill ended (`filled`,
/// `not_cached`, `failed`).
const PREFETCH_OUTCOMES: [&str; 6] = [
    "present",
    "started",
    "declined",
    "filled",
    "not_cached",
    "failed",
];

/// Every metric of a worker.
#[derive(Debug)]
pub struct WorkerMetrics {
    registry: Mutex<Registry>,
    hits: Counter,
    misses: Counter,
    bytes_from_cache: Counter,
    sends_from_disk: Counter,
    file_handoffs: Counter,
    bytes_handed_off: Counter,
    written_behind_answers: Counter,
    written_behind_bytes: Counter,
    bytes_from_origin: Counter,
    origin_requests: Counter,
    origin_retries: Counter,
    fills_in_flight: Gauge,
    connections: Gauge,
    evictions: Counter,
    corrupt_pages: Counter,
    used_bytes: Gauge,
    pinned_bytes: Gauge,
    capacity_bytes: Gauge,
    blocks: Gauge,
    read_latency: Histogram,
    stat_latency: Histogram,
    errors: Counter,
    data_plane: Family<Vec<(String, String)>, Gauge>,
    rings: Gauge,
    stat_origin_requests: Family<Vec<(String, String)>, Counter>,
    stat_listing_refreshed: Counter,
    metadata_cache: Family<Vec<(String, String)>, Gauge>,
    origin_request_limit: Family<Vec<(String, String)>, Gauge>,
    cluster_rules: Family<Vec<(String, String)>, Gauge>,
    disk_errors: Family<Vec<(String, String)>, Counter>,
    pass_through: Family<Vec<(String, String)>, Counter>,
    prefetches: Family<Vec<(String, String)>, Counter>,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        WorkerMetrics::new()
    }
}

impl WorkerMetrics {
    /// Registers every metric.
    pub fn new() -> WorkerMetrics {
        let m = WorkerMetrics {
            registry: Mutex::new(Registry::with_prefix("talon_worker")),
            hits: Counter::default(),
            misses: Counter::default(),
            bytes_from_cache: Counter::default(),
            sends_from_disk: Counter::default(),
            file_handoffs: Counter::default(),
            bytes_handed_off: Counter::default(),
            written_behind_answers: Counter::default(),
            written_behind_bytes: Counter::default(),
            bytes_from_origin: Counter::default(),
            origin_requests: Counter::default(),
            origin_retries: Counter::default(),
            fills_in_flight: Gauge::default(),
            connections: Gauge::default(),
            evictions: Counter::default(),
            corrupt_pages: Counter::default(),
            used_bytes: Gauge::default(),
            pinned_bytes: Gauge::default(),
            capacity_bytes: Gauge::default(),
            blocks: Gauge::default(),
            // 20 µs .. ~10 s.
            read_latency: Histogram::new(exponential_buckets(0.000_02, 2.0, 20)),
            stat_latency: Histogram::new(exponential_buckets(0.000_02, 2.0, 20)),
            errors: Counter::default(),
            data_plane: Family::default(),
            rings: Gauge::default(),
            stat_origin_requests: Family::default(),
            stat_listing_refreshed: Counter::default(),
            metadata_cache: Family::default(),
            origin_request_limit: Family::default(),
            cluster_rules: Family::default(),
            disk_errors: Family::default(),
            pass_through: Family::default(),
            prefetches: Family::default(),
        };
        {
            let mut r = m.registry.lock().unwrap_or_else(|p| p.into_inner());
            r.register(
                "hits",
                "Reads served entirely from pages already present",
                m.hits.clone(),
            );
            r.register(
                "misses",
                "Reads that needed an origin fetch",
                m.misses.clone(),
            );
            r.register(
                "cache_bytes_served",
                "Payload bytes sent from the block store",
                m.bytes_from_cache.clone(),
            );
            r.register(
                "sends_from_disk",
                "Cached replies not all in the page cache, sent from the blocking pool",
                m.sends_from_disk.clone(),
            );
            r.register(
                "file_handoffs",
                "Reads answered on the local socket with the block file's descriptor (the reader on this host reads the bytes itself)",
                m.file_handoffs.clone(),
            );
            r.register(
                "handed_off_bytes",
                "Payload bytes of those reads (not in cache_bytes_served: this worker did not send them)",
                m.bytes_handed_off.clone(),
            );
            r.register(
                "written_behind_answers",
                "Reads answered from the bytes their fill fetched, while those were written into the block behind the answer",
                m.written_behind_answers.clone(),
            );
            r.register(
                "written_behind_answer_bytes",
                "Payload bytes of those reads (in neither cache_bytes_served nor handed_off_bytes)",
                m.written_behind_bytes.clone(),
            );
            r.register(
                "origin_bytes",
                "Bytes fetched from the origin",
                m.bytes_from_origin.clone(),
            );
            r.register(
                "origin_requests",
                "Ranged GETs sent to the origin",
                m.origin_requests.clone(),
            );
            r.register(
                "origin_retries",
                "Origin fetches retried after a transient failure",
                m.origin_retries.clone(),
            );
            r.register(
                "fills_in_flight",
                "Origin fills running now",
                m.fills_in_flight.clone(),
            );
            r.register(
                "connections",
                "Open data-plane connections",
                m.connections.clone(),
            );
            r.register(
                "evictions",
                "Blocks evicted to stay within the byte budget",
                m.evictions.clone(),
            );
            r.register(
                "corrupt_pages",
                "Present pages whose bytes failed their CRC32C (damaged on disk, or changed behind the worker): dropped, never served, refetched when next read",
                m.corrupt_pages.clone(),
            );
            r.register(
                "cache_used_bytes",
                "Bytes on disk counted against the budget",
                m.used_bytes.clone(),
            );
            r.register(
                "cache_pinned_bytes",
                "Bytes of cache_used_bytes in pinned blocks (--pin, and the cluster's pins), which eviction passes over within --pin-share",
                m.pinned_bytes.clone(),
            );
            r.register(
                "cache_capacity_bytes",
                "The byte budget",
                m.capacity_bytes.clone(),
            );
            r.register("cache_blocks", "Blocks held", m.blocks.clone());
            r.register(
                "read_duration_seconds",
                "ReadRange requests, arrival to last byte",
                m.read_latency.clone(),
            );
            r.register(
                "stat_duration_seconds",
                "Stat requests",
                m.stat_latency.clone(),
            );
            r.register(
                "error_frames",
                "Requests answered with an error frame",
                m.errors.clone(),
            );
            r.register(
                "data_plane",
                "The data plane serving (label plane: io_uring or tokio); always 1",
                m.data_plane.clone(),
            );
            r.register(
                "data_plane_rings",
                "io_uring ring threads (0 on the Tokio plane)",
                m.rings.clone(),
            );
            r.register(
                "stat_origin_requests",
                "Metadata requests made of the origin (label result: fetched, a plain HEAD; \
                 read, a GET of a reader's first bytes that brought the metadata; \
                 unchanged, a revalidation that kept the version; changed, one that did not; \
                 listed, a listing page that revalidated up to 1,000 objects of a folder; \
                 retried, one sent again after a transient failure)",
                m.stat_origin_requests.clone(),
            );
            r.register(
                "stat_listing_refreshed",
                "Metadata entries a revalidation listing kept current besides the object \
                 that came due: origin requests they did not need",
                m.stat_listing_refreshed.clone(),
            );
            r.register(
                "metadata_cache",
                "The worker's object metadata table, by what: entries, bytes and missing \
                 (not-found answers) held now; hits, expired, misses, inserts and evictions \
                 (by its bounds, one at a time) since start",
                m.metadata_cache.clone(),
            );
            r.register(
                "cluster_rules",
                "The cluster's rules in force in this worker, by kind: invalidations \
                 (talon invalidate) and freshness (talon freshness)",
                m.cluster_rules.clone(),
            );
            r.register(
                "origin_request_limit",
                "Requests to the origin under the per-prefix limit \
                 (--origin-requests-per-prefix) since start, by outcome: immediate, queued \
                 (waited for their turn), refused (answered SlowDown, never sent)",
                m.origin_request_limit.clone(),
            );
            r.register(
                "disk_errors",
                "Cache-disk operations that failed (label op: create, a block file; \
                 store, writing a fill's pages; read, reading a cached page back, which \
                 drops the page to be refetched); the read was served from the origin instead",
                m.disk_errors.clone(),
            );
            r.register(
                "pass_through",
                "Reads answered from the origin without caching (label reason: no_room, \
                 the byte budget; disk_error, the cache disk failed; no_descriptors, the \
                 process is out of open files)",
                m.pass_through.clone(),
            );
            r.register(
                "prefetches",
                "Prefetches (fills asked ahead of a sequential reader) by outcome: present, \
                 started or declined when asked; filled, not_cached or failed when a started \
                 fill ended",
                m.prefetches.clone(),
            );
        }
        // Every label the faults can take exists from the start at 0, so a dashboard
        // shows 0 rather than no data and an alert's `increase` sees the first fault
        // (a series that appears at 1 has no earlier sample to increase from).
        for op in DISK_OPS {
            let _ = m
                .disk_errors
                .get_or_create(&vec![("op".to_owned(), op.to_owned())]);
        }
        for reason in PASS_THROUGH_REASONS {
            let _ = m
                .pass_through
                .get_or_create(&vec![("reason".to_owned(), reason.to_owned())]);
        }
        for outcome in PREFETCH_OUTCOMES {
            let _ = m
                .prefetches
                .get_or_create(&vec![("outcome".to_owned(), outcome.to_owned())]);
        }
        m
    }

    /// Counts a failed cache-disk operation (`op`: `create` or `store`; `read` is
    /// caught up from the store's [`StoreStats::unreadable_pages`] when rendered).
    pub fn disk_error(&self, op: &str) {
        self.disk_errors
            .get_or_create(&vec![("op".to_owned(), op.to_owned())])
            .inc();
    }

    /// Counts a Prefetch's answer or its fill's end (`outcome`: one of
    /// [`PREFETCH_OUTCOMES`]).
    pub fn prefetch(&self, outcome: &str) {
        self.prefetches
            .get_or_create(&vec![("outcome".to_owned(), outcome.to_owned())])
            .inc();
    }

    /// Prefetches counted with `outcome` so far.
    pub fn prefetches(&self, outcome: &str) -> u64 {
        self.prefetches
            .get_or_create(&vec![("outcome".to_owned(), outcome.to_owned())])
            .get()
    }

    /// Counts a read answered from the origin without caching (`reason`: `no_room`,
    /// `disk_error` or `no_descriptors`).
    pub fn pass_through(&self, reason: &str) {
        self.pass_through
            .get_or_create(&vec![("reason".to_owned(), reason.to_owned())])
            .inc();
    }

    /// Records which plane serves.
    pub fn set_data_plane(&self, plane: crate::data_plane::PlaneKind) {
        self.data_plane
            .get_or_create(&vec![("plane".to_owned(), plane.name().to_owned())])
            .set(1);
        self.rings
            .set(i64::try_from(plane.rings()).unwrap_or(i64::MAX));
    }

    /// A read served without a fill.
    pub fn hit(&self) {
        self.hits.inc();
    }

    /// A read that needed a fill (or was passed through).
    pub fn miss(&self) {
        self.misses.inc();
    }

    /// Payload bytes sent from the store.
    pub fn bytes_from_cache(&self, n: u64) {
        self.bytes_from_cache.inc_by(n);
    }

    /// A cached reply whose bytes were not all in the page cache: its `sendfile` ran on
    /// the blocking pool.
    pub fn send_from_disk(&self) {
        self.sends_from_disk.inc();
    }

    /// A read of `len` cached bytes answered with the block file's descriptor.
    pub fn file_handoff(&self, len: u64) {
        self.file_handoffs.inc();
        self.bytes_handed_off.inc_by(len);
    }

    /// A read of `len` bytes answered from its fill's fetched bytes, written behind.
    pub fn written_behind_answer(&self, len: u64) {
        self.written_behind_answers.inc();
        self.written_behind_bytes.inc_by(len);
    }

    /// Reads answered with a descriptor so far.
    pub fn file_handoffs(&self) -> u64 {
        self.file_handoffs.get()
    }

    /// Bytes fetched from the origin.
    pub fn bytes_from_origin(&self, n: u64) {
        self.bytes_from_origin.inc_by(n);
    }

    /// An origin GET was sent.
    pub fn origin_request(&self) {
        self.origin_requests.inc();
    }

    /// An origin fetch is retried.
    pub fn origin_retry(&self) {
        self.origin_retries.inc();
    }

    /// A fill starts.
    pub fn fill_started(&self) {
        self.fills_in_flight.inc();
    }

    /// A fill ends.
    pub fn fill_ended(&self) {
        self.fills_in_flight.dec();
    }

    /// A connection opens (+1) or closes (-1).
    pub fn connection(&self, delta: i64) {
        self.connections.inc_by(delta);
    }

    /// A ReadRange finished after `d`.
    pub fn read_done(&self, d: Duration) {
        self.read_latency.observe(d.as_secs_f64());
    }

    /// A Stat finished after `d`.
    pub fn stat_done(&self, d: Duration) {
        self.stat_latency.observe(d.as_secs_f64());
    }

    /// A request was answered with an error frame.
    pub fn error_frame(&self) {
        self.errors.inc();
    }

    /// Totals for heartbeats: (hits, misses).
    pub fn hit_miss(&self) -> (u64, u64) {
        (self.hits.get(), self.misses.get())
    }

    /// Records the metadata table's holdings and counts (read when `/metrics` is served).
    pub fn metadata_cache(&self, stats: talon_metadata_cache::CacheStats) {
        for (what, value) in stats.labelled() {
            self.metadata_cache
                .get_or_create(&vec![("what".to_owned(), what.to_owned())])
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
    }

    /// Records how many of the cluster's rules are in force here, by kind.
    pub fn cluster_rules(&self, invalidations: usize, freshness: usize) {
        for (kind, n) in [("invalidations", invalidations), ("freshness", freshness)] {
            self.cluster_rules
                .get_or_create(&vec![("kind".to_owned(), kind.to_owned())])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Records what the origin request limit did (read when `/metrics` is served).
    pub fn origin_request_limit(
        &self,
        stats: talon_protocols::origin::request_limit::RequestLimitStats,
    ) {
        for (outcome, value) in stats.labelled() {
            self.origin_request_limit
                .get_or_create(&vec![("outcome".to_owned(), outcome.to_owned())])
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
    }

    /// Renders the Prometheus text format, refreshing the store gauges and the
    /// metadata cache's counts first.
    pub fn render(&self, store: StoreStats, stat_requests: StatOriginRequests) -> String {
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.used_bytes.set(i(store.used_bytes));
        self.pinned_bytes.set(i(store.pinned_bytes));
        self.capacity_bytes.set(i(store.capacity_bytes));
        self.blocks.set(i(store.blocks));
        for (counter, total) in [
            (&self.evictions, store.evictions),
            (&self.corrupt_pages, store.corrupt_pages),
        ] {
            catch_up(counter, total);
        }
        catch_up(
            &self
                .disk_errors
                .get_or_create(&vec![("op".to_owned(), "read".to_owned())]),
            store.unreadable_pages,
        );
        for (result, total) in [
            ("fetched", stat_requests.fetched),
            ("read", stat_requests.read),
            ("unchanged", stat_requests.unchanged),
            ("changed", stat_requests.changed),
            ("listed", stat_requests.listed),
            ("retried", stat_requests.retried),
        ] {
            catch_up(
                &self
                    .stat_origin_requests
                    .get_or_create(&vec![("result".to_owned(), result.to_owned())]),
                total,
            );
        }
        catch_up(&self.stat_listing_refreshed, stat_requests.refreshed);
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Brings a counter mirroring a running total up to it.
fn catch_up(counter: &Counter, total: u64) {
    let seen = counter.get();
    if total > seen {
        counter.inc_by(total - seen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_store_gauges() {
        let m = WorkerMetrics::new();
        m.hit();
        m.miss();
        m.bytes_from_cache(4096);
        m.read_done(Duration::from_micros(150));
        let text = m.render(
            StoreStats {
                used_bytes: 10,
                capacity_bytes: 100,
                blocks: 1,
                evictions: 3,
                corrupt_pages: 2,
                unreadable_pages: 6,
                pinned_bytes: 7,
            },
            StatOriginRequests {
                fetched: 4,
                read: 3,
                unchanged: 5,
                changed: 0,
                listed: 2,
                refreshed: 7,
                retried: 1,
            },
        );
        assert!(text.contains("talon_worker_hits_total 1"), "{text}");
        assert!(text.contains("talon_worker_cache_bytes_served_total 4096"));
        assert!(text.contains("talon_worker_evictions_total 3"));
        assert!(text.contains("talon_worker_corrupt_pages_total 2"));
        assert!(
            text.contains("talon_worker_disk_errors_total{op=\"read\"} 6"),
            "{text}"
        );
        assert!(text.contains("talon_worker_cache_used_bytes 10"));
        assert!(text.contains("talon_worker_cache_pinned_bytes 7"), "{text}");
        assert!(text.contains("talon_worker_read_duration_seconds_count 1"));
        assert!(text.contains("talon_worker_stat_origin_requests_total{result=\"unchanged\"} 5"));
        assert!(text.contains("talon_worker_stat_origin_requests_total{result=\"fetched\"} 4"));
        assert!(text.contains("talon_worker_stat_origin_requests_total{result=\"read\"} 3"));
    }
}
