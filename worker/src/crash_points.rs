//! Crash points: named places in a page fill where a test can make the worker process
//! die, to prove that the block store's ordering (bytes durable before the metadata
//! that calls them present, metadata published by rename) leaves nothing wrong behind
//! whatever instant a crash comes at (issue 13's crash-in-fill suite).
//!
//! Off unless the process starts with `TALON_WORKER_CRASH_AT=<point>:<n>`: the process
//! aborts (SIGABRT, no unwinding, no flush of anything but what the kernel already
//! holds) the `n`th time it reaches `<point>`. The variable is read once; a worker
//! without it pays one relaxed atomic load per point reached. This is a process crash,
//! not a power cut: what was written but not yet synced survives it in the page cache.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that arms a crash point.
pub const CRASH_AT_ENV: &str = "TALON_WORKER_CRASH_AT";

/// Where a fill can be made to crash, in the order a fill passes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// A page's bytes written to the block file, not yet synced.
    PageWritten,
    /// The fill's pages synced, not yet marked present.
    PagesSynced,
    /// The new metadata written and synced to its temporary file, not yet renamed.
    MetaWritten,
    /// The metadata renamed into place, its folder not yet synced.
    MetaRenamed,
}

impl CrashPoint {
    /// Every point, in fill order.
    pub const ALL: [CrashPoint; 4] = [
        CrashPoint::PageWritten,
        CrashPoint::PagesSynced,
        CrashPoint::MetaWritten,
        CrashPoint::MetaRenamed,
    ];

    /// The point's name in [`CRASH_AT_ENV`].
    pub fn name(self) -> &'static str {
        match self {
            CrashPoint::PageWritten => "page-written",
            CrashPoint::PagesSynced => "pages-synced",
            CrashPoint::MetaWritten => "meta-written",
            CrashPoint::MetaRenamed => "meta-renamed",
        }
    }
}

/// The armed point and after how many passes it fires.
struct Armed {
    point: CrashPoint,
    at: u64,
    passed: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let value = std::env::var(CRASH_AT_ENV).ok()?;
            let (name, at) = value.split_once(':').unwrap_or((value.as_str(), "1"));
            let point = CrashPoint::ALL.into_iter().find(|p| p.name() == name)?;
            let at = at.parse::<u64>().ok()?.max(1);
            tracing::warn!(
                point = name,
                at,
                "a crash point is armed: this worker will abort"
            );
            Some(Armed {
                point,
                at,
                passed: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// Marks that a fill reached `point`; aborts the process if that is the armed point's
/// armed pass.
pub fn reached(point: CrashPoint) {
    let Some(armed) = armed() else { return };
    if armed.point == point && armed.passed.fetch_add(1, Ordering::Relaxed) + 1 == armed.at {
        std::process::abort();
    }
}
