//! The cluster secret on the client side of the coordinator's API: loading it from the
//! flags every binary of a cluster shares, making a fresh one, and the header requests
//! are signed in ([`talon_core::cluster_auth`] holds the signature itself).

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use talon_core::cluster_auth::ClusterSecret;

use crate::error::CoordinatorError;

/// The request header that carries the signature: `<role> <unix seconds> <signature>`.
pub const AUTH_HEADER: &str = "x-talon-auth";

/// A fresh random secret (32 random bytes, hex): `talon up` and tests make one per run.
pub fn random_secret() -> ClusterSecret {
    let mut bytes = [0u8; 32];
    if getrandom::getrandom(&mut bytes).is_err() {
        // The OS gave no randomness; std's hasher keys are seeded from it too, so
        // this is a last resort, never silent predictability from a constant.
        use std::hash::{BuildHasher, Hasher};
        for chunk in bytes.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0x0074_616c_6f6e);
            chunk.copy_from_slice(&h.finish().to_le_bytes()[..chunk.len()]);
        }
    }
    #[allow(clippy::expect_used)]
    ClusterSecret::new(hex::encode(bytes).as_bytes()).expect("64 hex characters are long enough")
}

/// Reads a cluster secret file (`--cluster-secret-file`), or takes the secret from the
/// environment value (`TALON_CLUSTER_SECRET`) when no file is given.
///
/// # Errors
/// [`CoordinatorError::InvalidConfig`] when neither is given, the file cannot be read,
/// or the secret is shorter than 16 bytes.
pub fn load_secret(
    file: Option<&Path>,
    env_value: Option<&str>,
) -> Result<ClusterSecret, CoordinatorError> {
    let bytes = match (file, env_value) {
        (Some(path), _) => std::fs::read(path).map_err(|e| {
            CoordinatorError::InvalidConfig(format!(
                "reading the cluster secret {}: {e}",
                path.display()
            ))
        })?,
        (None, Some(v)) => v.as_bytes().to_vec(),
        (None, None) => {
            return Err(CoordinatorError::InvalidConfig(
                "no cluster secret: give --cluster-secret-file or TALON_CLUSTER_SECRET".into(),
            ));
        }
    };
    ClusterSecret::new(&bytes).map_err(|e| CoordinatorError::InvalidConfig(e.to_string()))
}

/// The cluster secret's flags, shared by every binary of a cluster
/// (`#[command(flatten)]`).
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterSecretArgs {
    /// File holding the cluster secret (at least 16 bytes), the same for the
    /// coordinator, every worker and every gateway of a cluster.
    #[arg(long, env = "TALON_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: Option<std::path::PathBuf>,
    /// The cluster secret itself, when no file is given (kept out of the process list).
    #[arg(
        long = "cluster-secret",
        env = "TALON_CLUSTER_SECRET",
        hide_env_values = true
    )]
    pub cluster_secret: Option<String>,
}

impl ClusterSecretArgs {
    /// The secret the flags name ([`load_secret`]).
    ///
    /// # Errors
    /// As [`load_secret`].
    pub fn load(&self) -> Result<ClusterSecret, CoordinatorError> {
        load_secret(
            self.cluster_secret_file.as_deref(),
            self.cluster_secret.as_deref(),
        )
    }
}

/// Seconds since the Unix epoch now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
