//! The miss path: making the pages a read needs present, fetching absent ones from the
//! origin.
//!
//! A read's pages are planned on the block ([`Block::plan`]): present pages are served,
//! pages another request is already fetching are waited for (one origin fetch however
//! many readers), and the rest are fetched here as one ranged GET pinned with `If-Match`
//! on the block's version, extended by a little readahead. Origin requests are bounded
//! by a semaphore and retried with backoff on throttling, 5xx, resets and cut bodies.
//! The reader whose fetch covers its whole read is answered from the fetched bytes at
//! once, while they are written and synced behind it (write-behind, bounded in bytes):
//! a cold read waits for the origin, not for the cache disk. The pages are called
//! present only once durable, so every other reader still reads them from the block.
//! Disk work runs on the blocking pool and origin work on the runtime, so the data plane
//! never waits on either. When a fill cannot fit in the budget even after eviction, the
//! requested bytes are served straight from the origin without being cached.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use talon_core::wire::ReadRangeRequest;
use talon_protocols::range::ByteRange;
use tokio::sync::Semaphore;

use crate::block_store::{Block, BlockStore, FillPlan, Reservation};
use crate::error::{Result, WorkerError};
use crate::metrics::WorkerMetrics;
use crate::origins::{Origins, StatCache};
use crate::prefetch::{PrefetchBounds, Prefetches};

/// Default of [`LoaderConfig::write_behind_bytes`]: 64 MiB, eight windows of a reader's
/// 2 MiB pieces four at a time, enough to keep several sequential readers off the disk's
/// sync latency.
pub const DEFAULT_WRITE_BEHIND_BYTES: u64 = 64 << 20;

/// Write-behind permits are counted in these units, so that a fill of any size maps
/// to a permit count the semaphore can hold.
const WRITE_BEHIND_UNIT: u64 = 64 << 10;

/// Tuning of the miss path.
#[derive(Debug, Clone)]
pub struct LoaderConfig {
    /// Pages fetched beyond a read's last page (within its block). Default 0: the
    /// cache client already asks for the pieces ahead of a reader (its window), and a
    /// page ahead of a random read is origin traffic nobody asked for.
    pub readahead_pages: u32,
    /// Most pages one origin fetch covers.
    pub max_fill_pages: u32,
    /// Most origin requests in flight at once.
    pub max_origin_requests: usize,
    /// Retries after the first attempt, for retryable failures.
    pub origin_retries: u32,
    /// First backoff; doubles with every retry (plus jitter).
    pub retry_backoff: Duration,
    /// Most fetched bytes of fills answered before they are durable: counted from the
    /// answer until the pages are synced and the answer is sent, whichever is later. A
    /// fill beyond it is made durable before its reader is answered (a disk slower than
    /// the origin slows the reads down instead of memory and pending syncs growing).
    /// 0: every fill is durable before its answer.
    pub write_behind_bytes: u64,
    /// Fills started ahead of readers (the wire's Prefetch) at once, per worker and per
    /// object ([`crate::prefetch`]).
    pub prefetch: PrefetchBounds,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        LoaderConfig {
            readahead_pages: 0,
            max_fill_pages: 16,
            max_origin_requests: 64,
            origin_retries: 3,
            retry_backoff: Duration::from_millis(20),
            write_behind_bytes: DEFAULT_WRITE_BEHIND_BYTES,
            prefetch: PrefetchBounds::default(),
        }
    }
}

/// Reports the end of a fill to its waiters exactly once, also when the fill is
/// abandoned (the request's task dropped or panicked): they are then told it failed,
/// instead of waiting on a fill nobody will finish.
struct FillGuard {
    block: Arc<Block>,
    pages: std::ops::Range<u32>,
    done: Option<tokio::sync::watch::Sender<Option<crate::block_store::FillOutcome>>>,
}

impl FillGuard {
    /// Offers the fill's fetched bytes (from block offset `span_start`) to its waiters
    /// while they are written behind ([`Block::publish_written_behind`]), and wakes them.
    fn offer(&self, span_start: u64, data: Bytes) {
        self.block
            .publish_written_behind(&self.pages, span_start, data);
        if let Some(done) = &self.done {
            // The outcome is still to come; the wake-up makes them look for the bytes.
            done.send_modify(|_| {});
        }
    }

    fn finish(&mut self, outcome: crate::block_store::FillOutcome) {
        if let Some(done) = self.done.take() {
            self.block.finish_fill(self.pages.clone(), done, outcome);
        }
    }
}

impl Drop for FillGuard {
    fn drop(&mut self) {
        self.finish(Err(Arc::new(WorkerError::Unavailable(
            "the fill was abandoned".into(),
        ))));
    }
}

/// What a fill did with the pages it was to fetch.
#[derive(Debug)]
enum Filled {
    /// Fetched and stored in the block.
    Stored,
    /// Fetched, but the cache disk refused them (full, failing, its folder removed):
    /// `data` holds the pages' bytes, from `span_start` in the block.
    NotStored { data: Bytes, span_start: u64 },
}

/// How a read will be served.
#[derive(Debug)]
pub enum Prepared {
    /// Every needed page is present in the block: send from its file.
    Cached {
        /// The block.
        block: Arc<Block>,
        /// Whether this request fetched (or waited for another's fetch of) any of
        /// its pages from the origin: a fill rather than a hit.
        from_origin: bool,
    },
    /// The bytes could not be cached (no room); here they are, from the origin.
    PassThrough(Bytes),
    /// The bytes cannot be kept and were not fetched ([`Durability::KeptOnly`] only).
    NotKept,
    /// Every byte it reads was fetched from the origin by this request's fill, or by a
    /// fill it joined; here they are, while they are written into the block behind the
    /// answer (readers of the same pages are answered from the same bytes until they
    /// are present, then from the block).
    Fetched(Bytes),
}

/// Whether a reader may be answered before its fetched bytes are durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Answer from the fetched bytes while they are written behind (a client's read).
    WriteBehind,
    /// Answer only once every byte is present in the block (a warm task, whose answer
    /// says the bytes are cached).
    BeforeAnswer,
    /// As `BeforeAnswer`, for a request that wants no bytes back (a prefetch): where the
    /// bytes cannot be kept (no room, a disk or descriptor failure) nothing is fetched
    /// from the origin to pass through; [`Prepared::NotKept`] says so.
    KeptOnly,
}

/// Pages fetched from the origin for a fill, not yet in the block.
#[derive(Debug)]
struct FetchedPages {
    data: Bytes,
    /// Where `data` starts, in block coordinates.
    span_start: u64,
    reservation: Reservation,
}

impl FetchedPages {
    /// The bytes `req` reads, when all of them lie in these pages.
    fn answer_for(&self, req: &ReadRangeRequest) -> Option<Bytes> {
        let start = req.offset.checked_sub(self.span_start)?;
        let end = start.checked_add(u64::from(req.len))?;
        (end <= self.data.len() as u64).then(|| self.data.slice(start as usize..end as usize))
    }
}

/// Writes fetched pages into the block, durably, and marks them present. A disk that
/// refuses them is not an error of the read: `NotStored` hands the bytes back.
async fn commit(
    store: &Arc<BlockStore>,
    metrics: &WorkerMetrics,
    block: &Arc<Block>,
    pages: Range<u32>,
    fetched: FetchedPages,
) -> Result<Filled> {
    let FetchedPages {
        data,
        span_start,
        reservation,
    } = fetched;
    let (store, b, kept) = (store.clone(), block.clone(), data.clone());
    match blocking(move || store.commit_fill(&b, pages, &kept, reservation)).await {
        Ok(()) => Ok(Filled::Stored),
        Err(e @ WorkerError::Io { .. }) => {
            tracing::warn!(error = %e, "the cache disk failed; serving the read from the origin");
            metrics.disk_error("store");
            Ok(Filled::NotStored { data, span_start })
        }
        Err(e) => Err(e),
    }
}

/// Writes fetched pages into the block behind their answer. Returns whether they were
/// stored: a disk that refuses them counts an error and ends the fill without them (its
/// waiters plan again and meet the disk, or the origin, themselves). `answered`: a
/// reader was answered from them already (a read's fill; a stat's first bytes have
/// none yet), so a refusal counts that read as passed through.
async fn commit_behind(
    store: &Arc<BlockStore>,
    metrics: &WorkerMetrics,
    block: &Arc<Block>,
    pages: Range<u32>,
    fetched: FetchedPages,
    answered: bool,
) -> Result<bool> {
    let FetchedPages {
        data, reservation, ..
    } = fetched;
    let (store, b) = (store.clone(), block.clone());
    match blocking(move || store.commit_fill_behind(&b, pages, data, reservation)).await {
        Err(e @ WorkerError::Io { .. }) => {
            tracing::warn!(error = %e, "the cache disk failed; a fill answered from memory was not kept");
            metrics.disk_error("store");
            // Its reader was served from the origin without caching, as a read whose
            // fill the disk refused before its answer is.
            if answered {
                metrics.pass_through("disk_error");
            }
            Ok(false)
        }
        other => other.map(|()| true),
    }
}

/// An answer from a fill's fetched bytes, holding the fill's share of the write-behind
/// bound while the reply is queued and sent.
struct HeldAnswer {
    bytes: Bytes,
    _permit: Arc<tokio::sync::OwnedSemaphorePermit>,
}

impl AsRef<[u8]> for HeldAnswer {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Removes `block` if a failed fill left it without a page (SEC-05: no empty block
/// file stays behind).
async fn forget_if_empty(store: &Arc<BlockStore>, block: &Arc<Block>) {
    let (store, b) = (store.clone(), block.clone());
    let _ = blocking(move || {
        store.forget_if_empty(&b);
        Ok(())
    })
    .await;
}

/// The miss loader.
#[derive(Debug)]
pub struct Loader {
    store: Arc<BlockStore>,
    origins: Arc<Origins>,
    stats: Arc<StatCache>,
    origin_slots: Arc<Semaphore>,
    /// Bytes being written behind their answers, in [`WRITE_BEHIND_UNIT`]s.
    write_behind: Arc<Semaphore>,
    config: LoaderConfig,
    metrics: Arc<WorkerMetrics>,
    /// Fills started ahead of readers.
    prefetches: Prefetches,
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| WorkerError::Unavailable(format!("a disk task failed: {e}")))?
}

impl Loader {
    /// A loader over `store`, fetching from `origins`.
    pub fn new(
        store: Arc<BlockStore>,
        origins: Arc<Origins>,
        stats: Arc<StatCache>,
        config: LoaderConfig,
        metrics: Arc<WorkerMetrics>,
    ) -> Loader {
        let origin_slots = Arc::new(Semaphore::new(config.max_origin_requests.max(1)));
        let units = (config.write_behind_bytes / WRITE_BEHIND_UNIT)
            .min(Semaphore::MAX_PERMITS as u64) as usize;
        Loader {
            store,
            origins,
            stats,
            origin_slots,
            write_behind: Arc::new(Semaphore::new(units)),
            prefetches: Prefetches::new(config.prefetch),
            config,
            metrics,
        }
    }

    /// The fills started ahead of readers.
    pub fn prefetches(&self) -> &Prefetches {
        &self.prefetches
    }

    /// The worker's counters.
    pub fn metrics(&self) -> &Arc<WorkerMetrics> {
        &self.metrics
    }

    /// The block store.
    pub fn store(&self) -> &Arc<BlockStore> {
        &self.store
    }

    /// The block to serve `req` from when that needs no waiting at all: every page
    /// present and verified, nothing to read from disk or fetch (see
    /// [`BlockStore::ready_for_read`]), and whether its bytes came from the origin for
    /// this read (a stat's first read kept them: [`Block::take_kept_unread`]). Counts a
    /// hit, or a miss for those. `None`: use [`Loader::prepare`].
    pub fn try_hit(&self, req: &ReadRangeRequest) -> Option<(Arc<Block>, bool)> {
        let block = self.store.ready_for_read(
            &req.block,
            req.object_size,
            req.offset,
            u64::from(req.len),
        )?;
        let from_origin = block.take_kept_unread();
        if from_origin {
            self.metrics.miss();
        } else {
            self.metrics.hit();
        }
        Some((block, from_origin))
    }

    /// The bytes of `req` when a fill of its block is writing them behind its answer
    /// ([`Block::written_behind`]): the read that follows a cold object's stat, or one
    /// that joins a fill after its fetch. Counted as a miss, as every reader of a fill
    /// is (so is a second read of the same pages before they are present). `None`: use
    /// [`Loader::prepare`]. Takes no lock but the store's index and the block's state,
    /// so the hit path's thread answers it.
    pub fn try_written_behind(&self, req: &ReadRangeRequest) -> Option<Bytes> {
        let block = self.store.get(&req.block)?;
        if block.object_size != req.object_size {
            return None;
        }
        let bytes = block.written_behind(req.offset, u64::from(req.len))?;
        let _ = block.take_kept_unread();
        self.metrics.miss();
        Some(bytes)
    }

    /// The block `req` reads, created empty if not cached. When it is cached for
    /// another object size (the first requester named a wrong one, SEC-05), the origin
    /// decides: if this version's size there is what `req` says, the block is
    /// discarded and made again; otherwise `req` is the wrong one and is refused. A
    /// wrong size never locks an object out of the cache.
    ///
    /// # Errors
    /// Disk errors; [`WorkerError::InvalidRequest`] for a size the origin contradicts;
    /// the origin's error when it cannot say.
    async fn block_for(&self, req: &ReadRangeRequest) -> Result<Arc<Block>> {
        let store = self.store.clone();
        let (id, size) = (req.block.clone(), req.object_size);
        let first = blocking(move || store.get_or_create(&id, size)).await;
        let Err(WorkerError::ObjectSizeConflict {
            requested,
            recorded,
        }) = first
        else {
            return first;
        };
        let info = self.stats.stat(req.block.object()).await?;
        let origin_version = talon_core::ObjectVersion::from_etag(&info.etag)?;
        if origin_version != *req.block.version() {
            // The object has moved on: neither size can be checked; refuse as before.
            return Err(WorkerError::ObjectSizeConflict {
                requested,
                recorded,
            });
        }
        if info.size != requested {
            return Err(WorkerError::InvalidRequest(format!(
                "object size {requested} is not this version's size ({} at the origin)",
                info.size
            )));
        }
        let store = self.store.clone();
        let (id, size) = (req.block.clone(), req.object_size);
        blocking(move || {
            store.discard(&id);
            store.get_or_create(&id, size)
        })
        .await
    }

    /// Makes the bytes of `req` servable: present (and verified) in the block, or in
    /// memory when they cannot be cached or (with [`Durability::WriteBehind`]) when this
    /// request fetched them all and they are still being written.
    ///
    /// # Errors
    /// The origin's error (not found, version mismatch, ...) after retries; disk errors.
    pub async fn prepare(
        &self,
        req: &ReadRangeRequest,
        durability: Durability,
    ) -> Result<Prepared> {
        let mut block = match self.block_for(req).await {
            Ok(block) => block,
            // Out of descriptors: not the disk's fault (the descriptor budget should
            // prevent it; something else in the process holds them).
            Err(e @ WorkerError::Io { .. }) if e.is_out_of_descriptors() => {
                tracing::warn!(error = %e, "out of open files for a new block; serving the read from the origin");
                return self.uncached(req, durability, "no_descriptors").await;
            }
            // The cache disk refuses a new block file (full, failing, its folder
            // removed): the read is served from the origin rather than failed.
            Err(e @ WorkerError::Io { .. }) => {
                tracing::warn!(error = %e, "the cache disk failed; serving the read from the origin");
                self.metrics.disk_error("create");
                return self.uncached(req, durability, "disk_error").await;
            }
            Err(e) => return Err(e),
        };
        let need = block.pages_for(req.offset, u64::from(req.len));
        let mut missed = false;
        loop {
            if block.is_evicted() {
                block = self.block_for(req).await?;
            }
            let readahead_end = need.end.saturating_add(self.config.readahead_pages);
            match block.plan(need.clone(), readahead_end, self.config.max_fill_pages) {
                FillPlan::Ready => {
                    if block.is_evicted() {
                        continue;
                    }
                    let store = self.store.clone();
                    let (b, pages) = (block.clone(), need.clone());
                    if blocking(move || store.verify(&b, pages)).await? {
                        // Pages a stat fetched for this read count as its fill.
                        let missed = missed | block.take_kept_unread();
                        if missed {
                            self.metrics.miss();
                        } else {
                            self.metrics.hit();
                        }
                        return Ok(Prepared::Cached {
                            block,
                            from_origin: missed,
                        });
                    }
                    // Pages failed their checksum and were dropped: fetch them again.
                }
                FillPlan::Wait(mut rx) => {
                    missed = true;
                    loop {
                        // The outcome is read (and the wake-up marked seen) before the
                        // bytes are looked for: an offer publishes its bytes before it
                        // wakes, so one between the two is found, one after wakes us.
                        let outcome = rx.borrow_and_update().clone();
                        // A fill being written behind answers its joiners from its
                        // bytes, as it answered its own reader, instead of after its
                        // sync: those that come while it writes, and those that waited
                        // for its fetch (woken when it offers them: FillGuard::offer).
                        if durability == Durability::WriteBehind
                            && let Some(answer) =
                                block.written_behind(req.offset, u64::from(req.len))
                        {
                            let _ = block.take_kept_unread();
                            self.metrics.miss();
                            return Ok(Prepared::Fetched(answer));
                        }
                        if let Some(outcome) = outcome {
                            if let Err(e) = outcome {
                                return Err(WorkerError::Shared(e));
                            }
                            break;
                        }
                        if rx.changed().await.is_err() {
                            break;
                        }
                    }
                }
                FillPlan::Fill { pages, done } => {
                    missed = true;
                    // Whatever happens to this request (an error, a panic, the task
                    // dropped), the readers waiting on this fill are told.
                    let mut fill = FillGuard {
                        block: block.clone(),
                        pages: pages.clone(),
                        done: Some(done),
                    };
                    self.metrics.fill_started();
                    let fetched = match self.fetch_fill(&block, pages.clone()).await {
                        Ok(Some(fetched)) => fetched,
                        Ok(None) => {
                            self.metrics.fill_ended();
                            fill.finish(Ok(()));
                            return self.uncached(req, durability, "no_room").await;
                        }
                        Err(e) => {
                            self.metrics.fill_ended();
                            return Err(self.failed_fill(&mut fill, &block, e).await);
                        }
                    };
                    if durability == Durability::WriteBehind
                        && let Some(answer) = fetched.answer_for(req)
                        && let Some(permit) = self.write_behind_permit(fetched.data.len())
                    {
                        self.metrics.miss();
                        // The fill's share of the bound is held until its pages are
                        // durable and its answer is gone (the answer shares the fill's
                        // buffer): what is being written and what waits on a slow
                        // reader's socket both count.
                        let permit = Arc::new(permit);
                        let answer = Bytes::from_owner(HeldAnswer {
                            bytes: answer,
                            _permit: permit.clone(),
                        });
                        fill.offer(
                            fetched.span_start,
                            Bytes::from_owner(HeldAnswer {
                                bytes: fetched.data.clone(),
                                _permit: permit.clone(),
                            }),
                        );
                        let (store, metrics) = (self.store.clone(), self.metrics.clone());
                        let block = block.clone();
                        tokio::spawn(async move {
                            let result =
                                commit_behind(&store, &metrics, &block, pages, fetched, true).await;
                            drop(permit);
                            let stored = matches!(result, Ok(true));
                            // Finished before it stops counting in flight: once none is,
                            // a reader of these pages finds them present, not in a fill.
                            fill.finish(result.map(|_| ()).map_err(Arc::new));
                            metrics.fill_ended();
                            if !stored {
                                forget_if_empty(&store, &block).await;
                            }
                        });
                        return Ok(Prepared::Fetched(answer));
                    }
                    let result = commit(&self.store, &self.metrics, &block, pages, fetched).await;
                    self.metrics.fill_ended();
                    match result {
                        Ok(Filled::Stored) => fill.finish(Ok(())),
                        Ok(Filled::NotStored { data, span_start }) => {
                            // The waiting readers plan again (and meet the disk
                            // themselves); this one has the bytes already.
                            fill.finish(Ok(()));
                            forget_if_empty(&self.store, &block).await;
                            if durability == Durability::KeptOnly {
                                return Ok(Prepared::NotKept);
                            }
                            let start = req.offset.checked_sub(span_start);
                            let end = start.map(|s| s + u64::from(req.len));
                            if let (Some(start), Some(end)) = (start, end)
                                && end <= data.len() as u64
                            {
                                self.metrics.miss();
                                self.metrics.pass_through("disk_error");
                                return Ok(Prepared::PassThrough(
                                    data.slice(start as usize..end as usize),
                                ));
                            }
                            return self.uncached(req, durability, "disk_error").await;
                        }
                        Err(e) => return Err(self.failed_fill(&mut fill, &block, e).await),
                    }
                }
            }
        }
    }

    /// Keeps bytes of an object's first block that a Stat fetched with its metadata
    /// (one origin GET for both), in the block of `info`'s version for `block_size`,
    /// so that the read that follows is a hit. Only pages nobody holds or fills are
    /// written, and only whole ones (a page cut by the end of the bytes is left to the
    /// read that needs it, unless the object ends there). Best effort: the read fills
    /// what is not kept.
    ///
    /// # Errors
    /// Disk errors, and bytes that are not of the first block.
    pub async fn keep_first_bytes(
        &self,
        object: &talon_core::ObjectId,
        info: &talon_protocols::origin::ObjectInfo,
        block_size: u64,
        first: crate::origins::FirstBytes,
    ) -> Result<()> {
        let version = talon_core::ObjectVersion::from_etag(&info.etag)?;
        let id = talon_core::BlockId::new(object.clone(), version, 0, block_size)?;
        let end = first.range.end.min(info.size).min(block_size);
        if first.range.start >= end {
            return Ok(());
        }
        self.metrics.bytes_from_origin(first.data.len() as u64);
        let store = self.store.clone();
        let size = info.size;
        let block = blocking(move || store.get_or_create(&id, size)).await?;
        // Whole pages within the bytes: the first one starting at or after their start,
        // the last one ending at or before their end (or at the object's end).
        let page = self.store.page_size();
        let first_page = u32::try_from(first.range.start.div_ceil(page)).unwrap_or(u32::MAX);
        let last_page = if end == size.min(block_size) {
            u32::try_from(end.div_ceil(page)).unwrap_or(0)
        } else {
            u32::try_from(end / page).unwrap_or(0)
        };
        if first_page >= last_page {
            return Ok(());
        }
        let FillPlan::Fill { pages, done } =
            block.plan(first_page..last_page, last_page, last_page - first_page)
        else {
            return Ok(());
        };
        let mut fill = FillGuard {
            block: block.clone(),
            pages: pages.clone(),
            done: Some(done),
        };
        let span = block.page_bytes(pages.start).start..block.page_bytes(pages.end - 1).end;
        let (from, to) = (span.start - first.range.start, span.end - first.range.start);
        let Some(data) = usize::try_from(from)
            .ok()
            .zip(usize::try_from(to).ok())
            .filter(|&(_, to)| to <= first.data.len())
            .map(|(from, to)| first.data.slice(from..to))
        else {
            fill.finish(Ok(()));
            return Ok(());
        };
        let store = self.store.clone();
        let (b, p) = (block.clone(), pages.clone());
        let Some(reservation) = blocking(move || Ok(store.reserve(&b, p))).await? else {
            fill.finish(Ok(()));
            return Ok(());
        };
        // The permit counts the whole buffer the stat's GET filled: `data` is a slice of
        // it and keeps all of it alive.
        let Some(permit) = self.write_behind_permit(first.data.len()) else {
            // The write-behind bound is full: kept before the answer, as the bytes of
            // a fill without room to write behind are.
            let (store, b) = (self.store.clone(), block.clone());
            let result = blocking(move || store.commit_fill(&b, pages, &data, reservation)).await;
            return match result {
                Ok(()) => {
                    block.mark_kept_unread();
                    fill.finish(Ok(()));
                    Ok(())
                }
                Err(e) => Err(self.failed_fill(&mut fill, &block, e).await),
            };
        };
        // Written behind the stat's answer: the read that follows is answered from
        // these bytes while they are written ([`Block::written_behind`]), from the
        // block once they are present, so a cold object's answer waits for no disk.
        let permit = Arc::new(permit);
        fill.offer(
            span.start,
            Bytes::from_owner(HeldAnswer {
                bytes: data.clone(),
                _permit: permit.clone(),
            }),
        );
        block.mark_kept_unread();
        let fetched = FetchedPages {
            data,
            span_start: span.start,
            reservation,
        };
        let (store, metrics) = (self.store.clone(), self.metrics.clone());
        metrics.fill_started();
        tokio::spawn(async move {
            let result = commit_behind(&store, &metrics, &block, pages, fetched, false).await;
            drop(permit);
            let stored = matches!(result, Ok(true));
            if !stored {
                // Not kept: the read that has not come yet fetches them itself.
                let _ = block.take_kept_unread();
            }
            fill.finish(result.map(|_| ()).map_err(Arc::new));
            metrics.fill_ended();
            if !stored {
                forget_if_empty(&store, &block).await;
            }
        });
        Ok(())
    }

    /// Ends a fill that failed with `e`: its waiters are told, and no empty block file
    /// stays behind (SEC-05). Returns the error to give.
    async fn failed_fill(
        &self,
        fill: &mut FillGuard,
        block: &Arc<Block>,
        e: WorkerError,
    ) -> WorkerError {
        let e = Arc::new(e);
        fill.finish(Err(e.clone()));
        forget_if_empty(&self.store, block).await;
        WorkerError::Shared(e)
    }

    /// Answers `req` from the origin without caching it, counted as a miss and a pass
    /// through for `reason`; for a [`Durability::KeptOnly`] request, fetches nothing and
    /// says [`Prepared::NotKept`].
    async fn uncached(
        &self,
        req: &ReadRangeRequest,
        durability: Durability,
        reason: &str,
    ) -> Result<Prepared> {
        if durability == Durability::KeptOnly {
            return Ok(Prepared::NotKept);
        }
        self.metrics.miss();
        self.metrics.pass_through(reason);
        self.pass_through(req).await.map(Prepared::PassThrough)
    }

    /// Reserves room for `pages` of `block` and fetches them from the origin; `None`
    /// when they do not fit in the byte budget (nothing fetched).
    async fn fetch_fill(
        &self,
        block: &Arc<Block>,
        pages: Range<u32>,
    ) -> Result<Option<FetchedPages>> {
        let store = self.store.clone();
        let (b, p) = (block.clone(), pages.clone());
        let Some(reservation) = blocking(move || Ok(store.reserve(&b, p))).await? else {
            return Ok(None);
        };
        let span = block.page_bytes(pages.start).start..block.page_bytes(pages.end - 1).end;
        let base = block.id.block_offset();
        let range = ByteRange {
            start: base + span.start,
            end: base + span.end,
        };
        let data = self.fetch(block, range).await?;
        Ok(Some(FetchedPages {
            data,
            span_start: span.start,
            reservation,
        }))
    }

    /// A write-behind permit for a fill of `len` bytes, or `None` when the bytes
    /// already being written behind leave no room for it.
    fn write_behind_permit(&self, len: usize) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let units = u32::try_from((len as u64).div_ceil(WRITE_BEHIND_UNIT)).ok()?;
        self.write_behind.clone().try_acquire_many_owned(units).ok()
    }

    /// Serves a read that cannot be cached, straight from the origin.
    async fn pass_through(&self, req: &ReadRangeRequest) -> Result<Bytes> {
        let range = req.object_range();
        let block = &req.block;
        let len = range.end - range.start;
        if len == 0 {
            return Ok(Bytes::new());
        }
        self.fetch_range(
            block.object(),
            block.version().as_str(),
            ByteRange {
                start: range.start,
                end: range.end,
            },
        )
        .await
    }

    async fn fetch(&self, block: &Block, range: ByteRange) -> Result<Bytes> {
        self.fetch_range(block.id.object(), block.id.version().as_str(), range)
            .await
    }

    /// One ranged GET pinned to `version`, retried with backoff on transient failures.
    async fn fetch_range(
        &self,
        object: &talon_core::ObjectId,
        version: &str,
        range: ByteRange,
    ) -> Result<Bytes> {
        let policy = crate::origin_retry::RetryPolicy::of(&self.config);
        let fetched = policy
            .run(
                || self.fetch_once(object, version, range),
                |e, attempt| {
                    self.metrics.origin_retry();
                    tracing::debug!(%object, attempt, error = %e, "retrying an origin fetch");
                },
            )
            .await;
        match fetched {
            Ok(bytes) => {
                self.metrics.bytes_from_origin(bytes.len() as u64);
                Ok(bytes)
            }
            Err(e) => {
                if e.frame_code() == talon_core::ErrorCode::VersionMismatch {
                    self.stats.invalidate(object);
                }
                Err(e)
            }
        }
    }

    async fn fetch_once(
        &self,
        object: &talon_core::ObjectId,
        version: &str,
        range: ByteRange,
    ) -> Result<Bytes> {
        let _slot = self
            .origin_slots
            .acquire()
            .await
            .map_err(|_| WorkerError::Unavailable("shutting down".into()))?;
        let (client, bucket, key) = self.origins.route(object).map_err(WorkerError::Origin)?;
        self.metrics.origin_request();
        Ok(client
            .get_pinned_range(&bucket, &key, range, version)
            .await?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use talon_core::{ObjectId, ObjectVersion};

    #[test]
    fn an_abandoned_fill_tells_its_waiters_and_can_be_retried() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlockStore::open(dir.path(), 4096, 1 << 20).unwrap();
        let id = talon_core::BlockId::new(
            ObjectId::s3("b", "k").unwrap(),
            ObjectVersion::new("v").unwrap(),
            0,
            16384,
        )
        .unwrap();
        let block = store.get_or_create(&id, 16384).unwrap();
        let FillPlan::Fill { pages, done } = block.plan(0..1, 1, 4) else {
            panic!("fills")
        };
        let FillPlan::Wait(mut waiter) = block.plan(0..1, 1, 4) else {
            panic!("waits")
        };
        drop(FillGuard {
            block: block.clone(),
            pages,
            done: Some(done),
        });
        assert!(
            matches!(&*waiter.borrow_and_update(), Some(Err(_))),
            "the waiter learns the fill failed"
        );
        assert!(
            matches!(block.plan(0..1, 1, 4), FillPlan::Fill { .. }),
            "the pages can be fetched again"
        );
    }
}
