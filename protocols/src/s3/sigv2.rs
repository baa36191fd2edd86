//! AWS Signature Version 2 for S3 (HMAC-SHA1), verification only.
//!
//! SigV2 is deprecated, but unmodified clients still produce it: boto3's
//! `generate_presigned_url` for S3 defaults to it (`?AWSAccessKeyId=..&Signature=..&Expires=..`),
//! and old tools sign headers with `Authorization: AWS key:signature`. A server that
//! claims to accept unmodified clients verifies both forms.
//!
//! String to sign: `METHOD\nContent-MD5\nContent-Type\nDate-or-Expires\n`, then each
//! `x-amz-*` header as `name:value\n` (sorted), then the resource: `/bucket/key` as sent,
//! plus the sub-resources the signature covers (`?uploadId=..&partNumber=..`, sorted).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use sha1::Sha1;

use super::sigv4::{MAX_CLOCK_SKEW, constant_time_eq};
use crate::dates::parse_http_date;
use crate::error::{Error, ErrorKind, Result};
use crate::uri_encoding::{decode, parse_query};

/// Query parameters that are part of the signed resource.
const SIGNED_SUBRESOURCES: &[&str] = &[
    "accelerate",
    "acl",
    "analytics",
    "cors",
    "defaultObjectAcl",
    "delete",
    "inventory",
    "lifecycle",
    "location",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "partNumber",
    "policy",
    "replication",
    "requestPayment",
    "response-cache-control",
    "response-content-disposition",
    "response-content-encoding",
    "response-content-language",
    "response-content-type",
    "response-expires",
    "restore",
    "select",
    "select-type",
    "storageClass",
    "tagging",
    "torrent",
    "uploadId",
    "uploads",
    "versionId",
    "versioning",
    "versions",
    "website",
];

/// A parsed SigV2 authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigV2Authorization {
    /// The access key id the client claims.
    pub access_key: String,
    /// The base64 signature sent.
    pub signature: String,
    /// Header form (with the request's date) or query form (with its expiry).
    pub form: SigV2Form,
}

/// Where a SigV2 signature was carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SigV2Form {
    /// `Authorization: AWS key:signature`; the value of the `Date` header.
    Header {
        /// The `Date` header as sent (may be empty when `x-amz-date` is used).
        date: String,
    },
    /// `AWSAccessKeyId`, `Signature`, `Expires` query parameters.
    Query {
        /// `Expires`, seconds since the epoch, as sent.
        expires: String,
    },
}

fn malformed(msg: &str) -> Error {
    Error::new(ErrorKind::MalformedAuthorization, msg)
}

/// Finds a SigV2 authorization; `Ok(None)` when the request carries none.
///
/// # Errors
/// [`ErrorKind::MalformedAuthorization`] for a malformed one.
pub fn parse_authorization(
    headers: &HeaderMap,
    raw_query: &str,
) -> Result<Option<SigV2Authorization>> {
    if let Some(value) = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let Some(rest) = value.strip_prefix("AWS ") else {
            return Ok(None);
        };
        let (key, sig) = rest
            .trim()
            .rsplit_once(':')
            .ok_or_else(|| malformed("Authorization must be 'AWS key:signature'"))?;
        let date = headers
            .get(http::header::DATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        return Ok(Some(SigV2Authorization {
            access_key: key.to_owned(),
            signature: sig.to_owned(),
            form: SigV2Form::Header { date },
        }));
    }
    if !raw_query.contains("AWSAccessKeyId=") {
        return Ok(None);
    }
    let pairs = parse_query(raw_query);
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let (Some(key), Some(signature), Some(expires)) =
        (get("AWSAccessKeyId"), get("Signature"), get("Expires"))
    else {
        return Err(malformed(
            "a SigV2 presigned URL needs AWSAccessKeyId, Signature and Expires",
        ));
    };
    // Base64 '+' may arrive unencoded and be read as a space.
    let signature = signature.replace(' ', "+");
    Ok(Some(SigV2Authorization {
        access_key: key,
        signature,
        form: SigV2Form::Query { expires },
    }))
}

/// Builds the SigV2 string to sign. `resource_path` is the path including the bucket,
/// as sent (for virtual-hosted requests, `/bucket` followed by the path).
pub fn string_to_sign(
    method: &str,
    headers: &HeaderMap,
    resource_path: &str,
    raw_query: &str,
    date_or_expires: &str,
) -> String {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .trim()
            .to_owned()
    };
    let mut out = format!(
        "{method}\n{}\n{}\n{date_or_expires}\n",
        text("content-md5"),
        text("content-type")
    );
    let mut amz: Vec<(String, String)> = Vec::new();
    for (name, value) in headers {
        let name = name.as_str();
        if name.starts_with("x-amz-") {
            let value = String::from_utf8_lossy(value.as_bytes()).trim().to_owned();
            match amz.iter_mut().find(|(n, _)| n == name) {
                Some((_, v)) => {
                    v.push(',');
                    v.push_str(&value);
                }
                None => amz.push((name.to_owned(), value)),
            }
        }
    }
    amz.sort();
    for (name, value) in amz {
        out.push_str(&format!("{name}:{value}\n"));
    }
    out.push_str(resource_path);
    let mut subresources: Vec<(String, Option<String>)> = raw_query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            // Names are matched decoded, as the request classifier reads them: an
            // encoded `response-content-typ%65` is signed like the plain name (SEC-09).
            let (k, v) = match p.split_once('=') {
                Some((k, v)) => (decode(k), Some(decode(v).into_owned())),
                None => (decode(p), None),
            };
            SIGNED_SUBRESOURCES
                .contains(&k.as_ref())
                .then(|| (k.into_owned(), v))
        })
        .collect();
    subresources.sort_by(|a, b| a.0.cmp(&b.0));
    if !subresources.is_empty() {
        out.push('?');
        let joined: Vec<String> = subresources
            .into_iter()
            .map(|(k, v)| match v {
                Some(v) => format!("{k}={v}"),
                None => k,
            })
            .collect();
        out.push_str(&joined.join("&"));
    }
    out
}

/// Computes a SigV2 signature.
pub fn sign(secret: &str, string_to_sign: &str) -> String {
    let mut mac = match <Hmac<Sha1> as KeyInit>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(string_to_sign.as_bytes());
    BASE64.encode(mac.finalize().into_bytes())
}

/// Verifies a SigV2 request.
///
/// # Errors
/// [`ErrorKind::SignatureDoesNotMatch`], [`ErrorKind::ExpiredRequest`] (query form past
/// `Expires`), [`ErrorKind::RequestTimeTooSkewed`] (header form more than 15 minutes off).
pub fn verify(
    method: &str,
    headers: &HeaderMap,
    resource_path: &str,
    raw_query: &str,
    auth: &SigV2Authorization,
    secret: &str,
    now: SystemTime,
) -> Result<()> {
    let date_or_expires = match &auth.form {
        SigV2Form::Query { expires } => {
            let at: u64 = expires
                .parse()
                .map_err(|_| malformed("Expires must be seconds since the epoch"))?;
            // Checked: an Expires past what the clock can represent (found by fuzzing:
            // `Expires=16460328474504646432` overflowed SystemTime and panicked).
            let too_far = || {
                Error::new(
                    ErrorKind::ExpiredRequest,
                    "Expires must be at most 7 days (604800 seconds) from now",
                )
            };
            let expires_at = UNIX_EPOCH
                .checked_add(Duration::from_secs(at))
                .ok_or_else(too_far)?;
            if now > expires_at {
                return Err(Error::new(ErrorKind::ExpiredRequest, "Request has expired"));
            }
            // Capped like SigV4's X-Amz-Expires: a URL valid until 2100 is a password.
            if now
                .checked_add(super::sigv4::MAX_PRESIGNED_EXPIRY)
                .is_none_or(|limit| expires_at > limit)
            {
                return Err(Error::new(
                    ErrorKind::ExpiredRequest,
                    "Expires must be at most 7 days (604800 seconds) from now",
                ));
            }
            expires.as_str()
        }
        SigV2Form::Header { date } => {
            let stamp = headers
                .get("x-amz-date")
                .and_then(|v| v.to_str().ok())
                .and_then(parse_http_date)
                .or_else(|| parse_http_date(date))
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::MissingCredentials,
                        "AWS authentication requires a valid Date or x-amz-date header",
                    )
                })?;
            let skew = now
                .duration_since(stamp)
                .or_else(|_| stamp.duration_since(now))
                .unwrap_or_default();
            if skew > MAX_CLOCK_SKEW {
                return Err(Error::new(
                    ErrorKind::RequestTimeTooSkewed,
                    "The difference between the request time and the current time is too large.",
                ));
            }
            if headers.contains_key("x-amz-date") {
                ""
            } else {
                date.as_str()
            }
        }
    };
    let sts = string_to_sign(method, headers, resource_path, raw_query, date_or_expires);
    let expected = sign(secret, &sts);
    if constant_time_eq(expected.as_bytes(), auth.signature.as_bytes()) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::SignatureDoesNotMatch,
            "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The "Example Object GET" of the S3 SigV2 documentation.
    #[test]
    fn documented_get_example() {
        let mut h = HeaderMap::new();
        h.insert(
            "host",
            "awsexamplebucket1.us-west-1.s3.amazonaws.com"
                .parse()
                .expect("v"),
        );
        h.insert(
            "date",
            "Tue, 27 Mar 2007 19:36:42 +0000".parse().expect("v"),
        );
        let sts = string_to_sign(
            "GET",
            &h,
            "/awsexamplebucket1/photos/puppy.jpg",
            "",
            "Tue, 27 Mar 2007 19:36:42 +0000",
        );
        assert_eq!(
            sts,
            "GET\n\n\nTue, 27 Mar 2007 19:36:42 +0000\n/awsexamplebucket1/photos/puppy.jpg"
        );
        assert_eq!(
            sign("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", &sts),
            "qgk2+6Sv9/oM7G3qLEjTH1a1l1g="
        );
    }

    #[test]
    fn query_form_verifies_and_expires() {
        let secret = "secret";
        let h = HeaderMap::new();
        let sts = string_to_sign("GET", &h, "/b/k%20x", "versionId=null", "2000000000");
        let sig = sign(secret, &sts);
        let query = format!(
            "AWSAccessKeyId=AK&Signature={}&Expires=2000000000&versionId=null",
            crate::uri_encoding::encode_strict(&sig)
        );
        let auth = parse_authorization(&h, &query)
            .expect("parse")
            .expect("present");
        let before = UNIX_EPOCH + Duration::from_secs(1_999_999_000);
        verify("GET", &h, "/b/k%20x", &query, &auth, secret, before).expect("valid");
        let after = UNIX_EPOCH + Duration::from_secs(2_000_000_001);
        assert_eq!(
            verify("GET", &h, "/b/k%20x", &query, &auth, secret, after).map_err(|e| e.kind()),
            Err(ErrorKind::ExpiredRequest)
        );
        assert_eq!(
            verify("GET", &h, "/b/other", &query, &auth, secret, before).map_err(|e| e.kind()),
            Err(ErrorKind::SignatureDoesNotMatch)
        );
        // An Expires past what the clock can hold is refused, not a panic.
        let huge = query.replace("2000000000", "16460328474504646432");
        let auth_huge = parse_authorization(&h, &huge)
            .expect("parse")
            .expect("present");
        assert_eq!(
            verify("GET", &h, "/b/k%20x", &huge, &auth_huge, secret, before).map_err(|e| e.kind()),
            Err(ErrorKind::ExpiredRequest)
        );
        // SEC-09: more than 7 days ahead is refused however well it is signed.
        let long_ago = UNIX_EPOCH + Duration::from_secs(2_000_000_000 - 8 * 24 * 3600);
        assert_eq!(
            verify("GET", &h, "/b/k%20x", &query, &auth, secret, long_ago).map_err(|e| e.kind()),
            Err(ErrorKind::ExpiredRequest)
        );
    }

    /// SEC-09: a sub-resource whose name is percent-encoded is signed like its plain
    /// name, so adding one to a signed URL breaks the signature.
    #[test]
    fn encoded_subresource_names_are_signed_decoded() {
        let h = HeaderMap::new();
        assert_eq!(
            string_to_sign(
                "GET",
                &h,
                "/b/k",
                "response-content-typ%65=text%2Fhtml",
                "1"
            ),
            string_to_sign("GET", &h, "/b/k", "response-content-type=text%2Fhtml", "1"),
        );
        assert_ne!(
            string_to_sign("GET", &h, "/b/k", "part%4Eumber=1", "1"),
            string_to_sign("GET", &h, "/b/k", "", "1"),
        );
    }
}
