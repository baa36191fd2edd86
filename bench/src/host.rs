//! What a result was measured on: the host's cores, CPU model and kernel,
//! and the commit of the code measured. Every JSON line of the gateway
//! benches carries it, so numbers from different machines or commits are
//! never compared by accident.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

/// The machine and the code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostInfo {
    /// CPUs available to this process.
    pub cores: usize,
    /// The CPU's model name, from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// The kernel release, from `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    /// Total memory, MiB, from `/proc/meminfo`.
    pub memory_mib: u64,
    /// The git commit checked out (`unknown` outside a checkout).
    pub commit: String,
    /// Whether the checkout had uncommitted changes to tracked files.
    pub dirty: bool,
}

/// The `model name` of the first CPU in `/proc/cpuinfo` text.
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "model name").then(|| v.trim().to_owned())
    })
}

/// `MemTotal` of `/proc/meminfo` text, MiB.
pub fn parse_mem_total_mib(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix("MemTotal:")?;
        let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
        Some(kib / 1024)
    })
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

impl HostInfo {
    /// Reads this host, and the commit of the checkout at `repo`.
    pub fn detect(repo: &Path) -> HostInfo {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let commit = git(repo, &["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
        let dirty = git(repo, &["status", "--porcelain", "--untracked-files=no"])
            .is_some_and(|s| !s.is_empty());
        HostInfo {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: parse_cpu_model(&read("/proc/cpuinfo")).unwrap_or_else(|| "unknown".into()),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            memory_mib: parse_mem_total_mib(&read("/proc/meminfo")).unwrap_or(0),
            commit,
            dirty,
        }
    }

    /// One line for a report: `2 cores, AMD EPYC, Linux 6.1, 23 GiB, commit abc1234`.
    pub fn describe(&self) -> String {
        format!(
            "{} cores ({}), Linux {}, {} MiB RAM, commit {}{}",
            self.cores,
            self.cpu_model,
            self.kernel,
            self.memory_mib,
            &self.commit[..self.commit.len().min(12)],
            if self.dirty {
                " (with uncommitted changes)"
            } else {
                ""
            }
        )
    }
}

/// The sentence a report ends with about the host's load: the 1-minute load
/// average at the start and at the end of the run.
pub fn load_line((start, end): (Option<f64>, Option<f64>)) -> String {
    let f = |l: Option<f64>| l.map_or_else(|| "?".to_owned(), |l| format!("{l:.2}"));
    format!(
        "1-minute load average {} at the start, {} at the end (other work on the host competes for its cores).",
        f(start),
        f(end)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_and_meminfo_parse() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7763 64-Core Processor\n\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(
            parse_cpu_model(cpuinfo).as_deref(),
            Some("AMD EPYC 7763 64-Core Processor")
        );
        assert_eq!(parse_cpu_model("processor : 0\n"), None);
        assert_eq!(
            parse_mem_total_mib("MemTotal:       24576000 kB\nMemFree: 1 kB\n"),
            Some(24000)
        );
    }
}
