//! Object and block identity: which backend, which bucket or container,
//! which object, which version of it, and which block of that version.
//!
//! # Key paths
//!
//! An [`ObjectId`] has one textual form, its *key path*:
//!
//! | backend | key path |
//! |---|---|
//! | S3 | `s3/<bucket>/<path>` |
//! | Azure Blob | `az/<account>/<container>/<path>` |
//!
//! Bucket, account and container are non-empty, at most
//! [`MAX_NAMESPACE_LEN`] bytes, and contain neither `/` nor NUL. The path is
//! non-empty, at most [`MAX_PATH_LEN`] bytes, contains no NUL, and has no
//! empty, `.` or `..` segment (so no leading, trailing or doubled `/`).
//! Because the namespace parts cannot contain `/`, a key path splits back
//! into exactly one id. Objects whose keys break these rules (S3 "directory
//! markers" such as `logs/`, keys with `//`) cannot be cached and must be
//! served straight from the origin.
//!
//! # Placement key and storage name
//!
//! [`BlockId::placement_key`] decides which workers hold a block (rendezvous
//! hashing). It is SHA-256 over this canonical encoding, every integer
//! big-endian:
//!
//! ```text
//! "talon/place/v2"                       14 bytes ASCII, domain separation
//! backend tag: u8                        1 = S3, 2 = Azure
//! for each name, in order:               S3: bucket, path
//!     len: u32, then len bytes UTF-8     Azure: account, container, path
//! block_offset: u64                      bytes from the object's start
//! block_size: u64                        bytes
//! ```
//!
//! The version is not part of it: every version of a block has the same
//! owners, so the owner of an object's first block can be found before the
//! version is known. That worker is the object's metadata home (it answers
//! Stat), and a first read that learns the metadata and the first bytes from
//! one origin GET stores those bytes where they will be read
//! ([`BlockId::first_block_placement_key`]).
//!
//! [`BlockId::storage_name`], the block's file name on a worker, is the hex
//! SHA-256 of the same fields with the version, under its own domain:
//!
//! ```text
//! "talon/block/v1"                       14 bytes ASCII, domain separation
//! backend tag: u8
//! for each name, in order: len u32, bytes
//! version: len u32, then len bytes       the ETag or version id, verbatim
//! block_offset: u64
//! block_size: u64
//! ```
//!
//! The backend tag fixes how many names follow and every variable-length
//! field is length-prefixed, so two different blocks never share an
//! encoding. Both encodings are frozen: changing one moves every cached block
//! to another worker (the placement key did, once, on 2026-12-04, when the
//! version left it) or another file name.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

use crate::error::{Error, NameField, NameProblem};

/// Longest bucket, account or container name accepted, in bytes.
///
/// Real limits are lower (S3 buckets 63, Azure accounts 24, containers 63);
/// this bound only keeps ids small and wire messages under their caps.
pub const MAX_NAMESPACE_LEN: usize = 255;

/// Longest object path accepted, in bytes of UTF-8. S3 keys are limited to
/// 1024 bytes and Azure blob names to 1024 characters (up to 4096 bytes).
pub const MAX_PATH_LEN: usize = 4096;

/// Longest [`ObjectVersion`] accepted, in bytes.
pub const MAX_VERSION_LEN: usize = 1024;

/// Domain separation prefix of the placement-key encoding.
const PLACEMENT_DOMAIN: &[u8; 14] = b"talon/place/v2";

/// Domain separation prefix of the storage-name encoding.
const STORAGE_DOMAIN: &[u8; 14] = b"talon/block/v1";

/// The kind of object store an object lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Backend {
    /// Amazon S3 or an S3-compatible store.
    S3,
    /// Azure Blob Storage.
    Azure,
}

impl Backend {
    /// The first segment of this backend's key paths: `s3` or `az`.
    pub const fn key_prefix(self) -> &'static str {
        match self {
            Self::S3 => "s3",
            Self::Azure => "az",
        }
    }

    /// The stable one-byte tag used on the wire and in placement keys:
    /// 1 for S3, 2 for Azure.
    pub const fn tag(self) -> u8 {
        match self {
            Self::S3 => 1,
            Self::Azure => 2,
        }
    }

    /// The backend with this [`tag`](Self::tag), if any.
    pub const fn from_tag(tag: u8) -> Option<Self> {
        match tag {
            1 => Some(Self::S3),
            2 => Some(Self::Azure),
            _ => None,
        }
    }
}

impl Backend {
    /// The protocol's name in flags and logs: `s3` or `azure`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::S3 => "s3",
            Self::Azure => "azure",
        }
    }
}

/// A flag's value: `s3` or `azure` ([`Backend::name`]).
impl std::str::FromStr for Backend {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "s3" => Ok(Self::S3),
            "azure" => Ok(Self::Azure),
            other => Err(format!("unknown origin '{other}' (s3, azure)")),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key_prefix())
    }
}

/// Where an object lives inside its backend, borrowed from an [`ObjectId`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Namespace<'a> {
    /// An S3 bucket.
    S3 {
        /// Bucket name.
        bucket: &'a str,
    },
    /// An Azure storage account and container.
    Azure {
        /// Storage account name.
        account: &'a str,
        /// Container name.
        container: &'a str,
    },
}

/// An id's names as given, before validation ([`ObjectId::from_repr`]): borrowed, so
/// that building an id costs the one allocation of its joined names.
enum Repr<'a> {
    S3 {
        bucket: &'a str,
        path: &'a str,
    },
    Azure {
        account: &'a str,
        container: &'a str,
        path: &'a str,
    },
}

/// A validated object name: backend, namespace (bucket, or account and
/// container) and path. Says nothing about the object's content; pair it
/// with an [`ObjectVersion`] for that.
///
/// Every constructor validates through the same rules (see the
/// [module docs](self)), so any `ObjectId` converts to a key path and back.
///
/// Held compactly, since caches keep a million of them: the names joined by `/` in
/// one allocation, with where each namespace name ends (no namespace name holds a
/// `/`), 24 bytes inline where three strings took 72. Ordered by backend (S3 first),
/// then name by name.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ObjectId {
    backend: Backend,
    /// Where the first namespace name (bucket, account) ends in `joined`, and the
    /// second (container; Azure only, else equal to the first).
    ends: [u16; 2],
    /// The names in canonical order ([`Self::names`]) joined by `/`.
    joined: Box<str>,
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ObjectId").field(&self.to_string()).finish()
    }
}

impl PartialOrd for ObjectId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ObjectId {
    /// Backend first (S3 before Azure), then each name in turn: as the names compare,
    /// not as their joined text would (`ab` sorts before `ab-`, whose `-` is below `/`).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.backend
            .cmp(&other.backend)
            .then_with(|| self.names().cmp(other.names()))
    }
}

impl ObjectId {
    /// An S3 object. Errors with [`Error::InvalidName`] if the bucket or
    /// path breaks the key-path rules.
    pub fn s3(bucket: impl AsRef<str>, path: impl AsRef<str>) -> Result<Self, Error> {
        Self::from_repr(Repr::S3 {
            bucket: bucket.as_ref(),
            path: path.as_ref(),
        })
    }

    /// An Azure blob. Errors with [`Error::InvalidName`] if the account,
    /// container or path breaks the key-path rules.
    pub fn azure(
        account: impl AsRef<str>,
        container: impl AsRef<str>,
        path: impl AsRef<str>,
    ) -> Result<Self, Error> {
        Self::from_repr(Repr::Azure {
            account: account.as_ref(),
            container: container.as_ref(),
            path: path.as_ref(),
        })
    }

    /// Parses `s3/<bucket>/<path>` or `az/<account>/<container>/<path>`.
    ///
    /// Errors with [`Error::UnknownBackend`] for any other first segment and
    /// [`Error::InvalidName`] for a missing or invalid part.
    pub fn from_key_path(key_path: &str) -> Result<Self, Error> {
        let (prefix, rest) = key_path.split_once('/').unwrap_or((key_path, ""));
        let repr = if prefix == Backend::S3.key_prefix() {
            let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
            Repr::S3 { bucket, path }
        } else if prefix == Backend::Azure.key_prefix() {
            let (account, rest) = rest.split_once('/').unwrap_or((rest, ""));
            let (container, path) = rest.split_once('/').unwrap_or((rest, ""));
            Repr::Azure {
                account,
                container,
                path,
            }
        } else {
            return Err(Error::UnknownBackend);
        };
        Self::from_repr(repr)
    }

    /// The key path: `s3/<bucket>/<path>` or `az/<account>/<container>/<path>`.
    pub fn key_path(&self) -> String {
        self.to_string()
    }

    /// Which backend the object lives in.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The bucket, or account and container.
    pub fn namespace(&self) -> Namespace<'_> {
        let [first, second] = self.ends.map(usize::from);
        match self.backend {
            Backend::S3 => Namespace::S3 {
                bucket: &self.joined[..first],
            },
            Backend::Azure => Namespace::Azure {
                account: &self.joined[..first],
                container: &self.joined[first + 1..second],
            },
        }
    }

    /// The object path: the S3 key or the Azure blob name.
    pub fn path(&self) -> &str {
        &self.joined[usize::from(self.ends[1]) + 1..]
    }

    /// Bytes this id holds, inline and on the heap (for caches' byte bounds).
    pub fn held_bytes(&self) -> u64 {
        (std::mem::size_of::<ObjectId>() + self.joined.len()) as u64
    }

    /// The names in canonical order (S3: bucket, path; Azure: account,
    /// container, path), as used by the wire and placement encodings.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        let [first, second] = self.ends.map(usize::from);
        let (a, b, c) = match self.backend {
            Backend::S3 => (&self.joined[..first], Some(self.path()), None),
            Backend::Azure => (
                &self.joined[..first],
                Some(&self.joined[first + 1..second]),
                Some(self.path()),
            ),
        };
        std::iter::once(a).chain(b).chain(c)
    }

    /// Builds an id from names in canonical order (see [`Self::names`]);
    /// the one entry point for the wire decoder.
    pub(crate) fn from_names(backend: Backend, names: &[&str]) -> Result<Self, Error> {
        let name = |i: usize| names.get(i).copied().unwrap_or_default();
        let repr = match backend {
            Backend::S3 => Repr::S3 {
                bucket: name(0),
                path: name(1),
            },
            Backend::Azure => Repr::Azure {
                account: name(0),
                container: name(1),
                path: name(2),
            },
        };
        Self::from_repr(repr)
    }

    /// How many names an id of this backend has.
    pub(crate) const fn name_count(backend: Backend) -> usize {
        match backend {
            Backend::S3 => 2,
            Backend::Azure => 3,
        }
    }

    /// The single validation point behind every constructor.
    fn from_repr(repr: Repr) -> Result<Self, Error> {
        // A namespace name is at most MAX_NAMESPACE_LEN (255) bytes, so both ends fit.
        let end = |len: usize| u16::try_from(len).unwrap_or(u16::MAX);
        match repr {
            Repr::S3 { bucket, path } => {
                validate_namespace(NameField::Bucket, bucket)?;
                validate_path(path)?;
                let first = end(bucket.len());
                let mut joined = String::with_capacity(bucket.len() + 1 + path.len());
                joined.push_str(bucket);
                joined.push('/');
                joined.push_str(path);
                Ok(Self {
                    backend: Backend::S3,
                    ends: [first, first],
                    joined: joined.into_boxed_str(),
                })
            }
            Repr::Azure {
                account,
                container,
                path,
            } => {
                validate_namespace(NameField::Account, account)?;
                validate_namespace(NameField::Container, container)?;
                validate_path(path)?;
                let first = end(account.len());
                let second = end(account.len() + 1 + container.len());
                let mut joined =
                    String::with_capacity(account.len() + 2 + container.len() + path.len());
                joined.push_str(account);
                joined.push('/');
                joined.push_str(container);
                joined.push('/');
                joined.push_str(path);
                Ok(Self {
                    backend: Backend::Azure,
                    ends: [first, second],
                    joined: joined.into_boxed_str(),
                })
            }
        }
    }
}

impl fmt::Display for ObjectId {
    /// Writes the key path.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.backend().key_prefix())?;
        for name in self.names() {
            f.write_str("/")?;
            f.write_str(name)?;
        }
        Ok(())
    }
}

impl FromStr for ObjectId {
    type Err = Error;

    /// Same as [`ObjectId::from_key_path`].
    fn from_str(s: &str) -> Result<Self, Error> {
        Self::from_key_path(s)
    }
}

fn invalid(field: NameField, problem: NameProblem) -> Error {
    Error::InvalidName { field, problem }
}

fn validate_namespace(field: NameField, name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(invalid(field, NameProblem::Empty));
    }
    if name.len() > MAX_NAMESPACE_LEN {
        let problem = NameProblem::TooLong {
            len: name.len(),
            max: MAX_NAMESPACE_LEN,
        };
        return Err(invalid(field, problem));
    }
    if name.contains('/') {
        return Err(invalid(field, NameProblem::ContainsSlash));
    }
    if name.contains('\0') {
        return Err(invalid(field, NameProblem::ContainsNul));
    }
    Ok(())
}

fn validate_path(path: &str) -> Result<(), Error> {
    let field = NameField::Path;
    if path.is_empty() {
        return Err(invalid(field, NameProblem::Empty));
    }
    if path.len() > MAX_PATH_LEN {
        let problem = NameProblem::TooLong {
            len: path.len(),
            max: MAX_PATH_LEN,
        };
        return Err(invalid(field, problem));
    }
    if path.contains('\0') {
        return Err(invalid(field, NameProblem::ContainsNul));
    }
    // Empty segments are keys S3 and Azure store (folder markers such as `dir/`, and
    // `a//b`) and reach an origin unchanged; `.` and `..` segments would be resolved
    // away by URL normalisation on the way to an origin, into another object's name.
    if path
        .split('/')
        .any(|segment| segment == "." || segment == "..")
    {
        return Err(invalid(field, NameProblem::DotSegment));
    }
    Ok(())
}

/// An entity tag in its canonical form: without surrounding whitespace, a weak `W/`
/// prefix or the surrounding double quotes. S3 and Azure quote their ETags in headers
/// and listings alike; the canonical form is what is left, and the one an
/// [`ObjectVersion`] holds.
pub fn canonical_etag(tag: &str) -> &str {
    let tag = tag.trim();
    let tag = tag.strip_prefix("W/").unwrap_or(tag);
    tag.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(tag)
}

/// The version of an object's content as the origin names it: the ETag (S3,
/// Azure) or version id in its canonical form ([`canonical_etag`]: no quotes),
/// compared byte for byte. Non-empty and at most [`MAX_VERSION_LEN`] bytes.
///
/// It is part of each [`BlockId`] and hence of placement and file names, so every
/// component takes it from an entity tag with [`ObjectVersion::from_etag`]: the same
/// version reached through a HEAD, a GET, a listing or a worker's stat is the same
/// `ObjectVersion` and names the same blocks. [`ObjectVersion::new`] keeps its
/// argument as it is (a version already canonical: off the wire, off disk).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectVersion(String);

impl ObjectVersion {
    /// Wraps an ETag or version id. Errors with [`Error::InvalidName`] if it
    /// is empty or longer than [`MAX_VERSION_LEN`] bytes.
    pub fn new(version: impl Into<String>) -> Result<Self, Error> {
        let version = version.into();
        let field = NameField::Version;
        if version.is_empty() {
            return Err(invalid(field, NameProblem::Empty));
        }
        if version.len() > MAX_VERSION_LEN {
            let problem = NameProblem::TooLong {
                len: version.len(),
                max: MAX_VERSION_LEN,
            };
            return Err(invalid(field, problem));
        }
        Ok(Self(version))
    }

    /// The version an entity tag names, in canonical form: `"abc"`, `abc` and
    /// `W/"abc"` are one version.
    ///
    /// # Errors
    /// As [`ObjectVersion::new`], for what is left of the tag.
    pub fn from_etag(etag: &str) -> Result<Self, Error> {
        Self::new(canonical_etag(etag))
    }

    /// The version string, verbatim.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ObjectVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One block of one version of an object: the unit of placement, caching and
/// eviction. Because the version is part of the id, an object overwritten at
/// the origin never maps to the same block.
///
/// Invariant: `block_size` is a power of two and `block_offset` a multiple
/// of it (enforced by [`BlockId::new`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId {
    object: ObjectId,
    version: ObjectVersion,
    block_offset: u64,
    block_size: u64,
}

impl BlockId {
    /// The block of `object` at `version` starting at byte `block_offset`,
    /// `block_size` bytes long (the last block of an object may hold fewer
    /// bytes, see [`len_in`](Self::len_in)).
    ///
    /// Errors with [`Error::InvalidBlock`] if `block_size` is not a power of
    /// two or `block_offset` is not a multiple of it.
    pub fn new(
        object: ObjectId,
        version: ObjectVersion,
        block_offset: u64,
        block_size: u64,
    ) -> Result<Self, Error> {
        let reason = if !block_size.is_power_of_two() {
            Some("block size must be a power of two")
        } else if !block_offset.is_multiple_of(block_size) {
            Some("block offset must be a multiple of the block size")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(Error::InvalidBlock {
                block_offset,
                block_size,
                reason,
            });
        }
        Ok(Self {
            object,
            version,
            block_offset,
            block_size,
        })
    }

    /// [`BlockId::new`] for callers that already uphold the invariant.
    pub(crate) fn new_aligned(
        object: ObjectId,
        version: ObjectVersion,
        block_offset: u64,
        block_size: u64,
    ) -> Self {
        debug_assert!(block_size.is_power_of_two() && block_offset.is_multiple_of(block_size));
        Self {
            object,
            version,
            block_offset,
            block_size,
        }
    }

    /// The object this block belongs to.
    pub fn object(&self) -> &ObjectId {
        &self.object
    }

    /// The object version this block belongs to.
    pub fn version(&self) -> &ObjectVersion {
        &self.version
    }

    /// Offset of the block's first byte in the object, in bytes.
    pub fn block_offset(&self) -> u64 {
        self.block_offset
    }

    /// Nominal block size in bytes (a power of two).
    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// How many bytes of this block exist in an object of `object_size`
    /// bytes: `block_size`, less for the last block, 0 for a block at or
    /// past the end.
    pub fn len_in(&self, object_size: u64) -> u64 {
        object_size
            .saturating_sub(self.block_offset)
            .min(self.block_size)
    }

    /// The stable 256-bit key that placement (rendezvous hashing) uses:
    /// SHA-256 over the canonical encoding in the [module docs](self), which
    /// leaves the version out.
    pub fn placement_key(&self) -> [u8; 32] {
        placement_key_of(&self.object, self.block_offset, self.block_size)
    }

    /// The placement key of the first block of `object` with blocks of
    /// `block_size` bytes, whatever its version: its owner is the object's
    /// metadata home.
    pub fn first_block_placement_key(object: &ObjectId, block_size: u64) -> [u8; 32] {
        placement_key_of(object, 0, block_size)
    }

    /// A file-name-safe name for this block, distinct for every version: the
    /// 64 lowercase hex digits of the storage encoding in the
    /// [module docs](self).
    pub fn storage_name(&self) -> String {
        hex::encode(self.storage_key())
    }

    /// The 32 bytes that [`Self::storage_name`] spells in hex: a key for in-memory
    /// indexes of blocks, distinct for every version, that costs no text.
    pub fn storage_key(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(STORAGE_DOMAIN);
        hasher.update([self.object.backend().tag()]);
        let version = std::iter::once(self.version.as_str());
        for field in self.object.names().chain(version) {
            hash_field(&mut hasher, field);
        }
        hasher.update(self.block_offset.to_be_bytes());
        hasher.update(self.block_size.to_be_bytes());
        hasher.finalize().into()
    }
}

/// One length-prefixed field of the encodings (names are bounded far below
/// u32::MAX by validation).
fn hash_field(hasher: &mut Sha256, field: &str) {
    let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
    hasher.update(len.to_be_bytes());
    hasher.update(field.as_bytes());
}

fn placement_key_of(object: &ObjectId, block_offset: u64, block_size: u64) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(PLACEMENT_DOMAIN);
    hasher.update([object.backend().tag()]);
    for field in object.names() {
        hash_field(&mut hasher, field);
    }
    hasher.update(block_offset.to_be_bytes());
    hasher.update(block_size.to_be_bytes());
    hasher.finalize().into()
}

impl fmt::Display for BlockId {
    /// `<key path>@<version>:<block_offset>+<block_size>`, for logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}@{}:{}+{}",
            self.object, self.version, self.block_offset, self.block_size
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// An id is held as its names joined in one allocation (24 bytes inline, where three
    /// strings took 72), and still orders, compares and names as its parts do: `ab`
    /// sorts before `ab-` though `ab/…` sorts after `ab-/…` as text.
    #[test]
    fn an_id_is_the_same_from_borrowed_or_owned_names_and_holds_them_exactly() {
        let bucket = String::from("data");
        let from_str = ObjectId::s3("data", "dir/k.bin").unwrap();
        let from_owned = ObjectId::s3(bucket.clone(), String::from("dir/k.bin")).unwrap();
        let from_ref = ObjectId::s3(&bucket, "dir/k.bin").unwrap();
        assert_eq!(from_str, from_owned);
        assert_eq!(from_str, from_ref);
        assert_eq!(from_str.key_path(), "s3/data/dir/k.bin");
        assert_eq!(from_str.held_bytes(), 24 + "data/dir/k.bin".len() as u64);
        let blob = ObjectId::azure("acct", String::from("box"), "a/b").unwrap();
        assert_eq!(blob.key_path(), "az/acct/box/a/b");
        assert_eq!(ObjectId::from_key_path("az/acct/box/a/b").unwrap(), blob);
        assert!(ObjectId::s3("", "k").is_err());
        assert!(ObjectId::from_key_path("s3/data").is_err());
    }

    #[test]
    fn a_compact_id_orders_and_names_as_its_parts() {
        assert_eq!(std::mem::size_of::<ObjectId>(), 24);
        let a = ObjectId::s3("ab", "z").unwrap();
        let b = ObjectId::s3("ab-", "a").unwrap();
        assert!(a < b, "bucket by bucket, not by the joined text");
        let blob = ObjectId::azure("acct", "box", "dir/file").unwrap();
        assert!(b < blob, "S3 before Azure");
        assert_eq!(
            blob.namespace(),
            Namespace::Azure {
                account: "acct",
                container: "box"
            }
        );
        assert_eq!(blob.path(), "dir/file");
        assert_eq!(blob.key_path(), "az/acct/box/dir/file");
        assert_eq!(blob.held_bytes(), 24 + "acct/box/dir/file".len() as u64);
        let key = ObjectId::s3("bucket", "a//b/").unwrap();
        assert_eq!(key.namespace(), Namespace::S3 { bucket: "bucket" });
        assert_eq!(key.path(), "a//b/");
        assert_eq!(ObjectId::from_key_path(&key.key_path()).unwrap(), key);
        assert_ne!(
            ObjectId::s3("a", "b/c").unwrap(),
            ObjectId::azure("a", "b", "c").unwrap()
        );
        assert_eq!(format!("{key:?}"), "ObjectId(\"s3/bucket/a//b/\")");
    }

    #[test]
    fn an_etag_names_one_version_however_it_is_quoted() {
        let plain = ObjectVersion::from_etag("9b2cf535f27731c974343645a3985328").unwrap();
        for tag in [
            "\"9b2cf535f27731c974343645a3985328\"",
            " \"9b2cf535f27731c974343645a3985328\" ",
            "W/\"9b2cf535f27731c974343645a3985328\"",
        ] {
            assert_eq!(ObjectVersion::from_etag(tag).unwrap(), plain, "{tag}");
        }
        assert_eq!(plain.as_str(), "9b2cf535f27731c974343645a3985328");
        // Azure's ETags and version ids are opaque text: only the quotes go.
        assert_eq!(
            ObjectVersion::from_etag("\"0x8DC1234567890AB\"")
                .unwrap()
                .as_str(),
            "0x8DC1234567890AB"
        );
        assert!(ObjectVersion::from_etag("\"\"").is_err());
    }

    fn name_err(field: NameField, problem: NameProblem) -> Error {
        Error::InvalidName { field, problem }
    }

    #[test]
    fn s3_key_path_round_trips() {
        let id = ObjectId::from_key_path("s3/my-bucket/a/b/c.parquet").unwrap();
        assert_eq!(id.backend(), Backend::S3);
        assert_eq!(
            id.namespace(),
            Namespace::S3 {
                bucket: "my-bucket"
            }
        );
        assert_eq!(id.path(), "a/b/c.parquet");
        assert_eq!(id.key_path(), "s3/my-bucket/a/b/c.parquet");
        assert_eq!(id, ObjectId::s3("my-bucket", "a/b/c.parquet").unwrap());
    }

    #[test]
    fn azure_key_path_round_trips() {
        let id: ObjectId = "az/acct/cont/dir/blob name.bin".parse().unwrap();
        assert_eq!(id.backend(), Backend::Azure);
        assert_eq!(
            id.namespace(),
            Namespace::Azure {
                account: "acct",
                container: "cont"
            }
        );
        assert_eq!(id.path(), "dir/blob name.bin");
        assert_eq!(id.to_string(), "az/acct/cont/dir/blob name.bin");
        assert_eq!(
            id,
            ObjectId::azure("acct", "cont", "dir/blob name.bin").unwrap()
        );
    }

    #[test]
    fn rejects_unknown_backends() {
        for bad in ["", "gs/b/k", "S3/b/k", "s3", "az"] {
            let res = ObjectId::from_key_path(bad);
            if bad == "s3" {
                assert_eq!(res, Err(name_err(NameField::Bucket, NameProblem::Empty)));
            } else if bad == "az" {
                assert_eq!(res, Err(name_err(NameField::Account, NameProblem::Empty)));
            } else {
                assert_eq!(res, Err(Error::UnknownBackend), "{bad:?}");
            }
        }
    }

    #[test]
    fn rejects_bad_paths_with_typed_errors() {
        let cases = [
            ("s3/b", NameField::Path, NameProblem::Empty),
            ("s3/b/", NameField::Path, NameProblem::Empty),
            ("s3//k", NameField::Bucket, NameProblem::Empty),
            ("s3/b/./k", NameField::Path, NameProblem::DotSegment),
            ("s3/b/a/..", NameField::Path, NameProblem::DotSegment),
            ("s3/b/..", NameField::Path, NameProblem::DotSegment),
            ("s3/b/a\0b", NameField::Path, NameProblem::ContainsNul),
            ("az/a/c", NameField::Path, NameProblem::Empty),
            ("az/a", NameField::Container, NameProblem::Empty),
            ("az//c/k", NameField::Account, NameProblem::Empty),
            ("az/a//k", NameField::Container, NameProblem::Empty),
            ("az/a/c/x/./y", NameField::Path, NameProblem::DotSegment),
        ];
        for (input, field, problem) in cases {
            assert_eq!(
                ObjectId::from_key_path(input),
                Err(name_err(field, problem)),
                "{input:?}"
            );
        }
        // Segments that merely contain dots are fine, and so are empty segments (folder
        // markers, doubled slashes), which round-trip through the key path.
        assert!(ObjectId::from_key_path("s3/b/.hidden/..x/a.b").is_ok());
        for key in ["s3/b/k/", "s3/b//k", "s3/b/a//k", "az/a/c//k/"] {
            let id = ObjectId::from_key_path(key).unwrap();
            assert_eq!(id.to_string(), key);
        }
        assert_eq!(ObjectId::s3("b", "dir/").unwrap().path(), "dir/");
    }

    #[test]
    fn constructors_share_validation() {
        assert_eq!(
            ObjectId::s3("a/b", "k"),
            Err(name_err(NameField::Bucket, NameProblem::ContainsSlash))
        );
        assert_eq!(
            ObjectId::s3("b\0", "k"),
            Err(name_err(NameField::Bucket, NameProblem::ContainsNul))
        );
        assert_eq!(
            ObjectId::azure("acct", "c/d", "k"),
            Err(name_err(NameField::Container, NameProblem::ContainsSlash))
        );
        let long = "x".repeat(MAX_NAMESPACE_LEN + 1);
        assert_eq!(
            ObjectId::s3(long, "k"),
            Err(name_err(
                NameField::Bucket,
                NameProblem::TooLong {
                    len: MAX_NAMESPACE_LEN + 1,
                    max: MAX_NAMESPACE_LEN
                }
            ))
        );
        assert!(ObjectId::s3("b", "x".repeat(MAX_PATH_LEN)).is_ok());
        assert!(ObjectId::s3("b", "x".repeat(MAX_PATH_LEN + 1)).is_err());
    }

    #[test]
    fn version_is_validated() {
        assert_eq!(
            ObjectVersion::new(""),
            Err(name_err(NameField::Version, NameProblem::Empty))
        );
        assert!(ObjectVersion::new("x".repeat(MAX_VERSION_LEN)).is_ok());
        assert!(ObjectVersion::new("x".repeat(MAX_VERSION_LEN + 1)).is_err());
        assert_eq!(ObjectVersion::new("\"abc\"").unwrap().as_str(), "\"abc\"");
    }

    fn block(key: &str, version: &str, offset: u64, size: u64) -> BlockId {
        BlockId::new(
            ObjectId::from_key_path(key).unwrap(),
            ObjectVersion::new(version).unwrap(),
            offset,
            size,
        )
        .unwrap()
    }

    #[test]
    fn block_id_requires_aligned_power_of_two() {
        let obj = ObjectId::s3("b", "k").unwrap();
        let v = ObjectVersion::new("e").unwrap();
        assert!(BlockId::new(obj.clone(), v.clone(), 0, 3).is_err());
        assert!(BlockId::new(obj.clone(), v.clone(), 0, 0).is_err());
        assert!(BlockId::new(obj.clone(), v.clone(), 5, 4).is_err());
        assert!(BlockId::new(obj.clone(), v.clone(), 1 << 63, 1 << 63).is_ok());
        assert!(BlockId::new(obj, v, u64::MAX - 255, 256).is_ok());
    }

    #[test]
    fn len_in_handles_short_last_block_and_past_end() {
        let b = block("s3/b/k", "e", 256, 256);
        assert_eq!(b.len_in(1000), 256);
        assert_eq!(b.len_in(300), 44);
        assert_eq!(b.len_in(256), 0);
        assert_eq!(b.len_in(0), 0);
        let top = block("s3/b/k", "e", u64::MAX - 255, 256);
        assert_eq!(top.len_in(u64::MAX), 255);
    }

    #[test]
    fn placement_key_distinguishes_every_field_but_the_version() {
        let base = block("s3/b/k", "e1", 0, 1024);
        let variants = [
            block("s3/b/k2", "e1", 0, 1024),
            block("s3/b2/k", "e1", 0, 1024),
            block("s3/b/k", "e1", 1024, 1024),
            block("s3/b/k", "e1", 0, 2048),
            block("az/b/k/x", "e1", 0, 1024),
            // Same concatenated bytes, different split between fields.
            block("az/bk/x/y", "e1", 0, 1024),
            block("az/b/kx/y", "e1", 0, 1024),
        ];
        let key = base.placement_key();
        for v in &variants {
            assert_ne!(v.placement_key(), key, "{v}");
            assert_ne!(v.storage_name(), base.storage_name(), "{v}");
        }
        assert_ne!(variants[5].placement_key(), variants[6].placement_key());
        // Every version of a block has the same owners, and its own file.
        let other_version = block("s3/b/k", "e2", 0, 1024);
        assert_eq!(other_version.placement_key(), key);
        assert_ne!(other_version.storage_name(), base.storage_name());
        // The first block's owner is known before its version.
        assert_eq!(BlockId::first_block_placement_key(base.object(), 1024), key);
        // Deterministic.
        assert_eq!(block("s3/b/k", "e1", 0, 1024).placement_key(), key);
    }

    #[test]
    fn placement_key_and_storage_name_match_the_documented_encodings() {
        let b = block("az/acct/cont/p", "\"v\"", 512, 256);
        let encode = |domain: &[u8], fields: &[&str]| {
            let mut enc = Vec::new();
            enc.extend_from_slice(domain);
            enc.push(2);
            for s in fields {
                enc.extend_from_slice(&(s.len() as u32).to_be_bytes());
                enc.extend_from_slice(s.as_bytes());
            }
            enc.extend_from_slice(&512u64.to_be_bytes());
            enc.extend_from_slice(&256u64.to_be_bytes());
            Sha256::digest(&enc)
        };
        let placement: [u8; 32] = encode(b"talon/place/v2", &["acct", "cont", "p"]).into();
        assert_eq!(b.placement_key(), placement);
        let storage = encode(b"talon/block/v1", &["acct", "cont", "p", "\"v\""]);
        assert_eq!(b.storage_name(), hex::encode(storage));
        assert_eq!(b.storage_name().len(), 64);
        assert!(
            b.storage_name()
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        );
    }

    #[test]
    fn block_display_is_readable() {
        let b = block("s3/b/k", "etag", 1024, 1024);
        assert_eq!(b.to_string(), "s3/b/k@etag:1024+1024");
    }
}
