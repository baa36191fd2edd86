//! S3 multipart uploads through a gateway whose origin is Azure Blob: each operation
//! kept as the blob's blocks by [`talon_protocols::multipart_blocks`], so the gateway
//! holds no state of its own and a retried part, another gateway or a restarted one
//! carries on the same upload.

use std::time::SystemTime;

use bytes::Bytes;
use talon_protocols::azure::xml::BlockListItem;
use talon_protocols::conditional::Conditions;
use talon_protocols::multipart_blocks::{BlockRole, BlockUpload};
use talon_protocols::origin::{
    OriginBlockLists, OriginBody, OriginClient, destination_condition_headers,
};
use talon_protocols::range::ByteRange;
use talon_protocols::server::{
    PartBounds, PartCopySpec, PartSummary, Target, Upload, Written, request_body, stream_body,
};
use talon_protocols::upload::{UploadClaims, VerifyingStream, settle};
use talon_protocols::{Error, ErrorKind};

use crate::config::Backend;

/// A marker block's content: Azure stores a block per id, the marker's content is not read.
const MARKER: Bytes = Bytes::from_static(b"t");

/// The blob's blocks; a blob with none yet has empty lists.
async fn blocks(client: &OriginClient, object: Target<'_>) -> Result<OriginBlockLists, Error> {
    match client.get_block_list(object.bucket, object.key).await {
        Err(e) if e.kind() == ErrorKind::NoSuchKey => Ok(OriginBlockLists::default()),
        other => other,
    }
}

/// Where part `number` of a blob lies: a completed upload's parts are the blob's
/// committed blocks, one each, so part n is block n; a blob of one block or none
/// (written whole) has one part, the whole of it.
///
/// # Errors
/// [`ErrorKind::InvalidPartNumber`] past the last part; the origin's error.
pub async fn part_bounds(
    client: &OriginClient,
    object: Target<'_>,
    number: u32,
) -> Result<PartBounds, Error> {
    let unsatisfiable = || {
        Error::new(
            ErrorKind::InvalidPartNumber,
            "The requested partnumber is not satisfiable",
        )
    };
    let lists = client.get_block_list(object.bucket, object.key).await?;
    let blocks = &lists.committed;
    let n = number as usize;
    if blocks.len() <= 1 {
        return if n == 1 {
            Ok(PartBounds {
                etag: lists.etag,
                ..PartBounds::default()
            })
        } else {
            Err(unsatisfiable())
        };
    }
    if n == 0 || n > blocks.len() {
        return Err(unsatisfiable());
    }
    let start: u64 = blocks[..n - 1].iter().map(|(_, size)| size).sum();
    Ok(PartBounds {
        range: Some(ByteRange {
            start,
            end: start + blocks[n - 1].1,
        })
        .filter(|r| r.end > r.start),
        count: u32::try_from(blocks.len()).ok(),
        etag: lists.etag,
    })
}

/// Puts a marker block (created, aborted, a part's tag), whose id is what it says.
async fn put_marker(client: &OriginClient, object: Target<'_>, id: &str) -> Result<(), Error> {
    client
        .put_block(object.bucket, object.key, id, OriginBody::Bytes(MARKER))
        .await
}

/// CreateMultipartUpload: a fresh upload id, and its created marker at the origin.
pub async fn create(
    client: &OriginClient,
    object: Target<'_>,
    write: &talon_protocols::server::WriteSpec,
) -> Result<String, Error> {
    let upload = BlockUpload::new(write)?;
    put_marker(client, object, &upload.block_id(BlockRole::Created)).await?;
    Ok(upload.id().to_owned())
}

/// UploadPart: the part's bytes as its block (verified as they stream), then the block
/// that records their MD5.
pub async fn upload_part(
    client: &OriginClient,
    object: Target<'_>,
    upload_id: &str,
    number: u32,
    upload: Upload,
) -> Result<Written, Error> {
    let mapping = BlockUpload::parse(upload_id)?;
    mapping
        .state(&blocks(client, object).await?.uncommitted)
        .check_open()?;
    let len = upload.stream.required_len()?;
    let body = OriginBody::Stream {
        body: upload.stream.into_origin_body().await?,
        len,
    };
    let part = mapping.block_id(BlockRole::Part(number));
    let result = client
        .put_block(object.bucket, object.key, &part, body)
        .await;
    let ((), verified) = settle(&upload.outcome, result)?;
    put_marker(
        client,
        object,
        &mapping.block_id(BlockRole::PartTag(number, verified.md5)),
    )
    .await?;
    Ok(Written {
        etag: format!("\"{}\"", verified.md5_hex()),
        content_md5: Some(verified.md5_base64()),
        checksum: verified.checksum,
        last_modified: None,
    })
}

/// CompleteMultipartUpload: commits the listed parts' blocks, in order, with the
/// upload's metadata; gives the blob's ETag. Completing again with the same parts
/// answers the same.
pub async fn complete(
    client: &OriginClient,
    object: Target<'_>,
    upload_id: &str,
    parts: &[(u32, String)],
    conditions: &Conditions,
) -> Result<String, Error> {
    let mapping = BlockUpload::parse(upload_id)?;
    let lists = blocks(client, object).await?;
    let state = mapping.state(&lists.uncommitted);
    if !state.created && mapping.completed_with(&lists.committed, parts) {
        return Ok(client.head(object.bucket, object.key).await?.etag);
    }
    let items: Vec<BlockListItem> = state
        .plan_commit(parts)?
        .into_iter()
        .map(|n| BlockListItem::Uncommitted(mapping.block_id(BlockRole::Part(n))))
        .collect();
    let write = mapping.metadata().clone().into_write();
    let mut headers = write.origin_headers(Backend::Azure);
    // The completion's conditions on what the blob is now go with the commit.
    headers.extend(destination_condition_headers(true, conditions));
    let headers: Vec<(&str, String)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    client
        .put_block_list(object.bucket, object.key, &items, &headers)
        .await
}

/// UploadPartCopy: the source's bytes (all, or `copy.range`) streamed from the origin
/// into the part's block as an UploadPart's body is, so the part keeps its MD5 as its
/// ETag. The read is pinned to the version the source conditions were checked on.
/// (Azure's Put Block From URL would copy at the origin but gives no MD5 to tag the
/// part with.)
///
/// # Errors
/// [`ErrorKind::PreconditionFailed`] for a failed source condition or a source that
/// changed while it was read, [`ErrorKind::InvalidRange`] for a range past its end,
/// and UploadPart's errors.
pub async fn upload_part_copy(
    client: &OriginClient,
    object: Target<'_>,
    upload_id: &str,
    number: u32,
    copy: &PartCopySpec<'_>,
    idle: std::time::Duration,
) -> Result<Written, Error> {
    use futures_util::StreamExt as _;
    let source = crate::copies::source_version(client, copy.from, &copy.source_conditions).await?;
    let span = talon_protocols::range::copy_source_span(copy.range, source.size)?;
    let range = copy.range;
    let len = span.end - span.start;
    let read = client
        .get(copy.from.bucket, copy.from.key, range, Some(&source.etag))
        .await?;
    if !talon_protocols::conditional::same_version(&read.info.etag, &source.etag) {
        return Err(Error::precondition_failed());
    }
    let body = request_body(stream_body(
        read.body.map(|chunk| chunk.map_err(std::io::Error::other)),
    ));
    let claims = UploadClaims {
        announced_len: Some(len),
        ..UploadClaims::default()
    };
    let (stream, outcome) = VerifyingStream::new(body, claims, len, idle);
    let upload = Upload {
        stream,
        outcome,
        checksum: None,
        trailer_checksum: None,
    };
    upload_part(client, object, upload_id, number, upload).await
}

/// AbortMultipartUpload: the aborted marker (Azure keeps uncommitted blocks until a
/// commit or its own expiry, a week; every operation of the upload now refuses it).
pub async fn abort(
    client: &OriginClient,
    object: Target<'_>,
    upload_id: &str,
) -> Result<(), Error> {
    let mapping = BlockUpload::parse(upload_id)?;
    mapping
        .state(&blocks(client, object).await?.uncommitted)
        .check_open()?;
    put_marker(client, object, &mapping.block_id(BlockRole::Aborted)).await
}

/// ListParts: the parts uploaded whole so far. Azure keeps no time per block: each
/// part's LastModified is the time of the listing.
pub async fn list_parts(
    client: &OriginClient,
    object: Target<'_>,
    upload_id: &str,
) -> Result<Vec<PartSummary>, Error> {
    let mapping = BlockUpload::parse(upload_id)?;
    let state = mapping.state(&blocks(client, object).await?.uncommitted);
    state.check_open()?;
    let now = SystemTime::now();
    Ok(state
        .listed_parts()
        .into_iter()
        .map(|p| PartSummary {
            number: p.number,
            etag: p.etag,
            size: p.size,
            last_modified: now,
        })
        .collect())
}
