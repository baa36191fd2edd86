//! Pipelined connections to workers, and a small pool of them per worker.
//!
//! A connection writes requests as they come and reads the answers in the same order
//! (the worker answers in order), so many requests can be in flight on one socket. Each
//! answer is matched to its request by position and checked against the request id it
//! echoes; a mismatch, a broken socket or a timeout poisons the connection, fails what
//! was in flight on it, and the pool opens a fresh one for the next request.
//!
//! A connection goes to a worker's data plane over TCP, or to its local socket
//! ([`Endpoint::Local`]) when the worker runs on this host: there a cached read may be
//! answered with the block file's descriptor ([`Answer::File`]), received with its
//! frame (`SCM_RIGHTS`), and the caller reads the bytes itself.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::{BufMut as _, Bytes, BytesMut};
use talon_core::Message;
use talon_core::cluster_auth::{ClusterSecret, Role};
use talon_core::wire::{BulkKind, Event, Flags, FrameDecoder};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::deadline::HopDeadlines;
use crate::error::{CacheClientError, Result};

/// An answer from a worker.
#[derive(Debug)]
pub enum Answer {
    /// A control message (StatReply, Pong, IngestAck, Error, ...).
    Message(Message),
    /// A ReadRangeReply.
    Data {
        /// Its payload.
        bytes: Bytes,
        /// Whether the worker fetched bytes from the origin to answer (a fill).
        from_origin: bool,
    },
    /// A ReadRangeReply cut off: the worker sent `bytes` of it, then the connection
    /// broke or went silent past a deadline (`error` says which). The bytes are the
    /// answer's first bytes, exactly; the rest must be asked elsewhere.
    Partial {
        /// The bytes that arrived, from the start of the answer.
        bytes: Bytes,
        /// Whether the worker had fetched bytes from the origin to answer.
        from_origin: bool,
        /// Why the rest did not come.
        error: CacheClientError,
    },
    /// A FileHandoff (local socket only): the requested bytes are `len` bytes at
    /// `offset` of `file`, a read-only descriptor of the block file.
    File {
        /// The block file.
        file: std::fs::File,
        /// Where the bytes start in it (the read's offset in the block).
        offset: u64,
        /// How many.
        len: u32,
        /// Whether the worker fetched bytes from the origin to answer (a fill).
        from_origin: bool,
    },
}

/// Where a worker is reached.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// Its data plane, `host:port`.
    Tcp(String),
    /// Its local socket, on this host.
    Local(PathBuf),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(addr) => f.write_str(addr),
            Endpoint::Local(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

struct Job {
    frame: Vec<u8>,
    inflight: Inflight,
}

/// A request sent and not yet answered.
struct Inflight {
    request_id: u32,
    reply: oneshot::Sender<Result<Answer>>,
    /// Told when the answer begins (its first frame is decoded), for a caller that
    /// hedges on the first byte.
    started: Option<oneshot::Sender<()>>,
}

impl Inflight {
    fn start(&mut self) {
        if let Some(started) = self.started.take() {
            let _ = started.send(());
        }
    }
}

/// What the reading half has seen, for the callers' deadlines: when bytes last
/// arrived, and whose answer is arriving.
struct Progress {
    base: Instant,
    /// Nanoseconds after `base` when the last bytes arrived (or the connection opened).
    last_bytes_ns: AtomicU64,
    /// The request whose answer's body is arriving; 0 for none.
    receiving: AtomicU32,
    /// Told when a caller's deadline passed: the reader stops and hands back what it
    /// has of the answer in progress.
    cancel: tokio::sync::Notify,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            base: Instant::now(),
            last_bytes_ns: AtomicU64::new(0),
            receiving: AtomicU32::new(0),
            cancel: tokio::sync::Notify::new(),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last_bytes_ns.store(self.now_ns(), Ordering::Relaxed);
    }

    /// When the request `id`, sent at `sent_ns`, misses its deadline if nothing more
    /// arrives, and which deadline that is: the stall deadline after the last bytes
    /// once its answer is arriving, else the first-byte deadline after it was sent or
    /// after the last bytes of any answer, whichever is later (a request queued behind
    /// a long transfer is waiting its turn, not failing).
    fn deadline(&self, id: u32, sent_ns: u64, hop: &HopDeadlines) -> (Instant, &'static str) {
        let last = self.last_bytes_ns.load(Ordering::Relaxed);
        let (from, allowed, what) = if self.receiving.load(Ordering::Relaxed) == id {
            (last, hop.stall, "stall")
        } else {
            (last.max(sent_ns), hop.first_byte, "first-byte")
        };
        (self.base + Duration::from_nanos(from) + allowed, what)
    }
}

/// How long a busy connection may go without an answer's bytes before the pool
/// stops queueing more requests on it ([`Connection::held_up`]). A hit is answered in
/// well under a millisecond, an origin round trip takes several: past this, the
/// request at the head is waiting for the origin, and one queued behind it would too.
const PIPELINE_PATIENCE: Duration = Duration::from_millis(1);

/// One caller counted in [`Connection::busy`] until it is dropped, however its call
/// ends (an answer, an error, its future dropped).
struct Busy<'a>(&'a AtomicUsize);

impl<'a> Busy<'a> {
    fn count(conn: &'a Connection) -> Busy<'a> {
        if conn.busy.fetch_add(1, Ordering::Relaxed) == 0 {
            conn.busy_since_ns
                .store(conn.progress.now_ns(), Ordering::Relaxed);
        }
        Busy(&conn.busy)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One pipelined connection.
pub struct Connection {
    jobs: mpsc::Sender<Job>,
    next_id: AtomicU32,
    /// Callers waiting for an answer on this connection ([`Pool::get`] prefers an idle
    /// connection: answers come in order, so a request behind an origin fetch waits
    /// for it).
    busy: AtomicUsize,
    /// When `busy` last rose from zero (nanoseconds on `progress`'s clock).
    busy_since_ns: AtomicU64,
    alive: Arc<AtomicBool>,
    progress: Arc<Progress>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn lost(what: &str) -> CacheClientError {
    CacheClientError::Unavailable(format!("connection to the worker {what}"))
}

impl Connection {
    /// Connects to the worker `worker` (its member id) at `endpoint` and authenticates
    /// as `role` (the Hello exchange, [`crate::hello`]).
    ///
    /// # Errors
    /// [`CacheClientError::Unavailable`] when the worker cannot be reached in time or
    /// the Hello exchange fails (another secret, or another worker than `worker`).
    pub async fn connect(
        endpoint: &Endpoint,
        worker: &str,
        timeout: Duration,
        secret: &ClusterSecret,
        role: Role,
    ) -> Result<Connection> {
        let failed = |e: std::io::Error| {
            CacheClientError::Unavailable(format!("connecting to {endpoint}: {e}"))
        };
        let timed_out =
            |_| CacheClientError::DeadlineExceeded(format!("connecting to {endpoint} timed out"));
        let alive = Arc::new(AtomicBool::new(true));
        let progress = Arc::new(Progress::new());
        let (jobs, job_rx) = mpsc::channel::<Job>(256);
        let (inflight_tx, inflight_rx) = mpsc::unbounded_channel::<Inflight>();
        let (writer, reader) = match endpoint {
            Endpoint::Tcp(addr) => {
                let mut stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
                    .await
                    .map_err(timed_out)?
                    .map_err(failed)?;
                let _ = stream.set_nodelay(true);
                crate::hello::authenticate(&mut stream, secret, role, Some(worker), timeout)
                    .await?;
                let (rd, wr) = stream.into_split();
                (
                    tokio::spawn(write_loop(wr, job_rx, inflight_tx, alive.clone())),
                    tokio::spawn(read_loop(
                        ReplySocket::Tcp(rd),
                        inflight_rx,
                        alive.clone(),
                        progress.clone(),
                    )),
                )
            }
            Endpoint::Local(path) => {
                let mut stream = tokio::time::timeout(timeout, UnixStream::connect(path))
                    .await
                    .map_err(timed_out)?
                    .map_err(failed)?;
                crate::hello::authenticate(&mut stream, secret, role, Some(worker), timeout)
                    .await?;
                let (rd, wr) = stream.into_split();
                let socket = ReplySocket::Local(rd, VecDeque::new());
                (
                    tokio::spawn(write_loop(wr, job_rx, inflight_tx, alive.clone())),
                    tokio::spawn(read_loop(
                        socket,
                        inflight_rx,
                        alive.clone(),
                        progress.clone(),
                    )),
                )
            }
        };
        Ok(Connection {
            jobs,
            next_id: AtomicU32::new(1),
            busy: AtomicUsize::new(0),
            busy_since_ns: AtomicU64::new(0),
            alive,
            progress,
            tasks: vec![writer, reader],
        })
    }

    /// Callers waiting for an answer on this connection now.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// Whether requests wait here and no answer's bytes have come for longer than
    /// [`PIPELINE_PATIENCE`] (since the last bytes, or since it became busy): the
    /// request at the head is waiting for the origin, and the next would wait too.
    pub fn held_up(&self) -> bool {
        if self.busy() == 0 {
            return false;
        }
        let since = self
            .progress
            .last_bytes_ns
            .load(Ordering::Relaxed)
            .max(self.busy_since_ns.load(Ordering::Relaxed));
        let patience = u64::try_from(PIPELINE_PATIENCE.as_nanos()).unwrap_or(u64::MAX);
        self.progress.now_ns().saturating_sub(since) > patience
    }

    /// Whether the connection can still be used.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Marks the connection unusable (after a timeout) and closes it.
    pub fn poison(&self) {
        self.alive.store(false, Ordering::Relaxed);
        for t in &self.tasks {
            t.abort();
        }
    }

    /// Sends the request `message` and waits for its answer within the hop's
    /// deadlines (`hop`: first byte and stall, [`Progress::deadline`]) and never past
    /// `until`. `started`, if given, is told when the answer begins (before the answer
    /// itself when it is one frame).
    ///
    /// # Errors
    /// [`CacheClientError::Unavailable`] when the connection breaks,
    /// [`CacheClientError::DeadlineExceeded`] when a deadline of the hop passes (the
    /// connection is then poisoned, and everything in flight on it fails),
    /// [`CacheClientError::BudgetSpent`] when `until` comes first (the connection is
    /// kept; the answer is dropped when it arrives); an error frame is returned
    /// as `Ok(Answer::Message(Error(..)))`, and an answer cut after some of its bytes as
    /// `Ok(Answer::Partial { .. })`.
    pub async fn call(
        &self,
        message: &Message,
        hop: &HopDeadlines,
        until: Instant,
        started: Option<oneshot::Sender<()>>,
    ) -> Result<Answer> {
        let _waiting = Busy::count(self);
        let request_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = message.encode(request_id).map_err(|e| {
            CacheClientError::InvalidRequest(format!("cannot encode the request: {e}"))
        })?;
        let (tx, mut rx) = oneshot::channel();
        self.jobs
            .send(Job {
                frame,
                inflight: Inflight {
                    request_id,
                    reply: tx,
                    started,
                },
            })
            .await
            .map_err(|_| lost("is closed"))?;
        let sent_ns = self.progress.now_ns();
        loop {
            let (deadline, _) = self.progress.deadline(request_id, sent_ns, hop);
            let wake = tokio::time::Instant::from_std(deadline.min(until));
            match tokio::time::timeout_at(wake, &mut rx).await {
                Ok(Ok(answer)) => return answer,
                Ok(Err(_)) => return Err(lost("closed before answering")),
                Err(_) => {}
            }
            // Bytes that arrived meanwhile move the deadline on.
            let (deadline, what) = self.progress.deadline(request_id, sent_ns, hop);
            let now = Instant::now();
            if deadline.min(until) > now {
                continue;
            }
            if until <= deadline {
                // The worker is within its own deadlines: the piece moves on, and the
                // answer, when it comes, is read and dropped (the connection stays).
                return Err(budget_spent("waiting for the worker's answer"));
            }
            let error = CacheClientError::DeadlineExceeded(format!(
                "the worker missed its {what} deadline"
            ));
            // The reader hands back the bytes of the answer in progress (or fails it)
            // as soon as it is told; everything else in flight here fails with it.
            self.alive.store(false, Ordering::Relaxed);
            self.progress.cancel.notify_one();
            let handed_back = tokio::time::timeout(Duration::from_millis(200), &mut rx).await;
            self.poison();
            return match handed_back {
                Ok(Ok(Ok(Answer::Partial {
                    bytes, from_origin, ..
                }))) => Ok(Answer::Partial {
                    bytes,
                    from_origin,
                    error,
                }),
                // It completed as the deadline passed.
                Ok(Ok(Ok(answer))) => Ok(answer),
                _ => Err(error),
            };
        }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut jobs: mpsc::Receiver<Job>,
    inflight: mpsc::UnboundedSender<Inflight>,
    alive: Arc<AtomicBool>,
) {
    while let Some(job) = jobs.recv().await {
        if !alive.load(Ordering::Relaxed) {
            let _ = job.inflight.reply.send(Err(lost("is broken")));
            continue;
        }
        // Register before writing so the reader never sees an answer it cannot place.
        if inflight.send(job.inflight).is_err() {
            break;
        }
        if let Err(e) = wr.write_all(&job.frame).await {
            tracing::debug!(error = %e, "writing to a worker failed");
            alive.store(false, Ordering::Relaxed);
            break;
        }
    }
    alive.store(false, Ordering::Relaxed);
}

/// The reading half of a connection, with the descriptors its frames brought.
enum ReplySocket {
    Tcp(tokio::net::tcp::OwnedReadHalf),
    /// The descriptors received, oldest first: each belongs to the next FileHandoff.
    Local(tokio::net::unix::OwnedReadHalf, VecDeque<OwnedFd>),
}

/// Most descriptors taken from one read: a worker sends one per FileHandoff frame, and
/// the kernel does not merge the bytes of two sends that carry descriptors into one read.
const MAX_FDS_PER_READ: usize = 4;

impl ReplySocket {
    /// Reads what comes next: into `reply` (a reply's buffer, at most `lacking` more
    /// bytes: `direct` is `true`) when one is given and this is a TCP connection,
    /// otherwise into `buf`. On the local socket every read goes through `buf`, where
    /// the descriptors of FileHandoffs are taken with the bytes.
    async fn read_reply(
        &mut self,
        buf: &mut [u8],
        reply: Option<(&mut BytesMut, u32)>,
    ) -> std::io::Result<(usize, bool)> {
        match (self, reply) {
            (ReplySocket::Tcp(rd), Some((reply, lacking))) => {
                let lacking = lacking as usize;
                reply.reserve(lacking);
                let n = rd.read_buf(&mut (&mut *reply).limit(lacking)).await?;
                Ok((n, true))
            }
            (socket, _) => socket.read(buf).await.map(|n| (n, false)),
        }
    }

    async fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            ReplySocket::Tcp(rd) => rd.read(buf).await,
            ReplySocket::Local(rd, fds) => loop {
                let stream: &UnixStream = rd.as_ref();
                stream.readable().await?;
                match stream.try_io(tokio::io::Interest::READABLE, || receive(stream, buf, fds)) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    other => return other,
                }
            },
        }
    }

    /// The descriptor that came with the FileHandoff just decoded.
    fn take_fd(&mut self) -> Option<OwnedFd> {
        match self {
            ReplySocket::Tcp(_) => None,
            ReplySocket::Local(_, fds) => fds.pop_front(),
        }
    }
}

/// One `recvmsg` on the local socket: bytes into `buf`, descriptors onto `fds`
/// (close-on-exec). Descriptors cut off for lack of room break the connection: the
/// frames they belonged to could not be answered.
fn receive(
    stream: &UnixStream,
    buf: &mut [u8],
    fds: &mut VecDeque<OwnedFd>,
) -> std::io::Result<usize> {
    use std::mem::MaybeUninit;

    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags};
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS_PER_READ))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let got = rustix::net::recvmsg(stream, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)?;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if got.flags.contains(ReturnFlags::CTRUNC) {
        return Err(std::io::Error::other(
            "the worker sent more descriptors than one read takes",
        ));
    }
    Ok(got.bytes)
}

async fn read_loop(
    mut rd: ReplySocket,
    mut inflight: mpsc::UnboundedReceiver<Inflight>,
    alive: Arc<AtomicBool>,
    progress: Arc<Progress>,
) {
    let mut decoder = FrameDecoder::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut current: Option<(Inflight, BytesMut, bool)> = None;
    let failure: CacheClientError = 'outer: loop {
        // The cancel first: a caller whose deadline passed is answered even while
        // bytes keep coming (a worker dribbling past the piece's budget).
        // Inside a reply's bytes over TCP, they are read straight into the reply's own
        // buffer (one copy fewer: not through `buf`), at most the bytes it still lacks.
        let direct = match (&mut current, decoder.bulk_remaining()) {
            (Some((_, data, _)), Some(remaining)) if remaining > 0 => Some((data, remaining)),
            _ => None,
        };
        let read = tokio::select! {
            biased;
            () = progress.cancel.notified() => {
                break CacheClientError::DeadlineExceeded("the worker missed a deadline".into());
            }
            read = rd.read_reply(&mut buf, direct) => read,
        };
        let (n, direct) = match read {
            Ok((0, _)) => break lost("was closed by the worker"),
            Ok(read) => read,
            Err(e) => break CacheClientError::Unavailable(format!("reading from the worker: {e}")),
        };
        progress.touch();
        let mut input = &buf[..if direct { 0 } else { n }];
        if direct {
            // n <= the bytes the reply lacked, a u32.
            decoder.skip_bulk(n as u32);
        }
        loop {
            let event = match decoder.decode(&mut input) {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(e) => {
                    break 'outer CacheClientError::Unavailable(format!(
                        "the worker sent a bad frame: {e}"
                    ));
                }
            };
            match event {
                Event::Frame(frame) => {
                    let Some(mut asked) = inflight.recv().await else {
                        break 'outer lost("answered nothing asked");
                    };
                    let id = asked.request_id;
                    if frame.header.request_id() != id && frame.header.request_id() != 0 {
                        let _ = asked.reply.send(Err(lost("answered out of order")));
                        break 'outer lost("answered out of order");
                    }
                    let answer = match frame.message {
                        Message::FileHandoff(handoff) => {
                            let Some(fd) = rd.take_fd() else {
                                let _ = asked
                                    .reply
                                    .send(Err(lost("sent a FileHandoff without a file")));
                                break 'outer lost("sent a FileHandoff without a file");
                            };
                            Answer::File {
                                file: std::fs::File::from(fd),
                                offset: handoff.offset,
                                len: handoff.len,
                                from_origin: handoff.from_origin,
                            }
                        }
                        other => Answer::Message(other),
                    };
                    asked.start();
                    let _ = asked.reply.send(Ok(answer));
                }
                Event::BulkStart(start) => {
                    if !matches!(start.kind, BulkKind::ReadRangeReply) {
                        break 'outer lost("sent an unexpected bulk frame");
                    }
                    let Some(mut asked) = inflight.recv().await else {
                        break 'outer lost("answered nothing asked");
                    };
                    if start.header.request_id() != asked.request_id {
                        let _ = asked.reply.send(Err(lost("answered out of order")));
                        break 'outer lost("answered out of order");
                    }
                    let from_origin = start.header.flags().contains(Flags::FROM_ORIGIN);
                    progress
                        .receiving
                        .store(asked.request_id, Ordering::Relaxed);
                    asked.start();
                    current = Some((
                        asked,
                        BytesMut::with_capacity(start.len as usize),
                        from_origin,
                    ));
                }
                Event::BulkData(data) => {
                    if let Some((_, buf, _)) = &mut current {
                        buf.extend_from_slice(data);
                    }
                }
                Event::BulkEnd => {
                    progress.receiving.store(0, Ordering::Relaxed);
                    if let Some((asked, data, from_origin)) = current.take() {
                        let _ = asked.reply.send(Ok(Answer::Data {
                            bytes: data.freeze(),
                            from_origin,
                        }));
                    }
                }
            }
        }
    };
    alive.store(false, Ordering::Relaxed);
    // A reply cut mid-body is handed back as what it is, a part (never a short
    // success), and everything queued behind it fails.
    if let Some((asked, data, from_origin)) = current.take() {
        let _ = asked.reply.send(if data.is_empty() {
            Err(failure.clone())
        } else {
            Ok(Answer::Partial {
                bytes: data.freeze(),
                from_origin,
                error: failure.clone(),
            })
        });
    }
    inflight.close();
    while let Some(asked) = inflight.recv().await {
        let _ = asked.reply.send(Err(failure.clone()));
    }
}

/// Which of a worker's two sets of connections a request goes on. A worker answers a
/// connection's requests in order, so a request queued behind one that waits for the
/// origin waits for it too: stats, which go to the origin whenever the worker does not
/// know the object, are kept off the connections reads pipeline on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Reads (and everything but stats): a few connections per worker, requests
    /// pipelined on the least busy one whose answers flow (a hit is answered at once;
    /// a fill at the origin holds its connection up), else on the next in turn.
    Reads,
    /// Stats: the least busy connection whose answers are flowing, another opened
    /// (up to its own limit) while every one is held up by an origin round trip.
    Stats,
}

impl Lane {
    /// The lane `message` goes on.
    pub fn of(message: &Message) -> Lane {
        match message {
            Message::Stat(_) => Lane::Stats,
            _ => Lane::Reads,
        }
    }

    fn index(self) -> usize {
        match self {
            Lane::Reads => 0,
            Lane::Stats => 1,
        }
    }
}

/// Connections to every worker, a few per worker and lane, opened on demand, each
/// authenticated with the Hello exchange before its first request.
pub struct Pool {
    per_worker: usize,
    stats_per_worker: usize,
    connect_timeout: Duration,
    secret: ClusterSecret,
    role: Role,
    conns: Mutex<HashMap<Endpoint, Slot>>,
    round_robin: AtomicUsize,
    changed: tokio::sync::Notify,
}

/// The connections to one worker, by lane, and which member the membership says
/// answers there (every connection's Hello must name it).
struct Slot {
    worker: String,
    lanes: [LaneConns; 2],
    /// Bumped when the worker's circuit opens: connects in progress then give up at
    /// once, as the requests on its open connections do.
    poisoned: watch::Sender<u64>,
}

/// One lane's connections to a worker, and how many are being opened.
#[derive(Default)]
struct LaneConns {
    conns: Vec<Arc<Connection>>,
    connecting: usize,
}

/// A connection being opened: holds one of its worker's places in the pool until it
/// is dropped, whatever ended the connect (it finished, failed, or its caller's future
/// was dropped mid-way), and then gives it back, the connection with it if one opened.
struct Opening<'a> {
    pool: &'a Pool,
    endpoint: &'a Endpoint,
    lane: Lane,
    /// The member the connection proves it reached.
    worker: String,
    opened: Option<Arc<Connection>>,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        {
            let mut conns = self.pool.conns.lock().unwrap_or_else(|p| p.into_inner());
            // A worker that left meanwhile has no slot any more: nothing to give back
            // (nor when another member took its address: the slot started again).
            if let Some(slot) = conns.get_mut(self.endpoint)
                && slot.worker == self.worker
            {
                let lane = &mut slot.lanes[self.lane.index()];
                lane.connecting = lane.connecting.saturating_sub(1);
                lane.conns.extend(self.opened.take());
            }
        }
        self.pool.changed.notify_waiters();
    }
}

/// The piece's deadline budget ran out while `what`: not the worker's failure.
fn budget_spent(what: &str) -> CacheClientError {
    CacheClientError::BudgetSpent(format!("the piece's deadline budget ran out {what}"))
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("per_worker", &self.per_worker)
            .field("stats_per_worker", &self.stats_per_worker)
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// A pool keeping up to `per_worker` connections to each worker for reads and
    /// `stats_per_worker` for stats ([`Lane`]), authenticating each as `role` with
    /// `secret`.
    pub fn new(
        per_worker: usize,
        stats_per_worker: usize,
        connect_timeout: Duration,
        secret: ClusterSecret,
        role: Role,
    ) -> Pool {
        Pool {
            per_worker: per_worker.max(1),
            stats_per_worker: stats_per_worker.max(1),
            connect_timeout,
            secret,
            role,
            conns: Mutex::default(),
            round_robin: AtomicUsize::new(0),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// A live connection to `endpoint` for `lane` by `until` at the latest. Reads: a
    /// new one while there are fewer than the limit, else the least busy one whose
    /// answers flow, else the next in turn (requests pipeline on them). Stats: the
    /// least busy one whose answers flow, else a new one while there are fewer than
    /// their limit, else the least busy. A burst of first requests opens at most the
    /// limit: the others wait for those connections.
    ///
    /// Cancel-safe: a caller dropped while it waits or while its connection is being
    /// opened gives its place back ([`Opening`]), so the next caller opens one instead
    /// of waiting for a connect nobody is running.
    ///
    /// # Errors
    /// [`CacheClientError::Unavailable`] when a needed connection cannot be opened
    /// (refused, or its Hello failed, or the worker's circuit opened meanwhile);
    /// [`CacheClientError::DeadlineExceeded`] when the worker does not finish the
    /// connect within the connect deadline; [`CacheClientError::BudgetSpent`] when
    /// `until` passes first.
    pub async fn get(
        &self,
        endpoint: &Endpoint,
        lane: Lane,
        until: Instant,
    ) -> Result<Arc<Connection>> {
        let limit = match lane {
            Lane::Reads => self.per_worker,
            Lane::Stats => self.stats_per_worker,
        };
        let (mut opening, mut poisoned) = loop {
            let waiting = self.changed.notified();
            {
                let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
                let Some(slot) = conns.get_mut(endpoint) else {
                    return Err(CacheClientError::Unavailable(format!(
                        "{endpoint} is not in the membership"
                    )));
                };
                let set = &mut slot.lanes[lane.index()];
                set.conns.retain(|c| c.is_alive());
                let open = set.conns.len();
                let at_limit = open + set.connecting >= limit;
                let start = self.round_robin.fetch_add(1, Ordering::Relaxed);
                let turn = || (0..open).map(|k| &set.conns[(start + k) % open]);
                let flowing = || turn().filter(|c| !c.held_up()).min_by_key(|c| c.busy());
                let pick = match lane {
                    // Both opened first; then the least busy whose answers flow (a
                    // fill at the origin holds its connection up), else in turn.
                    Lane::Reads => flowing().or_else(|| turn().next()).filter(|_| at_limit),
                    // Answers come in order, so a stat queued behind one at the
                    // origin waits for it too: one whose answers flow, else a new
                    // connection, else (at the limit) the least busy.
                    Lane::Stats => {
                        flowing().or_else(|| turn().min_by_key(|c| c.busy()).filter(|_| at_limit))
                    }
                };
                if let Some(conn) = pick {
                    return Ok(conn.clone());
                }
                if !at_limit {
                    set.connecting += 1;
                    break (
                        Opening {
                            pool: self,
                            endpoint,
                            lane,
                            worker: slot.worker.clone(),
                            opened: None,
                        },
                        slot.poisoned.subscribe(),
                    );
                }
            }
            // Every allowed connection is being opened: wait for one (bounded, so a
            // wake-up missed between the check and the wait costs little).
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(budget_spent("waiting for a connection to the worker"));
            }
            let _ = tokio::time::timeout(Duration::from_millis(20).min(left), waiting).await;
        };
        let connect = Connection::connect(
            endpoint,
            &opening.worker,
            self.connect_timeout,
            &self.secret,
            self.role,
        );
        let connect = tokio::time::timeout_at(tokio::time::Instant::from_std(until), connect);
        let conn = tokio::select! {
            connected = connect => match connected {
                Ok(result) => Arc::new(result?),
                Err(_) => return Err(budget_spent("opening a connection to the worker")),
            },
            Ok(()) = poisoned.changed() => {
                return Err(CacheClientError::Unavailable(format!(
                    "{endpoint}: the worker's circuit opened while connecting"
                )));
            }
        };
        opening.opened = Some(conn.clone());
        Ok(conn)
    }

    /// Closes every connection to `endpoint` (its circuit just opened): the requests
    /// in flight on them fail at once and move on, instead of each waiting for its own
    /// deadline.
    pub fn poison_endpoint(&self, endpoint: &Endpoint) {
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = conns.get_mut(endpoint) {
            for lane in &mut slot.lanes {
                for conn in lane.conns.drain(..) {
                    conn.poison();
                }
            }
            slot.poisoned.send_modify(|n| *n += 1);
        }
    }

    /// Sets who the membership places at each endpoint (`(endpoint, member id)`):
    /// connections to endpoints not listed are dropped, and so are those to an endpoint
    /// whose member changed (they proved the previous one). Only listed endpoints are
    /// connected to.
    pub fn set_members(&self, members: &[(Endpoint, String)]) {
        let listed: HashMap<&Endpoint, &String> = members.iter().map(|(e, w)| (e, w)).collect();
        let mut conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        conns.retain(|endpoint, slot| listed.get(endpoint) == Some(&&slot.worker));
        for (endpoint, worker) in members {
            if !conns.contains_key(endpoint) {
                conns.insert(
                    endpoint.clone(),
                    Slot {
                        worker: worker.clone(),
                        lanes: Default::default(),
                        poisoned: watch::Sender::new(0),
                    },
                );
            }
        }
    }
}
