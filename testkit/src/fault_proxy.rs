//! A TCP proxy in front of a real worker's data plane that injects network faults into
//! what the worker sends back: silence, a stall after some bytes, a cut after some
//! bytes. The worker advertises the proxy's address (`advertise_addr`), so readers
//! reach it only through the proxy; what the readers send passes unchanged (the Hello
//! exchange included), and the worker itself runs untouched.
//!
//! It models what a reader cannot tell apart from a sick worker: a worker frozen
//! (SIGSTOP, a hung disk), one that dribbles and stops mid-answer, one whose connection
//! dies mid-body.
//!
//! It speaks no protocol, so it also stands in front of an origin (the origin's
//! answers held while the origin itself has already answered: a far or busy link).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// What the proxy does to the bytes the worker sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything.
    Pass,
    /// Forward `n` more bytes (over all connections, counted from when the fault was
    /// set), then nothing: the connections stay open and silent.
    StallAfter(u64),
    /// Forward `n` more bytes, then close the connections that reach the limit.
    CutAfter(u64),
}

#[derive(Debug)]
struct Shared {
    target: OnceLock<SocketAddr>,
    fault: Mutex<Fault>,
    /// Bytes forwarded to readers since the fault was set.
    forwarded: AtomicU64,
    /// Bytes readers sent to the worker, ever.
    requested: AtomicU64,
    /// Bytes the worker sent to the proxy, ever (forwarded or held).
    received: AtomicU64,
    changed: Notify,
}

/// A running fault proxy.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Binds on loopback; connections wait for [`FaultProxy::forward_to`].
    ///
    /// # Panics
    /// When it cannot bind.
    pub async fn bind() -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("fault proxy: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("fault proxy: {e}"));
        let shared = Arc::new(Shared {
            target: OnceLock::new(),
            fault: Mutex::new(Fault::Pass),
            forwarded: AtomicU64::new(0),
            requested: AtomicU64::new(0),
            received: AtomicU64::new(0),
            changed: Notify::new(),
        });
        let accepting = shared.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((reader, _)) = listener.accept().await {
                connections.spawn(proxy(reader, accepting.clone()));
            }
        });
        FaultProxy { addr, shared, task }
    }

    /// The address readers connect to (what the worker advertises).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where connections go: the worker's data plane.
    pub fn forward_to(&self, target: SocketAddr) {
        let _ = self.shared.target.set(target);
        self.shared.changed.notify_waiters();
    }

    /// Sets the fault from now on; the byte count starts again.
    pub fn set(&self, fault: Fault) {
        *self.shared.fault.lock().unwrap_or_else(|p| p.into_inner()) = fault;
        self.shared.forwarded.store(0, Ordering::SeqCst);
        self.shared.changed.notify_waiters();
    }

    /// Bytes readers have sent to the worker through the proxy.
    pub fn requested_bytes(&self) -> u64 {
        self.shared.requested.load(Ordering::SeqCst)
    }

    /// Bytes the worker sent back through the proxy, ever, held ones included: a held
    /// answer has been made once this grows.
    pub fn received_bytes(&self) -> u64 {
        self.shared.received.load(Ordering::SeqCst)
    }

    /// Bytes forwarded to readers since the fault was last set.
    pub fn forwarded_bytes(&self) -> u64 {
        self.shared.forwarded.load(Ordering::SeqCst)
    }
}

async fn proxy(reader: TcpStream, shared: Arc<Shared>) {
    let target = loop {
        let changed = shared.changed.notified();
        if let Some(t) = shared.target.get() {
            break *t;
        }
        changed.await;
    };
    let Ok(worker) = TcpStream::connect(target).await else {
        return;
    };
    let _ = reader.set_nodelay(true);
    let _ = worker.set_nodelay(true);
    let (mut reader_rd, mut reader_wr) = reader.into_split();
    let (mut worker_rd, mut worker_wr) = worker.into_split();
    let upstream = {
        let shared = shared.clone();
        async move {
            let mut buf = vec![0u8; 64 << 10];
            while let Ok(n) = reader_rd.read(&mut buf).await {
                if n == 0 || worker_wr.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                shared.requested.fetch_add(n as u64, Ordering::SeqCst);
            }
        }
    };
    let downstream = async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let Ok(n) = worker_rd.read(&mut buf).await else {
                return;
            };
            if n == 0 {
                return;
            }
            shared.received.fetch_add(n as u64, Ordering::SeqCst);
            let mut chunk = &buf[..n];
            while !chunk.is_empty() {
                let changed = shared.changed.notified();
                let fault = *shared.fault.lock().unwrap_or_else(|p| p.into_inner());
                let allowed = match fault {
                    Fault::Pass => chunk.len() as u64,
                    Fault::StallAfter(limit) | Fault::CutAfter(limit) => {
                        limit.saturating_sub(shared.forwarded.load(Ordering::SeqCst))
                    }
                };
                let take = (chunk.len() as u64).min(allowed) as usize;
                if take > 0 {
                    if reader_wr.write_all(&chunk[..take]).await.is_err() {
                        return;
                    }
                    shared.forwarded.fetch_add(take as u64, Ordering::SeqCst);
                    chunk = &chunk[take..];
                    continue;
                }
                match fault {
                    Fault::CutAfter(_) => return,
                    // Silent until the fault changes.
                    _ => changed.await,
                }
            }
        }
    };
    // Either direction ending ends the connection (both halves drop).
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}
