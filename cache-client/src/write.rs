//! Writing into the cache: a block or a small object pushed to its owners after the
//! origin stored it (write-through, the ingester role).

use super::*;
use crate::read::answer_error;

impl CacheClient {
    /// Pushes `data` into the cache as the bytes of `block` from `offset` (block
    /// coordinates), so that later reads of them are hits with no origin round trip:
    /// for a writer or a prefetcher that already holds exactly what the origin has at
    /// the block's version. The bytes must cover whole pages (the block's last page may
    /// be short). They go to the block's owner, where reads look first; pages already
    /// present there are kept as they are. Needs a client in the [`Role::Ingester`]
    /// role.
    ///
    /// # Errors
    /// [`CacheClientError::InvalidRequest`] for a client in another role;
    /// [`CacheClientError::Refused`] with the worker's code (a range that is not whole
    /// pages, no room, pages being filled); [`CacheClientError::Unavailable`] when the
    /// owner cannot be reached.
    pub async fn put_block(
        &self,
        block: &BlockId,
        object_size: u64,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<()> {
        if !self.inner.config.role.may_ingest() {
            return Err(CacheClientError::InvalidRequest(format!(
                "put_block needs a client in the ingester role, not {}",
                self.inner.config.role.name()
            )));
        }
        let meta = IngestMeta {
            block: block.clone(),
            object_size,
            offset,
        };
        meta.validate(data.len() as u64)
            .map_err(|e| CacheClientError::InvalidRequest(e.to_string()))?;
        let placement = self.placement();
        let owner = placement
            .locate_top_k(block, 1)
            .into_iter()
            .next()
            .map(|m| m.addr.clone())
            .ok_or_else(|| CacheClientError::Unavailable("no live worker".into()))?;
        let len = data.len() as u64;
        let request = Message::Ingest(IngestRequest { meta, data });
        let until = Instant::now() + self.inner.config.deadlines.workers_share;
        match self.ask_worker(&owner, &request, until, None).await? {
            Answer::Message(Message::IngestAck(ack))
                if ack.offset == offset && u64::from(ack.len) == len =>
            {
                Ok(())
            }
            other => Err(answer_error(other)),
        }
    }

    /// Pushes a whole object's bytes, `data`, at `version` into the cache, block by
    /// block ([`CacheClient::put_block`]): what a writer that has just stored the object
    /// at the origin does so that its own next read is a hit (read-your-writes).
    ///
    /// # Errors
    /// As [`CacheClient::put_block`], for the first block that fails (the blocks before
    /// it are cached; a cached block is only ever served for this version).
    pub async fn put_object(
        &self,
        object: &ObjectId,
        version: &ObjectVersion,
        data: &[u8],
    ) -> Result<()> {
        let block_size = self.inner.config.geometry.block_size();
        let size = data.len() as u64;
        let mut block_offset = 0u64;
        while block_offset < size {
            let end = (block_offset + block_size).min(size);
            let block = BlockId::new(object.clone(), version.clone(), block_offset, block_size)
                .map_err(|e| CacheClientError::InvalidRequest(e.to_string()))?;
            let bytes = data[block_offset as usize..end as usize].to_vec();
            self.put_block(&block, size, 0, bytes).await?;
            block_offset = end;
        }
        Ok(())
    }
}
