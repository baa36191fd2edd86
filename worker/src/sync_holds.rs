//! A test hook that holds the block store's syncs, as a disk whose writes queue behind
//! others holds them: it proves which answers wait for a fill's bytes to be durable and
//! which do not (a cold object's first bytes are answered from memory while they are
//! written behind; a page is called present only after its sync).
//!
//! Off unless the process starts with `TALON_WORKER_HOLD_SYNCS_WHILE=<path>`: then every
//! fill's data sync waits while a file exists at `<path>` (looked at every 5 ms), and
//! proceeds once it is removed. The variable is read once; a worker without it pays one
//! load of an initialised `OnceLock` per sync.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable that arms the hook.
pub const HOLD_SYNCS_WHILE_ENV: &str = "TALON_WORKER_HOLD_SYNCS_WHILE";

fn armed() -> Option<&'static PathBuf> {
    static HOLD: OnceLock<Option<PathBuf>> = OnceLock::new();
    HOLD.get_or_init(|| {
        let path = PathBuf::from(std::env::var_os(HOLD_SYNCS_WHILE_ENV)?);
        tracing::warn!(path = %path.display(), "a sync hold is armed: fills wait while this file exists");
        Some(path)
    })
    .as_ref()
}

/// Waits (blocking the calling thread, one of the store's blocking-pool threads) while
/// the armed hold file exists.
pub fn wait_while_held() {
    let Some(path) = armed() else { return };
    while path.exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
}
