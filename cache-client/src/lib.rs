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
//! Where each part lives: [`CacheClient`] and its construction here; `config` (how a
//! client behaves, how one read goes); `membership` (the snapshot, its refresh, the
//! workers' endpoints, circuit reports); `stat` (an object's metadata); `read` (the byte
//! stream, pieces, owner order, handed-off files, the origin fallback); `read_ahead`
//! (the pieces ahead of a sequential reader filled before it asks); `write`
//! (write-through of blocks and small objects); and the machinery beside them:
//! [`connection`] (pooled, pipelined worker connections), [`hello`] (their
//! authentication), [`health`] (circuits), [`hedge`] (late pieces asked twice),
//! [`hot_blocks`] (more than one home), [`deadline`] (each piece's time budget) and
//! [`read_budget`] (the bytes all reads may hold).
//!
//! It does not own the wire format (talon-core), placement (talon-coordinator-client) or the
//! object-store protocols (talon-protocols).

pub mod connection;
pub mod deadline;
pub mod error;
pub mod health;
pub mod hedge;
mod held_files;
pub mod hello;
pub mod hot_blocks;
pub mod read_budget;

mod config;
mod membership;
mod read;
mod read_ahead;
mod stat;
mod write;

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

pub use crate::config::{CacheClientConfig, ReadOptions};
use crate::connection::{Answer, Endpoint, Lane, Pool};
pub use crate::deadline::{DeadlineBudget, HopDeadlines};
pub use crate::error::{CacheClientError, Result};
use crate::health::{Admission, Failure, WorkerHealth};
pub use crate::health::{CircuitState, HealthConfig, WorkerHealthView};
pub use crate::hedge::HedgeConfig;
use crate::hedge::{HedgePlan, Hedging};
pub use crate::held_files::{HeldFileStats, HeldFilesConfig};
pub use crate::hot_blocks::HotBlockConfig;
use crate::hot_blocks::HotBlocks;
use crate::membership::{
    local_routes, pool_members, reader_id, refresh, report_circuits, take_invalidations,
};
pub use crate::read::{ByteStream, PieceSource, PieceSources};
pub use crate::read_ahead::ReadAheadStats;
pub use crate::read_budget::ReaderId;
use crate::read_budget::{Held, ReadBudget};
pub use crate::stat::ObjectStat;

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
    /// Block files co-located workers handed over, read again within their hold.
    held: held_files::HeldFiles,
    /// Recent reads' ends and the prefetches sent ahead of sequential readers.
    read_ahead: read_ahead::ReadAhead,
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
            config.stat_connections_per_worker,
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
            held: held_files::HeldFiles::new(config.held_files),
            read_ahead: read_ahead::ReadAhead::new(config.read_ahead_pieces),
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
                inner.held.sweep(Instant::now());
                refresh(&inner).await;
                report_circuits(&inner).await;
            }
        });
        *inner.refresher.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        Ok(CacheClient { inner })
    }

    /// Every known worker's circuit, for metrics and member views.
    pub fn worker_health(&self) -> Vec<WorkerHealthView> {
        self.inner.health.views()
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

    /// Pieces read from block files that co-located workers handed over, without
    /// asking them again ([`HeldFilesConfig`]), since this client was made (and of
    /// those, how many from a file's mapping); and how many such files are held now.
    pub fn held_file_stats(&self) -> HeldFileStats {
        self.inner.held.stats()
    }

    /// Prefetches sent ahead of sequential readers and how workers answered them
    /// (`crate::read_ahead`), since this client was made.
    pub fn read_ahead_stats(&self) -> ReadAheadStats {
        self.inner.read_ahead.stats()
    }

    /// Reads of hot blocks sent to an owner other than the block's first
    /// ([`HotBlockConfig`]), since this client was made.
    pub fn hot_reads_spread(&self) -> u64 {
        self.inner.hot.spread()
    }
}
