//! The origin client: what a Talon process uses to talk to the object store behind it,
//! S3 or Azure Blob, with the right signature.
//!
//! It does the few operations a read-through cache needs — HEAD, a ranged GET pinned to
//! one version with `If-Match`, a listing page, put and delete — and turns every answer
//! into an [`ObjectInfo`] or an [`Error`] whose [`ErrorKind`] says what happened
//! (a 412 on a pinned GET is [`ErrorKind::PreconditionFailed`]: the object changed).
//! Retries and backoff belong to the caller, which knows its budget.
//!
//! What differs between the two protocols (signing, addressing and naming rules, the
//! range header, listings) is behind one interface, [`Dialect`], with one
//! implementation per backend: [`s3`] and [`azure`]. This file holds what they share.

mod azure;
pub mod azure_credentials;
mod blocks;
pub mod check;
mod compact_info;
pub use compact_info::CompactInfo;
mod copy;
pub mod credentials;
pub mod request_limit;
pub use blocks::OriginBlockLists;
pub use copy::{CopiedProperties, OriginCopy, destination_condition_headers};
mod s3;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http::{Method, StatusCode};

use crate::azure::shared_key::AccountKey;
use crate::checksum::ChecksumAlgorithm;
use crate::conditional::quote_etag;
use crate::dates::parse_http_date;
use crate::error::{Error, ErrorKind, Result};
use crate::names;
use crate::range::{ByteRange, RangeSpec, parse_content_range};
use crate::s3::chunked::AwsChunkedTrailerEncoder;
use crate::s3::sigv4::S3Credentials;
use crate::uri_encoding::{encode_path, encode_strict};
use talon_core::wire::HeaderSet;
use talon_core::{Namespace, ObjectId};

/// The Azure REST version this client speaks.
pub const AZURE_API_VERSION: &str = "2025-01-05";

/// Where the origin is and how to authenticate to it. Its `Debug` shows no secret:
/// credentials and keys redact themselves, and a SAS shows as `<redacted>`.
#[derive(Clone)]
pub enum OriginConfig {
    /// An S3 endpoint.
    S3 {
        /// Base URL without bucket, e.g. `http://127.0.0.1:9000` or
        /// `https://s3.eu-west-1.amazonaws.com`.
        endpoint: String,
        /// Signing region.
        region: String,
        /// Credentials; anonymous when `None`.
        credentials: Option<S3Credentials>,
        /// Put the bucket in the host name instead of the path.
        virtual_hosted: bool,
    },
    /// An Azure Blob endpoint.
    Azure {
        /// The account's base URL: `https://<account>.blob.core.windows.net` or, for an
        /// emulator, `http://127.0.0.1:10000/<account>`.
        endpoint: String,
        /// Account name (for Shared Key).
        account: String,
        /// Account key for Shared Key; anonymous (or SAS) when `None`.
        key: Option<AccountKey>,
        /// A SAS query string to append to every request, without `?`.
        sas: Option<String>,
    },
}

impl std::fmt::Debug for OriginConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OriginConfig::S3 {
                endpoint,
                region,
                credentials,
                virtual_hosted,
            } => f
                .debug_struct("S3")
                .field("endpoint", endpoint)
                .field("region", region)
                .field("credentials", credentials)
                .field("virtual_hosted", virtual_hosted)
                .finish(),
            OriginConfig::Azure {
                endpoint,
                account,
                key,
                sas,
            } => f
                .debug_struct("Azure")
                .field("endpoint", endpoint)
                .field("account", account)
                .field("key", key)
                .field("sas", &sas.as_ref().map(|_| "<redacted>"))
                .finish(),
        }
    }
}

/// Longest wait for the start of an origin's answer to a request that carries no
/// streamed body, and for each read of an answer's body after that: a stalled origin
/// fails the request instead of pinning a fill and its origin slot (SEC-12).
pub const ORIGIN_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest error document read from an origin, in bytes.
pub const MAX_ORIGIN_ERROR_BODY: usize = 1 << 20;

/// Largest listing document read from an origin, in bytes.
pub const MAX_ORIGIN_LISTING_BODY: usize = 16 << 20;

/// What the origin says about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Size in bytes.
    pub size: u64,
    /// Quoted entity tag: the version the cache keys blocks by.
    pub etag: String,
    /// Last modification time, when the origin gave one.
    pub last_modified: Option<SystemTime>,
    /// Content type, when the origin gave one.
    pub content_type: Option<String>,
    /// The other headers a reader gives back: `Content-MD5` (or Azure's
    /// `x-ms-blob-content-md5` on a ranged read), `Content-Encoding`,
    /// `Content-Language`, `Content-Disposition`, `Cache-Control` (empty when
    /// absent), and user metadata with names lower-case, without the
    /// protocol's prefix (`x-amz-meta-`, `x-ms-meta-`), sorted.
    pub headers: HeaderSet,
}

impl ObjectInfo {
    /// Bytes this metadata holds, inline and on the heap (for caches' byte bounds).
    pub fn held_bytes(&self) -> u64 {
        let heap = self.etag.len()
            + self.content_type.as_ref().map_or(0, String::len)
            + self.headers.heap_bytes();
        (std::mem::size_of::<ObjectInfo>() + heap) as u64
    }
}

/// A stream of body bytes.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes>> + Send + 'static>>;

/// What a conditional `HEAD` said of a remembered version
/// ([`OriginClient::revalidate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revalidation {
    /// The object is still at that version; the metadata when the origin sent it (an
    /// origin that ignored the condition), `None` after a 304.
    Current(Option<ObjectInfo>),
    /// The object has another version now: its metadata.
    Changed(ObjectInfo),
}

/// The answer to a GET: the object's metadata, the range served, and its bytes.
pub struct GetResponse {
    /// Metadata of the object (size is the whole object's size).
    pub info: ObjectInfo,
    /// The range the body covers; `None` for the whole object.
    pub range: Option<ByteRange>,
    /// Whether the answer states the object's size (`info.size`): a 200's
    /// Content-Length, or the total of a 206's Content-Range. A 206 with an unknown total
    /// (`bytes a-b/*`) does not, and `info.size` is then only the range's length.
    pub size_stated: bool,
    /// The body, streamed.
    pub body: ByteStream,
}

impl std::fmt::Debug for GetResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GetResponse")
            .field("info", &self.info)
            .field("range", &self.range)
            .finish_non_exhaustive()
    }
}

/// One page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListResult {
    /// Objects: key, size, quoted entity tag.
    pub objects: Vec<ListedEntry>,
    /// Common prefixes.
    pub common_prefixes: Vec<String>,
    /// Token for the next page, `None` on the last.
    pub next_token: Option<String>,
}

/// An object in a [`ListResult`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedEntry {
    /// Key (decoded).
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// Quoted entity tag.
    pub etag: String,
    /// Last modification, when the listing says.
    pub last_modified: Option<SystemTime>,
    /// Content type, when the listing says (Azure does, S3 does not).
    pub content_type: Option<String>,
    /// Base64 MD5 of the content, when the listing says (Azure does, S3 does not).
    pub content_md5: Option<String>,
    /// User metadata (names lower-case, without prefix), when it was asked for and the
    /// listing carries it (Azure with `include=metadata`; never S3).
    pub user_metadata: Option<BTreeMap<String, String>>,
}

/// A request body for the origin.
#[derive(Debug)]
pub enum OriginBody {
    /// No body.
    Empty,
    /// A body in memory; S3 signs its SHA-256.
    Bytes(Bytes),
    /// A streamed body of known length; S3 signs it as `UNSIGNED-PAYLOAD`.
    Stream {
        /// The bytes.
        body: reqwest::Body,
        /// Their number (sent as `Content-Length`).
        len: u64,
    },
    /// An `aws-chunked` body with a checksum trailer (S3 only), signed as
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`.
    ChunkedWithTrailer {
        /// The encoded bytes.
        body: reqwest::Body,
        /// Their number, framing included (sent as `Content-Length`).
        len: u64,
    },
}

impl OriginBody {
    /// Bytes in the body.
    pub fn len(&self) -> u64 {
        match self {
            OriginBody::Empty => 0,
            OriginBody::Bytes(b) => b.len() as u64,
            OriginBody::Stream { len, .. } | OriginBody::ChunkedWithTrailer { len, .. } => *len,
        }
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A request relayed to the origin as it is, re-signed with the client's own identity
/// (the gateway's pass-through of operations it does not interpret).
#[derive(Debug)]
pub struct ForwardRequest<'a> {
    /// Method.
    pub method: Method,
    /// Bucket or container; `None` for service-level requests.
    pub bucket: Option<&'a str>,
    /// Key or blob name.
    pub key: Option<&'a str>,
    /// The raw query string (percent-encoded, without authentication parameters).
    pub query: &'a str,
    /// Headers to send (lower-case names), without authentication headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: OriginBody,
}

/// Pages an emulated start-after reads in one call before it answers an empty page
/// with the token to go on from.
const MAX_PAGES_SKIPPED: usize = 16;

/// Options of a listing page.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListOptions<'a> {
    /// Only keys with this prefix.
    pub prefix: &'a str,
    /// Roll keys up at this delimiter.
    pub delimiter: Option<&'a str>,
    /// Continuation token (S3) or marker (Azure) of the page to fetch.
    pub token: Option<&'a str>,
    /// Start after this key: S3's `start-after`; at an Azure origin, which has none,
    /// emulated by [`OriginClient::list_with`] (pages read from the start, keys and
    /// prefixes at or before it dropped).
    pub start_after: Option<&'a str>,
    /// Most entries.
    pub max_keys: Option<usize>,
    /// Azure only: ask for each blob's user metadata (`include=metadata`). An S3
    /// listing never carries metadata.
    pub include_metadata: bool,
}

/// A bucket (container) of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketSummary {
    /// Name.
    pub name: String,
    /// Creation time when the origin reports it.
    pub created: Option<SystemTime>,
}

/// What one backend does its own way; [`OriginClient`] does the rest the same for both.
trait Dialect: Send + Sync {
    /// The base URL (no bucket).
    fn endpoint(&self) -> &str;
    /// Whether the bucket goes in the host name.
    fn virtual_hosted(&self) -> bool;
    /// Checks a bucket (container) name by this origin's rules.
    fn check_bucket(&self, bucket: &str) -> Result<()>;
    /// A query string added to every request (an Azure SAS), without `?`.
    ///
    /// # Errors
    /// A refreshed SAS that expired and could not be refreshed.
    fn extra_query(&self) -> Result<Option<std::borrow::Cow<'_, str>>> {
        Ok(None)
    }
    /// Adds the headers that authenticate the request (and the protocol's own, such as
    /// `x-ms-version`) to `headers`.
    fn authorize(
        &self,
        method: &Method,
        url: &str,
        host: &str,
        headers: &mut Vec<(String, String)>,
        body: &OriginBody,
        now: SystemTime,
    ) -> Result<()>;
    /// The request header that asks for a range.
    fn range_header(&self) -> &'static str;
    /// Headers of a whole-object GET.
    fn whole_object_headers(&self) -> Vec<(&'static str, String)>;
    /// Whether `bytes=-n` is understood.
    fn has_suffix_ranges(&self) -> bool;
    /// Whether a listing can start after a given key (S3's `start-after`).
    fn has_start_after(&self) -> bool;
    /// Whether every write makes a new ETag, its metadata included, so that a 304 to
    /// `If-None-Match` proves the metadata remembered current (Azure). S3's ETag is the
    /// content's digest: an object rewritten with the same bytes and new metadata keeps
    /// it, and only a full `HEAD` tells.
    fn etag_changes_with_every_write(&self) -> bool;
    /// Whether an upload may carry its checksum in an `aws-chunked` trailer.
    fn takes_trailer_checksums(&self) -> bool;
    /// Headers every object PUT carries.
    fn put_headers(&self) -> Vec<(&'static str, String)>;
    /// The query of a bucket (container) listing.
    fn list_buckets_query(&self) -> &'static str;
    /// Reads a bucket listing.
    fn parse_buckets(&self, body: &[u8]) -> Result<Vec<BucketSummary>>;
    /// The query that names a bucket (container) itself: its HEAD, create and delete.
    fn bucket_query(&self) -> &'static str;
    /// The protocol's own query parameters of a key listing (prefix and delimiter are
    /// added by the caller).
    fn list_query(&self, options: &ListOptions<'_>) -> Vec<(&'static str, String)>;
    /// Reads a key listing page.
    fn parse_listing(&self, body: &[u8], include_metadata: bool) -> Result<ListResult>;
}

/// How a client reaches its origin, for which ambient credentials it may send there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndpointTransport {
    /// `https://`.
    Tls,
    /// `http://` to a loopback address (an emulator, a test stand-in).
    PlainLoopback,
    /// `http://` to another host.
    PlainRemote,
}

impl EndpointTransport {
    fn of(client: &OriginClient) -> EndpointTransport {
        let Ok(url) = reqwest::Url::parse(client.dialect.endpoint()) else {
            return EndpointTransport::PlainRemote;
        };
        let host = url.host_str().unwrap_or_default();
        let loopback = host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|a| a.is_loopback());
        match (url.scheme(), loopback) {
            ("https", _) => EndpointTransport::Tls,
            (_, true) => EndpointTransport::PlainLoopback,
            _ => EndpointTransport::PlainRemote,
        }
    }
}

/// The Azure chain's choice for an origin reached over `transport`: the instance
/// metadata service only over TLS; whether the source gives bearer tokens.
fn azure_chain_for(
    env: &dyn Fn(&str) -> Option<String>,
    sas_file: Option<&std::path::Path>,
    transport: EndpointTransport,
) -> Option<AzureChoice> {
    let choice = azure_credentials::default_azure_chain(env, sas_file)
        .filter(|c| !c.last_resort || transport == EndpointTransport::Tls)?;
    Some(AzureChoice {
        bearer: sas_file.is_none(),
        source: choice.source,
        last_resort: choice.last_resort,
    })
}

/// [`credentials::ChainChoice`] for Azure, with whether it gives bearer tokens.
struct AzureChoice {
    source: Box<dyn credentials::Source<azure_credentials::AzureAuth>>,
    last_resort: bool,
    bearer: bool,
}

/// Credentials a client signs with that their own task keeps current.
#[derive(Clone)]
enum Refreshed {
    /// S3 keys.
    S3(Arc<credentials::RefreshingCredentials>),
    /// An Azure token or SAS.
    Azure(Arc<credentials::Refreshing<azure_credentials::AzureAuth>>),
}

fn dialect(config: &OriginConfig, refreshed: Option<Refreshed>) -> Arc<dyn Dialect> {
    match config.clone() {
        OriginConfig::S3 {
            endpoint,
            region,
            credentials,
            virtual_hosted,
        } => Arc::new(s3::S3Dialect {
            endpoint,
            region,
            credentials: match refreshed {
                Some(Refreshed::S3(r)) => s3::Signing::Refreshing(r),
                _ => credentials.map_or(s3::Signing::Anonymous, s3::Signing::Static),
            },
            virtual_hosted,
        }),
        OriginConfig::Azure {
            endpoint,
            account,
            key,
            sas,
        } => Arc::new(azure::AzureDialect {
            endpoint,
            account,
            key,
            sas,
            refreshing: match refreshed {
                Some(Refreshed::Azure(r)) => Some(r),
                _ => None,
            },
        }),
    }
}

/// A client for one origin.
#[derive(Clone)]
pub struct OriginClient {
    /// Requests without a streamed body: bounded by [`ORIGIN_READ_TIMEOUT`].
    http: reqwest::Client,
    /// Uploads, whose answer may rightly come only after a long body: no read timeout
    /// (their bodies are bounded by the gateway's upload idle timeout).
    uploads: reqwest::Client,
    config: OriginConfig,
    dialect: Arc<dyn Dialect>,
    /// Every request's turn per prefix ([`request_limit`]); shared by clones.
    limiter: Option<Arc<request_limit::PrefixRequestLimiter>>,
    /// Credentials kept current by their own task, where the client signs with them.
    refreshing: Option<Refreshed>,
}

impl std::fmt::Debug for OriginClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The configuration's own Debug redacts its secrets.
        f.debug_struct("OriginClient")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A transport failure as an error. The message names no URL (SEC-18: it reached
/// clients, and with a SAS it would carry the signature); the log has the details.
fn transport(err: reqwest::Error) -> Error {
    let kind = if err.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::ServiceUnavailable
    };
    tracing::debug!(error = %err, "origin request failed");
    let err = err.without_url();
    // With its causes (connection refused, a TLS failure), which name no URL either.
    Error::new(
        kind,
        format!("origin request failed: {}", talon_core::error_line(&err)),
    )
    .with_source(err)
}

/// The quoted ETag of a write the origin answered.
///
/// # Errors
/// [`ErrorKind::InternalError`] when the answer has none (`what` names the write).
fn written_etag(resp: reqwest::Response, what: &str) -> Result<String> {
    resp.headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .map(quote_etag)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InternalError,
                format!("origin answered {what} without an ETag"),
            )
        })
}

/// Reads an answer's body, at most `max` bytes.
async fn read_capped(resp: reqwest::Response, max: usize) -> Result<Bytes> {
    let mut body = resp.bytes_stream();
    let mut out = bytes::BytesMut::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(transport)?;
        if out.len() + chunk.len() > max {
            return Err(Error::new(
                ErrorKind::InternalError,
                format!("the origin's answer is larger than {max} bytes"),
            ));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}

/// How long an idle keep-alive connection to the origin is kept for reuse: less than
/// the shortest idle timeout origins close connections after (Node's 5 s, Azurite's).
/// A connection the server closes just as a request is sent on it fails that request
/// ("error sending request"), and a streamed upload cannot be sent again; a connection
/// dropped here first is never picked.
pub const ORIGIN_POOL_IDLE: Duration = Duration::from_secs(4);

impl OriginClient {
    /// Creates a client with a connect timeout and a pool of keep-alive connections.
    ///
    /// # Errors
    /// [`ErrorKind::InternalError`] when the TLS backend cannot be initialised.
    pub fn new(config: OriginConfig) -> Result<OriginClient> {
        OriginClient::with_read_timeout(config, ORIGIN_READ_TIMEOUT)
    }

    /// [`OriginClient::new`] with another read timeout than [`ORIGIN_READ_TIMEOUT`].
    ///
    /// # Errors
    /// As [`OriginClient::new`].
    pub fn with_read_timeout(config: OriginConfig, read_timeout: Duration) -> Result<OriginClient> {
        let builder = || {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .pool_idle_timeout(ORIGIN_POOL_IDLE)
        };
        let built = |r: reqwest::Result<reqwest::Client>| {
            r.map_err(|e| {
                Error::new(ErrorKind::InternalError, "cannot build the HTTP client").with_source(e)
            })
        };
        let http = built(builder().read_timeout(read_timeout).build())?;
        let uploads = built(builder().build())?;
        Ok(OriginClient {
            http,
            uploads,
            dialect: dialect(&config, None),
            config,
            limiter: None,
            refreshing: None,
        })
    }

    /// This client signing its S3 requests with `credentials`, kept current by their
    /// own task ([`credentials::RefreshingCredentials`]), instead of the configuration's
    /// keys. No effect on an Azure origin.
    pub fn with_s3_credentials(
        mut self,
        credentials: Arc<credentials::RefreshingCredentials>,
    ) -> OriginClient {
        let refreshed = Refreshed::S3(credentials);
        self.dialect = dialect(&self.config, Some(refreshed.clone()));
        self.refreshing = Some(refreshed);
        self
    }

    /// This client authorizing its Azure requests with a token or SAS kept current by
    /// its own task, instead of the configuration's key or SAS. No effect on an S3
    /// origin.
    pub fn with_azure_credentials(
        mut self,
        credentials: Arc<credentials::Refreshing<azure_credentials::AzureAuth>>,
    ) -> OriginClient {
        let refreshed = Refreshed::Azure(credentials);
        self.dialect = dialect(&self.config, Some(refreshed.clone()));
        self.refreshing = Some(refreshed);
        self
    }

    /// What refreshing the client's credentials did so far; `None` for fixed ones or
    /// none.
    pub fn credential_stats(&self) -> Option<credentials::RefreshStats> {
        self.refreshing.as_ref().map(|r| match r {
            Refreshed::S3(c) => c.stats(),
            Refreshed::Azure(c) => c.stats(),
        })
    }

    /// This client with every request first taking its turn under `limit`
    /// ([`request_limit`]): past the queue, a request is refused with
    /// [`ErrorKind::SlowDown`] and never sent.
    pub fn with_request_limit(mut self, limit: request_limit::RequestLimit) -> OriginClient {
        self.limiter = Some(Arc::new(request_limit::PrefixRequestLimiter::new(limit)));
        self
    }

    /// What the request limit did so far (all zero without one).
    pub fn request_limit_stats(&self) -> request_limit::RequestLimitStats {
        self.limiter.as_ref().map(|l| l.stats()).unwrap_or_default()
    }

    /// The configuration this client was made with.
    pub fn config(&self) -> &OriginConfig {
        &self.config
    }

    /// Fetches an object's metadata.
    ///
    /// # Errors
    /// The origin's error as a kind ([`ErrorKind::NoSuchKey`], ...).
    pub async fn head(&self, bucket: &str, key: &str) -> Result<ObjectInfo> {
        let resp = self
            .send_head(bucket, key, self.dialect.whole_object_headers())
            .await?;
        let resp = check(resp).await?;
        object_info(resp.headers(), None)
    }

    /// Sends an object `HEAD` with `headers`; the answer whatever its status.
    async fn send_head(
        &self,
        bucket: &str,
        key: &str,
        headers: Vec<(&str, String)>,
    ) -> Result<reqwest::Response> {
        self.send(
            Method::HEAD,
            Some(bucket),
            Some(key),
            "",
            &headers,
            OriginBody::Empty,
        )
        .await
    }

    /// Asks whether an object is still the version `known` describes, its metadata
    /// included. Where every write makes a new ETag (Azure) the request is conditional
    /// (`HEAD` with `If-None-Match`): a 304 whose `Last-Modified` (when it has one) is
    /// the one remembered proves nothing changed, and costs no headers. Where it does
    /// not (S3: the same bytes rewritten with new metadata keep their ETag), or when the
    /// 304's `Last-Modified` moved (an origin whose ETags are digests behind an Azure
    /// API, such as the origin stub), it is a plain `HEAD`, whose metadata is returned.
    /// An origin that ignores the condition answers 200 with the same ETag; that is
    /// [`Revalidation::Current`] too, carrying the headers it sent.
    ///
    /// # Errors
    /// As [`head`](Self::head): [`ErrorKind::NoSuchKey`] when the object is gone.
    pub async fn revalidate(
        &self,
        bucket: &str,
        key: &str,
        known: &ObjectInfo,
    ) -> Result<Revalidation> {
        let same = |info: ObjectInfo| {
            if crate::conditional::same_version(&info.etag, &known.etag) {
                Revalidation::Current(Some(info))
            } else {
                Revalidation::Changed(info)
            }
        };
        if self.dialect.etag_changes_with_every_write() {
            let mut headers = self.dialect.whole_object_headers();
            headers.push(("if-none-match", quote_etag(&known.etag)));
            let resp = self.send_head(bucket, key, headers).await?;
            if resp.status() != StatusCode::NOT_MODIFIED {
                let resp = check(resp).await?;
                return Ok(same(object_info(resp.headers(), None)?));
            }
            let modified = resp
                .headers()
                .get("last-modified")
                .and_then(|v| v.to_str().ok())
                .and_then(parse_http_date);
            if modified.is_none() || modified == known.last_modified {
                return Ok(Revalidation::Current(None));
            }
        }
        Ok(same(self.head(bucket, key).await?))
    }

    /// Reads exactly `range` of version `version` of an object, for a cache fill: the
    /// request is pinned with `If-Match`, and the answer must be that range (or the
    /// whole object when `range` is all of it), of that version, and exactly that long.
    /// An origin or proxy that ignores `If-Match` and answers another version is caught
    /// by its ETag (SEC-17), so a block keyed by one version never holds another's bytes.
    ///
    /// # Errors
    /// [`ErrorKind::PreconditionFailed`] when the origin holds another version,
    /// [`ErrorKind::InternalError`] for another range, [`ErrorKind::IncompleteBody`]
    /// for a body of the wrong length, and the errors of [`OriginClient::get`].
    pub async fn get_pinned_range(
        &self,
        bucket: &str,
        key: &str,
        range: ByteRange,
        version: &str,
    ) -> Result<Bytes> {
        let resp = self.get(bucket, key, Some(range), Some(version)).await?;
        if !crate::conditional::same_version(&resp.info.etag, version) {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "the origin answered version {} for a read pinned to {version}",
                    resp.info.etag
                ),
            ));
        }
        let mut buf = bytes::BytesMut::with_capacity(usize::try_from(range.len()).unwrap_or(0));
        let mut body = resp.body;
        while let Some(chunk) = body.next().await {
            buf.extend_from_slice(&chunk?);
            if buf.len() as u64 > range.len() {
                break;
            }
        }
        if buf.len() as u64 != range.len() {
            return Err(Error::new(
                ErrorKind::IncompleteBody,
                format!("the origin sent {} of {} bytes", buf.len(), range.len()),
            ));
        }
        Ok(buf.freeze())
    }

    /// Reads an object, or a range of it, optionally pinned to a version with `If-Match`:
    /// exactly the bytes asked for or an error
    /// ([`check_served_exactly`](crate::range::check_served_exactly)); `range` in the
    /// answer is `None` when the whole object was asked for, or served as the whole of a
    /// range that is the whole object.
    ///
    /// # Errors
    /// [`ErrorKind::PreconditionFailed`] when the pinned version is gone,
    /// [`ErrorKind::InternalError`] for other bytes than asked,
    /// [`ErrorKind::InvalidRange`], [`ErrorKind::NoSuchKey`], transport errors as
    /// [`ErrorKind::ServiceUnavailable`] or [`ErrorKind::Timeout`]. A body that ends early
    /// ends the stream with [`ErrorKind::IncompleteBody`].
    pub async fn get(
        &self,
        bucket: &str,
        key: &str,
        range: Option<ByteRange>,
        if_match: Option<&str>,
    ) -> Result<GetResponse> {
        let resp = self
            .get_with_range_header(bucket, key, range.map(|r| r.to_header_value()), if_match)
            .await?;
        let size = resp.size_stated.then_some(resp.info.size);
        crate::range::check_served_exactly(range, resp.range, size)?;
        Ok(resp)
    }

    /// Reads an object, or the range a client wrote (which may be open-ended or, for an
    /// S3 origin, a suffix), in one request: the answer's metadata and bytes are one
    /// version's. The caller checks the range served against the spec resolved with the
    /// size in the answer; `range` in the answer is `None` when the origin served the
    /// whole object.
    ///
    /// # Errors
    /// As [`get`](Self::get); [`ErrorKind::NotImplemented`] for a suffix range at an
    /// Azure origin, which has none.
    pub async fn get_spec(
        &self,
        bucket: &str,
        key: &str,
        range: Option<RangeSpec>,
    ) -> Result<GetResponse> {
        if !self.dialect.has_suffix_ranges() && range.is_some_and(RangeSpec::is_suffix) {
            return Err(Error::new(
                ErrorKind::NotImplemented,
                "Azure has no suffix ranges",
            ));
        }
        self.get_with_range_header(bucket, key, range.map(RangeSpec::to_header_value), None)
            .await
    }

    async fn get_with_range_header(
        &self,
        bucket: &str,
        key: &str,
        range: Option<String>,
        if_match: Option<&str>,
    ) -> Result<GetResponse> {
        let mut headers: Vec<(&str, String)> = Vec::new();
        if range.is_none() {
            headers.extend(self.dialect.whole_object_headers());
        }
        if let Some(value) = range {
            headers.push((self.dialect.range_header(), value));
        }
        if let Some(tag) = if_match {
            headers.push(("if-match", quote_etag(tag)));
        }
        let resp = self
            .send(
                Method::GET,
                Some(bucket),
                Some(key),
                "",
                &headers,
                OriginBody::Empty,
            )
            .await?;
        let resp = check(resp).await?;
        let partial = resp.status() == StatusCode::PARTIAL_CONTENT;
        let (served, total) = match resp
            .headers()
            .get("content-range")
            .and_then(|v| v.to_str().ok())
        {
            Some(v) if partial => {
                if let Some(size) = crate::range::content_range_serves_nothing_at_end(v) {
                    // Azurite's answer to a range past the end: what S3 and Azure say
                    // with a 416.
                    return Err(Error::new(
                        ErrorKind::InvalidRange,
                        format!("the range starts at or past the object's end ({size} bytes)"),
                    ));
                }
                let (r, total) = parse_content_range(v).ok_or_else(|| {
                    Error::new(
                        ErrorKind::InternalError,
                        format!("origin sent an invalid Content-Range '{v}'"),
                    )
                })?;
                (Some(r), total)
            }
            _ => (None, None),
        };
        let info = object_info(resp.headers(), total)?;
        let expected = served.map(|r| r.len()).unwrap_or(info.size);
        let body = length_checked(resp.bytes_stream(), expected);
        Ok(GetResponse {
            info,
            range: served,
            size_stated: !partial || total.is_some(),
            body,
        })
    }

    /// Relays a request and returns the origin's answer whatever its status (the caller
    /// relays status, headers and body).
    ///
    /// # Errors
    /// Transport failures only.
    pub async fn forward(&self, req: ForwardRequest<'_>) -> Result<reqwest::Response> {
        let headers: Vec<(&str, String)> = req
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        self.send(
            req.method, req.bucket, req.key, req.query, &headers, req.body,
        )
        .await
    }

    /// Writes an object from a stream of known length and returns its entity tag.
    ///
    /// # Errors
    /// The origin's error as a kind; a stream that fails makes the request fail and the
    /// origin store nothing.
    pub async fn put_stream(
        &self,
        bucket: &str,
        key: &str,
        body: reqwest::Body,
        len: u64,
        extra_headers: &[(&str, String)],
    ) -> Result<String> {
        let body = OriginBody::Stream { body, len };
        self.put_object(bucket, key, extra_headers.to_vec(), body)
            .await
    }

    /// Stores an object from a stream whose flexible checksum is only known at its end
    /// (a client sent it as a trailer). At an S3 origin the body goes on as `aws-chunked`
    /// with an unsigned trailer carrying `algorithm`'s checksum of the bytes, so the
    /// origin verifies and keeps it; an Azure origin, which has no flexible checksums,
    /// gets a plain [`put_stream`](Self::put_stream).
    ///
    /// # Errors
    /// As [`put_stream`](Self::put_stream); a body longer or shorter than `len` fails the
    /// upload.
    pub async fn put_stream_with_checksum<S>(
        &self,
        bucket: &str,
        key: &str,
        body: S,
        len: u64,
        algorithm: ChecksumAlgorithm,
        extra_headers: &[(&str, String)],
    ) -> Result<String>
    where
        S: Stream<Item = std::result::Result<Bytes, std::io::Error>> + Send + 'static,
    {
        if !self.dialect.takes_trailer_checksums() {
            return self
                .put_stream(
                    bucket,
                    key,
                    reqwest::Body::wrap_stream(body),
                    len,
                    extra_headers,
                )
                .await;
        }
        let mut encoder = Some(AwsChunkedTrailerEncoder::new(algorithm, len));
        let encoded = body
            .map(Some)
            .chain(futures_util::stream::once(async { None }))
            .map(move |item| -> std::result::Result<Bytes, std::io::Error> {
                let mut out = Vec::new();
                let framing = |e: Error| std::io::Error::other(e.message().to_owned());
                match (item, encoder.as_mut()) {
                    (Some(Ok(bytes)), Some(enc)) => enc.feed(&bytes, &mut out).map_err(framing)?,
                    (Some(Err(e)), _) => return Err(e),
                    (None, _) => {
                        if let Some(enc) = encoder.take() {
                            enc.finish(&mut out).map_err(framing)?;
                        }
                    }
                    (Some(Ok(_)), None) => {}
                }
                Ok(Bytes::from(out))
            });
        let mut headers: Vec<(&str, String)> = extra_headers.to_vec();
        headers.push(("content-encoding", "aws-chunked".into()));
        headers.push(("x-amz-decoded-content-length", len.to_string()));
        headers.push(("x-amz-trailer", algorithm.header_name().into()));
        let body = OriginBody::ChunkedWithTrailer {
            body: reqwest::Body::wrap_stream(encoded),
            len: AwsChunkedTrailerEncoder::encoded_len(algorithm, len),
        };
        self.put_object(bucket, key, headers, body).await
    }

    /// One object PUT (a block blob at an Azure origin); the stored version's ETag.
    async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        mut headers: Vec<(&str, String)>,
        body: OriginBody,
    ) -> Result<String> {
        headers.extend(self.dialect.put_headers());
        let resp = self
            .send(Method::PUT, Some(bucket), Some(key), "", &headers, body)
            .await?;
        written_etag(check(resp).await?, "a put")
    }

    /// The buckets (containers) of the account.
    ///
    /// # Errors
    /// The origin's error as a kind.
    pub async fn list_buckets(&self) -> Result<Vec<BucketSummary>> {
        let query = self.dialect.list_buckets_query();
        let resp = self
            .send(Method::GET, None, None, query, &[], OriginBody::Empty)
            .await?;
        let resp = check(resp).await?;
        let body = read_capped(resp, MAX_ORIGIN_LISTING_BODY).await?;
        self.dialect.parse_buckets(&body)
    }

    /// Creates a bucket (container).
    ///
    /// # Errors
    /// The origin's error as a kind ([`ErrorKind::BucketAlreadyExists`], ...).
    pub async fn create_bucket(&self, bucket: &str) -> Result<()> {
        check(self.bucket_request(Method::PUT, bucket).await?)
            .await
            .map(|_| ())
    }

    /// Deletes an empty bucket (container).
    ///
    /// # Errors
    /// The origin's error as a kind ([`ErrorKind::NoSuchBucket`],
    /// [`ErrorKind::BucketNotEmpty`], ...).
    pub async fn delete_bucket(&self, bucket: &str) -> Result<()> {
        check(self.bucket_request(Method::DELETE, bucket).await?)
            .await
            .map(|_| ())
    }

    /// A request on the bucket (container) itself, in the dialect's form.
    async fn bucket_request(&self, method: Method, bucket: &str) -> Result<reqwest::Response> {
        let query = self.dialect.bucket_query();
        self.send(method, Some(bucket), None, query, &[], OriginBody::Empty)
            .await
    }

    /// Whether a bucket (container) exists.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchBucket`] when it does not; the origin's other errors.
    pub async fn head_bucket(&self, bucket: &str) -> Result<()> {
        let resp = self.bucket_request(Method::HEAD, bucket).await?;
        match check(resp).await {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::NoSuchKey => Err(Error::new(
                ErrorKind::NoSuchBucket,
                format!("the bucket '{bucket}' does not exist"),
            )),
            Err(e) => Err(e),
        }
    }

    /// Lists one page of keys under `prefix`.
    ///
    /// # Errors
    /// The origin's error as a kind ([`ErrorKind::NoSuchBucket`], ...).
    pub async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        delimiter: Option<&str>,
        token: Option<&str>,
        max_keys: Option<usize>,
    ) -> Result<ListResult> {
        self.list_with(
            bucket,
            &ListOptions {
                prefix,
                delimiter,
                token,
                start_after: None,
                max_keys,
                include_metadata: false,
            },
        )
        .await
    }

    /// Lists one page with every option.
    ///
    /// # Errors
    /// The origin's error as a kind ([`ErrorKind::NoSuchBucket`], ...).
    pub async fn list_with(&self, bucket: &str, options: &ListOptions<'_>) -> Result<ListResult> {
        let Some(after) = options
            .start_after
            .filter(|_| !self.dialect.has_start_after())
        else {
            return self.list_page(bucket, options).await;
        };
        // No start-after at this origin (Azure): read pages from where the listing
        // stands, dropping what sorts at or before `after` (as `listing::paginate`
        // places a marker), until something is left or the listing ends. After
        // MAX_PAGES_SKIPPED pages of nothing, an empty page says where to go on.
        let mut token = options.token.map(str::to_owned);
        for _ in 0..MAX_PAGES_SKIPPED {
            let mut page = self
                .list_page(
                    bucket,
                    &ListOptions {
                        token: token.as_deref(),
                        start_after: None,
                        ..*options
                    },
                )
                .await?;
            page.objects.retain(|o| o.key.as_str() > after);
            page.common_prefixes.retain(|p| p.as_str() > after);
            if !page.objects.is_empty() || !page.common_prefixes.is_empty() {
                return Ok(page);
            }
            match page.next_token {
                None => return Ok(page),
                next => token = next,
            }
        }
        Ok(ListResult {
            next_token: token,
            ..ListResult::default()
        })
    }

    /// One listing page as the origin gives it.
    async fn list_page(&self, bucket: &str, options: &ListOptions<'_>) -> Result<ListResult> {
        let mut q = self.dialect.list_query(options);
        let (prefix, delimiter) = (options.prefix, options.delimiter);
        if !prefix.is_empty() {
            q.push(("prefix", prefix.into()));
        }
        if let Some(d) = delimiter {
            q.push(("delimiter", d.into()));
        }
        let query = q
            .iter()
            .map(|(k, v)| format!("{k}={}", encode_strict(v)))
            .collect::<Vec<_>>()
            .join("&");
        let resp = self
            .send(
                Method::GET,
                Some(bucket),
                None,
                &query,
                &[],
                OriginBody::Empty,
            )
            .await?;
        let resp = check(resp).await?;
        let body = read_capped(resp, MAX_ORIGIN_LISTING_BODY).await?;
        self.dialect.parse_listing(&body, options.include_metadata)
    }

    /// Writes a whole object and returns its new entity tag.
    ///
    /// # Errors
    /// The origin's error as a kind.
    pub async fn put(
        &self,
        bucket: &str,
        key: &str,
        body: Bytes,
        content_type: Option<&str>,
    ) -> Result<String> {
        let mut headers: Vec<(&str, String)> = Vec::new();
        if let Some(ct) = content_type {
            headers.push(("content-type", ct.to_owned()));
        }
        self.put_object(bucket, key, headers, OriginBody::Bytes(body))
            .await
    }

    /// Deletes an object. Deleting a missing object succeeds on S3 and fails with
    /// [`ErrorKind::NoSuchKey`] on Azure, as each origin says.
    ///
    /// # Errors
    /// The origin's error as a kind.
    pub async fn delete(&self, bucket: &str, key: &str) -> Result<()> {
        self.delete_with(bucket, key, &[]).await
    }

    /// Deletes an object with `headers` (a conditional delete's `If-Match`, S3's
    /// `x-amz-if-match-*`).
    ///
    /// # Errors
    /// The origin's error as a kind (a failed condition is
    /// [`ErrorKind::PreconditionFailed`]).
    pub async fn delete_with(
        &self,
        bucket: &str,
        key: &str,
        headers: &[(&str, String)],
    ) -> Result<()> {
        let resp = self
            .send(
                Method::DELETE,
                Some(bucket),
                Some(key),
                "",
                headers,
                OriginBody::Empty,
            )
            .await?;
        check(resp).await.map(|_| ())
    }

    /// Builds, signs and sends one request.
    async fn send(
        &self,
        method: Method,
        bucket: Option<&str>,
        key: Option<&str>,
        query: &str,
        headers: &[(&str, String)],
        body: OriginBody,
    ) -> Result<reqwest::Response> {
        if let Some(limiter) = &self.limiter {
            limiter.admit(bucket.unwrap_or(""), key).await?;
        }
        let now = SystemTime::now();
        let (url, host) = self.url(bucket, key, query)?;
        let mut all: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        self.dialect
            .authorize(&method, &url, &host, &mut all, &body, now)?;
        if method == Method::PUT || method == Method::POST {
            // An empty body gets no Content-Length from the HTTP stack, and both object
            // stores refuse a write without one.
            all.push(("content-length".into(), body.len().to_string()));
        }
        let client = match body {
            OriginBody::Stream { .. } | OriginBody::ChunkedWithTrailer { .. } => &self.uploads,
            OriginBody::Empty | OriginBody::Bytes(_) => &self.http,
        };
        let mut req = client.request(method, &url);
        for (k, v) in &all {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = match body {
            OriginBody::Empty => req,
            OriginBody::Bytes(b) => req.body(b),
            OriginBody::Stream { body, .. } | OriginBody::ChunkedWithTrailer { body, .. } => {
                req.body(body)
            }
        };
        req.send().await.map_err(transport)
    }

    /// The request URL and its `Host` value, built from encoded segments.
    ///
    /// The bucket is checked by the origin's naming rules (and must be DNS-safe when it
    /// becomes part of a host name), the key by [`names::check_object_key`]; both are
    /// percent-encoded as segments. The URL is assembled by `http::Uri`'s builder and
    /// then parsed the way the HTTP client will parse it: if that parse would change
    /// the host, the path or the query (normalisation, an `@` or a `#`), the request is
    /// refused rather than sent somewhere else.
    fn url(
        &self,
        bucket: Option<&str>,
        key: Option<&str>,
        query: &str,
    ) -> Result<(String, String)> {
        let (endpoint, virtual_hosted) = (self.dialect.endpoint(), self.dialect.virtual_hosted());
        if let Some(b) = bucket {
            self.dialect.check_bucket(b)?;
        }
        if let Some(k) = key {
            names::check_object_key(k)?;
        }
        let bad_endpoint =
            |why: &str| Error::new(ErrorKind::InternalError, format!("origin endpoint: {why}"));
        let base: http::Uri = endpoint
            .trim_end_matches('/')
            .parse()
            .map_err(|_| bad_endpoint("not a URI"))?;
        let scheme = base.scheme_str().ok_or_else(|| bad_endpoint("no scheme"))?;
        let authority = base
            .authority()
            .ok_or_else(|| bad_endpoint("no host"))?
            .as_str();
        let mut path = base.path().trim_end_matches('/').to_owned();
        let authority = match bucket {
            Some(b) if virtual_hosted => format!("{b}.{authority}"),
            Some(b) => {
                path.push('/');
                path.push_str(&encode_strict(b));
                authority.to_owned()
            }
            None => authority.to_owned(),
        };
        match key {
            Some(k) => {
                path.push('/');
                path.push_str(&encode_path(k));
            }
            None if path.is_empty() => path.push('/'),
            None => {}
        }
        let mut query = query.to_owned();
        if let Some(extra) = self.dialect.extra_query()? {
            if !query.is_empty() {
                query.push('&');
            }
            query.push_str(&extra);
        }
        let path_and_query = if query.is_empty() {
            path.clone()
        } else {
            format!("{path}?{query}")
        };
        let uri = http::Uri::builder()
            .scheme(scheme)
            .authority(authority.as_str())
            .path_and_query(path_and_query)
            .build()
            .map_err(|_| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    "the name cannot be part of an origin URL",
                )
            })?;
        let url = uri.to_string();
        // What the HTTP client will make of it must be exactly what was built.
        let parsed = reqwest::Url::parse(&url).ok();
        let host_name = authority
            .rsplit_once(':')
            .map_or(authority.as_str(), |(h, p)| {
                if p.bytes().all(|b| b.is_ascii_digit()) {
                    h
                } else {
                    authority.as_str()
                }
            });
        let same = parsed.as_ref().is_some_and(|u| {
            u.path() == path
                && u.query().unwrap_or("") == query
                && u.fragment().is_none()
                && u.username().is_empty()
                && u.host_str().is_some_and(|h| {
                    h.eq_ignore_ascii_case(host_name.trim_matches(['[', ']']))
                        || h.eq_ignore_ascii_case(host_name)
                })
        });
        if !same {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "the name cannot be part of an origin URL",
            ));
        }
        let host = strip_default_port(&url, &authority);
        Ok((url, host))
    }
}

/// The origin clients of a Talon process, one per backend, and the routing of an
/// object (talon-core's [`ObjectId`]) to a client, a bucket (container) and a key (blob).
#[derive(Debug, Default, Clone)]
pub struct Origins {
    /// The S3 origin, if configured.
    pub s3: Option<OriginClient>,
    /// The Azure origin and its account name, if configured.
    pub azure: Option<(String, OriginClient)>,
}

impl Origins {
    /// Gives an S3 origin configured without keys the credentials of AWS's default
    /// chain (`env` reads a variable; [`credentials::default_chain`]), refreshed before
    /// they expire. Where nothing is configured and no instance metadata service
    /// answers, the origin stays anonymous, as before.
    ///
    /// # Errors
    /// The chain's source's error when a configured source (web identity, container)
    /// cannot give its first credentials: the process should not start.
    pub async fn with_default_s3_credentials(
        mut self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Origins> {
        let Some(client) = self.s3.take() else {
            return Ok(self);
        };
        let has_keys = matches!(
            client.config(),
            OriginConfig::S3 {
                credentials: Some(_),
                ..
            }
        );
        let transport = EndpointTransport::of(&client);
        // The instance profile is asked for only where the origin is reached over TLS:
        // a plain-HTTP origin without keys (a local MinIO, a public test bucket) stays
        // anonymous as before rather than get the instance's role.
        let choice = match has_keys {
            true => None,
            false => credentials::default_chain(env)
                .filter(|c| !c.last_resort || transport == EndpointTransport::Tls),
        };
        let Some(choice) = choice else {
            self.s3 = Some(client);
            return Ok(self);
        };
        let what = choice.source.describe();
        self.s3 = Some(
            match credentials::RefreshingCredentials::start(choice.source).await {
                Ok(refreshing) => client.with_s3_credentials(refreshing),
                Err(e) if choice.last_resort => {
                    tracing::info!(tried = %what, error = %e.message(), "no origin credentials configured or found: S3 requests go unsigned");
                    client
                }
                Err(e) => return Err(e),
            },
        );
        Ok(self)
    }

    /// Gives an Azure origin configured without a key or SAS the credentials of the
    /// Azure chain (a SAS file, workload identity, a service principal, a managed
    /// identity; [`azure_credentials::default_azure_chain`]), refreshed before they
    /// expire. Where nothing is configured and no instance metadata service answers,
    /// the origin stays anonymous, as before.
    ///
    /// # Errors
    /// A configured source's error when it cannot give its first credentials.
    pub async fn with_default_azure_credentials(
        mut self,
        env: &dyn Fn(&str) -> Option<String>,
        sas_file: Option<&std::path::Path>,
    ) -> Result<Origins> {
        let Some((account, client)) = self.azure.take() else {
            return Ok(self);
        };
        let has_credentials = matches!(
            client.config(),
            OriginConfig::Azure { key: Some(_), .. } | OriginConfig::Azure { sas: Some(_), .. }
        );
        let transport = EndpointTransport::of(&client);
        let choice = match has_credentials {
            true => None,
            false => azure_chain_for(env, sas_file, transport),
        };
        let Some(choice) = choice else {
            self.azure = Some((account, client));
            return Ok(self);
        };
        let what = choice.source.describe();
        if choice.bearer && transport == EndpointTransport::PlainRemote {
            // As Azure's SDKs do: a bearer token is a credential in the clear.
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "refusing to send Entra ID tokens from {what} over plain HTTP to {}: use https, or an account key or SAS",
                    client.dialect.endpoint()
                ),
            ));
        }
        let client = match credentials::Refreshing::start(choice.source).await {
            Ok(refreshing) => client.with_azure_credentials(refreshing),
            Err(e) if choice.last_resort => {
                tracing::info!(tried = %what, error = %e.message(), "no Azure origin credentials configured or found: requests go anonymous");
                client
            }
            Err(e) => return Err(e),
        };
        self.azure = Some((account, client));
        Ok(self)
    }

    /// These origins with every request of each client under its own `limit`
    /// ([`OriginClient::with_request_limit`]).
    pub fn with_request_limit(self, limit: request_limit::RequestLimit) -> Origins {
        Origins {
            s3: self.s3.map(|c| c.with_request_limit(limit)),
            azure: self.azure.map(|(a, c)| (a, c.with_request_limit(limit))),
        }
    }

    /// What refreshing the S3 origin's credentials did so far, where they refresh.
    pub fn s3_credential_stats(&self) -> Option<credentials::RefreshStats> {
        self.s3.as_ref().and_then(OriginClient::credential_stats)
    }

    /// What refreshing the Azure origin's credentials did so far, where they refresh.
    pub fn azure_credential_stats(&self) -> Option<credentials::RefreshStats> {
        self.azure.as_ref().and_then(|(_, c)| c.credential_stats())
    }

    /// What the request limits of both clients did so far, summed.
    pub fn request_limit_stats(&self) -> request_limit::RequestLimitStats {
        let s3 = self.s3.as_ref().map(OriginClient::request_limit_stats);
        let azure = self.azure.as_ref().map(|(_, c)| c.request_limit_stats());
        s3.unwrap_or_default().plus(azure.unwrap_or_default())
    }

    /// The client, bucket (container) and key (blob) for an object.
    ///
    /// # Errors
    /// [`ErrorKind::NotImplemented`] when the backend (or Azure account) is not
    /// configured.
    pub fn route(&self, object: &ObjectId) -> Result<(&OriginClient, String, String)> {
        let missing = |what: &str| {
            Error::new(
                ErrorKind::NotImplemented,
                format!("no origin is configured for {what}"),
            )
        };
        match object.namespace() {
            Namespace::S3 { bucket } => {
                let client = self.s3.as_ref().ok_or_else(|| missing("S3 objects"))?;
                Ok((client, bucket.to_owned(), object.path().to_owned()))
            }
            Namespace::Azure { account, container } => match &self.azure {
                Some((configured, client)) if configured == account => {
                    Ok((client, container.to_owned(), object.path().to_owned()))
                }
                _ => Err(missing(&format!("the Azure account '{account}'"))),
            },
        }
    }
}

/// Splits `http://host:port/some/path` into `http://host:port` and `/some/path`.
fn strip_default_port(base: &str, host: &str) -> String {
    if base.starts_with("http://") {
        host.strip_suffix(":80").unwrap_or(host).to_owned()
    } else {
        host.strip_suffix(":443").unwrap_or(host).to_owned()
    }
}

fn path_and_query(url: &str) -> (&str, &str) {
    let after = url.find("://").map(|i| i + 3).unwrap_or(0);
    let rest = match url[after..].find('/') {
        Some(i) => &url[after + i..],
        None => "/",
    };
    rest.split_once('?').unwrap_or((rest, ""))
}

/// Turns a non-success answer into an error, reading the error code from the body or
/// (for HEAD, which has none) from `x-ms-error-code` and the status.
async fn check(resp: reqwest::Response) -> Result<reqwest::Response> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let azure_code = resp
        .headers()
        .get("x-ms-error-code")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = read_capped(resp, MAX_ORIGIN_ERROR_BODY)
        .await
        .unwrap_or_default();
    let parsed: Option<crate::s3::xml::ErrorBody> = crate::s3::xml::parse_request(&body).ok();
    let code = azure_code
        .clone()
        .or_else(|| parsed.as_ref().map(|p| p.code.clone()))
        .unwrap_or_default();
    let kind = azure_code
        .as_deref()
        .and_then(ErrorKind::from_azure_code)
        .or_else(|| {
            parsed
                .as_ref()
                .and_then(|p| ErrorKind::from_s3_code(&p.code))
        })
        .or_else(|| {
            parsed
                .as_ref()
                .and_then(|p| ErrorKind::from_azure_code(&p.code))
        })
        .unwrap_or_else(|| ErrorKind::from_status(status));
    let message = parsed
        .map(|p| p.message)
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| status.to_string());
    // The origin's own words are what a client of ours reads, when it says any; the
    // status and code it answered go to the log.
    tracing::debug!(%status, code, message, "the origin refused a request");
    Err(Error::new(kind, message))
}

/// Header prefix of S3 user metadata.
pub const S3_META_PREFIX: &str = "x-amz-meta-";

/// Header prefix of Azure user metadata.
pub const AZURE_META_PREFIX: &str = "x-ms-meta-";

/// An answer's full-object flexible checksum as `<algorithm>:<base64>`, or empty: none,
/// or a composite one (multipart objects: `...-N`, `x-amz-checksum-type: COMPOSITE`),
/// which describes parts rather than the bytes a reader gets.
fn full_object_checksum(headers: &reqwest::header::HeaderMap) -> String {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if text("x-amz-checksum-type").is_some_and(|t| !t.eq_ignore_ascii_case("FULL_OBJECT")) {
        return String::new();
    }
    ChecksumAlgorithm::ALL
        .into_iter()
        .find_map(|alg| {
            let value = text(alg.header_name())?.trim();
            (!value.is_empty() && !value.contains('-')).then(|| alg.kept(value))
        })
        .unwrap_or_default()
}

fn object_info(
    headers: &reqwest::header::HeaderMap,
    total_from_range: Option<u64>,
) -> Result<ObjectInfo> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let size = match total_from_range {
        Some(t) => t,
        None => text("content-length")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InternalError,
                    "origin answer has no Content-Length",
                )
            })?,
    };
    let etag = text("etag")
        .map(quote_etag)
        .ok_or_else(|| Error::new(ErrorKind::InternalError, "origin answer has no ETag"))?;
    let mut user_metadata: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(name, value)| {
            let name = name.as_str();
            let short = name
                .strip_prefix(S3_META_PREFIX)
                .or_else(|| name.strip_prefix(AZURE_META_PREFIX))?;
            // A value that is not UTF-8 cannot be carried as text; S3 and Azure
            // only accept ASCII metadata values anyway.
            let value = std::str::from_utf8(value.as_bytes()).ok()?;
            Some((short.to_owned(), value.to_owned()))
        })
        .collect();
    user_metadata.sort();
    // Passed on, not parsed: UTF-8 (a Content-Disposition file name) is kept.
    let owned = |name: &str| {
        headers
            .get(name)
            .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
            .unwrap_or_default()
            .to_owned()
    };
    Ok(ObjectInfo {
        size,
        etag,
        last_modified: text("last-modified").and_then(parse_http_date),
        content_type: text("content-type").map(str::to_owned),
        headers: HeaderSet {
            // On a ranged answer `Content-MD5` may be the digest of the range alone.
            content_md5: match total_from_range {
                Some(_) => text("x-ms-blob-content-md5"),
                None => text("content-md5").or_else(|| text("x-ms-blob-content-md5")),
            }
            .unwrap_or_default()
            .to_owned(),
            checksum: full_object_checksum(headers),
            content_encoding: owned("content-encoding"),
            content_language: owned("content-language"),
            content_disposition: owned("content-disposition"),
            cache_control: owned("cache-control"),
            user_metadata,
        },
    })
}

/// Passes a body through, failing the stream if it ends before `expected` bytes or runs
/// past them, so a cut connection can never look like a complete object.
fn length_checked(
    inner: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
    expected: u64,
) -> ByteStream {
    let mut seen = 0u64;
    let mut done = false;
    let mut inner = Box::pin(inner);
    Box::pin(futures_util::stream::poll_fn(move |cx| {
        if done {
            return std::task::Poll::Ready(None);
        }
        match inner.poll_next_unpin(cx) {
            std::task::Poll::Ready(Some(Ok(chunk))) => {
                seen += chunk.len() as u64;
                if seen > expected {
                    done = true;
                    return std::task::Poll::Ready(Some(Err(Error::new(
                        ErrorKind::IncompleteBody,
                        "origin sent more bytes than its Content-Length",
                    ))));
                }
                std::task::Poll::Ready(Some(Ok(chunk)))
            }
            std::task::Poll::Ready(Some(Err(e))) => {
                done = true;
                std::task::Poll::Ready(Some(Err(Error::new(
                    ErrorKind::IncompleteBody,
                    format!("origin body failed after {seen} of {expected} bytes: {e}"),
                )
                .with_source(e))))
            }
            std::task::Poll::Ready(None) => {
                done = true;
                if seen < expected {
                    std::task::Poll::Ready(Some(Err(Error::new(
                        ErrorKind::IncompleteBody,
                        format!("origin body ended after {seen} of {expected} bytes"),
                    ))))
                } else {
                    std::task::Poll::Ready(None)
                }
            }
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uri_encoding::decode;

    #[test]
    fn urls_for_each_addressing() {
        let s3 = OriginClient::new(OriginConfig::S3 {
            endpoint: "http://127.0.0.1:9000/".into(),
            region: "us-east-1".into(),
            credentials: None,
            virtual_hosted: false,
        })
        .expect("client");
        assert_eq!(
            s3.url(Some("bkt"), Some("dir/a b+c"), "").expect("url"),
            (
                "http://127.0.0.1:9000/bkt/dir/a%20b%2Bc".to_owned(),
                "127.0.0.1:9000".to_owned()
            )
        );
        let vh = OriginClient::new(OriginConfig::S3 {
            endpoint: "https://s3.eu-west-1.amazonaws.com".into(),
            region: "eu-west-1".into(),
            credentials: None,
            virtual_hosted: true,
        })
        .expect("client");
        assert_eq!(
            vh.url(Some("bkt"), Some("k"), "x=1").expect("url").0,
            "https://bkt.s3.eu-west-1.amazonaws.com/k?x=1"
        );
        let az = OriginClient::new(OriginConfig::Azure {
            endpoint: "http://127.0.0.1:10000/devstoreaccount1".into(),
            account: "devstoreaccount1".into(),
            key: None,
            sas: Some("sv=1&sig=x".into()),
        })
        .expect("client");
        assert_eq!(
            az.url(Some("ctr"), Some("k"), "comp=list").expect("url").0,
            "http://127.0.0.1:10000/devstoreaccount1/ctr/k?comp=list&sv=1&sig=x"
        );
    }

    /// SEC-03: no bucket or key makes the origin URL go to another host, path or
    /// sub-resource; keys with URL syntax in them are encoded into their own segment.
    #[test]
    fn hostile_names_never_change_the_origin_url() {
        let clients = [
            OriginClient::new(OriginConfig::S3 {
                endpoint: "http://127.0.0.1:9000".into(),
                region: "us-east-1".into(),
                credentials: None,
                virtual_hosted: false,
            }),
            OriginClient::new(OriginConfig::S3 {
                endpoint: "https://s3.example.com".into(),
                region: "us-east-1".into(),
                credentials: None,
                virtual_hosted: true,
            }),
            OriginClient::new(OriginConfig::Azure {
                endpoint: "http://127.0.0.1:10000/devstoreaccount1".into(),
                account: "devstoreaccount1".into(),
                key: None,
                sas: None,
            }),
        ];
        let buckets = [
            "newbkt?x",
            "victim?policy",
            "victim#x",
            "..",
            "evil.com@bkt",
            "bkt:81",
            "a\\b",
            "ctl\u{7}x",
            "a/b",
            "%3F",
        ];
        for c in &clients {
            let c = c.as_ref().expect("client");
            for b in buckets {
                assert!(c.url(Some(b), Some("k"), "").is_err(), "bucket {b:?}");
                assert!(c.url(Some(b), None, "").is_err(), "bucket {b:?}");
            }
            let long = "k".repeat(1025);
            for k in ["..", "a/../b", "./x", long.as_str(), "nul\0"] {
                assert!(c.url(Some("bkt"), Some(k), "").is_err(), "key {k:?}");
            }
            for k in [
                "a?policy",
                "a#b",
                "x%2Fy",
                "u@h:1",
                "back\\slash",
                "ctl\u{1}",
            ] {
                let (url, _) = c.url(Some("bkt"), Some(k), "").expect("a legal key");
                let parsed = reqwest::Url::parse(&url).expect("parses");
                assert!(
                    parsed.query().is_none() && parsed.fragment().is_none(),
                    "{url}"
                );
                let last = parsed.path_segments().and_then(|mut s| s.next_back());
                assert_eq!(
                    last.map(|s| decode(s).into_owned()),
                    Some(k.to_owned()),
                    "{url}"
                );
            }
        }
    }

    #[test]
    fn path_and_query_split() {
        assert_eq!(path_and_query("http://h:1/a/b?x=1"), ("/a/b", "x=1"));
        assert_eq!(path_and_query("http://h:1"), ("/", ""));
    }
}
