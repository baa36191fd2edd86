//! The gateway as an [`ObjectBackend`]: reads through its route (the cache, with origin
//! fallback, or the origin), writes to the origin once (with write-through to the
//! cache), listings and bucket operations from the origin, and, against an S3 origin,
//! the operations the gateway does not interpret relayed as they are.
//!
//! One `GatewayBackend` serves one request on one front: it knows who the reader is
//! (the read budget's shares) and keeps how a read was served for the metrics.

use std::sync::{Arc, Mutex};

use futures_util::StreamExt as _;
use http::{Method, StatusCode};
use talon_cache_client::ReaderId;
use talon_protocols::access::{Access, Action, Need, Resource};
use talon_protocols::answer::Failure;
use talon_protocols::answer::header;
use talon_protocols::azure::request::AzureOperation;
use talon_protocols::azure::xml::BlockListItem;
use talon_protocols::block_staging::{STAGING_PREFIX, is_staging_key};
use talon_protocols::conditional::DeleteConditions;
use talon_protocols::origin::{BucketSummary, ForwardRequest, ListOptions, OriginBody};
use talon_protocols::s3::request::S3Operation;
use talon_protocols::server::{
    AnswerBody, BlockLists, Copied, CopySpec, ListFrom, ListResult, ListSpec, ListedObject,
    ObjectAttributes, ObjectBackend, ObjectRead, Operation, PartBounds, PartCopySpec, PartSummary,
    ReadSpec, Relay, RelayBody, Target, Upload, WriteSpec, Written, stream_body,
};
use talon_protocols::upload::settle;
use talon_protocols::{Error, ErrorKind};

use crate::Gateway;
use crate::blocks_over_s3;
use crate::config::{Backend, Route};
use crate::copies;
use crate::metrics::Outcome;
use crate::multipart_over_azure;
use crate::objects::ReadRequest;

/// The gateway, for one request on one front.
pub struct GatewayBackend {
    gw: Arc<Gateway>,
    /// The front's protocol, as the metrics name it (`s3`, `azure`).
    protocol: &'static str,
    route: Route,
    origin: Backend,
    reader: Option<ReaderId>,
    /// How a read was served, and whether from the last known version past its bound;
    /// `None` until one was.
    served: Mutex<Option<(Outcome, bool)>>,
}

impl GatewayBackend {
    /// Starts the fetches ahead of a read of `key` that continues a listed page in key
    /// order ([`crate::listed_read_ahead`]), of objects `access` may read; each runs on
    /// its own, holding its place.
    fn fetch_ahead_of(&self, bucket: &str, key: &str, access: Access<'_>) {
        let may_read = |k: &str| {
            access.allows(Need {
                action: Action::Read,
                resource: Resource::Object { bucket, key: k },
            })
        };
        for ahead in self
            .gw
            .objects
            .to_fetch_ahead(self.route, self.origin, bucket, key, &may_read)
        {
            let (gw, backend, bucket) = (self.gw.clone(), self.origin, bucket.to_owned());
            tokio::spawn(async move {
                gw.objects.fetch_ahead(backend, &bucket, &ahead.key).await;
                drop(ahead.place);
            });
        }
    }

    /// One listing page from the origin, in the front's terms.
    async fn list_at_origin(
        &self,
        bucket: &str,
        spec: &ListSpec<'_>,
    ) -> Result<ListResult, Failure> {
        // An S3 origin resumes a V1 listing after the last key; an Azure origin only
        // from its own marker, which the gateway therefore hands out as the V1 marker.
        let (token, start_after) = match (spec.from, self.origin) {
            (ListFrom::Start, _) => (None, None),
            (ListFrom::AfterKey(k), _) | (ListFrom::Marker(k), Backend::S3) => (None, Some(k)),
            (ListFrom::Token(t), _) | (ListFrom::Marker(t), Backend::Azure) => (Some(t), None),
        };
        let origin = self.client()?;
        // Over an S3 origin every listed object with metadata costs an origin HEAD:
        // such pages are capped, and the client pages on (SEC-20).
        let heads = spec.include_metadata && self.origin == Backend::S3;
        let max_keys = if heads {
            spec.max_keys.min(MAX_LISTED_WITH_HEADS)
        } else {
            spec.max_keys
        };
        let mut page = origin
            .list_with(
                bucket,
                &ListOptions {
                    prefix: spec.prefix,
                    delimiter: spec.delimiter,
                    token,
                    start_after,
                    max_keys: Some(max_keys),
                    include_metadata: spec.include_metadata,
                },
            )
            .await?;
        if heads {
            // An S3 listing carries no metadata: ask for each object's, a few at a time.
            let keys: Vec<String> = page.objects.iter().map(|o| o.key.clone()).collect();
            let found: Vec<_> = futures_util::stream::iter(keys)
                .map(|key| async move { origin.head(bucket, &key).await })
                .buffered(LISTING_HEADS_IN_FLIGHT)
                .collect()
                .await;
            for (object, head) in page.objects.iter_mut().zip(found) {
                object.user_metadata = match head {
                    Ok(info) => Some(info.headers.user_metadata.into_iter().collect()),
                    // Deleted since the listing: listed without metadata, as it was then.
                    Err(e) if e.kind() == ErrorKind::NoSuchKey => Some(Default::default()),
                    Err(e) => return Err(e.into()),
                };
            }
        }
        let is_truncated = page.next_token.is_some();
        let next_marker = match self.origin {
            Backend::S3 => {
                let last_key = page.objects.last().map(|o| o.key.clone());
                last_key.max(page.common_prefixes.last().cloned())
            }
            Backend::Azure => page.next_token.clone(),
        };
        // Staged Azure blocks and block lists are the gateway's own (blocks_over_s3),
        // whichever origin (or other front of one store) the listing comes from; the
        // page's marker still resumes after them.
        page.objects.retain(|o| !is_staging_key(&o.key));
        page.common_prefixes.retain(|p| !is_staging_key(p));
        Ok(ListResult {
            objects: page
                .objects
                .into_iter()
                .map(|o| ListedObject {
                    key: o.key,
                    last_modified: o.last_modified.unwrap_or(std::time::UNIX_EPOCH),
                    etag: o.etag,
                    size: o.size,
                    content_type: o.content_type,
                    content_md5: o.content_md5,
                    user_metadata: o.user_metadata.map(|m| m.into_iter().collect()),
                })
                .collect(),
            common_prefixes: page.common_prefixes,
            is_truncated,
            next_marker: next_marker.filter(|_| is_truncated),
            next_token: page.next_token,
        })
    }

    /// The gateway for a request on a front with `route` over the `origin` backend,
    /// from `reader`.
    pub fn new(
        gw: Arc<Gateway>,
        protocol: &'static str,
        route: Route,
        origin: Backend,
        reader: Option<ReaderId>,
    ) -> GatewayBackend {
        GatewayBackend {
            gw,
            protocol,
            route,
            origin,
            reader,
            served: Mutex::new(None),
        }
    }

    /// How the request was served, for the metrics: a read's own outcome, otherwise
    /// the origin (or a failure); and whether the read was answered stale.
    fn served_as(&self, failed: bool) -> (Outcome, bool) {
        if failed {
            return (Outcome::Failed, false);
        }
        self.served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .unwrap_or((Outcome::Origin, false))
    }

    /// The answer of a request this backend served, counted in the gateway's metrics
    /// (operation, route, outcome, and the time since `started`).
    pub fn answer(
        &self,
        handled: talon_protocols::server::Handled,
        started: std::time::Instant,
        asked: Option<crate::access_log::Asked>,
    ) -> axum::response::Response {
        let (outcome, stale) = self.served_as(handled.failed);
        let metrics = &self.gw.metrics;
        metrics.request(self.protocol, handled.operation, self.route.name(), outcome);
        metrics.latency(self.protocol, handled.operation, started.elapsed());
        if let (Some(log), Some(asked)) = (&self.gw.access_log, &asked) {
            log.record(self.protocol, &handled, asked, outcome, started);
        }
        let mut response = handled.response;
        if self.gw.cache_status
            && let Some(value) = crate::cache_status::cache_status(outcome, stale)
        {
            response
                .headers_mut()
                .insert(crate::cache_status::CACHE_STATUS, value);
        }
        response.map(axum::body::Body::new)
    }

    fn client(&self) -> Result<&talon_protocols::origin::OriginClient, Error> {
        self.gw.objects.origin(self.origin)
    }

    /// The origin, for an Azure block operation this backend serves itself: over an
    /// Azure origin those are relayed ([`ObjectBackend::relays`]), so only an S3 origin
    /// reaches here.
    fn s3_origin_for(
        &self,
        operation: &str,
    ) -> Result<&talon_protocols::origin::OriginClient, Error> {
        match self.origin {
            Backend::S3 => self.client(),
            Backend::Azure => Err(Error::new(
                ErrorKind::NotImplemented,
                format!("{operation} is relayed to an Azure origin"),
            )),
        }
    }

    /// The origin, for an S3 multipart operation this backend serves itself: over an S3
    /// origin those are relayed ([`ObjectBackend::relays`]), so only an Azure origin
    /// reaches here.
    fn azure_origin_for(
        &self,
        operation: &str,
    ) -> Result<&talon_protocols::origin::OriginClient, Error> {
        match self.origin {
            Backend::Azure => self.client(),
            Backend::S3 => Err(Error::new(
                ErrorKind::NotImplemented,
                format!("{operation} is relayed to an S3 origin"),
            )),
        }
    }
}

/// S3 operations the gateway relays to an S3 origin as they are.
///
/// Not ListObjectVersions: the gateway answers it from its own listing, each object as
/// its `null` version, the only version any read through Talon may name. Relayed, it
/// named the blocks Azure clients stage (every listing leaves them out), and an origin
/// without versioning (s3s-fs) answers it NotImplemented.
fn relayed_to_s3(op: S3Operation) -> bool {
    use S3Operation::*;
    matches!(
        op,
        CopyObject
            | CreateMultipartUpload
            | UploadPart
            | UploadPartCopy
            | CompleteMultipartUpload
            | AbortMultipartUpload
            | ListParts
            | ListMultipartUploads
            | GetObjectAttributes
            | CreateBucket
            | DeleteBucket
    )
}

fn method_of(op: S3Operation) -> Method {
    use S3Operation::*;
    match op {
        CopyObject | UploadPart | UploadPartCopy | CreateBucket | PutObject => Method::PUT,
        CreateMultipartUpload | CompleteMultipartUpload | DeleteObjects => Method::POST,
        AbortMultipartUpload | DeleteBucket | DeleteObject => Method::DELETE,
        HeadBucket | HeadObject => Method::HEAD,
        _ => Method::GET,
    }
}

/// Azure operations the gateway relays to an Azure origin as they are.
/// Refuses the keys a gateway keeps for itself: the blocks Azure clients staged at an
/// S3 origin, and their block lists ([`talon_protocols::block_staging`]). Listings
/// leave them out; no other operation of either front may read, write or delete them
/// (the red-team review's RT-10: a read-only SAS read other writers' uncommitted
/// blocks). Every operation that names a key calls this first.
fn reachable(keys: &[&str]) -> Result<(), Error> {
    match keys.iter().find(|key| is_staging_key(key)) {
        Some(key) => Err(Error::new(
            ErrorKind::AccessDenied,
            format!(
                "{key:?} is under {STAGING_PREFIX}, which this gateway keeps for the blocks \
                 Azure clients stage: no request may name it"
            ),
        )),
        None => Ok(()),
    }
}

fn relayed_to_azure(op: AzureOperation) -> bool {
    use AzureOperation::*;
    matches!(
        op,
        PutBlock | PutBlockList | GetBlockList | CreateContainer | DeleteContainer
    )
}

/// Origin HEADs in flight while a listing with metadata over an S3 origin gathers it.
const LISTING_HEADS_IN_FLIGHT: usize = 8;

/// Most objects of a listing page with metadata over an S3 origin: each costs one
/// origin HEAD, so one request costs at most this many.
const MAX_LISTED_WITH_HEADS: usize = 100;

impl ObjectBackend for GatewayBackend {
    /// The origin's buckets by name, as S3 and Azure both list them (and as the fronts'
    /// paging assumes), whatever order the origin gave (moto gives creation order).
    async fn list_buckets(&self) -> Result<Vec<BucketSummary>, Failure> {
        let mut buckets = self.client()?.list_buckets().await?;
        buckets.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(buckets)
    }

    async fn head_bucket(&self, bucket: &str) -> Result<BucketSummary, Failure> {
        self.client()?.head_bucket(bucket).await?;
        Ok(BucketSummary {
            name: bucket.to_owned(),
            created: None,
        })
    }

    /// CreateBucket over an Azure origin, Create Container over an S3 origin (each is
    /// relayed as it is to an origin of its own protocol). An S3 origin in us-east-1
    /// answers its owner re-creating a bucket with 200, where Azure's answer is 409
    /// ContainerAlreadyExists: over S3 the bucket is looked for first.
    async fn create_bucket(&self, bucket: &str) -> Result<BucketSummary, Failure> {
        let client = self.client()?;
        if self.origin == Backend::S3 {
            match client.head_bucket(bucket).await {
                Ok(()) => {
                    return Err(Error::new(
                        ErrorKind::BucketAlreadyExists,
                        "The specified container already exists.",
                    )
                    .into());
                }
                Err(e) if e.kind() == ErrorKind::NoSuchBucket => {}
                Err(e) => return Err(e.into()),
            }
        }
        client.create_bucket(bucket).await?;
        self.gw
            .objects
            .listings()
            .bucket_changed(self.origin, bucket);
        Ok(BucketSummary {
            name: bucket.to_owned(),
            created: None,
        })
    }

    /// DeleteBucket over an Azure origin, Delete Container over an S3 origin. S3 deletes
    /// only an empty bucket, Azure a container with everything in it: across protocols
    /// the gateway keeps S3's rule, so neither client loses objects it did not ask to
    /// delete (an object written between the check and the delete is the one exception,
    /// docs/gateway.md).
    async fn delete_bucket(&self, bucket: &str) -> Result<(), Failure> {
        let client = self.client()?;
        if self.origin == Backend::Azure {
            let page = client
                .list_with(
                    bucket,
                    &ListOptions {
                        prefix: "",
                        delimiter: None,
                        token: None,
                        start_after: None,
                        max_keys: Some(1),
                        include_metadata: false,
                    },
                )
                .await?;
            if !page.objects.is_empty() {
                return Err(Error::new(
                    ErrorKind::BucketNotEmpty,
                    "The bucket you tried to delete is not empty.",
                )
                .into());
            }
        }
        client.delete_bucket(bucket).await?;
        self.gw
            .objects
            .listings()
            .bucket_changed(self.origin, bucket);
        Ok(())
    }

    async fn list(&self, bucket: &str, spec: &ListSpec<'_>) -> Result<ListResult, Failure> {
        // Through the cache, a page the origin gave within T (and after this gateway's
        // last write to the bucket) is answered from memory.
        let kept = (self.route == Route::Cache)
            .then(|| self.gw.objects.listing_key(self.origin, bucket, spec));
        if let Some(page) = kept
            .as_ref()
            .and_then(|key| self.gw.objects.listings().get(key))
        {
            *self.served.lock().unwrap_or_else(|p| p.into_inner()) = Some((Outcome::Hit, false));
            self.gw
                .objects
                .listed(self.route, self.origin, bucket, spec.prefix, &page);
            return Ok(page);
        }
        let sent = std::time::Instant::now();
        let page = self.list_at_origin(bucket, spec).await?;
        if let Some(key) = kept {
            self.gw.objects.listings().keep(key, sent, &page);
        }
        self.gw
            .objects
            .listed(self.route, self.origin, bucket, spec.prefix, &page);
        Ok(page)
    }

    async fn read(&self, read: ReadSpec<'_>) -> Result<ObjectRead, Failure> {
        reachable(&[read.object.key])?;
        if let (true, Some(access)) = (read.with_body, read.reader_access) {
            self.fetch_ahead_of(read.object.bucket, read.object.key, access);
        }
        let done = self
            .gw
            .objects
            .read(ReadRequest {
                route: self.route,
                backend: self.origin,
                bucket: read.object.bucket,
                key: read.object.key,
                conditions: read.conditions,
                range: read.range,
                with_body: read.with_body,
                reader: self.reader,
                // Over TLS the bytes are encrypted in user space.
                kernel_copies_only: read.body_untouched && !self.gw.https,
            })
            .await?;
        *self.served.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((done.outcome, done.stale.is_some()));
        if done.stale.is_some() {
            self.gw.metrics.stale_served();
        }
        let body = done.body.map(|stream| {
            let (metrics, protocol) = (self.gw.metrics.clone(), self.protocol);
            stream_body(stream.inspect(move |c| {
                if let Ok(b) = c {
                    metrics.bytes_out(protocol, b.len() as u64);
                }
            }))
        });
        Ok(ObjectRead {
            info: done.meta,
            range: done.range,
            body,
            stale: done.stale,
        })
    }

    /// An S3 origin is asked where the part lies (`HEAD ?partNumber=n`: only it knows
    /// its multipart boundaries); at an Azure origin a part is a committed block
    /// ([`multipart_over_azure::part_bounds`]: how S3 uploads through a gateway are
    /// kept there). The part's bytes are then read through the route like any range.
    async fn part(&self, object: Target<'_>, number: u32) -> Result<PartBounds, Failure> {
        reachable(&[object.key])?;
        let unsatisfiable = || {
            Error::new(
                ErrorKind::InvalidPartNumber,
                "The requested partnumber is not satisfiable",
            )
        };
        if self.origin == Backend::Azure {
            return Ok(multipart_over_azure::part_bounds(self.client()?, object, number).await?);
        }
        let query = format!("partNumber={number}");
        let resp = self
            .client()?
            .forward(ForwardRequest {
                method: Method::HEAD,
                bucket: Some(object.bucket),
                key: Some(object.key),
                query: &query,
                headers: Vec::new(),
                body: OriginBody::Empty,
            })
            .await?;
        let status = resp.status();
        // The part number is the request's only variable: an origin that refuses it
        // (S3: 400 InvalidPartNumber; some answer 416) is saying the object has no such
        // part.
        if status == StatusCode::RANGE_NOT_SATISFIABLE || status == StatusCode::BAD_REQUEST {
            return Err(unsatisfiable().into());
        }
        if !status.is_success() {
            return Err(Error::new(
                ErrorKind::from_status(status),
                format!("the origin answered {status} for part {number}"),
            )
            .into());
        }
        let headers = resp.headers();
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let range = match text("content-range") {
            Some(v) => Some(
                talon_protocols::range::parse_content_range(v)
                    .map(|(r, _)| r)
                    .ok_or_else(|| {
                        Error::new(
                            ErrorKind::InternalError,
                            format!(
                                "the origin's Content-Range '{v}' for part {number} is not valid"
                            ),
                        )
                    })?,
            ),
            None => None,
        };
        let count: Option<u32> =
            text(talon_protocols::relay::S3_PARTS_COUNT).and_then(|c| c.parse().ok());
        if range.is_none() && count.is_some_and(|c| c > 1) {
            // The whole object is not part n of several: the origin did not say where
            // the part lies (moto's server answers 200 without Content-Range).
            return Err(Error::new(
                ErrorKind::NotImplemented,
                format!(
                    "reading by part number needs an origin that says where a part lies; \
                     this one answered part {number} without a Content-Range"
                ),
            )
            .into());
        }
        Ok(PartBounds {
            range,
            count,
            etag: text("etag").map(str::to_owned),
        })
    }

    async fn put(
        &self,
        object: Target<'_>,
        upload: Upload,
        write: WriteSpec,
    ) -> Result<Written, Failure> {
        reachable(&[object.key])?;
        let Target { bucket, key } = object;
        let len = upload.stream.required_len()?;
        let mut headers = write.origin_headers(self.origin);
        // A checksum the client sent as a header is known before the body: the origin
        // keeps it (and verifies it again). One announced as a trailer is known only at
        // the end: the body goes on to an S3 origin with a trailer of its own.
        if let Some((alg, value)) = &upload.checksum {
            headers.push((alg.header_name().to_owned(), value.clone()));
        }
        for (name, value) in write.condition_headers() {
            // S3 conditions a write on the entity tag only.
            if self.origin == Backend::Azure || name.starts_with("if-") && name.ends_with("match") {
                headers.push((name.to_owned(), value));
            }
        }
        let keep =
            self.gw
                .objects
                .keep_for_write_through(self.route, self.origin, bucket, key, len);
        let stream = match keep {
            Some(_) => upload.stream.keep_up_to(len),
            None => upload.stream,
        };
        let origin = self.client()?;
        let header_refs: Vec<(&str, String)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        let result = match upload.trailer_checksum {
            Some(alg) => {
                origin
                    .put_stream_with_checksum(bucket, key, stream, len, alg, &header_refs)
                    .await
            }
            None => {
                origin
                    .put_stream(
                        bucket,
                        key,
                        stream.into_origin_body().await?,
                        len,
                        &header_refs,
                    )
                    .await
            }
        };
        let (etag, verified) = settle(&upload.outcome, result)?;
        self.gw.objects.wrote(self.origin, bucket, key);
        self.gw.metrics.bytes_in(self.protocol, len);
        if let (Some(permit), Some(bytes)) = (keep, &verified.kept) {
            self.gw
                .objects
                .write_through(self.origin, bucket, key, &etag, bytes, permit)
                .await;
        }
        Ok(Written {
            etag,
            content_md5: Some(verified.md5_base64()),
            checksum: verified.checksum,
            last_modified: None,
        })
    }

    /// A conditional delete goes to the origin with its conditions: S3's three headers
    /// as they are; over Azure, which conditions a delete on `If-Match` only, a time or
    /// size is checked against one HEAD and the delete pinned to that version.
    async fn delete(
        &self,
        object: Target<'_>,
        must_exist: bool,
        conditions: &DeleteConditions,
    ) -> Result<(), Failure> {
        reachable(&[object.key])?;
        let client = self.client()?;
        if must_exist && self.origin == Backend::S3 {
            // S3 deletes a missing key without complaint: ask first.
            client.head(object.bucket, object.key).await?;
        }
        let mut headers: Vec<(&str, String)> = Vec::new();
        match self.origin {
            Backend::S3 => headers = conditions.s3_origin_headers(),
            Backend::Azure if conditions.last_modified.is_some() || conditions.size.is_some() => {
                match client.head(object.bucket, object.key).await {
                    Ok(info) => {
                        conditions
                            .check(Some((
                                &info.etag,
                                info.last_modified.unwrap_or(std::time::UNIX_EPOCH),
                                info.size,
                            )))
                            .map_err(|_| Error::precondition_failed())?;
                        headers.push(("if-match", info.etag));
                    }
                    // Nothing to delete: as S3 answers a conditional delete of nothing.
                    Err(e) if e.kind() == ErrorKind::NoSuchKey && !must_exist => return Ok(()),
                    Err(e) => return Err(e.into()),
                }
            }
            Backend::Azure => {
                if let Some(list) = &conditions.if_match {
                    headers.push(("if-match", list.header_value()));
                }
            }
        }
        let mut result = client
            .delete_with(object.bucket, object.key, &headers)
            .await;
        if self.origin == Backend::Azure
            && !must_exist
            && result
                .as_ref()
                .is_err_and(|e| e.kind() == ErrorKind::PreconditionFailed)
            && client
                .head(object.bucket, object.key)
                .await
                .is_err_and(|e| e.kind() == ErrorKind::NoSuchKey)
        {
            // Azure fails `If-Match` on a blob that is not there (and so does the Azure
            // front); for the S3 front there was nothing to delete, which is 204.
            result = Err(Error::new(
                ErrorKind::NoSuchKey,
                "The specified key does not exist.",
            ));
        }
        if result.is_ok()
            || result
                .as_ref()
                .is_err_and(|e| e.kind() == ErrorKind::NoSuchKey)
        {
            self.gw
                .objects
                .wrote(self.origin, object.bucket, object.key);
        }
        Ok(result?)
    }

    /// CopyObject over an Azure origin and Copy Blob over either ([`copies`]); the new
    /// object's blocks are keyed by its own version, so no cached block can answer for it.
    async fn copy(&self, to: Target<'_>, copy: CopySpec<'_>) -> Result<Copied, Failure> {
        reachable(&[to.key, copy.from.key])?;
        let done = copies::copy(self.client()?, self.origin, to, &copy).await?;
        self.gw.objects.wrote(self.origin, to.bucket, to.key);
        Ok(Copied {
            etag: done.etag,
            last_modified: done
                .last_modified
                .unwrap_or_else(std::time::SystemTime::now),
        })
    }

    /// GetObjectAttributes over an Azure origin (an S3 origin is relayed): the blob's
    /// properties, and no parts (a blob's blocks are not S3's parts).
    async fn object_attributes(&self, object: Target<'_>) -> Result<ObjectAttributes, Failure> {
        reachable(&[object.key])?;
        let info = self.client()?.head(object.bucket, object.key).await?;
        Ok(ObjectAttributes {
            info,
            part_sizes: None,
        })
    }

    async fn create_upload(&self, object: Target<'_>, write: WriteSpec) -> Result<String, Failure> {
        reachable(&[object.key])?;
        let client = self.azure_origin_for("CreateMultipartUpload")?;
        Ok(multipart_over_azure::create(client, object, &write).await?)
    }

    async fn upload_part(
        &self,
        object: Target<'_>,
        upload_id: &str,
        number: u32,
        upload: Upload,
    ) -> Result<Written, Failure> {
        reachable(&[object.key])?;
        let client = self.azure_origin_for("UploadPart")?;
        let len = upload.stream.announced().unwrap_or(0);
        let written =
            multipart_over_azure::upload_part(client, object, upload_id, number, upload).await?;
        self.gw.metrics.bytes_in(self.protocol, len);
        Ok(written)
    }

    async fn complete_upload(
        &self,
        object: Target<'_>,
        upload_id: &str,
        parts: Vec<(u32, String)>,
        conditions: &talon_protocols::conditional::Conditions,
    ) -> Result<String, Failure> {
        reachable(&[object.key])?;
        let client = self.azure_origin_for("CompleteMultipartUpload")?;
        let etag =
            multipart_over_azure::complete(client, object, upload_id, &parts, conditions).await?;
        self.gw
            .objects
            .wrote(self.origin, object.bucket, object.key);
        Ok(etag)
    }

    /// UploadPartCopy over an Azure origin (an S3 origin is relayed): the bytes stream
    /// through the gateway into the part's block ([`multipart_over_azure::upload_part_copy`]).
    async fn upload_part_copy(
        &self,
        object: Target<'_>,
        upload_id: &str,
        number: u32,
        copy: PartCopySpec<'_>,
    ) -> Result<Copied, Failure> {
        reachable(&[object.key, copy.from.key])?;
        let client = self.azure_origin_for("UploadPartCopy")?;
        let idle = self.gw.limits.upload_idle_timeout;
        let written =
            multipart_over_azure::upload_part_copy(client, object, upload_id, number, &copy, idle)
                .await?;
        Ok(Copied {
            etag: written.etag,
            last_modified: std::time::SystemTime::now(),
        })
    }

    async fn abort_upload(&self, object: Target<'_>, upload_id: &str) -> Result<(), Failure> {
        reachable(&[object.key])?;
        let client = self.azure_origin_for("AbortMultipartUpload")?;
        Ok(multipart_over_azure::abort(client, object, upload_id).await?)
    }

    async fn list_parts(
        &self,
        object: Target<'_>,
        upload_id: &str,
    ) -> Result<Vec<PartSummary>, Failure> {
        reachable(&[object.key])?;
        let client = self.azure_origin_for("ListParts")?;
        Ok(multipart_over_azure::list_parts(client, object, upload_id).await?)
    }

    async fn put_block(
        &self,
        object: Target<'_>,
        block_id: &str,
        upload: Upload,
    ) -> Result<String, Failure> {
        reachable(&[object.key])?;
        let client = self.s3_origin_for("Put Block")?;
        let len = upload.stream.announced().unwrap_or(0);
        let md5 = blocks_over_s3::put_block(client, object, block_id, upload).await?;
        self.gw.metrics.bytes_in(self.protocol, len);
        Ok(md5)
    }

    async fn put_block_list(
        &self,
        object: Target<'_>,
        blocks: Vec<BlockListItem>,
        write: WriteSpec,
    ) -> Result<Written, Failure> {
        reachable(&[object.key])?;
        let client = self.s3_origin_for("Put Block List")?;
        let written = blocks_over_s3::put_block_list(client, object, &blocks, &write).await?;
        self.gw
            .objects
            .wrote(self.origin, object.bucket, object.key);
        Ok(written)
    }

    async fn get_block_list(&self, object: Target<'_>) -> Result<BlockLists, Failure> {
        reachable(&[object.key])?;
        let client = self.s3_origin_for("Get Block List")?;
        Ok(blocks_over_s3::get_block_list(client, object).await?)
    }

    fn relays(&self, operation: Operation) -> bool {
        match operation {
            Operation::S3(op) => self.origin == Backend::S3 && relayed_to_s3(op),
            Operation::Azure(op) => self.origin == Backend::Azure && relayed_to_azure(op),
        }
    }

    /// Relays to the origin of the request's protocol, re-signed with the gateway's
    /// identity (client credentials are never forwarded); an upload's body is verified
    /// on the way.
    async fn relay(&self, relay: Relay<'_>) -> Result<http::Response<AnswerBody>, Failure> {
        // A relayed copy's source too: the policy checked it as a key, and it must not
        // name the blocks this gateway stages for Azure clients.
        let source = match header(relay.headers, talon_protocols::relay::S3_COPY_SOURCE) {
            Some(value) => Some(talon_protocols::s3::request::parse_copy_source(value)?.1),
            None => None,
        };
        reachable(&[
            relay.key.unwrap_or_default(),
            source.as_deref().unwrap_or_default(),
        ])?;
        let (backend, method, mut headers) = match relay.operation {
            Operation::S3(op) => {
                let write = WriteSpec::of_request(Backend::S3, relay.headers)?;
                let mut headers = write.origin_headers(Backend::S3);
                for name in talon_protocols::relay::RELAYED_S3_REQUEST_HEADERS {
                    if let Some(v) = header(relay.headers, name) {
                        headers.push(((*name).to_owned(), v.to_owned()));
                    }
                }
                (Backend::S3, method_of(op), headers)
            }
            Operation::Azure(op) => {
                let write = WriteSpec::of_request(Backend::Azure, relay.headers)?;
                let mut headers = write.origin_headers(Backend::Azure);
                if let Some(v) = header(relay.headers, "content-md5") {
                    headers.push(("content-md5".to_owned(), v.to_owned()));
                }
                let method = match op {
                    AzureOperation::GetBlockList => Method::GET,
                    AzureOperation::DeleteContainer => Method::DELETE,
                    _ => Method::PUT,
                };
                (Backend::Azure, method, headers)
            }
        };
        let origin = self.gw.objects.origin(backend)?;
        let (body, outcome) = match relay.body {
            RelayBody::Empty => (OriginBody::Empty, None),
            RelayBody::Document(bytes) => (OriginBody::Bytes(bytes), None),
            RelayBody::Upload(upload) => {
                let upload = *upload;
                if let Some((alg, value)) = &upload.checksum {
                    headers.push((alg.header_name().to_owned(), value.clone()));
                }
                let len = upload.stream.announced().unwrap_or(0);
                (
                    OriginBody::Stream {
                        body: upload.stream.into_origin_body().await?,
                        len,
                    },
                    Some(upload.outcome),
                )
            }
        };
        let changes = !matches!(method, Method::GET | Method::HEAD);
        let result = origin
            .forward(ForwardRequest {
                method,
                bucket: relay.bucket,
                key: relay.key,
                query: &relay.query,
                headers,
                body,
            })
            .await;
        let resp = match outcome {
            Some(outcome) => settle(&outcome, result)?.0,
            None => result?,
        };
        if resp.status().is_success()
            && let Some(bucket) = relay.bucket
        {
            match relay.key {
                Some(key) => self.gw.objects.wrote(backend, bucket, key),
                // A bucket created or deleted: its listings change.
                None if changes => self.gw.objects.listings().bucket_changed(backend, bucket),
                None => {}
            }
        }
        Ok(crate::reply::relay(resp))
    }
}
