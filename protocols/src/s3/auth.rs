//! Authenticating an incoming S3 request against a server's identities, in every form a
//! client may use: SigV4 in the header or presigned, and SigV2 (which boto3 still uses
//! for presigned URLs by default). Servers (the origin stub, the gateway) call this one
//! function so every payload mode passes the same check.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::request::S3Request;
use super::sigv2;
use super::sigv4::{self, RequestParts, VerifiedSigV4};
use crate::error::{Error, ErrorKind, Result};

/// Who may call a server.
#[derive(Debug, Clone, Default)]
pub struct S3Identities {
    /// Access key id → secret.
    pub secrets: BTreeMap<String, String>,
    /// Whether unsigned requests are served.
    pub allow_anonymous: bool,
}

impl S3Identities {
    /// No identities: everything is anonymous, signatures are not checked.
    pub fn anonymous() -> S3Identities {
        S3Identities {
            secrets: BTreeMap::new(),
            allow_anonymous: true,
        }
    }
}

/// Verifies a request. Returns the SigV4 seed when the body is `aws-chunked` with
/// signed chunks; `None` for anonymous requests and SigV2.
///
/// With no secrets configured and anonymous access allowed, signatures are not checked
/// at all (a local stub accepts any client credentials).
///
/// # Errors
/// [`ErrorKind::MissingCredentials`] for an unsigned request when anonymous access is
/// not allowed, [`ErrorKind::InvalidAccessKeyId`], [`ErrorKind::SignatureDoesNotMatch`],
/// [`ErrorKind::RequestTimeTooSkewed`], [`ErrorKind::ExpiredRequest`], and the parse
/// errors of the signature formats.
pub fn authenticate(
    identities: &S3Identities,
    request: &S3Request,
    parts: &RequestParts<'_>,
    now: SystemTime,
) -> Result<Option<VerifiedSigV4>> {
    if identities.secrets.is_empty() && identities.allow_anonymous {
        return Ok(None);
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
        return Ok(None);
    }
    let Some(auth) = sigv4::parse_authorization(parts.headers, parts.raw_query)? else {
        if identities.allow_anonymous {
            return Ok(None);
        }
        return Err(Error::new(
            ErrorKind::MissingCredentials,
            "Anonymous access is not allowed; sign the request.",
        ));
    };
    let secret = identities
        .secrets
        .get(&auth.access_key)
        .ok_or_else(unknown_key)?;
    sigv4::verify(parts, &auth, secret, now).map(Some)
}
