//! The flags of a command that talks to a running cluster's coordinator (`talon status`,
//! `talon warm`, `talon pin`, `talon invalidate`, `talon freshness`): where it is, and the
//! cluster secret that proves the command may ask. With neither given, a `talon up`
//! serving `--data-dir` (default `talon-data`, as `talon up`'s) is found through its
//! state file ([`crate::up_state`]).

use std::path::PathBuf;

use anyhow::Context;
use talon_core::cluster_auth::ClusterSecret;

use crate::up_state::UpState;

/// Where a command asks when nothing names a coordinator and no state file is found.
const DEFAULT_COORDINATOR: &str = "http://127.0.0.1:7000";

/// Where the coordinator is and how to authenticate to it.
#[derive(Debug, clap::Args)]
pub struct CoordinatorArgs {
    /// The coordinator's admin URL (http://HOST:PORT; a bare HOST:PORT is taken as
    /// http). Default: the one of the `talon up` serving --data-dir, else
    /// http://127.0.0.1:7000.
    #[arg(long, env = "TALON_COORDINATOR")]
    pub coordinator: Option<String>,
    /// The data folder of a `talon up` on this machine: its state file
    /// (`DATA_DIR/.talon-up.json`) names the coordinator and the cluster secret.
    #[arg(long, env = "TALON_DATA_DIR", default_value = crate::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    #[command(flatten)]
    pub cluster: talon_coordinator::auth::ClusterSecretArgs,
}

/// Where a command asks and how it signs, resolved once from the flags and the state
/// file ([`CoordinatorArgs::resolve`]).
pub struct Target {
    /// The coordinator's URL.
    pub url: String,
    /// The cluster secret.
    pub secret: ClusterSecret,
}

impl Target {
    /// A client of the coordinator, signing as `role`.
    ///
    /// # Errors
    /// A URL that is not one.
    pub fn client(
        &self,
        role: talon_core::cluster_auth::Role,
    ) -> anyhow::Result<talon_coordinator_client::client::CoordinatorClient> {
        Ok(
            talon_coordinator_client::client::CoordinatorClient::new(self.url.clone())?
                .with_auth(self.secret.clone(), role),
        )
    }
}

impl CoordinatorArgs {
    /// The coordinator's URL (--coordinator, else the state file's, else the default)
    /// and the cluster secret (the flags', else the one the state file holds or names,
    /// when no --coordinator points elsewhere), reading the state file once.
    ///
    /// # Errors
    /// A state file that cannot be read; no secret anywhere, or one that cannot be read.
    pub fn resolve(&self) -> anyhow::Result<Target> {
        // The state file speaks for its own coordinator only: with --coordinator it is
        // read (best effort) for the secret when it names that same coordinator.
        let state = match &self.coordinator {
            Some(url) => UpState::read(&self.data_dir)
                .ok()
                .flatten()
                .filter(|state| with_scheme(&state.coordinator) == with_scheme(url)),
            None => UpState::read(&self.data_dir)?,
        };
        if let Some(state) = &state
            && !std::path::Path::new(&format!("/proc/{}", state.pid)).exists()
        {
            anyhow::bail!(
                "the talon up that wrote {} (pid {}) is no longer running (stopped without \
                 cleaning up): start it again, or give --coordinator",
                UpState::path(&self.data_dir).display(),
                state.pid
            );
        }
        let url = match (&self.coordinator, &state) {
            (Some(url), _) => url.clone(),
            (None, Some(state)) => state.coordinator.clone(),
            (None, None) => DEFAULT_COORDINATOR.to_owned(),
        };
        Ok(Target {
            url: with_scheme(&url),
            secret: self.secret(state)?,
        })
    }

    fn secret(&self, state: Option<UpState>) -> anyhow::Result<ClusterSecret> {
        if self.cluster.cluster_secret_file.is_some() || self.cluster.cluster_secret.is_some() {
            return Ok(self.cluster.load()?);
        }
        let Some(state) = state else {
            if self.coordinator.is_some() {
                anyhow::bail!(
                    "no cluster secret: give --cluster-secret-file or TALON_CLUSTER_SECRET (with \
                     --coordinator, a talon up's state file is read only when it names that \
                     coordinator; none in {} does)",
                    self.data_dir.display()
                );
            }
            anyhow::bail!(
                "no cluster secret: give --cluster-secret-file or TALON_CLUSTER_SECRET (or run \
                 this where --data-dir names a running talon up's data folder; no {} there)",
                UpState::path(&self.data_dir).display()
            );
        };
        match (state.cluster_secret, state.cluster_secret_file) {
            (Some(text), _) => Ok(ClusterSecret::new(text.as_bytes())?),
            (None, Some(file)) => Ok(talon_coordinator::auth::load_secret(Some(&file), None)
                .with_context(|| {
                    format!(
                        "the secret file {}",
                        UpState::path(&self.data_dir).display()
                    )
                })?),
            (None, None) => anyhow::bail!(
                "the talon up serving {} was given its cluster secret in TALON_CLUSTER_SECRET: \
                 set the same here",
                self.data_dir.display()
            ),
        }
    }
}

/// A coordinator URL with its scheme: a bare HOST:PORT is http, as every part takes it.
fn with_scheme(url: &str) -> String {
    let url = url.trim_end_matches('/');
    if url.contains("://") {
        url.to_owned()
    } else {
        format!("http://{url}")
    }
}
