//! The constant-rate schedule: when each request is *meant* to be sent.
//!
//! With `--rate R` over `C` connections, request `j` of the whole run is due
//! at `origin + j / R`, and connection `c` owns the requests with
//! `j ≡ c (mod C)`. The aggregate is therefore evenly spaced at `1/R`
//! whatever the number of connections, and each connection's own requests
//! are `C/R` apart. A request's latency is measured from this intended time,
//! not from when the client got round to sending it, so a server that
//! stalls is charged for every request that should have gone out during the
//! stall (no coordinated omission).

use tokio::time::Instant;

use std::time::Duration;

/// One connection's share of a constant-rate schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    origin: Instant,
    rate: f64,
    conns: u64,
    conn: u64,
    next: u64,
}

impl Schedule {
    /// Connection `conn` (of `conns`) of a schedule offering `rate`
    /// requests per second in total, starting at `origin`.
    pub fn new(origin: Instant, rate: f64, conns: usize, conn: usize) -> Self {
        Self {
            origin,
            rate,
            conns: conns.max(1) as u64,
            conn: conn as u64,
            next: 0,
        }
    }

    fn at(&self, k: u64) -> Instant {
        let j = self.conn as f64 + k as f64 * self.conns as f64;
        self.origin + Duration::from_secs_f64(j / self.rate)
    }

    /// When this connection's next request is due.
    pub fn peek(&self) -> Instant {
        self.at(self.next)
    }

    /// Moves to the request after [`peek`](Self::peek)'s.
    pub fn advance(&mut self) {
        self.next += 1;
    }

    /// How many of this connection's not yet sent requests are due in
    /// `[from, end)`: what a client that gave up at `end` failed to send.
    pub fn remaining_between(&self, from: Instant, end: Instant) -> u64 {
        let secs = |t: Instant| t.saturating_duration_since(self.origin).as_secs_f64();
        // k-th request is at (conn + k*conns)/rate; first k with time >= t:
        let first_at_or_after = |t: f64| -> u64 {
            let k = ((t * self.rate - self.conn as f64) / self.conns as f64).ceil();
            if k <= 0.0 { 0 } else { k as u64 }
        };
        let lo = self.next.max(first_at_or_after(secs(from)));
        let hi = first_at_or_after(secs(end));
        hi.saturating_sub(lo)
    }
}

/// The instants that bound a run.
#[derive(Debug, Clone, Copy)]
pub struct Times {
    /// The clock starts (connections are already open).
    pub start: Instant,
    /// Warmup ends; requests sent from here on are sampled.
    pub warm_end: Instant,
    /// The measured window ends; no request is due after it.
    pub end: Instant,
    /// Replies still missing now are failures.
    pub drain_deadline: Instant,
}

/// One connection's pacing: closed loop (send whenever a slot is free,
/// until the window ends) or a constant-rate [`Schedule`] (send each request
/// at its due time; every request due before the end is sent, late if the
/// connection's slots are all busy, and its latency counts from its due
/// time).
#[derive(Debug, Clone)]
pub struct Pacer {
    times: Times,
    schedule: Option<Schedule>,
}

impl Pacer {
    /// Connection `conn` of `conns`, at `rate` requests/s in total, or
    /// closed loop without one.
    pub fn new(times: Times, rate: Option<f64>, conns: usize, conn: usize) -> Self {
        Self {
            times,
            schedule: rate.map(|r| Schedule::new(times.start, r, conns, conn)),
        }
    }

    /// The run's instants.
    pub fn times(&self) -> &Times {
        &self.times
    }

    /// Waits until the next request is due and returns its intended send
    /// time (`None` in closed loop: "now, once a slot is free"). `Err(())`
    /// when this connection has nothing more to send.
    pub async fn wait_due(&self) -> Result<Option<Instant>, ()> {
        match &self.schedule {
            Some(s) => {
                let t = s.peek();
                if t >= self.times.end {
                    return Err(());
                }
                tokio::time::sleep_until(t).await;
                Ok(Some(t))
            }
            None if Instant::now() >= self.times.end => Err(()),
            None => Ok(None),
        }
    }

    /// Whether another request is already due at `now` (for batching).
    pub fn due_at(&self, now: Instant) -> Option<Option<Instant>> {
        match &self.schedule {
            Some(s) => {
                let t = s.peek();
                (t <= now && t < self.times.end).then_some(Some(t))
            }
            None => (now < self.times.end).then_some(None),
        }
    }

    /// The last moment to wait for a free in-flight slot: the end of the
    /// window in closed loop, the drain deadline at a constant rate (a due
    /// request is owed to the server even if the window has closed).
    pub fn slot_deadline(&self) -> Instant {
        match self.schedule {
            Some(_) => self.times.drain_deadline,
            None => self.times.end,
        }
    }

    /// The due request has been sent.
    pub fn sent(&mut self) {
        if let Some(s) = &mut self.schedule {
            s.advance();
        }
    }

    /// Constant rate: requests due before the end of the window that were
    /// never sent (0 in closed loop).
    pub fn unsent(&self) -> u64 {
        self.schedule
            .as_ref()
            .map_or(0, |s| s.remaining_between(self.times.start, self.times.end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_interleave_into_an_even_schedule() {
        let origin = Instant::now();
        let (rate, conns) = (1000.0, 4);
        let mut all = Vec::new();
        for c in 0..conns {
            let mut s = Schedule::new(origin, rate, conns, c);
            for _ in 0..25 {
                all.push(s.peek().duration_since(origin));
                s.advance();
            }
        }
        all.sort();
        assert_eq!(all.len(), 100);
        for (j, t) in all.iter().enumerate() {
            let want = Duration::from_micros(j as u64 * 1000);
            let diff = t.abs_diff(want);
            assert!(diff < Duration::from_micros(1), "request {j} at {t:?}");
        }
    }

    #[test]
    fn remaining_counts_due_unsent_requests() {
        let origin = Instant::now();
        // 100/s on one connection: requests at 0, 10 ms, 20 ms, ...
        let mut s = Schedule::new(origin, 100.0, 1, 0);
        let at = |ms| origin + Duration::from_millis(ms);
        assert_eq!(s.remaining_between(at(0), at(1000)), 100);
        assert_eq!(s.remaining_between(at(500), at(1000)), 50);
        for _ in 0..70 {
            s.advance();
        }
        // Sent up to 690 ms; due in [500, 1000) and unsent: 700..990.
        assert_eq!(s.remaining_between(at(500), at(1000)), 30);
        assert_eq!(s.remaining_between(at(2000), at(1000)), 0);
    }
}
