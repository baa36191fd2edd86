//! Byte ranges: the `Range` / `x-ms-range` header grammar and its resolution against an
//! object's size, with the rules S3 and Azure apply.
//!
//! Both protocols accept one range of the form `bytes=a-b` (inclusive) or `bytes=a-`;
//! S3 also accepts the suffix form `bytes=-n` (the last `n` bytes). A malformed value,
//! including `bytes=1-0` and multiple ranges, is ignored by S3 (the whole object is
//! served); a range starting at or past the end is answered with 416 `InvalidRange`.

use std::fmt;

/// One range as the client wrote it, before the object's size is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    /// `bytes=first-last`, both inclusive, `first <= last`.
    Bounded {
        /// First byte offset.
        first: u64,
        /// Last byte offset (inclusive).
        last: u64,
    },
    /// `bytes=first-`: from `first` to the end.
    From {
        /// First byte offset.
        first: u64,
    },
    /// `bytes=-n`: the last `n` bytes.
    Suffix {
        /// Number of bytes from the end.
        len: u64,
    },
}

/// A resolved, non-empty, half-open byte range `[start, end)` inside an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ByteRange {
    /// First byte offset.
    pub start: u64,
    /// One past the last byte offset; always `> start`.
    pub end: u64,
}

/// The range cannot be satisfied for an object of this size (HTTP 416).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsatisfiable {
    /// The object's size, for the `Content-Range: bytes */size` header.
    pub size: u64,
}

impl RangeSpec {
    /// The request header value that asks for this range as written: `bytes=a-b`,
    /// `bytes=a-` or `bytes=-n` (S3 only: Azure has no suffix ranges).
    pub fn to_header_value(self) -> String {
        match self {
            RangeSpec::Bounded { first, last } => format!("bytes={first}-{last}"),
            RangeSpec::From { first } => format!("bytes={first}-"),
            RangeSpec::Suffix { len } => format!("bytes=-{len}"),
        }
    }

    /// Parses one range header value. `None` means "malformed": S3 ignores such a header.
    ///
    /// Whitespace around the numbers is tolerated; several ranges (`a-b,c-d`) are treated
    /// as malformed because neither protocol serves multipart/byteranges.
    pub fn parse(value: &str) -> Option<RangeSpec> {
        let rest = value.trim().strip_prefix("bytes=")?;
        if rest.contains(',') {
            return None;
        }
        let (a, b) = rest.split_once('-')?;
        let (a, b) = (a.trim(), b.trim());
        match (a.is_empty(), b.is_empty()) {
            (true, true) => None,
            (true, false) => Some(RangeSpec::Suffix {
                len: parse_offset(b)?,
            }),
            (false, true) => Some(RangeSpec::From {
                first: parse_offset(a)?,
            }),
            (false, false) => {
                let (first, last) = (parse_offset(a)?, parse_offset(b)?);
                (first <= last).then_some(RangeSpec::Bounded { first, last })
            }
        }
    }

    /// Resolves against an object of `size` bytes, clamping the end to the object.
    ///
    /// # Errors
    /// [`Unsatisfiable`] when the range starts at or past the end (including any range on
    /// an empty object) or is a zero-length suffix.
    pub fn resolve(self, size: u64) -> Result<ByteRange, Unsatisfiable> {
        let unsatisfiable = Unsatisfiable { size };
        match self {
            RangeSpec::Bounded { first, last } => {
                if first >= size {
                    return Err(unsatisfiable);
                }
                Ok(ByteRange {
                    start: first,
                    end: last.saturating_add(1).min(size),
                })
            }
            RangeSpec::From { first } => {
                if first >= size {
                    return Err(unsatisfiable);
                }
                Ok(ByteRange {
                    start: first,
                    end: size,
                })
            }
            RangeSpec::Suffix { len } => {
                if len == 0 || size == 0 {
                    return Err(unsatisfiable);
                }
                Ok(ByteRange {
                    start: size.saturating_sub(len),
                    end: size,
                })
            }
        }
    }

    /// Whether this is the suffix form, which Azure does not define.
    pub fn is_suffix(self) -> bool {
        matches!(self, RangeSpec::Suffix { .. })
    }
}

impl fmt::Display for RangeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RangeSpec::Bounded { first, last } => write!(f, "bytes={first}-{last}"),
            RangeSpec::From { first } => write!(f, "bytes={first}-"),
            RangeSpec::Suffix { len } => write!(f, "bytes=-{len}"),
        }
    }
}

fn parse_offset(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl ByteRange {
    /// Number of bytes in the range (never zero).
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Always false: a resolved range holds at least one byte. Present for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// The last byte offset, inclusive, as HTTP writes it.
    pub fn last(&self) -> u64 {
        self.end - 1
    }

    /// The `Content-Range` value for a 206 answer: `bytes start-last/size`.
    pub fn content_range(&self, size: u64) -> String {
        self.content_range_text(size).to_string()
    }

    /// The same value as [`Self::content_range`], to be formatted where it is written.
    pub fn content_range_text(&self, size: u64) -> impl std::fmt::Display {
        let (start, last) = (self.start, self.last());
        std::fmt::from_fn(move |f| write!(f, "bytes {start}-{last}/{size}"))
    }

    /// The request header value that asks for exactly this range: `bytes=start-last`.
    pub fn to_header_value(&self) -> String {
        format!("bytes={}-{}", self.start, self.last())
    }

    /// Whether the range covers the whole of an object of `size` bytes.
    pub fn is_whole(&self, size: u64) -> bool {
        self.start == 0 && self.end == size
    }
}

impl Unsatisfiable {
    /// The `Content-Range` value for a 416 answer: `bytes */size`.
    pub fn content_range(&self) -> String {
        format!("bytes */{}", self.size)
    }
}

/// Whether an origin's answer carries exactly the bytes asked for, the one rule every
/// reader of an origin applies before relaying or caching a byte. `asked` is the
/// resolved range requested (`None`: the whole object), `served` the range the answer
/// announced (`None`: the whole object, as a 200), `size` the object's size where the
/// answer stated it (`Content-Range: bytes a-b/*` does not). Asked for a range, the
/// whole object counts only when the range is the whole object. A range that runs past
/// a known end asks for the bytes up to the end, as HTTP reads it.
///
/// # Errors
/// [`ErrorKind::InternalError`](crate::ErrorKind::InternalError) naming both, for any
/// other answer: an origin that ignored the range or served another one.
pub fn check_served_exactly(
    asked: Option<ByteRange>,
    served: Option<ByteRange>,
    size: Option<u64>,
) -> crate::Result<()> {
    let asked = asked.map(|a| ByteRange {
        start: a.start,
        end: size.map_or(a.end, |size| a.end.min(size)),
    });
    let whole = |r: ByteRange| size.is_some_and(|size| r.is_whole(size));
    let exact = match (asked, served) {
        (None, None) => true,
        (None, Some(got)) => whole(got),
        (Some(asked), Some(got)) => asked == got,
        (Some(asked), None) => whole(asked),
    };
    if exact {
        return Ok(());
    }
    let name = |r: Option<ByteRange>| match r {
        Some(r) => format!("bytes {}-{}", r.start, r.last()),
        None => "the whole object".to_owned(),
    };
    Err(crate::Error::new(
        crate::ErrorKind::InternalError,
        format!("the origin answered {} with {}", name(asked), name(served)),
    ))
}

/// Parses UploadPartCopy's `x-amz-copy-source-range`: exactly `bytes=first-last`, both
/// zero-based and inclusive, `first <= last` (no open or suffix forms, unlike `Range`).
///
/// # Errors
/// [`crate::ErrorKind::InvalidArgument`] for any other form.
pub fn parse_copy_source_range(value: &str) -> crate::Result<ByteRange> {
    let bad = || {
        crate::Error::new(
            crate::ErrorKind::InvalidArgument,
            "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy",
        )
    };
    let (first, last) = value
        .trim()
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .ok_or_else(bad)?;
    let digits = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().ok())
            .flatten()
    };
    match (digits(first), digits(last)) {
        (Some(first), Some(last)) if first <= last && last < u64::MAX => Ok(ByteRange {
            start: first,
            end: last + 1,
        }),
        _ => Err(bad()),
    }
}

/// Parses a `Content-Range: bytes a-b/size` answer into the range and the total size.
/// The size may be `*` (unknown), which gives `None`.
pub fn parse_content_range(value: &str) -> Option<(ByteRange, Option<u64>)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (span, size) = rest.split_once('/')?;
    let (a, b) = span.split_once('-')?;
    let (start, last) = (parse_offset(a.trim())?, parse_offset(b.trim())?);
    if last < start {
        return None;
    }
    let size = match size.trim() {
        "*" => None,
        s => Some(parse_offset(s)?),
    };
    // A range that ends past the total it states is no valid answer (found by fuzzing:
    // `bytes 0-999/306` was accepted as 1,000 bytes of a 306-byte object).
    if size.is_some_and(|total| last >= total) {
        return None;
    }
    Some((
        ByteRange {
            start,
            end: last.checked_add(1)?,
        },
        size,
    ))
}

/// The bytes an UploadPartCopy copies from a source of `size` bytes: the range it asked
/// for (`x-amz-copy-source-range`), or the whole source.
///
/// # Errors
/// [`crate::ErrorKind::InvalidRange`] when the range ends past the source's end.
pub fn copy_source_span(range: Option<ByteRange>, size: u64) -> crate::Result<ByteRange> {
    match range {
        None => Ok(ByteRange {
            start: 0,
            end: size,
        }),
        Some(r) if r.end <= size => Ok(r),
        Some(_) => Err(crate::Error::new(
            crate::ErrorKind::InvalidRange,
            format!("The specified copy range is not valid for the source object of size {size}"),
        )),
    }
}

/// Whether a 206's `Content-Range` serves nothing at the object's end (`bytes
/// N-(N-1)/N`): how Azurite answers a range that starts at or past the end, where S3
/// and Azure answer 416. Gives the object's size, to answer the 416 the client is owed.
pub fn content_range_serves_nothing_at_end(value: &str) -> Option<u64> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (span, size) = rest.split_once('/')?;
    let (a, b) = span.split_once('-')?;
    let (start, last, size) = (
        parse_offset(a.trim())?,
        parse_offset(b.trim())?,
        parse_offset(size.trim())?,
    );
    (start == size && last.checked_add(1) == Some(start)).then_some(size)
}

#[cfg(test)]
mod served_exactly_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_empty_range_at_the_end_is_told_apart() {
        assert_eq!(
            content_range_serves_nothing_at_end("bytes 1000-999/1000"),
            Some(1000)
        );
        assert_eq!(content_range_serves_nothing_at_end("bytes 0--1/0"), None);
        assert_eq!(
            content_range_serves_nothing_at_end("bytes 999-999/1000"),
            None
        );
        assert_eq!(
            content_range_serves_nothing_at_end("bytes 500-499/1000"),
            None
        );
        assert_eq!(
            content_range_serves_nothing_at_end("bytes 1000-999/*"),
            None
        );
        assert_eq!(parse_content_range("bytes 1000-999/1000"), None);
    }

    #[test]
    fn only_the_bytes_asked_for_count_as_served() {
        let r = |start, end| ByteRange { start, end };
        assert!(check_served_exactly(None, None, Some(10)).is_ok());
        assert!(check_served_exactly(Some(r(2, 5)), Some(r(2, 5)), Some(10)).is_ok());
        // A 200 with the whole object is the answer to a range that is the whole object.
        assert!(check_served_exactly(Some(r(0, 10)), None, Some(10)).is_ok());
        assert!(check_served_exactly(None, Some(r(0, 10)), Some(10)).is_ok());
        // An unknown size: the range itself, exactly.
        assert!(check_served_exactly(Some(r(2, 5)), Some(r(2, 5)), None).is_ok());
        assert!(check_served_exactly(Some(r(0, 10)), None, None).is_err());
        // Past the end: the bytes up to the end.
        assert!(check_served_exactly(Some(r(5, 20)), Some(r(5, 10)), Some(10)).is_ok());
        for (asked, served) in [
            (Some(r(2, 5)), None),          // ignored the range
            (Some(r(2, 5)), Some(r(2, 4))), // shorter
            (Some(r(2, 5)), Some(r(2, 6))), // longer
            (Some(r(2, 5)), Some(r(3, 5))), // shifted
            (None, Some(r(0, 9))),          // part of the whole
        ] {
            let e = check_served_exactly(asked, served, Some(10)).unwrap_err();
            assert_eq!(
                e.kind(),
                crate::ErrorKind::InternalError,
                "{asked:?} {served:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_source_ranges_are_exactly_bytes_first_last() {
        assert_eq!(
            parse_copy_source_range("bytes=0-9").ok(),
            Some(ByteRange { start: 0, end: 10 })
        );
        assert_eq!(
            parse_copy_source_range("bytes=5-5").ok(),
            Some(ByteRange { start: 5, end: 6 })
        );
        for bad in [
            "bytes=9-0",
            "bytes=-5",
            "bytes=5-",
            "bytes=a-b",
            "0-9",
            "bytes=0-1,3-4",
            "bytes=+1-2",
            "",
        ] {
            assert_eq!(
                parse_copy_source_range(bad).map_err(|e| e.kind()).err(),
                Some(crate::ErrorKind::InvalidArgument),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_content_range_past_its_total_is_refused() {
        assert_eq!(parse_content_range("bytes 0-999/306"), None);
        assert_eq!(parse_content_range("bytes 0-306/306"), None);
        assert_eq!(
            parse_content_range("bytes 0-305/306"),
            Some((ByteRange { start: 0, end: 306 }, Some(306)))
        );
        assert!(parse_content_range("bytes 0-999/*").is_some());
    }

    #[test]
    fn specs_write_back_as_parsed() {
        for text in ["bytes=0-9", "bytes=5-", "bytes=-20"] {
            assert_eq!(
                RangeSpec::parse(text)
                    .map(RangeSpec::to_header_value)
                    .as_deref(),
                Some(text)
            );
        }
    }
    use proptest::prelude::*;

    #[test]
    fn parses_the_three_forms() {
        assert_eq!(
            RangeSpec::parse("bytes=0-9"),
            Some(RangeSpec::Bounded { first: 0, last: 9 })
        );
        assert_eq!(
            RangeSpec::parse("bytes=5-"),
            Some(RangeSpec::From { first: 5 })
        );
        assert_eq!(
            RangeSpec::parse("bytes=-7"),
            Some(RangeSpec::Suffix { len: 7 })
        );
        assert_eq!(
            RangeSpec::parse(" bytes= 1 - 2 "),
            Some(RangeSpec::Bounded { first: 1, last: 2 })
        );
    }

    #[test]
    fn malformed_values_are_ignored() {
        for bad in [
            "bytes=1-0",
            "bytes=-",
            "bytes=a-b",
            "items=0-1",
            "bytes=0-1,3-4",
            "bytes=+1-2",
            "0-1",
            "bytes=99999999999999999999-",
        ] {
            assert_eq!(RangeSpec::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn resolution_follows_s3() {
        let r = |s: &str, size| RangeSpec::parse(s).map(|spec| spec.resolve(size));
        assert_eq!(
            r("bytes=0-9", 100),
            Some(Ok(ByteRange { start: 0, end: 10 }))
        );
        assert_eq!(
            r("bytes=90-200", 100),
            Some(Ok(ByteRange {
                start: 90,
                end: 100
            }))
        );
        assert_eq!(r("bytes=100-", 100), Some(Err(Unsatisfiable { size: 100 })));
        assert_eq!(
            r("bytes=-10", 100),
            Some(Ok(ByteRange {
                start: 90,
                end: 100
            }))
        );
        assert_eq!(
            r("bytes=-1000", 100),
            Some(Ok(ByteRange { start: 0, end: 100 }))
        );
        assert_eq!(r("bytes=-0", 100), Some(Err(Unsatisfiable { size: 100 })));
        assert_eq!(r("bytes=0-0", 0), Some(Err(Unsatisfiable { size: 0 })));
        assert_eq!(r("bytes=-5", 0), Some(Err(Unsatisfiable { size: 0 })));
        let big = 5 * (1u64 << 30);
        assert_eq!(
            r("bytes=4294967296-", big),
            Some(Ok(ByteRange {
                start: 1 << 32,
                end: big
            }))
        );
        assert_eq!(
            r(&format!("bytes=0-{}", u64::MAX), 10),
            Some(Ok(ByteRange { start: 0, end: 10 }))
        );
    }

    #[test]
    fn content_range_values() {
        let range = ByteRange { start: 10, end: 20 };
        assert_eq!(range.content_range(100), "bytes 10-19/100");
        assert_eq!(range.to_header_value(), "bytes=10-19");
        assert_eq!(Unsatisfiable { size: 3 }.content_range(), "bytes */3");
        assert_eq!(
            parse_content_range("bytes 10-19/100"),
            Some((range, Some(100)))
        );
        assert_eq!(parse_content_range("bytes 10-19/*"), Some((range, None)));
        assert_eq!(parse_content_range("bytes 19-10/100"), None);
    }

    proptest! {
        #[test]
        fn resolved_ranges_lie_inside_the_object(first in 0u64..1 << 40, len in 0u64..1 << 40, size in 0u64..1 << 40, form in 0u8..3) {
            let spec = match form {
                0 => RangeSpec::Bounded { first, last: first.saturating_add(len) },
                1 => RangeSpec::From { first },
                _ => RangeSpec::Suffix { len },
            };
            let reparsed = RangeSpec::parse(&spec.to_string());
            prop_assert_eq!(reparsed, Some(spec));
            if let Ok(range) = spec.resolve(size) {
                prop_assert!(range.start < range.end);
                prop_assert!(range.end <= size);
            }
        }

        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = RangeSpec::parse(&s);
            let _ = parse_content_range(&s);
        }
    }
}
