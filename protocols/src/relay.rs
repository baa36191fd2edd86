//! What a gateway passes between a client and an origin: a write's headers read from a
//! client's request and written in the origin's dialect, the headers a relayed S3
//! request keeps, a conditional delete's headers to an S3 origin, and the headers of an
//! origin's answer that a client may see. The gateway asks here instead of naming any
//! `x-amz-` or `x-ms-` header itself (a CI check, `scripts/check_protocol_literals.py`,
//! holds it to that).

use http::HeaderMap;
use talon_core::Backend;

use crate::conditional::DeleteConditions;
use crate::error::Error;
use crate::server::WriteSpec;

/// The request header naming a copy's source (S3's CopyObject and UploadPartCopy).
pub const S3_COPY_SOURCE: &str = "x-amz-copy-source";
/// The answer header with a multipart object's part count (a GET or HEAD of a part).
pub const S3_PARTS_COUNT: &str = "x-amz-mp-parts-count";
/// Azure's range header, which wins over `Range`.
pub const AZURE_RANGE: &str = "x-ms-range";

/// Headers of a relayed S3 request passed on to the origin besides the write's own
/// ([`WriteSpec::origin_headers`]).
pub const RELAYED_S3_REQUEST_HEADERS: &[&str] = &[
    S3_COPY_SOURCE,
    "x-amz-copy-source-range",
    "x-amz-copy-source-if-match",
    "x-amz-copy-source-if-none-match",
    "x-amz-copy-source-if-modified-since",
    "x-amz-copy-source-if-unmodified-since",
    "x-amz-metadata-directive",
    // GetObjectAttributes' attributes and parts page.
    "x-amz-object-attributes",
    "x-amz-max-parts",
    "x-amz-part-number-marker",
    // A copy's (and a completion's) conditions on its destination.
    "if-match",
    "if-none-match",
    "x-amz-tagging",
    "x-amz-storage-class",
    "content-md5",
];

/// Headers of an origin's answer that a client may see besides every `x-amz-` one but
/// the origin's request ids and every `x-ms-meta-` one ([`client_may_see`]).
const RELAYED_ANSWER_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "content-range",
    "content-md5",
    "etag",
    "last-modified",
    "location",
    "x-ms-error-code",
    "x-ms-blob-type",
    "x-ms-request-server-encrypted",
    "x-ms-blob-content-md5",
];

/// Whether a header of an origin's answer (its lower-case name) is relayed to the
/// client; everything else (the origin's request ids, its server, connection
/// management) is the gateway's own.
pub fn client_may_see(name: &str) -> bool {
    RELAYED_ANSWER_HEADERS.contains(&name)
        || (name.starts_with("x-amz-") && name != "x-amz-request-id" && name != "x-amz-id-2")
        || name.starts_with("x-ms-meta-")
}

impl WriteSpec {
    /// A write's headers as a client of `protocol` sends them: S3's `Content-Type`,
    /// `x-amz-meta-*` and content headers by their own names; Azure's
    /// `x-ms-blob-content-type` (else `Content-Type`), `x-ms-meta-*` and `x-ms-blob-*`
    /// content headers.
    ///
    /// # Errors
    /// As [`WriteSpec::from_headers`].
    pub fn of_request(protocol: Backend, headers: &HeaderMap) -> Result<WriteSpec, Error> {
        match protocol {
            Backend::S3 => WriteSpec::from_headers(headers, "content-type", "x-amz-meta-", ""),
            Backend::Azure => {
                let mut write = WriteSpec::from_headers(
                    headers,
                    "x-ms-blob-content-type",
                    "x-ms-meta-",
                    "x-ms-blob-",
                )?;
                if write.content_type.is_none() {
                    write.content_type =
                        crate::answer::header(headers, "content-type").map(str::to_owned);
                }
                Ok(write)
            }
        }
    }

    /// The headers that carry this write to an origin of `origin`'s protocol: content
    /// type, content headers, user metadata and (S3) `Expires`.
    pub fn origin_headers(&self, origin: Backend) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let (content_type, content_prefix, meta_prefix) = match origin {
            Backend::S3 => ("content-type", "", "x-amz-meta-"),
            Backend::Azure => ("x-ms-blob-content-type", "x-ms-blob-", "x-ms-meta-"),
        };
        if let Some(ct) = &self.content_type {
            out.push((content_type.to_owned(), ct.clone()));
        }
        for (name, value) in &self.content_headers {
            out.push((format!("{content_prefix}{name}"), value.clone()));
        }
        for (name, value) in &self.user_metadata {
            out.push((format!("{meta_prefix}{name}"), value.clone()));
        }
        if origin == Backend::S3
            && let Some(expires) = &self.expires
        {
            out.push(("expires".to_owned(), expires.clone()));
        }
        out
    }
}

impl DeleteConditions {
    /// The headers that carry these conditions to an S3 origin, which checks all three
    /// itself (an Azure origin conditions a delete on `If-Match` only).
    pub fn s3_origin_headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = Vec::new();
        if let Some(list) = &self.if_match {
            headers.push(("if-match", list.header_value()));
        }
        if let Some(t) = self.last_modified {
            headers.push((
                "x-amz-if-match-last-modified-time",
                crate::dates::format_http_date(t),
            ));
        }
        if let Some(size) = self.size {
            headers.push(("x-amz-if-match-size", size.to_string()));
        }
        headers
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        h
    }

    /// A write read in one protocol is written in the other's words: the rule the
    /// gateway's cross-protocol writes rely on.
    #[test]
    fn a_write_crosses_from_one_dialect_to_the_other() {
        let s3 = headers(&[
            ("content-type", "text/plain"),
            ("x-amz-meta-colour", "blue"),
            ("cache-control", "no-cache"),
            ("expires", "Thu, 01 Jan 2037 00:00:00 GMT"),
        ]);
        let write = WriteSpec::of_request(Backend::S3, &s3).unwrap();
        let mut azure = write.origin_headers(Backend::Azure);
        azure.sort();
        assert_eq!(
            azure,
            [
                ("x-ms-blob-cache-control".to_owned(), "no-cache".to_owned()),
                ("x-ms-blob-content-type".to_owned(), "text/plain".to_owned()),
                ("x-ms-meta-colour".to_owned(), "blue".to_owned()),
            ]
        );
        let from_azure = headers(&[("content-type", "image/png"), ("x-ms-meta-k", "v")]);
        let write = WriteSpec::of_request(Backend::Azure, &from_azure).unwrap();
        let mut s3 = write.origin_headers(Backend::S3);
        s3.sort();
        assert_eq!(
            s3,
            [
                ("content-type".to_owned(), "image/png".to_owned()),
                ("x-amz-meta-k".to_owned(), "v".to_owned()),
            ]
        );
    }

    #[test]
    fn the_client_sees_the_objects_headers_not_the_origins_request_ids() {
        for name in [
            "etag",
            "x-amz-meta-a",
            "x-amz-version-id",
            "x-ms-meta-b",
            "x-ms-blob-type",
        ] {
            assert!(client_may_see(name), "{name}");
        }
        for name in [
            "x-amz-request-id",
            "x-amz-id-2",
            "x-ms-request-id",
            "server",
            "connection",
        ] {
            assert!(!client_may_see(name), "{name}");
        }
    }

    #[test]
    fn a_deletes_conditions_go_to_an_s3_origin_as_its_three_headers() {
        let conditions = DeleteConditions {
            if_match: Some(crate::conditional::EtagList::parse("\"abc\"")),
            last_modified: Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(86_400)),
            size: Some(42),
        };
        assert_eq!(
            conditions.s3_origin_headers(),
            [
                ("if-match", "\"abc\"".to_owned()),
                (
                    "x-amz-if-match-last-modified-time",
                    "Fri, 02 Jan 1970 00:00:00 GMT".to_owned()
                ),
                ("x-amz-if-match-size", "42".to_owned()),
            ]
        );
    }
}
