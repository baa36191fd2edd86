//! Reading an S3 request: which bucket and key it addresses (path-style or
//! virtual-hosted), which operation it is, and the parameters of listings.

use std::time::Duration;

use http::{HeaderMap, Method};

use crate::access::{Action, Need, Resource};
use crate::error::{Error, ErrorKind, Result};
use crate::uri_encoding::{decode, parse_query};

/// How bucket names appear in requests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum S3Addressing {
    /// `http://host/bucket/key` only.
    #[default]
    PathStyle,
    /// `http://bucket.<domain>/key`, falling back to path-style for other hosts.
    VirtualHosted {
        /// The service domain, e.g. `s3.localhost` (without port).
        domain: String,
    },
}

/// The decoded query parameters of a request, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryParams(pub Vec<(String, String)>);

impl QueryParams {
    /// Parses a raw query string.
    pub fn parse(raw: &str) -> QueryParams {
        QueryParams(parse_query(raw))
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether `name` is present, with or without a value.
    pub fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(k, _)| k == name)
    }

    /// A name given more than once, if any.
    pub fn repeated_name(&self) -> Option<&str> {
        // One pass with a set: a request may carry thousands of parameters.
        let mut seen = std::collections::HashSet::with_capacity(self.0.len());
        self.0
            .iter()
            .map(|(k, _)| k.as_str())
            .find(|k| !seen.insert(*k))
    }
}

/// The S3 operations this crate recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum S3Operation {
    /// `GET /`.
    ListBuckets,
    /// `PUT /bucket`.
    CreateBucket,
    /// `DELETE /bucket`.
    DeleteBucket,
    /// `HEAD /bucket`.
    HeadBucket,
    /// `GET /bucket?location`.
    GetBucketLocation,
    /// `GET /bucket?acl`: the bucket's canned ACL (private or public-read).
    GetBucketAcl,
    /// `GET /bucket/key?acl`: the object's canned ACL.
    GetObjectAcl,
    /// `PUT /bucket?acl` with `x-amz-acl`: a canned ACL (private or public-read).
    PutBucketAcl,
    /// `PUT /bucket/key?acl` with `x-amz-acl`.
    PutObjectAcl,
    /// `GET /bucket` (V1 listing).
    ListObjects,
    /// `GET /bucket?list-type=2`.
    ListObjectsV2,
    /// `GET /bucket?versions`: on an origin without versioning, every object once as
    /// its `null` version.
    ListObjectVersions,
    /// `GET /bucket?uploads`.
    ListMultipartUploads,
    /// `POST /bucket?delete`.
    DeleteObjects,
    /// `GET /bucket/key`.
    GetObject,
    /// `HEAD /bucket/key`.
    HeadObject,
    /// `PUT /bucket/key`.
    PutObject,
    /// `PUT /bucket/key` with `x-amz-copy-source`.
    CopyObject,
    /// `DELETE /bucket/key`.
    DeleteObject,
    /// `POST /bucket/key?uploads`.
    CreateMultipartUpload,
    /// `PUT /bucket/key?partNumber=N&uploadId=U`.
    UploadPart,
    /// `PUT /bucket/key?partNumber=N&uploadId=U` with `x-amz-copy-source`.
    UploadPartCopy,
    /// `POST /bucket/key?uploadId=U`.
    CompleteMultipartUpload,
    /// `DELETE /bucket/key?uploadId=U`.
    AbortMultipartUpload,
    /// `GET /bucket/key?uploadId=U`.
    ListParts,
    /// `GET /bucket/key?attributes`.
    GetObjectAttributes,
}

impl S3Operation {
    /// The one action the operation needs: the S3 half of the access table in
    /// docs/security.md. A copy needs [`Action::Read`] on its source as well (checked
    /// where the source is parsed), and DeleteObjects `delete` on each key it names.
    pub fn action(self) -> Action {
        use S3Operation::*;
        match self {
            GetObject | HeadObject | GetObjectAttributes | GetObjectAcl => Action::Read,
            ListBuckets | HeadBucket | GetBucketLocation | ListObjects | ListObjectsV2
            | ListObjectVersions | ListMultipartUploads => Action::List,
            PutObject
            | CopyObject
            | CreateMultipartUpload
            | UploadPart
            | UploadPartCopy
            | CompleteMultipartUpload
            | AbortMultipartUpload
            | ListParts => Action::Write,
            DeleteObject | DeleteObjects => Action::Delete,
            CreateBucket | DeleteBucket | GetBucketAcl | PutBucketAcl | PutObjectAcl => {
                Action::Admin
            }
        }
    }

    /// The operation's name as the S3 API reference spells it (used in metrics and logs).
    pub fn name(self) -> &'static str {
        use S3Operation::*;
        match self {
            ListBuckets => "ListBuckets",
            CreateBucket => "CreateBucket",
            DeleteBucket => "DeleteBucket",
            HeadBucket => "HeadBucket",
            GetBucketLocation => "GetBucketLocation",
            GetBucketAcl => "GetBucketAcl",
            GetObjectAcl => "GetObjectAcl",
            PutBucketAcl => "PutBucketAcl",
            PutObjectAcl => "PutObjectAcl",
            ListObjects => "ListObjects",
            ListObjectsV2 => "ListObjectsV2",
            ListObjectVersions => "ListObjectVersions",
            ListMultipartUploads => "ListMultipartUploads",
            DeleteObjects => "DeleteObjects",
            GetObject => "GetObject",
            HeadObject => "HeadObject",
            PutObject => "PutObject",
            CopyObject => "CopyObject",
            DeleteObject => "DeleteObject",
            CreateMultipartUpload => "CreateMultipartUpload",
            UploadPart => "UploadPart",
            UploadPartCopy => "UploadPartCopy",
            CompleteMultipartUpload => "CompleteMultipartUpload",
            AbortMultipartUpload => "AbortMultipartUpload",
            ListParts => "ListParts",
            GetObjectAttributes => "GetObjectAttributes",
        }
    }

    /// Whether the operation only reads.
    pub fn is_read(self) -> bool {
        use S3Operation::*;
        matches!(
            self,
            ListBuckets
                | HeadBucket
                | GetBucketLocation
                | GetBucketAcl
                | GetObjectAcl
                | ListObjects
                | ListObjectsV2
                | ListObjectVersions
                | ListMultipartUploads
                | GetObject
                | HeadObject
                | ListParts
        )
    }
}

/// Query parameters that name bucket or object sub-resources this crate does not serve.
const UNSUPPORTED_SUBRESOURCES: &[&str] = &[
    "accelerate",
    "acl",
    "analytics",
    "cors",
    "encryption",
    "intelligent-tiering",
    "inventory",
    "legal-hold",
    "lifecycle",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "ownershipControls",
    "policy",
    "policyStatus",
    "publicAccessBlock",
    "replication",
    "requestPayment",
    "restore",
    "retention",
    "select",
    "tagging",
    "torrent",
    "versioning",
    "website",
];

/// An S3 request, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Request {
    /// The operation.
    pub operation: S3Operation,
    /// The bucket, for every operation but ListBuckets.
    pub bucket: Option<String>,
    /// The object key, decoded, for object operations.
    pub key: Option<String>,
    /// The decoded query.
    pub query: QueryParams,
    /// Whether the bucket came from the host name (virtual-hosted addressing).
    pub virtual_hosted: bool,
}

/// The name part of a `Host` header: without the port, lower-cased (IPv6 literals keep
/// their brackets).
pub(crate) fn host_name(host: &str) -> String {
    let host = host.trim();
    let name = if host.starts_with('[') {
        host.split(']')
            .next()
            .map(|h| format!("{h}]"))
            .unwrap_or_default()
    } else {
        host.rsplit_once(':')
            .map(|(h, _)| h)
            .unwrap_or(host)
            .to_owned()
    };
    name.to_ascii_lowercase()
}

/// Works out bucket and key from the host and the raw path, and whether the bucket came
/// from the host name.
pub fn resolve_address(
    addressing: &S3Addressing,
    host: Option<&str>,
    raw_path: &str,
) -> (Option<String>, Option<String>, bool) {
    let path = decode(raw_path);
    let path = path.strip_prefix('/').unwrap_or(&path);
    if let (S3Addressing::VirtualHosted { domain }, Some(host)) = (addressing, host) {
        let name = host_name(host);
        if let Some(bucket) = name
            .strip_suffix(domain.as_str())
            .and_then(|b| b.strip_suffix('.'))
            && !bucket.is_empty()
        {
            let key = (!path.is_empty()).then(|| path.to_owned());
            return (Some(bucket.to_owned()), key, true);
        }
    }
    let (bucket, key) = match path.split_once('/') {
        None if path.is_empty() => (None, None),
        None => (Some(path.to_owned()), None),
        Some((bucket, "")) => (Some(bucket.to_owned()), None),
        Some((bucket, key)) => (Some(bucket.to_owned()), Some(key.to_owned())),
    };
    (bucket, key, false)
}

impl S3Request {
    /// What the request needs from the access policy: its operation's action on what
    /// it names (the service, its bucket, the listing's prefix, or its object).
    pub fn need(&self) -> Need<'_> {
        use S3Operation::*;
        let bucket = self.bucket.as_deref().unwrap_or_default();
        let resource = match self.operation {
            ListBuckets => Resource::Service,
            CreateBucket | DeleteBucket | GetBucketAcl | PutBucketAcl => Resource::Bucket(bucket),
            HeadBucket | GetBucketLocation | DeleteObjects => Resource::InBucket(bucket),
            ListObjects | ListObjectsV2 | ListObjectVersions | ListMultipartUploads => {
                Resource::Listing {
                    bucket,
                    prefix: self.query.get("prefix").unwrap_or_default(),
                }
            }
            GetObject
            | HeadObject
            | GetObjectAttributes
            | GetObjectAcl
            | PutObjectAcl
            | PutObject
            | CopyObject
            | DeleteObject
            | CreateMultipartUpload
            | UploadPart
            | UploadPartCopy
            | CompleteMultipartUpload
            | AbortMultipartUpload
            | ListParts => Resource::Object {
                bucket,
                key: self.key.as_deref().unwrap_or_default(),
            },
        };
        Need {
            action: self.operation.action(),
            resource,
        }
    }

    /// Classifies a request.
    ///
    /// # Errors
    /// [`ErrorKind::NotImplemented`] for sub-resources (ACLs, tagging, ...) and POST
    /// uploads; [`ErrorKind::MethodNotAllowed`] for methods that make no sense on the
    /// addressed resource.
    pub fn classify(
        method: &Method,
        addressing: &S3Addressing,
        headers: &HeaderMap,
        raw_path: &str,
        raw_query: &str,
    ) -> Result<S3Request> {
        let host = headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok());
        let (bucket, key, virtual_hosted) = resolve_address(addressing, host, raw_path);
        // Names first: nothing else may look at a name these rules refuse.
        if let Some(b) = &bucket {
            crate::names::check_s3_bucket(b)?;
        }
        let query = QueryParams::parse(raw_query);
        // One value per name: the access policy reads the first `prefix`, and a relayed
        // query reaches an origin that may read the last.
        if let Some(name) = query.repeated_name() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("the query parameter '{name}' is given more than once"),
            ));
        }
        // Canned ACLs are read and written (`access::acl`); nothing else of `?acl`.
        let reads_acl = query.has("acl") && *method == Method::GET;
        let writes_acl = query.has("acl") && *method == Method::PUT;
        if let Some(sub) = UNSUPPORTED_SUBRESOURCES
            .iter()
            .find(|s| query.has(s) && !((reads_acl || writes_acl) && **s == "acl"))
        {
            return Err(Error::new(
                ErrorKind::NotImplemented,
                format!("the '{sub}' sub-resource is not implemented"),
            ));
        }
        let copy = headers.contains_key("x-amz-copy-source");
        if method == Method::OPTIONS && bucket.is_some() {
            return Err(cors_preflight_refusal(headers));
        }
        use S3Operation::*;
        let operation = match (&bucket, &key, method) {
            (None, _, &Method::GET) => ListBuckets,
            (None, _, _) => return Err(not_allowed(method, "the service")),
            (Some(_), None, m) => match *m {
                Method::GET if query.has("location") => GetBucketLocation,
                Method::GET if reads_acl => GetBucketAcl,
                Method::PUT if writes_acl => PutBucketAcl,
                Method::GET if query.has("uploads") => ListMultipartUploads,
                Method::GET if query.has("versions") => ListObjectVersions,
                Method::GET if query.get("list-type") == Some("2") => ListObjectsV2,
                Method::GET => ListObjects,
                Method::HEAD => HeadBucket,
                Method::PUT => CreateBucket,
                Method::DELETE => DeleteBucket,
                Method::POST if query.has("delete") => DeleteObjects,
                _ => return Err(not_allowed(method, "a bucket")),
            },
            (Some(_), Some(_), m) => match *m {
                Method::GET if reads_acl => GetObjectAcl,
                Method::PUT if writes_acl => PutObjectAcl,
                Method::GET if query.has("uploadId") => ListParts,
                Method::GET if query.has("attributes") => GetObjectAttributes,
                Method::GET => GetObject,
                Method::HEAD => HeadObject,
                Method::PUT if query.has("uploadId") && copy => UploadPartCopy,
                Method::PUT if query.has("uploadId") => UploadPart,
                Method::PUT if copy => CopyObject,
                Method::PUT => PutObject,
                Method::POST if query.has("uploads") => CreateMultipartUpload,
                Method::POST if query.has("uploadId") => CompleteMultipartUpload,
                Method::POST => {
                    return Err(Error::new(
                        ErrorKind::NotImplemented,
                        "POST object uploads are not implemented",
                    ));
                }
                Method::DELETE if query.has("uploadId") => AbortMultipartUpload,
                Method::DELETE => DeleteObject,
                _ => return Err(not_allowed(method, "an object")),
            },
        };
        if let (CreateBucket, Some(b)) = (operation, &bucket) {
            validate_bucket_name(b)?;
        }
        Ok(S3Request {
            operation,
            bucket,
            key,
            query,
            virtual_hosted,
        })
    }
}

/// S3's answer to a CORS preflight (`OPTIONS` on a bucket or object) where no CORS
/// rules exist, which is every bucket here: 400 without an `Origin`, 403 with one.
fn cors_preflight_refusal(headers: &HeaderMap) -> Error {
    if headers.contains_key(http::header::ORIGIN) {
        Error::new(
            ErrorKind::AccessDenied,
            "CORSResponse: CORS is not enabled for this bucket.",
        )
    } else {
        Error::new(
            ErrorKind::InvalidRequest,
            "Insufficient information. Origin request header needed.",
        )
    }
}

fn not_allowed(method: &Method, what: &str) -> Error {
    Error::new(
        ErrorKind::MethodNotAllowed,
        format!("The specified method {method} is not allowed against {what}."),
    )
}

/// Which listing API a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListVersion {
    /// ListObjects (`marker`).
    V1,
    /// ListObjectsV2 (`continuation-token`, `start-after`).
    V2,
}

/// The parameters of ListObjects / ListObjectsV2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListObjectsParams {
    /// V1 or V2.
    pub version: ListVersion,
    /// `prefix` (empty when absent).
    pub prefix: String,
    /// `delimiter`, if non-empty.
    pub delimiter: Option<String>,
    /// `max-keys`, 0..=1000 (default 1000).
    pub max_keys: usize,
    /// V1 `marker`.
    pub marker: Option<String>,
    /// V2 `start-after`.
    pub start_after: Option<String>,
    /// V2 `continuation-token`, opaque; an empty one is kept (S3 echoes it) and starts
    /// at the first key.
    pub continuation_token: Option<String>,
    /// `encoding-type=url`: keys and prefixes in the answer are URL-encoded.
    pub encoding_url: bool,
    /// V2 `fetch-owner=true`.
    pub fetch_owner: bool,
}

/// The most keys one listing page returns.
pub const MAX_KEYS: usize = 1000;

impl ListObjectsParams {
    /// Reads listing parameters from the query.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for a non-numeric or negative `max-keys` or an
    /// `encoding-type` other than `url`.
    pub fn from_query(query: &QueryParams, version: ListVersion) -> Result<ListObjectsParams> {
        let max_keys = match query.get("max-keys") {
            None => MAX_KEYS,
            Some(v) => v
                .parse::<usize>()
                .map_err(|_| {
                    Error::new(
                        ErrorKind::InvalidArgument,
                        "max-keys must be a non-negative integer",
                    )
                })?
                .min(MAX_KEYS),
        };
        let encoding_url = match query.get("encoding-type") {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("url") => true,
            Some(v) => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("Invalid Encoding Method specified in Request: '{v}'"),
                ));
            }
        };
        let non_empty = |name| query.get(name).filter(|v| !v.is_empty()).map(str::to_owned);
        Ok(ListObjectsParams {
            version,
            prefix: query.get("prefix").unwrap_or("").to_owned(),
            delimiter: non_empty("delimiter"),
            max_keys,
            marker: non_empty("marker"),
            start_after: non_empty("start-after"),
            continuation_token: query.get("continuation-token").map(str::to_owned),
            encoding_url,
            fetch_owner: query.get("fetch-owner") == Some("true"),
        })
    }
}

/// The parameters of ListObjectVersions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListVersionsParams {
    /// `prefix` (empty when absent).
    pub prefix: String,
    /// `delimiter`, if non-empty.
    pub delimiter: Option<String>,
    /// `max-keys`, 0..=1000 (default 1000).
    pub max_keys: usize,
    /// `key-marker`: the page starts after this key.
    pub key_marker: Option<String>,
    /// `version-id-marker`, echoed (every version is `null` without versioning).
    pub version_id_marker: Option<String>,
    /// `encoding-type=url`.
    pub encoding_url: bool,
}

impl ListVersionsParams {
    /// Reads the parameters from the query, with ListObjects' rules for `max-keys`
    /// and `encoding-type`.
    ///
    /// # Errors
    /// As [`ListObjectsParams::from_query`].
    pub fn from_query(query: &QueryParams) -> Result<ListVersionsParams> {
        let common = ListObjectsParams::from_query(query, ListVersion::V1)?;
        let non_empty = |name| query.get(name).filter(|v| !v.is_empty()).map(str::to_owned);
        Ok(ListVersionsParams {
            prefix: common.prefix,
            delimiter: common.delimiter,
            max_keys: common.max_keys,
            key_marker: non_empty("key-marker"),
            version_id_marker: non_empty("version-id-marker"),
            encoding_url: common.encoding_url,
        })
    }
}

/// Reads `x-amz-copy-source` (`bucket/key` or `/bucket/key`, URL-encoded, optionally
/// with `?versionId=`) into bucket and key.
///
/// # Errors
/// [`ErrorKind::InvalidArgument`] when it does not name a bucket and a key.
pub fn parse_copy_source(value: &str) -> Result<(String, String)> {
    let value = value
        .split_once("?versionId=")
        .map(|(v, _)| v)
        .unwrap_or(value);
    let decoded = decode(value);
    let decoded = decoded.strip_prefix('/').unwrap_or(&decoded);
    match decoded.split_once('/') {
        Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() => {
            Ok((bucket.to_owned(), key.to_owned()))
        }
        _ => Err(Error::new(
            ErrorKind::InvalidArgument,
            "x-amz-copy-source must be of the form bucket/key",
        )),
    }
}

/// Reads `X-Amz-Expires`-style durations for tools: seconds as an integer.
pub fn parse_seconds(value: &str) -> Option<Duration> {
    value.trim().parse().ok().map(Duration::from_secs)
}

pub use crate::names::validate_bucket_name;

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(
        method: Method,
        host: &str,
        path: &str,
        query: &str,
        extra: &[(&'static str, &str)],
    ) -> Result<S3Request> {
        let mut h = HeaderMap::new();
        h.insert(http::header::HOST, host.parse().expect("host"));
        for (k, v) in extra {
            h.insert(*k, v.parse().expect("value"));
        }
        let addressing = S3Addressing::VirtualHosted {
            domain: "s3.local".into(),
        };
        S3Request::classify(&method, &addressing, &h, path, query)
    }

    #[test]
    fn path_and_virtual_hosted_addressing() {
        let r = classify(Method::GET, "127.0.0.1:9000", "/bkt/dir/a%20b.txt", "", &[]).expect("ok");
        assert_eq!(
            (r.bucket.as_deref(), r.key.as_deref()),
            (Some("bkt"), Some("dir/a b.txt"))
        );
        let r = classify(Method::GET, "bkt.s3.local:9000", "/dir/x", "", &[]).expect("ok");
        assert_eq!(
            (r.bucket.as_deref(), r.key.as_deref()),
            (Some("bkt"), Some("dir/x"))
        );
        let r = classify(Method::GET, "bkt.s3.local", "/", "list-type=2", &[]).expect("ok");
        assert_eq!(
            (r.bucket.as_deref(), r.operation),
            (Some("bkt"), S3Operation::ListObjectsV2)
        );
        let r = classify(Method::GET, "s3.local", "/", "", &[]).expect("ok");
        assert_eq!(r.operation, S3Operation::ListBuckets);
        let r = classify(Method::GET, "h", "/bkt/dir/", "", &[]).expect("ok");
        assert_eq!(r.key.as_deref(), Some("dir/"));
    }

    /// SEC-03: names are refused before anything else looks at the request.
    #[test]
    fn bucket_names_are_checked_first() {
        let kind = |m, host, p| classify(m, host, p, "", &[]).map_err(|e| e.kind()).err();
        for path in [
            "/newbkt%3Fx",
            "/victim%3Fpolicy/k",
            "/a%23b/k",
            "/../k",
            "/ab/k",
            "/x%40y/k",
        ] {
            assert_eq!(
                kind(Method::PUT, "h", path),
                Some(ErrorKind::InvalidBucketName),
                "{path}"
            );
        }
        // Refused by name even where the operation itself would be refused otherwise.
        assert_eq!(
            classify(Method::GET, "h", "/a%3Fb", "tagging", &[])
                .map_err(|e| e.kind())
                .err(),
            Some(ErrorKind::InvalidBucketName)
        );
        // A legacy name is addressable, but a new bucket must be DNS-compatible.
        assert!(classify(Method::GET, "h", "/Legacy_Bucket/k", "", &[]).is_ok());
        assert_eq!(
            kind(Method::PUT, "h", "/Legacy_Bucket"),
            Some(ErrorKind::InvalidBucketName)
        );
        assert_eq!(
            kind(Method::GET, "a_b%3Fc.s3.local", "/k"),
            Some(ErrorKind::InvalidBucketName)
        );
    }

    #[test]
    fn operations_by_method_query_and_header() {
        let op = |m, p, q, extra: &[(&'static str, &str)]| {
            classify(m, "h", p, q, extra).map(|r| r.operation)
        };
        assert_eq!(
            op(Method::GET, "/bkt", "location", &[]).ok(),
            Some(S3Operation::GetBucketLocation)
        );
        assert_eq!(
            op(Method::GET, "/bkt", "", &[]).ok(),
            Some(S3Operation::ListObjects)
        );
        assert_eq!(
            op(Method::HEAD, "/bkt", "", &[]).ok(),
            Some(S3Operation::HeadBucket)
        );
        assert_eq!(
            op(Method::POST, "/bkt", "delete", &[]).ok(),
            Some(S3Operation::DeleteObjects)
        );
        assert_eq!(
            op(Method::POST, "/bkt/k", "uploads", &[]).ok(),
            Some(S3Operation::CreateMultipartUpload)
        );
        assert_eq!(
            op(Method::PUT, "/bkt/k", "partNumber=1&uploadId=x", &[]).ok(),
            Some(S3Operation::UploadPart)
        );
        assert_eq!(
            op(Method::POST, "/bkt/k", "uploadId=x", &[]).ok(),
            Some(S3Operation::CompleteMultipartUpload)
        );
        assert_eq!(
            op(Method::DELETE, "/bkt/k", "uploadId=x", &[]).ok(),
            Some(S3Operation::AbortMultipartUpload)
        );
        assert_eq!(
            op(Method::PUT, "/bkt/k", "", &[("x-amz-copy-source", "a/b")]).ok(),
            Some(S3Operation::CopyObject)
        );
        assert_eq!(
            op(Method::GET, "/bkt/k", "x-id=GetObject", &[]).ok(),
            Some(S3Operation::GetObject)
        );
        assert_eq!(
            op(Method::GET, "/bkt/k", "tagging", &[])
                .map_err(|e| e.kind())
                .err(),
            Some(ErrorKind::NotImplemented)
        );
        assert_eq!(
            op(Method::PATCH, "/bkt/k", "", &[])
                .map_err(|e| e.kind())
                .err(),
            Some(ErrorKind::MethodNotAllowed)
        );
        // A CORS preflight, with no CORS rules to grant it.
        let preflight = |extra: &[(&'static str, &str)]| {
            op(Method::OPTIONS, "/bkt/k", "", extra)
                .map_err(|e| e.kind())
                .err()
        };
        assert_eq!(preflight(&[]), Some(ErrorKind::InvalidRequest));
        assert_eq!(
            preflight(&[("origin", "https://example.com")]),
            Some(ErrorKind::AccessDenied)
        );
    }

    #[test]
    fn listing_parameters() {
        let q = QueryParams::parse(
            "list-type=2&prefix=a%2F&delimiter=%2F&max-keys=5000&encoding-type=url&start-after=a%2Fx",
        );
        let p = ListObjectsParams::from_query(&q, ListVersion::V2).expect("ok");
        assert_eq!(p.prefix, "a/");
        assert_eq!(p.delimiter.as_deref(), Some("/"));
        assert_eq!(p.max_keys, 1000);
        assert!(p.encoding_url);
        assert_eq!(p.start_after.as_deref(), Some("a/x"));
        let q = QueryParams::parse("max-keys=-1");
        assert!(ListObjectsParams::from_query(&q, ListVersion::V1).is_err());
    }

    #[test]
    fn copy_source_and_bucket_names() {
        assert_eq!(
            parse_copy_source("/src/a%20b?versionId=1").ok(),
            Some(("src".into(), "a b".into()))
        );
        assert!(parse_copy_source("nokey").is_err());
    }
}
