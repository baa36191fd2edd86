//! The processes whose CPU a bench charges to an arm, read per process so
//! that processes which come and go during a run are handled: nginx's
//! cache loader exits a minute after start, and a worker process may be
//! replaced. A set is some root processes plus, optionally, their children
//! as they are at each reading.
//!
//! The CPU spent between two readings is the sum, over the processes of
//! the later one, of their CPU minus what the earlier reading saw of them
//! (all of it for a process that appeared in between). A process that
//! exited in between is not counted for that interval: its last moments
//! are lost, which for nginx's cache loader is nothing worth measuring.

use std::collections::BTreeMap;
use std::time::Duration;

use talon_loadgen::procfs::{USER_HZ, children_of, parse_stat, parse_status_rss};

/// CPU ticks and RSS of one process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PidSample {
    /// User-mode CPU, clock ticks.
    pub utime_ticks: u64,
    /// Kernel-mode CPU, clock ticks.
    pub stime_ticks: u64,
    /// Resident set size, bytes.
    pub rss_bytes: u64,
}

/// One reading of a set: each readable process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// Per process id.
    pub by_pid: BTreeMap<u32, PidSample>,
}

impl Reading {
    /// CPU spent from `earlier` to this reading, (user, kernel).
    pub fn cpu_since(&self, earlier: &Reading) -> (Duration, Duration) {
        let (mut user, mut kernel) = (0u64, 0u64);
        for (pid, now) in &self.by_pid {
            let before = earlier.by_pid.get(pid).copied().unwrap_or_default();
            user += now.utime_ticks.saturating_sub(before.utime_ticks);
            kernel += now.stime_ticks.saturating_sub(before.stime_ticks);
        }
        let ticks = |t: u64| Duration::from_secs_f64(t as f64 / USER_HZ as f64);
        (ticks(user), ticks(kernel))
    }

    /// Total resident memory of the processes read, bytes.
    pub fn rss_bytes(&self) -> u64 {
        self.by_pid.values().map(|s| s.rss_bytes).sum()
    }
}

/// Root processes, and whether their children count too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    roots: Vec<u32>,
    children: bool,
}

fn read_pid(pid: u32) -> Option<PidSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (utime, stime, _) = parse_stat(&stat)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(PidSample {
        utime_ticks: utime,
        stime_ticks: stime,
        rss_bytes: parse_status_rss(&status)?,
    })
}

impl Watched {
    /// `roots`, plus their children at each reading when `children`.
    pub fn new(roots: Vec<u32>, children: bool) -> Watched {
        Watched { roots, children }
    }

    /// The processes as they are now.
    pub fn pids(&self) -> Vec<u32> {
        let mut all = self.roots.clone();
        if self.children {
            for &r in &self.roots {
                all.extend(children_of(r));
            }
        }
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Reads every process of the set that can be read now.
    pub fn read(&self) -> Reading {
        Reading {
            by_pid: self
                .pids()
                .into_iter()
                .filter_map(|pid| read_pid(pid).map(|s| (pid, s)))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(v: &[(u32, u64, u64)]) -> Reading {
        Reading {
            by_pid: v
                .iter()
                .map(|&(pid, u, s)| {
                    (
                        pid,
                        PidSample {
                            utime_ticks: u,
                            stime_ticks: s,
                            rss_bytes: 4096,
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn cpu_counts_survivors_by_difference_newcomers_whole_and_skips_leavers() {
        let before = reading(&[(1, 100, 50), (2, 10, 10), (3, 7, 7)]);
        // 1 ran 20+5 ticks, 2 exited, 4 appeared having run 3+1.
        let after = reading(&[(1, 120, 55), (4, 3, 1)]);
        let (user, kernel) = after.cpu_since(&before);
        assert_eq!(user, Duration::from_millis(230));
        assert_eq!(kernel, Duration::from_millis(60));
        assert_eq!(after.rss_bytes(), 8192);
    }

    #[test]
    fn this_process_can_be_read_and_a_missing_one_is_skipped() {
        let me = std::process::id();
        let w = Watched::new(vec![me, u32::MAX - 1], false);
        let r = w.read();
        assert!(r.by_pid.contains_key(&me));
        assert_eq!(r.by_pid.len(), 1);
        assert!(r.rss_bytes() > 0);
    }
}
