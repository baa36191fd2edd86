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
//! The hold bounds what the shortcut costs: how long an evicted file's disk space can
//! outlive its eviction, and how long a hot block's reads go unseen by its worker (its
//! eviction order still sees at least one read per hold). A block is keyed by its
//! [`BlockId`], which names the object's version: a new version is another block.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
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
}

impl Default for HeldFilesConfig {
    fn default() -> HeldFilesConfig {
        HeldFilesConfig {
            hold: Duration::from_secs(1),
            max_files: 4096,
        }
    }
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
}

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
    /// reads off the runtime's threads). `None`: ask the worker.
    pub(crate) fn read(&self, block: &BlockId, offset: u64, len: u32) -> Option<Bytes> {
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

    /// Pieces read from held files, and files held now.
    pub(crate) fn stats(&self) -> (u64, usize) {
        (self.reads.load(Ordering::Relaxed), self.files.len())
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
        })
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
        assert_eq!(h.read(&b, 0, 100), None, "nothing vouched yet");
        h.vouch(&b, &file, 1000..3000);
        assert_eq!(h.read(&b, 1000, 2000).unwrap(), &bytes[1000..3000]);
        assert_eq!(h.read(&b, 1500, 10).unwrap(), &bytes[1500..1510]);
        assert_eq!(h.read(&b, 2990, 20), None, "past what was vouched");
        assert_eq!(h.read(&block(1 << 20), 1000, 10), None, "another block");
        // A second handoff of the same file adds its range.
        h.vouch(&b, &Arc::new(file.try_clone().unwrap()), 3000..5000);
        assert_eq!(h.read(&b, 2990, 20).unwrap(), &bytes[2990..3010]);
        assert_eq!(h.stats(), (3, 1));
    }

    #[test]
    fn a_changed_or_unlinked_file_is_not_read_again() {
        let bytes = vec![7u8; 8192];
        let (_dir, path, file) = file_of(&bytes);
        let h = held(60_000);
        let b = block(0);
        h.vouch(&b, &file, 0..8192);
        assert!(h.read(&b, 0, 4096).is_some());
        // Written in place behind the worker's back: the write moves the modification
        // time (set here explicitly, as the file clock may not tick between the two).
        let writer = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        writer.write_all_at(&[9u8; 16], 100).unwrap();
        writer
            .set_modified(std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1))
            .unwrap();
        assert_eq!(
            h.read(&b, 0, 4096),
            None,
            "the file changed: ask the worker"
        );
        assert_eq!(h.stats().1, 0, "and the file is no longer held");
        // Grown (another page filled): held again by the next handoff only.
        h.vouch(&b, &file, 0..8192);
        assert!(h.read(&b, 0, 10).is_some());
        writer.write_all_at(&[1u8; 10], 8192).unwrap();
        assert_eq!(h.read(&b, 0, 10), None, "the file grew");

        let (_dir2, path2, file2) = file_of(&bytes);
        h.vouch(&b, &file2, 0..8192);
        assert!(h.read(&b, 0, 10).is_some());
        std::fs::remove_file(&path2).unwrap();
        assert_eq!(
            h.read(&b, 0, 10),
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
        assert!(h.read(&b, 0, 4096).is_some());
        let until = Instant::now() + Duration::from_millis(30);
        while Instant::now() < until + Duration::from_millis(5) {
            std::thread::yield_now();
        }
        assert_eq!(h.read(&b, 0, 4096), None, "past the hold: ask the worker");
        // Its handoff of the same, unchanged file renews the hold with what was vouched.
        h.vouch(&b, &file, 0..10);
        assert!(
            h.read(&b, 100, 3000).is_some(),
            "vouched before the renewal"
        );
        // A file not renewed goes at a sweep a hold after its hold ended.
        h.vouch(&block(1 << 20), &file, 0..10);
        let later = Instant::now() + Duration::from_millis(70);
        while Instant::now() < later {
            std::thread::yield_now();
        }
        h.sweep(Instant::now());
        assert_eq!(h.stats().1, 0);

        let off = held(0);
        off.vouch(&b, &file, 0..4096);
        assert_eq!(off.read(&b, 0, 4096), None);
        assert_eq!(off.stats(), (0, 0));
    }
}
