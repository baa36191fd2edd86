//! Per-worker health: a circuit breaker for each worker this client reads from.
//!
//! A worker whose requests fail [`HealthConfig::failures_to_open`] times in a row, or
//! that misses a deadline once (a hang costs every read queued behind it, so one is
//! enough), has its circuit opened for a backoff period: reads skip it and go to the
//! next owner in rendezvous order (or the origin) without waiting for it. When the
//! period is over, one read is let through as a probe; its success closes the circuit,
//! its failure opens it again for twice as long (up to [`HealthConfig::max_backoff`]).
//! A probe is claimed only by a read about to ask the worker, and one that never
//! reports (its read was dropped) lets another read probe after
//! [`HealthConfig::probe_timeout`].
//!
//! The hot path while every worker is healthy is one atomic load per request and per
//! answer: a count of the workers that are not (a failure since their last success,
//! or a circuit not closed) says whether the map needs looking at.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// When circuits open and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthConfig {
    /// Consecutive failures that open a worker's circuit (a missed deadline counts as
    /// this many at once).
    pub failures_to_open: u32,
    /// The first backoff period.
    pub min_backoff: Duration,
    /// The longest backoff period (it doubles after each failed probe).
    pub max_backoff: Duration,
    /// How long a probe may go without an outcome before another read may probe: a
    /// probe whose read was dropped (its client went away) must not leave the worker
    /// skipped for good. At least the workers' share of a piece's budget, so that a
    /// probe still in flight normally ends first.
    pub probe_timeout: Duration,
}

impl Default for HealthConfig {
    fn default() -> HealthConfig {
        HealthConfig {
            failures_to_open: 3,
            min_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            probe_timeout: Duration::from_secs(15),
        }
    }
}

/// A worker's circuit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    /// Reads go to the worker.
    Closed,
    /// Reads skip the worker until the backoff period is over.
    Open,
    /// One read is trying the worker; the others still skip it.
    Probing,
}

impl CircuitState {
    /// The state's name in metrics and member views.
    pub fn name(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::Open => "open",
            CircuitState::Probing => "probing",
        }
    }

    fn from_u8(v: u8) -> CircuitState {
        match v {
            1 => CircuitState::Open,
            2 => CircuitState::Probing,
            _ => CircuitState::Closed,
        }
    }
}

/// Whether a read may ask a worker now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The circuit is closed.
    Go,
    /// The circuit was open and its period is over: this read is the probe.
    Probe,
    /// The circuit is open (or another read is probing): skip the worker.
    Skip,
}

/// How a request to a worker failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Refused with a transient error, or the connection broke.
    Error,
    /// A deadline passed (no first byte, or a stall mid-body).
    Deadline,
}

/// One worker's health as metrics and member views show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerHealthView {
    /// The worker's data-plane address.
    pub addr: String,
    /// Its circuit.
    pub state: CircuitState,
    /// Failures since its last success.
    pub consecutive_failures: u32,
    /// Times its circuit opened.
    pub opened: u64,
    /// Deadlines it missed.
    pub deadlines_missed: u64,
}

#[derive(Debug)]
struct Worker {
    state: AtomicU8,
    consecutive_failures: AtomicU32,
    opened: AtomicU64,
    deadlines_missed: AtomicU64,
    timing: Mutex<Timing>,
}

#[derive(Debug)]
struct Timing {
    open_until: Instant,
    backoff: Duration,
}

/// Every worker's circuit, by data-plane address.
#[derive(Debug)]
pub struct WorkerHealth {
    config: HealthConfig,
    workers: RwLock<HashMap<String, Arc<Worker>>>,
    /// Workers with a failure since their last success or a circuit not closed: while
    /// none, nothing else is looked at.
    unwell: AtomicUsize,
}

impl WorkerHealth {
    /// No worker known yet (every circuit starts closed).
    pub fn new(config: HealthConfig) -> WorkerHealth {
        WorkerHealth {
            config,
            workers: RwLock::default(),
            unwell: AtomicUsize::new(0),
        }
    }

    /// The worker's entry if it has one (a worker that never failed has none).
    fn known(&self, addr: &str) -> Option<Arc<Worker>> {
        self.workers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(addr)
            .cloned()
    }

    fn worker(&self, addr: &str) -> Arc<Worker> {
        if let Some(w) = self
            .workers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(addr)
        {
            return w.clone();
        }
        self.workers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(addr.to_owned())
            .or_insert_with(|| {
                Arc::new(Worker {
                    state: AtomicU8::new(0),
                    consecutive_failures: AtomicU32::new(0),
                    opened: AtomicU64::new(0),
                    deadlines_missed: AtomicU64::new(0),
                    timing: Mutex::new(Timing {
                        open_until: Instant::now(),
                        backoff: self.config.min_backoff,
                    }),
                })
            })
            .clone()
    }

    /// Whether a read may ask the worker at `addr` now.
    pub fn admit(&self, addr: &str) -> Admission {
        self.admit_at(addr, Instant::now())
    }

    fn admit_at(&self, addr: &str, now: Instant) -> Admission {
        if self.unwell.load(Ordering::Acquire) == 0 {
            return Admission::Go;
        }
        let Some(w) = self.known(addr) else {
            return Admission::Go;
        };
        if w.state.load(Ordering::Acquire) == 0 {
            return Admission::Go;
        }
        let mut timing = w.timing.lock().unwrap_or_else(|p| p.into_inner());
        // Under the lock: open and probing change only with it held.
        match CircuitState::from_u8(w.state.load(Ordering::Acquire)) {
            CircuitState::Closed => Admission::Go,
            // Open and its period not over, or a probe out and not yet timed out.
            _ if now < timing.open_until => Admission::Skip,
            CircuitState::Open | CircuitState::Probing => {
                // This read is the probe; the next may probe only if this one never
                // reports.
                w.state.store(2, Ordering::Release);
                timing.open_until = now + self.config.probe_timeout;
                Admission::Probe
            }
        }
    }

    /// Whether the worker at `addr` has a closed circuit: what a request that may be
    /// left unsent (a prefetch) asks, claiming no probe.
    pub fn is_closed(&self, addr: &str) -> bool {
        if self.unwell.load(Ordering::Acquire) == 0 {
            return true;
        }
        self.known(addr)
            .is_none_or(|w| w.state.load(Ordering::Acquire) == 0)
    }

    /// The worker at `addr` answered: its circuit closes and its backoff resets.
    pub fn succeeded(&self, addr: &str) {
        if self.unwell.load(Ordering::Acquire) == 0 {
            return;
        }
        let Some(w) = self.known(addr) else { return };
        let well = |w: &Worker| {
            w.state.load(Ordering::Acquire) == 0
                && w.consecutive_failures.load(Ordering::Relaxed) == 0
        };
        if well(&w) {
            return;
        }
        let mut timing = w.timing.lock().unwrap_or_else(|p| p.into_inner());
        if well(&w) {
            return;
        }
        w.consecutive_failures.store(0, Ordering::Relaxed);
        timing.backoff = self.config.min_backoff;
        w.state.store(0, Ordering::Release);
        self.unwell.fetch_sub(1, Ordering::AcqRel);
    }

    /// A request to the worker at `addr` failed: counted, and the circuit opens when
    /// the failures are enough (or a probe failed). Returns whether this failure opened
    /// a circuit that was closed (the requests still waiting on the worker should move
    /// on now).
    pub fn failed(&self, addr: &str, failure: Failure) -> bool {
        self.failed_at(addr, failure, Instant::now())
    }

    fn failed_at(&self, addr: &str, failure: Failure, now: Instant) -> bool {
        let w = self.worker(addr);
        let weight = match failure {
            Failure::Error => 1,
            Failure::Deadline => {
                w.deadlines_missed.fetch_add(1, Ordering::Relaxed);
                self.config.failures_to_open.max(1)
            }
        };
        let mut timing = w.timing.lock().unwrap_or_else(|p| p.into_inner());
        let before = w.consecutive_failures.fetch_add(weight, Ordering::Relaxed);
        if before == 0 && w.state.load(Ordering::Acquire) == 0 {
            // Well until now.
            self.unwell.fetch_add(1, Ordering::AcqRel);
        }
        let failures = before.saturating_add(weight);
        match CircuitState::from_u8(w.state.load(Ordering::Acquire)) {
            CircuitState::Probing => {
                timing.backoff = (timing.backoff * 2).min(self.config.max_backoff);
                timing.open_until = now + timing.backoff;
                w.opened.fetch_add(1, Ordering::Relaxed);
                w.state.store(1, Ordering::Release);
                false
            }
            CircuitState::Closed if failures >= self.config.failures_to_open.max(1) => {
                timing.open_until = now + timing.backoff;
                w.opened.fetch_add(1, Ordering::Relaxed);
                w.state.store(1, Ordering::Release);
                tracing::warn!(worker = %addr, failures, backoff = ?timing.backoff, "worker circuit opened: reads skip it until a probe succeeds");
                true
            }
            // Already open (a failure of a request sent before it opened), or not yet
            // enough failures.
            _ => false,
        }
    }

    /// Every known worker's health, sorted by address.
    pub fn views(&self) -> Vec<WorkerHealthView> {
        let workers = self.workers.read().unwrap_or_else(|p| p.into_inner());
        let mut views: Vec<WorkerHealthView> = workers
            .iter()
            .map(|(addr, w)| WorkerHealthView {
                addr: addr.clone(),
                state: CircuitState::from_u8(w.state.load(Ordering::Acquire)),
                consecutive_failures: w.consecutive_failures.load(Ordering::Relaxed),
                opened: w.opened.load(Ordering::Relaxed),
                deadlines_missed: w.deadlines_missed.load(Ordering::Relaxed),
            })
            .collect();
        views.sort_by(|a, b| a.addr.cmp(&b.addr));
        views
    }

    /// Forgets workers that left the membership.
    pub fn retain(&self, addrs: &[&str]) {
        let mut workers = self.workers.write().unwrap_or_else(|p| p.into_inner());
        workers.retain(|addr, w| {
            let keep = addrs.contains(&addr.as_str());
            if !keep {
                let timing = w.timing.lock().unwrap_or_else(|p| p.into_inner());
                if w.state.load(Ordering::Acquire) != 0
                    || w.consecutive_failures.load(Ordering::Relaxed) != 0
                {
                    self.unwell.fetch_sub(1, Ordering::AcqRel);
                }
                drop(timing);
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health() -> WorkerHealth {
        WorkerHealth::new(HealthConfig {
            failures_to_open: 3,
            min_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(4),
            probe_timeout: Duration::from_secs(10),
        })
    }

    fn state(h: &WorkerHealth, addr: &str) -> CircuitState {
        h.views()
            .into_iter()
            .find(|v| v.addr == addr)
            .map(|v| v.state)
            .unwrap_or(CircuitState::Closed)
    }

    #[test]
    fn consecutive_failures_open_the_circuit_and_a_success_between_resets_them() {
        let (h, t0) = (health(), Instant::now());
        h.failed_at("w", Failure::Error, t0);
        h.failed_at("w", Failure::Error, t0);
        h.succeeded("w");
        h.failed_at("w", Failure::Error, t0);
        h.failed_at("w", Failure::Error, t0);
        assert_eq!(h.admit_at("w", t0), Admission::Go);
        assert!(
            h.failed_at("w", Failure::Error, t0),
            "the third one opens it"
        );
        assert_eq!(state(&h, "w"), CircuitState::Open);
        assert!(
            !h.failed_at("w", Failure::Error, t0),
            "a failure while open opens nothing"
        );
        assert_eq!(h.admit_at("w", t0), Admission::Skip);
        assert_eq!(h.admit_at("other", t0), Admission::Go);
        assert_eq!(h.unwell.load(Ordering::Relaxed), 1);
        h.retain(&["other"]);
        assert_eq!(
            h.unwell.load(Ordering::Relaxed),
            0,
            "a worker that left is forgotten"
        );
        assert_eq!(h.admit_at("w", t0), Admission::Go);
    }

    #[test]
    fn one_missed_deadline_opens_it_and_one_probe_at_a_time_closes_it() {
        let (h, t0) = (health(), Instant::now());
        h.failed_at("w", Failure::Deadline, t0);
        assert_eq!(
            h.admit_at("w", t0 + Duration::from_millis(999)),
            Admission::Skip
        );
        let later = t0 + Duration::from_secs(1);
        assert_eq!(h.admit_at("w", later), Admission::Probe);
        assert_eq!(
            h.admit_at("w", later),
            Admission::Skip,
            "one probe at a time"
        );
        h.succeeded("w");
        assert_eq!(h.admit_at("w", later), Admission::Go);
        assert_eq!(h.unwell.load(Ordering::Relaxed), 0, "all well again");
        let v = &h.views()[0];
        assert_eq!(
            (v.opened, v.deadlines_missed, v.consecutive_failures),
            (1, 1, 0)
        );
    }

    #[test]
    fn a_probe_that_never_reports_lets_another_read_probe_after_its_timeout() {
        let (h, t0) = (health(), Instant::now());
        h.failed_at("w", Failure::Deadline, t0);
        let later = t0 + Duration::from_secs(1);
        assert_eq!(h.admit_at("w", later), Admission::Probe);
        // Its read was dropped: no success, no failure.
        assert_eq!(
            h.admit_at("w", later + Duration::from_secs(9)),
            Admission::Skip
        );
        assert_eq!(
            h.admit_at("w", later + Duration::from_secs(10)),
            Admission::Probe,
            "the worker is not skipped for good"
        );
    }

    #[test]
    fn a_failed_probe_doubles_the_backoff_up_to_the_cap() {
        let (h, t0) = (health(), Instant::now());
        h.failed_at("w", Failure::Deadline, t0);
        let mut now = t0;
        for expected in [2, 4, 4] {
            now += Duration::from_secs(5);
            assert_eq!(h.admit_at("w", now), Admission::Probe);
            h.failed_at("w", Failure::Error, now);
            let just_before = now + Duration::from_secs(expected) - Duration::from_millis(1);
            assert_eq!(h.admit_at("w", just_before), Admission::Skip);
            assert_eq!(
                h.admit_at("w", now + Duration::from_secs(expected)),
                Admission::Probe
            );
            h.failed_at("w", Failure::Error, now);
        }
    }
}
