//! The Azure Blob front of the stub: the same objects as the S3 front, with containers
//! for buckets and blobs for keys.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use http::{HeaderMap, Method, Request, StatusCode};
use hyper::body::Incoming;
use talon_protocols::azure::auth::{self as azure_auth, Transport};
use talon_protocols::azure::request::{AzureOperation, AzureRequest, validate_container_name};
use talon_protocols::azure::shared_key::SharedKeyParts;
use talon_protocols::azure::xml;
use talon_protocols::conditional::Conditions;
use talon_protocols::dates::format_http_date;
use talon_protocols::listing::{ListQuery, paginate};
use talon_protocols::origin::AZURE_API_VERSION;
use talon_protocols::range::RangeSpec;
use talon_protocols::{Error, ErrorKind, Result};

use crate::body::{self, ResponseBody};
use crate::front::{
    Failure, Handled, MAX_HEADER_BYTES, MAX_XML_BYTES, Outcome, StubState, answer, apply_faults,
    blocking, content_headers, header, path_and_query, receive_upload, request_has_body,
    set_content_headers, set_header, user_metadata,
};
use crate::front::{ReadAnswer, object_answer};
use crate::metrics::Protocol;
use crate::server::{ConnectionReset, HandlerResult};
use crate::store::{BlockChoice, NewObject, ObjectMeta, WriteOptions};
use talon_protocols::answer::{ErrorContext, Front, error_answer};
use talon_protocols::upload::UploadClaims;

/// Most results one listing page returns.
const MAX_RESULTS: usize = 5000;

/// Handles one Azure Blob request.
pub async fn handle(
    state: Arc<StubState>,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> HandlerResult {
    let request_id = Front::Azure.new_request_id();
    let is_head = req.method() == Method::HEAD;
    let version = header(req.headers(), "x-ms-version")
        .unwrap_or(AZURE_API_VERSION)
        .to_owned();
    let has_body = request_has_body(req.headers());
    let result = route(&state, req, peer).await;
    let mut resp = match result {
        Ok(resp) => resp,
        Err(Outcome::Reset) => return Err(ConnectionReset),
        Err(Outcome::Failure(f)) => {
            let context = ErrorContext {
                is_head,
                has_body,
                request_id: &request_id,
                resource: "",
                subject: Default::default(),
            };
            error_answer(Front::Azure, f, context).map(body::full)
        }
    };
    Front::Azure.stamp(
        resp.headers_mut(),
        &request_id,
        &version,
        "talon-origin-stub",
    );
    Ok(resp)
}

async fn route(state: &Arc<StubState>, req: Request<Incoming>, peer: SocketAddr) -> Handled {
    let (parts, body) = req.into_parts();
    Front::Azure.check_header_size(&parts.headers, MAX_HEADER_BYTES)?;
    let (raw_path, raw_query) = path_and_query(&parts.uri);
    let request = AzureRequest::classify(
        &parts.method,
        &state.azure_addressing,
        &parts.headers,
        &raw_path,
        &raw_query,
    )?;
    state
        .metrics
        .request(Protocol::Azure, request.operation.name());
    if request.account != state.azure_identity.account {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            format!(
                "this server serves the account '{}' only",
                state.azure_identity.account
            ),
        )
        .into());
    }
    let truncate = apply_faults(&state.faults, &state.metrics).await?;
    let signed = SharedKeyParts {
        method: parts.method.as_str(),
        raw_path: &raw_path,
        raw_query: &raw_query,
        headers: &parts.headers,
    };
    let transport = Transport {
        https: false,
        client_ip: Some(peer.ip()),
    };
    azure_auth::authenticate(
        &state.azure_identity,
        &request,
        &signed,
        transport,
        SystemTime::now(),
    )?;
    let ctx = Ctx {
        state,
        headers: &parts.headers,
        request: &request,
        truncate,
    };
    use AzureOperation::*;
    match request.operation {
        ListContainers => list_containers(&ctx).await,
        GetContainerProperties => container_properties(&ctx).await,
        CreateContainer => create_container(&ctx).await,
        DeleteContainer => delete_container(&ctx).await,
        ListBlobs => list_blobs(&ctx).await,
        GetBlob => get_blob(&ctx, true).await,
        GetBlobProperties => get_blob(&ctx, false).await,
        PutBlob => put_blob(&ctx, body).await,
        PutBlock => put_block(&ctx, body).await,
        PutBlockList => put_block_list(&ctx, body).await,
        GetBlockList => get_block_list(&ctx).await,
        DeleteBlob => delete_blob(&ctx).await,
    }
}

struct Ctx<'a> {
    state: &'a Arc<StubState>,
    headers: &'a HeaderMap,
    request: &'a AzureRequest,
    truncate: bool,
}

impl Ctx<'_> {
    fn container(&self) -> Result<String> {
        self.request
            .container
            .clone()
            .ok_or_else(|| Error::new(ErrorKind::InvalidRequest, "the request names no container"))
    }

    fn blob(&self) -> Result<String> {
        self.request
            .blob
            .clone()
            .ok_or_else(|| Error::new(ErrorKind::InvalidRequest, "the request names no blob"))
    }

    fn query(&self, name: &str) -> Option<&str> {
        self.request.query.get(name)
    }

    fn max_results(&self) -> Result<Option<usize>> {
        match self.query("maxresults") {
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
}

fn xml_answer(status: StatusCode, doc: String) -> http::Response<ResponseBody> {
    let mut resp = answer(status, body::full(doc));
    set_header(resp.headers_mut(), "content-type", "application/xml");
    resp
}

/// A container's entity tag, derived from its creation time.
fn container_etag(created: SystemTime) -> String {
    let nanos = created
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("\"0x{nanos:X}\"")
}

fn not_found_as_container(e: Error) -> Error {
    if e.kind() == ErrorKind::NoSuchBucket {
        Error::new(
            ErrorKind::NoSuchBucket,
            "The specified container does not exist.",
        )
    } else {
        e
    }
}

async fn list_containers(ctx: &Ctx<'_>) -> Handled {
    let store = ctx.state.store.clone();
    let buckets = blocking(move || store.list_buckets()).await?;
    let max = ctx.max_results()?;
    let query = ListQuery {
        prefix: ctx.query("prefix").unwrap_or(""),
        delimiter: None,
        marker: ctx.query("marker").filter(|m| !m.is_empty()),
        max_keys: max.unwrap_or(MAX_RESULTS),
    };
    let page = paginate(buckets, |b| b.name.as_str(), &query);
    let page = page.map_entries(|b| xml::ContainerEntry {
        etag: container_etag(b.created),
        name: b.name,
        last_modified: b.created,
    });
    let echo = xml::ListEcho {
        prefix: ctx.query("prefix"),
        marker: ctx.query("marker"),
        max_results: max,
        delimiter: None,
    };
    Ok(xml_answer(
        StatusCode::OK,
        xml::list_containers_xml(&format!("{}/", ctx.state.azure_endpoint), &echo, &page),
    ))
}

async fn container_properties(ctx: &Ctx<'_>) -> Handled {
    let container = ctx.container()?;
    let store = ctx.state.store.clone();
    let info = blocking(move || store.bucket_info(&container))
        .await
        .map_err(not_found_as_container)?;
    let mut resp = answer(StatusCode::OK, body::empty());
    let h = resp.headers_mut();
    set_header(h, "etag", &container_etag(info.created));
    set_header(h, "last-modified", &format_http_date(info.created));
    set_header(h, "x-ms-lease-status", "unlocked");
    set_header(h, "x-ms-lease-state", "available");
    set_header(h, "x-ms-has-immutability-policy", "false");
    set_header(h, "x-ms-has-legal-hold", "false");
    Ok(resp)
}

async fn create_container(ctx: &Ctx<'_>) -> Handled {
    let container = ctx.container()?;
    validate_container_name(&container)?;
    let store = ctx.state.store.clone();
    let c = container.clone();
    let info = blocking(move || {
        store.create_bucket(&c).map_err(|e| {
            if e.kind() == ErrorKind::BucketAlreadyExists {
                Error::new(
                    ErrorKind::BucketAlreadyExists,
                    "The specified container already exists.",
                )
            } else {
                e
            }
        })?;
        store.bucket_info(&c)
    })
    .await?;
    let mut resp = answer(StatusCode::CREATED, body::empty());
    set_header(resp.headers_mut(), "etag", &container_etag(info.created));
    set_header(
        resp.headers_mut(),
        "last-modified",
        &format_http_date(info.created),
    );
    Ok(resp)
}

async fn delete_container(ctx: &Ctx<'_>) -> Handled {
    let container = ctx.container()?;
    let store = ctx.state.store.clone();
    // Azure deletes a container with its blobs; the stub deletes only empty ones, so a
    // folder of real data is never removed by one call.
    blocking(move || store.delete_bucket(&container))
        .await
        .map_err(not_found_as_container)?;
    Ok(answer(StatusCode::ACCEPTED, body::empty()))
}

async fn list_blobs(ctx: &Ctx<'_>) -> Handled {
    let container = ctx.container()?;
    let store = ctx.state.store.clone();
    let c = container.clone();
    let objects = blocking(move || store.list(&c))
        .await
        .map_err(not_found_as_container)?;
    let max = ctx.max_results()?;
    let query = ListQuery {
        prefix: ctx.query("prefix").unwrap_or(""),
        delimiter: ctx.query("delimiter").filter(|d| !d.is_empty()),
        marker: ctx.query("marker").filter(|m| !m.is_empty()),
        max_keys: max.unwrap_or(MAX_RESULTS),
    };
    let page = paginate(objects, |o| o.key.as_str(), &query);
    let with_metadata =
        talon_protocols::azure::request::include_lists_metadata(ctx.query("include"));
    let page = page.map_entries(|o| xml::BlobEntry {
        metadata: with_metadata.then(|| o.user_metadata.clone()),
        name: o.key,
        last_modified: o.last_modified,
        etag: o.etag,
        size: o.size,
        content_type: o.content_type,
        content_md5: o.content_md5,
    });
    let echo = xml::ListEcho {
        prefix: ctx.query("prefix"),
        marker: ctx.query("marker"),
        max_results: max,
        delimiter: query.delimiter,
    };
    Ok(xml_answer(
        StatusCode::OK,
        xml::list_blobs_xml(
            &format!("{}/", ctx.state.azure_endpoint),
            &container,
            &echo,
            &page,
        ),
    ))
}

fn blob_headers(h: &mut HeaderMap, meta: &ObjectMeta) {
    set_header(h, "etag", &meta.etag);
    set_header(h, "last-modified", &format_http_date(meta.last_modified));
    set_header(
        h,
        "x-ms-creation-time",
        &format_http_date(meta.last_modified),
    );
    set_header(h, "content-type", &meta.content_type);
    set_header(h, "accept-ranges", "bytes");
    set_header(h, "x-ms-blob-type", "BlockBlob");
    set_header(h, "x-ms-lease-status", "unlocked");
    set_header(h, "x-ms-lease-state", "available");
    set_header(h, "x-ms-server-encrypted", "true");
    for (k, v) in &meta.user_metadata {
        set_header(h, &format!("x-ms-meta-{k}"), v);
    }
    set_content_headers(h, &meta.content_headers);
}

async fn get_blob(ctx: &Ctx<'_>, with_body: bool) -> Handled {
    let container = ctx.container()?;
    let blob = ctx.blob()?;
    let store = ctx.state.store.clone();
    let object = blocking(move || store.open(&container, &blob))
        .await
        .map_err(|e| match e.kind() {
            ErrorKind::NoSuchKey => {
                Error::new(ErrorKind::NoSuchKey, "The specified blob does not exist.")
            }
            _ => not_found_as_container(e),
        })?;
    let meta = object.meta;
    if let Err(kind) =
        Conditions::from_headers(ctx.headers).check_read(&meta.etag, meta.last_modified)
    {
        return Err(Failure {
            error: Error::new(
                kind,
                "The condition specified using HTTP conditional header(s) is not met.",
            ),
            headers: vec![
                ("etag", meta.etag.clone()),
                ("last-modified", format_http_date(meta.last_modified)),
            ],
        }
        .into());
    }
    // x-ms-range wins over Range; Azure defines no suffix ranges.
    let spec = match header(ctx.headers, "x-ms-range") {
        Some(v) => Some(RangeSpec::parse(v).filter(|s| !s.is_suffix()).ok_or_else(|| {
            Error::new(ErrorKind::InvalidHeaderValue, "The value for one of the HTTP headers is not in the correct format: x-ms-range")
        })?),
        None => header(ctx.headers, "range").and_then(RangeSpec::parse).filter(|s| !s.is_suffix()),
    };
    let range = match spec.map(|s| s.resolve(meta.size)) {
        None => None,
        Some(Ok(r)) => Some(r),
        Some(Err(u)) => {
            return Err(Failure {
                error: Error::new(
                    ErrorKind::InvalidRange,
                    "The range specified is invalid for the current size of the resource.",
                ),
                headers: vec![("content-range", u.content_range())],
            }
            .into());
        }
    };
    let read = ReadAnswer {
        state: ctx.state,
        protocol: Protocol::Azure,
        with_body,
        truncate: ctx.truncate,
    };
    let mut resp = object_answer(read, object.body, meta.size, range);
    let h = resp.headers_mut();
    blob_headers(h, &meta);
    if let Some(md5) = &meta.content_md5 {
        set_header(
            h,
            if range.is_some() {
                "x-ms-blob-content-md5"
            } else {
                "content-md5"
            },
            md5,
        );
    }
    Ok(resp)
}

/// What a write records. `put_blob`: Put Blob also takes the plain content headers
/// (`x-ms-blob-*` wins); in Put Block List they describe the request's own body.
fn write_options(ctx: &Ctx<'_>, put_blob: bool) -> Result<WriteOptions> {
    Ok(WriteOptions {
        content_type: header(ctx.headers, "x-ms-blob-content-type")
            .or_else(|| header(ctx.headers, "content-type"))
            .map(str::to_owned),
        user_metadata: user_metadata(ctx.headers, "x-ms-meta-")?,
        content_headers: {
            let mut stored = content_headers(ctx.headers, "x-ms-blob-");
            if put_blob {
                for (name, value) in content_headers(ctx.headers, "") {
                    if name != "content-disposition" {
                        stored.entry(name).or_insert(value);
                    }
                }
            }
            stored
        },
        checksum: None,
    })
}

fn body_expectations(ctx: &Ctx<'_>) -> Result<UploadClaims> {
    if !ctx.headers.contains_key("content-length") {
        return Err(Error::new(
            ErrorKind::MissingContentLength,
            "Content-Length is required.",
        ));
    }
    UploadClaims::azure(ctx.headers)
}

async fn check_write_conditions(ctx: &Ctx<'_>, container: &str, blob: &str) -> Result<()> {
    let conditions = Conditions::from_headers(ctx.headers);
    if conditions.is_empty() {
        return Ok(());
    }
    let store = ctx.state.store.clone();
    let (c, b) = (container.to_owned(), blob.to_owned());
    let current = match blocking(move || store.head(&c, &b)).await {
        Ok(m) => Some(m),
        Err(e) if e.kind() == ErrorKind::NoSuchKey => None,
        Err(e) => return Err(e),
    };
    conditions
        .check_write(current.as_ref().map(|m| (m.etag.as_str(), m.last_modified)))
        .map_err(|kind| {
            Error::new(
                kind,
                "The condition specified using HTTP conditional header(s) is not met.",
            )
        })
}

fn created(meta: &ObjectMeta) -> http::Response<ResponseBody> {
    let mut resp = answer(StatusCode::CREATED, body::empty());
    let h = resp.headers_mut();
    set_header(h, "etag", &meta.etag);
    set_header(h, "last-modified", &format_http_date(meta.last_modified));
    set_header(h, "x-ms-request-server-encrypted", "true");
    if let Some(md5) = &meta.content_md5 {
        set_header(h, "content-md5", md5);
    }
    resp
}

async fn put_blob(ctx: &Ctx<'_>, body: Incoming) -> Handled {
    let container = ctx.container()?;
    let blob = ctx.blob()?;
    crate::store::check_key(&blob)?;
    let exp = body_expectations(ctx)?;
    let options = write_options(ctx, true)?;
    {
        let store = ctx.state.store.clone();
        let c = container.clone();
        blocking(move || store.bucket_info(&c))
            .await
            .map_err(not_found_as_container)?;
    }
    check_write_conditions(ctx, &container, &blob).await?;
    let (staged, received) = receive_upload(ctx.state, body, exp, Protocol::Azure).await?;
    let store = ctx.state.store.clone();
    let record = NewObject {
        etag: format!("\"{}\"", received.md5_hex),
        content_md5: Some(received.md5_base64),
        options,
        ..NewObject::default()
    };
    let meta = blocking(move || store.commit(&container, &blob, staged, record)).await?;
    Ok(created(&meta))
}

async fn put_block(ctx: &Ctx<'_>, body: Incoming) -> Handled {
    let container = ctx.container()?;
    let blob = ctx.blob()?;
    let block_id = ctx
        .query("blockid")
        .map(str::to_owned)
        .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "blockid is required"))?;
    crate::store::check_block_id(&block_id)?;
    let exp = body_expectations(ctx)?;
    {
        let store = ctx.state.store.clone();
        let c = container.clone();
        blocking(move || store.bucket_info(&c))
            .await
            .map_err(not_found_as_container)?;
    }
    let (staged, received) = receive_upload(ctx.state, body, exp, Protocol::Azure).await?;
    let store = ctx.state.store.clone();
    blocking(move || store.put_block(&container, &blob, &block_id, staged)).await?;
    let mut resp = answer(StatusCode::CREATED, body::empty());
    set_header(resp.headers_mut(), "content-md5", &received.md5_base64);
    set_header(resp.headers_mut(), "x-ms-request-server-encrypted", "true");
    Ok(resp)
}

async fn put_block_list(ctx: &Ctx<'_>, body: Incoming) -> Handled {
    let container = ctx.container()?;
    let blob = ctx.blob()?;
    let options = write_options(ctx, false)?;
    let bytes = body::read_small(body, MAX_XML_BYTES).await?;
    let request: xml::BlockListRequest = xml::parse_request(&bytes)?;
    let items: Vec<BlockChoice> = request
        .items
        .into_iter()
        .map(|i| match i {
            xml::BlockListItem::Latest(id) => BlockChoice::Latest(id),
            xml::BlockListItem::Committed(id) => BlockChoice::Committed(id),
            xml::BlockListItem::Uncommitted(id) => BlockChoice::Uncommitted(id),
        })
        .collect();
    check_write_conditions(ctx, &container, &blob).await?;
    let store = ctx.state.store.clone();
    let meta = blocking(move || store.put_block_list(&container, &blob, &items, options))
        .await
        .map_err(not_found_as_container)?;
    let mut resp = created(&meta);
    // Here Content-MD5 is the digest of the request (the block list), not of the blob.
    let list_md5 = {
        use base64::Engine;
        use md5::Digest as _;
        base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(&bytes))
    };
    set_header(resp.headers_mut(), "content-md5", &list_md5);
    Ok(resp)
}

async fn get_block_list(ctx: &Ctx<'_>) -> Handled {
    let container = ctx.container()?;
    let blob = ctx.blob()?;
    let which = ctx
        .query("blocklisttype")
        .unwrap_or("committed")
        .to_ascii_lowercase();
    let store = ctx.state.store.clone();
    let (committed, uncommitted) = blocking(move || store.block_list(&container, &blob))
        .await
        .map_err(|e| match e.kind() {
            ErrorKind::NoSuchKey => {
                Error::new(ErrorKind::NoSuchKey, "The specified blob does not exist.")
            }
            _ => not_found_as_container(e),
        })?;
    let to_entries = |v: Vec<(String, u64)>| {
        v.into_iter()
            .map(|(id, size)| xml::BlockEntry { id, size })
            .collect::<Vec<_>>()
    };
    let (c, u) = match which.as_str() {
        "committed" => (to_entries(committed), Vec::new()),
        "uncommitted" => (Vec::new(), to_entries(uncommitted)),
        "all" => (to_entries(committed), to_entries(uncommitted)),
        other => {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("blocklisttype '{other}' is not valid"),
            )
            .into());
        }
    };
    Ok(xml_answer(StatusCode::OK, xml::block_list_xml(&c, &u)))
}

async fn delete_blob(ctx: &Ctx<'_>) -> Handled {
    let container = ctx.container()?;
    let blob = ctx.blob()?;
    let store = ctx.state.store.clone();
    let existed = blocking(move || store.delete(&container, &blob))
        .await
        .map_err(not_found_as_container)?;
    if !existed {
        return Err(Error::new(ErrorKind::NoSuchKey, "The specified blob does not exist.").into());
    }
    Ok(answer(StatusCode::ACCEPTED, body::empty()))
}
