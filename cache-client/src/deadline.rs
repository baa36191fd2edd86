//! The deadline budget of a piece: how long a read may spend on each hop before it
//! moves on, all taken from one figure.
//!
//! A piece (one request's worth of a read) has [`DeadlineBudget::total`] from the
//! moment it is requested: the workers in rendezvous order get at most
//! [`DeadlineBudget::workers_share`] of it together, each attempt bounded by the
//! worker hop's [`HopDeadlines`], and the origin (the last resort) gets what is left,
//! never less than the rest of the total after the workers' share. A hung worker
//! therefore costs a piece at most its first-byte deadline, a worker that stalls
//! mid-body at most its stall deadline after its last byte, and neither can use the
//! time the origin needs to answer in its place.
//!
//! The budget is per piece, not per response: a response is paced by its client, and
//! a slow client must not run the budget of the pieces behind it out.

use std::time::Duration;

/// The deadlines of one hop (a worker's data plane).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HopDeadlines {
    /// Opening a connection, the Hello exchange included.
    pub connect: Duration,
    /// From sending a request until its answer begins, while the connection is silent.
    /// Bytes of earlier answers on the same pipelined connection count as life: a
    /// request queued behind a long transfer is not failed for waiting its turn. A
    /// worker answers a miss only once it holds the piece, so this bounds its fill too.
    pub first_byte: Duration,
    /// Silence allowed once the answer has begun: a worker that sends nothing for this
    /// long mid-body is treated as one that died (the bytes it sent are kept and the
    /// rest is asked elsewhere).
    pub stall: Duration,
}

/// A piece's deadlines on every hop, derived from one total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlineBudget {
    /// All a piece may take, workers and origin together.
    pub total: Duration,
    /// What all worker attempts of a piece may take together; the origin has the rest.
    pub workers_share: Duration,
    /// Each worker attempt's deadlines.
    pub worker: HopDeadlines,
}

/// The default total: the gateway's request deadline.
pub const DEFAULT_TOTAL: Duration = Duration::from_secs(30);

impl DeadlineBudget {
    /// The budget derived from `total`: connect `total/30` (1 s of 30 s), first byte
    /// `total/6` (5 s), stall `total/15` (2 s), and half the total for the workers
    /// together, so that two hung workers still leave the origin half of it. Each
    /// deadline is at least 10 ms.
    pub fn from_total(total: Duration) -> DeadlineBudget {
        let floor = Duration::from_millis(10);
        let part = |n: u32| (total / n).max(floor);
        DeadlineBudget {
            total: total.max(floor),
            workers_share: part(2),
            worker: HopDeadlines {
                connect: part(30),
                first_byte: part(6),
                stall: part(15),
            },
        }
    }

    /// This budget with the worker hop's first-byte and stall deadlines replaced
    /// where given (`None` keeps the derived one).
    pub fn with_worker(
        mut self,
        first_byte: Option<Duration>,
        stall: Option<Duration>,
    ) -> DeadlineBudget {
        if let Some(d) = first_byte {
            self.worker.first_byte = d;
        }
        if let Some(d) = stall {
            self.worker.stall = d;
        }
        self
    }
}

impl Default for DeadlineBudget {
    fn default() -> DeadlineBudget {
        DeadlineBudget::from_total(DEFAULT_TOTAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_budget_gives_each_hop_its_share() {
        let b = DeadlineBudget::default();
        assert_eq!(b.total, Duration::from_secs(30));
        assert_eq!(b.workers_share, Duration::from_secs(15));
        assert_eq!(b.worker.connect, Duration::from_secs(1));
        assert_eq!(b.worker.first_byte, Duration::from_secs(5));
        assert_eq!(b.worker.stall, Duration::from_secs(2));
        // Two hung workers fit in the workers' share, and the origin keeps the rest.
        assert!(b.worker.first_byte * 2 <= b.workers_share);
    }

    #[test]
    fn tiny_budgets_keep_a_floor_and_overrides_replace_only_what_is_given() {
        let b = DeadlineBudget::from_total(Duration::from_millis(30));
        assert_eq!(b.worker.connect, Duration::from_millis(10));
        assert_eq!(b.workers_share, Duration::from_millis(15));
        let o = DeadlineBudget::default().with_worker(Some(Duration::from_millis(700)), None);
        assert_eq!(o.worker.first_byte, Duration::from_millis(700));
        assert_eq!(o.worker.stall, Duration::from_secs(2));
    }
}
