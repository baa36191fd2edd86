//! The standard content headers an object keeps from its write and gives back on reads,
//! shared by every server that stores or passes on writes (the origin stub, the gateway).

/// The content headers by their lower-case names on a read. S3 takes the same names on a
/// write; Azure takes `x-ms-blob-<name>` (and, on Put Blob, most of them plainly).
pub const CONTENT_HEADERS: [&str; 4] = [
    "content-encoding",
    "content-language",
    "content-disposition",
    "cache-control",
];

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
