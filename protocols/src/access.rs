//! The access policy both fronts apply, once: who made a request (authentication's
//! answer) and what an unauthenticated caller may do.
//!
//! Anonymous access is a deliberate choice, never a side effect of a missing key: a
//! server with no credentials for a protocol serves that protocol only when anonymous
//! access was asked for, and anonymous access is read-only unless writes were asked for
//! too. The S3 and Azure authenticators ([`crate::s3::auth`], [`crate::azure::auth`])
//! both end in [`authorize`], so the two fronts over the same data cannot disagree
//! (SEC-02 of the security review: the Azure front served, overwrote and deleted
//! anonymously what the S3 front protected).

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

/// Whether `caller` may run an operation that writes (`writes`) or only reads.
///
/// # Errors
/// [`ErrorKind::MissingCredentials`] for an anonymous caller where anonymous access is
/// refused; [`ErrorKind::AccessDenied`] for an anonymous write where only reads are.
pub fn authorize(caller: Caller, anonymous: AnonymousAccess, writes: bool) -> Result<()> {
    match (caller, anonymous, writes) {
        (Caller::Authenticated, _, _)
        | (Caller::Anonymous, AnonymousAccess::ReadWrite, _)
        | (Caller::Anonymous, AnonymousAccess::ReadOnly, false) => Ok(()),
        (Caller::Anonymous, AnonymousAccess::Refused, _) => Err(Error::new(
            ErrorKind::MissingCredentials,
            "Anonymous access is not allowed; sign the request.",
        )),
        (Caller::Anonymous, AnonymousAccess::ReadOnly, true) => Err(Error::new(
            ErrorKind::AccessDenied,
            "Anonymous access is read-only; sign the request to write.",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_table() {
        use AnonymousAccess::*;
        let kind = |c, a, w| authorize(c, a, w).map_err(|e| e.kind()).err();
        for a in [Refused, ReadOnly, ReadWrite] {
            for w in [false, true] {
                assert_eq!(kind(Caller::Authenticated, a, w), None);
            }
        }
        assert_eq!(
            kind(Caller::Anonymous, Refused, false),
            Some(ErrorKind::MissingCredentials)
        );
        assert_eq!(kind(Caller::Anonymous, ReadOnly, false), None);
        assert_eq!(
            kind(Caller::Anonymous, ReadOnly, true),
            Some(ErrorKind::AccessDenied)
        );
        assert_eq!(kind(Caller::Anonymous, ReadWrite, true), None);
        for a in [Refused, ReadOnly, ReadWrite] {
            assert_eq!(a.name().parse::<AnonymousAccess>(), Ok(a));
        }
    }
}
