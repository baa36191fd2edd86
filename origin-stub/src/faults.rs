//! Injectable faults: added latency, a bandwidth cap on response bodies, an error
//! rate with a choice of failures, and an S3-like request-rate throttle. Set at start from flags and changed at run time
//! through the admin endpoint (`PUT /admin/faults`), so reliability tests and benches
//! can model a slow or flaky origin.

use std::str::FromStr;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// A failure the stub can inject into a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultKind {
    /// 503 `SlowDown` (S3) / `ServerBusy` (Azure).
    Slowdown,
    /// 500 `InternalError`.
    Internal,
    /// The connection is closed before any response.
    Reset,
    /// A GET answer stops halfway through its body (the connection is then closed).
    Truncate,
}

impl FaultKind {
    /// The name used in flags, JSON and metrics.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Slowdown => "slowdown",
            FaultKind::Internal => "internal",
            FaultKind::Reset => "reset",
            FaultKind::Truncate => "truncate",
        }
    }
}

impl FromStr for FaultKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "slowdown" => Ok(FaultKind::Slowdown),
            "internal" => Ok(FaultKind::Internal),
            "reset" => Ok(FaultKind::Reset),
            "truncate" => Ok(FaultKind::Truncate),
            other => Err(format!(
                "unknown fault '{other}' (slowdown, internal, reset, truncate)"
            )),
        }
    }
}

/// The fault settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    /// Added to every request before it is handled, in milliseconds.
    #[serde(default)]
    pub latency_ms: u64,
    /// Cap on each response body's rate, bytes per second; `None` is unlimited.
    #[serde(default)]
    pub bandwidth_bytes_per_sec: Option<u64>,
    /// Probability in 0..=1 that a request fails with one of `error_kinds`.
    #[serde(default)]
    pub error_rate: f64,
    /// The failures drawn from, uniformly; defaults to `slowdown`.
    #[serde(default = "default_kinds")]
    pub error_kinds: Vec<FaultKind>,
    /// Requests per second above which the stub answers 503 `SlowDown` (S3) /
    /// `ServerBusy` (Azure), as S3 does past about 5,500 GETs and HEADs a second on a
    /// prefix: a token bucket holding one second's worth, over every request (the stub
    /// models one prefix). `None`: no throttle.
    #[serde(default)]
    pub throttle_rps: Option<u64>,
    /// The next this many requests fail with `error_kinds` (in turn), whatever
    /// `error_rate`; after them `error_rate` applies. For tests of retries: a failure
    /// that passes.
    #[serde(default)]
    pub fail_next: u64,
}

fn default_kinds() -> Vec<FaultKind> {
    vec![FaultKind::Slowdown]
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            latency_ms: 0,
            bandwidth_bytes_per_sec: None,
            error_rate: 0.0,
            error_kinds: default_kinds(),
            throttle_rps: None,
            fail_next: 0,
        }
    }
}

impl FaultConfig {
    /// Checks ranges.
    ///
    /// # Errors
    /// A message for a rate outside 0..=1, a zero bandwidth, or no kinds with a rate.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.error_rate) {
            return Err("error_rate must be between 0 and 1".into());
        }
        if self.throttle_rps == Some(0) {
            return Err("throttle_rps must be positive (null for no throttle)".into());
        }
        if self.bandwidth_bytes_per_sec == Some(0) {
            return Err("bandwidth_bytes_per_sec must be positive (null for unlimited)".into());
        }
        if (self.error_rate > 0.0 || self.fail_next > 0) && self.error_kinds.is_empty() {
            return Err(
                "error_kinds must not be empty when error_rate > 0 or fail_next > 0".into(),
            );
        }
        Ok(())
    }
}

/// The live fault settings, shared by every request.
#[derive(Debug)]
pub struct Faults {
    config: RwLock<FaultConfig>,
    /// The throttle's tokens, and when they were last counted.
    bucket: Mutex<(f64, Instant)>,
    /// Requests still to fail of [`FaultConfig::fail_next`].
    fail_left: std::sync::atomic::AtomicU64,
}

impl Default for Faults {
    fn default() -> Faults {
        Faults::new(FaultConfig::default())
    }
}

impl Faults {
    /// Starts with `config`.
    pub fn new(config: FaultConfig) -> Faults {
        let tokens = config.throttle_rps.unwrap_or(0) as f64;
        Faults {
            fail_left: std::sync::atomic::AtomicU64::new(config.fail_next),
            config: RwLock::new(config),
            bucket: Mutex::new((tokens, Instant::now())),
        }
    }

    /// The current settings.
    pub fn get(&self) -> FaultConfig {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the settings.
    ///
    /// # Errors
    /// As [`FaultConfig::validate`]; nothing changes then.
    pub fn set(&self, config: FaultConfig) -> Result<(), String> {
        config.validate()?;
        // A new throttle starts with a full second's worth.
        *self.bucket.lock().unwrap_or_else(|p| p.into_inner()) =
            (config.throttle_rps.unwrap_or(0) as f64, Instant::now());
        self.fail_left
            .store(config.fail_next, std::sync::atomic::Ordering::Relaxed);
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config;
        Ok(())
    }

    /// Whether this request is over the throttle's rate (and so answered 503): takes a
    /// token when one is left.
    pub fn throttled(&self) -> bool {
        let Some(rps) = self.get().throttle_rps else {
            return false;
        };
        let rate = rps as f64;
        let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let (tokens, at) = *bucket;
        let tokens = (tokens + now.saturating_duration_since(at).as_secs_f64() * rate).min(rate);
        if tokens >= 1.0 {
            *bucket = (tokens - 1.0, now);
            false
        } else {
            *bucket = (tokens, now);
            true
        }
    }

    /// Draws this request's fate: the latency to add and the failure, if any.
    pub fn draw(&self) -> (Duration, Option<FaultKind>) {
        let c = self.get();
        let latency = Duration::from_millis(c.latency_ms);
        let failing = self.fail_left.fetch_update(
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
            |n| n.checked_sub(1),
        );
        if let (Ok(left), false) = (failing, c.error_kinds.is_empty()) {
            let turn = usize::try_from(c.fail_next - left).unwrap_or(0);
            return (latency, Some(c.error_kinds[turn % c.error_kinds.len()]));
        }
        if c.error_rate > 0.0 && !c.error_kinds.is_empty() && fastrand::f64() < c.error_rate {
            let kind = c.error_kinds[fastrand::usize(..c.error_kinds.len())];
            return (latency, Some(kind));
        }
        (latency, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_next_fails_that_many_requests_in_turn_then_passes() {
        let faults = Faults::new(FaultConfig {
            fail_next: 3,
            error_kinds: vec![FaultKind::Internal, FaultKind::Reset],
            ..FaultConfig::default()
        });
        let drawn: Vec<Option<FaultKind>> = (0..5).map(|_| faults.draw().1).collect();
        assert_eq!(
            drawn,
            [
                Some(FaultKind::Internal),
                Some(FaultKind::Reset),
                Some(FaultKind::Internal),
                None,
                None
            ]
        );
    }

    #[test]
    fn json_round_trip_and_validation() {
        let c: FaultConfig =
            serde_json::from_str(r#"{"error_rate": 1.0, "error_kinds": ["reset", "truncate"]}"#)
                .expect("json");
        assert_eq!(c.error_kinds, vec![FaultKind::Reset, FaultKind::Truncate]);
        assert!(
            serde_json::from_str::<FaultConfig>(r#"{"eror_rate": 1.0}"#).is_err(),
            "typos are rejected"
        );
        let faults = Faults::default();
        assert!(
            faults
                .set(FaultConfig {
                    error_rate: 2.0,
                    ..FaultConfig::default()
                })
                .is_err()
        );
        assert_eq!(
            faults.get(),
            FaultConfig::default(),
            "a rejected update changes nothing"
        );
        faults.set(c).expect("valid");
        let (_, kind) = faults.draw();
        assert!(matches!(kind, Some(FaultKind::Reset | FaultKind::Truncate)));
        faults.set(FaultConfig::default()).expect("valid");
        assert_eq!(faults.draw(), (Duration::ZERO, None));
    }

    /// The throttle lets one second's worth through at once, then refuses what comes
    /// faster than its rate; no throttle refuses nothing.
    #[test]
    fn the_throttle_admits_its_rate_and_refuses_the_rest() {
        let faults = Faults::new(FaultConfig {
            throttle_rps: Some(50),
            ..FaultConfig::default()
        });
        let admitted = (0..200).filter(|_| !faults.throttled()).count();
        // 50 at once, plus what refilled meanwhile (a few at most on any machine).
        assert!((50..60).contains(&admitted), "{admitted} of 200 admitted");
        let open = Faults::default();
        assert!((0..1000).all(|_| !open.throttled()));
    }
}
