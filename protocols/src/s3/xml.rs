//! S3 XML bodies: the answers a server writes and the requests and answers a peer parses.

use std::time::SystemTime;

use serde::Deserialize;

use super::request::{ListObjectsParams, ListVersion, ListVersionsParams};
use crate::dates::format_iso8601_millis;
use crate::error::{Error, ErrorKind, Result};
use crate::listing::ListPage;
use crate::uri_encoding::encode_path;
use crate::xml::XmlWriter;

/// The namespace of S3 response documents.
pub const S3_XMLNS: &str = "http://s3.amazonaws.com/doc/2006-03-01/";

/// What an error is about: S3 names the bucket in bucket errors and the key in key
/// errors.
#[derive(Debug, Clone, Copy, Default)]
pub struct ErrorSubject<'a> {
    /// The bucket the request addressed.
    pub bucket: Option<&'a str>,
    /// The key the request addressed.
    pub key: Option<&'a str>,
}

/// The `<Error>` body of an S3 error answer.
///
/// `resource` is the request path; `request_id` must equal the `x-amz-request-id` header.
pub fn error_xml(
    err: &Error,
    resource: &str,
    request_id: &str,
    subject: ErrorSubject<'_>,
) -> String {
    let mut w = XmlWriter::new("UTF-8");
    w.open("Error", None)
        .text("Code", err.kind().s3_code())
        .text("Message", err.client_message());
    match err.kind() {
        ErrorKind::NoSuchBucket
        | ErrorKind::BucketNotEmpty
        | ErrorKind::BucketAlreadyExists
        | ErrorKind::InvalidBucketName => {
            w.opt_text("BucketName", subject.bucket);
        }
        ErrorKind::NoSuchKey | ErrorKind::InvalidObjectName => {
            w.opt_text("Key", subject.key);
        }
        _ => {}
    }
    w.text("Resource", resource)
        .text("RequestId", request_id)
        .text("HostId", request_id);
    w.finish()
}

/// A bucket in a ListBuckets answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketEntry {
    /// Bucket name.
    pub name: String,
    /// Creation time.
    pub created: SystemTime,
}

/// The ListAllMyBucketsResult document.
pub fn list_buckets_xml(
    owner_id: &str,
    buckets: &[BucketEntry],
    next_token: Option<&str>,
    prefix: Option<&str>,
) -> String {
    let mut w = XmlWriter::new("UTF-8");
    w.open("ListAllMyBucketsResult", Some(S3_XMLNS));
    write_owner(&mut w, owner_id);
    w.open("Buckets", None);
    for b in buckets {
        w.open("Bucket", None)
            .text("Name", &b.name)
            .text("CreationDate", &format_iso8601_millis(b.created))
            .close();
    }
    w.close();
    // A paginated listing (max-buckets) names where the next page starts.
    w.opt_text("ContinuationToken", next_token);
    w.opt_text("Prefix", prefix);
    w.finish()
}

/// An object in a listing answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEntry {
    /// Object key.
    pub key: String,
    /// Last modification time.
    pub last_modified: SystemTime,
    /// Quoted entity tag.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
}

/// `s` URL-encoded when the listing asked for `encoding-type=url`.
fn url_encoded_if(encoding_url: bool, s: &str) -> String {
    if encoding_url {
        encode_path(s)
    } else {
        s.to_owned()
    }
}

/// `<Owner>` with the one owner every Talon listing names.
fn write_owner(w: &mut XmlWriter, owner_id: &str) {
    w.open("Owner", None)
        .text("ID", owner_id)
        .text("DisplayName", owner_id)
        .close();
}

/// The elements every object listing carries after its markers: `MaxKeys`,
/// `Delimiter`, `EncodingType` and `IsTruncated`.
fn write_page_bounds(
    w: &mut XmlWriter,
    max_keys: usize,
    delimiter: Option<&str>,
    encoding_url: bool,
    is_truncated: bool,
) {
    w.text("MaxKeys", &max_keys.to_string());
    if let Some(d) = delimiter {
        w.text("Delimiter", &url_encoded_if(encoding_url, d));
    }
    if encoding_url {
        w.text("EncodingType", "url");
    }
    w.text("IsTruncated", if is_truncated { "true" } else { "false" });
}

/// The ListBucketResult document of ListObjects (V1) or ListObjectsV2.
///
/// `next_token` is the V2 `NextContinuationToken` the caller derived from
/// `page.next_marker`; V1 writes `NextMarker` from the page directly.
pub fn list_objects_xml(
    bucket: &str,
    params: &ListObjectsParams,
    page: &ListPage<ObjectEntry>,
    next_token: Option<&str>,
    owner_id: &str,
) -> String {
    let enc = |s: &str| url_encoded_if(params.encoding_url, s);
    let mut w = XmlWriter::new("UTF-8");
    w.open("ListBucketResult", Some(S3_XMLNS));
    // V1 answers its Prefix as it came, even with encoding-type=url (S3 does, and so
    // botocore decodes every V1 element but that one); V2 encodes it.
    let prefix = match params.version {
        ListVersion::V1 => params.prefix.clone(),
        ListVersion::V2 => enc(&params.prefix),
    };
    w.text("Name", bucket).text("Prefix", &prefix);
    match params.version {
        ListVersion::V1 => {
            w.text("Marker", &enc(params.marker.as_deref().unwrap_or("")));
            if let Some(next) = page.next_marker.as_deref().filter(|_| page.is_truncated) {
                w.text("NextMarker", &enc(next));
            }
        }
        ListVersion::V2 => {
            let count = page.entries.len() + page.common_prefixes.len();
            w.text("KeyCount", &count.to_string());
            w.opt_text("ContinuationToken", params.continuation_token.as_deref());
            w.opt_text("NextContinuationToken", next_token);
            if let Some(s) = &params.start_after {
                w.text("StartAfter", &enc(s));
            }
        }
    }
    write_page_bounds(
        &mut w,
        params.max_keys,
        params.delimiter.as_deref(),
        params.encoding_url,
        page.is_truncated,
    );
    for o in &page.entries {
        w.open("Contents", None)
            .text("Key", &enc(&o.key))
            .text("LastModified", &format_iso8601_millis(o.last_modified))
            .text("ETag", &o.etag)
            .text("Size", &o.size.to_string());
        if params.version == ListVersion::V1 || params.fetch_owner {
            write_owner(&mut w, owner_id);
        }
        w.text("StorageClass", "STANDARD").close();
    }
    for p in &page.common_prefixes {
        w.open("CommonPrefixes", None)
            .text("Prefix", &enc(p))
            .close();
    }
    w.finish()
}

/// The ListVersionsResult document of ListObjectVersions over objects without
/// versioning: each object once, as its `null` version, the latest.
pub fn list_versions_xml(
    bucket: &str,
    params: &ListVersionsParams,
    page: &ListPage<ObjectEntry>,
    owner_id: &str,
) -> String {
    let enc = |s: &str| url_encoded_if(params.encoding_url, s);
    let mut w = XmlWriter::new("UTF-8");
    w.open("ListVersionsResult", Some(S3_XMLNS));
    w.text("Name", bucket).text("Prefix", &enc(&params.prefix));
    w.text(
        "KeyMarker",
        &enc(params.key_marker.as_deref().unwrap_or("")),
    );
    w.text(
        "VersionIdMarker",
        params.version_id_marker.as_deref().unwrap_or(""),
    );
    if let Some(next) = page.next_marker.as_deref().filter(|_| page.is_truncated) {
        w.text("NextKeyMarker", &enc(next));
        w.text("NextVersionIdMarker", "null");
    }
    write_page_bounds(
        &mut w,
        params.max_keys,
        params.delimiter.as_deref(),
        params.encoding_url,
        page.is_truncated,
    );
    for o in &page.entries {
        w.open("Version", None)
            .text("Key", &enc(&o.key))
            .text("VersionId", "null")
            .text("IsLatest", "true")
            .text("LastModified", &format_iso8601_millis(o.last_modified))
            .text("ETag", &o.etag)
            .text("Size", &o.size.to_string());
        write_owner(&mut w, owner_id);
        w.text("StorageClass", "STANDARD").close();
    }
    for p in &page.common_prefixes {
        w.open("CommonPrefixes", None)
            .text("Prefix", &enc(p))
            .close();
    }
    w.finish()
}

/// A GetBucketAcl or GetObjectAcl answer for a canned ACL: the owner's `FULL_CONTROL`,
/// and for `public-read` the AllUsers group's `READ`.
pub fn acl_xml(owner_id: &str, acl: crate::access::CannedAcl) -> String {
    let xsi = ("xmlns:xsi", "http://www.w3.org/2001/XMLSchema-instance");
    let mut w = XmlWriter::new("UTF-8");
    w.open("AccessControlPolicy", Some(S3_XMLNS));
    write_owner(&mut w, owner_id);
    w.open("AccessControlList", None).open("Grant", None);
    w.open_with_attrs("Grantee", &[xsi, ("xsi:type", "CanonicalUser")])
        .text("ID", owner_id)
        .text("DisplayName", owner_id)
        .close();
    w.text("Permission", "FULL_CONTROL").close();
    if acl == crate::access::CannedAcl::PublicRead {
        w.open("Grant", None);
        w.open_with_attrs("Grantee", &[xsi, ("xsi:type", "Group")])
            .text("URI", "http://acs.amazonaws.com/groups/global/AllUsers")
            .close();
        w.text("Permission", "READ").close();
    }
    w.finish()
}

/// The GetBucketLocation answer; us-east-1 is written as an empty constraint, as S3 does.
pub fn location_xml(region: &str) -> String {
    let mut w = XmlWriter::new("UTF-8");
    w.open("LocationConstraint", Some(S3_XMLNS));
    let mut doc = w.finish();
    if region != "us-east-1" {
        let close = "</LocationConstraint>";
        let at = doc.len() - close.len();
        doc.insert_str(at, &quick_xml::escape::escape(region));
    }
    doc
}

/// The InitiateMultipartUploadResult answer.
pub fn initiate_multipart_xml(bucket: &str, key: &str, upload_id: &str) -> String {
    let mut w = XmlWriter::new("UTF-8");
    w.open("InitiateMultipartUploadResult", Some(S3_XMLNS))
        .text("Bucket", bucket)
        .text("Key", key)
        .text("UploadId", upload_id);
    w.finish()
}

/// The CompleteMultipartUploadResult answer.
pub fn complete_multipart_xml(location: &str, bucket: &str, key: &str, etag: &str) -> String {
    let mut w = XmlWriter::new("UTF-8");
    w.open("CompleteMultipartUploadResult", Some(S3_XMLNS))
        .text("Location", location)
        .text("Bucket", bucket)
        .text("Key", key)
        .text("ETag", etag);
    w.finish()
}

/// The CopyObjectResult (or, with `part`, CopyPartResult) answer.
pub fn copy_result_xml(etag: &str, last_modified: SystemTime, part: bool) -> String {
    let mut w = XmlWriter::new("UTF-8");
    w.open(
        if part {
            "CopyPartResult"
        } else {
            "CopyObjectResult"
        },
        Some(S3_XMLNS),
    )
    .text("LastModified", &format_iso8601_millis(last_modified))
    .text("ETag", etag);
    w.finish()
}

/// One outcome in a DeleteObjects answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The key is gone (or never existed, which S3 also reports as deleted).
    Deleted(String),
    /// The key could not be deleted.
    Failed {
        /// The key.
        key: String,
        /// Why.
        kind: ErrorKind,
        /// Message.
        message: String,
    },
}

/// The DeleteResult answer; in quiet mode only failures are listed.
pub fn delete_result_xml(outcomes: &[DeleteOutcome], quiet: bool) -> String {
    let mut w = XmlWriter::new("UTF-8");
    w.open("DeleteResult", Some(S3_XMLNS));
    for o in outcomes {
        match o {
            DeleteOutcome::Deleted(key) if !quiet => {
                w.open("Deleted", None).text("Key", key).close();
            }
            DeleteOutcome::Deleted(_) => {}
            DeleteOutcome::Failed { key, kind, message } => {
                w.open("Error", None)
                    .text("Key", key)
                    .text("Code", kind.s3_code())
                    .text("Message", message)
                    .close();
            }
        }
    }
    w.finish()
}

/// A part in a ListParts answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartEntry {
    /// Part number (1..=10000).
    pub number: u32,
    /// Quoted entity tag of the part.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
    /// Upload time.
    pub last_modified: SystemTime,
}

/// The ListPartsResult answer (one page with every part).
pub fn list_parts_xml(bucket: &str, key: &str, upload_id: &str, parts: &[PartEntry]) -> String {
    let mut w = XmlWriter::new("UTF-8");
    w.open("ListPartsResult", Some(S3_XMLNS))
        .text("Bucket", bucket)
        .text("Key", key)
        .text("UploadId", upload_id)
        .text("MaxParts", "10000")
        .text("IsTruncated", "false");
    for p in parts {
        w.open("Part", None)
            .text("PartNumber", &p.number.to_string())
            .text("LastModified", &format_iso8601_millis(p.last_modified))
            .text("ETag", &p.etag)
            .text("Size", &p.size.to_string())
            .close();
    }
    w.finish()
}

/// One page of an object's parts in a GetObjectAttributes answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartsPage {
    /// Parts of the object in all.
    pub count: usize,
    /// The marker asked for (parts after it are listed).
    pub marker: u32,
    /// Most parts asked for.
    pub max: usize,
    /// The parts of this page: (number, size).
    pub parts: Vec<(u32, u64)>,
}

/// The GetObjectAttributesResponse answer, with the attributes asked for. The ETag is
/// written without quotes, as S3 writes it here; `checksum` is `(algorithm, base64)`.
pub fn object_attributes_xml(
    asked: &[&str],
    etag: &str,
    size: u64,
    checksum: Option<(&str, &str)>,
    parts: Option<&PartsPage>,
) -> String {
    let wants = |name: &str| asked.iter().any(|a| a.eq_ignore_ascii_case(name));
    let mut w = XmlWriter::new("UTF-8");
    w.open("GetObjectAttributesResponse", Some(S3_XMLNS));
    if wants("ETag") {
        w.text("ETag", crate::conditional::normalize_etag(etag));
    }
    if wants("Checksum")
        && let Some((algorithm, value)) = checksum
    {
        w.open("Checksum", None)
            .text(
                &format!("Checksum{}", algorithm.to_ascii_uppercase()),
                value,
            )
            .text("ChecksumType", "FULL_OBJECT")
            .close();
    }
    if wants("ObjectParts")
        && let Some(page) = parts
    {
        let last = page.parts.last().map(|p| p.0);
        let truncated = last.is_some_and(|l| (l as usize) < page.count);
        w.open("ObjectParts", None)
            .text("IsTruncated", if truncated { "true" } else { "false" })
            .text("MaxParts", &page.max.to_string())
            .text("PartNumberMarker", &page.marker.to_string());
        if truncated && let Some(l) = last {
            w.text("NextPartNumberMarker", &l.to_string());
        }
        for (number, size) in &page.parts {
            w.open("Part", None)
                .text("PartNumber", &number.to_string())
                .text("Size", &size.to_string())
                .close();
        }
        w.text("PartsCount", &page.count.to_string());
        w.close();
    }
    if wants("StorageClass") {
        w.text("StorageClass", "STANDARD");
    }
    if wants("ObjectSize") {
        w.text("ObjectSize", &size.to_string());
    }
    w.finish()
}

/// An upload in a ListMultipartUploads answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadEntry {
    /// Object key.
    pub key: String,
    /// Upload id.
    pub upload_id: String,
    /// When it was created.
    pub initiated: SystemTime,
}

/// The ListMultipartUploadsResult answer (one page).
pub fn list_uploads_xml(bucket: &str, uploads: &[UploadEntry]) -> String {
    let mut w = XmlWriter::new("UTF-8");
    w.open("ListMultipartUploadsResult", Some(S3_XMLNS))
        .text("Bucket", bucket)
        .text("MaxUploads", "1000")
        .text("IsTruncated", "false");
    for u in uploads {
        w.open("Upload", None)
            .text("Key", &u.key)
            .text("UploadId", &u.upload_id)
            .text("StorageClass", "STANDARD")
            .text("Initiated", &format_iso8601_millis(u.initiated))
            .close();
    }
    w.finish()
}

/// The CompleteMultipartUpload request body.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct CompleteMultipartUpload {
    /// The parts, in the client's order.
    #[serde(rename = "Part", default)]
    pub parts: Vec<CompletedPart>,
}

/// One part of a CompleteMultipartUpload request.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct CompletedPart {
    /// Part number.
    #[serde(rename = "PartNumber")]
    pub number: u32,
    /// The part's entity tag as UploadPart returned it.
    #[serde(rename = "ETag")]
    pub etag: String,
}

/// The DeleteObjects request body.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct DeleteRequest {
    /// Keys to delete.
    #[serde(rename = "Object", default)]
    pub objects: Vec<DeleteRequestObject>,
    /// Quiet mode: report failures only.
    #[serde(rename = "Quiet", default)]
    pub quiet: bool,
}

/// One key of a DeleteObjects request.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct DeleteRequestObject {
    /// The key.
    #[serde(rename = "Key")]
    pub key: String,
    /// Delete only if the object has this entity tag (or `*`: if it exists).
    #[serde(rename = "ETag", default)]
    pub etag: Option<String>,
    /// Delete only if the object was last modified at this ISO 8601 time.
    #[serde(rename = "LastModifiedTime", default)]
    pub last_modified_time: Option<String>,
    /// Delete only if the object has this size in bytes.
    #[serde(rename = "Size", default)]
    pub size: Option<u64>,
}

/// Parses an XML request body.
///
/// # Errors
/// [`ErrorKind::MalformedXml`].
pub fn parse_request<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T> {
    let text = std::str::from_utf8(body)
        .map_err(|_| Error::new(ErrorKind::MalformedXml, "the XML is not UTF-8"))?;
    quick_xml::de::from_str(text).map_err(|e| {
        Error::new(
            ErrorKind::MalformedXml,
            "The XML you provided was not well-formed or did not validate against our published schema",
        )
        .with_source(e)
    })
}

/// A ListObjectsV2 answer, as the origin client reads it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ListBucketResult {
    /// Objects.
    #[serde(rename = "Contents", default)]
    pub contents: Vec<ListedObject>,
    /// Common prefixes.
    #[serde(rename = "CommonPrefixes", default)]
    pub common_prefixes: Vec<ListedPrefix>,
    /// More pages follow.
    #[serde(rename = "IsTruncated", default)]
    pub is_truncated: bool,
    /// Token of the next page.
    #[serde(rename = "NextContinuationToken", default)]
    pub next_continuation_token: Option<String>,
    /// `url` when keys are URL-encoded.
    #[serde(rename = "EncodingType", default)]
    pub encoding_type: Option<String>,
}

/// One object of a parsed listing.
#[derive(Debug, Clone, Deserialize)]
pub struct ListedObject {
    /// Key (URL-encoded when the listing says so).
    #[serde(rename = "Key")]
    pub key: String,
    /// ISO 8601 time.
    #[serde(rename = "LastModified", default)]
    pub last_modified: String,
    /// Quoted entity tag.
    #[serde(rename = "ETag", default)]
    pub etag: String,
    /// Size in bytes.
    #[serde(rename = "Size", default)]
    pub size: u64,
}

/// One common prefix of a parsed listing.
#[derive(Debug, Clone, Deserialize)]
pub struct ListedPrefix {
    /// The prefix.
    #[serde(rename = "Prefix")]
    pub prefix: String,
}

/// A ListBuckets answer, as the origin client reads it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ListAllMyBucketsResult {
    /// The buckets.
    #[serde(rename = "Buckets", default)]
    pub buckets: ListedBuckets,
}

/// The `<Buckets>` element.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ListedBuckets {
    /// Each bucket.
    #[serde(rename = "Bucket", default)]
    pub bucket: Vec<ListedBucket>,
}

/// One parsed `<Bucket>`.
#[derive(Debug, Clone, Deserialize)]
pub struct ListedBucket {
    /// Name.
    #[serde(rename = "Name")]
    pub name: String,
    /// ISO 8601 creation time.
    #[serde(rename = "CreationDate", default)]
    pub creation_date: String,
}

/// An `<Error>` body, as a peer reads it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ErrorBody {
    /// Error code.
    #[serde(rename = "Code", default)]
    pub code: String,
    /// Message.
    #[serde(rename = "Message", default)]
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listing::{ListQuery, paginate};
    use crate::s3::request::QueryParams;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn object_attributes_name_only_what_was_asked() {
        let page = PartsPage {
            count: 3,
            marker: 1,
            max: 1,
            parts: vec![(2, 5)],
        };
        let doc = object_attributes_xml(&["ETag", "ObjectParts"], "\"ab\"", 15, None, Some(&page));
        assert!(doc.contains("<ETag>ab</ETag>"), "{doc}");
        assert!(doc.contains("<IsTruncated>true</IsTruncated>"), "{doc}");
        assert!(
            doc.contains("<NextPartNumberMarker>2</NextPartNumberMarker>"),
            "{doc}"
        );
        assert!(
            doc.contains("<Part><PartNumber>2</PartNumber><Size>5</Size></Part>"),
            "{doc}"
        );
        assert!(doc.contains("<PartsCount>3</PartsCount>"), "{doc}");
        assert!(
            !doc.contains("ObjectSize") && !doc.contains("StorageClass"),
            "{doc}"
        );
        let last = PartsPage {
            marker: 2,
            parts: vec![(3, 5)],
            ..page
        };
        let doc = object_attributes_xml(
            &["ObjectParts", "ObjectSize"],
            "\"ab\"",
            15,
            None,
            Some(&last),
        );
        assert!(
            doc.contains("<IsTruncated>false</IsTruncated>")
                && !doc.contains("NextPartNumberMarker")
        );
        assert!(doc.contains("<ObjectSize>15</ObjectSize>"), "{doc}");
    }

    #[test]
    fn error_body_carries_code_and_request_id() {
        let e = Error::new(ErrorKind::NoSuchKey, "The specified key does not exist.");
        let xml = error_xml(
            &e,
            "/b/k",
            "REQ1",
            ErrorSubject {
                bucket: Some("b"),
                key: Some("k"),
            },
        );
        assert!(xml.contains("<Code>NoSuchKey</Code>"));
        assert!(xml.contains("<Key>k</Key>"));
        assert!(!xml.contains("<BucketName>"));
        assert!(xml.contains("<RequestId>REQ1</RequestId>"));
        let parsed: ErrorBody = parse_request(xml.as_bytes()).expect("parse");
        assert_eq!(parsed.code, "NoSuchKey");
    }

    #[test]
    fn listing_round_trips_through_the_parser_with_url_encoding() {
        let t = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let objects = ["a b+c", "dir/x", "dir/y", "é"].map(|k| ObjectEntry {
            key: k.into(),
            last_modified: t,
            etag: "\"e\"".into(),
            size: 3,
        });
        let params = ListObjectsParams::from_query(
            &QueryParams::parse("list-type=2&delimiter=%2F&encoding-type=url&max-keys=2"),
            ListVersion::V2,
        )
        .expect("params");
        let page = paginate(
            objects.to_vec(),
            |o| o.key.as_str(),
            &ListQuery {
                prefix: "",
                delimiter: Some("/"),
                marker: None,
                max_keys: 2,
            },
        );
        let xml = list_objects_xml("b", &params, &page, Some("tok"), "owner");
        assert!(xml.contains("<Key>a%20b%2Bc</Key>"), "{xml}");
        let parsed: ListBucketResult = parse_request(xml.as_bytes()).expect("parse");
        assert_eq!(parsed.contents.len(), 1);
        assert_eq!(parsed.common_prefixes[0].prefix, "dir/");
        assert!(parsed.is_truncated);
        assert_eq!(parsed.next_continuation_token.as_deref(), Some("tok"));
        assert_eq!(parsed.encoding_type.as_deref(), Some("url"));
    }

    #[test]
    fn request_bodies_parse_and_garbage_is_malformed_xml() {
        let body = br#"<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Part><ETag>"a"</ETag><PartNumber>1</PartNumber></Part><Part><ETag>"b"</ETag><PartNumber>2</PartNumber></Part></CompleteMultipartUpload>"#;
        let c: CompleteMultipartUpload = parse_request(body).expect("parse");
        assert_eq!(c.parts.len(), 2);
        assert_eq!(c.parts[1].number, 2);
        let body = br#"<Delete><Object><Key>a</Key></Object><Object><Key>b c</Key></Object><Quiet>true</Quiet></Delete>"#;
        let d: DeleteRequest = parse_request(body).expect("parse");
        assert!(d.quiet);
        assert_eq!(d.objects[1].key, "b c");
        let err = parse_request::<DeleteRequest>(b"<Delete><Object>")
            .map_err(|e| e.kind())
            .err();
        assert_eq!(err, Some(ErrorKind::MalformedXml));
    }

    #[test]
    fn location_constraint() {
        assert!(location_xml("us-east-1").ends_with("<LocationConstraint xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"></LocationConstraint>"));
        assert!(location_xml("eu-west-1").contains(">eu-west-1</LocationConstraint>"));
    }
}
