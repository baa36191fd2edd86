//! A test hook that makes reads of cached pages fail as a failing disk does, to prove
//! that the worker drops a page it cannot read back, refetches it, and keeps serving
//! (issue 13's disk suite: "read errors on block files").
//!
//! Off unless the process starts with `TALON_WORKER_FAIL_PAGE_READS=<n>`: then the
//! first `n` reads of a cached page's bytes back from its block file (the checksum
//! verification a worker does before a page's first hit in a process) fail with `EIO`,
//! and the ones after succeed, as a disk that recovers would. The variable is read
//! once; a worker without it pays one relaxed atomic load per page read.

use std::io;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that arms the hook.
pub const FAIL_PAGE_READS_ENV: &str = "TALON_WORKER_FAIL_PAGE_READS";

/// Reads still to fail.
fn armed() -> Option<&'static AtomicU64> {
    static LEFT: OnceLock<Option<AtomicU64>> = OnceLock::new();
    LEFT.get_or_init(|| {
        let n = std::env::var(FAIL_PAGE_READS_ENV)
            .ok()?
            .parse::<u64>()
            .ok()?;
        tracing::warn!(
            reads = n,
            "a read fault is armed: this worker's next page reads will fail"
        );
        Some(AtomicU64::new(n))
    })
    .as_ref()
}

/// An `EIO` for this page read when the hook says it fails.
pub fn page_read() -> io::Result<()> {
    let Some(left) = armed() else { return Ok(()) };
    match left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)) {
        Ok(_) => Err(io::Error::from_raw_os_error(libc::EIO)),
        Err(_) => Ok(()),
    }
}
