//! Writing answers, once for every server that speaks S3 or Azure Blob (the gateway's
//! fronts and the origin stub): a failed request ([`Failure`]) as the protocol's error
//! answer, the ids and headers every answer carries, and the header helpers the
//! handlers share.
//!
//! Answers are built with a [`Bytes`] body here; each server converts it to its own body
//! type (`Response::map`).

use std::fmt::Write as _;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use talon_core::Backend;

use crate::s3::xml::ErrorSubject;
use crate::{Error, ErrorKind};

/// What a server answers in the form of the protocol it speaks (a [`Backend`], S3 or
/// Azure Blob): request ids, the refusals made before a request is classified, and the
/// headers every answer carries. Error codes and bodies are [`error_answer`]'s.
pub trait ProtocolFront: Copy {
    /// A fresh request id in the protocol's form: 16 upper-case hex digits for S3 (as
    /// `x-amz-request-id`), a UUID for Azure (as `x-ms-request-id`).
    fn new_request_id(self) -> String;

    /// Refuses a request whose header section (names plus values, as
    /// [`header_bytes`] counts it) is larger than `max` bytes.
    ///
    /// # Errors
    /// [`ErrorKind::HeadersTooLarge`] in the protocol's words.
    fn check_header_size(self, headers: &HeaderMap, max: usize) -> Result<(), Error>;

    /// Refuses a request signed for the other protocol (SigV4 or a presigned S3 URL at
    /// the Azure front; Shared Key or a SAS at the S3 front) naming the endpoint it
    /// belongs on: classified here it would be answered something unrelated (an SDK
    /// pointed at the wrong port got `NotImplemented` for an account operation).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidRequest`] saying which endpoint to use (not an authentication
    /// code: both protocols answer those in fixed words that would hide the advice).
    fn check_signed_for_this_front(self, headers: &HeaderMap, query: &str) -> Result<(), Error>;

    /// Sets the headers every answer of this protocol carries: the request id (S3 sends
    /// it as `x-amz-request-id` and `x-amz-id-2`, Azure as `x-ms-request-id` with the
    /// `x-ms-version` it answered in) and `Server`.
    fn stamp(
        self,
        headers: &mut HeaderMap,
        request_id: &str,
        azure_version: &str,
        server: &'static str,
    );
}

impl ProtocolFront for Backend {
    fn new_request_id(self) -> String {
        match self {
            // Made at their final size: `format!` would grow the string on the way.
            Backend::S3 => {
                let mut id = String::with_capacity(16);
                let _ = write!(id, "{:016X}", fastrand::u64(..));
                id
            }
            Backend::Azure => {
                let mut id = String::with_capacity(36);
                let _ = write!(
                    id,
                    "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                    fastrand::u32(..),
                    fastrand::u16(..),
                    fastrand::u16(..),
                    fastrand::u16(..),
                    fastrand::u64(..) & 0xffff_ffff_ffff
                );
                id
            }
        }
    }

    fn check_header_size(self, headers: &HeaderMap, max: usize) -> Result<(), Error> {
        if header_bytes(headers) <= max {
            return Ok(());
        }
        let message = match self {
            Backend::S3 => format!(
                "Your request header section exceeds the maximum allowed size of {max} bytes."
            ),
            Backend::Azure => {
                format!("The request headers exceed the maximum allowed size of {max} bytes.")
            }
        };
        Err(Error::new(ErrorKind::HeadersTooLarge, message))
    }

    fn check_signed_for_this_front(self, headers: &HeaderMap, query: &str) -> Result<(), Error> {
        let authorization = header(headers, "authorization").unwrap_or("");
        let has = |name: &str| {
            query.split('&').any(|pair| {
                pair.split('=')
                    .next()
                    .is_some_and(|k| k.eq_ignore_ascii_case(name))
            })
        };
        let (other, belongs) = match self {
            Backend::Azure
                if authorization.starts_with("AWS4-HMAC-SHA256 ")
                    || authorization.starts_with("AWS ")
                    || has("X-Amz-Signature")
                    || (has("Signature") && has("AWSAccessKeyId")) =>
            {
                ("S3 (SigV4 or SigV2)", "the S3 endpoint")
            }
            Backend::S3
                if authorization.starts_with("SharedKey ")
                    || authorization.starts_with("SharedKeyLite ")
                    || (has("sig") && has("sv")) =>
            {
                ("Azure Blob (Shared Key or SAS)", "the Azure Blob endpoint")
            }
            _ => return Ok(()),
        };
        let here = match self {
            Backend::S3 => "the S3 endpoint",
            Backend::Azure => "the Azure Blob endpoint",
        };
        Err(Error::new(
            ErrorKind::InvalidRequest,
            format!("This is {here}; the request is signed for {other}: send it to {belongs}."),
        ))
    }

    fn stamp(
        self,
        headers: &mut HeaderMap,
        request_id: &str,
        azure_version: &str,
        server: &'static str,
    ) {
        let id = HeaderValue::from_str(request_id).ok();
        match self {
            Backend::S3 => {
                if let Some(id) = id {
                    let same = id.clone();
                    headers.insert(HeaderName::from_static("x-amz-request-id"), id);
                    headers.insert(HeaderName::from_static("x-amz-id-2"), same);
                }
            }
            Backend::Azure => {
                if let Some(id) = id {
                    headers.insert(HeaderName::from_static("x-ms-request-id"), id);
                }
                set_header(headers, "x-ms-version", azure_version);
            }
        }
        headers.insert(http::header::SERVER, HeaderValue::from_static(server));
    }
}

/// A failed request: the error, and headers its answer carries (`Content-Range` on a
/// 416, `ETag` on a 304).
#[derive(Debug)]
pub struct Failure {
    /// The error.
    pub error: Error,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
}

impl Failure {
    /// A failure with extra headers.
    pub fn with_headers(error: Error, headers: Vec<(&'static str, String)>) -> Failure {
        Failure { error, headers }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure {
            error,
            headers: Vec::new(),
        }
    }
}

/// What an error answer needs to know about the request it answers.
#[derive(Debug, Clone, Copy)]
pub struct ErrorContext<'a> {
    /// A HEAD: the answer has no body.
    pub is_head: bool,
    /// The request carried a body the handler may not have read: the answer says
    /// `Connection: close`, since HTTP/1.1 then requires either draining the body or
    /// announcing the close.
    pub has_body: bool,
    /// The request id, written into the error body.
    pub request_id: &'a str,
    /// S3 only: the request's path (the error's `Resource`).
    pub resource: &'a str,
    /// S3 only: the bucket and key the error is about.
    pub subject: ErrorSubject<'a>,
}

/// The words a protocol uses for an error of `kind`, where a client learns nothing more
/// from a backend's own message: a missing key or bucket, a failed condition, an
/// internal error, an unavailable service. A backend speaks of buckets and keys, workers
/// and origins; an S3 client reads S3's short text, an Azure client reads of containers,
/// blobs and conditional headers. `None` keeps the backend's message (it says what was
/// wrong with the request).
pub fn protocol_words(front: Backend, kind: ErrorKind) -> Option<&'static str> {
    use ErrorKind::*;
    Some(match (front, kind) {
        (Backend::S3, NoSuchKey) => "The specified key does not exist.",
        (Backend::S3, NoSuchBucket) => "The specified bucket does not exist.",
        (Backend::S3, NoSuchUpload) => {
            "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed."
        }
        (Backend::S3, InternalError) => "We encountered an internal error. Please try again.",
        (Backend::S3, ServiceUnavailable) => "Service is unable to handle request.",
        (Backend::Azure, NoSuchBucket) => "The specified container does not exist.",
        (Backend::Azure, NoSuchKey) => "The specified blob does not exist.",
        (Backend::Azure, PreconditionFailed | NotModified) => {
            "The condition specified using HTTP conditional header(s) is not met."
        }
        (Backend::Azure, InvalidRange) => {
            "The range specified is invalid for the current size of the resource."
        }
        (Backend::Azure, BucketAlreadyExists) => "The specified container already exists.",
        // Azure would delete the blobs with it; Talon over a folder or S3 keeps them.
        (Backend::Azure, BucketNotEmpty) => {
            "The specified container is not empty: delete its blobs first."
        }
        (Backend::Azure, InternalError) => {
            "Server encountered an internal error. Please try again after some time."
        }
        (Backend::Azure, ServiceUnavailable) => {
            "The server is currently unable to receive requests. Please retry your request."
        }
        _ => return None,
    })
}

/// `Retry-After` on every 503 (throttled, unavailable): the SDKs' retry policies
/// (the AWS SDKs' and azure-core's) wait at least this long before they try again,
/// instead of their own first backoff, which may be a few milliseconds. One second:
/// long enough for a throttled origin or a full gateway to drain some work, short
/// enough not to stall a reader that a retry would serve.
pub const RETRY_AFTER_SECONDS: &str = "1";

/// The protocol's answer to a failed request: its status, `x-ms-error-code` (Azure),
/// the XML error body (none on a HEAD or a 304), `Retry-After` on a 503, and the
/// failure's extra headers. The
/// failure is logged with its code and full message; the client sees the protocol's
/// words for it ([`protocol_words`]) or, for a refusal of the request itself, the
/// message.
pub fn error_answer(
    front: Backend,
    failure: Failure,
    request: ErrorContext<'_>,
) -> Response<Bytes> {
    let kind = failure.error.kind();
    if kind != ErrorKind::NotModified {
        tracing::info!(
            request_id = request.request_id,
            code = kind.s3_code(),
            // Quoted: an origin's message may span lines.
            why = ?failure.error.message(),
            resource = request.resource,
            "request failed"
        );
    }
    render_error_answer(front, failure, request)
}

/// [`error_answer`] without its log line: for an answer built ahead of any request
/// (the over-capacity answer is made once at start-up, and a log line then would report
/// a failure that has not happened).
fn render_error_answer(
    front: Backend,
    failure: Failure,
    request: ErrorContext<'_>,
) -> Response<Bytes> {
    let kind = failure.error.kind();
    let failure = match protocol_words(front, kind) {
        Some(words) => Failure {
            error: Error::new(kind, words),
            headers: failure.headers,
        },
        None => failure,
    };
    let with_body = !request.is_head && kind != ErrorKind::NotModified;
    let (status, code) = match front {
        Backend::S3 => (kind.s3_status(), kind.s3_code()),
        Backend::Azure => (kind.azure_status(), kind.azure_code()),
    };
    let body = if !with_body {
        Bytes::new()
    } else {
        Bytes::from(match front {
            Backend::S3 => crate::s3::xml::error_xml(
                &failure.error,
                request.resource,
                request.request_id,
                request.subject,
            ),
            Backend::Azure => crate::azure::xml::error_xml(
                &failure.error,
                request.request_id,
                std::time::SystemTime::now(),
            ),
        })
    };
    let mut resp = answer(status, body);
    let h = resp.headers_mut();
    if front == Backend::Azure {
        set_header(h, "x-ms-error-code", code);
    }
    if with_body {
        set_header(h, "content-type", "application/xml");
    }
    if request.has_body {
        set_header(h, "connection", "close");
    }
    if status == StatusCode::SERVICE_UNAVAILABLE {
        set_header(h, "retry-after", RETRY_AFTER_SECONDS);
    }
    for (name, value) in failure.headers {
        set_header(h, name, &value);
    }
    resp
}

/// Sets a header, skipping values that are not valid header text.
pub fn set_header(headers: &mut HeaderMap, name: &str, value: &str) {
    // from_bytes, not from_str: a UTF-8 value (a Content-Disposition file name) is valid
    // header text; control characters are still refused.
    if let (Ok(n), Ok(v)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_bytes(value.as_bytes()),
    ) {
        headers.insert(n, v);
    }
}

/// Sets a header whose name and value are fixed text in the program: both are borrowed,
/// not copied, so it costs no allocation (what [`set_header`] costs twice for a name
/// that is not a standard one). `name` must be lower case.
pub fn set_fixed_header(headers: &mut HeaderMap, name: &'static str, value: &'static str) {
    headers.insert(
        HeaderName::from_static(name),
        HeaderValue::from_static(value),
    );
}

/// Sets a header to a value this process formats (a length, a date, a range),
/// formatted into a buffer on the stack: the value's one allocation is the header's
/// own. Text that is not valid header text is skipped, as [`set_header`] skips it.
/// `name` must be lower case.
pub fn set_formatted_header(
    headers: &mut HeaderMap,
    name: &'static str,
    value: impl std::fmt::Display,
) {
    let mut text = StackText::default();
    let made = if std::fmt::Write::write_fmt(&mut text, format_args!("{value}")).is_ok() {
        HeaderValue::from_bytes(text.as_bytes())
    } else {
        HeaderValue::from_str(&value.to_string())
    };
    if let Ok(v) = made {
        headers.insert(HeaderName::from_static(name), v);
    }
}

/// Text formatted into a fixed buffer: writing past its end fails (the caller then
/// formats into a `String`).
struct StackText {
    buf: [u8; 96],
    len: usize,
}

impl Default for StackText {
    fn default() -> Self {
        Self {
            buf: [0; 96],
            len: 0,
        }
    }
}

impl StackText {
    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let room = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        room.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The headers every answer to a read of an object's bytes carries, on both
/// protocols: `Content-Length` (`len`, the bytes sent), `Content-Range` when a range of
/// the object is sent, `ETag`, `Accept-Ranges` and `Content-Type`
/// (`application/octet-stream` when the object has none).
pub fn set_read_headers(
    headers: &mut HeaderMap,
    len: u64,
    range: Option<&crate::range::ByteRange>,
    info: &crate::origin::ObjectInfo,
) {
    set_formatted_header(headers, "content-length", len);
    if let Some(r) = range {
        set_formatted_header(headers, "content-range", r.content_range_text(info.size));
    }
    set_header(headers, "etag", &info.etag);
    set_fixed_header(headers, "accept-ranges", "bytes");
    match &info.content_type {
        Some(t) => set_header(headers, "content-type", t),
        None => set_fixed_header(headers, "content-type", "application/octet-stream"),
    }
}

/// Headers an answer's map has room for from the start: a read's answer carries about
/// a dozen, and a map that grows past its first size reallocates on the way.
const ANSWER_HEADERS: usize = 16;

/// A response with a status and body.
pub fn answer<B>(status: StatusCode, body: B) -> Response<B> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = HeaderMap::with_capacity(ANSWER_HEADERS);
    resp
}

/// A header's text value (visible ASCII only).
pub fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A header's value as UTF-8 text, for values that are passed on rather than parsed
/// (a Content-Disposition may carry a UTF-8 file name).
pub fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .map(str::to_owned)
}

/// Whether a request carries a body (a non-zero `Content-Length`, or chunked transfer).
pub fn request_has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(http::header::TRANSFER_ENCODING)
        || header(headers, "content-length").is_some_and(|v| v.trim() != "0")
}

/// Total size of the request headers, names plus values plus 4 bytes of framing each,
/// in bytes.
pub fn header_bytes(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn context<'a>(is_head: bool, has_body: bool) -> ErrorContext<'a> {
        ErrorContext {
            is_head,
            has_body,
            request_id: "RID",
            resource: "/b/k",
            subject: ErrorSubject {
                bucket: Some("b"),
                key: Some("k"),
            },
        }
    }

    #[test]
    fn an_s3_error_answer_has_the_code_in_xml_and_no_body_on_head() {
        let f = Failure::from(Error::new(
            ErrorKind::NoSuchKey,
            "The specified key does not exist.",
        ));
        let resp = error_answer(Backend::S3, f, context(false, true));
        assert_eq!(resp.status(), 404);
        assert_eq!(resp.headers()["content-type"], "application/xml");
        assert_eq!(resp.headers()["connection"], "close");
        let body = std::str::from_utf8(resp.body()).unwrap();
        assert!(body.contains("<Code>NoSuchKey</Code>"), "{body}");
        assert!(body.contains("<RequestId>RID</RequestId>"), "{body}");
        let f = Failure::from(Error::new(ErrorKind::NoSuchKey, "gone"));
        let resp = error_answer(Backend::S3, f, context(true, false));
        assert!(resp.body().is_empty());
        assert!(!resp.headers().contains_key("content-type"));
        assert!(!resp.headers().contains_key("connection"));
    }

    #[test]
    fn an_azure_error_answer_names_its_code_in_a_header_and_keeps_extra_headers() {
        let f = Failure::with_headers(
            Error::new(ErrorKind::InvalidRange, "The range specified is invalid."),
            vec![("content-range", "bytes */10".into())],
        );
        let resp = error_answer(Backend::Azure, f, context(false, false));
        assert_eq!(resp.status(), 416);
        assert_eq!(resp.headers()["x-ms-error-code"], "InvalidRange");
        assert_eq!(resp.headers()["content-range"], "bytes */10");
        let body = std::str::from_utf8(resp.body()).unwrap();
        assert!(body.contains("<Code>InvalidRange</Code>"), "{body}");
    }

    #[test]
    fn throttled_and_unavailable_answers_say_when_to_retry_and_no_other_does() {
        for (front, kind, code) in [
            (Backend::S3, ErrorKind::SlowDown, "<Code>SlowDown</Code>"),
            (
                Backend::Azure,
                ErrorKind::SlowDown,
                "<Code>ServerBusy</Code>",
            ),
            (
                Backend::S3,
                ErrorKind::ServiceUnavailable,
                "<Code>ServiceUnavailable</Code>",
            ),
            (
                Backend::Azure,
                ErrorKind::ServiceUnavailable,
                "<Code>ServerBusy</Code>",
            ),
        ] {
            let resp = error_answer(
                front,
                Failure::from(Error::new(kind, "busy")),
                context(false, false),
            );
            assert_eq!(resp.status(), 503);
            assert_eq!(resp.headers()["retry-after"], "1", "{front:?} {kind:?}");
            let body = std::str::from_utf8(resp.body()).unwrap();
            assert!(body.contains(code), "{body}");
        }
        let resp = error_answer(
            Backend::S3,
            Failure::from(Error::new(ErrorKind::InternalError, "x")),
            context(false, false),
        );
        assert!(!resp.headers().contains_key("retry-after"));
    }

    #[test]
    fn a_backends_internals_stay_out_of_the_answer() {
        let internal = "worker refused: NotFound: origin: NoSuchKey: origin answered 404";
        let f = Failure::from(Error::new(ErrorKind::NoSuchKey, internal));
        let resp = error_answer(Backend::S3, f, context(false, false));
        let body = std::str::from_utf8(resp.body()).unwrap();
        assert!(
            body.contains("<Message>The specified key does not exist.</Message>"),
            "{body}"
        );
        assert!(!body.contains("worker"), "{body}");
        let f = Failure::from(Error::new(ErrorKind::NoSuchKey, internal));
        let resp = error_answer(Backend::Azure, f, context(false, false));
        let body = std::str::from_utf8(resp.body()).unwrap();
        assert!(
            body.contains("The specified blob does not exist."),
            "{body}"
        );
        // A refusal of the request itself keeps its own explanation.
        let f = Failure::from(Error::new(
            ErrorKind::InvalidArgument,
            "max-keys must be a number",
        ));
        let resp = error_answer(Backend::S3, f, context(false, false));
        let body = std::str::from_utf8(resp.body()).unwrap();
        assert!(body.contains("max-keys must be a number"), "{body}");
    }

    #[test]
    fn a_304_has_no_body_on_either_front() {
        for front in [Backend::S3, Backend::Azure] {
            let f = Failure::from(Error::new(ErrorKind::NotModified, "Not Modified"));
            let resp = error_answer(front, f, context(false, false));
            assert_eq!(resp.status(), 304);
            assert!(resp.body().is_empty());
        }
    }

    #[test]
    fn oversized_headers_are_refused_in_each_protocols_words() {
        let mut h = HeaderMap::new();
        h.insert("x-big", HeaderValue::from_static("0123456789"));
        assert!(Backend::S3.check_header_size(&h, 100).is_ok());
        let e = Backend::S3.check_header_size(&h, 10).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::HeadersTooLarge);
        assert!(e.message().contains("header section"));
        let e = Backend::Azure.check_header_size(&h, 10).unwrap_err();
        assert!(e.message().starts_with("The request headers exceed"));
    }

    #[test]
    fn request_ids_have_each_protocols_form() {
        let s3 = Backend::S3.new_request_id();
        assert_eq!(s3.len(), 16);
        assert!(
            s3.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase())
        );
        let azure = Backend::Azure.new_request_id();
        let parts: Vec<_> = azure.split('-').map(str::len).collect();
        assert_eq!(parts, [8, 4, 4, 4, 12]);
    }

    fn text(h: &HeaderMap, name: &str) -> String {
        h.get(name).unwrap().to_str().unwrap().to_owned()
    }

    #[test]
    fn a_reads_answer_headers_say_its_length_range_version_and_type() {
        let mut h = HeaderMap::new();
        let range = crate::range::ByteRange {
            start: 65_536,
            end: 131_072,
        };
        let info = |size, etag: &str, content_type: Option<&str>| crate::origin::ObjectInfo {
            size,
            etag: etag.to_owned(),
            content_type: content_type.map(str::to_owned),
            last_modified: None,
            headers: Default::default(),
        };
        set_read_headers(&mut h, 65_536, Some(&range), &info(1 << 20, "\"e1\"", None));
        assert_eq!(text(&h, "content-length"), "65536");
        assert_eq!(text(&h, "content-range"), "bytes 65536-131071/1048576");
        assert_eq!(text(&h, "etag"), "\"e1\"");
        assert_eq!(text(&h, "accept-ranges"), "bytes");
        assert_eq!(text(&h, "content-type"), "application/octet-stream");
        let mut whole = HeaderMap::new();
        set_read_headers(&mut whole, 7, None, &info(7, "\"e2\"", Some("image/png")));
        assert!(whole.get("content-range").is_none());
        assert_eq!(text(&whole, "content-length"), "7");
        assert_eq!(text(&whole, "content-type"), "image/png");
    }

    #[test]
    fn a_formatted_header_longer_than_the_stack_buffer_is_whole_and_bad_text_is_skipped() {
        let mut h = HeaderMap::new();
        let long = "x".repeat(300);
        set_formatted_header(&mut h, "x-long", &long);
        assert_eq!(text(&h, "x-long"), long);
        set_formatted_header(&mut h, "x-bad", "a\nb");
        assert!(h.get("x-bad").is_none());
        set_formatted_header(
            &mut h,
            "last-modified",
            crate::dates::http_date(std::time::UNIX_EPOCH),
        );
        assert_eq!(text(&h, "last-modified"), "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn every_answer_carries_its_request_id_and_the_server() {
        let mut s3 = HeaderMap::new();
        Backend::S3.stamp(&mut s3, "0123456789ABCDEF", "", "talon-test");
        assert_eq!(text(&s3, "x-amz-request-id"), "0123456789ABCDEF");
        assert_eq!(text(&s3, "x-amz-id-2"), "0123456789ABCDEF");
        assert_eq!(text(&s3, "server"), "talon-test");
        let mut azure = HeaderMap::new();
        Backend::Azure.stamp(&mut azure, "id-1", "2025-01-05", "talon-test");
        assert_eq!(text(&azure, "x-ms-request-id"), "id-1");
        assert_eq!(text(&azure, "x-ms-version"), "2025-01-05");
        assert_eq!(text(&azure, "server"), "talon-test");
    }
}

/// The whole HTTP/1.1 answer a front's listener writes to a connection over its
/// connection cap, without reading the request
/// (`talon_listener::ListenerLimits::over_capacity_answer`):
/// the protocol's throttling error — 503 SlowDown (S3) or ServerBusy (Azure) — with
/// `Retry-After`, a request id and `Connection: close`, so that the client's SDK backs
/// off and retries instead of seeing a reset connection.
pub fn over_capacity_answer(front: Backend) -> std::sync::Arc<[u8]> {
    let request_id = front.new_request_id();
    let error = Error::new(ErrorKind::SlowDown, "the server is at its connection limit");
    let resp = render_error_answer(
        front,
        Failure::from(error),
        ErrorContext {
            is_head: false,
            // Its body is never read: the answer says the connection closes.
            has_body: true,
            request_id: &request_id,
            resource: "/",
            subject: Default::default(),
        },
    );
    let status = resp.status();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
    .into_bytes();
    let id_header = match front {
        Backend::S3 => "x-amz-request-id",
        Backend::Azure => "x-ms-request-id",
    };
    let body = resp.body();
    let length = body.len().to_string();
    let extra = [
        (id_header, request_id.as_bytes()),
        ("content-length", length.as_bytes()),
    ];
    let headers = resp
        .headers()
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .chain(extra);
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out.into()
}

#[cfg(test)]
pub(crate) mod over_capacity_tests {
    use super::*;

    #[test]
    fn the_answer_over_the_cap_is_each_protocols_slow_down_and_closes() {
        for (front, code) in [(Backend::S3, "SlowDown"), (Backend::Azure, "ServerBusy")] {
            let raw = over_capacity_answer(front);
            let text = String::from_utf8_lossy(&raw);
            let (head, body) = text.split_once("\r\n\r\n").unwrap_or_default();
            assert!(
                head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
                "{head}"
            );
            let head = head.to_ascii_lowercase();
            for line in ["retry-after: 1", "connection: close"] {
                assert!(head.contains(line), "{front:?}: no {line} in {head}");
            }
            assert!(
                head.contains(&format!("content-length: {}", body.len())),
                "{head}"
            );
            assert!(body.contains(&format!("<Code>{code}</Code>")), "{body}");
        }
    }

    /// The log lines written while `f` runs, at INFO and above.
    pub(crate) fn logged(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if let Ok(mut lines) = self.0.lock() {
                    lines.extend_from_slice(buf);
                }
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = lines.0.lock().map(|l| l.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn building_the_answer_at_start_up_logs_no_failed_request() {
        let at_start_up = logged(|| {
            over_capacity_answer(Backend::S3);
            over_capacity_answer(Backend::Azure);
        });
        assert!(!at_start_up.contains("request failed"), "{at_start_up}");
        // A real failure still logs: the capture above would have seen one.
        let failed = logged(|| {
            error_answer(
                Backend::S3,
                Failure::from(Error::new(ErrorKind::SlowDown, "busy")),
                ErrorContext {
                    is_head: false,
                    has_body: false,
                    request_id: "r",
                    resource: "/b/k",
                    subject: Default::default(),
                },
            );
        });
        assert!(failed.contains("request failed"), "{failed}");
    }
}
