//! Block files that workers on this host handed over, held for a moment so that the
//! bytes a worker vouched for are read again without asking it.
//!
//! A worker's FileHandoff vouches for the bytes it names: those pages of that block file
//! are present and verified, present pages are never rewritten, and eviction only
//! unlinks the file. So while the file is the one the worker vouched for, reading the
//! same bytes again through the descriptor gives the same bytes; a co-located reader
//! need not ask the worker again for each piece of a hot block (the worker hop was most
//! of a cached read's cost after the bytes themselves). What is held, and for how long:
//!
//! - each block's descriptor (the first one handed over) with the byte ranges vouched
//!   for it (only those: other pages of the file may be absent; at most 256 separate
//!   ranges, merged as they meet), for
//!   [`HeldFilesConfig::hold`] after the last handoff; then the next read asks the
//!   worker, and its handoff of the same, unchanged file renews the hold with every
//!   range vouched before (a hot block's reads then reach its worker about once a hold,
//!   and its vouched ranges are not rebuilt piece by piece);
//! - the file's identity (device, inode, size, modification and status-change times)
//!   when it was handed over, compared on every use: a fill of another page, a write
//!   behind the worker's back or an eviction (the unlink moves the status-change time)
//!   ends the hold, and the next read asks the worker, which re-verifies what it must;
//! - at most [`HeldFilesConfig::max_files`] files (S3-FIFO, quick_cache; never more
//!   than an eighth of the open-files limit); a file not renewed is dropped at the first
//!   sweep a hold after its hold ended (sweeps run with reads, handoffs and each
//!   membership refresh), so within about three holds.
//!
//! A read whose bytes only the kernel touches — written untouched to a plain socket
//! ([`ReadOptions::kernel_copies_only`](crate::ReadOptions)) — is served from a
//! read-only shared mapping of the held file (made once per held file, unmapped when
//! the last piece served from it is dropped): the socket write then copies each byte
//! once, from the page cache, where a read into a buffer copied it twice. Its pages are
//! checked to be in the page cache first (`mincore`), as the copying read is
//! (`RWF_NOWAIT`), so that no runtime thread waits for the disk. Bytes of a mapping
//! must not be read in user space: a file truncated behind the worker's back (the
//! worker never truncates one) faults a user-space read (`SIGBUS`), where the kernel's
//! copy fails the write (`EFAULT`) and the client sees a cut body.
//!
//! The hold bounds what the shortcut costs: how long an evicted file's disk space can
//! outlive its eviction, and how long a hot block's reads go unseen by its worker (its
//! eviction order still sees at least one read per hold). A block is keyed by its
//! [`BlockId`], which names the object's version: a new version is another block.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use talon_core::BlockId;

/// How long handed-over block files are held, and how many (each one open descriptor,
/// and never more than an eighth of the process's open-files limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldFilesConfig {
    /// How long after its last handoff a block file is read without asking its worker;
    /// zero holds none (every read asks).
    pub hold: Duration,
    /// Most block files held at once (each one open descriptor).
    pub max_files: usize,
    /// Whether reads whose bytes only the kernel touches are served from a mapping of
    /// the held file (one copy fewer); false copies every held read into a buffer.
    pub map_files: bool,
}

impl Default for HeldFilesConfig {
    fn default() -> HeldFilesConfig {
        HeldFilesConfig {
            hold: Duration::from_secs(1),
            max_files: 4096,
            map_files: true,
        }
    }
}

/// What a cache client's held block files served and hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeldFileStats {
    /// Pieces read from held files without asking a worker, since the client was made.
    pub reads: u64,
    /// Of those, pieces served from a file's mapping (copied once, by the kernel).
    pub mapped_reads: u64,
    /// Files held now.
    pub held: usize,
}

/// What a file was when it was handed over; any change ends its hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    /// Links: an eviction unlinks (1 -> 0) even within one tick of the file clock.
    nlink: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    fn of(file: &File) -> Option<Identity> {
        let m = file.metadata().ok()?;
        Some(Identity {
            dev: m.dev(),
            ino: m.ino(),
            nlink: m.nlink(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

/// One held block file.
#[derive(Debug)]
struct Held {
    file: Arc<File>,
    identity: Identity,
    /// Vouched byte ranges (block coordinates), sorted, disjoint and not touching.
    vouched: RwLock<Vec<Range<u64>>>,
    /// Milliseconds after the table's `created` until which it may be used.
    until_ms: AtomicU64,
    /// The file's first `identity.size` bytes mapped, made at its first mapped read
    /// (`None` inside: the file could not be mapped, and is read by copying).
    mapping: OnceLock<Option<Arc<Mapping>>>,
}

impl Held {
    fn mapping(&self) -> Option<&Arc<Mapping>> {
        self.mapping
            .get_or_init(|| Mapping::of(&self.file, self.identity.size).map(Arc::new))
            .as_ref()
    }
}

/// A read-only shared mapping of the start of a held file; unmapped when dropped.
#[derive(Debug)]
struct Mapping {
    at: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is read-only, its address and length fixed until drop, and
// nothing in this process writes through it: sharing its address between threads is
// sharing immutable memory.
unsafe impl Send for Mapping {}
// SAFETY: as for `Send`.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `file` (open for reading); `None` when empty or
    /// when the kernel refuses (a file system without mappings).
    fn of(file: &File, len: u64) -> Option<Mapping> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(len).ok().filter(|l| *l > 0)?;
        // SAFETY: a new mapping at an address the kernel picks, overlapping nothing
        // this process uses; read-only, so nothing here can write the file through it.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return None;
        }
        Some(Mapping {
            at: NonNull::new(at.cast())?,
            len,
        })
    }

    /// Whether every page of `range` (within the mapping) is in the page cache: the
    /// kernel's copy from it then waits for no disk.
    fn resident(&self, range: &Range<usize>) -> bool {
        let page = rustix::param::page_size();
        let mut at = range.start / page * page;
        let mut pages = [0u8; 256];
        while at < range.end {
            let len = (range.end - at).min(pages.len() * page);
            // SAFETY: `at` is page-aligned (the mapping starts on a page) and
            // `at..at + len` lies within the mapping; `pages` has room for the
            // `len.div_ceil(page)` bytes the kernel writes.
            let rc = unsafe {
                libc::mincore(
                    self.at.as_ptr().add(at).cast(),
                    len,
                    pages.as_mut_ptr().cast(),
                )
            };
            if rc != 0 || pages[..len.div_ceil(page)].iter().any(|p| p & 1 == 0) {
                return false;
            }
            at += len;
        }
        true
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping `of` made, unmapped once; no piece refers to it any more
        // (each holds an `Arc` of it).
        unsafe { libc::munmap(self.at.as_ptr().cast(), self.len) };
    }
}

/// Bytes of a held file served from its mapping: writing them to a socket copies them
/// once, from the page cache.
struct MappedPiece {
    mapping: Arc<Mapping>,
    range: Range<usize>,
}

impl AsRef<[u8]> for MappedPiece {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `range` lies within the mapping, which lives as long as `self`. The
        // pages are vouched-for bytes of a block file, which the worker never rewrites
        // nor truncates; only the kernel reads them (see the module's comment).
        unsafe {
            std::slice::from_raw_parts(
                self.mapping.at.as_ptr().add(self.range.start),
                self.range.len(),
            )
        }
    }
}

/// Smallest piece served from a mapping; smaller ones are copied. Measured
/// (docs/BENCHMARKS.md, 2026-12-06): at 64 KiB the mapping took 7–10% off the gateway's
/// CPU per request, at 4 KiB it gained nothing against a copy of a page, while a file
/// mapped for small pieces alone still pays for its mapping, its faults and its unmap.
const MIN_MAPPED_PIECE: usize = 64 << 10;

/// Most separate vouched ranges one held file keeps (16 bytes each): small reads
/// scattered over a large block stop being held past it, rather than growing the list.
const MAX_VOUCHED_RANGES: usize = 256;

/// Adds `range` to `ranges` (sorted, disjoint, not touching), merging what it meets; a
/// range that would be one more past [`MAX_VOUCHED_RANGES`] is not added.
fn add_range(ranges: &mut Vec<Range<u64>>, range: Range<u64>) {
    if range.is_empty() {
        return;
    }
    // The first range that ends at or after the new one's start may merge with it.
    let first = ranges.partition_point(|r| r.end < range.start);
    let mut merged = range;
    let mut last = first;
    while last < ranges.len() && ranges[last].start <= merged.end {
        merged.start = merged.start.min(ranges[last].start);
        merged.end = merged.end.max(ranges[last].end);
        last += 1;
    }
    if last == first && ranges.len() >= MAX_VOUCHED_RANGES {
        return;
    }
    ranges.splice(first..last, std::iter::once(merged));
}

/// Whether `range` lies within one of `ranges` (sorted, disjoint, not touching).
fn covers(ranges: &[Range<u64>], range: &Range<u64>) -> bool {
    let i = ranges.partition_point(|r| r.end < range.end);
    ranges
        .get(i)
        .is_some_and(|r| r.start <= range.start && range.end <= r.end)
}

/// The held block files of one cache client.
pub(crate) struct HeldFiles {
    config: HeldFilesConfig,
    files: quick_cache::sync::Cache<BlockId, Arc<Held>>,
    created: Instant,
    last_sweep_ms: AtomicU64,
    reads: AtomicU64,
    /// Of `reads`, those served from a mapping.
    mapped_reads: AtomicU64,
}

impl HeldFiles {
    /// Holds at most `config.max_files`, and at most an eighth of this process's
    /// open-files limit (the rest is for its connections).
    pub(crate) fn new(mut config: HeldFilesConfig) -> HeldFiles {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        config.max_files = config
            .max_files
            .min(usize::try_from(limit / 8).unwrap_or(usize::MAX));
        HeldFiles {
            config,
            files: quick_cache::sync::Cache::new(config.max_files.max(1)),
            created: Instant::now(),
            last_sweep_ms: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            mapped_reads: AtomicU64::new(0),
        }
    }

    fn enabled(&self) -> bool {
        !self.config.hold.is_zero() && self.config.max_files > 0
    }

    fn ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.created).as_millis()).unwrap_or(u64::MAX)
    }

    /// `len` bytes at `offset` of `block`, read from its held file when a worker vouched
    /// for all of them within the hold, the file is unchanged and the bytes are in the
    /// page cache (a read that would wait for the disk is left to the worker, which
    /// reads off the runtime's threads). With `kernel_copies_only` (the caller only
    /// writes the bytes to a plain socket) they are served from the file's mapping.
    /// `None`: ask the worker.
    pub(crate) fn read(
        &self,
        block: &BlockId,
        offset: u64,
        len: u32,
        kernel_copies_only: bool,
    ) -> Option<Bytes> {
        if !self.enabled() {
            return None;
        }
        let at = Instant::now();
        self.sweep(at);
        let held = self.files.get(block)?;
        let now = self.ms(at);
        let range = offset..offset.checked_add(u64::from(len))?;
        if now >= held.until_ms.load(Ordering::Relaxed) {
            // The hold ended: the worker is asked, and its next handoff of the same,
            // unchanged file renews the hold with every range vouched before.
            return None;
        }
        if !covers(
            &held.vouched.read().unwrap_or_else(|p| p.into_inner()),
            &range,
        ) {
            return None;
        }
        if Identity::of(&held.file) != Some(held.identity) {
            self.forget(block, &held);
            return None;
        }
        let want = len as usize;
        if kernel_copies_only
            && self.config.map_files
            && want >= MIN_MAPPED_PIECE
            && let Some(mapping) = held.mapping()
        {
            let start = usize::try_from(offset).ok()?;
            let range = start..start.checked_add(want)?;
            if range.end > mapping.len || !mapping.resident(&range) {
                return None;
            }
            self.reads.fetch_add(1, Ordering::Relaxed);
            self.mapped_reads.fetch_add(1, Ordering::Relaxed);
            return Some(Bytes::from_owner(MappedPiece {
                mapping: Arc::clone(mapping),
                range,
            }));
        }
        let mut buf: Vec<u8> = Vec::with_capacity(want);
        while buf.len() < want {
            match crate::read::read_cached(&held.file, &mut buf, offset, want) {
                Ok(Some(0)) => {
                    // Shorter than vouched for: not the file it was.
                    self.forget(block, &held);
                    return None;
                }
                Ok(Some(_)) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Ok(None) | Err(_) => return None,
            }
        }
        // `read_cached` fills at most the spare capacity, which `with_capacity` only
        // promises is at least `want`: the piece is its first `want` bytes.
        buf.truncate(want);
        self.reads.fetch_add(1, Ordering::Relaxed);
        Some(Bytes::from(buf))
    }

    /// A worker handed over `file` for `block`, vouching for `range` (block
    /// coordinates): holds the file (or, when one is held and unchanged, adds the range
    /// to it) for another hold.
    pub(crate) fn vouch(&self, block: &BlockId, file: &Arc<File>, range: Range<u64>) {
        if !self.enabled() || range.is_empty() {
            return;
        }
        let now = Instant::now();
        self.sweep(now);
        let until = self.ms(now + self.config.hold);
        let Some(identity) = Identity::of(file) else {
            return;
        };
        if let Some(held) = self.files.get(block) {
            // The file handed over now is the held one, unchanged since (the same inode
            // on the same device has one status: the held file's is this one): the new
            // range is vouched for it too. Another file (another worker's copy of the
            // block, or a block dropped and filled again) replaces it.
            if identity == held.identity {
                add_range(
                    &mut held.vouched.write().unwrap_or_else(|p| p.into_inner()),
                    range,
                );
                held.until_ms.store(until, Ordering::Relaxed);
                return;
            }
        }
        self.files.insert(
            block.clone(),
            Arc::new(Held {
                file: Arc::clone(file),
                identity,
                vouched: RwLock::new(vec![range]),
                until_ms: AtomicU64::new(until),
                mapping: OnceLock::new(),
            }),
        );
    }

    /// Drops `held` for `block`, unless another file was held meanwhile.
    fn forget(&self, block: &BlockId, held: &Arc<Held>) {
        self.files
            .remove_if(block, |current| Arc::ptr_eq(current, held));
    }

    /// Drops every file whose hold ended more than a hold ago (one not renewed by a
    /// handoff meanwhile), at most once per hold.
    pub(crate) fn sweep(&self, now: Instant) {
        if !self.enabled() {
            return;
        }
        let now_ms = self.ms(now);
        let last = self.last_sweep_ms.load(Ordering::Relaxed);
        let every = u64::try_from(self.config.hold.as_millis()).unwrap_or(u64::MAX);
        if now_ms < last.saturating_add(every)
            || self
                .last_sweep_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        self.files
            .retain(|_, held| now_ms < held.until_ms.load(Ordering::Relaxed).saturating_add(every));
    }

    /// What held files served since this client was made, and hold now.
    pub(crate) fn stats(&self) -> HeldFileStats {
        HeldFileStats {
            reads: self.reads.load(Ordering::Relaxed),
            mapped_reads: self.mapped_reads.load(Ordering::Relaxed),
            held: self.files.len(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    use talon_core::{ObjectId, ObjectVersion};

    fn block(offset: u64) -> BlockId {
        BlockId::new(
            ObjectId::s3("data", "held.bin").unwrap(),
            ObjectVersion::from_etag("\"v1\"").unwrap(),
            offset,
            1 << 20,
        )
        .unwrap()
    }

    fn file_of(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf, Arc<File>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("block");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
        let file = Arc::new(File::open(&path).unwrap());
        (dir, path, file)
    }

    fn held(hold_ms: u64) -> HeldFiles {
        HeldFiles::new(HeldFilesConfig {
            hold: Duration::from_millis(hold_ms),
            max_files: 8,
            map_files: true,
        })
    }

    impl HeldFiles {
        fn read_copied(&self, block: &BlockId, offset: u64, len: u32) -> Option<Bytes> {
            self.read(block, offset, len, false)
        }
    }

    #[test]
    fn ranges_merge_and_cover_only_what_was_added() {
        let mut r = Vec::new();
        add_range(&mut r, 10..20);
        add_range(&mut r, 30..40);
        add_range(&mut r, 0..5);
        assert_eq!(r, vec![0..5, 10..20, 30..40]);
        add_range(&mut r, 20..30);
        assert_eq!(r, vec![0..5, 10..40]);
        add_range(&mut r, 3..12);
        assert_eq!(r, vec![0..40]);
        add_range(&mut r, 50..50);
        assert_eq!(r, vec![0..40]);
        let r = vec![0..5, 10..20];
        assert!(covers(&r, &(10..20)) && covers(&r, &(0..1)) && covers(&r, &(12..15)));
        assert!(!covers(&r, &(4..11)) && !covers(&r, &(5..6)) && !covers(&r, &(19..21)));
        assert!(!covers(&r, &(20..30)) && !covers(&[], &(0..1)));
    }

    #[test]
    fn scattered_ranges_stop_being_kept_at_the_bound_but_still_merge() {
        let mut r = Vec::new();
        for i in 0..MAX_VOUCHED_RANGES as u64 + 10 {
            add_range(&mut r, i * 100..i * 100 + 10);
        }
        assert_eq!(r.len(), MAX_VOUCHED_RANGES);
        let past = MAX_VOUCHED_RANGES as u64 * 100;
        assert!(!covers(&r, &(past..past + 10)), "one more was not kept");
        // A range joining kept ones still merges (the list only shrinks).
        add_range(&mut r, 5..105);
        assert_eq!(r.len(), MAX_VOUCHED_RANGES - 1);
        assert!(covers(&r, &(0..110)));
    }

    #[test]
    fn only_vouched_bytes_are_read_and_they_are_the_files() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let (_dir, _path, file) = file_of(&bytes);
        let h = held(60_000);
        let b = block(0);
        assert_eq!(h.read_copied(&b, 0, 100), None, "nothing vouched yet");
        h.vouch(&b, &file, 1000..3000);
        assert_eq!(h.read_copied(&b, 1000, 2000).unwrap(), &bytes[1000..3000]);
        assert_eq!(h.read_copied(&b, 1500, 10).unwrap(), &bytes[1500..1510]);
        assert_eq!(h.read_copied(&b, 2990, 20), None, "past what was vouched");
        assert_eq!(
            h.read_copied(&block(1 << 20), 1000, 10),
            None,
            "another block"
        );
        // A second handoff of the same file adds its range.
        h.vouch(&b, &Arc::new(file.try_clone().unwrap()), 3000..5000);
        assert_eq!(h.read_copied(&b, 2990, 20).unwrap(), &bytes[2990..3010]);
        assert_eq!((h.stats().reads, h.stats().held), (3, 1));
    }

    #[test]
    fn a_changed_or_unlinked_file_is_not_read_again() {
        let bytes = vec![7u8; 8192];
        let (_dir, path, file) = file_of(&bytes);
        let h = held(60_000);
        let b = block(0);
        h.vouch(&b, &file, 0..8192);
        assert!(h.read_copied(&b, 0, 4096).is_some());
        // Written in place behind the worker's back: the write moves the modification
        // time (set here explicitly, as the file clock may not tick between the two).
        let writer = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        writer.write_all_at(&[9u8; 16], 100).unwrap();
        writer
            .set_modified(std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1))
            .unwrap();
        assert_eq!(
            h.read_copied(&b, 0, 4096),
            None,
            "the file changed: ask the worker"
        );
        assert_eq!(h.stats().held, 0, "and the file is no longer held");
        // Grown (another page filled): held again by the next handoff only.
        h.vouch(&b, &file, 0..8192);
        assert!(h.read_copied(&b, 0, 10).is_some());
        writer.write_all_at(&[1u8; 10], 8192).unwrap();
        assert_eq!(h.read_copied(&b, 0, 10), None, "the file grew");

        let (_dir2, path2, file2) = file_of(&bytes);
        h.vouch(&b, &file2, 0..8192);
        assert!(h.read_copied(&b, 0, 10).is_some());
        std::fs::remove_file(&path2).unwrap();
        assert_eq!(
            h.read_copied(&b, 0, 10),
            None,
            "evicted (unlinked): ask the worker"
        );
    }

    #[test]
    fn a_hold_ends_and_a_zero_hold_holds_nothing() {
        let (_dir, _path, file) = file_of(&[1u8; 4096]);
        let b = block(0);
        let h = held(30);
        h.vouch(&b, &file, 0..4096);
        assert!(h.read_copied(&b, 0, 4096).is_some());
        let until = Instant::now() + Duration::from_millis(30);
        while Instant::now() < until + Duration::from_millis(5) {
            std::thread::yield_now();
        }
        assert_eq!(
            h.read_copied(&b, 0, 4096),
            None,
            "past the hold: ask the worker"
        );
        // Its handoff of the same, unchanged file renews the hold with what was vouched.
        h.vouch(&b, &file, 0..10);
        assert!(
            h.read_copied(&b, 100, 3000).is_some(),
            "vouched before the renewal"
        );
        // A file not renewed goes at a sweep a hold after its hold ended.
        h.vouch(&block(1 << 20), &file, 0..10);
        let later = Instant::now() + Duration::from_millis(70);
        while Instant::now() < later {
            std::thread::yield_now();
        }
        h.sweep(Instant::now());
        assert_eq!(h.stats().held, 0);

        let off = held(0);
        off.vouch(&b, &file, 0..4096);
        assert_eq!(off.read_copied(&b, 0, 4096), None);
        assert_eq!(off.stats(), HeldFileStats::default());
    }

    #[test]
    fn mapped_reads_are_the_files_pages_without_a_copy() {
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 239) as u8).collect();
        let (_dir, _path, file) = file_of(&bytes);
        let h = held(60_000);
        let b = block(0);
        h.vouch(&b, &file, 0..150_000);
        let first = h.read(&b, 5000, 100_000, true).unwrap();
        assert_eq!(first, &bytes[5000..105_000]);
        // Served from the mapping: a second read is the same memory, not a new buffer.
        let again = h.read(&b, 5000, 100_000, true).unwrap();
        assert_eq!(again.as_ptr(), first.as_ptr(), "the mapping's pages");
        let end = h.read(&b, 150_000 - 65_536, 65_536, true).unwrap();
        assert_eq!(end, &bytes[150_000 - 65_536..150_000]);
        assert_eq!(
            h.read(&b, 150_000 - 65_535, 65_536, true),
            None,
            "past what was vouched"
        );
        let stats = h.stats();
        assert_eq!((stats.reads, stats.mapped_reads), (3, 3));
        // A small piece is copied: a page's copy costs less than mapping for it.
        let small = h.read(&b, 5000, 4096, true).unwrap();
        assert_eq!(small, &bytes[5000..9096]);
        assert_ne!(small.as_ptr(), first.as_ptr());
        // A read whose bytes are read in user space is copied.
        let copied = h.read(&b, 5000, 100_000, false).unwrap();
        assert_eq!(copied, &bytes[5000..105_000]);
        assert_ne!(copied.as_ptr(), first.as_ptr());
        let stats = h.stats();
        assert_eq!((stats.reads, stats.mapped_reads), (5, 3));
        // The pieces keep the mapping alive after the file stops being held.
        std::fs::remove_file(&_path).unwrap();
        assert_eq!(h.read(&b, 0, 10, true), None, "unlinked: no longer held");
        assert_eq!(h.stats().held, 0);
        assert_eq!(first, &bytes[5000..105_000]);
        // Mapping off: every held read is copied.
        let (_dir2, _path2, file2) = file_of(&bytes);
        let off = HeldFiles::new(HeldFilesConfig {
            map_files: false,
            ..HeldFilesConfig::default()
        });
        off.vouch(&b, &file2, 0..65_536);
        let a = off.read(&b, 0, 65_536, true).unwrap();
        let c = off.read(&b, 0, 65_536, true).unwrap();
        assert_eq!(a, &bytes[..65_536]);
        assert_ne!(a.as_ptr(), c.as_ptr());
        assert_eq!(off.stats().mapped_reads, 0);
    }

    #[test]
    fn a_mapped_piece_of_a_file_truncated_later_fails_the_write_and_nothing_faults() {
        use std::io::Write as _;
        let bytes = vec![0x5Au8; 256 << 10];
        let (_dir, path, file) = file_of(&bytes);
        let h = held(60_000);
        let b = block(0);
        h.vouch(&b, &file, 0..(256 << 10));
        let piece = h.read(&b, 0, 256 << 10, true).unwrap();
        // Truncated behind the worker's back (it never truncates a block file) while
        // the piece waits to be written: the kernel's copy from the vanished pages
        // fails the write (EFAULT) rather than signalling the process (SIGBUS).
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
        let (mut to, _from) = std::os::unix::net::UnixStream::pair().unwrap();
        let written = to.write(&piece);
        assert_eq!(
            written.map_err(|e| e.raw_os_error()),
            Err(Some(libc::EFAULT)),
            "a cut write, no wrong byte"
        );
        // And the held file is no longer read: it changed.
        assert_eq!(h.read(&b, 0, 10, true), None);
    }

    #[test]
    fn pages_not_in_the_page_cache_are_left_to_the_worker() {
        use std::os::fd::AsRawFd;
        let bytes = vec![3u8; 1 << 20];
        let (_dir, _path, file) = file_of(&bytes);
        file.sync_all().unwrap();
        // SAFETY: advice on a descriptor this test owns.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
        let mut probe = Vec::with_capacity(4096);
        if crate::read::read_cached(&file, &mut probe, 0, 4096)
            .unwrap()
            .is_some()
        {
            // A file system whose pages cannot be dropped (tmpfs): nothing to check.
            eprintln!("the page cache kept the file's pages; not checked here");
            return;
        }
        let h = held(60_000);
        let b = block(0);
        h.vouch(&b, &file, 0..(1 << 20));
        assert_eq!(h.read(&b, 0, 1 << 20, true), None, "mapped: not resident");
        assert_eq!(h.read(&b, 0, 1 << 20, false), None, "copied: not resident");
        assert_eq!(h.stats().reads, 0);
    }
}
