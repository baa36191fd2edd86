//! What an identity may do, as grants: a bucket (or container), an optional key
//! prefix, and a set of actions. Whatever no grant allows is refused.

use std::fmt;

/// What an operation does to what it names. Every S3 and Azure operation needs exactly
/// one (`S3Operation::action`, `AzureOperation::action`); a copy also needs
/// [`Action::Read`] on its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Read an object's bytes or metadata (GET, HEAD, attributes, ACL, block list).
    Read,
    /// List a bucket's objects, see that a bucket exists, see it in the bucket list.
    List,
    /// Create or replace objects, multipart uploads and their parts.
    Write,
    /// Delete objects.
    Delete,
    /// Create and delete buckets, read and set their ACL.
    Admin,
}

impl Action {
    /// Every action, in the order of [`Action::name`]'s table.
    pub const ALL: [Action; 5] = [
        Action::Read,
        Action::List,
        Action::Write,
        Action::Delete,
        Action::Admin,
    ];

    /// The name used in identities files and docs.
    pub fn name(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::List => "list",
            Action::Write => "write",
            Action::Delete => "delete",
            Action::Admin => "admin",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Action::Read => 1,
            Action::List => 2,
            Action::Write => 4,
            Action::Delete => 8,
            Action::Admin => 16,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Action {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Action::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| format!("unknown action '{s}' (read, list, write, delete, admin)"))
    }
}

/// A set of [`Action`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Actions(u8);

impl Actions {
    /// Every action.
    pub const ALL: Actions = Actions(31);
    /// `read` and `list`: what a public bucket allows.
    pub const READ_AND_LIST: Actions = Actions(3);

    /// Whether `action` is in the set.
    pub fn contains(self, action: Action) -> bool {
        self.0 & action.bit() != 0
    }

    /// The set with `action` added.
    #[must_use]
    pub fn with(self, action: Action) -> Actions {
        Actions(self.0 | action.bit())
    }

    /// Whether every action of the set is in `other`.
    pub fn is_within(self, other: Actions) -> bool {
        self.0 & !other.0 == 0
    }
}

impl FromIterator<Action> for Actions {
    fn from_iter<I: IntoIterator<Item = Action>>(iter: I) -> Self {
        iter.into_iter().fold(Actions::default(), Actions::with)
    }
}

impl fmt::Display for Actions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Action::ALL
            .into_iter()
            .filter(|a| self.contains(*a))
            .map(Action::name)
            .collect();
        f.write_str(&names.join(","))
    }
}

/// The bucket of a grant that names every bucket.
pub const EVERY_BUCKET: &str = "*";

/// One grant: `actions` on the objects of `bucket` whose keys start with `prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// A bucket (S3) or container (Azure) name, or [`EVERY_BUCKET`].
    pub bucket: String,
    /// Keys the grant covers start with this (empty: the whole bucket). A listing is
    /// covered when its own prefix starts with it.
    pub prefix: String,
    /// What it allows.
    pub actions: Actions,
}

impl Grant {
    /// Every action on every bucket.
    pub fn everything() -> Grant {
        Grant {
            bucket: EVERY_BUCKET.to_owned(),
            prefix: String::new(),
            actions: Actions::ALL,
        }
    }

    fn names(&self, bucket: &str) -> bool {
        self.bucket == EVERY_BUCKET || self.bucket == bucket
    }
}

/// An identity's grants. Empty: nothing is allowed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Grants(Vec<Grant>);

impl Grants {
    /// No grant: every request refused.
    pub const NONE: Grants = Grants(Vec::new());

    /// These grants.
    pub fn new(grants: Vec<Grant>) -> Grants {
        Grants(grants)
    }

    /// Every action on every bucket: what an identity without a `grants` list has.
    pub fn everything() -> Grants {
        Grants(vec![Grant::everything()])
    }

    /// The grants, in the order given.
    pub fn as_slice(&self) -> &[Grant] {
        &self.0
    }

    /// Whether there is no grant at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `action` is allowed on the object `key` of `bucket`.
    pub fn allows_object(&self, action: Action, bucket: &str, key: &str) -> bool {
        self.0
            .iter()
            .any(|g| g.actions.contains(action) && g.names(bucket) && key.starts_with(&g.prefix))
    }

    /// Whether a listing of `bucket` under `prefix` is allowed: a `list` grant whose
    /// prefix the listing's starts with (a grant on `data/` allows listing `data/` and
    /// `data/2026/`, not `dat` or the whole bucket).
    pub fn allows_listing(&self, bucket: &str, prefix: &str) -> bool {
        self.allows_object(Action::List, bucket, prefix)
    }

    /// Whether some grant allows `action` somewhere in `bucket` (any prefix): what a
    /// bucket-level request needs (HeadBucket, a bucket in ListBuckets, DeleteObjects
    /// before each key is checked).
    pub fn allows_in_bucket(&self, action: Action, bucket: &str) -> bool {
        self.0
            .iter()
            .any(|g| g.actions.contains(action) && g.names(bucket))
    }

    /// Whether `action` is allowed on `bucket` as a whole (a grant without a prefix):
    /// what creating or deleting a bucket, or its ACL, needs.
    pub fn allows_bucket(&self, action: Action, bucket: &str) -> bool {
        self.0
            .iter()
            .any(|g| g.actions.contains(action) && g.names(bucket) && g.prefix.is_empty())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn grant(bucket: &str, prefix: &str, actions: &[Action]) -> Grant {
        Grant {
            bucket: bucket.into(),
            prefix: prefix.into(),
            actions: actions.iter().copied().collect(),
        }
    }

    #[test]
    fn nothing_is_allowed_without_a_grant() {
        let none = Grants::NONE;
        for a in Action::ALL {
            assert!(!none.allows_object(a, "b", "k"));
            assert!(!none.allows_in_bucket(a, "b"));
            assert!(!none.allows_bucket(a, "b"));
        }
        assert!(!none.allows_listing("b", ""));
    }

    #[test]
    fn a_prefix_grant_covers_its_keys_and_listings_below_it_only() {
        let g = Grants::new(vec![grant("data", "train/", &[Action::Read, Action::List])]);
        assert!(g.allows_object(Action::Read, "data", "train/a.bin"));
        assert!(!g.allows_object(Action::Read, "data", "test/a.bin"));
        assert!(!g.allows_object(Action::Read, "data", "train"));
        assert!(!g.allows_object(Action::Read, "other", "train/a.bin"));
        assert!(!g.allows_object(Action::Write, "data", "train/a.bin"));
        assert!(g.allows_listing("data", "train/"));
        assert!(g.allows_listing("data", "train/2026/"));
        assert!(!g.allows_listing("data", ""));
        assert!(!g.allows_listing("data", "tr"));
        assert!(g.allows_in_bucket(Action::List, "data"));
        assert!(!g.allows_bucket(Action::List, "data"));
    }

    #[test]
    fn every_bucket_and_every_action() {
        let g = Grants::everything();
        for a in Action::ALL {
            assert!(g.allows_object(a, "any", "key"));
            assert!(g.allows_bucket(a, "any"));
        }
    }

    #[test]
    fn action_names_round_trip() {
        for a in Action::ALL {
            assert_eq!(a.name().parse::<Action>(), Ok(a));
        }
        assert!("READ".parse::<Action>().is_err());
        let set: Actions = [Action::Read, Action::Admin].into_iter().collect();
        assert_eq!(set.to_string(), "read,admin");
        assert!(Actions::READ_AND_LIST.is_within(Actions::ALL));
        assert!(!Actions::ALL.is_within(Actions::READ_AND_LIST));
    }
}
