//! The flags of a command that talks to a running cluster's coordinator (`talon status`,
//! `talon warm`, `talon pin`): where it is, and the cluster secret that proves the command may ask.

/// Where the coordinator is and how to authenticate to it.
#[derive(Debug, clap::Args)]
pub struct CoordinatorArgs {
    /// The coordinator's admin URL (http://HOST:PORT).
    #[arg(
        long,
        env = "TALON_COORDINATOR",
        default_value = "http://127.0.0.1:7000"
    )]
    pub coordinator: String,
    #[command(flatten)]
    pub cluster: talon_coordinator::auth::ClusterSecretArgs,
}

impl CoordinatorArgs {
    /// A client of the coordinator, signing as `role`.
    ///
    /// # Errors
    /// A missing or unreadable cluster secret, or a URL that is not one.
    pub fn client(
        &self,
        role: talon_core::cluster_auth::Role,
    ) -> anyhow::Result<talon_coordinator::client::CoordinatorClient> {
        Ok(
            talon_coordinator::client::CoordinatorClient::new(self.coordinator.clone())?
                .with_auth(self.cluster.load()?, role),
        )
    }
}
