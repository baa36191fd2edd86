//! The gateway's Prometheus metrics: requests by protocol, operation, route and outcome,
//! bytes in and out, and latency to the start of the response.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// How a request was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Read through the cache, every byte from pages already cached (HEAD and empty
    /// answers through the cache count here too: no object bytes were fetched).
    Hit,
    /// Read through the cache; a worker fetched some of the bytes from the origin to
    /// answer (decided by the pieces that had arrived when the response started).
    Fill,
    /// Sent to the origin by route or because the key cannot be cached.
    Bypass,
    /// The cache failed and the origin served it.
    Fallback,
    /// A write, listing or other origin operation.
    Origin,
    /// Answered with an error.
    Failed,
}

impl Outcome {
    /// The name the metrics and the access log give it.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Fill => "fill",
            Outcome::Bypass => "bypass",
            Outcome::Fallback => "fallback",
            Outcome::Origin => "origin",
            Outcome::Failed => "failed",
        }
    }
}

type RequestLabels = [(&'static str, &'static str); 4];
type OpLabels = [(&'static str, &'static str); 2];

/// Every metric of a gateway.
#[derive(Debug)]
pub struct GatewayMetrics {
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    bytes_out: Family<[(&'static str, &'static str); 1], Counter>,
    bytes_in: Family<[(&'static str, &'static str); 1], Counter>,
    latency: Family<OpLabels, Histogram>,
    read_budget_held: Gauge,
    fail_open: Family<[(&'static str, &'static str); 1], Gauge>,
    metadata_cache: Family<[(&'static str, &'static str); 1], Gauge>,
    listing_cache: Family<[(&'static str, &'static str); 1], Gauge>,
    origin_request_limit: Family<[(&'static str, &'static str); 1], Gauge>,
    circuit_open: Family<[(&'static str, String); 1], Gauge>,
    circuit_opened: Family<[(&'static str, String); 1], Gauge>,
    deadlines_missed: Family<[(&'static str, String); 1], Gauge>,
    stale_served: Counter,
    hot_reads_spread: Gauge,
    held_block_files: Family<[(&'static str, &'static str); 1], Gauge>,
    read_ahead: Family<[(&'static str, &'static str); 1], Gauge>,
    listed_read_ahead: Family<[(&'static str, &'static str); 1], Gauge>,
    cluster_rules: Family<[(&'static str, &'static str); 1], Gauge>,
    identities_reloads: Family<[(&'static str, &'static str); 1], Counter>,
    origin_credentials: Family<[(&'static str, &'static str); 2], Gauge>,
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        GatewayMetrics::new()
    }
}

impl GatewayMetrics {
    /// Registers every metric.
    pub fn new() -> GatewayMetrics {
        let latency: Family<OpLabels, Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_05, 2.0, 20)));
        let m = GatewayMetrics {
            registry: Mutex::new(Registry::with_prefix("talon_gateway")),
            requests: Family::default(),
            bytes_out: Family::default(),
            bytes_in: Family::default(),
            latency,
            read_budget_held: Gauge::default(),
            fail_open: Family::default(),
            metadata_cache: Family::default(),
            listing_cache: Family::default(),
            origin_request_limit: Family::default(),
            circuit_open: Family::default(),
            circuit_opened: Family::default(),
            deadlines_missed: Family::default(),
            stale_served: Counter::default(),
            hot_reads_spread: Gauge::default(),
            held_block_files: Family::default(),
            read_ahead: Family::default(),
            listed_read_ahead: Family::default(),
            cluster_rules: Family::default(),
            identities_reloads: Family::default(),
            origin_credentials: Family::default(),
        };
        {
            let mut r = m.registry.lock().unwrap_or_else(|p| p.into_inner());
            r.register(
                "requests",
                "Requests by protocol, operation, route and outcome",
                m.requests.clone(),
            );
            r.register(
                "response_bytes",
                "Object bytes sent to clients",
                m.bytes_out.clone(),
            );
            r.register(
                "upload_bytes",
                "Object bytes received from clients",
                m.bytes_in.clone(),
            );
            r.register(
                "response_start_seconds",
                "Time from request to the start of the response",
                m.latency.clone(),
            );
            r.register(
                "read_budget_held_bytes",
                "Bytes of fetched cache pieces the responses hold now (of --buffer-budget)",
                m.read_budget_held.clone(),
            );
            r.register(
                "metadata_cache",
                "The gateway's object metadata cache, by what: entries, bytes and missing (not found) held now; hits (answered within the staleness bound), expired (found older, asked again), misses, inserts and evictions (by its bounds, one at a time) since start",
                m.metadata_cache.clone(),
            );
            r.register(
                "cluster_rules",
                "The cluster's rules in force in this gateway, by kind: invalidations (talon invalidate) and freshness (talon freshness)",
                m.cluster_rules.clone(),
            );
            r.register(
                "listing_cache",
                "Listing pages kept within the staleness bound, by what: entries and bytes held now; hits (answered from memory), expired, misses, inserts and evictions since start",
                m.listing_cache.clone(),
            );
            r.register(
                "origin_request_limit",
                "Requests to the origin under the per-prefix limit (--origin-requests-per-prefix) since start, by outcome: immediate, queued (waited for their turn), refused (answered SlowDown, never sent)",
                m.origin_request_limit.clone(),
            );
            r.register(
                "fail_open",
                "What cache reads did when a worker failed them, since start, by event: retries (a piece asked of the next worker), resumed (continued from the byte where an answer was cut), kept_bytes (bytes of cut answers kept), skipped (owners passed over for an open circuit), fallbacks (read from the origin)",
                m.fail_open.clone(),
            );
            r.register(
                "worker_circuit_open",
                "1 when reads skip the worker (its circuit is open or being probed), by data-plane address",
                m.circuit_open.clone(),
            );
            r.register(
                "worker_circuit_opened",
                "Times the worker's circuit opened since start, by data-plane address",
                m.circuit_opened.clone(),
            );
            r.register(
                "worker_deadlines_missed",
                "Deadlines (first byte, stall) the worker missed since start, by data-plane address",
                m.deadlines_missed.clone(),
            );
            r.register(
                "stale_served",
                "Reads answered with the last known version past --max-staleness-ms because the origin could not be reached (stale-if-error)",
                m.stale_served.clone(),
            );
            r.register(
                "origin_credentials",
                "The origins' refreshed credentials (AWS's default chain; Azure's SAS file, Entra ID or managed identity), by origin (s3, azure) and what: refreshed and failed (refreshes since start; a failed one keeps the last good credentials until they expire), expires_unix (when those in use expire, Unix seconds)",
                m.origin_credentials.clone(),
            );
            r.register(
                "identities_reloads",
                "Reloads of the identities file on SIGHUP since start, by outcome: applied, or refused (the file did not parse or left a front without credentials; the previous identities stay)",
                m.identities_reloads.clone(),
            );
            r.register(
                "hot_block_reads_spread",
                "Reads of hot blocks sent to an owner other than the block's first (--hot-block-owners), since start",
                m.hot_reads_spread.clone(),
            );
            r.register(
                "held_block_files",
                "Block files co-located workers handed over and this gateway reads again within their hold (--held-file-ms): what=reads, the pieces read from them without asking a worker since start; what=mapped_reads, of those the pieces served from the file's mapping (copied once, by the kernel: plain HTTP, bodies sent untouched); what=held, the files held now",
                m.held_block_files.clone(),
            );
            r.register(
                "read_ahead_prefetches",
                "Prefetches sent ahead of sequential readers (--read-ahead-pieces) since start, by outcome: sent; present, started or declined as the worker answered; failed, no answer",
                m.read_ahead.clone(),
            );
            r.register(
                "read_ahead_objects",
                "Objects fetched ahead of readers going through a listed prefix in key order (--read-ahead-objects) since start, by outcome: started; fetched or failed as they ended; too_large (skipped, over --read-ahead-object-max); not_allowed (skipped, the reader may not read it); no_place (not fetched, every place taken); and pages, the listing pages whose key order is held now",
                m.listed_read_ahead.clone(),
            );
        }
        m
    }

    /// Counts a request.
    pub fn request(
        &self,
        protocol: &'static str,
        operation: &'static str,
        route: &'static str,
        outcome: Outcome,
    ) {
        self.requests
            .get_or_create(&[
                ("protocol", protocol),
                ("operation", operation),
                ("route", route),
                ("outcome", outcome.name()),
            ])
            .inc();
    }

    /// Records time to the response's start.
    pub fn latency(&self, protocol: &'static str, operation: &'static str, d: Duration) {
        self.latency
            .get_or_create(&[("protocol", protocol), ("operation", operation)])
            .observe(d.as_secs_f64());
    }

    /// Object bytes sent.
    pub fn bytes_out(&self, protocol: &'static str, n: u64) {
        self.bytes_out
            .get_or_create(&[("protocol", protocol)])
            .inc_by(n);
    }

    /// Object bytes received.
    pub fn bytes_in(&self, protocol: &'static str, n: u64) {
        self.bytes_in
            .get_or_create(&[("protocol", protocol)])
            .inc_by(n);
    }

    /// Records what refreshing the origin's credentials did (read when `/metrics` is
    /// served).
    pub fn origin_credentials(
        &self,
        origin: &'static str,
        stats: talon_protocols::origin::credentials::RefreshStats,
    ) {
        for (what, value) in [
            ("refreshed", stats.refreshed),
            ("failed", stats.failed),
            ("expires_unix", stats.expires_unix),
        ] {
            self.origin_credentials
                .get_or_create(&[("origin", origin), ("what", what)])
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
    }

    /// Counts a reload of the identities file: `applied`, or refused.
    pub fn identities_reloaded(&self, applied: bool) {
        let outcome = if applied { "applied" } else { "refused" };
        self.identities_reloads
            .get_or_create(&[("outcome", outcome)])
            .inc();
    }

    /// Counts a read served stale (stale-if-error).
    pub fn stale_served(&self) {
        self.stale_served.inc();
    }

    /// Records the bytes of the read budget held now (read when `/metrics` is served).
    pub fn read_budget_held(&self, bytes: u64) {
        self.read_budget_held
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Records how many reads of hot blocks went to another of their owners (read when
    /// `/metrics` is served).
    pub fn hot_reads_spread(&self, reads: u64) {
        self.hot_reads_spread
            .set(i64::try_from(reads).unwrap_or(i64::MAX));
    }

    /// Records the prefetches sent ahead of sequential readers and their answers (read
    /// when `/metrics` is served).
    pub fn read_ahead(&self, stats: talon_cache_client::ReadAheadStats) {
        for (outcome, v) in [
            ("sent", stats.sent),
            ("present", stats.present),
            ("started", stats.started),
            ("declined", stats.declined),
            ("failed", stats.failed),
        ] {
            self.read_ahead
                .get_or_create(&[("outcome", outcome)])
                .set(i64::try_from(v).unwrap_or(i64::MAX));
        }
    }

    /// Records what the read-ahead of listed keys did (read when `/metrics` is served).
    pub fn listed_read_ahead(&self, stats: crate::listed_read_ahead::ListedReadAheadStats) {
        for (outcome, v) in [
            ("started", stats.started),
            ("fetched", stats.fetched),
            ("failed", stats.failed),
            ("too_large", stats.too_large),
            ("not_allowed", stats.not_allowed),
            ("no_place", stats.no_place),
            ("pages", stats.pages),
        ] {
            self.listed_read_ahead
                .get_or_create(&[("outcome", outcome)])
                .set(i64::try_from(v).unwrap_or(i64::MAX));
        }
    }

    /// Records the pieces read from held block files and the files held now (read when
    /// `/metrics` is served).
    pub fn held_block_files(&self, stats: talon_cache_client::HeldFileStats) {
        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        for (what, v) in [
            ("reads", stats.reads),
            ("mapped_reads", stats.mapped_reads),
            ("held", stats.held as u64),
        ] {
            self.held_block_files
                .get_or_create(&[("what", what)])
                .set(gauge(v));
        }
    }

    /// Records the cache client's fail-open tallies and each worker's circuit (read
    /// when `/metrics` is served): every member in `members` (`(id, data-plane
    /// address)`) gets its series (0 until it fails a read), and a worker that left the
    /// membership loses them, so no circuit of a departed worker stays open on a
    /// dashboard or in an alert. Series are labelled by worker id, never by address:
    /// this endpoint is unauthenticated, and the addresses stay behind the
    /// coordinator's signed API.
    pub fn fail_open(
        &self,
        stats: talon_cache_client::FailOpenStats,
        members: &[(String, String)],
        workers: &[talon_cache_client::WorkerHealthView],
    ) {
        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        for (event, value) in [
            ("retries", stats.retries),
            ("resumed", stats.resumed),
            ("kept_bytes", stats.kept_bytes),
            ("skipped", stats.skipped),
            ("fallbacks", stats.fallbacks),
            ("hedged", stats.hedged),
            ("hedges_won", stats.hedges_won),
        ] {
            self.fail_open
                .get_or_create(&[("event", event)])
                .set(gauge(value));
        }
        self.circuit_open.clear();
        self.circuit_opened.clear();
        self.deadlines_missed.clear();
        for (id, _) in members {
            let label = [("worker", id.clone())];
            self.circuit_open.get_or_create(&label).set(0);
            self.circuit_opened.get_or_create(&label).set(0);
            self.deadlines_missed.get_or_create(&label).set(0);
        }
        for w in workers {
            let Some((id, _)) = members.iter().find(|(_, addr)| *addr == w.addr) else {
                continue;
            };
            let label = [("worker", id.clone())];
            let open = w.state != talon_cache_client::CircuitState::Closed;
            self.circuit_open.get_or_create(&label).set(i64::from(open));
            self.circuit_opened
                .get_or_create(&label)
                .set(gauge(w.opened));
            self.deadlines_missed
                .get_or_create(&label)
                .set(gauge(w.deadlines_missed));
        }
    }

    /// Records the metadata cache's and the listing cache's holdings and counts (read
    /// when `/metrics` is served).
    pub fn metadata_cache(
        &self,
        metadata: talon_metadata_cache::CacheStats,
        listings: talon_metadata_cache::CacheStats,
    ) {
        for (family, stats) in [
            (&self.metadata_cache, metadata),
            (&self.listing_cache, listings),
        ] {
            for (what, value) in stats.labelled() {
                family
                    .get_or_create(&[("what", what)])
                    .set(i64::try_from(value).unwrap_or(i64::MAX));
            }
        }
    }

    /// Records how many of the cluster's rules are in force here, by kind.
    pub fn cluster_rules(&self, invalidations: usize, freshness: usize) {
        for (kind, n) in [("invalidations", invalidations), ("freshness", freshness)] {
            self.cluster_rules
                .get_or_create(&[("kind", kind)])
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
                .get_or_create(&[("outcome", outcome)])
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
    }

    /// Renders the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use talon_cache_client::{CircuitState, FailOpenStats, WorkerHealthView};

    use super::*;

    fn view(addr: &str, state: CircuitState) -> WorkerHealthView {
        WorkerHealthView {
            addr: addr.into(),
            state,
            consecutive_failures: 3,
            opened: 2,
            deadlines_missed: 5,
        }
    }

    #[test]
    fn every_member_has_circuit_series_by_id_and_a_departed_worker_has_none() {
        let m = GatewayMetrics::new();
        let members = vec![
            ("w-a".to_owned(), "10.0.0.1:7000".to_owned()),
            ("w-b".to_owned(), "10.0.0.2:7000".to_owned()),
        ];
        let views = [
            view("10.0.0.1:7000", CircuitState::Open),
            view("10.0.0.9:7000", CircuitState::Open),
        ];
        m.fail_open(FailOpenStats::default(), &members, &views);
        let text = m.render();
        assert!(
            text.contains("talon_gateway_worker_circuit_open{worker=\"w-a\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("talon_gateway_worker_circuit_open{worker=\"w-b\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("talon_gateway_worker_deadlines_missed{worker=\"w-a\"} 5"),
            "{text}"
        );
        assert!(!text.contains("10.0.0."), "no address on /metrics: {text}");

        // w-a leaves the membership: its open circuit is no longer reported.
        m.fail_open(FailOpenStats::default(), &members[1..], &views);
        let text = m.render();
        assert!(!text.contains("w-a"), "{text}");
        assert!(
            text.contains("talon_gateway_worker_circuit_open{worker=\"w-b\"} 0"),
            "{text}"
        );
    }
}
