//! Layer 2 of the data plane: bulk movement between a block file and a socket without
//! payload bytes entering user space. Runtime-free: plain functions over file
//! descriptors.
//!
//! `sendfile` can wait on two things: a full socket (a slow reader) and the disk (a
//! page-cache miss). A Layer 1 must never wait on either on its reactor thread, so
//! there are two ways to send: when [`is_resident`] says every byte is in the page
//! cache, Layer 1 drives [`sendfile_once`] (non-blocking on its socket) from its own
//! readiness loop, with no hand-off; otherwise [`send_file_range`] does the whole
//! transfer on a thread that may block (a blocking pool). [`send_more`] sends the
//! small reply header that precedes a payload.

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Set once the kernel has said it has no `cachestat(2)` (before Linux 6.5).
static NO_CACHESTAT: AtomicBool = AtomicBool::new(false);

/// Whether every byte of `file` in `offset..offset + len` is in the page cache now,
/// so that a `sendfile` of it will not wait for the disk. Uses `cachestat(2)` (Linux
/// 6.5 and later; one system call, no data touched). `false` whenever it cannot tell
/// (an older kernel, an error, an empty range): the caller then takes the path that may
/// block, which is always correct. A page evicted between this check and the send
/// makes that one send wait for the disk.
pub fn is_resident(file: &impl AsFd, offset: u64, len: u64) -> bool {
    if len == 0 || NO_CACHESTAT.load(Ordering::Relaxed) {
        return false;
    }
    let page = rustix::param::page_size() as u64;
    let (first, last) = (offset / page, (offset + len - 1) / page);
    match cachestat(file, offset, len) {
        Ok(cached) => cached > last - first,
        Err(e) => {
            if e.raw_os_error() == Some(libc::ENOSYS) {
                NO_CACHESTAT.store(true, Ordering::Relaxed);
            }
            false
        }
    }
}

/// `cachestat(2)`: how many pages of `file` in the range are in the page cache.
#[cfg(target_os = "linux")]
fn cachestat(file: &impl AsFd, offset: u64, len: u64) -> io::Result<u64> {
    use std::os::fd::AsRawFd;
    /// `struct cachestat_range` of the kernel's UAPI.
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    /// `struct cachestat` of the kernel's UAPI.
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    /// The same number on every architecture (syscalls added since 5.1 share one table).
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range { off: offset, len };
    let mut stat = Stat::default();
    // SAFETY: the descriptor is open for the duration of the call (borrowed from
    // `file`); `range` and `stat` are live, correctly laid out (repr(C), the kernel's
    // field order) and exclusively borrowed; flags must be 0. The kernel writes only
    // within `stat`.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_fd().as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut Stat,
            0u32,
        )
    };
    if rc == 0 {
        Ok(stat.nr_cache)
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn cachestat(_file: &impl AsFd, _offset: u64, _len: u64) -> io::Result<u64> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// One `sendfile(2)` of at most `want` bytes of `file` from `*pos` to `socket`,
/// advancing `*pos`. On a non-blocking socket with a full buffer it fails with
/// [`io::ErrorKind::WouldBlock`] and moves nothing; `Ok(0)` means the file ended at
/// `*pos`. A page-cache miss makes the call wait for the disk.
///
/// # Errors
/// `WouldBlock`, `Interrupted`, and socket or file errors, as `io::Error`.
pub fn sendfile_once(
    socket: &impl AsFd,
    file: &impl AsFd,
    pos: &mut u64,
    want: u64,
) -> io::Result<usize> {
    let want = usize::try_from(want).unwrap_or(usize::MAX).min(1 << 30);
    rustix::fs::sendfile(socket.as_fd(), file.as_fd(), Some(pos), want).map_err(io::Error::from)
}

/// One `send(2)` of `bytes` with `MSG_MORE`: the kernel holds them back to share a
/// segment with what follows (a reply header with its `sendfile` payload), instead of
/// pushing a 16-byte packet of its own. Returns the bytes accepted.
///
/// # Errors
/// `WouldBlock` on a full non-blocking socket; `Interrupted`; socket errors.
pub fn send_more(socket: &impl AsFd, bytes: &[u8]) -> io::Result<usize> {
    rustix::net::send(socket.as_fd(), bytes, rustix::net::SendFlags::MORE).map_err(io::Error::from)
}

/// Sends `len` bytes of `file` starting at `offset` to `socket` with `sendfile(2)`,
/// all of them or an error.
///
/// The socket may be non-blocking (a Tokio socket's duplicate): when its buffer is full
/// this waits for writability with `poll(2)`, at most `stall_timeout` at a time, on the
/// calling thread — so call it from a blocking pool, never from a reactor or ring thread.
///
/// # Errors
/// [`io::ErrorKind::UnexpectedEof`] when the file ends before `offset + len` (a block
/// file shorter than its present pages); [`io::ErrorKind::TimedOut`] when the peer
/// stops reading for `stall_timeout`; other socket or file errors. After an error the
/// peer has received a prefix of the bytes, so the caller must close the connection.
pub fn send_file_range(
    socket: &impl AsFd,
    file: &impl AsFd,
    offset: u64,
    len: u64,
    stall_timeout: Duration,
) -> io::Result<u64> {
    let mut sent = 0u64;
    let mut pos = offset;
    while sent < len {
        let want = usize::try_from(len - sent)
            .unwrap_or(usize::MAX)
            .min(1 << 30);
        match rustix::fs::sendfile(socket.as_fd(), file.as_fd(), Some(&mut pos), want) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the block file ended after {sent} of {len} bytes"),
                ));
            }
            Ok(n) => sent += n as u64,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => wait_writable(socket, stall_timeout)?,
            Err(e) => return Err(io::Error::from(e)),
        }
    }
    Ok(sent)
}

/// Waits until `socket` can take more bytes, at most `timeout`.
fn wait_writable(socket: &impl AsFd, timeout: Duration) -> io::Result<()> {
    wait_for(
        socket,
        rustix::event::PollFlags::OUT,
        timeout,
        "the peer stopped reading",
    )
}

/// Waits with `poll(2)` until `socket` is ready for `events`, at most `timeout`
/// (then [`io::ErrorKind::TimedOut`], saying `what`). A hang-up or error on the socket
/// is ready too: the next call on it reports what happened.
fn wait_for(
    socket: &impl AsFd,
    events: rustix::event::PollFlags,
    timeout: Duration,
    what: &str,
) -> io::Result<()> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, what.to_owned()));
        }
        let mut fds = [PollFd::new(socket, events)];
        let ts = Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        match poll(&mut fds, Some(&ts)) {
            Ok(0) => continue,
            Ok(_) => {
                let revents = fds[0].revents();
                if events.contains(PollFlags::OUT)
                    && revents.intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL)
                {
                    return Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "the peer went away",
                    ));
                }
                return Ok(());
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}

/// Moves exactly `len` bytes from `socket` into `file` at `offset` with `splice(2)`
/// through a pipe, for pushes of block data (ingest) that should not pass through user
/// space. The socket may be non-blocking: when it has no bytes this waits for them with
/// `poll(2)` on the calling thread, until `deadline` — so call it from a blocking pool,
/// never from a reactor or ring thread.
///
/// # Errors
/// [`io::ErrorKind::UnexpectedEof`] when the peer closes early,
/// [`io::ErrorKind::TimedOut`] at `deadline`; pipe, socket or file errors. After an
/// error the file holds a prefix of the bytes: the caller discards it.
pub fn splice_to_file(
    socket: &impl AsFd,
    file: &impl AsFd,
    offset: u64,
    len: u64,
    deadline: std::time::Instant,
) -> io::Result<u64> {
    use rustix::pipe::{SpliceFlags, pipe_with, splice};
    let (pipe_rd, pipe_wr) =
        pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(io::Error::from)?;
    let mut moved = 0u64;
    let mut file_pos = offset;
    while moved < len {
        let want = usize::try_from(len - moved)
            .unwrap_or(usize::MAX)
            .min(1 << 20);
        let into_pipe = match splice(
            socket.as_fd(),
            None,
            &pipe_wr,
            None,
            want,
            SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
        ) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the peer closed after {moved} of {len} bytes"),
                ));
            }
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                wait_for(
                    socket,
                    rustix::event::PollFlags::IN,
                    left,
                    "the rest of the push",
                )?;
                continue;
            }
            Err(e) => return Err(io::Error::from(e)),
        };
        let mut drained = 0;
        while drained < into_pipe {
            match splice(
                &pipe_rd,
                None,
                file.as_fd(),
                Some(&mut file_pos),
                into_pipe - drained,
                SpliceFlags::MOVE,
            ) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "the file accepted no bytes",
                    ));
                }
                Ok(n) => drained += n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(io::Error::from(e)),
            }
        }
        moved += into_pipe as u64;
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::fs::FileExt;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn residency_is_known_only_for_bytes_in_the_page_cache() {
        let f = tempfile::tempfile().unwrap();
        // A hole never read or written has no pages in the cache.
        f.set_len(1 << 20).unwrap();
        assert!(!is_resident(&f, 512 << 10, 64 << 10));
        assert!(!is_resident(&f, 0, 0));
        f.write_all_at(&[3; 64 << 10], 0).unwrap();
        if NO_CACHESTAT.load(Ordering::Relaxed) {
            return; // a kernel before 6.5: every answer is "unknown", which is safe
        }
        assert!(is_resident(&f, 0, 64 << 10));
        assert!(is_resident(&f, 100, 1000));
        // Straddling written and never-touched bytes: not all resident.
        assert!(!is_resident(&f, 60 << 10, 8 << 10));
    }

    #[test]
    fn sends_exactly_the_range() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let (tx, mut rx) = pair();
        let reader = std::thread::spawn(move || {
            let mut got = vec![0; 200_000];
            rx.read_exact(&mut got).unwrap();
            got
        });
        assert_eq!(
            send_file_range(&tx, &f, 50_000, 200_000, Duration::from_secs(5)).unwrap(),
            200_000
        );
        assert_eq!(reader.join().unwrap(), data[50_000..250_000]);
    }

    #[test]
    fn a_short_file_is_an_error_not_a_short_success() {
        let f = tempfile::tempfile().unwrap();
        f.write_all_at(&[1; 100], 0).unwrap();
        let (tx, _rx) = pair();
        let err = send_file_range(&tx, &f, 50, 100, Duration::from_secs(5)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_nonblocking_socket_that_fills_waits_then_completes_or_times_out() {
        let mut f = tempfile::tempfile().unwrap();
        let data = vec![7u8; 8 << 20];
        f.write_all(&data).unwrap();
        let (tx, _idle_reader) = pair();
        tx.set_nonblocking(true).unwrap();
        // Nobody reads: the socket buffer fills and the call times out.
        let err = send_file_range(&tx, &f, 0, 8 << 20, Duration::from_millis(200)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        // A reader that drains: everything arrives.
        let (tx, mut rx) = pair();
        tx.set_nonblocking(true).unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            rx.read_to_end(&mut got).unwrap();
            got.len()
        });
        assert_eq!(
            send_file_range(&tx, &f, 0, 8 << 20, Duration::from_secs(10)).unwrap(),
            8 << 20
        );
        drop(tx);
        assert_eq!(reader.join().unwrap(), 8 << 20);
    }

    #[test]
    fn splices_socket_bytes_into_a_file() {
        let f = tempfile::tempfile().unwrap();
        let (mut tx, rx) = pair();
        let data: Vec<u8> = (0..150_000u32).map(|i| (i % 13) as u8).collect();
        let sent = data.clone();
        let writer = std::thread::spawn(move || tx.write_all(&sent).unwrap());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        assert_eq!(
            splice_to_file(&rx, &f, 4096, 150_000, deadline).unwrap(),
            150_000
        );
        writer.join().unwrap();
        let mut back = vec![0; 150_000];
        f.read_exact_at(&mut back, 4096).unwrap();
        assert_eq!(back, data);
    }

    #[test]
    fn a_push_cut_short_or_stalled_is_an_error_not_a_short_success() {
        let f = tempfile::tempfile().unwrap();
        let soon = || std::time::Instant::now() + Duration::from_millis(300);
        // The peer closes after 1,000 of 5,000 bytes.
        let (mut tx, rx) = pair();
        rx.set_nonblocking(true).unwrap();
        tx.write_all(&[5; 1000]).unwrap();
        drop(tx);
        let err = splice_to_file(&rx, &f, 0, 5000, soon() + Duration::from_secs(5)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        // The peer stops sending but keeps the connection open.
        let (mut tx, rx) = pair();
        rx.set_nonblocking(true).unwrap();
        tx.write_all(&[5; 1000]).unwrap();
        let err = splice_to_file(&rx, &f, 0, 5000, soon()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop(tx);
    }
}
