//! The access policy both fronts apply, once: who made a request (authentication's
//! answer), what its identity was granted, and what an unauthenticated caller may do.
//!
//! Every request needs one [`Action`] on one [`Resource`] ([`Need`]); the S3 and Azure
//! operations' tables (`S3Request::need`, `AzureRequest::need`) say which, and
//! [`Access::check`] decides. Whatever no grant allows is refused.
//!
//! Anonymous access is a deliberate choice, never a side effect of a missing key: a
//! server with no credentials for a protocol serves that protocol only when anonymous
//! access was asked for, and anonymous access is read-only unless writes were asked for
//! too; public grants open single buckets or prefixes for reading and listing only. The
//! S3 and Azure authenticators ([`crate::s3::auth`], [`crate::azure::auth`]) both end in
//! [`Access::check`], so the two fronts over the same data cannot disagree (SEC-02 of
//! the security review: the Azure front served, overwrote and deleted anonymously what
//! the S3 front protected).

pub mod acl;
mod grants;
pub mod identities_file;

pub use acl::{Acls, CannedAcl};
pub use grants::{Action, Actions, EVERY_BUCKET, Grant, Grants};

use crate::error::{Error, ErrorKind, Result};

/// What requests without credentials may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AnonymousAccess {
    /// Nothing: every request must be signed (the default).
    #[default]
    Refused,
    /// Reads only: GET, HEAD and listings.
    ReadOnly,
    /// Everything, writes and deletes included.
    ReadWrite,
}

impl AnonymousAccess {
    /// The name used in flags and configuration files.
    pub fn name(self) -> &'static str {
        match self {
            AnonymousAccess::Refused => "none",
            AnonymousAccess::ReadOnly => "read",
            AnonymousAccess::ReadWrite => "read-write",
        }
    }
}

impl std::str::FromStr for AnonymousAccess {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s {
            "none" | "off" => Ok(AnonymousAccess::Refused),
            "read" | "read-only" => Ok(AnonymousAccess::ReadOnly),
            "read-write" => Ok(AnonymousAccess::ReadWrite),
            other => Err(format!(
                "unknown anonymous access '{other}' (none, read, read-write)"
            )),
        }
    }
}

/// Who made a request, as authentication established it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// A verified signature (SigV4, SigV2, Shared Key or SAS).
    Authenticated,
    /// No credentials, or credentials a server without keys cannot check.
    Anonymous,
}

/// What a request names, as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource<'a> {
    /// The service: the list of buckets or containers. Allowed to every identity with a
    /// grant; the answer shows only the buckets it may list ([`Access::may_list`]).
    Service,
    /// A bucket as a whole (create, delete, its ACL): a grant without a prefix.
    Bucket(&'a str),
    /// Somewhere in a bucket: a grant with any prefix (HeadBucket; DeleteObjects, which
    /// then checks each key).
    InBucket(&'a str),
    /// A listing of `bucket` under `prefix`.
    Listing {
        /// The bucket or container.
        bucket: &'a str,
        /// The listing's prefix (empty: the whole bucket).
        prefix: &'a str,
    },
    /// One object.
    Object {
        /// The bucket or container.
        bucket: &'a str,
        /// The key or blob name.
        key: &'a str,
    },
}

/// What a request needs to be allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need<'a> {
    /// What it does.
    pub action: Action,
    /// To what.
    pub resource: Resource<'a>,
}

impl Grants {
    /// Whether these grants allow `need`.
    pub fn allows(&self, need: Need<'_>) -> bool {
        match need.resource {
            Resource::Service => !self.is_empty(),
            Resource::Bucket(bucket) => self.allows_bucket(need.action, bucket),
            Resource::InBucket(bucket) => self.allows_in_bucket(need.action, bucket),
            Resource::Listing { bucket, prefix } => {
                need.action == Action::List && self.allows_listing(bucket, prefix)
            }
            Resource::Object { bucket, key } => self.allows_object(need.action, bucket, key),
        }
    }
}

/// What is open to everyone, signed or not: the identities file's public grants and
/// the canned ACLs clients set. Reads and listings only; never the list of buckets.
#[derive(Debug, Clone, Copy)]
pub struct Open<'a> {
    /// The identities file's `public` grants.
    pub public: &'a Grants,
    /// The ACLs clients set, where the server keeps them.
    pub acls: Option<&'a Acls>,
}

impl Open<'_> {
    /// Nothing open.
    pub const NOTHING: Open<'static> = Open {
        public: &Grants::NONE,
        acls: None,
    };

    /// Whether `need` is open to everyone.
    pub fn allows(self, need: Need<'_>) -> bool {
        need.resource != Resource::Service
            && (self.public.allows(need) || self.acls.is_some_and(|a| a.allows(need)))
    }

    fn is_closed(self) -> bool {
        self.public.is_empty() && self.acls.is_none_or(Acls::is_empty)
    }
}

/// What a request's caller may do: an authenticated identity's grants, or what the
/// server allows anonymous callers; and, for both, what is open to everyone.
#[derive(Debug, Clone, Copy)]
pub enum Access<'a> {
    /// A verified signature (SigV4, SigV2, Shared Key or SAS) of an identity.
    Granted {
        /// Its grants.
        grants: &'a Grants,
        /// What is open to everyone.
        open: Open<'a>,
    },
    /// No credentials, or credentials a server without keys cannot check.
    Anonymous {
        /// The server-wide anonymous level.
        level: AnonymousAccess,
        /// What is open to everyone beyond it.
        open: Open<'a>,
    },
}

impl Access<'_> {
    /// Who the caller is.
    pub fn caller(self) -> Caller {
        match self {
            Access::Granted { .. } => Caller::Authenticated,
            Access::Anonymous { .. } => Caller::Anonymous,
        }
    }

    /// Whether `need` is allowed.
    pub fn allows(self, need: Need<'_>) -> bool {
        match self {
            Access::Granted { grants, open } => grants.allows(need) || open.allows(need),
            Access::Anonymous { level, open } => match level {
                AnonymousAccess::ReadWrite => true,
                AnonymousAccess::ReadOnly => {
                    matches!(need.action, Action::Read | Action::List) || open.allows(need)
                }
                AnonymousAccess::Refused => open.allows(need),
            },
        }
    }

    /// Whether the caller may list `bucket` (and so be told that an object or the
    /// bucket it asks for does not exist, as S3 tells a caller with `s3:ListBucket`).
    pub fn may_list(self, bucket: &str) -> bool {
        self.allows(Need {
            action: Action::List,
            resource: Resource::InBucket(bucket),
        })
    }

    /// Whether `bucket` belongs in the caller's list of buckets or containers: one its
    /// own grants let it list (a bucket open to everyone is not listed for everyone).
    pub fn shows_bucket(self, bucket: &str) -> bool {
        let need = Need {
            action: Action::List,
            resource: Resource::InBucket(bucket),
        };
        match self {
            Access::Granted { grants, .. } => grants.allows(need),
            Access::Anonymous { .. } => self.allows(need),
        }
    }

    /// Refuses what [`Access::allows`] does not allow.
    ///
    /// # Errors
    /// [`ErrorKind::MissingCredentials`] for an anonymous caller where nothing is open
    /// anonymously; [`ErrorKind::AccessDenied`] for another anonymous refusal;
    /// [`ErrorKind::PermissionMismatch`] (S3's `AccessDenied`, Azure's
    /// `AuthorizationPermissionMismatch`) for an identity whose grants do not allow it.
    pub fn check(self, need: Need<'_>) -> Result<()> {
        if self.allows(need) {
            return Ok(());
        }
        Err(match self {
            Access::Granted { .. } => Error::new(ErrorKind::PermissionMismatch, "Access Denied"),
            Access::Anonymous {
                level: AnonymousAccess::Refused,
                open,
            } if open.is_closed() => Error::new(
                ErrorKind::MissingCredentials,
                "Anonymous access is not allowed; sign the request.",
            ),
            Access::Anonymous {
                level: AnonymousAccess::ReadOnly,
                ..
            } => Error::new(
                ErrorKind::AccessDenied,
                "Anonymous access is read-only; sign the request to write.",
            ),
            Access::Anonymous { .. } => Error::new(ErrorKind::AccessDenied, "Access Denied"),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const OBJECT: Resource<'static> = Resource::Object {
        bucket: "b",
        key: "k",
    };

    fn need(action: Action, resource: Resource<'_>) -> Need<'_> {
        Need { action, resource }
    }

    #[test]
    fn the_anonymous_levels() {
        use AnonymousAccess::*;
        let none = Grants::NONE;
        let kind = |level, action| {
            Access::Anonymous {
                level,
                open: Open {
                    public: &none,
                    acls: None,
                },
            }
            .check(need(action, OBJECT))
            .map_err(|e| e.kind())
            .err()
        };
        for a in Action::ALL {
            assert_eq!(kind(Refused, a), Some(ErrorKind::MissingCredentials));
            assert_eq!(kind(ReadWrite, a), None);
        }
        assert_eq!(kind(ReadOnly, Action::Read), None);
        assert_eq!(kind(ReadOnly, Action::List), None);
        for a in [Action::Write, Action::Delete, Action::Admin] {
            assert_eq!(kind(ReadOnly, a), Some(ErrorKind::AccessDenied));
        }
        for a in [Refused, ReadOnly, ReadWrite] {
            assert_eq!(a.name().parse::<AnonymousAccess>(), Ok(a));
        }
    }

    #[test]
    fn public_grants_open_their_bucket_and_not_the_service() {
        let public = Grants::new(vec![Grant {
            bucket: "open".into(),
            prefix: String::new(),
            actions: Actions::READ_AND_LIST,
        }]);
        let anonymous = Access::Anonymous {
            level: AnonymousAccess::Refused,
            open: Open {
                public: &public,
                acls: None,
            },
        };
        let open = Resource::Object {
            bucket: "open",
            key: "k",
        };
        assert!(anonymous.allows(need(Action::Read, open)));
        assert!(anonymous.may_list("open"));
        assert!(!anonymous.may_list("b"));
        let refused = |n| anonymous.check(n).map_err(|e| e.kind()).err();
        assert_eq!(
            refused(need(Action::Write, open)),
            Some(ErrorKind::AccessDenied)
        );
        assert_eq!(
            refused(need(Action::Read, OBJECT)),
            Some(ErrorKind::AccessDenied)
        );
        assert_eq!(
            refused(need(Action::List, Resource::Service)),
            Some(ErrorKind::AccessDenied)
        );
    }

    #[test]
    fn an_identity_gets_what_it_was_granted_and_nothing_else() {
        let grants = Grants::new(vec![Grant {
            bucket: "b".into(),
            prefix: "k".into(),
            actions: [Action::Read].into_iter().collect(),
        }]);
        let who = Access::Granted {
            grants: &grants,
            open: Open::NOTHING,
        };
        assert_eq!(who.caller(), Caller::Authenticated);
        assert!(who.check(need(Action::Read, OBJECT)).is_ok());
        assert!(who.check(need(Action::List, Resource::Service)).is_ok());
        for a in [Action::List, Action::Write, Action::Delete, Action::Admin] {
            let e = who.check(need(a, OBJECT)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::PermissionMismatch, "{a}");
        }
        let nothing = Grants::NONE;
        let e = Access::Granted {
            grants: &nothing,
            open: Open::NOTHING,
        }
        .check(need(Action::List, Resource::Service))
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionMismatch);
    }
}
