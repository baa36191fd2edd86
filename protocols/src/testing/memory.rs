//! [`MemoryBackend`]: an [`ObjectBackend`] held in memory, the reference implementation
//! of the interface. It keeps every rule the interface documents and nothing else — no
//! folder, no cache, no origin — so that where the conformance suite
//! ([`super::suite`]) fails against it, the suite or the servers are wrong, and where it
//! passes against this backend but fails against another, that backend is.
//!
//! Not for production: everything is held in one map behind one lock.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

use bytes::Bytes;
use md5::{Digest as _, Md5};

use crate::answer::Failure;
use crate::azure::xml::BlockListItem;
use crate::checksum::ChecksumAlgorithm;
use crate::conditional::{Conditions, DeleteConditions, normalize_etag};
use crate::content_headers::header_set;
use crate::listing::{ListQuery, paginate};
use crate::multipart::check_completion;
use crate::names::{check_block_id, check_object_key, validate_bucket_name};
use crate::origin::{BucketSummary, ObjectInfo};
use crate::range::{ByteRange, copy_source_span};
use crate::server::{
    BlockLists, Copied, CopySpec, ListFrom, ListResult, ListSpec, ListedObject, ObjectAttributes,
    ObjectBackend, ObjectRead, PartBounds, PartCopySpec, PartSummary, ReadSpec, Target, Upload,
    UploadSummary, WriteSpec, Written, full_body, resolve_read,
};
use crate::upload::Verified;
use crate::{Error, ErrorKind};

/// The content type of an object written without one.
const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// Every bucket and object, in memory.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    buckets: BTreeMap<String, Bucket>,
    /// The last upload id handed out.
    last_upload_id: u64,
}

#[derive(Debug)]
struct Bucket {
    created: SystemTime,
    objects: BTreeMap<String, Stored>,
    /// Multipart uploads in progress, by upload id.
    uploads: BTreeMap<String, MultipartUpload>,
    /// Uncommitted blocks, by key and then block id.
    blocks: BTreeMap<String, BTreeMap<String, Bytes>>,
}

/// One stored version.
#[derive(Debug, Clone)]
struct Stored {
    bytes: Bytes,
    etag: String,
    last_modified: SystemTime,
    content_md5: Option<String>,
    checksum: Option<(ChecksumAlgorithm, String)>,
    /// Content type, content headers and user metadata, as written.
    properties: WriteSpec,
    /// The part sizes of an object completed from a multipart upload.
    parts: Vec<u64>,
    /// The committed blocks of a block blob: id and bytes, in order.
    blocks: Vec<(String, Bytes)>,
}

#[derive(Debug)]
struct MultipartUpload {
    key: String,
    properties: WriteSpec,
    initiated: SystemTime,
    parts: BTreeMap<u32, StoredPart>,
}

#[derive(Debug, Clone)]
struct StoredPart {
    bytes: Bytes,
    etag: String,
    uploaded: SystemTime,
}

impl MemoryBackend {
    /// An empty backend: no bucket.
    pub fn new() -> MemoryBackend {
        MemoryBackend::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    fn bucket(&self, name: &str) -> Result<&Bucket, Error> {
        self.buckets.get(name).ok_or_else(|| no_such_bucket(name))
    }

    fn bucket_mut(&mut self, name: &str) -> Result<&mut Bucket, Error> {
        self.buckets
            .get_mut(name)
            .ok_or_else(|| no_such_bucket(name))
    }

    fn object(&self, target: Target<'_>) -> Result<&Stored, Error> {
        self.bucket(target.bucket)?
            .objects
            .get(target.key)
            .ok_or_else(no_such_key)
    }

    /// Checks a write's conditions against what `target` holds now.
    fn check_write(&self, target: Target<'_>, conditions: &Conditions) -> Result<(), Error> {
        if conditions.is_empty() {
            return Ok(());
        }
        let current = self.bucket(target.bucket)?.objects.get(target.key);
        conditions
            .check_write(current.map(|s| (s.etag.as_str(), s.last_modified)))
            .map_err(|kind| match kind {
                ErrorKind::NoSuchKey => no_such_key(),
                _ => Error::precondition_failed(),
            })
    }

    /// The multipart upload `upload_id` of `target`.
    fn upload_mut(
        &mut self,
        target: Target<'_>,
        upload_id: &str,
    ) -> Result<&mut MultipartUpload, Error> {
        self.bucket_mut(target.bucket)?
            .uploads
            .get_mut(upload_id)
            .filter(|u| u.key == target.key)
            .ok_or_else(no_such_upload)
    }

    fn store(&mut self, target: Target<'_>, stored: Stored) -> Result<(), Error> {
        self.bucket_mut(target.bucket)?
            .objects
            .insert(target.key.to_owned(), stored);
        Ok(())
    }
}

impl Stored {
    fn new(bytes: Bytes, properties: WriteSpec) -> Stored {
        let md5 = Md5::digest(&bytes);
        Stored {
            etag: format!("\"{}\"", hex::encode(md5)),
            content_md5: Some(base64_of(&md5)),
            bytes,
            last_modified: SystemTime::now(),
            checksum: None,
            properties,
            parts: Vec::new(),
            blocks: Vec::new(),
        }
    }

    fn info(&self) -> ObjectInfo {
        let p = &self.properties;
        ObjectInfo {
            size: self.bytes.len() as u64,
            etag: self.etag.clone(),
            last_modified: Some(self.last_modified),
            content_type: Some(
                p.content_type
                    .clone()
                    .unwrap_or_else(|| DEFAULT_CONTENT_TYPE.to_owned()),
            ),
            headers: header_set(
                self.content_md5.as_deref(),
                self.checksum.as_ref(),
                &p.content_headers,
                &p.user_metadata,
            ),
        }
    }

    fn written(&self) -> Written {
        Written {
            etag: self.etag.clone(),
            checksum: self.checksum.clone(),
            content_md5: self.content_md5.clone(),
            last_modified: Some(self.last_modified),
        }
    }
}

/// The properties a write keeps (its conditions are checked, not kept).
fn properties(write: WriteSpec) -> WriteSpec {
    WriteSpec {
        content_type: write.content_type,
        user_metadata: write.user_metadata,
        content_headers: write.content_headers,
        expires: write.expires,
        ..WriteSpec::default()
    }
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn no_such_bucket(bucket: &str) -> Error {
    Error::new(
        ErrorKind::NoSuchBucket,
        format!("The specified bucket does not exist: {bucket}"),
    )
}

fn no_such_key() -> Error {
    Error::new(ErrorKind::NoSuchKey, "The specified key does not exist.")
}

fn no_such_upload() -> Error {
    Error::new(
        ErrorKind::NoSuchUpload,
        "The specified upload does not exist.",
    )
}

/// Receives a verified upload whole; nothing is kept unless it settles verified.
async fn receive(upload: Upload) -> Result<(Bytes, Verified), Error> {
    let mut bytes = Vec::new();
    let verified = upload.stream.drain_to(&mut bytes, |_| {}).await?;
    Ok((Bytes::from(bytes), verified))
}

/// Checks a copy's source conditions: a copy answers 412 for every failed one, never 304.
fn check_copy_source(conditions: &Conditions, source: &Stored) -> Result<(), Error> {
    conditions
        .check_read(&source.etag, source.last_modified)
        .map_err(|_| Error::precondition_failed())
}

fn summary(name: &str, bucket: &Bucket) -> BucketSummary {
    BucketSummary {
        name: name.to_owned(),
        created: Some(bucket.created),
    }
}

impl ObjectBackend for MemoryBackend {
    async fn list_buckets(&self) -> Result<Vec<BucketSummary>, Failure> {
        Ok(self
            .state()
            .buckets
            .iter()
            .map(|(name, b)| summary(name, b))
            .collect())
    }

    async fn head_bucket(&self, bucket: &str) -> Result<BucketSummary, Failure> {
        let state = self.state();
        Ok(summary(bucket, state.bucket(bucket)?))
    }

    async fn create_bucket(&self, bucket: &str) -> Result<BucketSummary, Failure> {
        validate_bucket_name(bucket)?;
        let mut state = self.state();
        if state.buckets.contains_key(bucket) {
            return Err(Error::new(
                ErrorKind::BucketAlreadyExists,
                format!("The bucket '{bucket}' already exists."),
            )
            .into());
        }
        let created = Bucket {
            created: SystemTime::now(),
            objects: BTreeMap::new(),
            uploads: BTreeMap::new(),
            blocks: BTreeMap::new(),
        };
        let answer = summary(bucket, &created);
        state.buckets.insert(bucket.to_owned(), created);
        Ok(answer)
    }

    async fn delete_bucket(&self, bucket: &str) -> Result<(), Failure> {
        let mut state = self.state();
        if !state.bucket(bucket)?.objects.is_empty() {
            return Err(Error::new(
                ErrorKind::BucketNotEmpty,
                format!("The bucket '{bucket}' is not empty."),
            )
            .into());
        }
        state.buckets.remove(bucket);
        Ok(())
    }

    async fn list(&self, bucket: &str, spec: &ListSpec<'_>) -> Result<ListResult, Failure> {
        // Markers and tokens are both the last key listed.
        let marker = match spec.from {
            ListFrom::Start => None,
            ListFrom::AfterKey(k) | ListFrom::Marker(k) | ListFrom::Token(k) => Some(k),
        };
        let state = self.state();
        let objects = &state.bucket(bucket)?.objects;
        let query = ListQuery {
            prefix: spec.prefix,
            delimiter: spec.delimiter,
            marker,
            max_keys: spec.max_keys,
        };
        let from = marker.filter(|m| *m > spec.prefix).unwrap_or(spec.prefix);
        let candidates = objects
            .range::<str, _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(spec.prefix));
        let page = paginate(candidates, |(k, _)| k.as_str(), &query);
        Ok(ListResult {
            objects: page
                .entries
                .into_iter()
                .map(|(key, s)| {
                    let info = s.info();
                    ListedObject {
                        key: key.clone(),
                        last_modified: s.last_modified,
                        etag: s.etag.clone(),
                        size: info.size,
                        content_type: info.content_type,
                        content_md5: s.content_md5.clone(),
                        user_metadata: spec
                            .include_metadata
                            .then(|| s.properties.user_metadata.clone()),
                    }
                })
                .collect(),
            common_prefixes: page.common_prefixes,
            is_truncated: page.is_truncated,
            next_token: page.next_marker.clone(),
            next_marker: page.next_marker,
        })
    }

    async fn read(&self, read: ReadSpec<'_>) -> Result<ObjectRead, Failure> {
        let stored = self.state().object(read.object)?.clone();
        let info = stored.info();
        let range = resolve_read(&info, read.conditions, read.range)?;
        let (start, end) = range.map_or((0, info.size), |r| (r.start, r.end));
        let body = (read.with_body && end > start)
            .then(|| full_body(stored.bytes.slice(start as usize..end as usize)));
        Ok(ObjectRead {
            info,
            range,
            body,
            stale: None,
        })
    }

    async fn part(&self, object: Target<'_>, number: u32) -> Result<PartBounds, Failure> {
        let state = self.state();
        let stored = state.object(object)?;
        let unsatisfiable = || {
            Failure::from(Error::new(
                ErrorKind::InvalidPartNumber,
                "The requested partnumber is not satisfiable",
            ))
        };
        let n = number as usize;
        if stored.parts.is_empty() {
            return if n == 1 {
                Ok(PartBounds {
                    range: None,
                    count: None,
                    etag: Some(stored.etag.clone()),
                })
            } else {
                Err(unsatisfiable())
            };
        }
        if n == 0 || n > stored.parts.len() {
            return Err(unsatisfiable());
        }
        let start: u64 = stored.parts[..n - 1].iter().sum();
        Ok(PartBounds {
            range: Some(ByteRange {
                start,
                end: start + stored.parts[n - 1],
            })
            .filter(|r| r.end > r.start),
            count: u32::try_from(stored.parts.len()).ok(),
            etag: Some(stored.etag.clone()),
        })
    }

    async fn put(
        &self,
        object: Target<'_>,
        upload: Upload,
        write: WriteSpec,
    ) -> Result<Written, Failure> {
        check_object_key(object.key)?;
        let conditions = write.conditions();
        self.state().check_write(object, &conditions)?;
        let (bytes, verified) = receive(upload).await?;
        let mut stored = Stored::new(bytes, properties(write));
        stored.checksum = verified.checksum;
        let mut state = self.state();
        // Checked again: another write may have landed while the body arrived.
        state.check_write(object, &conditions)?;
        let answer = stored.written();
        state.store(object, stored)?;
        Ok(answer)
    }

    async fn delete(
        &self,
        object: Target<'_>,
        must_exist: bool,
        conditions: &DeleteConditions,
    ) -> Result<(), Failure> {
        let mut state = self.state();
        let bucket = state.bucket_mut(object.bucket)?;
        let current = bucket.objects.get(object.key);
        if !conditions.is_empty() {
            conditions
                .check(current.map(|s| (s.etag.as_str(), s.last_modified, s.bytes.len() as u64)))
                .map_err(|_| Error::precondition_failed())?;
        }
        match bucket.objects.remove(object.key) {
            None if must_exist => Err(no_such_key().into()),
            _ => Ok(()),
        }
    }

    async fn copy(&self, to: Target<'_>, copy: CopySpec<'_>) -> Result<Copied, Failure> {
        check_object_key(to.key)?;
        let mut state = self.state();
        let source = state.object(copy.from)?.clone();
        check_copy_source(&copy.source_conditions, &source)?;
        state.bucket(to.bucket)?;
        state.check_write(to, &copy.destination)?;
        // A copy keeps the source's properties and checksum unless it replaces them.
        let stored = match copy.replace {
            Some(write) => Stored::new(source.bytes.clone(), properties(write)),
            None => {
                let mut s = Stored::new(source.bytes.clone(), source.properties.clone());
                s.checksum = source.checksum.clone();
                s
            }
        };
        let answer = Copied {
            etag: stored.etag.clone(),
            last_modified: stored.last_modified,
        };
        state.store(to, stored)?;
        Ok(answer)
    }

    async fn create_upload(&self, object: Target<'_>, write: WriteSpec) -> Result<String, Failure> {
        check_object_key(object.key)?;
        let mut state = self.state();
        state.bucket(object.bucket)?;
        state.last_upload_id += 1;
        let id = format!("memory-upload-{}", state.last_upload_id);
        state.bucket_mut(object.bucket)?.uploads.insert(
            id.clone(),
            MultipartUpload {
                key: object.key.to_owned(),
                properties: properties(write),
                initiated: SystemTime::now(),
                parts: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    async fn upload_part(
        &self,
        object: Target<'_>,
        upload_id: &str,
        number: u32,
        upload: Upload,
    ) -> Result<Written, Failure> {
        // An unknown upload fails before its body is received.
        self.state().upload_mut(object, upload_id)?;
        let (bytes, verified) = receive(upload).await?;
        let etag = format!("\"{}\"", verified.md5_hex());
        self.state().upload_mut(object, upload_id)?.parts.insert(
            number,
            StoredPart {
                bytes,
                etag: etag.clone(),
                uploaded: SystemTime::now(),
            },
        );
        Ok(Written {
            etag,
            content_md5: Some(verified.md5_base64()),
            checksum: verified.checksum,
            last_modified: None,
        })
    }

    async fn object_attributes(&self, object: Target<'_>) -> Result<ObjectAttributes, Failure> {
        let state = self.state();
        let stored = state.object(object)?;
        Ok(ObjectAttributes {
            info: stored.info(),
            part_sizes: (!stored.parts.is_empty()).then(|| stored.parts.clone()),
        })
    }

    async fn upload_part_copy(
        &self,
        object: Target<'_>,
        upload_id: &str,
        number: u32,
        copy: PartCopySpec<'_>,
    ) -> Result<Copied, Failure> {
        let mut state = self.state();
        state.upload_mut(object, upload_id)?;
        let source = state.object(copy.from)?.clone();
        check_copy_source(&copy.source_conditions, &source)?;
        let span = copy_source_span(copy.range, source.bytes.len() as u64)?;
        let bytes = source.bytes.slice(span.start as usize..span.end as usize);
        let part = StoredPart {
            etag: format!("\"{}\"", hex::encode(Md5::digest(&bytes))),
            bytes,
            uploaded: SystemTime::now(),
        };
        let answer = Copied {
            etag: part.etag.clone(),
            last_modified: part.uploaded,
        };
        state
            .upload_mut(object, upload_id)?
            .parts
            .insert(number, part);
        Ok(answer)
    }

    async fn complete_upload(
        &self,
        object: Target<'_>,
        upload_id: &str,
        parts: Vec<(u32, String)>,
        conditions: &Conditions,
    ) -> Result<String, Failure> {
        let mut state = self.state();
        state.upload_mut(object, upload_id)?;
        state.check_write(object, conditions)?;
        let upload = state.upload_mut(object, upload_id)?;
        let chosen = check_completion(&parts, |number, etag| {
            upload
                .parts
                .get(&number)
                .filter(|p| normalize_etag(&p.etag) == normalize_etag(etag))
                .map(|p| p.bytes.len() as u64)
        })?;
        let mut bytes = Vec::new();
        let mut md5s = Vec::with_capacity(chosen.len() * 16);
        let mut sizes = Vec::with_capacity(chosen.len());
        for number in &chosen {
            let part = &upload.parts[number];
            bytes.extend_from_slice(&part.bytes);
            md5s.extend_from_slice(&hex::decode(normalize_etag(&part.etag)).unwrap_or_default());
            sizes.push(part.bytes.len() as u64);
        }
        let mut stored = Stored::new(Bytes::from(bytes), upload.properties.clone());
        stored.etag = format!("\"{}-{}\"", hex::encode(Md5::digest(&md5s)), chosen.len());
        stored.content_md5 = None;
        stored.parts = sizes;
        let etag = stored.etag.clone();
        state.bucket_mut(object.bucket)?.uploads.remove(upload_id);
        state.store(object, stored)?;
        Ok(etag)
    }

    async fn abort_upload(&self, object: Target<'_>, upload_id: &str) -> Result<(), Failure> {
        let mut state = self.state();
        state.upload_mut(object, upload_id)?;
        state.bucket_mut(object.bucket)?.uploads.remove(upload_id);
        Ok(())
    }

    async fn list_parts(
        &self,
        object: Target<'_>,
        upload_id: &str,
    ) -> Result<Vec<PartSummary>, Failure> {
        let mut state = self.state();
        Ok(state
            .upload_mut(object, upload_id)?
            .parts
            .iter()
            .map(|(number, p)| PartSummary {
                number: *number,
                etag: p.etag.clone(),
                size: p.bytes.len() as u64,
                last_modified: p.uploaded,
            })
            .collect())
    }

    async fn list_uploads(&self, bucket: &str) -> Result<Vec<UploadSummary>, Failure> {
        let state = self.state();
        let mut uploads: Vec<UploadSummary> = state
            .bucket(bucket)?
            .uploads
            .iter()
            .map(|(id, u)| UploadSummary {
                key: u.key.clone(),
                upload_id: id.clone(),
                initiated: u.initiated,
            })
            .collect();
        uploads.sort_by(|a, b| (&a.key, a.initiated).cmp(&(&b.key, b.initiated)));
        Ok(uploads)
    }

    async fn put_block(
        &self,
        object: Target<'_>,
        block_id: &str,
        upload: Upload,
    ) -> Result<String, Failure> {
        check_block_id(block_id)?;
        check_object_key(object.key)?;
        self.state().bucket(object.bucket)?;
        let (bytes, verified) = receive(upload).await?;
        self.state()
            .bucket_mut(object.bucket)?
            .blocks
            .entry(object.key.to_owned())
            .or_default()
            .insert(block_id.to_owned(), bytes);
        Ok(verified.md5_base64())
    }

    async fn put_block_list(
        &self,
        object: Target<'_>,
        blocks: Vec<BlockListItem>,
        write: WriteSpec,
    ) -> Result<Written, Failure> {
        check_object_key(object.key)?;
        let mut state = self.state();
        state.check_write(object, &write.conditions())?;
        let bucket = state.bucket_mut(object.bucket)?;
        let uncommitted = bucket.blocks.get(object.key);
        let committed = bucket.objects.get(object.key).map(|s| &s.blocks);
        let mut chosen: Vec<(String, Bytes)> = Vec::with_capacity(blocks.len());
        for item in &blocks {
            let (id, uncommitted_first, committed_ok) = match item {
                BlockListItem::Latest(id) => (id, true, true),
                BlockListItem::Uncommitted(id) => (id, true, false),
                BlockListItem::Committed(id) => (id, false, true),
            };
            let from_uncommitted = uncommitted
                .filter(|_| uncommitted_first)
                .and_then(|u| u.get(id));
            let from_committed = || {
                committed
                    .filter(|_| committed_ok)
                    .and_then(|c| c.iter().find(|(bid, _)| bid == id))
                    .map(|(_, b)| b)
            };
            let bytes = from_uncommitted.or_else(from_committed).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidPart,
                    format!("The specified block list is invalid: block '{id}' not found."),
                )
            })?;
            chosen.push((id.clone(), bytes.clone()));
        }
        let mut whole = Vec::with_capacity(chosen.iter().map(|(_, b)| b.len()).sum());
        for (_, b) in &chosen {
            whole.extend_from_slice(b);
        }
        let mut stored = Stored::new(Bytes::from(whole), properties(write));
        stored.blocks = chosen;
        let answer = stored.written();
        bucket.blocks.remove(object.key);
        bucket.objects.insert(object.key.to_owned(), stored);
        Ok(answer)
    }

    async fn get_block_list(&self, object: Target<'_>) -> Result<BlockLists, Failure> {
        let state = self.state();
        let bucket = state.bucket(object.bucket)?;
        let committed = bucket.objects.get(object.key).map(|s| {
            s.blocks
                .iter()
                .map(|(id, b)| (id.clone(), b.len() as u64))
                .collect::<Vec<_>>()
        });
        let uncommitted: Vec<(String, u64)> = bucket
            .blocks
            .get(object.key)
            .map(|u| {
                u.iter()
                    .map(|(id, b)| (id.clone(), b.len() as u64))
                    .collect()
            })
            .unwrap_or_default();
        if committed.is_none() && uncommitted.is_empty() {
            return Err(no_such_key().into());
        }
        Ok(BlockLists {
            committed: committed.unwrap_or_default(),
            uncommitted,
        })
    }
}
