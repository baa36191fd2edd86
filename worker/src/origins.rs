//! The origins a worker fetches from, one per backend, and the metadata cache in front
//! of them.
//!
//! A block names its object by backend (S3 or Azure), namespace and path; [`Origins`]
//! (from talon-protocols) turns that into a request on the right origin client.
//! [`StatCache`] answers "what is this object's size and version" from memory: for as
//! long as the requester accepts (a Stat's max age, which the gateway's staleness bound
//! sets), or for the worker's own TTL when it does not say; "not found" is cached for a
//! shorter one. So a hot object's metadata reaches the origin at most once per TTL, and
//! concurrent misses for one object share one request (except a caller that needs
//! metadata newer than the request in flight, which sends its own). Ages count from
//! when the origin request was sent. An expired entry is revalidated
//! ([`OriginClient::revalidate`](talon_protocols::origin::OriginClient::revalidate):
//! conditional where the origin's ETags change with every write) rather than fetched
//! blind. The table is the one metadata cache (`talon-metadata-cache`), bounded by
//! entries and bytes ([`DEFAULT_STAT_CACHE_LIMITS`]) and evicting one entry at a time;
//! an expired entry stays until evicted, to be revalidated rather than fetched again.
//! The fetches in flight are kept apart, one per object, under a lock that hits do not
//! take.
//!
//! A stat that must ask the origin and knows which bytes of the object's first block
//! its reader wants next ([`StatCache::stat_reading`]) asks with a ranged GET of them
//! instead of a HEAD: the answer's headers are the same metadata, and the bytes come
//! back to the caller to be kept, so a cold read costs the origin one request.

use std::collections::HashMap;

use bytes::Bytes;
use futures_util::StreamExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use talon_protocols::range::ByteRange;

use talon_core::{Namespace, ObjectId};
use talon_metadata_cache::{Lookup, MetadataCache};
use talon_protocols::ErrorKind;
pub use talon_protocols::origin::Origins;
use talon_protocols::origin::{CompactInfo, ListOptions, ListResult, ObjectInfo, Revalidation};
use tokio::sync::watch;

use crate::bulk_revalidation::{self, LargeFolders, PageStart, PageVerdict, SparseFolders};
use crate::error::{Result, WorkerError};
use crate::origin_retry::RetryPolicy;

/// Shared by every caller: an entry is cloned out on each hit.
type StatOutcome = std::result::Result<Arc<ObjectInfo>, Arc<WorkerError>>;

/// What a fetch tells the callers that joined it: its outcome, and when the origin
/// said it (the fetch's own send, or an earlier listing's it joined).
type Told = Option<(StatOutcome, Instant)>;

/// A fetch of an object's metadata in flight, with when its origin request was *sent*:
/// its answer says what the origin held at some moment after that, so its age is
/// counted from then, never from its arrival (and likewise for the answers kept).
#[derive(Debug)]
struct Pending {
    sent: Instant,
    answer: watch::Receiver<Told>,
}

/// What a stat does when the table cannot answer it.
enum Action {
    /// A fetch finished meanwhile: its answer, and its age.
    Answered(StatOutcome, Duration),
    /// Wait for the fetch in flight (it tells when its answer was said).
    Join(watch::Receiver<Told>),
    /// Ask the origin, at `sent`: revalidating `known` where there is one, and telling
    /// the callers that joined through `tell` (none for a fetch of a caller whose bound
    /// the one in flight is too old for: that fetch is its own).
    Fetch {
        tell: Option<watch::Sender<Told>>,
        known: Option<Arc<ObjectInfo>>,
        sent: Instant,
    },
}

/// What one listing page did to the entries it listed ([`StatCache::keep_listed`]).
#[derive(Debug, Default, Clone, Copy)]
struct Kept {
    /// Entries kept as of the listing.
    refreshed: usize,
    /// Entries this worker holds among those listed, whatever their age: whether the
    /// folder is worth listing depends on these, not on how many a listing sent at the
    /// same time (64 shuffled readers run several at once over overlapping pages)
    /// refreshed first.
    held: usize,
    /// Objects listed, the one that came due aside.
    others: usize,
}

/// First-read GETs in flight at once ([`StatCache::stat_reading`]): with the gateway's
/// 2 MiB pieces, at most 64 MiB of bytes on their way to the block store.
pub const MAX_FIRST_READS: usize = 32;

/// How long a first read waits for a place ([`MAX_FIRST_READS`]) before it asks for the
/// metadata alone (a HEAD, and then a GET for the bytes: two origin requests). A place is
/// held for one GET of at most a piece, so under a burst of cold reads one frees within
/// an origin round trip; waiting that long is cheaper than a second request. Found by the
/// dataset bench: 64 readers over two workers sent a HEAD for 1 cold object in 3,000.
const FIRST_READ_PLACE_WAIT: Duration = Duration::from_millis(250);

/// What the worker's metadata table holds by default: a million objects, or 512 MiB.
pub const DEFAULT_STAT_CACHE_LIMITS: talon_metadata_cache::Limits = talon_metadata_cache::Limits {
    max_entries: 1_000_000,
    max_bytes: 512 << 20,
    max_missing: 100_000,
};

/// The worker's metadata table: each object's [`ObjectInfo`] kept compact
/// ([`CompactInfo`]: a million objects take about a third of the memory), handed out
/// whole.
#[derive(Debug)]
struct KnownObjects(MetadataCache<ObjectId, CompactInfo>);

impl KnownObjects {
    fn lookup(
        &self,
        object: &ObjectId,
        max_age: Duration,
        now: Instant,
    ) -> Lookup<Arc<ObjectInfo>> {
        self.0
            .lookup(object, max_age, now)
            .map(|c| Arc::new(c.to_info()))
    }

    fn lookup_again(
        &self,
        object: &ObjectId,
        max_age: Duration,
        now: Instant,
    ) -> Lookup<Arc<ObjectInfo>> {
        self.0
            .lookup_again(object, max_age, now)
            .map(|c| Arc::new(c.to_info()))
    }

    fn peek(&self, object: &ObjectId) -> Option<(Instant, Arc<ObjectInfo>)> {
        self.0
            .peek(object)
            .map(|(at, c)| (at, Arc::new(c.to_info())))
    }

    fn observed(&self, object: &ObjectId) -> Option<Instant> {
        self.0.observed(object)
    }

    fn insert(&self, object: ObjectId, observed: Instant, info: &ObjectInfo) {
        self.0
            .insert(object, observed, CompactInfo::from_info(info));
    }

    fn insert_missing(&self, object: ObjectId, observed: Instant) {
        self.0.insert_missing(object, observed);
    }

    fn remove(&self, object: &ObjectId) {
        self.0.remove(object);
    }

    fn stats(&self) -> talon_metadata_cache::CacheStats {
        self.0.stats()
    }
}

/// Object metadata with a TTL, shared fetches, and negative caching of not-found.
#[derive(Debug)]
pub struct StatCache {
    origins: Arc<Origins>,
    ttl: Duration,
    negative_ttl: Duration,
    /// What the origin said, and when (found objects and not-found ones), bounded.
    known: KnownObjects,
    /// The fetches in flight, one per object (the latest sent).
    pending: Mutex<HashMap<ObjectId, Pending>>,
    /// Places for first-read GETs in flight, each holding up to one read's bytes in
    /// memory; a stat that finds none free within [`FIRST_READ_PLACE_WAIT`] asks with a
    /// HEAD instead.
    first_reads: tokio::sync::Semaphore,
    fetched: AtomicU64,
    read: AtomicU64,
    unchanged: AtomicU64,
    changed: AtomicU64,
    /// Folders whose listings do not pay for now ([`crate::bulk_revalidation`]).
    sparse: SparseFolders,
    /// Folders of more than a page, listed from the due key.
    large: LargeFolders,
    /// Where recent pages of large folders ended.
    page_ends: bulk_revalidation::PageEnds,
    /// The cluster's invalidations (with each heartbeat).
    invalidations: talon_metadata_cache::Invalidations,
    /// The cluster's per-prefix freshness (with each heartbeat): the TTL under a prefix
    /// for Stats that say no max age of their own.
    freshness: talon_metadata_cache::FreshnessRules,
    /// Revalidation listings in flight, by folder and where their page starts
    /// ([`bulk_revalidation::listing_key`]): when each was sent, and a channel closed
    /// when it is done (the callers that wait on it then look again).
    listings: Mutex<HashMap<String, (Instant, watch::Receiver<()>)>>,
    listed: AtomicU64,
    refreshed: AtomicU64,
    retried: AtomicU64,
    /// How a transient origin failure of a metadata request is retried.
    retry: RetryPolicy,
}

/// Bytes of an object fetched together with its metadata (a first read's GET): the
/// range of the object they are, exactly as the origin served it.
#[derive(Debug, Clone)]
pub struct FirstBytes {
    /// Where in the object they start and end (the end clipped to the object's size).
    pub range: ByteRange,
    /// The bytes.
    pub data: Bytes,
}

/// Removes the `Pending` entry a fetch put in place (the one sent at `sent`) if the
/// fetch never finished (its future was dropped), so later callers fetch again instead
/// of waiting on nobody.
struct PendingGuard<'a> {
    cache: &'a StatCache,
    object: &'a ObjectId,
    sent: Instant,
    armed: bool,
}

/// Takes a revalidation listing off the in-flight map when it ends (or is dropped),
/// unless a later one of the folder replaced it.
struct ListingInFlight<'a> {
    cache: &'a StatCache,
    listing: String,
    sent: Instant,
}

impl Drop for ListingInFlight<'_> {
    fn drop(&mut self) {
        let mut listings = self.cache.lock_listings();
        if listings
            .get(&self.listing)
            .is_some_and(|(at, _)| *at == self.sent)
        {
            listings.remove(&self.listing);
        }
    }
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut pending = self.cache.lock_pending();
            if pending
                .get(self.object)
                .is_some_and(|p| p.sent == self.sent)
            {
                pending.remove(self.object);
            }
        }
    }
}

/// A "not found" answered from the table.
fn not_found(object: &ObjectId) -> Arc<WorkerError> {
    Arc::new(WorkerError::Origin(talon_protocols::Error::new(
        ErrorKind::NoSuchKey,
        format!("{object} was not found at the origin"),
    )))
}

impl StatCache {
    /// A cache answering from memory for `ttl` (and `negative_ttl` for not-found),
    /// within [`DEFAULT_STAT_CACHE_LIMITS`].
    pub fn new(origins: Arc<Origins>, ttl: Duration, negative_ttl: Duration) -> StatCache {
        StatCache::with_limits(origins, ttl, negative_ttl, DEFAULT_STAT_CACHE_LIMITS)
    }

    /// [`new`](Self::new) within `limits`.
    pub fn with_limits(
        origins: Arc<Origins>,
        ttl: Duration,
        negative_ttl: Duration,
        limits: talon_metadata_cache::Limits,
    ) -> StatCache {
        StatCache {
            origins,
            ttl,
            negative_ttl,
            known: KnownObjects(MetadataCache::new(limits, |id, info| {
                id.held_bytes() + info.held_bytes()
            })),
            pending: Mutex::new(HashMap::new()),
            first_reads: tokio::sync::Semaphore::new(MAX_FIRST_READS),
            fetched: AtomicU64::new(0),
            read: AtomicU64::new(0),
            unchanged: AtomicU64::new(0),
            changed: AtomicU64::new(0),
            sparse: SparseFolders::default(),
            large: LargeFolders::default(),
            page_ends: bulk_revalidation::PageEnds::default(),
            invalidations: talon_metadata_cache::Invalidations::default(),
            freshness: talon_metadata_cache::FreshnessRules::default(),
            listings: Mutex::new(HashMap::new()),
            listed: AtomicU64::new(0),
            refreshed: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            retry: RetryPolicy::default().passing_throttles_on(),
        }
    }

    /// This cache with transient origin failures of its metadata requests retried as
    /// `policy` says (the worker passes its fills' policy), throttling answers always
    /// passed on ([`RetryPolicy::passing_throttles_on`]).
    pub fn with_retry(mut self, policy: RetryPolicy) -> StatCache {
        self.retry = policy.passing_throttles_on();
        self
    }

    fn lock_listings(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, watch::Receiver<()>)>> {
        self.listings.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectId, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Entries held (found and not found) and fetches in flight.
    pub fn len(&self) -> usize {
        let s = self.known.stats();
        (s.entries + s.missing_entries) as usize + self.lock_pending().len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The table's holdings and counts, for `/metrics`.
    pub fn table_stats(&self) -> talon_metadata_cache::CacheStats {
        self.known.stats()
    }

    /// The object's metadata: cached, or fetched with one HEAD shared by every caller
    /// that asks meanwhile.
    ///
    /// # Errors
    /// The origin's error (not-found is cached for the negative TTL; other failures are
    /// not cached).
    pub async fn stat(&self, object: &ObjectId) -> Result<Arc<ObjectInfo>> {
        self.stat_within(object, None).await.map(|(info, _)| info)
    }

    /// The object's metadata learned from the origin at most `max_age` ago (the
    /// cache's TTL when `None`), and how long ago it was learned: counted from when its
    /// origin request was sent, so the age is never understated by the origin's
    /// latency. An entry older than that is revalidated with one HEAD (conditional
    /// where the origin allows it) shared by every caller that asks meanwhile, as long
    /// as that HEAD was sent within the caller's `max_age` (a caller that needs newer,
    /// such as a read after its own write, sends its own); a not-found is never trusted
    /// longer than the negative TTL.
    ///
    /// # Errors
    /// As [`stat`](Self::stat).
    pub async fn stat_within(
        &self,
        object: &ObjectId,
        max_age: Option<Duration>,
    ) -> Result<(Arc<ObjectInfo>, Duration)> {
        self.stat_reading(object, max_age, None)
            .await
            .map(|(info, age, _)| (info, age))
    }

    /// What the table can answer for a caller accepting `found_limit` (found entries)
    /// and `missing_limit` (not-found ones) now: `Ok` an answer, `Err` what is known but
    /// too old (to revalidate), if anything. `again`: the same request's second look
    /// (not counted).
    #[allow(clippy::type_complexity)]
    fn answer(
        &self,
        object: &ObjectId,
        found_limit: Duration,
        missing_limit: Duration,
        again: bool,
    ) -> std::result::Result<(StatOutcome, Duration), Option<Arc<ObjectInfo>>> {
        let now = Instant::now();
        let lookup = if again {
            self.known.lookup_again(object, found_limit, now)
        } else {
            self.known.lookup(object, found_limit, now)
        };
        // Learned before an invalidation of its prefix (`talon invalidate`): asked again.
        let invalidated = |age: Duration| {
            self.invalidations
                .invalidated(|| object.key_path(), now.checked_sub(age).unwrap_or(now))
        };
        match lookup {
            Lookup::Fresh { value, age } if invalidated(age) => Err(Some(value)),
            Lookup::Missing { age } if invalidated(age) => Err(None),
            Lookup::Fresh { value, age } => Ok((Ok(value), age)),
            Lookup::Missing { age } if age < missing_limit => Ok((Err(not_found(object)), age)),
            Lookup::Expired { value, .. } => Err(Some(value)),
            Lookup::Missing { .. } | Lookup::Absent => Err(None),
        }
    }

    /// As [`stat_within`](Self::stat_within), for a reader about to read `first` of
    /// the object: when the metadata must come from the origin and nothing is known of
    /// the object, it comes with those bytes from one ranged GET instead of a HEAD, and
    /// the bytes are returned to be kept (to this caller only; callers that joined get
    /// the metadata). A GET the origin cannot satisfy (a range past the end) falls back
    /// to the HEAD. A revalidation stays a conditional HEAD: the bytes of a version
    /// already known are likely cached.
    ///
    /// # Errors
    /// As [`stat`](Self::stat).
    pub async fn stat_reading(
        &self,
        object: &ObjectId,
        max_age: Option<Duration>,
        first: Option<ByteRange>,
    ) -> Result<(Arc<ObjectInfo>, Duration, Option<FirstBytes>)> {
        self.stat_keeping(object, max_age, first, async |_, _| {})
            .await
    }

    /// As [`stat_reading`](Self::stat_reading), with `keep` given the first bytes (a
    /// copy of those returned) *before* the callers that joined the fetch are told, and
    /// before the table holds the answer: a read that follows any of those answers
    /// finds the bytes kept (or being kept), not a block nobody is filling, which it
    /// would fetch again (a reader arriving while the same object is fetched ahead of it
    /// by another gateway).
    ///
    /// # Errors
    /// As [`stat`](Self::stat).
    pub async fn stat_keeping(
        &self,
        object: &ObjectId,
        max_age: Option<Duration>,
        first: Option<ByteRange>,
        keep: impl AsyncFnOnce(Arc<ObjectInfo>, FirstBytes),
    ) -> Result<(Arc<ObjectInfo>, Duration, Option<FirstBytes>)> {
        let asked = Instant::now();
        let found_limit =
            max_age.unwrap_or_else(|| self.freshness.bound(|| object.key_path(), self.ttl));
        let missing_limit = max_age.map_or(self.negative_ttl, |m| m.min(self.negative_ttl));
        loop {
            // From the table, without the pending lock.
            if let Ok((outcome, age)) = self.answer(object, found_limit, missing_limit, false) {
                return outcome
                    .map(|info| (info, age, None))
                    .map_err(WorkerError::Shared);
            }
            let action = {
                let mut pending = self.lock_pending();
                match pending.get(object) {
                    Some(p) => {
                        if max_age.is_none_or(|max_age| {
                            asked.saturating_duration_since(p.sent) <= max_age
                        }) {
                            Action::Join(p.answer.clone())
                        } else {
                            Action::Fetch {
                                tell: None,
                                known: None,
                                sent: Instant::now(),
                            }
                        }
                    }
                    None => match self.answer(object, found_limit, missing_limit, true) {
                        // A fetch finished since the table was read.
                        Ok((outcome, age)) => Action::Answered(outcome, age),
                        Err(known) => {
                            let sent = Instant::now();
                            let (tell, answer) = watch::channel(None);
                            pending.insert(object.clone(), Pending { sent, answer });
                            Action::Fetch {
                                tell: Some(tell),
                                known,
                                sent,
                            }
                        }
                    },
                }
            };
            match action {
                Action::Answered(outcome, age) => {
                    return outcome
                        .map(|info| (info, age, None))
                        .map_err(WorkerError::Shared);
                }
                Action::Join(mut answer) => {
                    let outcome = answer.wait_for(Option::is_some).await.map(|v| v.clone());
                    match outcome {
                        Ok(Some((outcome, said))) => {
                            return outcome
                                .map(|info| (info, said.elapsed(), None))
                                .map_err(WorkerError::Shared);
                        }
                        // The fetching task went away; try again.
                        _ => continue,
                    }
                }
                Action::Fetch { tell, known, sent } => {
                    // The oldest answer this caller accepts was said at `not_before`.
                    let not_before = asked.checked_sub(found_limit);
                    return self
                        .fetch_and_keep(object, tell, known, sent, not_before, first, keep)
                        .await;
                }
            }
        }
    }

    /// Asks the origin (a revalidation of `known` where there is one, which may join a
    /// listing of its folder sent since `not_before`), gives first bytes it read to
    /// `keep`, keeps the answer unless the table already holds one said later, and tells
    /// the callers that joined.
    #[allow(clippy::too_many_arguments)]
    async fn fetch_and_keep(
        &self,
        object: &ObjectId,
        tell: Option<watch::Sender<Told>>,
        known: Option<Arc<ObjectInfo>>,
        sent: Instant,
        not_before: Option<Instant>,
        first: Option<ByteRange>,
        keep: impl AsyncFnOnce(Arc<ObjectInfo>, FirstBytes),
    ) -> Result<(Arc<ObjectInfo>, Duration, Option<FirstBytes>)> {
        let mut guard = PendingGuard {
            cache: self,
            object,
            sent,
            armed: tell.is_some(),
        };
        let mut bytes = None;
        // When the origin said the answer: this fetch's send, or a listing's it joined.
        let mut said = sent;
        let shared: StatOutcome = match (known, first) {
            (Some(known), _) => {
                match self
                    .revalidate_in_bulk(object, &known, sent, not_before)
                    .await
                {
                    Some((outcome, listed_at)) => {
                        said = listed_at;
                        outcome
                    }
                    None => self.revalidate(object, known).await,
                }
            }
            (None, Some(first)) => {
                match tokio::time::timeout(FIRST_READ_PLACE_WAIT, self.first_reads.acquire()).await
                {
                    Ok(Ok(_place)) => match self.fetch_reading(object, first).await {
                        Ok((info, first_bytes)) => {
                            bytes = first_bytes;
                            Ok(Arc::new(info))
                        }
                        Err(e) => Err(e),
                    },
                    // Every place stayed taken (a storm of slow cold reads): the metadata
                    // alone.
                    Ok(Err(_)) | Err(_) => self.fetch(object).await.map(Arc::new),
                }
            }
            (None, None) => self.fetch(object).await.map(Arc::new),
        }
        .map_err(Arc::new);
        if let (Ok(info), Some(first_bytes)) = (&shared, &bytes) {
            keep(info.clone(), first_bytes.clone()).await;
        }
        guard.armed = false;
        {
            let mut pending = self.lock_pending();
            let cacheable = match &shared {
                Ok(_) => true,
                Err(e) => e.frame_code() == talon_core::ErrorCode::NotFound,
            };
            let ours = pending.get(object).is_some_and(|p| p.sent == sent);
            if ours {
                pending.remove(object);
            }
            // Never replace what a later request learned (or is learning).
            let later_pending = pending.get(object).is_some_and(|p| p.sent > sent);
            let later_known = self.known.observed(object).is_some_and(|at| at > said);
            if cacheable && !later_pending && !later_known {
                match &shared {
                    Ok(info) => self.known.insert(object.clone(), said, info),
                    Err(_) => self.known.insert_missing(object.clone(), said),
                }
            }
        }
        if let Some(tell) = tell {
            let _ = tell.send(Some((shared.clone(), said)));
        }
        shared
            .map(|info| (info, said.elapsed(), bytes))
            .map_err(WorkerError::Shared)
    }

    /// The cluster's invalidations in force here: what a heartbeat brings is given to
    /// [`Invalidations::update`](talon_metadata_cache::Invalidations::update).
    pub fn invalidations(&self) -> &talon_metadata_cache::Invalidations {
        &self.invalidations
    }

    /// The cluster's per-prefix freshness in force here (a heartbeat's rules go to
    /// [`FreshnessRules::update`](talon_metadata_cache::FreshnessRules::update)).
    pub fn freshness(&self) -> &talon_metadata_cache::FreshnessRules {
        &self.freshness
    }

    /// What the origins' per-prefix request limit did so far.
    pub fn origin_request_limit(
        &self,
    ) -> talon_protocols::origin::request_limit::RequestLimitStats {
        self.origins.request_limit_stats()
    }

    /// Origin requests made for metadata so far, by what they found.
    pub fn origin_requests(&self) -> StatOriginRequests {
        StatOriginRequests {
            fetched: self.fetched.load(Ordering::Relaxed),
            read: self.read.load(Ordering::Relaxed),
            unchanged: self.unchanged.load(Ordering::Relaxed),
            changed: self.changed.load(Ordering::Relaxed),
            listed: self.listed.load(Ordering::Relaxed),
            refreshed: self.refreshed.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
        }
    }

    async fn fetch(&self, object: &ObjectId) -> Result<ObjectInfo> {
        self.fetched.fetch_add(1, Ordering::Relaxed);
        let (client, bucket, key) = self.origins.route(object).map_err(WorkerError::Origin)?;
        self.retry
            .run(
                || async {
                    client
                        .head(&bucket, &key)
                        .await
                        .map_err(missing_bucket_is_missing_key)
                },
                |e, n| self.retried(object, e, n),
            )
            .await
    }

    /// Counts a metadata request of `object` retried after `e` (its `n`th retry).
    fn retried(&self, object: &ObjectId, e: &WorkerError, n: u32) {
        self.retried.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%object, attempt = n, error = %e, "retrying a metadata request");
    }

    /// The metadata from a GET of `first` (its answer's headers), with the bytes; a
    /// HEAD instead when the range starts past the object's end (the GET's 416 says
    /// nothing else), without bytes.
    async fn fetch_reading(
        &self,
        object: &ObjectId,
        first: ByteRange,
    ) -> Result<(ObjectInfo, Option<FirstBytes>)> {
        let (client, bucket, key) = self.origins.route(object).map_err(WorkerError::Origin)?;
        self.read.fetch_add(1, Ordering::Relaxed);
        let got = self
            .retry
            .run(
                || async {
                    client
                        .get(&bucket, &key, Some(first), None)
                        .await
                        .map_err(WorkerError::Origin)
                },
                |e, n| self.retried(object, e, n),
            )
            .await;
        let resp = match got {
            Ok(resp) => resp,
            Err(WorkerError::Origin(e)) if e.kind() == ErrorKind::InvalidRange => {
                return self.fetch(object).await.map(|info| (info, None));
            }
            Err(WorkerError::Origin(e)) => return Err(missing_bucket_is_missing_key(e)),
            Err(e) => return Err(e),
        };
        if !resp.size_stated {
            // `bytes a-b/*`: the answer cannot say the object's size.
            return self.fetch(object).await.map(|info| (info, None));
        }
        let served = resp.range.unwrap_or(ByteRange {
            start: 0,
            end: resp.info.size,
        });
        let mut data = bytes::BytesMut::with_capacity(usize::try_from(served.len()).unwrap_or(0));
        let mut body = resp.body;
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(chunk) => data.extend_from_slice(&chunk),
                // A body cut off (a reset, a short body): the headers, whole, already
                // said what the stat needs; the read fetches its bytes itself, with
                // its own retries. Failing the stat would fail a read the origin can
                // still answer.
                Err(e) => {
                    tracing::debug!(%object, error = %e, "a first read's body broke off; keeping its metadata");
                    return Ok((resp.info, None));
                }
            }
        }
        // The body is length-checked against what the answer said it serves.
        Ok((
            resp.info,
            Some(FirstBytes {
                range: served,
                data: data.freeze(),
            }),
        ))
    }

    /// Revalidates `known` from one listing page of its folder, and with it every other
    /// entry the page lists ([`crate::bulk_revalidation`]), as of `sent`. `None` where a
    /// listing does not apply (a folder where listings do not pay, a listing that
    /// failed or stopped short): the caller revalidates the object alone.
    async fn revalidate_in_bulk(
        &self,
        object: &ObjectId,
        known: &Arc<ObjectInfo>,
        sent: Instant,
        not_before: Option<Instant>,
    ) -> Option<(Result<Arc<ObjectInfo>>, Instant)> {
        // The folder maps are keyed by bucket, or account:container on Azure (no bucket
        // name holds a colon).
        let (scope, has_start_after) = match object.namespace() {
            Namespace::S3 { bucket } => (bucket.to_owned(), true),
            Namespace::Azure { account, container } => (format!("{account}:{container}"), false),
        };
        let scope = scope.as_str();
        let key = object.path();
        let (folder, _) = bulk_revalidation::listing_start(key);
        let (observed, _) = self.known.peek(object)?;
        if !listing_can_vouch(known, observed) || !self.sparse.worth_listing(scope, folder, sent) {
            return None;
        }
        let (client, bucket, _) = self.origins.route(object).ok()?;
        let bucket = bucket.as_str();
        // A listing in flight that starts where this one would, sent recently enough:
        // wait for it, and take what it kept for this object (one listing for many due
        // at once). Where it did not cover the object, look again: its page's end is
        // where the next one starts, which another entry woken with this one may have
        // sent already.
        let mut joined = 0;
        let (page_end, large, listing) = loop {
            // From the folder's first key, unless it is known to hold more than a page;
            // then (or when that page stops short of the object) from as near the
            // object's key as the protocol allows.
            let large = self.large.is_large(scope, folder, sent);
            let page_end = large
                .then(|| self.page_ends.before(scope, folder, key))
                .flatten();
            let first = *bulk_revalidation::page_starts(
                key,
                folder,
                has_start_after,
                large,
                page_end.as_deref(),
            )
            .first()?;
            let listing = bulk_revalidation::listing_key(scope, folder, first);
            let in_flight = self
                .lock_listings()
                .get(&listing)
                .filter(|(at, _)| not_before.is_none_or(|oldest| *at >= oldest))
                .map(|(at, done)| (*at, done.clone()));
            let Some((listed_at, mut done)) =
                in_flight.filter(|_| joined < bulk_revalidation::LISTING_JOINS)
            else {
                break (page_end, large, listing);
            };
            while done.changed().await.is_ok() {}
            match self.known.peek(object) {
                Some((observed, held)) if observed >= listed_at => {
                    return Some((Ok(held), observed));
                }
                // Listed as another version (the listing dropped the entry): no later
                // page can say more; its new headers come with a request of its own.
                None => return None,
                Some(_) => joined += 1,
            }
        };
        let (_finished, done) = watch::channel(());
        {
            // A listing from the same start sent later than this entry came due (one
            // this entry gave up joining) stays the one later entries join.
            let mut listings = self.lock_listings();
            if listings.get(&listing).is_none_or(|(at, _)| *at <= sent) {
                listings.insert(listing.clone(), (sent, done));
            }
        }
        let _in_flight = ListingInFlight {
            cache: self,
            listing,
            sent,
        };
        let starts = bulk_revalidation::page_starts(
            key,
            folder,
            has_start_after,
            large,
            page_end.as_deref(),
        );
        let mut page = None;
        for start in starts {
            self.listed.fetch_add(1, Ordering::Relaxed);
            let (prefix, start_after) = match start {
                PageStart::Folder => (folder, None),
                PageStart::After(after) => (folder, Some(after)),
                PageStart::Narrowed(prefix) => (prefix, None),
            };
            let options = ListOptions {
                prefix,
                delimiter: Some("/"),
                token: None,
                start_after,
                max_keys: Some(bulk_revalidation::LISTING_PAGE),
                include_metadata: false,
            };
            let listed = self
                .retry
                .run(
                    || async {
                        client
                            .list_with(bucket, &options)
                            .await
                            .map_err(WorkerError::Origin)
                    },
                    |e, n| self.retried(object, e, n),
                )
                .await;
            let listed = match listed {
                Ok(listed) => listed,
                Err(e) => {
                    tracing::debug!(%object, error = %e, "a listing for revalidation failed; asking for the object alone");
                    // Refused (no s3:ListBucket, say): not worth trying again soon.
                    if !e.is_retryable_origin_failure() {
                        self.sparse.record(scope, folder, None, sent);
                    }
                    return None;
                }
            };
            self.note_listing(object, scope, folder, &listed, sent);
            if start == PageStart::Folder && listed.next_token.is_some() {
                self.large.mark(scope, folder, sent);
            }
            // Where a page with more after it ended: the next page of the folder starts
            // there ([`PageEnds`]).
            if listed.next_token.is_some() {
                let last_key = listed.objects.last().map(|o| o.key.as_str());
                let last_prefix = listed.common_prefixes.last().map(String::as_str);
                if let Some(end) = last_key.max(last_prefix) {
                    self.page_ends.note(scope, folder, end);
                }
            }
            let covered =
                bulk_revalidation::verdict(&listed, key, known) != PageVerdict::NotCovered;
            page = Some(listed);
            if covered {
                break;
            }
        }
        let page = page?;
        let outcome = match bulk_revalidation::verdict(&page, key, known) {
            PageVerdict::Current => Ok(known.clone()),
            // No listing carries all of an object's headers: a HEAD brings them
            // (counted as fetched).
            PageVerdict::Changed => self.fetch(object).await.map(Arc::new),
            PageVerdict::Gone => Err(WorkerError::Origin(talon_protocols::Error::new(
                ErrorKind::NoSuchKey,
                format!("{object} is no longer listed at the origin"),
            ))),
            PageVerdict::NotCovered => return None,
        };
        Some((outcome, sent))
    }

    /// Takes in a listing page of `folder` sent at `sent` for the due `key`: keeps and
    /// drops what it lists ([`Self::keep_listed`]), and records whether the folder is
    /// worth listing by the entries this worker holds among them.
    fn note_listing(
        &self,
        object: &ObjectId,
        scope: &str,
        folder: &str,
        page: &ListResult,
        sent: Instant,
    ) {
        let kept = self.keep_listed(object, page, sent);
        self.refreshed
            .fetch_add(kept.refreshed as u64, Ordering::Relaxed);
        self.sparse
            .record(scope, folder, Some((kept.held, kept.others)), sent);
    }

    /// Keeps, as of `sent`, every entry `page` lists (but `due`, the one that came due)
    /// as the version held, and drops those it lists as another. Only entries a listing
    /// can vouch for, learned before `sent`, are touched.
    fn keep_listed(&self, due: &ObjectId, page: &ListResult, sent: Instant) -> Kept {
        let mut kept = Kept::default();
        let key = due.path();
        for listed in page.objects.iter().filter(|l| l.key != key) {
            kept.others += 1;
            let sibling = match due.namespace() {
                Namespace::S3 { bucket } => ObjectId::s3(bucket, listed.key.as_str()),
                Namespace::Azure { account, container } => {
                    ObjectId::azure(account, container, listed.key.as_str())
                }
            };
            let Ok(id) = sibling else {
                continue;
            };
            let Some((observed, held)) = self.known.peek(&id) else {
                continue;
            };
            kept.held += 1;
            if observed >= sent || !listing_can_vouch(&held, observed) {
                continue;
            }
            if bulk_revalidation::same_version(&held, listed) {
                self.known.insert(id, sent, &held);
                kept.refreshed += 1;
            } else {
                self.known.remove(&id);
            }
        }
        kept
    }

    /// Asks the origin whether `known` is still the object's version: the entry is kept
    /// (one 304, no headers) when it is, replaced when it is not.
    async fn revalidate(
        &self,
        object: &ObjectId,
        known: Arc<ObjectInfo>,
    ) -> Result<Arc<ObjectInfo>> {
        let (client, bucket, key) = self.origins.route(object).map_err(WorkerError::Origin)?;
        let answer = self
            .retry
            .run(
                || async {
                    client
                        .revalidate(&bucket, &key, &known)
                        .await
                        .map_err(missing_bucket_is_missing_key)
                },
                |e, n| self.retried(object, e, n),
            )
            .await;
        match answer {
            Ok(Revalidation::Current(None)) => {
                self.unchanged.fetch_add(1, Ordering::Relaxed);
                Ok(known)
            }
            Ok(Revalidation::Current(Some(info))) => {
                self.unchanged.fetch_add(1, Ordering::Relaxed);
                Ok(Arc::new(info))
            }
            Ok(Revalidation::Changed(info)) => {
                self.changed.fetch_add(1, Ordering::Relaxed);
                Ok(Arc::new(info))
            }
            Err(e) => {
                if e.frame_code() == talon_core::ErrorCode::NotFound {
                    self.changed.fetch_add(1, Ordering::Relaxed);
                }
                Err(e)
            }
        }
    }

    /// Forgets an object's metadata (its version changed at the origin).
    pub fn invalidate(&self, object: &ObjectId) {
        self.known.remove(object);
    }
}

/// Whether a listing can vouch for `held`, learned at `observed` (this worker's
/// monotonic clock, turned into wall-clock time).
fn listing_can_vouch(held: &ObjectInfo, observed: Instant) -> bool {
    let learned = SystemTime::now()
        .checked_sub(observed.elapsed())
        .unwrap_or(UNIX_EPOCH);
    bulk_revalidation::listing_can_vouch(held, learned)
}

/// A worker's stat cannot tell a missing bucket from a missing key (the gateway asks
/// the origin which it is): both are "not found", and cached as such.
fn missing_bucket_is_missing_key(e: talon_protocols::Error) -> WorkerError {
    if e.kind() == ErrorKind::NoSuchBucket {
        WorkerError::Origin(talon_protocols::Error::new(
            ErrorKind::NoSuchKey,
            e.message().to_owned(),
        ))
    } else {
        WorkerError::Origin(e)
    }
}

/// Metadata requests a worker made of the origin, by what they found (Prometheus
/// `talon_worker_stat_origin_requests_total{result}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatOriginRequests {
    /// Plain HEADs: nothing was remembered.
    pub fetched: u64,
    /// Plain GETs of a reader's first bytes, which brought the metadata with them
    /// (instead of a HEAD).
    pub read: u64,
    /// Revalidations that found the remembered version current.
    pub unchanged: u64,
    /// Revalidations that found another version, or none, or failed.
    pub changed: u64,
    /// Listings sent to revalidate in bulk: each answers for the object that came due
    /// (a changed one then costs a HEAD, counted as `fetched`) and for every other
    /// entry it lists.
    pub listed: u64,
    /// Other entries those listings kept (not requests: the ones they saved).
    pub refreshed: u64,
    /// Requests sent again after a transient failure (throttling, 5xx, a reset).
    pub retried: u64,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use talon_origin_stub::faults::FaultConfig;
    use talon_origin_stub::generated::GeneratedObject;
    use talon_origin_stub::{RunningStub, StubConfig};
    use talon_protocols::origin::{OriginClient, OriginConfig};

    use super::*;

    async fn stub(faults: FaultConfig) -> (RunningStub, Arc<Origins>) {
        stub_with(
            vec![GeneratedObject::new("bkt", "present", 1000, 1)],
            faults,
        )
        .await
    }

    async fn stub_with(
        generated: Vec<GeneratedObject>,
        faults: FaultConfig,
    ) -> (RunningStub, Arc<Origins>) {
        let stub = talon_origin_stub::start(StubConfig {
            generated,
            azure_listen: None,
            admin_listen: None,
            faults,
            ..StubConfig::default()
        })
        .await
        .unwrap();
        let client = OriginClient::new(OriginConfig::S3 {
            endpoint: stub.s3_url().unwrap(),
            region: "us-east-1".into(),
            credentials: None,
            virtual_hosted: false,
        })
        .unwrap();
        let origins = Arc::new(Origins {
            s3: Some(client),
            azure: None,
        });
        (stub, origins)
    }

    /// A stub serving `count` objects of bucket `bkt` named by `name`, and a stat cache
    /// (60 s) that has learned every one of them.
    async fn learned_objects(
        count: u64,
        name: impl Fn(u64) -> String,
    ) -> (RunningStub, Arc<Origins>, StatCache) {
        let objects: Vec<GeneratedObject> = (0..count)
            .map(|i| GeneratedObject::new("bkt", name(i), 10, i))
            .collect();
        let (stub, origins) = stub_with(objects, FaultConfig::default()).await;
        let cache = StatCache::new(
            origins.clone(),
            Duration::from_secs(60),
            Duration::from_secs(1),
        );
        for i in 0..count {
            cache.stat_within(&s3(&name(i)), None).await.unwrap();
        }
        (stub, origins, cache)
    }

    fn s3_id(key: &str) -> ObjectId {
        s3(key)
    }

    fn s3(key: &str) -> ObjectId {
        ObjectId::from_key_path(&format!("s3/bkt/{key}")).unwrap()
    }

    #[tokio::test]
    async fn a_fetch_dropped_midway_does_not_wedge_later_callers() {
        let slow = FaultConfig {
            latency_ms: 60_000,
            ..FaultConfig::default()
        };
        let (stub, origins) = stub(slow).await;
        let cache = StatCache::new(origins, Duration::from_secs(60), Duration::from_secs(1));
        let object = s3("present");
        // The first caller starts the HEAD (its Pending entry is in the table) and then
        // gives up: the future is dropped mid-fetch.
        {
            let first = cache.stat(&object);
            tokio::pin!(first);
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(first.as_mut().poll(&mut cx).is_pending());
            assert_eq!(cache.len(), 1, "the fetch registered itself");
        }
        assert!(
            cache.is_empty(),
            "the abandoned fetch left no Pending entry"
        );
        stub.faults().set(FaultConfig::default()).unwrap();
        let info = tokio::time::timeout(Duration::from_secs(30), cache.stat(&object))
            .await
            .expect("a later caller fetches again instead of waiting on nobody")
            .unwrap();
        assert_eq!(info.size, 1000);
    }

    #[tokio::test]
    async fn an_entry_older_than_the_max_age_is_revalidated_and_a_new_version_is_seen() {
        let (_stub, origins) = stub(FaultConfig::default()).await;
        let cache = StatCache::new(
            origins.clone(),
            Duration::from_secs(60),
            Duration::from_secs(1),
        );
        let object = s3("present");
        let counts = |fetched, changed, listed| StatOriginRequests {
            fetched,
            read: 0,
            unchanged: 0,
            changed,
            listed,
            refreshed: 0,
            retried: 0,
        };
        let minute = Some(Duration::from_secs(60));
        let called = Instant::now();
        let (first, age) = cache.stat_within(&object, minute).await.unwrap();
        assert!(age <= called.elapsed(), "learned during the call: {age:?}");
        let (again, _) = cache.stat_within(&object, minute).await.unwrap();
        assert_eq!(again, first);
        assert_eq!(
            cache.origin_requests(),
            counts(1, 0, 0),
            "answered from memory"
        );

        // Older than the requester accepts: one revalidation, which finds it current.
        // On S3 it is a listing page of the object's folder (the object was learned
        // long after it was last modified, so a listing can vouch for it).
        let called = Instant::now();
        let (current, age) = cache
            .stat_within(&object, Some(Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(current.etag, first.etag);
        assert!(age <= called.elapsed(), "learned during the call: {age:?}");
        assert_eq!(current.size, 1000);
        assert_eq!(cache.origin_requests(), counts(1, 0, 1));

        // Overwritten at the origin: the next revalidation takes the new version (a
        // second listing, then a HEAD for the new headers), and the worker's own TTL
        // then answers from memory again.
        let s3 = origins.s3.as_ref().unwrap();
        let etag = s3
            .put("bkt", "present", bytes::Bytes::from_static(b"new"), None)
            .await
            .unwrap();
        let (changed, _) = cache
            .stat_within(&object, Some(Duration::ZERO))
            .await
            .unwrap();
        assert!(talon_protocols::conditional::same_version(
            &changed.etag,
            &etag
        ));
        assert_eq!(changed.size, 3);
        assert_eq!(cache.origin_requests(), counts(2, 0, 2));
        assert_eq!(cache.stat(&object).await.unwrap(), changed);
        assert_eq!(cache.origin_requests(), counts(2, 0, 2));
        // Neither listing refreshed anything else (the object is alone in its folder):
        // the folder is revalidated object by object for a while, with a plain HEAD.
        let (again, _) = cache
            .stat_within(&object, Some(Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(again.size, 3);
        assert_eq!(
            cache.origin_requests(),
            StatOriginRequests {
                unchanged: 1,
                ..counts(2, 0, 2)
            }
        );
    }

    #[tokio::test]
    async fn the_same_bytes_rewritten_with_new_metadata_are_seen_by_a_revalidation() {
        // S3 keeps the ETag (the content's MD5) when an object is rewritten with the
        // same bytes and other metadata: a 304 to If-None-Match would keep the old
        // metadata for good (ceph's test_object_set_get_metadata_overwrite_to_empty).
        let (_stub, origins) = stub(FaultConfig::default()).await;
        let cache = StatCache::new(
            origins.clone(),
            Duration::from_secs(60),
            Duration::from_secs(1),
        );
        let s3 = origins.s3.as_ref().unwrap();
        let body = bytes::Bytes::from_static(b"same bytes");
        let put = |meta: &'static str| {
            let body = body.clone();
            async move {
                s3.put_stream(
                    "bkt",
                    "meta.txt",
                    body.clone().into(),
                    body.len() as u64,
                    &[("x-amz-meta-colour", meta.to_owned())],
                )
                .await
                .unwrap()
            }
        };
        let first = put("blue").await;
        let object = s3_id("meta.txt");
        let (info, _) = cache.stat_within(&object, None).await.unwrap();
        assert_eq!(
            info.headers.user_metadata,
            vec![("colour".to_owned(), "blue".to_owned())]
        );
        let second = put("green").await;
        assert!(
            talon_protocols::conditional::same_version(&first, &second),
            "one ETag"
        );
        let (info, _) = cache
            .stat_within(&object, Some(Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(
            info.headers.user_metadata,
            vec![("colour".to_owned(), "green".to_owned())]
        );
    }

    /// A stub of 50 objects `set/{i}.bin` of 100 + i bytes, a stat cache (60 s) that
    /// learned them all, and then, at the origin only, `set/7.bin` rewritten (9 bytes)
    /// and `set/9.bin` deleted.
    async fn a_set_with_one_rewritten_and_one_deleted() -> (RunningStub, StatCache) {
        let objects: Vec<GeneratedObject> = (0..50u64)
            .map(|i| GeneratedObject::new("bkt", format!("set/{i}.bin"), 100 + i, i))
            .collect();
        let (stub, origins) = stub_with(objects, FaultConfig::default()).await;
        let cache = StatCache::new(
            origins.clone(),
            Duration::from_secs(60),
            Duration::from_secs(1),
        );
        for i in 0..50 {
            cache.stat_within(&set_id(i), None).await.unwrap();
        }
        let s3 = origins.s3.as_ref().unwrap();
        s3.put("bkt", "set/7.bin", Bytes::from_static(b"rewritten"), None)
            .await
            .unwrap();
        s3.delete("bkt", "set/9.bin").await.unwrap();
        (stub, cache)
    }

    fn set_id(i: u64) -> ObjectId {
        s3(&format!("set/{i}.bin"))
    }

    /// What a revalidation of `set/{i}.bin` must answer (its size, or not found).
    fn check_set_answer(i: u64, answer: Result<u64>) {
        match i {
            7 => assert_eq!(answer.unwrap(), 9, "the rewritten object"),
            9 => assert_eq!(
                answer.unwrap_err().frame_code(),
                talon_core::ErrorCode::NotFound,
                "the deleted object"
            ),
            _ => assert_eq!(answer.unwrap(), 100 + i, "object {i}"),
        }
    }

    /// Revalidation in bulk: the entries of a folder that came due are revalidated by
    /// one listing page, not a HEAD each; an object rewritten since costs a HEAD for
    /// its new headers and a deleted one is found gone, each exactly that object.
    #[tokio::test]
    async fn a_folder_that_came_due_is_revalidated_from_one_listing_page() {
        let (stub, cache) = a_set_with_one_rewritten_and_one_deleted().await;
        assert_eq!(cache.origin_requests().fetched, 50);
        let requests = || stub.metrics().requests_total();
        let before = requests();
        tokio::time::sleep(DUE_GAP).await;
        let due = Instant::now();
        for i in 0..50 {
            let answer = cache
                .stat_within(&set_id(i), Some(due.elapsed() + DUE_GAP / 2))
                .await;
            check_set_answer(i, answer.map(|(info, _)| info.size));
        }
        let counted = cache.origin_requests();
        // A listing of the folder (it fits one page), which kept 47 others; a HEAD for
        // the rewritten object; another listing for set/9.bin, due still, which finds
        // it gone (and keeps the 48 others once more).
        assert_eq!((counted.listed, counted.refreshed), (2, 47 + 48));
        assert_eq!(counted.fetched, 51);
        assert_eq!(
            requests() - before,
            3,
            "3 origin requests for 50 due entries"
        );
    }

    /// The same folder read by 50 readers at once: the readers of the rewritten object
    /// and of the deleted one wait on the first listing with the rest. The rewritten
    /// one, dropped by that listing, is asked for alone at once (before 2026-12-05 it
    /// listed the folder again first: 4 origin requests); the deleted one, which no
    /// page lists, lists the folder once more and finds it gone.
    #[tokio::test]
    async fn readers_of_a_changed_object_waiting_on_a_listing_ask_for_it_alone() {
        use futures_util::StreamExt as _;
        let (stub, cache) = a_set_with_one_rewritten_and_one_deleted().await;
        let before = stub.metrics().requests_total();
        tokio::time::sleep(DUE_GAP).await;
        let due = Instant::now();
        let cache = &cache;
        let answers: Vec<(u64, Result<u64>)> = futures_util::stream::iter(0..50u64)
            .map(|i| async move {
                let answer = cache
                    .stat_within(&set_id(i), Some(due.elapsed() + DUE_GAP / 2))
                    .await;
                (i, answer.map(|(info, _)| info.size))
            })
            .buffer_unordered(64)
            .collect()
            .await;
        for (i, answer) in answers {
            check_set_answer(i, answer);
        }
        // A listing for everyone, a HEAD for the rewritten object, a listing that finds
        // the deleted one gone.
        assert_eq!(stub.metrics().requests_total() - before, 3);
        assert_eq!(cache.origin_requests().listed, 2);
    }

    /// Azure has no start-after: a folder of more than a page is listed from its first
    /// key once, then from the due key's narrowed prefix (all but its last three
    /// characters). 1,100 due blobs cost 2 listings (a conditional HEAD each before
    /// 2026-12-04), and a blob rewritten since is found changed from the page.
    #[tokio::test]
    async fn an_azure_folder_that_came_due_is_revalidated_from_narrowed_listings() {
        let account = talon_origin_stub::DEFAULT_AZURE_ACCOUNT;
        let objects: Vec<GeneratedObject> = (0..1_100u64)
            .map(|i| GeneratedObject::new("box", format!("big/{i:04}"), 10, i))
            .collect();
        let stub = talon_origin_stub::start(StubConfig {
            generated: objects,
            s3_listen: None,
            admin_listen: None,
            ..StubConfig::default()
        })
        .await
        .unwrap();
        let client = OriginClient::new(OriginConfig::Azure {
            endpoint: stub.azure_url().unwrap(),
            account: account.into(),
            key: None,
            sas: None,
        })
        .unwrap();
        let origins = Arc::new(Origins {
            s3: None,
            azure: Some((account.to_owned(), client)),
        });
        let cache = StatCache::new(
            origins.clone(),
            Duration::from_secs(60),
            Duration::from_secs(1),
        );
        let id = |i: u64| ObjectId::azure(account, "box", format!("big/{i:04}")).unwrap();
        for i in 0..1_100 {
            cache.stat_within(&id(i), None).await.unwrap();
        }
        let azure = &origins.azure.as_ref().unwrap().1;
        azure
            .put("box", "big/1050", Bytes::from_static(b"rewritten"), None)
            .await
            .unwrap();
        let requests = || stub.metrics().requests_total();
        let before = requests();
        tokio::time::sleep(DUE_GAP).await;
        let due = Instant::now();
        for i in 0..1_100 {
            let (info, _) = cache
                .stat_within(&id(i), Some(due.elapsed() + DUE_GAP / 2))
                .await
                .unwrap();
            let size = if i == 1050 { 9 } else { 10 };
            assert_eq!(info.size, size, "blob {i}");
        }
        let counted = cache.origin_requests();
        // The folder from its first key (1,000 blobs, cut short: the folder is large),
        // then big/1 for big/1000 (100 blobs), and a HEAD for the rewritten blob.
        assert_eq!((counted.listed, counted.refreshed), (2, 999 + 98));
        assert_eq!(
            requests() - before,
            3,
            "3 origin requests for 1,100 due blobs"
        );
    }

    /// Listings of one folder run at once under shuffled readers, over overlapping
    /// pages: one sent earlier that finishes after another has kept the entries finds
    /// them newer than itself and keeps none. The folder is still worth listing (this
    /// worker holds every entry listed); before 2026-12-04 two such listings marked it
    /// sparse, and the dataset bench's shuffled pass after T sent 150 HEADs beside its
    /// 50 listings.
    #[tokio::test]
    async fn listings_that_overlap_in_time_keep_their_folder_worth_listing() {
        let (_stub, origins, cache) = learned_objects(100, |i| format!("mix/{i:03}")).await;
        let options = ListOptions {
            prefix: "mix/",
            delimiter: Some("/"),
            token: None,
            start_after: None,
            max_keys: Some(bulk_revalidation::LISTING_PAGE),
            include_metadata: false,
        };
        let page = origins
            .s3
            .as_ref()
            .unwrap()
            .list_with("bkt", &options)
            .await
            .unwrap();
        let (earlier, later) = (Instant::now(), Instant::now() + Duration::from_millis(5));
        cache.note_listing(&s3("mix/000"), "bkt", "mix/", &page, later);
        assert_eq!(cache.origin_requests().refreshed, 99);
        for _ in 0..bulk_revalidation::STRIKES {
            cache.note_listing(&s3("mix/000"), "bkt", "mix/", &page, earlier);
        }
        assert_eq!(
            cache.origin_requests().refreshed,
            99,
            "nothing newer replaced"
        );
        assert!(
            cache.sparse.worth_listing("bkt", "mix/", later),
            "the folder was marked as not worth listing"
        );
    }

    /// A folder of 5,000 objects a stat cache learned, all come due: the cache, the
    /// stub, the objects in an order shuffled by `seed`, and each one's max age (the
    /// time since they came due plus half the gap that tells learned entries from
    /// refreshed ones).
    struct DuePass {
        stub: RunningStub,
        cache: StatCache,
        order: Vec<ObjectId>,
        requests_before: u64,
        due: Instant,
    }

    /// How long a revalidation test waits between learning its entries and the pass:
    /// every entry learned before it is at least this old when the pass starts, one a
    /// listing of the pass refreshed is younger than the pass. A max age of the pass's
    /// age plus half of it tells them apart however slowly a busy host runs a stat (the
    /// pass's age alone did not: a lookup a few microseconds after the age was taken
    /// found a just-refreshed entry older than it).
    const DUE_GAP: Duration = Duration::from_millis(200);

    impl DuePass {
        async fn new(seed: u64) -> DuePass {
            let name = |i: u64| format!("pass/{i:05}");
            let (stub, _origins, cache) = learned_objects(5_000, name).await;
            let mut order: Vec<ObjectId> = (0..5_000).map(|i| s3(&name(i))).collect();
            fastrand::Rng::with_seed(seed).shuffle(&mut order);
            let requests_before = stub.metrics().requests_total();
            tokio::time::sleep(DUE_GAP).await;
            DuePass {
                stub,
                cache,
                order,
                requests_before,
                due: Instant::now(),
            }
        }

        fn max_age(&self) -> Option<Duration> {
            Some(self.due.elapsed() + DUE_GAP / 2)
        }

        /// The listings the pass cost, checked to be its only origin requests.
        fn listings_only(&self) -> u64 {
            let listed = self.cache.origin_requests().listed;
            assert_eq!(
                self.stub.metrics().requests_total() - self.requests_before,
                listed,
                "listings only"
            );
            listed
        }
    }

    /// A shuffled pass over a folder of 5,000 objects that all came due: each page starts
    /// where the last page before the due key ended, so the pages follow one another
    /// (5 would cover the folder) instead of each starting at its due key and
    /// overlapping the pages after it.
    #[tokio::test]
    async fn a_shuffled_pass_lists_pages_that_follow_one_another() {
        let pass = DuePass::new(7).await;
        for id in &pass.order {
            pass.cache.stat_within(id, pass.max_age()).await.unwrap();
        }
        let listed = pass.listings_only();
        assert!(listed <= 8, "{listed} listings for 5 pages of keys");
    }

    /// The same pass by 64 readers at once: the due entries a page did not cover, woken
    /// together when it ends, wait on one listing of the next page (they would all
    /// start theirs where it starts) instead of each listing it. Before 2026-12-05 they
    /// waited on any listing of the folder and then each sent its own: 43–64 listings in
    /// three runs of this test (6–7 since).
    #[tokio::test]
    async fn readers_woken_together_list_the_next_page_once() {
        use futures_util::StreamExt as _;
        let pass = DuePass::new(11).await;
        let pass = &pass;
        let answered = futures_util::stream::iter(&pass.order)
            .map(|id| async move {
                pass.cache
                    .stat_within(id, pass.max_age())
                    .await
                    .map(|(info, _)| info.size)
            })
            .buffer_unordered(64)
            .filter(|r| std::future::ready(matches!(r, Ok(10))))
            .count()
            .await;
        assert_eq!(answered, 5_000, "every entry answered current");
        let listed = pass.listings_only();
        assert!(listed <= 12, "{listed} listings for 5 pages of keys");
    }

    /// A folder of more than a page: the first listing (from its first key) stops short
    /// of a later key that came due, which then gets a page of its own, and the folder
    /// is listed from the due key afterwards. 1,100 due entries cost 3 listings.
    #[tokio::test]
    async fn a_folder_larger_than_a_page_is_listed_from_the_key_that_came_due() {
        let (stub, _origins, cache) = learned_objects(1_100, |i| format!("big/{i:04}")).await;
        let id = |i: u64| s3(&format!("big/{i:04}"));
        let requests = || stub.metrics().requests_total();
        let before = requests();
        tokio::time::sleep(DUE_GAP).await;
        let due = Instant::now();
        // 1050 first (past the first page), then everything else.
        for i in std::iter::once(1_050).chain(0..1_100) {
            cache
                .stat_within(&id(i), Some(due.elapsed() + DUE_GAP / 2))
                .await
                .unwrap();
        }
        // 1050: the folder's first page (0000–0999), then its own (1050–1099); 1000,
        // between the two, one more from itself (1000–1099). Nothing else.
        assert_eq!(cache.origin_requests().listed, 3);
        assert_eq!(requests() - before, 3);
        // Known large now: a due key is listed from itself, one request.
        let due = Instant::now();
        cache
            .stat_within(&id(1_050), Some(due.elapsed()))
            .await
            .unwrap();
        assert_eq!(cache.origin_requests().listed, 4);
        assert_eq!(requests() - before, 4);
    }

    /// An invalidation heard (with a heartbeat) makes the entries learned before it,
    /// found or not found, be asked of the origin again, whatever their age; entries
    /// outside its prefix, and those learned after it, are answered as before.
    #[tokio::test]
    async fn an_invalidation_makes_what_was_learned_before_it_be_asked_again() {
        let (_stub, origins) = stub(FaultConfig::default()).await;
        let cache = StatCache::new(origins, Duration::from_secs(60), Duration::from_secs(60));
        cache.stat(&s3("present")).await.unwrap();
        assert!(cache.stat(&s3("absent")).await.is_err());
        let asked = |c: &StatCache| {
            let r = c.origin_requests();
            r.fetched + r.unchanged + r.changed + r.listed
        };
        assert_eq!(asked(&cache), 2);
        cache.invalidations().update([("s3/bkt/elsewhere/", 1)]);
        cache.stat(&s3("present")).await.unwrap();
        assert_eq!(asked(&cache), 2, "another prefix: answered from memory");
        cache
            .invalidations()
            .update([("s3/bkt/elsewhere/", 1), ("s3/bkt/", 2)]);
        cache.stat(&s3("present")).await.unwrap();
        assert!(cache.stat(&s3("absent")).await.is_err());
        assert_eq!(asked(&cache), 4, "both asked again");
        cache.stat(&s3("present")).await.unwrap();
        assert!(cache.stat(&s3("absent")).await.is_err());
        assert_eq!(asked(&cache), 4, "learned since: answered from memory");
    }

    /// A metadata request that meets a passing origin failure (a 500, a reset) is
    /// retried with backoff, as a fill is, instead of failing the read at once (before
    /// 2026-12-04 a stat gave up at the first); a throttling answer is passed on at
    /// once, so a throttling origin gets no more load than the client sends.
    #[tokio::test]
    async fn a_passing_origin_failure_is_retried_and_a_throttle_passed_on() {
        let two_failures = FaultConfig {
            fail_next: 2,
            error_kinds: vec![
                talon_origin_stub::faults::FaultKind::Internal,
                talon_origin_stub::faults::FaultKind::Reset,
            ],
            ..FaultConfig::default()
        };
        let objects = vec![GeneratedObject::new("bkt", "a", 10, 1)];
        let (stub, origins) = stub_with(objects, two_failures).await;
        let cache = StatCache::new(origins, Duration::from_secs(60), Duration::from_secs(1))
            .with_retry(RetryPolicy {
                retries: 3,
                backoff: Duration::from_millis(5),
                throttled: true,
            });
        let info = cache.stat(&s3("a")).await.unwrap();
        assert_eq!(info.size, 10);
        assert_eq!(cache.origin_requests().retried, 2);
        stub.faults()
            .set(FaultConfig {
                throttle_rps: Some(1),
                ..FaultConfig::default()
            })
            .unwrap();
        cache.invalidate(&s3("a"));
        cache.stat(&s3("a")).await.unwrap();
        cache.invalidate(&s3("a"));
        let e = cache.stat(&s3("a")).await.unwrap_err();
        assert!(e.is_origin_throttling(), "{e}");
        assert_eq!(
            cache.origin_requests().retried,
            2,
            "the throttle was not retried"
        );
        assert_eq!(stub.metrics().faults_of("throttled"), 1);
    }

    /// A first read is a GET only with a place for its bytes: with every place taken
    /// for longer than the wait (a storm of slow cold reads), the metadata comes with a
    /// HEAD and no bytes are held; a place freed within the wait is taken (one request,
    /// not two: before 2026-12-04 a first read that found every place taken sent a HEAD
    /// at once).
    #[tokio::test]
    async fn a_first_read_without_a_free_place_asks_with_a_head() {
        let (_stub, origins) = stub(FaultConfig::default()).await;
        let cache = StatCache::new(origins, Duration::from_secs(60), Duration::from_secs(1));
        let first = Some(ByteRange {
            start: 0,
            end: 4096,
        });
        let taken = cache
            .first_reads
            .try_acquire_many(MAX_FIRST_READS as u32)
            .unwrap();
        let (info, _, bytes) = cache
            .stat_reading(&s3("present"), Some(Duration::from_secs(1)), first)
            .await
            .unwrap();
        assert_eq!(info.size, 1000);
        assert!(bytes.is_none());
        assert_eq!(
            (
                cache.origin_requests().fetched,
                cache.origin_requests().read
            ),
            (1, 0)
        );
        drop(taken);
        cache.invalidate(&s3("present"));
        let (_, _, bytes) = cache
            .stat_reading(&s3("present"), Some(Duration::from_secs(1)), first)
            .await
            .unwrap();
        assert_eq!(bytes.map(|b| b.data.len()), Some(1000));
        assert_eq!(cache.origin_requests().read, 1);
        // Every place taken, one freed well within the wait: the stat waits for it and
        // asks one GET.
        let taken = cache
            .first_reads
            .try_acquire_many(MAX_FIRST_READS as u32)
            .unwrap();
        cache.invalidate(&s3("present"));
        let object = s3("present");
        let stat = cache.stat_reading(&object, Some(Duration::from_secs(1)), first);
        // join! polls the stat first: it is waiting for a place when the places go.
        let free_one = async {
            tokio::task::yield_now().await;
            drop(taken);
        };
        let ((_, _, bytes), ()) = tokio::join!(async { stat.await.unwrap() }, free_one);
        assert_eq!(bytes.map(|b| b.data.len()), Some(1000));
        assert_eq!(
            (
                cache.origin_requests().fetched,
                cache.origin_requests().read
            ),
            (1, 2)
        );
    }

    /// The first bytes a stat read are given to its `keep` before any stat that joined
    /// its fetch is answered: a read that follows that answer finds the bytes kept, not a
    /// block nobody fills. (Before 2026-12-06 joined stats were told first; with a gateway
    /// fetching objects ahead of a reader, whose own stat joined that fetch, 1.8–2.7% of a
    /// key-ordered cold epoch was fetched twice.)
    #[tokio::test]
    async fn joined_stats_are_answered_only_after_the_first_bytes_are_kept() {
        let (_stub, origins) = stub(FaultConfig::default()).await;
        let cache = StatCache::new(origins, Duration::from_secs(60), Duration::from_secs(1));
        let object = s3("present");
        let first = Some(ByteRange {
            start: 0,
            end: 4096,
        });
        let (keeping, kept_len) = tokio::sync::oneshot::channel::<usize>();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let fetching = cache.stat_keeping(
            &object,
            Some(Duration::from_secs(1)),
            first,
            async |_, bytes: FirstBytes| {
                let _ = keeping.send(bytes.data.len());
                let _ = released.await;
            },
        );
        let joining = async {
            assert_eq!(kept_len.await.unwrap(), 1000, "keep has the object's bytes");
            let mut joiner =
                std::pin::pin!(cache.stat_within(&object, Some(Duration::from_secs(1))));
            let answered = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(joiner.as_mut().poll(cx).is_ready())
            })
            .await;
            assert!(
                !answered,
                "a joined stat is answered before the bytes are kept"
            );
            release.send(()).unwrap();
            joiner.await.unwrap()
        };
        let (fetched, (joined, _)) = tokio::join!(fetching, joining);
        let (info, _, bytes) = fetched.unwrap();
        assert_eq!((info.size, joined.size), (1000, 1000));
        assert_eq!(bytes.map(|b| b.data.len()), Some(1000));
        assert_eq!(
            (
                cache.origin_requests().fetched,
                cache.origin_requests().read
            ),
            (0, 1),
            "one GET, no HEAD"
        );
    }

    /// A first read whose body the origin cuts off still answers the stat (its
    /// headers arrived whole), without bytes: the read fetches them itself, with its
    /// retries. Before 2026-12-04 the stat failed, and the reader got a 400.
    #[tokio::test]
    async fn a_first_read_cut_off_still_answers_the_stat_without_bytes() {
        let cut = FaultConfig {
            error_rate: 1.0,
            error_kinds: vec![talon_origin_stub::faults::FaultKind::Truncate],
            ..FaultConfig::default()
        };
        let (_stub, origins) = stub(cut).await;
        let cache = StatCache::new(origins, Duration::from_secs(60), Duration::from_secs(1));
        let first = Some(ByteRange {
            start: 0,
            end: 4096,
        });
        let (info, _, bytes) = cache
            .stat_reading(&s3("present"), Some(Duration::from_secs(1)), first)
            .await
            .unwrap();
        assert_eq!(info.size, 1000);
        assert!(bytes.is_none());
        assert_eq!(
            (
                cache.origin_requests().fetched,
                cache.origin_requests().read
            ),
            (0, 1)
        );
        // Kept as any answer is: the next stat within the age asks nothing.
        cache
            .stat_reading(&s3("present"), Some(Duration::from_secs(1)), first)
            .await
            .unwrap();
        assert_eq!(cache.origin_requests().read, 1);
    }

    /// The table is bounded by entries (not by sweeping expired ones when it doubled,
    /// as before): not-found answers within their own bound, found ones within theirs,
    /// evicted one at a time.
    #[tokio::test]
    async fn the_table_stays_within_its_bounds_whatever_is_looked_up() {
        let (_stub, origins) = stub(FaultConfig::default()).await;
        let limits = talon_metadata_cache::Limits {
            max_entries: 100,
            max_bytes: 100 * 1024,
            max_missing: 20,
        };
        let cache = StatCache::with_limits(
            origins,
            Duration::from_secs(60),
            Duration::from_secs(60),
            limits,
        );
        for i in 0..300 {
            let missing = cache.stat(&s3(&format!("missing-{i}"))).await;
            assert!(missing.is_err());
        }
        let present = cache.stat(&s3("present")).await.unwrap();
        let s = cache.table_stats();
        assert!(s.missing_entries <= 20, "{s:?}");
        assert!(s.evictions >= 280, "{s:?}");
        assert_eq!(s.entries, 1, "{s:?}");
        // The found object is answered from memory.
        let before = cache.origin_requests();
        assert_eq!(cache.stat(&s3("present")).await.unwrap(), present);
        assert_eq!(cache.origin_requests(), before);
    }
}
