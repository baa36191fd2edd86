//! `talon pin`: the cluster's pinned prefixes, which every worker keeps from eviction
//! within its `--pin-share` (the coordinator's `GET`/`PUT /v1/pins`; the workers take the
//! list with their next heartbeat).
//!
//! `talon pin` lists them; `talon pin PREFIX…` adds, `--remove PREFIX…` removes,
//! `--clear` removes all. A change reads the list and writes it back only if nobody
//! changed it meanwhile (409 otherwise: run it again).

use anyhow::Context;
use talon_coordinator_client::api::{PinsRequest, PinsView};
use talon_core::cluster_auth::Role;

/// `talon pin`'s flags.
#[derive(Debug, clap::Args)]
pub struct PinArgs {
    /// Prefixes to pin (or with --remove, to unpin): s3://BUCKET/PREFIX,
    /// az://ACCOUNT/CONTAINER/PREFIX, or as key paths (s3/BUCKET/PREFIX). None: list.
    prefixes: Vec<String>,
    /// Unpin the prefixes named instead.
    #[arg(long, requires = "prefixes")]
    remove: bool,
    /// Unpin every prefix.
    #[arg(long, conflicts_with_all = ["prefixes", "remove"])]
    clear: bool,
    #[command(flatten)]
    target: crate::coordinator_args::CoordinatorArgs,
    /// Print one line of JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// A prefix as the workers match it: a key path (`s3://B/P` → `s3/B/P`).
pub fn key_path_prefix(arg: &str) -> String {
    for scheme in ["s3", "az"] {
        if let Some(rest) = arg.strip_prefix(&format!("{scheme}://")) {
            return format!("{scheme}/{rest}");
        }
    }
    arg.to_owned()
}

/// The list after adding (or removing) `named`, in order, without duplicates.
fn changed(current: &[String], named: &[String], remove: bool) -> Vec<String> {
    if remove {
        return current
            .iter()
            .filter(|p| !named.contains(p))
            .cloned()
            .collect();
    }
    let mut out = current.to_vec();
    for p in named {
        if !out.contains(p) {
            out.push(p.clone());
        }
    }
    out
}

fn print(view: &PinsView, json: bool) -> anyhow::Result<()> {
    if json {
        crate::output::line(format_args!("{}", serde_json::to_string(view)?));
        return Ok(());
    }
    crate::output::line(format_args!("pinned prefixes (version {}):", view.version));
    if view.prefixes.is_empty() {
        crate::output::line(format_args!("  (none)"));
    }
    for p in &view.prefixes {
        crate::output::line(format_args!("  {p}"));
    }
    Ok(())
}

/// Lists or changes the cluster's pins.
///
/// # Errors
/// A prefix that cannot be pinned, a coordinator that cannot be reached or refuses
/// (only the admin role may change pins), or a concurrent change (409).
pub async fn pin(args: PinArgs) -> anyhow::Result<()> {
    let named: Vec<String> = args.prefixes.iter().map(|p| key_path_prefix(p)).collect();
    if let Some(problem) = named
        .iter()
        .find_map(|p| talon_coordinator_client::api::pin_prefix_problem(p))
    {
        anyhow::bail!(problem);
    }
    let target = args.target.resolve()?;
    let client = target.client(Role::Admin)?;
    let at = &target.url;
    let current = client
        .pins()
        .await
        .with_context(|| format!("asking {at} for the pins"))?;
    if named.is_empty() && !args.clear {
        return print(&current, args.json);
    }
    if args.remove
        && let Some(unknown) = named.iter().find(|p| !current.prefixes.contains(p))
    {
        anyhow::bail!(
            "{unknown} is not pinned (pinned: {}); nothing changed",
            if current.prefixes.is_empty() {
                "none".to_owned()
            } else {
                current.prefixes.join(", ")
            }
        );
    }
    let prefixes = if args.clear {
        Vec::new()
    } else {
        changed(&current.prefixes, &named, args.remove)
    };
    let view = client
        .set_pins(&PinsRequest {
            prefixes,
            expect_version: Some(current.version),
        })
        .await
        .with_context(|| format!("setting the pins at {at}"))?;
    print(&view, args.json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_become_key_paths_and_changes_keep_order_without_duplicates() {
        assert_eq!(key_path_prefix("s3://b/data/"), "s3/b/data/");
        assert_eq!(key_path_prefix("az://a/c/m/"), "az/a/c/m/");
        assert_eq!(key_path_prefix("s3/b/x"), "s3/b/x");
        let now = vec!["s3/b/a/".to_owned(), "s3/b/b/".to_owned()];
        assert_eq!(
            changed(&now, &["s3/b/c/".into(), "s3/b/a/".into()], false),
            ["s3/b/a/", "s3/b/b/", "s3/b/c/"]
        );
        assert_eq!(changed(&now, &["s3/b/a/".into()], true), ["s3/b/b/"]);
    }
}
