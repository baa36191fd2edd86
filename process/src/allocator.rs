//! The C allocator's policy for returning memory to the kernel, set once at start.
//!
//! A read through the cache holds each piece (up to a few MiB) in a buffer from the
//! moment its bytes arrive until the HTTP stack has written them. glibc's defaults give
//! freed memory back to the kernel as soon as more than about twice the largest recent
//! buffer is free at the top of a thread's heap, so under load the same megabytes went
//! back and forth: every new buffer faulted in and zeroed fresh pages (with the gateway
//! reading its workers over TCP, a fifth of its CPU at 1 MiB ranges, docs/BENCHMARKS.md).
//! [`tune_allocator`] keeps up to [`TRIM_THRESHOLD_BYTES`] free per heap instead, and
//! serves buffers below [`MMAP_THRESHOLD_BYTES`] from the heaps rather than from
//! mappings of their own.

/// Free bytes at the top of a heap kept rather than given back to the kernel. Each
/// thread heap may keep this much beyond what it holds live (the gateway's and the
/// worker's runtime threads use a few heaps).
pub const TRIM_THRESHOLD_BYTES: usize = 16 << 20;

/// Allocations from this size up get a mapping of their own (and give it back when
/// freed); below it they come from the heaps. Above the largest piece a read holds.
pub const MMAP_THRESHOLD_BYTES: usize = 4 << 20;

/// What [`tune_allocator`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocatorTuning {
    /// The thresholds above are in force.
    Tuned,
    /// The operator set glibc's own (`GLIBC_TUNABLES` with `glibc.malloc.`, or a
    /// `MALLOC_*_` variable): theirs are kept.
    LeftToTheOperator,
    /// Not glibc, or it refused: the allocator's defaults.
    Unsupported,
}

/// Sets the allocator's thresholds (once, at the start of a serving process), unless
/// the operator set glibc's malloc tunables themselves.
pub fn tune_allocator() -> AllocatorTuning {
    let operator_set = std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc."))
        || std::env::vars_os().any(|(k, _)| {
            k.to_str()
                .is_some_and(|k| k.starts_with("MALLOC_") && k.ends_with('_'))
        });
    let tuning = if operator_set {
        AllocatorTuning::LeftToTheOperator
    } else {
        set_thresholds()
    };
    tracing::debug!(?tuning, "the allocator's thresholds");
    tuning
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_thresholds() -> AllocatorTuning {
    let as_int = |v: usize| libc::c_int::try_from(v).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt only changes the allocator's parameters; glibc takes its own lock.
    let tuned = unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, as_int(MMAP_THRESHOLD_BYTES)) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, as_int(TRIM_THRESHOLD_BYTES)) == 1
    };
    if tuned {
        AllocatorTuning::Tuned
    } else {
        AllocatorTuning::Unsupported
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_thresholds() -> AllocatorTuning {
    AllocatorTuning::Unsupported
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Minor page faults of the calling thread so far.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn minor_faults() -> i64 {
        // SAFETY: getrusage writes the struct it is given.
        unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
            usage.ru_minflt
        }
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn buffers_freed_and_taken_again_fault_no_new_pages() {
        if std::env::vars_os().any(|(k, _)| {
            k == "GLIBC_TUNABLES" || k.to_str().is_some_and(|k| k.starts_with("MALLOC_"))
        }) {
            eprintln!("the environment sets the allocator's own tunables: not checked");
            return;
        }
        assert_eq!(tune_allocator(), AllocatorTuning::Tuned);
        // As a read does: a few 1 MiB buffers at once, each written, then all freed,
        // again and again, on a thread of its own (its own heap). With glibc's
        // defaults the freed megabytes went back to the kernel every time, and every
        // round faulted in its 1,024 pages afresh.
        let faults = std::thread::spawn(|| {
            let round = || {
                let buffers: Vec<Vec<u8>> = (0..4).map(|_| vec![1u8; 1 << 20]).collect();
                std::hint::black_box(&buffers);
            };
            for _ in 0..5 {
                round();
            }
            let before = minor_faults();
            for _ in 0..20 {
                round();
            }
            minor_faults() - before
        })
        .join()
        .unwrap_or(i64::MAX);
        assert!(
            faults < 200,
            "20 rounds of 4 MiB faulted {faults} pages (1,024 a round untuned)"
        );
    }
}
