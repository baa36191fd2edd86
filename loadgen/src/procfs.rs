//! CPU time and resident memory of processes, read from Linux's `/proc`.
//!
//! CPU comes from fields 14 (`utime`) and 15 (`stime`) of `/proc/PID/stat`,
//! in clock ticks of `USER_HZ`; RSS from the `VmRSS` line of
//! `/proc/PID/status`. Two samples bracket the measured window and the
//! difference is the CPU spent in it.

use std::time::Duration;

use crate::error::{LoadError, Result};

/// Clock ticks per second of the `utime`/`stime` fields. Linux exports
/// them in `USER_HZ`, which is fixed at 100 on every architecture Talon
/// runs on (x86-64, arm64, riscv64), independent of the kernel's `HZ`.
pub const USER_HZ: u64 = 100;

/// One reading of one or more processes, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcSample {
    /// User-mode CPU, clock ticks.
    pub utime_ticks: u64,
    /// Kernel-mode CPU, clock ticks.
    pub stime_ticks: u64,
    /// Resident set size, bytes.
    pub rss_bytes: u64,
}

impl ProcSample {
    /// CPU spent between `earlier` and `self`: (user, kernel).
    pub fn cpu_since(&self, earlier: &ProcSample) -> (Duration, Duration) {
        let ticks = |t: u64| Duration::from_secs_f64(t as f64 / USER_HZ as f64);
        (
            ticks(self.utime_ticks.saturating_sub(earlier.utime_ticks)),
            ticks(self.stime_ticks.saturating_sub(earlier.stime_ticks)),
        )
    }
}

/// The fields of `/proc/PID/stat` after the command name (which may hold
/// spaces and parentheses, so parsing starts after its last `)`).
fn stat_fields(text: &str) -> Option<Vec<&str>> {
    let close = text.rfind(')')?;
    Some(text[close + 1..].split_whitespace().collect())
}

/// Parses `/proc/PID/stat` into (utime, stime, ppid).
pub fn parse_stat(text: &str) -> Option<(u64, u64, u32)> {
    let f = stat_fields(text)?;
    // f[0] is field 3 (state): field n is f[n - 3].
    let ppid = f.get(1)?.parse().ok()?;
    let utime = f.get(11)?.parse().ok()?;
    let stime = f.get(12)?.parse().ok()?;
    Some((utime, stime, ppid))
}

/// Parses the `VmRSS:` line of `/proc/PID/status`, in bytes. A kernel
/// thread has none (0).
pub fn parse_status_rss(text: &str) -> Option<u64> {
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("VmRSS:") {
            let mut parts = rest.split_whitespace();
            let n: u64 = parts.next()?.parse().ok()?;
            return match parts.next() {
                Some("kB") | None => Some(n * 1024),
                Some(_) => None,
            };
        }
    }
    Some(0)
}

fn read(pid: &str, file: &str) -> std::io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
}

/// Reads one process; `pid` may be `self`.
fn sample_one(pid: &str) -> std::result::Result<ProcSample, String> {
    let stat = read(pid, "stat").map_err(|e| e.to_string())?;
    let (utime, stime, _) = parse_stat(&stat).ok_or("unparseable stat")?;
    let status = read(pid, "status").map_err(|e| e.to_string())?;
    let rss = parse_status_rss(&status).ok_or("unparseable VmRSS in status")?;
    Ok(ProcSample {
        utime_ticks: utime,
        stime_ticks: stime,
        rss_bytes: rss,
    })
}

/// This process.
pub fn sample_self() -> Option<ProcSample> {
    sample_one("self").ok()
}

/// Stops `parent` (SIGSTOP) and kills (SIGKILL) its children: a peer's workers, which
/// would outlive their killed master. Stopped first, the master cannot start
/// replacements for the children it sees die (nginx's master and Varnish's manager
/// both do), which would outlive it in turn; killing the stopped master is left to its
/// [`Process`](crate::deployment::Process).
pub fn kill_children(parent: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(parent as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::STOP);
    }
    for pid in children_of(parent) {
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

/// The processes whose parent is `parent`.
pub fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            read(&pid.to_string(), "stat")
                .ok()
                .and_then(|s| parse_stat(&s))
                .is_some_and(|(_, _, ppid)| ppid == parent)
        })
        .collect();
    out.sort_unstable();
    out
}

/// A set of server processes sampled together.
#[derive(Debug, Clone)]
pub struct ProcessSet {
    pids: Vec<u32>,
}

impl ProcessSet {
    /// The given processes, plus their children when `children` is set.
    /// Errors with [`LoadError::Proc`] for a process that cannot be read.
    pub fn resolve(pids: &[u32], children: bool) -> Result<Self> {
        let mut all = Vec::new();
        for &pid in pids {
            all.push(pid);
            if children {
                all.extend(children_of(pid));
            }
        }
        all.sort_unstable();
        all.dedup();
        let set = Self { pids: all };
        set.sample()?;
        Ok(set)
    }

    /// The processes sampled.
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// Sums a reading of every process.
    pub fn sample(&self) -> Result<ProcSample> {
        let mut sum = ProcSample::default();
        for &pid in &self.pids {
            let s =
                sample_one(&pid.to_string()).map_err(|message| LoadError::Proc { pid, message })?;
            sum.utime_ticks += s.utime_ticks;
            sum.stime_ticks += s.stime_ticks;
            sum.rss_bytes += s.rss_bytes;
        }
        Ok(sum)
    }
}

/// What a long run watches for leaks in one process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Footprint {
    /// Resident set size, bytes (`VmRSS`).
    pub rss_bytes: u64,
    /// Open file descriptors (entries of `/proc/PID/fd`).
    pub open_fds: u64,
}

/// The footprint of process `pid`; `None` when it cannot be read (it has gone).
pub fn footprint(pid: u32) -> Option<Footprint> {
    let status = read(&pid.to_string(), "status").ok()?;
    let rss_bytes = parse_status_rss(&status)?;
    let open_fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Footprint {
        rss_bytes,
        open_fds,
    })
}

/// The soft limit on open files of this process, from `/proc/self/limits`.
pub fn open_files_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..].split_whitespace().next()?;
    soft.parse().ok()
}

/// The CPU model (`model name` in `/proc/cpuinfo`), if the kernel says.
pub fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_owned())
}

/// The kernel release (`uname -r`).
pub fn kernel_release() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    Some(text.trim().to_owned())
}

/// The 1-minute load average from `/proc/loadavg` text.
pub fn parse_load_average(loadavg: &str) -> Option<f64> {
    loadavg.split_whitespace().next()?.parse().ok()
}

/// This host's 1-minute load average now: how busy the host already was (on a
/// shared machine other work competes for the cores, so every result records it).
pub fn load_average() -> Option<f64> {
    parse_load_average(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_footprint() {
        let me = footprint(std::process::id()).expect("this process is readable");
        assert!(me.rss_bytes > 0);
        // At least stdin, stdout, stderr and the descriptor reading the folder.
        assert!(me.open_fds >= 3, "{me:?}");
    }

    #[test]
    fn stat_with_awkward_command_name() {
        let text = "4242 (my (odd) proc) S 17 4242 4242 0 -1 4194560 100 0 0 0 \
                    1234 567 0 0 20 0 8 0 12345 1000000 300 18446744073709551615";
        assert_eq!(parse_stat(text), Some((1234, 567, 17)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S"), None);
    }

    #[test]
    fn status_rss() {
        let text = "Name:\tx\nVmPeak:\t  1000 kB\nVmRSS:\t    2048 kB\nThreads:\t1\n";
        assert_eq!(parse_status_rss(text), Some(2048 * 1024));
        assert_eq!(parse_status_rss("Name:\tkthreadd\n"), Some(0));
        assert_eq!(parse_status_rss("VmRSS:\tlots kB\n"), None);
    }

    #[test]
    fn reads_this_process() {
        let s = sample_self().unwrap_or_default();
        assert!(s.rss_bytes > 0);
        let me = std::process::id();
        let set = ProcessSet::resolve(&[me], false);
        assert!(set.is_ok());
        assert!(ProcessSet::resolve(&[u32::MAX], false).is_err());
        assert!(open_files_limit().is_some_and(|n| n > 0));
        assert!(kernel_release().is_some_and(|k| !k.is_empty()));
        assert!(load_average().is_some_and(|l| l >= 0.0));
        assert_eq!(
            parse_load_average("6.32 6.74 3.93 6/178 29847\n"),
            Some(6.32)
        );
        assert_eq!(parse_load_average(""), None);
    }

    #[test]
    fn cpu_difference() {
        let a = ProcSample {
            utime_ticks: 100,
            stime_ticks: 50,
            rss_bytes: 0,
        };
        let b = ProcSample {
            utime_ticks: 250,
            stime_ticks: 60,
            rss_bytes: 0,
        };
        assert_eq!(
            b.cpu_since(&a),
            (Duration::from_millis(1500), Duration::from_millis(100))
        );
    }
}
