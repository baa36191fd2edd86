//! Azure Shared Key authentication (`Authorization: SharedKey account:signature`), both
//! ways: the string to sign, verification of incoming requests, signing of outgoing ones.
//!
//! The string to sign is the verb, eleven standard headers (with `Content-Length` empty
//! when zero), the canonicalised `x-ms-*` headers, and the canonicalised resource:
//! `/<account><encoded path>` followed by each query parameter as `\nname:value`. On the
//! emulator's path-style URLs the path itself starts with the account, so the account
//! appears twice; that is what the SDKs sign and what the service expects.

use std::cmp::Ordering;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use http::HeaderMap;
use sha2::Sha256;

use crate::error::{Error, ErrorKind, Result};
use crate::s3::sigv4::constant_time_eq;
use crate::uri_encoding::parse_query;

/// The standard headers of the string to sign, in order.
const SIGNED_STANDARD_HEADERS: [&str; 11] = [
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
];

/// The well-known key of the Azure emulators' account (`devstoreaccount1`): public,
/// for local use only.
pub const EMULATOR_ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// An account key, decoded from base64.
#[derive(Clone)]
pub struct AccountKey(Vec<u8>);

impl std::fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AccountKey(..)")
    }
}

impl AccountKey {
    /// Decodes a base64 account key.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] when it is not base64.
    pub fn from_base64(key: &str) -> Result<AccountKey> {
        BASE64.decode(key.trim()).map(AccountKey).map_err(|_| {
            Error::new(
                ErrorKind::InvalidArgument,
                "the account key is not valid base64",
            )
        })
    }

    /// HMAC-SHA256 of `text` with this key, base64: the signature of Shared Key and SAS.
    pub fn sign(&self, text: &str) -> String {
        // HMAC accepts keys of any length.
        let mut mac = match <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0) {
            Ok(mac) => mac,
            Err(_) => return String::new(),
        };
        mac.update(text.as_bytes());
        BASE64.encode(mac.finalize().into_bytes())
    }
}

/// The parts of a request Shared Key covers.
#[derive(Debug, Clone, Copy)]
pub struct SharedKeyParts<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// The path exactly as sent (percent-encoded).
    pub raw_path: &'a str,
    /// The raw query string, without `?`.
    pub raw_query: &'a str,
    /// The headers.
    pub headers: &'a HeaderMap,
}

/// Builds the Shared Key string to sign for `account`.
pub fn string_to_sign(parts: &SharedKeyParts<'_>, account: &str) -> String {
    let mut out = String::with_capacity(256);
    out.push_str(parts.method);
    out.push('\n');
    for name in SIGNED_STANDARD_HEADERS {
        let value = parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let value = if name == "content-length" && value == "0" {
            ""
        } else {
            value
        };
        // When x-ms-date is present the Date slot stays empty.
        let value = if name == "date" && parts.headers.contains_key("x-ms-date") {
            ""
        } else {
            value
        };
        out.push_str(value);
        out.push('\n');
    }
    let mut ms: Vec<(String, String)> = parts
        .headers
        .iter()
        .filter(|(n, _)| n.as_str().starts_with("x-ms-"))
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).trim().to_owned(),
            )
        })
        .collect();
    ms.sort_by(|a, b| compare_header_names(&a.0, &b.0));
    for (name, value) in ms {
        out.push_str(&name);
        out.push(':');
        out.push_str(&value);
        out.push('\n');
    }
    out.push('/');
    out.push_str(account);
    out.push_str(if parts.raw_path.is_empty() {
        "/"
    } else {
        parts.raw_path
    });
    let mut query: Vec<(String, Vec<String>)> = Vec::new();
    for (k, v) in parse_query(parts.raw_query) {
        let k = k.to_ascii_lowercase();
        match query.iter_mut().find(|(name, _)| *name == k) {
            Some((_, values)) => values.push(v),
            None => query.push((k, vec![v])),
        }
    }
    query.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, mut values) in query {
        values.sort();
        out.push('\n');
        out.push_str(&name);
        out.push(':');
        out.push_str(&values.join(","));
    }
    out
}

/// Orders `x-ms-*` header names the way the service does (and the SDKs emulate): a
/// two-level collation. The first level compares letters case-insensitively, digits and
/// some punctuation by weight, and ignores hyphens and apostrophes; only on a tie does the
/// second level look at where the hyphens are (a later first hyphen sorts first).
pub fn compare_header_names(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    // Level 1: weights, skipping zero-weight characters.
    let (mut i, mut j) = (0, 0);
    loop {
        let w1 = a.get(i).map_or(END, |&c| primary_weight(c));
        let w2 = b.get(j).map_or(END, |&c| primary_weight(c));
        if w1 == END && w2 == END {
            break;
        }
        if w1 == w2 {
            i += 1;
            j += 1;
        } else if w1 == 0 {
            i += 1;
        } else if w2 == 0 {
            j += 1;
        } else {
            return w1.cmp(&w2);
        }
    }
    // Level 2: only hyphens and apostrophes weigh; the first divergence in position
    // decides.
    let (mut i, mut j) = (0, 0);
    loop {
        if i != j {
            return j.cmp(&i);
        }
        let w1 = a.get(i).map_or(END, |&c| secondary_weight(c));
        let w2 = b.get(j).map_or(END, |&c| secondary_weight(c));
        if w1 == END && w2 == END {
            return Ordering::Equal;
        }
        if w1 == w2 {
            i += 1;
            j += 1;
        } else if w1 == 0 {
            i += 1;
        } else if w2 == 0 {
            j += 1;
        } else {
            return w1.cmp(&w2);
        }
    }
}

/// Weight of an exhausted string in [`compare_header_names`].
const END: u16 = 1;

/// First-level collation weight of an ASCII character (0: ignored at this level).
fn primary_weight(c: u8) -> u16 {
    const DIGITS: [u16; 10] = [
        0xd03, 0xd1a, 0xd1c, 0xd1e, 0xd20, 0xd22, 0xd24, 0xd26, 0xd28, 0xd2a,
    ];
    const LETTERS: [u16; 26] = [
        0xe02, 0xe09, 0xe0a, 0xe1a, 0xe21, 0xe23, 0xe25, 0xe2c, 0xe32, 0xe35, 0xe36, 0xe48, 0xe51,
        0xe70, 0xe7c, 0xe7e, 0xe89, 0xe8a, 0xe91, 0xe99, 0xe9f, 0xea2, 0xea4, 0xea6, 0xea7, 0xea9,
    ];
    match c {
        b'0'..=b'9' => DIGITS[usize::from(c - b'0')],
        b'a'..=b'z' => LETTERS[usize::from(c - b'a')],
        b'A'..=b'Z' => LETTERS[usize::from(c - b'A')],
        b'!' => 0x71c,
        b'#' => 0x71f,
        b'$' => 0x721,
        b'%' => 0x723,
        b'&' => 0x725,
        b'*' => 0x72d,
        b'+' => 0x803,
        b'.' => 0x733,
        b'^' => 0x743,
        b'_' => 0x744,
        b'`' => 0x748,
        b'|' => 0x74c,
        b'~' => 0x750,
        _ => 0,
    }
}

/// Second-level collation weight: only apostrophes and hyphens count.
fn secondary_weight(c: u8) -> u16 {
    match c {
        b'\'' => 0x8012,
        b'-' => 0x8212,
        _ => 0,
    }
}

/// Reads `Authorization: SharedKey account:signature`. `Ok(None)` when there is no
/// Authorization header.
///
/// # Errors
/// [`ErrorKind::MalformedAuthorization`] for a malformed header;
/// [`ErrorKind::NotImplemented`] for other schemes (SharedKeyLite, Bearer).
pub fn parse_authorization(headers: &HeaderMap) -> Result<Option<(String, String)>> {
    let Some(value) = headers.get(http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value.to_str().map_err(|_| {
        Error::new(
            ErrorKind::MalformedAuthorization,
            "Authorization header is not ASCII",
        )
    })?;
    let Some(rest) = value.strip_prefix("SharedKey ") else {
        let scheme = value.split_whitespace().next().unwrap_or("");
        return Err(Error::new(
            ErrorKind::NotImplemented,
            format!("authorization scheme '{scheme}' is not supported"),
        ));
    };
    let (account, signature) = rest.trim().split_once(':').ok_or_else(|| {
        Error::new(
            ErrorKind::MalformedAuthorization,
            "SharedKey must be 'account:signature'",
        )
    })?;
    Ok(Some((account.to_owned(), signature.to_owned())))
}

/// How far a Shared Key request's date may be from this server's clock, as Azure allows.
pub const MAX_DATE_SKEW: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Verifies a Shared Key signature and the request's freshness: `x-ms-date` (or, without
/// it, `Date`) must be present and within [`MAX_DATE_SKEW`] of `now`, so a captured
/// request cannot be replayed later (SEC-08 of the security review).
///
/// # Errors
/// [`ErrorKind::InvalidAccessKeyId`] for another account,
/// [`ErrorKind::SignatureDoesNotMatch`] for a wrong signature or a missing, unreadable
/// or stale date.
pub fn verify(
    parts: &SharedKeyParts<'_>,
    account: &str,
    key: &AccountKey,
    claimed_account: &str,
    signature: &str,
    now: std::time::SystemTime,
) -> Result<()> {
    if claimed_account != account {
        return Err(Error::new(
            ErrorKind::InvalidAccessKeyId,
            format!("unknown account '{claimed_account}'"),
        ));
    }
    let date = ["x-ms-date", "date"]
        .iter()
        .find_map(|name| parts.headers.get(*name))
        .and_then(|v| v.to_str().ok())
        .and_then(crate::dates::parse_http_date)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::SignatureDoesNotMatch,
                "Request date header not specified or not valid: x-ms-date or Date is required.",
            )
        })?;
    let skew = now
        .duration_since(date)
        .or_else(|_| date.duration_since(now))
        .unwrap_or_default();
    if skew > MAX_DATE_SKEW {
        return Err(Error::new(
            ErrorKind::SignatureDoesNotMatch,
            "Request date header too old or too far in the future: it must be within 15 minutes of the server's time.",
        ));
    }
    let sts = string_to_sign(parts, account);
    let expected = key.sign(&sts);
    if constant_time_eq(expected.as_bytes(), signature.as_bytes()) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::SignatureDoesNotMatch,
            format!(
                "The MAC signature found in the HTTP request is not the same as any computed signature. Server used following string to sign: '{}'.",
                sts.escape_debug()
            ),
        ))
    }
}

/// The `Authorization` header value for an outgoing request.
pub fn authorization(parts: &SharedKeyParts<'_>, account: &str, key: &AccountKey) -> String {
    format!(
        "SharedKey {account}:{}",
        key.sign(&string_to_sign(parts, account))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).expect("n"),
                v.parse().expect("v"),
            );
        }
        h
    }

    #[test]
    fn string_to_sign_layout_on_the_emulator_path() {
        let h = headers(&[
            ("x-ms-version", "2025-01-05"),
            ("x-ms-date", "Mon, 01 Jan 2024 00:00:00 GMT"),
            ("x-ms-range", "bytes=0-9"),
            ("content-length", "0"),
        ]);
        let parts = SharedKeyParts {
            method: "GET",
            raw_path: "/devstoreaccount1/c/a%20b",
            raw_query: "comp=list&restype=container&prefix=x%2Fy",
            headers: &h,
        };
        let sts = string_to_sign(&parts, "devstoreaccount1");
        assert_eq!(
            sts,
            "GET\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:Mon, 01 Jan 2024 00:00:00 GMT\nx-ms-range:bytes=0-9\nx-ms-version:2025-01-05\n/devstoreaccount1/devstoreaccount1/c/a%20b\ncomp:list\nprefix:x/y\nrestype:container"
        );
    }

    #[test]
    fn sign_then_verify_and_tamper() {
        let key = AccountKey::from_base64(KEY).expect("key");
        let h = headers(&[
            ("x-ms-version", "2025-01-05"),
            ("x-ms-date", "Mon, 01 Jan 2024 00:00:00 GMT"),
        ]);
        let parts = SharedKeyParts {
            method: "GET",
            raw_path: "/acct/c/b",
            raw_query: "",
            headers: &h,
        };
        let auth = authorization(&parts, "acct", &key);
        let mut signed = h.clone();
        signed.insert(http::header::AUTHORIZATION, auth.parse().expect("v"));
        let (account, sig) = parse_authorization(&signed)
            .expect("parse")
            .expect("present");
        let signed_at =
            crate::dates::parse_http_date("Mon, 01 Jan 2024 00:00:00 GMT").expect("date");
        let now = signed_at + std::time::Duration::from_secs(60);
        verify(&parts, "acct", &key, &account, &sig, now).expect("verifies");
        let other = SharedKeyParts {
            raw_path: "/acct/c/other",
            ..parts
        };
        assert_eq!(
            verify(&other, "acct", &key, &account, &sig, now).map_err(|e| e.kind()),
            Err(ErrorKind::SignatureDoesNotMatch)
        );
        assert_eq!(
            verify(&parts, "acct2", &key, &account, &sig, now).map_err(|e| e.kind()),
            Err(ErrorKind::InvalidAccessKeyId)
        );
    }

    /// SEC-08: a correctly signed request is refused once its date is more than 15
    /// minutes away, and one without any date is refused too.
    #[test]
    fn stale_and_undated_requests_are_refused() {
        let key = AccountKey::from_base64(KEY).expect("key");
        let date = "Mon, 01 Jan 2001 00:00:00 GMT";
        let signed_at = crate::dates::parse_http_date(date).expect("date");
        for (h, now) in [
            (
                headers(&[("x-ms-version", "2021-08-06"), ("x-ms-date", date)]),
                signed_at + MAX_DATE_SKEW + std::time::Duration::from_secs(1),
            ),
            (
                headers(&[("x-ms-version", "2021-08-06"), ("x-ms-date", date)]),
                signed_at - MAX_DATE_SKEW - std::time::Duration::from_secs(1),
            ),
            (headers(&[("x-ms-version", "2021-08-06")]), signed_at),
            (
                headers(&[("x-ms-version", "2021-08-06"), ("x-ms-date", "yesterday")]),
                signed_at,
            ),
        ] {
            let parts = SharedKeyParts {
                method: "GET",
                raw_path: "/acct/c/b",
                raw_query: "",
                headers: &h,
            };
            let sig = key.sign(&string_to_sign(&parts, "acct"));
            assert_eq!(
                verify(&parts, "acct", &key, "acct", &sig, now).map_err(|e| e.kind()),
                Err(ErrorKind::SignatureDoesNotMatch),
                "{h:?}"
            );
        }
        // The Date header serves when x-ms-date is absent.
        let h = headers(&[("x-ms-version", "2021-08-06"), ("date", date)]);
        let parts = SharedKeyParts {
            method: "GET",
            raw_path: "/acct/c/b",
            raw_query: "",
            headers: &h,
        };
        let sig = key.sign(&string_to_sign(&parts, "acct"));
        verify(&parts, "acct", &key, "acct", &sig, signed_at).expect("Date serves");
    }

    #[test]
    fn header_order_ignores_hyphens_first() {
        let mut names = vec![
            "x-ms-meta-a-z",
            "x-ms-meta-ab",
            "x-ms-version",
            "x-ms-date",
            "x-ms-blob-type",
        ];
        names.sort_by(|a, b| compare_header_names(a, b));
        assert_eq!(
            names,
            [
                "x-ms-blob-type",
                "x-ms-date",
                "x-ms-meta-ab",
                "x-ms-meta-a-z",
                "x-ms-version"
            ]
        );
    }
}
