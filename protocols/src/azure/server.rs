//! The Azure Blob front, once for every Talon server that speaks it (the gateway and
//! the origin stub): a request is classified, checked against the account served,
//! authenticated (Shared Key, SAS or anonymous), dispatched to an [`ObjectBackend`],
//! and answered in Azure's form, with Azure's error answer and words when it fails.

use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use talon_core::Backend;

use super::auth::{self as azure_auth, AzureIdentity, Transport};
use super::copy_source;
use super::request::{AzureAddressing, AzureOperation, AzureRequest};
use super::shared_key::SharedKeyParts;
use super::xml;
use crate::access::{Access, Acls, CannedAcl};
use crate::answer::{
    ErrorContext, Failure, ProtocolFront as _, answer, error_answer, header, request_has_body,
    set_fixed_header, set_formatted_header, set_header, set_read_headers,
};
use crate::conditional::{Conditions, DeleteConditions, EtagList, missing_for_if_match};
use crate::dates::{format_http_date, http_date, parse_http_date};
use crate::listing::{ListPage, ListQuery, paginate};
use crate::names::validate_container_name;
use crate::origin::AZURE_API_VERSION;
use crate::range::RangeSpec;
use crate::server::{
    AnswerBody, CopySpec, Handled, ListFrom, ListSpec, ObjectBackend, Operation, ReadSpec, Relay,
    RelayBody, RequestBody, Seen, ServerLimits, Target, Upload, WriteSpec, Written, empty_body,
    full_body, read_document, request_body, within_deadline,
};
use crate::upload::{UploadClaims, VerifyingStream};
use crate::{Error, ErrorKind};

/// Most results one listing page returns.
const MAX_RESULTS: usize = 5000;

/// The largest range whose MD5 Azure returns (`x-ms-range-get-content-md5`).
const MAX_RANGE_MD5_BYTES: u64 = 4 << 20;

/// An Azure Blob front: how it names the account, who may call it, and what it says
/// about itself.
#[derive(Debug, Clone, Copy)]
pub struct AzureServer<'a> {
    /// How requests name the account.
    pub addressing: &'a AzureAddressing,
    /// The account served and who may call it.
    pub identity: &'a AzureIdentity,
    /// The canned ACLs clients set over S3 (one policy for both fronts): what they open
    /// applies here, and a write or delete here resets a blob's to private.
    pub acls: Option<&'a Acls>,
    /// Whether requests arrive over HTTPS (for SAS `spr`).
    pub https: bool,
    /// The account's base URL written into listings; `None` to derive it from the
    /// request's `Host`.
    pub service_endpoint: Option<&'a str>,
    /// The `Server` header: fixed text (a name that is not header text panics).
    pub server_name: &'static str,
    /// Bounds.
    pub limits: ServerLimits,
    /// Whether [`Handled::record`] is filled (for an access log).
    pub log_requests: bool,
}

/// Handles one Azure Blob request from `peer` against `backend`.
pub async fn handle<B, Body>(
    server: &AzureServer<'_>,
    backend: &B,
    req: Request<Body>,
    peer: Option<IpAddr>,
) -> Handled
where
    B: ObjectBackend,
    Body: http_body::Body<Data = Bytes> + Send + 'static,
    Body::Error: Into<crate::server::BoxError>,
{
    let request_id = Backend::Azure.new_request_id();
    let span = tracing::info_span!("azure", request_id = %request_id);
    let is_head = req.method() == Method::HEAD;
    let version = header(req.headers(), "x-ms-version")
        .unwrap_or(AZURE_API_VERSION)
        .to_owned();
    let has_body = request_has_body(req.headers());
    let resource = req.uri().path().to_owned();
    let mut seen = Seen::new(server.log_requests);
    let result =
        tracing::Instrument::instrument(route(server, backend, req, peer, &mut seen), span).await;
    let failed = result.is_err();
    let mut response = match result {
        Ok(resp) => resp,
        Err(f) => {
            let context = ErrorContext {
                is_head,
                has_body,
                request_id: &request_id,
                resource: &resource,
                subject: Default::default(),
            };
            error_answer(Backend::Azure, f, context).map(full_body)
        }
    };
    Backend::Azure.stamp(
        response.headers_mut(),
        &request_id,
        &version,
        server.server_name,
    );
    seen.handled(response, failed, request_id)
}

type Answer = Result<Response<AnswerBody>, Failure>;

async fn route<B, Body>(
    server: &AzureServer<'_>,
    backend: &B,
    req: Request<Body>,
    peer: Option<IpAddr>,
    seen: &mut Seen,
) -> Answer
where
    B: ObjectBackend,
    Body: http_body::Body<Data = Bytes> + Send + 'static,
    Body::Error: Into<crate::server::BoxError>,
{
    let (parts, body) = req.into_parts();
    Backend::Azure.check_header_size(&parts.headers, server.limits.max_header_bytes)?;
    Backend::Azure.check_signed_for_this_front(&parts.headers, parts.uri.query().unwrap_or(""))?;
    let raw_path = parts.uri.path();
    let raw_query = parts.uri.query().unwrap_or("");
    let request = AzureRequest::classify(
        &parts.method,
        server.addressing,
        &parts.headers,
        raw_path,
        raw_query,
    )?;
    seen.classified(
        request.operation.name(),
        request.container.as_ref(),
        request.blob.as_ref(),
    );
    backend.admit(request.operation.name()).await?;
    if request.account != server.identity.account {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            format!(
                "this server serves the account '{}' only",
                server.identity.account
            ),
        )
        .into());
    }
    let signed = SharedKeyParts {
        method: parts.method.as_str(),
        raw_path,
        raw_query,
        headers: &parts.headers,
    };
    let transport = Transport {
        https: server.https,
        client_ip: peer,
    };
    let authorized = azure_auth::authenticate(
        server.identity,
        server.acls,
        &request,
        &signed,
        transport,
        SystemTime::now(),
    )?;
    seen.caller(|| {
        authorized
            .who
            .map(|how| format!("{how}:{}", server.identity.account))
    });
    // Authenticated by now: a Shared Key header here is a verified one (when the server
    // has a key to verify it with).
    let shared_key = server.identity.key.is_some()
        && matches!(
            super::shared_key::parse_authorization(&parts.headers),
            Ok(Some(_))
        );
    forget_acls_of_what_changes(server.acls, &request)?;
    let ctx = Ctx {
        server,
        headers: &parts.headers,
        request: &request,
        shared_key,
        create_only: authorized.sas.create_only,
        access: authorized.access,
        transport,
    };
    let streams_upload = matches!(
        request.operation,
        AzureOperation::PutBlob | AzureOperation::PutBlock
    );
    within_deadline(
        &server.limits,
        streams_upload,
        dispatch(&ctx, backend, request_body(body)),
    )
    .await
}

/// A blob written or deleted through this front is private again, and a deleted
/// container's blobs forget their ACLs: before the change, so a failure never leaves a
/// rewritten blob public (the S3 front's rule, `AclEffect`).
fn forget_acls_of_what_changes(acls: Option<&Acls>, request: &AzureRequest) -> Result<(), Error> {
    use AzureOperation::*;
    let (Some(acls), Some(container)) = (acls, request.container.as_deref()) else {
        return Ok(());
    };
    match (request.operation, request.blob.as_deref()) {
        (PutBlob | PutBlockList | CopyBlob | DeleteBlob, Some(blob)) => {
            acls.set_object(container, blob, CannedAcl::Private)
        }
        (DeleteContainer, _) => acls.forget_objects_of(container),
        // A container made anew is private, as an S3 CreateBucket without an ACL makes it.
        (CreateContainer, _) => acls.set_bucket(container, CannedAcl::Private),
        _ => Ok(()),
    }
}

/// One request's context.
struct Ctx<'a> {
    server: &'a AzureServer<'a>,
    headers: &'a HeaderMap,
    request: &'a AzureRequest,
    /// Whether a verified Shared Key signature authorized the request.
    shared_key: bool,
    /// Whether its SAS lets it create a blob but not replace one (`c` without `w`).
    create_only: bool,
    /// What its caller may do.
    access: Access<'a>,
    transport: Transport,
}

impl Ctx<'_> {
    fn container(&self) -> Result<&str, Error> {
        self.request
            .container
            .as_deref()
            .ok_or_else(|| Error::new(ErrorKind::InvalidRequest, "the request names no container"))
    }

    fn object(&self) -> Result<Target<'_>, Error> {
        let key =
            self.request.blob.as_deref().ok_or_else(|| {
                Error::new(ErrorKind::InvalidRequest, "the request names no blob")
            })?;
        Ok(Target {
            bucket: self.container()?,
            key,
        })
    }

    fn query(&self, name: &str) -> Option<&str> {
        self.request.query.get(name)
    }

    fn max_results(&self) -> Result<Option<usize>, Error> {
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

    /// The account's base URL, with a trailing `/`.
    fn service_endpoint(&self) -> String {
        match self.server.service_endpoint {
            Some(e) => format!("{}/", e.trim_end_matches('/')),
            None => {
                let host = header(self.headers, "host").unwrap_or("localhost");
                let scheme = if self.server.https { "https" } else { "http" };
                format!("{scheme}://{host}/{}/", self.request.account)
            }
        }
    }

    /// What a write records. Put Blob (`put_blob`) also takes the plain content headers
    /// (`x-ms-blob-*` wins, and a plain Content-Disposition is not the blob's); in Put
    /// Block List they describe the request's own body.
    fn write_spec(&self, put_blob: bool) -> Result<WriteSpec, Error> {
        let h = self.headers;
        let mut write = WriteSpec::of_request(talon_core::Backend::Azure, h)?;
        if put_blob {
            let plain = WriteSpec::from_headers(h, "content-type", "x-ms-meta-", "")?;
            for (name, value) in plain.content_headers {
                if name != "content-disposition" {
                    write.content_headers.entry(name).or_insert(value);
                }
            }
        }
        write.if_modified_since = header(h, "if-modified-since").map(str::to_owned);
        write.if_unmodified_since = header(h, "if-unmodified-since").map(str::to_owned);
        // Azure writes no `Expires`.
        write.expires = None;
        Ok(write)
    }

    /// A write's failure in Azure's words: `If-Match` over a missing blob is 412
    /// `ConditionNotMet` here, where S3 answers 404; a create-only SAS's write over an
    /// existing blob is 403 `AuthorizationPermissionMismatch`.
    fn write_failure(&self, mut f: Failure) -> Failure {
        if self.create_only && f.error.kind() == ErrorKind::PreconditionFailed {
            f.error = Error::new(
                ErrorKind::PermissionMismatch,
                "This request is not authorized to perform this operation using this \
                 permission: the SAS grants 'c' (create), and the blob exists; replacing it \
                 needs 'w'.",
            );
            return f;
        }
        let kind = missing_for_if_match(f.error.kind(), self.headers.contains_key("if-match"));
        if kind != f.error.kind() {
            f.error = Error::new(
                kind,
                "The condition specified using HTTP conditional header(s) is not met.",
            );
        }
        f
    }

    /// The verified stream of an upload's body (Put Blob, Put Block): exactly its
    /// `Content-Length`, at most the upload limit.
    fn upload(&self, body: RequestBody) -> Result<Upload, Error> {
        let len: u64 = header(self.headers, "content-length")
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::MissingContentLength,
                    "Content-Length is required.",
                )
            })?;
        if len > self.server.limits.max_upload_bytes {
            return Err(Error::new(
                ErrorKind::EntityTooLarge,
                "The request body is too large.",
            ));
        }
        let mut claims = UploadClaims::azure(self.headers)?;
        claims.announced_len = Some(len);
        let (stream, outcome) = VerifyingStream::new(
            body,
            claims,
            self.server.limits.max_upload_bytes,
            self.server.limits.upload_idle_timeout,
        );
        Ok(Upload {
            stream,
            outcome,
            checksum: None,
            trailer_checksum: None,
        })
    }
}

async fn dispatch<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B, body: RequestBody) -> Answer {
    use AzureOperation::*;
    let op = ctx.request.operation;
    if backend.relays(Operation::Azure(op)) {
        return relay(ctx, backend, body).await;
    }
    match op {
        ListContainers => list_containers(ctx, backend).await,
        GetContainerProperties => {
            let info = backend.head_bucket(ctx.container()?).await?;
            let created = info.created.unwrap_or(UNIX_EPOCH);
            let mut resp = answer(StatusCode::OK, empty_body());
            let h = resp.headers_mut();
            set_header(h, "etag", &container_etag(created));
            set_header(h, "last-modified", &format_http_date(created));
            set_header(h, "x-ms-lease-status", "unlocked");
            set_header(h, "x-ms-lease-state", "available");
            set_header(h, "x-ms-has-immutability-policy", "false");
            set_header(h, "x-ms-has-legal-hold", "false");
            Ok(resp)
        }
        CreateContainer => {
            let container = ctx.container()?;
            validate_container_name(container)?;
            let info = backend.create_bucket(container).await?;
            let created = info.created.unwrap_or_else(SystemTime::now);
            let mut resp = answer(StatusCode::CREATED, empty_body());
            set_header(resp.headers_mut(), "etag", &container_etag(created));
            set_header(
                resp.headers_mut(),
                "last-modified",
                &format_http_date(created),
            );
            Ok(resp)
        }
        DeleteContainer => {
            backend.delete_bucket(ctx.container()?).await?;
            Ok(answer(StatusCode::ACCEPTED, empty_body()))
        }
        ListBlobs => list_blobs(ctx, backend).await,
        GetBlob => get_blob(ctx, backend, true).await,
        GetBlobProperties => get_blob(ctx, backend, false).await,
        PutBlob => {
            let upload = ctx.upload(body)?;
            let mut spec = ctx.write_spec(true)?;
            if ctx.create_only {
                // Created only if no blob is there: the backend checks at the commit.
                spec.if_none_match = Some("*".to_owned());
            }
            let written = backend
                .put(ctx.object()?, upload, spec)
                .await
                .map_err(|f| ctx.write_failure(f))?;
            Ok(created(&written))
        }
        PutBlock => {
            let object = ctx.object()?;
            let block_id = ctx
                .query("blockid")
                .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "blockid is required"))?;
            let upload = ctx.upload(body)?;
            let md5 = backend.put_block(object, block_id, upload).await?;
            let mut resp = answer(StatusCode::CREATED, empty_body());
            set_header(resp.headers_mut(), "content-md5", &md5);
            set_header(resp.headers_mut(), "x-ms-request-server-encrypted", "true");
            Ok(resp)
        }
        PutBlockList => {
            let object = ctx.object()?;
            let write = ctx.write_spec(false)?;
            let bytes = read_document(body, ctx.server.limits.max_xml_bytes).await?;
            let request: xml::BlockListRequest = xml::parse_request(&bytes)?;
            let written = backend
                .put_block_list(object, request.items, write)
                .await
                .map_err(|f| ctx.write_failure(f))?;
            let mut resp = created(&written);
            // Here Content-MD5 is the digest of the request (the block list), not of
            // the blob.
            set_header(resp.headers_mut(), "content-md5", &md5_base64(&bytes));
            Ok(resp)
        }
        GetBlockList => {
            let which = ctx
                .query("blocklisttype")
                .unwrap_or("committed")
                .to_ascii_lowercase();
            if !matches!(which.as_str(), "committed" | "uncommitted" | "all") {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("blocklisttype '{which}' is not valid"),
                )
                .into());
            }
            let lists = backend.get_block_list(ctx.object()?).await?;
            let entries = |v: Vec<(String, u64)>| {
                v.into_iter()
                    .map(|(id, size)| xml::BlockEntry { id, size })
                    .collect::<Vec<_>>()
            };
            let (committed, uncommitted) = match which.as_str() {
                "committed" => (entries(lists.committed), Vec::new()),
                "uncommitted" => (Vec::new(), entries(lists.uncommitted)),
                _ => (entries(lists.committed), entries(lists.uncommitted)),
            };
            Ok(xml_answer(xml::block_list_xml(&committed, &uncommitted)))
        }
        DeleteBlob => {
            // If-Match is honoured; a condition this front does not evaluate is refused
            // rather than ignored (a delete it skipped would remove the wrong version).
            if let Some(name) = ["if-none-match", "if-modified-since", "if-unmodified-since"]
                .into_iter()
                .find(|n| ctx.headers.contains_key(*n))
            {
                return Err(Error::new(
                    ErrorKind::NotImplemented,
                    format!("{name} on Delete Blob is not implemented"),
                )
                .into());
            }
            let conditions = DeleteConditions {
                if_match: header(ctx.headers, "if-match").map(EtagList::parse),
                ..DeleteConditions::default()
            };
            backend.delete(ctx.object()?, true, &conditions).await?;
            Ok(answer(StatusCode::ACCEPTED, empty_body()))
        }
        CopyBlob => copy_blob(ctx, backend).await,
    }
}

/// Tags, leases and tiers on a copy, which this front does not evaluate: a copy that
/// carries one is refused rather than run without it.
const UNSUPPORTED_COPY_HEADERS: &[&str] = &[
    "x-ms-if-tags",
    "x-ms-source-if-tags",
    "x-ms-lease-id",
    "x-ms-source-lease-id",
    "x-ms-access-tier",
    "x-ms-tags",
    "x-ms-copy-source-tag-option",
    "x-ms-copy-source-authorization",
];

/// Copy Blob, Copy Blob From URL and Put Blob From URL, each served as one
/// synchronous copy within the account (202 with `x-ms-copy-status: success`).
///
/// What the new blob is given follows Azure: Copy Blob keeps the source's content
/// properties and takes the request's metadata when it names any (otherwise the
/// source's); Put Blob From URL takes properties and metadata from the request alone,
/// as Put Blob does.
async fn copy_blob<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B) -> Answer {
    let to = ctx.object()?;
    if let Some(name) = UNSUPPORTED_COPY_HEADERS
        .iter()
        .find(|n| ctx.headers.contains_key(**n))
    {
        return Err(Error::new(
            ErrorKind::NotImplemented,
            format!("{name} on a copy is not implemented"),
        )
        .into());
    }
    let put_blob_from_url = match ctx.headers.get("x-ms-blob-type").map(|v| v.as_bytes()) {
        None => false,
        Some(b"BlockBlob") => true,
        Some(_) => {
            return Err(Error::new(
                ErrorKind::NotImplemented,
                "page and append blobs are not implemented",
            )
            .into());
        }
    };
    let host = header(ctx.headers, "host");
    let endpoint_host = ctx
        .server
        .service_endpoint
        .and_then(|e| e.parse::<http::Uri>().ok())
        .and_then(|u| u.authority().map(|a| a.as_str().to_owned()));
    let own_hosts: Vec<&str> = host.into_iter().chain(endpoint_host.as_deref()).collect();
    let value = header(ctx.headers, "x-ms-copy-source").unwrap_or_default();
    let source = copy_source::resolve(
        value,
        ctx.server.addressing,
        &own_hosts,
        &ctx.request.account,
    )?;
    copy_source::authorize_source(
        ctx.server.identity,
        ctx.server.acls,
        &source,
        ctx.shared_key,
        ctx.transport,
        SystemTime::now(),
    )?;
    let from = Target {
        bucket: &source.container,
        key: &source.blob,
    };
    let text = |name: &str| header(ctx.headers, name);
    let mut source_conditions = Conditions {
        if_match: text("x-ms-source-if-match").map(EtagList::parse),
        if_none_match: text("x-ms-source-if-none-match").map(EtagList::parse),
        if_modified_since: text("x-ms-source-if-modified-since").and_then(parse_http_date),
        if_unmodified_since: text("x-ms-source-if-unmodified-since").and_then(parse_http_date),
    };
    let new_metadata = ctx
        .headers
        .keys()
        .any(|n| n.as_str().starts_with("x-ms-meta-"));
    let replace = if put_blob_from_url {
        Some(ctx.write_spec(true)?)
    } else if new_metadata {
        // The source's content properties with the request's metadata, pinned to the
        // version they were read from.
        let read = backend
            .read(ReadSpec {
                object: from,
                conditions: &source_conditions,
                range: None,
                with_body: false,
                body_untouched: false,
                reader_access: None,
            })
            .await
            .map_err(|f| copy_source_failure(f.error))?;
        let mut write = WriteSpec::properties_of(&read.info);
        write.user_metadata = ctx.write_spec(false)?.user_metadata;
        source_conditions = Conditions {
            if_match: Some(EtagList::parse(&read.info.etag)),
            ..Conditions::default()
        };
        Some(write)
    } else {
        None
    };
    let copied = backend
        .copy(
            to,
            CopySpec {
                from,
                source_conditions,
                destination: Conditions::from_headers(ctx.headers),
                replace,
            },
        )
        .await?;
    // Put Blob From URL answers as a Put Blob does; the copies as a finished copy.
    let status = if put_blob_from_url {
        StatusCode::CREATED
    } else {
        StatusCode::ACCEPTED
    };
    let mut resp = answer(status, empty_body());
    let h = resp.headers_mut();
    set_header(h, "etag", &copied.etag);
    set_header(h, "last-modified", &format_http_date(copied.last_modified));
    set_header(h, "x-ms-copy-id", &copy_id(&copied.etag, to));
    set_header(h, "x-ms-copy-status", "success");
    set_header(h, "x-ms-request-server-encrypted", "true");
    Ok(resp)
}

/// A source condition that fails is 412 (never 304), as for every copy.
fn copy_source_failure(error: Error) -> Failure {
    match error.kind() {
        ErrorKind::NotModified => Error::new(
            ErrorKind::PreconditionFailed,
            "The condition specified using HTTP conditional header(s) is not met.",
        )
        .into(),
        _ => error.into(),
    }
}

/// A copy's id: a GUID-shaped digest of the destination and the version copied, so the
/// same finished copy always has the same id.
fn copy_id(etag: &str, to: Target<'_>) -> String {
    use sha2::Digest as _;
    let d = sha2::Sha256::digest(format!("{}\n{}\n{etag}", to.bucket, to.key));
    let hex: String = d.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn xml_answer(doc: String) -> Response<AnswerBody> {
    let mut resp = answer(StatusCode::OK, full_body(doc));
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

/// Base64 of the MD5 of `bytes`, as `Content-MD5` carries it.
fn md5_base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    use md5::Digest as _;
    base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(bytes))
}

/// The 201 of a stored blob.
fn created(written: &Written) -> Response<AnswerBody> {
    let mut resp = answer(StatusCode::CREATED, empty_body());
    let h = resp.headers_mut();
    set_header(h, "etag", &written.etag);
    set_header(
        h,
        "last-modified",
        &format_http_date(written.last_modified.unwrap_or_else(SystemTime::now)),
    );
    set_header(h, "x-ms-request-server-encrypted", "true");
    if let Some(md5) = &written.content_md5 {
        set_header(h, "content-md5", md5);
    }
    resp
}

async fn list_containers<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B) -> Answer {
    let mut buckets = backend.list_buckets().await?;
    buckets.retain(|b| ctx.access.shows_bucket(&b.name));
    let max = ctx.max_results()?;
    let query = ListQuery {
        prefix: ctx.query("prefix").unwrap_or(""),
        delimiter: None,
        marker: ctx.query("marker").filter(|m| !m.is_empty()),
        max_keys: max.unwrap_or(MAX_RESULTS),
    };
    let page = paginate(buckets, |b| b.name.as_str(), &query).map_entries(|b| {
        let created = b.created.unwrap_or(UNIX_EPOCH);
        xml::ContainerEntry {
            name: b.name,
            last_modified: created,
            etag: container_etag(created),
        }
    });
    let echo = xml::ListEcho {
        prefix: ctx.query("prefix"),
        marker: ctx.query("marker"),
        max_results: max,
        delimiter: None,
    };
    Ok(xml_answer(xml::list_containers_xml(
        &ctx.service_endpoint(),
        &echo,
        &page,
    )))
}

async fn list_blobs<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B) -> Answer {
    let container = ctx.container()?;
    let max = ctx.max_results()?;
    let delimiter = ctx.query("delimiter").filter(|d| !d.is_empty());
    let include_metadata = super::request::include_lists_metadata(ctx.query("include"));
    let spec = ListSpec {
        prefix: ctx.query("prefix").unwrap_or(""),
        delimiter,
        from: ctx
            .query("marker")
            .filter(|m| !m.is_empty())
            .map(ListFrom::Token)
            .unwrap_or(ListFrom::Start),
        max_keys: max.unwrap_or(MAX_RESULTS),
        include_metadata,
    };
    let result = backend.list(container, &spec).await?;
    let page = ListPage {
        entries: result
            .objects
            .into_iter()
            .map(|o| xml::BlobEntry {
                name: o.key,
                last_modified: o.last_modified,
                etag: o.etag,
                size: o.size,
                content_type: o
                    .content_type
                    .unwrap_or_else(|| "application/octet-stream".into()),
                content_md5: o.content_md5,
                metadata: include_metadata.then(|| o.user_metadata.unwrap_or_default()),
            })
            .collect(),
        common_prefixes: result.common_prefixes,
        is_truncated: result.is_truncated,
        next_marker: result.next_token.filter(|_| result.is_truncated),
    };
    let echo = xml::ListEcho {
        prefix: ctx.query("prefix"),
        marker: ctx.query("marker"),
        max_results: max,
        delimiter,
    };
    Ok(xml_answer(xml::list_blobs_xml(
        &ctx.service_endpoint(),
        container,
        &echo,
        &page,
    )))
}

async fn get_blob<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B, with_body: bool) -> Answer {
    let object = ctx.object()?;
    let conditions = Conditions::from_headers(ctx.headers);
    // x-ms-range wins over Range; Azure defines no suffix ranges.
    let range = match header(ctx.headers, "x-ms-range") {
        Some(v) => Some(RangeSpec::parse(v).filter(|s| !s.is_suffix()).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidHeaderValue,
                "The value for one of the HTTP headers is not in the correct format: x-ms-range",
            )
        })?),
        None => header(ctx.headers, "range")
            .and_then(RangeSpec::parse)
            .filter(|s| !s.is_suffix()),
    };
    // The MD5 of the range itself, which Azure computes for ranges of at most 4 MiB.
    let range_md5 = with_body
        && header(ctx.headers, "x-ms-range-get-content-md5")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let spec = ReadSpec {
        object,
        conditions: &conditions,
        range,
        with_body,
        // A range's MD5 reads its bytes here.
        body_untouched: !range_md5,
        reader_access: Some(ctx.access),
    };
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
                let head = ReadSpec {
                    with_body: false,
                    ..spec
                };
                let info = backend.read(head).await?.info;
                if info.size.saturating_sub(first) > MAX_RANGE_MD5_BYTES {
                    return Err(too_large_for_md5().into());
                }
            }
            Some(_) => {}
        }
    }
    let read = backend.read(spec).await?;
    let info = &read.info;
    let (status, len) = match read.range {
        Some(r) => (StatusCode::PARTIAL_CONTENT, r.len()),
        None => (StatusCode::OK, info.size),
    };
    let mut range_digest = None;
    let body = match read.body {
        Some(body) if range_md5 => {
            if len > MAX_RANGE_MD5_BYTES {
                return Err(too_large_for_md5().into());
            }
            // The digest goes in a header, so the (small) range is read before answering.
            let bytes = collect_body(body, len).await?;
            range_digest = Some(md5_base64(&bytes));
            full_body(bytes)
        }
        Some(body) => body,
        None => empty_body(),
    };
    let mut resp = answer(status, body);
    let h = resp.headers_mut();
    set_read_headers(h, len, read.range.as_ref(), info);
    if let Some(digest) = &range_digest {
        set_header(h, "content-md5", digest);
    }
    crate::server::set_staleness_headers(h, read.stale);
    set_fixed_header(h, "x-ms-blob-type", "BlockBlob");
    set_fixed_header(h, "x-ms-lease-status", "unlocked");
    set_fixed_header(h, "x-ms-lease-state", "available");
    set_fixed_header(h, "x-ms-server-encrypted", "true");
    if let Some(t) = info.last_modified {
        set_formatted_header(h, "last-modified", http_date(t));
        set_formatted_header(h, "x-ms-creation-time", http_date(t));
    }
    let md5 = &info.headers.content_md5;
    if !md5.is_empty() {
        // On a range, Content-MD5 would claim to be the digest of the range.
        let name = match read.range {
            Some(_) => "x-ms-blob-content-md5",
            None => "content-md5",
        };
        set_header(h, name, md5);
    }
    let set = &info.headers;
    for (name, value) in [
        ("content-encoding", &set.content_encoding),
        ("content-language", &set.content_language),
        ("content-disposition", &set.content_disposition),
        ("cache-control", &set.cache_control),
    ] {
        if !value.is_empty() {
            set_header(h, name, value);
        }
    }
    for (name, value) in &set.user_metadata {
        set_header(
            h,
            &format!("{}{name}", crate::origin::AZURE_META_PREFIX),
            value,
        );
    }
    Ok(resp)
}

/// Reads an answer body of `len` bytes into memory.
async fn collect_body(mut body: AnswerBody, len: u64) -> Result<Bytes, Error> {
    use http_body_util::BodyExt as _;
    let mut buf = bytes::BytesMut::with_capacity(usize::try_from(len).unwrap_or(0));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            Error::new(
                ErrorKind::ServiceUnavailable,
                format!("reading the range failed: {e}"),
            )
        })?;
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
        }
    }
    if buf.len() as u64 != len {
        return Err(Error::new(
            ErrorKind::InternalError,
            format!("the range ended after {} of {len} bytes", buf.len()),
        ));
    }
    Ok(buf.freeze())
}

/// Query parameters that authenticate the client (SAS); never relayed.
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

/// Hands an operation the backend relays to it, with its body: block uploads and block
/// lists as verified uploads, anything else without one.
async fn relay<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B, body: RequestBody) -> Answer {
    let op = ctx.request.operation;
    let query = ctx
        .request
        .query
        .0
        .iter()
        .filter(|(k, _)| !is_auth_param(k))
        .map(|(k, v)| {
            format!(
                "{}={}",
                crate::uri_encoding::encode_strict(k),
                crate::uri_encoding::encode_strict(v)
            )
        })
        .collect::<Vec<_>>()
        .join("&");
    let body = match op {
        AzureOperation::PutBlock | AzureOperation::PutBlockList | AzureOperation::PutBlob => {
            RelayBody::Upload(Box::new(ctx.upload(body)?))
        }
        _ => RelayBody::Empty,
    };
    backend
        .relay(Relay {
            operation: Operation::Azure(op),
            bucket: ctx.request.container.as_deref(),
            key: ctx.request.blob.as_deref(),
            query,
            headers: ctx.headers,
            body,
        })
        .await
}

#[cfg(test)]
mod tests {
    //! The Azure Blob server's own dispatch, over the in-memory reference backend:
    //! classification, refusals, request ids and versions, error codes, with the
    //! backend's state checked after each refusal.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::access::AnonymousAccess;
    use crate::server::{ObjectBackend, empty_body};
    use crate::testing::memory::MemoryBackend;
    use http_body_util::{BodyExt as _, Full};

    const ACCOUNT: &str = "devstoreaccount1";

    struct Fixture {
        addressing: AzureAddressing,
        identity: AzureIdentity,
        backend: MemoryBackend,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture {
                addressing: AzureAddressing::PathStyle,
                identity: AzureIdentity::unrestricted(ACCOUNT, None, AnonymousAccess::ReadWrite),
                backend: MemoryBackend::new(),
            }
        }

        async fn send(&self, req: Request<Full<Bytes>>) -> (Handled, Bytes) {
            let server = AzureServer {
                addressing: &self.addressing,
                identity: &self.identity,
                acls: None,
                https: false,
                service_endpoint: None,
                server_name: "talon-test",
                limits: ServerLimits::default(),
                log_requests: true,
            };
            let mut handled = handle(&server, &self.backend, req, None).await;
            let body = std::mem::replace(handled.response.body_mut(), empty_body());
            let bytes = body.collect().await.unwrap().to_bytes();
            (handled, bytes)
        }

        fn request(method: &str, path: &str) -> http::request::Builder {
            Request::builder()
                .method(method)
                .uri(format!("/{ACCOUNT}{path}"))
                .header("host", "127.0.0.1")
                .header("x-ms-version", "2025-01-05")
        }

        async fn call(&self, method: &str, path: &str, body: &'static [u8]) -> (Handled, Bytes) {
            let mut req = Fixture::request(method, path).header("content-length", body.len());
            if method == "PUT" && !path.contains('?') {
                req = req.header("x-ms-blob-type", "BlockBlob");
            }
            self.send(req.body(Full::new(Bytes::from_static(body))).unwrap())
                .await
        }

        async fn containers(&self) -> usize {
            self.backend.list_buckets().await.unwrap().len()
        }
    }

    fn code(h: &Handled) -> &str {
        h.response
            .headers()
            .get("x-ms-error-code")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn every_answer_names_its_request_version_and_operation() {
        let f = Fixture::new();
        let (ok, _) = f.call("PUT", "/box?restype=container", b"").await;
        assert_eq!(ok.response.status(), 201);
        assert_eq!(ok.operation, "CreateContainer");
        let h = ok.response.headers();
        assert!(!h["x-ms-request-id"].is_empty());
        assert_eq!(h["x-ms-version"], "2025-01-05");
        let (missing, _) = f.call("GET", "/box/none", b"").await;
        assert_eq!(missing.response.status(), 404);
        assert!(missing.failed);
        assert_eq!(code(&missing), "BlobNotFound");
        let (no_container, _) = f.call("GET", "/nobox/none", b"").await;
        assert_eq!(code(&no_container), "ContainerNotFound");
    }

    #[tokio::test]
    async fn another_account_is_refused_and_nothing_is_made() {
        let f = Fixture::new();
        let req = Request::builder()
            .method("PUT")
            .uri("/otheraccount/box?restype=container")
            .header("host", "127.0.0.1")
            .header("x-ms-version", "2025-01-05")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (h, _) = f.send(req).await;
        assert_eq!(h.response.status(), 400);
        assert_eq!(f.containers().await, 0);
    }

    #[tokio::test]
    async fn an_invalid_container_name_is_refused_and_nothing_is_made() {
        let f = Fixture::new();
        for name in [
            "/Upper?restype=container",
            "/ab?restype=container",
            "/a--b?restype=container",
        ] {
            let (h, _) = f.call("PUT", name, b"").await;
            assert_eq!(h.response.status(), 400, "{name}");
            assert_eq!(code(&h), "InvalidResourceName", "{name}");
        }
        assert_eq!(f.containers().await, 0);
    }

    #[tokio::test]
    async fn a_request_signed_for_s3_is_told_where_it_belongs() {
        let f = Fixture::new();
        let req = Fixture::request("PUT", "/box?restype=container")
            .header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=AK/20261205/us-east-1/s3/aws4_request, \
                 SignedHeaders=host, Signature=00",
            )
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (h, body) = f.send(req).await;
        assert_eq!(h.response.status(), 400);
        assert!(String::from_utf8_lossy(&body).contains("the S3 endpoint"));
        assert_eq!(f.containers().await, 0);
    }

    #[tokio::test]
    async fn x_ms_range_wins_over_range() {
        let f = Fixture::new();
        f.call("PUT", "/box?restype=container", b"").await;
        let (put, _) = f.call("PUT", "/box/blob", b"0123456789").await;
        assert_eq!(put.response.status(), 201);
        let req = Fixture::request("GET", "/box/blob")
            .header("range", "bytes=0-0")
            .header("x-ms-range", "bytes=5-7")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (h, body) = f.send(req).await;
        assert_eq!(h.response.status(), 206);
        assert_eq!(&body[..], b"567");
    }

    #[tokio::test]
    async fn a_shared_key_with_the_wrong_key_changes_nothing() {
        let mut f = Fixture::new();
        f.identity = AzureIdentity::unrestricted(
            ACCOUNT,
            Some(
                crate::azure::shared_key::AccountKey::from_base64(
                    crate::azure::shared_key::EMULATOR_ACCOUNT_KEY,
                )
                .unwrap(),
            ),
            AnonymousAccess::Refused,
        );
        let req = Fixture::request("PUT", "/box?restype=container")
            .header(
                "x-ms-date",
                crate::dates::format_http_date(SystemTime::now()),
            )
            .header("authorization", format!("SharedKey {ACCOUNT}:AAAA"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (h, _) = f.send(req).await;
        assert_eq!(h.response.status(), 403);
        assert_eq!(code(&h), "AuthenticationFailed");
        assert_eq!(f.containers().await, 0);
    }
}
