//! Layer 1 on io_uring, thread per core: the worker's default plane.
//!
//! N ring threads, each pinned to a core, each running its own single-threaded monoio
//! runtime on its own io_uring, each with its own listener bound to the same address
//! with `SO_REUSEPORT`: the kernel spreads connections over them by 4-tuple, so there
//! is no shared accept queue, no lock and no thundering herd, and a connection stays on
//! its ring for life. The rings share the worker state ([`Services`], one `Arc`) and
//! the connection places ([`super::admission`]).
//!
//! On a ring, the socket is read with io_uring receives; replies go out with
//! non-blocking `send`/`sendfile` on the socket (Layer 2, runtime-free), and when the
//! socket is full the ring waits for writability with an io_uring poll. Work that may
//! wait (a miss, a Stat, an ingest, a send from disk) runs on Tokio: ring threads enter
//! the worker's Tokio runtime before they start, and the connection awaits the Tokio
//! task's answer. A hit runs on the ring itself, start to end.
//!
//! Each ring is set up with `IORING_SETUP_COOP_TASKRUN` ([`RingSetup`]): a completion
//! does not interrupt the ring thread in the middle of a `sendfile` to run its work.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use monoio::io::AsyncReadRent;
use tokio::sync::{Notify, oneshot, watch};

use super::admission::Admission;
use super::connection::{SocketReader, SocketWriter, serve_connection};
use super::requests::Services;
use super::{DataPlaneConfig, RingSetup};

/// Submission-queue entries per ring.
const RING_ENTRIES: u32 = 1024;
/// Pending connections each ring's listener holds (the kernel caps it at somaxconn).
const LISTEN_BACKLOG: i32 = 4096;
/// How long the drain waits for connections to finish their answers.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds `listen` once per ring with `SO_REUSEPORT` and starts the rings. Returns the
/// bound address and a task that ends when every ring has stopped (after `shutdown`
/// and the drain). Aborting that task stops the rings at once: every connection is
/// cut, as in a crash.
///
/// # Errors
/// A listener cannot bind, or a ring cannot start (no io_uring, no memory for it):
/// then nothing is left running.
pub(crate) async fn start(
    listen: SocketAddr,
    rings: usize,
    services: Arc<Services>,
    config: DataPlaneConfig,
    shutdown: watch::Receiver<bool>,
) -> io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let rings = rings.max(1);
    let first = reuse_port_listener(listen)?;
    let addr = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..rings {
        listeners.push(reuse_port_listener(addr)?);
    }
    // Duplicates of the listeners, so that killing the plane stops accepting at once,
    // from the killing thread, before the rings have even seen the signal.
    let listener_fds = listeners
        .iter()
        .map(|l| l.try_clone().map(OwnedFd::from))
        .collect::<io::Result<Vec<_>>>()?;
    let cpus = allowed_cpus();
    let admission = Admission::new(&config);
    let config = Arc::new(config);
    let (kill, killed) = watch::channel(false);
    let handle = tokio::runtime::Handle::current();
    let mut started = Vec::new();
    let mut stopped = Vec::new();
    for (i, listener) in listeners.into_iter().enumerate() {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel::<()>();
        let ring = Ring {
            index: i,
            cpu: cpus
                .get(i % cpus.len().max(1))
                .copied()
                .filter(|_| config.pin_rings),
            services: services.clone(),
            config: config.clone(),
            admission: admission.clone(),
            shutdown: shutdown.clone(),
            killed: killed.clone(),
        };
        let handle = handle.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("talon-ring-{i}"))
            .spawn(move || {
                let _tokio = handle.enter();
                ring.run(listener, ready_tx);
                let _ = done_tx.send(());
            });
        if let Err(e) = spawned {
            let _ = kill.send(true);
            return Err(e);
        }
        started.push(ready_rx);
        stopped.push(done_rx);
    }
    for ready in started {
        let outcome = ready
            .await
            .unwrap_or_else(|_| Err(io::Error::other("a ring thread ended while starting")));
        if let Err(e) = outcome {
            let _ = kill.send(true);
            return Err(e);
        }
    }
    tracing::info!(%addr, rings, layer2 = %config.layer2.name(), setup = %config.ring_setup.name(), "data plane on io_uring: one listener per ring (SO_REUSEPORT)");
    let mut stop = shutdown.clone();
    let task = tokio::spawn(async move {
        // Dropped when this task ends or is aborted: the rings then cut what is left.
        let guard = KillOnDrop {
            kill,
            listeners: listener_fds,
        };
        let all_stopped = async {
            for done in stopped {
                let _ = done.await;
            }
        };
        let mut all_stopped = std::pin::pin!(all_stopped);
        tokio::select! {
            () = &mut all_stopped => {}
            _ = stop.changed() => {
                // A drain accepts nothing new: these duplicates would keep the
                // listening sockets open after the rings close theirs.
                guard.stop_accepting();
                all_stopped.await;
            }
        }
    });
    Ok((addr, task))
}

/// When dropped: stops every ring's listener from accepting (`shutdown(2)` on a
/// listening socket takes it out of the listening state, so new connections are
/// refused at once), then tells the rings to cut every connection.
struct KillOnDrop {
    kill: watch::Sender<bool>,
    listeners: Vec<OwnedFd>,
}

impl KillOnDrop {
    fn stop_accepting(&self) {
        for fd in &self.listeners {
            let _ = rustix::net::shutdown(fd, rustix::net::Shutdown::Both);
        }
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.stop_accepting();
        let _ = self.kill.send(true);
    }
}

/// A TCP listener on `addr` with `SO_REUSEPORT` (and `SO_REUSEADDR`), so that every
/// ring can bind the same address.
fn reuse_port_listener(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, sockopt};
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    sockopt::set_socket_reuseport(&fd, true)?;
    rustix::net::bind(&fd, &addr)?;
    rustix::net::listen(&fd, LISTEN_BACKLOG)?;
    Ok(std::net::TcpListener::from(fd))
}

/// The CPUs this process may run on, in order (empty when unknown).
fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// An io_uring builder with `setup`'s flags.
fn ring_builder(setup: RingSetup) -> io_uring::Builder {
    let mut builder = io_uring::IoUring::builder();
    match setup {
        RingSetup::Plain => {}
        RingSetup::CoopTaskrun => {
            builder.setup_coop_taskrun();
        }
        RingSetup::DeferTaskrun => {
            // The ring is made, submitted to and waited on by this thread only.
            builder.setup_single_issuer().setup_defer_taskrun();
        }
    }
    builder
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) -> io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).map_err(io::Error::from)
}

/// One ring thread's share of the plane.
struct Ring {
    index: usize,
    cpu: Option<usize>,
    services: Arc<Services>,
    config: Arc<DataPlaneConfig>,
    admission: Arc<Admission>,
    shutdown: watch::Receiver<bool>,
    killed: watch::Receiver<bool>,
}

/// The connections open on one ring: a duplicate of each socket, so the ring can cut
/// them all (`shutdown(2)` ends every operation pending on them).
#[derive(Default)]
struct Open {
    next: Cell<u64>,
    sockets: RefCell<HashMap<u64, Arc<OwnedFd>>>,
    changed: Notify,
}

impl Open {
    fn cut_all(&self) {
        for fd in self.sockets.borrow().values() {
            let _ = rustix::net::shutdown(&**fd, rustix::net::Shutdown::Both);
        }
    }

    fn is_empty(&self) -> bool {
        self.sockets.borrow().is_empty()
    }
}

impl Ring {
    /// Runs the ring on this thread until shutdown (drained) or kill. Reports on
    /// `ready` whether it could start.
    fn run(self, listener: std::net::TcpListener, ready: oneshot::Sender<io::Result<()>>) {
        if let Some(cpu) = self.cpu
            && let Err(e) = pin_to(cpu)
        {
            tracing::warn!(ring = self.index, cpu, error = %e, "cannot pin the ring thread");
        }
        let build = |setup: RingSetup| {
            monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
                .with_entries(RING_ENTRIES)
                .uring_builder(ring_builder(setup))
                .enable_timer()
                .build()
        };
        let wanted = self.config.ring_setup;
        let runtime = match build(wanted) {
            // An older kernel refuses the set-up flags it does not know (EINVAL).
            Err(e) if wanted != RingSetup::Plain && e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::info!(
                    ring = self.index,
                    setup = wanted.name(),
                    "the kernel refuses this ring set-up: the ring is set up plain"
                );
                build(RingSetup::Plain)
            }
            other => other,
        };
        let mut runtime = match runtime {
            Ok(r) => r,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        runtime.block_on(async move {
            let listener = match monoio::net::TcpListener::from_std(listener) {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return;
                }
            };
            let _ = ready.send(Ok(()));
            self.serve(listener).await;
        });
    }

    async fn serve(self, listener: monoio::net::TcpListener) {
        let open = Rc::new(Open::default());
        let (mut shutdown, mut killed) = (self.shutdown.clone(), self.killed.clone());
        loop {
            // The places are shared by every ring: a connection takes one while it says
            // Hello (or is closed at once when there is none), and waits for one among
            // the authenticated connections only once its proof is verified
            // ([`super::admission`]), so the accept loop itself never waits.
            let accepted = tokio::select! {
                _ = shutdown.changed() => break,
                _ = killed.changed() => break,
                a = listener.accept() => a,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                // The listener closed under a shutdown: not a failure (it used to log
                // "accept failed ... Invalid argument" on most stops).
                Err(_) if *shutdown.borrow() || *killed.borrow() => break,
                Err(e) => {
                    tracing::warn!(ring = self.index, error = %e, "accept failed");
                    // Out of descriptors, for example: let connections end first.
                    monoio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let Some(arriving) = self.admission.arrive(Some(peer.ip())) else {
                tracing::debug!(ring = self.index, %peer, "connection refused: too many connections saying Hello");
                continue;
            };
            let socket = match RingSocket::new(stream) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(ring = self.index, error = %e, "cannot set up a connection");
                    continue;
                }
            };
            let key = open.next.get();
            open.next.set(key + 1);
            open.sockets
                .borrow_mut()
                .insert(key, socket.bulk_fd.clone());
            let (services, config, shutdown, open) = (
                self.services.clone(),
                self.config.clone(),
                self.shutdown.clone(),
                open.clone(),
            );
            monoio::spawn(async move {
                services.metrics.connection(1);
                let RingSocket {
                    reader,
                    writer,
                    bulk_fd,
                } = socket;
                if let Err(e) = serve_connection(
                    reader, writer, bulk_fd, arriving, &services, &config, shutdown,
                )
                .await
                {
                    tracing::debug!(%peer, error = %e, "connection ended");
                }
                services.metrics.connection(-1);
                open.sockets.borrow_mut().remove(&key);
                open.changed.notify_waiters();
            });
        }
        drop(listener);
        if !*killed.borrow() {
            // Drain: connections stop reading at shutdown and finish the answers owed.
            let drained = monoio::time::timeout(DRAIN_TIMEOUT, async {
                while !open.is_empty() {
                    tokio::select! {
                        _ = open.changed.notified() => {}
                        _ = killed.changed() => return,
                    }
                }
            })
            .await;
            if drained.is_err() {
                tracing::warn!(
                    ring = self.index,
                    "data-plane connections still open after the drain timeout"
                );
            }
        }
        // Whatever is left is cut; its tasks then end on their own errors.
        open.cut_all();
        let _ = monoio::time::timeout(Duration::from_secs(1), async {
            while !open.is_empty() {
                open.changed.notified().await;
            }
        })
        .await;
    }
}

/// An accepted connection on a ring: the stream for io_uring receives, a duplicate
/// for sends and writability polls, and one for sends from the blocking pool. The
/// socket is non-blocking, so a send or `sendfile` on the ring never waits.
struct RingSocket {
    reader: RingReader,
    writer: RingWriter,
    bulk_fd: Arc<OwnedFd>,
}

impl RingSocket {
    fn new(stream: monoio::net::TcpStream) -> io::Result<RingSocket> {
        let _ = stream.set_nodelay(true);
        let fd = stream_fd(&stream);
        rustix::io::ioctl_fionbio(fd, true)?;
        let send_fd = fd.try_clone_to_owned()?;
        let bulk_fd = Arc::new(fd.try_clone_to_owned()?);
        let writer = monoio::net::TcpStream::from_std(std::net::TcpStream::from(send_fd))?;
        Ok(RingSocket {
            reader: RingReader(stream),
            writer: RingWriter::new(writer),
            bulk_fd,
        })
    }
}

/// The stream's descriptor, borrowed for as long as the stream.
fn stream_fd(stream: &monoio::net::TcpStream) -> BorrowedFd<'_> {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor belongs to `stream` and stays open while it is borrowed.
    unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) }
}

struct RingReader(monoio::net::TcpStream);

impl SocketReader for RingReader {
    async fn read(&mut self, mut buf: Vec<u8>, timeout: Duration) -> (io::Result<usize>, Vec<u8>) {
        let deadline = monoio::time::Instant::now() + timeout;
        loop {
            buf.clear();
            match monoio::time::timeout_at(deadline, self.0.read(buf)).await {
                // The receive was cancelled with the buffer in it: the caller closes.
                Err(_) => {
                    let e = io::Error::new(io::ErrorKind::TimedOut, "no bytes in time");
                    return (Err(e), Vec::new());
                }
                // The socket is non-blocking (for the sends): a receive can come back
                // empty-handed, rarely. Wait for bytes and try again.
                Ok((Err(e), back)) if e.kind() == io::ErrorKind::WouldBlock => {
                    buf = back;
                    let readable = monoio::time::timeout_at(deadline, self.0.readable(false));
                    if readable.await.is_err() {
                        let e = io::Error::new(io::ErrorKind::TimedOut, "no bytes in time");
                        return (Err(e), buf);
                    }
                }
                Ok((result, back)) => return (result, back),
            }
        }
    }
}

/// The writing side on a ring: a duplicate of the socket as a monoio stream, for
/// writability polls and, with the `uring` Layer 2, io_uring sends. The stream is
/// lent out for each operation ([`Lent`]) rather than borrowed across an await.
struct RingWriter {
    stream: Cell<Option<monoio::net::TcpStream>>,
    fd: std::os::fd::RawFd,
}

/// The writer's stream, taken for one operation and given back when dropped (also
/// when the operation's future is dropped halfway).
struct Lent<'a> {
    home: &'a Cell<Option<monoio::net::TcpStream>>,
    stream: Option<monoio::net::TcpStream>,
}

impl Lent<'_> {
    fn get(&mut self) -> io::Result<&mut monoio::net::TcpStream> {
        self.stream
            .as_mut()
            .ok_or_else(|| io::Error::other("the ring writer's stream is in use"))
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            self.home.set(Some(s));
        }
    }
}

impl RingWriter {
    fn new(stream: monoio::net::TcpStream) -> RingWriter {
        use std::os::fd::AsRawFd;
        let fd = stream.as_raw_fd();
        RingWriter {
            stream: Cell::new(Some(stream)),
            fd,
        }
    }

    fn lend(&self) -> Lent<'_> {
        Lent {
            home: &self.stream,
            stream: self.stream.take(),
        }
    }

    /// io_uring read of the block file, then io_uring send, a chunk at a time.
    async fn read_and_send(
        &self,
        file: &std::fs::File,
        offset: u64,
        len: u64,
        stall: Duration,
    ) -> io::Result<()> {
        use monoio::buf::{IoBuf, IoBufMut};
        use monoio::io::AsyncWriteRent;
        /// Bytes read and sent at a time.
        const CHUNK: usize = 256 * 1024;
        let file = monoio::fs::File::from_std(file.try_clone()?)?;
        let mut lent = self.lend();
        let stream = lent.get()?;
        let mut buf: Vec<u8> = Vec::with_capacity(CHUNK);
        let (mut pos, end) = (offset, offset + len);
        let stalled = || io::Error::new(io::ErrorKind::TimedOut, "the peer stopped reading");
        while pos < end {
            let want = usize::try_from(end - pos).unwrap_or(CHUNK).min(CHUNK);
            buf.clear();
            buf.reserve(want);
            let (read, back) = file.read_at(buf.slice_mut(0..want), pos).await;
            buf = back.into_inner();
            let n = read?.min(want);
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the block file ended after {} of {len} bytes", pos - offset),
                ));
            }
            let mut sent = 0;
            while sent < n {
                let write = stream.write(buf.slice(sent..n));
                let (result, back) = monoio::time::timeout(stall, write)
                    .await
                    .map_err(|_| stalled())?;
                buf = back.into_inner();
                match result {
                    Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                    Ok(k) => sent += k,
                    // The socket is non-blocking: a send can come back empty-handed.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        monoio::time::timeout(stall, stream.writable(false))
                            .await
                            .map_err(|_| stalled())??;
                    }
                    Err(e) => return Err(e),
                }
            }
            pos += n as u64;
        }
        Ok(())
    }
}

impl SocketWriter for RingWriter {
    fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor belongs to `self.stream`, open as long as `self`.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }

    fn try_write(&self, op: &mut dyn FnMut() -> io::Result<usize>) -> io::Result<usize> {
        op()
    }

    async fn writable(&self, timeout: Duration) -> io::Result<()> {
        let mut lent = self.lend();
        let stream = lent.get()?;
        match monoio::time::timeout(timeout, stream.writable(false)).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer stopped reading",
            )),
        }
    }

    async fn send_file_read(
        &self,
        file: &std::fs::File,
        offset: u64,
        len: u64,
        stall: Duration,
    ) -> Option<io::Result<()>> {
        Some(self.read_and_send(file, offset, len, stall).await)
    }
}
