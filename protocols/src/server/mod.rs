//! Serving the protocols: the one interface a protocol front serves objects from
//! ([`ObjectBackend`]), the vocabulary it speaks in, and the body types of requests and
//! answers.
//!
//! The S3 front ([`crate::s3::server`]) does classification, authentication, operation
//! dispatch, upload verification and the writing of answers and error answers; a
//! backend only stores or fetches objects. Talon has two backends: the origin stub's
//! store (a folder or generated objects) and the gateway's cache-and-relay logic. A
//! new S3 operation is written once, in the front, and both speak it.
//!
//! The interface is protocol-neutral (buckets, keys, versions as entity tags, byte
//! ranges), so an S3 front can serve what an Azure origin stores and the other way
//! round. Operations a backend does not implement answer `NotImplemented` by default.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Response};
use http_body_util::BodyExt as _;
use http_body_util::combinators::UnsyncBoxBody;

use crate::answer::{Failure, header};
use crate::azure::request::AzureOperation;
use crate::azure::xml::BlockListItem;
use crate::conditional::{Conditions, DeleteConditions, EtagList};
use crate::content_headers::{CONTENT_HEADERS, stored_value};
use crate::origin::{BucketSummary, ObjectInfo};
use crate::range::{ByteRange, RangeSpec};
use crate::s3::request::S3Operation;
use crate::upload::{UploadOutcome, VerifyingStream};
use crate::{Error, ErrorKind};

/// A boxed error, as request bodies carry it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of a request as a front hands it on.
pub type RequestBody = UnsyncBoxBody<Bytes, BoxError>;

/// The body of every answer a front writes.
pub type AnswerBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// Boxes any request body as a [`RequestBody`].
pub fn request_body<B>(body: B) -> RequestBody
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// An empty answer body.
pub fn empty_body() -> AnswerBody {
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// An answer body held in memory.
pub fn full_body(bytes: impl Into<Bytes>) -> AnswerBody {
    http_body_util::Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// An answer body streamed from `stream`.
///
/// The body is polled after the handler returned, outside the request's span, so it
/// keeps the span it was made in: whatever is logged while the body streams (a piece
/// retried on another worker, a fallback mid-body) names the request id the client saw.
pub fn stream_body<S>(stream: S) -> AnswerBody
where
    S: futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
{
    use futures_util::TryStreamExt as _;
    let frames = stream.map_ok(http_body::Frame::data);
    let span = tracing::Span::current();
    if span.is_none() {
        http_body_util::StreamBody::new(frames).boxed_unsync()
    } else {
        http_body_util::StreamBody::new(InSpan {
            inner: frames,
            span,
        })
        .boxed_unsync()
    }
}

pin_project_lite::pin_project! {
    /// A stream polled inside `span`.
    struct InSpan<S> {
        #[pin]
        inner: S,
        span: tracing::Span,
    }
}

impl<S: futures_util::Stream> futures_util::Stream for InSpan<S> {
    type Item = S::Item;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        let this = self.project();
        let _entered = this.span.enter();
        this.inner.poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

/// The bounds a front holds every request to.
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    /// Total request header bytes accepted.
    pub max_header_bytes: usize,
    /// Largest XML request body accepted, in bytes.
    pub max_xml_bytes: usize,
    /// Largest single upload (object or part) accepted, in decoded bytes.
    pub max_upload_bytes: u64,
    /// An upload body that sends nothing for this long fails.
    pub upload_idle_timeout: Duration,
    /// Time to the start of an answer; `None` for no bound. Uploads are bounded by
    /// their idle timeout instead (a large upload on a slow link may take longer than
    /// any fixed deadline).
    pub deadline: Option<Duration>,
}

impl Default for ServerLimits {
    fn default() -> ServerLimits {
        ServerLimits {
            // S3 documents 8 KiB of headers.
            max_header_bytes: 8 * 1024,
            max_xml_bytes: 2 << 20,
            // S3's limit for PutObject and for one part.
            max_upload_bytes: 5 << 30,
            upload_idle_timeout: Duration::from_secs(30),
            deadline: None,
        }
    }
}

/// A handled request: the answer, and what a server's metrics want to know of it.
#[derive(Debug)]
pub struct Handled {
    /// The answer.
    pub response: Response<AnswerBody>,
    /// The operation (`GetObject`), or `Unknown` when the request was refused before it
    /// was classified.
    pub operation: &'static str,
    /// Whether the answer is an error answer.
    pub failed: bool,
    /// What an access log says of the request, when the server was asked to keep it
    /// (`log_requests`); `None` otherwise, at no cost.
    pub record: Option<RequestRecord>,
}

/// Who asked for what, as far as the server learned before answering: what an access
/// log line needs beyond the answer itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestRecord {
    /// The request id the client sees (`x-amz-request-id`, `x-ms-request-id`).
    pub request_id: String,
    /// The caller: an S3 access key id, `sharedkey:ACCOUNT` or `sas:ACCOUNT`; `None`
    /// for an anonymous request or one refused before it was authenticated.
    pub identity: Option<String>,
    /// The bucket (container), once the request was classified.
    pub bucket: Option<String>,
    /// The key (blob name), decoded.
    pub key: Option<String>,
}

/// What a server has learned of a request so far, filled as it goes.
#[derive(Debug)]
pub(crate) struct Seen {
    pub(crate) operation: &'static str,
    pub(crate) record: Option<RequestRecord>,
}

impl Seen {
    pub(crate) fn new(log_requests: bool) -> Seen {
        Seen {
            operation: "Unknown",
            record: log_requests.then(RequestRecord::default),
        }
    }

    /// The request was classified: its operation and what it names.
    pub(crate) fn classified(
        &mut self,
        operation: &'static str,
        bucket: Option<&String>,
        key: Option<&String>,
    ) {
        self.operation = operation;
        if let Some(r) = &mut self.record {
            r.bucket = bucket.cloned();
            r.key = key.cloned();
        }
    }

    /// The caller was authenticated as `who` (called only when a record is kept).
    pub(crate) fn caller(&mut self, who: impl FnOnce() -> Option<String>) {
        if let Some(r) = &mut self.record {
            r.identity = who();
        }
    }

    /// The answer is given, with `request_id`.
    pub(crate) fn handled(
        self,
        response: Response<AnswerBody>,
        failed: bool,
        request_id: String,
    ) -> Handled {
        Handled {
            response,
            operation: self.operation,
            failed,
            record: self.record.map(|r| RequestRecord { request_id, ..r }),
        }
    }
}

/// Reads a small request body (an XML document) whole, up to `limit` bytes.
///
/// # Errors
/// [`ErrorKind::EntityTooLarge`] past the limit, [`ErrorKind::IncompleteBody`] when it
/// breaks off.
pub async fn read_document(mut body: RequestBody, limit: usize) -> Result<Bytes, Error> {
    // Read frame by frame rather than through `http_body_util::Limited`, whose error
    // conversion trips the compiler's check that a front's future is `Send`.
    let mut out = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            Error::new(
                ErrorKind::IncompleteBody,
                format!("the request body broke off: {e}"),
            )
        })?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(Error::new(
                    ErrorKind::EntityTooLarge,
                    format!("the request body exceeds {limit} bytes"),
                ));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out.freeze())
}

/// Runs a request's dispatch within the limits' deadline to the start of its answer;
/// a dispatch that streams an upload (`streams_upload`) is bounded by the upload idle
/// timeout instead.
///
/// # Errors
/// The dispatch's own, or [`ErrorKind::Timeout`].
pub async fn within_deadline<T>(
    limits: &ServerLimits,
    streams_upload: bool,
    dispatch: impl Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    match limits.deadline.filter(|_| !streams_upload) {
        None => dispatch.await,
        Some(deadline) => match tokio::time::timeout(deadline, dispatch).await {
            Ok(r) => r,
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                "Your request took too long to answer; try again.",
            )
            .into()),
        },
    }
}

/// An object a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    /// Bucket (container).
    pub bucket: &'a str,
    /// Key (blob name).
    pub key: &'a str,
}

/// A read of an object: GET or HEAD.
#[derive(Debug, Clone, Copy)]
pub struct ReadSpec<'a> {
    /// The object.
    pub object: Target<'a>,
    /// The request's conditional headers; checked by [`resolve_read`].
    pub conditions: &'a Conditions,
    /// The range asked for, if any; resolved by [`resolve_read`].
    pub range: Option<RangeSpec>,
    /// GET (true) or HEAD (false).
    pub with_body: bool,
    /// Whether the body goes to the client's connection untouched — no digest of it,
    /// nothing collected — so that a backend may serve it as bytes only the kernel
    /// reads (a mapped file's pages); whether that connection is TLS is the backend's
    /// to know.
    pub body_untouched: bool,
    /// What the caller may do, for work a backend starts beyond this object on the
    /// caller's behalf (a cache fetching the next listed objects ahead of a reader only
    /// fetches those the caller may read); `None`: no such work.
    pub reader_access: Option<crate::access::Access<'a>>,
}

/// An answered read.
pub struct ObjectRead {
    /// The version served.
    pub info: ObjectInfo,
    /// The range served, `None` for the whole object.
    pub range: Option<ByteRange>,
    /// The bytes of `range` (or of the whole object); `None` for HEAD or nothing to send.
    pub body: Option<AnswerBody>,
    /// `Some(age)` when a cache serves the last version it knows past its freshness
    /// because the origin could not be reached (stale-if-error): how long ago the origin
    /// last confirmed it. Said in [`set_staleness_headers`].
    pub stale: Option<Duration>,
}

/// Marks an answer served stale (stale-if-error), on either front: `Age` (whole
/// seconds since the origin last confirmed the version, RFC 9111) and
/// `x-talon-stale: revalidation-failed`, so that a client or a log can tell. Nothing
/// for a fresh answer.
pub fn set_staleness_headers(h: &mut HeaderMap, stale: Option<Duration>) {
    if let Some(age) = stale {
        crate::answer::set_header(h, "age", &age.as_secs().to_string());
        crate::answer::set_header(h, "x-talon-stale", "revalidation-failed");
    }
}

impl std::fmt::Debug for ObjectRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectRead")
            .field("info", &self.info)
            .field("range", &self.range)
            .finish_non_exhaustive()
    }
}

/// `ETag` and `Last-Modified` of a version, for 304 and 412 answers.
pub fn entity_headers(info: &ObjectInfo) -> Vec<(&'static str, String)> {
    let mut h = vec![("etag", info.etag.clone())];
    if let Some(t) = info.last_modified {
        h.push(("last-modified", crate::dates::format_http_date(t)));
    }
    h
}

/// What a read of the version `info` answers: the conditions checked (304 and 412 carry
/// the version's entity headers), then the range resolved against its size (a 416
/// carries `Content-Range: bytes */size`). Every backend decides a read with this, once
/// it knows which version it serves.
///
/// # Errors
/// [`ErrorKind::NotModified`], [`ErrorKind::PreconditionFailed`],
/// [`ErrorKind::InvalidRange`].
pub fn resolve_read(
    info: &ObjectInfo,
    conditions: &Conditions,
    range: Option<RangeSpec>,
) -> Result<Option<ByteRange>, Failure> {
    let modified = info.last_modified.unwrap_or_else(SystemTime::now);
    if let Err(kind) = conditions.check_read(&info.etag, modified) {
        let message = match kind {
            ErrorKind::NotModified => "Not Modified",
            _ => "At least one of the pre-conditions you specified did not hold",
        };
        return Err(Failure::with_headers(
            Error::new(kind, message),
            entity_headers(info),
        ));
    }
    match range.map(|r| r.resolve(info.size)) {
        None => Ok(None),
        Some(Ok(r)) => Ok(Some(r)),
        Some(Err(u)) => Err(Failure::with_headers(
            Error::new(
                ErrorKind::InvalidRange,
                "The requested range is not satisfiable",
            ),
            vec![("content-range", u.content_range())],
        )),
    }
}

/// Where part `n` of an object lies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartBounds {
    /// The part's bytes; `None` when the part is the whole object.
    pub range: Option<ByteRange>,
    /// How many parts the object has, for a multipart object.
    pub count: Option<u32>,
    /// The version the bounds belong to, when known: a read of another version fails.
    pub etag: Option<String>,
}

/// Where a listing page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListFrom<'a> {
    /// At the first key.
    Start,
    /// After this key (S3's `start-after`).
    AfterKey(&'a str),
    /// At a marker this backend handed out as [`ListResult::next_marker`] (S3's V1
    /// `marker`; a client may also pass a key it listed).
    Marker(&'a str),
    /// At a token this backend handed out as [`ListResult::next_token`] (S3's V2
    /// `continuation-token`).
    Token(&'a str),
}

/// A listing request.
#[derive(Debug, Clone, Copy)]
pub struct ListSpec<'a> {
    /// Only keys with this prefix.
    pub prefix: &'a str,
    /// Roll keys up at this delimiter.
    pub delimiter: Option<&'a str>,
    /// Where the page starts.
    pub from: ListFrom<'a>,
    /// Most entries (objects plus prefixes), at least 1.
    pub max_keys: usize,
    /// Whether each object's user metadata is wanted ([`ListedObject::user_metadata`]).
    pub include_metadata: bool,
}

/// An object in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    /// Key.
    pub key: String,
    /// Last modification.
    pub last_modified: SystemTime,
    /// Quoted entity tag.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
    /// Content type, when the backend knows it from the listing.
    pub content_type: Option<String>,
    /// Base64 `Content-MD5`, when the backend knows it from the listing.
    pub content_md5: Option<String>,
    /// User metadata, when [`ListSpec::include_metadata`] asked for it.
    pub user_metadata: Option<BTreeMap<String, String>>,
}

/// One page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListResult {
    /// Objects, in key order.
    pub objects: Vec<ListedObject>,
    /// Common prefixes, in order, each ending with the delimiter.
    pub common_prefixes: Vec<String>,
    /// Whether more entries follow.
    pub is_truncated: bool,
    /// Where the next page starts, as [`ListFrom::Marker`]; set when truncated.
    pub next_marker: Option<String>,
    /// Where the next page starts, as [`ListFrom::Token`]; set when truncated.
    pub next_token: Option<String>,
}

/// User metadata bytes accepted on a write (S3 documents 2 KiB).
pub const MAX_USER_METADATA_BYTES: usize = 2 * 1024;

/// What a write says about the object besides its bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteSpec {
    /// Content type.
    pub content_type: Option<String>,
    /// User metadata, lower-case names without the protocol's prefix.
    pub user_metadata: BTreeMap<String, String>,
    /// Content headers to keep, by standard name ([`CONTENT_HEADERS`]), as
    /// [`stored_value`] keeps them.
    pub content_headers: BTreeMap<String, String>,
    /// `Expires`, kept as it came.
    pub expires: Option<String>,
    /// `If-Match` of the write, as it came.
    pub if_match: Option<String>,
    /// `If-None-Match` of the write (`*`: only if absent), as it came.
    pub if_none_match: Option<String>,
    /// `If-Modified-Since` of the write, as it came (Azure only).
    pub if_modified_since: Option<String>,
    /// `If-Unmodified-Since` of the write, as it came (Azure only).
    pub if_unmodified_since: Option<String>,
}

impl WriteSpec {
    /// Reads a write's headers: content type, user metadata under `meta_prefix`
    /// (`x-amz-meta-`, `x-ms-meta-`), content headers under `content_prefix` (`""`
    /// for S3, `x-ms-blob-` for Azure), `Expires` and the write conditions.
    ///
    /// # Errors
    /// [`ErrorKind::MetadataTooLarge`] past [`MAX_USER_METADATA_BYTES`].
    pub fn from_headers(
        headers: &HeaderMap,
        content_type_header: &str,
        meta_prefix: &str,
        content_prefix: &str,
    ) -> Result<WriteSpec, Error> {
        let mut user_metadata = BTreeMap::new();
        let mut total = 0;
        for (name, value) in headers {
            if let Some(key) = name.as_str().strip_prefix(meta_prefix) {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                total += key.len() + value.len();
                user_metadata.insert(key.to_owned(), value);
            }
        }
        if total > MAX_USER_METADATA_BYTES {
            return Err(Error::new(
                ErrorKind::MetadataTooLarge,
                format!(
                    "Your metadata headers exceed the maximum allowed metadata size of {MAX_USER_METADATA_BYTES} bytes"
                ),
            ));
        }
        let mut content_headers = BTreeMap::new();
        for name in CONTENT_HEADERS {
            // UTF-8 is kept (a Content-Disposition file name), as S3 and Azure keep it.
            let Some(value) = headers
                .get(format!("{content_prefix}{name}"))
                .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
            else {
                continue;
            };
            if let Some(value) = stored_value(name, value) {
                content_headers.insert(name.to_owned(), value);
            }
        }
        let text = |name: &str| header(headers, name).map(str::to_owned);
        Ok(WriteSpec {
            content_type: text(content_type_header),
            user_metadata,
            content_headers,
            expires: text("expires"),
            if_match: text("if-match"),
            if_none_match: text("if-none-match"),
            if_modified_since: None,
            if_unmodified_since: None,
        })
    }

    /// The write that gives a new object `info`'s properties: its content type,
    /// content headers and user metadata (no conditions).
    pub fn properties_of(info: &ObjectInfo) -> WriteSpec {
        let h = &info.headers;
        let content_headers = crate::content_headers::content_headers_of(h);
        WriteSpec {
            content_type: info.content_type.clone(),
            user_metadata: h.user_metadata.iter().cloned().collect(),
            content_headers,
            ..WriteSpec::default()
        }
    }

    /// Whether a new object written with `self` has the properties `other` gives (the
    /// content type, content headers and user metadata; conditions aside).
    pub fn same_properties(&self, other: &WriteSpec) -> bool {
        self.content_type == other.content_type
            && self.content_headers == other.content_headers
            && self.user_metadata == other.user_metadata
            && self.expires == other.expires
    }

    /// The write's conditions, to check against the version stored now.
    pub fn conditions(&self) -> Conditions {
        let date = |v: &Option<String>| v.as_deref().and_then(crate::dates::parse_http_date);
        Conditions {
            if_match: self.if_match.as_deref().map(EtagList::parse),
            if_none_match: self.if_none_match.as_deref().map(EtagList::parse),
            if_modified_since: date(&self.if_modified_since),
            if_unmodified_since: date(&self.if_unmodified_since),
        }
    }

    /// The write's conditions as headers, to pass on to an origin.
    pub fn condition_headers(&self) -> Vec<(&'static str, String)> {
        [
            ("if-match", &self.if_match),
            ("if-none-match", &self.if_none_match),
            ("if-modified-since", &self.if_modified_since),
            ("if-unmodified-since", &self.if_unmodified_since),
        ]
        .into_iter()
        .filter_map(|(name, v)| v.clone().map(|v| (name, v)))
        .collect()
    }
}

/// An upload's body on its way to a backend: its verified bytes and, once the stream
/// has ended, what they turned out to be ([`crate::upload::settle`]).
#[derive(Debug)]
pub struct Upload {
    /// The verified bytes.
    pub stream: VerifyingStream,
    /// Set when the stream ends.
    pub outcome: UploadOutcome,
    /// A flexible checksum the client sent as a header (known before the body; the
    /// stream verifies it).
    pub checksum: Option<(crate::checksum::ChecksumAlgorithm, String)>,
    /// The flexible checksum an `aws-chunked` body announces in its trailer (known only
    /// at its end).
    pub trailer_checksum: Option<crate::checksum::ChecksumAlgorithm>,
}

/// A stored write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The new version's quoted entity tag.
    pub etag: String,
    /// The verified flexible checksum, answered back to the client.
    pub checksum: Option<(crate::checksum::ChecksumAlgorithm, String)>,
    /// Base64 MD5 of the bytes stored, when the backend knows it.
    pub content_md5: Option<String>,
    /// When the version was stored, when the backend knows it.
    pub last_modified: Option<SystemTime>,
}

/// The blocks of a block blob: each id with its size, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockLists {
    /// The committed blocks (the blob's content).
    pub committed: Vec<(String, u64)>,
    /// Blocks uploaded and not yet committed.
    pub uncommitted: Vec<(String, u64)>,
}

/// A server-side copy.
#[derive(Debug, Clone)]
pub struct CopySpec<'a> {
    /// The source object.
    pub from: Target<'a>,
    /// Conditions on the source (a failed one is 412, never 304).
    pub source_conditions: Conditions,
    /// Conditions on the destination, checked as a write's (S3's `If-Match` and
    /// `If-None-Match`, Azure's four `If-*`).
    pub destination: Conditions,
    /// New metadata, or `None` to copy the source's.
    pub replace: Option<WriteSpec>,
}

/// What GetObjectAttributes reports of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectAttributes {
    /// The version's metadata.
    pub info: ObjectInfo,
    /// The sizes of a multipart object's parts, in order; `None` for an object not
    /// uploaded in parts (or one whose parts the backend cannot tell).
    pub part_sizes: Option<Vec<u64>>,
}

/// A part copied from an object's bytes (UploadPartCopy).
#[derive(Debug, Clone)]
pub struct PartCopySpec<'a> {
    /// The source object.
    pub from: Target<'a>,
    /// The source's bytes to copy (`x-amz-copy-source-range`), or `None` for all.
    pub range: Option<ByteRange>,
    /// Conditions on the source (a failed one is 412, never 304).
    pub source_conditions: Conditions,
}

/// A finished copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    /// The copy's quoted entity tag.
    pub etag: String,
    /// The copy's modification time.
    pub last_modified: SystemTime,
}

/// A part of a multipart upload in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartSummary {
    /// Part number.
    pub number: u32,
    /// Quoted entity tag.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
    /// When it was uploaded.
    pub last_modified: SystemTime,
}

/// A multipart upload in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadSummary {
    /// Key.
    pub key: String,
    /// Upload id.
    pub upload_id: String,
    /// When it was created.
    pub initiated: SystemTime,
}

/// An operation of either protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// An S3 operation.
    S3(S3Operation),
    /// An Azure Blob operation.
    Azure(AzureOperation),
}

impl Operation {
    /// The operation's name as its protocol's reference spells it.
    pub fn name(self) -> &'static str {
        match self {
            Operation::S3(op) => op.name(),
            Operation::Azure(op) => op.name(),
        }
    }
}

/// A request a backend takes as it is, to relay to an origin of the same protocol (a
/// proxy's way with operations it does not interpret). Authentication parameters of the
/// client are already gone from `query`.
#[derive(Debug)]
pub struct Relay<'a> {
    /// The operation.
    pub operation: Operation,
    /// Bucket, when named.
    pub bucket: Option<&'a str>,
    /// Key, when named.
    pub key: Option<&'a str>,
    /// The raw query string, without the client's authentication parameters.
    pub query: String,
    /// The request's headers (the backend picks what it passes on).
    pub headers: &'a HeaderMap,
    /// What the request carries.
    pub body: RelayBody,
}

/// The body of a relayed request.
#[derive(Debug)]
pub enum RelayBody {
    /// None.
    Empty,
    /// A small document, read whole (XML).
    Document(Bytes),
    /// An upload, verified as it streams (boxed: the stream is large).
    Upload(Box<Upload>),
}

fn not_implemented(what: &str) -> Failure {
    Error::new(
        ErrorKind::NotImplemented,
        format!("{what} is not implemented"),
    )
    .into()
}

/// Where a front's objects come from and go to.
///
/// Requests reach a backend classified, authenticated, with their bodies wrapped in a
/// verifying stream; a backend answers in this vocabulary and the front writes the
/// protocol's answer. Errors are [`Failure`]s: the protocol's error answer is written
/// from their [`ErrorKind`] and message, so a backend's messages are the protocol's
/// short text, never internals.
pub trait ObjectBackend: Send + Sync {
    /// Called for every request once it is classified, before it is authenticated: a
    /// backend may count it or refuse it (the origin stub's fault injection).
    fn admit(&self, operation: &'static str) -> impl Future<Output = Result<(), Failure>> + Send {
        let _ = operation;
        async { Ok(()) }
    }

    /// Every bucket.
    fn list_buckets(&self) -> impl Future<Output = Result<Vec<BucketSummary>, Failure>> + Send;

    /// Whether `bucket` exists ([`ErrorKind::NoSuchBucket`] if not), and what the
    /// backend knows of it.
    fn head_bucket(
        &self,
        bucket: &str,
    ) -> impl Future<Output = Result<BucketSummary, Failure>> + Send;

    /// Creates a bucket; gives what the backend knows of it.
    fn create_bucket(
        &self,
        bucket: &str,
    ) -> impl Future<Output = Result<BucketSummary, Failure>> + Send {
        let _ = bucket;
        async { Err(not_implemented("CreateBucket")) }
    }

    /// Deletes an empty bucket.
    fn delete_bucket(&self, bucket: &str) -> impl Future<Output = Result<(), Failure>> + Send {
        let _ = bucket;
        async { Err(not_implemented("DeleteBucket")) }
    }

    /// One page of a bucket's keys.
    fn list(
        &self,
        bucket: &str,
        spec: &ListSpec<'_>,
    ) -> impl Future<Output = Result<ListResult, Failure>> + Send;

    /// Reads an object: which version, decided with [`resolve_read`], and its bytes.
    fn read(&self, read: ReadSpec<'_>) -> impl Future<Output = Result<ObjectRead, Failure>> + Send;

    /// Where part `number` (1..=10000) of an object lies. By default an object has one
    /// part, the whole of it.
    fn part(
        &self,
        object: Target<'_>,
        number: u32,
    ) -> impl Future<Output = Result<PartBounds, Failure>> + Send {
        let _ = object;
        async move {
            if number == 1 {
                Ok(PartBounds::default())
            } else {
                Err(Error::new(
                    ErrorKind::InvalidPartNumber,
                    "The requested partnumber is not satisfiable",
                )
                .into())
            }
        }
    }

    /// Stores an object from a verified upload; nothing is stored unless the upload
    /// settles verified.
    fn put(
        &self,
        object: Target<'_>,
        upload: Upload,
        write: WriteSpec,
    ) -> impl Future<Output = Result<Written, Failure>> + Send;

    /// Deletes an object if `conditions` hold for it ([`DeleteConditions::check`]:
    /// [`ErrorKind::PreconditionFailed`] otherwise, and nothing changes). When there was
    /// none the answer is [`ErrorKind::NoSuchKey`] if `must_exist` (Azure answers 404);
    /// otherwise it may be either (S3 answers 204 all the same, so a backend need not
    /// ask first).
    fn delete(
        &self,
        object: Target<'_>,
        must_exist: bool,
        conditions: &DeleteConditions,
    ) -> impl Future<Output = Result<(), Failure>> + Send;

    /// Copies an object within the backend.
    fn copy(
        &self,
        to: Target<'_>,
        copy: CopySpec<'_>,
    ) -> impl Future<Output = Result<Copied, Failure>> + Send {
        let _ = (to, copy);
        async { Err(not_implemented("CopyObject")) }
    }

    /// Starts a multipart upload; gives its id.
    fn create_upload(
        &self,
        object: Target<'_>,
        write: WriteSpec,
    ) -> impl Future<Output = Result<String, Failure>> + Send {
        let _ = (object, write);
        async { Err(not_implemented("CreateMultipartUpload")) }
    }

    /// Stores one part of a multipart upload.
    fn upload_part(
        &self,
        object: Target<'_>,
        upload_id: &str,
        number: u32,
        upload: Upload,
    ) -> impl Future<Output = Result<Written, Failure>> + Send {
        let _ = (object, upload_id, number, upload);
        async { Err(not_implemented("UploadPart")) }
    }

    /// An object's attributes (GetObjectAttributes).
    fn object_attributes(
        &self,
        object: Target<'_>,
    ) -> impl Future<Output = Result<ObjectAttributes, Failure>> + Send {
        let _ = object;
        async { Err(not_implemented("GetObjectAttributes")) }
    }

    /// Stores one part of a multipart upload copied from another object's bytes; the
    /// part's entity tag and time.
    fn upload_part_copy(
        &self,
        object: Target<'_>,
        upload_id: &str,
        number: u32,
        copy: PartCopySpec<'_>,
    ) -> impl Future<Output = Result<Copied, Failure>> + Send {
        let _ = (object, upload_id, number, copy);
        async { Err(not_implemented("UploadPartCopy")) }
    }

    /// Completes a multipart upload from `parts` (number, quoted entity tag) if
    /// `conditions` (S3's `If-Match` / `If-None-Match`) hold for what the key holds now,
    /// as [`Conditions::check_write`] decides; gives the object's entity tag.
    fn complete_upload(
        &self,
        object: Target<'_>,
        upload_id: &str,
        parts: Vec<(u32, String)>,
        conditions: &Conditions,
    ) -> impl Future<Output = Result<String, Failure>> + Send {
        let _ = (object, upload_id, parts, conditions);
        async { Err(not_implemented("CompleteMultipartUpload")) }
    }

    /// Abandons a multipart upload.
    fn abort_upload(
        &self,
        object: Target<'_>,
        upload_id: &str,
    ) -> impl Future<Output = Result<(), Failure>> + Send {
        let _ = (object, upload_id);
        async { Err(not_implemented("AbortMultipartUpload")) }
    }

    /// The parts of a multipart upload so far.
    fn list_parts(
        &self,
        object: Target<'_>,
        upload_id: &str,
    ) -> impl Future<Output = Result<Vec<PartSummary>, Failure>> + Send {
        let _ = (object, upload_id);
        async { Err(not_implemented("ListParts")) }
    }

    /// The multipart uploads in progress in a bucket.
    fn list_uploads(
        &self,
        bucket: &str,
    ) -> impl Future<Output = Result<Vec<UploadSummary>, Failure>> + Send {
        let _ = bucket;
        async { Err(not_implemented("ListMultipartUploads")) }
    }

    /// Stores one uncommitted block of a block blob; gives its base64 MD5.
    fn put_block(
        &self,
        object: Target<'_>,
        block_id: &str,
        upload: Upload,
    ) -> impl Future<Output = Result<String, Failure>> + Send {
        let _ = (object, block_id, upload);
        async { Err(not_implemented("PutBlock")) }
    }

    /// Commits a block blob from the blocks named.
    fn put_block_list(
        &self,
        object: Target<'_>,
        blocks: Vec<BlockListItem>,
        write: WriteSpec,
    ) -> impl Future<Output = Result<Written, Failure>> + Send {
        let _ = (object, blocks, write);
        async { Err(not_implemented("PutBlockList")) }
    }

    /// The committed and uncommitted blocks of a blob.
    fn get_block_list(
        &self,
        object: Target<'_>,
    ) -> impl Future<Output = Result<BlockLists, Failure>> + Send {
        let _ = object;
        async { Err(not_implemented("GetBlockList")) }
    }

    /// Whether this backend relays `operation` as it is ([`ObjectBackend::relay`])
    /// rather than through the typed method above.
    fn relays(&self, operation: Operation) -> bool {
        let _ = operation;
        false
    }

    /// Relays a request to an origin of the same protocol and gives its answer.
    fn relay(
        &self,
        relay: Relay<'_>,
    ) -> impl Future<Output = Result<http::Response<AnswerBody>, Failure>> + Send {
        let name = relay.operation.name();
        async move { Err(not_implemented(name)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line logged while an answer body streams — after its handler returned and
    /// left the request's span — still carries that span's request id.
    #[test]
    fn a_line_logged_while_the_body_streams_names_the_request() {
        let lines = crate::answer::over_capacity_tests::logged(|| {
            let body = tracing::info_span!("s3", request_id = "REQ-7").in_scope(|| {
                stream_body(futures_util::stream::poll_fn(|_| {
                    tracing::info!("retrying a piece on the next worker");
                    std::task::Poll::Ready(None)
                }))
            });
            let mut body = std::pin::pin!(body);
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let end = http_body::Body::poll_frame(body.as_mut(), &mut cx);
            assert!(matches!(end, std::task::Poll::Ready(None)));
        });
        let line = lines
            .lines()
            .find(|l| l.contains("retrying a piece"))
            .unwrap_or_else(|| panic!("no line logged: {lines}"));
        assert!(line.contains("s3{request_id=\"REQ-7\"}"), "{line}");
    }
}
