//! The per-prefix limit on requests a process sends its origin.
//!
//! S3 throttles at about 3,500 writes and 5,500 reads per second per prefix and answers
//! `503 SlowDown` past that; Azure has its own per-account and per-blob limits. A cache
//! in front of the store must not be what trips them: every request a gateway or a
//! worker sends (reads, HEADs, listings, writes) first takes a turn here. Turns follow
//! the generic cell rate algorithm: a prefix's requests go at once up to a burst, then
//! one every `1 / per_second`; a request whose turn is further away than the queue
//! allows is refused with [`ErrorKind::SlowDown`] and never sent, so the client sees
//! Talon's throttling answer (S3 `SlowDown`, Azure `ServerBusy`), and nothing changed.
//!
//! The prefix is the bucket (container) and the key up to its last `/`: the folder a
//! dataset's objects share. Bucket-level requests (listings, bucket operations) count
//! against the bucket's root.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};

/// S3's documented write rate per prefix (reads allow 5,500): one limit under both.
pub const DEFAULT_REQUESTS_PER_PREFIX: u32 = 3_500;

/// How long a request may wait for its turn before it is refused.
pub const DEFAULT_REQUEST_QUEUE: Duration = Duration::from_secs(1);

/// Prefixes remembered before idle ones are dropped (an idle prefix holds no state:
/// its next request goes at once whether it is remembered or not).
const PREFIXES_KEPT: usize = 4_096;

/// How many requests per second a prefix may be sent, and how long one may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimit {
    /// Requests per second per prefix, sustained (at least 1).
    pub per_second: u32,
    /// Requests that may go at once after a quiet spell (at least 1).
    pub burst: u32,
    /// The longest a request waits for its turn; past it, `SlowDown`.
    pub queue: Duration,
}

impl RequestLimit {
    /// `per_second` with a burst of a tenth of a second's worth and `queue`.
    pub fn per_second(per_second: u32, queue: Duration) -> RequestLimit {
        RequestLimit {
            per_second: per_second.max(1),
            burst: (per_second / 10).max(1),
            queue,
        }
    }

    /// The limit a process's flags ask for: `per_second` requests per second per
    /// prefix (0: no limit) with `queue`.
    pub fn from_flags(per_second: u32, queue: Duration) -> Option<RequestLimit> {
        (per_second > 0).then(|| RequestLimit::per_second(per_second, queue))
    }

    fn interval(&self) -> Duration {
        Duration::from_secs(1) / self.per_second.max(1)
    }

    /// How far ahead of the steady pace a prefix may run (the burst, less one turn).
    fn tolerance(&self) -> Duration {
        self.interval() * self.burst.max(1).saturating_sub(1)
    }
}

/// Requests that waited for their turn and requests refused, since the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestLimitStats {
    /// Requests that went at once.
    pub immediate: u64,
    /// Requests that waited for their turn, then went.
    pub queued: u64,
    /// Requests refused (`SlowDown`) and never sent.
    pub refused: u64,
}

impl RequestLimitStats {
    /// Each figure with the label `/metrics` gives it (`outcome`).
    pub fn labelled(&self) -> [(&'static str, u64); 3] {
        [
            ("immediate", self.immediate),
            ("queued", self.queued),
            ("refused", self.refused),
        ]
    }

    /// The sum of two clients' figures.
    pub fn plus(self, other: RequestLimitStats) -> RequestLimitStats {
        RequestLimitStats {
            immediate: self.immediate + other.immediate,
            queued: self.queued + other.queued,
            refused: self.refused + other.refused,
        }
    }
}

/// The turns of every prefix one origin client sends to (shared by its clones).
#[derive(Debug)]
pub struct PrefixRequestLimiter {
    limit: RequestLimit,
    /// Per prefix, the theoretical arrival time of its next request.
    next: Mutex<HashMap<String, Instant>>,
    immediate: AtomicU64,
    queued: AtomicU64,
    refused: AtomicU64,
}

impl PrefixRequestLimiter {
    /// A limiter enforcing `limit` on every prefix.
    pub fn new(limit: RequestLimit) -> PrefixRequestLimiter {
        PrefixRequestLimiter {
            limit,
            next: Mutex::new(HashMap::new()),
            immediate: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// The limit in force.
    pub fn limit(&self) -> RequestLimit {
        self.limit
    }

    /// Waits for the turn of a request to `key` (or to the bucket itself) in `bucket`.
    ///
    /// # Errors
    /// [`ErrorKind::SlowDown`] when the turn is further away than the queue allows;
    /// the request must not be sent then.
    pub async fn admit(&self, bucket: &str, key: Option<&str>) -> Result<()> {
        let now = Instant::now();
        let turn = self.reserve(limited_prefix(bucket, key), now)?;
        if turn > now {
            self.queued.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep_until(tokio::time::Instant::from_std(turn)).await;
        } else {
            self.immediate.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Takes the next turn of `prefix` as of `now` and says when it is; a turn further
    /// away than the queue is not taken.
    fn reserve(&self, prefix: String, now: Instant) -> Result<Instant> {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let due = next.get(prefix.as_str()).copied().unwrap_or(now).max(now);
        let turn = due
            .checked_sub(self.limit.tolerance())
            .map_or(now, |t| t.max(now));
        if turn.duration_since(now) > self.limit.queue {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(Error::new(
                ErrorKind::SlowDown,
                format!(
                    "more than {} requests per second to the origin under '{prefix}' \
                     (this process's limit); reduce the request rate",
                    self.limit.per_second
                ),
            ));
        }
        if next.len() >= PREFIXES_KEPT && !next.contains_key(prefix.as_str()) {
            next.retain(|_, due| *due > now);
        }
        next.insert(prefix, due + self.limit.interval());
        Ok(turn)
    }

    /// What the limiter did so far.
    pub fn stats(&self) -> RequestLimitStats {
        RequestLimitStats {
            immediate: self.immediate.load(Ordering::Relaxed),
            queued: self.queued.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }
}

/// The prefix a request counts against: `bucket/` and the key up to its last `/`.
fn limited_prefix(bucket: &str, key: Option<&str>) -> String {
    let folder = key
        .and_then(|k| k.rfind('/').map(|at| &k[..=at]))
        .unwrap_or("");
    format!("{bucket}/{folder}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn zero_asks_for_no_limit_and_a_burst_is_a_tenth_of_a_second() {
        assert_eq!(RequestLimit::from_flags(0, DEFAULT_REQUEST_QUEUE), None);
        assert_eq!(
            RequestLimit::from_flags(DEFAULT_REQUESTS_PER_PREFIX, DEFAULT_REQUEST_QUEUE),
            Some(RequestLimit {
                per_second: 3_500,
                burst: 350,
                queue: Duration::from_secs(1)
            })
        );
        assert_eq!(RequestLimit::per_second(5, ms(0)).burst, 1);
    }

    #[test]
    fn a_prefix_is_the_bucket_and_the_keys_folder() {
        assert_eq!(limited_prefix("b", Some("train/x/1.jpg")), "b/train/x/");
        assert_eq!(limited_prefix("b", Some("top.bin")), "b/");
        assert_eq!(limited_prefix("b", None), "b/");
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A burst goes at once, then one turn per interval; a turn past the queue is
    /// refused as SlowDown and not taken; another folder or bucket is not held back.
    #[test]
    fn a_prefix_gets_its_burst_then_its_rate_then_slowdown() {
        let limiter = PrefixRequestLimiter::new(RequestLimit {
            per_second: 10,
            burst: 3,
            queue: ms(250),
        });
        let t0 = Instant::now();
        let turn = |key: &str, at: Duration| {
            limiter
                .reserve(limited_prefix("b", Some(key)), t0 + at)
                .map(|turn| turn - t0)
        };
        // Three at once, then 100 ms apart: the 4th at +100, the 5th at +200.
        for want in [0, 0, 0, 100, 200] {
            assert_eq!(turn("d/k", ms(0)).unwrap(), ms(want));
        }
        // The 6th would go at +300, past the 250 ms queue: refused, nothing taken.
        let e = turn("d/k", ms(0)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::SlowDown);
        assert_eq!(
            turn("d/other", ms(40)).unwrap_err().kind(),
            ErrorKind::SlowDown
        );
        // Once time has moved on, the same prefix goes on at its pace.
        assert_eq!(turn("d/k", ms(100)).unwrap(), ms(300));
        // Another folder, another bucket: at once.
        assert_eq!(turn("elsewhere/k", ms(0)).unwrap(), ms(0));
        assert_eq!(
            limiter
                .reserve(limited_prefix("c", Some("d/k")), t0)
                .unwrap(),
            t0
        );
        assert_eq!(limiter.stats().refused, 2);
    }

    /// Over a long run the rate is the limit's, whatever the burst; after a quiet
    /// spell the burst is back.
    #[test]
    fn a_long_run_keeps_the_rate_and_a_quiet_spell_restores_the_burst() {
        let limiter =
            PrefixRequestLimiter::new(RequestLimit::per_second(100, Duration::from_secs(60)));
        let t0 = Instant::now();
        let mut last = t0;
        for _ in 0..1_010 {
            last = limiter.reserve("b/".into(), t0).unwrap();
        }
        // 10 at once (a tenth of a second's worth), then 1,000 at 10 ms each.
        assert_eq!(last - t0, Duration::from_secs(10));
        let later = t0 + Duration::from_secs(20);
        for _ in 0..10 {
            assert_eq!(limiter.reserve("b/".into(), later).unwrap(), later);
        }
        assert_eq!(limiter.reserve("b/".into(), later).unwrap(), later + ms(10));
    }

    /// A request through `admit` waits for its turn and is counted as queued.
    #[tokio::test]
    async fn admit_waits_for_the_turn_and_counts_it() {
        let limiter = PrefixRequestLimiter::new(RequestLimit {
            per_second: 2,
            burst: 1,
            queue: Duration::from_secs(1),
        });
        limiter.admit("b", Some("k")).await.unwrap();
        limiter.admit("b", Some("k")).await.unwrap();
        assert_eq!(
            limiter.stats(),
            RequestLimitStats {
                immediate: 1,
                queued: 1,
                refused: 0
            }
        );
    }
}
