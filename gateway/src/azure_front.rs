//! The Azure Blob front: unmodified Azure SDK clients (azure-storage-blob with an
//! endpoint override, rclone) talk to it as to a storage account.
//!
//! Reads (Get Blob, Get Blob Properties) go through the front's route; listings and
//! container checks are answered from the origin; Put Blob and Delete Blob go to the
//! origin exactly once, re-signed with the gateway's identity. Against an Azure origin,
//! block uploads and container creation are relayed as they are; against an S3 origin
//! they are not implemented.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use axum::body::Body;
use axum::response::Response;
use http::{HeaderMap, Method, Request, StatusCode};
use talon_protocols::azure::auth::{self as azure_auth, Transport};
use talon_protocols::azure::request::{AzureOperation, AzureRequest};
use talon_protocols::azure::shared_key::SharedKeyParts;
use talon_protocols::azure::xml;
use talon_protocols::conditional::Conditions;
use talon_protocols::listing::{ListQuery, paginate};
use talon_protocols::origin::{AZURE_API_VERSION, ForwardRequest, ListOptions, OriginBody};
use talon_protocols::range::RangeSpec;
use talon_protocols::{Error, ErrorKind};

use crate::Gateway;
use crate::config::Backend;
use crate::metrics::Outcome;
use crate::objects::ReadRequest;
use crate::reply::{Failure, answer, header, header_text, relay, set_header, within_deadline};
use talon_cache_client::ReaderId;
use talon_protocols::answer::{ErrorContext, Front, error_answer, request_has_body};
use talon_protocols::server::request_body;
use talon_protocols::upload::{UploadClaims, VerifyingStream, settle};

const PROTOCOL: &str = "azure";
const MAX_RESULTS: usize = 5000;

/// Handles one Azure Blob request.
pub async fn handle(gw: Arc<Gateway>, peer: SocketAddr, req: Request<Body>) -> Response {
    let request_id = Front::Azure.new_request_id();
    let started = Instant::now();
    let is_head = req.method() == Method::HEAD;
    let version = header(req.headers(), "x-ms-version")
        .unwrap_or(AZURE_API_VERSION)
        .to_owned();
    let has_body = request_has_body(req.headers());
    let span = tracing::info_span!("azure", request_id = %request_id);
    let (operation, outcome, result) =
        tracing::Instrument::instrument(route(&gw, peer, req), span).await;
    let route_name = gw
        .azure
        .as_ref()
        .map(|f| f.route.name())
        .unwrap_or("origin");
    let mut resp = match result {
        Ok(resp) => {
            gw.metrics.request(PROTOCOL, operation, route_name, outcome);
            resp
        }
        Err(f) => {
            gw.metrics
                .request(PROTOCOL, operation, route_name, Outcome::Failed);
            let context = ErrorContext {
                is_head,
                has_body,
                request_id: &request_id,
                resource: "",
                subject: Default::default(),
            };
            error_answer(Front::Azure, f, context).map(Body::from)
        }
    };
    gw.metrics.latency(PROTOCOL, operation, started.elapsed());
    Front::Azure.stamp(resp.headers_mut(), &request_id, &version, "talon-gateway");
    resp
}

type Routed = (&'static str, Outcome, Result<Response, Failure>);

async fn route(gw: &Arc<Gateway>, peer: SocketAddr, req: Request<Body>) -> Routed {
    let Some(front) = gw.azure.clone() else {
        return (
            "Unknown",
            Outcome::Failed,
            Err(Error::new(ErrorKind::NotImplemented, "no Azure front").into()),
        );
    };
    let (parts, body) = req.into_parts();
    if let Err(e) = Front::Azure.check_header_size(&parts.headers, gw.limits.max_header_bytes) {
        return ("Unknown", Outcome::Failed, Err(e.into()));
    }
    let raw_path = parts.uri.path().to_owned();
    let raw_query = parts.uri.query().unwrap_or("").to_owned();
    let request = match AzureRequest::classify(
        &parts.method,
        &front.addressing,
        &parts.headers,
        &raw_path,
        &raw_query,
    ) {
        Ok(r) => r,
        Err(e) => return ("Unknown", Outcome::Failed, Err(e.into())),
    };
    let operation = request.operation.name();
    if request.account != gw.identities.azure.account {
        let e = Error::new(
            ErrorKind::InvalidRequest,
            format!(
                "this gateway serves the account '{}'",
                gw.identities.azure.account
            ),
        );
        return (operation, Outcome::Failed, Err(e.into()));
    }
    let signed = SharedKeyParts {
        method: parts.method.as_str(),
        raw_path: &raw_path,
        raw_query: &raw_query,
        headers: &parts.headers,
    };
    let transport = Transport {
        https: gw.https,
        client_ip: Some(peer.ip()),
    };
    if let Err(e) = azure_auth::authenticate(
        &gw.identities.azure,
        &request,
        &signed,
        transport,
        SystemTime::now(),
    ) {
        return (operation, Outcome::Failed, Err(e.into()));
    }
    let ctx = Ctx {
        gw,
        front: &front,
        headers: &parts.headers,
        request: &request,
        reader: Some(ReaderId::from_ip(peer.ip())),
    };
    let streams_upload = matches!(
        request.operation,
        AzureOperation::PutBlob | AzureOperation::PutBlock
    );
    let (outcome, result) = within_deadline(
        gw.limits.request_deadline,
        streams_upload,
        dispatch(&ctx, body),
    )
    .await;
    (operation, outcome, result)
}

struct Ctx<'a> {
    gw: &'a Arc<Gateway>,
    front: &'a crate::config::AzureFront,
    headers: &'a HeaderMap,
    request: &'a AzureRequest,
    /// Who the request's reads are for (the read budget's shares).
    reader: Option<ReaderId>,
}

impl Ctx<'_> {
    fn container(&self) -> Result<&str, Error> {
        self.request
            .container
            .as_deref()
            .ok_or_else(|| Error::new(ErrorKind::InvalidRequest, "the request names no container"))
    }

    fn blob(&self) -> Result<&str, Error> {
        self.request
            .blob
            .as_deref()
            .ok_or_else(|| Error::new(ErrorKind::InvalidRequest, "the request names no blob"))
    }

    fn backend(&self) -> Backend {
        self.front.backend
    }

    fn query(&self, name: &str) -> Option<&str> {
        self.request.query.get(name)
    }
}

fn container_errors(e: Error) -> Error {
    if e.kind() == ErrorKind::NoSuchBucket {
        Error::new(
            ErrorKind::NoSuchBucket,
            "The specified container does not exist.",
        )
    } else {
        e
    }
}

fn blob_errors(e: Error) -> Error {
    match e.kind() {
        ErrorKind::NoSuchKey => {
            Error::new(ErrorKind::NoSuchKey, "The specified blob does not exist.")
        }
        _ => container_errors(e),
    }
}

async fn dispatch(ctx: &Ctx<'_>, body: Body) -> (Outcome, Result<Response, Failure>) {
    use AzureOperation::*;
    let op = ctx.request.operation;
    let result = match op {
        GetBlob | GetBlobProperties => {
            return match get_blob(ctx, op == GetBlob).await {
                Ok((outcome, resp)) => (outcome, Ok(resp)),
                Err(f) => (Outcome::Failed, Err(f)),
            };
        }
        ListContainers => list_containers(ctx).await,
        GetContainerProperties => container_properties(ctx).await,
        ListBlobs => list_blobs(ctx).await,
        PutBlob => put_blob(ctx, body).await,
        DeleteBlob => delete_blob(ctx).await,
        PutBlock | PutBlockList | GetBlockList | CreateContainer | DeleteContainer => {
            relay_to_azure_origin(ctx, body).await
        }
    };
    let outcome = if result.is_ok() {
        Outcome::Origin
    } else {
        Outcome::Failed
    };
    (outcome, result)
}

fn xml_answer(doc: String) -> Response {
    let mut resp = answer(StatusCode::OK, Body::from(doc));
    set_header(resp.headers_mut(), "content-type", "application/xml");
    resp
}

async fn get_blob(ctx: &Ctx<'_>, with_body: bool) -> Result<(Outcome, Response), Failure> {
    let (container, blob) = (ctx.container()?, ctx.blob()?);
    let conditions = Conditions::from_headers(ctx.headers);
    // x-ms-range wins over Range; Azure defines no suffix ranges.
    let range = match header(ctx.headers, "x-ms-range") {
        Some(v) => Some(RangeSpec::parse(v).filter(|s| !s.is_suffix()).ok_or_else(|| {
            Error::new(ErrorKind::InvalidHeaderValue, "The value for one of the HTTP headers is not in the correct format: x-ms-range")
        })?),
        None => header(ctx.headers, "range").and_then(RangeSpec::parse).filter(|s| !s.is_suffix()),
    };
    let request = ReadRequest {
        route: ctx.front.route,
        backend: ctx.backend(),
        bucket: container,
        key: blob,
        conditions: &conditions,
        range,
        with_body,
        reader: ctx.reader,
    };
    // The MD5 of the range itself, which Azure computes for ranges of at most 4 MiB.
    let range_md5 = with_body
        && header(ctx.headers, "x-ms-range-get-content-md5")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let too_large_for_md5 = || {
        Error::new(
            ErrorKind::InvalidHeaderValue,
            "x-ms-range-get-content-md5 needs a range of at most 4 MiB",
        )
    };
    if range_md5 {
        match range {
            None => return Err(too_large_for_md5().into()),
            Some(RangeSpec::Bounded { first, last })
                if last.saturating_sub(first) >= MAX_RANGE_MD5_BYTES =>
            {
                return Err(too_large_for_md5().into());
            }
            Some(RangeSpec::From { first }) => {
                // Its length needs the size: refuse before any byte is read or filled.
                let head = ReadRequest {
                    with_body: false,
                    ..request
                };
                let meta = read_blob(ctx, head).await?.meta;
                if meta.size.saturating_sub(first) > MAX_RANGE_MD5_BYTES {
                    return Err(too_large_for_md5().into());
                }
            }
            Some(_) => {}
        }
    }
    let read = read_blob(ctx, request).await?;
    let (status, len) = match read.range {
        Some(r) => (StatusCode::PARTIAL_CONTENT, r.len()),
        None => (StatusCode::OK, read.meta.size),
    };
    let mut range_digest = None;
    let body = match read.body {
        Some(stream) if range_md5 => {
            if len > MAX_RANGE_MD5_BYTES {
                return Err(too_large_for_md5().into());
            }
            // The digest goes in a header, so the (small) range is read before answering.
            let bytes = collect_body(stream, len).await?;
            range_digest = Some(md5_base64(&bytes));
            ctx.gw.metrics.bytes_out(PROTOCOL, bytes.len() as u64);
            Body::from(bytes)
        }
        Some(stream) => {
            let metrics = ctx.gw.metrics.clone();
            Body::from_stream(futures_util::StreamExt::inspect(stream, move |c| {
                if let Ok(b) = c {
                    metrics.bytes_out(PROTOCOL, b.len() as u64);
                }
            }))
        }
        None => Body::empty(),
    };
    let mut resp = answer(status, body);
    let h = resp.headers_mut();
    set_header(h, "content-length", &len.to_string());
    set_header(h, "etag", &read.meta.etag);
    set_header(h, "accept-ranges", "bytes");
    set_header(
        h,
        "content-type",
        read.meta
            .content_type
            .as_deref()
            .unwrap_or("application/octet-stream"),
    );
    if let Some(digest) = &range_digest {
        set_header(h, "content-md5", digest);
    }
    set_header(h, "x-ms-blob-type", "BlockBlob");
    set_header(h, "x-ms-lease-status", "unlocked");
    set_header(h, "x-ms-lease-state", "available");
    set_header(h, "x-ms-server-encrypted", "true");
    if let Some(t) = read.meta.last_modified {
        let date = talon_protocols::dates::format_http_date(t);
        set_header(h, "last-modified", &date);
        set_header(h, "x-ms-creation-time", &date);
    }
    let md5 = &read.meta.headers.content_md5;
    if !md5.is_empty() {
        // On a range, Content-MD5 would claim to be the digest of the range.
        let name = match read.range {
            Some(_) => "x-ms-blob-content-md5",
            None => "content-md5",
        };
        set_header(h, name, md5);
    }
    crate::objects::set_object_headers(
        h,
        &read.meta.headers,
        talon_protocols::origin::AZURE_META_PREFIX,
    );
    if let Some(r) = read.range {
        set_header(h, "content-range", &r.content_range(read.meta.size));
    }
    Ok((read.outcome, resp))
}

/// Origin HEADs in flight while an Azure listing over an S3 origin gathers metadata.
const LISTING_HEADS_IN_FLIGHT: usize = 8;

/// A blob read, with failures named as Azure names them.
async fn read_blob(
    ctx: &Ctx<'_>,
    request: ReadRequest<'_>,
) -> Result<crate::objects::Read, Failure> {
    ctx.gw.objects.read(request).await.map_err(|mut f| {
        f.error = blob_errors(f.error);
        f
    })
}

/// The largest range whose MD5 Azure returns (`x-ms-range-get-content-md5`).
const MAX_RANGE_MD5_BYTES: u64 = 4 << 20;

/// Reads a body stream of `len` bytes into memory.
async fn collect_body(
    mut stream: crate::objects::BodyStream,
    len: u64,
) -> Result<bytes::Bytes, Error> {
    use futures_util::StreamExt as _;
    let mut buf = bytes::BytesMut::with_capacity(usize::try_from(len).unwrap_or(0));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            Error::new(
                ErrorKind::ServiceUnavailable,
                format!("reading the range failed: {e}"),
            )
        })?;
        buf.extend_from_slice(&chunk);
    }
    if buf.len() as u64 != len {
        return Err(Error::new(
            ErrorKind::InternalError,
            format!("the range ended after {} of {len} bytes", buf.len()),
        ));
    }
    Ok(buf.freeze())
}

/// Base64 of the MD5 of `bytes`, as `Content-MD5` carries it.
fn md5_base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    use md5::Digest as _;
    base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(bytes))
}

fn max_results(ctx: &Ctx<'_>) -> Result<Option<usize>, Error> {
    match ctx.query("maxresults") {
        None => Ok(None),
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .map(|n| Some(n.min(MAX_RESULTS)))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    "maxresults must be a positive integer",
                )
            }),
    }
}

fn service_endpoint(ctx: &Ctx<'_>) -> String {
    let host = header(ctx.headers, "host").unwrap_or("localhost");
    format!("http://{host}/{}/", ctx.request.account)
}

async fn list_containers(ctx: &Ctx<'_>) -> Result<Response, Failure> {
    let buckets = ctx.gw.objects.origin(ctx.backend())?.list_buckets().await?;
    let max = max_results(ctx)?;
    let query = ListQuery {
        prefix: ctx.query("prefix").unwrap_or(""),
        delimiter: None,
        marker: ctx.query("marker").filter(|m| !m.is_empty()),
        max_keys: max.unwrap_or(MAX_RESULTS),
    };
    let page = paginate(buckets, |b| b.name.as_str(), &query).map_entries(|b| {
        let created = b.created.unwrap_or(std::time::UNIX_EPOCH);
        let nanos = created
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        xml::ContainerEntry {
            name: b.name,
            last_modified: created,
            etag: format!("\"0x{nanos:X}\""),
        }
    });
    let echo = xml::ListEcho {
        prefix: ctx.query("prefix"),
        marker: ctx.query("marker"),
        max_results: max,
        delimiter: None,
    };
    Ok(xml_answer(xml::list_containers_xml(
        &service_endpoint(ctx),
        &echo,
        &page,
    )))
}

async fn container_properties(ctx: &Ctx<'_>) -> Result<Response, Failure> {
    ctx.gw
        .objects
        .origin(ctx.backend())?
        .head_bucket(ctx.container()?)
        .await
        .map_err(container_errors)?;
    let mut resp = answer(StatusCode::OK, Body::empty());
    let h = resp.headers_mut();
    set_header(h, "etag", "\"0x0\"");
    set_header(
        h,
        "last-modified",
        &talon_protocols::dates::format_http_date(std::time::UNIX_EPOCH),
    );
    set_header(h, "x-ms-lease-status", "unlocked");
    set_header(h, "x-ms-lease-state", "available");
    set_header(h, "x-ms-has-immutability-policy", "false");
    set_header(h, "x-ms-has-legal-hold", "false");
    Ok(resp)
}

/// Most blobs of a List Blobs page with `include=metadata` over an S3 origin: each costs
/// one origin HEAD, so one request costs at most this many.
const MAX_RESULTS_WITH_HEADS: usize = 100;

async fn list_blobs(ctx: &Ctx<'_>) -> Result<Response, Failure> {
    let container = ctx.container()?;
    let max = max_results(ctx)?;
    let delimiter = ctx.query("delimiter").filter(|d| !d.is_empty());
    let with_metadata =
        talon_protocols::azure::request::include_lists_metadata(ctx.query("include"));
    let origin = ctx.gw.objects.origin(ctx.backend())?;
    let mut page = origin
        .list_with(
            container,
            &ListOptions {
                prefix: ctx.query("prefix").unwrap_or(""),
                delimiter,
                token: ctx.query("marker").filter(|m| !m.is_empty()),
                start_after: None,
                // Over an S3 origin every listed object with metadata costs an origin
                // HEAD: such pages are capped, and the client pages on (SEC-20).
                max_keys: Some(if with_metadata && ctx.backend() == Backend::S3 {
                    max.unwrap_or(MAX_RESULTS).min(MAX_RESULTS_WITH_HEADS)
                } else {
                    max.unwrap_or(MAX_RESULTS)
                }),
                include_metadata: with_metadata,
            },
        )
        .await
        .map_err(container_errors)?;
    if with_metadata && ctx.backend() == Backend::S3 {
        // An S3 listing carries no metadata: ask for each object's, a few at a time.
        use futures_util::StreamExt as _;
        let keys: Vec<String> = page.objects.iter().map(|o| o.key.clone()).collect();
        let heads: Vec<_> = futures_util::stream::iter(keys)
            .map(|key| async move { origin.head(container, &key).await })
            .buffered(LISTING_HEADS_IN_FLIGHT)
            .collect()
            .await;
        for (object, head) in page.objects.iter_mut().zip(heads) {
            object.user_metadata = match head {
                Ok(info) => Some(info.headers.user_metadata.into_iter().collect()),
                // Deleted since the listing: listed without metadata, as it was then.
                Err(e) if e.kind() == ErrorKind::NoSuchKey => Some(Default::default()),
                Err(e) => return Err(e.into()),
            };
        }
    }
    let list_page = talon_protocols::listing::ListPage {
        entries: page
            .objects
            .into_iter()
            .map(|o| xml::BlobEntry {
                name: o.key,
                last_modified: o.last_modified.unwrap_or(std::time::UNIX_EPOCH),
                etag: o.etag,
                size: o.size,
                content_type: o
                    .content_type
                    .unwrap_or_else(|| "application/octet-stream".into()),
                content_md5: o.content_md5,
                metadata: with_metadata.then(|| o.user_metadata.unwrap_or_default()),
            })
            .collect(),
        common_prefixes: page.common_prefixes,
        is_truncated: page.next_token.is_some(),
        next_marker: page.next_token,
    };
    let echo = xml::ListEcho {
        prefix: ctx.query("prefix"),
        marker: ctx.query("marker"),
        max_results: max,
        delimiter,
    };
    Ok(xml_answer(xml::list_blobs_xml(
        &service_endpoint(ctx),
        container,
        &echo,
        &list_page,
    )))
}

fn write_headers(ctx: &Ctx<'_>) -> Vec<(String, String)> {
    let h = ctx.headers;
    let content_type = header(h, "x-ms-blob-content-type").or_else(|| header(h, "content-type"));
    let mut out = Vec::new();
    // Put Blob takes the plain content headers too (`x-ms-blob-*` wins), but not a plain
    // Content-Disposition.
    crate::objects::write_content_headers(&mut out, ctx.backend(), |name| {
        header_text(h, &format!("x-ms-blob-{name}")).or_else(|| {
            (name != "content-disposition")
                .then(|| header_text(h, name))
                .flatten()
        })
    });
    match ctx.backend() {
        Backend::Azure => {
            if let Some(ct) = content_type {
                out.push(("x-ms-blob-content-type".into(), ct.to_owned()));
            }
            for (name, value) in h {
                if let (true, Ok(v)) = (name.as_str().starts_with("x-ms-meta-"), value.to_str()) {
                    out.push((name.as_str().to_owned(), v.to_owned()));
                }
            }
        }
        Backend::S3 => {
            if let Some(ct) = content_type {
                out.push(("content-type".into(), ct.to_owned()));
            }
            for (name, value) in h {
                if let (Some(meta), Ok(v)) =
                    (name.as_str().strip_prefix("x-ms-meta-"), value.to_str())
                {
                    out.push((format!("x-amz-meta-{meta}"), v.to_owned()));
                }
            }
        }
    }
    out
}

/// The verified stream of an Azure upload's body, held to exactly `len` bytes.
fn verifying_stream(
    ctx: &Ctx<'_>,
    body: Body,
    len: u64,
) -> Result<(VerifyingStream, talon_protocols::upload::UploadOutcome), Error> {
    let mut claims = UploadClaims::azure(ctx.headers)?;
    claims.announced_len = Some(len);
    Ok(VerifyingStream::new(
        request_body(body),
        claims,
        ctx.gw.limits.max_upload_bytes,
        ctx.gw.limits.upload_idle_timeout,
    ))
}

fn content_length(ctx: &Ctx<'_>) -> Result<u64, Error> {
    header(ctx.headers, "content-length")
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::MissingContentLength,
                "Content-Length is required.",
            )
        })
}

async fn put_blob(ctx: &Ctx<'_>, body: Body) -> Result<Response, Failure> {
    let (container, blob) = (ctx.container()?, ctx.blob()?);
    let len = content_length(ctx)?;
    if len > ctx.gw.limits.max_upload_bytes {
        return Err(Error::new(ErrorKind::EntityTooLarge, "The request body is too large.").into());
    }
    let (stream, outcome) = verifying_stream(ctx, body, len)?;
    let keep =
        ctx.gw
            .objects
            .keep_for_write_through(ctx.front.route, ctx.backend(), container, blob, len);
    let stream = match keep {
        Some(_) => stream.keep_up_to(len),
        None => stream,
    };
    let headers = write_headers(ctx);
    let header_refs: Vec<(&str, String)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    let origin = ctx.gw.objects.origin(ctx.backend())?;
    let result = origin
        .put_stream(
            container,
            blob,
            stream.into_origin_body().await?,
            len,
            &header_refs,
        )
        .await;
    let (etag, verified) = settle(&outcome, result.map_err(container_errors))?;
    ctx.gw.objects.wrote(ctx.backend(), container, blob);
    ctx.gw.metrics.bytes_in(PROTOCOL, len);
    if let (Some(permit), Some(bytes)) = (keep, &verified.kept) {
        ctx.gw
            .objects
            .write_through(ctx.backend(), container, blob, &etag, bytes, permit)
            .await;
    }
    let mut resp = answer(StatusCode::CREATED, Body::empty());
    let h = resp.headers_mut();
    set_header(h, "etag", &etag);
    set_header(
        h,
        "last-modified",
        &talon_protocols::dates::format_http_date(SystemTime::now()),
    );
    set_header(h, "x-ms-request-server-encrypted", "true");
    set_header(h, "content-md5", &verified.md5_base64());
    Ok(resp)
}

async fn delete_blob(ctx: &Ctx<'_>) -> Result<Response, Failure> {
    let (container, blob) = (ctx.container()?, ctx.blob()?);
    let origin = ctx.gw.objects.origin(ctx.backend())?;
    if ctx.backend() == Backend::S3 {
        // S3 deletes a missing key without complaint; Azure answers 404.
        origin.head(container, blob).await.map_err(blob_errors)?;
    }
    origin.delete(container, blob).await.map_err(blob_errors)?;
    ctx.gw.objects.wrote(ctx.backend(), container, blob);
    Ok(answer(StatusCode::ACCEPTED, Body::empty()))
}

fn is_auth_param(name: &str) -> bool {
    matches!(
        name,
        "sv" | "ss"
            | "srt"
            | "sp"
            | "se"
            | "st"
            | "sip"
            | "spr"
            | "sig"
            | "sr"
            | "si"
            | "ses"
            | "skoid"
            | "sktid"
    )
}

/// Relays block uploads and container operations to an Azure origin.
async fn relay_to_azure_origin(ctx: &Ctx<'_>, body: Body) -> Result<Response, Failure> {
    if ctx.backend() != Backend::Azure {
        return Err(Error::new(
            ErrorKind::NotImplemented,
            format!(
                "{} is not implemented over an S3 origin",
                ctx.request.operation.name()
            ),
        )
        .into());
    }
    let origin = ctx.gw.objects.origin(Backend::Azure)?;
    let raw = ctx.request.query.0.iter();
    let query = raw
        .filter(|(k, _)| !is_auth_param(k))
        .map(|(k, v)| {
            format!(
                "{}={}",
                talon_protocols::uri_encoding::encode_strict(k),
                talon_protocols::uri_encoding::encode_strict(v)
            )
        })
        .collect::<Vec<_>>()
        .join("&");
    let mut headers = write_headers(ctx);
    if let Some(v) = header(ctx.headers, "content-md5") {
        headers.push(("content-md5".into(), v.to_owned()));
    }
    let op = ctx.request.operation;
    let (origin_body, outcome) = match op {
        AzureOperation::PutBlock | AzureOperation::PutBlockList => {
            let len = content_length(ctx)?;
            if len > ctx.gw.limits.max_upload_bytes {
                return Err(Error::new(
                    ErrorKind::EntityTooLarge,
                    "The request body is too large.",
                )
                .into());
            }
            let (stream, outcome) = verifying_stream(ctx, body, len)?;
            (
                OriginBody::Stream {
                    body: stream.into_origin_body().await?,
                    len,
                },
                Some(outcome),
            )
        }
        _ => (OriginBody::Empty, None),
    };
    let method = match op {
        AzureOperation::GetBlockList => Method::GET,
        AzureOperation::DeleteContainer => Method::DELETE,
        _ => Method::PUT,
    };
    let result = origin
        .forward(ForwardRequest {
            method,
            bucket: ctx.request.container.as_deref(),
            key: ctx.request.blob.as_deref(),
            query: &query,
            headers,
            body: origin_body,
        })
        .await;
    let resp = match outcome {
        Some(outcome) => settle(&outcome, result)?.0,
        None => result?,
    };
    if resp.status().is_success()
        && let (Some(c), Some(b)) = (&ctx.request.container, &ctx.request.blob)
    {
        ctx.gw.objects.wrote(Backend::Azure, c, b);
    }
    Ok(relay(resp).map(Body::new))
}
