//! Listings cached within the declared staleness bound.
//!
//! Every data loader lists its prefix each time it starts, and a fleet of them lists the
//! same pages over and over. A page the origin gave is kept for T (the gateway's
//! `--max-staleness-ms`) and answered from memory for the same request (bucket, prefix,
//! delimiter, where it starts, page size, with or without metadata): the same rule as an
//! object's metadata, in the same bounded table ([`talon_metadata_cache`]).
//!
//! A write through this gateway (put, copy, multipart completion, delete, a bucket
//! created or deleted) makes every page of its bucket kept from before it unusable:
//! a listing after the write shows it. Writes made elsewhere are seen within T, or as
//! soon as an invalidation of an overlapping prefix (`talon invalidate`) is heard.
//! Only the cache route keeps pages; the origin route lists at the origin every time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use talon_metadata_cache::{
    CacheStats, FreshnessRules, Invalidations, Limits, Lookup, MetadataCache,
};
use talon_protocols::server::{ListFrom, ListResult, ListSpec};

use crate::config::Backend;

/// What the listing table holds at most: pages of up to 1,000 entries are a few hundred
/// KiB each.
pub const LISTING_LIMITS: Limits = Limits {
    max_entries: 4_096,
    max_bytes: 128 << 20,
    max_missing: 1,
};

/// Buckets whose last write is remembered before old marks are swept.
const MIN_BUCKET_MARKS_SWEEP: usize = 1_024;

/// One listing request, as the origin would be asked it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListingKey {
    backend: Backend,
    bucket: String,
    prefix: String,
    delimiter: Option<String>,
    from: ListStart,
    max_keys: usize,
    include_metadata: bool,
    /// The listed prefix as a key path (`s3/BUCKET/PREFIX`, `az/ACCOUNT/CONTAINER/PREFIX`),
    /// for invalidations.
    key_path: String,
}

/// [`ListFrom`], owned.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ListStart {
    Start,
    AfterKey(String),
    Marker(String),
    Token(String),
}

impl ListingKey {
    /// The key of `spec` on `bucket` of `backend`, whose prefix is `key_path` as a key
    /// path.
    pub fn new(
        backend: Backend,
        bucket: &str,
        spec: &ListSpec<'_>,
        key_path: String,
    ) -> ListingKey {
        ListingKey {
            backend,
            bucket: bucket.to_owned(),
            prefix: spec.prefix.to_owned(),
            delimiter: spec.delimiter.map(str::to_owned),
            from: match spec.from {
                ListFrom::Start => ListStart::Start,
                ListFrom::AfterKey(k) => ListStart::AfterKey(k.to_owned()),
                ListFrom::Marker(m) => ListStart::Marker(m.to_owned()),
                ListFrom::Token(t) => ListStart::Token(t.to_owned()),
            },
            max_keys: spec.max_keys,
            include_metadata: spec.include_metadata,
            key_path,
        }
    }

    fn held_bytes(&self) -> u64 {
        let from = match &self.from {
            ListStart::Start => 0,
            ListStart::AfterKey(s) | ListStart::Marker(s) | ListStart::Token(s) => s.len(),
        };
        (std::mem::size_of::<ListingKey>()
            + self.bucket.len()
            + self.prefix.len()
            + self.delimiter.as_ref().map_or(0, String::len)
            + self.key_path.len()
            + from) as u64
    }
}

/// Bytes a page holds, roughly: its strings and its entries' inline sizes.
fn page_bytes(page: &ListResult) -> u64 {
    let objects: usize = page
        .objects
        .iter()
        .map(|o| {
            std::mem::size_of_val(o)
                + o.key.len()
                + o.etag.len()
                + o.content_type.as_ref().map_or(0, String::len)
                + o.content_md5.as_ref().map_or(0, String::len)
                + o.user_metadata
                    .as_ref()
                    .map_or(0, |m| m.iter().map(|(k, v)| k.len() + v.len() + 48).sum())
        })
        .sum();
    let prefixes: usize = page.common_prefixes.iter().map(|p| p.len() + 24).sum();
    (std::mem::size_of::<ListResult>() + objects + prefixes) as u64
}

/// The pages kept, and when each bucket was last written through this gateway.
#[derive(Debug)]
pub struct Listings {
    max_age: Duration,
    pages: MetadataCache<ListingKey, Arc<ListResult>>,
    written: Mutex<BucketWrites>,
    invalidations: Arc<Invalidations>,
    rules: Arc<FreshnessRules>,
}

#[derive(Debug, Default)]
struct BucketWrites {
    at: HashMap<(Backend, String), Instant>,
    sweep_at: usize,
}

impl Listings {
    /// Pages kept for `max_age` (T), within [`LISTING_LIMITS`], and not past an
    /// overlapping one of `invalidations`.
    pub fn new(
        max_age: Duration,
        invalidations: Arc<Invalidations>,
        rules: Arc<FreshnessRules>,
    ) -> Listings {
        Listings {
            max_age,
            pages: MetadataCache::new(LISTING_LIMITS, |key, page| {
                key.held_bytes() + page_bytes(page)
            }),
            written: Mutex::new(BucketWrites {
                at: HashMap::new(),
                sweep_at: MIN_BUCKET_MARKS_SWEEP,
            }),
            invalidations,
            rules,
        }
    }

    /// The page the origin gave for `key` within T and after the bucket's last write
    /// through this gateway (and any overlapping invalidation), if one is kept (one from
    /// before is dropped, and counted as a miss).
    pub fn get(&self, key: &ListingKey) -> Option<ListResult> {
        let written = self
            .lock_written()
            .at
            .get(&(key.backend, key.bucket.clone()))
            .copied();
        if let Some((said, _)) = self.pages.peek(key)
            && (written.is_some_and(|written| said <= written)
                || self.invalidations.overlaps(&key.key_path, said))
        {
            self.pages.remove(key);
        }
        // T, or the cluster's bound for the listed prefix (`talon freshness`).
        let max_age = self.rules.bound(|| key.key_path.clone(), self.max_age);
        match self.pages.lookup(key, max_age, Instant::now()) {
            Lookup::Fresh { value, .. } => Some(value.as_ref().clone()),
            _ => None,
        }
    }

    /// Keeps `page`, asked of the origin at `sent`, for `key`.
    pub fn keep(&self, key: ListingKey, sent: Instant, page: &ListResult) {
        self.pages.insert(key, sent, Arc::new(page.clone()));
    }

    /// Records a write to `bucket` through this gateway, acknowledged by the origin:
    /// no page of the bucket kept from before it is answered again.
    pub fn bucket_changed(&self, backend: Backend, bucket: &str) {
        let mut written = self.lock_written();
        if written.at.len() >= written.sweep_at {
            // As long as any page may be answered: T, or the longest bound in force.
            let window = self
                .rules
                .longest()
                .map_or(self.max_age, |l| l.max(self.max_age));
            written.at.retain(|_, at| at.elapsed() < window);
            written.sweep_at = (written.at.len() * 2).max(MIN_BUCKET_MARKS_SWEEP);
        }
        written
            .at
            .insert((backend, bucket.to_owned()), Instant::now());
    }

    /// What the table holds and did, for `/metrics`.
    pub fn stats(&self) -> CacheStats {
        self.pages.stats()
    }

    fn lock_written(&self) -> std::sync::MutexGuard<'_, BucketWrites> {
        self.written.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use talon_protocols::server::ListedObject;

    fn spec(prefix: &str) -> ListSpec<'_> {
        ListSpec {
            prefix,
            delimiter: Some("/"),
            from: ListFrom::Start,
            max_keys: 1000,
            include_metadata: false,
        }
    }

    fn key(backend: Backend, bucket: &str, prefix: &str) -> ListingKey {
        let key_path = format!("s3/{bucket}/{prefix}");
        ListingKey::new(backend, bucket, &spec(prefix), key_path)
    }

    #[test]
    fn an_overlapping_invalidation_drops_a_page() {
        let invalidations = Arc::new(Invalidations::default());
        let listings = Listings::new(
            Duration::from_secs(60),
            invalidations.clone(),
            Arc::default(),
        );
        let (top, other) = (key(Backend::S3, "b", ""), key(Backend::S3, "b", "e/"));
        listings.keep(top.clone(), Instant::now(), &page("d/1"));
        listings.keep(other.clone(), Instant::now(), &page("e/1"));
        invalidations.update([("s3/b/d/", 1)]);
        assert!(listings.get(&top).is_none(), "the bucket's root lists d/");
        assert!(listings.get(&other).is_some(), "e/ does not overlap d/");
    }

    fn page(key: &str) -> ListResult {
        ListResult {
            objects: vec![ListedObject {
                key: key.into(),
                last_modified: std::time::UNIX_EPOCH,
                etag: "\"e\"".into(),
                size: 1,
                content_type: None,
                content_md5: None,
                user_metadata: None,
            }],
            ..ListResult::default()
        }
    }

    #[test]
    fn a_page_is_answered_within_t_until_its_bucket_is_written() {
        let listings = Listings::new(Duration::from_secs(60), Arc::default(), Arc::default());
        let key = key(Backend::S3, "b", "d/");
        assert!(listings.get(&key).is_none());
        listings.keep(key.clone(), Instant::now(), &page("d/1"));
        assert_eq!(listings.get(&key), Some(page("d/1")));
        // Another request (prefix, start, bucket, backend) is another page.
        assert!(listings.get(&self::key(Backend::S3, "b", "e/")).is_none());
        assert!(listings.get(&self::key(Backend::S3, "c", "d/")).is_none());
        assert!(
            listings
                .get(&self::key(Backend::Azure, "b", "d/"))
                .is_none()
        );
        // A write to another bucket leaves it; one to its own bucket ends it.
        listings.bucket_changed(Backend::S3, "c");
        assert!(listings.get(&key).is_some());
        listings.bucket_changed(Backend::S3, "b");
        assert!(listings.get(&key).is_none());
        // A page asked after the write is answered again.
        listings.keep(key.clone(), Instant::now(), &page("d/2"));
        assert_eq!(listings.get(&key), Some(page("d/2")));
    }

    #[test]
    fn a_page_older_than_t_is_not_answered() {
        let listings = Listings::new(Duration::from_millis(100), Arc::default(), Arc::default());
        let key = key(Backend::S3, "b", "d/");
        let long_ago = Instant::now().checked_sub(Duration::from_secs(1)).unwrap();
        listings.keep(key.clone(), long_ago, &page("d/1"));
        assert!(listings.get(&key).is_none());
    }
}
