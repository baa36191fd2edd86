//! The standard content headers an object keeps from its write and gives back on reads,
//! shared by every server that stores or passes on writes (the origin stub, the gateway).

use std::collections::BTreeMap;

use talon_core::wire::HeaderSet;

/// The content headers by their lower-case names on a read. S3 takes the same names on a
/// write; Azure takes `x-ms-blob-<name>` (and, on Put Blob, most of them plainly).
pub const CONTENT_HEADERS: [&str; 4] = [
    "content-encoding",
    "content-language",
    "content-disposition",
    "cache-control",
];

/// The headers a stored object gives back on reads, from what it keeps: its
/// Content-MD5 (base64), its full-object checksum, its content headers by
/// [`CONTENT_HEADERS`] name, and its user metadata. One mapping for every store (the
/// origin stub's, the in-memory reference backend).
pub fn header_set(
    content_md5: Option<&str>,
    checksum: Option<&(crate::checksum::ChecksumAlgorithm, String)>,
    content_headers: &BTreeMap<String, String>,
    user_metadata: &BTreeMap<String, String>,
) -> HeaderSet {
    let content = |name: &str| content_headers.get(name).cloned().unwrap_or_default();
    HeaderSet {
        content_md5: content_md5.unwrap_or_default().to_owned(),
        checksum: checksum.map(|(alg, v)| alg.kept(v)).unwrap_or_default(),
        content_encoding: content("content-encoding"),
        content_language: content("content-language"),
        content_disposition: content("content-disposition"),
        cache_control: content("cache-control"),
        user_metadata: user_metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

/// The content headers a [`HeaderSet`] carries, by [`CONTENT_HEADERS`] name (the empty
/// ones left out): [`header_set`]'s inverse for them.
pub fn content_headers_of(h: &HeaderSet) -> BTreeMap<String, String> {
    [
        ("content-encoding", &h.content_encoding),
        ("content-language", &h.content_language),
        ("content-disposition", &h.content_disposition),
        ("cache-control", &h.cache_control),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(n, v)| (n.to_owned(), v.clone()))
    .collect()
}

/// The value an object keeps for content header `name` given `value` on its write, or
/// `None` when nothing is left to keep. `aws-chunked`, a transfer detail of S3 uploads,
/// is dropped from a Content-Encoding (as S3 does); any other value is kept as written.
pub fn stored_value(name: &str, value: &str) -> Option<String> {
    let chunked = |c: &str| c.trim().eq_ignore_ascii_case("aws-chunked");
    let value = if name == "content-encoding" && value.split(',').any(chunked) {
        value
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty() && !chunked(c))
            .collect::<Vec<_>>()
            .join(",")
    } else {
        value.to_owned()
    };
    (!value.is_empty()).then_some(value)
}

/// S3's `response-*` query parameters of a GetObject and the response header each
/// overrides.
pub const S3_RESPONSE_OVERRIDES: [(&str, &str); 6] = [
    ("response-content-type", "content-type"),
    ("response-content-language", "content-language"),
    ("response-expires", "expires"),
    ("response-cache-control", "cache-control"),
    ("response-content-disposition", "content-disposition"),
    ("response-content-encoding", "content-encoding"),
];

/// The response headers a GetObject's `response-*` parameters ask for, as
/// `(header, value)`. None for an anonymous caller: S3 honours them only on signed
/// requests, and an unsigned `response-content-type=text/html` would let anyone serve
/// any readable object as a page from the gateway's origin.
pub fn s3_response_overrides(
    query: &crate::s3::request::QueryParams,
    caller: crate::access::Caller,
) -> impl Iterator<Item = (&'static str, &str)> {
    let signed = caller == crate::access::Caller::Authenticated;
    S3_RESPONSE_OVERRIDES
        .into_iter()
        .filter(move |_| signed)
        .filter_map(|(param, header)| query.get(param).map(|v| (header, v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_chunked_is_a_transfer_detail_not_an_encoding() {
        let kept = |n, v| stored_value(n, v);
        assert_eq!(kept("content-encoding", "aws-chunked"), None);
        assert_eq!(
            kept("content-encoding", "gzip, aws-chunked").as_deref(),
            Some("gzip")
        );
        assert_eq!(
            kept("content-encoding", "gzip, br").as_deref(),
            Some("gzip, br")
        );
        assert_eq!(
            kept("cache-control", "aws-chunked").as_deref(),
            Some("aws-chunked")
        );
        assert_eq!(kept("content-language", ""), None);
    }
}
