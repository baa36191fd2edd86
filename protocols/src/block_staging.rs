//! Azure block blobs over an S3 origin: how a gateway keeps an Azure client's uncommitted
//! blocks, and a blob's committed block list, as objects at an S3 origin, and what a
//! Put Block List assembles.
//!
//! S3 has nothing like uncommitted blocks that a later list orders freely. Its multipart
//! parts are ordered by number and must be at least 5 MiB but the last, while Azure's SDKs
//! upload 4 MiB blocks by default and name them as they like. So each block is staged as
//! an object of its own, under a reserved prefix of the same bucket:
//!
//! ```text
//! .talon-blocks/<sha256(blob name)>/u/<hex(block id bytes)>   an uncommitted block
//! .talon-blocks/<sha256(blob name)>/committed                 the committed block list (JSON), naming the object version it describes
//! ```
//!
//! Put Block List reads the listed blocks in order (staged objects, or ranges of the
//! current object for committed blocks, pinned to its version) into one PutObject of the
//! blob, then records the new block list and removes the staged blocks, as Azure drops a
//! blob's uncommitted blocks at a commit. A gateway lists nothing under the reserved
//! prefix. The staging is at the origin, so a retried block, another gateway or a
//! restarted one continue the same upload.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::azure::xml::BlockListItem;
use crate::names::check_block_id;
use crate::{Error, ErrorKind, Result};

/// The prefix, in every bucket of an S3 origin, under which staged blocks and block lists
/// live; listings through a gateway leave it out.
pub const STAGING_PREFIX: &str = ".talon-blocks/";

/// Largest blob a Put Block List assembles over an S3 origin: one PutObject (S3's limit).
pub const MAX_ASSEMBLED_BYTES: u64 = 5 << 30;

/// Whether a key (or listed prefix) is the gateway's own staging, hidden from listings.
pub fn is_staging_key(key: &str) -> bool {
    key.starts_with(STAGING_PREFIX)
}

/// The staging of one blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobStaging {
    root: String,
}

/// A committed block list, as stored beside the object it describes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedRecord {
    /// The canonical ETag of the object version whose content these blocks are.
    pub etag: String,
    /// The blocks (id, size), in order.
    pub blocks: Vec<(String, u64)>,
}

/// Where the bytes of one listed block come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A staged block: the whole of this object.
    Staged {
        /// The staged object's key.
        key: String,
        /// Its size.
        len: u64,
    },
    /// A committed block: this range of the current object.
    Committed {
        /// First byte.
        offset: u64,
        /// Length.
        len: u64,
    },
}

impl Segment {
    /// The segment's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Segment::Staged { len, .. } | Segment::Committed { len, .. } => *len,
        }
    }

    /// Whether the segment has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a Put Block List makes: the segments in order and the new committed list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assembly {
    /// Where the blob's bytes come from, in order.
    pub segments: Vec<Segment>,
    /// The blob's block list once committed.
    pub blocks: Vec<(String, u64)>,
}

impl Assembly {
    /// The blob's size.
    pub fn len(&self) -> u64 {
        self.segments.iter().map(Segment::len).sum()
    }

    /// Whether the blob is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn invalid_block_list(id: &str) -> Error {
    Error::new(
        ErrorKind::InvalidPart,
        format!("The specified block list is invalid: block '{id}' was not found."),
    )
}

impl BlobStaging {
    /// The staging of the blob `name`.
    pub fn of(name: &str) -> BlobStaging {
        BlobStaging {
            root: format!(
                "{STAGING_PREFIX}{}/",
                hex::encode(Sha256::digest(name.as_bytes()))
            ),
        }
    }

    /// The prefix of the blob's staged (uncommitted) blocks.
    pub fn uncommitted_prefix(&self) -> String {
        format!("{}u/", self.root)
    }

    /// The key a block is staged under.
    ///
    /// # Errors
    /// As [`check_block_id`].
    pub fn block_key(&self, block_id: &str) -> Result<String> {
        let bytes = check_block_id(block_id)?;
        Ok(format!(
            "{}{}",
            self.uncommitted_prefix(),
            hex::encode(bytes)
        ))
    }

    /// The block id a staged key holds; `None` for a key that is not one of this blob's.
    pub fn block_id_of(&self, key: &str) -> Option<String> {
        let hex_id = key.strip_prefix(&self.uncommitted_prefix())?;
        let bytes = hex::decode(hex_id)
            .ok()
            .filter(|b| (1..=64).contains(&b.len()))?;
        Some(base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    /// The key of the blob's committed block list.
    pub fn record_key(&self) -> String {
        format!("{}committed", self.root)
    }

    /// Resolves a Put Block List: each listed block from the staged blocks
    /// (`uncommitted`: id → staged size) or the committed ones (`committed`: the
    /// current list, when it describes the object now stored).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidPart`] (Azure `InvalidBlockList`) for a block that is not
    /// where the list says; [`ErrorKind::EntityTooLarge`] past
    /// [`MAX_ASSEMBLED_BYTES`]; [`ErrorKind::InvalidHeaderValue`] for a bad block id.
    pub fn assemble(
        &self,
        items: &[BlockListItem],
        uncommitted: &BTreeMap<String, u64>,
        committed: &[(String, u64)],
    ) -> Result<Assembly> {
        let mut offsets: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        let mut offset = 0;
        for (id, size) in committed {
            offsets.entry(id.as_str()).or_insert((offset, *size));
            offset += size;
        }
        let mut out = Assembly::default();
        for item in items {
            let id = item.id();
            check_block_id(id)?;
            let staged = || -> Result<Option<Segment>> {
                match uncommitted.get(id) {
                    Some(len) => Ok(Some(Segment::Staged {
                        key: self.block_key(id)?,
                        len: *len,
                    })),
                    None => Ok(None),
                }
            };
            let kept = || {
                offsets.get(id).map(|(offset, len)| Segment::Committed {
                    offset: *offset,
                    len: *len,
                })
            };
            let segment = match item {
                BlockListItem::Uncommitted(_) => staged()?,
                BlockListItem::Committed(_) => kept(),
                BlockListItem::Latest(_) => match staged()? {
                    Some(s) => Some(s),
                    None => kept(),
                },
            }
            .ok_or_else(|| invalid_block_list(id))?;
            out.blocks.push((id.to_owned(), segment.len()));
            out.segments.push(segment);
        }
        if out.len() > MAX_ASSEMBLED_BYTES {
            return Err(Error::new(
                ErrorKind::EntityTooLarge,
                "The blob is larger than the S3 origin accepts in one write (5 GiB).",
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn staged_keys_are_fixed_and_reversible() {
        let s = BlobStaging::of("dir/blob.bin");
        // Golden (Python: hashlib.sha256(b"dir/blob.bin"), and "AAA" in hex): staged objects at an origin must
        // keep their names across upgrades.
        assert_eq!(
            s.block_key("QUFB").unwrap(),
            ".talon-blocks/b0e98cecfb314c737d6476dd15c89ff15247a81b392804dfec42edcd3f217f9b/u/414141"
        );
        assert_eq!(
            s.block_id_of(&s.block_key("QUFB").unwrap()).as_deref(),
            Some("QUFB")
        );
        assert_eq!(s.block_id_of("other/u/414141"), None);
        assert!(is_staging_key(&s.record_key()));
        assert!(!is_staging_key("dir/blob.bin"));
        for bad in ["", "!!", "QUFB=extra"] {
            assert_eq!(
                s.block_key(bad).unwrap_err().kind(),
                ErrorKind::InvalidHeaderValue,
                "{bad:?}"
            );
        }
        let long = base64::engine::general_purpose::STANDARD.encode([7u8; 65]);
        assert!(s.block_key(&long).is_err());
    }

    #[test]
    fn block_lists_resolve_as_azure_resolves_them() {
        let s = BlobStaging::of("b");
        let uncommitted: BTreeMap<String, u64> = [("QUFB".to_owned(), 3), ("QkJC".to_owned(), 2)]
            .into_iter()
            .collect();
        let committed = vec![("QkJC".to_owned(), 10), ("Q0ND".to_owned(), 5)];
        let a = s
            .assemble(
                &[
                    BlockListItem::Latest("QkJC".into()),
                    BlockListItem::Committed("QkJC".into()),
                    BlockListItem::Committed("Q0ND".into()),
                    BlockListItem::Uncommitted("QUFB".into()),
                    BlockListItem::Latest("Q0ND".into()),
                ],
                &uncommitted,
                &committed,
            )
            .unwrap();
        assert_eq!(
            a.segments,
            [
                Segment::Staged {
                    key: s.block_key("QkJC").unwrap(),
                    len: 2
                },
                Segment::Committed { offset: 0, len: 10 },
                Segment::Committed { offset: 10, len: 5 },
                Segment::Staged {
                    key: s.block_key("QUFB").unwrap(),
                    len: 3
                },
                Segment::Committed { offset: 10, len: 5 },
            ]
        );
        assert_eq!(a.len(), 25);
        assert_eq!(a.blocks[0], ("QkJC".to_owned(), 2));
        let missing = |item: BlockListItem| {
            s.assemble(&[item], &uncommitted, &committed)
                .unwrap_err()
                .kind()
        };
        assert_eq!(
            missing(BlockListItem::Uncommitted("Q0ND".into())),
            ErrorKind::InvalidPart
        );
        assert_eq!(
            missing(BlockListItem::Committed("QUFB".into())),
            ErrorKind::InvalidPart
        );
        assert_eq!(
            missing(BlockListItem::Latest("RERE".into())),
            ErrorKind::InvalidPart
        );
        assert_eq!(
            s.assemble(&[], &uncommitted, &committed).unwrap(),
            Assembly::default()
        );
    }
}
