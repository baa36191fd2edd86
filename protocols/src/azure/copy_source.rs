//! Copy Blob's source: which blob of this account an `x-ms-copy-source` URL names, and
//! whether the request may read it.
//!
//! A server copies only within the account it serves and only from a URL that names
//! itself (the request's own `Host`, or its configured service endpoint): the URL is
//! mapped to a blob of the account, never fetched, so a copy cannot make the server
//! reach another host. The source is read as Azure reads it: a Shared Key request's
//! signature covers any blob of its account; otherwise the source URL's own SAS must
//! grant read on that blob, or the source must be readable anonymously.

use std::time::SystemTime;

use super::auth::{AzureIdentity, Transport};
use super::request::{AzureAddressing, AzureOperation, canonical_query, resolve_address};
use super::sas::{self, SasRequest, SasToken};
use crate::access::{Access, Acls, Action, Need, Resource};
use crate::error::{Error, ErrorKind, Result};
use crate::s3::request::QueryParams;

/// The blob a copy reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopySource {
    /// The source's container.
    pub container: String,
    /// The source blob's name, decoded.
    pub blob: String,
    /// The source URL's query (a SAS, when it carries one), names lower-cased.
    pub query: QueryParams,
}

fn cannot_verify(why: &str) -> Error {
    Error::new(
        ErrorKind::CannotVerifyCopySource,
        format!("Could not verify the copy source within the specified time: {why}."),
    )
}

/// Resolves `value` (an `x-ms-copy-source` URL) to a blob of `account`.
///
/// `own_hosts` are the authorities (`host[:port]`) that name this server: the request's
/// `Host` and the configured service endpoint's.
///
/// # Errors
/// [`ErrorKind::InvalidHeaderValue`] for a value that is not an absolute `http(s)` URL
/// naming a blob; [`ErrorKind::CannotVerifyCopySource`] for another host or account;
/// [`ErrorKind::NotImplemented`] for a snapshot or version source.
pub fn resolve(
    value: &str,
    addressing: &AzureAddressing,
    own_hosts: &[&str],
    account: &str,
) -> Result<CopySource> {
    let invalid = || {
        Error::new(
            ErrorKind::InvalidHeaderValue,
            "The value for one of the HTTP headers is not in the correct format: x-ms-copy-source",
        )
    };
    let uri: http::Uri = value.trim().parse().map_err(|_| invalid())?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(invalid());
    }
    let authority = uri.authority().ok_or_else(invalid)?.as_str();
    if authority.contains('@') {
        return Err(invalid());
    }
    if !own_hosts.iter().any(|h| h.eq_ignore_ascii_case(authority)) {
        return Err(cannot_verify("the source is on another server"));
    }
    let (source_account, container, blob) =
        resolve_address(addressing, Some(authority), uri.path());
    if source_account.as_deref() != Some(account) {
        return Err(cannot_verify("the source is in another account"));
    }
    let (Some(container), Some(blob)) = (container, blob.filter(|b| !b.is_empty())) else {
        return Err(invalid());
    };
    crate::names::validate_container_name(&container)?;
    let query = canonical_query(uri.query().unwrap_or(""))?;
    if query.has("snapshot") || query.has("versionid") {
        return Err(Error::new(
            ErrorKind::NotImplemented,
            "copies from snapshots and versions are not implemented",
        ));
    }
    Ok(CopySource {
        container,
        blob,
        query,
    })
}

/// Whether the request may read `source`: `shared_key` tells that the request itself
/// carried a verified Shared Key signature (which covers the blobs of the account its
/// grants cover).
///
/// # Errors
/// [`ErrorKind::CannotVerifyCopySource`] when neither the request's signature, the
/// source's own SAS nor the anonymous policy lets it read the source.
pub fn authorize_source(
    identity: &AzureIdentity,
    acls: Option<&Acls>,
    source: &CopySource,
    shared_key: bool,
    transport: Transport,
    now: SystemTime,
) -> Result<()> {
    let read = Need {
        action: Action::Read,
        resource: Resource::Object {
            bucket: &source.container,
            key: &source.blob,
        },
    };
    let may_read = |access: Access<'_>| {
        if access.allows(read) {
            Ok(())
        } else {
            Err(cannot_verify("the request cannot read the source"))
        }
    };
    let Some(key) = &identity.key else {
        return may_read(identity.anonymous_access(acls));
    };
    if shared_key {
        return may_read(identity.key_access(acls));
    }
    match SasToken::from_query(&source.query) {
        Some(token) => {
            let read = SasRequest {
                account: &identity.account,
                container: Some(&source.container),
                blob: Some(&source.blob),
                operation: AzureOperation::GetBlob,
                https: transport.https,
                client_ip: transport.client_ip,
            };
            sas::verify(&token, key, &read, now)
                .map_err(|_| cannot_verify("the source's SAS does not grant reading it"))?;
            may_read(identity.sas_access(acls))
        }
        None => may_read(identity.anonymous_access(acls)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::AnonymousAccess;
    use crate::azure::sas::{SasGrant, generate_service_sas};
    use crate::azure::shared_key::AccountKey;

    const HOSTS: &[&str] = &["127.0.0.1:10000"];

    fn kind<T: std::fmt::Debug>(r: Result<T>) -> Option<ErrorKind> {
        r.map_err(|e| e.kind()).err()
    }

    #[test]
    fn names_a_blob_of_this_server_and_account_only() {
        let at = |v| resolve(v, &AzureAddressing::PathStyle, HOSTS, "acct");
        let s = at("http://127.0.0.1:10000/acct/ctr/dir/a%20b?x=1").expect("source");
        assert_eq!((s.container.as_str(), s.blob.as_str()), ("ctr", "dir/a b"));
        assert_eq!(
            kind(at("http://other:10000/acct/ctr/b")),
            Some(ErrorKind::CannotVerifyCopySource)
        );
        assert_eq!(
            kind(at("http://127.0.0.1:10000/other/ctr/b")),
            Some(ErrorKind::CannotVerifyCopySource)
        );
        assert_eq!(
            kind(at("http://user@127.0.0.1:10000/acct/ctr/b")),
            Some(ErrorKind::InvalidHeaderValue)
        );
        for bad in [
            "/acct/ctr/b",
            "ftp://127.0.0.1:10000/acct/ctr/b",
            "http://127.0.0.1:10000/acct/ctr",
            "::",
        ] {
            assert_eq!(kind(at(bad)), Some(ErrorKind::InvalidHeaderValue), "{bad}");
        }
        assert_eq!(
            kind(at("http://127.0.0.1:10000/acct/ctr/b?snapshot=2020")),
            Some(ErrorKind::NotImplemented)
        );
        let host_style = AzureAddressing::HostStyle {
            domain: "core.windows.net".into(),
        };
        let s = resolve(
            "https://acct.blob.core.windows.net/ctr/b",
            &host_style,
            &["acct.blob.core.windows.net"],
            "acct",
        )
        .expect("host style");
        assert_eq!((s.container.as_str(), s.blob.as_str()), ("ctr", "b"));
    }

    /// A SAS that may write one blob does not make its holder a reader of every other:
    /// the source needs its own grant (or Shared Key, or anonymous reads).
    #[test]
    fn the_source_is_read_with_its_own_authority() {
        let key = AccountKey::from_base64("a2V5a2V5a2V5a2V5").expect("key");
        let identity =
            |anonymous| AzureIdentity::unrestricted("acct", Some(key.clone()), anonymous);
        let transport = Transport {
            https: false,
            client_ip: None,
        };
        let now = SystemTime::now();
        let sas_for = |blob: &str, permissions: &str| {
            generate_service_sas(
                &SasGrant {
                    account: "acct",
                    container: "ctr",
                    blob: Some(blob),
                    permissions,
                    start: None,
                    expiry: now + std::time::Duration::from_secs(600),
                    version: "2025-01-05",
                },
                &key,
            )
        };
        let source = |query: &str| {
            resolve(
                &format!("http://127.0.0.1:10000/acct/ctr/src?{query}"),
                &AzureAddressing::PathStyle,
                HOSTS,
                "acct",
            )
            .expect("source")
        };
        let check = |s: &CopySource, anonymous, shared_key| {
            kind(authorize_source(
                &identity(anonymous),
                None,
                s,
                shared_key,
                transport,
                now,
            ))
        };
        let bare = source("");
        assert_eq!(check(&bare, AnonymousAccess::Refused, true), None);
        assert_eq!(
            check(&bare, AnonymousAccess::Refused, false),
            Some(ErrorKind::CannotVerifyCopySource)
        );
        assert_eq!(check(&bare, AnonymousAccess::ReadOnly, false), None);
        assert_eq!(
            check(
                &source(&sas_for("src", "r")),
                AnonymousAccess::Refused,
                false
            ),
            None
        );
        for (blob, permissions) in [("other", "r"), ("src", "w")] {
            assert_eq!(
                check(
                    &source(&sas_for(blob, permissions)),
                    AnonymousAccess::Refused,
                    false
                ),
                Some(ErrorKind::CannotVerifyCopySource),
                "{blob} {permissions}"
            );
        }
        let keyless = AzureIdentity::unrestricted("acct", None, AnonymousAccess::ReadWrite);
        assert_eq!(
            kind(authorize_source(
                &keyless, None, &bare, false, transport, now
            )),
            None
        );
    }
}
