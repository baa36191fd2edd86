//! `talon-loadgen`: the load generator behind `talon loadgen` (and its alias binary
//! `talon-loadgen`, which `scripts/dataplane_loadtest.sh` runs): a closed-loop or
//! constant-rate load against a worker's data plane or any HTTP server answering
//! ranges, with the server's CPU and memory read from `/proc`. The library holds
//! its parts so tests can run a load in-process with [`run`].
//!
//! It owns the load, its schedule, its statistics and the `/proc` readings. It does
//! not own the comparison benches (deployments, peers such as nginx and Varnish,
//! chaos, network namespaces): those are `talon-bench`, which the shipped `talon`
//! binary does not link.
//!
//! # What `talon-loadgen` measures
//!
//! It opens `--conns` TCP connections to a worker's data plane (before the
//! clock starts), asks the worker once for the object's size and version
//! (`Stat`), and then sends `ReadRange` requests of `--range-size` bytes at
//! random offsets (multiples of `--align`) inside the first `--blocks`
//! blocks of the object. Each connection keeps up to `--depth` requests in
//! flight (pipelined); replies are matched to requests by their request id
//! by a reader that decodes frames as they arrive. Every reply is checked:
//! its type, its request id and its exact payload length. An error frame,
//! a wrong reply or a lost connection is a failed request.
//!
//! * **Closed loop** (default): each connection sends as soon as one of its
//!   `--depth` slots is free. Throughput is what the server sustains at that
//!   concurrency; latency is from send to last payload byte.
//! * **Constant rate** (`--rate R`): request `j` is due at `start + j/R`,
//!   spread over the connections, whatever the server does. Latency is
//!   measured from the *intended* send time, so a server that stalls is
//!   charged for every request that should have been sent meanwhile
//!   (no coordinated omission). A request that could not be sent because all
//!   slots stayed busy until the drain deadline is a failure.
//!
//! The first `--warmup` seconds are run but not sampled. A sample belongs to
//! the window if its (intended) send time falls in it; after the window, the
//! replies still owed are awaited for `--drain-timeout`. With
//! `--server-pid` the server's user and kernel CPU (`/proc/PID/stat`) and
//! RSS (`/proc/PID/status`) are read at the start and end of the window;
//! the load generator's own CPU is always reported, and a warning is printed
//! when it is busy enough to be the bottleneck.
//!
//! `--http URL` runs the same workload against any HTTP/1.1 server (nginx
//! with sendfile, in the load test), one request in flight per keep-alive
//! connection; a reply counts only if it is a `206` with the right
//! `Content-Range` and length.
//!
//! A run with any failed request, or with no samples, is reported as failed:
//! the report carries no latency figures, the first error is printed
//! verbatim and the process exits non-zero. Latency is never computed from
//! error frames.
//!
//! # What it does NOT measure
//!
//! * **A real network.** The load test runs on loopback: no NIC, no
//!   bandwidth limit, no loss. Across a network the link usually binds first.
//! * **A dedicated client.** Client and server share the host's cores; on a
//!   small machine the client's CPU is taken from the server. Read the
//!   client's "cores busy" figure next to the server's.
//! * **Cache misses.** The workload reads blocks that are (after the
//!   warmup, or `--prefetch`) resident; the origin fetch path is not timed.
//! * **Data correctness.** Lengths, ids and types are checked, bytes are not
//!   compared with the object's content.
//! * **The whole read path.** No gateway, no cache-client placement or
//!   retries, no HTTP front: only the worker's data plane (or, with `--http`,
//!   the HTTP server named).
//! * **Sub-millisecond pacing** in constant-rate mode. Due times are exact,
//!   but the client wakes on Tokio's millisecond timer. Its own lateness
//!   while a slot was free is not charged to the server (it is reported as
//!   `client_send_lag_us`); a wait for a busy slot is charged from the due
//!   time up to the latest slot release before the send, a bound that never
//!   flatters the server. At depth 1 near a connection's capacity, a late
//!   send delays the next slot release too, so the tail can be pessimistic
//!   by up to about a millisecond; use a few slots per connection.
//! * **Percentiles finer than 0.1%.** Latencies go into an HDR histogram
//!   with three significant digits.

pub mod cli;
pub mod config;
pub mod error;
pub mod http;
pub mod procfs;
mod run;
pub mod schedule;
pub mod stats;
mod wire;

pub use config::{LoadConfig, Target};
pub use error::{LoadError, Result};
pub use run::run;
pub use stats::{Latency, ProcFigures, Report, markdown_table};
