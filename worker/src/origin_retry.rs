//! Retries of a transient origin failure (throttling, 5xx, resets, cut bodies), with
//! backoff: one policy for the worker's fills ([`crate::loader`]) and its metadata
//! requests ([`crate::origins::StatCache`]), so that a stat is as patient with a
//! throttling origin as the read it serves.

use std::future::Future;
use std::time::Duration;

use crate::error::{Result, WorkerError};
use crate::loader::LoaderConfig;

/// How many times, and how patiently, a transient origin failure is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub retries: u32,
    /// First backoff; doubles with every retry, plus up to half again of jitter.
    pub backoff: Duration,
    /// Whether an origin's throttling answer (SlowDown) is retried too. A fill's is:
    /// the bytes are owed to a read in progress. A metadata request's is not: the
    /// client gets the throttle (503 SlowDown with Retry-After) and backs off itself,
    /// and the origin gets no more load than the client sends.
    pub throttled: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::of(&LoaderConfig::default())
    }
}

impl RetryPolicy {
    /// The policy a loader configuration names (`--origin-retries`, its backoff).
    pub fn of(config: &LoaderConfig) -> RetryPolicy {
        RetryPolicy {
            retries: config.origin_retries,
            backoff: config.retry_backoff,
            throttled: true,
        }
    }

    /// This policy, with throttling answers passed on rather than retried.
    pub fn passing_throttles_on(self) -> RetryPolicy {
        RetryPolicy {
            throttled: false,
            ..self
        }
    }

    /// Runs `attempt` until it succeeds, fails in a way no retry can change
    /// ([`WorkerError::is_retryable_origin_failure`]), or the retries are spent;
    /// `retried` hears of each failure retried.
    ///
    /// # Errors
    /// The last attempt's error.
    pub async fn run<T, F, Fut>(
        &self,
        mut attempt: F,
        mut retried: impl FnMut(&WorkerError, u32),
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut n = 0;
        loop {
            match attempt().await {
                Err(e)
                    if e.is_retryable_origin_failure()
                        && (self.throttled || !e.is_origin_throttling())
                        && n < self.retries =>
                {
                    n += 1;
                    retried(&e, n);
                    let backoff = self.backoff * 2u32.saturating_pow(n - 1);
                    let jitter = Duration::from_millis(fastrand::u64(
                        ..=u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX) / 2 + 1,
                    ));
                    tokio::time::sleep(backoff + jitter).await;
                }
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use talon_protocols::{Error, ErrorKind};

    fn origin(kind: ErrorKind) -> WorkerError {
        WorkerError::Origin(Error::new(kind, "x"))
    }

    #[tokio::test]
    async fn a_transient_failure_is_retried_and_a_lasting_one_is_not() {
        let policy = RetryPolicy {
            retries: 3,
            backoff: Duration::from_millis(1),
            throttled: true,
        };
        let mut calls = 0;
        let got = policy
            .run(
                || {
                    calls += 1;
                    let n = calls;
                    async move {
                        if n < 3 {
                            Err(origin(ErrorKind::SlowDown))
                        } else {
                            Ok(n)
                        }
                    }
                },
                |_, _| {},
            )
            .await
            .unwrap();
        assert_eq!(got, 3);
        let mut calls = 0;
        let e = policy
            .run(
                || {
                    calls += 1;
                    async { Err::<(), _>(origin(ErrorKind::NoSuchKey)) }
                },
                |_, _| {},
            )
            .await
            .unwrap_err();
        assert_eq!(e.frame_code(), talon_core::ErrorCode::NotFound);
        assert_eq!(calls, 1, "not found is not retried");
        let mut retries = 0;
        policy
            .run(
                || async { Err::<(), _>(origin(ErrorKind::InternalError)) },
                |_, _| retries += 1,
            )
            .await
            .unwrap_err();
        assert_eq!(retries, 3, "then the last error");
        let mut calls = 0;
        policy
            .passing_throttles_on()
            .run(
                || {
                    calls += 1;
                    async { Err::<(), _>(origin(ErrorKind::SlowDown)) }
                },
                |_, _| {},
            )
            .await
            .unwrap_err();
        assert_eq!(calls, 1, "a throttle passed on at once");
    }
}
