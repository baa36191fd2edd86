//! The S3 front of the stub.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{HeaderMap, Method, Request, StatusCode};
use hyper::body::Incoming;
use talon_protocols::access::Caller;
use talon_protocols::checksum::ChecksumAlgorithm;
use talon_protocols::conditional::{Conditions, EtagList};
use talon_protocols::dates::{format_http_date, parse_http_date};
use talon_protocols::listing::{ListQuery, paginate};
use talon_protocols::range::RangeSpec;
use talon_protocols::s3::auth as s3_auth;
use talon_protocols::s3::request::{
    ListObjectsParams, ListVersion, S3Operation, S3Request, parse_copy_source, validate_bucket_name,
};
use talon_protocols::s3::sigv4::{RequestParts, VerifiedSigV4};
use talon_protocols::s3::xml;
use talon_protocols::{Error, ErrorKind, Result};

use crate::body::{self, ResponseBody};
use talon_protocols::s3::request::resolve_address;
use talon_protocols::upload::UploadClaims;

use crate::front::{
    Failure, Handled, MAX_HEADER_BYTES, MAX_XML_BYTES, Outcome, StubState, answer, apply_faults,
    blocking, content_headers, header, path_and_query, receive_upload, request_has_body,
    set_content_headers, set_header, user_metadata,
};
use crate::front::{ReadAnswer, object_answer};
use crate::metrics::Protocol;
use crate::server::{ConnectionReset, HandlerResult};
use crate::store::{NewObject, ObjectMeta, WriteOptions};
use talon_protocols::answer::{ErrorContext, Front, error_answer};

/// The owner id written into listings.
const OWNER_ID: &str = "talon-origin-stub";

/// Handles one S3 request.
pub async fn handle(
    state: Arc<StubState>,
    req: Request<Incoming>,
    _peer: SocketAddr,
) -> HandlerResult {
    let request_id = Front::S3.new_request_id();
    let is_head = req.method() == Method::HEAD;
    let resource = req.uri().path().to_owned();
    let host = header(req.headers(), "host").map(str::to_owned);
    let has_body = request_has_body(req.headers());
    let result = route(&state, req).await;
    let mut resp = match result {
        Ok(resp) => resp,
        Err(Outcome::Reset) => return Err(ConnectionReset),
        Err(Outcome::Failure(f)) => {
            let (bucket, key, _) =
                resolve_address(&state.s3_addressing, host.as_deref(), &resource);
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
            error_answer(Front::S3, f, context).map(body::full)
        }
    };
    Front::S3.stamp(resp.headers_mut(), &request_id, "", "talon-origin-stub");
    Ok(resp)
}

async fn route(state: &Arc<StubState>, req: Request<Incoming>) -> Handled {
    let (parts, body) = req.into_parts();
    Front::S3.check_header_size(&parts.headers, MAX_HEADER_BYTES)?;
    let (raw_path, raw_query) = path_and_query(&parts.uri);
    let request = S3Request::classify(
        &parts.method,
        &state.s3_addressing,
        &parts.headers,
        &raw_path,
        &raw_query,
    )?;
    state
        .metrics
        .request(Protocol::S3, request.operation.name());
    let truncate = apply_faults(&state.faults, &state.metrics).await?;
    let request_parts = RequestParts {
        method: parts.method.as_str(),
        raw_path: &raw_path,
        raw_query: &raw_query,
        headers: &parts.headers,
    };
    let auth = s3_auth::authenticate(
        &state.s3_identities,
        &request,
        &request_parts,
        SystemTime::now(),
    )?;
    let ctx = Ctx {
        state,
        headers: &parts.headers,
        request: &request,
        auth: auth.seed,
        caller: auth.caller,
        truncate,
    };
    use S3Operation::*;
    match request.operation {
        ListBuckets => list_buckets(&ctx).await,
        HeadBucket => head_bucket(&ctx).await,
        GetBucketLocation => bucket_location(&ctx).await,
        CreateBucket => create_bucket(&ctx).await,
        DeleteBucket => delete_bucket(&ctx).await,
        ListObjects => list_objects(&ctx, ListVersion::V1).await,
        ListObjectsV2 => list_objects(&ctx, ListVersion::V2).await,
        ListMultipartUploads => list_uploads(&ctx).await,
        GetObject => get_object(&ctx, true).await,
        HeadObject => get_object(&ctx, false).await,
        PutObject => put_object(&ctx, body).await,
        CopyObject => copy_object(&ctx).await,
        DeleteObject => delete_object(&ctx).await,
        DeleteObjects => delete_objects(&ctx, body).await,
        CreateMultipartUpload => create_upload(&ctx).await,
        UploadPart => upload_part(&ctx, body).await,
        UploadPartCopy => Err(Error::new(
            ErrorKind::NotImplemented,
            "UploadPartCopy is not implemented",
        )
        .into()),
        CompleteMultipartUpload => complete_upload(&ctx, body).await,
        AbortMultipartUpload => abort_upload(&ctx).await,
        ListParts => list_parts(&ctx).await,
    }
}

/// One request's context.
struct Ctx<'a> {
    state: &'a Arc<StubState>,
    headers: &'a HeaderMap,
    request: &'a S3Request,
    auth: Option<VerifiedSigV4>,
    caller: Caller,
    truncate: bool,
}

impl Ctx<'_> {
    fn bucket(&self) -> Result<String> {
        self.request
            .bucket
            .clone()
            .ok_or_else(|| Error::new(ErrorKind::InvalidRequest, "the request names no bucket"))
    }

    fn key(&self) -> Result<String> {
        self.request
            .key
            .clone()
            .ok_or_else(|| Error::new(ErrorKind::InvalidRequest, "the request names no key"))
    }

    fn query(&self, name: &str) -> Option<&str> {
        self.request.query.get(name)
    }
}

async fn list_buckets(ctx: &Ctx<'_>) -> Handled {
    let store = ctx.state.store.clone();
    let buckets = blocking(move || store.list_buckets()).await?;
    let entries: Vec<xml::BucketEntry> = buckets
        .into_iter()
        .map(|b| xml::BucketEntry {
            name: b.name,
            created: b.created,
        })
        .collect();
    Ok(xml_answer(
        StatusCode::OK,
        xml::list_buckets_xml(OWNER_ID, &entries),
    ))
}

fn xml_answer(status: StatusCode, doc: String) -> http::Response<ResponseBody> {
    let mut resp = answer(status, body::full(doc));
    set_header(resp.headers_mut(), "content-type", "application/xml");
    resp
}

async fn require_bucket(ctx: &Ctx<'_>) -> Result<String> {
    let bucket = ctx.bucket()?;
    let store = ctx.state.store.clone();
    let b = bucket.clone();
    blocking(move || store.bucket_info(&b)).await?;
    Ok(bucket)
}

async fn head_bucket(ctx: &Ctx<'_>) -> Handled {
    require_bucket(ctx).await?;
    let mut resp = answer(StatusCode::OK, body::empty());
    set_header(resp.headers_mut(), "x-amz-bucket-region", &ctx.state.region);
    Ok(resp)
}

async fn bucket_location(ctx: &Ctx<'_>) -> Handled {
    require_bucket(ctx).await?;
    Ok(xml_answer(
        StatusCode::OK,
        xml::location_xml(&ctx.state.region),
    ))
}

async fn create_bucket(ctx: &Ctx<'_>) -> Handled {
    let bucket = ctx.bucket()?;
    validate_bucket_name(&bucket)?;
    let store = ctx.state.store.clone();
    let b = bucket.clone();
    blocking(move || store.create_bucket(&b)).await?;
    let mut resp = answer(StatusCode::OK, body::empty());
    set_header(resp.headers_mut(), "location", &format!("/{bucket}"));
    Ok(resp)
}

async fn delete_bucket(ctx: &Ctx<'_>) -> Handled {
    let bucket = ctx.bucket()?;
    let store = ctx.state.store.clone();
    blocking(move || store.delete_bucket(&bucket)).await?;
    Ok(answer(StatusCode::NO_CONTENT, body::empty()))
}

fn encode_token(marker: &str) -> String {
    URL_SAFE_NO_PAD.encode(marker.as_bytes())
}

fn decode_token(token: &str) -> Result<String> {
    URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                "The continuation token provided is incorrect",
            )
        })
}

async fn list_objects(ctx: &Ctx<'_>, version: ListVersion) -> Handled {
    let bucket = ctx.bucket()?;
    let params = ListObjectsParams::from_query(&ctx.request.query, version)?;
    let marker = match version {
        ListVersion::V1 => params.marker.clone(),
        ListVersion::V2 => match &params.continuation_token {
            Some(t) => Some(decode_token(t)?),
            None => params.start_after.clone(),
        },
    };
    let store = ctx.state.store.clone();
    let b = bucket.clone();
    let objects = blocking(move || store.list(&b)).await?;
    let query = ListQuery {
        prefix: &params.prefix,
        delimiter: params.delimiter.as_deref(),
        marker: marker.as_deref(),
        max_keys: params.max_keys,
    };
    let page = paginate(objects, |o| o.key.as_str(), &query);
    let page = page.map_entries(|o| xml::ObjectEntry {
        key: o.key,
        last_modified: o.last_modified,
        etag: o.etag,
        size: o.size,
    });
    let next_token = page.next_marker.as_deref().map(encode_token);
    Ok(xml_answer(
        StatusCode::OK,
        xml::list_objects_xml(&bucket, &params, &page, next_token.as_deref(), OWNER_ID),
    ))
}

async fn list_uploads(ctx: &Ctx<'_>) -> Handled {
    let bucket = ctx.bucket()?;
    let store = ctx.state.store.clone();
    let b = bucket.clone();
    let uploads = blocking(move || store.list_uploads(&b)).await?;
    let entries: Vec<xml::UploadEntry> = uploads
        .into_iter()
        .map(|u| xml::UploadEntry {
            key: u.key,
            upload_id: u.upload_id,
            initiated: u.initiated,
        })
        .collect();
    Ok(xml_answer(
        StatusCode::OK,
        xml::list_uploads_xml(&bucket, &entries),
    ))
}

/// Headers every object answer carries.
fn object_headers(h: &mut HeaderMap, meta: &ObjectMeta) {
    set_header(h, "etag", &meta.etag);
    set_header(h, "last-modified", &format_http_date(meta.last_modified));
    set_header(h, "accept-ranges", "bytes");
    set_header(h, "content-type", &meta.content_type);
    for (k, v) in &meta.user_metadata {
        set_header(h, &format!("x-amz-meta-{k}"), v);
    }
    set_content_headers(h, &meta.content_headers);
}

fn not_modified_headers(meta: &ObjectMeta) -> Vec<(&'static str, String)> {
    vec![
        ("etag", meta.etag.clone()),
        ("last-modified", format_http_date(meta.last_modified)),
    ]
}

async fn get_object(ctx: &Ctx<'_>, with_body: bool) -> Handled {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    if let Some(v) = ctx.query("versionId").filter(|v| *v != "null") {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("Invalid version id specified: {v}"),
        )
        .into());
    }
    let store = ctx.state.store.clone();
    let (b, k) = (bucket.clone(), key.clone());
    let object = blocking(move || store.open(&b, &k)).await?;
    let meta = object.meta;
    if let Err(kind) =
        Conditions::from_headers(ctx.headers).check_read(&meta.etag, meta.last_modified)
    {
        let message = match kind {
            ErrorKind::NotModified => "Not Modified",
            _ => "At least one of the pre-conditions you specified did not hold",
        };
        return Err(Failure {
            error: Error::new(kind, message),
            headers: not_modified_headers(&meta),
        }
        .into());
    }
    let mut part_count = None;
    let range = if let Some(pn) = ctx.query("partNumber") {
        if ctx.headers.contains_key("range") {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                "Cannot specify both Range header and partNumber query parameter",
            )
            .into());
        }
        let pn: usize = pn
            .parse()
            .ok()
            .filter(|n| (1..=10_000).contains(n))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    "Part number must be an integer between 1 and 10000, inclusive",
                )
            })?;
        if meta.parts.is_empty() {
            if pn != 1 {
                return Err(Error::new(
                    ErrorKind::InvalidRange,
                    "The requested partnumber is not satisfiable",
                )
                .into());
            }
            part_count = Some(1);
            None
        } else {
            if pn > meta.parts.len() {
                return Err(Error::new(
                    ErrorKind::InvalidRange,
                    "The requested partnumber is not satisfiable",
                )
                .into());
            }
            part_count = Some(meta.parts.len());
            let start: u64 = meta.parts[..pn - 1].iter().sum();
            Some(talon_protocols::range::ByteRange {
                start,
                end: start + meta.parts[pn - 1],
            })
            .filter(|r| r.end > r.start)
        }
    } else {
        match header(ctx.headers, "range").and_then(RangeSpec::parse) {
            Some(spec) => match spec.resolve(meta.size) {
                Ok(r) => Some(r),
                Err(u) => {
                    return Err(Failure {
                        error: Error::new(
                            ErrorKind::InvalidRange,
                            "The requested range is not satisfiable",
                        ),
                        headers: vec![("content-range", u.content_range())],
                    }
                    .into());
                }
            },
            None => None,
        }
    };
    let read = ReadAnswer {
        state: ctx.state,
        protocol: Protocol::S3,
        with_body,
        truncate: ctx.truncate,
    };
    let mut resp = object_answer(read, object.body, meta.size, range);
    let h = resp.headers_mut();
    object_headers(h, &meta);
    if let Some(n) = part_count.filter(|_| !meta.parts.is_empty()) {
        set_header(h, "x-amz-mp-parts-count", &n.to_string());
    }
    let whole = range.is_none() && part_count.is_none();
    if whole
        && header(ctx.headers, "x-amz-checksum-mode")
            .is_some_and(|v| v.eq_ignore_ascii_case("ENABLED"))
        && let Some((alg, value)) = &meta.checksum
    {
        set_header(h, alg.header_name(), value);
        set_header(h, "x-amz-checksum-type", "FULL_OBJECT");
    }
    for (name, v) in
        talon_protocols::content_headers::s3_response_overrides(&ctx.request.query, ctx.caller)
    {
        set_header(h, name, v);
    }
    Ok(resp)
}

/// How the body of a write is framed and what it must match.
fn expectations(ctx: &Ctx<'_>) -> Result<UploadClaims> {
    UploadClaims::s3(ctx.headers, ctx.auth.as_ref())
}

fn write_options(ctx: &Ctx<'_>) -> Result<WriteOptions> {
    Ok(WriteOptions {
        content_type: header(ctx.headers, "content-type").map(str::to_owned),
        user_metadata: user_metadata(ctx.headers, "x-amz-meta-")?,
        content_headers: content_headers(ctx.headers, ""),
        checksum: None,
    })
}

/// Evaluates write preconditions (`If-None-Match: *`, `If-Match`) against what is stored.
async fn check_write_conditions(ctx: &Ctx<'_>, bucket: &str, key: &str) -> Result<()> {
    let conditions = Conditions::from_headers(ctx.headers);
    if conditions.if_match.is_none() && conditions.if_none_match.is_none() {
        return Ok(());
    }
    let store = ctx.state.store.clone();
    let (b, k) = (bucket.to_owned(), key.to_owned());
    let current = match blocking(move || store.head(&b, &k)).await {
        Ok(m) => Some(m),
        Err(e) if e.kind() == ErrorKind::NoSuchKey => None,
        Err(e) => return Err(e),
    };
    conditions
        .check_write(current.as_ref().map(|m| (m.etag.as_str(), m.last_modified)))
        .map_err(|kind| {
            Error::new(
                kind,
                "At least one of the pre-conditions you specified did not hold",
            )
        })
}

async fn put_object(ctx: &Ctx<'_>, body: Incoming) -> Handled {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    crate::store::check_key(&key)?;
    let exp = expectations(ctx)?;
    let mut options = write_options(ctx)?;
    {
        let store = ctx.state.store.clone();
        let b = bucket.clone();
        blocking(move || store.bucket_info(&b)).await?;
    }
    check_write_conditions(ctx, &bucket, &key).await?;
    let (staged, received) = receive_upload(ctx.state, body, exp, Protocol::S3).await?;
    options.checksum = received.checksum.clone();
    let store = ctx.state.store.clone();
    let record = NewObject {
        etag: format!("\"{}\"", received.md5_hex),
        content_md5: Some(received.md5_base64.clone()),
        options,
        ..NewObject::default()
    };
    let meta = blocking(move || store.commit(&bucket, &key, staged, record)).await?;
    let mut resp = answer(StatusCode::OK, body::empty());
    set_header(resp.headers_mut(), "etag", &meta.etag);
    if let Some((alg, value)) = &received.checksum {
        set_header(resp.headers_mut(), alg.header_name(), value);
    }
    Ok(resp)
}

/// Conditions on the copy source (`x-amz-copy-source-if-*`).
fn copy_source_conditions(h: &HeaderMap) -> Conditions {
    Conditions {
        if_match: header(h, "x-amz-copy-source-if-match").map(EtagList::parse),
        if_none_match: header(h, "x-amz-copy-source-if-none-match").map(EtagList::parse),
        if_modified_since: header(h, "x-amz-copy-source-if-modified-since")
            .and_then(parse_http_date),
        if_unmodified_since: header(h, "x-amz-copy-source-if-unmodified-since")
            .and_then(parse_http_date),
    }
}

async fn copy_object(ctx: &Ctx<'_>) -> Handled {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    crate::store::check_key(&key)?;
    let source = header(ctx.headers, "x-amz-copy-source").unwrap_or_default();
    let (src_bucket, src_key) = parse_copy_source(source)?;
    let replace = match header(ctx.headers, "x-amz-metadata-directive").unwrap_or("COPY") {
        "COPY" => false,
        "REPLACE" => true,
        other => {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("Unknown metadata directive '{other}'"),
            )
            .into());
        }
    };
    if !replace && src_bucket == bucket && src_key == key {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.",
        )
        .into());
    }
    let replacement = if replace {
        Some(write_options(ctx)?)
    } else {
        None
    };
    let conditions = copy_source_conditions(ctx.headers);
    let store = ctx.state.store.clone();
    let meta = blocking(move || {
        let src = store.open(&src_bucket, &src_key)?;
        // A copy answers 412 for every failed source condition, never 304.
        conditions
            .check_read(&src.meta.etag, src.meta.last_modified)
            .map_err(|_| {
                Error::new(
                    ErrorKind::PreconditionFailed,
                    "At least one of the pre-conditions you specified did not hold",
                )
            })?;
        store.bucket_info(&bucket)?;
        let mut staged = store.stage()?;
        let copied = body::copy_object(src.body, src.meta.size, &mut staged)?;
        let options = replacement.unwrap_or(WriteOptions {
            content_type: Some(src.meta.content_type.clone()),
            user_metadata: src.meta.user_metadata.clone(),
            content_headers: src.meta.content_headers.clone(),
            checksum: src.meta.checksum.clone(),
        });
        let record = NewObject {
            etag: format!("\"{}\"", copied.md5_hex),
            content_md5: Some(copied.md5_base64),
            options,
            ..NewObject::default()
        };
        store.commit(&bucket, &key, staged, record)
    })
    .await?;
    Ok(xml_answer(
        StatusCode::OK,
        xml::copy_result_xml(&meta.etag, meta.last_modified, false),
    ))
}

async fn delete_object(ctx: &Ctx<'_>) -> Handled {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    let store = ctx.state.store.clone();
    blocking(move || store.delete(&bucket, &key)).await?;
    Ok(answer(StatusCode::NO_CONTENT, body::empty()))
}

/// Verifies the digests a small body claims (`Content-MD5`, `x-amz-checksum-*`).
fn check_small_body_digests(h: &HeaderMap, body: &[u8]) -> Result<()> {
    use md5::Digest as _;
    if let Some(md5) = header(h, "content-md5") {
        let sent = base64::engine::general_purpose::STANDARD
            .decode(md5.trim())
            .map_err(|_| {
                Error::new(
                    ErrorKind::InvalidDigest,
                    "The Content-MD5 you specified was invalid.",
                )
            })?;
        if sent != md5::Md5::digest(body).as_slice() {
            return Err(Error::new(
                ErrorKind::BadDigest,
                "The Content-MD5 you specified did not match what we received.",
            ));
        }
    }
    for alg in ChecksumAlgorithm::ALL {
        if let Some(v) = header(h, alg.header_name())
            && talon_protocols::checksum::checksum(alg, body) != v.trim()
        {
            return Err(Error::new(
                ErrorKind::BadDigest,
                format!(
                    "The {} you specified did not match the calculated checksum.",
                    alg.name()
                ),
            ));
        }
    }
    Ok(())
}

async fn delete_objects(ctx: &Ctx<'_>, body: Incoming) -> Handled {
    let bucket = ctx.bucket()?;
    let bytes = body::read_small(body, MAX_XML_BYTES).await?;
    check_small_body_digests(ctx.headers, &bytes)?;
    let request: xml::DeleteRequest = xml::parse_request(&bytes)?;
    if request.objects.len() > 1000 {
        return Err(Error::new(
            ErrorKind::MalformedXml,
            "A DeleteObjects request may name at most 1000 keys",
        )
        .into());
    }
    let store = ctx.state.store.clone();
    let quiet = request.quiet;
    let outcomes = blocking(move || {
        store.bucket_info(&bucket)?;
        Ok(request
            .objects
            .into_iter()
            .map(|o| match store.delete(&bucket, &o.key) {
                Ok(_) => xml::DeleteOutcome::Deleted(o.key),
                Err(e) => xml::DeleteOutcome::Failed {
                    key: o.key,
                    kind: e.kind(),
                    message: e.message().to_owned(),
                },
            })
            .collect::<Vec<_>>())
    })
    .await?;
    Ok(xml_answer(
        StatusCode::OK,
        xml::delete_result_xml(&outcomes, quiet),
    ))
}

async fn create_upload(ctx: &Ctx<'_>) -> Handled {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    let options = write_options(ctx)?;
    let store = ctx.state.store.clone();
    let (b, k) = (bucket.clone(), key.clone());
    let id = blocking(move || store.create_upload(&b, &k, options)).await?;
    Ok(xml_answer(
        StatusCode::OK,
        xml::initiate_multipart_xml(&bucket, &key, &id),
    ))
}

fn upload_id(ctx: &Ctx<'_>) -> Result<String> {
    ctx.query("uploadId")
        .map(str::to_owned)
        .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "uploadId is required"))
}

async fn upload_part(ctx: &Ctx<'_>, body: Incoming) -> Handled {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    let id = upload_id(ctx)?;
    let number: u32 = ctx
        .query("partNumber")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidArgument,
                "Part number must be an integer between 1 and 10000, inclusive",
            )
        })?;
    let exp = expectations(ctx)?;
    {
        // Fail fast on an unknown upload, before receiving the body.
        let store = ctx.state.store.clone();
        let (b, k, i) = (bucket.clone(), key.clone(), id.clone());
        blocking(move || store.list_parts(&b, &k, &i)).await?;
    }
    let (staged, received) = receive_upload(ctx.state, body, exp, Protocol::S3).await?;
    let store = ctx.state.store.clone();
    let md5 = received.md5_hex.clone();
    let part = blocking(move || store.put_part(&bucket, &key, &id, number, staged, &md5)).await?;
    let mut resp = answer(StatusCode::OK, body::empty());
    set_header(resp.headers_mut(), "etag", &part.etag);
    if let Some((alg, value)) = &received.checksum {
        set_header(resp.headers_mut(), alg.header_name(), value);
    }
    Ok(resp)
}

async fn complete_upload(ctx: &Ctx<'_>, body: Incoming) -> Handled {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    let id = upload_id(ctx)?;
    let bytes = body::read_small(body, MAX_XML_BYTES).await?;
    let request: xml::CompleteMultipartUpload = xml::parse_request(&bytes)?;
    let parts: Vec<(u32, String)> = request
        .parts
        .into_iter()
        .map(|p| (p.number, p.etag))
        .collect();
    let store = ctx.state.store.clone();
    let (b, k) = (bucket.clone(), key.clone());
    let meta = blocking(move || store.complete_upload(&b, &k, &id, &parts)).await?;
    let location = format!(
        "/{bucket}/{}",
        talon_protocols::uri_encoding::encode_path(&key)
    );
    Ok(xml_answer(
        StatusCode::OK,
        xml::complete_multipart_xml(&location, &bucket, &key, &meta.etag),
    ))
}

async fn abort_upload(ctx: &Ctx<'_>) -> Handled {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    let id = upload_id(ctx)?;
    let store = ctx.state.store.clone();
    blocking(move || store.abort_upload(&bucket, &key, &id)).await?;
    Ok(answer(StatusCode::NO_CONTENT, body::empty()))
}

async fn list_parts(ctx: &Ctx<'_>) -> Handled {
    let bucket = ctx.bucket()?;
    let key = ctx.key()?;
    let id = upload_id(ctx)?;
    let store = ctx.state.store.clone();
    let (b, k, i) = (bucket.clone(), key.clone(), id.clone());
    let parts = blocking(move || store.list_parts(&b, &k, &i)).await?;
    let entries: Vec<xml::PartEntry> = parts
        .into_iter()
        .map(|p| xml::PartEntry {
            number: p.number,
            etag: p.etag,
            size: p.size,
            last_modified: std::time::UNIX_EPOCH + std::time::Duration::from_millis(p.uploaded_ms),
        })
        .collect();
    Ok(xml_answer(
        StatusCode::OK,
        xml::list_parts_xml(&bucket, &key, &id, &entries),
    ))
}
