//! One connection of the data plane, whatever plane carries it: the Hello exchange,
//! frame decoding, pipelining, limits and timeouts, in-order replies. A plane provides
//! only how bytes move ([`SocketReader`], [`SocketWriter`]); everything a peer can
//! observe is decided here, once.
//!
//! Each connection runs a reader and a writer concurrently (joined in one task). The
//! reader decodes frames; a request that can be answered at once (a hit on verified
//! pages, a Ping) is queued answered, any other starts a Tokio task. The writer sends
//! the answers strictly in request order (requests are pipelined: many in flight,
//! answered in order; out-of-order multiplexing was measured and rejected in the
//! reference). A bounded queue between them caps the requests in flight per connection,
//! which is the backpressure on a client that sends faster than it reads.
//!
//! A ReadRange answer is the 16-byte header (sent with `MSG_MORE`, so it shares a
//! segment with the payload) followed by exactly `len` bytes that Layer 2 moves from the
//! block file to the socket without a copy. When the bytes are all in the page cache
//! ([`is_resident`], the usual case for a hit), the writer drives non-blocking
//! [`sendfile_once`] calls itself and waits for writability on its plane when the socket
//! is full: no hand-off, no thread held by a slow reader. Otherwise
//! ([`send_file_range`]) the transfer runs on the blocking pool, on a duplicate of the
//! socket, because `sendfile` would wait for the disk. Errors are error frames; a failure
//! after a success header has gone out closes the connection, so a client never mistakes
//! a short body for success. A per-frame deadline (the rest of a frame must arrive in
//! time once its first byte has), an idle timeout, a write-stall timeout and
//! talon-core's per-type payload caps protect the worker from slow or hostile peers; a
//! bad frame gets an error frame and a closed connection, and other connections carry on.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use talon_core::cluster_auth::{HELLO_VERSION, HelloSide, NONCE_LEN, Nonce, Role};
use talon_core::wire::{
    BulkKind, Event, FileHandoff, Frame, FrameDecoder, FrameHeader, HEADER_LEN, IngestMeta,
};
use talon_core::{ErrorCode, Message};
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot, watch};

use super::admission::Arriving;
use super::requests::{
    Reply, Services, Staged, answer_now, error_frame, handle, handle_ingest, receive_push,
};
use super::{DataPlaneConfig, Layer2};
use crate::metrics::WorkerMetrics;
use crate::zero_copy::{is_resident, send_file_range, sendfile_once};

/// Bytes read from a connection at a time. Requests are a few dozen bytes each (a
/// depth-16 pipeline is ~2 KiB), and the buffer lives as long as the connection, so it
/// stays small: at 64 KiB, 4,096 idle connections held 256 MiB.
pub(crate) const READ_BUFFER_BYTES: usize = 8 * 1024;

/// How a plane reads a connection's socket.
pub(crate) trait SocketReader {
    /// Reads into `buf`'s capacity (its old contents are dropped), waiting at most
    /// `timeout`. Returns the buffer back with the count `n` and the bytes read as its
    /// first `n` bytes: `Ok(0)` when the peer closed, an
    /// [`io::ErrorKind::TimedOut`] error when nothing came in time (the buffer may then
    /// be a new, empty one: the caller closes the connection).
    async fn read(&mut self, buf: Vec<u8>, timeout: Duration) -> (io::Result<usize>, Vec<u8>);
}

/// How a plane writes to a connection's socket: non-blocking system calls on its
/// descriptor, and a wait on the plane's event loop when the socket buffer is full.
pub(crate) trait SocketWriter {
    /// The socket (non-blocking).
    fn fd(&self) -> BorrowedFd<'_>;

    /// Runs `op`, a non-blocking write on [`SocketWriter::fd`] that fails with
    /// `WouldBlock` when the socket is full (Tokio must see that to clear its readiness).
    fn try_write(&self, op: &mut dyn FnMut() -> io::Result<usize>) -> io::Result<usize>;

    /// Waits until the socket can take bytes, at most `timeout` (then `TimedOut`).
    async fn writable(&self, timeout: Duration) -> io::Result<()>;

    /// Whether this connection answers a ReadRange of cached bytes with a FileHandoff
    /// (the block file's descriptor) instead of the bytes: only the local socket, whose
    /// peer shares this host.
    fn hands_off_files(&self) -> bool {
        false
    }

    /// Sends `len` bytes of `file` from `offset` with the plane's own asynchronous
    /// file read and socket send (the `uring` Layer 2: io_uring read + send on the
    /// rings); `None` when the plane has none (the caller copies instead).
    async fn send_file_read(
        &self,
        _file: &std::fs::File,
        _offset: u64,
        _len: u64,
        _stall: Duration,
    ) -> Option<io::Result<()>> {
        None
    }
}

/// Serves one accepted connection to its end: the Hello exchange, then requests until
/// the peer closes, a timeout or a bad frame ends it, or `shutdown` turns true (then the
/// answers owed are still sent). `bulk_fd` is a duplicate of the socket for sends on
/// the blocking pool: it stays open while such a transfer runs even if this
/// connection's future is dropped meanwhile.
pub(crate) async fn serve_connection<R: SocketReader, W: SocketWriter>(
    mut reader: R,
    writer: W,
    bulk_fd: Arc<OwnedFd>,
    arriving: Arriving,
    services: &Arc<Services>,
    config: &DataPlaneConfig,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let stall = config.write_stall_timeout;
    let mut decoder = FrameDecoder::new();
    let deadline = Instant::now() + config.frame_timeout.min(config.hello_timeout);
    // The place among the authenticated connections, held to the end.
    let (role, carried, _place) = match hello(
        &mut reader,
        &writer,
        &mut decoder,
        arriving,
        services,
        deadline,
        stall,
    )
    .await?
    {
        Some(done) => done,
        None => {
            services.metrics.error_frame();
            return Ok(());
        }
    };
    let (queue, pending) = mpsc::channel::<oneshot::Receiver<Reply>>(config.pipeline_depth.max(1));
    let read = read_loop(
        reader,
        decoder,
        carried,
        role,
        queue,
        services,
        config,
        shutdown,
        bulk_fd.clone(),
    );
    let write = write_loop(
        &writer,
        bulk_fd,
        pending,
        services.metrics.clone(),
        stall,
        config.layer2,
    );
    let (mut read, mut write) = (std::pin::pin!(read), std::pin::pin!(write));
    // When the reader ends first, the writer still sends every answer owed; when the
    // writer ends first (a Close, a stalled or vanished peer), nobody would answer what
    // the reader decodes next, so the connection ends.
    tokio::select! {
        read_result = &mut read => {
            if let Err(e) = write.await {
                tracing::debug!(error = %e, "writer stopped");
            }
            read_result
        }
        write_result = &mut write => {
            if let Err(e) = write_result {
                tracing::debug!(error = %e, "writer stopped");
            }
            Ok(())
        }
    }
}

/// Reads bytes into `pending` until `decoder` yields a whole frame; `None` when the
/// peer closed first. Bytes after the frame stay in `pending`. Times out at `deadline`.
async fn next_frame<R: SocketReader>(
    reader: &mut R,
    decoder: &mut FrameDecoder,
    pending: &mut Vec<u8>,
    deadline: Instant,
) -> io::Result<Option<Result<Frame, String>>> {
    let mut buf = Vec::with_capacity(1024);
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
        let left = deadline.saturating_duration_since(Instant::now());
        let (n, back) = reader.read(buf, left).await;
        buf = back;
        let n = n?;
        if n == 0 {
            return Ok(None);
        }
        pending.extend_from_slice(&buf[..n]);
    }
}

/// The worker's side of the Hello exchange ([`talon_core::cluster_auth`]): Hello, then
/// HelloReply with a fresh nonce, the worker's id and its proof (bound to that id),
/// then the peer's HelloProof (bound to it too), all before `deadline`; then, the proof
/// verified, the connection trades its `arriving` place for one among the
/// authenticated connections (waiting, unbounded, while all are taken) and is
/// welcomed. Returns the peer's role, the bytes it sent after its proof (it may
/// pipeline requests at once) and that place. Anything else, a wrong proof or a late
/// one is answered with an error frame and `None`: the caller closes.
async fn hello<R: SocketReader, W: SocketWriter>(
    reader: &mut R,
    writer: &W,
    decoder: &mut FrameDecoder,
    arriving: Arriving,
    services: &Services,
    deadline: Instant,
    stall: Duration,
) -> io::Result<Option<(Role, Vec<u8>, OwnedSemaphorePermit)>> {
    let secret = &services.secret;
    let mut pending = Vec::new();
    let refuse = |id: u32, why: &str| error_frame(id, ErrorCode::Unauthenticated, why);
    let late = || refuse(0, "the Hello exchange did not finish in time");
    let first = match next_frame(reader, decoder, &mut pending, deadline).await {
        Err(e) if e.kind() == io::ErrorKind::TimedOut => {
            write_all(writer, &late(), false, stall).await?;
            return Ok(None);
        }
        other => other?,
    };
    let (id, role, peer_nonce) = match first {
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
            let reply = error_frame(header.request_id(), ErrorCode::Unsupported, &why);
            write_all(writer, &reply, false, stall).await?;
            return Ok(None);
        }
        Some(Ok(frame)) => {
            let reply = refuse(frame.header.request_id(), "authenticate with Hello first");
            write_all(writer, &reply, false, stall).await?;
            return Ok(None);
        }
        Some(Err(why)) => {
            write_all(writer, &refuse(0, &why), false, stall).await?;
            return Ok(None);
        }
    };
    let mut worker_nonce: Nonce = [0; NONCE_LEN];
    if getrandom::getrandom(&mut worker_nonce).is_err() {
        let reply = error_frame(id, ErrorCode::Internal, "no randomness for a nonce");
        write_all(writer, &reply, false, stall).await?;
        return Ok(None);
    }
    let me = services.worker_id.as_str();
    let proof = secret.hello_proof(HelloSide::Worker, role, me, &peer_nonce, &worker_nonce);
    let reply = Message::HelloReply {
        nonce: worker_nonce,
        proof,
        worker: me.to_owned(),
    }
    .encode(id)
    .unwrap_or_default();
    write_all(writer, &reply, false, stall).await?;
    let second = match next_frame(reader, decoder, &mut pending, deadline).await {
        Err(e) if e.kind() == io::ErrorKind::TimedOut => {
            write_all(writer, &late(), false, stall).await?;
            return Ok(None);
        }
        other => other?,
    };
    let reply = match second {
        None => return Ok(None),
        Some(Ok(Frame {
            header,
            message: Message::HelloProof { proof },
        })) => {
            if secret.verify_hello_proof(
                HelloSide::Peer,
                role,
                me,
                &peer_nonce,
                &worker_nonce,
                &proof,
            ) {
                let Some(place) = arriving.authenticated().await else {
                    return Ok(None);
                };
                let welcome = Message::Welcome
                    .encode(header.request_id())
                    .unwrap_or_default();
                write_all(writer, &welcome, false, stall).await?;
                return Ok(Some((role, pending, place)));
            }
            refuse(
                header.request_id(),
                "the Hello proof is wrong: another cluster secret",
            )
        }
        Some(Ok(frame)) => refuse(frame.header.request_id(), "expected HelloProof"),
        Some(Err(why)) => refuse(0, &why),
    };
    write_all(writer, &reply, false, stall).await?;
    Ok(None)
}

/// Queues a reply that is already known.
async fn push_now(queue: &mpsc::Sender<oneshot::Receiver<Reply>>, reply: Reply) -> bool {
    let (tx, rx) = oneshot::channel();
    let _ = tx.send(reply);
    queue.send(rx).await.is_ok()
}

/// Queues an error frame and a close: the connection ends after what came before.
async fn push_fatal(queue: &mpsc::Sender<oneshot::Receiver<Reply>>, frame: Vec<u8>) {
    push_now(queue, Reply::Frame(frame)).await;
    push_now(queue, Reply::Close).await;
}

/// An Ingest push in progress: its header and metadata, and the bytes that came in
/// with them (at most one read buffer: the rest is spliced from the socket).
struct IngestInProgress {
    header: FrameHeader,
    meta: IngestMeta,
    prefix: Vec<u8>,
}

/// Starts answering a push that has all its bytes (in `staged`): queues its answer's
/// slot, then commits on a Tokio task. `false` when the writer has gone.
async fn queue_ingest(
    queue: &mpsc::Sender<oneshot::Receiver<Reply>>,
    services: &Arc<Services>,
    push: IngestInProgress,
    file: Option<std::fs::File>,
) -> bool {
    let (tx, rx) = oneshot::channel();
    if queue.send(rx).await.is_err() {
        return false;
    }
    let services = services.clone();
    tokio::spawn(async move {
        let staged = Staged {
            prefix: push.prefix,
            file,
        };
        let reply = handle_ingest(&services, push.header, push.meta, staged).await;
        let _ = tx.send(reply);
    });
    true
}

#[allow(clippy::too_many_arguments)]
async fn read_loop<R: SocketReader>(
    mut reader: R,
    mut decoder: FrameDecoder,
    carried: Vec<u8>,
    role: Role,
    queue: mpsc::Sender<oneshot::Receiver<Reply>>,
    services: &Arc<Services>,
    config: &DataPlaneConfig,
    mut shutdown: watch::Receiver<bool>,
    socket: Arc<OwnedFd>,
) -> io::Result<()> {
    let mut buf = Vec::with_capacity(READ_BUFFER_BYTES.max(carried.len()));
    // What the peer pipelined behind its HelloProof is handled first.
    let mut carried_len = carried.len();
    buf.extend_from_slice(&carried);
    let mut ingest: Option<IngestInProgress> = None;
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
            let read = tokio::select! {
                _ = shutdown.changed() => return Ok(()),
                r = reader.read(std::mem::take(&mut buf), wait) => r,
            };
            let (result, back) = read;
            buf = back;
            match result {
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    if !decoder.is_idle() {
                        let frame = error_frame(
                            0,
                            ErrorCode::Timeout,
                            "the rest of the frame did not arrive in time",
                        );
                        push_fatal(&queue, frame).await;
                    }
                    return Ok(());
                }
                r => r?,
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
                    let frame = error_frame(0, e.code(), &format!("bad frame: {e}"));
                    push_fatal(&queue, frame).await;
                    return Ok(());
                }
            };
            match event {
                Event::Frame(frame) => {
                    if let Some(reply) = answer_now(services, &frame.header, &frame.message) {
                        if !push_now(&queue, reply).await {
                            return Ok(());
                        }
                        continue;
                    }
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
                        let frame = error_frame(
                            start.header.request_id(),
                            ErrorCode::Forbidden,
                            &format!("a peer in the {} role may not ingest", role.name()),
                        );
                        services.metrics.error_frame();
                        push_fatal(&queue, frame).await;
                        return Ok(());
                    }
                    // The buffer grows with the bytes that arrive, not with what the
                    // header announces.
                    BulkKind::Ingest(meta) => {
                        ingest = Some(IngestInProgress {
                            header: start.header,
                            meta,
                            prefix: Vec::new(),
                        });
                    }
                    BulkKind::ReadRangeReply => {
                        let frame = error_frame(
                            start.header.request_id(),
                            ErrorCode::InvalidRequest,
                            "a ReadRangeReply is not a request",
                        );
                        push_fatal(&queue, frame).await;
                        return Ok(());
                    }
                },
                Event::BulkData(data) => {
                    if let Some(push) = &mut ingest {
                        push.prefix.extend_from_slice(data);
                    }
                }
                Event::BulkEnd => {
                    if let Some(push) = ingest.take()
                        && !queue_ingest(&queue, services, push, None).await
                    {
                        return Ok(());
                    }
                }
            }
        }
        // A push whose rest is still in the socket: splice it into a staging file on
        // the blocking pool (this reader reads nothing meanwhile), by the frame's
        // deadline. It never passes through this process's memory.
        if let Some(remaining) = decoder.bulk_remaining().filter(|&r| r > 0)
            && let Some(push) = ingest.take()
        {
            let started = *frame_started.get_or_insert_with(Instant::now);
            let deadline = started + config.frame_timeout;
            let IngestInProgress {
                header,
                meta,
                prefix,
            } = push;
            let (fd, task_services) = (socket.clone(), services.clone());
            let received = tokio::task::spawn_blocking(move || {
                receive_push(
                    &task_services,
                    &prefix,
                    &*fd,
                    u64::from(remaining),
                    deadline,
                )
            })
            .await
            .map_err(io::Error::other)?;
            let file = match received {
                Ok(file) => file,
                Err(e) => {
                    // Nothing is committed; the staging file is gone with its handle.
                    services.metrics.error_frame();
                    let frame = if e.is_timeout() {
                        error_frame(
                            header.request_id(),
                            ErrorCode::Timeout,
                            "the rest of the push did not arrive in time",
                        )
                    } else {
                        error_frame(header.request_id(), e.frame_code(), &e.to_string())
                    };
                    push_fatal(&queue, frame).await;
                    return Ok(());
                }
            };
            decoder.skip_bulk(remaining);
            let mut nothing: &[u8] = &[];
            if !matches!(decoder.decode(&mut nothing), Ok(Some(Event::BulkEnd))) {
                return Err(io::Error::other("the decoder did not end the push"));
            }
            // The staging file holds every byte, the prefix included.
            let push = IngestInProgress {
                header,
                meta,
                prefix: Vec::new(),
            };
            if !queue_ingest(&queue, services, push, Some(file)).await {
                return Ok(());
            }
        }
    }
}

/// Runs the non-blocking write `op` until it moves bytes (or fails otherwise),
/// waiting for writability at most `stall` at a time when the socket is full.
async fn write_when_ready<W: SocketWriter, F: FnMut() -> io::Result<usize>>(
    writer: &W,
    stall: Duration,
    mut op: F,
) -> io::Result<usize> {
    loop {
        match writer.try_write(&mut op) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => writer.writable(stall).await?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// Sends all of `bytes` (with `MSG_MORE` when `more`: the kernel holds them back to
/// share a segment with what follows), waiting for writability at most `stall` at a
/// time.
async fn write_all<W: SocketWriter>(
    writer: &W,
    bytes: &[u8],
    more: bool,
    stall: Duration,
) -> io::Result<()> {
    use rustix::net::SendFlags;
    let flags = if more {
        SendFlags::NOSIGNAL | SendFlags::MORE
    } else {
        SendFlags::NOSIGNAL
    };
    let mut sent = 0;
    while sent < bytes.len() {
        let op = || rustix::net::send(writer.fd(), &bytes[sent..], flags).map_err(io::Error::from);
        sent += write_when_ready(writer, stall, op).await?;
    }
    Ok(())
}

/// Sends `len` bytes of `file` from `offset` with `sendfile`, waiting for writability
/// on the plane (never on a blocked thread) when the socket buffer is full. Only for
/// bytes [`is_resident`] found in the page cache.
async fn send_file<W: SocketWriter>(
    writer: &W,
    file: &std::fs::File,
    offset: u64,
    len: u64,
    stall: Duration,
) -> io::Result<()> {
    let (mut pos, end) = (offset, offset + len);
    while pos < end {
        let want = end - pos;
        let op = || sendfile_once(&writer.fd(), file, &mut pos, want);
        if write_when_ready(writer, stall, op).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the block file ended after {} of {len} bytes", pos - offset),
            ));
        }
    }
    Ok(())
}

/// Bytes the copy strategy reads and sends at a time.
const COPY_CHUNK: usize = 256 * 1024;

/// Sends `len` bytes of `file` from `offset` by reading them into `buf` (`pread`, from
/// the page cache: only for bytes [`is_resident`] found there) and sending the copy.
async fn send_copied<W: SocketWriter>(
    writer: &W,
    file: &std::fs::File,
    offset: u64,
    len: u64,
    stall: Duration,
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let (mut pos, end) = (offset, offset + len);
    while pos < end {
        let want = usize::try_from(end - pos)
            .unwrap_or(COPY_CHUNK)
            .min(COPY_CHUNK);
        buf.resize(want, 0);
        let n = file.read_at(&mut buf[..want], pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the block file ended after {} of {len} bytes", pos - offset),
            ));
        }
        write_all(writer, &buf[..n], pos + (n as u64) < end, stall).await?;
        pos += n as u64;
    }
    Ok(())
}

/// Sends resident bytes the way `layer2` says (the `uring` strategy copies on a plane
/// that has no asynchronous file reads of its own).
async fn send_resident<W: SocketWriter>(
    writer: &W,
    layer2: Layer2,
    file: &std::fs::File,
    offset: u64,
    len: u64,
    stall: Duration,
    copy_buf: &mut Vec<u8>,
) -> io::Result<()> {
    match layer2 {
        Layer2::Sendfile => return send_file(writer, file, offset, len, stall).await,
        Layer2::Uring => {
            if let Some(sent) = writer.send_file_read(file, offset, len, stall).await {
                return sent;
            }
        }
        Layer2::Copy => {}
    }
    send_copied(writer, file, offset, len, stall, copy_buf).await
}

/// Answers a ReadRange of cached bytes on the local socket: a FileHandoff frame with
/// a read-only descriptor of the block file attached (`SCM_RIGHTS`). `Ok(false)` when
/// no descriptor can be had: the caller sends the bytes instead, which the peer also
/// accepts. The pages were checked present and verified when the answer was made; the
/// file's present pages are never rewritten, and eviction only unlinks it, so the peer
/// reads exactly those bytes through the descriptor however long it keeps it.
async fn hand_off<W: SocketWriter>(
    writer: &W,
    header: &[u8; HEADER_LEN],
    from_origin: bool,
    block: &crate::block_store::Block,
    offset: u64,
    len: u64,
    stall: Duration,
) -> io::Result<bool> {
    use std::mem::MaybeUninit;
    use std::os::fd::AsFd;

    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let file = match block.read_only_file() {
        Ok(file) => file,
        Err(e) => {
            tracing::warn!(block = %block.name, error = %e, "no read-only descriptor to hand off; sending the bytes");
            return Ok(false);
        }
    };
    let request_id = FrameHeader::decode(header)
        .map_err(|e| io::Error::other(e.to_string()))?
        .request_id();
    let frame = Message::FileHandoff(FileHandoff {
        offset,
        len: u32::try_from(len).map_err(|_| io::Error::other("a handoff over 4 GiB"))?,
        from_origin,
    })
    .encode(request_id)
    .map_err(|e| io::Error::other(e.to_string()))?;
    // The descriptor rides with the frame's first byte; a partial send leaves the
    // rest for plain sends.
    let fds = [file.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let sent = write_when_ready(writer, stall, || {
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(io::Error::other("no room for the descriptor"));
        }
        let iov = [io::IoSlice::new(&frame)];
        rustix::net::sendmsg(writer.fd(), &iov, &mut control, SendFlags::NOSIGNAL)
            .map_err(io::Error::from)
    })
    .await?;
    write_all(writer, &frame[sent..], false, stall).await?;
    Ok(true)
}

async fn write_loop<W: SocketWriter>(
    writer: &W,
    bulk_fd: Arc<OwnedFd>,
    mut pending: mpsc::Receiver<oneshot::Receiver<Reply>>,
    metrics: Arc<WorkerMetrics>,
    stall: Duration,
    layer2: Layer2,
) -> io::Result<()> {
    // The copy strategy's buffer, grown on first use and kept for the connection.
    let mut copy_buf = Vec::new();
    let result = async {
        while let Some(next) = pending.recv().await {
            let Ok(reply) = next.await else {
                // The handler vanished (panicked): we cannot answer in order any more.
                break;
            };
            match reply {
                Reply::Frame(bytes) => write_all(writer, &bytes, false, stall).await?,
                Reply::Bytes {
                    header,
                    data,
                    started,
                } => {
                    write_all(writer, &header, !data.is_empty(), stall).await?;
                    write_all(writer, &data, false, stall).await?;
                    metrics.read_done(started.elapsed());
                }
                Reply::File {
                    header,
                    from_origin,
                    block,
                    offset,
                    len,
                    started,
                } => {
                    if writer.hands_off_files() {
                        match hand_off(writer, &header, from_origin, &block, offset, len, stall)
                            .await
                        {
                            Ok(true) => {
                                metrics.file_handoff(len);
                                metrics.read_done(started.elapsed());
                                continue;
                            }
                            Ok(false) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    // After the header, any failure must close the connection: the
                    // client would otherwise read the next frame as payload.
                    write_all(writer, &header, len > 0, stall).await?;
                    if len > 0 {
                        if is_resident(block.file(), offset, len) {
                            send_resident(
                                writer,
                                layer2,
                                block.file(),
                                offset,
                                len,
                                stall,
                                &mut copy_buf,
                            )
                            .await?;
                        } else {
                            // sendfile would wait for the disk: not on this thread.
                            metrics.send_from_disk();
                            let fd = bulk_fd.clone();
                            tokio::task::spawn_blocking(move || {
                                send_file_range(&*fd, block.file(), offset, len, stall)
                            })
                            .await
                            .map_err(io::Error::other)??;
                        }
                    }
                    metrics.bytes_from_cache(len);
                    metrics.read_done(started.elapsed());
                }
                Reply::Close => break,
            }
        }
        Ok(())
    }
    .await;
    // Whatever ended the writer, the peer sees the end of the stream now (the reader
    // may still be waiting for its next frame).
    let _ = rustix::net::shutdown(writer.fd(), rustix::net::Shutdown::Write);
    result
}
