//! `talon status`: what a coordinator knows of its cluster, for a person (a table) and
//! for a script (`--json`, one line).

use anyhow::Context;
use talon_coordinator_client::api::{ClusterSummary, MemberCircuits, MemberInfo, MembersResponse};
use talon_core::cluster_auth::Role;

/// `talon status`'s flags.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    target: crate::coordinator_args::CoordinatorArgs,
    /// Print one line of JSON ({"cluster": …, "members": […]}) instead of the table.
    #[arg(long)]
    json: bool,
}

/// Asks the coordinator for its members and totals and prints them.
///
/// # Errors
/// A missing cluster secret, or a coordinator that cannot be reached or refuses.
pub async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let target = args.target.resolve()?;
    let client = target.client(Role::Reader)?;
    let at = &target.url;
    let members = client
        .members()
        .await
        .with_context(|| format!("asking {} for its members", at))?;
    let cluster = client
        .cluster()
        .await
        .with_context(|| format!("asking {} for its totals", at))?;
    let jobs = client
        .warm_jobs()
        .await
        .with_context(|| format!("asking {} for its warm jobs", at))?
        .jobs;
    if args.json {
        let line = serde_json::json!({
            "cluster": cluster,
            "members": members.members,
            "warm_jobs": jobs,
        });
        crate::output::line(format_args!("{line}"));
    } else {
        crate::output::text(format_args!("{}", table(&cluster, &members)));
        crate::output::text(format_args!("{}", jobs_table(&jobs)));
    }
    Ok(())
}

/// Bytes as a person reads them (binary units); `talon warm` prints them so too.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn hit_ratio(hits: u64, misses: u64) -> String {
    match hits + misses {
        0 => "-".into(),
        all => format!("{:.1}%", hits as f64 * 100.0 / all as f64),
    }
}

/// The cluster as a markdown table, under a one-line summary.
fn table(cluster: &ClusterSummary, members: &MembersResponse) -> String {
    let mut out = format!(
        "epoch {} · {} {} ({} live, {} draining) · {} of {} cached · hit ratio {}\n\n",
        cluster.epoch,
        cluster.workers,
        if cluster.workers == 1 {
            "worker"
        } else {
            "workers"
        },
        cluster.live,
        cluster.draining,
        bytes(cluster.bytes_cached),
        bytes(cluster.capacity_bytes),
        hit_ratio(cluster.hits, cluster.misses),
    );
    out.push_str("| id | address | zone | weight | state | plane | last heartbeat | cached | capacity | hit ratio | readers' circuits |\n");
    out.push_str("|---|---|---|---:|---|---|---:|---:|---:|---:|---|\n");
    for m in &members.members {
        out.push_str(&row(m));
    }
    out
}

/// The coordinator's warm jobs, under a heading ("no warm jobs" when there are none).
fn jobs_table(jobs: &[talon_coordinator_client::api::WarmJobView]) -> String {
    if jobs.is_empty() {
        return "\nno warm jobs\n".into();
    }
    let mut out = String::from(
        "\n| warm job | source | state | objects | blocks | bytes | failed blocks | seconds |\n|---:|---|---|---:|---:|---:|---:|---:|\n",
    );
    for j in jobs {
        out.push_str(&format!(
            "| {} | {} | {:?} | {}/{} | {}/{} | {} of {} | {} | {:.1} |\n",
            j.id,
            j.source,
            j.state,
            j.objects_done,
            j.objects,
            j.blocks_done,
            j.blocks,
            bytes(j.bytes_done),
            bytes(j.bytes),
            j.errors,
            j.elapsed_ms as f64 / 1000.0
        ));
    }
    out
}

fn row(m: &MemberInfo) -> String {
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            s.to_owned()
        }
    };
    format!(
        "| {} | {} | {} | {} | {} | {} | {} ms ago | {} | {} | {} | {} |\n",
        m.id,
        m.addr,
        or_dash(&m.zone),
        m.weight,
        m.state.as_str(),
        or_dash(&m.data_plane),
        m.last_heartbeat_ms_ago,
        bytes(m.bytes_cached),
        bytes(m.capacity_bytes),
        hit_ratio(m.hits, m.misses),
        circuits(&m.circuits),
    )
}

/// What the readers' circuits say of a member, in words: "ok" when no reader has had
/// trouble with it.
fn circuits(c: &MemberCircuits) -> String {
    if c.readers == 0 {
        return "ok".into();
    }
    let state = if c.open == 0 {
        format!("closed for all {}", c.readers)
    } else {
        format!("open for {} of {}", c.open, c.readers)
    };
    format!(
        "{state} readers · opened {}× · {} deadlines missed",
        c.opened, c.deadlines_missed
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ratios_read_as_a_person_expects() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(hit_ratio(0, 0), "-");
        assert_eq!(hit_ratio(7, 1), "87.5%");
    }

    #[test]
    fn circuits_read_as_words() {
        assert_eq!(circuits(&MemberCircuits::default()), "ok");
        assert_eq!(
            circuits(&MemberCircuits {
                readers: 3,
                open: 1,
                opened: 4,
                deadlines_missed: 9,
            }),
            "open for 1 of 3 readers · opened 4× · 9 deadlines missed"
        );
        assert_eq!(
            circuits(&MemberCircuits {
                readers: 2,
                open: 0,
                opened: 1,
                deadlines_missed: 1,
            }),
            "closed for all 2 readers · opened 1× · 1 deadlines missed"
        );
    }
}
