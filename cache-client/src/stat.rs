//! An object's metadata from the cluster: the stat a reader asks its owner for
//! ([`CacheClient::stat`]), answered from the owner's metadata cache or the origin.

use super::*;
use crate::read::answer_error;

/// An object's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectStat {
    /// Size in bytes.
    pub size: u64,
    /// The origin's version (ETag).
    pub version: ObjectVersion,
    /// Last modification, Unix milliseconds.
    pub last_modified_ms: i64,
    /// Content type (may be empty).
    pub content_type: String,
    /// Content-MD5, content headers and user metadata, or word that the origin
    /// must be asked for them.
    pub headers: ObjectHeaders,
    /// Whether the origin answered because no worker could (the read fell back).
    pub from_origin: bool,
    /// How long before the answer the origin said this: the worker's age for it when
    /// the request gave a max age, zero otherwise (and from a worker that does not
    /// say).
    pub age: Duration,
}

impl ObjectStat {
    /// The object's metadata as the origin client gives it ([`ObjectInfo`], the one
    /// metadata type from the origin to a client's answer), decoded from the wire's
    /// encoding here and nowhere else: the version quoted back into an ETag, a
    /// modification time of 0 as unknown, an empty content type as none. `None` when
    /// the headers did not travel (the origin must be asked for them).
    pub fn into_info(self) -> Option<ObjectInfo> {
        let ObjectHeaders::Carried(headers) = self.headers else {
            return None;
        };
        Some(ObjectInfo {
            size: self.size,
            etag: talon_protocols::conditional::quote_etag(self.version.as_str()),
            last_modified: u64::try_from(self.last_modified_ms)
                .ok()
                .filter(|ms| *ms > 0)
                .map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)),
            content_type: Some(self.content_type).filter(|c| !c.is_empty()),
            headers: *headers,
        })
    }
}

impl CacheClient {
    /// The object's metadata, from the worker that owns it, falling back to the next
    /// workers and (if configured) a HEAD at the origin.
    ///
    /// # Errors
    /// [`CacheClientError::Refused`] with `NotFound` for a missing object; transport
    /// failures as [`CacheClientError::Unavailable`].
    pub async fn stat(&self, object: &ObjectId) -> Result<ObjectStat> {
        self.stat_with(object, ReadOptions::default(), None).await
    }

    /// [`stat`](Self::stat), falling back to the origin only if `options` allow it, and
    /// accepting only metadata learned from the origin at most `max_age` ago (a worker
    /// holding older metadata revalidates it first; `None` leaves it to the worker's
    /// TTL).
    ///
    /// # Errors
    /// As [`stat`](Self::stat).
    pub async fn stat_with(
        &self,
        object: &ObjectId,
        options: ReadOptions,
        max_age: Option<Duration>,
    ) -> Result<ObjectStat> {
        self.stat_reading(object, options, max_age, None).await
    }

    /// [`stat_with`](Self::stat_with) for a reader about to read `next` (object
    /// bytes; its end may lie past the object's, which is not known yet): the
    /// metadata home is the owner of the object's first block, so when that worker
    /// must ask the origin it learns the metadata and the first piece of `next` from
    /// one GET and keeps the bytes, and the read that follows is a hit (one origin
    /// request for a cold read, not a HEAD and a GET). Only a `next` that starts in
    /// the first block and with a `max_age` is sent; the rest is the plain stat.
    ///
    /// # Errors
    /// As [`stat`](Self::stat).
    pub async fn stat_reading(
        &self,
        object: &ObjectId,
        options: ReadOptions,
        max_age: Option<Duration>,
        next: Option<Range<u64>>,
    ) -> Result<ObjectStat> {
        let placement = self.placement();
        let block_size = self.inner.config.geometry.block_size();
        // An object's metadata home is the owner of its first block (of any version).
        let key = BlockId::first_block_placement_key(object, block_size);
        let max_age_ms = max_age.map(|d| u32::try_from(d.as_millis()).unwrap_or(u32::MAX));
        // The first piece of `next`, as the read will ask for it.
        let piece = self
            .inner
            .config
            .max_request_bytes
            .clamp(1, u64::from(talon_core::wire::MAX_READ_LEN));
        let first_read = next
            .filter(|r| r.start < r.end && r.start < block_size && max_age_ms.is_some())
            .map(|r| FirstRead {
                block_size,
                start: r.start,
                end: r.end.min(r.start.saturating_add(piece)).min(block_size),
            });
        let request = Message::Stat(StatRequest {
            object: object.clone(),
            expected_version: None,
            max_age_ms,
            first_read,
        });
        let mut last = CacheClientError::Unavailable("no live worker".into());
        let attempts = self.inner.config.attempts.max(1);
        let mut owners = self.owners_to_ask(placement.locate_top_k_key(&key, attempts), options);
        let workers_until = Instant::now() + self.inner.config.deadlines.workers_share;
        while let Some(addr) = self.next_owner(&mut owners) {
            let answer = self.ask_worker(addr, &request, workers_until, None).await;
            self.note_health(addr, &answer);
            match answer {
                Ok(Answer::Message(Message::StatReply(r))) => {
                    return Ok(ObjectStat {
                        size: r.size,
                        version: r.version,
                        last_modified_ms: r.last_modified_ms,
                        content_type: r.content_type,
                        headers: r.headers,
                        from_origin: false,
                        age: Duration::from_millis(r.age_ms.map_or(0, u64::from)),
                    });
                }
                Ok(other) => match answer_error(other) {
                    e if e.is_transient() => last = e,
                    e => return Err(e),
                },
                Err(e) => last = e,
            }
        }
        self.spawn_refresh();
        let Some(origins) = self.fallback_origins(options) else {
            return Err(last);
        };
        let (client, bucket, key) = origins.route(object)?;
        let info = client.head(&bucket, &key).await?;
        let version = ObjectVersion::from_etag(&info.etag).map_err(|e| {
            CacheClientError::Unavailable(format!("the origin's version is unusable: {e}"))
        })?;
        Ok(ObjectStat {
            size: info.size,
            version,
            last_modified_ms: info
                .last_modified
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            content_type: info.content_type.unwrap_or_default(),
            headers: ObjectHeaders::from_origin(info.headers),
            from_origin: true,
            age: Duration::ZERO,
        })
    }
}

#[cfg(test)]
mod stat_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn stat(headers: ObjectHeaders, last_modified_ms: i64, content_type: &str) -> ObjectStat {
        ObjectStat {
            size: 42,
            version: ObjectVersion::from_etag("\"abc\"").unwrap(),
            last_modified_ms,
            content_type: content_type.into(),
            headers,
            from_origin: false,
            age: Duration::ZERO,
        }
    }

    #[test]
    fn a_stat_decodes_into_the_origins_metadata_and_none_stays_none() {
        let set = HeaderSet {
            cache_control: "no-cache".into(),
            ..HeaderSet::default()
        };
        let info = stat(
            ObjectHeaders::Carried(Box::new(set.clone())),
            1_000,
            "text/plain",
        )
        .into_info()
        .unwrap();
        assert_eq!(info.etag, "\"abc\"");
        assert_eq!(info.size, 42);
        assert_eq!(
            info.last_modified,
            Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1))
        );
        assert_eq!(info.content_type.as_deref(), Some("text/plain"));
        assert_eq!(info.headers, set);
        let unknown = stat(ObjectHeaders::Carried(Box::default()), 0, "")
            .into_info()
            .unwrap();
        assert_eq!((unknown.last_modified, unknown.content_type), (None, None));
        assert!(stat(ObjectHeaders::AskOrigin, 1, "x").into_info().is_none());
    }
}
