//! The one error type of this crate and the table that maps each error kind to what a
//! client of either protocol sees.
//!
//! Every failure a Talon process reports over S3 or Azure Blob starts as an [`ErrorKind`].
//! The kind decides the S3 error code, the Azure error code, the HTTP status of each
//! protocol and the worker wire protocol's error frame code, here and nowhere else, so the origin stub, the gateway and the worker's miss
//! path cannot disagree about what "not found" or "bad signature" looks like on the wire.

use http::StatusCode;
use talon_core::ErrorCode as FrameCode;

/// What went wrong, independent of the protocol that reports it.
///
/// The mapping to wire codes is in [`ErrorKind::s3_code`], [`ErrorKind::azure_code`],
/// [`ErrorKind::s3_status`] and [`ErrorKind::azure_status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The bucket (S3) or container (Azure) does not exist.
    NoSuchBucket,
    /// The object (S3) or blob (Azure) does not exist.
    NoSuchKey,
    /// The multipart upload id is unknown, completed or aborted.
    NoSuchUpload,
    /// Creating a bucket or container that already exists.
    BucketAlreadyExists,
    /// Deleting a bucket that still holds objects.
    BucketNotEmpty,
    /// The requested range starts at or beyond the end of the object.
    InvalidRange,
    /// An `If-Match` or `If-Unmodified-Since` condition failed, or a pinned version changed.
    PreconditionFailed,
    /// An `If-None-Match` or `If-Modified-Since` condition says the client's copy is current.
    NotModified,
    /// Authenticated, but not allowed to do this.
    AccessDenied,
    /// No credentials were supplied where they are required.
    MissingCredentials,
    /// The signature the client sent does not match the one computed here.
    SignatureDoesNotMatch,
    /// The access key id (S3) or account name (Azure) is unknown.
    InvalidAccessKeyId,
    /// The request's timestamp is too far from this server's clock.
    RequestTimeTooSkewed,
    /// A presigned URL or SAS token has expired or is not yet valid.
    ExpiredRequest,
    /// A SAS token does not grant the permission this operation needs.
    PermissionMismatch,
    /// A copy's source cannot be read with what the request carries: another server or
    /// account, or no authorization for the source (Azure's `CannotVerifyCopySource`).
    CannotVerifyCopySource,
    /// An authorization header or query that cannot be parsed.
    MalformedAuthorization,
    /// A parameter has an invalid value.
    InvalidArgument,
    /// A header has an invalid value.
    InvalidHeaderValue,
    /// The request is well formed but not valid in this state or combination.
    InvalidRequest,
    /// The request body was not well-formed XML, or not the XML expected.
    MalformedXml,
    /// The bucket or container name is not a valid name.
    InvalidBucketName,
    /// The object key or blob name cannot be stored (empty, `.`/`..` segments, NUL, too long).
    InvalidObjectName,
    /// A body digest (Content-MD5 or a flexible checksum) does not match the body.
    BadDigest,
    /// The `x-amz-content-sha256` of a signed payload does not match the body.
    ContentSha256Mismatch,
    /// An `aws-chunked` body is malformed or ends early.
    IncompleteBody,
    /// The body is larger than this server accepts.
    EntityTooLarge,
    /// A multipart part other than the last is smaller than the minimum part size.
    EntityTooSmall,
    /// A `Content-MD5` header that is not a base64 MD5.
    InvalidDigest,
    /// User metadata (`x-amz-meta-*`, `x-ms-meta-*`) exceeds the size limit.
    MetadataTooLarge,
    /// Request headers are larger than this server accepts.
    HeadersTooLarge,
    /// A multipart part or Azure block in a completion list is missing or wrong.
    InvalidPart,
    /// A read named a part number the object does not have (`GET ?partNumber=N`).
    /// S3 answers it with the code of a missing part, `InvalidPart` (ceph/s3-tests'
    /// `test_non_multipart_get_part`, which is not marked as failing on AWS).
    InvalidPartNumber,
    /// Multipart parts were listed out of ascending order.
    InvalidPartOrder,
    /// A body is required and no `Content-Length` was given.
    MissingContentLength,
    /// A header the operation requires is absent.
    MissingHeader,
    /// The HTTP method is not allowed on this resource.
    MethodNotAllowed,
    /// The operation is recognised but not implemented here.
    NotImplemented,
    /// The server failed; the request may be retried.
    InternalError,
    /// The server asks the client to slow down (throttling); retry with backoff.
    SlowDown,
    /// The server or the origin behind it is unavailable; retry later.
    ServiceUnavailable,
    /// The request did not complete in time.
    Timeout,
}

/// One row of the kind table: what each protocol says for a kind.
struct WireCodes {
    s3_code: &'static str,
    s3_status: u16,
    azure_code: &'static str,
    azure_status: u16,
}

const fn row(
    s3_code: &'static str,
    s3_status: u16,
    azure_code: &'static str,
    azure_status: u16,
) -> WireCodes {
    WireCodes {
        s3_code,
        s3_status,
        azure_code,
        azure_status,
    }
}

impl ErrorKind {
    /// The single table behind every wire mapping.
    fn codes(self) -> WireCodes {
        use ErrorKind::*;
        match self {
            NoSuchBucket => row("NoSuchBucket", 404, "ContainerNotFound", 404),
            NoSuchKey => row("NoSuchKey", 404, "BlobNotFound", 404),
            NoSuchUpload => row("NoSuchUpload", 404, "InvalidBlockList", 400),
            BucketAlreadyExists => row(
                "BucketAlreadyOwnedByYou",
                409,
                "ContainerAlreadyExists",
                409,
            ),
            BucketNotEmpty => row(
                "BucketNotEmpty",
                409,
                "OperationNotAllowedInCurrentState",
                409,
            ),
            InvalidRange => row("InvalidRange", 416, "InvalidRange", 416),
            PreconditionFailed => row("PreconditionFailed", 412, "ConditionNotMet", 412),
            NotModified => row("NotModified", 304, "ConditionNotMet", 304),
            AccessDenied => row("AccessDenied", 403, "AuthorizationFailure", 403),
            MissingCredentials => row("AccessDenied", 403, "NoAuthenticationInformation", 401),
            SignatureDoesNotMatch => row("SignatureDoesNotMatch", 403, "AuthenticationFailed", 403),
            InvalidAccessKeyId => row("InvalidAccessKeyId", 403, "AuthenticationFailed", 403),
            RequestTimeTooSkewed => row("RequestTimeTooSkewed", 403, "AuthenticationFailed", 403),
            ExpiredRequest => row("AccessDenied", 403, "AuthenticationFailed", 403),
            PermissionMismatch => row("AccessDenied", 403, "AuthorizationPermissionMismatch", 403),
            CannotVerifyCopySource => row("AccessDenied", 403, "CannotVerifyCopySource", 403),
            MalformedAuthorization => row(
                "AuthorizationHeaderMalformed",
                400,
                "AuthenticationFailed",
                403,
            ),
            InvalidArgument => row("InvalidArgument", 400, "InvalidQueryParameterValue", 400),
            InvalidHeaderValue => row("InvalidArgument", 400, "InvalidHeaderValue", 400),
            InvalidRequest => row("InvalidRequest", 400, "InvalidInput", 400),
            MalformedXml => row("MalformedXML", 400, "InvalidXmlDocument", 400),
            InvalidBucketName => row("InvalidBucketName", 400, "InvalidResourceName", 400),
            InvalidObjectName => row("InvalidArgument", 400, "InvalidResourceName", 400),
            BadDigest => row("BadDigest", 400, "Md5Mismatch", 400),
            ContentSha256Mismatch => row("XAmzContentSHA256Mismatch", 400, "Md5Mismatch", 400),
            IncompleteBody => row("IncompleteBody", 400, "InvalidInput", 400),
            EntityTooLarge => row("EntityTooLarge", 400, "RequestBodyTooLarge", 413),
            EntityTooSmall => row("EntityTooSmall", 400, "InvalidInput", 400),
            InvalidDigest => row("InvalidDigest", 400, "InvalidMd5", 400),
            MetadataTooLarge => row("MetadataTooLarge", 400, "MetadataTooLarge", 400),
            HeadersTooLarge => row(
                "RequestHeaderSectionTooLarge",
                400,
                "InvalidHeaderValue",
                400,
            ),
            InvalidPart => row("InvalidPart", 400, "InvalidBlockList", 400),
            InvalidPartNumber => row("InvalidPart", 400, "InvalidQueryParameterValue", 400),
            InvalidPartOrder => row("InvalidPartOrder", 400, "InvalidBlockList", 400),
            MissingContentLength => row("MissingContentLength", 411, "MissingRequiredHeader", 411),
            MissingHeader => row("InvalidRequest", 400, "MissingRequiredHeader", 400),
            MethodNotAllowed => row("MethodNotAllowed", 405, "UnsupportedHttpVerb", 405),
            NotImplemented => row("NotImplemented", 501, "NotImplemented", 501),
            InternalError => row("InternalError", 500, "InternalError", 500),
            SlowDown => row("SlowDown", 503, "ServerBusy", 503),
            ServiceUnavailable => row("ServiceUnavailable", 503, "ServerBusy", 503),
            Timeout => row("RequestTimeout", 400, "OperationTimedOut", 500),
        }
    }

    /// The S3 `<Code>` for this kind.
    pub fn s3_code(self) -> &'static str {
        self.codes().s3_code
    }

    /// The Azure `<Code>` and `x-ms-error-code` for this kind.
    pub fn azure_code(self) -> &'static str {
        self.codes().azure_code
    }

    /// The HTTP status an S3 server answers with for this kind.
    pub fn s3_status(self) -> StatusCode {
        status(self.codes().s3_status)
    }

    /// The HTTP status an Azure Blob server answers with for this kind.
    pub fn azure_status(self) -> StatusCode {
        status(self.codes().azure_status)
    }

    /// The worker wire protocol's error frame code for this kind (an origin's answer
    /// relayed by a worker to a cache client).
    pub fn frame_code(self) -> FrameCode {
        use ErrorKind::*;
        match self.of_an_origin_read() {
            NoSuchBucket | NoSuchKey | NoSuchUpload => FrameCode::NotFound,
            PreconditionFailed => FrameCode::VersionMismatch,
            InvalidRange => FrameCode::RangeNotSatisfiable,
            AccessDenied
            | MissingCredentials
            | SignatureDoesNotMatch
            | InvalidAccessKeyId
            | RequestTimeTooSkewed
            | ExpiredRequest
            | PermissionMismatch
            | CannotVerifyCopySource
            | MalformedAuthorization => FrameCode::AccessDenied,
            EntityTooLarge | HeadersTooLarge | MetadataTooLarge => FrameCode::TooLarge,
            NotImplemented | MethodNotAllowed => FrameCode::Unsupported,
            // The origin throttled: said as such, so that no reader retries it through
            // another worker (which would ask the same origin again).
            SlowDown => FrameCode::OriginThrottled,
            ServiceUnavailable => FrameCode::Unavailable,
            Timeout => FrameCode::Timeout,
            InternalError => FrameCode::OriginError,
            _ => FrameCode::InvalidRequest,
        }
    }

    /// The kind a cache client reports for an error frame code.
    pub fn from_frame_code(code: FrameCode) -> ErrorKind {
        match code {
            FrameCode::NotFound => ErrorKind::NoSuchKey,
            FrameCode::VersionMismatch => ErrorKind::PreconditionFailed,
            FrameCode::RangeNotSatisfiable => ErrorKind::InvalidRange,
            FrameCode::AccessDenied => ErrorKind::AccessDenied,
            // The cluster refused this process: a deployment fault, not the client's.
            FrameCode::Unauthenticated | FrameCode::Forbidden => ErrorKind::ServiceUnavailable,
            FrameCode::TooLarge => ErrorKind::EntityTooLarge,
            FrameCode::Unsupported => ErrorKind::NotImplemented,
            FrameCode::Unavailable => ErrorKind::ServiceUnavailable,
            FrameCode::OriginThrottled => ErrorKind::SlowDown,
            FrameCode::Timeout => ErrorKind::Timeout,
            FrameCode::InvalidRequest => ErrorKind::InvalidRequest,
            FrameCode::OriginError | FrameCode::Internal | FrameCode::Unknown(_) => {
                ErrorKind::InternalError
            }
        }
    }

    /// Whether a client may retry the same request and expect a different answer.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorKind::InternalError
                | ErrorKind::SlowDown
                | ErrorKind::ServiceUnavailable
                | ErrorKind::Timeout
        )
    }

    /// Whether a read from an origin that failed this way is worth asking for again:
    /// what [`is_retryable`](Self::is_retryable) says, and a body that was cut off (a
    /// read, unlike an upload, can simply be asked for again).
    pub fn is_retryable_read(self) -> bool {
        self.is_retryable() || self == ErrorKind::IncompleteBody
    }

    /// What a reader is told when a read from an origin failed this way: a body the
    /// origin cut off (once retries are spent) is the origin's failure, an
    /// `InternalError` (500), never the reader's bad request (`IncompleteBody` is a
    /// 400, right only for a client's own upload). Every other kind is itself.
    pub fn of_an_origin_read(self) -> ErrorKind {
        match self {
            ErrorKind::IncompleteBody => ErrorKind::InternalError,
            kind => kind,
        }
    }

    /// The kind an S3 error code names, as read from an origin's error body.
    ///
    /// Unknown codes give `None`; callers then fall back on [`ErrorKind::from_status`].
    pub fn from_s3_code(code: &str) -> Option<ErrorKind> {
        read_as(S3_CODES_READ_AS, code)
            .or_else(|| ALL_KINDS.iter().copied().find(|k| k.s3_code() == code))
            .or(match code {
                "ExpiredToken" | "TokenRefreshRequired" => Some(ErrorKind::ExpiredRequest),
                "RequestTimeout" => Some(ErrorKind::Timeout),
                "ServiceUnavailable" | "Busy" => Some(ErrorKind::ServiceUnavailable),
                _ => None,
            })
    }

    /// The kind an Azure error code names, as read from `x-ms-error-code`.
    pub fn from_azure_code(code: &str) -> Option<ErrorKind> {
        read_as(AZURE_CODES_READ_AS, code)
            .or_else(|| ALL_KINDS.iter().copied().find(|k| k.azure_code() == code))
            .or(match code {
                "ResourceNotFound" => Some(ErrorKind::NoSuchKey),
                // Azure refuses a write whose `If-None-Match: *` fails with 409
                // BlobAlreadyExists: a failed precondition in S3's words.
                "TargetConditionNotMet" | "SourceConditionNotMet" | "BlobAlreadyExists" => {
                    Some(ErrorKind::PreconditionFailed)
                }
                "ServerTimeout" | "OperationTimedOut" => Some(ErrorKind::Timeout),
                "InsufficientAccountPermissions" | "AuthorizationResourceTypeMismatch" => {
                    Some(ErrorKind::AccessDenied)
                }
                _ => None,
            })
    }

    /// A best guess from a bare HTTP status, for error answers without a readable body
    /// (HEAD responses, proxies).
    pub fn from_status(status: StatusCode) -> ErrorKind {
        match status.as_u16() {
            304 => ErrorKind::NotModified,
            400 => ErrorKind::InvalidRequest,
            401 => ErrorKind::MissingCredentials,
            403 => ErrorKind::AccessDenied,
            404 => ErrorKind::NoSuchKey,
            405 => ErrorKind::MethodNotAllowed,
            408 => ErrorKind::Timeout,
            409 => ErrorKind::InvalidRequest,
            411 => ErrorKind::MissingContentLength,
            412 => ErrorKind::PreconditionFailed,
            413 => ErrorKind::EntityTooLarge,
            416 => ErrorKind::InvalidRange,
            429 | 503 => ErrorKind::SlowDown,
            501 => ErrorKind::NotImplemented,
            504 => ErrorKind::Timeout,
            _ if status.is_server_error() => ErrorKind::InternalError,
            _ => ErrorKind::InvalidRequest,
        }
    }
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The kind an S3 error code from an origin is read as, where several kinds answer with
/// that code (each such code must be here: `every_shared_code_is_read_as_one_kind`).
const S3_CODES_READ_AS: &[(&str, ErrorKind)] = &[
    ("AccessDenied", ErrorKind::AccessDenied),
    ("InvalidArgument", ErrorKind::InvalidArgument),
    ("InvalidRequest", ErrorKind::InvalidRequest),
    ("InvalidPart", ErrorKind::InvalidPart),
];

/// The kind an Azure error code from an origin is read as, where several kinds answer
/// with that code. `InvalidBlockList` is a block that is not where a list says, which
/// an S3 client reads as a part that is not there (`InvalidPart`), never as a missing
/// upload.
const AZURE_CODES_READ_AS: &[(&str, ErrorKind)] = &[
    ("InvalidBlockList", ErrorKind::InvalidPart),
    ("ConditionNotMet", ErrorKind::PreconditionFailed),
    ("AuthenticationFailed", ErrorKind::SignatureDoesNotMatch),
    ("InvalidQueryParameterValue", ErrorKind::InvalidArgument),
    ("InvalidHeaderValue", ErrorKind::InvalidHeaderValue),
    ("InvalidInput", ErrorKind::InvalidRequest),
    ("InvalidResourceName", ErrorKind::InvalidBucketName),
    ("Md5Mismatch", ErrorKind::BadDigest),
    ("MissingRequiredHeader", ErrorKind::MissingHeader),
    ("ServerBusy", ErrorKind::SlowDown),
];

fn read_as(table: &[(&str, ErrorKind)], code: &str) -> Option<ErrorKind> {
    table.iter().find(|(c, _)| *c == code).map(|(_, k)| *k)
}

/// Every kind, for reverse lookups and for tests that walk the whole table.
pub const ALL_KINDS: &[ErrorKind] = &[
    ErrorKind::NoSuchBucket,
    ErrorKind::NoSuchKey,
    ErrorKind::NoSuchUpload,
    ErrorKind::BucketAlreadyExists,
    ErrorKind::BucketNotEmpty,
    ErrorKind::InvalidRange,
    ErrorKind::PreconditionFailed,
    ErrorKind::NotModified,
    ErrorKind::AccessDenied,
    ErrorKind::MissingCredentials,
    ErrorKind::SignatureDoesNotMatch,
    ErrorKind::InvalidAccessKeyId,
    ErrorKind::RequestTimeTooSkewed,
    ErrorKind::ExpiredRequest,
    ErrorKind::PermissionMismatch,
    ErrorKind::CannotVerifyCopySource,
    ErrorKind::MalformedAuthorization,
    ErrorKind::InvalidArgument,
    ErrorKind::InvalidHeaderValue,
    ErrorKind::InvalidRequest,
    ErrorKind::MalformedXml,
    ErrorKind::InvalidBucketName,
    ErrorKind::InvalidObjectName,
    ErrorKind::BadDigest,
    ErrorKind::ContentSha256Mismatch,
    ErrorKind::IncompleteBody,
    ErrorKind::EntityTooLarge,
    ErrorKind::EntityTooSmall,
    ErrorKind::InvalidDigest,
    ErrorKind::MetadataTooLarge,
    ErrorKind::HeadersTooLarge,
    ErrorKind::InvalidPart,
    ErrorKind::InvalidPartNumber,
    ErrorKind::InvalidPartOrder,
    ErrorKind::MissingContentLength,
    ErrorKind::MissingHeader,
    ErrorKind::MethodNotAllowed,
    ErrorKind::NotImplemented,
    ErrorKind::InternalError,
    ErrorKind::SlowDown,
    ErrorKind::ServiceUnavailable,
    ErrorKind::Timeout,
];

/// The error of every fallible function in this crate: a kind plus a message for people.
///
/// The message is written for the client that receives it (it ends up in the `<Message>`
/// of the XML error), so it must not contain secrets such as expected signatures.
#[derive(Debug, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// An error of `kind` with a message for the client.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// A condition that did not hold ([`ErrorKind::PreconditionFailed`]), in S3's words.
    pub fn precondition_failed() -> Error {
        Error::new(
            ErrorKind::PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold",
        )
    }

    /// Attaches the underlying cause (kept for logs, never sent to clients).
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Error {
        self.source = Some(Box::new(source));
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// What a client is told: the message itself for the client's own mistakes, and for
    /// failures on this side (an origin, a worker, a timeout) only the protocol's short
    /// text. Those messages can name internal endpoints, workers or (with a SAS) a
    /// signature; the whole message goes to the log under the request id (SEC-18).
    pub fn client_message(&self) -> &str {
        match self.kind {
            ErrorKind::InternalError => "We encountered an internal error. Please try again.",
            ErrorKind::ServiceUnavailable => {
                "The service is unavailable. Please retry your request."
            }
            ErrorKind::SlowDown => "Please reduce your request rate.",
            ErrorKind::Timeout => "The operation did not complete in time. Please retry.",
            _ => &self.message,
        }
    }
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_codes_and_a_valid_status() {
        for kind in ALL_KINDS {
            assert!(!kind.s3_code().is_empty(), "{kind:?}");
            assert!(!kind.azure_code().is_empty(), "{kind:?}");
            assert!(kind.s3_status().as_u16() >= 300, "{kind:?}");
            assert!(kind.azure_status().as_u16() >= 300, "{kind:?}");
        }
    }

    #[test]
    fn codes_round_trip_for_the_common_kinds() {
        for kind in [
            ErrorKind::NoSuchKey,
            ErrorKind::NoSuchBucket,
            ErrorKind::InvalidRange,
            ErrorKind::PreconditionFailed,
            ErrorKind::SignatureDoesNotMatch,
            ErrorKind::SlowDown,
            ErrorKind::InternalError,
        ] {
            assert_eq!(ErrorKind::from_s3_code(kind.s3_code()), Some(kind));
        }
        assert_eq!(
            ErrorKind::from_azure_code("BlobNotFound"),
            Some(ErrorKind::NoSuchKey)
        );
        assert_eq!(
            ErrorKind::from_azure_code("ConditionNotMet"),
            Some(ErrorKind::PreconditionFailed)
        );
        assert_eq!(
            ErrorKind::from_azure_code("ServerBusy"),
            Some(ErrorKind::SlowDown)
        );
        // A write's `If-None-Match: *` failing at Azure.
        assert_eq!(
            ErrorKind::from_azure_code("BlobAlreadyExists"),
            Some(ErrorKind::PreconditionFailed)
        );
        assert_eq!(
            ErrorKind::from_azure_code("CannotVerifyCopySource"),
            Some(ErrorKind::CannotVerifyCopySource)
        );
        assert_eq!(ErrorKind::from_s3_code("NoSuchThing"), None);
    }

    #[test]
    fn frame_codes_round_trip_for_the_kinds_a_worker_relays() {
        for kind in [
            ErrorKind::NoSuchKey,
            ErrorKind::PreconditionFailed,
            ErrorKind::InvalidRange,
            ErrorKind::AccessDenied,
            ErrorKind::ServiceUnavailable,
            ErrorKind::Timeout,
            ErrorKind::InvalidRequest,
        ] {
            assert_eq!(ErrorKind::from_frame_code(kind.frame_code()), kind);
        }
        assert_eq!(
            ErrorKind::from_frame_code(FrameCode::Unknown(999)),
            ErrorKind::InternalError
        );
        // An origin body cut off reaches the reader as the origin's failure (500),
        // never as its own bad request (400).
        assert_eq!(
            ErrorKind::IncompleteBody.frame_code(),
            FrameCode::OriginError
        );
    }

    #[test]
    fn retryable_kinds_are_the_transient_ones() {
        assert!(ErrorKind::SlowDown.is_retryable());
        assert!(ErrorKind::InternalError.is_retryable());
        assert!(!ErrorKind::NoSuchKey.is_retryable());
        assert!(!ErrorKind::PreconditionFailed.is_retryable());
        // A cut body is worth reading again, not sending again.
        assert!(ErrorKind::IncompleteBody.is_retryable_read());
        assert!(!ErrorKind::IncompleteBody.is_retryable());
        assert!(ErrorKind::SlowDown.is_retryable_read());
        assert!(!ErrorKind::NoSuchKey.is_retryable_read());
    }

    #[test]
    fn status_guess_covers_throttling_and_not_found() {
        assert_eq!(
            ErrorKind::from_status(StatusCode::SERVICE_UNAVAILABLE),
            ErrorKind::SlowDown
        );
        assert_eq!(
            ErrorKind::from_status(StatusCode::NOT_FOUND),
            ErrorKind::NoSuchKey
        );
        assert_eq!(
            ErrorKind::from_status(StatusCode::BAD_GATEWAY),
            ErrorKind::InternalError
        );
    }

    /// Where several kinds answer with one code, reading that code back from an origin
    /// is a decision, not the accident of a table's order: each such code is listed in
    /// its protocol's `*_CODES_READ_AS`, with a kind that answers with it.
    #[test]
    fn every_shared_code_is_read_as_one_kind() {
        type Code = fn(ErrorKind) -> &'static str;
        for (name, code_of, table) in [
            ("S3", ErrorKind::s3_code as Code, S3_CODES_READ_AS),
            ("Azure", ErrorKind::azure_code as Code, AZURE_CODES_READ_AS),
        ] {
            let mut by_code: std::collections::BTreeMap<&str, Vec<ErrorKind>> = Default::default();
            for kind in ALL_KINDS {
                by_code.entry(code_of(*kind)).or_default().push(*kind);
            }
            for (code, kinds) in by_code.into_iter().filter(|(_, k)| k.len() > 1) {
                let chosen = read_as(table, code).unwrap_or_else(|| {
                    panic!("{name} code {code} is shared by {kinds:?}: say which it reads as")
                });
                assert!(
                    kinds.contains(&chosen),
                    "{name} {code}: {chosen:?} does not answer with it"
                );
            }
        }
        assert_eq!(
            ErrorKind::from_azure_code("InvalidBlockList"),
            Some(ErrorKind::InvalidPart)
        );
    }
}
