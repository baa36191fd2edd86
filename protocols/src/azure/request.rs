//! Reading an Azure Blob request: account, container and blob (emulator path-style or
//! production host-style), and which operation it is.

use http::{HeaderMap, Method};

use crate::access::{Action, Need, Resource};
use crate::error::{Error, ErrorKind, Result};
use crate::s3::request::{QueryParams, host_name};
use crate::uri_encoding::decode;

/// How the account appears in requests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AzureAddressing {
    /// Emulator style: `http://host:port/<account>/<container>/<blob>`.
    #[default]
    PathStyle,
    /// Production style: `http://<account>.blob.<domain>/<container>/<blob>` (or
    /// `<account>.<domain>`), falling back to path-style for other hosts.
    HostStyle {
        /// The service domain, e.g. `core.windows.net` or `localhost`.
        domain: String,
    },
}

/// The Azure Blob operations this crate recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AzureOperation {
    /// `GET /?comp=list`.
    ListContainers,
    /// `PUT /<container>?restype=container`.
    CreateContainer,
    /// `DELETE /<container>?restype=container`.
    DeleteContainer,
    /// `GET|HEAD /<container>?restype=container`.
    GetContainerProperties,
    /// `GET /<container>?restype=container&comp=list`.
    ListBlobs,
    /// `GET /<container>/<blob>`.
    GetBlob,
    /// `HEAD /<container>/<blob>`.
    GetBlobProperties,
    /// `PUT /<container>/<blob>` with `x-ms-blob-type: BlockBlob`.
    PutBlob,
    /// `PUT /<container>/<blob>?comp=block&blockid=...`.
    PutBlock,
    /// `PUT /<container>/<blob>?comp=blocklist`.
    PutBlockList,
    /// `GET /<container>/<blob>?comp=blocklist`.
    GetBlockList,
    /// `DELETE /<container>/<blob>`.
    DeleteBlob,
    /// `PUT /<container>/<blob>` with `x-ms-copy-source`: Copy Blob, Copy Blob From URL
    /// (`x-ms-requires-sync`) and Put Blob From URL (`x-ms-blob-type` too), all served
    /// as one synchronous copy within the account.
    CopyBlob,
}

impl AzureOperation {
    /// The one action the operation needs: the Azure half of the access table in
    /// docs/security.md. A copy needs [`Action::Read`] on its source as well (checked
    /// where the source is resolved).
    pub fn action(self) -> Action {
        use AzureOperation::*;
        match self {
            GetBlob | GetBlobProperties | GetBlockList => Action::Read,
            ListContainers | GetContainerProperties | ListBlobs => Action::List,
            PutBlob | PutBlock | PutBlockList | CopyBlob => Action::Write,
            DeleteBlob => Action::Delete,
            CreateContainer | DeleteContainer => Action::Admin,
        }
    }

    /// The operation's name as the Azure REST reference spells it.
    pub fn name(self) -> &'static str {
        use AzureOperation::*;
        match self {
            ListContainers => "ListContainers",
            CreateContainer => "CreateContainer",
            DeleteContainer => "DeleteContainer",
            GetContainerProperties => "GetContainerProperties",
            ListBlobs => "ListBlobs",
            GetBlob => "GetBlob",
            GetBlobProperties => "GetBlobProperties",
            PutBlob => "PutBlob",
            PutBlock => "PutBlock",
            PutBlockList => "PutBlockList",
            GetBlockList => "GetBlockList",
            DeleteBlob => "DeleteBlob",
            CopyBlob => "CopyBlob",
        }
    }

    /// The SAS permission letter the operation needs (`r`, `l`, `w`, `c`, `d`).
    pub fn sas_permission(self) -> char {
        use AzureOperation::*;
        match self {
            GetContainerProperties | GetBlob | GetBlobProperties | GetBlockList => 'r',
            ListContainers | ListBlobs => 'l',
            PutBlob | PutBlock | PutBlockList | CopyBlob => 'w',
            CreateContainer => 'c',
            DeleteContainer | DeleteBlob => 'd',
        }
    }

    /// The account-SAS resource type the operation touches: `s`ervice, `c`ontainer, `o`bject.
    pub fn sas_resource_type(self) -> char {
        use AzureOperation::*;
        match self {
            ListContainers => 's',
            CreateContainer | DeleteContainer | GetContainerProperties | ListBlobs => 'c',
            _ => 'o',
        }
    }
}

/// An Azure Blob request, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzureRequest {
    /// The operation.
    pub operation: AzureOperation,
    /// The storage account.
    pub account: String,
    /// The container, for container and blob operations.
    pub container: Option<String>,
    /// The blob name, decoded, for blob operations.
    pub blob: Option<String>,
    /// The decoded query, parameter names lower-cased.
    pub query: QueryParams,
}

/// Works out account, container and blob from the host and the raw path.
pub fn resolve_address(
    addressing: &AzureAddressing,
    host: Option<&str>,
    raw_path: &str,
) -> (Option<String>, Option<String>, Option<String>) {
    let path = decode(raw_path);
    let path = path.strip_prefix('/').unwrap_or(&path).to_owned();
    let mut account = None;
    if let (AzureAddressing::HostStyle { domain }, Some(host)) = (addressing, host) {
        let name = host_name(host);
        if let Some(prefix) = name
            .strip_suffix(domain.as_str())
            .and_then(|p| p.strip_suffix('.'))
        {
            let prefix = prefix.strip_suffix(".blob").unwrap_or(prefix);
            if !prefix.is_empty() && !prefix.contains('.') {
                account = Some(prefix.to_owned());
            }
        }
    }
    let rest = match &account {
        Some(_) => path,
        None => {
            let (a, rest) = path.split_once('/').unwrap_or((&path, ""));
            if !a.is_empty() {
                account = Some(a.to_owned());
            }
            rest.to_owned()
        }
    };
    let (container, blob) = match rest.split_once('/') {
        None if rest.is_empty() => (None, None),
        None => (Some(rest), None),
        Some((c, "")) => (Some(c.to_owned()), None),
        Some((c, b)) => (Some(c.to_owned()), Some(b.to_owned())),
    };
    (account, container, blob)
}

/// The query with its parameter names lower-cased, as Shared Key canonicalises them:
/// what decides the operation is then what the signature covers (SEC-08 of the security
/// review: `COMP=list` kept a captured signature valid yet escaped classification).
///
/// Shared Key writes each parameter as a `name:value` line, decoded: a decoded newline
/// in a value (or a `:` in a name) would let one string to sign stand for two queries,
/// so a captured Get Block List replayed as Get Blob (the red-team review's RT-04). So
/// no name or value may hold a control character, and no name a `:`.
///
/// # Errors
/// [`ErrorKind::InvalidArgument`] when two parameters differ only in case, or one holds
/// a control character (or its name a `:`).
pub(crate) fn canonical_query(raw_query: &str) -> Result<QueryParams> {
    let pairs: Vec<(String, String)> = QueryParams::parse(raw_query)
        .0
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    if let Some((name, _)) = pairs.iter().find(|(k, v)| {
        k.contains(':') || k.chars().any(char::is_control) || v.chars().any(char::is_control)
    }) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "The query parameter {:?} holds a control character, or a ':' in its name.",
                name.escape_debug().to_string()
            ),
        ));
    }
    let mut names: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "A query parameter appears more than once.",
        ));
    }
    Ok(QueryParams(pairs))
}

impl AzureRequest {
    /// What the request needs from the access policy: its operation's action on what
    /// it names (the service, its container, the listing's prefix, or its blob).
    pub fn need(&self) -> Need<'_> {
        use AzureOperation::*;
        let container = self.container.as_deref().unwrap_or_default();
        let resource = match self.operation {
            ListContainers => Resource::Service,
            CreateContainer | DeleteContainer => Resource::Bucket(container),
            GetContainerProperties => Resource::InBucket(container),
            ListBlobs => Resource::Listing {
                bucket: container,
                prefix: self.query.get("prefix").unwrap_or_default(),
            },
            GetBlob | GetBlobProperties | GetBlockList | PutBlob | PutBlock | PutBlockList
            | CopyBlob | DeleteBlob => Resource::Object {
                bucket: container,
                key: self.blob.as_deref().unwrap_or_default(),
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
    /// [`ErrorKind::NotImplemented`] for operations this crate does not serve (leases,
    /// ACLs, metadata updates, append and page blobs, copies);
    /// [`ErrorKind::InvalidRequest`] when no account can be found;
    /// [`ErrorKind::MethodNotAllowed`].
    pub fn classify(
        method: &Method,
        addressing: &AzureAddressing,
        headers: &HeaderMap,
        raw_path: &str,
        raw_query: &str,
    ) -> Result<AzureRequest> {
        let host = headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok());
        let (account, container, blob) = resolve_address(addressing, host, raw_path);
        let account = account.ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidRequest,
                "the request names no storage account",
            )
        })?;
        // Names first: nothing else may look at a name these rules refuse.
        crate::names::validate_account_name(&account)?;
        if let Some(c) = &container {
            validate_container_name(c)?;
        }
        let query = canonical_query(raw_query)?;
        let comp = query.get("comp");
        let restype = query.get("restype");
        let unsupported = |what: &str| {
            Error::new(
                ErrorKind::NotImplemented,
                format!("{what} is not implemented"),
            )
        };
        use AzureOperation::*;
        let operation = match (&container, &blob) {
            (None, _) => match (method, comp) {
                (&Method::GET, Some("list")) => ListContainers,
                (_, Some(c)) => return Err(unsupported(&format!("comp={c} on the account"))),
                _ => return Err(unsupported("this account operation")),
            },
            (Some(_), None) => match (method, restype, comp) {
                (&Method::GET, Some("container"), Some("list")) => ListBlobs,
                (&Method::GET | &Method::HEAD, Some("container"), None) => GetContainerProperties,
                (&Method::PUT, Some("container"), None) => CreateContainer,
                (&Method::DELETE, Some("container"), None) => DeleteContainer,
                (_, _, Some(c)) => return Err(unsupported(&format!("comp={c} on a container"))),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidArgument,
                        "container requests need restype=container",
                    ));
                }
            },
            (Some(_), Some(_)) => match (method, comp) {
                (&Method::GET, None) => GetBlob,
                (&Method::HEAD, None) => GetBlobProperties,
                (&Method::PUT, None) => {
                    if headers.contains_key("x-ms-copy-source") {
                        CopyBlob
                    } else {
                        match headers.get("x-ms-blob-type").map(|v| v.as_bytes()) {
                            Some(b"BlockBlob") => PutBlob,
                            Some(_) => return Err(unsupported("page and append blobs")),
                            None => {
                                return Err(Error::new(
                                    ErrorKind::MissingHeader,
                                    "An HTTP header that is mandatory for this request is not specified: x-ms-blob-type",
                                ));
                            }
                        }
                    }
                }
                // Put Block From URL would otherwise store the empty body as the block.
                (&Method::PUT, Some("block")) if headers.contains_key("x-ms-copy-source") => {
                    return Err(unsupported("Put Block From URL"));
                }
                (&Method::PUT, Some("block")) => PutBlock,
                (&Method::PUT, Some("blocklist")) => PutBlockList,
                (&Method::GET, Some("blocklist")) => GetBlockList,
                (&Method::DELETE, None) => DeleteBlob,
                (_, Some(c)) => return Err(unsupported(&format!("comp={c} on a blob"))),
                _ => {
                    return Err(Error::new(
                        ErrorKind::MethodNotAllowed,
                        format!("{method} is not allowed on a blob"),
                    ));
                }
            },
        };
        Ok(AzureRequest {
            operation,
            account,
            container,
            blob,
            query,
        })
    }
}

/// Whether a List Blobs `include` parameter (a comma-separated list such as
/// `metadata,snapshots`) asks for each blob's user metadata.
pub fn include_lists_metadata(include: Option<&str>) -> bool {
    include.is_some_and(|v| {
        v.split(',')
            .any(|part| part.trim().eq_ignore_ascii_case("metadata"))
    })
}

pub use crate::names::validate_container_name;

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(
        method: Method,
        host: &str,
        path: &str,
        query: &str,
        extra: &[(&'static str, &str)],
    ) -> Result<AzureRequest> {
        let mut h = HeaderMap::new();
        h.insert(http::header::HOST, host.parse().expect("host"));
        for (k, v) in extra {
            h.insert(*k, v.parse().expect("value"));
        }
        let addressing = AzureAddressing::HostStyle {
            domain: "core.windows.net".into(),
        };
        AzureRequest::classify(&method, &addressing, &h, path, query)
    }

    #[test]
    fn emulator_and_production_addressing() {
        let r = classify(
            Method::GET,
            "127.0.0.1:10000",
            "/devstoreaccount1/ctr1/dir/a%20b",
            "",
            &[],
        )
        .expect("ok");
        assert_eq!(
            (
                r.account.as_str(),
                r.container.as_deref(),
                r.blob.as_deref(),
                r.operation
            ),
            (
                "devstoreaccount1",
                Some("ctr1"),
                Some("dir/a b"),
                AzureOperation::GetBlob
            )
        );
        let r = classify(
            Method::HEAD,
            "acct.blob.core.windows.net",
            "/ctr1/x",
            "",
            &[],
        )
        .expect("ok");
        assert_eq!(
            (r.account.as_str(), r.operation),
            ("acct", AzureOperation::GetBlobProperties)
        );
        let r = classify(
            Method::GET,
            "acct.blob.core.windows.net",
            "/",
            "comp=list",
            &[],
        )
        .expect("ok");
        assert_eq!(r.operation, AzureOperation::ListContainers);
    }

    /// SEC-08: parameter names are classified as Shared Key canonicalises them.
    #[test]
    fn query_names_are_case_insensitive_and_unique() {
        let op = |q| classify(Method::GET, "h:1", "/acct/ctr/b", q, &[]).map(|r| r.operation);
        assert_eq!(
            op("COMP=blocklist").ok(),
            Some(AzureOperation::GetBlockList)
        );
        assert_eq!(op("Comp=blocklist").ok(), op("comp=blocklist").ok());
        assert_eq!(
            op("comp=blocklist&COMP=list").map_err(|e| e.kind()).err(),
            Some(ErrorKind::InvalidArgument)
        );
    }

    /// RT-04: no query can spell another's Shared Key lines.
    #[test]
    fn query_parts_that_could_forge_a_signed_line_are_refused() {
        let op = |q| classify(Method::GET, "h:1", "/acct/ctr/b", q, &[]).map(|r| r.operation);
        for query in [
            "blocklisttype=all%0Acomp%3Ablocklist",
            "blocklisttype=all%0D",
            "a%3Ab=c",
            "comp%0A=blocklist",
            "prefix=%00",
        ] {
            assert_eq!(
                op(query).map_err(|e| e.kind()).err(),
                Some(ErrorKind::InvalidArgument),
                "{query}"
            );
        }
        // A ':' in a value is ordinary (SAS times carry them).
        assert_eq!(
            op("comp=blocklist&se=2026-12-04T10%3A00%3A00Z").ok(),
            Some(AzureOperation::GetBlockList)
        );
    }

    /// SEC-03: container and account names are refused before anything else.
    #[test]
    fn names_are_checked_first() {
        for path in [
            "/acct/bad%3Fx",
            "/acct/a%23b/k",
            "/acct/../k",
            "/acct/Upper/k",
            "/ACCT/ctr",
            "/a/ctr",
        ] {
            assert_eq!(
                classify(Method::GET, "h:1", path, "restype=container", &[])
                    .map_err(|e| e.kind())
                    .err(),
                Some(ErrorKind::InvalidBucketName),
                "{path}"
            );
        }
    }

    #[test]
    fn operations() {
        let op = |m, p, q, extra: &[(&'static str, &str)]| {
            classify(m, "h:1", p, q, extra).map(|r| r.operation)
        };
        assert_eq!(
            op(Method::GET, "/acct/ctr", "restype=container&comp=list", &[]).ok(),
            Some(AzureOperation::ListBlobs)
        );
        assert_eq!(
            op(Method::GET, "/acct/ctr", "restype=container", &[]).ok(),
            Some(AzureOperation::GetContainerProperties)
        );
        assert_eq!(
            op(
                Method::PUT,
                "/acct/ctr/b",
                "",
                &[("x-ms-blob-type", "BlockBlob")]
            )
            .ok(),
            Some(AzureOperation::PutBlob)
        );
        assert_eq!(
            op(
                Method::PUT,
                "/acct/ctr/b",
                "comp=block&blockid=AA%3D%3D",
                &[]
            )
            .ok(),
            Some(AzureOperation::PutBlock)
        );
        assert_eq!(
            op(Method::PUT, "/acct/ctr/b", "comp=blocklist", &[]).ok(),
            Some(AzureOperation::PutBlockList)
        );
        assert_eq!(
            op(Method::DELETE, "/acct/ctr/b", "", &[]).ok(),
            Some(AzureOperation::DeleteBlob)
        );
        let err = |m, p, q, extra: &[(&'static str, &str)]| {
            op(m, p, q, extra).map_err(|e| e.kind()).err()
        };
        assert_eq!(
            err(Method::PUT, "/acct/ctr/b", "comp=lease", &[]),
            Some(ErrorKind::NotImplemented)
        );
        assert_eq!(
            err(
                Method::PUT,
                "/acct/ctr/b",
                "",
                &[("x-ms-blob-type", "PageBlob")]
            ),
            Some(ErrorKind::NotImplemented)
        );
        assert_eq!(
            err(Method::PUT, "/acct/ctr/b", "", &[]),
            Some(ErrorKind::MissingHeader)
        );
        let source = ("x-ms-copy-source", "http://h:1/acct/ctr/a");
        assert_eq!(
            op(Method::PUT, "/acct/ctr/b", "", &[source]).ok(),
            Some(AzureOperation::CopyBlob)
        );
        assert_eq!(
            op(
                Method::PUT,
                "/acct/ctr/b",
                "",
                &[source, ("x-ms-blob-type", "BlockBlob")]
            )
            .ok(),
            Some(AzureOperation::CopyBlob)
        );
        // Put Block From URL is refused, never read as a Put Block of the empty body.
        assert_eq!(
            err(
                Method::PUT,
                "/acct/ctr/b",
                "comp=block&blockid=AA%3D%3D",
                &[source]
            ),
            Some(ErrorKind::NotImplemented)
        );
    }
}
