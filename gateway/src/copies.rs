//! Copies the gateway serves itself: CopyObject over an Azure origin and Copy Blob over
//! either origin (CopyObject over an S3 origin is relayed as it is). The origin copies
//! where it can do what the client asked; otherwise the bytes stream through the
//! gateway, pinned to the source version the conditions were checked against.
//!
//! An S3 origin's CopyObject does everything a copy asks. An Azure origin's Copy Blob
//! keeps the source's content properties (only metadata can be replaced), so a copy
//! that asks for other content properties (S3's `REPLACE` with a content type the
//! source does not have) is streamed: a GET of the source pinned with `If-Match` into
//! a PUT of the destination.

use futures_util::StreamExt as _;
use talon_protocols::Error;
use talon_protocols::conditional::{Conditions, EtagList, same_version};
use talon_protocols::origin::{
    CopiedProperties, ObjectInfo, OriginClient, OriginCopy, destination_condition_headers,
};
use talon_protocols::server::{CopySpec, Target, WriteSpec};

use crate::config::Backend;

/// How a copy over an Azure origin runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AzureCopyPath {
    /// Copy Blob at the origin.
    ServerSide,
    /// The bytes stream through the gateway.
    Streamed,
}

/// Whether Copy Blob can give the new blob what `replace` asks (`None`: the source's
/// properties): only when the content properties asked are the source's own.
pub fn azure_copy_path(source: &WriteSpec, replace: Option<&WriteSpec>) -> AzureCopyPath {
    match replace {
        None => AzureCopyPath::ServerSide,
        Some(asked) => {
            let mut keeps = source.clone();
            keeps.user_metadata = asked.user_metadata.clone();
            if asked.same_properties(&keeps) {
                AzureCopyPath::ServerSide
            } else {
                AzureCopyPath::Streamed
            }
        }
    }
}

/// The version of a copy's source at an origin that cannot evaluate the source's
/// conditions itself (Azure, for S3's `x-amz-copy-source-if-*`): one HEAD, the
/// conditions checked against it. The caller pins its read or copy to that version.
///
/// # Errors
/// The origin's error as a kind; [`talon_protocols::ErrorKind::PreconditionFailed`] for a failed
/// condition (a copy never answers 304).
pub async fn source_version(
    origin: &OriginClient,
    from: Target<'_>,
    conditions: &Conditions,
) -> Result<ObjectInfo, Error> {
    let source = origin.head(from.bucket, from.key).await?;
    conditions
        .check_read(
            &source.etag,
            source.last_modified.unwrap_or(std::time::UNIX_EPOCH),
        )
        .map_err(|_| Error::precondition_failed())?;
    Ok(source)
}

/// Copies `copy.from` to `to` at `origin` (its kind is `backend`).
///
/// # Errors
/// The origin's error as a kind; [`talon_protocols::ErrorKind::PreconditionFailed`] for a source
/// condition that fails (never 304) or a source that changed while it was copied.
pub async fn copy(
    origin: &OriginClient,
    backend: Backend,
    to: Target<'_>,
    copy: &CopySpec<'_>,
) -> Result<OriginCopy, Error> {
    let (dest, from) = ((to.bucket, to.key), (copy.from.bucket, copy.from.key));
    let headers = copy.replace.as_ref().map(|w| w.origin_headers(backend));
    let properties = match &headers {
        Some(h) => CopiedProperties::Replace(h),
        None => CopiedProperties::Source,
    };
    if backend == Backend::S3 {
        return origin
            .copy(
                dest,
                from,
                &copy.source_conditions,
                &copy.destination,
                properties,
            )
            .await;
    }
    // Azure: the conditions are checked against one version, and the copy is pinned to it.
    let source = source_version(origin, copy.from, &copy.source_conditions).await?;
    let pinned = Conditions {
        if_match: Some(EtagList::parse(&source.etag)),
        ..Conditions::default()
    };
    let source_properties = WriteSpec::properties_of(&source);
    match azure_copy_path(&source_properties, copy.replace.as_ref()) {
        AzureCopyPath::ServerSide => {
            origin
                .copy(dest, from, &pinned, &copy.destination, properties)
                .await
        }
        AzureCopyPath::Streamed => {
            let read = origin.get(from.0, from.1, None, Some(&source.etag)).await?;
            if !same_version(&read.info.etag, &source.etag) {
                return Err(Error::precondition_failed());
            }
            let conditions = destination_condition_headers(true, &copy.destination);
            let header_refs: Vec<(&str, String)> = headers
                .iter()
                .flatten()
                .chain(&conditions)
                .map(|(k, v)| (k.as_str(), v.clone()))
                .collect();
            let body = reqwest::Body::wrap_stream(
                read.body.map(|chunk| chunk.map_err(std::io::Error::other)),
            );
            let etag = origin
                .put_stream(dest.0, dest.1, body, read.info.size, &header_refs)
                .await?;
            Ok(OriginCopy {
                etag,
                last_modified: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(content_type: &str, meta: &[(&str, &str)]) -> WriteSpec {
        WriteSpec {
            content_type: Some(content_type.to_owned()),
            user_metadata: meta
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..WriteSpec::default()
        }
    }

    #[test]
    fn copy_blob_only_where_it_gives_what_was_asked() {
        let source = spec("text/plain", &[("a", "1")]);
        assert_eq!(azure_copy_path(&source, None), AzureCopyPath::ServerSide);
        // New metadata only: Copy Blob replaces metadata.
        let asked = spec("text/plain", &[("b", "2")]);
        assert_eq!(
            azure_copy_path(&source, Some(&asked)),
            AzureCopyPath::ServerSide
        );
        // Another content type, or a content header: streamed.
        let asked = spec("image/png", &[("a", "1")]);
        assert_eq!(
            azure_copy_path(&source, Some(&asked)),
            AzureCopyPath::Streamed
        );
        let mut asked = spec("text/plain", &[]);
        asked
            .content_headers
            .insert("cache-control".into(), "no-cache".into());
        assert_eq!(
            azure_copy_path(&source, Some(&asked)),
            AzureCopyPath::Streamed
        );
    }
}
