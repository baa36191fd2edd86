//! `talon invalidate`: makes every gateway and worker of the cluster forget what it
//! learned under a prefix (object metadata, listing pages), within a heartbeat: the
//! next read of anything there asks the origin (the coordinator's
//! `POST /v1/invalidations`, the admin role). Cached bytes stay: a block is keyed by
//! its object's version, so an object that did not change keeps its blocks.
//!
//! `talon invalidate s3://BUCKET/PREFIX` (or `az://ACCOUNT/CONTAINER/PREFIX`, or a key
//! path) invalidates; with no prefix it lists the invalidations still handed out.

use anyhow::Context;
use talon_coordinator_client::api::{InvalidationsView, cluster_prefix_problem};
use talon_core::cluster_auth::Role;

/// `talon invalidate`'s flags.
#[derive(Debug, clap::Args)]
pub struct InvalidateArgs {
    /// Prefixes to invalidate: s3://BUCKET/PREFIX, az://ACCOUNT/CONTAINER/PREFIX, or as
    /// key paths (s3/BUCKET/PREFIX). None: list the invalidations in force.
    prefixes: Vec<String>,
    #[command(flatten)]
    target: crate::coordinator_args::CoordinatorArgs,
    /// Print one line of JSON instead of the table.
    #[arg(long)]
    json: bool,
}

fn print(view: &InvalidationsView, json: bool) -> anyhow::Result<()> {
    if json {
        crate::output::line(format_args!("{}", serde_json::to_string(view)?));
        return Ok(());
    }
    crate::output::line(format_args!(
        "invalidations in force (version {}; each for 10 minutes):",
        view.version
    ));
    if view.invalidations.is_empty() {
        crate::output::line(format_args!("  (none)"));
    }
    let now = talon_coordinator::invalidations::unix_ms_now();
    for i in &view.invalidations {
        let ago = now.saturating_sub(i.at_unix_ms) as f64 / 1000.0;
        crate::output::line(format_args!("  {}  {ago:.1} s ago", i.prefix));
    }
    Ok(())
}

/// Lists or makes invalidations.
///
/// # Errors
/// A prefix that names no bucket or container, a coordinator that cannot be reached or
/// refuses (only the admin role may invalidate).
pub async fn invalidate(args: InvalidateArgs) -> anyhow::Result<()> {
    let named: Vec<String> = args
        .prefixes
        .iter()
        .map(|p| crate::pin::key_path_prefix(p))
        .collect();
    if let Some(problem) = named
        .iter()
        .find_map(|p| cluster_prefix_problem(p, "invalidation"))
    {
        anyhow::bail!(problem);
    }
    let target = args.target.resolve()?;
    let client = target.client(Role::Admin)?;
    let at = &target.url;
    let mut view = None;
    for prefix in &named {
        view = Some(
            client
                .invalidate(prefix)
                .await
                .with_context(|| format!("invalidating {prefix} at {at}"))?,
        );
    }
    let view = match view {
        Some(view) => view,
        None => client
            .invalidations()
            .await
            .with_context(|| format!("asking {at} for the invalidations"))?,
    };
    print(&view, args.json)
}
