//! The data plane: the 16-byte-frame protocol readers use to fetch byte ranges.
//!
//! It has two layers. Layer 1 schedules the protocol: connections, frames, timers,
//! a few dozen bytes per request. Layer 2 ([`crate::zero_copy`]) moves the payload
//! from the block file to the socket with `sendfile`, so object bytes never enter user
//! space; it is runtime-free (plain functions over descriptors).
//!
//! Layer 1 has two implementations that differ only in how bytes move:
//! [`ring_plane`] (io_uring, one pinned ring thread per core, one `SO_REUSEPORT`
//! listener each; the default) and [`tokio_plane`] (the portable fallback). Both run
//! the same protocol code ([`connection`]) over the same request semantics
//! ([`requests`]) and the same shared worker state. Which one serves is decided by
//! [`select_plane`] before binding: a runtime probe of io_uring (set up a ring, submit
//! a no-op), not a kernel-version check, because a kernel that has io_uring may still
//! refuse it (the `io_uring_disabled` sysctl, seccomp, a container profile). When the
//! probe fails the worker warns, saying why, and serves on Tokio.

pub(crate) mod admission;
pub(crate) mod connection;
pub mod requests;
pub mod ring_plane;
pub mod tokio_plane;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use requests::Services;

use crate::error::{Result, WorkerError};

/// The environment variable that pins the Tokio plane (the escape hatch).
pub const FORCE_TOKIO_ENV: &str = "TALON_WORKER_FORCE_TOKIO_DATA_PLANE";

/// Which plane the operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaneRequest {
    /// io_uring when the probe passes, else Tokio with a warning.
    Default,
    /// Tokio, whatever the host can do.
    ForceTokio,
}

impl PlaneRequest {
    /// [`PlaneRequest::ForceTokio`] when `TALON_WORKER_FORCE_TOKIO_DATA_PLANE` is set
    /// to anything but empty, `0` or `false`; else [`PlaneRequest::Default`].
    pub fn from_env() -> PlaneRequest {
        match std::env::var(FORCE_TOKIO_ENV) {
            Ok(v) if !matches!(v.trim(), "" | "0" | "false") => PlaneRequest::ForceTokio,
            _ => PlaneRequest::Default,
        }
    }
}

/// How Layer 2 moves a resident range from the block file to the socket. Chosen by
/// measurement (docs/data-plane.md); the other is kept to measure against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer2 {
    /// `sendfile(2)`: the page-cache pages go to the socket without a copy in user
    /// space (the default).
    Sendfile,
    /// `pread(2)` into a per-connection buffer, then `send(2)`: one copy through user
    /// space, which is what would let every hit's pages be checksummed on the way.
    Copy,
    /// io_uring read of the block file into a buffer, then io_uring send (the rings
    /// only; the Tokio plane copies instead).
    Uring,
}

impl Layer2 {
    /// `sendfile` or `copy`.
    pub fn name(self) -> &'static str {
        match self {
            Layer2::Sendfile => "sendfile",
            Layer2::Copy => "copy",
            Layer2::Uring => "uring",
        }
    }
}

impl std::str::FromStr for Layer2 {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Layer2, String> {
        match s {
            "sendfile" => Ok(Layer2::Sendfile),
            "copy" => Ok(Layer2::Copy),
            "uring" => Ok(Layer2::Uring),
            other => Err(format!(
                "'{other}' is not a Layer 2 strategy (sendfile, copy, uring)"
            )),
        }
    }
}

/// When the kernel runs a ring's completion work (a receive that became ready, a
/// poll that fired). Chosen by measurement (docs/data-plane.md); the others are kept
/// to measure against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingSetup {
    /// The kernel's default: an arriving completion interrupts the ring thread
    /// wherever it is (in a `sendfile`, say) to run its work.
    Plain,
    /// `IORING_SETUP_COOP_TASKRUN` (Linux 5.19+): no interrupt; the work runs at the
    /// thread's next entry to the kernel, which on a busy ring is moments away (the
    /// default; where the kernel refuses the flag the ring is set up plain).
    CoopTaskrun,
    /// `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN` (Linux 6.1+): the work
    /// waits until the ring thread waits for completions, and runs there in one batch.
    /// As cheap as `CoopTaskrun`, but a ring that always has tasks to run waits rarely,
    /// and the completions it holds back tripled the p99 at 1024 connections.
    DeferTaskrun,
}

impl RingSetup {
    /// `plain`, `coop` or `defer`.
    pub fn name(self) -> &'static str {
        match self {
            RingSetup::Plain => "plain",
            RingSetup::CoopTaskrun => "coop",
            RingSetup::DeferTaskrun => "defer",
        }
    }
}

impl std::str::FromStr for RingSetup {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<RingSetup, String> {
        match s {
            "plain" => Ok(RingSetup::Plain),
            "coop" => Ok(RingSetup::CoopTaskrun),
            "defer" => Ok(RingSetup::DeferTaskrun),
            other => Err(format!(
                "'{other}' is not a ring set-up (plain, coop, defer)"
            )),
        }
    }
}

/// The plane a worker serves on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaneKind {
    /// io_uring rings, thread per core.
    IoUring {
        /// Ring threads (and listeners on the port).
        rings: usize,
    },
    /// The Tokio fallback.
    Tokio,
}

impl PlaneKind {
    /// `io_uring` or `tokio`, as logs, `/metrics` and the member view say it.
    pub fn name(self) -> &'static str {
        match self {
            PlaneKind::IoUring { .. } => "io_uring",
            PlaneKind::Tokio => "tokio",
        }
    }

    /// Ring threads (0 on Tokio).
    pub fn rings(self) -> usize {
        match self {
            PlaneKind::IoUring { rings } => rings,
            PlaneKind::Tokio => 0,
        }
    }
}

/// Limits of the data plane, and which plane to run.
#[derive(Debug, Clone)]
pub struct DataPlaneConfig {
    /// Most connections that have proved the cluster secret (all rings together); a
    /// connection whose proof is verified waits, unwelcomed, for one to end.
    pub max_connections: usize,
    /// Most connections still in their Hello exchange (all rings together): they wait
    /// apart from the authenticated ones, so connections that never say Hello cannot
    /// hold a gateway's place. Over it, a new connection is closed at once.
    pub max_unauthenticated: usize,
    /// Most of those one address may hold once the pool is half full.
    pub max_unauthenticated_per_peer: usize,
    /// The whole Hello exchange must finish within this from the connection's start
    /// (a gateway's takes two round trips).
    pub hello_timeout: Duration,
    /// Most requests in flight per connection.
    pub pipeline_depth: usize,
    /// Once a frame has started, the rest must arrive within this, measured from its
    /// first byte; the whole Hello exchange must finish within it too (and within
    /// [`DataPlaneConfig::hello_timeout`]).
    pub frame_timeout: Duration,
    /// A connection with no frame in progress is closed after this.
    pub idle_timeout: Duration,
    /// A peer that stops reading a reply for this long loses its connection.
    pub write_stall_timeout: Duration,
    /// Which plane to run (default: from `TALON_WORKER_FORCE_TOKIO_DATA_PLANE`).
    pub plane: PlaneRequest,
    /// io_uring ring threads; 0 = one per core this process may run on.
    pub rings: usize,
    /// Whether each ring thread is pinned to its own core (the design). Unpinned, the
    /// scheduler may move a ring to whichever core is idle: for a host whose cores the
    /// worker shares with other busy processes (docs/data-plane.md).
    pub pin_rings: bool,
    /// How each ring is set up: when the kernel runs io_uring's completion work
    /// (docs/data-plane.md).
    pub ring_setup: RingSetup,
    /// Test hook: behave as if the io_uring probe had failed for this reason.
    pub simulated_probe_failure: Option<String>,
    /// How resident ranges are sent.
    pub layer2: Layer2,
}

impl Default for DataPlaneConfig {
    fn default() -> Self {
        DataPlaneConfig {
            max_connections: 4096,
            max_unauthenticated: 1024,
            max_unauthenticated_per_peer: 32,
            hello_timeout: Duration::from_secs(3),
            pipeline_depth: 64,
            frame_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            write_stall_timeout: Duration::from_secs(60),
            plane: PlaneRequest::from_env(),
            rings: 0,
            pin_rings: true,
            ring_setup: RingSetup::CoopTaskrun,
            simulated_probe_failure: None,
            layer2: Layer2::Sendfile,
        }
    }
}

/// Whether this process can use io_uring right now: sets up a small ring and submits
/// a no-op, waiting for its completion. The error says why not (the system call's
/// error: `ENOSYS` without io_uring, `EPERM` when a sysctl, seccomp or a container
/// profile forbids it).
///
/// # Errors
/// The reason io_uring cannot be used, in words.
pub fn probe_io_uring() -> std::result::Result<(), String> {
    let mut ring =
        io_uring::IoUring::new(2).map_err(|e| format!("setting up a ring failed: {e}"))?;
    let nop = io_uring::opcode::Nop::new().build().user_data(0x7a10);
    // SAFETY: a no-op references no memory.
    unsafe { ring.submission().push(&nop) }
        .map_err(|_| "the submission queue is full".to_owned())?;
    ring.submit_and_wait(1)
        .map_err(|e| format!("submitting a no-op failed: {e}"))?;
    let done = ring
        .completion()
        .next()
        .ok_or_else(|| "the no-op did not complete".to_owned())?;
    if done.result() < 0 {
        return Err(format!(
            "the no-op failed: {}",
            std::io::Error::from_raw_os_error(-done.result())
        ));
    }
    Ok(())
}

/// Decides the plane: Tokio when forced; io_uring when the probe passes (with
/// `config.rings` rings, 0 = one per core); Tokio with a warning saying why otherwise.
pub fn select_plane(config: &DataPlaneConfig) -> PlaneKind {
    if config.plane == PlaneRequest::ForceTokio {
        tracing::warn!(
            "data plane on Tokio: forced ({FORCE_TOKIO_ENV} or --force-tokio-data-plane); io_uring is not used even where it works"
        );
        return PlaneKind::Tokio;
    }
    let probe = match &config.simulated_probe_failure {
        Some(why) => Err(format!("simulated: {why}")),
        None => probe_io_uring(),
    };
    match probe {
        Ok(()) => PlaneKind::IoUring {
            rings: if config.rings == 0 {
                std::thread::available_parallelism().map_or(1, usize::from)
            } else {
                config.rings
            },
        },
        Err(why) => {
            tracing::warn!(reason = %why, "io_uring is unavailable: the data plane serves on Tokio (slower at high connection counts)");
            PlaneKind::Tokio
        }
    }
}

/// A data plane that is serving.
#[derive(Debug)]
pub struct RunningPlane {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Which plane.
    pub kind: PlaneKind,
    /// Ends when the plane has drained after shutdown; aborting it cuts every
    /// connection at once.
    pub task: JoinHandle<()>,
}

/// Binds and starts the plane [`select_plane`] picks. When the rings cannot start
/// after a passing probe (memory for the rings, for example), it warns and serves on
/// Tokio.
///
/// # Errors
/// The listener cannot bind.
pub async fn start(
    listen: SocketAddr,
    services: Arc<Services>,
    config: DataPlaneConfig,
    shutdown: watch::Receiver<bool>,
) -> Result<RunningPlane> {
    let mut kind = select_plane(&config);
    if let PlaneKind::IoUring { rings } = kind {
        match ring_plane::start(
            listen,
            rings,
            services.clone(),
            config.clone(),
            shutdown.clone(),
        )
        .await
        {
            Ok((addr, task)) => return Ok(RunningPlane { addr, kind, task }),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(WorkerError::io("binding the data plane", e));
            }
            Err(e) => {
                tracing::warn!(error = %e, "the io_uring rings could not start: the data plane serves on Tokio");
                kind = PlaneKind::Tokio;
            }
        }
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| WorkerError::io("binding the data plane", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| WorkerError::io("reading the data-plane address", e))?;
    tracing::info!(%addr, layer2 = %config.layer2.name(), "data plane on Tokio");
    let task = tokio::spawn(tokio_plane::serve(listener, services, config, shutdown));
    Ok(RunningPlane { addr, kind, task })
}

/// Binds the local socket at `path` and serves it on Tokio until `shutdown`, then
/// removes it: the co-located fast path, where a reader on this host gets each cached
/// read as the block file's descriptor (a FileHandoff) and reads the bytes itself, so
/// they cross no socket between the two. The protocol, the Hello exchange and every
/// limit are the TCP plane's. The socket is made owner-only; a stale socket file left
/// by a dead worker is replaced, a live one is not.
///
/// # Errors
/// The path is taken by a live socket or anything else, or cannot be bound.
pub async fn start_local(
    path: &std::path::Path,
    services: Arc<Services>,
    config: DataPlaneConfig,
    shutdown: watch::Receiver<bool>,
) -> Result<JoinHandle<()>> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let bind_error = |e| WorkerError::io("binding the local socket", e);
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let stale =
            meta.file_type().is_socket() && tokio::net::UnixStream::connect(path).await.is_err();
        if !stale {
            return Err(bind_error(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("{} exists and is not a dead socket", path.display()),
            )));
        }
        std::fs::remove_file(path).map_err(bind_error)?;
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(bind_error)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind_error)?;
    tracing::info!(path = %path.display(), "local socket for readers on this host");
    let path = path.to_owned();
    Ok(tokio::spawn(async move {
        tokio_plane::serve(listener, services, config, shutdown).await;
        let _ = std::fs::remove_file(&path);
    }))
}
