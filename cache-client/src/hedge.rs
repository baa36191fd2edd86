//! Hedged reads: when a worker's first byte for a piece is later than that worker
//! usually is, the piece is asked of the next owner too, and the first complete answer
//! wins.
//!
//! "Usually" is a quantile ([`HedgeConfig::quantile`], p99 by default) of the worker's
//! recent first-byte latencies: the time from sending a request until its answer began
//! (for a pipelined connection that includes the wait behind earlier answers, which is
//! what the reader waits too). Each worker keeps its last [`WINDOW`] samples in a ring of
//! atomics and the quantile is recomputed every [`RECOMPUTE_EVERY`] samples, so asking
//! for the threshold costs one map lookup and one atomic load.
//!
//! Hedges cost load, so they are bounded twice: never sooner than
//! [`HedgeConfig::min_delay`], 250 ms by default (a loopback p99 of microseconds would
//! hedge on scheduler noise, and a hedge of a cached piece is usually a fill from the
//! origin on the next owner: a healthy cluster's hits must not pay the origin for a
//! busy moment; a hung worker still costs a piece about a quarter second instead of its
//! first-byte deadline), and at most [`HedgeConfig::max_fraction`] of the pieces asked, by a token
//! budget that every watched piece adds to and every hedge takes one whole token from (a
//! cluster that is slow everywhere is not sent twice the requests). A worker is not
//! hedged before it has [`HedgeConfig::min_samples`] samples.
//!
//! A hedge to a worker that is not the block's owner is usually a miss there: the next
//! owner fills the piece from the origin. The budget bounds that extra origin load too.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// First-byte samples kept per worker.
pub const WINDOW: usize = 128;
/// The quantile is recomputed after this many new samples.
pub const RECOMPUTE_EVERY: u64 = 16;
/// A token, in thousandths: the budget's unit.
const TOKEN: u64 = 1000;
/// Hedges the budget can save up for a burst.
const MAX_SAVED_TOKENS: u64 = 10;

/// When reads hedge.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HedgeConfig {
    /// The quantile of a worker's recent first-byte latencies past which a piece is
    /// hedged, in (0, 1].
    pub quantile: f64,
    /// Never hedge sooner than this after sending.
    pub min_delay: Duration,
    /// Hedges allowed as a fraction of the pieces asked; 0 turns hedging off.
    pub max_fraction: f64,
    /// Samples a worker needs before its pieces are hedged.
    pub min_samples: u64,
}

impl HedgeConfig {
    /// No hedging.
    pub const OFF: HedgeConfig = HedgeConfig {
        quantile: 0.99,
        min_delay: Duration::from_millis(250),
        max_fraction: 0.0,
        min_samples: 32,
    };

    /// Hedging past each worker's p99, never sooner than 250 ms, at most 5% of the
    /// pieces.
    pub const P99: HedgeConfig = HedgeConfig {
        max_fraction: 0.05,
        ..HedgeConfig::OFF
    };

    /// Whether reads hedge at all.
    pub fn enabled(&self) -> bool {
        self.max_fraction > 0.0 && self.quantile > 0.0
    }
}

impl Default for HedgeConfig {
    /// Off: a library user turns hedging on ([`HedgeConfig::P99`]); the gateway does
    /// by default.
    fn default() -> HedgeConfig {
        HedgeConfig::OFF
    }
}

/// One worker's recent first-byte latencies.
#[derive(Debug)]
pub struct Latencies {
    /// Microseconds, a ring indexed by `recorded`.
    samples: [AtomicU32; WINDOW],
    recorded: AtomicU64,
    /// The quantile in microseconds; 0 until there are enough samples.
    threshold_us: AtomicU64,
}

impl Latencies {
    fn new() -> Latencies {
        Latencies {
            samples: std::array::from_fn(|_| AtomicU32::new(0)),
            recorded: AtomicU64::new(0),
            threshold_us: AtomicU64::new(0),
        }
    }

    fn record(&self, took: Duration, config: &HedgeConfig) {
        let us = u32::try_from(took.as_micros()).unwrap_or(u32::MAX);
        let n = self.recorded.fetch_add(1, Ordering::Relaxed);
        self.samples[(n % WINDOW as u64) as usize].store(us, Ordering::Relaxed);
        let n = n + 1;
        if n.is_multiple_of(RECOMPUTE_EVERY) && n >= config.min_samples.max(1) {
            let kept = n.min(WINDOW as u64) as usize;
            let mut sorted = [0u32; WINDOW];
            for (slot, sample) in sorted.iter_mut().zip(&self.samples).take(kept) {
                *slot = sample.load(Ordering::Relaxed);
            }
            let sorted = &mut sorted[..kept];
            let rank = ((kept as f64 * config.quantile.clamp(0.0, 1.0)).ceil() as usize)
                .clamp(1, kept)
                - 1;
            let (_, at, _) = sorted.select_nth_unstable(rank);
            self.threshold_us
                .store(u64::from(*at).max(1), Ordering::Relaxed);
        }
    }

    /// The quantile, once there are enough samples.
    fn threshold(&self) -> Option<Duration> {
        match self.threshold_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }
}

/// What hedging says about one piece about to be asked of a worker.
#[derive(Debug)]
pub struct HedgePlan {
    latencies: Arc<Latencies>,
    config: HedgeConfig,
    /// Hedge when the first byte has not come this long after sending; `None`: not
    /// yet known (too few samples), only watch.
    pub after: Option<Duration>,
}

impl HedgePlan {
    /// Records how long the worker took to begin its answer.
    pub fn record(&self, first_byte: Duration) {
        self.latencies.record(first_byte, &self.config);
    }
}

/// Every worker's first-byte latencies and the hedge budget.
#[derive(Debug)]
pub struct Hedging {
    config: HedgeConfig,
    workers: RwLock<HashMap<String, Arc<Latencies>>>,
    /// Saved hedges, in thousandths of one.
    tokens: AtomicU64,
}

impl Hedging {
    /// Hedging as `config` says (nothing is tracked when it is off).
    pub fn new(config: HedgeConfig) -> Hedging {
        Hedging {
            config,
            workers: RwLock::default(),
            tokens: AtomicU64::new(0),
        }
    }

    /// The plan for a piece about to be asked of `addr`, whose first byte is due within
    /// `first_byte_deadline`; `None` when hedging is off. The piece adds its share to
    /// the hedge budget.
    pub fn plan(&self, addr: &str, first_byte_deadline: Duration) -> Option<HedgePlan> {
        if !self.config.enabled() {
            return None;
        }
        let earned = (self.config.max_fraction.min(1.0) * TOKEN as f64) as u64;
        if self.tokens.fetch_add(earned, Ordering::Relaxed) >= MAX_SAVED_TOKENS * TOKEN {
            self.tokens.fetch_sub(earned, Ordering::Relaxed);
        }
        let latencies = self.latencies(addr);
        let after = latencies
            .threshold()
            .map(|t| t.max(self.config.min_delay))
            // A hedge no sooner than the deadline is no hedge: the deadline moves on.
            .filter(|after| *after < first_byte_deadline);
        Some(HedgePlan {
            latencies,
            config: self.config,
            after,
        })
    }

    /// How long after sending a piece to the worker at `addr` reads hedge it, once
    /// enough of its first bytes have been timed (before the floor of `min_delay`);
    /// `None` before that.
    pub fn learned(&self, addr: &str) -> Option<Duration> {
        let workers = self.workers.read().unwrap_or_else(|p| p.into_inner());
        workers.get(addr)?.threshold()
    }

    /// Takes one hedge from the budget, if it has one.
    pub fn try_spend(&self) -> bool {
        self.tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                t.checked_sub(TOKEN)
            })
            .is_ok()
    }

    fn latencies(&self, addr: &str) -> Arc<Latencies> {
        if let Some(l) = self
            .workers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(addr)
        {
            return l.clone();
        }
        self.workers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(addr.to_owned())
            .or_insert_with(|| Arc::new(Latencies::new()))
            .clone()
    }

    /// Forgets workers that left the membership.
    pub fn retain(&self, addrs: &[&str]) {
        self.workers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|addr, _| addrs.contains(&addr.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINE: Duration = Duration::from_secs(5);
    /// The default hedging with a floor these tests' millisecond samples get past.
    const FAST: HedgeConfig = HedgeConfig {
        min_delay: Duration::from_millis(5),
        ..HedgeConfig::P99
    };

    #[test]
    fn off_tracks_nothing() {
        let h = Hedging::new(HedgeConfig::OFF);
        assert!(h.plan("w", DEADLINE).is_none());
        assert!(!h.try_spend());
    }

    #[test]
    fn the_threshold_is_the_quantile_of_recent_samples_once_there_are_enough() {
        let h = Hedging::new(FAST);
        let plan = h.plan("w", DEADLINE).unwrap_or_else(|| unreachable!());
        assert_eq!(plan.after, None, "no samples yet");
        // 1..=128 ms: p99 of 128 samples is the 127th smallest.
        for ms in 1..=WINDOW as u64 {
            assert_eq!(h.plan("w", DEADLINE).and_then(|p| p.after), {
                let n = ms - 1;
                if n >= 32 {
                    // Recomputed at each multiple of 16 samples.
                    let at = n - n % RECOMPUTE_EVERY;
                    let rank = ((at as f64 * 0.99).ceil() as u64).max(1);
                    Some(Duration::from_millis(rank))
                } else {
                    None
                }
            });
            plan.record(Duration::from_millis(ms));
        }
        assert_eq!(
            h.plan("w", DEADLINE).and_then(|p| p.after),
            Some(Duration::from_millis(127))
        );
        // A quantile past the deadline is no hedge; below the floor it is the floor.
        assert_eq!(
            h.plan("w", Duration::from_millis(100))
                .and_then(|p| p.after),
            None
        );
        let fast = h.plan("fast", DEADLINE).unwrap_or_else(|| unreachable!());
        for _ in 0..32 {
            fast.record(Duration::from_micros(50));
        }
        assert_eq!(
            h.plan("fast", DEADLINE).and_then(|p| p.after),
            Some(Duration::from_millis(5))
        );
        // The ring forgets: 128 slow samples later, the old fast ones are gone.
        for _ in 0..WINDOW {
            fast.record(Duration::from_millis(40));
        }
        assert_eq!(
            h.plan("fast", DEADLINE).and_then(|p| p.after),
            Some(Duration::from_millis(40))
        );
        h.retain(&["w"]);
        assert_eq!(h.plan("fast", DEADLINE).and_then(|p| p.after), None);
    }

    #[test]
    fn the_budget_allows_the_fraction_and_saves_only_a_burst() {
        let h = Hedging::new(FAST);
        for _ in 0..19 {
            h.plan("w", DEADLINE);
        }
        assert!(!h.try_spend(), "19 pieces at 5% earn no whole hedge");
        h.plan("w", DEADLINE);
        assert!(h.try_spend(), "20 pieces earn one");
        assert!(!h.try_spend());
        for _ in 0..10_000 {
            h.plan("w", DEADLINE);
        }
        let mut spent = 0;
        while h.try_spend() {
            spent += 1;
        }
        assert_eq!(spent, MAX_SAVED_TOKENS, "a quiet period saves only a burst");
    }
}
