//! The state file `talon up` writes into its data folder, `.talon-up.json` (mode 0600),
//! so that `talon status`, `warm`, `pin`, `invalidate` and `freshness` run with no flags
//! find the deployment: its endpoints, its block size and how to authenticate to its
//! coordinator. Removed when `talon up` stops; a file left by one that was killed names
//! a coordinator nobody answers at, which the tools then say.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The file's name inside the data folder.
pub const STATE_FILE: &str = ".talon-up.json";

/// What a running `talon up` tells the operator tools.
#[derive(Debug, Serialize, Deserialize)]
pub struct UpState {
    /// The process.
    pub pid: u32,
    /// The coordinator's URL.
    pub coordinator: String,
    /// The S3 front's URL.
    pub s3: String,
    /// The Azure front's URL (with the account).
    pub azure: String,
    /// The gateway's admin URL (`/metrics`).
    pub admin: String,
    /// The cluster's status page.
    #[serde(default)]
    pub status: String,
    /// Each worker's admin URL (`/metrics`, `/healthz`, `/readyz`).
    #[serde(default)]
    pub workers: Vec<String>,
    /// The cluster's block size, in bytes (for a person: the tools ask the coordinator).
    pub block_size: u64,
    /// The cluster secret, when `talon up` made it (none was given); otherwise `None`
    /// and [`UpState::cluster_secret_file`] or the operator's own environment names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_secret: Option<String>,
    /// The cluster secret file `talon up` was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_secret_file: Option<PathBuf>,
}

impl UpState {
    /// The state file of the data folder `data_dir`.
    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(STATE_FILE)
    }

    /// Writes it whole (a temporary file readable only by this user, then a rename).
    ///
    /// # Errors
    /// The I/O error.
    pub fn write(&self, data_dir: &Path) -> anyhow::Result<()> {
        // With --origin and --cache-dir elsewhere nothing else made the folder.
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("creating {}", data_dir.display()))?;
        let path = Self::path(data_dir);
        let tmp = data_dir.join(format!("{STATE_FILE}.tmp"));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options
            .open(&tmp)
            .with_context(|| format!("writing {}", tmp.display()))?;
        file.write_all(&serde_json::to_vec_pretty(self)?)?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
    }

    /// The state of the `talon up` serving `data_dir`; `None` when there is no file.
    ///
    /// # Errors
    /// A file that cannot be read or is not a state file.
    pub fn read(data_dir: &Path) -> anyhow::Result<Option<UpState>> {
        let path = Self::path(data_dir);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("{} is not a talon up state file", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Removes the file, if it is this process's.
    pub fn remove(data_dir: &Path) {
        if let Ok(Some(state)) = Self::read(data_dir)
            && state.pid == std::process::id()
        {
            let _ = std::fs::remove_file(Self::path(data_dir));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_state_file_is_private_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        assert!(UpState::read(dir.path()).unwrap().is_none());
        let state = UpState {
            pid: std::process::id(),
            coordinator: "http://127.0.0.1:7000".into(),
            s3: "http://127.0.0.1:9000".into(),
            azure: "http://127.0.0.1:10000/devstoreaccount1".into(),
            admin: "http://127.0.0.1:9300".into(),
            status: "http://127.0.0.1:9301/".into(),
            workers: vec!["http://127.0.0.1:40001".into()],
            block_size: 64 << 20,
            cluster_secret: Some("ab".repeat(32)),
            cluster_secret_file: None,
        };
        state.write(dir.path()).unwrap();
        let read = UpState::read(dir.path()).unwrap().unwrap();
        assert_eq!(read.coordinator, state.coordinator);
        assert_eq!(read.cluster_secret, state.cluster_secret);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(UpState::path(dir.path()))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
        UpState::remove(dir.path());
        assert!(UpState::read(dir.path()).unwrap().is_none());
    }
}
