//! Server-side copies at an origin: CopyObject at S3, Copy Blob at Azure. The bytes
//! stay at the origin; Talon sends one request (and, for an Azure copy the origin runs
//! in the background, polls until it ends).

use std::time::{Duration, Instant, SystemTime};

use http::Method;

use super::{OriginBody, OriginClient, OriginConfig, check, read_capped, written_etag};
use crate::conditional::{Conditions, quote_etag};
use crate::dates::{format_http_date, parse_http_date, parse_iso8601};
use crate::error::{Error, ErrorKind, Result};
use crate::uri_encoding::{encode_path, encode_strict};

/// Longest an origin's background copy (Azure `x-ms-copy-status: pending`) is waited for.
const MAX_COPY_WAIT: Duration = Duration::from_secs(600);

/// Largest CopyObject answer read, in bytes (a `CopyObjectResult` or an `<Error>`).
const MAX_COPY_RESULT_BODY: usize = 64 << 10;

/// A copy the origin finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginCopy {
    /// The new object's quoted entity tag.
    pub etag: String,
    /// Its modification time, when the origin said.
    pub last_modified: Option<SystemTime>,
}

/// What a copy gives the new object.
#[derive(Debug, Clone, Copy)]
pub enum CopiedProperties<'a> {
    /// The source's (S3's `COPY` directive; Azure's Copy Blob without metadata).
    Source,
    /// These write headers, in the origin's dialect: at S3 every property
    /// (`REPLACE`); at Azure the `x-ms-meta-*` metadata only, since Copy Blob always
    /// keeps the source's content properties.
    Replace(&'a [(String, String)]),
}

/// The source conditions as headers named `<prefix>if-match` and so on.
fn source_condition_headers(prefix: &str, c: &Conditions) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(l) = &c.if_match {
        out.push((format!("{prefix}if-match"), l.header_value()));
    }
    if let Some(l) = &c.if_none_match {
        out.push((format!("{prefix}if-none-match"), l.header_value()));
    }
    if let Some(t) = c.if_modified_since {
        out.push((format!("{prefix}if-modified-since"), format_http_date(t)));
    }
    if let Some(t) = c.if_unmodified_since {
        out.push((format!("{prefix}if-unmodified-since"), format_http_date(t)));
    }
    out
}

/// A write's conditions on what its destination holds now, as headers for an origin:
/// all four at Azure, the entity-tag ones at S3.
pub fn destination_condition_headers(azure: bool, c: &Conditions) -> Vec<(String, String)> {
    source_condition_headers("", c)
        .into_iter()
        .filter(|(name, _)| azure || name.ends_with("match"))
        .collect()
}

/// The text of the first `<tag>` in `doc`.
fn element<'a>(doc: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = doc.find(&open)? + open.len();
    let end = doc[start..].find(&format!("</{tag}>"))? + start;
    Some(&doc[start..end])
}

/// Reads S3's `&quot;` escapes of an entity tag in XML.
fn unescape_etag(text: &str) -> String {
    text.replace("&quot;", "\"").replace("&#34;", "\"")
}

impl OriginClient {
    /// Copies `from` to `to` (each `(bucket, key)`) at the origin, if `source`'s
    /// conditions hold for the source and `destination`'s for what `to` holds now,
    /// giving the new object `properties`. An S3 origin is given the destination's
    /// entity-tag conditions only (S3 conditions writes on nothing else).
    ///
    /// # Errors
    /// The origin's error as a kind (a failed source condition is
    /// [`ErrorKind::PreconditionFailed`]); an S3 `200` whose body is an `<Error>` is
    /// that error; an Azure copy that fails or outlasts [`MAX_COPY_WAIT`] is
    /// [`ErrorKind::InternalError`].
    pub async fn copy(
        &self,
        to: (&str, &str),
        from: (&str, &str),
        source: &Conditions,
        destination: &Conditions,
        properties: CopiedProperties<'_>,
    ) -> Result<OriginCopy> {
        let mut headers = destination_condition_headers(self.is_azure(), destination);
        match self.config {
            OriginConfig::S3 { .. } => {
                self.copy_object(to, from, source, headers, properties)
                    .await
            }
            OriginConfig::Azure { .. } => {
                headers.extend(source_condition_headers("x-ms-source-", source));
                self.copy_blob(to, from, headers, properties).await
            }
        }
    }

    fn is_azure(&self) -> bool {
        matches!(self.config, OriginConfig::Azure { .. })
    }

    /// The copy request itself: an empty PUT of `to` with `headers`, answered 2xx.
    async fn put_copy(
        &self,
        to: (&str, &str),
        headers: &[(String, String)],
    ) -> Result<reqwest::Response> {
        let refs: Vec<(&str, String)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        let resp = self
            .send(
                Method::PUT,
                Some(to.0),
                Some(to.1),
                "",
                &refs,
                OriginBody::Empty,
            )
            .await?;
        check(resp).await
    }

    async fn copy_object(
        &self,
        to: (&str, &str),
        from: (&str, &str),
        source: &Conditions,
        mut headers: Vec<(String, String)>,
        properties: CopiedProperties<'_>,
    ) -> Result<OriginCopy> {
        names_checked(self, from)?;
        headers.extend(source_condition_headers("x-amz-copy-source-", source));
        headers.push((
            "x-amz-copy-source".into(),
            format!("/{}/{}", encode_strict(from.0), encode_path(from.1)),
        ));
        match properties {
            CopiedProperties::Source => {
                headers.push(("x-amz-metadata-directive".into(), "COPY".into()));
            }
            CopiedProperties::Replace(write) => {
                headers.push(("x-amz-metadata-directive".into(), "REPLACE".into()));
                headers.extend(write.iter().cloned());
            }
        }
        let resp = self.put_copy(to, &headers).await?;
        let body = read_capped(resp, MAX_COPY_RESULT_BODY).await?;
        let doc = String::from_utf8_lossy(&body);
        if doc.contains("<Error>") {
            // S3 may fail a copy after its 200 has started.
            let code = element(&doc, "Code").unwrap_or("InternalError");
            let message = element(&doc, "Message").unwrap_or("the copy failed");
            return Err(Error::new(
                ErrorKind::from_s3_code(code).unwrap_or(ErrorKind::InternalError),
                message.to_owned(),
            ));
        }
        let etag = element(&doc, "ETag")
            .map(|t| quote_etag(&unescape_etag(t.trim())))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InternalError,
                    "the origin answered a copy without an ETag",
                )
            })?;
        Ok(OriginCopy {
            etag,
            last_modified: element(&doc, "LastModified").and_then(parse_iso8601),
        })
    }

    async fn copy_blob(
        &self,
        to: (&str, &str),
        from: (&str, &str),
        mut headers: Vec<(String, String)>,
        properties: CopiedProperties<'_>,
    ) -> Result<OriginCopy> {
        // The source as the origin names it (with the origin's SAS, when it uses one):
        // in the same account, the destination's signature authorizes reading it.
        let (source_url, _) = self.url(Some(from.0), Some(from.1), "")?;
        headers.push(("x-ms-copy-source".into(), source_url));
        if let CopiedProperties::Replace(write) = properties {
            headers.extend(
                write
                    .iter()
                    .filter(|(k, _)| k.starts_with(super::AZURE_META_PREFIX))
                    .cloned(),
            );
        }
        let resp = self.put_copy(to, &headers).await?;
        let status_of = |r: &reqwest::Response| {
            r.headers()
                .get("x-ms-copy-status")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("success")
                .to_ascii_lowercase()
        };
        let last_modified = |r: &reqwest::Response| {
            r.headers()
                .get("last-modified")
                .and_then(|v| v.to_str().ok())
                .and_then(parse_http_date)
        };
        let mut status = status_of(&resp);
        let mut done = OriginCopy {
            last_modified: last_modified(&resp),
            etag: written_etag(resp, "Copy Blob")?,
        };
        let started = Instant::now();
        let mut pause = Duration::from_millis(50);
        while status == "pending" {
            if started.elapsed() > MAX_COPY_WAIT {
                return Err(Error::new(
                    ErrorKind::InternalError,
                    "the origin's copy did not finish in time",
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
            let resp = self
                .send(
                    Method::HEAD,
                    Some(to.0),
                    Some(to.1),
                    "",
                    &[],
                    OriginBody::Empty,
                )
                .await?;
            let resp = check(resp).await?;
            status = status_of(&resp);
            done = OriginCopy {
                last_modified: last_modified(&resp),
                etag: written_etag(resp, "Get Blob Properties")?,
            };
        }
        if status != "success" {
            return Err(Error::new(
                ErrorKind::InternalError,
                format!("the origin's copy ended '{status}'"),
            ));
        }
        Ok(done)
    }
}

/// The source's names pass the same checks as any name the client sends.
fn names_checked(client: &OriginClient, from: (&str, &str)) -> Result<()> {
    client.url(Some(from.0), Some(from.1), "").map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditional::EtagList;
    use std::time::UNIX_EPOCH;

    #[test]
    fn source_conditions_as_headers() {
        let c = Conditions {
            if_match: Some(EtagList::parse("\"a\", b")),
            if_none_match: Some(EtagList::Any),
            if_modified_since: Some(UNIX_EPOCH + Duration::from_secs(784_111_777)),
            if_unmodified_since: None,
        };
        assert_eq!(
            source_condition_headers("x-ms-source-", &c),
            vec![
                ("x-ms-source-if-match".to_owned(), "\"a\", \"b\"".to_owned()),
                ("x-ms-source-if-none-match".to_owned(), "*".to_owned()),
                (
                    "x-ms-source-if-modified-since".to_owned(),
                    "Sun, 06 Nov 1994 08:49:37 GMT".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn copy_results_are_read() {
        let doc = "<CopyObjectResult><LastModified>2026-01-02T03:04:05.000Z</LastModified><ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag></CopyObjectResult>";
        assert_eq!(
            element(doc, "ETag").map(unescape_etag).as_deref(),
            Some("\"9b2cf535f27731c974343645a3985328\"")
        );
        assert!(
            element(doc, "LastModified")
                .and_then(parse_iso8601)
                .is_some()
        );
        assert_eq!(element(doc, "Missing"), None);
    }
}
