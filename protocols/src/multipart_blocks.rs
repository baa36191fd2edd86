//! An S3 multipart upload kept as the uncommitted blocks of an Azure block blob: how a
//! gateway in front of an Azure origin serves CreateMultipartUpload, UploadPart,
//! ListParts, CompleteMultipartUpload and AbortMultipartUpload without state of its own.
//!
//! Everything an upload needs lives at the origin or in its upload id, so a retried
//! request, another gateway or a restarted one continues the same upload:
//!
//! - The **upload id** is 16 random bytes (hex) and, after a `.`, the write's metadata
//!   (content type, user metadata, content headers) as base64url JSON; CompleteMultipart
//!   Upload carries no metadata, so the id brings it to the commit.
//! - Every **block id** is base64 of 32 bytes: `TMPU`, 8 bytes of the SHA-256 of the upload
//!   id (so an id with altered metadata names no block of the original), the part
//!   number (big-endian u16), a kind byte, a zero byte and 16 bytes of MD5. All ids of an
//!   upload have one length, as Azure requires of a blob's blocks.
//!   - part `n`'s bytes: kind 0, MD5 zero. A part uploaded again under its number
//!     replaces the block, as S3 replaces the part.
//!   - part `n`'s entity tag: kind 3, MD5 of the part, one byte of content, put after
//!     the part's bytes, so ListParts and CompleteMultipartUpload can check the tags a
//!     client lists (Get Block List gives ids and sizes, not digests).
//!   - upload created: kind 1, part 0; upload aborted: kind 2, part 0. Azure cannot drop
//!     uncommitted blocks, so an abort is a marker that the other operations respect
//!     (the blocks expire with Azure's uncommitted-block lifetime, a week).
//! - **Completing** commits the part blocks in the listed order with the upload's
//!   metadata; Azure drops every other uncommitted block of the blob at that point.
//!   Completing again with the same parts finds them as the blob's committed blocks and
//!   answers the same, as S3 does.
//!
//! What cannot be exact: the object's ETag is the Azure blob's (not S3's `<md5>-<n>`
//! form), and where a part was uploaded twice with different bytes, ListParts may show
//! either of its tags (both tag markers remain until the commit). CompleteMultipartUpload
//! still refuses any tag that was never that part's.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::multipart::check_completion;
use crate::server::WriteSpec;
use crate::{Error, ErrorKind, Result};

/// Longest upload id this mapping makes (S3 documents no limit; clients put it in a
/// query string, so the metadata it carries is bounded by S3's own 2 KiB and this).
pub const MAX_UPLOAD_ID_LEN: usize = 8 * 1024;

const MAGIC: &[u8; 4] = b"TMPU";
const RAW_ID_LEN: usize = 32;

/// The metadata an upload carries to its commit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadMetadata {
    /// Content type.
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// User metadata, lower-case names without the protocol prefix.
    #[serde(rename = "m", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user_metadata: BTreeMap<String, String>,
    /// Content headers, by standard name.
    #[serde(rename = "h", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub content_headers: BTreeMap<String, String>,
}

impl UploadMetadata {
    /// The write the commit makes.
    pub fn into_write(self) -> WriteSpec {
        WriteSpec {
            content_type: self.content_type,
            user_metadata: self.user_metadata,
            content_headers: self.content_headers,
            ..WriteSpec::default()
        }
    }
}

/// What a block of an upload stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockRole {
    /// The upload was created.
    Created,
    /// The upload was aborted.
    Aborted,
    /// The bytes of a part.
    Part(u32),
    /// The MD5 of a part's bytes, as uploaded once.
    PartTag(u32, [u8; 16]),
}

/// One S3 multipart upload as Azure blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockUpload {
    id: String,
    tag: [u8; 8],
    metadata: UploadMetadata,
}

fn no_such_upload() -> Error {
    Error::new(
        ErrorKind::NoSuchUpload,
        "The specified multipart upload does not exist. The upload ID might be invalid, or the multipart upload might have been aborted or completed.",
    )
}

impl BlockUpload {
    /// A new upload of a write's metadata, with a fresh random id.
    ///
    /// # Errors
    /// [`ErrorKind::MetadataTooLarge`] when the id would pass [`MAX_UPLOAD_ID_LEN`];
    /// [`ErrorKind::InternalError`] without randomness.
    pub fn new(write: &WriteSpec) -> Result<BlockUpload> {
        let mut random = [0u8; 16];
        getrandom::getrandom(&mut random)
            .map_err(|e| Error::new(ErrorKind::InternalError, format!("no randomness: {e}")))?;
        let metadata = UploadMetadata {
            content_type: write.content_type.clone(),
            user_metadata: write.user_metadata.clone(),
            content_headers: write.content_headers.clone(),
        };
        let json = serde_json::to_vec(&metadata)
            .map_err(|e| Error::new(ErrorKind::InternalError, format!("upload metadata: {e}")))?;
        let id = format!(
            "{}.{}",
            hex::encode(random),
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
        );
        if id.len() > MAX_UPLOAD_ID_LEN {
            return Err(Error::new(
                ErrorKind::MetadataTooLarge,
                "Your metadata headers exceed the maximum allowed metadata size",
            ));
        }
        BlockUpload::parse(&id)
    }

    /// The upload an id names.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchUpload`] for an id this mapping did not make.
    pub fn parse(id: &str) -> Result<BlockUpload> {
        if id.len() > MAX_UPLOAD_ID_LEN {
            return Err(no_such_upload());
        }
        let (random, meta) = id.split_once('.').ok_or_else(no_such_upload)?;
        if random.len() != 32 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(no_such_upload());
        }
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(meta)
            .map_err(|_| no_such_upload())?;
        let metadata: UploadMetadata =
            serde_json::from_slice(&json).map_err(|_| no_such_upload())?;
        let digest = Sha256::digest(id.as_bytes());
        let mut tag = [0u8; 8];
        tag.copy_from_slice(&digest[..8]);
        Ok(BlockUpload {
            id: id.to_owned(),
            tag,
            metadata,
        })
    }

    /// The upload id, as S3 clients carry it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The metadata the commit writes.
    pub fn metadata(&self) -> &UploadMetadata {
        &self.metadata
    }

    /// The block id of a role in this upload.
    pub fn block_id(&self, role: BlockRole) -> String {
        let (number, kind, md5) = match role {
            BlockRole::Part(n) => (n, 0u8, [0u8; 16]),
            BlockRole::Created => (0, 1, [0; 16]),
            BlockRole::Aborted => (0, 2, [0; 16]),
            BlockRole::PartTag(n, md5) => (n, 3, md5),
        };
        let number = u16::try_from(number).unwrap_or(u16::MAX);
        let mut raw = [0u8; RAW_ID_LEN];
        raw[..4].copy_from_slice(MAGIC);
        raw[4..12].copy_from_slice(&self.tag);
        raw[12..14].copy_from_slice(&number.to_be_bytes());
        raw[14] = kind;
        raw[16..].copy_from_slice(&md5);
        base64::engine::general_purpose::STANDARD.encode(raw)
    }

    /// What a block id means to this upload; `None` for another upload's or a block
    /// that is not a mapping's.
    pub fn role_of(&self, block_id: &str) -> Option<BlockRole> {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(block_id)
            .ok()?;
        if raw.len() != RAW_ID_LEN || &raw[..4] != MAGIC || raw[4..12] != self.tag {
            return None;
        }
        let number = u32::from(u16::from_be_bytes([raw[12], raw[13]]));
        let mut md5 = [0u8; 16];
        md5.copy_from_slice(&raw[16..]);
        match (raw[14], number) {
            (0, 1..=10_000) => Some(BlockRole::Part(number)),
            (1, 0) => Some(BlockRole::Created),
            (2, 0) => Some(BlockRole::Aborted),
            (3, 1..=10_000) => Some(BlockRole::PartTag(number, md5)),
            _ => None,
        }
    }

    /// What the uncommitted blocks of the blob say of this upload.
    pub fn state(&self, uncommitted: &[(String, u64)]) -> UploadState {
        let mut state = UploadState::default();
        for (id, size) in uncommitted {
            match self.role_of(id) {
                Some(BlockRole::Created) => state.created = true,
                Some(BlockRole::Aborted) => state.aborted = true,
                Some(BlockRole::Part(n)) => {
                    state.parts.insert(n, *size);
                }
                Some(BlockRole::PartTag(n, md5)) => {
                    state.tags.entry(n).or_default().insert(md5);
                }
                None => {}
            }
        }
        state
    }

    /// Whether a blob's committed blocks are exactly `listed`'s parts, in order: the
    /// upload was completed with these parts already.
    pub fn completed_with(&self, committed: &[(String, u64)], listed: &[(u32, String)]) -> bool {
        committed.len() == listed.len()
            && committed
                .iter()
                .zip(listed)
                .all(|((id, _), (n, _))| self.role_of(id) == Some(BlockRole::Part(*n)))
    }
}

/// An upload as its blob's uncommitted blocks show it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadState {
    /// Whether the upload was created (and not yet completed: the commit drops it).
    pub created: bool,
    /// Whether it was aborted.
    pub aborted: bool,
    /// Each part's size, by number.
    pub parts: BTreeMap<u32, u64>,
    /// Each part's MD5s as uploaded, by number.
    pub tags: BTreeMap<u32, BTreeSet<[u8; 16]>>,
}

/// A part of an upload in progress, as ListParts shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedPart {
    /// Number.
    pub number: u32,
    /// Quoted MD5 entity tag.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
}

impl UploadState {
    /// Refuses an upload that was never created here, or was aborted or completed.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchUpload`].
    pub fn check_open(&self) -> Result<()> {
        if self.created && !self.aborted {
            Ok(())
        } else {
            Err(no_such_upload())
        }
    }

    /// The parts uploaded whole (bytes and tag), by number.
    pub fn listed_parts(&self) -> Vec<ListedPart> {
        self.parts
            .iter()
            .filter_map(|(n, size)| {
                let md5 = self.tags.get(n)?.iter().next_back()?;
                Some(ListedPart {
                    number: *n,
                    etag: format!("\"{}\"", hex::encode(md5)),
                    size: *size,
                })
            })
            .collect()
    }

    /// The part numbers to commit, in order, for the parts a client listed (number,
    /// entity tag), checked as S3 checks them.
    ///
    /// # Errors
    /// [`ErrorKind::MalformedXml`] for no parts, [`ErrorKind::InvalidPartOrder`],
    /// [`ErrorKind::InvalidPart`] for a part not uploaded or a tag it never had,
    /// [`ErrorKind::EntityTooSmall`] for a part other than the last under
    /// [`crate::multipart::MIN_PART_SIZE`].
    pub fn plan_commit(&self, listed: &[(u32, String)]) -> Result<Vec<u32>> {
        self.check_open()?;
        check_completion(listed, |n, etag| {
            let tag = hex::decode(crate::conditional::normalize_etag(etag))
                .ok()
                .and_then(|b| <[u8; 16]>::try_from(b).ok())?;
            self.tags
                .get(&n)
                .is_some_and(|s| s.contains(&tag))
                .then(|| self.parts.get(&n).copied())
                .flatten()
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::multipart::MIN_PART_SIZE;

    fn fixed(id: &str) -> BlockUpload {
        BlockUpload::parse(id).unwrap()
    }

    #[test]
    fn metadata_round_trips_through_the_upload_id() {
        let mut write = WriteSpec {
            content_type: Some("text/x-talon".into()),
            ..WriteSpec::default()
        };
        write.user_metadata.insert("who".into(), "ünï".into());
        write
            .content_headers
            .insert("cache-control".into(), "no-cache".into());
        let up = BlockUpload::new(&write).unwrap();
        let again = BlockUpload::parse(up.id()).unwrap();
        assert_eq!(again, up);
        let back = again.metadata().clone().into_write();
        assert_eq!(back.content_type, write.content_type);
        assert_eq!(back.user_metadata, write.user_metadata);
        assert_eq!(back.content_headers, write.content_headers);
        assert_ne!(
            BlockUpload::new(&write).unwrap().id(),
            up.id(),
            "ids are random"
        );
    }

    /// Golden vectors, computed independently in Python as
    /// `base64(b"TMPU" + sha256(id)[:8] + n.to_bytes(2, "big") + bytes([kind, 0]) + md5)`:
    /// the block ids an upload stores at an origin must not drift, or uploads in
    /// progress across an upgrade would lose their parts.
    #[test]
    fn block_ids_are_fixed_and_of_one_length() {
        let up = fixed("000102030405060708090a0b0c0d0e0f.e30");
        assert_eq!(
            up.block_id(BlockRole::Part(1)),
            "VE1QVbxiHwvGuyKSAAEAAAAAAAAAAAAAAAAAAAAAAAA="
        );
        assert_eq!(
            up.block_id(BlockRole::Created),
            "VE1QVbxiHwvGuyKSAAABAAAAAAAAAAAAAAAAAAAAAAA="
        );
        let md5 = [0xab; 16];
        assert_eq!(
            up.block_id(BlockRole::PartTag(10_000, md5)),
            "VE1QVbxiHwvGuyKSJxADAKurq6urq6urq6urq6urq6s="
        );
        for role in [
            BlockRole::Created,
            BlockRole::Aborted,
            BlockRole::Part(1),
            BlockRole::Part(10_000),
            BlockRole::PartTag(7, md5),
        ] {
            let id = up.block_id(role);
            assert_eq!(id.len(), 44);
            assert_eq!(up.role_of(&id), Some(role));
        }
    }

    #[test]
    fn other_uploads_and_foreign_blocks_mean_nothing() {
        let a = fixed("000102030405060708090a0b0c0d0e0f.e30");
        let forged = fixed("000102030405060708090a0b0c0d0e0f.eyJ0IjoieCJ9");
        let id = a.block_id(BlockRole::Part(3));
        assert_eq!(
            forged.role_of(&id),
            None,
            "altered metadata names other blocks"
        );
        assert_eq!(a.role_of("QUFB"), None);
        assert_eq!(a.role_of("not base64!"), None);
        for bad in [
            "",
            "x.e30",
            "000102030405060708090a0b0c0d0e0f",
            "000102030405060708090a0b0c0d0e0f.!!",
        ] {
            assert_eq!(
                BlockUpload::parse(bad).unwrap_err().kind(),
                ErrorKind::NoSuchUpload,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn commits_are_checked_as_s3_checks_them() {
        let up = fixed("000102030405060708090a0b0c0d0e0f.e30");
        let (m1, m2) = ([1u8; 16], [2u8; 16]);
        let tag = |m: [u8; 16]| format!("\"{}\"", hex::encode(m));
        let blocks = |with: &[BlockRole], sizes: &[u64]| -> Vec<(String, u64)> {
            with.iter()
                .zip(sizes)
                .map(|(r, s)| (up.block_id(*r), *s))
                .collect()
        };
        let none = up.state(&[]);
        assert_eq!(
            none.plan_commit(&[(1, tag(m1))]).unwrap_err().kind(),
            ErrorKind::NoSuchUpload
        );
        let state = up.state(&blocks(
            &[
                BlockRole::Created,
                BlockRole::Part(1),
                BlockRole::PartTag(1, m1),
                BlockRole::Part(2),
                BlockRole::PartTag(2, m2),
                BlockRole::Part(3),
            ],
            &[1, MIN_PART_SIZE, 1, 10, 1, 4],
        ));
        // Part 3 has bytes but no tag yet: not listed, not committable.
        assert_eq!(
            state.listed_parts(),
            [
                ListedPart {
                    number: 1,
                    etag: tag(m1),
                    size: MIN_PART_SIZE
                },
                ListedPart {
                    number: 2,
                    etag: tag(m2),
                    size: 10
                },
            ]
        );
        assert_eq!(
            state.plan_commit(&[(1, tag(m1)), (2, tag(m2))]).unwrap(),
            [1, 2]
        );
        let kind = |l: &[(u32, String)]| state.plan_commit(l).unwrap_err().kind();
        assert_eq!(kind(&[]), ErrorKind::MalformedXml);
        assert_eq!(
            kind(&[(2, tag(m2)), (1, tag(m1))]),
            ErrorKind::InvalidPartOrder
        );
        assert_eq!(kind(&[(1, tag(m2))]), ErrorKind::InvalidPart);
        assert_eq!(kind(&[(1, tag(m1)), (3, tag(m1))]), ErrorKind::InvalidPart);
        assert_eq!(kind(&[(1, tag(m1)), (2, tag(m1))]), ErrorKind::InvalidPart);
        assert_eq!(kind(&[(1, "\"zz\"".into())]), ErrorKind::InvalidPart);
        let small = up.state(&blocks(
            &[
                BlockRole::Created,
                BlockRole::Part(1),
                BlockRole::PartTag(1, m1),
                BlockRole::Part(2),
                BlockRole::PartTag(2, m2),
            ],
            &[1, 10, 1, 10, 1],
        ));
        assert_eq!(
            small
                .plan_commit(&[(1, tag(m1)), (2, tag(m2))])
                .unwrap_err()
                .kind(),
            ErrorKind::EntityTooSmall
        );
        let mut aborted = blocks(
            &[
                BlockRole::Created,
                BlockRole::Part(1),
                BlockRole::PartTag(1, m1),
            ],
            &[1, 1, 1],
        );
        aborted.push((up.block_id(BlockRole::Aborted), 1));
        assert_eq!(
            up.state(&aborted)
                .plan_commit(&[(1, tag(m1))])
                .unwrap_err()
                .kind(),
            ErrorKind::NoSuchUpload
        );
        // Completed: the parts are the committed blocks, in order.
        let committed = blocks(
            &[BlockRole::Part(1), BlockRole::Part(2)],
            &[MIN_PART_SIZE, 10],
        );
        assert!(up.completed_with(&committed, &[(1, tag(m1)), (2, tag(m2))]));
        assert!(!up.completed_with(&committed, &[(1, tag(m1))]));
        assert!(
            !fixed("ffff0102030405060708090a0b0c0d0e.e30")
                .completed_with(&committed, &[(1, tag(m1)), (2, tag(m2))])
        );
    }
}
