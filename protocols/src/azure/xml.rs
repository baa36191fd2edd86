//! Azure Blob XML bodies: errors, container and blob listings, block lists.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Deserialize;

use crate::dates::{format_http_date, format_iso8601_millis};
use crate::error::{Error, ErrorKind, Result};
use crate::listing::ListPage;
use crate::xml::XmlWriter;

/// The `<Error>` body of an Azure error answer. The message ends with the request id and
/// time, as the service writes it; authentication failures carry the reason in
/// `<AuthenticationErrorDetail>`.
pub fn error_xml(err: &Error, request_id: &str, now: SystemTime) -> String {
    let mut w = XmlWriter::new("utf-8");
    let code = err.kind().azure_code();
    let auth = code == "AuthenticationFailed";
    let message = if auth {
        "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature."
    } else {
        err.client_message()
    };
    w.open("Error", None).text("Code", code).text(
        "Message",
        &format!(
            "{message}\nRequestId:{request_id}\nTime:{}",
            format_iso8601_millis(now)
        ),
    );
    if auth {
        w.text("AuthenticationErrorDetail", err.message());
    }
    w.finish()
}

/// A container in a List Containers answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerEntry {
    /// Name.
    pub name: String,
    /// Last modification (creation) time.
    pub last_modified: SystemTime,
    /// Quoted entity tag.
    pub etag: String,
}

/// The parameters echoed in a listing answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListEcho<'a> {
    /// `prefix`.
    pub prefix: Option<&'a str>,
    /// `marker`.
    pub marker: Option<&'a str>,
    /// `maxresults`, when the client gave it.
    pub max_results: Option<usize>,
    /// `delimiter` (blob listings only).
    pub delimiter: Option<&'a str>,
}

fn write_echo(w: &mut XmlWriter, echo: &ListEcho<'_>) {
    w.opt_text("Prefix", echo.prefix);
    w.opt_text("Marker", echo.marker);
    if let Some(m) = echo.max_results {
        w.text("MaxResults", &m.to_string());
    }
    w.opt_text("Delimiter", echo.delimiter);
}

/// The List Containers answer. `service_endpoint` is the account's base URL.
pub fn list_containers_xml(
    service_endpoint: &str,
    echo: &ListEcho<'_>,
    page: &ListPage<ContainerEntry>,
) -> String {
    let mut w = XmlWriter::new("utf-8");
    w.open_with_attrs(
        "EnumerationResults",
        &[("ServiceEndpoint", service_endpoint)],
    );
    write_echo(&mut w, echo);
    w.open("Containers", None);
    for c in &page.entries {
        w.open("Container", None)
            .text("Name", &c.name)
            .open("Properties", None)
            .text("Last-Modified", &format_http_date(c.last_modified))
            .text("Etag", &c.etag)
            .text("LeaseStatus", "unlocked")
            .text("LeaseState", "available")
            .text("HasImmutabilityPolicy", "false")
            .text("HasLegalHold", "false")
            .close()
            .close();
    }
    w.close();
    match page.next_marker.as_deref() {
        Some(m) => w.text("NextMarker", m),
        None => w.empty("NextMarker"),
    };
    w.finish()
}

/// A blob in a List Blobs answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobEntry {
    /// Blob name.
    pub name: String,
    /// Last modification time.
    pub last_modified: SystemTime,
    /// Quoted entity tag.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
    /// Content type.
    pub content_type: String,
    /// Base64 MD5 of the content, when known.
    pub content_md5: Option<String>,
    /// User metadata, written as `<Metadata>` when the request asked for it
    /// (`include=metadata`).
    pub metadata: Option<BTreeMap<String, String>>,
}

/// The List Blobs answer.
pub fn list_blobs_xml(
    service_endpoint: &str,
    container: &str,
    echo: &ListEcho<'_>,
    page: &ListPage<BlobEntry>,
) -> String {
    let mut w = XmlWriter::new("utf-8");
    w.open_with_attrs(
        "EnumerationResults",
        &[
            ("ServiceEndpoint", service_endpoint),
            ("ContainerName", container),
        ],
    );
    write_echo(&mut w, echo);
    w.open("Blobs", None);
    // Blobs and prefixes interleave in name order, as the service returns them.
    let mut entries = page.entries.iter().peekable();
    let mut prefixes = page.common_prefixes.iter().peekable();
    loop {
        let take_blob = match (entries.peek(), prefixes.peek()) {
            (Some(b), Some(p)) => b.name.as_str() < p.as_str(),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        if take_blob {
            let Some(b) = entries.next() else { break };
            let md5 = |w: &mut XmlWriter| match &b.content_md5 {
                Some(m) => {
                    w.text("Content-MD5", m);
                }
                None => {
                    w.empty("Content-MD5");
                }
            };
            w.open("Blob", None)
                .text("Name", &b.name)
                .open("Properties", None)
                .text("Creation-Time", &format_http_date(b.last_modified))
                .text("Last-Modified", &format_http_date(b.last_modified))
                .text("Etag", &b.etag)
                .text("Content-Length", &b.size.to_string())
                .text("Content-Type", &b.content_type)
                .empty("Content-Encoding")
                .empty("Content-Language");
            md5(&mut w);
            w.empty("Cache-Control")
                .text("BlobType", "BlockBlob")
                .text("AccessTier", "Hot")
                .text("AccessTierInferred", "true")
                .text("LeaseStatus", "unlocked")
                .text("LeaseState", "available")
                .text("ServerEncrypted", "true")
                .close();
            if let Some(metadata) = &b.metadata {
                w.open("Metadata", None);
                for (name, value) in metadata {
                    w.text(name, value);
                }
                w.close();
            }
            w.close();
        } else {
            let Some(p) = prefixes.next() else { break };
            w.open("BlobPrefix", None).text("Name", p).close();
        }
    }
    w.close();
    match page.next_marker.as_deref() {
        Some(m) => w.text("NextMarker", m),
        None => w.empty("NextMarker"),
    };
    w.finish()
}

/// A block in a Get Block List answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockEntry {
    /// The block id, base64 as the client sent it.
    pub id: String,
    /// Size in bytes.
    pub size: u64,
}

/// The Get Block List answer.
pub fn block_list_xml(committed: &[BlockEntry], uncommitted: &[BlockEntry]) -> String {
    let mut w = XmlWriter::new("utf-8");
    w.open("BlockList", None);
    for (tag, blocks) in [
        ("CommittedBlocks", committed),
        ("UncommittedBlocks", uncommitted),
    ] {
        w.open(tag, None);
        for b in blocks {
            w.open("Block", None)
                .text("Name", &b.id)
                .text("Size", &b.size.to_string())
                .close();
        }
        w.close();
    }
    w.finish()
}

/// One entry of a Put Block List request, in order.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub enum BlockListItem {
    /// The newest version of the block: uncommitted if there is one, else committed.
    Latest(String),
    /// The committed version.
    Committed(String),
    /// The uncommitted version.
    Uncommitted(String),
}

impl BlockListItem {
    /// The block id.
    pub fn id(&self) -> &str {
        match self {
            BlockListItem::Latest(id)
            | BlockListItem::Committed(id)
            | BlockListItem::Uncommitted(id) => id,
        }
    }
}

/// The Put Block List request body.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct BlockListRequest {
    /// The blocks, in the order they make up the blob.
    #[serde(rename = "$value", default)]
    pub items: Vec<BlockListItem>,
}

/// The Put Block List request body for `items`, in order (what the origin client sends).
pub fn block_list_request_xml(items: &[BlockListItem]) -> String {
    let mut w = XmlWriter::new("utf-8");
    w.open("BlockList", None);
    for item in items {
        let tag = match item {
            BlockListItem::Latest(_) => "Latest",
            BlockListItem::Committed(_) => "Committed",
            BlockListItem::Uncommitted(_) => "Uncommitted",
        };
        w.text(tag, item.id());
    }
    w.finish()
}

/// A Get Block List answer, as the origin client reads it.
#[derive(Debug, Clone, Default, Deserialize)]
struct BlockListAnswer {
    #[serde(rename = "CommittedBlocks", default)]
    committed: ListedBlocks,
    #[serde(rename = "UncommittedBlocks", default)]
    uncommitted: ListedBlocks,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct ListedBlocks {
    #[serde(rename = "Block", default)]
    block: Vec<ListedBlock>,
}

#[derive(Debug, Clone, Deserialize)]
struct ListedBlock {
    #[serde(rename = "Name")]
    name: String,
    #[serde(rename = "Size")]
    size: u64,
}

/// Reads a Get Block List answer ([`block_list_xml`]'s form): committed and uncommitted
/// blocks (id, size), each in order.
///
/// # Errors
/// [`ErrorKind::MalformedXml`].
pub fn parse_block_list(body: &[u8]) -> Result<(Vec<BlockEntry>, Vec<BlockEntry>)> {
    let answer: BlockListAnswer = parse_request(body)?;
    let entries = |l: ListedBlocks| {
        l.block
            .into_iter()
            .map(|b| BlockEntry {
                id: b.name,
                size: b.size,
            })
            .collect()
    };
    Ok((entries(answer.committed), entries(answer.uncommitted)))
}

/// Parses an XML request body.
///
/// # Errors
/// [`ErrorKind::MalformedXml`].
pub fn parse_request<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T> {
    let text = std::str::from_utf8(body)
        .map_err(|_| Error::new(ErrorKind::MalformedXml, "the XML is not UTF-8"))?;
    let text = text.trim_start_matches('\u{feff}');
    quick_xml::de::from_str(text).map_err(|e| {
        Error::new(
            ErrorKind::MalformedXml,
            "The XML specified is not syntactically valid.",
        )
        .with_source(e)
    })
}

/// A List Containers answer, as the origin client reads it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ContainerEnumeration {
    /// The containers.
    #[serde(rename = "Containers", default)]
    pub containers: ListedContainers,
    /// Marker of the next page, empty when complete.
    #[serde(rename = "NextMarker", default)]
    pub next_marker: Option<String>,
}

/// The `<Containers>` element.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ListedContainers {
    /// Each container.
    #[serde(rename = "Container", default)]
    pub container: Vec<ListedContainer>,
}

/// One parsed `<Container>`.
#[derive(Debug, Clone, Deserialize)]
pub struct ListedContainer {
    /// Name.
    #[serde(rename = "Name")]
    pub name: String,
    /// Properties.
    #[serde(rename = "Properties", default)]
    pub properties: Option<ListedContainerProperties>,
}

/// A parsed container `<Properties>`.
#[derive(Debug, Clone, Deserialize)]
pub struct ListedContainerProperties {
    /// RFC 1123 time.
    #[serde(rename = "Last-Modified", default)]
    pub last_modified: String,
}

/// A List Blobs answer, as the origin client reads it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct EnumerationResults {
    /// The blobs and prefixes.
    #[serde(rename = "Blobs", default)]
    pub blobs: BlobItems,
    /// Marker of the next page, empty when complete.
    #[serde(rename = "NextMarker", default)]
    pub next_marker: Option<String>,
}

/// The `<Blobs>` element.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct BlobItems {
    /// Blobs and prefixes in order.
    #[serde(rename = "$value", default)]
    pub items: Vec<BlobItem>,
}

/// A `<Blob>` or `<BlobPrefix>`.
#[derive(Debug, Clone, Deserialize)]
pub enum BlobItem {
    /// A blob.
    Blob(ListedBlob),
    /// A virtual directory.
    BlobPrefix(ListedBlobPrefix),
}

/// A parsed `<Blob>`.
#[derive(Debug, Clone, Deserialize)]
pub struct ListedBlob {
    /// Name.
    #[serde(rename = "Name")]
    pub name: String,
    /// Properties.
    #[serde(rename = "Properties")]
    pub properties: ListedBlobProperties,
    /// User metadata (`include=metadata`), by element name.
    #[serde(rename = "Metadata", default)]
    pub metadata: BTreeMap<String, String>,
}

/// A parsed `<Properties>` of a blob.
#[derive(Debug, Clone, Deserialize)]
pub struct ListedBlobProperties {
    /// RFC 1123 time.
    #[serde(rename = "Last-Modified", default)]
    pub last_modified: String,
    /// Entity tag.
    #[serde(rename = "Etag", default)]
    pub etag: String,
    /// Size.
    #[serde(rename = "Content-Length", default)]
    pub content_length: u64,
    /// Content type; empty when the service has none.
    #[serde(rename = "Content-Type", default)]
    pub content_type: String,
    /// Base64 MD5 of the content; empty when the service has none.
    #[serde(rename = "Content-MD5", default)]
    pub content_md5: String,
}

/// A parsed `<BlobPrefix>`.
#[derive(Debug, Clone, Deserialize)]
pub struct ListedBlobPrefix {
    /// The prefix.
    #[serde(rename = "Name")]
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn error_body_for_auth_has_detail() {
        let e = Error::new(ErrorKind::SignatureDoesNotMatch, "signature mismatch");
        let xml = error_xml(&e, "R1", UNIX_EPOCH);
        assert!(xml.contains("<Code>AuthenticationFailed</Code>"));
        assert!(
            xml.contains(
                "<AuthenticationErrorDetail>signature mismatch</AuthenticationErrorDetail>"
            )
        );
        assert!(xml.contains("RequestId:R1"));
    }

    #[test]
    fn blob_listing_interleaves_and_parses_back() {
        let t = UNIX_EPOCH + Duration::from_secs(1_600_000_000);
        let blob = |n: &str| BlobEntry {
            name: n.into(),
            last_modified: t,
            etag: "\"0x1\"".into(),
            size: 5,
            content_type: "text/plain".into(),
            content_md5: (n == "c").then(|| "XUFAKrxLKna5cZ2REBfFkg==".into()),
            metadata: (n == "c")
                .then(|| BTreeMap::from([("colour".to_owned(), "blue & <green>".to_owned())])),
        };
        let page = ListPage {
            entries: vec![blob("a"), blob("c")],
            common_prefixes: vec!["b/".into()],
            is_truncated: true,
            next_marker: Some("c".into()),
        };
        let xml = list_blobs_xml(
            "http://h/acct/",
            "cont",
            &ListEcho {
                delimiter: Some("/"),
                ..Default::default()
            },
            &page,
        );
        assert!(xml.contains("ContainerName=\"cont\""), "{xml}");
        let parsed: EnumerationResults = parse_request(xml.as_bytes()).expect("parse");
        let names: Vec<String> = parsed
            .blobs
            .items
            .iter()
            .map(|i| match i {
                BlobItem::Blob(b) => b.name.clone(),
                BlobItem::BlobPrefix(p) => p.name.clone(),
            })
            .collect();
        assert_eq!(names, ["a", "b/", "c"]);
        let md5s: Vec<&str> = parsed
            .blobs
            .items
            .iter()
            .filter_map(|i| match i {
                BlobItem::Blob(b) => Some(b.properties.content_md5.as_str()),
                BlobItem::BlobPrefix(_) => None,
            })
            .collect();
        assert_eq!(md5s, ["", "XUFAKrxLKna5cZ2REBfFkg=="]);
        let metadata: Vec<BTreeMap<String, String>> = parsed
            .blobs
            .items
            .iter()
            .filter_map(|i| match i {
                BlobItem::Blob(b) => Some(b.metadata.clone()),
                BlobItem::BlobPrefix(_) => None,
            })
            .collect();
        assert_eq!(
            metadata,
            [
                BTreeMap::new(),
                BTreeMap::from([("colour".to_owned(), "blue & <green>".to_owned())])
            ]
        );
        assert_eq!(parsed.next_marker.as_deref(), Some("c"));
    }

    #[test]
    fn block_list_keeps_order_and_kinds() {
        let body = br#"<?xml version="1.0" encoding="utf-8"?><BlockList><Latest>AAA=</Latest><Committed>BBB=</Committed><Uncommitted>CCC=</Uncommitted><Latest>DDD=</Latest></BlockList>"#;
        let req: BlockListRequest = parse_request(body).expect("parse");
        assert_eq!(
            req.items,
            vec![
                BlockListItem::Latest("AAA=".into()),
                BlockListItem::Committed("BBB=".into()),
                BlockListItem::Uncommitted("CCC=".into()),
                BlockListItem::Latest("DDD=".into()),
            ]
        );
        assert!(parse_request::<BlockListRequest>(b"<BlockList><Latest>").is_err());
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn block_lists_round_trip_between_server_and_client() {
        let items = vec![
            BlockListItem::Uncommitted("QUFB".into()),
            BlockListItem::Committed("QkJC".into()),
            BlockListItem::Latest("Q0ND+/==".into()),
        ];
        let parsed: BlockListRequest =
            parse_request(block_list_request_xml(&items).as_bytes()).unwrap();
        assert_eq!(parsed.items, items);
        let committed = vec![BlockEntry {
            id: "QUFB".into(),
            size: 3,
        }];
        let uncommitted = vec![
            BlockEntry {
                id: "QkJC".into(),
                size: 0,
            },
            BlockEntry {
                id: "Q0ND+/==".into(),
                size: 5 << 30,
            },
        ];
        let answer = block_list_xml(&committed, &uncommitted);
        assert_eq!(
            parse_block_list(answer.as_bytes()).unwrap(),
            (committed, uncommitted)
        );
        assert_eq!(parse_block_list(b"<BlockList/>").unwrap(), (vec![], vec![]));
        assert_eq!(
            parse_block_list(b"<BlockList><Committed")
                .unwrap_err()
                .kind(),
            ErrorKind::MalformedXml
        );
    }
}
