//! Authenticating an incoming S3 request against a server's identities, in every form a
//! client may use: SigV4 in the header or presigned, and SigV2 (which boto3 still uses
//! for presigned URLs by default). Servers (the origin stub, the gateway) call this one
//! function so every payload mode passes the same check.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::request::{S3Operation, S3Request, parse_copy_source};
use super::sigv2;
use super::sigv4::{self, RequestParts, VerifiedSigV4};
use crate::access::{Access, Acls, Action, AnonymousAccess, Grants, Need, Open, Resource};
use crate::error::{Error, ErrorKind, Result};

/// Who may call a server.
#[derive(Debug, Clone, Default)]
pub struct S3Identities {
    /// Access key id → secret.
    pub secrets: BTreeMap<String, String>,
    /// Access key id → what it may do. A key missing here may do nothing.
    pub grants: BTreeMap<String, Grants>,
    /// What unsigned requests may do in every bucket.
    pub anonymous: AnonymousAccess,
    /// Buckets and prefixes unsigned requests may read and list.
    pub public: Grants,
    /// The regions a SigV4 credential scope may name: the server's own (and any it is
    /// configured to answer for). A signature for another region or service is refused
    /// (SEC-15). Empty refuses every SigV4 signature.
    pub regions: Vec<String>,
}

impl S3Identities {
    /// No identities: everything is anonymous and allowed, signatures are not checked
    /// (a local test origin).
    pub fn anonymous() -> S3Identities {
        S3Identities {
            anonymous: AnonymousAccess::ReadWrite,
            ..S3Identities::default()
        }
    }

    /// Adds a key that may do everything.
    pub fn with_unrestricted_key(mut self, access_key: &str, secret_key: &str) -> S3Identities {
        self.secrets
            .insert(access_key.to_owned(), secret_key.to_owned());
        self.grants
            .insert(access_key.to_owned(), Grants::everything());
        self
    }

    fn granted<'a>(&'a self, access_key: &str, acls: Option<&'a Acls>) -> Access<'a> {
        static NOTHING: Grants = Grants::NONE;
        Access::Granted {
            grants: self.grants.get(access_key).unwrap_or(&NOTHING),
            open: self.open(acls),
        }
    }

    fn anonymous_access<'a>(&'a self, acls: Option<&'a Acls>) -> Access<'a> {
        Access::Anonymous {
            level: self.anonymous,
            open: self.open(acls),
        }
    }

    fn open<'a>(&'a self, acls: Option<&'a Acls>) -> Open<'a> {
        Open {
            public: &self.public,
            acls,
        }
    }
}

/// What authentication established about a request.
#[derive(Debug, Clone)]
pub struct S3Auth<'a> {
    /// Who made it and what they may do.
    pub access: Access<'a>,
    /// The access key id it was signed with; `None` for an anonymous request.
    pub who: Option<&'a str>,
    /// The SigV4 seed, for `aws-chunked` bodies with signed chunks.
    pub seed: Option<VerifiedSigV4>,
}

/// Verifies a request and applies the access policy ([`Access::check`]) to what its
/// operation needs ([`S3Request::need`]). A copy's source, each key of a DeleteObjects
/// and the buckets of a ListBuckets are checked by the server as it reaches them.
///
/// With no secrets configured, signatures cannot be checked: every request is
/// anonymous, whatever credentials it carries, and the anonymous policy decides.
///
/// # Errors
/// [`ErrorKind::MissingCredentials`] for an unsigned request when anonymous access is
/// refused, [`ErrorKind::AccessDenied`] for an anonymous request it does not allow,
/// [`ErrorKind::PermissionMismatch`] for an identity whose grants do not allow it,
/// [`ErrorKind::InvalidAccessKeyId`], [`ErrorKind::SignatureDoesNotMatch`],
/// [`ErrorKind::RequestTimeTooSkewed`], [`ErrorKind::ExpiredRequest`], and the parse
/// errors of the signature formats.
pub fn authenticate<'a>(
    identities: &'a S3Identities,
    acls: Option<&'a Acls>,
    request: &S3Request,
    parts: &RequestParts<'_>,
    now: SystemTime,
) -> Result<S3Auth<'a>> {
    let auth = verify(identities, acls, request, parts, now)?;
    authorize(&auth, request, parts.headers)?;
    Ok(auth)
}

/// The policy half of [`authenticate`]: what the request needs, and a copy's source.
///
/// # Errors
/// The refusals of [`Access::check`]; a copy source that does not parse.
pub fn authorize(auth: &S3Auth<'_>, request: &S3Request, headers: &http::HeaderMap) -> Result<()> {
    auth.access.check(request.need())?;
    if let Some((bucket, key)) = copy_source(request, headers)? {
        auth.access.check(Need {
            action: Action::Read,
            resource: Resource::Object {
                bucket: &bucket,
                key: &key,
            },
        })?;
    }
    Ok(())
}

/// The source of a copy (CopyObject, UploadPartCopy), which needs `read`: checked here,
/// before the server dispatches or relays the copy.
fn copy_source(request: &S3Request, headers: &http::HeaderMap) -> Result<Option<(String, String)>> {
    if !matches!(
        request.operation,
        S3Operation::CopyObject | S3Operation::UploadPartCopy
    ) {
        return Ok(None);
    }
    let value = headers
        .get("x-amz-copy-source")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let (bucket, key) = parse_copy_source(value)?;
    // The source is a key like any other: no `.` or `..` segment that a relay or the
    // origin would resolve into another key than the one the policy checked.
    crate::names::check_object_key(&key)?;
    Ok(Some((bucket, key)))
}

/// The signature half of [`authenticate`]: who made the request.
///
/// # Errors
/// The signature errors of [`authenticate`].
pub fn verify<'a>(
    identities: &'a S3Identities,
    acls: Option<&'a Acls>,
    request: &S3Request,
    parts: &RequestParts<'_>,
    now: SystemTime,
) -> Result<S3Auth<'a>> {
    let anonymous = || S3Auth {
        access: identities.anonymous_access(acls),
        who: None,
        seed: None,
    };
    if identities.secrets.is_empty() {
        return Ok(anonymous());
    }
    let unknown_key = || {
        Error::new(
            ErrorKind::InvalidAccessKeyId,
            "The AWS Access Key Id you provided does not exist in our records.",
        )
    };
    if let Some(v2) = sigv2::parse_authorization(parts.headers, parts.raw_query)? {
        let (who, secret) = identities
            .secrets
            .get_key_value(&v2.access_key)
            .ok_or_else(unknown_key)?;
        let resource = match (&request.bucket, request.virtual_hosted) {
            (Some(bucket), true) => format!("/{bucket}{}", parts.raw_path),
            _ => parts.raw_path.to_owned(),
        };
        sigv2::verify(
            parts.method,
            parts.headers,
            &resource,
            parts.raw_query,
            &v2,
            secret,
            now,
        )?;
        return Ok(S3Auth {
            access: identities.granted(&v2.access_key, acls),
            who: Some(who),
            seed: None,
        });
    }
    let Some(auth) = sigv4::parse_authorization(parts.headers, parts.raw_query)? else {
        return Ok(anonymous());
    };
    check_scope(identities, &auth.scope)?;
    let (who, secret) = identities
        .secrets
        .get_key_value(&auth.access_key)
        .ok_or_else(unknown_key)?;
    let seed = sigv4::verify(parts, &auth, secret, now)?;
    refuse_unsigned_amz_headers(parts.headers, &auth.signed_headers)?;
    Ok(S3Auth {
        access: identities.granted(&auth.access_key, acls),
        who: Some(who),
        seed: Some(seed),
    })
}

/// A SigV4 credential scope must name the service `s3` and one of this server's
/// regions, as S3 requires: otherwise a signature captured for another service or region
/// would be replayable here.
fn check_scope(identities: &S3Identities, scope: &sigv4::CredentialScope) -> Result<()> {
    if scope.service != "s3" {
        return Err(Error::new(
            ErrorKind::MalformedAuthorization,
            format!(
                "The authorization header is malformed; incorrect service '{}'. This endpoint belongs to 's3'.",
                scope.service
            ),
        ));
    }
    if !identities.regions.contains(&scope.region) {
        return Err(Error::new(
            ErrorKind::MalformedAuthorization,
            format!(
                "The authorization header is malformed; the region '{}' is wrong; expecting '{}'",
                scope.region,
                identities.regions.first().map_or("", String::as_str)
            ),
        ));
    }
    Ok(())
}

/// `x-amz-*` headers a request may carry without signing them: transport and integrity
/// details that cannot change what the request does.
const UNSIGNED_AMZ_ALLOWED: &[&str] = &[
    "x-amz-content-sha256",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-user-agent",
    "x-amz-sdk-checksum-algorithm",
    "x-amz-expected-bucket-owner",
];

/// Every other `x-amz-*` header must be signed, as S3 requires: an unsigned
/// `x-amz-copy-source` would turn the holder of a presigned PUT into a copier of any
/// object the server can read (SEC-16), and unsigned metadata or tagging would rewrite
/// what the signer delegated.
fn refuse_unsigned_amz_headers(headers: &http::HeaderMap, signed: &[String]) -> Result<()> {
    let unsigned = headers.keys().map(http::HeaderName::as_str).find(|name| {
        name.starts_with("x-amz-")
            && !name.starts_with("x-amz-checksum-")
            && !UNSIGNED_AMZ_ALLOWED.contains(name)
            && !signed.iter().any(|s| s == name)
    });
    match unsigned {
        Some(name) => Err(Error::new(
            ErrorKind::AccessDenied,
            format!("There were headers present in the request which were not signed: {name}"),
        )),
        None => Ok(()),
    }
}
