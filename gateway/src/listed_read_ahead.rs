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
//!   [`SEQUENTIAL_WINDOW`] keys listed just before it were among the last [`RECENT`]
//!   reads of its page here. A shuffled epoch over a page of 1,000 keys meets that about
//!   once in 500 reads; a reader in key order meets it from its third object.
//! - At most `depth` objects past the reader are fetched (`--read-ahead-objects`), none
//!   larger than `max_object_bytes` (`--read-ahead-object-max`), and at most `depth`
//!   fetches are in flight for the whole gateway: a fetch that finds no place is not
//!   queued (the reader's own read will ask for it).
//! - An object fetched ahead that is never read is an origin request spent on a guess:
//!   at most `depth` of them where a reader stops. Nothing is fetched for a reader that
//!   is not in key order, for keys this gateway has not listed, or on the origin route.
//! - Key order is kept from the pages themselves for [`ORDER_LIFETIME`] (whatever T is:
//!   an object since deleted costs one answer of "not found", one added later is not
//!   fetched ahead), and at most [`ORDER_MAX_BYTES`] of it.
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

/// Reads remembered per page for telling a sequential reader from a shuffled one.
pub const RECENT: usize = 16;

/// How far before a read its predecessors are looked for.
pub const SEQUENTIAL_WINDOW: usize = 4;

/// How many of those must have been read recently.
pub const SEQUENTIAL_HITS: usize = 2;

/// One listed page's keys in order, and what readers did in it.
#[derive(Debug)]
struct Page {
    /// Keys and sizes, in key order.
    keys: Box<[(Box<str>, u64)]>,
    listed: Instant,
    bytes: usize,
    /// Positions of the last reads here (a ring; `u32::MAX` is empty).
    recent: [u32; RECENT],
    next_recent: usize,
    /// Positions before this one were fetched ahead (or found too large, or were read).
    ahead_to: usize,
}

impl Page {
    fn new(page: &ListResult, listed: Instant) -> Page {
        let keys: Box<[(Box<str>, u64)]> = page
            .objects
            .iter()
            .map(|o| (Box::from(o.key.as_str()), o.size))
            .collect();
        let bytes = std::mem::size_of::<Page>()
            + keys
                .iter()
                .map(|(k, _)| k.len() + std::mem::size_of::<(Box<str>, u64)>())
                .sum::<usize>();
        Page {
            keys,
            listed,
            bytes,
            recent: [u32::MAX; RECENT],
            next_recent: 0,
            ahead_to: 0,
        }
    }

    /// Whether the keys just before `at` were read recently; remembers `at` as read.
    fn read_in_order(&mut self, at: usize) -> bool {
        let hits = self
            .recent
            .iter()
            .filter(|&&q| {
                let q = q as usize;
                q < at && q + SEQUENTIAL_WINDOW >= at
            })
            .count();
        self.recent[self.next_recent] = u32::try_from(at).unwrap_or(u32::MAX - 1);
        self.next_recent = (self.next_recent + 1) % RECENT;
        hits >= SEQUENTIAL_HITS
    }
}

/// Pages by backend, bucket and first key.
#[derive(Debug, Default)]
struct Pages {
    by_bucket: HashMap<Backend, HashMap<String, BTreeMap<String, Page>>>,
    bytes: usize,
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
                        .map(move |(first, page)| (page.listed, *backend, bucket, first))
                })
            })
            .min_by_key(|(listed, ..)| *listed)
            .map(|(_, backend, bucket, first)| (backend, bucket.clone(), first.clone()));
        if let Some((backend, bucket, first)) = oldest {
            self.remove(backend, &bucket, &first);
        }
    }

    fn remove(&mut self, backend: Backend, bucket: &str, first: &str) {
        let Some(buckets) = self.by_bucket.get_mut(&backend) else {
            return;
        };
        if let Some(pages) = buckets.get_mut(bucket) {
            if let Some(page) = pages.remove(first) {
                self.bytes = self.bytes.saturating_sub(page.bytes);
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
    no_place: AtomicU64,
}

impl ListedReadAhead {
    /// Up to `depth` objects of at most `max_object_bytes` each fetched ahead of a
    /// sequential reader (0: none, and nothing is kept).
    pub fn new(depth: usize, max_object_bytes: u64) -> ListedReadAhead {
        ListedReadAhead {
            depth,
            max_object_bytes,
            places: Arc::new(Semaphore::new(depth)),
            pages: Mutex::new(Pages::default()),
            started: AtomicU64::new(0),
            fetched: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            too_large: AtomicU64::new(0),
            no_place: AtomicU64::new(0),
        }
    }

    /// Whether it fetches anything at all.
    pub fn enabled(&self) -> bool {
        self.depth > 0
    }

    /// Learns the key order of `page`, a listing of `bucket` this gateway answered.
    pub fn listed(&self, backend: Backend, bucket: &str, page: &ListResult) {
        let Some(first) = page.objects.first() else {
            return;
        };
        if !self.enabled() {
            return;
        }
        let page_order = Page::new(page, Instant::now());
        let mut pages = self.lock();
        pages.remove(backend, bucket, &first.key);
        pages.bytes += page_order.bytes;
        pages
            .by_bucket
            .entry(backend)
            .or_default()
            .entry(bucket.to_owned())
            .or_default()
            .insert(first.key.clone(), page_order);
        while pages.bytes > ORDER_MAX_BYTES {
            pages.evict_oldest();
        }
    }

    /// A reader asked for `key` of `bucket`: the objects to fetch ahead of it now, each
    /// with its place (empty unless the read is sequential in a listed page).
    pub fn after_read(&self, backend: Backend, bucket: &str, key: &str) -> Vec<FetchAhead> {
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
            self.plan(tree, key, &mut stale, &mut ahead);
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
        let (stopped, mut left) = self.take(page, from, end, ahead);
        page.ahead_to = stopped;
        if stopped < page.keys.len() || left == 0 {
            return;
        }
        // The reader is near the page's end: go on into the page listed after it.
        let first = first.clone();
        for (_, next) in
            tree.range_mut::<str, _>((Bound::Excluded(first.as_str()), Bound::Unbounded))
        {
            if next.listed.elapsed() > ORDER_LIFETIME {
                return;
            }
            let from = if next.ahead_to <= left {
                next.ahead_to
            } else {
                0
            };
            let (stopped, rest) = self.take(next, from, left, ahead);
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
        ahead: &mut Vec<FetchAhead>,
    ) -> (usize, usize) {
        let last = end.min(page.keys.len());
        for at in from..last {
            let (key, size) = &page.keys[at];
            if *size > self.max_object_bytes {
                self.too_large.fetch_add(1, Ordering::Relaxed);
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
        let pages = self
            .lock()
            .by_bucket
            .values()
            .flat_map(HashMap::values)
            .map(BTreeMap::len)
            .sum::<usize>();
        ListedReadAheadStats {
            started: self.started.load(Ordering::Relaxed),
            fetched: self.fetched.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            too_large: self.too_large.load(Ordering::Relaxed),
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

    #[test]
    fn a_reader_in_key_order_is_fetched_ahead_from_its_third_object() {
        let ra = ListedReadAhead::new(4, 1 << 20);
        ra.listed(Backend::S3, "b", &page(0..100, 10));
        assert!(ra.after_read(Backend::S3, "b", "d/0000").is_empty());
        assert!(ra.after_read(Backend::S3, "b", "d/0001").is_empty());
        let ahead = ra.after_read(Backend::S3, "b", "d/0002");
        assert_eq!(keys(&ahead), ["d/0003", "d/0004", "d/0005", "d/0006"]);
        // Every place is taken: the next read starts nothing, and is counted.
        assert!(ra.after_read(Backend::S3, "b", "d/0003").is_empty());
        assert_eq!(ra.stats().no_place, 1);
        drop(ahead);
        // Places back: it goes on from where it stopped, not again from the reader.
        let ahead = ra.after_read(Backend::S3, "b", "d/0004");
        assert_eq!(keys(&ahead), ["d/0007", "d/0008"]);
        // Another backend or bucket has no order here.
        assert!(ra.after_read(Backend::Azure, "b", "d/0005").is_empty());
        assert!(ra.after_read(Backend::S3, "c", "d/0005").is_empty());
        assert_eq!(ra.stats().started, 6);
    }

    #[test]
    fn a_shuffled_reader_is_not_fetched_ahead() {
        let ra = ListedReadAhead::new(8, 1 << 20);
        ra.listed(Backend::S3, "b", &page(0..100, 10));
        // A stride of 37 through 100 keys: never within four after a recent read.
        for i in 0..100 {
            let key = format!("d/{:04}", i * 37 % 100);
            assert!(ra.after_read(Backend::S3, "b", &key).is_empty(), "{key}");
        }
        assert_eq!(ra.stats().started, 0);
    }

    #[test]
    fn the_read_ahead_goes_on_into_the_next_page_and_skips_large_objects() {
        let ra = ListedReadAhead::new(4, 100);
        ra.listed(Backend::S3, "b", &page(0..10, 10));
        ra.listed(Backend::S3, "b", &page(10..20, 10));
        ra.listed(Backend::S3, "b", &page(20..30, 1000));
        for k in ["d/0006", "d/0007"] {
            assert!(ra.after_read(Backend::S3, "b", k).is_empty());
        }
        let ahead = ra.after_read(Backend::S3, "b", "d/0008");
        assert_eq!(keys(&ahead), ["d/0009", "d/0010", "d/0011", "d/0012"]);
        drop(ahead);
        // The third page's objects are larger than the bound.
        for k in ["d/0017", "d/0018"] {
            drop(ra.after_read(Backend::S3, "b", k));
        }
        let ahead = ra.after_read(Backend::S3, "b", "d/0019");
        assert!(ahead.is_empty(), "{:?}", keys(&ahead));
        assert!(ra.stats().too_large >= 4);
        assert_eq!(ra.stats().pages, 3);
    }

    #[test]
    fn a_key_not_listed_or_a_depth_of_zero_fetches_nothing() {
        let ra = ListedReadAhead::new(4, 1 << 20);
        ra.listed(Backend::S3, "b", &page(0..10, 10));
        for k in ["d/0000x", "d/0001x", "d/0002x"] {
            assert!(ra.after_read(Backend::S3, "b", k).is_empty());
        }
        let off = ListedReadAhead::new(0, 1 << 20);
        off.listed(Backend::S3, "b", &page(0..10, 10));
        for k in ["d/0000", "d/0001", "d/0002"] {
            assert!(off.after_read(Backend::S3, "b", k).is_empty());
        }
        assert_eq!(off.stats().pages, 0);
    }

    #[test]
    fn a_relisted_page_replaces_its_order_and_memory_is_counted_once() {
        let ra = ListedReadAhead::new(4, 1 << 20);
        ra.listed(Backend::S3, "b", &page(0..10, 10));
        let once = ra.lock().bytes;
        ra.listed(Backend::S3, "b", &page(0..10, 10));
        assert_eq!(ra.lock().bytes, once);
        assert_eq!(ra.stats().pages, 1);
    }
}
