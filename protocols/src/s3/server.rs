//! The S3 front, once for every Talon server that speaks S3 (the gateway and the origin
//! stub): a request is classified, authenticated, dispatched to an
//! [`ObjectBackend`], and answered in S3's form, with S3's error answer when it fails.
//!
//! What an S3 answer looks like is decided here and nowhere else: the headers of a GET
//! or HEAD, part numbers, listings, the XML documents of every operation, the request
//! ids. A backend only says which bytes and which metadata.

use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use talon_core::Backend;

use super::auth::{self as s3_auth, S3Auth, S3Identities};
use super::request::{
    ListObjectsParams, ListVersion, ListVersionsParams, S3Addressing, S3Operation, S3Request,
    parse_copy_source, resolve_address, validate_bucket_name,
};
use super::sigv4::RequestParts;
use super::xml;
use crate::access::{Access, Acls, Action, CannedAcl, Need, Resource};
use crate::answer::{
    ErrorContext, Failure, ProtocolFront as _, answer, error_answer, header, request_has_body,
    set_fixed_header, set_formatted_header, set_header, set_read_headers,
};
use crate::conditional::{Conditions, DeleteConditions, EtagList, same_version};
use crate::dates::{format_http_date, http_date, parse_http_date};
use crate::listing::ListPage;
use crate::range::{RangeSpec, parse_copy_source_range};
use crate::server::{
    AnswerBody, CopySpec, ListFrom, ListSpec, ObjectBackend, Operation, PartCopySpec, ReadSpec,
    Relay, RelayBody, RequestBody, Seen, Target, Upload, WriteSpec, empty_body, full_body,
    read_document, request_body, within_deadline,
};
pub use crate::server::{Handled, ServerLimits};
use crate::upload::{UploadClaims, VerifyingStream};
use crate::{Error, ErrorKind};

/// An S3 front: how it names buckets, who may call it, and what it says about itself.
#[derive(Debug, Clone, Copy)]
pub struct S3Server<'a> {
    /// How requests name buckets.
    pub addressing: &'a S3Addressing,
    /// Who may call.
    pub identities: &'a S3Identities,
    /// The canned ACLs clients set; `None`: ACL writes are not kept here (refused, but
    /// for `private`).
    pub acls: Option<&'a Acls>,
    /// The region answered (HeadBucket, GetBucketLocation).
    pub region: &'a str,
    /// The owner id written into listings.
    pub owner_id: &'a str,
    /// The `Server` header: fixed text (a name that is not header text panics).
    pub server_name: &'static str,
    /// Bounds.
    pub limits: ServerLimits,
    /// Whether [`Handled::record`] is filled (for an access log).
    pub log_requests: bool,
}

/// Handles one S3 request against `backend`.
pub async fn handle<B, Body>(server: &S3Server<'_>, backend: &B, req: Request<Body>) -> Handled
where
    B: ObjectBackend,
    Body: http_body::Body<Data = Bytes> + Send + 'static,
    Body::Error: Into<crate::server::BoxError>,
{
    let request_id = Backend::S3.new_request_id();
    let span = tracing::info_span!("s3", request_id = %request_id);
    let is_head = req.method() == Method::HEAD;
    let resource = req.uri().path().to_owned();
    let host = header(req.headers(), "host").map(str::to_owned);
    let has_body = request_has_body(req.headers());
    let mut seen = Seen::new(server.log_requests);
    let result =
        tracing::Instrument::instrument(route(server, backend, req, &mut seen), span).await;
    let failed = result.is_err();
    let mut response = match result {
        Ok(resp) => resp,
        Err(f) => {
            let (bucket, key, _) = resolve_address(server.addressing, host.as_deref(), &resource);
            let context = ErrorContext {
                is_head,
                has_body,
                request_id: &request_id,
                resource: &resource,
                subject: xml::ErrorSubject {
                    bucket: bucket.as_deref(),
                    key: key.as_deref(),
                },
            };
            error_answer(Backend::S3, f, context).map(full_body)
        }
    };
    Backend::S3.stamp(response.headers_mut(), &request_id, "", server.server_name);
    seen.handled(response, failed, request_id)
}

/// The region whose CreateBucket answers the owner of an existing bucket with 200.
const US_EAST_1: &str = "us-east-1";

type Answer = Result<Response<AnswerBody>, Failure>;

async fn route<B, Body>(
    server: &S3Server<'_>,
    backend: &B,
    req: Request<Body>,
    seen: &mut Seen,
) -> Answer
where
    B: ObjectBackend,
    Body: http_body::Body<Data = Bytes> + Send + 'static,
    Body::Error: Into<crate::server::BoxError>,
{
    let (parts, body) = req.into_parts();
    Backend::S3.check_header_size(&parts.headers, server.limits.max_header_bytes)?;
    Backend::S3.check_signed_for_this_front(&parts.headers, parts.uri.query().unwrap_or(""))?;
    let raw_path = parts.uri.path();
    let raw_query = parts.uri.query().unwrap_or("");
    let request = S3Request::classify(
        &parts.method,
        server.addressing,
        &parts.headers,
        raw_path,
        raw_query,
    )?;
    seen.classified(
        request.operation.name(),
        request.bucket.as_ref(),
        request.key.as_ref(),
    );
    backend.admit(request.operation.name()).await?;
    let request_parts = RequestParts {
        method: parts.method.as_str(),
        raw_path,
        raw_query,
        headers: &parts.headers,
    };
    let auth = s3_auth::verify(
        server.identities,
        server.acls,
        &request,
        &request_parts,
        SystemTime::now(),
    )?;
    seen.caller(|| auth.who.map(str::to_owned));
    if let Err(refused) = s3_auth::authorize(&auth, &request, &parts.headers) {
        return Err(absent_or(refused, auth.access, &request, backend)
            .await
            .into());
    }
    let acl = AclEffect::of(server.acls, &request, &parts.headers, auth.access)?;
    acl.before(server.acls, &request)?;
    let ctx = Ctx {
        server,
        headers: &parts.headers,
        request: &request,
        auth,
        raw_query,
    };
    let body = request_body(body);
    let dispatched = dispatch(&ctx, backend, body);
    let streams_upload = matches!(
        request.operation,
        S3Operation::PutObject | S3Operation::UploadPart
    );
    let response = within_deadline(&server.limits, streams_upload, dispatched).await?;
    if response.status().is_success() {
        acl.after(server.acls, &request)?;
    }
    Ok(response)
}

/// A refusal, or S3's answer that what it asks for does not exist: `NoSuchBucket` for a
/// caller who may list something in the bucket, `NoSuchKey` for an object read by a
/// caller who may list the key itself (a listing of its prefix would show it absent
/// anyway). Any other caller is refused either way, so a refusal tells it nothing about
/// what exists; this costs the origin a HEAD only for callers with a `list` grant.
async fn absent_or<B: ObjectBackend>(
    refused: Error,
    access: Access<'_>,
    request: &S3Request,
    backend: &B,
) -> Error {
    let Some(bucket) = request.bucket.as_deref() else {
        return refused;
    };
    if !access.may_list(bucket) {
        return refused;
    }
    if let Err(f) = backend.head_bucket(bucket).await
        && f.error.kind() == ErrorKind::NoSuchBucket
    {
        return f.error;
    }
    let reads_object = matches!(
        request.operation,
        S3Operation::GetObject | S3Operation::HeadObject
    );
    let may_list_key = |key| {
        access.allows(Need {
            action: Action::List,
            resource: Resource::Listing {
                bucket,
                prefix: key,
            },
        })
    };
    if let (true, Some(key)) = (reads_object, request.key.as_deref())
        && may_list_key(key)
    {
        let head = object_exists(backend, Target { bucket, key }).await;
        if let Err(f) = head
            && f.error.kind() == ErrorKind::NoSuchKey
        {
            return f.error;
        }
    }
    refused
}

/// Whether `object` exists (a HEAD at the backend): its `NoSuchKey` or `NoSuchBucket`
/// otherwise.
async fn object_exists<B: ObjectBackend>(backend: &B, object: Target<'_>) -> Result<(), Failure> {
    backend
        .read(ReadSpec {
            object,
            conditions: &Conditions::default(),
            range: None,
            with_body: false,
            body_untouched: false,
            reader_access: None,
        })
        .await
        .map(|_| ())
}

/// What a write does to the canned ACL of what it writes: every write of an object sets
/// it (to `private` unless `x-amz-acl` says otherwise), a delete forgets it, a bucket's
/// creation sets the bucket's, a bucket's deletion forgets its objects'. An object
/// written as `private` is reset *before* the write, so a write whose answer fails
/// after the origin took it never leaves the new object public; everything else
/// happens after the request succeeded, so a refused request changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AclEffect {
    /// Nothing to do.
    None,
    /// An object about to be written: private before the write.
    PrivateFirst,
    /// Set the bucket's or object's ACL to this once the request succeeded.
    Set(CannedAcl),
    /// A deleted bucket: forget its objects' ACLs.
    ForgetObjects,
}

impl AclEffect {
    /// # Errors
    /// An `x-amz-acl` that is not a canned ACL kept here; `public-read` from a caller
    /// without `admin` on what it names; an ACL on an operation that cannot carry one.
    fn of(
        acls: Option<&Acls>,
        request: &S3Request,
        headers: &HeaderMap,
        access: Access<'_>,
    ) -> Result<AclEffect, Error> {
        use S3Operation::*;
        if let Some(grant) = headers
            .keys()
            .find(|n| n.as_str().starts_with("x-amz-grant-"))
        {
            return Err(Error::new(
                ErrorKind::NotImplemented,
                format!(
                    "{grant}: ACLs of explicit grants are not implemented; use a canned ACL in x-amz-acl (private or public-read)"
                ),
            ));
        }
        let named = header(headers, "x-amz-acl")
            .map(CannedAcl::parse)
            .transpose()?;
        let effect = match (request.operation, named) {
            (DeleteObject, _) => AclEffect::Set(CannedAcl::Private),
            (DeleteBucket, _) => AclEffect::ForgetObjects,
            (CreateBucket, acl) => AclEffect::Set(acl.unwrap_or(CannedAcl::Private)),
            (PutObject | CopyObject | CompleteMultipartUpload, Some(CannedAcl::PublicRead)) => {
                AclEffect::Set(CannedAcl::PublicRead)
            }
            (PutObject | CopyObject | CompleteMultipartUpload, _) => AclEffect::PrivateFirst,
            (CreateMultipartUpload, Some(CannedAcl::PublicRead)) => {
                return Err(Error::new(
                    ErrorKind::NotImplemented,
                    "a canned ACL on CreateMultipartUpload is not implemented; set it with PutObjectAcl after the upload completes",
                ));
            }
            _ => AclEffect::None,
        };
        if effect == AclEffect::Set(CannedAcl::PublicRead) {
            if acls.is_none() {
                return Err(acls_not_kept());
            }
            let resource = match request.operation {
                CreateBucket => Resource::Bucket(request.bucket.as_deref().unwrap_or_default()),
                _ => request.need().resource,
            };
            access.check(Need {
                action: Action::Admin,
                resource,
            })?;
        }
        Ok(effect)
    }

    fn before(self, acls: Option<&Acls>, request: &S3Request) -> Result<(), Error> {
        match self {
            AclEffect::PrivateFirst => AclEffect::Set(CannedAcl::Private).after(acls, request),
            _ => Ok(()),
        }
    }

    fn after(self, acls: Option<&Acls>, request: &S3Request) -> Result<(), Error> {
        let (Some(acls), Some(bucket)) = (acls, request.bucket.as_deref()) else {
            return Ok(());
        };
        match (self, request.key.as_deref()) {
            (AclEffect::Set(acl), Some(key)) => acls.set_object(bucket, key, acl),
            (AclEffect::Set(acl), None) => acls.set_bucket(bucket, acl),
            (AclEffect::ForgetObjects, _) => acls.forget_objects_of(bucket),
            (AclEffect::None | AclEffect::PrivateFirst, _) => Ok(()),
        }
    }
}

fn acls_not_kept() -> Error {
    Error::new(
        ErrorKind::NotImplemented,
        "ACL writes are not kept by this server (the gateway keeps them with --acl-file); only private is accepted",
    )
}

/// PutBucketAcl and PutObjectAcl: a canned ACL in `x-amz-acl` (an
/// `AccessControlPolicy` document of grants is not implemented).
async fn put_acl<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B, body: RequestBody) -> Answer {
    let document = ctx.document(body).await?;
    let acl = match header(ctx.headers, "x-amz-acl") {
        Some(value) => CannedAcl::parse(value)?,
        None if document.is_empty() => {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                "an ACL write needs x-amz-acl or an AccessControlPolicy document",
            )
            .into());
        }
        None => {
            return Err(Error::new(
                ErrorKind::NotImplemented,
                "ACL documents of grants are not implemented; use a canned ACL in x-amz-acl (private or public-read)",
            )
            .into());
        }
    };
    let bucket = ctx.bucket()?;
    let Some(acls) = ctx.server.acls else {
        // Nothing kept here is public: `private` is what it already is.
        if acl != CannedAcl::Private {
            return Err(acls_not_kept().into());
        }
        match ctx.request.key.as_deref() {
            None => {
                backend.head_bucket(bucket).await?;
            }
            Some(_) => object_exists(backend, ctx.object()?).await?,
        }
        return Ok(answer(StatusCode::OK, empty_body()));
    };
    match ctx.request.key.as_deref() {
        None => {
            backend.head_bucket(bucket).await?;
            acls.set_bucket(bucket, acl)?;
        }
        Some(_) => {
            ctx.only_the_null_version()?;
            object_exists(backend, ctx.object()?).await?;
            let key = ctx.object()?.key;
            acls.set_object(bucket, key, acl)?;
        }
    }
    Ok(answer(StatusCode::OK, empty_body()))
}

/// One request's context.
struct Ctx<'a> {
    server: &'a S3Server<'a>,
    headers: &'a HeaderMap,
    request: &'a S3Request,
    auth: S3Auth<'a>,
    raw_query: &'a str,
}

impl Ctx<'_> {
    fn bucket(&self) -> Result<&str, Error> {
        self.request
            .bucket
            .as_deref()
            .ok_or_else(|| Error::new(ErrorKind::InvalidRequest, "the request names no bucket"))
    }

    fn object(&self) -> Result<Target<'_>, Error> {
        let key = self
            .request
            .key
            .as_deref()
            .ok_or_else(|| Error::new(ErrorKind::InvalidRequest, "the request names no key"))?;
        Ok(Target {
            bucket: self.bucket()?,
            key,
        })
    }

    fn query(&self, name: &str) -> Option<&str> {
        self.request.query.get(name)
    }

    /// Refuses a `versionId` other than `null`: a backend without versioning has only
    /// that version (as S3 answers for a bucket that never had versioning).
    fn only_the_null_version(&self) -> Result<(), Error> {
        match self.query("versionId").filter(|v| *v != "null") {
            Some(v) => Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("Invalid version id specified: {v}"),
            )),
            None => Ok(()),
        }
    }

    fn upload_id(&self) -> Result<&str, Error> {
        self.query("uploadId")
            .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "uploadId is required"))
    }

    /// An UploadPart's or UploadPartCopy's `partNumber`: 1 to 10,000.
    fn part_number(&self) -> Result<u32, Error> {
        self.query("partNumber")
            .and_then(|n| n.parse().ok())
            .filter(|n| (1..=10_000).contains(n))
            .ok_or_else(part_number_error)
    }

    fn write_spec(&self) -> Result<WriteSpec, Error> {
        WriteSpec::of_request(talon_core::Backend::S3, self.headers)
    }

    /// The verified stream of an upload's body (PutObject, UploadPart).
    fn upload(&self, body: RequestBody) -> Result<Upload, Error> {
        let claims = UploadClaims::s3(self.headers, self.auth.seed.as_ref())?;
        let len = claims.announced_len.ok_or_else(|| {
            Error::new(
                ErrorKind::MissingContentLength,
                "You must provide the Content-Length HTTP header.",
            )
        })?;
        if len > self.server.limits.max_upload_bytes {
            return Err(Error::new(
                ErrorKind::EntityTooLarge,
                "Your proposed upload exceeds the maximum allowed size",
            ));
        }
        let checksum = claims.checksum.clone();
        let trailer_checksum = match &claims.chunked {
            Some((_, Some(alg), _)) if checksum.is_none() => Some(*alg),
            _ => None,
        };
        let (stream, outcome) = VerifyingStream::new(
            body,
            claims,
            self.server.limits.max_upload_bytes,
            self.server.limits.upload_idle_timeout,
        );
        Ok(Upload {
            stream,
            outcome,
            checksum,
            trailer_checksum,
        })
    }

    /// A small request body (an XML document), read whole.
    async fn document(&self, body: RequestBody) -> Result<Bytes, Error> {
        read_document(body, self.server.limits.max_xml_bytes).await
    }
}

async fn dispatch<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B, body: RequestBody) -> Answer {
    use S3Operation::*;
    let op = ctx.request.operation;
    if backend.relays(Operation::S3(op)) {
        return relay(ctx, backend, body).await;
    }
    match op {
        ListBuckets => list_buckets(ctx, backend).await,
        HeadBucket => {
            backend.head_bucket(ctx.bucket()?).await?;
            let mut resp = answer(StatusCode::OK, empty_body());
            set_header(resp.headers_mut(), "x-amz-bucket-region", ctx.server.region);
            Ok(resp)
        }
        GetBucketLocation => {
            backend.head_bucket(ctx.bucket()?).await?;
            Ok(xml_answer(xml::location_xml(ctx.server.region)))
        }
        GetBucketAcl => {
            let bucket = ctx.bucket()?;
            backend.head_bucket(bucket).await?;
            let acl = ctx
                .server
                .acls
                .map_or(CannedAcl::Private, |a| a.bucket(bucket));
            Ok(xml_answer(xml::acl_xml(ctx.server.owner_id, acl)))
        }
        PutBucketAcl | PutObjectAcl => put_acl(ctx, backend, body).await,
        GetObjectAcl => {
            ctx.only_the_null_version()?;
            object_exists(backend, ctx.object()?).await?;
            let object = ctx.object()?;
            let acl = ctx
                .server
                .acls
                .map_or(CannedAcl::Private, |a| a.object(object.bucket, object.key));
            Ok(xml_answer(xml::acl_xml(ctx.server.owner_id, acl)))
        }
        CreateBucket => {
            let bucket = ctx.bucket()?;
            validate_bucket_name(bucket)?;
            match backend.create_bucket(bucket).await {
                // S3's us-east-1 rule: its owner re-creating a bucket gets 200 and the
                // bucket keeps what it holds (elsewhere 409 BucketAlreadyOwnedByYou).
                // A front has one owner, so an existing bucket is always the caller's.
                Err(f)
                    if f.error.kind() == ErrorKind::BucketAlreadyExists
                        && ctx.server.region == US_EAST_1 => {}
                other => {
                    other?;
                }
            }
            let mut resp = answer(StatusCode::OK, empty_body());
            set_header(resp.headers_mut(), "location", &format!("/{bucket}"));
            Ok(resp)
        }
        DeleteBucket => {
            backend.delete_bucket(ctx.bucket()?).await?;
            Ok(answer(StatusCode::NO_CONTENT, empty_body()))
        }
        ListObjects => list_objects(ctx, backend, ListVersion::V1).await,
        ListObjectsV2 => list_objects(ctx, backend, ListVersion::V2).await,
        ListObjectVersions => list_versions(ctx, backend).await,
        GetObject => get_object(ctx, backend, true).await,
        HeadObject => get_object(ctx, backend, false).await,
        PutObject => {
            let upload = ctx.upload(body)?;
            let written = backend
                .put(ctx.object()?, upload, ctx.write_spec()?)
                .await?;
            Ok(written_answer(&written))
        }
        CopyObject => copy_object(ctx, backend).await,
        DeleteObject => {
            ctx.only_the_null_version()?;
            let conditions = DeleteConditions {
                if_match: header(ctx.headers, "if-match").map(EtagList::parse),
                last_modified: header(ctx.headers, "x-amz-if-match-last-modified-time")
                    .and_then(parse_http_date),
                size: header(ctx.headers, "x-amz-if-match-size")
                    .map(|v| {
                        v.trim().parse::<u64>().map_err(|_| {
                            Error::new(
                                ErrorKind::InvalidArgument,
                                "x-amz-if-match-size must be a number of bytes",
                            )
                        })
                    })
                    .transpose()?,
            };
            match backend.delete(ctx.object()?, false, &conditions).await {
                // S3 answers 204 whether or not the key existed.
                Ok(()) => {}
                Err(f) if f.error.kind() == ErrorKind::NoSuchKey => {}
                Err(f) => return Err(f),
            }
            Ok(answer(StatusCode::NO_CONTENT, empty_body()))
        }
        DeleteObjects => delete_objects(ctx, backend, body).await,
        CreateMultipartUpload => {
            let object = ctx.object()?;
            let id = backend.create_upload(object, ctx.write_spec()?).await?;
            Ok(xml_answer(xml::initiate_multipart_xml(
                object.bucket,
                object.key,
                &id,
            )))
        }
        UploadPart => {
            let object = ctx.object()?;
            let id = ctx.upload_id()?;
            let number = ctx.part_number()?;
            let upload = ctx.upload(body)?;
            let written = backend.upload_part(object, id, number, upload).await?;
            Ok(written_answer(&written))
        }
        UploadPartCopy => upload_part_copy(ctx, backend).await,
        CompleteMultipartUpload => {
            let object = ctx.object()?;
            let id = ctx.upload_id()?;
            let bytes = ctx.document(body).await?;
            let request: xml::CompleteMultipartUpload = xml::parse_request(&bytes)?;
            let parts = request
                .parts
                .into_iter()
                .map(|p| (p.number, p.etag))
                .collect();
            let conditions = Conditions {
                if_match: header(ctx.headers, "if-match").map(EtagList::parse),
                if_none_match: header(ctx.headers, "if-none-match").map(EtagList::parse),
                ..Conditions::default()
            };
            let etag = backend
                .complete_upload(object, id, parts, &conditions)
                .await?;
            let location = format!(
                "/{}/{}",
                object.bucket,
                crate::uri_encoding::encode_path(object.key)
            );
            Ok(xml_answer(xml::complete_multipart_xml(
                &location,
                object.bucket,
                object.key,
                &etag,
            )))
        }
        AbortMultipartUpload => {
            backend
                .abort_upload(ctx.object()?, ctx.upload_id()?)
                .await?;
            Ok(answer(StatusCode::NO_CONTENT, empty_body()))
        }
        GetObjectAttributes => object_attributes(ctx, backend).await,
        ListParts => {
            let object = ctx.object()?;
            let id = ctx.upload_id()?;
            let parts = backend.list_parts(object, id).await?;
            let entries: Vec<xml::PartEntry> = parts
                .into_iter()
                .map(|p| xml::PartEntry {
                    number: p.number,
                    etag: p.etag,
                    size: p.size,
                    last_modified: p.last_modified,
                })
                .collect();
            Ok(xml_answer(xml::list_parts_xml(
                object.bucket,
                object.key,
                id,
                &entries,
            )))
        }
        ListMultipartUploads => {
            let bucket = ctx.bucket()?;
            let uploads = backend.list_uploads(bucket).await?;
            let entries: Vec<xml::UploadEntry> = uploads
                .into_iter()
                .map(|u| xml::UploadEntry {
                    key: u.key,
                    upload_id: u.upload_id,
                    initiated: u.initiated,
                })
                .collect();
            Ok(xml_answer(xml::list_uploads_xml(bucket, &entries)))
        }
    }
}

fn part_number_error() -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        "Part number must be an integer between 1 and 10000, inclusive",
    )
}

fn xml_answer(doc: String) -> Response<AnswerBody> {
    let mut resp = answer(StatusCode::OK, full_body(doc));
    set_header(resp.headers_mut(), "content-type", "application/xml");
    resp
}

/// The answer to a stored upload: its entity tag and verified checksum.
fn written_answer(written: &crate::server::Written) -> Response<AnswerBody> {
    let mut resp = answer(StatusCode::OK, empty_body());
    set_header(resp.headers_mut(), "etag", &written.etag);
    if let Some((alg, value)) = &written.checksum {
        set_header(resp.headers_mut(), alg.header_name(), value);
    }
    resp
}

/// ListBuckets, paginated as S3 does when asked: `prefix`, `max-buckets` (1..=10000)
/// and `continuation-token` (the last bucket name of the page before, opaque to the
/// client); without `max-buckets`, every bucket at once.
async fn list_buckets<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B) -> Answer {
    let prefix = ctx.query("prefix").filter(|p| !p.is_empty());
    let max = match ctx.query("max-buckets") {
        None => None,
        Some(v) => Some(
            v.parse::<usize>()
                .ok()
                .filter(|n| (1..=10_000).contains(n))
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidArgument,
                        "max-buckets must be an integer between 1 and 10000",
                    )
                })?,
        ),
    };
    let after = ctx.query("continuation-token").filter(|t| !t.is_empty());
    let mut buckets = backend.list_buckets().await?;
    buckets.retain(|b| ctx.auth.access.shows_bucket(&b.name));
    let query = crate::listing::ListQuery {
        prefix: prefix.unwrap_or(""),
        delimiter: None,
        marker: after,
        max_keys: max.unwrap_or(usize::MAX),
    };
    let page = crate::listing::paginate(buckets, |b| b.name.as_str(), &query);
    let next_token = page.next_marker.clone().filter(|_| page.is_truncated);
    let entries: Vec<xml::BucketEntry> = page
        .entries
        .into_iter()
        .map(|b| xml::BucketEntry {
            name: b.name,
            created: b.created.unwrap_or(std::time::UNIX_EPOCH),
        })
        .collect();
    Ok(xml_answer(xml::list_buckets_xml(
        ctx.server.owner_id,
        &entries,
        next_token.as_deref(),
        prefix,
    )))
}

async fn list_objects<B: ObjectBackend>(
    ctx: &Ctx<'_>,
    backend: &B,
    version: ListVersion,
) -> Answer {
    let bucket = ctx.bucket()?;
    let params = ListObjectsParams::from_query(&ctx.request.query, version)?;
    let owner = ctx.server.owner_id;
    if params.max_keys == 0 {
        let empty = empty_page();
        return Ok(xml_answer(xml::list_objects_xml(
            bucket, &params, &empty, None, owner,
        )));
    }
    let from = match version {
        ListVersion::V1 => params.marker.as_deref().map(ListFrom::Marker),
        ListVersion::V2 => params
            .continuation_token
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(ListFrom::Token)
            .or(params.start_after.as_deref().map(ListFrom::AfterKey)),
    };
    let spec = ListSpec {
        prefix: &params.prefix,
        delimiter: params.delimiter.as_deref(),
        from: from.unwrap_or(ListFrom::Start),
        max_keys: params.max_keys,
        include_metadata: false,
    };
    let result = backend.list(bucket, &spec).await?;
    let next_token = result
        .next_token
        .clone()
        .filter(|_| result.is_truncated && version == ListVersion::V2);
    let page = s3_page(result);
    Ok(xml_answer(xml::list_objects_xml(
        bucket,
        &params,
        &page,
        next_token.as_deref(),
        owner,
    )))
}

/// A listing page with nothing on it (`max-keys=0`).
fn empty_page() -> ListPage<xml::ObjectEntry> {
    ListPage {
        entries: Vec::new(),
        common_prefixes: Vec::new(),
        is_truncated: false,
        next_marker: None,
    }
}

/// A backend's listing page as S3's listing documents write it; the next marker only
/// when more entries follow.
fn s3_page(result: crate::server::ListResult) -> ListPage<xml::ObjectEntry> {
    ListPage {
        entries: result
            .objects
            .into_iter()
            .map(|o| xml::ObjectEntry {
                key: o.key,
                last_modified: o.last_modified,
                etag: o.etag,
                size: o.size,
            })
            .collect(),
        common_prefixes: result.common_prefixes,
        is_truncated: result.is_truncated,
        next_marker: result.next_marker.filter(|_| result.is_truncated),
    }
}

/// ListObjectVersions over a backend without versioning: the objects a listing gives,
/// each as its `null` version; `key-marker` resumes where `NextKeyMarker` said.
async fn list_versions<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B) -> Answer {
    let bucket = ctx.bucket()?;
    let params = ListVersionsParams::from_query(&ctx.request.query)?;
    let owner = ctx.server.owner_id;
    if params.max_keys == 0 {
        let empty = empty_page();
        backend.head_bucket(bucket).await?;
        return Ok(xml_answer(xml::list_versions_xml(
            bucket, &params, &empty, owner,
        )));
    }
    let spec = ListSpec {
        prefix: &params.prefix,
        delimiter: params.delimiter.as_deref(),
        from: params
            .key_marker
            .as_deref()
            .map(ListFrom::Marker)
            .unwrap_or(ListFrom::Start),
        max_keys: params.max_keys,
        include_metadata: false,
    };
    let result = backend.list(bucket, &spec).await?;
    let page = s3_page(result);
    Ok(xml_answer(xml::list_versions_xml(
        bucket, &params, &page, owner,
    )))
}

async fn get_object<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B, with_body: bool) -> Answer {
    let object = ctx.object()?;
    ctx.only_the_null_version()?;
    let conditions = Conditions::from_headers(ctx.headers);
    let mut range = header(ctx.headers, "range").and_then(RangeSpec::parse);
    let mut part = None;
    if let Some(pn) = ctx.query("partNumber") {
        if ctx.headers.contains_key("range") {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                "Cannot specify both Range header and partNumber query parameter",
            )
            .into());
        }
        let n: u32 = pn
            .parse()
            .ok()
            .filter(|n| (1..=10_000).contains(n))
            .ok_or_else(part_number_error)?;
        let bounds = backend.part(object, n).await?;
        range = bounds.range.map(|r| RangeSpec::Bounded {
            first: r.start,
            last: r.last(),
        });
        part = Some(bounds);
    }
    let read = backend
        .read(ReadSpec {
            object,
            conditions: &conditions,
            range,
            with_body,
            body_untouched: true,
            reader_access: Some(ctx.auth.access),
        })
        .await?;
    if let Some(etag) = part.as_ref().and_then(|p| p.etag.as_deref())
        && !same_version(etag, &read.info.etag)
    {
        // The object changed between the part lookup and the read.
        return Err(Error::new(
            ErrorKind::SlowDown,
            "The object changed while its part was read; retry",
        )
        .into());
    }
    let info = &read.info;
    let (status, len) = match read.range {
        Some(r) => (StatusCode::PARTIAL_CONTENT, r.len()),
        None => (StatusCode::OK, info.size),
    };
    let mut resp = answer(status, read.body.unwrap_or_else(empty_body));
    let h = resp.headers_mut();
    set_read_headers(h, len, read.range.as_ref(), info);
    if let Some(t) = info.last_modified {
        set_formatted_header(h, "last-modified", http_date(t));
    }
    set_object_headers(h, &info.headers);
    // The full-object checksum, when asked for and the answer is the whole object: the
    // SDK then verifies every byte it got against the checksum the object was stored
    // with.
    if read.range.is_none()
        && part.is_none()
        && header(ctx.headers, "x-amz-checksum-mode")
            .is_some_and(|v| v.eq_ignore_ascii_case("ENABLED"))
        && let Some((alg, value)) = info.headers.checksum.split_once(':')
    {
        set_header(h, &format!("x-amz-checksum-{alg}"), value);
        set_fixed_header(h, "x-amz-checksum-type", "FULL_OBJECT");
    }
    if let Some(count) = part.and_then(|p| p.count) {
        set_header(h, "x-amz-mp-parts-count", &count.to_string());
    }
    crate::server::set_staleness_headers(h, read.stale);
    for (name, v) in
        crate::content_headers::s3_response_overrides(&ctx.request.query, ctx.auth.access.caller())
    {
        set_header(h, name, v);
    }
    Ok(resp)
}

/// An object's stored content headers and user metadata (`x-amz-meta-*`) on a read's
/// answer.
fn set_object_headers(h: &mut HeaderMap, set: &talon_core::wire::HeaderSet) {
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
            &format!("{}{name}", crate::origin::S3_META_PREFIX),
            value,
        );
    }
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

async fn copy_object<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B) -> Answer {
    let to = ctx.object()?;
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
    if !replace && src_bucket == to.bucket && src_key == to.key {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.",
        )
        .into());
    }
    let copy = CopySpec {
        from: Target {
            bucket: &src_bucket,
            key: &src_key,
        },
        source_conditions: copy_source_conditions(ctx.headers),
        // S3 conditions a copy's destination on its entity tag only.
        destination: Conditions {
            if_match: header(ctx.headers, "if-match").map(EtagList::parse),
            if_none_match: header(ctx.headers, "if-none-match").map(EtagList::parse),
            ..Conditions::default()
        },
        replace: if replace {
            Some(ctx.write_spec()?)
        } else {
            None
        },
    };
    let copied = backend.copy(to, copy).await?;
    Ok(xml_answer(xml::copy_result_xml(
        &copied.etag,
        copied.last_modified,
        false,
    )))
}

/// The attributes GetObjectAttributes may ask for.
const OBJECT_ATTRIBUTES: [&str; 5] = [
    "ETag",
    "Checksum",
    "ObjectParts",
    "StorageClass",
    "ObjectSize",
];

/// Most parts one GetObjectAttributes answer lists.
const MAX_ATTRIBUTE_PARTS: usize = 1000;

/// GetObjectAttributes: the attributes named in `x-amz-object-attributes`, parts paged
/// by `x-amz-max-parts` and `x-amz-part-number-marker`.
async fn object_attributes<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B) -> Answer {
    ctx.only_the_null_version()?;
    let asked: Vec<&str> = header(ctx.headers, "x-amz-object-attributes")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect();
    if asked.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "x-amz-object-attributes names no attribute",
        )
        .into());
    }
    if let Some(bad) = asked
        .iter()
        .find(|a| !OBJECT_ATTRIBUTES.iter().any(|o| o.eq_ignore_ascii_case(a)))
    {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("Invalid attribute name specified: {bad}"),
        )
        .into());
    }
    let number = |name: &str, default: u64| -> Result<u64, Error> {
        match header(ctx.headers, name) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("{name} must be a number"),
                )
            }),
        }
    };
    let max = usize::try_from(number("x-amz-max-parts", MAX_ATTRIBUTE_PARTS as u64)?)
        .unwrap_or(MAX_ATTRIBUTE_PARTS)
        .min(MAX_ATTRIBUTE_PARTS);
    let marker = u32::try_from(number("x-amz-part-number-marker", 0)?).unwrap_or(u32::MAX);
    let attributes = backend.object_attributes(ctx.object()?).await?;
    let info = &attributes.info;
    let page = attributes.part_sizes.as_ref().map(|sizes| xml::PartsPage {
        count: sizes.len(),
        marker,
        max,
        parts: (1u32..)
            .zip(sizes.iter().copied())
            .filter(|(n, _)| *n > marker)
            .take(max)
            .collect(),
    });
    let checksum = info.headers.checksum.split_once(':');
    let mut resp = xml_answer(xml::object_attributes_xml(
        &asked,
        &info.etag,
        info.size,
        checksum,
        page.as_ref(),
    ));
    if let Some(t) = info.last_modified {
        set_header(resp.headers_mut(), "last-modified", &format_http_date(t));
    }
    Ok(resp)
}

/// UploadPartCopy: a part from another object's bytes, all of them or
/// `x-amz-copy-source-range`, if the source conditions hold.
async fn upload_part_copy<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B) -> Answer {
    let object = ctx.object()?;
    let id = ctx.upload_id()?;
    let number = ctx.part_number()?;
    let source = header(ctx.headers, "x-amz-copy-source").unwrap_or_default();
    let (src_bucket, src_key) = parse_copy_source(source)?;
    let range = header(ctx.headers, "x-amz-copy-source-range")
        .map(parse_copy_source_range)
        .transpose()?;
    let copy = PartCopySpec {
        from: Target {
            bucket: &src_bucket,
            key: &src_key,
        },
        range,
        source_conditions: copy_source_conditions(ctx.headers),
    };
    let copied = backend.upload_part_copy(object, id, number, copy).await?;
    Ok(xml_answer(xml::copy_result_xml(
        &copied.etag,
        copied.last_modified,
        true,
    )))
}

async fn delete_objects<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B, body: RequestBody) -> Answer {
    let bucket = ctx.bucket()?;
    let bytes = ctx.document(body).await?;
    // The small body's digests are verified as any upload's are.
    let claims = UploadClaims::s3(ctx.headers, ctx.auth.seed.as_ref())?;
    let (check, _) = VerifyingStream::new(
        http_body_util::Full::new(bytes.clone())
            .map_err(|never| match never {})
            .boxed_unsync(),
        claims,
        ctx.server.limits.max_xml_bytes as u64,
        ctx.server.limits.upload_idle_timeout,
    );
    check.drain_to(&mut tokio::io::sink(), |_| {}).await?;
    let request: xml::DeleteRequest = xml::parse_request(&bytes)?;
    if request.objects.len() > 1000 {
        return Err(Error::new(
            ErrorKind::MalformedXml,
            "A DeleteObjects request may name at most 1000 keys",
        )
        .into());
    }
    backend.head_bucket(bucket).await?;
    let mut outcomes = Vec::with_capacity(request.objects.len());
    for o in request.objects {
        let may_delete = ctx.auth.access.check(Need {
            action: Action::Delete,
            resource: Resource::Object {
                bucket,
                key: &o.key,
            },
        });
        if let Err(refused) = may_delete {
            outcomes.push(xml::DeleteOutcome::Failed {
                key: o.key,
                kind: refused.kind(),
                message: refused.message().to_owned(),
            });
            continue;
        }
        let conditions = DeleteConditions {
            if_match: o.etag.as_deref().map(EtagList::parse),
            // An HTTP date, as the SDKs write it here, or ISO 8601.
            last_modified: o
                .last_modified_time
                .as_deref()
                .and_then(|t| parse_http_date(t).or_else(|| crate::dates::parse_iso8601(t))),
            size: o.size,
        };
        let result = backend
            .delete(
                Target {
                    bucket,
                    key: &o.key,
                },
                false,
                &conditions,
            )
            .await;
        if result.is_ok()
            && let Some(acls) = ctx.server.acls
        {
            acls.set_object(bucket, &o.key, CannedAcl::Private)?;
        }
        outcomes.push(match result {
            Ok(()) => xml::DeleteOutcome::Deleted(o.key),
            Err(f) if f.error.kind() == ErrorKind::NoSuchKey => xml::DeleteOutcome::Deleted(o.key),
            Err(f) => xml::DeleteOutcome::Failed {
                key: o.key,
                kind: f.error.kind(),
                message: f.error.message().to_owned(),
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

/// Hands an operation the backend relays to it, with its body: an upload verified as it
/// streams, an XML document read whole, or nothing.
async fn relay<B: ObjectBackend>(ctx: &Ctx<'_>, backend: &B, body: RequestBody) -> Answer {
    let op = ctx.request.operation;
    let query = ctx
        .raw_query
        .split('&')
        .filter(|p| !p.is_empty() && !is_auth_param(p.split('=').next().unwrap_or("")))
        .collect::<Vec<_>>()
        .join("&");
    let body = match op {
        S3Operation::UploadPart | S3Operation::PutObject => {
            RelayBody::Upload(Box::new(ctx.upload(body)?))
        }
        S3Operation::CompleteMultipartUpload
        | S3Operation::CreateBucket
        | S3Operation::DeleteObjects => {
            let bytes = ctx.document(body).await?;
            if bytes.is_empty() {
                RelayBody::Empty
            } else {
                RelayBody::Document(bytes)
            }
        }
        _ => RelayBody::Empty,
    };
    backend
        .relay(Relay {
            operation: Operation::S3(op),
            bucket: ctx.request.bucket.as_deref(),
            key: ctx.request.key.as_deref(),
            query,
            headers: ctx.headers,
            body,
        })
        .await
}

#[cfg(test)]
mod tests {
    //! The S3 server's own dispatch, over the in-memory reference backend: what is
    //! decided here before and around a backend (classification, refusals, request
    //! ids, error documents), with the backend's state checked after each refusal.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::testing::memory::MemoryBackend;
    use http_body_util::Full;

    struct Fixture {
        addressing: S3Addressing,
        identities: S3Identities,
        backend: MemoryBackend,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture {
                addressing: S3Addressing::PathStyle,
                identities: S3Identities::anonymous(),
                backend: MemoryBackend::new(),
            }
        }

        async fn send(&self, req: Request<Full<Bytes>>) -> (Handled, Bytes) {
            let server = S3Server {
                addressing: &self.addressing,
                identities: &self.identities,
                acls: None,
                region: "us-east-1",
                owner_id: "owner",
                server_name: "talon-test",
                limits: ServerLimits::default(),
                log_requests: true,
            };
            let mut handled = handle(&server, &self.backend, req).await;
            let body = std::mem::replace(handled.response.body_mut(), empty_body());
            let bytes = body.collect().await.unwrap().to_bytes();
            (handled, bytes)
        }

        async fn call(&self, method: &str, uri: &str, body: &'static [u8]) -> (Handled, Bytes) {
            let req = Request::builder()
                .method(method)
                .uri(uri)
                .header("host", "127.0.0.1")
                .header("content-length", body.len())
                .body(Full::new(Bytes::from_static(body)))
                .unwrap();
            self.send(req).await
        }

        async fn buckets(&self) -> usize {
            self.backend.list_buckets().await.unwrap().len()
        }
    }

    fn code(body: &[u8]) -> String {
        let text = String::from_utf8_lossy(body);
        let start = text.find("<Code>").map_or(0, |i| i + "<Code>".len());
        let end = text.find("</Code>").unwrap_or(start);
        text[start..end].to_owned()
    }

    #[tokio::test]
    async fn every_answer_names_its_request_and_operation() {
        let f = Fixture::new();
        let (ok, _) = f.call("PUT", "/bucket-one", b"").await;
        assert_eq!(ok.response.status(), 200);
        assert_eq!(ok.operation, "CreateBucket");
        assert!(!ok.failed);
        let id = ok.response.headers()["x-amz-request-id"].to_str().unwrap();
        assert!(!id.is_empty());
        assert_eq!(ok.record.unwrap().request_id, id);
        let (missing, body) = f.call("GET", "/bucket-one/none", b"").await;
        assert_eq!(missing.response.status(), 404);
        assert!(missing.failed);
        assert_eq!(code(&body), "NoSuchKey");
        assert_eq!(missing.operation, "GetObject");
        assert!(missing.response.headers().contains_key("x-amz-request-id"));
    }

    #[tokio::test]
    async fn an_invalid_bucket_name_is_refused_and_nothing_is_made() {
        let f = Fixture::new();
        for name in ["/Upper_Case", "/ab", "/a..b"] {
            let (h, body) = f.call("PUT", name, b"").await;
            assert_eq!(h.response.status(), 400, "{name}");
            assert_eq!(code(&body), "InvalidBucketName", "{name}");
        }
        assert_eq!(f.buckets().await, 0);
    }

    #[tokio::test]
    async fn an_oversized_header_section_is_refused_before_classification() {
        let f = Fixture::new();
        let req = Request::builder()
            .method("PUT")
            .uri("/big-headers")
            .header("host", "127.0.0.1")
            .header("x-amz-meta-filler", "x".repeat(9000))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (h, body) = f.send(req).await;
        assert_eq!(h.response.status(), 400);
        assert_eq!(code(&body), "RequestHeaderSectionTooLarge");
        assert_eq!(h.operation, "Unknown");
        assert_eq!(f.buckets().await, 0);
    }

    #[tokio::test]
    async fn a_request_signed_for_azure_is_told_where_it_belongs() {
        let f = Fixture::new();
        let req = Request::builder()
            .method("PUT")
            .uri("/container-x")
            .header("host", "127.0.0.1")
            .header("authorization", "SharedKey devstoreaccount1:c2ln")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (h, body) = f.send(req).await;
        assert_eq!(h.response.status(), 400);
        assert_eq!(code(&body), "InvalidRequest");
        assert!(String::from_utf8_lossy(&body).contains("the Azure Blob endpoint"));
        assert_eq!(f.buckets().await, 0);
    }

    #[tokio::test]
    async fn a_head_error_answer_has_no_body() {
        let f = Fixture::new();
        f.call("PUT", "/bucket-two", b"").await;
        let (h, body) = f.call("HEAD", "/bucket-two/none", b"").await;
        assert_eq!(h.response.status(), 404);
        assert!(body.is_empty());
    }

    #[tokio::test]
    async fn a_signed_request_with_an_unknown_key_changes_nothing() {
        let mut f = Fixture::new();
        f.identities = S3Identities {
            regions: vec!["us-east-1".into()],
            ..S3Identities::default()
        }
        .with_unrestricted_key("KNOWN", "secret");
        let signed = crate::s3::sigv4::sign_request(
            "PUT",
            "http://127.0.0.1/bucket-three",
            &[("host", "127.0.0.1")],
            crate::s3::sigv4::SignedBody::Bytes(&[]),
            &crate::s3::sigv4::S3Credentials {
                access_key: "UNKNOWN".into(),
                secret_key: "secret".into(),
                session_token: None,
            },
            "us-east-1",
            SystemTime::now(),
        )
        .unwrap();
        let mut req = Request::builder()
            .method("PUT")
            .uri("/bucket-three")
            .header("host", "127.0.0.1");
        for (k, v) in &signed {
            req = req.header(k.as_str(), v.as_str());
        }
        let (h, body) = f.send(req.body(Full::new(Bytes::new())).unwrap()).await;
        assert_eq!(h.response.status(), 403);
        assert_eq!(code(&body), "InvalidAccessKeyId");
        assert_eq!(f.buckets().await, 0);
    }

    #[tokio::test]
    async fn a_write_then_a_ranged_read_through_the_server() {
        let f = Fixture::new();
        f.call("PUT", "/bucket-four", b"").await;
        let (put, _) = f.call("PUT", "/bucket-four/k", b"0123456789").await;
        assert_eq!(put.response.status(), 200);
        assert_eq!(put.operation, "PutObject");
        let req = Request::builder()
            .method("GET")
            .uri("/bucket-four/k")
            .header("host", "127.0.0.1")
            .header("range", "bytes=2-4")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let (h, body) = f.send(req).await;
        assert_eq!(h.response.status(), 206);
        assert_eq!(&body[..], b"234");
        assert_eq!(h.response.headers()["content-range"], "bytes 2-4/10");
    }
}
