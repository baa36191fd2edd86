//! The timestamp formats the two protocols use, parsed and written in one place.
//!
//! - HTTP dates (`Last-Modified`, `If-Modified-Since`, `x-ms-date`): IMF-fixdate,
//!   `Sun, 06 Nov 1994 08:49:37 GMT`.
//! - XML timestamps in S3 listings: ISO 8601 with milliseconds, `2009-10-12T17:50:30.000Z`.
//! - SigV4's `X-Amz-Date`: `20130524T000000Z`.
//! - Azure SAS `st`/`se`: ISO 8601 in UTC, with or without seconds, or a bare date.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;

use crate::error::{Error, ErrorKind, Result};

/// Formats an HTTP date (IMF-fixdate), as used by `Last-Modified` and `Date`.
pub fn format_http_date(t: SystemTime) -> String {
    http_date(t).to_string()
}

/// The same date as [`format_http_date`], to be formatted where it is written (a
/// header value built on the stack: no `String`).
pub fn http_date(t: SystemTime) -> impl std::fmt::Display {
    httpdate::HttpDate::from(t)
}

/// Parses an HTTP date in any of the three forms RFC 9110 allows; `None` when invalid.
///
/// Conditional headers with an invalid date are ignored, as HTTP requires, so callers
/// want an option rather than an error.
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(s.trim()).ok()
}

/// Formats a timestamp for S3 XML bodies: `2009-10-12T17:50:30.000Z`.
pub fn format_iso8601_millis(t: SystemTime) -> String {
    let dt = to_offset(t);
    let fmt =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    dt.format(&fmt)
        .unwrap_or_else(|_| "1970-01-01T00:00:00.000Z".to_owned())
}

/// Formats the SigV4 request timestamp: `20130524T000000Z`.
pub fn format_amz_date(t: SystemTime) -> String {
    let fmt = format_description!("[year][month][day]T[hour][minute][second]Z");
    to_offset(t)
        .format(&fmt)
        .unwrap_or_else(|_| "19700101T000000Z".to_owned())
}

/// Parses the SigV4 request timestamp `20130524T000000Z`.
///
/// # Errors
/// [`ErrorKind::MalformedAuthorization`] when the value is not in that exact form.
pub fn parse_amz_date(s: &str) -> Result<SystemTime> {
    let fmt = format_description!("[year][month][day]T[hour][minute][second]Z");
    let dt = time::PrimitiveDateTime::parse(s, &fmt).map_err(|_| {
        Error::new(
            ErrorKind::MalformedAuthorization,
            format!("X-Amz-Date '{s}' is not of the form YYYYMMDDTHHMMSSZ"),
        )
    })?;
    Ok(from_offset(dt.assume_utc()))
}

/// Parses an ISO 8601 (RFC 3339) time such as S3's `2026-01-02T03:04:05.000Z`.
pub fn parse_iso8601(s: &str) -> Option<SystemTime> {
    OffsetDateTime::parse(s.trim(), &Rfc3339)
        .ok()
        .map(from_offset)
}

/// Parses an Azure SAS time (`st`, `se`): `YYYY-MM-DD`, `YYYY-MM-DDThh:mmZ`,
/// `YYYY-MM-DDThh:mm:ssZ` or with fractional seconds.
///
/// # Errors
/// [`ErrorKind::MalformedAuthorization`] when the value has none of those forms.
pub fn parse_sas_time(s: &str) -> Result<SystemTime> {
    if let Ok(dt) = OffsetDateTime::parse(s, &Rfc3339) {
        return Ok(from_offset(dt));
    }
    let minutes = format_description!("[year]-[month]-[day]T[hour]:[minute]Z");
    if let Ok(dt) = time::PrimitiveDateTime::parse(s, &minutes) {
        return Ok(from_offset(dt.assume_utc()));
    }
    let day = format_description!("[year]-[month]-[day]");
    if let Ok(d) = time::Date::parse(s, &day) {
        return Ok(from_offset(d.midnight().assume_utc()));
    }
    Err(Error::new(
        ErrorKind::MalformedAuthorization,
        format!("'{s}' is not a valid SAS time"),
    ))
}

/// Formats a SAS time the way the Azure SDKs do: `2026-01-02T03:04:05Z`.
pub fn format_sas_time(t: SystemTime) -> String {
    let fmt = format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
    to_offset(t)
        .format(&fmt)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}

/// Truncates a time to whole seconds, the resolution of HTTP dates.
///
/// Comparisons with `If-Modified-Since` must use this, or an object modified within the
/// same second as the client's copy would always look newer.
pub fn truncate_to_seconds(t: SystemTime) -> SystemTime {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => UNIX_EPOCH + Duration::from_secs(d.as_secs()),
        Err(_) => UNIX_EPOCH,
    }
}

fn to_offset(t: SystemTime) -> OffsetDateTime {
    OffsetDateTime::from(t)
}

fn from_offset(dt: OffsetDateTime) -> SystemTime {
    SystemTime::from(dt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(secs * 1000 + millis)
    }

    #[test]
    fn formats_each_protocol_timestamp() {
        let t = at(1_255_369_830, 123);
        assert_eq!(format_iso8601_millis(t), "2009-10-12T17:50:30.123Z");
        assert_eq!(format_amz_date(t), "20091012T175030Z");
        assert_eq!(format_http_date(t), "Mon, 12 Oct 2009 17:50:30 GMT");
        assert_eq!(format_sas_time(t), "2009-10-12T17:50:30Z");
    }

    #[test]
    fn parses_amz_and_http_dates() {
        assert_eq!(
            parse_amz_date("20091012T175030Z").ok(),
            Some(at(1_255_369_830, 0))
        );
        assert!(parse_amz_date("2009-10-12T17:50:30Z").is_err());
        assert_eq!(
            parse_http_date("Mon, 12 Oct 2009 17:50:30 GMT"),
            Some(at(1_255_369_830, 0))
        );
        assert_eq!(parse_http_date("yesterday"), None);
    }

    #[test]
    fn parses_every_sas_time_form() {
        let secs = at(1_255_369_830, 0);
        assert_eq!(parse_sas_time("2009-10-12T17:50:30Z").ok(), Some(secs));
        assert_eq!(
            parse_sas_time("2009-10-12T17:50:30.0000000Z").ok(),
            Some(secs)
        );
        assert_eq!(
            parse_sas_time("2009-10-12T17:50Z").ok(),
            Some(at(1_255_369_800, 0))
        );
        assert_eq!(
            parse_sas_time("2009-10-12").ok(),
            Some(at(1_255_305_600, 0))
        );
        assert!(parse_sas_time("12/10/2009").is_err());
    }

    #[test]
    fn truncation_drops_subseconds() {
        assert_eq!(truncate_to_seconds(at(10, 999)), at(10, 0));
    }
}
