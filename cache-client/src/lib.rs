//! `talon-cache-client`: what a reader of a Talon cluster links.
//!
//! It keeps a membership snapshot from the coordinator (refreshed in the background,
//! the last good one kept when the coordinator is unreachable), locates each block with
//! the coordinator's `RendezvousPlacement`, and reads ranges from the owning workers over
//! pooled, pipelined connections. [`CacheClient::read_range`] returns one ordered stream
//! of bytes: the range is split at block boundaries (and into pieces of bounded size),
//! a few pieces are in flight at once, and the stream holds at most that window in
//! memory, so a slow consumer slows the reads instead of growing the buffer.
//!
//! A worker on this host that offers a local socket (the co-located fast path, found
//! through the membership's [`LocalEndpoint`](talon_coordinator_client::local_endpoint::LocalEndpoint)
//! and this process's host identity) is asked there instead of over TCP: it answers a
//! cached read with the block file's descriptor, and the piece is read from that file
//! here, so the bytes cross no socket between the two processes. A local socket that
//! fails is dropped until the next membership refresh and the worker is asked over TCP.
//!
//! A worker that refuses, times out or cuts a reply is retried for that piece on the next
//! worker in rendezvous order, and, if configured, the piece is read from the origin as
//! a last resort; the bytes a caller receives are exactly the object's bytes or an error,
//! never a silent gap. Terminal answers (not found, version mismatch) are not retried.
//!
//! It does not own the wire format (talon-core), placement (talon-coordinator-client) or the
//! object-store protocols (talon-protocols).

pub mod connection;
pub mod deadline;
pub mod error;
pub mod health;
pub mod hedge;
pub mod hello;
pub mod hot_blocks;
pub mod read_budget;

use std::collections::HashMap;
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use talon_coordinator_client::api::{ClusterGeometry, MembersResponse};
use talon_coordinator_client::client::CoordinatorClient;
use talon_coordinator_client::placement::{PlacementMember, RendezvousPlacement};
use talon_coordinator_client::zones;
use talon_core::cluster_auth::{ClusterSecret, Role};
use talon_core::wire::{FirstRead, IngestMeta, IngestRequest, ReadRangeRequest, StatRequest};
pub use talon_core::wire::{HeaderSet, ObjectHeaders};
use talon_core::{BlockGeometry, BlockId, Message, ObjectId, ObjectVersion};
use talon_protocols::origin::ObjectInfo;
use talon_protocols::origin::Origins;
use talon_protocols::range::ByteRange;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::connection::{Answer, Endpoint, Pool};
pub use crate::deadline::{DeadlineBudget, HopDeadlines};
pub use crate::error::{CacheClientError, Result};
use crate::health::{Admission, Failure, WorkerHealth};
pub use crate::health::{CircuitState, HealthConfig, WorkerHealthView};
pub use crate::hedge::HedgeConfig;
use crate::hedge::{HedgePlan, Hedging};
pub use crate::hot_blocks::HotBlockConfig;
use crate::hot_blocks::HotBlocks;
pub use crate::read_budget::ReaderId;
use crate::read_budget::{Held, ReadBudget};

/// How a cache client behaves.
#[derive(Debug, Clone)]
pub struct CacheClientConfig {
    /// The coordinator's base URL.
    pub coordinator_url: String,
    /// Block geometry. Where the coordinator publishes the cluster's
    /// ([`ClusterGeometry`](talon_coordinator_client::api::ClusterGeometry)), the block
    /// size must equal it ([`connect`](CacheClient::connect) refuses another), or is
    /// taken from it with [`Self::take_cluster_block_size`].
    pub geometry: BlockGeometry,
    /// Use the block size the coordinator publishes instead of `geometry`'s (which
    /// stays where it publishes none). `false`: `geometry` was given, and a cluster
    /// of another block size is refused.
    pub take_cluster_block_size: bool,
    /// Connections kept per worker.
    pub connections_per_worker: usize,
    /// Each piece's deadlines: connect, first byte and stall on the worker hop, the
    /// workers' share, and what the origin has left ([`DeadlineBudget`]).
    pub deadlines: DeadlineBudget,
    /// When a worker's circuit opens and for how long ([`HealthConfig`]).
    pub health: HealthConfig,
    /// When a piece whose first byte is late is asked of the next owner too
    /// ([`HedgeConfig`]; off by default).
    pub hedge: HedgeConfig,
    /// When a block's reads are spread over its first owners instead of its owner
    /// alone ([`HotBlockConfig`]; off by default).
    pub hot_blocks: HotBlockConfig,
    /// Workers tried per piece (the owner, then the next in rendezvous order).
    pub attempts: usize,
    /// Largest piece one request asks for, in bytes.
    pub max_request_bytes: u64,
    /// Pieces in flight per read (the stream's memory bound is this times the piece
    /// size).
    pub read_window: usize,
    /// Bytes of fetched pieces all reads of this client together may hold, from before
    /// the request to a worker until the last copy of the bytes is dropped (for the
    /// gateway: written to the client's socket): one budget for the process, so readers
    /// that stop reading slow the reads behind them instead of growing the process
    /// (SEC-07). A piece waits for its share before it is requested.
    pub max_buffered_bytes: u64,
    /// Bytes of that budget the reads of one [`ReaderId`] may hold together, so that a
    /// few readers that stop reading cannot hold all of it (reads without a reader use
    /// the whole budget only).
    pub max_buffered_bytes_per_reader: u64,
    /// How long a read's first piece may wait for room in the read budget (the whole
    /// budget, and its reader's share) before the read is refused with
    /// [`CacheClientError::Overloaded`]: before its response has started a reader can
    /// still be told to come back, where a wait would only hold its connection. The
    /// pieces after the first wait as long as it takes (their response has started).
    pub admission_wait: Duration,
    /// How often the membership snapshot is refreshed.
    pub membership_refresh: Duration,
    /// Read from the origin when every worker failed; `None` to report the failure.
    pub origin_fallback: Option<Origins>,
    /// The cluster secret: every worker connection starts with the Hello exchange, and
    /// coordinator calls are signed with it.
    pub cluster_secret: ClusterSecret,
    /// The role this client claims ([`Role::Reader`] unless it ingests).
    pub role: Role,
    /// This reader's zone (its failure domain, as workers declare theirs): a hot
    /// block's reads go to its home in this zone when it has one there (empty: no
    /// preference).
    pub zone: String,
    /// Ask workers on this host over their local socket, where they hand over the
    /// block file's descriptor for cached reads (the co-located fast path). `false`
    /// reads every worker over TCP.
    pub local_reads: bool,
}

impl CacheClientConfig {
    /// Defaults for a coordinator at `coordinator_url`, the given geometry and the
    /// cluster's secret, as a reader.
    pub fn new(
        coordinator_url: impl Into<String>,
        geometry: BlockGeometry,
        cluster_secret: ClusterSecret,
    ) -> CacheClientConfig {
        CacheClientConfig {
            cluster_secret,
            role: Role::Reader,
            coordinator_url: coordinator_url.into(),
            geometry,
            take_cluster_block_size: false,
            connections_per_worker: 2,
            deadlines: DeadlineBudget::default(),
            health: HealthConfig::default(),
            hedge: HedgeConfig::default(),
            hot_blocks: HotBlockConfig::default(),
            zone: String::new(),
            attempts: 3,
            // 2 MiB: with the default window of 4, one response holds at most 8 MiB ahead
            // of its client, plus the piece being written (docs/BENCHMARKS.md, slow
            // consumer); 4 MiB pieces held twice that for no measured gain.
            max_request_bytes: 2 << 20,
            read_window: 4,
            max_buffered_bytes: 1 << 30,
            max_buffered_bytes_per_reader: 128 << 20,
            admission_wait: Duration::from_secs(2),
            membership_refresh: Duration::from_secs(1),
            origin_fallback: None,
            local_reads: true,
        }
    }
}

/// An object's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectStat {
    /// Size in bytes.
    pub size: u64,
    /// The origin's version (ETag).
    pub version: ObjectVersion,
    /// Last modification, Unix milliseconds.
    pub last_modified_ms: i64,
    /// Content type (may be empty).
    pub content_type: String,
    /// Content-MD5, content headers and user metadata, or word that the origin
    /// must be asked for them.
    pub headers: ObjectHeaders,
    /// Whether the origin answered because no worker could (the read fell back).
    pub from_origin: bool,
    /// How long before the answer the origin said this: the worker's age for it when
    /// the request gave a max age, zero otherwise (and from a worker that does not
    /// say).
    pub age: Duration,
}

impl ObjectStat {
    /// The object's metadata as the origin client gives it ([`ObjectInfo`], the one
    /// metadata type from the origin to a client's answer), decoded from the wire's
    /// encoding here and nowhere else: the version quoted back into an ETag, a
    /// modification time of 0 as unknown, an empty content type as none. `None` when
    /// the headers did not travel (the origin must be asked for them).
    pub fn into_info(self) -> Option<ObjectInfo> {
        let ObjectHeaders::Carried(headers) = self.headers else {
            return None;
        };
        Some(ObjectInfo {
            size: self.size,
            etag: talon_protocols::conditional::quote_etag(self.version.as_str()),
            last_modified: u64::try_from(self.last_modified_ms)
                .ok()
                .filter(|ms| *ms > 0)
                .map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)),
            content_type: Some(self.content_type).filter(|c| !c.is_empty()),
            headers: *headers,
        })
    }
}

/// How one read goes: whose it is, and whether it may fall back to the origin.
#[derive(Debug, Clone, Copy)]
pub struct ReadOptions {
    /// Whose read it is (the read budget's shares); `None` for the client's own.
    pub reader: Option<ReaderId>,
    /// Whether a piece (or a stat) that no worker can answer is read from the origin
    /// instead, pinned to the version; it needs the client's
    /// [`origin_fallback`](CacheClientConfig::origin_fallback) origins as well. A
    /// reader that promises "the cache or an error" (the gateway's `cache-only` route)
    /// says no.
    pub origin_fallback: bool,
}

impl Default for ReadOptions {
    fn default() -> ReadOptions {
        ReadOptions {
            reader: None,
            origin_fallback: true,
        }
    }
}

/// A stream of the bytes of a range, in order.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes>> + Send + 'static>>;

/// Where one piece of a read came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceSource {
    /// Every byte was already cached on the worker.
    Hit,
    /// The worker fetched bytes from the origin to answer.
    Fill,
    /// The cache failed and the origin answered directly.
    Fallback,
}

/// A running tally of the pieces a read has delivered, by [`PieceSource`].
#[derive(Debug, Default)]
pub struct PieceSources {
    hits: std::sync::atomic::AtomicU64,
    fills: std::sync::atomic::AtomicU64,
    fallbacks: std::sync::atomic::AtomicU64,
}

impl PieceSources {
    fn count(&self, source: PieceSource) {
        let counter = match source {
            PieceSource::Hit => &self.hits,
            PieceSource::Fill => &self.fills,
            PieceSource::Fallback => &self.fallbacks,
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Pieces delivered from cached pages.
    pub fn hits(&self) -> u64 {
        self.hits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Pieces the workers filled from the origin.
    pub fn fills(&self) -> u64 {
        self.fills.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Pieces read from the origin after the cache failed.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(std::sync::atomic::Ordering::Relaxed)
    }
}

struct Inner {
    config: CacheClientConfig,
    /// [`CacheClientConfig::max_buffered_bytes`] and the readers' shares of it.
    budget: Arc<ReadBudget>,
    coordinator: CoordinatorClient,
    placement: RwLock<Arc<RendezvousPlacement>>,
    /// The local socket of each worker (by data-plane address) that runs on this host.
    local_routes: RwLock<Arc<HashMap<String, Endpoint>>>,
    /// This process's host identity; `None` when local reads are off or it is unknown.
    here: Option<String>,
    pool: Pool,
    /// Each worker's circuit.
    health: WorkerHealth,
    /// Each worker's first-byte latencies and the hedge budget.
    hedging: Hedging,
    /// Each block's recent read rate, and whose turn a hot block's next read is.
    hot: HotBlocks,
    /// What fail-open reads did.
    counters: FailOpenCounters,
    /// This client's name in its circuit reports to the coordinator.
    reader_id: String,
    /// When this client was made: the base of the times below.
    created: Instant,
    /// Milliseconds after `created` of the last refresh a failed read asked for (0:
    /// none yet).
    last_forced_refresh_ms: AtomicU64,
    refresher: std::sync::Mutex<Option<JoinHandle<()>>>,
    /// The cluster's invalidations, with each membership poll.
    invalidations: Arc<talon_metadata_cache::Invalidations>,
    /// The cluster's per-prefix freshness, with each membership poll.
    freshness: Arc<talon_metadata_cache::FreshnessRules>,
}

/// What this client's reads did when a worker failed them, since it was made.
#[derive(Debug, Default)]
struct FailOpenCounters {
    retries: AtomicU64,
    resumed: AtomicU64,
    kept_bytes: AtomicU64,
    skipped: AtomicU64,
    fallbacks: AtomicU64,
    hedged: AtomicU64,
    hedges_won: AtomicU64,
}

/// A snapshot of [`CacheClient::fail_open_stats`]: how often reads moved on, and how.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FailOpenStats {
    /// Requests for a piece (or its rest) sent to a worker after another failed it.
    pub retries: u64,
    /// Pieces continued elsewhere from the exact byte where a worker's answer stopped.
    pub resumed: u64,
    /// Bytes of cut answers kept (not asked again) by those resumptions.
    pub kept_bytes: u64,
    /// Owners skipped because their circuit was open.
    pub skipped: u64,
    /// Pieces (or their rests) read from the origin because no worker answered.
    pub fallbacks: u64,
    /// Pieces asked of a second owner because the first owner's first byte was late
    /// ([`HedgeConfig`]).
    pub hedged: u64,
    /// Hedged pieces whose second owner answered first.
    pub hedges_won: u64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(t) = self
            .refresher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            t.abort();
        }
    }
}

/// A client of a Talon cluster. Cheap to clone.
#[derive(Clone)]
pub struct CacheClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CacheClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheClient")
            .field("epoch", &self.epoch())
            .finish_non_exhaustive()
    }
}

/// A piece's bytes and its hold on the read budget, released together.
struct Budgeted {
    bytes: Bytes,
    _held: Held,
}

impl AsRef<[u8]> for Budgeted {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl CacheClient {
    /// Connects: fetches the membership, then keeps it fresh in the background.
    ///
    /// # Errors
    /// [`CacheClientError::NoMembership`] when the coordinator cannot be reached for the
    /// first snapshot.
    pub async fn connect(mut config: CacheClientConfig) -> Result<CacheClient> {
        let coordinator = CoordinatorClient::new(config.coordinator_url.clone())
            .map_err(|e| CacheClientError::NoMembership(e.to_string()))?
            .with_auth(config.cluster_secret.clone(), config.role);
        let members = coordinator
            .members()
            .await
            .map_err(|e| CacheClientError::NoMembership(e.to_string()))?;
        let placement = members
            .checked_placement()
            .map_err(|e| CacheClientError::NoMembership(e.to_string()))?;
        let given = (!config.take_cluster_block_size).then(|| config.geometry.block_size());
        let block_size = ClusterGeometry::block_size_for(members.geometry, given)
            .map_err(|e| CacheClientError::GeometryMismatch(e.to_string()))?;
        if block_size != config.geometry.block_size() {
            config.geometry =
                BlockGeometry::new(block_size, config.geometry.page_size().min(block_size))
                    .map_err(|e| CacheClientError::InvalidRequest(e.to_string()))?;
        }
        let here = if config.local_reads {
            talon_coordinator_client::local_endpoint::host_identity()
        } else {
            None
        };
        let pool = Pool::new(
            config.connections_per_worker,
            config.deadlines.worker.connect,
            config.cluster_secret.clone(),
            config.role,
        );
        pool.set_members(&pool_members(&members));
        let invalidations = Arc::new(talon_metadata_cache::Invalidations::default());
        let freshness = Arc::new(talon_metadata_cache::FreshnessRules::default());
        take_invalidations(&invalidations, &freshness, &members);
        let inner = Arc::new(Inner {
            invalidations,
            freshness,
            local_routes: RwLock::new(Arc::new(local_routes(&members, here.as_deref()))),
            here,
            budget: ReadBudget::new(
                config.max_buffered_bytes,
                config.max_buffered_bytes_per_reader,
            ),
            health: WorkerHealth::new(config.health),
            hedging: Hedging::new(config.hedge),
            hot: HotBlocks::new(config.hot_blocks),
            counters: FailOpenCounters::default(),
            reader_id: reader_id(),
            created: Instant::now(),
            last_forced_refresh_ms: AtomicU64::new(0),
            pool,
            placement: RwLock::new(Arc::new(placement)),
            coordinator,
            config,
            refresher: std::sync::Mutex::new(None),
        });
        let weak = Arc::downgrade(&inner);
        let period = inner.config.membership_refresh;
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(inner) = weak.upgrade() else { return };
                refresh(&inner).await;
                report_circuits(&inner).await;
            }
        });
        *inner.refresher.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        Ok(CacheClient { inner })
    }

    /// The epoch of the membership snapshot in use.
    pub fn epoch(&self) -> u64 {
        self.placement().epoch()
    }

    fn placement(&self) -> Arc<RendezvousPlacement> {
        self.inner
            .placement
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Fetches the membership now (after the coordinator reported a change, or a worker
    /// failed). Keeps the old snapshot if the coordinator cannot be reached.
    pub async fn refresh_membership(&self) {
        refresh(&self.inner).await;
    }

    /// The object's metadata, from the worker that owns it, falling back to the next
    /// workers and (if configured) a HEAD at the origin.
    ///
    /// # Errors
    /// [`CacheClientError::Refused`] with `NotFound` for a missing object; transport
    /// failures as [`CacheClientError::Unavailable`].
    pub async fn stat(&self, object: &ObjectId) -> Result<ObjectStat> {
        self.stat_with(object, ReadOptions::default(), None).await
    }

    /// [`stat`](Self::stat), falling back to the origin only if `options` allow it, and
    /// accepting only metadata learned from the origin at most `max_age` ago (a worker
    /// holding older metadata revalidates it first; `None` leaves it to the worker's
    /// TTL).
    ///
    /// # Errors
    /// As [`stat`](Self::stat).
    pub async fn stat_with(
        &self,
        object: &ObjectId,
        options: ReadOptions,
        max_age: Option<Duration>,
    ) -> Result<ObjectStat> {
        self.stat_reading(object, options, max_age, None).await
    }

    /// [`stat_with`](Self::stat_with) for a reader about to read `next` (object
    /// bytes; its end may lie past the object's, which is not known yet): the
    /// metadata home is the owner of the object's first block, so when that worker
    /// must ask the origin it learns the metadata and the first piece of `next` from
    /// one GET and keeps the bytes, and the read that follows is a hit (one origin
    /// request for a cold read, not a HEAD and a GET). Only a `next` that starts in
    /// the first block and with a `max_age` is sent; the rest is the plain stat.
    ///
    /// # Errors
    /// As [`stat`](Self::stat).
    pub async fn stat_reading(
        &self,
        object: &ObjectId,
        options: ReadOptions,
        max_age: Option<Duration>,
        next: Option<Range<u64>>,
    ) -> Result<ObjectStat> {
        let placement = self.placement();
        let block_size = self.inner.config.geometry.block_size();
        // An object's metadata home is the owner of its first block (of any version).
        let key = BlockId::first_block_placement_key(object, block_size);
        let max_age_ms = max_age.map(|d| u32::try_from(d.as_millis()).unwrap_or(u32::MAX));
        // The first piece of `next`, as the read will ask for it.
        let piece = self
            .inner
            .config
            .max_request_bytes
            .clamp(1, u64::from(talon_core::wire::MAX_READ_LEN));
        let first_read = next
            .filter(|r| r.start < r.end && r.start < block_size && max_age_ms.is_some())
            .map(|r| FirstRead {
                block_size,
                start: r.start,
                end: r.end.min(r.start.saturating_add(piece)).min(block_size),
            });
        let request = Message::Stat(StatRequest {
            object: object.clone(),
            expected_version: None,
            max_age_ms,
            first_read,
        });
        let mut last = CacheClientError::Unavailable("no live worker".into());
        let attempts = self.inner.config.attempts.max(1);
        let mut owners = self.owners_to_ask(placement.locate_top_k_key(&key, attempts), options);
        let workers_until = Instant::now() + self.inner.config.deadlines.workers_share;
        while let Some(addr) = self.next_owner(&mut owners) {
            let answer = self.ask_worker(addr, &request, workers_until, None).await;
            self.note_health(addr, &answer);
            match answer {
                Ok(Answer::Message(Message::StatReply(r))) => {
                    return Ok(ObjectStat {
                        size: r.size,
                        version: r.version,
                        last_modified_ms: r.last_modified_ms,
                        content_type: r.content_type,
                        headers: r.headers,
                        from_origin: false,
                        age: Duration::from_millis(r.age_ms.map_or(0, u64::from)),
                    });
                }
                Ok(other) => match answer_error(other) {
                    e if e.is_transient() => last = e,
                    e => return Err(e),
                },
                Err(e) => last = e,
            }
        }
        self.spawn_refresh();
        let Some(origins) = self.fallback_origins(options) else {
            return Err(last);
        };
        let (client, bucket, key) = origins.route(object)?;
        let info = client.head(&bucket, &key).await?;
        let version = ObjectVersion::from_etag(&info.etag).map_err(|e| {
            CacheClientError::Unavailable(format!("the origin's version is unusable: {e}"))
        })?;
        Ok(ObjectStat {
            size: info.size,
            version,
            last_modified_ms: info
                .last_modified
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            content_type: info.content_type.unwrap_or_default(),
            headers: ObjectHeaders::from_origin(info.headers),
            from_origin: true,
            age: Duration::ZERO,
        })
    }

    /// The origins a read may fall back to: the client's, when it has them and the
    /// read allows it. The one place that decides whether a read that no worker can
    /// answer goes to the origin.
    fn fallback_origins(&self, options: ReadOptions) -> Option<&Origins> {
        if options.origin_fallback {
            self.inner.config.origin_fallback.as_ref()
        } else {
            None
        }
    }

    /// Bytes of fetched pieces held now by every read of this client (`None`) or by
    /// one reader's reads, in whole KiB: what the read budget counts.
    pub fn buffered_bytes(&self, reader: Option<ReaderId>) -> u64 {
        self.inner.budget.held_bytes(reader)
    }

    /// Pieces given room in the read budget since this client was made (each piece of
    /// every read, before it is requested): a counter for metrics, and a way to tell
    /// that reads have stopped moving.
    pub fn budget_grants(&self) -> u64 {
        self.inner.budget.grants()
    }

    /// The bytes `range` of an object of `object_size` bytes at `version`, as an ordered
    /// stream.
    ///
    /// # Errors
    /// [`CacheClientError::InvalidRequest`] for a range outside the object; the stream
    /// itself ends with an error (never early without one) when a piece cannot be read.
    pub fn read_range(
        &self,
        object: &ObjectId,
        version: &ObjectVersion,
        object_size: u64,
        range: Range<u64>,
    ) -> Result<ByteStream> {
        self.read_range_tracked(object, version, object_size, range)
            .map(|(stream, _)| stream)
    }

    /// [`read_range`](Self::read_range), plus a tally of where the pieces delivered so
    /// far came from: cache hits, fills (the worker fetched from the origin), or the
    /// origin directly after the cache failed. A reader uses it to label the read.
    ///
    /// # Errors
    /// As [`read_range`](Self::read_range).
    pub fn read_range_tracked(
        &self,
        object: &ObjectId,
        version: &ObjectVersion,
        object_size: u64,
        range: Range<u64>,
    ) -> Result<(ByteStream, Arc<PieceSources>)> {
        self.read_range_for(None, object, version, object_size, range)
    }

    /// [`read_range_tracked`](Self::read_range_tracked) on behalf of `reader`: its
    /// pieces count against that reader's share of the read budget as well as the
    /// whole budget
    /// ([`max_buffered_bytes_per_reader`](CacheClientConfig::max_buffered_bytes_per_reader)).
    ///
    /// # Errors
    /// As [`read_range`](Self::read_range).
    pub fn read_range_for(
        &self,
        reader: Option<ReaderId>,
        object: &ObjectId,
        version: &ObjectVersion,
        object_size: u64,
        range: Range<u64>,
    ) -> Result<(ByteStream, Arc<PieceSources>)> {
        let options = ReadOptions {
            reader,
            ..ReadOptions::default()
        };
        self.read_range_with(options, object, version, object_size, range)
    }

    /// [`read_range_for`](Self::read_range_for) with every choice of the read in
    /// `options`: its reader, and whether its pieces may fall back to the origin.
    ///
    /// # Errors
    /// As [`read_range`](Self::read_range).
    pub fn read_range_with(
        &self,
        options: ReadOptions,
        object: &ObjectId,
        version: &ObjectVersion,
        object_size: u64,
        range: Range<u64>,
    ) -> Result<(ByteStream, Arc<PieceSources>)> {
        let reader = options.reader;
        if range.start > range.end || range.end > object_size {
            return Err(CacheClientError::InvalidRequest(format!(
                "range {range:?} is outside an object of {object_size} bytes"
            )));
        }
        let geometry = self.inner.config.geometry;
        let spans = geometry
            .split_range(range, object_size)
            .map_err(|e| CacheClientError::InvalidRequest(e.to_string()))?;
        let max = self.inner.config.max_request_bytes.max(1);
        let mut pieces = Vec::new();
        for span in spans {
            let mut offset = span.offset_in_block;
            let end = span.offset_in_block + span.len;
            while offset < end {
                let len = (end - offset)
                    .min(max)
                    .min(u64::from(talon_core::wire::MAX_READ_LEN));
                pieces.push(Piece {
                    block_offset: span.block_offset,
                    offset,
                    len,
                });
                offset += len;
            }
        }
        let me = self.clone();
        let (object, version) = (object.clone(), version.clone());
        let sources = Arc::new(PieceSources::default());
        let tally = sources.clone();
        let budget = self.inner.budget.clone();
        let admission_wait = self.inner.config.admission_wait;
        let stream = futures_util::stream::iter(pieces.into_iter().enumerate())
            .map(move |(i, piece)| {
                let me = me.clone();
                let (object, version, tally) = (object.clone(), version.clone(), tally.clone());
                let budget = budget.clone();
                async move {
                    let hold = budget.hold(reader, piece.len);
                    let held = if i == 0 {
                        tokio::time::timeout(admission_wait, hold)
                            .await
                            .map_err(|_| {
                                CacheClientError::Overloaded(format!(
                                    "no room in the read budget for {admission_wait:?}"
                                ))
                            })?
                    } else {
                        hold.await
                    }
                    .ok_or_else(|| CacheClientError::Unavailable("shutting down".into()))?;
                    let (bytes, source) = me
                        .read_piece(&object, &version, object_size, piece, options)
                        .await?;
                    tally.count(source);
                    Ok((bytes, held))
                }
            })
            .buffered(self.inner.config.read_window.max(1))
            // The share travels with the bytes and goes back when the last reference to
            // them is dropped: after the HTTP stack has written them, not when it was
            // handed them (a reader that never reads keeps its share).
            .map(|r: Result<(Bytes, Held)>| {
                r.map(|(bytes, held)| Bytes::from_owner(Budgeted { bytes, _held: held }))
            });
        Ok((Box::pin(stream), sources))
    }

    /// Pushes `data` into the cache as the bytes of `block` from `offset` (block
    /// coordinates), so that later reads of them are hits with no origin round trip:
    /// for a writer or a prefetcher that already holds exactly what the origin has at
    /// the block's version. The bytes must cover whole pages (the block's last page may
    /// be short). They go to the block's owner, where reads look first; pages already
    /// present there are kept as they are. Needs a client in the [`Role::Ingester`]
    /// role.
    ///
    /// # Errors
    /// [`CacheClientError::InvalidRequest`] for a client in another role;
    /// [`CacheClientError::Refused`] with the worker's code (a range that is not whole
    /// pages, no room, pages being filled); [`CacheClientError::Unavailable`] when the
    /// owner cannot be reached.
    pub async fn put_block(
        &self,
        block: &BlockId,
        object_size: u64,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()> {
        if !self.inner.config.role.may_ingest() {
            return Err(CacheClientError::InvalidRequest(format!(
                "put_block needs a client in the ingester role, not {}",
                self.inner.config.role.name()
            )));
        }
        let meta = IngestMeta {
            block: block.clone(),
            object_size,
            offset,
        };
        meta.validate(data.len() as u64)
            .map_err(|e| CacheClientError::InvalidRequest(e.to_string()))?;
        let placement = self.placement();
        let owner = placement
            .locate_top_k(block, 1)
            .into_iter()
            .next()
            .map(|m| m.addr.clone())
            .ok_or_else(|| CacheClientError::Unavailable("no live worker".into()))?;
        let len = data.len() as u64;
        let request = Message::Ingest(IngestRequest { meta, data });
        let until = Instant::now() + self.inner.config.deadlines.workers_share;
        match self.ask_worker(&owner, &request, until, None).await? {
            Answer::Message(Message::IngestAck(ack))
                if ack.offset == offset && u64::from(ack.len) == len =>
            {
                Ok(())
            }
            other => Err(answer_error(other)),
        }
    }

    /// Pushes a whole object's bytes, `data`, at `version` into the cache, block by
    /// block ([`CacheClient::put_block`]): what a writer that has just stored the object
    /// at the origin does so that its own next read is a hit (read-your-writes).
    ///
    /// # Errors
    /// As [`CacheClient::put_block`], for the first block that fails (the blocks before
    /// it are cached; a cached block is only ever served for this version).
    pub async fn put_object(
        &self,
        object: &ObjectId,
        version: &ObjectVersion,
        data: &[u8],
    ) -> Result<()> {
        let block_size = self.inner.config.geometry.block_size();
        let size = data.len() as u64;
        let mut block_offset = 0u64;
        while block_offset < size {
            let end = (block_offset + block_size).min(size);
            let block = BlockId::new(object.clone(), version.clone(), block_offset, block_size)
                .map_err(|e| CacheClientError::InvalidRequest(e.to_string()))?;
            let bytes = data[block_offset as usize..end as usize].to_vec();
            self.put_block(&block, size, 0, bytes).await?;
            block_offset = end;
        }
        Ok(())
    }

    /// Every known worker's circuit, for metrics and member views.
    pub fn worker_health(&self) -> Vec<WorkerHealthView> {
        self.inner.health.views()
    }

    /// The members of the membership snapshot in use: `(id, data-plane address)`.
    pub fn members(&self) -> Vec<(String, String)> {
        self.placement()
            .members()
            .iter()
            .map(|m| (m.id.clone(), m.addr.clone()))
            .collect()
    }

    /// The cluster's invalidations as this client last heard them (each membership
    /// poll, every [`CacheClientConfig::membership_refresh`]): what a gateway's own
    /// metadata and listings must not answer.
    pub fn invalidations(&self) -> Arc<talon_metadata_cache::Invalidations> {
        self.inner.invalidations.clone()
    }

    /// The cluster's per-prefix freshness as this client last heard it (each
    /// membership poll): the bound a gateway applies under each prefix.
    pub fn freshness_rules(&self) -> Arc<talon_metadata_cache::FreshnessRules> {
        self.inner.freshness.clone()
    }

    /// The first-byte quantile learned for the worker at `addr` (data-plane
    /// address), past which its pieces are hedged; `None` until enough are timed.
    pub fn hedge_threshold(&self, addr: &str) -> Option<Duration> {
        self.inner.hedging.learned(addr)
    }

    /// What reads did when workers failed them, since this client was made.
    pub fn fail_open_stats(&self) -> FailOpenStats {
        let c = &self.inner.counters;
        FailOpenStats {
            retries: c.retries.load(Ordering::Relaxed),
            resumed: c.resumed.load(Ordering::Relaxed),
            kept_bytes: c.kept_bytes.load(Ordering::Relaxed),
            skipped: c.skipped.load(Ordering::Relaxed),
            fallbacks: c.fallbacks.load(Ordering::Relaxed),
            hedged: c.hedged.load(Ordering::Relaxed),
            hedges_won: c.hedges_won.load(Ordering::Relaxed),
        }
    }

    /// Reads of hot blocks sent to an owner other than the block's first
    /// ([`HotBlockConfig`]), since this client was made.
    pub fn hot_reads_spread(&self) -> u64 {
        self.inner.hot.spread()
    }

    /// The owners of a request, in rendezvous order, to be asked one at a time
    /// ([`OwnersToAsk`]).
    fn owners_to_ask<'m>(
        &self,
        owners: Vec<&'m talon_coordinator_client::placement::PlacementMember>,
        options: ReadOptions,
    ) -> OwnersToAsk<'m> {
        OwnersToAsk {
            owners,
            next: 0,
            asked: 0,
            circuits_ignored: false,
            may_ignore_circuits: self.fallback_origins(options).is_none(),
        }
    }

    /// The next owner `owners` says to ask, if any.
    fn next_owner<'m>(&self, owners: &mut OwnersToAsk<'m>) -> Option<&'m str> {
        owners.next(&self.inner.health, &self.inner.counters.skipped)
    }

    /// Tells the worker's circuit how a request went: any answer from the worker is a
    /// success (a refusal too: the worker is alive and said why), except a transient
    /// refusal; a broken connection or a missed deadline is a failure. A piece whose
    /// budget ran out before the worker's own deadlines says nothing of the worker.
    fn note_health(&self, addr: &str, answer: &Result<Answer>) {
        match answer {
            Err(CacheClientError::BudgetSpent(_)) => {}
            Ok(Answer::Partial { error, .. }) | Err(error) => self.worker_failed(
                addr,
                if matches!(error, CacheClientError::DeadlineExceeded(_)) {
                    Failure::Deadline
                } else {
                    Failure::Error
                },
            ),
            Ok(Answer::Message(Message::Error(e))) if e.code.is_transient() => {
                self.worker_failed(addr, Failure::Error)
            }
            Ok(_) => self.inner.health.succeeded(addr),
        }
    }

    /// Tells the worker's circuit of a failure; when that opens the circuit, the
    /// worker's connections are closed, so that every request still waiting on it
    /// (pieces not hedged, or queued behind a hung answer) moves on to the next owner
    /// now rather than at its own deadline.
    fn worker_failed(&self, addr: &str, failure: Failure) {
        if !self.inner.health.failed(addr, failure) {
            return;
        }
        let pool = &self.inner.pool;
        pool.poison_endpoint(&Endpoint::Tcp(addr.to_owned()));
        let local = self
            .inner
            .local_routes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(addr)
            .cloned();
        if let Some(local) = local {
            pool.poison_endpoint(&local);
        }
    }

    /// Asks the worker whose data plane is `addr`: over its local socket when it runs
    /// on this host and offers one, else (or when the local socket cannot be connected)
    /// over TCP. A worker that fails to answer on a connected local socket (a timeout,
    /// a cut connection) is not asked again over TCP: the caller moves on to the next
    /// worker, as it would after a TCP failure, rather than wait for the same worker twice.
    /// `started`, if given, is told when the answer begins.
    async fn ask_worker(
        &self,
        addr: &str,
        request: &Message,
        until: Instant,
        started: Option<oneshot::Sender<()>>,
    ) -> Result<Answer> {
        // A snapshot of the routes (one `Arc`), so the hot path clones no path.
        let routes = self
            .inner
            .local_routes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let hop = &self.inner.config.deadlines.worker;
        if let Some(local) = routes.get(addr) {
            match self.inner.pool.get(local, until).await {
                Err(e @ CacheClientError::BudgetSpent(_)) => return Err(e),
                Ok(conn) => return conn.call(request, hop, until, started).await,
                Err(e) => {
                    tracing::warn!(worker = %addr, error = %e, "the worker's local socket cannot be reached; asking over TCP until the next membership refresh");
                    let mut routes = self
                        .inner
                        .local_routes
                        .write()
                        .unwrap_or_else(|p| p.into_inner());
                    let mut fewer = (**routes).clone();
                    fewer.remove(addr);
                    *routes = Arc::new(fewer);
                }
            }
        }
        let conn = self
            .inner
            .pool
            .get(&Endpoint::Tcp(addr.to_owned()), until)
            .await?;
        conn.call(request, hop, until, started).await
    }

    /// Refreshes the membership in the background after a read found no worker to
    /// answer it: at most once per refresh period however many reads fail (a hung
    /// worker fails every piece it owns, and the coordinator must not pay for each).
    fn spawn_refresh(&self) {
        let now = u64::try_from(self.inner.created.elapsed().as_millis()).unwrap_or(u64::MAX);
        let period = u64::try_from(self.inner.config.membership_refresh.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let last = self.inner.last_forced_refresh_ms.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < period
            || self
                .inner
                .last_forced_refresh_ms
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            if let Some(inner) = inner.upgrade() {
                refresh(&inner).await;
            }
        });
    }

    /// Asks `addr` for the piece `request` names (`want` bytes) and returns the bytes in
    /// hand: a block file handed over is read here.
    async fn ask_bytes(
        &self,
        addr: &str,
        request: &Message,
        want: u64,
        until: Instant,
        started: Option<oneshot::Sender<()>>,
    ) -> Result<Answer> {
        let asked_at = match request {
            Message::ReadRange(r) => r.offset,
            _ => u64::MAX,
        };
        match self.ask_worker(addr, request, until, started).await {
            Ok(Answer::File {
                file,
                offset,
                len,
                from_origin,
            }) if offset == asked_at && u64::from(len) == want => {
                read_handed_off(file, offset, len)
                    .await
                    .map(|bytes| Answer::Data { bytes, from_origin })
            }
            other => other,
        }
    }

    /// [`ask_bytes`](Self::ask_bytes) as a future that owns what it needs, so that a
    /// hedge's loser can be left to finish on its own.
    fn ask_bytes_owned(
        &self,
        addr: &str,
        request: &Message,
        want: u64,
        until: Instant,
        started: Option<oneshot::Sender<()>>,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<Answer>> + Send + 'static>> {
        let (me, addr, request) = (self.clone(), addr.to_owned(), request.clone());
        Box::pin(async move { me.ask_bytes(&addr, &request, want, until, started).await })
    }

    /// Lets the request a hedge did not need finish in the background, so that its
    /// worker's circuit still hears how it went (a hung worker still misses its
    /// deadline and is skipped after, instead of being hedged around forever).
    fn finish_unneeded(
        &self,
        addr: &str,
        answer: Pin<Box<dyn std::future::Future<Output = Result<Answer>> + Send + 'static>>,
    ) {
        let (me, addr) = (self.clone(), addr.to_owned());
        tokio::spawn(async move {
            let answer = answer.await;
            me.note_health(&addr, &answer);
        });
    }

    /// Asks `addr` for a piece and returns the answer and who gave it. When hedging
    /// watches the piece ([`HedgeConfig`]) and its first byte is later than `addr`'s
    /// threshold, the next owner `owners` hands out is asked for it too, and the first
    /// answer that settles the piece wins; the other request finishes in the background.
    /// When neither settles it, the one that delivered more bytes is returned (its
    /// bytes are kept and the rest asked elsewhere). Every worker's circuit is told how
    /// its request went, and a worker that had not begun its answer when the next owner
    /// had finished is told of a failure (a latency outlier).
    async fn ask_piece<'m>(
        &self,
        addr: &'m str,
        owners: &mut OwnersToAsk<'m>,
        request: Message,
        want: u64,
        until: Instant,
    ) -> (&'m str, Result<Answer>) {
        let plan = if owners.has_more() {
            self.inner
                .hedging
                .plan(addr, self.inner.config.deadlines.worker.first_byte)
        } else {
            None
        };
        let Some(plan) = plan else {
            let answer = self.ask_bytes(addr, &request, want, until, None).await;
            self.note_health(addr, &answer);
            return (addr, answer);
        };
        let (tell, mut started) = oneshot::channel();
        let sent = Instant::now();
        let mut first = self.ask_bytes_owned(addr, &request, want, until, Some(tell));
        // With no threshold yet the piece is only watched (its latency learned); nor is
        // it hedged when the budget ends before the threshold (a hedge sent at the
        // deadline could only fail).
        let hedge_at = plan
            .after
            .map(|after| sent + after)
            .filter(|at| *at < until);
        tokio::select! {
            biased;
            began = &mut started => {
                if began.is_ok() {
                    plan.record(sent.elapsed());
                }
                let answer = first.await;
                self.note_health(addr, &answer);
                return (addr, answer);
            }
            answer = &mut first => {
                self.note_health(addr, &answer);
                return (addr, answer);
            }
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(
                hedge_at.unwrap_or(until),
            )), if hedge_at.is_some() => {}
        }
        // The first byte is late. From here on the sample is the time until the whole
        // answer, an upper bound of the first byte's, so that a worker slow for a while
        // raises its own threshold instead of being hedged on every piece.
        let late = |plan: &HedgePlan| plan.record(sent.elapsed());
        let second = if self.inner.hedging.try_spend() {
            self.next_owner(owners)
        } else {
            None
        };
        let Some(second) = second else {
            let answer = first.await;
            late(&plan);
            self.note_health(addr, &answer);
            return (addr, answer);
        };
        let counters = &self.inner.counters;
        counters.hedged.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(worker = %addr, next = %second, after = ?plan.after, "a piece's first byte is late; asking the next owner too");
        let mut hedge = self.ask_bytes_owned(second, &request, want, until, None);
        tokio::select! {
            answer = &mut first => {
                late(&plan);
                self.note_health(addr, &answer);
                if settles(&answer, want) {
                    self.finish_unneeded(second, hedge);
                    return (addr, answer);
                }
                let other = hedge.await;
                self.note_health(second, &other);
                if settles(&other, want) {
                    counters.hedges_won.fetch_add(1, Ordering::Relaxed);
                    return (second, other);
                }
                more_delivered((addr, answer), (second, other), want)
            }
            other = &mut hedge => {
                self.note_health(second, &other);
                if settles(&other, want) {
                    counters.hedges_won.fetch_add(1, Ordering::Relaxed);
                    if matches!(started.try_recv(), Err(oneshot::error::TryRecvError::Empty)) {
                        // A latency outlier: the next owner answered in full before this
                        // one began. It counts towards the worker's circuit like a
                        // failure (three in a row open it, so a frozen worker is skipped
                        // before its first deadline passes); its answer, when it comes,
                        // counts as the success it is.
                        self.worker_failed(addr, Failure::Error);
                    }
                    self.finish_unneeded(addr, first);
                    return (second, other);
                }
                let answer = first.await;
                late(&plan);
                self.note_health(addr, &answer);
                more_delivered((addr, answer), (second, other), want)
            }
        }
    }

    /// Reads one piece: from its owners in rendezvous order (skipping open circuits),
    /// each asked for what is still missing, then from the origin pinned to `version`.
    /// A worker's answer cut after some bytes keeps them: the next source is asked from
    /// the exact byte where it stopped. Every hop runs within the piece's
    /// [`DeadlineBudget`].
    async fn read_piece(
        &self,
        object: &ObjectId,
        version: &ObjectVersion,
        object_size: u64,
        piece: Piece,
        options: ReadOptions,
    ) -> Result<(Bytes, PieceSource)> {
        let started = Instant::now();
        let budget = self.inner.config.deadlines;
        let workers_until = started + budget.workers_share;
        let block = BlockId::new(
            object.clone(),
            version.clone(),
            piece.block_offset,
            self.inner.config.geometry.block_size(),
        )
        .map_err(|e| CacheClientError::InvalidRequest(e.to_string()))?;
        u32::try_from(piece.len)
            .map_err(|_| CacheClientError::InvalidRequest("piece too large".into()))?;
        let placement = self.placement();
        let key = block.placement_key();
        let spread = self.inner.hot.owners();
        let attempts = self.inner.config.attempts.max(spread).max(1);
        let mut ranked = placement.locate_top_k_key(&key, attempts);
        // A hot block is read from its homes in turn (its reader's zone's first); the
        // rest stay behind them in rendezvous order, so a retry or a hedge goes to the
        // next of them. (Not counted when it has one owner: nowhere to spread it.)
        let homes = spread.min(ranked.len());
        if homes > 1
            && let Some(turn) = self
                .inner
                .hot
                .note_read(&key, piece.len, block.len_in(object_size))
        {
            let owner = ranked[0];
            ranked = hot_block_order(
                &placement,
                &key,
                ranked,
                homes,
                turn,
                &self.inner.config.zone,
            );
            if ranked[0].id != owner.id {
                self.inner.hot.count_spread();
            }
        }
        let mut owners = self.owners_to_ask(ranked, options);
        let counters = &self.inner.counters;
        // The bytes of the piece received so far, when an answer was cut.
        let mut kept = BytesMut::new();
        let mut filled = false;
        let mut last = CacheClientError::Unavailable("no live worker".into());
        loop {
            // Time first, so that no probe is claimed for a worker then not asked.
            if Instant::now() >= workers_until {
                last = CacheClientError::DeadlineExceeded(
                    "the workers' share of the piece's deadline budget ran out".into(),
                );
                break;
            }
            let Some(addr) = self.next_owner(&mut owners) else {
                break;
            };
            if owners.asked > 1 {
                counters.retries.fetch_add(1, Ordering::Relaxed);
            }
            let done = kept.len() as u64;
            let want = piece.len - done;
            let request = Message::ReadRange(ReadRangeRequest {
                block: block.clone(),
                object_size,
                offset: piece.offset + done,
                // Fits: checked above, and `want` only shrinks.
                len: want as u32,
            });
            let (addr, answer) = self
                .ask_piece(addr, &mut owners, request, want, workers_until)
                .await;
            match answer {
                Ok(Answer::Data { bytes, from_origin }) if bytes.len() as u64 == want => {
                    let source = if filled || from_origin {
                        PieceSource::Fill
                    } else {
                        PieceSource::Hit
                    };
                    if kept.is_empty() {
                        return Ok((bytes, source));
                    }
                    kept.extend_from_slice(&bytes);
                    return Ok((kept.freeze(), source));
                }
                Ok(Answer::Partial {
                    bytes,
                    from_origin,
                    error,
                }) if (bytes.len() as u64) < want => {
                    tracing::debug!(worker = %addr, kept = bytes.len(), of = want, error = %error, "a worker's answer was cut; asking for the rest elsewhere");
                    counters.resumed.fetch_add(1, Ordering::Relaxed);
                    counters
                        .kept_bytes
                        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    filled |= from_origin;
                    kept.extend_from_slice(&bytes);
                    last = error;
                }
                Ok(Answer::Data { bytes, .. } | Answer::Partial { bytes, .. }) => {
                    last = CacheClientError::Unavailable(format!(
                        "worker {addr} sent {} of {want} bytes",
                        bytes.len(),
                    ));
                }
                Ok(other) => match answer_error(other) {
                    e if e.is_transient() => {
                        tracing::debug!(worker = %addr, error = %e, "retrying a piece on the next worker");
                        last = e;
                    }
                    e => return Err(e),
                },
                Err(e) => {
                    tracing::debug!(worker = %addr, error = %e, "retrying a piece on the next worker");
                    last = e;
                }
            }
        }
        self.spawn_refresh();
        let Some(origins) = self.fallback_origins(options) else {
            return Err(last);
        };
        counters.fallbacks.fetch_add(1, Ordering::Relaxed);
        let done = kept.len() as u64;
        let start = piece.block_offset + piece.offset + done;
        let range = ByteRange {
            start,
            end: start + piece.len - done,
        };
        let until = tokio::time::Instant::from_std(started + budget.total);
        let rest =
            tokio::time::timeout_at(until, self.origin_range(origins, object, version, range))
                .await
                .map_err(|_| {
                    CacheClientError::DeadlineExceeded(
                        "the origin did not answer within the piece's deadline budget".into(),
                    )
                })??;
        if kept.is_empty() {
            return Ok((rest, PieceSource::Fallback));
        }
        kept.extend_from_slice(&rest);
        Ok((kept.freeze(), PieceSource::Fallback))
    }

    async fn origin_range(
        &self,
        origins: &Origins,
        object: &ObjectId,
        version: &ObjectVersion,
        range: ByteRange,
    ) -> Result<Bytes> {
        let (client, bucket, key) = origins.route(object)?;
        Ok(client
            .get_pinned_range(&bucket, &key, range, version.as_str())
            .await?)
    }
}

/// The order a read of a hot block asks members in: one of its `homes` homes
/// ([`zones::homes`]: spanning zones) chosen by `turn` — among those in the reader's
/// `zone` when it has any there — then its other homes, those in the reader's zone
/// first, then the rest of `ranked` in rendezvous order.
fn hot_block_order<'m>(
    placement: &'m RendezvousPlacement,
    key: &[u8; 32],
    ranked: Vec<&'m PlacementMember>,
    homes: usize,
    turn: usize,
    zone: &str,
) -> Vec<&'m PlacementMember> {
    let ordered = zones::reader_order(&zones::homes(placement, key, homes), zone);
    let near = if zone.is_empty() {
        0
    } else {
        ordered.iter().take_while(|m| m.zone == zone).count()
    };
    let pool = if near > 0 { near } else { ordered.len() };
    let Some(&first) = ordered.get(turn % pool.max(1)) else {
        return ranked;
    };
    let mut out = Vec::with_capacity(ranked.len() + ordered.len());
    out.push(first);
    out.extend(ordered.iter().copied().filter(|m| m.id != first.id));
    let rest: Vec<&PlacementMember> = ranked
        .into_iter()
        .filter(|m| !out.iter().any(|o| o.id == m.id))
        .collect();
    out.extend(rest);
    out
}

/// The owners of one request in rendezvous order, handed out as the request gets to
/// them: the one place that decides which worker is asked next. A worker whose circuit
/// is open is skipped (and counted); a probe is claimed only for the worker about to
/// be asked, so a read that ends early never strands one. When every owner was
/// skipped and the read may not fall back to the origin, they are handed out again
/// with their circuits ignored: a slow answer beats an error.
struct OwnersToAsk<'m> {
    owners: Vec<&'m talon_coordinator_client::placement::PlacementMember>,
    next: usize,
    /// Owners handed out so far.
    asked: usize,
    circuits_ignored: bool,
    may_ignore_circuits: bool,
}

impl<'m> OwnersToAsk<'m> {
    /// Whether any owner is left to hand out (its circuit not looked at).
    fn has_more(&self) -> bool {
        self.next < self.owners.len()
    }

    fn next(&mut self, health: &WorkerHealth, skipped: &AtomicU64) -> Option<&'m str> {
        loop {
            if self.next == self.owners.len() {
                if self.asked > 0 || self.circuits_ignored || !self.may_ignore_circuits {
                    return None;
                }
                self.circuits_ignored = true;
                self.next = 0;
            }
            let member = *self.owners.get(self.next)?;
            self.next += 1;
            if !self.circuits_ignored && health.admit(&member.addr) == Admission::Skip {
                skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.asked += 1;
            return Some(member.addr.as_str());
        }
    }
}

/// One request's worth of a read: `len` bytes at `offset` in the block at `block_offset`.
#[derive(Debug, Clone, Copy)]
struct Piece {
    block_offset: u64,
    offset: u64,
    len: u64,
}

/// Every endpoint a member may be reached at (its data plane, and its local socket
/// where it offers one), with the member's id, for the pool.
fn pool_members(members: &MembersResponse) -> Vec<(Endpoint, String)> {
    members
        .members
        .iter()
        .flat_map(|m| {
            let local = (!m.local.socket.is_empty())
                .then(|| (Endpoint::Local(m.local.socket.clone().into()), m.id.clone()));
            std::iter::once((Endpoint::Tcp(m.addr.clone()), m.id.clone())).chain(local)
        })
        .collect()
}

/// The local socket of each member that runs where `here` says this process runs.
fn local_routes(members: &MembersResponse, here: Option<&str>) -> HashMap<String, Endpoint> {
    let Some(here) = here else {
        return HashMap::new();
    };
    members
        .members
        .iter()
        .filter_map(|m| {
            let path = m.local.path_on(here)?.to_owned();
            Some((m.addr.clone(), Endpoint::Local(path)))
        })
        .collect()
}

/// Reads a handed-off piece from the block file: from the page cache without blocking
/// when it is all there (`preadv2` with `RWF_NOWAIT`), the rest on the blocking pool
/// (a read from the disk must not hold a runtime thread). The buffer is not zeroed
/// first: the reads fill its spare capacity and its length grows by what they wrote
/// (zeroing it was 5.6% of the gateway's CPU at 1 MiB, docs/BENCHMARKS.md).
///
/// # Errors
/// [`CacheClientError::Unavailable`] when the file is shorter than the piece or
/// cannot be read: the piece is then asked of the next worker.
async fn read_handed_off(file: std::fs::File, offset: u64, len: u32) -> Result<Bytes> {
    let len = len as usize;
    let mut buf: Vec<u8> = Vec::with_capacity(len);
    let unreadable = |e: std::io::Error| {
        CacheClientError::Unavailable(format!("reading a handed-off block file: {e}"))
    };
    let short = || unreadable(std::io::ErrorKind::UnexpectedEof.into());
    while buf.len() < len {
        match read_cached(&file, &mut buf, offset, len) {
            Ok(Some(0)) => return Err(short()),
            Ok(Some(_)) => {}
            // Not all in the page cache, or a filesystem without RWF_NOWAIT.
            Ok(None) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(unreadable(e)),
        }
    }
    if buf.len() < len {
        buf = tokio::task::spawn_blocking(move || {
            while buf.len() < len {
                let at = offset + buf.len() as u64;
                match rustix::io::pread(&file, rustix::buffer::spare_capacity(&mut buf), at) {
                    Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(std::io::Error::from(e)),
                }
            }
            Ok(buf)
        })
        .await
        .map_err(|e| CacheClientError::Unavailable(format!("a disk task failed: {e}")))?
        .map_err(unreadable)?;
    }
    // `pread` above fills whatever spare capacity the buffer has, which `with_capacity`
    // only promises is at least `len`: the piece is its first `len` bytes.
    buf.truncate(len);
    Ok(Bytes::from(buf))
}

/// Appends to `buf` what of the file's bytes from `offset + buf.len()` the page cache
/// holds, until `buf` holds `len` bytes (or its capacity, if less), without blocking
/// (`preadv2` with `RWF_NOWAIT`): `Some(bytes read)` (0 at the end of the file), `None`
/// when the next bytes are not cached or the filesystem cannot read without blocking.
fn read_cached(
    file: &std::fs::File,
    buf: &mut Vec<u8>,
    offset: u64,
    len: usize,
) -> std::io::Result<Option<usize>> {
    use std::os::fd::AsRawFd;
    let at = libc::off_t::try_from(offset + buf.len() as u64)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let want = len.saturating_sub(buf.len());
    let spare = buf.spare_capacity_mut();
    let iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: spare.len().min(want),
    };
    // SAFETY: the one iovec spans `spare`, memory `buf` owns and nothing else touches
    // while the call runs; the kernel writes at most `iov_len` bytes into it and says
    // how many.
    let read = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, at, libc::RWF_NOWAIT) };
    match usize::try_from(read) {
        Ok(n) => {
            // SAFETY: the kernel initialised the first `n` bytes of the spare capacity
            // (n <= `iov_len` <= its length).
            unsafe { buf.set_len(buf.len() + n) };
            Ok(Some(n))
        }
        Err(_) => {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EOPNOTSUPP) => Ok(None),
                _ => Err(e),
            }
        }
    }
}

/// Whether `answer` ends a piece's search: all `want` bytes, or a refusal that holds
/// on any worker (not found, a version mismatch). A transient refusal, a cut answer or
/// a failure does not.
fn settles(answer: &Result<Answer>, want: u64) -> bool {
    match answer {
        Ok(Answer::Data { bytes, .. }) => bytes.len() as u64 == want,
        Ok(Answer::Message(Message::Error(e))) => !e.code.is_transient(),
        Ok(Answer::Message(_) | Answer::Partial { .. } | Answer::File { .. }) | Err(_) => false,
    }
}

/// Of two answers to one piece, the one to go on from: one that settles it, else a cut
/// answer with more bytes (kept, the rest asked elsewhere), else the first.
fn more_delivered<'m>(
    first: (&'m str, Result<Answer>),
    second: (&'m str, Result<Answer>),
    want: u64,
) -> (&'m str, Result<Answer>) {
    let delivered = |a: &Result<Answer>| match a {
        a if settles(a, want) => u64::MAX,
        Ok(Answer::Partial { bytes, .. }) if (bytes.len() as u64) < want => bytes.len() as u64,
        _ => 0,
    };
    if delivered(&second.1) > delivered(&first.1) {
        second
    } else {
        first
    }
}

fn answer_error(answer: Answer) -> CacheClientError {
    match answer {
        Answer::Message(Message::Error(e)) => CacheClientError::Refused {
            code: e.code,
            message: e.message,
        },
        Answer::Message(other) => {
            CacheClientError::Unavailable(format!("unexpected answer {:?}", other.message_type()))
        }
        Answer::Data { .. } | Answer::File { .. } | Answer::Partial { .. } => {
            CacheClientError::Unavailable("unexpected data".into())
        }
    }
}

/// A name for this client in the coordinator's member view: the process id and a
/// random suffix (two clients in one process, or two hosts' processes with one id, do
/// not collide).
fn reader_id() -> String {
    let mut suffix = [0u8; 4];
    let _ = getrandom::getrandom(&mut suffix);
    let suffix: String = suffix.iter().map(|b| format!("{b:02x}")).collect();
    format!("reader-{}-{suffix}", std::process::id())
}

/// Tells the coordinator this client's circuits, for its member view. Only once some
/// worker has failed this client (before that there is nothing to say, and a healthy
/// cluster's readers send nothing); from then on every refresh period, so that a
/// circuit that closed again is seen to close. A failed report is only logged.
async fn report_circuits(inner: &Inner) {
    let views = inner.health.views();
    if views.is_empty() {
        return;
    }
    let report = talon_coordinator_client::api::CircuitsReport {
        workers: views
            .into_iter()
            .map(|v| talon_coordinator_client::api::WorkerCircuit {
                addr: v.addr,
                state: v.state.name().to_owned(),
                consecutive_failures: v.consecutive_failures,
                opened: v.opened,
                deadlines_missed: v.deadlines_missed,
            })
            .collect(),
    };
    if let Err(e) = inner
        .coordinator
        .report_circuits(&inner.reader_id, &report)
        .await
    {
        tracing::debug!(error = %e, "reporting circuits to the coordinator failed");
    }
}

/// Takes the invalidations and the freshness rules a membership answer lists.
fn take_invalidations(
    invalidations: &talon_metadata_cache::Invalidations,
    freshness: &talon_metadata_cache::FreshnessRules,
    members: &MembersResponse,
) {
    let new = invalidations.update(
        members
            .invalidations
            .iter()
            .map(|i| (i.prefix.as_str(), i.at_unix_ms)),
    );
    if new > 0 {
        tracing::info!(new, "cluster invalidations received");
    }
    let rules = members
        .freshness
        .iter()
        .map(|r| (r.prefix.as_str(), r.max_staleness_ms));
    if freshness.update(rules) {
        tracing::info!(rules = ?members.freshness, "cluster freshness rules changed");
    }
}

async fn refresh(inner: &Inner) {
    match inner.coordinator.members().await.and_then(|members| {
        let placement = members.checked_placement()?;
        Ok((placement, members))
    }) {
        Ok((placement, members)) => {
            take_invalidations(&inner.invalidations, &inner.freshness, &members);
            let placement = Arc::new(placement);
            if placement.is_empty()
                && !inner
                    .placement
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_empty()
            {
                // A coordinator that just restarted knows nobody until the next round of
                // heartbeats: keep the last good snapshot rather than forget the cluster.
                tracing::debug!("the coordinator lists no workers; keeping the last snapshot");
                return;
            }
            let changed = placement.epoch()
                != inner
                    .placement
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .epoch();
            // Rebuilt every time: a local socket dropped after a failure is tried again.
            let routes = local_routes(&members, inner.here.as_deref());
            inner.pool.set_members(&pool_members(&members));
            if changed {
                let addrs: Vec<&str> = placement
                    .members()
                    .iter()
                    .map(|m| m.addr.as_str())
                    .collect();
                inner.health.retain(&addrs);
                inner.hedging.retain(&addrs);
                let addrs = placement.members().len();
                tracing::info!(
                    epoch = placement.epoch(),
                    workers = addrs,
                    local = routes.len(),
                    "membership changed"
                );
                *inner.placement.write().unwrap_or_else(|p| p.into_inner()) = placement;
            }
            *inner
                .local_routes
                .write()
                .unwrap_or_else(|p| p.into_inner()) = Arc::new(routes);
        }
        Err(e @ talon_coordinator_client::error::CoordinatorError::PlacementVersion(_)) => {
            tracing::warn!(error = %e, "membership refused; keeping the last snapshot")
        }
        Err(e) => {
            tracing::debug!(error = %e, "membership refresh failed; keeping the last snapshot")
        }
    }
}

#[cfg(test)]
mod stat_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn stat(headers: ObjectHeaders, last_modified_ms: i64, content_type: &str) -> ObjectStat {
        ObjectStat {
            size: 42,
            version: ObjectVersion::from_etag("\"abc\"").unwrap(),
            last_modified_ms,
            content_type: content_type.into(),
            headers,
            from_origin: false,
            age: Duration::ZERO,
        }
    }

    #[test]
    fn a_stat_decodes_into_the_origins_metadata_and_none_stays_none() {
        let set = HeaderSet {
            cache_control: "no-cache".into(),
            ..HeaderSet::default()
        };
        let info = stat(
            ObjectHeaders::Carried(Box::new(set.clone())),
            1_000,
            "text/plain",
        )
        .into_info()
        .unwrap();
        assert_eq!(info.etag, "\"abc\"");
        assert_eq!(info.size, 42);
        assert_eq!(
            info.last_modified,
            Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1))
        );
        assert_eq!(info.content_type.as_deref(), Some("text/plain"));
        assert_eq!(info.headers, set);
        let unknown = stat(ObjectHeaders::Carried(Box::default()), 0, "")
            .into_info()
            .unwrap();
        assert_eq!((unknown.last_modified, unknown.content_type), (None, None));
        assert!(stat(ObjectHeaders::AskOrigin, 1, "x").into_info().is_none());
    }
}

#[cfg(test)]
mod handed_off_tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Write as _;

    use super::*;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// A block file of 3 MiB and 5 bytes (written here, so in the page cache: the
    /// non-blocking read takes all of it), pieces read at odd offsets, the file's last
    /// bytes, and a piece past its end refused as unavailable (asked of the next worker).
    #[tokio::test]
    async fn a_handed_off_piece_is_its_bytes_and_a_short_file_is_unavailable() {
        let bytes = pattern(3 * 1024 * 1024 + 5);
        let mut file = unnamed_file();
        file.write_all(&bytes).unwrap();
        for (offset, len) in [
            (0, 4096),
            (1_048_581, 1_048_576),
            (3 * 1024 * 1024, 5),
            (7, 1),
        ] {
            let got = read_handed_off(file.try_clone().unwrap(), offset, len)
                .await
                .unwrap();
            let range = offset as usize..offset as usize + len as usize;
            assert!(got[..] == bytes[range], "piece at {offset} of {len}");
        }
        let past = read_handed_off(file.try_clone().unwrap(), 3 * 1024 * 1024, 6).await;
        assert!(
            matches!(past, Err(CacheClientError::Unavailable(_))),
            "{past:?}"
        );
    }

    /// An unnamed file in the temporary folder (removed once opened).
    fn unnamed_file() -> std::fs::File {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("handed-off-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        file
    }
}
