//! A TCP delay line: a relay that forwards every chunk a server sends a
//! fixed delay after it arrived, to model a slower network or a slower
//! server without limiting throughput.
//!
//! The gateway bench puts one between the gateway and a worker (the worker
//! advertises the relay's address, so the gateway's cache client dials the
//! relay). For each accepted connection the relay opens one to the upstream
//! and runs two directions:
//!
//! * client → upstream: copied as it arrives (requests are not delayed);
//! * upstream → client: a reader stamps each chunk with its arrival time
//!   and queues it; a writer sends it at `arrival + delay`, in order.
//!
//! It is a delay line, not a per-request lock: many chunks (and so many
//! pipelined responses) are in flight inside the delay at once, so
//! throughput is not capped at one chunk per delay. Memory is bounded per
//! connection by [`MAX_IN_FLIGHT_BYTES`]; beyond that the reader stops
//! reading and TCP pushes back on the server, which at the sizes used here
//! (a few MiB per delay period) never happens.
//!
//! The delay is read when a chunk arrives, so [`DelayLine::set_delay`]
//! applies to every chunk that arrives after it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::harness_error::{HarnessError, HarnessResult};

/// Bytes one connection may hold inside the delay before its reader pauses.
pub const MAX_IN_FLIGHT_BYTES: usize = 64 << 20;

/// Largest chunk read from the upstream at once.
const READ_CHUNK: usize = 256 << 10;

struct Shared {
    delay_us: AtomicU64,
    upstream: Mutex<Option<SocketAddr>>,
}

/// A running delay line. Dropping it stops accepting; connections already
/// relayed end when either side closes.
#[derive(Debug)]
pub struct DelayLine {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("delay_us", &self.delay_us.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl DelayLine {
    /// Binds `listen` (port 0 picks one) and starts accepting. The upstream
    /// is set later with [`set_upstream`](Self::set_upstream) (the worker
    /// needs the relay's address before it starts); a connection accepted
    /// before that is closed at once.
    ///
    /// # Errors
    /// [`HarnessError::Io`] when the address cannot be bound.
    pub async fn bind(listen: SocketAddr) -> HarnessResult<DelayLine> {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| HarnessError::io(format!("binding the delay line on {listen}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the delay line's address", e))?;
        let shared = Arc::new(Shared {
            delay_us: AtomicU64::new(0),
            upstream: Mutex::new(None),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(DelayLine {
            addr,
            shared,
            accept,
        })
    }

    /// Where clients connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the server new connections are relayed to.
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *self
            .shared
            .upstream
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(upstream);
    }

    /// Sets the delay of chunks arriving from now on.
    pub fn set_delay(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_us.store(us, Ordering::Relaxed);
    }

    /// The current delay.
    pub fn delay(&self) -> Duration {
        Duration::from_micros(self.shared.delay_us.load(Ordering::Relaxed))
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(_) => {
                // Out of descriptors or similar: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let upstream = *shared.upstream.lock().unwrap_or_else(|p| p.into_inner());
        let Some(upstream) = upstream else {
            drop(client);
            continue;
        };
        tokio::spawn(relay(client, upstream, shared.clone()));
    }
}

/// Relays one connection until either side closes or fails.
async fn relay(client: TcpStream, upstream: SocketAddr, shared: Arc<Shared>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();

    // Requests: straight through.
    let forward = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    });

    // Responses: stamped on arrival, released `delay` later, in order.
    let budget = Arc::new(Semaphore::new(MAX_IN_FLIGHT_BYTES));
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Bytes)>();
    let reader_budget = budget.clone();
    let reader = tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        loop {
            buf.reserve(READ_CHUNK);
            match server_read.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let due = Instant::now()
                        + Duration::from_micros(shared.delay_us.load(Ordering::Relaxed));
                    let permits = u32::try_from(n.min(MAX_IN_FLIGHT_BYTES)).unwrap_or(u32::MAX);
                    match reader_budget.acquire_many(permits).await {
                        Ok(p) => p.forget(),
                        Err(_) => break,
                    }
                    if tx.send((due, buf.split().freeze())).is_err() {
                        break;
                    }
                }
            }
        }
    });
    while let Some((due, chunk)) = rx.recv().await {
        tokio::time::sleep_until(due).await;
        if client_write.write_all(&chunk).await.is_err() {
            break;
        }
        budget.add_permits(chunk.len().min(MAX_IN_FLIGHT_BYTES));
    }
    let _ = client_write.shutdown().await;
    reader.abort();
    forward.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that sends `chunks` as soon as a client connects, recording
    /// the instant just before each write; returns the bytes sent and those
    /// instants (one per chunk, with the chunk's byte range).
    async fn sender(
        chunks: Vec<Vec<u8>>,
    ) -> (SocketAddr, JoinHandle<Vec<(Instant, usize, usize)>>) {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("addr: {e}"));
        let task = tokio::spawn(async move {
            let (mut s, _) = listener
                .accept()
                .await
                .unwrap_or_else(|e| panic!("accept: {e}"));
            let _ = s.set_nodelay(true);
            let mut sent = Vec::new();
            let mut offset = 0;
            for c in chunks {
                sent.push((Instant::now(), offset, offset + c.len()));
                s.write_all(&c)
                    .await
                    .unwrap_or_else(|e| panic!("write: {e}"));
                offset += c.len();
            }
            s.shutdown()
                .await
                .unwrap_or_else(|e| panic!("shutdown: {e}"));
            sent
        });
        (addr, task)
    }

    fn pattern(chunks: usize, size: usize) -> Vec<Vec<u8>> {
        (0..chunks)
            .map(|i| {
                (0..size)
                    .map(|j| (i.wrapping_mul(31) ^ j.wrapping_mul(7)) as u8)
                    .collect()
            })
            .collect()
    }

    /// Reads everything through the line, returning the bytes and, per
    /// read, the instant it returned and the byte range it covered.
    async fn receive(addr: SocketAddr) -> (Vec<u8>, Vec<(Instant, usize, usize)>) {
        let mut s = TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        let mut all = Vec::new();
        let mut reads = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = s
                .read(&mut buf)
                .await
                .unwrap_or_else(|e| panic!("read: {e}"));
            if n == 0 {
                break;
            }
            reads.push((Instant::now(), all.len(), all.len() + n));
            all.extend_from_slice(&buf[..n]);
        }
        (all, reads)
    }

    #[tokio::test]
    async fn bytes_arrive_in_order_intact_and_no_earlier_than_the_delay() {
        let delay = Duration::from_millis(40);
        let chunks = pattern(20, 100_000);
        let (upstream, task) = sender(chunks.clone()).await;
        let line = DelayLine::bind("127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        line.set_upstream(upstream);
        line.set_delay(delay);
        let (got, reads) = receive(line.local_addr()).await;
        let sent = task.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, chunks.concat(), "bytes differ or are out of order");
        // Every byte left the sender at or before its chunk's stamp plus the
        // write, and was read no earlier than `delay` after that stamp.
        for &(read_at, from, to) in &reads {
            for &(sent_at, s_from, s_to) in &sent {
                if s_from < to && from < s_to {
                    let waited = read_at.saturating_duration_since(sent_at);
                    assert!(
                        waited >= delay,
                        "bytes {from}..{to} arrived {waited:?} after they were sent (delay {delay:?})"
                    );
                }
            }
        }
    }

    #[tokio::test]
    async fn chunks_overlap_inside_the_delay_instead_of_queueing() {
        // 20 chunks sent back to back: a per-chunk lock would take 20
        // delays; a delay line takes about one. The bound is generous (10
        // delays) so a busy machine cannot fail it.
        let delay = Duration::from_millis(100);
        let (upstream, task) = sender(pattern(20, 50_000)).await;
        let line = DelayLine::bind("127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        line.set_upstream(upstream);
        line.set_delay(delay);
        let start = Instant::now();
        let (got, _) = receive(line.local_addr()).await;
        let took = start.elapsed();
        let _ = task.await;
        assert_eq!(got.len(), 20 * 50_000);
        assert!(took >= delay, "{took:?}");
        assert!(took < delay * 10, "the line serialised chunks: {took:?}");
    }

    #[tokio::test]
    async fn requests_pass_straight_through() {
        // An echo server behind the line: the request is not delayed, the
        // echo is, once.
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let upstream = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        tokio::spawn(async move {
            if let Ok((mut s, _)) = listener.accept().await {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            }
        });
        let line = DelayLine::bind("127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        line.set_upstream(upstream);
        line.set_delay(Duration::from_millis(30));
        assert_eq!(line.delay(), Duration::from_millis(30));
        let mut s = TcpStream::connect(line.local_addr())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let start = Instant::now();
        s.write_all(b"ping").await.unwrap_or_else(|e| panic!("{e}"));
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&buf, b"ping");
        assert!(start.elapsed() >= Duration::from_millis(30));
    }
}
