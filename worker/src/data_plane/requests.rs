//! The request semantics of the data plane, shared by every plane: what a Ping, Stat,
//! ReadRange or Ingest means and what is answered. Nothing here knows how bytes move;
//! an answer is a [`Reply`] that the plane's writer sends (Layer 2 moves a file range).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use talon_core::cluster_auth::ClusterSecret;
use talon_core::wire::{
    ErrorReply, FrameHeader, HEADER_LEN, IngestAck, IngestMeta, ObjectHeaders, ReadRangeRequest,
    StatReply, StatRequest, encode_read_range_reply_header,
};
use talon_core::{ErrorCode, Message};

use crate::block_store::{Block, FillPlan};
use crate::error::{Result, WorkerError};
use crate::loader::{Durability, Loader, Prepared};
use crate::metrics::WorkerMetrics;
use crate::origins::StatCache;
use talon_protocols::origin::ObjectInfo;

/// What a request handler needs: the worker state every plane and every ring shares
/// (one `Arc`, not per-ring shards: the reference measured sharding and rejected it).
#[derive(Debug)]
pub struct Services {
    /// The cluster secret every peer proves it knows in the Hello exchange.
    pub secret: ClusterSecret,
    /// This worker's member id, named in its HelloReply and bound into both Hello
    /// proofs (empty for a standalone worker).
    pub worker_id: String,
    /// The miss path and the block store.
    pub loader: Arc<Loader>,
    /// Object metadata.
    pub stats: Arc<StatCache>,
    /// Counters.
    pub metrics: Arc<WorkerMetrics>,
}

/// One answer, sent in request order.
pub(crate) enum Reply {
    /// A whole control frame.
    Frame(Vec<u8>),
    /// A success header, then `len` bytes of the block file from `offset`.
    File {
        header: [u8; HEADER_LEN],
        /// Whether answering fetched bytes from the origin (the header says so too).
        from_origin: bool,
        block: Arc<Block>,
        offset: u64,
        len: u64,
        started: Instant,
    },
    /// A success header, then bytes from memory (reads that could not be cached).
    Bytes {
        header: [u8; HEADER_LEN],
        data: Bytes,
        started: Instant,
    },
    /// Close the connection after what came before.
    Close,
}

/// An error frame answering `request_id`.
pub(crate) fn error_frame(request_id: u32, code: ErrorCode, message: &str) -> Vec<u8> {
    Message::Error(ErrorReply::new(code, message))
        .encode(request_id)
        .unwrap_or_default()
}

/// The answer to a request that needs no waiting, or `None` when it does (a miss, a
/// Stat, a page not yet verified): then the plane runs [`handle`] as a task. This is
/// the hit path, run on the connection's own thread: a block lookup, one `fstat`, no
/// disk read, no origin, no task; and, for pages being written behind a fill's answer,
/// the fill's bytes.
pub(crate) fn answer_now(
    services: &Services,
    header: &FrameHeader,
    message: &Message,
) -> Option<Reply> {
    let id = header.request_id();
    match message {
        Message::Ping { nonce } => Some(Reply::Frame(
            Message::Pong { nonce: *nonce }
                .encode(id)
                .unwrap_or_default(),
        )),
        Message::ReadRange(req) if req.len > 0 && req.validate().is_ok() => {
            let started = Instant::now();
            let Some((block, from_origin)) = services.loader.try_hit(req) else {
                // Pages still being written behind a fill's answer are answered from
                // the fill's bytes here too, without a task or a disk hop.
                let header = encode_read_range_reply_header(id, req.len, true).ok()?;
                let data = services.loader.try_written_behind(req)?;
                services.metrics.written_behind_answer(data.len() as u64);
                return Some(Reply::Bytes {
                    header,
                    data,
                    started,
                });
            };
            let header = encode_read_range_reply_header(id, req.len, from_origin).ok()?;
            Some(Reply::File {
                header,
                from_origin,
                block,
                offset: req.offset,
                len: u64::from(req.len),
                started,
            })
        }
        _ => None,
    }
}

/// Answers one control request (Ping, Stat, ReadRange, Prefetch); anything else is
/// refused.
pub(crate) async fn handle(services: &Services, header: FrameHeader, message: Message) -> Reply {
    let id = header.request_id();
    let started = Instant::now();
    let result = match message {
        Message::Ping { nonce } => Ok(Reply::Frame(
            Message::Pong { nonce }.encode(id).unwrap_or_default(),
        )),
        Message::Stat(req) => {
            let r = stat(services, &req).await.map(|reply| {
                Reply::Frame(Message::StatReply(reply).encode(id).unwrap_or_default())
            });
            services.metrics.stat_done(started.elapsed());
            r
        }
        Message::ReadRange(req) => read_range(services, id, &req, started).await,
        // Answered at once; the fill (if any) runs in the background.
        Message::Prefetch(req) => Ok(Reply::Frame(
            Message::PrefetchAck(services.loader.prefetch(&req))
                .encode(id)
                .unwrap_or_default(),
        )),
        other => Err(WorkerError::InvalidRequest(format!(
            "{:?} is not a request",
            other.message_type()
        ))),
    };
    match result {
        Ok(reply) => reply,
        Err(e) => {
            services.metrics.error_frame();
            Reply::Frame(error_frame(id, e.frame_code(), &e.to_string()))
        }
    }
}

/// A pushed Ingest's bytes, staged: the first bytes, which arrived with the frame's
/// header into the connection's read buffer, and, for a longer push, a staging file
/// that already holds them and the rest (spliced from the socket).
pub(crate) struct Staged {
    /// The bytes read with the header (all of them when `file` is `None`).
    pub prefix: Vec<u8>,
    /// The staging file with every byte of the push, from offset 0.
    pub file: Option<std::fs::File>,
}

/// Receives a push into a staging file ([`crate::block_store::BlockStore::staging_file`]):
/// writes `prefix`, then splices `remaining` more bytes from `socket` behind it, by
/// `deadline`. Blocking: run it on the blocking pool.
///
/// # Errors
/// Creating or writing the staging file; the socket's errors: the peer closing early
/// (`UnexpectedEof`) or `deadline` passing (`TimedOut`).
pub(crate) fn receive_push(
    services: &Services,
    prefix: &[u8],
    socket: &impl std::os::fd::AsFd,
    remaining: u64,
    deadline: Instant,
) -> std::result::Result<std::fs::File, WorkerError> {
    use std::os::unix::fs::FileExt;
    let file = services.loader.store().staging_file()?;
    file.write_all_at(prefix, 0)
        .map_err(|e| WorkerError::io("writing a staging file", e))?;
    let offset = prefix.len() as u64;
    crate::zero_copy::splice_to_file(socket, &file, offset, remaining, deadline)
        .map_err(|e| WorkerError::io("receiving a push", e))?;
    Ok(file)
}

/// Answers a finished Ingest push: an IngestAck, or an error frame.
pub(crate) async fn handle_ingest(
    services: &Arc<Services>,
    header: FrameHeader,
    meta: IngestMeta,
    staged: Staged,
) -> Reply {
    match ingest_pages(services, &meta, staged).await {
        Ok(ack) => Reply::Frame(
            Message::IngestAck(ack)
                .encode(header.request_id())
                .unwrap_or_default(),
        ),
        Err(e) => {
            services.metrics.error_frame();
            Reply::Frame(error_frame(
                header.request_id(),
                e.frame_code(),
                &e.to_string(),
            ))
        }
    }
}

async fn stat(services: &Services, req: &StatRequest) -> Result<StatReply> {
    let max_age = req
        .max_age_ms
        .map(|ms| Duration::from_millis(u64::from(ms)));
    // The first read's bytes, widened to whole pages (within the first block).
    let page = services.loader.store().page_size();
    let first = req.first_read.filter(|f| f.block_size >= page).map(|f| {
        talon_protocols::range::ByteRange {
            start: f.start / page * page,
            end: f.end.div_ceil(page).saturating_mul(page).min(f.block_size),
        }
    });
    let block_size = req.first_read.map_or(0, |f| f.block_size);
    // Handed to the block before this answer and any joiner's (written behind them), so
    // the read that follows any of them finds the bytes.
    let keep = async |info: Arc<ObjectInfo>, bytes| {
        if let Err(e) = services
            .loader
            .keep_first_bytes(&req.object, &info, block_size, bytes)
            .await
        {
            tracing::debug!(object = %req.object, error = %e, "keeping a first read's bytes failed; the read will fill them");
        }
    };
    let (info, age, _) = services
        .stats
        .stat_keeping(&req.object, max_age, first, keep)
        .await?;
    let version = talon_core::ObjectVersion::from_etag(&info.etag)?;
    if let Some(expected) = &req.expected_version
        && expected != &version
    {
        return Err(WorkerError::Origin(talon_protocols::Error::new(
            talon_protocols::ErrorKind::PreconditionFailed,
            format!("the object is now at version {}", version.as_str()),
        )));
    }
    let last_modified_ms = info
        .last_modified
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let mut content_type = info.content_type.clone().unwrap_or_default();
    if content_type.len() > talon_core::wire::MAX_CONTENT_TYPE_LEN
        || content_type.chars().any(char::is_control)
    {
        content_type.clear();
    }
    Ok(StatReply {
        size: info.size,
        version,
        last_modified_ms,
        content_type,
        headers: ObjectHeaders::from_origin(info.headers.clone()),
        age_ms: req
            .max_age_ms
            .map(|_| u32::try_from(age.as_millis()).unwrap_or(u32::MAX)),
    }
    .fitted_to_frame())
}

async fn read_range(
    services: &Services,
    id: u32,
    req: &ReadRangeRequest,
    started: Instant,
) -> Result<Reply> {
    req.validate()?;
    if req.len == 0 {
        return Ok(Reply::Bytes {
            header: encode_read_range_reply_header(id, 0, false)?,
            data: Bytes::new(),
            started,
        });
    }
    match services
        .loader
        .prepare(req, Durability::WriteBehind)
        .await?
    {
        Prepared::Cached { block, from_origin } => Ok(Reply::File {
            header: encode_read_range_reply_header(id, req.len, from_origin)?,
            from_origin,
            block,
            offset: req.offset,
            len: u64::from(req.len),
            started,
        }),
        Prepared::Fetched(data) => {
            services.metrics.written_behind_answer(data.len() as u64);
            Ok(Reply::Bytes {
                header: encode_read_range_reply_header(id, req.len, true)?,
                data,
                started,
            })
        }
        Prepared::PassThrough(data) => Ok(Reply::Bytes {
            header: encode_read_range_reply_header(id, req.len, true)?,
            data,
            started,
        }),
        // Only a `KeptOnly` request is answered so; a read is not one.
        Prepared::NotKept => Err(WorkerError::Unavailable(
            "the bytes could not be cached".into(),
        )),
    }
}

/// Stores pushed bytes: whole pages (the last page of the block may be short), each
/// checksummed and made durable like a fill, from the staging file. Nothing is marked
/// present unless every page is written and synced; the staging file vanishes when
/// this returns.
async fn ingest_pages(
    services: &Arc<Services>,
    meta: &IngestMeta,
    staged: Staged,
) -> Result<IngestAck> {
    let services = services.clone();
    let meta = meta.clone();
    tokio::task::spawn_blocking(move || -> Result<IngestAck> {
        use std::os::unix::fs::FileExt;
        let file = match staged.file {
            Some(file) => file,
            None => {
                let file = services.loader.store().staging_file()?;
                file.write_all_at(&staged.prefix, 0)
                    .map_err(|e| WorkerError::io("writing a staging file", e))?;
                file
            }
        };
        let len = file
            .metadata()
            .map_err(|e| WorkerError::io("reading a staging file", e))?
            .len();
        meta.validate(len)?;
        let len = u32::try_from(len)
            .map_err(|_| WorkerError::InvalidRequest("the push is too long".into()))?;
        let store = services.loader.store().clone();
        let (id, size, offset) = (meta.block.clone(), meta.object_size, meta.offset);
        let block = store.get_or_create(&id, size)?;
        let pages = block.pages_for(offset, u64::from(len));
        let ack = IngestAck { offset, len };
        if pages.is_empty() {
            return Ok(ack);
        }
        let span = block.page_bytes(pages.start).start..block.page_bytes(pages.end - 1).end;
        if span.start != offset || span.end != offset + u64::from(len) {
            store.forget_if_empty(&block);
            return Err(WorkerError::InvalidRequest(
                "ingested bytes must cover whole pages".into(),
            ));
        }
        // Claim the pages like a fill, so a push never races a fetch of the same pages.
        let result = match block.plan(pages.clone(), pages.end, u32::MAX) {
            FillPlan::Ready => Ok(()),
            FillPlan::Fill {
                pages: claimed,
                done,
            } if claimed == pages => {
                let result = match store.reserve(&block, pages.clone()) {
                    Some(reservation) => {
                        store.commit_staged(&block, pages.clone(), &file, reservation)
                    }
                    None => Err(WorkerError::Unavailable(
                        "the ingest does not fit in the cache".into(),
                    )),
                };
                block.finish_fill(pages, done, Ok(()));
                result
            }
            FillPlan::Fill {
                pages: claimed,
                done,
            } => {
                block.finish_fill(claimed, done, Ok(()));
                Err(WorkerError::Unavailable(
                    "some of these pages are present or being filled; retry".into(),
                ))
            }
            FillPlan::Wait(_) => Err(WorkerError::Unavailable(
                "these pages are being filled; retry".into(),
            )),
        };
        if result.is_err() {
            store.forget_if_empty(&block);
        }
        result.map(|()| ack)
    })
    .await
    .map_err(|e| WorkerError::Unavailable(format!("a disk task failed: {e}")))?
}
