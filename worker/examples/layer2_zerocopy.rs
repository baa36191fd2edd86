//! Layer 2 with the io_uring features monoio does not expose (issue 9): registered
//! (fixed) buffers and `IORING_OP_SEND_ZC`, measured beside `sendfile` and a plain copy,
//! at equal offered load, in CPU per GiB and latency percentiles.
//!
//! One server thread serves ranges of a page-cached file over one loopback TCP
//! connection; a client thread asks for them on a fixed schedule (open loop, so a
//! strategy that falls behind shows it in its latency, measured from the scheduled
//! time) and drains the answers. Strategies:
//!
//! - `sendfile`: `sendfile(2)` from the file to the socket (the worker's default);
//! - `copy`: `pread(2)` into a buffer, `send(2)` (the worker's `copy`);
//! - `fixed`: io_uring `READ_FIXED` into a registered buffer, then `WRITE_FIXED` of it
//!   to the socket (no per-operation page pinning, still two copies);
//! - `fixed+zc`: `READ_FIXED`, then `SEND_ZC` from the registered buffer (the send's copy
//!   removed where the device allows it), waiting for the buffer's notification before
//!   reusing it.
//!
//! The server's CPU is the process's (`getrusage`, io_uring's kernel workers included)
//! less the client thread's. Rounds run the strategies in alternating order (ABCD, DCBA,
//! …). Loopback caveat: the kernel's MSG_ZEROCOPY documentation says data looped to a
//! local socket is copied anyway (a deferred copy), so this shows what the zero-copy
//! send costs here, not what it saves across a NIC.
//!
//! `cargo run --release -p talon-worker --example layer2_zerocopy -- [SECONDS] [ROUNDS]`
//! prints a table and then one JSON line.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use io_uring::{IoUring, cqueue, opcode, types};

const FILE_BYTES: u64 = 256 << 20;
/// `IORING_CQE_F_NOTIF` (linux/io_uring.h): the completion that hands a zero-copy send's
/// buffer back. io-uring 0.6 keeps its `sys` constants private.
const CQE_F_NOTIF: u32 = 1 << 3;
const STRATEGIES: [&str; 4] = ["sendfile", "copy", "fixed", "fixed+zc"];

/// One workload: range size and offered rate.
#[derive(Clone, Copy)]
struct Load {
    len: u64,
    rate: u64,
}

/// The file's contents: a 1 MiB pattern repeated, so a client can check any aligned
/// range of at most 1 MiB without holding the file.
fn pattern() -> Vec<u8> {
    (0..1u32 << 20).map(|i| (i * 31 % 251) as u8).collect()
}

fn cpu_of_process() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn cpu_of_thread() -> Duration {
    // SAFETY: clock_gettime writes into the zeroed struct we own.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The server side of one strategy: serves `len` bytes of `file` at `offset` to `sock`.
struct Server {
    file: std::fs::File,
    sock: TcpStream,
    buf: Vec<u8>,
    ring: IoUring,
}

fn check(res: i32, what: &str) -> std::io::Result<usize> {
    if res < 0 {
        Err(std::io::Error::new(
            std::io::Error::from_raw_os_error(-res).kind(),
            format!("{what}: {}", std::io::Error::from_raw_os_error(-res)),
        ))
    } else {
        Ok(res as usize)
    }
}

impl Server {
    fn new(file: std::fs::File, sock: TcpStream, max_len: usize) -> std::io::Result<Server> {
        let ring = IoUring::new(8)?;
        let buf = vec![0u8; max_len];
        let iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: the buffer lives as long as the registration: both are `Server`'s, and
        // `Drop for Server` unregisters it before any field is dropped. The Vec is never
        // grown, so its pointer stays put.
        unsafe { ring.submitter().register_buffers(&[iov])? };
        Ok(Server {
            file,
            sock,
            buf,
            ring,
        })
    }

    /// Submits `entry` and waits for its completion (and, for a zero-copy send, its
    /// buffer notification); the result.
    fn one(&mut self, entry: io_uring::squeue::Entry, what: &str) -> std::io::Result<usize> {
        // SAFETY: every buffer an entry names is `self.buf`, alive and not touched until
        // the completion (and notification) below has been reaped.
        unsafe {
            self.ring
                .submission()
                .push(&entry.user_data(1))
                .map_err(|_| std::io::Error::other("submission queue full"))?;
        }
        let mut result = None;
        let mut waiting_notif = false;
        loop {
            self.ring.submit_and_wait(1)?;
            for cqe in self.ring.completion() {
                if cqe.flags() & CQE_F_NOTIF != 0 {
                    waiting_notif = false;
                    continue;
                }
                result = Some(cqe.result());
                waiting_notif = cqueue::more(cqe.flags());
            }
            if result.is_some() && !waiting_notif {
                break;
            }
        }
        check(result.unwrap_or(-libc::EIO), what)
    }

    fn serve(&mut self, strategy: &str, offset: u64, len: usize) -> std::io::Result<()> {
        match strategy {
            "sendfile" => {
                let mut off = offset as libc::off_t;
                let mut left = len;
                while left > 0 {
                    // SAFETY: both descriptors are open; `off` is ours.
                    let n = unsafe {
                        libc::sendfile(self.sock.as_raw_fd(), self.file.as_raw_fd(), &mut off, left)
                    };
                    left -= check(if n < 0 { -errno() } else { n as i32 }, "sendfile")?;
                }
                Ok(())
            }
            "copy" => {
                self.file.read_exact_at(&mut self.buf[..len], offset)?;
                self.sock.write_all(&self.buf[..len])
            }
            "fixed" | "fixed+zc" => {
                let fd = types::Fd(self.file.as_raw_fd());
                let read = opcode::ReadFixed::new(fd, self.buf.as_mut_ptr(), len as u32, 0)
                    .offset(offset)
                    .build();
                let got = self.one(read, "read_fixed")?;
                if got != len {
                    return Err(std::io::Error::other("short read of a cached file"));
                }
                let sock = types::Fd(self.sock.as_raw_fd());
                let mut sent = 0;
                while sent < len {
                    // SAFETY: the range lies in the registered buffer.
                    let at = unsafe { self.buf.as_ptr().add(sent) };
                    let rest = (len - sent) as u32;
                    let entry = if strategy == "fixed" {
                        opcode::WriteFixed::new(sock, at, rest, 0).build()
                    } else {
                        opcode::SendZc::new(sock, at, rest)
                            .buf_index(Some(0))
                            .build()
                    };
                    sent += self.one(entry, strategy)?;
                }
                Ok(())
            }
            other => Err(std::io::Error::other(format!("no strategy {other}"))),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.ring.submitter().unregister_buffers();
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// One point's figures.
#[derive(Debug, serde::Serialize)]
struct Point {
    strategy: String,
    len: u64,
    offered_rps: u64,
    achieved_rps: f64,
    server_cpu_s_per_gib: f64,
    /// Client and server together: on loopback the receiver's TCP work can land on
    /// either side, so the sum is the steadier figure.
    total_cpu_s_per_gib: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
}

fn percentile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn run_point(path: &std::path::Path, strategy: &str, load: Load, secs: f64) -> Point {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let requests = (load.rate as f64 * secs) as u64;
    let warmup = (requests / 10).max(1);
    let client = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        let mut sink = vec![0u8; load.len as usize];
        let expected = pattern();
        let mut latencies = Vec::with_capacity(requests as usize);
        let blocks = FILE_BYTES / load.len;
        let start = Instant::now() + Duration::from_millis(20);
        let mut cpu_start = Duration::ZERO;
        let mut measured_start = start;
        for i in 0..requests + warmup {
            if i == warmup {
                cpu_start = cpu_of_thread();
                measured_start = Instant::now();
            }
            let due = start + Duration::from_nanos(i * 1_000_000_000 / load.rate);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let offset = (i * 7919 % blocks) * load.len;
            let mut req = [0u8; 12];
            req[..8].copy_from_slice(&offset.to_le_bytes());
            req[8..].copy_from_slice(&(load.len as u32).to_le_bytes());
            s.write_all(&req).expect("request");
            s.read_exact(&mut sink).expect("answer");
            if i >= warmup {
                latencies.push(due.elapsed().as_nanos() as u64);
            } else {
                // Every warm-up answer is checked whole (outside the measured window): a
                // strategy that sent the wrong bytes would otherwise look cheap.
                let at = (offset % (1 << 20)) as usize;
                assert!(
                    sink[..] == expected[at..at + load.len as usize],
                    "wrong bytes at {offset}"
                );
            }
        }
        let wall = measured_start.elapsed();
        let _ = s.write_all(&[0u8; 12]);
        (latencies, cpu_of_thread() - cpu_start, wall)
    });
    let (sock, _) = listener.accept().expect("accept");
    sock.set_nodelay(true).expect("nodelay");
    let file = std::fs::File::open(path).expect("open");
    let mut server = Server::new(file, sock, load.len as usize).expect("server");
    let mut req = [0u8; 12];
    let mut served = 0u64;
    let mut cpu_start = Duration::ZERO;
    loop {
        server.sock.read_exact(&mut req).expect("request");
        let len = u32::from_le_bytes(req[8..].try_into().unwrap_or_default()) as usize;
        if len == 0 {
            break;
        }
        if served == warmup {
            cpu_start = cpu_of_process();
        }
        let offset = u64::from_le_bytes(req[..8].try_into().unwrap_or_default());
        server.serve(strategy, offset, len).expect("serve");
        served += 1;
    }
    let process_cpu = cpu_of_process() - cpu_start;
    let (mut latencies, client_cpu, wall) = client.join().expect("client");
    latencies.sort_unstable();
    let bytes = requests * load.len;
    let server_cpu = process_cpu.saturating_sub(client_cpu);
    let gib = bytes as f64 / (1u64 << 30) as f64;
    Point {
        strategy: strategy.to_owned(),
        len: load.len,
        offered_rps: load.rate,
        achieved_rps: requests as f64 / wall.as_secs_f64(),
        server_cpu_s_per_gib: server_cpu.as_secs_f64() / gib,
        total_cpu_s_per_gib: process_cpu.as_secs_f64() / gib,
        p50_us: percentile(&latencies, 0.50),
        p99_us: percentile(&latencies, 0.99),
        p999_us: percentile(&latencies, 0.999),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(3.0);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("block.blk");
    {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("create");
        let chunk = pattern();
        for i in 0..FILE_BYTES >> 20 {
            f.write_all_at(&chunk, i << 20).expect("write");
        }
        // Read it once: the page cache holds it, as a hot block's pages are.
        let mut sink = vec![0u8; 1 << 20];
        for i in 0..FILE_BYTES >> 20 {
            f.read_exact_at(&mut sink, i << 20).expect("read");
        }
    }
    let loads = [
        Load {
            len: 64 << 10,
            rate: 10_000,
        },
        Load {
            len: 1 << 20,
            rate: 1_000,
        },
    ];
    let mut points = Vec::new();
    for round in 0..rounds {
        for load in loads {
            let order: Vec<&str> = if round % 2 == 0 {
                STRATEGIES.to_vec()
            } else {
                STRATEGIES.iter().rev().copied().collect()
            };
            for s in order {
                let p = run_point(&path, s, load, secs);
                eprintln!(
                    "round {} {:>9} {:>5} KiB: {:>7.0} rps, server {:.3} s/GiB, total {:.3} s/GiB, p99 {:.0} µs",
                    round + 1,
                    s,
                    load.len >> 10,
                    p.achieved_rps,
                    p.server_cpu_s_per_gib,
                    p.total_cpu_s_per_gib,
                    p.p99_us
                );
                points.push(p);
            }
        }
    }
    println!(
        "| range | strategy | offered rps | achieved rps | server CPU s/GiB | client + server CPU s/GiB | p50 µs | p99 µs | p99.9 µs |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for p in &points {
        println!(
            "| {} KiB | {} | {} | {:.0} | {:.3} | {:.3} | {:.0} | {:.0} | {:.0} |",
            p.len >> 10,
            p.strategy,
            p.offered_rps,
            p.achieved_rps,
            p.server_cpu_s_per_gib,
            p.total_cpu_s_per_gib,
            p.p50_us,
            p.p99_us,
            p.p999_us
        );
    }
    println!();
    println!("Medians over {rounds} rounds:");
    println!();
    println!("| range | strategy | server CPU s/GiB | client + server CPU s/GiB | p99 µs |");
    println!("|---|---|---:|---:|---:|");
    for load in loads {
        for strategy in STRATEGIES {
            let of = |f: fn(&Point) -> f64| {
                let mut v: Vec<f64> = points
                    .iter()
                    .filter(|p| p.len == load.len && p.strategy == strategy)
                    .map(f)
                    .collect();
                v.sort_by(f64::total_cmp);
                match v.len() {
                    0 => 0.0,
                    n if n % 2 == 1 => v[n / 2],
                    n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
                }
            };
            println!(
                "| {} KiB | {} | {:.3} | {:.3} | {:.0} |",
                load.len >> 10,
                strategy,
                of(|p| p.server_cpu_s_per_gib),
                of(|p| p.total_cpu_s_per_gib),
                of(|p| p.p99_us)
            );
        }
    }
    println!();
    println!(
        "{}",
        serde_json::to_string(&points).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    );
}
