//! Which bucket, container, account and object names a Talon process accepts, once.
//!
//! A name arrives percent-decoded from a client's path or host and ends up as a segment
//! of an origin URL and a key of the cache. Anything outside these rules is refused at
//! the front, before authentication or any other work (SEC-03 of the security review:
//! a bucket `victim?policy`, sent as `%3F`, reached the origin as a query string). The
//! origin client checks them again before it builds a URL, so no path that skips the
//! fronts can smuggle a name through either.
//!
//! - S3 buckets that already exist are addressed by the legacy rules S3 still serves:
//!   3–255 of `A-Z a-z 0-9 . _ -`, not starting with `.`. A new bucket must follow the
//!   DNS-compatible rules ([`validate_bucket_name`]).
//! - Azure containers: 3–63 of lower-case letters, digits and single hyphens, or one of
//!   the service's `$root`, `$logs`, `$web`.
//! - Azure accounts: 3–24 lower-case letters and digits.
//! - Object keys and blob names: 1–1024 bytes, no NUL, no `.` or `..` path segment.

use crate::error::{Error, ErrorKind, Result};

/// Longest object key or blob name, in bytes (S3's limit; Azure's is 1024 characters).
pub const MAX_KEY_BYTES: usize = 1024;

fn invalid_bucket(name: &str) -> Error {
    Error::new(
        ErrorKind::InvalidBucketName,
        format!("The specified bucket is not valid: '{}'.", printable(name)),
    )
}

/// A name as it may appear in a message: control characters escaped, at most 80 chars.
fn printable(name: &str) -> String {
    let mut out: String = name.chars().take(80).flat_map(char::escape_debug).collect();
    if name.chars().count() > 80 {
        out.push('…');
    }
    out
}

/// Checks the name of an S3 bucket that is being addressed (not created): the legacy
/// rules, which every bucket S3 serves satisfies.
///
/// # Errors
/// [`ErrorKind::InvalidBucketName`].
pub fn check_s3_bucket(name: &str) -> Result<()> {
    let ok = (3..=255).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(invalid_bucket(name))
    }
}

/// Checks the name of a new S3 bucket against the DNS-compatible rules (3–63 characters,
/// lower-case letters, digits, `-` and `.`, starting and ending with a letter or digit,
/// no `..`, `.-` or `-.`, not written as an IPv4 address). These are also the names a
/// virtual-hosted origin URL can carry.
///
/// # Errors
/// [`ErrorKind::InvalidBucketName`].
pub fn validate_bucket_name(name: &str) -> Result<()> {
    let ok = (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && !name.contains("..")
        && !name.contains(".-")
        && !name.contains("-.")
        && name.parse::<std::net::Ipv4Addr>().is_err();
    if ok {
        Ok(())
    } else {
        Err(invalid_bucket(name))
    }
}

/// Checks a container name: 3–63 characters of lower-case letters, digits and single
/// hyphens, starting and ending with a letter or digit, or one of the special
/// containers `$root`, `$logs` and `$web`.
///
/// # Errors
/// [`ErrorKind::InvalidBucketName`] (Azure: `InvalidResourceName`).
pub fn validate_container_name(name: &str) -> Result<()> {
    let ok = matches!(name, "$root" | "$logs" | "$web")
        || ((3..=63).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && name
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphanumeric())
            && name
                .bytes()
                .last()
                .is_some_and(|b| b.is_ascii_alphanumeric())
            && !name.contains("--"));
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::InvalidBucketName,
            format!(
                "The specifed resource name contains invalid characters: '{}'.",
                printable(name)
            ),
        ))
    }
}

/// Checks a storage account name: 3–24 lower-case letters and digits.
///
/// # Errors
/// [`ErrorKind::InvalidBucketName`] (Azure: `InvalidResourceName`).
pub fn validate_account_name(name: &str) -> Result<()> {
    let ok = (3..=24).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::InvalidBucketName,
            format!(
                "The specifed account name is not valid: '{}'.",
                printable(name)
            ),
        ))
    }
}

/// Checks an object key or blob name: 1–[`MAX_KEY_BYTES`] bytes, no NUL, and no `.` or
/// `..` segment, which URL normalisation would resolve into another object's path.
///
/// # Errors
/// [`ErrorKind::InvalidObjectName`].
pub fn check_object_key(key: &str) -> Result<()> {
    let why = if key.is_empty() {
        "it is empty"
    } else if key.len() > MAX_KEY_BYTES {
        "it is longer than 1024 bytes"
    } else if key.contains('\0') {
        "it contains NUL"
    } else if key.split('/').any(|s| s == "." || s == "..") {
        "it has a '.' or '..' segment"
    } else {
        return Ok(());
    };
    Err(Error::new(
        ErrorKind::InvalidObjectName,
        format!("The key '{}' cannot be stored: {why}.", printable(key)),
    ))
}

/// Checks an Azure block id: base64 of 1 to 64 bytes, as Azure requires; gives the bytes.
///
/// # Errors
/// [`ErrorKind::InvalidHeaderValue`] (Azure's `InvalidQueryParameterValue` family).
pub fn check_block_id(id: &str) -> Result<Vec<u8>> {
    use base64::Engine as _;
    match base64::engine::general_purpose::STANDARD.decode(id) {
        Ok(b) if !b.is_empty() && b.len() <= 64 => Ok(b),
        _ => Err(Error::new(
            ErrorKind::InvalidHeaderValue,
            "The value for one of the HTTP headers is not in the correct format: blockid",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names an attacker tries, as the front sees them after percent-decoding.
    const HOSTILE: &[&str] = &[
        "newbkt?x",
        "victim?policy",
        "victim#frag",
        "a/b",
        "..",
        ".",
        "...",
        ".hidden",
        "user@evil.example",
        "evil.example:81",
        "back\\slash",
        "ctl\u{1}char",
        "new\nline",
        "sp ace",
        "nul\0x",
        "%2e%2e",
        "ab",
        "",
    ];

    #[test]
    fn hostile_bucket_names_are_refused_by_every_rule() {
        for name in HOSTILE {
            assert!(check_s3_bucket(name).is_err(), "legacy accepted {name:?}");
            assert!(validate_bucket_name(name).is_err(), "dns accepted {name:?}");
            assert!(
                validate_container_name(name).is_err(),
                "azure accepted {name:?}"
            );
            assert!(
                validate_account_name(name).is_err(),
                "account accepted {name:?}"
            );
        }
        // S3's rules for new buckets, beyond the characters.
        for name in ["192.168.5.123", "foo.-bar", "foo-.bar"] {
            assert!(validate_bucket_name(name).is_err(), "dns accepted {name:?}");
        }
        for name in ["192.168.5.a", "1.2.3", "foo.bar-baz"] {
            assert!(validate_bucket_name(name).is_ok(), "dns refused {name:?}");
        }
        let long = "a".repeat(256);
        assert!(check_s3_bucket(&long).is_err());
        assert!(check_s3_bucket(&long[..255]).is_ok());
    }

    #[test]
    fn legacy_bucket_names_s3_still_serves_are_addressable() {
        for name in ["My_Legacy.Bucket", "UPPER", "a_b", "dots..inside", "demo"] {
            assert!(check_s3_bucket(name).is_ok(), "{name}");
        }
        for name in ["My_Legacy.Bucket", "UPPER", "a_b", "dots..inside"] {
            assert!(
                validate_bucket_name(name).is_err(),
                "{name} is not DNS-safe"
            );
        }
        assert!(validate_bucket_name("my-bucket.1").is_ok());
    }

    #[test]
    fn containers_and_accounts() {
        for ok in ["my-container1", "$root", "$logs", "$web", "abc"] {
            assert!(validate_container_name(ok).is_ok(), "{ok}");
        }
        for bad in ["a--b", "-ab", "ab-", "Upper", "$other", "a.b"] {
            assert!(validate_container_name(bad).is_err(), "{bad}");
        }
        assert!(validate_account_name("devstoreaccount1").is_ok());
        assert!(validate_account_name("Dev").is_err());
        assert!(validate_account_name(&"a".repeat(25)).is_err());
    }

    #[test]
    fn object_keys() {
        for ok in ["a", "dir/a b+c?d#e", "a//b", "...", "x/.../y", "ü"] {
            assert!(check_object_key(ok).is_ok(), "{ok}");
        }
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        for bad in [
            "",
            ".",
            "..",
            "a/../b",
            "a/./b",
            "a/..",
            "nul\0",
            long.as_str(),
        ] {
            assert_eq!(
                check_object_key(bad).map_err(|e| e.kind()),
                Err(ErrorKind::InvalidObjectName),
                "{bad:?}"
            );
        }
    }
}
