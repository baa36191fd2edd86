//! The block store: cached blocks as sparse files on local disk, which pages of each are
//! present, one global byte budget, and crash-safe persistence.
//!
//! Layout under `<cache-dir>/blocks/`: `<storage name>.blk` holds the block's bytes at
//! their offsets (a sparse file: absent pages take no space) and `<storage name>.meta`
//! says which pages are present and their CRC-32C checksums.
//!
//! Crash safety rests on one ordering: a page's bytes are written and `fdatasync`ed
//! before the metadata that calls it present is written to a temporary file and renamed
//! over the old metadata. A crash at any point leaves the old metadata (the new page is
//! simply absent and refetched), the new one (its bytes are on disk), or, after a power
//! loss, no metadata or a torn one, which does not parse and makes the block absent
//! (and should the block file's own name be lost with it, its pages read back short or
//! fail their checksums on first use, and are fetched again).
//! The metadata is not synced itself, nor its folder (since 2026-12-05): a cache need
//! not keep its newest fills through a power loss, only never claim a page whose bytes
//! are not on disk, and the two syncs were most of a small cold object's cost. Present
//! pages are never rewritten in place.
//!
//! Checksums catch what ordering cannot: bit rot, a truncated file, a file edited behind
//! the worker's back. Pages are verified before their first use by this process and
//! again whenever the block file's identity (size, modification or change time) moves
//! without the worker having written it; a page that fails is dropped, and the miss path
//! refetches it. Pages this process wrote itself are trusted.
//!
//! The budget counts what `du` sees: for every present page its length rounded up to the
//! filesystem's allocation unit, plus one unit per metadata file. Fills reserve their
//! bytes first and evict blocks (chosen by the [`EvictionPolicy`]) until they fit;
//! eviction unlinks the files, which readers still holding them finish reading safely.
//! All methods here block; call them from a blocking pool.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::Range;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use talon_core::{BlockId, ObjectId, ObjectVersion, PresentBitmap};
use tokio::sync::watch;

use crate::crash_points::{self, CrashPoint};
use crate::error::{Result, WorkerError};
use crate::eviction::{EvictionPolicy, S3Fifo};

/// CRC-32C (Castagnoli) of a page's bytes, as recorded in the metadata; computed with
/// the CPU's CRC instruction where it has one (the golden value in the tests pins the
/// polynomial, so metadata written before stays valid).
pub fn page_checksum(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// The result a shared fill broadcasts to the requests waiting on it.
pub type FillOutcome = std::result::Result<(), Arc<WorkerError>>;

/// What a reader must do to have pages present.
#[derive(Debug)]
pub enum FillPlan {
    /// All requested pages are present.
    Ready,
    /// Another request is fetching a needed page; wait for its outcome, then plan again.
    Wait(watch::Receiver<Option<FillOutcome>>),
    /// This request fetches `pages` and must report through `done`.
    Fill {
        /// The pages to fetch (absent, now marked as filling).
        pages: Range<u32>,
        /// Completion, to pass to [`Block::finish_fill`].
        done: watch::Sender<Option<FillOutcome>>,
    },
}

/// How a block file looked the last time the worker checked or wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileIdentity {
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
}

impl FileIdentity {
    fn of(meta: &fs::Metadata) -> FileIdentity {
        FileIdentity {
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            ino: meta.ino(),
        }
    }
}

#[derive(Debug)]
struct BlockState {
    present: PresentBitmap,
    checksums: Vec<u32>,
    verified: PresentBitmap,
    filling: PresentBitmap,
    inflight: Vec<InflightFill>,
    evicted: bool,
    identity: Option<FileIdentity>,
    /// Fills writing into the file right now: while any is, a changed identity is
    /// this worker's own doing, not an edit behind its back.
    writers: u32,
    /// Bytes this block counts against the budget.
    cost: u64,
    has_meta: bool,
}

/// A fill in progress: its pages, how its waiters learn the outcome, and, while its
/// fetched bytes are being written behind their answer, those bytes.
#[derive(Debug)]
struct InflightFill {
    pages: Range<u32>,
    outcome: watch::Receiver<Option<FillOutcome>>,
    /// The fill's bytes from `span_start` (block offsets), set by
    /// [`Block::publish_written_behind`] and dropped when the fill ends.
    behind: Option<(u64, bytes::Bytes)>,
}

/// Where the bytes of a commit come from: memory (an origin fill) or a staging file
/// (a pushed Ingest). Offsets are block offsets; the source starts at `span_start`.
enum PageSource<'a> {
    Memory { data: &'a [u8], span_start: u64 },
    Staged { file: &'a File, span_start: u64 },
}

impl PageSource<'_> {
    /// The bytes of the page at `r`, read into `scratch` when they are in a file.
    fn page<'b>(&'b self, r: Range<u64>, scratch: &'b mut Vec<u8>) -> Result<&'b [u8]> {
        match self {
            PageSource::Memory { data, span_start } => {
                Ok(&data[(r.start - span_start) as usize..(r.end - span_start) as usize])
            }
            PageSource::Staged { file, span_start } => {
                scratch.resize((r.end - r.start) as usize, 0);
                file.read_exact_at(scratch, r.start - span_start)
                    .map_err(|e| WorkerError::io("reading the staging file", e))?;
                Ok(&scratch[..])
            }
        }
    }
}

/// Pages a commit has written into a block file but not yet synced or marked present,
/// with their checksums (in the order of `absent`).
struct WrittenPages {
    absent: Vec<u32>,
    checksums: Vec<u32>,
}

/// One cached block.
#[derive(Debug)]
pub struct Block {
    /// Identity (object, version, offset, size).
    pub id: BlockId,
    /// File-name-safe name (`BlockId::storage_name`).
    pub name: String,
    /// The index's key for it (`BlockId::storage_key`, the bytes `name` spells).
    pub key: BlockKey,
    /// Size of the whole object.
    pub object_size: u64,
    /// Bytes of the object inside this block.
    pub len: u64,
    /// Pages in this block.
    pub pages: u32,
    /// Whether it belongs to a pinned prefix ([`Pins`], or the cluster's pins): set and
    /// changed only under the store's lock, with the pinned byte count.
    pinned: std::sync::atomic::AtomicBool,
    /// Pages a stat's first read fetched and kept that no read has been served from
    /// yet: the read that takes them reports them as filled from the origin, since
    /// they were fetched to answer it ([`Block::take_kept_unread`]).
    kept_unread: std::sync::atomic::AtomicBool,
    page_size: u64,
    file: File,
    /// A read-only descriptor of `file`, opened on first use, for readers on this host.
    read_only: std::sync::OnceLock<File>,
    data_path: PathBuf,
    meta_path: PathBuf,
    state: Mutex<BlockState>,
    /// Serialises metadata writes so the newest snapshot is the one left on disk.
    meta_write: Mutex<()>,
}

/// The persistent metadata of a block.
#[derive(Debug, Serialize, Deserialize)]
struct BlockMeta {
    format: u32,
    object: String,
    version: String,
    block_offset: u64,
    block_size: u64,
    object_size: u64,
    page_size: u64,
    /// Hex of the `PresentBitmap` encoding.
    present: String,
    /// CRC-32C per page (0 for absent pages).
    checksums: Vec<u32>,
}

const META_FORMAT: u32 = 1;

impl BlockState {
    /// Nothing present, nothing being written or fetched.
    fn is_idle(&self) -> bool {
        self.present.count_present() == 0
            && self.filling.count_present() == 0
            && self.inflight.is_empty()
            && self.writers == 0
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn round_up(n: u64, unit: u64) -> u64 {
    n.div_ceil(unit) * unit
}

impl Block {
    /// Whether it belongs to a pinned prefix: eviction passes it over while the pinned
    /// blocks hold no more than their share.
    pub fn pinned(&self) -> bool {
        self.pinned.load(Ordering::Relaxed)
    }

    /// The open block file, for `sendfile`.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// A read-only descriptor of the block file, for handing to a reader on this host
    /// (the local socket's FileHandoff), which may then read present pages but never
    /// write. Opened once, on first use, through this process's own descriptor
    /// (`/proc/self/fd`), so it is the same file even when eviction has unlinked it;
    /// it stays open as long as the block.
    ///
    /// # Errors
    /// Opening it (no `/proc`, no descriptors left).
    pub fn read_only_file(&self) -> io::Result<&File> {
        use std::os::fd::AsRawFd;
        if let Some(file) = self.read_only.get() {
            return Ok(file);
        }
        let path = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        let file = File::open(path)?;
        // A racing first use may have set it meanwhile: either descriptor will do.
        let _ = self.read_only.set(file);
        self.read_only
            .get()
            .ok_or_else(|| io::Error::other("the read-only descriptor vanished"))
    }

    /// Byte range of `page` within the block.
    pub fn page_bytes(&self, page: u32) -> Range<u64> {
        let start = u64::from(page) * self.page_size;
        start..(start + self.page_size).min(self.len)
    }

    /// Pages covering `offset..offset + len` (block coordinates).
    pub fn pages_for(&self, offset: u64, len: u64) -> Range<u32> {
        if len == 0 {
            return 0..0;
        }
        let first = (offset / self.page_size) as u32;
        let last = ((offset + len - 1) / self.page_size) as u32;
        first..(last + 1).min(self.pages)
    }

    /// Whether every page in `pages` is present.
    pub fn all_present(&self, pages: Range<u32>) -> bool {
        lock(&self.state)
            .present
            .all_present(pages)
            .unwrap_or(false)
    }

    /// Decides what a reader needing `need` must do; `readahead_end` (exclusive) and
    /// `max_pages` bound a fill this reader would start. Concurrent readers of the same
    /// absent pages share one fill. A reader whose first absent page is being filled by
    /// another still claims the absent pages after it that nobody fills, so pipelined
    /// reads of consecutive pieces fetch in parallel instead of each waiting for the
    /// fill its predecessor's readahead started; it waits once it has nothing to claim.
    pub fn plan(&self, need: Range<u32>, readahead_end: u32, max_pages: u32) -> FillPlan {
        let mut st = lock(&self.state);
        if st.evicted {
            // A new entry will be created by the caller; report readiness to re-plan.
            return FillPlan::Ready;
        }
        let absent = |st: &BlockState, p: u32| !st.present.is_present(p).unwrap_or(true);
        let filling = |st: &BlockState, p: u32| st.filling.is_present(p).unwrap_or(false);
        let Some(first_absent) = need.clone().find(|&p| absent(&st, p)) else {
            return FillPlan::Ready;
        };
        let first_absent = match need.clone().find(|&p| absent(&st, p) && !filling(&st, p)) {
            Some(unclaimed) => unclaimed,
            None => {
                let rx = st
                    .inflight
                    .iter()
                    .find(|f| f.pages.contains(&first_absent))
                    .map(|f| f.outcome.clone());
                match rx {
                    Some(rx) => return FillPlan::Wait(rx),
                    None => first_absent,
                }
            }
        };
        let limit = readahead_end
            .max(need.end)
            .min(self.pages)
            .min(first_absent.saturating_add(max_pages.max(1)));
        let mut end = first_absent;
        while end < limit
            && !st.present.is_present(end).unwrap_or(true)
            && !st.filling.is_present(end).unwrap_or(true)
        {
            end += 1;
        }
        let pages = first_absent..end.max(first_absent + 1);
        let _ = st.filling.set_range(pages.clone());
        let (done, rx) = watch::channel(None);
        st.inflight.push(InflightFill {
            pages: pages.clone(),
            outcome: rx,
            behind: None,
        });
        FillPlan::Fill { pages, done }
    }

    /// Offers the fetched bytes of the fill of `pages` (from block offset `span_start`)
    /// to readers that would wait for it, while they are written behind their first
    /// answer ([`Block::written_behind`]). They are the origin's bytes of this block's
    /// version, as the fill's own reader got them; they go with the fill's end.
    pub fn publish_written_behind(&self, pages: &Range<u32>, span_start: u64, data: bytes::Bytes) {
        let mut st = lock(&self.state);
        if let Some(fill) = st.inflight.iter_mut().find(|f| f.pages == *pages) {
            fill.behind = Some((span_start, data));
        }
    }

    /// The bytes `offset..offset + len` (block offsets) when a fill being written behind
    /// holds all of them: a reader that would otherwise wait for its sync.
    pub fn written_behind(&self, offset: u64, len: u64) -> Option<bytes::Bytes> {
        let st = lock(&self.state);
        st.inflight.iter().find_map(|f| {
            let (span_start, data) = f.behind.as_ref()?;
            let start = offset.checked_sub(*span_start)?;
            let end = start.checked_add(len)?;
            (end <= data.len() as u64).then(|| data.slice(start as usize..end as usize))
        })
    }

    /// Ends a fill started by [`Block::plan`]: clears its marks and wakes its waiters
    /// with the outcome.
    pub fn finish_fill(
        &self,
        pages: Range<u32>,
        done: watch::Sender<Option<FillOutcome>>,
        outcome: FillOutcome,
    ) {
        {
            let mut st = lock(&self.state);
            let _ = st.filling.clear_range(pages.clone());
            st.inflight.retain(|f| f.pages != pages);
        }
        let _ = done.send(Some(outcome));
    }

    /// Marks pages kept from a stat's first read, fetched from the origin for the read
    /// that follows.
    pub fn mark_kept_unread(&self) {
        self.kept_unread
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether this read is the first served since [`Block::mark_kept_unread`] (and
    /// clears the mark): its bytes came from the origin to answer it.
    pub fn take_kept_unread(&self) -> bool {
        self.kept_unread.load(std::sync::atomic::Ordering::Relaxed)
            && self
                .kept_unread
                .swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the block was evicted (its files are gone; a new entry replaces it).
    pub fn is_evicted(&self) -> bool {
        lock(&self.state).evicted
    }

    fn snapshot_meta(&self) -> BlockMeta {
        let st = lock(&self.state);
        BlockMeta {
            format: META_FORMAT,
            object: self.id.object().key_path(),
            version: self.id.version().as_str().to_owned(),
            block_offset: self.id.block_offset(),
            block_size: self.id.block_size(),
            object_size: self.object_size,
            page_size: self.page_size,
            present: hex::encode(st.present.to_bytes()),
            checksums: st.checksums.clone(),
        }
    }

    /// Publishes the current metadata: a temporary file renamed over the old one. Not
    /// synced (module doc): after a power loss the newest metadata may be missing or
    /// torn, and the block is then absent or as it was; every page it calls present
    /// had its bytes synced first.
    fn persist_meta(&self) -> Result<()> {
        let _serial = lock(&self.meta_write);
        if self.is_evicted() {
            return Ok(());
        }
        let json = serde_json::to_vec(&self.snapshot_meta())
            .map_err(|e| WorkerError::io("encoding block metadata", io::Error::other(e)))?;
        let tmp = self.meta_path.with_extension("meta.tmp");
        let mut f = File::create(&tmp).map_err(|e| WorkerError::io("writing block metadata", e))?;
        f.write_all(&json)
            .map_err(|e| WorkerError::io("writing block metadata", e))?;
        drop(f);
        crash_points::reached(CrashPoint::MetaWritten);
        fs::rename(&tmp, &self.meta_path)
            .map_err(|e| WorkerError::io("publishing block metadata", e))?;
        crash_points::reached(CrashPoint::MetaRenamed);
        Ok(())
    }
}

/// How [`BlockStore::new_block`] opens a block's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opening {
    /// The block's file as found (a block loaded at start-up).
    Existing,
    /// A new file: whatever is left under the block's names is replaced.
    Fresh,
}

/// A block's key in the store's index and eviction policy: [`BlockId::storage_key`], so a
/// hit looks its block up without spelling the name in hex.
pub type BlockKey = [u8; 32];

struct Inner {
    blocks: HashMap<BlockKey, Arc<Block>>,
    policy: S3Fifo<BlockKey>,
    used: u64,
    reserved: u64,
    evictions: u64,
    /// Present pages dropped because their bytes no longer matched their checksum.
    corrupt_pages: u64,
    /// Present pages dropped because reading them back failed.
    unreadable_pages: u64,
    /// Bytes of `used` in pinned blocks ([`Pins`]).
    pinned_used: u64,
    /// Prefixes the cluster pins (the coordinator's, with each heartbeat), beside the
    /// worker's own ([`Pins`]).
    cluster_pins: Vec<String>,
}

impl Inner {
    /// Counts `bytes` more in use, in a pinned block or not.
    fn add_used(&mut self, pinned: bool, bytes: u64) {
        self.used += bytes;
        if pinned {
            self.pinned_used += bytes;
        }
    }

    /// Counts `bytes` fewer in use.
    fn sub_used(&mut self, pinned: bool, bytes: u64) {
        self.used = self.used.saturating_sub(bytes);
        if pinned {
            self.pinned_used = self.pinned_used.saturating_sub(bytes);
        }
    }
}

/// Data that eviction passes over: the blocks of objects whose key path starts with
/// one of the prefixes (`s3/BUCKET/PREFIX`, `az/ACCOUNT/CONTAINER/PREFIX`), as long as
/// they hold at most `max_bytes` together. Past that share the oldest of them are
/// evicted like any block, so pinning can never starve the rest of the cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pins {
    prefixes: Vec<String>,
    max_bytes: u64,
}

impl Pins {
    /// Pins `prefixes` within `share` (0 to 1) of `capacity` bytes.
    pub fn new(prefixes: Vec<String>, share: f64, capacity: u64) -> Pins {
        Pins {
            prefixes,
            max_bytes: (capacity as f64 * share.clamp(0.0, 1.0)) as u64,
        }
    }

    /// Whether the block belongs to one of this worker's pinned prefixes or of
    /// `cluster` (the cluster's).
    pub fn covers(&self, id: &BlockId, cluster: &[String]) -> bool {
        if self.prefixes.is_empty() && cluster.is_empty() {
            return false;
        }
        let path = id.object().key_path();
        self.prefixes
            .iter()
            .chain(cluster)
            .any(|p| path.starts_with(p.as_str()))
    }
}

/// Counters of the store, for metrics and heartbeats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Bytes counted against the budget.
    pub used_bytes: u64,
    /// The budget.
    pub capacity_bytes: u64,
    /// Blocks held.
    pub blocks: u64,
    /// Blocks evicted since start.
    pub evictions: u64,
    /// Present pages found corrupt (their checksum failed) and dropped since start:
    /// never served, refetched when next read.
    pub corrupt_pages: u64,
    /// Present pages whose bytes could not be read back from the cache disk (an I/O
    /// error) and were dropped since start: never served, refetched when next read.
    pub unreadable_pages: u64,
    /// Bytes of `used_bytes` in pinned blocks ([`Pins`]).
    pub pinned_bytes: u64,
}

/// Bytes reserved for a fill; returned to the budget when dropped (a committed fill
/// has by then moved its bytes to the used count).
#[derive(Debug)]
pub struct Reservation {
    store: Arc<BlockStore>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut inner = lock(&self.store.inner);
        inner.reserved = inner.reserved.saturating_sub(self.bytes);
    }
}

/// The block store.
pub struct BlockStore {
    dir: PathBuf,
    page_size: u64,
    capacity: u64,
    /// Most blocks (each an open file) at once, whatever their bytes: empty blocks cost
    /// no budget, so without this a peer asking for blocks that never fill would pile
    /// up descriptors and inodes (SEC-05).
    max_blocks: usize,
    /// Held while a block's files are created or an evicted block's are removed, so that
    /// both never act on one name at once.
    files: Mutex<()>,
    alloc_unit: u64,
    pins: Pins,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for BlockStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockStore")
            .field("dir", &self.dir)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Default cap on blocks (open block files) per store.
pub const DEFAULT_MAX_BLOCKS: usize = 65_536;

impl BlockStore {
    /// The same store, holding at most `max` blocks (open files) at once; the least
    /// recently used go first when a new one would exceed it.
    pub fn with_max_blocks(mut self, max: usize) -> BlockStore {
        self.max_blocks = max.max(1);
        self
    }

    /// Drops `block` if it holds no present page and nothing is being filled into it:
    /// a fill that failed (the object or version is gone, the origin refused) leaves
    /// no empty file behind. A block with pages, or in use by a fill, stays.
    pub fn forget_if_empty(&self, block: &Arc<Block>) {
        let removed = {
            let mut inner = lock(&self.inner);
            let empty = {
                let st = lock(&block.state);
                st.cost == 0 && !st.evicted && st.is_idle()
            };
            let same = inner
                .blocks
                .get(&block.key)
                .is_some_and(|b| Arc::ptr_eq(b, block));
            if empty && same {
                inner.blocks.remove(&block.key);
                inner.policy.remove(&block.key);
                lock(&block.state).evicted = true;
                true
            } else {
                false
            }
        };
        if removed {
            self.remove_files(vec![block.clone()]);
            tracing::debug!(block = %block.name, "dropped an empty block after a failed fill");
        }
    }

    /// Drops the cached block `id` whatever it holds (its pages come off the budget and
    /// its files are deleted): for a block made for a wrong object size. Readers still
    /// holding it see it evicted and look it up again.
    pub fn discard(&self, id: &BlockId) {
        let key = id.storage_key();
        let victim = {
            let mut inner = lock(&self.inner);
            let Some(block) = inner.blocks.remove(&key) else {
                return;
            };
            inner.policy.remove(&key);
            let cost = {
                let mut st = lock(&block.state);
                st.evicted = true;
                st.cost
            };
            inner.sub_used(block.pinned(), cost);
            block
        };
        tracing::warn!(block = %victim.name, object_size = victim.object_size, "discarded a block made for a wrong object size");
        self.remove_files(vec![victim]);
    }

    /// Evicts the least recently used blocks until one more fits under the block cap.
    fn evict_for_count(&self) {
        let mut victims = Vec::new();
        {
            let mut inner = lock(&self.inner);
            while inner.blocks.len() >= self.max_blocks {
                if !self.evict_victim(&mut inner, &mut victims) {
                    break;
                }
            }
        }
        self.remove_files(victims);
    }

    /// Takes the eviction policy's victim out of the index (marked evicted, its bytes
    /// off the budget) into `victims`; false when there is none. A pinned victim is
    /// passed over (handed back to the policy) while the pinned blocks hold no more
    /// than their share; when every candidate is such a block, there is none.
    fn evict_victim(&self, inner: &mut Inner, victims: &mut Vec<Arc<Block>>) -> bool {
        let mut passed_over = Vec::new();
        let candidates = inner.policy.len();
        let mut evicted = false;
        for _ in 0..=candidates {
            let Some(key) = inner.policy.victim() else {
                break;
            };
            let Some(block) = inner.blocks.get(&key).cloned() else {
                // Not in the index any more: nothing to free, but it was a victim.
                evicted = true;
                break;
            };
            if block.pinned() && inner.pinned_used <= self.pins.max_bytes {
                passed_over.push((key, lock(&block.state).cost));
                continue;
            }
            inner.blocks.remove(&key);
            let cost = {
                let mut st = lock(&block.state);
                st.evicted = true;
                st.cost
            };
            inner.sub_used(block.pinned(), cost);
            inner.evictions += 1;
            victims.push(block);
            evicted = true;
            break;
        }
        for (key, cost) in passed_over {
            inner.policy.insert(key, cost);
            inner.policy.access(&key);
        }
        evicted
    }

    /// Deletes evicted blocks' files, serialised with metadata writes so a late write
    /// cannot resurrect a block, and with the creation of blocks' files ([`Self::files`]):
    /// a block of the same name made since has its own file under that name, which is
    /// left alone (the name is unlinked only while it still names this block's file).
    fn remove_files(&self, victims: Vec<Arc<Block>>) {
        if victims.is_empty() {
            return;
        }
        let _names = lock(&self.files);
        for block in victims {
            let _serial = lock(&block.meta_write);
            let ours = match (block.file.metadata(), fs::metadata(&block.data_path)) {
                (Ok(open), Ok(named)) => open.ino() == named.ino() && open.dev() == named.dev(),
                _ => false,
            };
            if ours {
                let _ = fs::remove_file(&block.meta_path);
                let _ = fs::remove_file(&block.data_path);
            }
            tracing::debug!(block = %block.name, "evicted");
        }
    }

    /// Opens the store under `cache_dir`, rebuilding the index from the metadata on disk
    /// (warm pages survive restarts), deleting leftovers of interrupted writes and
    /// blocks of another page size, and evicting down to `capacity` bytes.
    ///
    /// # Errors
    /// I/O errors creating or reading the folder; a zero page size or capacity.
    pub fn open(cache_dir: &Path, page_size: u64, capacity: u64) -> Result<BlockStore> {
        BlockStore::open_pinned(cache_dir, page_size, capacity, Pins::default())
    }

    /// [`open`](Self::open) with `pins`: data that eviction passes over within its
    /// share.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_pinned(
        cache_dir: &Path,
        page_size: u64,
        capacity: u64,
        pins: Pins,
    ) -> Result<BlockStore> {
        BlockStore::open_capped(cache_dir, page_size, capacity, pins, DEFAULT_MAX_BLOCKS)
    }

    /// [`open_pinned`](Self::open_pinned) holding at most `max_blocks` blocks (open
    /// files) at once, the blocks found on disk included: past it, the index rebuilt
    /// at start evicts (the descriptor budget, [`crate::descriptors`]).
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_capped(
        cache_dir: &Path,
        page_size: u64,
        capacity: u64,
        pins: Pins,
        max_blocks: usize,
    ) -> Result<BlockStore> {
        if page_size == 0 || !page_size.is_power_of_two() {
            return Err(WorkerError::InvalidRequest(format!(
                "page size {page_size} must be a power of two"
            )));
        }
        let dir = cache_dir.join("blocks");
        fs::create_dir_all(&dir).map_err(|e| WorkerError::io("creating the cache folder", e))?;
        let alloc_unit = fs::metadata(&dir)
            .map(|m| m.blksize())
            .unwrap_or(4096)
            .max(512);
        let store = BlockStore {
            dir,
            page_size,
            capacity,
            max_blocks: max_blocks.max(1),
            files: Mutex::new(()),
            alloc_unit,
            pins,
            inner: Mutex::new(Inner {
                blocks: HashMap::new(),
                policy: S3Fifo::default(),
                used: 0,
                reserved: 0,
                evictions: 0,
                corrupt_pages: 0,
                unreadable_pages: 0,
                pinned_used: 0,
                cluster_pins: Vec::new(),
            }),
        };
        store.rebuild()?;
        store.evict_until_fits(0);
        Ok(store)
    }

    /// The page size, bytes.
    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// Counters.
    pub fn stats(&self) -> StoreStats {
        let inner = lock(&self.inner);
        StoreStats {
            used_bytes: inner.used,
            capacity_bytes: self.capacity,
            blocks: inner.blocks.len() as u64,
            evictions: inner.evictions,
            corrupt_pages: inner.corrupt_pages,
            unreadable_pages: inner.unreadable_pages,
            pinned_bytes: inner.pinned_used,
        }
    }

    /// Replaces the cluster's pinned prefixes (the coordinator's list, which each
    /// heartbeat brings) beside this worker's own, re-marking every cached block and
    /// counting the pinned bytes again; false when the list is unchanged.
    pub fn set_cluster_pins(&self, prefixes: &[String]) -> bool {
        let mut inner = lock(&self.inner);
        if inner.cluster_pins == prefixes {
            return false;
        }
        inner.cluster_pins = prefixes.to_vec();
        let mut pinned_used = 0;
        for block in inner.blocks.values() {
            let pinned = self.pins.covers(&block.id, &inner.cluster_pins);
            block.pinned.store(pinned, Ordering::Relaxed);
            if pinned {
                pinned_used += lock(&block.state).cost;
            }
        }
        inner.pinned_used = pinned_used;
        true
    }

    /// The cluster's pinned prefixes as last set.
    pub fn cluster_pins(&self) -> Vec<String> {
        lock(&self.inner).cluster_pins.clone()
    }

    /// What a block costs beyond its pages: its metadata file (twice: the file, and its
    /// replacement while it is rewritten) and the filesystem's extent tree of a sparse
    /// file (ext4 keeps four extents in the inode and needs one more block per 340
    /// extents; a block with holes between single pages has up to half its pages as
    /// extents).
    pub fn block_overhead(&self, pages: u32) -> u64 {
        let max_extents = u64::from(pages).div_ceil(2) + 1;
        self.alloc_unit * (2 + max_extents.div_ceil(340))
    }

    fn page_cost(&self, block: &Block, pages: Range<u32>) -> u64 {
        pages
            .map(|p| {
                let r = block.page_bytes(p);
                round_up(r.end - r.start, self.alloc_unit)
            })
            .sum()
    }

    fn rebuild(&self) -> Result<()> {
        let entries =
            fs::read_dir(&self.dir).map_err(|e| WorkerError::io("reading the cache folder", e))?;
        let mut metas = Vec::new();
        let mut datas = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(stem) = name.strip_suffix(".meta") {
                metas.push(stem.to_owned());
            } else if let Some(stem) = name.strip_suffix(".blk") {
                datas.push(stem.to_owned());
            } else {
                // Temporary files of interrupted metadata writes.
                let _ = fs::remove_file(entry.path());
            }
        }
        let mut loaded = 0;
        for name in &metas {
            match self.load(name) {
                Ok(block) => {
                    let mut inner = lock(&self.inner);
                    let cost = lock(&block.state).cost;
                    block.pinned.store(
                        self.pins.covers(&block.id, &inner.cluster_pins),
                        Ordering::Relaxed,
                    );
                    inner.add_used(block.pinned(), cost);
                    inner.policy.insert(block.key, cost);
                    inner.blocks.insert(block.key, Arc::new(block));
                    loaded += 1;
                    // More blocks on disk than descriptors for them: the cap holds
                    // from the start.
                    let mut victims = Vec::new();
                    while inner.blocks.len() > self.max_blocks {
                        if !self.evict_victim(&mut inner, &mut victims) {
                            break;
                        }
                    }
                    drop(inner);
                    self.remove_files(victims);
                }
                Err(e) => {
                    tracing::warn!(block = %name, error = %e, "discarding unreadable cached block");
                    let _ = fs::remove_file(self.dir.join(format!("{name}.meta")));
                    let _ = fs::remove_file(self.dir.join(format!("{name}.blk")));
                }
            }
        }
        for name in datas {
            let indexed = <[u8; 32]>::try_from(hex::decode(&name).unwrap_or_default())
                .is_ok_and(|key| lock(&self.inner).blocks.contains_key(&key));
            if !indexed {
                let _ = fs::remove_file(self.dir.join(format!("{name}.blk")));
            }
        }
        tracing::info!(
            blocks = loaded,
            used_bytes = lock(&self.inner).used,
            "block index rebuilt from disk"
        );
        Ok(())
    }

    fn load(&self, name: &str) -> Result<Block> {
        let meta_path = self.dir.join(format!("{name}.meta"));
        let bytes =
            fs::read(&meta_path).map_err(|e| WorkerError::io("reading block metadata", e))?;
        let meta: BlockMeta = serde_json::from_slice(&bytes).map_err(|e| {
            WorkerError::InvalidRequest(format!("block metadata does not parse: {e}"))
        })?;
        if meta.format != META_FORMAT || meta.page_size != self.page_size {
            return Err(WorkerError::InvalidRequest(
                "block metadata of another format or page size".into(),
            ));
        }
        let object = ObjectId::from_key_path(&meta.object)?;
        let id = BlockId::new(
            object,
            ObjectVersion::new(meta.version)?,
            meta.block_offset,
            meta.block_size,
        )?;
        if id.storage_name() != name {
            return Err(WorkerError::InvalidRequest(
                "block metadata names another block".into(),
            ));
        }
        let mut block = self.new_block(id, meta.object_size, Opening::Existing)?;
        let present_bytes = hex::decode(&meta.present)
            .map_err(|_| WorkerError::InvalidRequest("bad bitmap hex".into()))?;
        let present = PresentBitmap::from_bytes(block.pages, &present_bytes)?;
        if meta.checksums.len() != block.pages as usize {
            return Err(WorkerError::InvalidRequest(
                "checksum count does not match the pages".into(),
            ));
        }
        let present_cost: u64 = (0..block.pages)
            .filter(|&p| present.is_present(p).unwrap_or(false))
            .map(|p| self.page_cost(&block, p..p + 1))
            .sum();
        {
            let st = block.state.get_mut().unwrap_or_else(|p| p.into_inner());
            st.present = present;
            st.checksums = meta.checksums;
            st.cost = present_cost + self.block_overhead(block.pages);
            st.has_meta = true;
        }
        block.meta_path = meta_path;
        Ok(block)
    }

    fn new_block(&self, id: BlockId, object_size: u64, opening: Opening) -> Result<Block> {
        let len = id.len_in(object_size);
        if len == 0 {
            return Err(WorkerError::RangeNotSatisfiable(
                "the block lies past the end of the object".into(),
            ));
        }
        if !id.block_size().is_multiple_of(self.page_size) {
            return Err(WorkerError::InvalidRequest(format!(
                "block size {} is not a multiple of this worker's page size {}",
                id.block_size(),
                self.page_size
            )));
        }
        let pages = u32::try_from(len.div_ceil(self.page_size))
            .map_err(|_| WorkerError::InvalidRequest("too many pages in a block".into()))?;
        let key = id.storage_key();
        let name = hex::encode(key);
        let data_path = self.dir.join(format!("{name}.blk"));
        let meta_path = self.dir.join(format!("{name}.meta"));
        let open = |fresh: bool| {
            let mut options = OpenOptions::new();
            options.read(true).write(true);
            if fresh {
                options.create_new(true);
            } else {
                options.create(true).truncate(false);
            }
            options.open(&data_path)
        };
        let opened = match open(opening == Opening::Fresh) {
            // A file left under the name (an evicted block's whose removal is pending,
            // or a crash's leftover) is replaced, never reused: its readers keep their
            // own. Only then are the names unlinked, so a new block in a folder without
            // them costs one directory operation, not three.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let _ = fs::remove_file(&meta_path);
                let _ = fs::remove_file(&data_path);
                open(true)
            }
            other => other,
        };
        let file = match opened {
            // The cache folder was removed under the running worker: make it again (the
            // blocks whose files went with it are refetched when next read).
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                tracing::warn!(dir = %self.dir.display(), "the cache folder is gone; making it again");
                fs::create_dir_all(&self.dir)
                    .and_then(|()| open(opening == Opening::Fresh))
                    .map_err(|e| WorkerError::io("opening a block file", e))?
            }
            other => other.map_err(|e| WorkerError::io("opening a block file", e))?,
        };
        Ok(Block {
            pinned: false.into(),
            kept_unread: false.into(),
            id,
            object_size,
            len,
            pages,
            page_size: self.page_size,
            file,
            read_only: std::sync::OnceLock::new(),
            meta_path,
            data_path,
            name,
            key,
            state: Mutex::new(BlockState {
                present: PresentBitmap::new(pages)?,
                checksums: vec![0; pages as usize],
                verified: PresentBitmap::new(pages)?,
                filling: PresentBitmap::new(pages)?,
                inflight: Vec::new(),
                evicted: false,
                identity: None,
                writers: 0,
                cost: 0,
                has_meta: false,
            }),
            meta_write: Mutex::new(()),
        })
    }

    /// The block, created empty if not cached. `object_size` must be the size of the
    /// object at the block's version (it is part of what the client asked for).
    ///
    /// # Errors
    /// Invalid geometry; I/O errors creating the file.
    pub fn get_or_create(&self, id: &BlockId, object_size: u64) -> Result<Arc<Block>> {
        let key = id.storage_key();
        {
            let mut inner = lock(&self.inner);
            if let Some(b) = inner.blocks.get(&key).cloned() {
                if b.object_size == object_size {
                    inner.policy.access(&key);
                    return Ok(b);
                }
                // Same version, different size: one of the two requesters is wrong.
                // Never mix; the caller may ask the origin and discard the block.
                return Err(WorkerError::ObjectSizeConflict {
                    requested: object_size,
                    recorded: b.object_size,
                });
            }
        }
        self.evict_for_count();
        // Made under the files' lock, and only while the name is free in the index: a
        // file left under the name is an evicted block's whose removal is pending, and
        // is replaced (its readers keep their own), so that no two blocks ever share a
        // file (one's hole punches under the other's sends, or its removal taking the
        // other's file name).
        let _names = lock(&self.files);
        if let Some(b) = lock(&self.inner).blocks.get(&key).cloned() {
            return Ok(b);
        }
        let block = Arc::new(self.new_block(id.clone(), object_size, Opening::Fresh)?);
        let mut inner = lock(&self.inner);
        if let Some(b) = inner.blocks.get(&key).cloned() {
            return Ok(b);
        }
        block.pinned.store(
            self.pins.covers(&block.id, &inner.cluster_pins),
            Ordering::Relaxed,
        );
        inner.policy.insert(key, 0);
        inner.blocks.insert(key, block.clone());
        Ok(block)
    }

    /// The block for a read that needs neither the disk nor the origin, or `None`.
    ///
    /// `Some` only when the block is cached at `object_size`, not evicted, every page of
    /// `offset..offset + len` (block coordinates) is present and already verified by this
    /// process, and the file is unchanged since (one `fstat`, no data read). The access
    /// counts for eviction. This is the data plane's hit path: it runs on the connection's
    /// own thread, so it must never wait. On `None` the caller takes the full path
    /// ([`crate::loader::Loader::prepare`]), which is always correct.
    pub fn ready_for_read(
        &self,
        id: &BlockId,
        object_size: u64,
        offset: u64,
        len: u64,
    ) -> Option<Arc<Block>> {
        let key = id.storage_key();
        let block = lock(&self.inner).blocks.get(&key).cloned()?;
        if block.object_size != object_size || len == 0 {
            return None;
        }
        let pages = block.pages_for(offset, len);
        let current = block.file.metadata().ok().map(|m| FileIdentity::of(&m))?;
        {
            let st = lock(&block.state);
            let ready = !st.evicted
                && st.writers == 0
                && st.identity.as_ref() == Some(&current)
                && st.present.all_present(pages.clone()).unwrap_or(false)
                && st.verified.all_present(pages).unwrap_or(false);
            if !ready {
                return None;
            }
        }
        lock(&self.inner).policy.access(&key);
        Some(block)
    }

    /// A new, empty staging file for a pushed Ingest, in the store's folder (same
    /// filesystem as the blocks) but without a name: `O_TMPFILE`, so it vanishes when
    /// closed, whatever happens to the push or the process. Where the filesystem has no
    /// `O_TMPFILE`, a named file removed at once has the same effect.
    ///
    /// # Errors
    /// I/O errors creating it.
    pub fn staging_file(&self) -> Result<File> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
        match rustix::fs::open(&self.dir, flags, Mode::RUSR | Mode::WUSR) {
            Ok(fd) => Ok(File::from(fd)),
            Err(
                rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::ISDIR | rustix::io::Errno::INVAL,
            ) => {
                let mut name = [0u8; 8];
                getrandom::getrandom(&mut name).map_err(|e| {
                    WorkerError::Unavailable(format!("no randomness for a staging name: {e}"))
                })?;
                let path = self
                    .dir
                    .join(format!("staging-{}.ingest", hex::encode(name)));
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(|e| WorkerError::io("creating a staging file", e))?;
                fs::remove_file(&path)
                    .map_err(|e| WorkerError::io("unlinking a staging file", e))?;
                Ok(file)
            }
            Err(e) => Err(WorkerError::io(
                "creating a staging file",
                io::Error::from(e),
            )),
        }
    }

    /// The cached block, if present (no creation).
    pub fn get(&self, id: &BlockId) -> Option<Arc<Block>> {
        lock(&self.inner).blocks.get(&id.storage_key()).cloned()
    }

    /// Evicts until `extra` more bytes fit, and reserves them (under the same lock as
    /// the check, so that two fills can never both count on the same room); returns
    /// whether they fit. Evicts nothing when the fills in flight have reserved so much
    /// that even an empty cache would not fit `extra` more (eviction cannot lower a
    /// reservation).
    fn evict_until_fits(&self, extra: u64) -> bool {
        let mut victims = Vec::new();
        let fits = {
            let mut inner = lock(&self.inner);
            loop {
                if inner.used + inner.reserved + extra <= self.capacity {
                    inner.reserved += extra;
                    break true;
                }
                if inner.reserved + extra > self.capacity {
                    break false;
                }
                if !self.evict_victim(&mut inner, &mut victims) {
                    break false;
                }
            }
        };
        self.remove_files(victims);
        fits
    }

    /// Reserves budget for filling `pages` of `block`, evicting other blocks as needed.
    /// `None` when the fill cannot fit even in an empty cache (the caller then serves
    /// the bytes without caching them).
    pub fn reserve(self: &Arc<Self>, block: &Block, pages: Range<u32>) -> Option<Reservation> {
        let mut bytes = self.page_cost(block, pages);
        if !lock(&block.state).has_meta {
            bytes += self.block_overhead(block.pages);
        }
        if bytes > self.capacity || !self.evict_until_fits(bytes) {
            return None;
        }
        Some(Reservation {
            store: self.clone(),
            bytes,
        })
    }

    /// Stores the bytes of `pages` (starting at the first page's offset), durably, and
    /// marks them present. `data` must be exactly the pages' bytes.
    ///
    /// # Errors
    /// I/O errors; a length mismatch (nothing is marked present then).
    pub fn commit_fill(
        &self,
        block: &Block,
        pages: Range<u32>,
        data: &[u8],
        reservation: Reservation,
    ) -> Result<()> {
        let span = Self::fill_span(block, &pages, data.len())?;
        let source = PageSource::Memory {
            data,
            span_start: span.start,
        };
        self.commit_pages(block, pages, reservation, &source)
    }

    /// The block bytes `pages` span, checked against the `len` bytes fetched for them.
    ///
    /// # Errors
    /// [`WorkerError::InvalidRequest`] for a length that is not the pages'.
    fn fill_span(block: &Block, pages: &Range<u32>, len: usize) -> Result<Range<u64>> {
        let span = block.page_bytes(pages.start).start..block.page_bytes(pages.end - 1).end;
        if len as u64 != span.end - span.start {
            return Err(WorkerError::InvalidRequest(format!(
                "a fill of {len} bytes for {} bytes of pages",
                span.end - span.start
            )));
        }
        Ok(span)
    }

    /// Stores the bytes of `pages` from `staged` (a staging file holding exactly the
    /// pages' bytes from its offset 0: a pushed Ingest), durably, and marks them
    /// present. Each page is read back from the staging file (the page cache: it was
    /// just written), checksummed and written into the block file, one page in memory
    /// at a time.
    ///
    /// # Errors
    /// I/O errors; a staging file shorter than the pages (nothing is marked present).
    pub fn commit_staged(
        &self,
        block: &Block,
        pages: Range<u32>,
        staged: &File,
        reservation: Reservation,
    ) -> Result<()> {
        let span = block.page_bytes(pages.start).start..block.page_bytes(pages.end - 1).end;
        let staged_len = staged
            .metadata()
            .map_err(|e| WorkerError::io("reading the staging file", e))?
            .len();
        if staged_len != span.end - span.start {
            return Err(WorkerError::InvalidRequest(format!(
                "a push of {staged_len} bytes for {} bytes of pages",
                span.end - span.start
            )));
        }
        let source = PageSource::Staged {
            file: staged,
            span_start: span.start,
        };
        self.commit_pages(block, pages, reservation, &source)
    }

    /// Writes the absent pages of `pages` (their bytes from `source`), syncs the file,
    /// then marks them present with their checksums and accounts their cost. Present
    /// pages are never rewritten. On an error nothing is marked present.
    fn commit_pages(
        &self,
        block: &Block,
        pages: Range<u32>,
        reservation: Reservation,
        source: &PageSource<'_>,
    ) -> Result<()> {
        if block.is_evicted() {
            return Ok(());
        }
        let written = Self::write_pages(block, pages, source)?;
        self.seal_pages(block, written, reservation)
    }

    /// Stores fetched bytes of `pages` like [`BlockStore::commit_fill`], for a fill
    /// whose reader was answered from `data` already (write-behind): this reference to
    /// `data` is dropped as soon as the pages are in the file (the page cache), before
    /// the sync (the fill's offer to other readers, [`Block::publish_written_behind`],
    /// keeps its own until the fill ends). The pages are marked present only after the
    /// sync, as every fill's.
    ///
    /// # Errors
    /// As [`BlockStore::commit_fill`].
    pub fn commit_fill_behind(
        &self,
        block: &Block,
        pages: Range<u32>,
        data: bytes::Bytes,
        reservation: Reservation,
    ) -> Result<()> {
        let span = Self::fill_span(block, &pages, data.len())?;
        if block.is_evicted() {
            return Ok(());
        }
        let source = PageSource::Memory {
            data: &data,
            span_start: span.start,
        };
        let pages_written = Self::write_pages(block, pages, &source)?;
        drop(data);
        self.seal_pages(block, pages_written, reservation)
    }

    /// The first half of a commit: writes the absent pages of `pages` into the block
    /// file (not synced) and counts a writer on the block, which
    /// [`BlockStore::seal_pages`] ends (this ends it itself on an error).
    fn write_pages(
        block: &Block,
        pages: Range<u32>,
        source: &PageSource<'_>,
    ) -> Result<WrittenPages> {
        let absent: Vec<u32> = {
            let mut st = lock(&block.state);
            st.writers += 1;
            pages
                .clone()
                .filter(|&p| !st.present.is_present(p).unwrap_or(true))
                .collect()
        };
        let mut scratch = Vec::new();
        let written = (|| -> Result<Vec<u32>> {
            let mut checksums = Vec::with_capacity(absent.len());
            for &p in &absent {
                let r = block.page_bytes(p);
                let bytes = source.page(r.clone(), &mut scratch)?;
                checksums.push(page_checksum(bytes));
                block
                    .file
                    .write_all_at(bytes, r.start)
                    .map_err(|e| WorkerError::io("writing a block", e))?;
                crash_points::reached(CrashPoint::PageWritten);
            }
            Ok(checksums)
        })();
        match written {
            Ok(checksums) => Ok(WrittenPages { absent, checksums }),
            Err(e) => {
                lock(&block.state).writers -= 1;
                Err(e)
            }
        }
    }

    /// The second half of a commit: syncs the block file, then marks the written pages
    /// present with their checksums, accounts their cost and persists the metadata;
    /// ends the writer [`BlockStore::write_pages`] counted.
    fn seal_pages(
        &self,
        block: &Block,
        written: WrittenPages,
        reservation: Reservation,
    ) -> Result<()> {
        let WrittenPages { absent, checksums } = written;
        crate::sync_holds::wait_while_held();
        if let Err(e) = block.file.sync_data() {
            lock(&block.state).writers -= 1;
            return Err(WorkerError::io("syncing a block", e));
        }
        crash_points::reached(CrashPoint::PagesSynced);
        {
            // The block's cost and the store's count change in one critical section
            // (the store's lock, then the block's: the order eviction takes them), so
            // an eviction sees either none of this commit or all of it.
            let mut inner = lock(&self.inner);
            let mut st = lock(&block.state);
            // The file's identity after this commit's writes, taken under the block's
            // lock: taken before it, a commit racing another on the same block could
            // record the file as it was before the other's write, and every page would
            // then be re-verified as if the file had changed behind the worker's back.
            let identity = block.file.metadata().ok().map(|m| FileIdentity::of(&m));
            st.writers -= 1;
            if st.evicted {
                return Ok(());
            }
            let mut added = 0;
            for (&p, &sum) in absent.iter().zip(&checksums) {
                if !st.present.is_present(p).unwrap_or(true) {
                    let _ = st.present.set(p);
                    let _ = st.verified.set(p);
                    st.checksums[p as usize] = sum;
                    added += self.page_cost(block, p..p + 1);
                }
            }
            if !st.has_meta {
                st.has_meta = true;
                added += self.block_overhead(block.pages);
            }
            st.cost += added;
            st.identity = identity;
            inner.add_used(block.pinned(), added);
            inner.policy.resize(&block.key, st.cost);
        }
        drop(reservation);
        block.persist_meta()
    }

    /// Makes sure the present pages in `pages` can be served: re-verifies their
    /// checksums if this process has not yet (or the file changed behind its back), and
    /// drops any that fail or cannot be read back (a failing disk: the page is
    /// refetched, as a corrupt one is). Returns whether all of `pages` are still
    /// present.
    ///
    /// Safe against other readers verifying the same pages at once: a page another
    /// reader has verified meanwhile (and may be sending) is never dropped for this
    /// reader's failed read-back, nor is one refilled meanwhile; the hole is punched
    /// only over pages this call dropped, while they are still marked present (so no
    /// fill writes them during the punch).
    ///
    /// # Errors
    /// Writing the block's metadata after dropping pages.
    pub fn verify(&self, block: &Block, pages: Range<u32>) -> Result<bool> {
        let to_check = Self::unverified_pages(block, pages.clone());
        if !to_check.is_empty() {
            let checked = Self::check_pages(block, to_check);
            self.settle_checks(block, &checked)?;
        }
        Ok(block.all_present(pages))
    }

    /// The present, not yet verified pages of `pages`, with the checksums to check
    /// them against. A block file whose identity changed since this process last saw
    /// it (replaced or rewritten behind the worker's back) has all its pages to check.
    fn unverified_pages(block: &Block, pages: Range<u32>) -> Vec<(u32, u32)> {
        let mut st = lock(&block.state);
        // Under the block's lock: taken before it, a commit landing in between would
        // make the file look changed (a stale identity), and every page would be
        // re-verified, pages being sent included. An evicted block's file is unlinked
        // (its status-change time moves): that is no change of its bytes.
        let current = block.file.metadata().map(|m| FileIdentity::of(&m)).ok();
        if !st.evicted && st.writers == 0 && current.is_some() && st.identity != current {
            if st.identity.is_some() {
                tracing::warn!(block = %block.name, "block file changed behind the worker; re-verifying");
            }
            if let Ok(none) = PresentBitmap::new(block.pages) {
                st.verified = none;
            }
            st.identity = current;
        }
        pages
            .filter(|&p| {
                st.present.is_present(p).unwrap_or(false)
                    && !st.verified.is_present(p).unwrap_or(true)
            })
            .map(|p| (p, st.checksums[p as usize]))
            .collect()
    }

    /// Reads each page back from the block file (no lock held) and checks it.
    fn check_pages(block: &Block, to_check: Vec<(u32, u32)>) -> Vec<PageCheck> {
        let mut buf = Vec::new();
        to_check
            .into_iter()
            .map(|(page, expected)| {
                let r = block.page_bytes(page);
                buf.resize((r.end - r.start) as usize, 0);
                let read = crate::read_faults::page_read()
                    .and_then(|()| block.file.read_exact_at(&mut buf, r.start));
                let outcome = match read {
                    Ok(()) if page_checksum(&buf) == expected => PageOutcome::Good,
                    Ok(()) => PageOutcome::Corrupt,
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => PageOutcome::Corrupt,
                    Err(e) => {
                        tracing::warn!(block = %block.name, page, error = %e, "a cached page could not be read back");
                        PageOutcome::Unreadable
                    }
                };
                PageCheck {
                    page,
                    expected,
                    outcome,
                }
            })
            .collect()
    }

    /// Applies what `checked` found: good pages are marked verified; a bad one is
    /// dropped (its hole punched, its bytes off the budget) unless it changed since it
    /// was checked — verified by another reader, refilled, or already dropped. The
    /// page's cost and the store's count change in one critical section (the store's
    /// lock, then the block's: the order eviction takes them).
    fn settle_checks(&self, block: &Block, checked: &[PageCheck]) -> Result<()> {
        let mut dropped = Vec::new();
        let (mut corrupt, mut unreadable) = (0u64, 0u64);
        {
            let mut inner = lock(&self.inner);
            let mut st = lock(&block.state);
            let mut freed = 0;
            for check in checked {
                let p = check.page;
                let unchanged = st.present.is_present(p).unwrap_or(false)
                    && !st.verified.is_present(p).unwrap_or(true)
                    && st.checksums[p as usize] == check.expected;
                if !unchanged {
                    continue;
                }
                if check.outcome == PageOutcome::Good {
                    let _ = st.verified.set(p);
                    continue;
                }
                // Punched while still present: no fill writes a present page.
                let r = block.page_bytes(p);
                let _ = rustix::fs::fallocate(
                    &block.file,
                    rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
                    r.start,
                    r.end - r.start,
                );
                let _ = st.present.clear(p);
                st.checksums[p as usize] = 0;
                freed += self.page_cost(block, p..p + 1);
                dropped.push(p);
                match check.outcome {
                    PageOutcome::Unreadable => unreadable += 1,
                    _ => corrupt += 1,
                }
            }
            if dropped.is_empty() {
                return Ok(());
            }
            // The punches changed the file's times: it is still the file this process
            // wrote, and must not look changed behind its back (every page would then
            // be re-verified, pages being sent included).
            st.identity = block.file.metadata().ok().map(|m| FileIdentity::of(&m));
            st.cost = st.cost.saturating_sub(freed);
            if !st.evicted {
                inner.sub_used(block.pinned(), freed);
                inner.policy.resize(&block.key, st.cost);
            }
            inner.corrupt_pages += corrupt;
            inner.unreadable_pages += unreadable;
        }
        tracing::warn!(block = %block.name, pages = ?dropped, "dropped pages that failed their checksum or a read; they will be refetched");
        block.persist_meta()
    }
}

/// What reading one page back found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageOutcome {
    /// Its bytes match its checksum.
    Good,
    /// They do not, or the file is too short.
    Corrupt,
    /// The read failed (a failing disk).
    Unreadable,
}

/// One page read back by [`BlockStore::verify`], and the checksum it was checked
/// against.
#[derive(Debug, Clone, Copy)]
struct PageCheck {
    page: u32,
    expected: u32,
    outcome: PageOutcome,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const PAGE: u64 = 4096;

    fn block_id(key: &str) -> BlockId {
        BlockId::new(
            ObjectId::s3("b", key).unwrap(),
            ObjectVersion::new("\"v1\"").unwrap(),
            0,
            4 * PAGE,
        )
        .unwrap()
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    fn fill(store: &Arc<BlockStore>, block: &Block, pages: Range<u32>, seed: u8) -> Vec<u8> {
        let span = block.page_bytes(pages.start).start..block.page_bytes(pages.end - 1).end;
        let data = pattern((span.end - span.start) as usize, seed);
        let res = store.reserve(block, pages.clone()).unwrap();
        store.commit_fill(block, pages, &data, res).unwrap();
        data
    }

    fn read(block: &Block, range: Range<u64>) -> Vec<u8> {
        let mut buf = vec![0; (range.end - range.start) as usize];
        block.file().read_exact_at(&mut buf, range.start).unwrap();
        buf
    }

    /// SEC-05: blocks that never fill cost no bytes, so a separate cap keeps their
    /// count (and open files) bounded; an empty block is dropped with its file, one
    /// with pages is not.
    /// Golden values: the checksums already on disk were written with the same
    /// polynomial (CRC-32C, Castagnoli), whatever computes it.
    #[test]
    fn page_checksums_are_crc32c() {
        assert_eq!(page_checksum(b"123456789"), 0xe306_9283);
        let page: Vec<u8> = (0..65_536 + 13).map(|i| (i * 31 + 7) as u8).collect();
        assert_eq!(page_checksum(&page), 0xb6cc_b0cb);
        assert_eq!(page_checksum(&[]), 0);
    }

    #[test]
    fn empty_blocks_are_capped_and_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            BlockStore::open(dir.path(), PAGE, 1 << 30)
                .unwrap()
                .with_max_blocks(8),
        );
        for i in 0..50 {
            store
                .get_or_create(&block_id(&format!("fake-{i}")), PAGE)
                .unwrap();
        }
        assert!(lock(&store.inner).blocks.len() <= 8);
        let files = std::fs::read_dir(dir.path().join("blocks"))
            .unwrap()
            .count();
        assert!(files <= 8, "{files} block files for a cap of 8");
        let empty = store.get_or_create(&block_id("empty"), PAGE).unwrap();
        let empty_file = empty.data_path.clone();
        assert!(empty_file.exists());
        store.forget_if_empty(&empty);
        assert!(!empty_file.exists() && store.get(&block_id("empty")).is_none());
        let full = store.get_or_create(&block_id("full"), 2 * PAGE).unwrap();
        fill(&store, &full, 0..1, 3);
        store.forget_if_empty(&full);
        assert!(
            store.get(&block_id("full")).is_some(),
            "a block with pages stays"
        );
    }

    #[test]
    fn fills_persist_across_reopen_and_short_last_page() {
        let dir = tempfile::tempdir().unwrap();
        let id = block_id("k");
        let object_size = 3 * PAGE + 100; // last page is 100 bytes
        let data = {
            let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
            let block = store.get_or_create(&id, object_size).unwrap();
            assert_eq!(block.pages, 4);
            let data = fill(&store, &block, 2..4, 7);
            assert_eq!(data.len() as u64, PAGE + 100);
            assert!(block.all_present(2..4) && !block.all_present(0..4));
            data
        };
        let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
        let block = store.get(&id).unwrap();
        assert!(block.all_present(2..4));
        assert!(store.verify(&block, 2..4).unwrap());
        assert_eq!(read(&block, 2 * PAGE..3 * PAGE + 100), data);
        assert_eq!(store.stats().used_bytes, 2 * PAGE + store.block_overhead(4));
    }

    /// What a power loss can leave of metadata that is no longer synced (2026-12-05):
    /// a file cut short, one of zeros, none at all, or the temporary file beside the
    /// old one. Each makes the block absent (its files removed) or leaves it as the
    /// old metadata said; never a page present that was not.
    #[test]
    fn metadata_torn_by_a_power_loss_leaves_the_block_absent_or_as_it_was() {
        let meta_of = |dir: &Path, id: &BlockId| {
            dir.join("blocks")
                .join(format!("{}.meta", id.storage_name()))
        };
        type Damage = fn(&Path, &[u8]);
        let damages: [(&str, Damage); 3] = [
            ("cut short", |p, json| {
                fs::write(p, &json[..json.len() / 2]).unwrap()
            }),
            ("zeros", |p, json| {
                fs::write(p, vec![0; json.len()]).unwrap()
            }),
            ("empty", |p, _| fs::write(p, b"").unwrap()),
        ];
        for (what, damage) in damages {
            let dir = tempfile::tempdir().unwrap();
            let id = block_id("torn");
            {
                let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
                let block = store.get_or_create(&id, 4 * PAGE).unwrap();
                fill(&store, &block, 0..2, 5);
            }
            let meta = meta_of(dir.path(), &id);
            let json = fs::read(&meta).unwrap();
            damage(&meta, &json);
            let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
            assert!(store.get(&id).is_none(), "{what}: the block is absent");
            assert_eq!(store.stats().used_bytes, 0, "{what}");
            let left = fs::read_dir(dir.path().join("blocks")).unwrap().count();
            assert_eq!(left, 0, "{what}: its files are removed");
        }
        // A later fill's metadata still in its temporary file (the rename lost): the
        // block is as the old metadata said, the temporary file removed.
        let dir = tempfile::tempdir().unwrap();
        let id = block_id("renamed");
        let first = {
            let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
            let block = store.get_or_create(&id, 4 * PAGE).unwrap();
            let first = fill(&store, &block, 0..1, 9);
            let old = fs::read(meta_of(dir.path(), &id)).unwrap();
            fill(&store, &block, 1..2, 10);
            let meta = meta_of(dir.path(), &id);
            fs::rename(&meta, meta.with_extension("meta.tmp")).unwrap();
            fs::write(&meta, old).unwrap();
            first
        };
        let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
        let block = store.get(&id).unwrap();
        assert!(block.all_present(0..1) && !block.all_present(1..2));
        assert!(store.verify(&block, 0..1).unwrap());
        assert_eq!(read(&block, 0..PAGE), first);
        assert!(!meta_of(dir.path(), &id).with_extension("meta.tmp").exists());
    }

    #[test]
    fn corrupted_and_truncated_pages_are_dropped_on_verify() {
        let dir = tempfile::tempdir().unwrap();
        let id = block_id("k");
        {
            let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
            let block = store.get_or_create(&id, 4 * PAGE).unwrap();
            fill(&store, &block, 0..4, 1);
        }
        // Behind the worker's back: flip a byte in page 1, truncate page 3.
        let path = dir
            .path()
            .join("blocks")
            .join(format!("{}.blk", id.storage_name()));
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0xEE], PAGE + 5).unwrap();
        f.set_len(3 * PAGE + 10).unwrap();
        drop(f);
        let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
        let block = store.get(&id).unwrap();
        assert!(!store.verify(&block, 0..4).unwrap());
        assert_eq!(
            store.stats().corrupt_pages,
            2,
            "both damaged pages are counted"
        );
        let st = lock(&block.state);
        assert!(st.present.is_present(0).unwrap() && st.present.is_present(2).unwrap());
        assert!(!st.present.is_present(1).unwrap() && !st.present.is_present(3).unwrap());
    }

    /// The read review's RP-06: readers A and B verify the same unverified page at
    /// once. B's read-back succeeds, so the page is verified and B sends it; A's
    /// read-back failed (EIO from a flaky disk). A's failure must not drop the page B
    /// verified, nor punch a hole under B's `sendfile` (zeros under a success header).
    #[test]
    fn a_failed_read_back_never_drops_a_page_another_reader_verified() {
        let dir = tempfile::tempdir().unwrap();
        let id = block_id("k");
        let data = {
            let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
            let block = store.get_or_create(&id, 4 * PAGE).unwrap();
            fill(&store, &block, 0..2, 5)
        };
        // Reopened: the pages are present and not verified by this process.
        let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
        let block = store.get(&id).unwrap();
        let used = store.stats().used_bytes;
        // A takes the page to check and reads it back...
        let a = BlockStore::unverified_pages(&block, 0..1);
        assert_eq!(a.len(), 1);
        // ... meanwhile B verifies it (and would now send it) ...
        assert!(store.verify(&block, 0..1).unwrap());
        // ... and A's read-back failed.
        let failed = PageCheck {
            page: a[0].0,
            expected: a[0].1,
            outcome: PageOutcome::Unreadable,
        };
        store.settle_checks(&block, &[failed]).unwrap();
        assert!(block.all_present(0..2), "B's verified page was dropped");
        assert_eq!(
            read(&block, 0..PAGE),
            data[..PAGE as usize],
            "punched under B"
        );
        let stats = store.stats();
        assert_eq!((stats.unreadable_pages, stats.used_bytes), (0, used));

        // A page nobody verified is still dropped on a failed read-back, and refilled.
        let b = BlockStore::unverified_pages(&block, 1..2);
        let failed = PageCheck {
            page: b[0].0,
            expected: b[0].1,
            outcome: PageOutcome::Unreadable,
        };
        store.settle_checks(&block, &[failed]).unwrap();
        assert!(!block.all_present(1..2));
        assert_eq!(store.stats().unreadable_pages, 1);
        assert_eq!(store.stats().used_bytes, used - PAGE);
    }

    /// The read review's RP-04: the store's count of bytes in use (and of pinned ones)
    /// always equals the sum of its blocks' costs, whatever fills, verifications, pin
    /// changes and evictions race. Eight threads churn a store that holds a few blocks
    /// at a time; the counts are then checked against the blocks.
    #[test]
    fn the_bytes_counted_equal_the_blocks_after_racing_fills_and_evictions() {
        let dir = tempfile::tempdir().unwrap();
        let per_block = 4 * PAGE
            + BlockStore::open(dir.path(), PAGE, 1)
                .unwrap()
                .block_overhead(4);
        let store = Arc::new(BlockStore::open(dir.path(), PAGE, 3 * per_block).unwrap());
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let store = store.clone();
                std::thread::spawn(move || {
                    let mut n = t;
                    for round in 0..400u64 {
                        n = n
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let key = format!("k{}", (n >> 33) % 12);
                        if t == 7 && round % 10 == 0 {
                            let pins = if round % 20 == 0 {
                                vec!["s3/b/k1".into()]
                            } else {
                                vec![]
                            };
                            store.set_cluster_pins(&pins);
                        }
                        let Ok(block) = store.get_or_create(&block_id(&key), 4 * PAGE) else {
                            continue;
                        };
                        let first = ((n >> 40) % 4) as u32;
                        if let Some(res) = store.reserve(&block, first..first + 1) {
                            let data = pattern(PAGE as usize, first as u8);
                            let _ = store.commit_fill(&block, first..first + 1, &data, res);
                        }
                        let _ = store.verify(&block, 0..4);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let inner = lock(&store.inner);
        let (mut used, mut pinned) = (0, 0);
        for block in inner.blocks.values() {
            let cost = lock(&block.state).cost;
            used += cost;
            if block.pinned() {
                pinned += cost;
            }
        }
        assert!(inner.evictions > 0, "the churn evicted");
        assert_eq!((inner.used, inner.pinned_used), (used, pinned));
    }

    /// The read review's RP-08: a fill that cannot fit because of other fills'
    /// reservations (not cached blocks) is refused without evicting anything.
    #[test]
    fn a_reservation_that_cannot_fit_beside_the_others_evicts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let per_block = 4 * PAGE
            + BlockStore::open(dir.path(), PAGE, 1)
                .unwrap()
                .block_overhead(4);
        let store = Arc::new(BlockStore::open(dir.path(), PAGE, 4 * per_block).unwrap());
        let cached = store.get_or_create(&block_id("a"), 4 * PAGE).unwrap();
        fill(&store, &cached, 0..4, 1);
        // Three fills in flight hold the rest of the budget.
        let held: Vec<Reservation> = ["c", "d", "e"]
            .iter()
            .map(|key| {
                let block = store.get_or_create(&block_id(key), 4 * PAGE).unwrap();
                store
                    .reserve(&block, 0..4)
                    .expect("fits beside the cached block")
            })
            .collect();
        // A fill of a block twice the size: it would not fit beside them even in an
        // empty cache, so evicting the cached block would gain nothing.
        let big_id = BlockId::new(
            ObjectId::s3("b", "big").unwrap(),
            ObjectVersion::new("\"v1\"").unwrap(),
            0,
            8 * PAGE,
        )
        .unwrap();
        let big = store.get_or_create(&big_id, 8 * PAGE).unwrap();
        assert!(store.reserve(&big, 0..8).is_none());
        assert_eq!(
            store.stats().evictions,
            0,
            "a block was evicted for nothing"
        );
        assert!(cached.all_present(0..4) && store.get(&block_id("a")).is_some());
        drop(held);
    }

    /// The page-concurrency stress test: readers, fills, verification (with
    /// read-backs that fail, as a flaky disk's do), pin changes and eviction race over
    /// the same few pages of a store too small for them, in rounds that reopen it (so
    /// every page is to be verified again). A reader takes a page the way the data
    /// plane does — the hit path (`ready_for_read`), else `verify`, else a fill — and
    /// then reads it from the block's file, as `sendfile` or a handed-off descriptor
    /// does: one wrong byte (a zero from a hole punched under it, another page's bytes)
    /// fails it. The store's counts must then equal its blocks'.
    #[test]
    fn racing_readers_fills_verification_and_eviction_never_show_a_wrong_byte() {
        const KEYS: u64 = 6;
        const PAGES: u32 = 4;
        let dir = tempfile::tempdir().unwrap();
        let per_block = u64::from(PAGES) * PAGE
            + BlockStore::open(dir.path(), PAGE, 1)
                .unwrap()
                .block_overhead(PAGES);
        let id = |k: u64| block_id(&format!("stress-{k}"));
        let page_bytes = |k: u64, p: u32| pattern(PAGE as usize, (k as u8) * 16 + p as u8 + 1);
        let wrong = Arc::new(std::sync::atomic::AtomicU64::new(0));
        for round in 0..40u64 {
            let store = Arc::new(BlockStore::open(dir.path(), PAGE, 3 * per_block).unwrap());
            let threads: Vec<_> = (0..8u64)
                .map(|t| {
                    let (store, wrong) = (store.clone(), wrong.clone());
                    std::thread::spawn(move || {
                        let mut rng = fastrand::Rng::with_seed(round * 100 + t);
                        for _ in 0..60 {
                            let (k, p) = (rng.u64(0..KEYS), rng.u32(0..PAGES));
                            let Ok(block) = store.get_or_create(&id(k), u64::from(PAGES) * PAGE)
                            else {
                                continue;
                            };
                            match t {
                                // A disk that fails read-backs: whatever these
                                // verifiers check, they report unreadable.
                                5 | 6 => {
                                    let to_check = BlockStore::unverified_pages(&block, 0..PAGES);
                                    let checks: Vec<PageCheck> =
                                        BlockStore::check_pages(&block, to_check)
                                            .into_iter()
                                            .map(|c| PageCheck {
                                                outcome: PageOutcome::Unreadable,
                                                ..c
                                            })
                                            .collect();
                                    std::thread::yield_now();
                                    let _ = store.settle_checks(&block, &checks);
                                }
                                // Pins coming and going (eviction passes pinned blocks over).
                                7 => {
                                    let pins = if rng.bool() {
                                        vec!["s3/b/stress-1".into()]
                                    } else {
                                        vec![]
                                    };
                                    store.set_cluster_pins(&pins);
                                }
                                _ => {
                                    // A hit is read from the block found ready, as the
                                    // data plane does: `block` may have been evicted
                                    // meanwhile and its key given to a new block, whose
                                    // pages are not `block`'s.
                                    let ready = store.ready_for_read(
                                        &id(k),
                                        u64::from(PAGES) * PAGE,
                                        u64::from(p) * PAGE,
                                        PAGE,
                                    );
                                    let hit = ready.is_some();
                                    let other_block =
                                        ready.as_ref().is_some_and(|r| !Arc::ptr_eq(r, &block));
                                    let block = ready.unwrap_or(block);
                                    let present =
                                        hit || store.verify(&block, p..p + 1).unwrap_or(false);
                                    if !present {
                                        if let Some(res) = store.reserve(&block, p..p + 1) {
                                            let _ = store.commit_fill(
                                                &block,
                                                p..p + 1,
                                                &page_bytes(k, p),
                                                res,
                                            );
                                        }
                                        if !store.verify(&block, p..p + 1).unwrap_or(false) {
                                            continue;
                                        }
                                    }
                                    // Sent from the file, as the data plane does, a
                                    // piece at a time (a send takes a while).
                                    let mut got = vec![0u8; PAGE as usize];
                                    let start = u64::from(p) * PAGE;
                                    let mut failed = false;
                                    for (i, piece) in got.chunks_mut(1024).enumerate() {
                                        std::thread::yield_now();
                                        failed |= block
                                            .file()
                                            .read_exact_at(piece, start + i as u64 * 1024)
                                            .is_err();
                                    }
                                    if failed || got != page_bytes(k, p) {
                                        // What a wrong read looked like, for whoever
                                        // meets one.
                                        eprintln!(
                                            "wrong read of key {k} page {p}: hit {hit}, from another block {other_block}, evicted {}, read failed {failed}, all zeros {}",
                                            lock(&block.state).evicted,
                                            got.iter().all(|b| *b == 0)
                                        );
                                        wrong.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                            }
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            let inner = lock(&store.inner);
            let used: u64 = inner.blocks.values().map(|b| lock(&b.state).cost).sum();
            assert_eq!(inner.used, used, "round {round}: the count drifted");
            assert!(
                inner.evictions > 0 || round > 0,
                "round {round} evicted nothing"
            );
        }
        assert_eq!(
            wrong.load(Ordering::Relaxed),
            0,
            "pages read with wrong bytes"
        );
    }

    /// Found by the stress test above: a block made again while its evicted
    /// predecessor's files were still to be removed opened the same file, so the two
    /// shared it (one's hole punches under the other's sends), and the removal then
    /// took the new block's file name (its pages lost at the next start).
    #[test]
    fn a_block_made_again_before_its_predecessor_is_removed_keeps_its_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
        let old = store.get_or_create(&block_id("k"), 4 * PAGE).unwrap();
        fill(&store, &old, 0..1, 1);
        // Evicted, its files not removed yet.
        let mut victims = Vec::new();
        {
            let mut inner = lock(&store.inner);
            assert!(store.evict_victim(&mut inner, &mut victims));
        }
        let new = store.get_or_create(&block_id("k"), 4 * PAGE).unwrap();
        assert!(!Arc::ptr_eq(&old, &new));
        let ino = |f: &File| f.metadata().unwrap().ino();
        assert_ne!(
            ino(old.file()),
            ino(new.file()),
            "the two blocks share a file"
        );
        store.remove_files(victims);
        let named = fs::metadata(&new.data_path).expect("the new block's file is named");
        assert_eq!(named.ino(), ino(new.file()));
        fill(&store, &new, 1..2, 2);
        assert!(new.meta_path.exists());
    }

    #[test]
    fn interrupted_fills_never_claim_pages() {
        let dir = tempfile::tempdir().unwrap();
        let id = block_id("k");
        {
            let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
            let block = store.get_or_create(&id, 4 * PAGE).unwrap();
            fill(&store, &block, 0..1, 1);
            // A crash after the data write but before the metadata: bytes land, no claim.
            block
                .file()
                .write_all_at(&pattern(PAGE as usize, 9), PAGE)
                .unwrap();
            // And a leftover temporary metadata file.
            fs::write(block.meta_path.with_extension("meta.tmp"), b"{garbage").unwrap();
        }
        let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
        let block = store.get(&id).unwrap();
        assert!(block.all_present(0..1));
        assert!(!block.all_present(1..2));
        assert!(
            !dir.path()
                .join("blocks")
                .join(format!("{}.meta.tmp", id.storage_name()))
                .exists()
        );
    }

    #[test]
    fn budget_evicts_whole_blocks_and_frees_disk() {
        let dir = tempfile::tempdir().unwrap();
        // Room for two blocks of 4 pages (plus their overhead).
        let unit = fs::metadata(dir.path()).unwrap().blksize().max(512);
        let overhead = unit * (2 + 1);
        let capacity = 2 * (4 * PAGE + overhead);
        let store = Arc::new(BlockStore::open(dir.path(), PAGE, capacity).unwrap());
        let mut blocks = Vec::new();
        for k in 0..5 {
            let block = store
                .get_or_create(&block_id(&format!("k{k}")), 4 * PAGE)
                .unwrap();
            fill(&store, &block, 0..4, k as u8);
            blocks.push(block);
            assert!(store.stats().used_bytes <= capacity);
        }
        assert_eq!(store.stats().evictions, 3);
        let files = fs::read_dir(dir.path().join("blocks")).unwrap().count();
        assert_eq!(
            files, 4,
            "two blocks remain, each a data and a metadata file"
        );
        // An evicted block is still readable through a handle held before eviction.
        assert_eq!(read(&blocks[0], 0..PAGE), pattern(PAGE as usize, 0));
        assert!(blocks[0].is_evicted());
        // A fill larger than the whole budget is refused.
        let huge = BlockId::new(
            ObjectId::s3("b", "huge").unwrap(),
            ObjectVersion::new("v").unwrap(),
            0,
            64 * PAGE,
        )
        .unwrap();
        let block = store.get_or_create(&huge, 64 * PAGE).unwrap();
        assert!(store.reserve(&block, 0..64).is_none());
    }

    #[test]
    fn pinned_blocks_are_passed_over_within_their_share_and_evicted_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let unit = fs::metadata(dir.path()).unwrap().blksize().max(512);
        let block_cost = 4 * PAGE + unit * (2 + 1);
        // Room for four blocks; pins may hold two.
        let capacity = 4 * block_cost;
        let pins = Pins::new(vec!["s3/b/pinned/".into()], 0.5, capacity);
        let store = Arc::new(BlockStore::open_pinned(dir.path(), PAGE, capacity, pins).unwrap());
        let pinned: Vec<Arc<Block>> = ["pinned/a", "pinned/b"]
            .iter()
            .map(|k| {
                let b = store.get_or_create(&block_id(k), 4 * PAGE).unwrap();
                fill(&store, &b, 0..4, 1);
                b
            })
            .collect();
        assert!(pinned.iter().all(|b| b.pinned()));
        assert_eq!(store.stats().pinned_bytes, 2 * block_cost);
        // Eight other blocks through a cache with room for two besides the pins.
        let others: Vec<Arc<Block>> = (0..8)
            .map(|k| {
                let b = store
                    .get_or_create(&block_id(&format!("other/{k}")), 4 * PAGE)
                    .unwrap();
                assert!(!b.pinned());
                fill(&store, &b, 0..4, k as u8);
                b
            })
            .collect();
        assert!(
            pinned.iter().all(|b| !b.is_evicted()),
            "the pinned blocks were passed over"
        );
        assert_eq!(others.iter().filter(|b| b.is_evicted()).count(), 6);
        assert!(store.stats().used_bytes <= capacity);

        // A third pinned block takes the pins past their share: pinned blocks are then
        // evicted like any other, down to the share.
        let third = store
            .get_or_create(&block_id("pinned/c"), 4 * PAGE)
            .unwrap();
        fill(&store, &third, 0..4, 3);
        for k in 8..12 {
            let b = store
                .get_or_create(&block_id(&format!("other/{k}")), 4 * PAGE)
                .unwrap();
            fill(&store, &b, 0..4, k as u8);
        }
        let stats = store.stats();
        assert!(stats.used_bytes <= capacity);
        assert!(
            stats.pinned_bytes <= 2 * block_cost,
            "pins hold at most their share once past it: {} of {}",
            stats.pinned_bytes,
            2 * block_cost
        );
    }

    #[test]
    fn cluster_pins_mark_cached_blocks_and_new_ones_and_unpinning_frees_them() {
        let dir = tempfile::tempdir().unwrap();
        let unit = fs::metadata(dir.path()).unwrap().blksize().max(512);
        let block_cost = 4 * PAGE + unit * (2 + 1);
        let capacity = 4 * block_cost;
        // No pin of the worker's own; the cluster's may hold half.
        let pins = Pins::new(Vec::new(), 0.5, capacity);
        let store = Arc::new(BlockStore::open_pinned(dir.path(), PAGE, capacity, pins).unwrap());
        let early = store.get_or_create(&block_id("keep/a"), 4 * PAGE).unwrap();
        fill(&store, &early, 0..4, 1);
        assert!(!early.pinned());
        assert!(store.set_cluster_pins(&["s3/b/keep/".into()]));
        assert!(!store.set_cluster_pins(&["s3/b/keep/".into()]), "unchanged");
        assert!(
            early.pinned(),
            "a block cached before the pin is pinned too"
        );
        let late = store.get_or_create(&block_id("keep/b"), 4 * PAGE).unwrap();
        fill(&store, &late, 0..4, 2);
        assert!(late.pinned());
        assert_eq!(store.stats().pinned_bytes, 2 * block_cost);
        // Churn: both pinned blocks stay.
        for k in 0..8 {
            let b = store
                .get_or_create(&block_id(&format!("other/{k}")), 4 * PAGE)
                .unwrap();
            fill(&store, &b, 0..4, k as u8);
        }
        assert!(!early.is_evicted() && !late.is_evicted());
        // Unpinned: no pinned bytes, and churn evicts them like anything else.
        assert!(store.set_cluster_pins(&[]));
        assert_eq!(store.stats().pinned_bytes, 0);
        assert!(!early.pinned() && !late.pinned());
        // (Each read twice, so that they reach the policy's main queue too.)
        for k in 8..48 {
            let id = block_id(&format!("other/{k}"));
            let b = store.get_or_create(&id, 4 * PAGE).unwrap();
            fill(&store, &b, 0..4, k as u8);
            store.get_or_create(&id, 4 * PAGE).unwrap();
        }
        assert!(early.is_evicted() && late.is_evicted());
    }

    #[test]
    fn plans_share_one_fill_and_wake_waiters() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
        let block = store.get_or_create(&block_id("k"), 4 * PAGE).unwrap();
        let FillPlan::Fill { pages, done } = block.plan(0..1, 3, 16) else {
            panic!("first reader fills")
        };
        assert_eq!(pages, 0..3, "readahead extends the fill");
        let FillPlan::Wait(mut rx) = block.plan(1..2, 1, 16) else {
            panic!("second reader waits")
        };
        let FillPlan::Fill {
            pages: other,
            done: other_done,
        } = block.plan(3..4, 4, 16)
        else {
            panic!("a disjoint page gets its own fill")
        };
        assert_eq!(other, 3..4);
        fill(&store, &block, pages.clone(), 1);
        block.finish_fill(pages, done, Ok(()));
        assert!(matches!(*rx.borrow_and_update(), Some(Ok(()))));
        assert!(matches!(block.plan(0..3, 3, 16), FillPlan::Ready));
        block.finish_fill(
            other,
            other_done,
            Err(Arc::new(WorkerError::Unavailable("x".into()))),
        );
        assert!(
            matches!(block.plan(3..4, 4, 16), FillPlan::Fill { .. }),
            "a failed fill can be retried"
        );
    }

    #[test]
    fn a_reader_claims_the_pages_nobody_fills_before_it_waits() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
        let block = store.get_or_create(&block_id("k"), 4 * PAGE).unwrap();
        // The first piece's fill reads one page ahead: pages 0..3.
        let FillPlan::Fill { pages, done } = block.plan(0..2, 3, 16) else {
            panic!("first reader fills")
        };
        assert_eq!(pages, 0..3);
        // The next piece (pages 2..4, pipelined behind it) needs page 2, being filled,
        // and page 3, which nobody fills: it claims page 3 now.
        let FillPlan::Fill {
            pages: next,
            done: next_done,
        } = block.plan(2..4, 5, 16)
        else {
            panic!("the next reader fills what nobody fills")
        };
        assert_eq!(next, 3..4);
        // With every absent page it needs being filled, it waits for the first.
        let FillPlan::Wait(mut rx) = block.plan(2..4, 5, 16) else {
            panic!("then it waits")
        };
        fill(&store, &block, pages.clone(), 1);
        block.finish_fill(pages, done, Ok(()));
        assert!(matches!(*rx.borrow_and_update(), Some(Ok(()))));
        fill(&store, &block, next.clone(), 2);
        block.finish_fill(next, next_done, Ok(()));
        assert!(matches!(block.plan(0..4, 4, 16), FillPlan::Ready));
    }

    #[test]
    fn a_fill_written_behind_answers_the_ranges_its_bytes_hold_until_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(BlockStore::open(dir.path(), PAGE, 1 << 20).unwrap());
        let block = store.get_or_create(&block_id("behind"), 4 * PAGE).unwrap();
        let FillPlan::Fill { pages, done } = block.plan(1..3, 3, 16) else {
            panic!("first reader fills")
        };
        assert_eq!(block.written_behind(PAGE, 10), None, "no bytes offered yet");
        let bytes = bytes::Bytes::from(pattern((2 * PAGE) as usize, 9));
        block.publish_written_behind(&pages, PAGE, bytes.clone());
        assert!(matches!(block.plan(1..2, 2, 16), FillPlan::Wait(_)));
        let got = block.written_behind(PAGE + 5, PAGE).unwrap();
        assert_eq!(got[..], bytes[5..5 + PAGE as usize]);
        assert_eq!(block.written_behind(PAGE, 2 * PAGE).unwrap(), bytes);
        assert_eq!(block.written_behind(0, 10), None, "a range before them");
        assert_eq!(
            block.written_behind(2 * PAGE, PAGE + 1),
            None,
            "one past them"
        );
        block.finish_fill(pages, done, Ok(()));
        assert_eq!(block.written_behind(PAGE, 10), None, "gone with the fill");
    }
}
