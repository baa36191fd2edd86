//! Driving a worker over Talon's wire protocol.
//!
//! Each connection has a writer task and a reader task. The writer sends
//! ReadRange requests (batched into one `write` when several are due) and,
//! *before* writing, hands each request's id, length and times to the
//! reader. The reader decodes frames as they arrive and completes the
//! in-flight entry whose request id the reply echoes; it never waits for
//! "reply number i", so it is never the thing that serialises a pipelined
//! connection. A semaphore of `depth` permits bounds what is in flight.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use talon_core::cluster_auth::{ClusterSecret, Role};

use talon_core::wire::{BulkKind, Event, FrameDecoder, MessageType, ReadRangeRequest, StatRequest};
use talon_core::{BlockId, Message, ObjectId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::time::Instant;

use crate::error::{LoadError, Result};
use crate::schedule::Pacer;
use crate::stats::{Recorder, Samples, Timing};

/// Bytes read from the socket at a time by the set-up connection, and at
/// most by a load connection.
const READ_BUF: usize = 256 << 10;

/// Smallest read buffer of a load connection.
const MIN_READ_BUF: usize = 32 << 10;

/// Read buffers of all load connections together stay near this (1024
/// connections get 64 KiB each rather than 256 MiB in all).
const READ_BUF_BUDGET: usize = 64 << 20;

/// Most bytes one prefetch request asks for.
const PREFETCH_CHUNK: u64 = 4 << 20;

/// Opens a connection with `TCP_NODELAY`.
pub(crate) async fn connect(addr: &str, timeout: Duration) -> Result<TcpStream> {
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(error)) => {
            return Err(LoadError::Connect {
                addr: addr.to_owned(),
                error,
            });
        }
        Err(_) => {
            return Err(LoadError::ConnectTimeout {
                addr: addr.to_owned(),
                secs: timeout.as_secs_f64(),
            });
        }
    };
    stream.set_nodelay(true).map_err(|error| LoadError::Io {
        what: format!("setting TCP_NODELAY on a connection to {addr}"),
        error,
    })?;
    Ok(stream)
}

/// Opens a connection to a worker and authenticates as a reader (the Hello exchange);
/// the load runs on authenticated connections, as the cache client's do.
pub(crate) async fn connect_worker(
    addr: &str,
    secret: &ClusterSecret,
    timeout: Duration,
) -> Result<TcpStream> {
    let mut stream = connect(addr, timeout).await?;
    talon_cache_client::hello::authenticate(&mut stream, secret, Role::Reader, None, timeout)
        .await
        .map_err(|e| LoadError::Io {
            what: format!("authenticating to {addr}"),
            error: std::io::Error::other(e.to_string()),
        })?;
    Ok(stream)
}

/// A ReadRange frame for one block, encoded once; each request patches the
/// request id and the offset into a copy instead of re-encoding the block
/// id (which holds the object's names and version).
#[derive(Debug, Clone)]
pub(crate) struct RequestTemplate {
    frame: Vec<u8>,
    /// Bytes of the block (the last block of an object may be short).
    pub(crate) block_len: u64,
}

impl RequestTemplate {
    /// The template for `len`-byte reads of `block` of an object of
    /// `object_size` bytes. Checks the patching against the codec, so a
    /// change of the payload layout fails here rather than sending garbage.
    pub(crate) fn new(block: BlockId, object_size: u64, len: u32) -> Result<Self> {
        let block_len = block.len_in(object_size);
        let request = ReadRangeRequest {
            block,
            object_size,
            offset: 0,
            len,
        };
        let frame = Message::ReadRange(request.clone())
            .encode(0)
            .map_err(|e| LoadError::Config(format!("cannot encode a ReadRange: {e}")))?;
        let template = Self { frame, block_len };
        // Self-check: a patched frame must decode to the request it claims.
        let offset = block_len.saturating_sub(u64::from(len));
        let mut probe = Vec::new();
        template.append(&mut probe, 0x0102_0304, offset);
        let want = ReadRangeRequest { offset, ..request };
        let ok = decode_one(&probe)
            .is_some_and(|(id, m)| id == 0x0102_0304 && m == Message::ReadRange(want.clone()));
        if !ok {
            return Err(LoadError::Config(
                "the ReadRange payload layout is not the one talon-loadgen patches \
                 (block id, object size, offset u64, len u32 last)"
                    .into(),
            ));
        }
        Ok(template)
    }

    /// Appends the frame for request `id` at `offset` within the block.
    pub(crate) fn append(&self, out: &mut Vec<u8>, id: u32, offset: u64) {
        let start = out.len();
        out.extend_from_slice(&self.frame);
        let frame = &mut out[start..];
        frame[8..12].copy_from_slice(&id.to_be_bytes());
        let n = frame.len();
        frame[n - 12..n - 4].copy_from_slice(&offset.to_be_bytes());
    }
}

/// Decodes exactly one control frame (for the template self-check).
fn decode_one(bytes: &[u8]) -> Option<(u32, Message)> {
    let mut decoder = FrameDecoder::new();
    let mut input = bytes;
    match decoder.decode(&mut input) {
        Ok(Some(Event::Frame(f))) if input.is_empty() => Some((f.header.request_id(), f.message)),
        _ => None,
    }
}

/// A reply on a connection used one request at a time.
enum Reply {
    Control(u32, Message),
    Bulk(u32, u64),
}

/// One request, one reply: the set-up conversation (stat and prefetch).
struct SerialConn {
    stream: TcpStream,
    addr: String,
    decoder: FrameDecoder,
    buf: Vec<u8>,
}

impl SerialConn {
    async fn request(&mut self, message: &Message, id: u32, timeout: Duration) -> Result<Reply> {
        let frame = message
            .encode(id)
            .map_err(|e| LoadError::Config(format!("cannot encode the request: {e}")))?;
        let io = |what: &str, error| LoadError::Io {
            what: format!("{what} {}", self.addr),
            error,
        };
        self.stream
            .write_all(&frame)
            .await
            .map_err(|e| io("writing to", e))?;
        let deadline = Instant::now() + timeout;
        let mut bulk: Option<(u32, u32, u64)> = None;
        loop {
            let n = tokio::time::timeout_at(deadline, self.stream.read(&mut self.buf))
                .await
                .map_err(|_| LoadError::Server(format!("{} did not answer in time", self.addr)))?
                .map_err(|e| io("reading from", e))?;
            if n == 0 {
                return Err(LoadError::Server(format!(
                    "{} closed the connection before answering",
                    self.addr
                )));
            }
            let mut input = &self.buf[..n];
            while let Some(event) = self
                .decoder
                .decode(&mut input)
                .map_err(|e| LoadError::Server(format!("undecodable reply: {e}")))?
            {
                let done = match event {
                    Event::Frame(f) => Some(Reply::Control(f.header.request_id(), f.message)),
                    Event::BulkStart(b) => {
                        if b.kind != BulkKind::ReadRangeReply {
                            return Err(LoadError::Server(
                                "the server sent an Ingest frame".into(),
                            ));
                        }
                        bulk = Some((b.header.request_id(), b.len, 0));
                        None
                    }
                    Event::BulkData(d) => {
                        if let Some(b) = &mut bulk {
                            b.2 += d.len() as u64;
                        }
                        None
                    }
                    Event::BulkEnd => bulk.take().map(|(id, len, got)| {
                        if got == u64::from(len) {
                            Reply::Bulk(id, got)
                        } else {
                            Reply::Bulk(id, u64::MAX)
                        }
                    }),
                };
                if let Some(reply) = done {
                    if !input.is_empty() {
                        return Err(LoadError::Server(
                            "the server sent more than one reply to one request".into(),
                        ));
                    }
                    return Ok(reply);
                }
            }
        }
    }
}

/// What [`prepare`] learned about the object.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub(crate) object_size: u64,
    pub(crate) templates: Vec<RequestTemplate>,
}

/// Stats the object, builds one request template per block read, and with
/// `prefetch` reads each of those blocks end to end once.
#[allow(clippy::too_many_arguments)] // each is one of the run's settings
pub(crate) async fn prepare(
    addr: &str,
    secret: &ClusterSecret,
    object: &ObjectId,
    block_size: u64,
    blocks: u64,
    range_size: u32,
    prefetch: bool,
    timeout: Duration,
) -> Result<Prepared> {
    let stream = connect_worker(addr, secret, timeout).await?;
    let mut conn = SerialConn {
        stream,
        addr: addr.to_owned(),
        decoder: FrameDecoder::new(),
        buf: vec![0; READ_BUF],
    };
    let key = object.key_path();
    let stat = Message::Stat(StatRequest {
        object: object.clone(),
        expected_version: None,
        max_age_ms: None,
        first_read: None,
    });
    let reply = conn.request(&stat, 1, Duration::from_secs(30)).await?;
    let (object_size, version) = match reply {
        Reply::Control(1, Message::StatReply(r)) => (r.size, r.version),
        Reply::Control(id, Message::Error(e)) => {
            return Err(LoadError::Server(format!(
                "stat {key} at {addr} (request {id}): the worker answered {}: {}",
                e.code, e.message
            )));
        }
        Reply::Control(id, m) => {
            return Err(LoadError::Server(format!(
                "stat {key} at {addr}: expected a StatReply to request 1, got {:?} for request {id}",
                m.message_type()
            )));
        }
        Reply::Bulk(id, _) => {
            return Err(LoadError::Server(format!(
                "stat {key} at {addr}: expected a StatReply, got a ReadRangeReply for request {id}"
            )));
        }
    };
    let available = object_size.div_ceil(block_size);
    if available < blocks {
        return Err(LoadError::Config(format!(
            "{key} is {object_size} bytes: {available} block(s) of {block_size} bytes, \
             fewer than --blocks {blocks}"
        )));
    }
    let mut templates = Vec::new();
    for i in 0..blocks {
        let block = BlockId::new(object.clone(), version.clone(), i * block_size, block_size)
            .map_err(|e| LoadError::Config(format!("block {i}: {e}")))?;
        let t = RequestTemplate::new(block, object_size, range_size)?;
        if t.block_len < u64::from(range_size) {
            return Err(LoadError::Config(format!(
                "block {i} of {key} holds {} bytes, fewer than --range-size {range_size}",
                t.block_len
            )));
        }
        templates.push(t);
    }
    if prefetch {
        let mut id = 2;
        for (i, t) in templates.iter().enumerate() {
            let mut offset = 0;
            while offset < t.block_len {
                let len = (t.block_len - offset).min(PREFETCH_CHUNK) as u32;
                let block = BlockId::new(
                    object.clone(),
                    version.clone(),
                    i as u64 * block_size,
                    block_size,
                )
                .map_err(|e| LoadError::Config(format!("block {i}: {e}")))?;
                let message = Message::ReadRange(ReadRangeRequest {
                    block,
                    object_size,
                    offset,
                    len,
                });
                match conn.request(&message, id, Duration::from_secs(120)).await? {
                    Reply::Bulk(got_id, got) if got_id == id && got == u64::from(len) => {}
                    Reply::Control(_, Message::Error(e)) => {
                        return Err(LoadError::Server(format!(
                            "prefetching block {i} bytes {offset}+{len}: the worker answered {}: {}",
                            e.code, e.message
                        )));
                    }
                    _ => {
                        return Err(LoadError::Server(format!(
                            "prefetching block {i} bytes {offset}+{len}: a wrong reply \
                             (request id, type or length)"
                        )));
                    }
                }
                offset += u64::from(len);
                id += 1;
            }
        }
    }
    Ok(Prepared {
        object_size,
        templates,
    })
}

/// What the connections of a run share.
pub(crate) struct WireCtx {
    pub(crate) addr: String,
    pub(crate) templates: Vec<RequestTemplate>,
    pub(crate) range_size: u32,
    pub(crate) align: u64,
    pub(crate) depth: usize,
    pub(crate) conns: usize,
    pub(crate) seed: u64,
    pub(crate) recorder: Arc<Recorder>,
}

/// A request the writer sent and the reader awaits.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    id: u32,
    offset: u64,
    block: usize,
    intended: Instant,
    ready: Instant,
    sent: Instant,
}

/// When the reader last freed an in-flight slot, in nanoseconds since the
/// run's start: the writer's bound on when a due request could have gone out.
struct LastRelease {
    origin: Instant,
    nanos: AtomicU64,
}

impl LastRelease {
    fn mark(&self, at: Instant) {
        let n =
            u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_max(n, Ordering::Release);
    }

    fn get(&self) -> Instant {
        self.origin + Duration::from_nanos(self.nanos.load(Ordering::Acquire))
    }
}

/// Runs one connection until its pacer has nothing more to send and every
/// reply is in, or it fails.
pub(crate) async fn run_connection(
    ctx: Arc<WireCtx>,
    stream: TcpStream,
    pacer: Pacer,
    conn: usize,
) {
    let (r, w) = stream.into_split();
    let sem = Arc::new(Semaphore::new(ctx.depth));
    let (tx, rx) = mpsc::unbounded_channel();
    let (fail_tx, fail_rx) = oneshot::channel();
    let deadline = pacer.times().drain_deadline;
    let window = (pacer.times().warm_end, pacer.times().end);
    let released = Arc::new(LastRelease {
        origin: pacer.times().start,
        nanos: AtomicU64::new(0),
    });
    let writer = tokio::spawn(writer(
        ctx.clone(),
        w,
        sem.clone(),
        released.clone(),
        tx,
        fail_tx,
        pacer,
        conn,
    ));
    reader(&ctx, r, &sem, &released, rx, fail_rx, deadline, window).await;
    // The writer hands its half back rather than dropping it: dropping a
    // write half shuts the socket's sending side down, and a server may take
    // that end-of-stream as a reason to stop answering what is in flight.
    drop(writer.await);
}

#[allow(clippy::too_many_arguments)]
async fn writer(
    ctx: Arc<WireCtx>,
    mut w: OwnedWriteHalf,
    sem: Arc<Semaphore>,
    released: Arc<LastRelease>,
    tx: mpsc::UnboundedSender<InFlight>,
    fail_tx: oneshot::Sender<String>,
    mut pacer: Pacer,
    conn: usize,
) -> OwnedWriteHalf {
    let mut rng = fastrand::Rng::with_seed(ctx.seed.wrapping_add(conn as u64));
    let mut next_id: u32 = 1;
    let mut buf = Vec::with_capacity(ctx.depth * 160);
    let blocks = ctx.templates.len();
    let pick = |rng: &mut fastrand::Rng| {
        let block = if blocks == 1 { 0 } else { rng.usize(0..blocks) };
        let t = &ctx.templates[block];
        let slots = (t.block_len - u64::from(ctx.range_size)) / ctx.align;
        (block, rng.u64(0..=slots) * ctx.align)
    };
    loop {
        let Ok(first_due) = pacer.wait_due().await else {
            return w;
        };
        let acquired = tokio::select! {
            biased;
            p = sem.acquire() => p.ok(),
            _ = tokio::time::sleep_until(pacer.slot_deadline()) => None,
        };
        let Some(permit) = acquired else {
            // The window ended (closed loop), the drain deadline passed with
            // every slot still busy, or the reader failed and closed the
            // semaphore. At a constant rate, requests still due are owed.
            let unsent = pacer.unsent();
            ctx.recorder.error(unsent, || {
                format!(
                    "{unsent} request(s) due before the end of the window were never sent: \
                     all {} in-flight slots of the connection stayed busy until the drain \
                     deadline, or the connection failed",
                    ctx.depth
                )
            });
            return w;
        };
        permit.forget();
        buf.clear();
        let now = Instant::now();
        let last_release = released.get();
        let mut due = Some(first_due);
        while let Some(intended) = due {
            let (block, offset) = pick(&mut rng);
            let id = next_id;
            next_id = next_id.wrapping_add(1);
            ctx.templates[block].append(&mut buf, id, offset);
            let intended = intended.unwrap_or(now);
            let entry = InFlight {
                id,
                offset,
                block,
                intended,
                ready: intended.max(last_release).min(now),
                sent: now,
            };
            if tx.send(entry).is_err() {
                return w; // the reader is gone; it has recorded why
            }
            pacer.sent();
            due = pacer.due_at(now);
            if due.is_some() {
                match sem.try_acquire() {
                    Ok(p) => p.forget(),
                    Err(_) => break,
                }
            }
        }
        if let Err(e) = w.write_all(&buf).await {
            let _ = fail_tx.send(format!("writing to {}: {e}", ctx.addr));
            return w;
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn reader(
    ctx: &WireCtx,
    mut r: OwnedReadHalf,
    sem: &Semaphore,
    released: &LastRelease,
    mut rx: mpsc::UnboundedReceiver<InFlight>,
    mut fail_rx: oneshot::Receiver<String>,
    drain_deadline: Instant,
    window: (Instant, Instant),
) {
    let mut inflight: HashMap<u32, InFlight> = HashMap::with_capacity(ctx.depth * 2);
    let mut rx_open = true;
    let mut fail_open = true;
    let mut decoder = FrameDecoder::new();
    let mut buf = vec![0u8; (READ_BUF_BUDGET / ctx.conns.max(1)).clamp(MIN_READ_BUF, READ_BUF)];
    let mut current: Option<(InFlight, u64)> = None;
    let mut local = Samples::default();
    let len = ctx.range_size;
    let addr = &ctx.addr;

    // Finds the entry for a reply, taking newly registered entries from the
    // writer's channel as needed (the writer registers before it writes, so
    // a reply to a request it sent always finds its entry).
    fn take(
        inflight: &mut HashMap<u32, InFlight>,
        rx: &mut mpsc::UnboundedReceiver<InFlight>,
        id: u32,
    ) -> Option<InFlight> {
        if let Some(e) = inflight.remove(&id) {
            return Some(e);
        }
        while let Ok(e) = rx.try_recv() {
            if e.id == id {
                return Some(e);
            }
            inflight.insert(e.id, e);
        }
        None
    }

    let outcome: std::result::Result<(), String> = 'conn: loop {
        if !rx_open && inflight.is_empty() && current.is_none() {
            break Ok(());
        }
        let n = tokio::select! {
            read = r.read(&mut buf) => match read {
                Ok(0) => break Err(format!("{addr} closed the connection")),
                Ok(n) => n,
                Err(e) => break Err(format!("reading from {addr}: {e}")),
            },
            entry = rx.recv(), if rx_open => {
                match entry {
                    Some(e) => { inflight.insert(e.id, e); }
                    None => rx_open = false,
                }
                continue;
            }
            msg = &mut fail_rx, if fail_open => {
                fail_open = false;
                match msg {
                    Ok(m) => break Err(m),
                    Err(_) => continue,
                }
            }
            _ = tokio::time::sleep_until(drain_deadline) => {
                break Err(format!(
                    "no reply from {addr} by the drain deadline (--drain-timeout after the window)"
                ));
            }
        };
        let mut input = &buf[..n];
        loop {
            let event = match decoder.decode(&mut input) {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(e) => break 'conn Err(format!("undecodable frame from {addr}: {e}")),
            };
            match event {
                Event::BulkStart(b) => {
                    let id = b.header.request_id();
                    if b.kind != BulkKind::ReadRangeReply {
                        break 'conn Err(format!(
                            "{addr} sent an Ingest frame (request id {id}) where a ReadRangeReply was due"
                        ));
                    }
                    let Some(entry) = take(&mut inflight, &mut rx, id) else {
                        break 'conn Err(format!(
                            "{addr} sent a ReadRangeReply for request id {id}, which is not in flight"
                        ));
                    };
                    if b.len != len {
                        current = Some((entry, 0));
                        break 'conn Err(format!(
                            "{addr} answered request {id} (block {}, offset {}) with {} bytes; {len} were asked for",
                            entry.block, entry.offset, b.len
                        ));
                    }
                    current = Some((entry, 0));
                }
                Event::BulkData(d) => {
                    if let Some((_, got)) = &mut current {
                        *got += d.len() as u64;
                    }
                }
                Event::BulkEnd => {
                    let Some((entry, got)) = current.take() else {
                        break 'conn Err(format!("{addr}: a bulk frame ended that never started"));
                    };
                    if got != u64::from(len) {
                        break 'conn Err(format!(
                            "{addr} sent {got} payload bytes for request {}; {len} were asked for",
                            entry.id
                        ));
                    }
                    let done = Instant::now();
                    let timing = Timing {
                        intended: entry.intended,
                        ready: entry.ready,
                        sent: entry.sent,
                        done,
                    };
                    ctx.recorder.completed(&mut local, timing, got, window);
                    released.mark(done);
                    sem.add_permits(1);
                }
                Event::Frame(f) => {
                    let id = f.header.request_id();
                    match f.message {
                        Message::Error(e) => match take(&mut inflight, &mut rx, id) {
                            Some(entry) => {
                                ctx.recorder.error(1, || {
                                    format!(
                                        "request {id} (block {}, offset {}, {len} bytes): the worker answered {}: {}",
                                        entry.block, entry.offset, e.code, e.message
                                    )
                                });
                                released.mark(Instant::now());
                                sem.add_permits(1);
                            }
                            None => {
                                break 'conn Err(format!(
                                    "{addr} sent an error frame for request id {id}, which is not in flight: {}: {}",
                                    e.code, e.message
                                ));
                            }
                        },
                        other => {
                            let ty: MessageType = other.message_type();
                            break 'conn Err(format!(
                                "{addr} sent a {ty:?} frame (request id {id}) where a ReadRangeReply was due"
                            ));
                        }
                    }
                }
            }
        }
    };
    ctx.recorder.flush(&mut local);
    if let Err(message) = outcome {
        while let Ok(e) = rx.try_recv() {
            inflight.insert(e.id, e);
        }
        let lost = inflight.len() as u64 + u64::from(current.is_some());
        ctx.recorder.error(lost.max(1), || {
            if lost > 0 {
                format!("{message} ({lost} request(s) unanswered)")
            } else {
                message
            }
        });
    }
    // Stop the writer: it sees a closed semaphore and gives up.
    sem.close();
}

#[cfg(test)]
mod tests {
    use super::*;
    use talon_core::ObjectVersion;

    #[test]
    fn patched_templates_decode_as_the_request() {
        let object = ObjectId::s3("bench", "dir/block.bin").unwrap_or_else(|e| panic!("{e}"));
        let version = ObjectVersion::new("\"etag-1\"").unwrap_or_else(|e| panic!("{e}"));
        let block =
            BlockId::new(object, version, 4 << 20, 4 << 20).unwrap_or_else(|e| panic!("{e}"));
        let t =
            RequestTemplate::new(block.clone(), 10 << 20, 65536).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.block_len, 4 << 20);
        let mut out = Vec::new();
        t.append(&mut out, 7, 4096);
        t.append(&mut out, 8, 8192);
        let mut decoder = FrameDecoder::new();
        let mut input = &out[..];
        let mut seen = Vec::new();
        while let Ok(Some(Event::Frame(f))) = decoder.decode(&mut input) {
            seen.push((f.header.request_id(), f.message));
        }
        let req = |offset| {
            Message::ReadRange(ReadRangeRequest {
                block: block.clone(),
                object_size: 10 << 20,
                offset,
                len: 65536,
            })
        };
        assert_eq!(seen, vec![(7, req(4096)), (8, req(8192))]);
    }
}
