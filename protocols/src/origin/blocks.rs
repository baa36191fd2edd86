//! Block blob operations at an Azure origin: Put Block, Put Block List and Get Block
//! List, for the writes that arrive as S3 multipart uploads
//! ([`crate::multipart_blocks`]).

use http::Method;

use super::{
    MAX_ORIGIN_LISTING_BODY, OriginBody, OriginClient, OriginConfig, check, read_capped,
    written_etag,
};
use crate::azure::xml::{BlockEntry, BlockListItem, block_list_request_xml, parse_block_list};
use crate::error::{Error, ErrorKind, Result};
use crate::uri_encoding::encode_strict;

/// The committed and uncommitted blocks of a blob (id, size), each in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OriginBlockLists {
    /// The blob's content.
    pub committed: Vec<(String, u64)>,
    /// Blocks uploaded and not yet committed.
    pub uncommitted: Vec<(String, u64)>,
    /// The committed blob's quoted entity tag, when the answer gave one: the version
    /// `committed` describes.
    pub etag: Option<String>,
}

impl OriginClient {
    fn require_azure(&self, operation: &str) -> Result<()> {
        match self.config {
            OriginConfig::Azure { .. } => Ok(()),
            OriginConfig::S3 { .. } => Err(Error::new(
                ErrorKind::NotImplemented,
                format!("{operation} needs an Azure origin"),
            )),
        }
    }

    /// Uploads one uncommitted block of a block blob.
    ///
    /// # Errors
    /// [`ErrorKind::NotImplemented`] at an S3 origin; the origin's error as a kind; a
    /// body stream that fails makes the origin store nothing.
    pub async fn put_block(
        &self,
        bucket: &str,
        key: &str,
        block_id: &str,
        body: OriginBody,
    ) -> Result<()> {
        self.require_azure("Put Block")?;
        let query = format!("comp=block&blockid={}", encode_strict(block_id));
        let resp = self
            .send(Method::PUT, Some(bucket), Some(key), &query, &[], body)
            .await?;
        check(resp).await.map(|_| ())
    }

    /// Commits a block blob from `items`, in order, with the write's headers (content
    /// type, metadata, conditions); the blob's quoted ETag.
    ///
    /// # Errors
    /// [`ErrorKind::NotImplemented`] at an S3 origin; the origin's error as a kind
    /// (`InvalidBlockList` is [`ErrorKind::InvalidPart`]).
    pub async fn put_block_list(
        &self,
        bucket: &str,
        key: &str,
        items: &[BlockListItem],
        headers: &[(&str, String)],
    ) -> Result<String> {
        self.require_azure("Put Block List")?;
        let body = bytes::Bytes::from(block_list_request_xml(items));
        let mut headers = headers.to_vec();
        headers.push(("content-type", "application/xml".to_owned()));
        let resp = self
            .send(
                Method::PUT,
                Some(bucket),
                Some(key),
                "comp=blocklist",
                &headers,
                OriginBody::Bytes(body),
            )
            .await?;
        written_etag(check(resp).await?, "Put Block List")
    }

    /// The committed and uncommitted blocks of a blob. A blob with neither is
    /// [`ErrorKind::NoSuchKey`], as Azure answers.
    ///
    /// # Errors
    /// [`ErrorKind::NotImplemented`] at an S3 origin; the origin's error as a kind.
    pub async fn get_block_list(&self, bucket: &str, key: &str) -> Result<OriginBlockLists> {
        self.require_azure("Get Block List")?;
        let resp = self
            .send(
                Method::GET,
                Some(bucket),
                Some(key),
                "comp=blocklist&blocklisttype=all",
                &[],
                OriginBody::Empty,
            )
            .await?;
        let resp = check(resp).await?;
        let etag = resp
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = read_capped(resp, MAX_ORIGIN_LISTING_BODY).await?;
        let (committed, uncommitted) = parse_block_list(&body)?;
        let pairs = |l: Vec<BlockEntry>| l.into_iter().map(|b| (b.id, b.size)).collect();
        Ok(OriginBlockLists {
            committed: pairs(committed),
            uncommitted: pairs(uncommitted),
            etag,
        })
    }
}
