//! The one cache of object metadata, for every part that keeps it: the gateway (what it
//! may answer without asking a worker) and the worker (what it may answer a Stat with
//! without asking the origin).
//!
//! It owns the bounds and the ages: each entry carries when the origin said it, and the
//! table holds at most [`Limits::max_entries`] entries and about [`Limits::max_bytes`]
//! bytes ([`Weigh`]), evicting by S3-FIFO (quick_cache) one entry at a time, never the whole table;
//! "not found" answers live in a table of their own, bounded by
//! [`Limits::max_missing`], so a scan of missing keys cannot push out what exists. A
//! lookup takes no process-wide lock (the table is sharded; a hit sets one bit). It
//! counts what `/metrics` shows ([`CacheStats`]).
//!
//! It does not decide how old an answer may be (the caller's max age does, at each
//! lookup), nor fetch: a miss is the caller's to fill, single flight included.

mod freshness;
mod invalidations;
pub use freshness::{FreshnessRules, IMMUTABLE};
pub use invalidations::Invalidations;

use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use quick_cache::sync::Cache;
use quick_cache::{DefaultHashBuilder, Lifecycle, Weighter};

/// Bytes an entry's key and value hold together, for the byte bound: their inline
/// size plus what they own on the heap (approximately).
pub type Weigh<K, V> = fn(&K, &V) -> u64;

/// The bounds of a [`MetadataCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most entries of found objects.
    pub max_entries: usize,
    /// About the most bytes of found objects' keys and values ([`Weigh`]).
    pub max_bytes: u64,
    /// Most "not found" entries, in their own table.
    pub max_missing: usize,
}

impl Limits {
    /// Room for `entries` objects of up to `bytes_per_entry` bytes each, and a tenth as
    /// many missing ones.
    pub fn for_entries(entries: usize, bytes_per_entry: u64) -> Limits {
        Limits {
            max_entries: entries.max(1),
            max_bytes: (entries.max(1) as u64).saturating_mul(bytes_per_entry.max(1)),
            max_missing: (entries / 10).max(1),
        }
    }
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<V> {
    /// Said by the origin no longer than the max age ago.
    Fresh {
        /// The metadata.
        value: V,
        /// How long ago the origin said it.
        age: Duration,
    },
    /// Said longer ago: to revalidate (or to serve stale, where the caller may).
    Expired {
        /// The metadata last said.
        value: V,
        /// When the origin said it.
        observed: Instant,
    },
    /// The origin said "not found", no longer than the max age ago.
    Missing {
        /// How long ago.
        age: Duration,
    },
    /// Nothing usable is known.
    Absent,
}

impl<V> Lookup<V> {
    /// The same answer with its value converted (from the form the table keeps to the
    /// one callers use).
    pub fn map<U>(self, f: impl FnOnce(V) -> U) -> Lookup<U> {
        match self {
            Lookup::Fresh { value, age } => Lookup::Fresh {
                value: f(value),
                age,
            },
            Lookup::Expired { value, observed } => Lookup::Expired {
                value: f(value),
                observed,
            },
            Lookup::Missing { age } => Lookup::Missing { age },
            Lookup::Absent => Lookup::Absent,
        }
    }
}

/// What a cache holds and has done, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Entries of found objects held.
    pub entries: u64,
    /// Their bytes, as weighed.
    pub bytes: u64,
    /// "Not found" entries held.
    pub missing_entries: u64,
    /// Lookups answered fresh (found or not found).
    pub hits: u64,
    /// Lookups that found only an expired entry.
    pub expired: u64,
    /// Lookups that found nothing.
    pub misses: u64,
    /// Entries inserted (or replaced).
    pub inserts: u64,
    /// Entries pushed out by the bounds (both tables).
    pub evictions: u64,
}

impl CacheStats {
    /// Each figure with the name `/metrics` gives it (the `what` label).
    pub fn labelled(&self) -> [(&'static str, u64); 8] {
        [
            ("entries", self.entries),
            ("bytes", self.bytes),
            ("missing", self.missing_entries),
            ("hits", self.hits),
            ("expired", self.expired),
            ("misses", self.misses),
            ("inserts", self.inserts),
            ("evictions", self.evictions),
        ]
    }
}

#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    expired: AtomicU64,
    misses: AtomicU64,
    inserts: AtomicU64,
    evictions: AtomicU64,
}

/// A found object's entry: its metadata and when the origin said it.
#[derive(Debug, Clone)]
struct Found<V> {
    observed: Instant,
    value: V,
    weight: u64,
}

/// Weighs an entry at least `floor`, so that the byte bound also bounds the count.
#[derive(Debug, Clone, Copy)]
struct ByWeight;

impl<K, V> Weighter<K, Found<V>> for ByWeight {
    fn weight(&self, _key: &K, found: &Found<V>) -> u64 {
        found.weight
    }
}

/// Counts evictions.
#[derive(Debug, Clone)]
struct CountEvictions(Arc<Counters>);

impl<K, V> Lifecycle<K, V> for CountEvictions {
    type RequestState = ();

    fn begin_request(&self) -> Self::RequestState {}

    fn on_evict(&self, _state: &mut Self::RequestState, _key: K, _val: V) {
        self.0.evictions.fetch_add(1, Ordering::Relaxed);
    }
}

/// Object metadata by key, with ages, bounded (see the [crate docs](crate)).
pub struct MetadataCache<K, V> {
    found: Cache<K, Found<V>, ByWeight, DefaultHashBuilder, CountEvictions>,
    missing: Cache<K, Instant, quick_cache::UnitWeighter, DefaultHashBuilder, CountEvictions>,
    /// Every found entry weighs at least this: `max_bytes / max_entries`.
    floor: u64,
    weigh: Weigh<K, V>,
    counters: Arc<Counters>,
}

impl<K, V> std::fmt::Debug for MetadataCache<K, V>
where
    K: Eq + Hash + Clone,
    V: Clone,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataCache")
            .field("entries", &self.found.len())
            .field("bytes", &self.found.weight())
            .field("missing", &self.missing.len())
            .finish_non_exhaustive()
    }
}

impl<K, V> MetadataCache<K, V>
where
    K: Eq + Hash + Clone,
    V: Clone,
{
    /// An empty cache within `limits`, weighing entries with `weigh`.
    pub fn new(limits: Limits, weigh: Weigh<K, V>) -> MetadataCache<K, V> {
        let counters = Arc::new(Counters::default());
        let max_entries = limits.max_entries.max(1);
        let max_bytes = limits.max_bytes.max(max_entries as u64);
        MetadataCache {
            found: Cache::with(
                max_entries,
                max_bytes,
                ByWeight,
                DefaultHashBuilder::default(),
                CountEvictions(counters.clone()),
            ),
            missing: Cache::with(
                limits.max_missing.max(1),
                limits.max_missing.max(1) as u64,
                quick_cache::UnitWeighter,
                DefaultHashBuilder::default(),
                CountEvictions(counters.clone()),
            ),
            floor: max_bytes / max_entries as u64,
            weigh,
            counters,
        }
    }

    /// What is known of `key` for a reader accepting answers up to `max_age` old, at
    /// `now`; counted as a hit, an expired entry or a miss.
    pub fn lookup(&self, key: &K, max_age: Duration, now: Instant) -> Lookup<V> {
        let lookup = self.look(key, max_age, now, true);
        let counter = match &lookup {
            Lookup::Fresh { .. } | Lookup::Missing { .. } => &self.counters.hits,
            Lookup::Expired { .. } => &self.counters.expired,
            Lookup::Absent => &self.counters.misses,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        lookup
    }

    /// [`lookup`](Self::lookup), neither counted nor marking the entry as used: a
    /// second look by the same request.
    pub fn lookup_again(&self, key: &K, max_age: Duration, now: Instant) -> Lookup<V> {
        self.look(key, max_age, now, false)
    }

    fn look(&self, key: &K, max_age: Duration, now: Instant, used: bool) -> Lookup<V> {
        let (found, missing) = if used {
            (self.found.get(key), self.missing.get(key))
        } else {
            (self.found.peek(key), self.missing.peek(key))
        };
        // The later of the two answers is the one that stands.
        match (found, missing) {
            (Some(f), Some(m)) if m > f.observed => missing_lookup(m, max_age, now),
            (Some(f), _) => {
                let age = now.saturating_duration_since(f.observed);
                if age < max_age {
                    Lookup::Fresh {
                        value: f.value,
                        age,
                    }
                } else {
                    Lookup::Expired {
                        value: f.value,
                        observed: f.observed,
                    }
                }
            }
            (None, Some(m)) => missing_lookup(m, max_age, now),
            (None, None) => Lookup::Absent,
        }
    }

    /// The found entry of `key` and when the origin said it, uncounted.
    pub fn peek(&self, key: &K) -> Option<(Instant, V)> {
        self.found.peek(key).map(|f| (f.observed, f.value))
    }

    /// When the origin last answered for `key` (found or not), uncounted.
    pub fn observed(&self, key: &K) -> Option<Instant> {
        let found = self.found.peek(key).map(|f| f.observed);
        let missing = self.missing.peek(key);
        found.max(missing)
    }

    /// Keeps `value`, said by the origin at `observed`, for `key` (replacing what was
    /// known, found or not).
    pub fn insert(&self, key: K, observed: Instant, value: V) {
        self.missing.remove(&key);
        let weight = (self.weigh)(&key, &value).max(self.floor).max(1);
        self.counters.inserts.fetch_add(1, Ordering::Relaxed);
        self.found.insert(
            key,
            Found {
                observed,
                value,
                weight,
            },
        );
    }

    /// Keeps that the origin said at `observed` that `key` does not exist.
    pub fn insert_missing(&self, key: K, observed: Instant) {
        self.found.remove(&key);
        self.counters.inserts.fetch_add(1, Ordering::Relaxed);
        self.missing.insert(key, observed);
    }

    /// Forgets `key`, found or not.
    pub fn remove(&self, key: &K) {
        self.found.remove(key);
        self.missing.remove(key);
    }

    /// What the cache holds and has done.
    pub fn stats(&self) -> CacheStats {
        let c = &self.counters;
        CacheStats {
            entries: self.found.len() as u64,
            bytes: self.found.weight(),
            missing_entries: self.missing.len() as u64,
            hits: c.hits.load(Ordering::Relaxed),
            expired: c.expired.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            inserts: c.inserts.load(Ordering::Relaxed),
            evictions: c.evictions.load(Ordering::Relaxed),
        }
    }
}

fn missing_lookup<V>(observed: Instant, max_age: Duration, now: Instant) -> Lookup<V> {
    let age = now.saturating_duration_since(observed);
    if age < max_age {
        Lookup::Missing { age }
    } else {
        Lookup::Absent
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cache(limits: Limits) -> MetadataCache<String, String> {
        MetadataCache::new(limits, |k, v| (48 + k.len() + v.len()) as u64)
    }

    #[test]
    fn ages_decide_fresh_expired_and_missing() {
        let c = cache(Limits::for_entries(100, 256));
        let t0 = Instant::now();
        let t = Duration::from_secs(5);
        assert_eq!(c.lookup(&"k".into(), t, t0), Lookup::Absent);
        c.insert("k".into(), t0, "v1".into());
        assert_eq!(
            c.lookup(&"k".into(), t, t0 + Duration::from_secs(1)),
            Lookup::Fresh {
                value: "v1".into(),
                age: Duration::from_secs(1)
            }
        );
        assert_eq!(
            c.lookup(&"k".into(), t, t0 + t),
            Lookup::Expired {
                value: "v1".into(),
                observed: t0
            }
        );
        // A later "not found" stands over the found entry, for its own age.
        c.insert_missing("k".into(), t0 + t);
        assert_eq!(
            c.lookup(&"k".into(), Duration::from_secs(1), t0 + t),
            Lookup::Missing {
                age: Duration::ZERO
            }
        );
        assert_eq!(
            c.lookup(&"k".into(), Duration::from_secs(1), t0 + t * 2),
            Lookup::Absent
        );
        let s = c.stats();
        assert_eq!((s.hits, s.expired, s.misses), (2, 1, 2));
        // A second look by the same request is not counted again.
        assert_eq!(c.lookup_again(&"k".into(), t, t0 + t * 2), Lookup::Absent);
        assert_eq!(c.stats(), s);
    }

    /// The bug this crate replaces: the gateway's table was cleared whole when it passed
    /// 100,000 entries, so every object's next read asked again. Here a table over its
    /// bound evicts some entries, keeps the rest, and stays within both bounds.
    #[test]
    fn a_full_table_evicts_entries_not_itself() {
        let limits = Limits {
            max_entries: 1000,
            max_bytes: 1000 * 200,
            max_missing: 100,
        };
        let c = cache(limits);
        let now = Instant::now();
        for i in 0..5000 {
            c.insert(format!("s3/bucket/key-{i:06}"), now, "etag".repeat(4));
        }
        let s = c.stats();
        assert!(s.entries <= 1000, "{s:?}");
        assert!(s.entries >= 500, "most of the bound is kept: {s:?}");
        assert!(s.bytes <= limits.max_bytes, "{s:?}");
        assert!(s.evictions >= 4000 - 500, "{s:?}");
        // The recent ones are there.
        let kept = (4900..5000)
            .filter(|i| c.peek(&format!("s3/bucket/key-{i:06}")).is_some())
            .count();
        assert!(kept > 0, "the newest entries were kept");
        // Large values: the byte bound holds before the entry bound.
        let big = cache(limits);
        for i in 0..1000 {
            big.insert(format!("k{i}"), now, "x".repeat(2000));
        }
        let s = big.stats();
        assert!(s.bytes <= limits.max_bytes, "{s:?}");
        assert!(s.entries < 200, "{s:?}");
    }

    #[test]
    fn missing_entries_have_their_own_bound_and_cannot_push_out_found_ones() {
        let c = cache(Limits {
            max_entries: 100,
            max_bytes: 100 * 200,
            max_missing: 10,
        });
        let now = Instant::now();
        for i in 0..50 {
            c.insert(format!("found-{i}"), now, "v".into());
        }
        for i in 0..10_000 {
            c.insert_missing(format!("missing-{i}"), now);
        }
        let s = c.stats();
        assert!(s.missing_entries <= 10, "{s:?}");
        assert_eq!(s.entries, 50, "{s:?}");
    }

    #[test]
    fn concurrent_readers_and_writers_see_only_what_was_written() {
        let c = Arc::new(cache(Limits::for_entries(10_000, 256)));
        let now = Instant::now();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u32 {
                        let k = format!("k{}", i % 5000);
                        if (i + t) % 3 == 0 {
                            c.insert(k.clone(), now, format!("v-{k}"));
                        } else if let Some((_, v)) = c.peek(&k) {
                            assert_eq!(v, format!("v-{k}"));
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(c.stats().entries <= 10_000);
    }
}
