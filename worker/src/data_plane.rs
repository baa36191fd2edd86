//! Layer 1 of the data plane on Tokio: connections, 16-byte frames, pipelining.
//!
//! Each connection has a reader and a writer. The reader decodes frames and starts one
//! task per request; the writer sends the answers strictly in request order (requests
//! are pipelined: many in flight, answered in order; out-of-order multiplexing was
//! measured and rejected in the reference). A bounded queue between them caps the
//! requests in flight per connection, which is the backpressure on a client that sends
//! faster than it reads.
//!
//! A ReadRange answer is the 16-byte header (sent with `MSG_MORE`, so it shares a
//! segment with the payload) followed by exactly `len` bytes that Layer 2 moves from
//! the block file to the socket without a copy. When the bytes are all in the page
//! cache ([`is_resident`], the usual case for a hit), the writer drives non-blocking
//! [`sendfile_once`] calls from its own readiness loop, awaiting writability on Tokio
//! when the socket is full: no hand-off, no thread held by a slow reader. Otherwise
//! ([`send_file_range`]) the transfer runs on the blocking pool, on a duplicate of the
//! socket, because `sendfile` would wait for the disk: the reactor never does.
//! Errors are error frames; a failure after a success header has gone out closes the
//! connection, so a client never mistakes a short body for success. A connection limit,
//! a per-frame read timeout (the rest of a frame must arrive in time once its first byte
//! has), an idle timeout, and talon-core's per-type payload caps protect the worker from
//! slow or hostile peers; a bad frame gets an error frame and a closed connection, and
//! other connections carry on.

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use talon_core::cluster_auth::{ClusterSecret, HELLO_VERSION, HelloSide, NONCE_LEN, Nonce, Role};
use talon_core::wire::Frame;
use talon_core::wire::{BulkKind, Event, FrameDecoder};
use talon_core::wire::{
    ErrorReply, IngestAck, IngestMeta, ObjectHeaders, ReadRangeRequest, StatReply, StatRequest,
    encode_read_range_reply_header,
};
use talon_core::wire::{FrameHeader, HEADER_LEN};
use talon_core::{ErrorCode, Message};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};

use crate::block_store::{Block, FillPlan};
use crate::error::{Result, WorkerError};
use crate::loader::{Loader, Prepared};
use crate::metrics::WorkerMetrics;
use crate::origins::StatCache;
use crate::zero_copy::{is_resident, send_file_range, send_more, sendfile_once};

/// Limits of the data plane.
#[derive(Debug, Clone)]
pub struct DataPlaneConfig {
    /// Most open connections; more wait in the accept queue.
    pub max_connections: usize,
    /// Most requests in flight per connection.
    pub pipeline_depth: usize,
    /// Once a frame has started, the rest must arrive within this, measured from its
    /// first byte; the whole Hello exchange must finish within it too.
    pub frame_timeout: Duration,
    /// A connection with no frame in progress is closed after this.
    pub idle_timeout: Duration,
    /// A peer that stops reading a reply for this long loses its connection.
    pub write_stall_timeout: Duration,
}

impl Default for DataPlaneConfig {
    fn default() -> Self {
        DataPlaneConfig {
            max_connections: 4096,
            pipeline_depth: 64,
            frame_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            write_stall_timeout: Duration::from_secs(60),
        }
    }
}

/// What a request handler needs.
#[derive(Debug)]
pub struct Services {
    /// The cluster secret every peer proves it knows in the Hello exchange.
    pub secret: ClusterSecret,
    /// The miss path and the block store.
    pub loader: Arc<Loader>,
    /// Object metadata.
    pub stats: Arc<StatCache>,
    /// Counters.
    pub metrics: Arc<WorkerMetrics>,
}

/// One answer, in request order.
enum Reply {
    /// A whole control frame.
    Frame(Vec<u8>),
    /// A success header, then `len` bytes of the block file from `offset`.
    File {
        header: [u8; HEADER_LEN],
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

fn error_frame(request_id: u32, code: ErrorCode, message: &str) -> Vec<u8> {
    Message::Error(ErrorReply::new(code, message))
        .encode(request_id)
        .unwrap_or_default()
}

/// Serves the data plane on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    services: Arc<Services>,
    config: DataPlaneConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let limit = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let config = Arc::new(config);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let permit = tokio::select! {
            _ = shutdown.changed() => break,
            p = limit.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let (stream, peer) = tokio::select! {
            _ = shutdown.changed() => break,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
        };
        let (services, config, shutdown) = (services.clone(), config.clone(), shutdown.clone());
        connections.spawn(async move {
            services.metrics.connection(1);
            if let Err(e) = connection(stream, peer, &services, &config, shutdown).await {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
            services.metrics.connection(-1);
            drop(permit);
        });
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    // Drain: connections stop reading at shutdown and finish the answers they owe.
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(10), drain)
        .await
        .is_err()
    {
        tracing::warn!("data-plane connections still open after the drain timeout");
    }
}

async fn connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    services: &Arc<Services>,
    config: &Arc<DataPlaneConfig>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut decoder = FrameDecoder::new();
    let hello = tokio::time::timeout(
        config.frame_timeout,
        hello(&mut stream, &mut decoder, &services.secret),
    )
    .await;
    let (role, carried) = match hello {
        Ok(Ok(Some(done))) => done,
        Ok(Ok(None)) => {
            services.metrics.error_frame();
            return Ok(());
        }
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            let _ = stream
                .write_all(&error_frame(
                    0,
                    ErrorCode::Unauthenticated,
                    "the Hello exchange did not finish in time",
                ))
                .await;
            return Ok(());
        }
    };
    // A duplicate of the socket for sends on the blocking pool: it stays open while
    // such a transfer runs even if this connection's tasks are aborted meanwhile.
    let bulk_fd: Arc<OwnedFd> = Arc::new(stream.as_fd().try_clone_to_owned()?);
    let (rd, wr) = stream.into_split();
    let (queue, pending) = mpsc::channel::<oneshot::Receiver<Reply>>(config.pipeline_depth.max(1));
    // The writer dies with its connection: when this task is aborted (the worker is
    // aborted, or the drain timed out), the connection is cut, not answered to the end.
    let mut writer = AbortOnDrop(tokio::spawn(write_loop(
        wr,
        bulk_fd,
        pending,
        services.metrics.clone(),
        config.write_stall_timeout,
    )));
    let read_result = read_loop(
        rd, decoder, carried, role, queue, services, config, shutdown,
    )
    .await;
    match (&mut writer.0).await {
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "writer stopped"),
        Err(e) => tracing::warn!(%peer, error = %e, "writer task failed"),
        Ok(Ok(())) => {}
    }
    read_result
}

/// Aborts a task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reads bytes into `pending` until `decoder` yields a whole frame; `None` when the
/// peer closed first. Bytes after the frame stay in `pending`.
async fn next_frame(
    stream: &mut TcpStream,
    decoder: &mut FrameDecoder,
    pending: &mut Vec<u8>,
) -> std::io::Result<Option<std::result::Result<Frame, String>>> {
    let mut buf = [0u8; 1024];
    loop {
        let mut input = &pending[..];
        let outcome = match decoder.decode(&mut input) {
            Ok(Some(Event::Frame(frame))) => Some(Ok(frame)),
            Ok(Some(_)) => Some(Err("a bulk frame".to_owned())),
            Ok(None) => None,
            Err(e) => Some(Err(format!("bad frame: {e}"))),
        };
        let consumed = pending.len() - input.len();
        pending.drain(..consumed);
        if let Some(outcome) = outcome {
            return Ok(Some(outcome));
        }
        if pending.len() >= READ_BUFFER_BYTES {
            return Ok(Some(Err(
                "too many bytes before the Hello exchange ended".into()
            )));
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        pending.extend_from_slice(&buf[..n]);
    }
}

/// The worker's side of the Hello exchange ([`talon_core::cluster_auth`]): Hello, then
/// HelloReply with a fresh nonce and the worker's proof, then the peer's HelloProof,
/// then Welcome. Returns the peer's role and the bytes it sent after its proof (it may
/// pipeline requests at once). Anything else, or a wrong proof, is answered with an
/// Unauthenticated error frame and `None`: the caller closes the connection.
async fn hello(
    stream: &mut TcpStream,
    decoder: &mut FrameDecoder,
    secret: &ClusterSecret,
) -> std::io::Result<Option<(Role, Vec<u8>)>> {
    let mut pending = Vec::new();
    let refuse = |id: u32, why: &str| error_frame(id, ErrorCode::Unauthenticated, why);
    let (id, role, peer_nonce) = match next_frame(stream, decoder, &mut pending).await? {
        None => return Ok(None),
        Some(Ok(Frame {
            header,
            message:
                Message::Hello {
                    version: HELLO_VERSION,
                    role,
                    nonce,
                },
        })) => (header.request_id(), role, nonce),
        Some(Ok(Frame {
            header,
            message: Message::Hello { version, .. },
        })) => {
            let why = format!(
                "Hello version {version} is not supported (this worker speaks {HELLO_VERSION})"
            );
            stream
                .write_all(&error_frame(
                    header.request_id(),
                    ErrorCode::Unsupported,
                    &why,
                ))
                .await?;
            return Ok(None);
        }
        Some(Ok(frame)) => {
            let reply = refuse(frame.header.request_id(), "authenticate with Hello first");
            stream.write_all(&reply).await?;
            return Ok(None);
        }
        Some(Err(why)) => {
            stream.write_all(&refuse(0, &why)).await?;
            return Ok(None);
        }
    };
    let mut worker_nonce: Nonce = [0; NONCE_LEN];
    if getrandom::getrandom(&mut worker_nonce).is_err() {
        let reply = error_frame(id, ErrorCode::Internal, "no randomness for a nonce");
        stream.write_all(&reply).await?;
        return Ok(None);
    }
    let proof = secret.hello_proof(HelloSide::Worker, role, &peer_nonce, &worker_nonce);
    let reply = Message::HelloReply {
        nonce: worker_nonce,
        proof,
    }
    .encode(id)
    .unwrap_or_default();
    stream.write_all(&reply).await?;
    match next_frame(stream, decoder, &mut pending).await? {
        None => Ok(None),
        Some(Ok(Frame {
            header,
            message: Message::HelloProof { proof },
        })) => {
            if !secret.verify_hello_proof(HelloSide::Peer, role, &peer_nonce, &worker_nonce, &proof)
            {
                let reply = refuse(
                    header.request_id(),
                    "the Hello proof is wrong: another cluster secret",
                );
                stream.write_all(&reply).await?;
                return Ok(None);
            }
            let welcome = Message::Welcome
                .encode(header.request_id())
                .unwrap_or_default();
            stream.write_all(&welcome).await?;
            Ok(Some((role, pending)))
        }
        Some(Ok(frame)) => {
            let reply = refuse(frame.header.request_id(), "expected HelloProof");
            stream.write_all(&reply).await?;
            Ok(None)
        }
        Some(Err(why)) => {
            stream.write_all(&refuse(0, &why)).await?;
            Ok(None)
        }
    }
}

/// Queues a reply that is already known.
async fn push_now(queue: &mpsc::Sender<oneshot::Receiver<Reply>>, reply: Reply) -> bool {
    let (tx, rx) = oneshot::channel();
    let _ = tx.send(reply);
    queue.send(rx).await.is_ok()
}

/// Bytes read from a connection at a time. Requests are a few dozen bytes each (a
/// depth-16 pipeline is ~2 KiB), and the buffer lives as long as the connection, so it
/// stays small: at 64 KiB, 4,096 idle connections held 256 MiB.
const READ_BUFFER_BYTES: usize = 8 * 1024;

#[allow(clippy::too_many_arguments)]
async fn read_loop(
    mut rd: OwnedReadHalf,
    mut decoder: FrameDecoder,
    carried: Vec<u8>,
    role: Role,
    queue: mpsc::Sender<oneshot::Receiver<Reply>>,
    services: &Arc<Services>,
    config: &DataPlaneConfig,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; READ_BUFFER_BYTES.max(carried.len())];
    // What the peer pipelined behind its HelloProof is handled first.
    let mut carried_len = carried.len();
    buf[..carried_len].copy_from_slice(&carried);
    let mut ingest: Option<(FrameHeader, IngestMeta, Vec<u8>)> = None;
    // When the frame in progress began: its rest must arrive by then plus the frame
    // timeout, however slowly it dribbles in (SEC-11).
    let mut frame_started: Option<Instant> = None;
    loop {
        let wait = if decoder.is_idle() {
            frame_started = None;
            config.idle_timeout
        } else {
            let started = *frame_started.get_or_insert_with(Instant::now);
            config.frame_timeout.saturating_sub(started.elapsed())
        };
        let n = if carried_len > 0 {
            std::mem::take(&mut carried_len)
        } else {
            tokio::select! {
                _ = shutdown.changed() => return Ok(()),
                r = tokio::time::timeout(wait, rd.read(&mut buf)) => match r {
                    Err(_) => {
                        if !decoder.is_idle() {
                            push_now(&queue, Reply::Frame(error_frame(0, ErrorCode::Timeout, "the rest of the frame did not arrive in time"))).await;
                            push_now(&queue, Reply::Close).await;
                        }
                        return Ok(());
                    }
                    Ok(r) => r?,
                },
            }
        };
        if n == 0 {
            return Ok(());
        }
        let mut input = &buf[..n];
        loop {
            let event = match decoder.decode(&mut input) {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(e) => {
                    let reply = error_frame(0, e.code(), &format!("bad frame: {e}"));
                    push_now(&queue, Reply::Frame(reply)).await;
                    push_now(&queue, Reply::Close).await;
                    return Ok(());
                }
            };
            match event {
                Event::Frame(frame) => {
                    let (tx, rx) = oneshot::channel();
                    if queue.send(rx).await.is_err() {
                        return Ok(());
                    }
                    let services = services.clone();
                    tokio::spawn(async move {
                        let reply = handle(&services, frame.header, frame.message).await;
                        let _ = tx.send(reply);
                    });
                }
                Event::BulkStart(start) => match start.kind {
                    BulkKind::Ingest(_) if !role.may_ingest() => {
                        let reply = error_frame(
                            start.header.request_id(),
                            ErrorCode::Forbidden,
                            &format!("a peer in the {} role may not ingest", role.name()),
                        );
                        services.metrics.error_frame();
                        push_now(&queue, Reply::Frame(reply)).await;
                        push_now(&queue, Reply::Close).await;
                        return Ok(());
                    }
                    // The buffer grows with the bytes that arrive, not with what the
                    // header announces.
                    BulkKind::Ingest(meta) => ingest = Some((start.header, meta, Vec::new())),
                    BulkKind::ReadRangeReply => {
                        let reply = error_frame(
                            start.header.request_id(),
                            ErrorCode::InvalidRequest,
                            "a ReadRangeReply is not a request",
                        );
                        push_now(&queue, Reply::Frame(reply)).await;
                        push_now(&queue, Reply::Close).await;
                        return Ok(());
                    }
                },
                Event::BulkData(data) => {
                    if let Some((_, _, buf)) = &mut ingest {
                        buf.extend_from_slice(data);
                    }
                }
                Event::BulkEnd => {
                    if let Some((header, meta, data)) = ingest.take() {
                        let (tx, rx) = oneshot::channel();
                        if queue.send(rx).await.is_err() {
                            return Ok(());
                        }
                        let services = services.clone();
                        tokio::spawn(async move {
                            let reply = match ingest_pages(&services, &meta, data).await {
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
                            };
                            let _ = tx.send(reply);
                        });
                    }
                }
            }
        }
    }
}

/// Waits until the socket can take bytes again, at most `stall_timeout`.
async fn writable(stream: &TcpStream, stall_timeout: Duration) -> std::io::Result<()> {
    match tokio::time::timeout(stall_timeout, stream.writable()).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the peer stopped reading",
        )),
    }
}

/// Sends a reply header with `MSG_MORE` (it will share a segment with the payload).
async fn send_header(
    stream: &TcpStream,
    header: &[u8],
    stall_timeout: Duration,
) -> std::io::Result<()> {
    let mut sent = 0;
    while sent < header.len() {
        match stream.try_io(Interest::WRITABLE, || send_more(stream, &header[sent..])) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                writable(stream, stall_timeout).await?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Sends `len` bytes of `file` from `offset` with `sendfile`, waiting for writability
/// on the runtime (never on a blocked thread) when the socket buffer is full. Only for
/// bytes [`is_resident`] found in the page cache.
async fn send_file(
    stream: &TcpStream,
    file: &std::fs::File,
    offset: u64,
    len: u64,
    stall_timeout: Duration,
) -> std::io::Result<()> {
    let (mut pos, end) = (offset, offset + len);
    while pos < end {
        let want = end - pos;
        match stream.try_io(Interest::WRITABLE, || {
            sendfile_once(stream, file, &mut pos, want)
        }) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the block file ended after {} of {len} bytes", pos - offset),
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                writable(stream, stall_timeout).await?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn write_loop(
    mut wr: OwnedWriteHalf,
    bulk_fd: Arc<OwnedFd>,
    mut pending: mpsc::Receiver<oneshot::Receiver<Reply>>,
    metrics: Arc<WorkerMetrics>,
    stall_timeout: Duration,
) -> std::io::Result<()> {
    while let Some(next) = pending.recv().await {
        let Ok(reply) = next.await else {
            // The handler vanished (panicked): we cannot answer in order any more.
            break;
        };
        match reply {
            Reply::Frame(bytes) => wr.write_all(&bytes).await?,
            Reply::Bytes {
                header,
                data,
                started,
            } => {
                wr.write_all(&header).await?;
                wr.write_all(&data).await?;
                metrics.read_done(started.elapsed());
            }
            Reply::File {
                header,
                block,
                offset,
                len,
                started,
            } => {
                // After the header, any failure must close the connection: the client
                // would otherwise read the next frame as payload.
                if len == 0 {
                    // Nothing would follow to release a held-back header.
                    wr.write_all(&header).await?;
                } else {
                    send_header(wr.as_ref(), &header, stall_timeout).await?;
                    if is_resident(block.file(), offset, len) {
                        send_file(wr.as_ref(), block.file(), offset, len, stall_timeout).await?;
                    } else {
                        // sendfile would wait for the disk: not on this thread.
                        metrics.send_from_disk();
                        let fd = bulk_fd.clone();
                        tokio::task::spawn_blocking(move || {
                            send_file_range(&*fd, block.file(), offset, len, stall_timeout)
                        })
                        .await
                        .map_err(std::io::Error::other)??;
                    }
                }
                metrics.bytes_from_cache(len);
                metrics.read_done(started.elapsed());
            }
            Reply::Close => break,
        }
    }
    let _ = wr.shutdown().await;
    Ok(())
}

async fn handle(services: &Services, header: FrameHeader, message: Message) -> Reply {
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

async fn stat(services: &Services, req: &StatRequest) -> Result<StatReply> {
    let info = services.stats.stat(&req.object).await?;
    let version = talon_core::ObjectVersion::new(info.etag.clone())?;
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
    match services.loader.prepare(req).await? {
        Prepared::Cached { block, from_origin } => Ok(Reply::File {
            header: encode_read_range_reply_header(id, req.len, from_origin)?,
            block,
            offset: req.offset,
            len: u64::from(req.len),
            started,
        }),
        Prepared::PassThrough(data) => Ok(Reply::Bytes {
            header: encode_read_range_reply_header(id, req.len, true)?,
            data,
            started,
        }),
    }
}

/// Stores pushed bytes: whole pages (the last page of the block may be short), each
/// checked and made durable like a fill.
async fn ingest_pages(services: &Services, meta: &IngestMeta, data: Vec<u8>) -> Result<IngestAck> {
    meta.validate(data.len() as u64)?;
    let loader = services.loader.clone();
    let store = loader.store().clone();
    let (id, size, offset) = (meta.block.clone(), meta.object_size, meta.offset);
    let len = data.len() as u32;
    tokio::task::spawn_blocking(move || -> Result<()> {
        let block = store.get_or_create(&id, size)?;
        let pages = block.pages_for(offset, u64::from(len));
        if pages.is_empty() {
            return Ok(());
        }
        let span = block.page_bytes(pages.start).start..block.page_bytes(pages.end - 1).end;
        if span.start != offset || span.end != offset + u64::from(len) {
            return Err(WorkerError::InvalidRequest(
                "ingested bytes must cover whole pages".into(),
            ));
        }
        // Claim the pages like a fill, so a push never races a fetch of the same pages.
        match block.plan(pages.clone(), pages.end, u32::MAX) {
            FillPlan::Ready => Ok(()),
            FillPlan::Fill {
                pages: claimed,
                done,
            } if claimed == pages => {
                let result = match store.reserve(&block, pages.clone()) {
                    Some(reservation) => {
                        store.commit_fill(&block, pages.clone(), &data, reservation)
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
        }
    })
    .await
    .map_err(|e| WorkerError::Unavailable(format!("a disk task failed: {e}")))??;
    Ok(IngestAck {
        offset: meta.offset,
        len,
    })
}
