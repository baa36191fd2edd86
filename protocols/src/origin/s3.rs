//! The S3 side of the origin client: SigV4 signing, path- or virtual-hosted addressing,
//! `Range`, the checksum mode, trailer-checksum uploads, ListBuckets and
//! ListObjectsV2.

use std::time::SystemTime;

use http::Method;

use super::{BucketSummary, Dialect, ListOptions, ListResult, ListedEntry, OriginBody};
use crate::conditional::quote_etag;
use crate::error::Result;
use crate::names;
use crate::s3::sigv4::{S3Credentials, SignedBody, sign_request};
use crate::uri_encoding::decode;

/// An S3 endpoint and how to sign for it.
pub(super) struct S3Dialect {
    pub(super) endpoint: String,
    pub(super) region: String,
    pub(super) credentials: Signing,
    pub(super) virtual_hosted: bool,
}

/// What S3 requests are signed with.
pub(super) enum Signing {
    /// Nothing: requests go unsigned (a public bucket, a local test origin).
    Anonymous,
    /// Keys given once.
    Static(S3Credentials),
    /// Keys kept current by their own task.
    Refreshing(std::sync::Arc<super::credentials::RefreshingCredentials>),
}

fn rfc3339(text: &str) -> Option<SystemTime> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(SystemTime::from)
}

impl Dialect for S3Dialect {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn virtual_hosted(&self) -> bool {
        self.virtual_hosted
    }

    fn check_bucket(&self, bucket: &str) -> Result<()> {
        if self.virtual_hosted {
            // Part of a host name: DNS-safe names only.
            names::validate_bucket_name(bucket)
        } else {
            names::check_s3_bucket(bucket)
        }
    }

    fn authorize(
        &self,
        method: &Method,
        url: &str,
        host: &str,
        headers: &mut Vec<(String, String)>,
        body: &OriginBody,
        now: SystemTime,
    ) -> Result<()> {
        let refreshed;
        let creds = match &self.credentials {
            Signing::Static(c) => Some(c),
            Signing::Refreshing(r) => {
                refreshed = r.current()?;
                Some(&*refreshed)
            }
            Signing::Anonymous => None,
        };
        let Some(creds) = creds else {
            if matches!(body, OriginBody::ChunkedWithTrailer { .. }) {
                headers.push((
                    "x-amz-content-sha256".into(),
                    "STREAMING-UNSIGNED-PAYLOAD-TRAILER".into(),
                ));
            }
            return Ok(());
        };
        let mut to_sign: Vec<(&str, &str)> = vec![("host", host)];
        to_sign.extend(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let signed_body = match body {
            OriginBody::Empty => SignedBody::Bytes(&[]),
            OriginBody::Bytes(b) => SignedBody::Bytes(b),
            OriginBody::Stream { .. } => SignedBody::Unsigned,
            OriginBody::ChunkedWithTrailer { .. } => SignedBody::UnsignedTrailer,
        };
        let extra = sign_request(
            method.as_str(),
            url,
            &to_sign,
            signed_body,
            creds,
            &self.region,
            now,
        )?;
        headers.extend(extra);
        Ok(())
    }

    fn range_header(&self) -> &'static str {
        "range"
    }

    fn whole_object_headers(&self) -> Vec<(&'static str, String)> {
        // Whole-object answers then carry the object's flexible checksum.
        vec![("x-amz-checksum-mode", "ENABLED".to_owned())]
    }

    fn has_start_after(&self) -> bool {
        true
    }

    fn has_suffix_ranges(&self) -> bool {
        true
    }

    fn etag_changes_with_every_write(&self) -> bool {
        // The ETag is the content's digest (or the parts'): rewriting the same bytes
        // with other metadata keeps it.
        false
    }

    fn takes_trailer_checksums(&self) -> bool {
        true
    }

    fn put_headers(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    fn list_buckets_query(&self) -> &'static str {
        ""
    }

    fn parse_buckets(&self, body: &[u8]) -> Result<Vec<BucketSummary>> {
        let parsed: crate::s3::xml::ListAllMyBucketsResult = crate::s3::xml::parse_request(body)?;
        Ok(parsed
            .buckets
            .bucket
            .into_iter()
            .map(|b| BucketSummary {
                created: rfc3339(&b.creation_date),
                name: b.name,
            })
            .collect())
    }

    fn bucket_query(&self) -> &'static str {
        ""
    }

    fn list_query(&self, options: &ListOptions<'_>) -> Vec<(&'static str, String)> {
        let mut q = vec![("list-type", "2".into()), ("encoding-type", "url".into())];
        if let Some(t) = options.token {
            q.push(("continuation-token", t.into()));
        }
        if let Some(a) = options.start_after {
            q.push(("start-after", a.into()));
        }
        if let Some(m) = options.max_keys {
            q.push(("max-keys", m.to_string()));
        }
        q
    }

    fn parse_listing(&self, body: &[u8], _include_metadata: bool) -> Result<ListResult> {
        let parsed: crate::s3::xml::ListBucketResult = crate::s3::xml::parse_request(body)?;
        let url = parsed.encoding_type.as_deref() == Some("url");
        let dec = |s: &str| {
            if url {
                decode(s).into_owned()
            } else {
                s.to_owned()
            }
        };
        Ok(ListResult {
            objects: parsed
                .contents
                .iter()
                .map(|o| ListedEntry {
                    key: dec(&o.key),
                    size: o.size,
                    etag: quote_etag(&o.etag),
                    last_modified: rfc3339(&o.last_modified),
                    content_type: None,
                    content_md5: None,
                    user_metadata: None,
                })
                .collect(),
            common_prefixes: parsed
                .common_prefixes
                .iter()
                .map(|p| dec(&p.prefix))
                .collect(),
            next_token: parsed
                .next_continuation_token
                .filter(|_| parsed.is_truncated),
        })
    }
}
