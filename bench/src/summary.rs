//! Latency summaries and the small statistics of the gateway benches:
//! exact percentiles of recorded samples, medians and spreads of per-round
//! figures, and the ceiling Little's law puts on a closed loop.

use std::time::Duration;
use talon_loadgen::stats::thousands;

use serde::Serialize;

/// A latency distribution, in microseconds, computed exactly from every
/// sample (no histogram): percentile `p` is the nearest-rank value, the
/// smallest sample with at least `p`% of the samples at or below it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Samples.
    pub samples: usize,
    /// Arithmetic mean.
    pub mean_us: f64,
    /// Fastest.
    pub min_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Slowest.
    pub max_us: f64,
}

/// The nearest-rank `p`-th percentile (0 < p ≤ 100) of sorted `values`;
/// `None` when there are none.
pub fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

impl LatencySummary {
    /// Summarises `samples` (in any order); `None` when there are none.
    pub fn of(samples: &[Duration]) -> Option<LatencySummary> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let total: f64 = sorted.iter().map(|d| us(*d)).sum();
        let at = |p| percentile(&sorted, p).map(us).unwrap_or(0.0);
        Some(LatencySummary {
            samples: sorted.len(),
            mean_us: total / sorted.len() as f64,
            min_us: us(sorted[0]),
            p50_us: at(50.0),
            p90_us: at(90.0),
            p99_us: at(99.0),
            max_us: us(sorted[sorted.len() - 1]),
        })
    }
}

/// The median of `values` (the mean of the middle two for an even count);
/// `None` when there are none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The smallest and largest of `values`; `None` when there are none.
pub fn spread(values: &[f64]) -> Option<(f64, f64)> {
    let mut it = values.iter().copied().filter(|x| !x.is_nan());
    let first = it.next()?;
    Some(it.fold((first, first), |(lo, hi), x| (lo.min(x), hi.max(x))))
}

/// The throughput Little's law allows a closed loop of `concurrency`
/// clients when each request takes `base` plus `added`: `concurrency /
/// (base + added)` requests per second. `None` when that time is zero.
pub fn little_ceiling(concurrency: usize, base: Duration, added: Duration) -> Option<f64> {
    let t = (base + added).as_secs_f64();
    (t > 0.0).then(|| concurrency as f64 / t)
}

/// A latency in µs as a table cell: `842 µs` below 10 ms, `12.3 ms` above.
pub fn fmt_latency(us: f64) -> String {
    if !us.is_finite() {
        "-".into()
    } else if us < 10_000.0 {
        format!("{} µs", thousands(us))
    } else {
        format!("{:.1} ms", us / 1000.0)
    }
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&x| Duration::from_millis(x)).collect()
    }

    #[test]
    fn nearest_rank_percentiles() {
        let mut v = ms(&(1..=100).collect::<Vec<_>>());
        v.reverse();
        let s = LatencySummary::of(&v).unwrap_or_else(|| panic!("empty"));
        assert_eq!(s.samples, 100);
        assert_eq!(s.p50_us, 50_000.0);
        assert_eq!(s.p90_us, 90_000.0);
        assert_eq!(s.p99_us, 99_000.0);
        assert_eq!(s.min_us, 1_000.0);
        assert_eq!(s.max_us, 100_000.0);
        assert!((s.mean_us - 50_500.0).abs() < 1e-6);
        // Small samples: p99 of ten values is the largest, p50 the fifth.
        let mut sorted = ms(&[5, 1, 9, 3, 7, 2, 8, 4, 6, 10]);
        sorted.sort();
        assert_eq!(percentile(&sorted, 99.0), Some(Duration::from_millis(10)));
        assert_eq!(percentile(&sorted, 50.0), Some(Duration::from_millis(5)));
        assert_eq!(percentile(&sorted, 0.001), Some(Duration::from_millis(1)));
        assert_eq!(percentile(&[], 50.0), None);
        assert!(LatencySummary::of(&[]).is_none());
        let one = LatencySummary::of(&ms(&[7])).unwrap_or_else(|| panic!("empty"));
        assert_eq!(
            (one.p50_us, one.p99_us, one.max_us),
            (7_000.0, 7_000.0, 7_000.0)
        );
    }

    #[test]
    fn medians_and_spreads() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 1.0]), Some(1.0));
        assert_eq!(spread(&[3.0, 1.0, 2.0]), Some((1.0, 3.0)));
        assert_eq!(spread(&[]), None);
    }

    #[test]
    fn little_ceiling_is_concurrency_over_time() {
        let c = little_ceiling(16, Duration::from_millis(2), Duration::from_millis(18))
            .unwrap_or_else(|| panic!("none"));
        assert!((c - 800.0).abs() < 1e-9, "{c}");
        assert_eq!(little_ceiling(4, Duration::ZERO, Duration::ZERO), None);
    }

    #[test]
    fn formatting() {
        assert_eq!(thousands(1234567.8), "1,234,568");
        assert_eq!(thousands(-1000.0), "-1,000");
        assert_eq!(fmt_latency(842.4), "842 µs");
        assert_eq!(fmt_latency(9_999.0), "9,999 µs");
        assert_eq!(fmt_latency(12_345.0), "12.3 ms");
        assert_eq!(mib(3 << 20), 3.0);
    }
}
