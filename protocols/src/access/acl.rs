//! Canned ACLs clients set (`x-amz-acl: private | public-read` on CreateBucket,
//! PutBucketAcl, PutObject, CopyObject and PutObjectAcl): what they open to everyone,
//! kept in a file so they outlive a restart.
//!
//! As in S3, a bucket's `public-read` lets anyone *list* it, and an object's lets anyone
//! *read* that one object; neither opens writes. What an ACL opens adds to the grants
//! of the identities file (`public`), it never takes them away. Every write of an object
//! through the server sets its ACL again (to `private` unless the write names another),
//! a delete forgets it, and deleting a bucket forgets its objects' ACLs, so a key written
//! again is not public by accident.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use serde::{Deserialize, Serialize};

use super::{Action, Need, Resource};
use crate::error::{Error, ErrorKind, Result};

/// Most objects with a public ACL kept: each costs memory and a line of the file.
pub const MAX_PUBLIC_OBJECTS: usize = 100_000;

/// A canned ACL a client may set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CannedAcl {
    /// Only the identities' grants apply.
    Private,
    /// Anyone may list the bucket, or read the object.
    PublicRead,
}

impl CannedAcl {
    /// Parses an `x-amz-acl` value.
    ///
    /// # Errors
    /// [`ErrorKind::NotImplemented`] for the canned ACLs that grant writes or name other
    /// accounts (`public-read-write`, `authenticated-read`, `bucket-owner-*`, ...);
    /// [`ErrorKind::InvalidArgument`] for a value S3 does not define.
    pub fn parse(value: &str) -> Result<CannedAcl> {
        match value {
            "private" => Ok(CannedAcl::Private),
            "public-read" => Ok(CannedAcl::PublicRead),
            "public-read-write"
            | "authenticated-read"
            | "aws-exec-read"
            | "bucket-owner-read"
            | "bucket-owner-full-control"
            | "log-delivery-write" => Err(Error::new(
                ErrorKind::NotImplemented,
                format!(
                    "the canned ACL '{value}' is not implemented (private and public-read are)"
                ),
            )),
            other => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("'{other}' is not a canned ACL"),
            )),
        }
    }
}

/// What the file holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AclDocument {
    /// Buckets anyone may list.
    #[serde(default)]
    public_buckets: BTreeSet<String>,
    /// Bucket → keys anyone may read.
    #[serde(default)]
    public_objects: BTreeMap<String, BTreeSet<String>>,
}

impl AclDocument {
    fn object_count(&self) -> usize {
        self.public_objects.values().map(BTreeSet::len).sum()
    }
}

/// The canned ACLs of one server, kept in a file.
#[derive(Debug)]
pub struct Acls {
    file: PathBuf,
    state: RwLock<AclDocument>,
}

fn io_error(what: &str, path: &Path, e: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::InternalError,
        format!("{what} {}: {e}", path.display()),
    )
}

impl Acls {
    /// Opens the ACLs kept in `file` (none yet when it does not exist).
    ///
    /// # Errors
    /// [`ErrorKind::InternalError`] naming the file when it cannot be read or parsed.
    pub fn open(file: impl Into<PathBuf>) -> Result<Acls> {
        let file = file.into();
        let state = match std::fs::read_to_string(&file) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| io_error("parsing", &file, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => AclDocument::default(),
            Err(e) => return Err(io_error("reading", &file, e)),
        };
        Ok(Acls {
            file,
            state: RwLock::new(state),
        })
    }

    /// Whether no bucket or object is public.
    pub fn is_empty(&self) -> bool {
        let state = self.read();
        state.public_buckets.is_empty() && state.public_objects.is_empty()
    }

    /// Whether the ACLs open `need` to everyone.
    pub fn allows(&self, need: Need<'_>) -> bool {
        let state = self.read();
        match (need.action, need.resource) {
            (Action::List, Resource::Listing { bucket, .. } | Resource::InBucket(bucket)) => {
                state.public_buckets.contains(bucket)
            }
            (Action::Read, Resource::Object { bucket, key }) => state
                .public_objects
                .get(bucket)
                .is_some_and(|keys| keys.contains(key)),
            _ => false,
        }
    }

    /// The bucket's ACL.
    pub fn bucket(&self, bucket: &str) -> CannedAcl {
        if self.read().public_buckets.contains(bucket) {
            CannedAcl::PublicRead
        } else {
            CannedAcl::Private
        }
    }

    /// The object's ACL.
    pub fn object(&self, bucket: &str, key: &str) -> CannedAcl {
        let public = self
            .read()
            .public_objects
            .get(bucket)
            .is_some_and(|keys| keys.contains(key));
        if public {
            CannedAcl::PublicRead
        } else {
            CannedAcl::Private
        }
    }

    /// Sets a bucket's ACL.
    ///
    /// # Errors
    /// [`ErrorKind::InternalError`] when the file cannot be written (nothing changes).
    pub fn set_bucket(&self, bucket: &str, acl: CannedAcl) -> Result<()> {
        self.change(|doc| {
            match acl {
                CannedAcl::PublicRead => doc.public_buckets.insert(bucket.to_owned()),
                CannedAcl::Private => doc.public_buckets.remove(bucket),
            };
            Ok(())
        })
    }

    /// Sets an object's ACL.
    ///
    /// # Errors
    /// [`ErrorKind::InternalError`] when the file cannot be written or
    /// [`MAX_PUBLIC_OBJECTS`] are public already (nothing changes).
    pub fn set_object(&self, bucket: &str, key: &str, acl: CannedAcl) -> Result<()> {
        if acl == CannedAcl::Private && self.object(bucket, key) == CannedAcl::Private {
            // The common case, every write: nothing to change, nothing to write.
            return Ok(());
        }
        self.change(|doc| {
            match acl {
                CannedAcl::PublicRead => {
                    if doc.object_count() >= MAX_PUBLIC_OBJECTS {
                        return Err(Error::new(
                            ErrorKind::InternalError,
                            format!(
                                "at most {MAX_PUBLIC_OBJECTS} objects may have a public ACL; make a bucket or prefix public in the identities file instead"
                            ),
                        ));
                    }
                    doc.public_objects
                        .entry(bucket.to_owned())
                        .or_default()
                        .insert(key.to_owned());
                }
                CannedAcl::Private => {
                    if let Some(keys) = doc.public_objects.get_mut(bucket) {
                        keys.remove(key);
                        if keys.is_empty() {
                            doc.public_objects.remove(bucket);
                        }
                    }
                }
            }
            Ok(())
        })
    }

    /// Forgets the ACLs of a deleted bucket's objects. The bucket's own stays until the
    /// bucket is created again (which sets it), so a caller who could list it is told
    /// `NoSuchBucket` rather than refused.
    ///
    /// # Errors
    /// [`ErrorKind::InternalError`] when the file cannot be written.
    pub fn forget_objects_of(&self, bucket: &str) -> Result<()> {
        if !self.read().public_objects.contains_key(bucket) {
            return Ok(());
        }
        self.change(|doc| {
            doc.public_objects.remove(bucket);
            Ok(())
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, AclDocument> {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Applies `edit` to a copy, writes the copy to the file (a temporary file renamed
    /// over it, synced), then makes it the state: a failure changes nothing.
    fn change(&self, edit: impl FnOnce(&mut AclDocument) -> Result<()>) -> Result<()> {
        let mut state = self
            .state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = state.clone();
        edit(&mut next)?;
        let text =
            serde_json::to_vec_pretty(&next).map_err(|e| io_error("encoding", &self.file, e))?;
        let tmp = self.file.with_extension("tmp");
        let write = || -> std::io::Result<()> {
            use std::io::Write as _;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.file)
        };
        write().map_err(|e| io_error("writing", &self.file, e))?;
        *state = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn read(bucket: &'static str, key: &'static str) -> Need<'static> {
        Need {
            action: Action::Read,
            resource: Resource::Object { bucket, key },
        }
    }

    #[test]
    fn a_public_bucket_is_listed_and_a_public_object_read_and_they_outlive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("acls.json");
        let acls = Acls::open(&file).unwrap();
        acls.set_bucket("b", CannedAcl::PublicRead).unwrap();
        acls.set_object("b", "k", CannedAcl::PublicRead).unwrap();
        let list = Need {
            action: Action::List,
            resource: Resource::Listing {
                bucket: "b",
                prefix: "",
            },
        };
        assert!(acls.allows(list));
        assert!(acls.allows(read("b", "k")));
        assert!(!acls.allows(read("b", "k2")));
        assert!(!acls.allows(Need {
            action: Action::Write,
            resource: Resource::Object {
                bucket: "b",
                key: "k"
            },
        }));
        let again = Acls::open(&file).unwrap();
        assert!(again.allows(list) && again.allows(read("b", "k")));
        again.set_object("b", "k", CannedAcl::Private).unwrap();
        again.forget_objects_of("b").unwrap();
        assert_eq!(again.object("b", "k"), CannedAcl::Private);
        assert_eq!(again.bucket("b"), CannedAcl::PublicRead);
    }

    #[test]
    fn a_file_that_cannot_be_written_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let acls = Acls::open(dir.path().join("missing/acls.json")).unwrap();
        let e = acls.set_bucket("b", CannedAcl::PublicRead).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InternalError);
        assert_eq!(acls.bucket("b"), CannedAcl::Private);
    }

    #[test]
    fn only_private_and_public_read_are_set() {
        assert_eq!(
            CannedAcl::parse("public-read").unwrap(),
            CannedAcl::PublicRead
        );
        assert_eq!(
            CannedAcl::parse("public-read-write").unwrap_err().kind(),
            ErrorKind::NotImplemented
        );
        assert_eq!(
            CannedAcl::parse("everyone").unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }
}
