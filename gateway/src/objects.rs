//! Reading objects for either front: metadata (through the cache, or the origin), the
//! client's conditions and range, and the bytes as a stream, by the front's route.
//!
//! The metadata of an object is pinned for the whole response: the version (ETag) it
//! names is part of every block the cache reads, so a response is always one version's
//! bytes.
//!
//! Declared staleness ([`Freshness`]): a read sees a write made elsewhere at most
//! `max_staleness` (T) after it, the gateway's and the workers' metadata caches
//! together. The gateway keeps metadata only until T after the origin said it, and asks
//! the workers for metadata no older than what remains (a Stat's max age); a worker
//! holding older metadata revalidates it with a conditional HEAD first. Writes through
//! this gateway (put, copy, multipart completion, delete) are seen at once: until T has
//! passed since such a write, the gateway accepts only metadata the origin gave after
//! it. The bytes come through the cache either way: the version is part of every block,
//! so a worker that still holds the old version's blocks fetches the new one's.
//!
//! Stale-if-error: when the metadata cannot be had because the origin (or every worker)
//! fails as an outage does, the last known version may be served for
//! `stale_if_error` past T, flagged as stale ([`Read::stale`]).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use talon_cache_client::{CacheClient, ReadOptions, ReaderId};
use talon_core::{ObjectId, ObjectVersion};
use talon_metadata_cache::{Lookup, MetadataCache};
use talon_protocols::conditional::Conditions;
use talon_protocols::origin::{CompactInfo, ObjectInfo, OriginClient, Origins};
use talon_protocols::range::{ByteRange, RangeSpec};
use talon_protocols::server::ListResult;
use talon_protocols::{Error, ErrorKind};

use crate::config::{Backend, Route};
use crate::listed_read_ahead::{FetchAhead, ListedReadAhead};
use crate::metrics::Outcome;
use talon_protocols::answer::Failure;

/// A stream of object bytes for an HTTP body.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static>>;

/// An answered read.
pub struct Read {
    /// Metadata of the version served.
    pub meta: ObjectInfo,
    /// The range served, `None` for the whole object.
    pub range: Option<ByteRange>,
    /// The bytes (GET), `None` for HEAD or an empty answer.
    pub body: Option<BodyStream>,
    /// How it was served.
    pub outcome: Outcome,
    /// `Some(age)` when this is the last known version served past its freshness
    /// because the origin could not be reached (stale-if-error): how long ago the origin
    /// last confirmed it.
    pub stale: Option<Duration>,
}

/// How stale object metadata may be: the gateway's one staleness setting, which
/// governs the workers' metadata caches too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    /// T: a read sees a write made elsewhere (at the origin, or through another
    /// gateway) at most this long after it was acknowledged.
    pub max_staleness: Duration,
    /// How long past T the last known version may still be served when the origin
    /// cannot be reached (5xx, throttling, timeouts, no connection); zero turns
    /// stale-if-error off.
    pub stale_if_error: Duration,
}

impl Freshness {
    /// Metadata fresh for `max_staleness`, never served stale.
    pub fn within(max_staleness: Duration) -> Freshness {
        Freshness {
            max_staleness,
            stale_if_error: Duration::ZERO,
        }
    }
}

/// Metadata, how it was had, and its staleness when served stale.
struct Meta {
    info: ObjectInfo,
    outcome: Outcome,
    stale: Option<Duration>,
}

/// An object as the gateway names it: (backend, bucket, key).
type ObjectKey = (Backend, String, String);

/// Objects written through this gateway, with when; swept when the table doubles.
#[derive(Debug, Default)]
struct RecentWrites {
    at: HashMap<ObjectKey, Instant>,
    sweep_at: usize,
}

/// [`RecentWrites`] is never swept below this many entries.
const MIN_WRITES_SWEEP_AT: usize = 1024;

/// What a front asks of a read.
#[derive(Debug, Clone, Copy)]
pub struct ReadRequest<'a> {
    /// The front's route.
    pub route: Route,
    /// The origin the front serves.
    pub backend: Backend,
    /// Bucket (container).
    pub bucket: &'a str,
    /// Key (blob).
    pub key: &'a str,
    /// The client's conditional headers.
    pub conditions: &'a Conditions,
    /// The client's range, if any.
    pub range: Option<RangeSpec>,
    /// GET (true) or HEAD (false).
    pub with_body: bool,
    /// The client the read is for: its pieces count against that client's share of
    /// the read budget (`--buffer-budget-per-client`).
    pub reader: Option<ReaderId>,
    /// Whether the body is only written, untouched, to a plain socket: cached pieces
    /// may then be pages of a mapped block file ([`ReadOptions::kernel_copies_only`]).
    pub kernel_copies_only: bool,
}

/// The objects behind the fronts: origins, the cache, and the metadata cache.
pub struct Objects {
    origins: Origins,
    cache: Option<CacheClient>,
    azure_account: String,
    freshness: Freshness,
    /// What the gateway knows of objects' metadata, with when the origin said it (or
    /// earlier: never later); bounded, evicting one entry at a time; kept compact
    /// ([`CompactInfo`]), a third of an [`ObjectInfo`]'s memory.
    known: MetadataCache<ObjectId, CompactInfo>,
    /// Listing pages kept within T ([`crate::listings`]).
    listings: crate::listings::Listings,
    /// The cluster's invalidations (from the cache client's membership polls; none
    /// without a cache).
    invalidations: std::sync::Arc<talon_metadata_cache::Invalidations>,
    /// The cluster's per-prefix freshness (likewise): T under a prefix.
    rules: std::sync::Arc<talon_metadata_cache::FreshnessRules>,
    /// The writes through this gateway that known metadata must be newer than. Its lock
    /// is held while an answer is remembered and while a write drops an entry, so that
    /// an answer older than a racing write cannot stay behind: every entry in `known`
    /// was said by the origin after the last write here to its object. Lookups do not
    /// take it.
    writes: Mutex<RecentWrites>,
    write_through: WriteThrough,
    /// Objects fetched ahead of readers going through a listed prefix in key order.
    read_ahead: ListedReadAhead,
}

/// The write-through's bounds: the largest upload kept, and all kept bytes together
/// (KiB permits), so that many concurrent small uploads cannot grow the gateway.
struct WriteThrough {
    max_bytes: u64,
    budget: std::sync::Arc<tokio::sync::Semaphore>,
}

/// A kept upload's share of the write-through budget, held until it has been pushed.
pub struct KeepPermit {
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects")
            .field("cache", &self.cache.is_some())
            .finish_non_exhaustive()
    }
}

fn cache_error(e: talon_cache_client::CacheClientError) -> Error {
    Error::new(e.kind(), e.to_string())
}

impl Objects {
    /// Objects read from `origins`, through `cache` when given, with metadata as fresh
    /// as `freshness` says.
    pub fn new(
        origins: Origins,
        cache: Option<CacheClient>,
        freshness: Freshness,
        write_through_max_bytes: u64,
        metadata: talon_metadata_cache::Limits,
        read_ahead: ListedReadAhead,
    ) -> Objects {
        let azure_account = origins
            .azure
            .as_ref()
            .map(|(a, _)| a.clone())
            .unwrap_or_default();
        let invalidations = cache
            .as_ref()
            .map(CacheClient::invalidations)
            .unwrap_or_default();
        let rules = cache
            .as_ref()
            .map(CacheClient::freshness_rules)
            .unwrap_or_default();
        Objects {
            listings: crate::listings::Listings::new(
                freshness.max_staleness,
                invalidations.clone(),
                rules.clone(),
            ),
            invalidations,
            rules,
            origins,
            cache,
            azure_account,
            freshness,
            known: MetadataCache::new(metadata, |id, info| id.held_bytes() + info.held_bytes()),
            writes: Mutex::new(RecentWrites {
                at: HashMap::new(),
                sweep_at: MIN_WRITES_SWEEP_AT,
            }),
            write_through: WriteThrough {
                max_bytes: write_through_max_bytes,
                budget: std::sync::Arc::new(tokio::sync::Semaphore::new(
                    usize::try_from((write_through_max_bytes * 8).div_ceil(1024))
                        .unwrap_or(usize::MAX)
                        .min(tokio::sync::Semaphore::MAX_PERMITS),
                )),
            },
            read_ahead,
        }
    }

    /// Learns the key order of `page`, a listing of `bucket` under `prefix` answered on
    /// `route`, for the read-ahead of readers in key order ([`crate::listed_read_ahead`]).
    pub fn listed(
        &self,
        route: Route,
        backend: Backend,
        bucket: &str,
        prefix: &str,
        page: &ListResult,
    ) {
        if route != Route::Origin && self.cache.is_some() {
            self.read_ahead.listed(backend, bucket, prefix, page);
        }
    }

    /// The objects to fetch ahead of a read of `key` on `route`, each with its place
    /// among the fetches in flight: none unless the read is the next of a listed page
    /// in key order ([`crate::listed_read_ahead`]), and only objects `may_read` allows
    /// (the reader's grants) that the cache can hold.
    pub fn to_fetch_ahead(
        &self,
        route: Route,
        backend: Backend,
        bucket: &str,
        key: &str,
        may_read: &dyn Fn(&str) -> bool,
    ) -> Vec<FetchAhead> {
        if route == Route::Origin || self.cache.is_none() || !self.read_ahead.enabled() {
            return Vec::new();
        }
        let cacheable = |k: &str| {
            may_read(k)
                && self.object_id(backend, bucket, k).is_some()
                && !self.bypasses_cache(route, backend, bucket, k)
        };
        self.read_ahead.after_read(backend, bucket, key, &cacheable)
    }

    /// Fetches `key`'s metadata and first bytes into the cache as a read of it would
    /// (one origin request for a cold object), and keeps the metadata; the bytes go to
    /// no client. Through the workers only: when they cannot answer, the origin is not
    /// asked in their place (that would cache nothing).
    pub async fn fetch_ahead(&self, backend: Backend, bucket: &str, key: &str) {
        let fetched = self
            .meta(Route::CacheOnly, backend, bucket, key, Some(0..u64::MAX))
            .await;
        if let Err(e) = &fetched {
            tracing::debug!(%bucket, %key, error = %e, "a fetch ahead of a reader failed");
        }
        self.read_ahead.ended(fetched.is_ok());
    }

    /// What the read-ahead of listed keys did, for `/metrics`.
    pub fn read_ahead_stats(&self) -> crate::listed_read_ahead::ListedReadAheadStats {
        self.read_ahead.stats()
    }

    /// Whether an upload of `len` bytes on a front with `route` should be kept for the
    /// write-through, and its share of the budget if so: a cache route, a cache, an
    /// object the cache can name, at most the configured size, and room in the budget
    /// now (never waited for).
    pub fn keep_for_write_through(
        &self,
        route: Route,
        backend: Backend,
        bucket: &str,
        key: &str,
        len: u64,
    ) -> Option<KeepPermit> {
        if route == Route::Origin
            || self.cache.is_none()
            || len == 0
            || len > self.write_through.max_bytes
            || self.object_id(backend, bucket, key).is_none()
        {
            return None;
        }
        let kib = u32::try_from(len.div_ceil(1024)).ok()?;
        let permit = self
            .write_through
            .budget
            .clone()
            .try_acquire_many_owned(kib)
            .ok()?;
        Some(KeepPermit { _permit: permit })
    }

    /// The cache client, on a gateway with a cache.
    pub fn cache(&self) -> Option<&CacheClient> {
        self.cache.as_ref()
    }

    /// The origin client of a backend.
    ///
    /// # Errors
    /// [`ErrorKind::NotImplemented`] when that origin is not configured.
    pub fn origin(&self, backend: Backend) -> Result<&OriginClient, Error> {
        match backend {
            Backend::S3 => self.origins.s3.as_ref(),
            Backend::Azure => self.origins.azure.as_ref().map(|(_, c)| c),
        }
        .ok_or_else(|| {
            Error::new(
                ErrorKind::NotImplemented,
                format!("no {} origin is configured", backend.name()),
            )
        })
    }

    /// The cache's identity of an object, or `None` when the key cannot be a block
    /// identity (empty, `.` or `..` segments, a trailing `/`): such keys bypass the cache.
    pub fn object_id(&self, backend: Backend, bucket: &str, key: &str) -> Option<ObjectId> {
        match backend {
            Backend::S3 => ObjectId::s3(bucket, key).ok(),
            Backend::Azure => ObjectId::azure(&self.azure_account, bucket, key).ok(),
        }
    }

    /// Records a write through the gateway (put, copy, multipart completion, delete):
    /// until T has passed, only metadata the origin gave after it is accepted for that
    /// object. Call it once the origin has acknowledged the write.
    pub fn wrote(&self, backend: Backend, bucket: &str, key: &str) {
        self.saw_new_version(backend, bucket, key);
        self.listings.bucket_changed(backend, bucket);
    }

    /// How many of the cluster's invalidations and freshness rules are in force here.
    pub fn cluster_rules(&self) -> (usize, usize) {
        (self.invalidations.len(), self.rules.len())
    }

    /// The key of a listing of `spec` on `bucket`, for [`listings`](Self::listings).
    pub fn listing_key(
        &self,
        backend: Backend,
        bucket: &str,
        spec: &talon_protocols::server::ListSpec<'_>,
    ) -> crate::listings::ListingKey {
        let key_path = match backend {
            Backend::S3 => format!("s3/{bucket}/{}", spec.prefix),
            Backend::Azure => format!("az/{}/{bucket}/{}", self.azure_account, spec.prefix),
        };
        crate::listings::ListingKey::new(backend, bucket, spec, key_path)
    }

    /// The listing pages kept within T.
    pub fn listings(&self) -> &crate::listings::Listings {
        &self.listings
    }

    /// Records that the origin holds a newer version than any metadata known now (a
    /// write acknowledged, or a read pinned to the old version refused): until T has
    /// passed, only metadata the origin gives from now on is accepted for the object.
    fn saw_new_version(&self, backend: Backend, bucket: &str, key: &str) {
        let object = (backend, bucket.to_owned(), key.to_owned());
        let mut written = self.lock_writes();
        if let Some(id) = self.object_id(backend, bucket, key) {
            self.known.remove(&id);
        }
        if written.at.len() >= written.sweep_at {
            written
                .at
                .retain(|(b, bk, k), at| at.elapsed() < self.bound_for(*b, bk, k));
            written.sweep_at = (written.at.len() * 2).max(MIN_WRITES_SWEEP_AT);
        }
        written.at.insert(object, Instant::now());
    }

    fn lock_writes(&self) -> std::sync::MutexGuard<'_, RecentWrites> {
        self.writes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the origins' per-prefix request limit did so far, for `/metrics`.
    pub fn origin_request_limit(
        &self,
    ) -> talon_protocols::origin::request_limit::RequestLimitStats {
        self.origins.request_limit_stats()
    }

    /// What refreshing the S3 origin's credentials did, for `/metrics`.
    pub fn origin_credential_stats(
        &self,
    ) -> Option<talon_protocols::origin::credentials::RefreshStats> {
        self.origins.s3_credential_stats()
    }

    /// What refreshing the Azure origin's credentials did, for `/metrics`.
    pub fn azure_origin_credential_stats(
        &self,
    ) -> Option<talon_protocols::origin::credentials::RefreshStats> {
        self.origins.azure_credential_stats()
    }

    /// The metadata cache's holdings and counts, for `/metrics`.
    pub fn metadata_stats(&self) -> talon_metadata_cache::CacheStats {
        self.known.stats()
    }

    /// Fills the cache with the bytes of an object the origin has just stored through
    /// this gateway and answered with `etag` (write-through: the origin always gets
    /// every byte first), so that the writer's next read is a hit. Best effort and
    /// never the write's failure: without a cache, for keys that bypass it, or when a
    /// push fails, reads simply fill from the origin as usual.
    pub async fn write_through(
        &self,
        backend: Backend,
        bucket: &str,
        key: &str,
        etag: &str,
        bytes: &Bytes,
        _permit: KeepPermit,
    ) {
        let (Some(cache), Some(id)) = (&self.cache, self.object_id(backend, bucket, key)) else {
            return;
        };
        if bytes.is_empty() {
            return;
        }
        let Ok(version) = ObjectVersion::from_etag(etag) else {
            return;
        };
        if let Err(e) = cache.put_object(&id, &version, bytes).await {
            tracing::debug!(error = %e, %bucket, %key, "write-through to the cache failed; reads will fill from the origin");
        }
    }

    /// When the object was last written through this gateway, if less than T ago.
    fn written_at(&self, backend: Backend, bucket: &str, key: &str) -> Option<Instant> {
        self.lock_writes()
            .at
            .get(&(backend, bucket.to_owned(), key.to_owned()))
            .copied()
            .filter(|at| at.elapsed() < self.bound_for(backend, bucket, key))
    }

    /// How long what was learned of an object may be answered: T, or the cluster's
    /// bound for its prefix (`talon freshness`). A write through this gateway bounds
    /// what may be answered for the object as long.
    fn bound_for(&self, backend: Backend, bucket: &str, key: &str) -> Duration {
        self.rules.bound(
            || {
                self.object_id(backend, bucket, key)
                    .map(|id| id.key_path())
                    .unwrap_or_default()
            },
            self.freshness.max_staleness,
        )
    }

    /// Drops the cached metadata of an object (it changed under a read).
    pub fn invalidate(&self, backend: Backend, bucket: &str, key: &str) {
        if let Some(id) = self.object_id(backend, bucket, key) {
            self.known.remove(&id);
        }
    }

    /// Keeps metadata the origin said at `observed`, unless a write through this
    /// gateway came after that.
    fn remember(
        &self,
        backend: Backend,
        bucket: &str,
        key: &str,
        observed: Instant,
        meta: &ObjectInfo,
    ) {
        let Some(id) = self.object_id(backend, bucket, key) else {
            return;
        };
        let object = (backend, bucket.to_owned(), key.to_owned());
        let written = self.lock_writes();
        if written.at.get(&object).is_some_and(|w| observed < *w) {
            return;
        }
        // Inserted while the writes are locked (see `writes`).
        self.known
            .insert(id, observed, CompactInfo::from_info(meta));
    }

    async fn origin_meta(
        &self,
        backend: Backend,
        bucket: &str,
        key: &str,
    ) -> Result<ObjectInfo, Error> {
        let info = self.origin(backend)?.head(bucket, key).await?;
        Ok(info)
    }

    /// Whether reads of this object go straight to the origin.
    fn bypasses_cache(&self, route: Route, backend: Backend, bucket: &str, key: &str) -> bool {
        route == Route::Origin
            || self.cache.is_none()
            || self.object_id(backend, bucket, key).is_none()
    }

    /// A GET that bypasses the cache, in one origin request: the metadata comes from the
    /// answer's own headers, so it and the bytes are one version's. `Ok(None)` when that
    /// answer cannot stand on its own and the caller must take the two-step path (HEAD,
    /// then a GET pinned with `If-Match`): a 416, whose `Content-Range` needs the size; a
    /// range the origin ignored; a suffix range at an Azure origin, which has none.
    async fn read_origin_once(
        &self,
        backend: Backend,
        bucket: &str,
        key: &str,
        range: Option<RangeSpec>,
    ) -> Result<Option<Read>, Failure> {
        if backend == Backend::Azure && range.is_some_and(RangeSpec::is_suffix) {
            return Ok(None);
        }
        let resp = match self.origin(backend)?.get_spec(bucket, key, range).await {
            Ok(resp) => resp,
            Err(e) if e.kind() == ErrorKind::InvalidRange => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if !resp.size_stated {
            // `bytes a-b/*`: the answer cannot say the object's size.
            return Ok(None);
        }
        let meta = resp.info;
        let served = match range.map(|spec| spec.resolve(meta.size)) {
            None => None,
            Some(Ok(asked)) => Some(asked),
            // The origin served a range its own size says is unsatisfiable.
            Some(Err(_)) => return Ok(None),
        };
        talon_protocols::range::check_served_exactly(served, resp.range, Some(meta.size))?;
        let body: Option<BodyStream> = (meta.size > 0).then(|| {
            Box::pin(
                resp.body
                    .map(|r| r.map_err(|e| std::io::Error::other(e.message().to_owned()))),
            ) as BodyStream
        });
        Ok(Some(Read {
            meta,
            range: served,
            body,
            outcome: Outcome::Bypass,
            stale: None,
        }))
    }

    /// A key found missing through the cache, told apart from a missing bucket (S3 and
    /// Azure answer each differently; a worker's miss says only "not found"): the
    /// origin is asked for the bucket, on misses only.
    async fn not_found(&self, backend: Backend, bucket: &str, missing: Error) -> Error {
        match self.origin(backend) {
            Ok(origin) => match origin.head_bucket(bucket).await {
                Err(e) if e.kind() == ErrorKind::NoSuchBucket => e,
                _ => missing,
            },
            Err(_) => missing,
        }
    }

    /// Metadata through the route: the cache (with fallback for `Cache`), or the origin;
    /// no older than T, and after the last write through this gateway; or, when the
    /// origin cannot be reached, the last known version within stale-if-error.
    async fn meta(
        &self,
        route: Route,
        backend: Backend,
        bucket: &str,
        key: &str,
        next: Option<std::ops::Range<u64>>,
    ) -> Result<Meta, Error> {
        let id = self.object_id(backend, bucket, key);
        let (cache, id) = match (route, &self.cache, id) {
            (Route::Origin, _, _) | (_, None, _) | (_, _, None) => {
                return Ok(Meta {
                    info: self.origin_meta(backend, bucket, key).await?,
                    outcome: Outcome::Bypass,
                    stale: None,
                });
            }
            (_, Some(cache), Some(id)) => (cache, id),
        };
        let asked = Instant::now();
        // T, or the cluster's bound for the object's prefix (`talon freshness`).
        let t = self
            .rules
            .bound(|| id.key_path(), self.freshness.max_staleness);
        // An invalidation of its prefix (`talon invalidate`) heard since it was learned
        // makes an entry unanswerable, even stale.
        let invalidated = self.invalidations.since(|| id.key_path());
        // Newer than any write through this gateway (`writes`' invariant).
        let known = match self.known.lookup(&id, t, asked).map(|c| c.to_info()) {
            Lookup::Fresh { value, age }
                if invalidated.is_none_or(|heard| asked.checked_sub(age) > Some(heard)) =>
            {
                return Ok(Meta {
                    info: value,
                    outcome: Outcome::Hit,
                    stale: None,
                });
            }
            Lookup::Expired { value, observed }
                if invalidated.is_none_or(|heard| observed > heard) =>
            {
                Some((observed, value))
            }
            Lookup::Fresh { .. }
            | Lookup::Expired { .. }
            | Lookup::Missing { .. }
            | Lookup::Absent => None,
        };
        // What the workers may answer with: no older than T, nor than the last write,
        // nor than an invalidation.
        let written = self.written_at(backend, bucket, key);
        let newer_than = written.max(invalidated);
        let max_age = newer_than.map_or(t, |w| t.min(asked.saturating_duration_since(w)));
        // After a write through this gateway its bytes are likely cached already (the
        // write-through): the metadata alone is asked for, with a HEAD if need be. (An
        // invalidation leaves a cold read its one request.)
        let next = next.filter(|_| written.is_none());
        match self
            .meta_from_cache(
                cache, &id, route, backend, bucket, key, asked, max_age, next,
            )
            .await
        {
            Err(e) if e.kind().is_retryable() => match known {
                Some((observed, info))
                    if asked.saturating_duration_since(observed)
                        < t + self.freshness.stale_if_error =>
                {
                    tracing::warn!(%bucket, %key, error = %e, "serving the last known version (stale-if-error)");
                    Ok(Meta {
                        info,
                        outcome: Outcome::Hit,
                        stale: Some(asked.saturating_duration_since(observed)),
                    })
                }
                _ => Err(e),
            },
            other => other,
        }
    }

    /// Metadata from the workers (or the origin when they cannot answer and the route
    /// allows it), no older than `max_age`, remembered with when the origin said it.
    #[allow(clippy::too_many_arguments)]
    async fn meta_from_cache(
        &self,
        cache: &CacheClient,
        id: &ObjectId,
        route: Route,
        backend: Backend,
        bucket: &str,
        key: &str,
        asked: Instant,
        max_age: Duration,
        next: Option<std::ops::Range<u64>>,
    ) -> Result<Meta, Error> {
        let options = ReadOptions {
            reader: None,
            origin_fallback: route == Route::Cache,
            kernel_copies_only: false,
        };
        match cache.stat_reading(id, options, Some(max_age), next).await {
            Ok(s) => {
                let outcome = if s.from_origin {
                    Outcome::Fallback
                } else {
                    Outcome::Hit
                };
                // Taken from when it was asked, not answered: never younger than it is.
                let observed = asked.checked_sub(s.age).unwrap_or(asked);
                let info = match s.into_info() {
                    Some(info) => info,
                    // The headers cannot travel through the cache: take the metadata
                    // from the origin (its version then names the blocks read).
                    None => self.origin_meta(backend, bucket, key).await?,
                };
                self.remember(backend, bucket, key, observed, &info);
                Ok(Meta {
                    info,
                    outcome,
                    stale: None,
                })
            }
            Err(e) if !e.is_transient() => {
                let e = cache_error(e);
                if e.kind() != ErrorKind::NoSuchKey {
                    return Err(e);
                }
                // A worker's stat cannot tell a missing bucket from a missing key: ask
                // the origin which it is (only on this path), as S3 and Azure answer.
                match self.origin(backend)?.head_bucket(bucket).await {
                    Err(b) if b.kind() == ErrorKind::NoSuchBucket => Err(b),
                    _ => Err(e),
                }
            }
            // The origin answered the fallback: its failure, in its own terms.
            Err(e @ talon_cache_client::CacheClientError::Origin(..)) => Err(cache_error(e)),
            Err(e) => Err(Error::new(
                ErrorKind::ServiceUnavailable,
                format!("the cache is unavailable: {e}"),
            )),
        }
    }

    /// Serves a read: metadata, conditions, range, and (for a GET) the bytes.
    ///
    /// # Errors
    /// A [`Failure`] in the client's terms: not found, 304/412 with the entity headers,
    /// 416 with `Content-Range`, or the cache's or origin's failure.
    pub async fn read(&self, req: ReadRequest<'_>) -> Result<Read, Failure> {
        let ReadRequest {
            route,
            backend,
            bucket,
            key,
            conditions,
            range,
            with_body,
            reader,
            kernel_copies_only,
        } = req;
        if with_body
            && conditions.is_empty()
            && self.bypasses_cache(route, backend, bucket, key)
            && let Some(read) = self.read_origin_once(backend, bucket, key, range).await?
        {
            return Ok(read);
        }
        // The bytes this read will ask for first, when known before the object's size:
        // a metadata home that must ask the origin fetches them with the metadata (one
        // origin request). Not for HEADs, suffix ranges (their offset needs the size)
        // or conditional reads (which may need no bytes at all).
        let next = (with_body && conditions.is_empty())
            .then_some(range)
            .and_then(|range| match range {
                None => Some(0..u64::MAX),
                Some(RangeSpec::Bounded { first, last }) => Some(first..last.saturating_add(1)),
                Some(RangeSpec::From { first }) => Some(first..u64::MAX),
                Some(_) => None,
            });
        let mut retried = false;
        loop {
            let Meta {
                info: meta,
                outcome,
                stale,
            } = match self.meta(route, backend, bucket, key, next.clone()).await {
                Err(e) if e.kind() == ErrorKind::NoSuchKey => {
                    return Err(self.not_found(backend, bucket, e).await.into());
                }
                other => other?,
            };
            let resolved = talon_protocols::server::resolve_read(&meta, conditions, range)?;
            let (start, end) = resolved.map(|r| (r.start, r.end)).unwrap_or((0, meta.size));
            if !with_body || end == start {
                return Ok(Read {
                    meta,
                    range: resolved,
                    body: None,
                    outcome,
                    stale,
                });
            }
            let (body, outcome) = match outcome {
                // Read through the cache: its client alone decides whether a piece no
                // worker can serve goes to the origin (on route `cache`), piece by
                // piece, pinned to this version.
                Outcome::Hit | Outcome::Fallback => {
                    let (Some(cache), Some(id)) =
                        (&self.cache, self.object_id(backend, bucket, key))
                    else {
                        return Err(
                            Error::new(ErrorKind::InternalError, "the cache vanished").into()
                        );
                    };
                    let version = ObjectVersion::from_etag(&meta.etag)
                        .map_err(|e| Error::new(ErrorKind::InternalError, e.to_string()))?;
                    let options = ReadOptions {
                        reader,
                        origin_fallback: route == Route::Cache,
                        kernel_copies_only,
                    };
                    let (mut stream, sources) = cache
                        .read_range_with(options, &id, &version, meta.size, start..end)
                        .map_err(cache_error)?;
                    // The first piece arrives before the response starts: a failure
                    // there is a clean error answer rather than a cut body, and the
                    // pieces in by then say whether this read was a hit or a fill.
                    let first = match stream.next().await {
                        Some(Ok(bytes)) => bytes,
                        Some(Err(e)) => {
                            let e = cache_error(e);
                            if e.kind() == ErrorKind::PreconditionFailed && !retried {
                                // The origin moved on from the version pinned (a worker's
                                // fill was refused): nothing is sent yet, so this read
                                // starts again on the version the origin holds now.
                                self.saw_new_version(backend, bucket, key);
                                retried = true;
                                continue;
                            }
                            return Err(e.into());
                        }
                        None => Bytes::new(),
                    };
                    let outcome = if outcome == Outcome::Fallback || sources.fallbacks() > 0 {
                        Outcome::Fallback
                    } else if sources.fills() > 0 {
                        Outcome::Fill
                    } else {
                        Outcome::Hit
                    };
                    let stream = futures_util::stream::once(async move { Ok(first) }).chain(stream);
                    let stream: BodyStream = Box::pin(
                        stream.map(|r| r.map_err(|e| std::io::Error::other(e.to_string()))),
                    );
                    (stream, outcome)
                }
                _ => {
                    let origin = self.origin(backend)?;
                    let pinned =
                        talon_protocols::conditional::normalize_etag(&meta.etag).to_owned();
                    match origin.get(bucket, key, resolved, Some(&pinned)).await {
                        Ok(resp) => {
                            let stream: BodyStream = Box::pin(resp.body.map(|r| {
                                r.map_err(|e| std::io::Error::other(e.message().to_owned()))
                            }));
                            (stream, outcome)
                        }
                        Err(e) if e.kind() == ErrorKind::PreconditionFailed && !retried => {
                            // The object changed between its metadata and its bytes.
                            self.saw_new_version(backend, bucket, key);
                            retried = true;
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            };
            return Ok(Read {
                meta,
                range: resolved,
                body: Some(body),
                outcome,
                stale,
            });
        }
    }
}
