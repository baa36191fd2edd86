//! A raw data-plane connection for tests that speak the wire protocol by hand: hostile
//! frames (garbage, truncated, oversized) and pipelined requests written back to back.
//!
//! [`RawConnection::send`] writes any bytes; [`RawConnection::next`] returns the next
//! whole answer the worker sent (a control frame, or a ReadRangeReply with its payload
//! gathered), the end of the connection, or a timeout — a test never hangs on a worker
//! that stays silent.

use std::collections::VecDeque;
use std::time::Duration;

use talon_core::wire::{BulkKind, Event, Frame, FrameDecoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// One thing read from a worker.
pub enum RawAnswer {
    /// A whole control frame (Pong, StatReply, Error, ...).
    Frame(Frame),
    /// A whole ReadRangeReply.
    Data {
        /// The request id it echoes.
        request_id: u32,
        /// Its payload.
        bytes: Vec<u8>,
    },
    /// The worker closed the connection cleanly between frames.
    Closed,
    /// The connection ended inside a frame (a cut reply).
    ClosedMidFrame,
    /// The connection was reset or failed.
    Failed(std::io::ErrorKind),
    /// The worker sent bytes that are not a valid frame.
    BadFrame(talon_core::Error),
    /// Nothing arrived in time.
    TimedOut,
}

impl std::fmt::Debug for RawAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RawAnswer::Frame(frame) => f.debug_tuple("Frame").field(frame).finish(),
            // The length, not the payload: a failing test's message stays readable.
            RawAnswer::Data { request_id, bytes } => f
                .debug_struct("Data")
                .field("request_id", request_id)
                .field("len", &bytes.len())
                .finish_non_exhaustive(),
            RawAnswer::Closed => f.write_str("Closed"),
            RawAnswer::ClosedMidFrame => f.write_str("ClosedMidFrame"),
            RawAnswer::Failed(kind) => f.debug_tuple("Failed").field(kind).finish(),
            RawAnswer::BadFrame(e) => f.debug_tuple("BadFrame").field(e).finish(),
            RawAnswer::TimedOut => f.write_str("TimedOut"),
        }
    }
}

/// The reading side of a raw connection.
#[derive(Debug)]
pub struct RawReader {
    rd: OwnedReadHalf,
    decoder: FrameDecoder,
    ready: VecDeque<RawAnswer>,
    bulk: Option<(u32, Vec<u8>)>,
    ended: bool,
}

impl RawReader {
    /// The next answer, waiting at most `timeout` for it.
    pub async fn next(&mut self, timeout: Duration) -> RawAnswer {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if let Some(a) = self.ready.pop_front() {
                return a;
            }
            if self.ended {
                return RawAnswer::Closed;
            }
            let n = match tokio::time::timeout_at(deadline, self.rd.read(&mut buf)).await {
                Err(_) => return RawAnswer::TimedOut,
                Ok(Err(e)) => {
                    self.ended = true;
                    return RawAnswer::Failed(e.kind());
                }
                Ok(Ok(0)) => {
                    self.ended = true;
                    return if self.decoder.is_idle() {
                        RawAnswer::Closed
                    } else {
                        RawAnswer::ClosedMidFrame
                    };
                }
                Ok(Ok(n)) => n,
            };
            let mut input = &buf[..n];
            loop {
                match self.decoder.decode(&mut input) {
                    Ok(None) => break,
                    Ok(Some(Event::Frame(frame))) => self.ready.push_back(RawAnswer::Frame(frame)),
                    Ok(Some(Event::BulkStart(start))) => {
                        if !matches!(start.kind, BulkKind::ReadRangeReply) {
                            self.ready
                                .push_back(RawAnswer::BadFrame(talon_core::Error::DecoderFailed));
                            self.ended = true;
                            break;
                        }
                        self.bulk = Some((
                            start.header.request_id(),
                            Vec::with_capacity(start.len as usize),
                        ));
                    }
                    Ok(Some(Event::BulkData(data))) => {
                        if let Some((_, b)) = &mut self.bulk {
                            b.extend_from_slice(data);
                        }
                    }
                    Ok(Some(Event::BulkEnd)) => {
                        if let Some((request_id, bytes)) = self.bulk.take() {
                            self.ready.push_back(RawAnswer::Data { request_id, bytes });
                        }
                    }
                    Err(e) => {
                        self.ready.push_back(RawAnswer::BadFrame(e));
                        self.ended = true;
                        break;
                    }
                }
            }
        }
    }

    /// Reads until the connection ends (or `timeout` passes), returning every answer
    /// before the end and how it ended.
    pub async fn until_end(&mut self, timeout: Duration) -> (Vec<RawAnswer>, RawAnswer) {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut answers = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                a @ (RawAnswer::Frame(_) | RawAnswer::Data { .. }) => answers.push(a),
                end => return (answers, end),
            }
        }
    }
}

/// A raw connection to a worker's data plane.
#[derive(Debug)]
pub struct RawConnection {
    /// The writing side.
    pub writer: OwnedWriteHalf,
    /// The reading side.
    pub reader: RawReader,
}

impl RawConnection {
    /// Connects to `addr` without authenticating (for tests of what an unauthenticated
    /// peer gets: an error frame and a closed connection).
    ///
    /// # Panics
    /// When the connection cannot be made in 5 s.
    pub async fn connect(addr: impl tokio::net::ToSocketAddrs + std::fmt::Debug) -> RawConnection {
        let what = format!("{addr:?}");
        let stream = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
            .await
            .unwrap_or_else(|_| panic!("connecting to {what} timed out"))
            .unwrap_or_else(|e| panic!("connecting to {what}: {e}"));
        let _ = stream.set_nodelay(true);
        RawConnection::from_stream(stream)
    }

    /// Connects to `addr` and authenticates as `role` (the Hello exchange), so what the
    /// test sends next is judged as an authenticated peer's.
    ///
    /// # Panics
    /// When the connection or the Hello exchange fails.
    pub async fn authenticated(
        addr: impl tokio::net::ToSocketAddrs + std::fmt::Debug,
        secret: &talon_core::cluster_auth::ClusterSecret,
        role: talon_core::cluster_auth::Role,
    ) -> RawConnection {
        let what = format!("{addr:?}");
        let mut stream = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
            .await
            .unwrap_or_else(|_| panic!("connecting to {what} timed out"))
            .unwrap_or_else(|e| panic!("connecting to {what}: {e}"));
        let _ = stream.set_nodelay(true);
        talon_cache_client::hello::authenticate(
            &mut stream,
            secret,
            role,
            None,
            Duration::from_secs(5),
        )
        .await
        .unwrap_or_else(|e| panic!("Hello with {what}: {e}"));
        RawConnection::from_stream(stream)
    }

    fn from_stream(stream: TcpStream) -> RawConnection {
        let (rd, writer) = stream.into_split();
        RawConnection {
            writer,
            reader: RawReader {
                rd,
                decoder: FrameDecoder::new(),
                ready: VecDeque::new(),
                bulk: None,
                ended: false,
            },
        }
    }

    /// Connects as a reader, sends one ReadRange `req` and returns its answer (waiting
    /// at most `timeout`).
    ///
    /// # Panics
    /// When the connection, the Hello exchange or the send fails.
    pub async fn read_once(
        addr: std::net::SocketAddr,
        secret: &talon_core::cluster_auth::ClusterSecret,
        req: talon_core::wire::ReadRangeRequest,
        timeout: Duration,
    ) -> RawAnswer {
        let mut conn =
            RawConnection::authenticated(addr, secret, talon_core::cluster_auth::Role::Reader)
                .await;
        let frame = talon_core::Message::ReadRange(req)
            .encode(1)
            .unwrap_or_else(|e| panic!("encoding a ReadRange: {e}"));
        conn.send(&frame)
            .await
            .unwrap_or_else(|e| panic!("sending a ReadRange: {e}"));
        conn.next(timeout).await
    }

    /// Writes `bytes` as they are.
    ///
    /// # Errors
    /// The socket's error (a worker that already closed the connection).
    pub async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(bytes).await?;
        self.writer.flush().await
    }

    /// Closes the writing side (the worker reads EOF).
    ///
    /// # Errors
    /// The socket's error.
    pub async fn finish_writing(&mut self) -> std::io::Result<()> {
        self.writer.shutdown().await
    }

    /// The next answer; see [`RawReader::next`].
    pub async fn next(&mut self, timeout: Duration) -> RawAnswer {
        self.reader.next(timeout).await
    }
}
