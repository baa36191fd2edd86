//! Objects fetched ahead of a reader that goes through a listed prefix in key order.
//!
//! A loader that does not shuffle lists its prefix, then reads the objects one after the
//! other, a few at a time; each cold one costs it an origin round trip, and with tens of
//! milliseconds per round trip (S3's first byte) its throughput is its concurrency over
//! that latency, no better than reading the origin itself. When this gateway has listed
//! the prefix (a page it answered, from the origin or from its listing table) and reads
//! arrive at successive keys of that page, the next objects of the listing are asked of
//! their metadata homes with their first bytes, as the reader's own read would ask them
//! (one origin request each), and the reader finds them cached or on their way.
//!
//! The rules, and what they cost:
//! - A read counts as sequential when at least [`SEQUENTIAL_HITS`] of the
//!   [`SEQUENTIAL_WINDOW`] keys listed just before it are among the last [`RECENT`]
//!   distinct keys read in its page here (a key read twice, its footer then its data,
//!   counts once). A shuffled epoch over a page of 1,000 keys meets that about once in
//!   500 reads; a reader in key order meets it from its third object. A page keeps one
//!   position of its fetches: several readers in key order through one page share it.
//! - At most `depth` objects past the reader are fetched (`--read-ahead-objects`, at
//!   most [`MAX_DEPTH`]), none larger than `max_object_bytes`
//!   (`--read-ahead-object-max`), and at most `depth` fetches are in flight for the
//!   whole gateway: a fetch that finds no place is not queued (the reader's own read
//!   will ask for it).
//! - An object fetched ahead that is never read is an origin request spent on a guess:
//!   at most `depth` of them where a reader stops. Nothing is fetched for a reader that
//!   is not in key order, for keys this gateway has not listed, on the origin route, or
//!   that the reader may not read itself (its grants are asked key by key); past a
//!   page's end it goes on only into a page of the same listing (the same prefix).
//! - Key order is kept from the pages themselves for [`ORDER_LIFETIME`] (whatever T is:
//!   an object since deleted costs a "not found" and a HEAD of its bucket, one added
//!   later is not fetched ahead), at most [`ORDER_MAX_BYTES`] of it in at most
//!   [`ORDER_MAX_PAGES`] pages (the oldest listed goes first). A page listed again with
//!   the same keys keeps what readers did in it.
//! - The objects fetched are read through the same path as a reader's (T, invalidations,
//!   writes through this gateway, the origin request limit), so nothing is served that a
//!   read would not have served; no bytes reach a client that did not ask for them.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use talon_protocols::server::ListResult;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Backend;

/// How long a page's key order is used after it was listed.
pub const ORDER_LIFETIME: Duration = Duration::from_secs(600);

/// The most key-order bytes kept (keys and sizes); the oldest page goes first.
pub const ORDER_MAX_BYTES: usize = 64 << 20;

/// The most pages kept (an eviction looks through all of them for the oldest).
pub const ORDER_MAX_PAGES: usize = 16_384;

/// The largest depth taken (`--read-ahead-objects` is clamped to it).
pub const MAX_DEPTH: usize = 1024;

/// Reads remembered per page for telling a sequential reader from a shuffled one.
pub const RECENT: usize = 16;

/// How far before a read its predecessors are looked for.
pub const SEQUENTIAL_WINDOW: usize = 4;

/// How many of those must have been read recently.
pub const SEQUENTIAL_HITS: usize = 2;

/// What a map entry costs beyond its page, about: its copy of the first key's `String`
/// header and the tree's share.
const ENTRY_OVERHEAD: usize = 64;

/// One listed page's keys in order, and what readers did in it.
#[derive(Debug)]
struct Page {
    /// The listing's prefix: past the page's end, only a page of the same prefix is
    /// taken as what follows.
    prefix: Box<str>,
    /// Keys and sizes, in key order.
    keys: Box<[(Box<str>, u64)]>,
    listed: Instant,
    /// When it was first kept, in order of the pages kept (the oldest goes first).
    kept: u64,
    bytes: usize,
    /// Positions of the last distinct reads here (a ring; `u32::MAX` is empty).
    recent: [u32; RECENT],
    next_recent: usize,
    /// Positions before this one were fetched ahead (or found too large, or were read).
    ahead_to: usize,
}

impl Page {
    fn new(prefix: &str, page: &ListResult, listed: Instant, kept: u64) -> Page {
        let keys: Box<[(Box<str>, u64)]> = page
            .objects
            .iter()
            .map(|o| (Box::from(o.key.as_str()), o.size))
            .collect();
        let first = keys.first().map_or(0, |(k, _)| k.len());
        let bytes = std::mem::size_of::<Page>()
            + ENTRY_OVERHEAD
            + first
            + prefix.len()
            + keys
                .iter()
                .map(|(k, _)| k.len() + std::mem::size_of::<(Box<str>, u64)>())
                .sum::<usize>();
        Page {
            prefix: Box::from(prefix),
            keys,
            listed,
            kept,
            bytes,
            recent: [u32::MAX; RECENT],
            next_recent: 0,
            ahead_to: 0,
        }
    }

    /// Whether the keys just before `at` were read recently; remembers `at` as read
    /// (once: the ring holds distinct positions).
    fn read_in_order(&mut self, at: usize) -> bool {
        let hits = self
            .recent
            .iter()
            .filter(|&&q| {
                let q = q as usize;
                q < at && q + SEQUENTIAL_WINDOW >= at
            })
            .count();
        let at = u32::try_from(at).unwrap_or(u32::MAX - 1);
        if !self.recent.contains(&at) {
            self.recent[self.next_recent] = at;
            self.next_recent = (self.next_recent + 1) % RECENT;
        }
        hits >= SEQUENTIAL_HITS
    }

    /// Whether `page`, listed under `prefix`, has the same keys and sizes.
    fn same_as(&self, prefix: &str, page: &ListResult) -> bool {
        *self.prefix == *prefix
            && self.keys.len() == page.objects.len()
            && self
                .keys
                .iter()
                .zip(&page.objects)
                .all(|((k, size), o)| **k == *o.key && *size == o.size)
    }
}

/// Pages by backend, bucket and first key.
#[derive(Debug, Default)]
struct Pages {
    by_bucket: HashMap<Backend, HashMap<String, BTreeMap<String, Page>>>,
    bytes: usize,
    count: usize,
    /// Pages kept since start.
    kept: u64,
}

impl Pages {
    fn evict_oldest(&mut self) {
        let oldest = self
            .by_bucket
            .iter()
            .flat_map(|(backend, buckets)| {
                buckets.iter().flat_map(move |(bucket, pages)| {
                    pages
                        .iter()
                        .map(move |(first, page)| (page.kept, *backend, bucket, first))
                })
            })
            .min_by_key(|(kept, ..)| *kept)
            .map(|(_, backend, bucket, first)| (backend, bucket.clone(), first.clone()));
        match oldest {
            Some((backend, bucket, first)) => self.remove(backend, &bucket, &first),
            // Nothing left to evict: the counts are off; start them again.
            None => (self.bytes, self.count) = (0, 0),
        }
    }

    fn remove(&mut self, backend: Backend, bucket: &str, first: &str) {
        let Some(buckets) = self.by_bucket.get_mut(&backend) else {
            return;
        };
        if let Some(pages) = buckets.get_mut(bucket) {
            if let Some(page) = pages.remove(first) {
                self.bytes = self.bytes.saturating_sub(page.bytes);
                self.count = self.count.saturating_sub(1);
            }
            if pages.is_empty() {
                buckets.remove(bucket);
            }
        }
    }
}

/// One object to fetch ahead, with its place among the fetches in flight.
#[derive(Debug)]
pub struct FetchAhead {
    /// The object's key (in the bucket the reader read).
    pub key: String,
    /// Held until the fetch ends.
    pub place: OwnedSemaphorePermit,
}

/// What the read-ahead did since start, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListedReadAheadStats {
    /// Fetches started.
    pub started: u64,
    /// Of those, ended with the metadata (and first bytes) cached.
    pub fetched: u64,
    /// Of those, ended in an error (not found, the origin's refusal, no cache).
    pub failed: u64,
    /// Objects skipped: larger than `--read-ahead-object-max`.
    pub too_large: u64,
    /// Objects skipped: the reader may not read them.
    pub not_allowed: u64,
    /// Objects not fetched: every place was taken.
    pub no_place: u64,
    /// Pages whose key order is held now.
    pub pages: u64,
}

/// The listings' key order and the fetches it starts ([module docs](self)).
#[derive(Debug)]
pub struct ListedReadAhead {
    depth: usize,
    max_object_bytes: u64,
    places: Arc<Semaphore>,
    pages: Mutex<Pages>,
    started: AtomicU64,
    fetched: AtomicU64,
    failed: AtomicU64,
    too_large: AtomicU64,
    not_allowed: AtomicU64,
    no_place: AtomicU64,
}

impl ListedReadAhead {
    /// Up to `depth` objects (at most [`MAX_DEPTH`]) of at most `max_object_bytes` each
    /// fetched ahead of a sequential reader (0: none, and nothing is kept).
    pub fn new(depth: usize, max_object_bytes: u64) -> ListedReadAhead {
        let depth = depth.min(MAX_DEPTH);
        ListedReadAhead {
            depth,
            max_object_bytes,
            places: Arc::new(Semaphore::new(depth)),
            pages: Mutex::new(Pages::default()),
            started: AtomicU64::new(0),
            fetched: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            too_large: AtomicU64::new(0),
            not_allowed: AtomicU64::new(0),
            no_place: AtomicU64::new(0),
        }
    }

    /// Whether it fetches anything at all.
    pub fn enabled(&self) -> bool {
        self.depth > 0
    }

    /// Learns the key order of `page`, a listing of `bucket` under `prefix` this gateway
    /// answered.
    pub fn listed(&self, backend: Backend, bucket: &str, prefix: &str, page: &ListResult) {
        let Some(first) = page.objects.first() else {
            return;
        };
        if !self.enabled() {
            return;
        }
        let now = Instant::now();
        let mut pages = self.lock();
        // The same keys listed again (another loader, or the listing table's answer):
        // what readers did in the page stays.
        if let Some(known) = pages
            .by_bucket
            .get_mut(&backend)
            .and_then(|b| b.get_mut(bucket))
            .and_then(|tree| tree.get_mut(&first.key))
            && known.same_as(prefix, page)
        {
            known.listed = now;
            return;
        }
        pages.kept += 1;
        let page_order = Page::new(prefix, page, now, pages.kept);
        pages.remove(backend, bucket, &first.key);
        pages.bytes += page_order.bytes;
        pages.count += 1;
        pages
            .by_bucket
            .entry(backend)
            .or_default()
            .entry(bucket.to_owned())
            .or_default()
            .insert(first.key.clone(), page_order);
        while pages.bytes > ORDER_MAX_BYTES || pages.count > ORDER_MAX_PAGES {
            pages.evict_oldest();
        }
    }

    /// A reader asked for `key` of `bucket`: the objects to fetch ahead of it now, each
    /// with its place (empty unless the read is sequential in a listed page), among
    /// those `may_read` allows.
    pub fn after_read(
        &self,
        backend: Backend,
        bucket: &str,
        key: &str,
        may_read: &dyn Fn(&str) -> bool,
    ) -> Vec<FetchAhead> {
        if !self.enabled() {
            return Vec::new();
        }
        let mut pages = self.lock();
        let mut stale = None;
        let mut ahead = Vec::new();
        if let Some(tree) = pages
            .by_bucket
            .get_mut(&backend)
            .and_then(|b| b.get_mut(bucket))
        {
            self.plan(tree, key, may_read, &mut stale, &mut ahead);
        }
        if let Some(first) = stale {
            pages.remove(backend, bucket, &first);
        }
        ahead
    }

    fn plan(
        &self,
        tree: &mut BTreeMap<String, Page>,
        key: &str,
        may_read: &dyn Fn(&str) -> bool,
        stale: &mut Option<String>,
        ahead: &mut Vec<FetchAhead>,
    ) {
        let Some((first, page)) = tree
            .range_mut::<str, _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
        else {
            return;
        };
        if page.listed.elapsed() > ORDER_LIFETIME {
            *stale = Some(first.clone());
            return;
        }
        let Ok(at) = page.keys.binary_search_by(|(k, _)| k.as_ref().cmp(key)) else {
            return;
        };
        if !page.read_in_order(at) {
            return;
        }
        let end = at + 1 + self.depth;
        // Go on from where the last fetches stopped, unless the reader has passed it
        // (or it is left from an earlier pass).
        let from = if page.ahead_to > at && page.ahead_to <= end {
            page.ahead_to
        } else {
            at + 1
        };
        let (stopped, mut left) = self.take(page, from, end, may_read, ahead);
        page.ahead_to = stopped;
        if stopped < page.keys.len() || left == 0 {
            return;
        }
        // The reader is near the page's end: go on into the page listed after it, of
        // the same listing.
        let (first, prefix) = (first.clone(), page.prefix.clone());
        for (_, next) in
            tree.range_mut::<str, _>((Bound::Excluded(first.as_str()), Bound::Unbounded))
        {
            if next.listed.elapsed() > ORDER_LIFETIME || next.prefix != prefix {
                return;
            }
            let from = if next.ahead_to <= left {
                next.ahead_to
            } else {
                0
            };
            let (stopped, rest) = self.take(next, from, left, may_read, ahead);
            next.ahead_to = stopped;
            if stopped < next.keys.len() || rest == 0 {
                return;
            }
            left = rest;
        }
    }

    /// Takes positions `from..end` of `page` (as far as it goes) into `ahead`; returns
    /// where it stopped and how many of `end - page.keys.len()` are left past the page.
    fn take(
        &self,
        page: &Page,
        from: usize,
        end: usize,
        may_read: &dyn Fn(&str) -> bool,
        ahead: &mut Vec<FetchAhead>,
    ) -> (usize, usize) {
        let last = end.min(page.keys.len());
        for at in from..last {
            let (key, size) = &page.keys[at];
            if *size > self.max_object_bytes {
                self.too_large.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if !may_read(key) {
                self.not_allowed.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            match self.places.clone().try_acquire_owned() {
                Ok(place) => {
                    self.started.fetch_add(1, Ordering::Relaxed);
                    ahead.push(FetchAhead {
                        key: key.to_string(),
                        place,
                    });
                }
                Err(_) => {
                    self.no_place.fetch_add(1, Ordering::Relaxed);
                    return (at, 0);
                }
            }
        }
        (last.max(from), end.saturating_sub(page.keys.len()))
    }

    /// Counts how a fetch ended.
    pub fn ended(&self, ok: bool) {
        if ok {
            self.fetched.fetch_add(1, Ordering::Relaxed);
        } else {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// What it did since start.
    pub fn stats(&self) -> ListedReadAheadStats {
        let pages = self.lock().count;
        ListedReadAheadStats {
            started: self.started.load(Ordering::Relaxed),
            fetched: self.fetched.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            too_large: self.too_large.load(Ordering::Relaxed),
            not_allowed: self.not_allowed.load(Ordering::Relaxed),
            no_place: self.no_place.load(Ordering::Relaxed),
            pages: pages as u64,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pages> {
        self.pages.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use talon_protocols::server::ListedObject;

    fn page(keys: std::ops::Range<usize>, size: u64) -> ListResult {
        ListResult {
            objects: keys
                .map(|i| ListedObject {
                    key: format!("d/{i:04}"),
                    last_modified: std::time::UNIX_EPOCH,
                    etag: "\"e\"".into(),
                    size,
                    content_type: None,
                    content_md5: None,
                    user_metadata: None,
                })
                .collect(),
            ..ListResult::default()
        }
    }

    fn keys(ahead: &[FetchAhead]) -> Vec<&str> {
        ahead.iter().map(|a| a.key.as_str()).collect()
    }

    fn anyone(_: &str) -> bool {
        true
    }

    fn read(ra: &ListedReadAhead, key: &str) -> Vec<FetchAhead> {
        ra.after_read(Backend::S3, "b", key, &anyone)
    }

    #[test]
    fn a_reader_in_key_order_is_fetched_ahead_from_its_third_object() {
        let ra = ListedReadAhead::new(4, 1 << 20);
        ra.listed(Backend::S3, "b", "d/", &page(0..100, 10));
        assert!(read(&ra, "d/0000").is_empty());
        assert!(read(&ra, "d/0001").is_empty());
        let ahead = read(&ra, "d/0002");
        assert_eq!(keys(&ahead), ["d/0003", "d/0004", "d/0005", "d/0006"]);
        // Every place is taken: the next read starts nothing, and is counted.
        assert!(read(&ra, "d/0003").is_empty());
        assert_eq!(ra.stats().no_place, 1);
        drop(ahead);
        // Places back: it goes on from where it stopped, not again from the reader.
        let ahead = read(&ra, "d/0004");
        assert_eq!(keys(&ahead), ["d/0007", "d/0008"]);
        // Another backend or bucket has no order here.
        assert!(
            ra.after_read(Backend::Azure, "b", "d/0005", &anyone)
                .is_empty()
        );
        assert!(
            ra.after_read(Backend::S3, "c", "d/0005", &anyone)
                .is_empty()
        );
        assert_eq!(ra.stats().started, 6);
    }

    #[test]
    fn a_shuffled_reader_is_not_fetched_ahead_even_reading_each_key_twice() {
        let ra = ListedReadAhead::new(8, 1 << 20);
        ra.listed(Backend::S3, "b", "d/", &page(0..100, 10));
        // A stride of 37 through 100 keys: never within four after a recent read. Each
        // key read twice (a footer, then the data) still counts once.
        for i in 0..100 {
            let key = format!("d/{:04}", i * 37 % 100);
            assert!(read(&ra, &key).is_empty(), "{key}");
            assert!(read(&ra, &key).is_empty(), "{key} again");
        }
        assert_eq!(ra.stats().started, 0);
    }

    #[test]
    fn the_read_ahead_goes_on_into_the_next_page_of_its_listing_and_skips_large_objects() {
        let ra = ListedReadAhead::new(4, 100);
        ra.listed(Backend::S3, "b", "d/", &page(0..10, 10));
        ra.listed(Backend::S3, "b", "d/", &page(10..20, 10));
        ra.listed(Backend::S3, "b", "d/", &page(20..30, 1000));
        for k in ["d/0006", "d/0007"] {
            assert!(read(&ra, k).is_empty());
        }
        let ahead = read(&ra, "d/0008");
        assert_eq!(keys(&ahead), ["d/0009", "d/0010", "d/0011", "d/0012"]);
        drop(ahead);
        // The third page's objects are larger than the bound.
        for k in ["d/0017", "d/0018"] {
            drop(read(&ra, k));
        }
        let ahead = read(&ra, "d/0019");
        assert!(ahead.is_empty(), "{:?}", keys(&ahead));
        assert!(ra.stats().too_large >= 4);
        assert_eq!(ra.stats().pages, 3);
    }

    #[test]
    fn a_page_of_another_listing_is_not_what_follows() {
        let ra = ListedReadAhead::new(4, 1 << 20);
        ra.listed(Backend::S3, "b", "d/000", &page(0..10, 10));
        ra.listed(Backend::S3, "b", "d/001", &page(10..20, 10));
        for k in ["d/0006", "d/0007"] {
            assert!(read(&ra, k).is_empty());
        }
        assert_eq!(keys(&read(&ra, "d/0008")), ["d/0009"]);
    }

    #[test]
    fn only_objects_the_reader_may_read_are_fetched_ahead() {
        let ra = ListedReadAhead::new(4, 1 << 20);
        ra.listed(Backend::S3, "b", "d/", &page(0..10, 10));
        let odd_only = |k: &str| k.ends_with(['1', '3', '5', '7', '9']);
        for k in ["d/0000", "d/0001"] {
            assert!(ra.after_read(Backend::S3, "b", k, &odd_only).is_empty());
        }
        let ahead = ra.after_read(Backend::S3, "b", "d/0002", &odd_only);
        assert_eq!(keys(&ahead), ["d/0003", "d/0005"]);
        assert_eq!(ra.stats().not_allowed, 2);
    }

    #[test]
    fn a_key_not_listed_or_a_depth_of_zero_fetches_nothing() {
        let ra = ListedReadAhead::new(4, 1 << 20);
        ra.listed(Backend::S3, "b", "d/", &page(0..10, 10));
        for k in ["d/0000x", "d/0001x", "d/0002x"] {
            assert!(read(&ra, k).is_empty());
        }
        let off = ListedReadAhead::new(0, 1 << 20);
        off.listed(Backend::S3, "b", "d/", &page(0..10, 10));
        for k in ["d/0000", "d/0001", "d/0002"] {
            assert!(read(&off, k).is_empty());
        }
        assert_eq!(off.stats().pages, 0);
        // A depth past the bound is clamped, not a panic.
        assert_eq!(ListedReadAhead::new(usize::MAX, 1).depth, MAX_DEPTH);
    }

    #[test]
    fn a_page_listed_again_keeps_its_readers_and_is_counted_once() {
        let ra = ListedReadAhead::new(4, 1 << 20);
        ra.listed(Backend::S3, "b", "d/", &page(0..10, 10));
        let once = ra.lock().bytes;
        for k in ["d/0000", "d/0001"] {
            assert!(read(&ra, k).is_empty());
        }
        ra.listed(Backend::S3, "b", "d/", &page(0..10, 10));
        assert_eq!(ra.lock().bytes, once);
        assert_eq!(ra.stats().pages, 1);
        assert_eq!(read(&ra, "d/0002").len(), 4, "its reads were kept");
        // Other keys under the same first key replace it, and its readers.
        ra.listed(Backend::S3, "b", "d/", &page(0..12, 10));
        assert!(read(&ra, "d/0003").is_empty());
        assert_eq!(ra.stats().pages, 1);
    }

    #[test]
    fn the_oldest_pages_go_past_the_page_bound() {
        let ra = ListedReadAhead::new(4, 1 << 20);
        for i in 0..ORDER_MAX_PAGES + 2 {
            ra.listed(Backend::S3, "b", "d/", &page(i * 2..i * 2 + 2, 10));
        }
        assert_eq!(ra.stats().pages, ORDER_MAX_PAGES as u64);
        let pages = ra.lock();
        let tree = &pages.by_bucket[&Backend::S3]["b"];
        assert!(!tree.contains_key("d/0000") && !tree.contains_key("d/0002"));
        assert!(tree.contains_key("d/0004"));
    }
}
