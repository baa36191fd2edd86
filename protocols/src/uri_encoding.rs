//! Percent-encoding as the two protocols define it: RFC 3986 "unreserved" characters
//! (`A-Z a-z 0-9 - _ . ~`) stay, every other byte is written `%XX` in upper case.
//!
//! SigV4 canonical requests, S3's `encoding-type=url` listings and the paths this crate's
//! origin client sends all use these two sets, so they agree byte for byte.

use std::borrow::Cow;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Everything but the unreserved characters is encoded (query keys and values).
pub const STRICT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Like [`STRICT`] but `/` stays, for object keys in paths.
pub const PATH: &AsciiSet = &STRICT.remove(b'/');

/// Encodes a query key or value.
pub fn encode_strict(s: &str) -> String {
    utf8_percent_encode(s, STRICT).to_string()
}

/// Encodes a path or object key, keeping `/`.
pub fn encode_path(s: &str) -> String {
    utf8_percent_encode(s, PATH).to_string()
}

/// Decodes `%XX` sequences (and nothing else; `+` stays `+`). Invalid UTF-8 after
/// decoding is replaced, which never matches a stored key, so it fails safely.
pub fn decode(s: &str) -> Cow<'_, str> {
    percent_decode_str(s).decode_utf8_lossy()
}

/// Decodes a query component the way HTML forms and SigV4 signers do: `+` is a space.
pub fn decode_query_component(s: &str) -> String {
    if s.contains('+') {
        decode(&s.replace('+', " ")).into_owned()
    } else {
        decode(s).into_owned()
    }
}

/// Splits a raw query string into decoded `(key, value)` pairs, in order. Empty pieces
/// (`a=1&&b=2`) are skipped; a key without `=` has an empty value.
pub fn parse_query(raw: &str) -> Vec<(String, String)> {
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode_query_component(k), decode_query_component(v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_and_path_sets() {
        assert_eq!(encode_strict("a b+c/d~e"), "a%20b%2Bc%2Fd~e");
        assert_eq!(encode_path("dir/ä x+y"), "dir/%C3%A4%20x%2By");
        assert_eq!(decode("a%20b+c"), "a b+c");
    }

    #[test]
    fn query_parsing() {
        assert_eq!(
            parse_query("list-type=2&prefix=a%2Fb&&delimiter&x=a+b"),
            vec![
                ("list-type".into(), "2".into()),
                ("prefix".into(), "a/b".into()),
                ("delimiter".into(), "".into()),
                ("x".into(), "a b".into()),
            ]
        );
    }
}
