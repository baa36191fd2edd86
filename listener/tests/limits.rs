//! The listener's timeouts and caps, over real sockets: a half-sent header, an idle
//! keep-alive connection, a peer over its connection cap, and a reader that never reads
//! are each cut, while a well-behaved client on the same listener is served.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use talon_listener::{ListenerLimits, serve_router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Sets a flag when dropped: the response body of a cut connection is dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

async fn start(
    limits: ListenerLimits,
    dropped: Arc<AtomicBool>,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let router = axum::Router::new()
        .route("/hello", axum::routing::get(|| async { "hello" }))
        .route(
            "/endless",
            axum::routing::get(move || {
                let flag = DropFlag(dropped.clone());
                async move {
                    let chunk = bytes::Bytes::from(vec![b'x'; 1 << 20]);
                    let stream = futures_util::stream::repeat(chunk).map(move |c| {
                        let _keep = &flag;
                        Ok::<_, std::io::Error>(c)
                    });
                    Body::from_stream(stream)
                }
            }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_router(listener, limits, router, async move {
        let _ = stopped.await;
    }));
    (addr, stop)
}

use futures_util::StreamExt as _;

fn short() -> ListenerLimits {
    ListenerLimits {
        header_read_timeout: Duration::from_millis(300),
        write_stall_timeout: Duration::from_millis(300),
        max_connections: 64,
        max_connections_per_peer: 4,
        ..ListenerLimits::default()
    }
}

/// Reads until the server closes; fails the test after `limit`.
async fn closed_within(conn: &mut TcpStream, limit: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    tokio::time::timeout(limit, conn.read_to_end(&mut out))
        .await
        .expect("the server closes the connection")
        .ok();
    out
}

async fn get_hello(addr: SocketAddr, from: [u8; 4]) -> String {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    let mut conn = socket.connect(addr).await.unwrap();
    conn.write_all(b"GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    String::from_utf8_lossy(&closed_within(&mut conn, Duration::from_secs(10)).await).into_owned()
}

#[tokio::test]
async fn a_half_sent_header_and_an_idle_connection_are_closed() {
    let (addr, _stop) = start(short(), Arc::default()).await;
    let started = Instant::now();
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut idle = TcpStream::connect(addr).await.unwrap();
    // A served request, then nothing: the keep-alive connection waits for no one.
    idle.write_all(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = closed_within(&mut idle, Duration::from_secs(10)).await;
    assert!(String::from_utf8_lossy(&answer).ends_with("hello"));
    closed_within(&mut half, Duration::from_secs(10)).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(get_hello(addr, [127, 0, 0, 1]).await.ends_with("hello"));
}

#[tokio::test]
async fn a_peer_over_its_cap_is_refused_and_others_are_served() {
    let (addr, _stop) = start(
        ListenerLimits {
            header_read_timeout: Duration::from_secs(60),
            ..short()
        },
        Arc::default(),
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /hello HTTP/1.1\r\n").await.unwrap();
        held.push(c);
    }
    // The fifth from the same address is closed at once, without an answer.
    let mut fifth = TcpStream::connect(addr).await.unwrap();
    let _ = fifth
        .write_all(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        .await;
    assert!(
        closed_within(&mut fifth, Duration::from_secs(10))
            .await
            .is_empty()
    );
    // Another peer address is served meanwhile.
    assert!(get_hello(addr, [127, 0, 0, 2]).await.ends_with("hello"));
    // A slot comes back when a held connection goes.
    drop(held.pop());
    let served = async {
        loop {
            let text = get_hello(addr, [127, 0, 0, 1]).await;
            if text.ends_with("hello") {
                return;
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("a freed slot");
}

#[tokio::test]
async fn a_reader_that_never_reads_is_cut() {
    let dropped = Arc::new(AtomicBool::new(false));
    let (addr, _stop) = start(short(), dropped.clone()).await;
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut conn = socket.connect(addr).await.unwrap();
    conn.write_all(b"GET /endless HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    // Never read: the server's writes stall, and the stall timeout ends the response.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dropped.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "the stalled response was never cut"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(conn);
}

#[tokio::test]
async fn shutdown_stops_accepting() {
    let (addr, stop) = start(short(), Arc::default()).await;
    assert!(get_hello(addr, [127, 0, 0, 1]).await.ends_with("hello"));
    stop.send(()).unwrap();
    let refused = async {
        loop {
            if TcpStream::connect(addr).await.is_err() {
                return;
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), refused)
        .await
        .expect("the listener closed");
}

/// Opens a connection from `from` and sends the first line of a request head, never
/// the rest: it holds a place on the listener until cut.
async fn half_open(addr: SocketAddr, from: [u8; 4]) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    let mut conn = socket.connect(addr).await.unwrap();
    conn.write_all(b"GET /hello HTTP/1.1\r\n").await.unwrap();
    conn
}

/// The red-team review's RT-03: a few addresses holding half-sent request heads filled
/// an admin listener (256 places, 64 a peer, four peers), so every new connection —
/// the liveness probe, `talon status`, a worker registering — was closed at once for
/// as long as they kept them open. A connection that has not sent a whole request head
/// yet is the one to go when a new one needs its place: the new client is served, and
/// the held connections are cut oldest first.
#[tokio::test]
async fn connections_that_never_finish_a_request_cannot_lock_a_listener() {
    let limits = ListenerLimits {
        header_read_timeout: Duration::from_secs(60),
        max_connections: 8,
        max_connections_per_peer: 4,
        ..ListenerLimits::default()
    };
    let (addr, _stop) = start(limits, Arc::default()).await;
    let mut held = Vec::new();
    for from in [[127, 0, 0, 2], [127, 0, 0, 3]] {
        for _ in 0..4 {
            held.push(half_open(addr, from).await);
        }
    }
    // The listener is full of them; a new client is served all the same, and again.
    for _ in 0..3 {
        let answer = tokio::time::timeout(Duration::from_secs(10), get_hello(addr, [127, 0, 0, 4]))
            .await
            .expect("answered");
        assert!(answer.ends_with("hello"), "{answer:?}");
    }
    // The oldest held connections were cut to make room.
    let cut = closed_within(&mut held[0], Duration::from_secs(10)).await;
    assert!(cut.is_empty(), "{cut:?}");
}

/// Only connections between requests make room: when every place holds a request in
/// progress (a response being sent), a new connection is refused as before.
#[tokio::test]
async fn connections_serving_a_request_are_never_cut_for_a_new_one() {
    let limits = ListenerLimits {
        header_read_timeout: Duration::from_secs(60),
        write_stall_timeout: Duration::from_secs(60),
        max_connections: 4,
        max_connections_per_peer: 4,
        ..ListenerLimits::default()
    };
    let dropped = Arc::new(AtomicBool::new(false));
    let (addr, _stop) = start(limits, dropped.clone()).await;
    let mut busy = Vec::new();
    for _ in 0..4 {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /endless HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        // The response has begun: its first bytes arrive.
        let mut first = [0u8; 16];
        c.read_exact(&mut first).await.unwrap();
        busy.push(c);
    }
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from(([127, 0, 0, 5], 0))).unwrap();
    let mut late = socket.connect(addr).await.unwrap();
    let _ = late
        .write_all(b"GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await;
    assert!(
        closed_within(&mut late, Duration::from_secs(10))
            .await
            .is_empty(),
        "a connection over the cap was served"
    );
    assert!(
        !dropped.load(Ordering::SeqCst),
        "a response in progress was cut"
    );
}
