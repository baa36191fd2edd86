//! Authenticating an incoming S3 request against a server's identities, in every form a
//! client may use: SigV4 in the header or presigned, and SigV2 (which boto3 still uses
//! for presigned URLs by default). Servers (the origin stub, the gateway) call this one
//! function so every payload mode passes the same check.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::request::S3Request;
use super::sigv2;
use super::sigv4::{self, RequestParts, VerifiedSigV4};
use crate::access::{AnonymousAccess, Caller, authorize};
use crate::error::{Error, ErrorKind, Result};

/// Who may call a server.
#[derive(Debug, Clone, Default)]
pub struct S3Identities {
    /// Access key id → secret.
    pub secrets: BTreeMap<String, String>,
    /// What unsigned requests may do.
    pub anonymous: AnonymousAccess,
}

impl S3Identities {
    /// No identities: everything is anonymous and allowed, signatures are not checked
    /// (a local test origin).
    pub fn anonymous() -> S3Identities {
        S3Identities {
            secrets: BTreeMap::new(),
            anonymous: AnonymousAccess::ReadWrite,
        }
    }
}

/// What authentication established about a request.
#[derive(Debug, Clone)]
pub struct S3Auth {
    /// Who made it.
    pub caller: Caller,
    /// The SigV4 seed, for `aws-chunked` bodies with signed chunks.
    pub seed: Option<VerifiedSigV4>,
}

impl S3Auth {
    fn anonymous() -> S3Auth {
        S3Auth {
            caller: Caller::Anonymous,
            seed: None,
        }
    }
}

/// Verifies a request and applies the access policy ([`crate::access::authorize`]) to
/// its operation.
///
/// With no secrets configured, signatures cannot be checked: every request is
/// anonymous, whatever credentials it carries, and the anonymous policy decides.
///
/// # Errors
/// [`ErrorKind::MissingCredentials`] for an unsigned request when anonymous access is
/// refused, [`ErrorKind::AccessDenied`] for an anonymous write when it is read-only,
/// [`ErrorKind::InvalidAccessKeyId`], [`ErrorKind::SignatureDoesNotMatch`],
/// [`ErrorKind::RequestTimeTooSkewed`], [`ErrorKind::ExpiredRequest`], and the parse
/// errors of the signature formats.
pub fn authenticate(
    identities: &S3Identities,
    request: &S3Request,
    parts: &RequestParts<'_>,
    now: SystemTime,
) -> Result<S3Auth> {
    let auth = verify_signature(identities, request, parts, now)?;
    authorize(
        auth.caller,
        identities.anonymous,
        request.operation.writes(),
    )?;
    Ok(auth)
}

fn verify_signature(
    identities: &S3Identities,
    request: &S3Request,
    parts: &RequestParts<'_>,
    now: SystemTime,
) -> Result<S3Auth> {
    if identities.secrets.is_empty() {
        return Ok(S3Auth::anonymous());
    }
    let unknown_key = || {
        Error::new(
            ErrorKind::InvalidAccessKeyId,
            "The AWS Access Key Id you provided does not exist in our records.",
        )
    };
    if let Some(v2) = sigv2::parse_authorization(parts.headers, parts.raw_query)? {
        let secret = identities
            .secrets
            .get(&v2.access_key)
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
            caller: Caller::Authenticated,
            seed: None,
        });
    }
    let Some(auth) = sigv4::parse_authorization(parts.headers, parts.raw_query)? else {
        return Ok(S3Auth::anonymous());
    };
    let secret = identities
        .secrets
        .get(&auth.access_key)
        .ok_or_else(unknown_key)?;
    let seed = sigv4::verify(parts, &auth, secret, now)?;
    Ok(S3Auth {
        caller: Caller::Authenticated,
        seed: Some(seed),
    })
}
