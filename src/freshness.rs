//! `talon freshness`: the cluster's per-prefix staleness bounds, which every gateway and
//! worker applies under a prefix instead of its own (the coordinator's `GET`/`PUT
//! /v1/freshness`, the admin role to change; they take the rules with their next
//! heartbeat or membership poll).
//!
//! `talon freshness` lists them; `talon freshness s3://BUCKET/PREFIX=5m …` adds or
//! changes rules (a duration, or `immutable`: what is learned there is answered until
//! evicted or invalidated); `--remove PREFIX…` removes, `--clear` removes all. A change
//! reads the rules and writes them back only if nobody changed them meanwhile (409
//! otherwise: run it again).

use anyhow::Context;
use talon_coordinator_client::api::{
    FreshnessRequest, FreshnessRule, FreshnessView, cluster_prefix_problem,
};
use talon_core::cluster_auth::Role;

/// `talon freshness`'s flags.
#[derive(Debug, clap::Args)]
pub struct FreshnessArgs {
    /// Rules to add or change, PREFIX=DURATION or PREFIX=immutable, the prefix as
    /// s3://BUCKET/PREFIX, az://ACCOUNT/CONTAINER/PREFIX or a key path (with --remove:
    /// prefixes alone). None: list.
    rules: Vec<String>,
    /// Remove the rules of the prefixes named instead.
    #[arg(long, requires = "rules")]
    remove: bool,
    /// Remove every rule.
    #[arg(long, conflicts_with_all = ["rules", "remove"])]
    clear: bool,
    #[command(flatten)]
    target: crate::coordinator_args::CoordinatorArgs,
    /// Print one line of JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// `PREFIX=DURATION` or `PREFIX=immutable` as a rule (the prefix as a key path).
fn parse_rule(arg: &str) -> anyhow::Result<FreshnessRule> {
    let (prefix, bound) = arg
        .rsplit_once('=')
        .with_context(|| format!("{arg:?} is not PREFIX=DURATION or PREFIX=immutable"))?;
    let max_staleness_ms = match bound {
        "immutable" => None,
        d => Some(
            u64::try_from(
                talon_core::parse_duration(d)
                    .map_err(|e| anyhow::anyhow!("{arg:?}: {e}"))?
                    .as_millis(),
            )
            .unwrap_or(u64::MAX),
        ),
    };
    Ok(FreshnessRule {
        prefix: crate::pin::key_path_prefix(prefix),
        max_staleness_ms,
    })
}

/// The rules after adding (or changing) `named`, or removing their prefixes.
fn changed(current: &[FreshnessRule], named: &[FreshnessRule], remove: bool) -> Vec<FreshnessRule> {
    let mut out: Vec<FreshnessRule> = current
        .iter()
        .filter(|r| !named.iter().any(|n| n.prefix == r.prefix))
        .cloned()
        .collect();
    if !remove {
        out.extend(named.iter().cloned());
    }
    out
}

fn print(view: &FreshnessView, json: bool) -> anyhow::Result<()> {
    if json {
        crate::output::line(format_args!("{}", serde_json::to_string(view)?));
        return Ok(());
    }
    crate::output::line(format_args!(
        "per-prefix freshness (version {}):",
        view.version
    ));
    if view.rules.is_empty() {
        crate::output::line(format_args!(
            "  (none: every gateway keeps its own --max-staleness)"
        ));
    }
    for r in &view.rules {
        match r.max_staleness_ms {
            Some(ms) => crate::output::line(format_args!("  {}  {} ms", r.prefix, ms)),
            None => crate::output::line(format_args!("  {}  immutable", r.prefix)),
        }
    }
    Ok(())
}

/// Lists or changes the cluster's freshness rules.
///
/// # Errors
/// A rule that does not parse or names no bucket, a coordinator that cannot be reached
/// or refuses (only the admin role may change them), or a concurrent change (409).
pub async fn freshness(args: FreshnessArgs) -> anyhow::Result<()> {
    let named: Vec<FreshnessRule> = if args.remove {
        args.rules
            .iter()
            .map(|p| FreshnessRule {
                prefix: crate::pin::key_path_prefix(p),
                max_staleness_ms: None,
            })
            .collect()
    } else {
        args.rules
            .iter()
            .map(|r| parse_rule(r))
            .collect::<anyhow::Result<_>>()?
    };
    if let Some(problem) = named
        .iter()
        .find_map(|r| cluster_prefix_problem(&r.prefix, "freshness"))
    {
        anyhow::bail!(problem);
    }
    let target = args.target.resolve()?;
    let client = target.client(Role::Admin)?;
    let at = &target.url;
    let current = client
        .freshness()
        .await
        .with_context(|| format!("asking {at} for the freshness rules"))?;
    if named.is_empty() && !args.clear {
        return print(&current, args.json);
    }
    let rules = if args.clear {
        Vec::new()
    } else {
        changed(&current.rules, &named, args.remove)
    };
    let view = client
        .set_freshness(&FreshnessRequest {
            rules,
            expect_version: Some(current.version),
        })
        .await
        .with_context(|| format!("setting the freshness rules at {at}"))?;
    print(&view, args.json)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rules_parse_and_replace_the_same_prefix() {
        let r = parse_rule("s3://data/imagenet/=immutable").unwrap();
        assert_eq!(
            (r.prefix.as_str(), r.max_staleness_ms),
            ("s3/data/imagenet/", None)
        );
        let r = parse_rule("s3/data/logs/=5m").unwrap();
        assert_eq!(r.max_staleness_ms, Some(300_000));
        assert!(parse_rule("s3://data/x/").is_err());
        assert!(parse_rule("s3://data/x/=soon").is_err());
        let now = vec![
            parse_rule("s3/d/a/=1s").unwrap(),
            parse_rule("s3/d/b/=immutable").unwrap(),
        ];
        let next = changed(&now, &[parse_rule("s3/d/a/=2s").unwrap()], false);
        assert_eq!(next.len(), 2);
        assert_eq!(next[1].max_staleness_ms, Some(2_000));
        let removed = changed(&now, &[parse_rule("s3/d/a/=1s").unwrap()], true);
        assert_eq!(removed.len(), 1);
        assert_eq!(removed[0].prefix, "s3/d/b/");
    }
}
