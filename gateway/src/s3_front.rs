//! The S3 front: unmodified S3 clients (boto3, the aws CLI, aws-sdk-rust, rclone,
//! DuckDB) talk to it as to S3.
//!
//! Reads (GetObject, HeadObject) go through the front's route. Listings and bucket
//! operations are answered from the origin. Writes go to the origin exactly once,
//! re-signed with the gateway's identity (client credentials are never forwarded); on
//! success the gateway drops its metadata for the object, and since the version is part
//! of every cached block, the old bytes can no longer be served. Against an S3 origin,
//! operations the gateway does not interpret (multipart uploads, copies, bucket
//! creation) are relayed as they are; against an Azure origin they are not implemented.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use talon_protocols::conditional::Conditions;
use talon_protocols::listing::ListPage;
use talon_protocols::origin::{ForwardRequest, ListOptions, OriginBody};
use talon_protocols::range::RangeSpec;
use talon_protocols::s3::auth::{self as s3_auth, S3Auth};
use talon_protocols::s3::request::{
    ListObjectsParams, ListVersion, S3Operation, S3Request, resolve_address,
};
use talon_protocols::s3::sigv4::RequestParts;
use talon_protocols::s3::xml;
use talon_protocols::{Error, ErrorKind};

use crate::Gateway;
use crate::config::Backend;
use crate::metrics::Outcome;
use crate::objects::ReadRequest;
use crate::reply::{Failure, answer, header, header_text, relay, set_header, within_deadline};
use crate::upload::{UploadClaims, VerifyingBody, origin_body, settle};
use talon_cache_client::ReaderId;
use talon_protocols::answer::{ErrorContext, Front, error_answer, request_has_body};

const OWNER_ID: &str = "talon-gateway";
const PROTOCOL: &str = "s3";

/// Handles one S3 request.
pub async fn handle(gw: Arc<Gateway>, req: Request<Body>) -> Response {
    let request_id = Front::S3.new_request_id();
    let started = Instant::now();
    let is_head = req.method() == Method::HEAD;
    let resource = req.uri().path().to_owned();
    let host = header(req.headers(), "host").map(str::to_owned);
    let has_body = request_has_body(req.headers());
    let span = tracing::info_span!("s3", request_id = %request_id);
    let (operation, outcome, result) = tracing::Instrument::instrument(route(&gw, req), span).await;
    let front = gw.s3.as_ref();
    let route = front.map(|f| f.route.name()).unwrap_or("origin");
    let mut resp = match result {
        Ok(resp) => {
            gw.metrics.request(PROTOCOL, operation, route, outcome);
            resp
        }
        Err(f) => {
            gw.metrics
                .request(PROTOCOL, operation, route, Outcome::Failed);
            let addressing = front.map(|f| f.addressing.clone()).unwrap_or_default();
            let (bucket, key, _) = resolve_address(&addressing, host.as_deref(), &resource);
            let subject = xml::ErrorSubject {
                bucket: bucket.as_deref(),
                key: key.as_deref(),
            };
            let context = ErrorContext {
                is_head,
                has_body,
                request_id: &request_id,
                resource: &resource,
                subject,
            };
            error_answer(Front::S3, f, context).map(Body::from)
        }
    };
    gw.metrics.latency(PROTOCOL, operation, started.elapsed());
    Front::S3.stamp(resp.headers_mut(), &request_id, "", "talon-gateway");
    resp
}

type Routed = (&'static str, Outcome, Result<Response, Failure>);

async fn route(gw: &Arc<Gateway>, req: Request<Body>) -> Routed {
    let Some(front) = gw.s3.clone() else {
        return (
            "Unknown",
            Outcome::Failed,
            Err(Error::new(ErrorKind::NotImplemented, "no S3 front").into()),
        );
    };
    let (parts, body) = req.into_parts();
    if let Err(e) = Front::S3.check_header_size(&parts.headers, gw.limits.max_header_bytes) {
        return ("Unknown", Outcome::Failed, Err(e.into()));
    }
    let raw_path = parts.uri.path().to_owned();
    let raw_query = parts.uri.query().unwrap_or("").to_owned();
    let request = match S3Request::classify(
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
    let request_parts = RequestParts {
        method: parts.method.as_str(),
        raw_path: &raw_path,
        raw_query: &raw_query,
        headers: &parts.headers,
    };
    let auth = match s3_auth::authenticate(
        &gw.identities.s3,
        &request,
        &request_parts,
        SystemTime::now(),
    ) {
        Ok(a) => a,
        Err(e) => return (operation, Outcome::Failed, Err(e.into())),
    };
    let ctx = Ctx {
        gw,
        front: &front,
        headers: &parts.headers,
        request: &request,
        auth,
        raw_query: &raw_query,
        reader: parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|peer| ReaderId::from_ip(peer.0.ip())),
    };
    let streams_upload = matches!(
        request.operation,
        S3Operation::PutObject | S3Operation::UploadPart
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
    front: &'a crate::config::S3Front,
    headers: &'a HeaderMap,
    request: &'a S3Request,
    auth: S3Auth,
    raw_query: &'a str,
    /// Who the request's reads are for (the read budget's shares).
    reader: Option<ReaderId>,
}

impl Ctx<'_> {
    fn bucket(&self) -> Result<&str, Error> {
        self.request
            .bucket
            .as_deref()
            .ok_or_else(|| Error::new(ErrorKind::InvalidRequest, "the request names no bucket"))
    }

    fn key(&self) -> Result<&str, Error> {
        self.request
            .key
            .as_deref()
            .ok_or_else(|| Error::new(ErrorKind::InvalidRequest, "the request names no key"))
    }

    fn backend(&self) -> Backend {
        self.front.backend
    }
}

async fn dispatch(ctx: &Ctx<'_>, body: Body) -> (Outcome, Result<Response, Failure>) {
    use S3Operation::*;
    let op = ctx.request.operation;
    let result = match op {
        GetObject | HeadObject => return get_object(ctx, op == GetObject).await,
        ListBuckets => list_buckets(ctx).await,
        HeadBucket => head_bucket(ctx).await,
        GetBucketLocation => bucket_location(ctx).await,
        ListObjects => list_objects(ctx, ListVersion::V1).await,
        ListObjectsV2 => list_objects(ctx, ListVersion::V2).await,
        PutObject => put_object(ctx, body).await,
        DeleteObject => delete_object(ctx).await,
        DeleteObjects => delete_objects(ctx, body).await,
        CopyObject
        | CreateMultipartUpload
        | UploadPart
        | UploadPartCopy
        | CompleteMultipartUpload
        | AbortMultipartUpload
        | ListParts
        | ListMultipartUploads
        | CreateBucket
        | DeleteBucket => relay_to_s3_origin(ctx, body).await,
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

async fn get_object(ctx: &Ctx<'_>, with_body: bool) -> (Outcome, Result<Response, Failure>) {
    let result = get_object_inner(ctx, with_body).await;
    match result {
        Ok((outcome, resp)) => (outcome, Ok(resp)),
        Err(f) => (Outcome::Failed, Err(f)),
    }
}

async fn get_object_inner(ctx: &Ctx<'_>, with_body: bool) -> Result<(Outcome, Response), Failure> {
    let (bucket, key) = (ctx.bucket()?, ctx.key()?);
    if let Some(v) = ctx.request.query.get("versionId").filter(|v| *v != "null") {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("Invalid version id specified: {v}"),
        )
        .into());
    }
    let conditions = Conditions::from_headers(ctx.headers);
    let mut range = header(ctx.headers, "range").and_then(RangeSpec::parse);
    let mut part = None;
    if let Some(pn) = ctx.request.query.get("partNumber") {
        if ctx.headers.contains_key("range") {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                "Cannot specify both Range header and partNumber query parameter",
            )
            .into());
        }
        let found = part_bounds(ctx, bucket, key, pn).await?;
        range = found.range.map(|r| RangeSpec::Bounded {
            first: r.start,
            last: r.last(),
        });
        part = Some(found);
    }
    let read = ctx
        .gw
        .objects
        .read(ReadRequest {
            route: ctx.front.route,
            backend: ctx.backend(),
            bucket,
            key,
            conditions: &conditions,
            range,
            with_body,
            reader: ctx.reader,
        })
        .await?;
    let (status, len) = match read.range {
        Some(r) => (StatusCode::PARTIAL_CONTENT, r.len()),
        None => (StatusCode::OK, read.meta.size),
    };
    let body = match read.body {
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
    if let Some(t) = read.meta.last_modified {
        set_header(
            h,
            "last-modified",
            &talon_protocols::dates::format_http_date(t),
        );
    }
    crate::objects::set_object_headers(
        h,
        &read.meta.headers,
        talon_protocols::origin::S3_META_PREFIX,
    );
    // The full-object checksum, when asked for and the answer is the whole object: the
    // SDK then verifies every byte it got from the cache against the origin's checksum.
    if read.range.is_none()
        && part.is_none()
        && header(ctx.headers, "x-amz-checksum-mode")
            .is_some_and(|v| v.eq_ignore_ascii_case("ENABLED"))
        && let Some((alg, value)) = read.meta.headers.checksum.split_once(':')
    {
        set_header(h, &format!("x-amz-checksum-{alg}"), value);
        set_header(h, "x-amz-checksum-type", "FULL_OBJECT");
    }
    if let Some(r) = read.range {
        set_header(h, "content-range", &r.content_range(read.meta.size));
    }
    if let Some(part) = &part {
        if part.etag.as_deref().is_some_and(|e| {
            talon_protocols::conditional::normalize_etag(e)
                != talon_protocols::conditional::normalize_etag(&read.meta.etag)
        }) {
            // The object changed between the part lookup and the read.
            return Err(Error::new(
                ErrorKind::SlowDown,
                "The object changed while its part was read; retry",
            )
            .into());
        }
        if let Some(count) = part.count {
            set_header(h, "x-amz-mp-parts-count", &count.to_string());
        }
    }
    for (name, v) in
        talon_protocols::content_headers::s3_response_overrides(&ctx.request.query, ctx.auth.caller)
    {
        set_header(h, name, v);
    }
    Ok((read.outcome, resp))
}

/// Where part `n` of an object lies, as its origin says.
struct PartBounds {
    /// The part's bytes; `None` when the origin answers with the whole object.
    range: Option<talon_protocols::range::ByteRange>,
    /// `x-amz-mp-parts-count`, when the origin gives it.
    count: Option<u32>,
    /// The version the bounds belong to.
    etag: Option<String>,
}

/// Asks the origin where part `pn` (1..=10000) lies: `HEAD ?partNumber=pn` for an S3
/// origin, whose multipart boundaries only it knows. An Azure origin has no parts, so
/// there part 1 is the whole blob and any other is unsatisfiable. The part's bytes are
/// then read through the route like any range.
async fn part_bounds(
    ctx: &Ctx<'_>,
    bucket: &str,
    key: &str,
    pn: &str,
) -> Result<PartBounds, Error> {
    let n: u32 = pn
        .parse()
        .ok()
        .filter(|n| (1..=10_000).contains(n))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                "Part number must be an integer between 1 and 10000, inclusive",
            )
        })?;
    let unsatisfiable = || {
        Error::new(
            ErrorKind::InvalidRange,
            "The requested partnumber is not satisfiable",
        )
    };
    if ctx.backend() == Backend::Azure {
        return if n == 1 {
            Ok(PartBounds {
                range: None,
                count: Some(1),
                etag: None,
            })
        } else {
            Err(unsatisfiable())
        };
    }
    let query = format!("partNumber={n}");
    let resp = ctx
        .gw
        .objects
        .origin(Backend::S3)?
        .forward(ForwardRequest {
            method: Method::HEAD,
            bucket: Some(bucket),
            key: Some(key),
            query: &query,
            headers: Vec::new(),
            body: OriginBody::Empty,
        })
        .await?;
    let status = resp.status();
    if status == StatusCode::RANGE_NOT_SATISFIABLE {
        return Err(unsatisfiable());
    }
    if !status.is_success() {
        return Err(Error::new(
            ErrorKind::from_status(status),
            format!("the origin answered {status} for part {n}"),
        ));
    }
    let headers = resp.headers();
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let range = match text("content-range") {
        Some(v) => Some(
            talon_protocols::range::parse_content_range(v)
                .map(|(r, _)| r)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::InternalError,
                        format!("the origin's Content-Range '{v}' for part {n} is not valid"),
                    )
                })?,
        ),
        None => None,
    };
    Ok(PartBounds {
        range,
        count: text("x-amz-mp-parts-count").and_then(|c| c.parse().ok()),
        etag: text("etag").map(str::to_owned),
    })
}

async fn list_buckets(ctx: &Ctx<'_>) -> Result<Response, Failure> {
    let buckets = ctx.gw.objects.origin(ctx.backend())?.list_buckets().await?;
    let entries: Vec<xml::BucketEntry> = buckets
        .into_iter()
        .map(|b| xml::BucketEntry {
            name: b.name,
            created: b.created.unwrap_or(std::time::UNIX_EPOCH),
        })
        .collect();
    Ok(xml_answer(xml::list_buckets_xml(OWNER_ID, &entries)))
}

async fn head_bucket(ctx: &Ctx<'_>) -> Result<Response, Failure> {
    ctx.gw
        .objects
        .origin(ctx.backend())?
        .head_bucket(ctx.bucket()?)
        .await?;
    let mut resp = answer(StatusCode::OK, Body::empty());
    set_header(resp.headers_mut(), "x-amz-bucket-region", &ctx.front.region);
    Ok(resp)
}

async fn bucket_location(ctx: &Ctx<'_>) -> Result<Response, Failure> {
    ctx.gw
        .objects
        .origin(ctx.backend())?
        .head_bucket(ctx.bucket()?)
        .await?;
    Ok(xml_answer(xml::location_xml(&ctx.front.region)))
}

async fn list_objects(ctx: &Ctx<'_>, version: ListVersion) -> Result<Response, Failure> {
    let bucket = ctx.bucket()?;
    let params = ListObjectsParams::from_query(&ctx.request.query, version)?;
    let origin = ctx.gw.objects.origin(ctx.backend())?;
    // S3 origins resume V1 listings with start-after on the last key; Azure origins
    // with their own marker, which the gateway hands out as NextMarker.
    let (token, start_after) = match (version, ctx.backend()) {
        (ListVersion::V2, _) => (
            params.continuation_token.as_deref(),
            params.start_after.as_deref(),
        ),
        (ListVersion::V1, Backend::S3) => (None, params.marker.as_deref()),
        (ListVersion::V1, Backend::Azure) => (params.marker.as_deref(), None),
    };
    if params.max_keys == 0 {
        let empty = ListPage {
            entries: Vec::new(),
            common_prefixes: Vec::new(),
            is_truncated: false,
            next_marker: None,
        };
        return Ok(xml_answer(xml::list_objects_xml(
            bucket, &params, &empty, None, OWNER_ID,
        )));
    }
    let page = origin
        .list_with(
            bucket,
            &ListOptions {
                prefix: &params.prefix,
                delimiter: params.delimiter.as_deref(),
                token,
                start_after,
                max_keys: Some(params.max_keys),
                include_metadata: false,
            },
        )
        .await?;
    let is_truncated = page.next_token.is_some();
    let last_key = page.objects.last().map(|o| o.key.clone());
    let last_prefix = page.common_prefixes.last().cloned();
    let next_marker = match (version, ctx.backend()) {
        (ListVersion::V1, Backend::S3) => last_key.max(last_prefix),
        _ => page.next_token.clone(),
    };
    let list_page = ListPage {
        entries: page
            .objects
            .into_iter()
            .map(|o| xml::ObjectEntry {
                key: o.key,
                last_modified: o.last_modified.unwrap_or(std::time::UNIX_EPOCH),
                etag: o.etag,
                size: o.size,
            })
            .collect(),
        common_prefixes: page.common_prefixes,
        is_truncated,
        next_marker: next_marker.filter(|_| is_truncated),
    };
    let next_token = page
        .next_token
        .as_deref()
        .filter(|_| version == ListVersion::V2);
    Ok(xml_answer(xml::list_objects_xml(
        bucket, &params, &list_page, next_token, OWNER_ID,
    )))
}

/// What the client's body claims, and how its framing is read.
fn upload_claims(ctx: &Ctx<'_>) -> Result<(UploadClaims, u64), Error> {
    let claims = UploadClaims::s3(ctx.headers, ctx.auth.seed.as_ref())?;
    // The origin is told the decoded length up front.
    let len = claims.announced_len.ok_or_else(|| {
        Error::new(
            ErrorKind::MissingContentLength,
            "You must provide the Content-Length HTTP header.",
        )
    })?;
    Ok((claims, len))
}

/// Headers an object write carries to the origin, in the origin's dialect.
fn write_headers(ctx: &Ctx<'_>) -> Vec<(String, String)> {
    let h = ctx.headers;
    let mut out = Vec::new();
    let content_type = header(h, "content-type");
    crate::objects::write_content_headers(&mut out, ctx.backend(), |name| header_text(h, name));
    match ctx.backend() {
        Backend::S3 => {
            if let Some(ct) = content_type {
                out.push(("content-type".into(), ct.to_owned()));
            }
            for (name, value) in h {
                let n = name.as_str();
                if (n.starts_with("x-amz-meta-") || n == "expires")
                    && let Ok(v) = value.to_str()
                {
                    out.push((n.to_owned(), v.to_owned()));
                }
            }
        }
        Backend::Azure => {
            if let Some(ct) = content_type {
                out.push(("x-ms-blob-content-type".into(), ct.to_owned()));
            }
            for (name, value) in h {
                if let (Some(meta), Ok(v)) =
                    (name.as_str().strip_prefix("x-amz-meta-"), value.to_str())
                {
                    out.push((format!("x-ms-meta-{meta}"), v.to_owned()));
                }
            }
        }
    }
    out
}

async fn put_object(ctx: &Ctx<'_>, body: Body) -> Result<Response, Failure> {
    let (bucket, key) = (ctx.bucket()?, ctx.key()?);
    let (claims, len) = upload_claims(ctx)?;
    if len > ctx.gw.limits.max_upload_bytes {
        return Err(Error::new(
            ErrorKind::EntityTooLarge,
            "Your proposed upload exceeds the maximum allowed size",
        )
        .into());
    }
    let mut headers = write_headers(ctx);
    // A checksum the client sent as a header is known before the body: the origin keeps
    // it (and verifies it again). One announced as a trailer is known only at the end:
    // the body goes on to an S3 origin with a trailer of its own carrying that checksum.
    if let Some((alg, value)) = &claims.checksum {
        headers.push((alg.header_name().to_owned(), value.clone()));
    }
    let trailer = match (&claims.chunked, &claims.checksum) {
        (Some((_, Some(alg), _)), None) => Some(*alg),
        _ => None,
    };
    let (stream, outcome) =
        VerifyingBody::new(body, claims, len, ctx.gw.limits.upload_idle_timeout);
    let keep =
        ctx.gw
            .objects
            .keep_for_write_through(ctx.front.route, ctx.backend(), bucket, key, len);
    let stream = match keep {
        Some(_) => stream.keep_up_to(len),
        None => stream,
    };
    for cond in ["if-match", "if-none-match"] {
        if let Some(v) = header(ctx.headers, cond) {
            headers.push((cond.to_owned(), v.to_owned()));
        }
    }
    let origin = ctx.gw.objects.origin(ctx.backend())?;
    let header_refs: Vec<(&str, String)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    let result = match trailer {
        Some(alg) => {
            origin
                .put_stream_with_checksum(bucket, key, stream, len, alg, &header_refs)
                .await
        }
        None => {
            origin
                .put_stream(bucket, key, origin_body(stream).await?, len, &header_refs)
                .await
        }
    };
    let (etag, verified) = settle(&outcome, result)?;
    ctx.gw.objects.wrote(ctx.backend(), bucket, key);
    ctx.gw.metrics.bytes_in(PROTOCOL, len);
    if let (Some(permit), Some(bytes)) = (keep, &verified.kept) {
        ctx.gw
            .objects
            .write_through(ctx.backend(), bucket, key, &etag, bytes, permit)
            .await;
    }
    let mut resp = answer(StatusCode::OK, Body::empty());
    set_header(resp.headers_mut(), "etag", &etag);
    if let Some((alg, value)) = verified.checksum {
        set_header(resp.headers_mut(), alg.header_name(), &value);
    }
    Ok(resp)
}

async fn delete_object(ctx: &Ctx<'_>) -> Result<Response, Failure> {
    let (bucket, key) = (ctx.bucket()?, ctx.key()?);
    match ctx
        .gw
        .objects
        .origin(ctx.backend())?
        .delete(bucket, key)
        .await
    {
        // S3 answers 204 whether or not the key existed.
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NoSuchKey => {}
        Err(e) => return Err(e.into()),
    }
    ctx.gw.objects.wrote(ctx.backend(), bucket, key);
    Ok(answer(StatusCode::NO_CONTENT, Body::empty()))
}

async fn read_xml_body(ctx: &Ctx<'_>, body: Body) -> Result<Bytes, Error> {
    let limited = http_body_util::Limited::new(body, ctx.gw.limits.max_xml_bytes);
    limited.collect().await.map(|c| c.to_bytes()).map_err(|e| {
        Error::new(
            ErrorKind::EntityTooLarge,
            format!("the request body is too large or broke off: {e}"),
        )
    })
}

async fn delete_objects(ctx: &Ctx<'_>, body: Body) -> Result<Response, Failure> {
    let bucket = ctx.bucket()?;
    let bytes = read_xml_body(ctx, body).await?;
    let (claims, _) = upload_claims(ctx)?;
    // Verify the small body's digests the same way as any upload.
    let (mut check, outcome) = VerifyingBody::new(
        Body::from(bytes.clone()),
        claims,
        bytes.len() as u64,
        ctx.gw.limits.upload_idle_timeout,
    );
    while let Some(r) = futures_util::StreamExt::next(&mut check).await {
        if r.is_err() {
            break;
        }
    }
    settle(&outcome, Ok(()))?;
    let request: xml::DeleteRequest = xml::parse_request(&bytes)?;
    if request.objects.len() > 1000 {
        return Err(Error::new(
            ErrorKind::MalformedXml,
            "A DeleteObjects request may name at most 1000 keys",
        )
        .into());
    }
    let origin = ctx.gw.objects.origin(ctx.backend())?;
    let mut outcomes = Vec::with_capacity(request.objects.len());
    for o in request.objects {
        let result = origin.delete(bucket, &o.key).await;
        ctx.gw.objects.wrote(ctx.backend(), bucket, &o.key);
        outcomes.push(match result {
            Ok(()) => xml::DeleteOutcome::Deleted(o.key),
            Err(e) if e.kind() == ErrorKind::NoSuchKey => xml::DeleteOutcome::Deleted(o.key),
            Err(e) => xml::DeleteOutcome::Failed {
                key: o.key,
                kind: e.kind(),
                message: e.message().to_owned(),
            },
        });
    }
    Ok(xml_answer(xml::delete_result_xml(&outcomes, request.quiet)))
}

/// Query parameters that authenticate the client; never relayed.
fn is_auth_param(name: &str) -> bool {
    name.starts_with("X-Amz-")
        || matches!(name, "AWSAccessKeyId" | "Signature" | "Expires" | "x-id")
}

/// Relays an operation the gateway does not interpret to an S3 origin, re-signed with
/// the gateway's identity; the client's body is decoded and verified on the way.
async fn relay_to_s3_origin(ctx: &Ctx<'_>, body: Body) -> Result<Response, Failure> {
    if ctx.backend() != Backend::S3 {
        return Err(Error::new(
            ErrorKind::NotImplemented,
            format!(
                "{} is not implemented over an Azure origin",
                ctx.request.operation.name()
            ),
        )
        .into());
    }
    let origin = ctx.gw.objects.origin(Backend::S3)?;
    let query: Vec<&str> = ctx
        .raw_query
        .split('&')
        .filter(|p| !p.is_empty() && !is_auth_param(p.split('=').next().unwrap_or("")))
        .collect();
    let query = query.join("&");
    let mut headers = write_headers(ctx);
    for name in [
        "x-amz-copy-source",
        "x-amz-copy-source-range",
        "x-amz-copy-source-if-match",
        "x-amz-copy-source-if-none-match",
        "x-amz-copy-source-if-modified-since",
        "x-amz-copy-source-if-unmodified-since",
        "x-amz-metadata-directive",
        "x-amz-tagging",
        "x-amz-storage-class",
        "content-md5",
    ] {
        if let Some(v) = header(ctx.headers, name) {
            headers.push((name.to_owned(), v.to_owned()));
        }
    }
    let op = ctx.request.operation;
    let (origin_body, outcome) = match op {
        S3Operation::UploadPart => {
            let (claims, len) = upload_claims(ctx)?;
            if let Some((alg, value)) = &claims.checksum {
                headers.push((alg.header_name().to_owned(), value.clone()));
            }
            if len > ctx.gw.limits.max_upload_bytes {
                return Err(Error::new(
                    ErrorKind::EntityTooLarge,
                    "Your proposed upload exceeds the maximum allowed size",
                )
                .into());
            }
            let (stream, outcome) =
                VerifyingBody::new(body, claims, len, ctx.gw.limits.upload_idle_timeout);
            (
                OriginBody::Stream {
                    body: origin_body(stream).await?,
                    len,
                },
                Some(outcome),
            )
        }
        S3Operation::CompleteMultipartUpload | S3Operation::CreateBucket => {
            let bytes = read_xml_body(ctx, body).await?;
            if bytes.is_empty() {
                (OriginBody::Empty, None)
            } else {
                (OriginBody::Bytes(bytes), None)
            }
        }
        _ => (OriginBody::Empty, None),
    };
    let result = origin
        .forward(ForwardRequest {
            method: method_of(op),
            bucket: ctx.request.bucket.as_deref(),
            key: ctx.request.key.as_deref(),
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
        && let (Some(bucket), Some(key)) = (&ctx.request.bucket, &ctx.request.key)
    {
        ctx.gw.objects.wrote(Backend::S3, bucket, key);
    }
    Ok(relay(resp))
}

fn method_of(op: S3Operation) -> Method {
    use S3Operation::*;
    match op {
        CopyObject | UploadPart | UploadPartCopy | CreateBucket | PutObject => Method::PUT,
        CreateMultipartUpload | CompleteMultipartUpload | DeleteObjects => Method::POST,
        AbortMultipartUpload | DeleteBucket | DeleteObject => Method::DELETE,
        HeadBucket | HeadObject => Method::HEAD,
        _ => Method::GET,
    }
}
