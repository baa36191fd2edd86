//! The stub's store as an [`ObjectBackend`]: what the protocol fronts of
//! `talon-protocols` serve, with the stub's fault injection and counters applied.
//!
//! One `StubBackend` serves one request: the faults drawn for it (a truncated body, a
//! reset connection) are kept here until the answer is written.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use talon_protocols::answer::Failure;
use talon_protocols::azure::xml::BlockListItem;
use talon_protocols::conditional::DeleteConditions;
use talon_protocols::listing::ListQuery;
use talon_protocols::origin::{BucketSummary, ObjectInfo};
use talon_protocols::server::{
    BlockLists, Copied, CopySpec, ListFrom, ListResult, ListSpec, ListedObject, ObjectAttributes,
    ObjectBackend, ObjectRead, PartBounds, PartCopySpec, PartSummary, ReadSpec, Target, Upload,
    UploadSummary, WriteSpec, Written, resolve_read,
};
use talon_protocols::upload::Verified;
use talon_protocols::{Error, ErrorKind, Result};

use crate::body::{self, Delivery};
use crate::front::{Outcome, StubState, apply_faults, blocking};
use crate::store::{BlockChoice, NewObject, ObjectMeta, StagedFile, WriteOptions};
use talon_core::Backend;

/// The stub's store, for one request on one front.
#[derive(Debug)]
pub struct StubBackend {
    state: Arc<StubState>,
    protocol: Backend,
    /// The truncation fault hit this request: a GET body breaks off halfway.
    truncate: AtomicBool,
    /// The reset fault hit this request: the connection is closed without an answer.
    reset: AtomicBool,
}

impl StubBackend {
    /// The store, for a request on `protocol`'s front.
    pub fn new(state: Arc<StubState>, protocol: Backend) -> StubBackend {
        StubBackend {
            state,
            protocol,
            truncate: AtomicBool::new(false),
            reset: AtomicBool::new(false),
        }
    }

    /// Whether the reset fault hit the request: its answer must not be sent.
    pub fn reset(&self) -> bool {
        self.reset.load(Ordering::Relaxed)
    }

    /// Receives an upload into a fresh staging file.
    async fn receive(&self, upload: Upload) -> Result<(StagedFile, Verified)> {
        let store = self.state.store.clone();
        let mut staged = blocking(move || store.stage()).await?;
        let file = staged
            .take_file()
            .ok_or_else(|| Error::new(ErrorKind::InternalError, "staging file missing"))?;
        let mut file = tokio::fs::File::from_std(file);
        let (metrics, protocol) = (&self.state.metrics, self.protocol);
        let verified = upload
            .stream
            .drain_to(&mut file, |n| metrics.put_bytes(protocol, n as u64))
            .await;
        staged.restore(file.into_std().await);
        let verified = verified?;
        Ok((staged, verified))
    }
}

/// A stored object's metadata as every front reads it.
pub fn info_of(meta: &ObjectMeta) -> ObjectInfo {
    ObjectInfo {
        size: meta.size,
        etag: meta.etag.clone(),
        last_modified: Some(meta.last_modified),
        content_type: Some(meta.content_type.clone()),
        headers: talon_protocols::content_headers::header_set(
            meta.content_md5.as_deref(),
            meta.checksum.as_ref(),
            &meta.content_headers,
            &meta.user_metadata,
        ),
    }
}

/// Checks a copy's source conditions: a copy answers 412 for every failed one, never
/// 304.
///
/// # Errors
/// [`ErrorKind::PreconditionFailed`].
fn check_copy_source(
    conditions: &talon_protocols::conditional::Conditions,
    source: &ObjectMeta,
) -> Result<()> {
    conditions
        .check_read(&source.etag, source.last_modified)
        .map_err(|_| Error::precondition_failed())
}

/// The version stored now under `key`, or `None`: blocking store work.
///
/// # Errors
/// The store's error other than a missing key.
fn current_version(
    store: &crate::store::ObjectStore,
    bucket: &str,
    key: &str,
) -> Result<Option<ObjectMeta>> {
    match store.head(bucket, key) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == ErrorKind::NoSuchKey => Ok(None),
        Err(e) => Err(e),
    }
}

/// Checks a write's conditions against the version stored now (none when absent):
/// blocking store work.
///
/// # Errors
/// [`ErrorKind::PreconditionFailed`], or the store's error.
fn check_write_conditions(
    store: &crate::store::ObjectStore,
    bucket: &str,
    key: &str,
    conditions: &talon_protocols::conditional::Conditions,
) -> Result<()> {
    if conditions.is_empty() {
        return Ok(());
    }
    let current = current_version(store, bucket, key)?;
    conditions
        .check_write(current.as_ref().map(|m| (m.etag.as_str(), m.last_modified)))
        .map_err(|kind| match kind {
            ErrorKind::NoSuchKey => Error::new(kind, "The specified key does not exist."),
            _ => Error::precondition_failed(),
        })
}

/// What a stored version answers to its writer.
fn written(
    meta: &ObjectMeta,
    checksum: Option<(talon_protocols::checksum::ChecksumAlgorithm, String)>,
) -> Written {
    Written {
        etag: meta.etag.clone(),
        checksum,
        content_md5: meta.content_md5.clone(),
        last_modified: Some(meta.last_modified),
    }
}

fn write_options(write: WriteSpec) -> WriteOptions {
    WriteOptions {
        content_type: write.content_type,
        user_metadata: write.user_metadata,
        content_headers: write.content_headers,
        checksum: None,
    }
}

fn encode_token(marker: &str) -> String {
    URL_SAFE_NO_PAD.encode(marker.as_bytes())
}

fn decode_token(token: &str) -> Result<String> {
    URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                "The continuation token provided is incorrect",
            )
        })
}

fn unsatisfiable_part() -> Failure {
    Error::new(
        ErrorKind::InvalidPartNumber,
        "The requested partnumber is not satisfiable",
    )
    .into()
}

impl ObjectBackend for StubBackend {
    async fn admit(&self, operation: &'static str) -> std::result::Result<(), Failure> {
        self.state.metrics.request(self.protocol, operation);
        match apply_faults(&self.state.faults, &self.state.metrics).await {
            Ok(truncate) => {
                self.truncate.store(truncate, Ordering::Relaxed);
                Ok(())
            }
            Err(Outcome::Failure(f)) => Err(f),
            Err(Outcome::Reset) => {
                self.reset.store(true, Ordering::Relaxed);
                Err(Error::new(ErrorKind::InternalError, "connection reset").into())
            }
        }
    }

    async fn list_buckets(&self) -> std::result::Result<Vec<BucketSummary>, Failure> {
        let store = self.state.store.clone();
        let buckets = blocking(move || store.list_buckets()).await?;
        Ok(buckets
            .into_iter()
            .map(|b| BucketSummary {
                name: b.name,
                created: Some(b.created),
            })
            .collect())
    }

    async fn head_bucket(&self, bucket: &str) -> std::result::Result<BucketSummary, Failure> {
        let store = self.state.store.clone();
        let b = bucket.to_owned();
        let info = blocking(move || store.bucket_info(&b)).await?;
        Ok(BucketSummary {
            name: info.name,
            created: Some(info.created),
        })
    }

    async fn create_bucket(&self, bucket: &str) -> std::result::Result<BucketSummary, Failure> {
        let store = self.state.store.clone();
        let b = bucket.to_owned();
        let info = blocking(move || {
            store.create_bucket(&b)?;
            store.bucket_info(&b)
        })
        .await?;
        Ok(BucketSummary {
            name: info.name,
            created: Some(info.created),
        })
    }

    async fn delete_bucket(&self, bucket: &str) -> std::result::Result<(), Failure> {
        let store = self.state.store.clone();
        let b = bucket.to_owned();
        Ok(blocking(move || store.delete_bucket(&b)).await?)
    }

    async fn list(
        &self,
        bucket: &str,
        spec: &ListSpec<'_>,
    ) -> std::result::Result<ListResult, Failure> {
        // Markers are keys; tokens are keys in URL-safe base64.
        let marker = match spec.from {
            ListFrom::Start => None,
            ListFrom::AfterKey(k) | ListFrom::Marker(k) => Some(k.to_owned()),
            ListFrom::Token(t) => Some(decode_token(t)?),
        };
        let store = self.state.store.clone();
        let b = bucket.to_owned();
        let (prefix, delimiter) = (spec.prefix.to_owned(), spec.delimiter.map(str::to_owned));
        let max_keys = spec.max_keys;
        let page = blocking(move || {
            let query = ListQuery {
                prefix: &prefix,
                delimiter: delimiter.as_deref(),
                marker: marker.as_deref(),
                max_keys,
            };
            store.list_page(&b, &query)
        })
        .await?;
        Ok(ListResult {
            objects: page
                .entries
                .into_iter()
                .map(|o| ListedObject {
                    user_metadata: spec.include_metadata.then(|| o.user_metadata.clone()),
                    content_type: Some(o.content_type),
                    content_md5: o.content_md5,
                    key: o.key,
                    last_modified: o.last_modified,
                    etag: o.etag,
                    size: o.size,
                })
                .collect(),
            common_prefixes: page.common_prefixes,
            is_truncated: page.is_truncated,
            next_token: page.next_marker.as_deref().map(encode_token),
            next_marker: page.next_marker,
        })
    }

    async fn read(&self, read: ReadSpec<'_>) -> std::result::Result<ObjectRead, Failure> {
        let store = self.state.store.clone();
        let (b, k) = (read.object.bucket.to_owned(), read.object.key.to_owned());
        let object = blocking(move || store.open(&b, &k)).await?;
        let info = info_of(&object.meta);
        let range = resolve_read(&info, read.conditions, read.range)?;
        let (start, end) = range.map(|r| (r.start, r.end)).unwrap_or((0, info.size));
        let body = (read.with_body && end > start).then(|| {
            let delivery = Delivery {
                bandwidth: self.state.faults.get().bandwidth_bytes_per_sec,
                truncate_after: self
                    .truncate
                    .load(Ordering::Relaxed)
                    .then_some((end - start) / 2),
                protocol: self.protocol,
            };
            body::object_stream(
                object.body,
                start,
                end,
                delivery,
                self.state.metrics.clone(),
            )
        });
        Ok(ObjectRead {
            info,
            range,
            body,
            stale: None,
        })
    }

    async fn part(
        &self,
        object: Target<'_>,
        number: u32,
    ) -> std::result::Result<PartBounds, Failure> {
        let store = self.state.store.clone();
        let (b, k) = (object.bucket.to_owned(), object.key.to_owned());
        let meta = blocking(move || store.head(&b, &k)).await?;
        let n = number as usize;
        if meta.parts.is_empty() {
            return if n == 1 {
                Ok(PartBounds {
                    range: None,
                    count: None,
                    etag: Some(meta.etag),
                })
            } else {
                Err(unsatisfiable_part())
            };
        }
        if n > meta.parts.len() {
            return Err(unsatisfiable_part());
        }
        let start: u64 = meta.parts[..n - 1].iter().sum();
        Ok(PartBounds {
            range: Some(talon_protocols::range::ByteRange {
                start,
                end: start + meta.parts[n - 1],
            })
            .filter(|r| r.end > r.start),
            count: u32::try_from(meta.parts.len()).ok(),
            etag: Some(meta.etag),
        })
    }

    async fn put(
        &self,
        object: Target<'_>,
        upload: Upload,
        write: WriteSpec,
    ) -> std::result::Result<Written, Failure> {
        crate::store::check_key(object.key)?;
        let (bucket, key) = (object.bucket.to_owned(), object.key.to_owned());
        let conditions = write.conditions();
        {
            let store = self.state.store.clone();
            let (b, k) = (bucket.clone(), key.clone());
            blocking(move || {
                store.bucket_info(&b)?;
                check_write_conditions(&store, &b, &k, &conditions)
            })
            .await?;
        }
        let (staged, verified) = self.receive(upload).await?;
        let mut options = write_options(write);
        options.checksum = verified.checksum.clone();
        let record = NewObject {
            etag: format!("\"{}\"", verified.md5_hex()),
            content_md5: Some(verified.md5_base64()),
            options,
            ..NewObject::default()
        };
        let store = self.state.store.clone();
        let meta = blocking(move || store.commit(&bucket, &key, staged, record)).await?;
        Ok(written(&meta, verified.checksum))
    }

    async fn delete(
        &self,
        object: Target<'_>,
        _must_exist: bool,
        conditions: &DeleteConditions,
    ) -> std::result::Result<(), Failure> {
        let store = self.state.store.clone();
        let (b, k) = (object.bucket.to_owned(), object.key.to_owned());
        let conditions = conditions.clone();
        let deleted = blocking(move || {
            if !conditions.is_empty() {
                let current = current_version(&store, &b, &k)?;
                conditions
                    .check(
                        current
                            .as_ref()
                            .map(|m| (m.etag.as_str(), m.last_modified, m.size)),
                    )
                    .map_err(|_| Error::precondition_failed())?;
            }
            store.delete(&b, &k)
        })
        .await?;
        if deleted {
            Ok(())
        } else {
            Err(Error::new(ErrorKind::NoSuchKey, "The specified key does not exist.").into())
        }
    }

    async fn copy(
        &self,
        to: Target<'_>,
        copy: CopySpec<'_>,
    ) -> std::result::Result<Copied, Failure> {
        crate::store::check_key(to.key)?;
        let (bucket, key) = (to.bucket.to_owned(), to.key.to_owned());
        let (src_bucket, src_key) = (copy.from.bucket.to_owned(), copy.from.key.to_owned());
        let (conditions, replacement) = (copy.source_conditions, copy.replace);
        let destination = copy.destination;
        let store = self.state.store.clone();
        let meta = blocking(move || {
            let src = store.open(&src_bucket, &src_key)?;
            check_copy_source(&conditions, &src.meta)?;
            store.bucket_info(&bucket)?;
            check_write_conditions(&store, &bucket, &key, &destination)?;
            let mut staged = store.stage()?;
            let copied = body::copy_object(src.body, src.meta.size, &mut staged)?;
            let options = replacement.map(write_options).unwrap_or(WriteOptions {
                content_type: Some(src.meta.content_type.clone()),
                user_metadata: src.meta.user_metadata.clone(),
                content_headers: src.meta.content_headers.clone(),
                checksum: src.meta.checksum.clone(),
            });
            let record = NewObject {
                etag: format!("\"{}\"", copied.md5_hex),
                content_md5: Some(copied.md5_base64),
                options,
                ..NewObject::default()
            };
            store.commit(&bucket, &key, staged, record)
        })
        .await?;
        Ok(Copied {
            etag: meta.etag,
            last_modified: meta.last_modified,
        })
    }

    async fn create_upload(
        &self,
        object: Target<'_>,
        write: WriteSpec,
    ) -> std::result::Result<String, Failure> {
        let store = self.state.store.clone();
        let (b, k) = (object.bucket.to_owned(), object.key.to_owned());
        let options = write_options(write);
        Ok(blocking(move || store.create_upload(&b, &k, options)).await?)
    }

    async fn upload_part(
        &self,
        object: Target<'_>,
        upload_id: &str,
        number: u32,
        upload: Upload,
    ) -> std::result::Result<Written, Failure> {
        let (b, k, id) = (
            object.bucket.to_owned(),
            object.key.to_owned(),
            upload_id.to_owned(),
        );
        {
            // Fail fast on an unknown upload, before receiving the body.
            let store = self.state.store.clone();
            let (b, k, id) = (b.clone(), k.clone(), id.clone());
            blocking(move || store.list_parts(&b, &k, &id)).await?;
        }
        let (staged, verified) = self.receive(upload).await?;
        let store = self.state.store.clone();
        let md5 = verified.md5_hex();
        let part = blocking(move || store.put_part(&b, &k, &id, number, staged, &md5)).await?;
        Ok(Written {
            etag: part.etag,
            content_md5: Some(verified.md5_base64()),
            checksum: verified.checksum,
            last_modified: None,
        })
    }

    async fn object_attributes(
        &self,
        object: Target<'_>,
    ) -> std::result::Result<ObjectAttributes, Failure> {
        let store = self.state.store.clone();
        let (b, k) = (object.bucket.to_owned(), object.key.to_owned());
        let meta = blocking(move || store.head(&b, &k)).await?;
        Ok(ObjectAttributes {
            info: info_of(&meta),
            part_sizes: (!meta.parts.is_empty()).then(|| meta.parts.clone()),
        })
    }

    async fn upload_part_copy(
        &self,
        object: Target<'_>,
        upload_id: &str,
        number: u32,
        copy: PartCopySpec<'_>,
    ) -> std::result::Result<Copied, Failure> {
        let (b, k, id) = (
            object.bucket.to_owned(),
            object.key.to_owned(),
            upload_id.to_owned(),
        );
        let (src_bucket, src_key) = (copy.from.bucket.to_owned(), copy.from.key.to_owned());
        let (range, conditions) = (copy.range, copy.source_conditions);
        let store = self.state.store.clone();
        let part = blocking(move || {
            // An unknown upload first, as UploadPart answers it.
            store.list_parts(&b, &k, &id)?;
            let src = store.open(&src_bucket, &src_key)?;
            check_copy_source(&conditions, &src.meta)?;
            let span = talon_protocols::range::copy_source_span(range, src.meta.size)?;
            let mut staged = store.stage()?;
            let copied =
                body::copy_range(src.body, span.start, span.end - span.start, &mut staged)?;
            store.put_part(&b, &k, &id, number, staged, &copied.md5_hex)
        })
        .await?;
        Ok(Copied {
            etag: part.etag,
            last_modified: SystemTime::now(),
        })
    }

    async fn complete_upload(
        &self,
        object: Target<'_>,
        upload_id: &str,
        parts: Vec<(u32, String)>,
        conditions: &talon_protocols::conditional::Conditions,
    ) -> std::result::Result<String, Failure> {
        let store = self.state.store.clone();
        let (b, k, id) = (
            object.bucket.to_owned(),
            object.key.to_owned(),
            upload_id.to_owned(),
        );
        let conditions = conditions.clone();
        let meta = blocking(move || {
            check_write_conditions(&store, &b, &k, &conditions)?;
            store.complete_upload(&b, &k, &id, &parts)
        })
        .await?;
        Ok(meta.etag)
    }

    async fn abort_upload(
        &self,
        object: Target<'_>,
        upload_id: &str,
    ) -> std::result::Result<(), Failure> {
        let store = self.state.store.clone();
        let (b, k, id) = (
            object.bucket.to_owned(),
            object.key.to_owned(),
            upload_id.to_owned(),
        );
        Ok(blocking(move || store.abort_upload(&b, &k, &id)).await?)
    }

    async fn list_parts(
        &self,
        object: Target<'_>,
        upload_id: &str,
    ) -> std::result::Result<Vec<PartSummary>, Failure> {
        let store = self.state.store.clone();
        let (b, k, id) = (
            object.bucket.to_owned(),
            object.key.to_owned(),
            upload_id.to_owned(),
        );
        let parts = blocking(move || store.list_parts(&b, &k, &id)).await?;
        Ok(parts
            .into_iter()
            .map(|p| PartSummary {
                number: p.number,
                etag: p.etag,
                size: p.size,
                last_modified: UNIX_EPOCH + Duration::from_millis(p.uploaded_ms),
            })
            .collect())
    }

    async fn list_uploads(&self, bucket: &str) -> std::result::Result<Vec<UploadSummary>, Failure> {
        let store = self.state.store.clone();
        let b = bucket.to_owned();
        let uploads = blocking(move || store.list_uploads(&b)).await?;
        Ok(uploads
            .into_iter()
            .map(|u| UploadSummary {
                key: u.key,
                upload_id: u.upload_id,
                initiated: u.initiated,
            })
            .collect())
    }

    async fn put_block(
        &self,
        object: Target<'_>,
        block_id: &str,
        upload: Upload,
    ) -> std::result::Result<String, Failure> {
        talon_protocols::names::check_block_id(block_id)?;
        let (b, k, id) = (
            object.bucket.to_owned(),
            object.key.to_owned(),
            block_id.to_owned(),
        );
        {
            let store = self.state.store.clone();
            let b = b.clone();
            blocking(move || store.bucket_info(&b)).await?;
        }
        let (staged, verified) = self.receive(upload).await?;
        let store = self.state.store.clone();
        blocking(move || store.put_block(&b, &k, &id, staged)).await?;
        Ok(verified.md5_base64())
    }

    async fn put_block_list(
        &self,
        object: Target<'_>,
        blocks: Vec<BlockListItem>,
        write: WriteSpec,
    ) -> std::result::Result<Written, Failure> {
        let items: Vec<BlockChoice> = blocks
            .into_iter()
            .map(|i| match i {
                BlockListItem::Latest(id) => BlockChoice::Latest(id),
                BlockListItem::Committed(id) => BlockChoice::Committed(id),
                BlockListItem::Uncommitted(id) => BlockChoice::Uncommitted(id),
            })
            .collect();
        let conditions = write.conditions();
        let options = write_options(write);
        let store = self.state.store.clone();
        let (b, k) = (object.bucket.to_owned(), object.key.to_owned());
        let meta = blocking(move || {
            check_write_conditions(&store, &b, &k, &conditions)?;
            store.put_block_list(&b, &k, &items, options)
        })
        .await?;
        Ok(written(&meta, None))
    }

    async fn get_block_list(&self, object: Target<'_>) -> std::result::Result<BlockLists, Failure> {
        let store = self.state.store.clone();
        let (b, k) = (object.bucket.to_owned(), object.key.to_owned());
        let (committed, uncommitted) = blocking(move || store.block_list(&b, &k)).await?;
        Ok(BlockLists {
            committed,
            uncommitted,
        })
    }
}
