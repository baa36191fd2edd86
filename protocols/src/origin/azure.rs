//! The Azure Blob side of the origin client: Shared Key signing (or a SAS on every
//! URL), `x-ms-range`, block blobs, List Containers and List Blobs.

use std::time::SystemTime;

use http::{HeaderMap, Method};

use super::azure_credentials::AzureAuth;
use super::{
    AZURE_API_VERSION, BucketSummary, Dialect, ListOptions, ListResult, ListedEntry, OriginBody,
    path_and_query,
};
use crate::azure::shared_key::{self, AccountKey, SharedKeyParts};
use crate::conditional::quote_etag;
use crate::dates::{format_http_date, parse_http_date};
use crate::error::Result;
use crate::names;

/// An Azure account and how to sign for it.
pub(super) struct AzureDialect {
    pub(super) endpoint: String,
    pub(super) account: String,
    pub(super) key: Option<AccountKey>,
    pub(super) sas: Option<String>,
    /// A token or SAS kept current by its own task; over `key` and `sas`.
    pub(super) refreshing:
        Option<std::sync::Arc<super::credentials::Refreshing<super::azure_credentials::AzureAuth>>>,
}

impl Dialect for AzureDialect {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn virtual_hosted(&self) -> bool {
        false
    }

    fn check_bucket(&self, container: &str) -> Result<()> {
        names::validate_container_name(container)
    }

    fn extra_query(&self) -> Result<Option<std::borrow::Cow<'_, str>>> {
        if let Some(r) = &self.refreshing {
            return Ok(match &*r.current()? {
                AzureAuth::Sas(sas) => Some(std::borrow::Cow::Owned(sas.clone())),
                AzureAuth::Bearer(_) => None,
            });
        }
        Ok(self
            .sas
            .as_deref()
            .map(|sas| std::borrow::Cow::Borrowed(sas.trim_start_matches('?'))))
    }

    fn authorize(
        &self,
        method: &Method,
        url: &str,
        _host: &str,
        headers: &mut Vec<(String, String)>,
        body: &OriginBody,
        now: SystemTime,
    ) -> Result<()> {
        headers.push(("x-ms-version".into(), AZURE_API_VERSION.into()));
        headers.push(("x-ms-date".into(), format_http_date(now)));
        if let Some(r) = &self.refreshing {
            // A SAS is in the URL (`extra_query`); a token goes in the header.
            if let AzureAuth::Bearer(token) = &*r.current()? {
                headers.push(("authorization".into(), format!("Bearer {token}")));
            }
            return Ok(());
        }
        let Some(account_key) = &self.key else {
            return Ok(());
        };
        let mut map = HeaderMap::new();
        for (k, v) in headers.iter() {
            if let (Ok(name), Ok(value)) = (http::HeaderName::from_bytes(k.as_bytes()), v.parse()) {
                map.append(name, value);
            }
        }
        if !body.is_empty() {
            map.insert(http::header::CONTENT_LENGTH, body.len().into());
        }
        let (raw_path, raw_query) = path_and_query(url);
        let parts = SharedKeyParts {
            method: method.as_str(),
            raw_path,
            raw_query,
            headers: &map,
        };
        headers.push((
            "authorization".into(),
            shared_key::authorization(&parts, &self.account, account_key),
        ));
        Ok(())
    }

    fn range_header(&self) -> &'static str {
        "x-ms-range"
    }

    fn whole_object_headers(&self) -> Vec<(&'static str, String)> {
        // Azure has no flexible checksums to ask for.
        Vec::new()
    }

    fn has_start_after(&self) -> bool {
        false
    }

    fn has_suffix_ranges(&self) -> bool {
        false
    }

    fn etag_changes_with_every_write(&self) -> bool {
        // Every write, Set Blob Metadata and Properties included, makes a new ETag.
        true
    }

    fn takes_trailer_checksums(&self) -> bool {
        false
    }

    fn put_headers(&self) -> Vec<(&'static str, String)> {
        vec![("x-ms-blob-type", "BlockBlob".into())]
    }

    fn list_buckets_query(&self) -> &'static str {
        "comp=list"
    }

    fn parse_buckets(&self, body: &[u8]) -> Result<Vec<BucketSummary>> {
        let parsed: crate::azure::xml::ContainerEnumeration =
            crate::azure::xml::parse_request(body)?;
        Ok(parsed
            .containers
            .container
            .into_iter()
            .map(|c| BucketSummary {
                created: c.properties.and_then(|p| parse_http_date(&p.last_modified)),
                name: c.name,
            })
            .collect())
    }

    fn bucket_query(&self) -> &'static str {
        "restype=container"
    }

    fn list_query(&self, options: &ListOptions<'_>) -> Vec<(&'static str, String)> {
        // Azure has no start-after.
        let mut q = vec![("restype", "container".into()), ("comp", "list".into())];
        if let Some(t) = options.token {
            q.push(("marker", t.into()));
        }
        if let Some(m) = options.max_keys {
            q.push(("maxresults", m.to_string()));
        }
        if options.include_metadata {
            q.push(("include", "metadata".into()));
        }
        q
    }

    fn parse_listing(&self, body: &[u8], include_metadata: bool) -> Result<ListResult> {
        use crate::azure::xml::{BlobItem, EnumerationResults};
        let parsed: EnumerationResults = crate::azure::xml::parse_request(body)?;
        let mut out = ListResult {
            next_token: parsed.next_marker.filter(|m| !m.is_empty()),
            ..Default::default()
        };
        for item in parsed.blobs.items {
            match item {
                BlobItem::Blob(b) => out.objects.push(ListedEntry {
                    key: b.name,
                    size: b.properties.content_length,
                    etag: quote_etag(&b.properties.etag),
                    last_modified: parse_http_date(&b.properties.last_modified),
                    content_type: Some(b.properties.content_type).filter(|t| !t.is_empty()),
                    content_md5: Some(b.properties.content_md5).filter(|m| !m.is_empty()),
                    user_metadata: include_metadata.then(|| {
                        b.metadata
                            .into_iter()
                            .map(|(k, v)| (k.to_ascii_lowercase(), v))
                            .collect()
                    }),
                }),
                BlobItem::BlobPrefix(p) => out.common_prefixes.push(p.name),
            }
        }
        Ok(out)
    }
}
