//! Conditional requests: `If-Match`, `If-None-Match`, `If-Modified-Since` and
//! `If-Unmodified-Since`, evaluated with the precedence S3 documents (which is RFC 9110's):
//!
//! 1. `If-Match` decides alone when present (fail: 412); only without it does
//!    `If-Unmodified-Since` count (fail: 412).
//! 2. `If-None-Match` decides alone when present (match on a read: 304, on a write: 412);
//!    only without it does `If-Modified-Since` count, and only for reads (fail: 304).
//!
//! Azure Blob applies the same rules to reads.

use std::time::SystemTime;

use http::HeaderMap;

use crate::dates::{parse_http_date, truncate_to_seconds};
use crate::error::ErrorKind;

/// The conditional headers of one request, parsed once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conditions {
    /// `If-Match`: entity tags, or `*`.
    pub if_match: Option<EtagList>,
    /// `If-None-Match`: entity tags, or `*`.
    pub if_none_match: Option<EtagList>,
    /// `If-Modified-Since`, when it is a valid HTTP date.
    pub if_modified_since: Option<SystemTime>,
    /// `If-Unmodified-Since`, when it is a valid HTTP date.
    pub if_unmodified_since: Option<SystemTime>,
}

/// A delete's conditions on the object it removes: S3's `If-Match` (an entity tag or
/// `*`), `x-amz-if-match-last-modified-time` and `x-amz-if-match-size` (or a
/// DeleteObjects entry's `ETag`, `LastModifiedTime` and `Size`); Azure's `If-Match`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteConditions {
    /// The entity tags the object must have, or `*`.
    pub if_match: Option<EtagList>,
    /// The modification time it must have (compared to the second).
    pub last_modified: Option<SystemTime>,
    /// The size it must have, in bytes.
    pub size: Option<u64>,
}

impl DeleteConditions {
    /// True when none is present.
    pub fn is_empty(&self) -> bool {
        *self == DeleteConditions::default()
    }

    /// Evaluates the conditions against the object stored now (entity tag, modification
    /// time, size), if any. Nothing stored passes: S3 answers such a delete 204 whatever
    /// it asked.
    ///
    /// # Errors
    /// [`ErrorKind::PreconditionFailed`] when a condition fails.
    pub fn check(&self, current: Option<(&str, SystemTime, u64)>) -> Result<(), ErrorKind> {
        let Some((etag, last_modified, size)) = current else {
            return Ok(());
        };
        let fails = self.if_match.as_ref().is_some_and(|l| !l.matches(etag))
            || self
                .last_modified
                .is_some_and(|t| truncate_to_seconds(t) != truncate_to_seconds(last_modified))
            || self.size.is_some_and(|s| s != size);
        if fails {
            Err(ErrorKind::PreconditionFailed)
        } else {
            Ok(())
        }
    }
}

/// The kind an Azure write answers with for `kind`: a write with `If-Match` over a
/// missing object is S3's 404 `NoSuchKey` (what [`Conditions::check_write`] gives) but
/// Azure's 412 `ConditionNotMet`.
pub fn missing_for_if_match(kind: ErrorKind, has_if_match: bool) -> ErrorKind {
    match kind {
        ErrorKind::NoSuchKey if has_if_match => ErrorKind::PreconditionFailed,
        other => other,
    }
}

/// A list of entity tags from a conditional header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtagList {
    /// `*`: matches any existing representation.
    Any,
    /// Specific tags, stored without quotes and without a `W/` prefix.
    Tags(Vec<String>),
}

impl EtagList {
    /// Parses `"a", W/"b", c` or `*`.
    pub fn parse(value: &str) -> EtagList {
        if value.trim() == "*" {
            return EtagList::Any;
        }
        EtagList::Tags(
            value
                .split(',')
                .map(normalize_etag)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }

    /// The list as a conditional header carries it: `*`, or the tags quoted and
    /// comma-separated.
    pub fn header_value(&self) -> String {
        match self {
            EtagList::Any => "*".to_owned(),
            EtagList::Tags(tags) => tags
                .iter()
                .map(|t| quote_etag(t))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// Whether the list matches an object's entity tag (strong comparison of the tag text).
    pub fn matches(&self, etag: &str) -> bool {
        match self {
            EtagList::Any => true,
            EtagList::Tags(tags) => {
                let etag = normalize_etag(etag);
                tags.iter().any(|t| t == etag)
            }
        }
    }
}

/// Strips whitespace, a weak `W/` prefix and surrounding quotes from an entity tag:
/// the canonical form of `talon_core::canonical_etag`, which versions are made of.
pub fn normalize_etag(tag: &str) -> &str {
    talon_core::canonical_etag(tag)
}

/// Wraps an entity tag in double quotes unless it already is.
pub fn quote_etag(tag: &str) -> String {
    if tag.len() >= 2 && tag.starts_with('"') && tag.ends_with('"') {
        tag.to_owned()
    } else {
        format!("\"{tag}\"")
    }
}

/// Whether two entity tags name the same version: compared without quotes and without
/// a weak `W/` prefix (origins and proxies differ in how they write them).
pub fn same_version(a: &str, b: &str) -> bool {
    let bare = |t: &str| {
        let t = t.trim();
        let t = t.strip_prefix("W/").unwrap_or(t);
        t.strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
            .unwrap_or(t)
            .to_owned()
    };
    bare(a) == bare(b)
}

impl Conditions {
    /// Reads the four headers. Dates that do not parse are ignored, as HTTP requires.
    pub fn from_headers(headers: &HeaderMap) -> Conditions {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        Conditions {
            if_match: text("if-match").map(EtagList::parse),
            if_none_match: text("if-none-match").map(EtagList::parse),
            if_modified_since: text("if-modified-since").and_then(parse_http_date),
            if_unmodified_since: text("if-unmodified-since").and_then(parse_http_date),
        }
    }

    /// True when no condition is present.
    pub fn is_empty(&self) -> bool {
        *self == Conditions::default()
    }

    /// Evaluates the conditions for a GET or HEAD of an existing object.
    ///
    /// # Errors
    /// [`ErrorKind::PreconditionFailed`] (412) or [`ErrorKind::NotModified`] (304).
    pub fn check_read(&self, etag: &str, last_modified: SystemTime) -> Result<(), ErrorKind> {
        self.check_preconditions(etag, last_modified)?;
        let last_modified = truncate_to_seconds(last_modified);
        match &self.if_none_match {
            Some(list) if list.matches(etag) => return Err(ErrorKind::NotModified),
            Some(_) => {}
            None => {
                if let Some(since) = self.if_modified_since
                    && last_modified <= since
                {
                    return Err(ErrorKind::NotModified);
                }
            }
        }
        Ok(())
    }

    /// Evaluates the conditions for a write over the object currently stored, if any
    /// (`current` is its entity tag and modification time).
    ///
    /// # Errors
    /// [`ErrorKind::PreconditionFailed`] when a condition fails; on a missing object an
    /// `If-Match` fails with [`ErrorKind::NoSuchKey`], as S3 answers (there is nothing
    /// to match; the Azure front answers Azure's 412, [`missing_for_if_match`]).
    pub fn check_write(&self, current: Option<(&str, SystemTime)>) -> Result<(), ErrorKind> {
        match current {
            Some((etag, last_modified)) => {
                self.check_preconditions(etag, last_modified)?;
                if self.if_none_match.as_ref().is_some_and(|l| l.matches(etag)) {
                    return Err(ErrorKind::PreconditionFailed);
                }
                Ok(())
            }
            None if self.if_match.is_some() => Err(ErrorKind::NoSuchKey),
            None => Ok(()),
        }
    }

    fn check_preconditions(&self, etag: &str, last_modified: SystemTime) -> Result<(), ErrorKind> {
        match &self.if_match {
            Some(list) if !list.matches(etag) => Err(ErrorKind::PreconditionFailed),
            Some(_) => Ok(()),
            None => match self.if_unmodified_since {
                Some(since) if truncate_to_seconds(last_modified) > since => {
                    Err(ErrorKind::PreconditionFailed)
                }
                _ => Ok(()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_without_quotes_or_weakness() {
        assert!(same_version("\"abc\"", "abc"));
        assert!(same_version("W/\"abc\"", "\"abc\""));
        assert!(!same_version("\"abc\"", "\"abd\""));
        assert!(!same_version("", "\"abc\""));
    }
    use std::time::{Duration, UNIX_EPOCH};

    const ETAG: &str = "\"abc\"";

    fn t(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn conds(pairs: &[(&'static str, &str)]) -> Conditions {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("test header"));
        }
        Conditions::from_headers(&h)
    }

    const EARLY: &str = "Thu, 01 Jan 1970 00:00:10 GMT";
    const LATE: &str = "Thu, 01 Jan 1970 00:16:40 GMT";

    #[test]
    fn etag_lists_compare_without_quotes_or_weakness() {
        assert!(EtagList::parse("\"abc\"").matches("abc"));
        assert!(EtagList::parse("W/\"abc\"").matches(ETAG));
        assert!(EtagList::parse("x, \"abc\"").matches(ETAG));
        assert!(EtagList::parse("*").matches("anything"));
        assert!(!EtagList::parse("\"abd\"").matches(ETAG));
        assert_eq!(quote_etag("abc"), ETAG);
        assert_eq!(quote_etag(ETAG), ETAG);
    }

    #[test]
    fn s3_precedence_if_match_beats_if_unmodified_since() {
        // If-Match true and If-Unmodified-Since false: S3 answers 200.
        let c = conds(&[("if-match", ETAG), ("if-unmodified-since", EARLY)]);
        assert_eq!(c.check_read(ETAG, t(500)), Ok(()));
        let c = conds(&[("if-unmodified-since", EARLY)]);
        assert_eq!(
            c.check_read(ETAG, t(500)),
            Err(ErrorKind::PreconditionFailed)
        );
        let c = conds(&[("if-match", "\"other\"")]);
        assert_eq!(
            c.check_read(ETAG, t(500)),
            Err(ErrorKind::PreconditionFailed)
        );
    }

    #[test]
    fn s3_precedence_if_none_match_beats_if_modified_since() {
        // If-None-Match false and If-Modified-Since true: S3 answers 304.
        let c = conds(&[("if-none-match", ETAG), ("if-modified-since", EARLY)]);
        assert_eq!(c.check_read(ETAG, t(500)), Err(ErrorKind::NotModified));
        // If-None-Match true: If-Modified-Since is not consulted.
        let c = conds(&[("if-none-match", "\"other\""), ("if-modified-since", LATE)]);
        assert_eq!(c.check_read(ETAG, t(500)), Ok(()));
        let c = conds(&[("if-modified-since", LATE)]);
        assert_eq!(c.check_read(ETAG, t(500)), Err(ErrorKind::NotModified));
        let c = conds(&[("if-modified-since", EARLY)]);
        assert_eq!(c.check_read(ETAG, t(500)), Ok(()));
    }

    #[test]
    fn same_second_is_not_modified() {
        let c = conds(&[("if-modified-since", EARLY)]);
        assert_eq!(
            c.check_read(ETAG, t(10) + Duration::from_millis(700)),
            Err(ErrorKind::NotModified)
        );
    }

    #[test]
    fn invalid_dates_are_ignored() {
        let c = conds(&[("if-modified-since", "not a date")]);
        assert!(c.is_empty());
    }

    #[test]
    fn deletes_are_conditional_on_what_is_stored() {
        let none = DeleteConditions::default();
        assert!(none.is_empty() && none.check(Some((ETAG, t(1), 5))).is_ok());
        let c = DeleteConditions {
            if_match: Some(EtagList::parse("\"other\"")),
            ..DeleteConditions::default()
        };
        assert_eq!(
            c.check(Some((ETAG, t(1), 5))),
            Err(ErrorKind::PreconditionFailed)
        );
        assert_eq!(c.check(None), Ok(()), "nothing stored: S3 answers 204");
        let any = DeleteConditions {
            if_match: Some(EtagList::Any),
            size: Some(5),
            last_modified: Some(t(1)),
        };
        assert_eq!(any.check(Some((ETAG, t(1), 5))), Ok(()));
        for (when, size) in [(t(2), 5), (t(1), 6)] {
            assert_eq!(
                any.check(Some((ETAG, when, size))),
                Err(ErrorKind::PreconditionFailed)
            );
        }
    }

    #[test]
    fn writes_use_if_none_match_star_as_create_only() {
        let c = conds(&[("if-none-match", "*")]);
        assert_eq!(c.check_write(None), Ok(()));
        assert_eq!(
            c.check_write(Some((ETAG, t(1)))),
            Err(ErrorKind::PreconditionFailed)
        );
        let c = conds(&[("if-match", ETAG)]);
        assert_eq!(c.check_write(None), Err(ErrorKind::NoSuchKey));
        assert_eq!(c.check_write(Some((ETAG, t(1)))), Ok(()));
    }
}
