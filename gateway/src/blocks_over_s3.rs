//! Azure block uploads through a gateway whose origin speaks S3: Put Block, Put Block
//! List and Get Block List with each uncommitted block staged as an object of its own
//! and the committed list recorded beside the blob, as
//! [`talon_protocols::block_staging`] lays them out. Nothing is kept in the gateway.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures_util::{StreamExt as _, stream};
use talon_protocols::azure::xml::BlockListItem;
use talon_protocols::block_staging::{BlobStaging, CommittedRecord, Segment};
use talon_protocols::conditional::{normalize_etag, same_version};
use talon_protocols::origin::{ByteStream, ListOptions, OriginClient};
use talon_protocols::range::ByteRange;
use talon_protocols::server::{BlockLists, Target, Upload, WriteSpec, Written};
use talon_protocols::upload::settle;
use talon_protocols::{Error, ErrorKind};

use crate::config::Backend;

/// Largest committed-list record read back (a blob has at most 50,000 blocks).
const MAX_RECORD_BYTES: usize = 8 << 20;

/// Put Block: the block's bytes, verified as they stream, as its staged object; gives
/// their base64 MD5.
pub async fn put_block(
    client: &OriginClient,
    object: Target<'_>,
    block_id: &str,
    upload: Upload,
) -> Result<String, Error> {
    let key = BlobStaging::of(object.key).block_key(block_id)?;
    let len = upload.stream.required_len()?;
    let body = upload.stream.into_origin_body().await?;
    let result = client.put_stream(object.bucket, &key, body, len, &[]).await;
    let (_, verified) = settle(&upload.outcome, result)?;
    Ok(verified.md5_base64())
}

/// The blob's staged blocks: block id → size.
async fn staged_blocks(
    client: &OriginClient,
    bucket: &str,
    staging: &BlobStaging,
) -> Result<BTreeMap<String, u64>, Error> {
    let prefix = staging.uncommitted_prefix();
    let mut out = BTreeMap::new();
    let mut token: Option<String> = None;
    loop {
        let page = client
            .list_with(
                bucket,
                &ListOptions {
                    prefix: &prefix,
                    delimiter: None,
                    token: token.as_deref(),
                    start_after: None,
                    max_keys: Some(1000),
                    include_metadata: false,
                },
            )
            .await?;
        for entry in page.objects {
            if let Some(id) = staging.block_id_of(&entry.key) {
                out.insert(id, entry.size);
            }
        }
        match page.next_token {
            Some(next) => token = Some(next),
            None => return Ok(out),
        }
    }
}

/// The blob as stored now: its quoted ETag and its committed blocks (none when the
/// record describes another version, as for an object written by PutObject). `None`
/// when there is no blob.
async fn committed_blocks(
    client: &OriginClient,
    object: Target<'_>,
    staging: &BlobStaging,
) -> Result<Option<(String, Vec<(String, u64)>)>, Error> {
    let etag = match client.head(object.bucket, object.key).await {
        Ok(info) => info.etag,
        Err(e) if e.kind() == ErrorKind::NoSuchKey => return Ok(None),
        Err(e) => return Err(e),
    };
    let record = match client
        .get(object.bucket, &staging.record_key(), None, None)
        .await
    {
        Ok(resp) => {
            let mut body = resp.body;
            let mut bytes = Vec::new();
            while let Some(chunk) = body.next().await {
                bytes.extend_from_slice(&chunk?);
                if bytes.len() > MAX_RECORD_BYTES {
                    return Err(Error::new(
                        ErrorKind::InternalError,
                        "a committed block list is larger than any blob's",
                    ));
                }
            }
            serde_json::from_slice::<CommittedRecord>(&bytes).ok()
        }
        Err(e) if e.kind() == ErrorKind::NoSuchKey => None,
        Err(e) => return Err(e),
    };
    let blocks = record
        .filter(|r| same_version(&r.etag, &etag))
        .map(|r| r.blocks)
        .unwrap_or_default();
    Ok(Some((etag, blocks)))
}

/// Get Block List: committed blocks from the record, uncommitted from the staging.
pub async fn get_block_list(
    client: &OriginClient,
    object: Target<'_>,
) -> Result<BlockLists, Error> {
    let staging = BlobStaging::of(object.key);
    let uncommitted: Vec<(String, u64)> = staged_blocks(client, object.bucket, &staging)
        .await?
        .into_iter()
        .collect();
    match committed_blocks(client, object, &staging).await? {
        None if uncommitted.is_empty() => Err(Error::new(
            ErrorKind::NoSuchKey,
            "The specified blob does not exist.",
        )),
        current => Ok(BlockLists {
            committed: current.map(|(_, blocks)| blocks).unwrap_or_default(),
            uncommitted,
        }),
    }
}

/// One segment's bytes from the origin: a staged block whole, or a committed block's
/// range of the current version (pinned with `If-Match`).
async fn segment_bytes(
    client: OriginClient,
    object: (String, String),
    version: Option<String>,
    segment: Segment,
) -> Result<ByteStream, Error> {
    let (bucket, key) = object;
    match segment {
        Segment::Staged { key: staged, .. } => {
            Ok(client.get(&bucket, &staged, None, None).await?.body)
        }
        Segment::Committed { len: 0, .. } => Ok(Box::pin(stream::empty())),
        Segment::Committed { offset, len } => {
            let range = ByteRange {
                start: offset,
                end: offset + len,
            };
            Ok(client
                .get(&bucket, &key, Some(range), version.as_deref())
                .await?
                .body)
        }
    }
}

/// Put Block List: the listed blocks, in order, streamed into one PutObject of the blob
/// with the write's metadata; then the new committed list recorded and the staged
/// blocks removed (Azure drops a blob's uncommitted blocks when it commits).
pub async fn put_block_list(
    client: &OriginClient,
    object: Target<'_>,
    items: &[BlockListItem],
    write: &WriteSpec,
) -> Result<Written, Error> {
    let staging = BlobStaging::of(object.key);
    let staged = staged_blocks(client, object.bucket, &staging).await?;
    let current = committed_blocks(client, object, &staging).await?;
    let (version, committed) = match current {
        Some((etag, blocks)) => (Some(etag), blocks),
        None => (None, Vec::new()),
    };
    let assembly = staging.assemble(items, &staged, &committed)?;
    let total = assembly.len();
    let owned = (object.bucket.to_owned(), object.key.to_owned());
    let reader = client.clone();
    let body = stream::iter(assembly.segments)
        .then(move |segment| segment_bytes(reader.clone(), owned.clone(), version.clone(), segment))
        .map(|opened| match opened {
            Ok(bytes) => bytes,
            Err(e) => Box::pin(stream::once(async move { Err(e) })) as ByteStream,
        })
        .flatten()
        .map(|chunk| chunk.map_err(|e| std::io::Error::other(e.message().to_owned())));
    let mut headers = write.origin_headers(Backend::S3);
    for (name, value) in write.condition_headers() {
        if name.starts_with("if-") && name.ends_with("match") {
            headers.push((name.to_owned(), value));
        }
    }
    let headers: Vec<(&str, String)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    let etag = client
        .put_stream(
            object.bucket,
            object.key,
            reqwest::Body::wrap_stream(body),
            total,
            &headers,
        )
        .await?;
    let record = CommittedRecord {
        etag: normalize_etag(&etag).to_owned(),
        blocks: assembly.blocks,
    };
    let record = serde_json::to_vec(&record)
        .map_err(|e| Error::new(ErrorKind::InternalError, format!("block list record: {e}")))?;
    if let Err(e) = client
        .put(
            object.bucket,
            &staging.record_key(),
            Bytes::from(record),
            Some("application/json"),
        )
        .await
    {
        // The blob is committed; only its block list is lost (it lists none).
        tracing::warn!(bucket = object.bucket, key = object.key, error = %e, "recording a committed block list failed");
    }
    for id in staged.keys() {
        let Ok(key) = staging.block_key(id) else {
            continue;
        };
        if let Err(e) = client.delete(object.bucket, &key).await {
            tracing::warn!(bucket = object.bucket, key, error = %e, "removing a staged block failed");
        }
    }
    Ok(Written {
        etag,
        checksum: None,
        content_md5: None,
        last_modified: None,
    })
}
