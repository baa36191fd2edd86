//! The dataset bench's client: one epoch over a generated dataset of many objects
//! (`--generate-set`), each object read whole once, in key order or shuffled, by a fixed
//! number of keep-alive connections spread over a front's endpoints.
//!
//! Unlike [`crate::http_load`] (one object, the first failure stops the run), a throttling
//! answer (`503`) is part of what an epoch measures: it is counted, and the object is asked
//! again after the answer's `Retry-After` or an exponential backoff with jitter, as the SDKs'
//! standard retry mode does, up to a number of attempts; an object still throttled then is
//! counted as failed and the epoch goes on. Anything else that is not the object's exact
//! bytes (another status, a wrong length or byte, a broken connection) stops the epoch and is
//! returned verbatim. Bodies are compared with the generator's bytes as they arrive, chunk by
//! chunk, without hashing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use talon_core::Backend;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use talon_origin_stub::generated::{GeneratedObject, GeneratedSet};
use tokio::time::Instant;

use crate::http_load::{Auth, Connection, ObjectTarget};

/// The most pages [`Endpoint::list_all`] reads (ten million keys) before it calls the
/// listing endless.
const MAX_LISTING_PAGES: u64 = 10_000;

/// Longest one request may take, headers to last byte.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// One endpoint of a front: a gateway's, or the origin's own.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The protocol it speaks.
    pub protocol: Backend,
    /// `http://host:port` (S3) or `http://host:port/ACCOUNT` (Azure).
    pub base: String,
    /// How requests to it are signed.
    pub auth: Auth,
}

impl Endpoint {
    /// The target of one object of `set` at this endpoint.
    fn target(&self, bucket: &str, key: &str) -> Result<ObjectTarget, String> {
        let built = match self.protocol {
            Backend::S3 => ObjectTarget::s3(&self.base, bucket, key, self.auth.clone()),
            Backend::Azure => ObjectTarget::azure(&self.base, bucket, key, self.auth.clone()),
        };
        built.map_err(|e| e.to_string())
    }
}

impl Endpoint {
    /// Lists every key under `prefix` of `bucket` through this endpoint, page after page
    /// of 1,000 as a loader lists its dataset, with the same signatures as its reads;
    /// returns how many keys and pages.
    ///
    /// # Errors
    /// The endpoint's refusal or a broken connection, said in a line.
    pub async fn list_all(&self, bucket: &str, prefix: &str) -> Result<(u64, u64), String> {
        use talon_protocols::origin::{OriginClient, OriginConfig};
        let config = match &self.auth {
            Auth::SigV4 {
                credentials,
                region,
            } => OriginConfig::S3 {
                endpoint: self.base.clone(),
                region: region.clone(),
                credentials: Some(credentials.clone()),
                virtual_hosted: false,
            },
            Auth::SharedKey { account, key } => OriginConfig::Azure {
                endpoint: self.base.clone(),
                account: account.clone(),
                key: Some(key.clone()),
                sas: None,
            },
            Auth::Anonymous => return Err("listing needs a signed endpoint".into()),
        };
        let client = OriginClient::new(config).map_err(|e| e.message().to_owned())?;
        let (mut keys, mut pages) = (0u64, 0u64);
        let mut token: Option<String> = None;
        loop {
            if pages >= MAX_LISTING_PAGES {
                return Err(format!(
                    "listing {bucket}/{prefix} at {}: still more after {pages} pages",
                    self.base
                ));
            }
            let page = client
                .list(bucket, prefix, None, token.as_deref(), Some(1000))
                .await
                .map_err(|e| {
                    format!(
                        "listing {bucket}/{prefix} at {}: {}",
                        self.base,
                        e.message()
                    )
                })?;
            keys += page.objects.len() as u64;
            pages += 1;
            token = page.next_token;
            if token.is_none() {
                return Ok((keys, pages));
            }
        }
    }
}

/// The order an epoch reads the dataset in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Key order (a sequential pass, as a loader that does not shuffle).
    Sequential,
    /// A permutation drawn from `seed` (a shuffled epoch, as a training loader's).
    Shuffled {
        /// The permutation's seed.
        seed: u64,
    },
}

impl Order {
    /// `sequential` or `shuffled`, for tables.
    pub fn label(self) -> &'static str {
        match self {
            Order::Sequential => "sequential",
            Order::Shuffled { .. } => "shuffled",
        }
    }

    /// The dataset's indexes in this order.
    fn indexes(self, count: u64) -> Vec<u64> {
        let mut all: Vec<u64> = (0..count).collect();
        if let Order::Shuffled { seed } = self {
            fastrand::Rng::with_seed(seed).shuffle(&mut all);
        }
        all
    }
}

/// How a throttled object is asked again.
#[derive(Debug, Clone, Copy)]
pub struct ThrottleRetry {
    /// Attempts per object in all (the first included).
    pub attempts: u32,
    /// The first backoff; doubled each attempt, with full jitter.
    pub base: Duration,
    /// The longest backoff.
    pub cap: Duration,
}

impl Default for ThrottleRetry {
    /// The SDKs' standard mode, roughly: 3 attempts would give up too soon on a queue of
    /// 64 readers, so 8, from 50 ms up to 5 s.
    fn default() -> Self {
        ThrottleRetry {
            attempts: 8,
            base: Duration::from_millis(50),
            cap: Duration::from_secs(5),
        }
    }
}

impl ThrottleRetry {
    fn backoff(
        &self,
        attempt: u32,
        retry_after: Option<Duration>,
        rng: &mut fastrand::Rng,
    ) -> Duration {
        if let Some(after) = retry_after {
            return after.min(self.cap);
        }
        let ceiling = self
            .base
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.cap);
        ceiling.mul_f64(rng.f64())
    }
}

/// What an epoch does.
#[derive(Debug, Clone)]
pub struct EpochSpec {
    /// The dataset.
    pub set: Arc<GeneratedSet>,
    /// The front's endpoints; connection `i` uses endpoint `i % len`.
    pub endpoints: Vec<Endpoint>,
    /// Keep-alive connections, one request in flight each.
    pub connections: usize,
    /// The order.
    pub order: Order,
    /// How throttled objects are asked again.
    pub retry: ThrottleRetry,
}

/// What an epoch measured.
#[derive(Debug, Clone, Default)]
pub struct EpochOutcome {
    /// Objects delivered whole and right.
    pub objects: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Requests sent (throttled ones included).
    pub requests: u64,
    /// `503` answers seen.
    pub throttled: u64,
    /// Objects still throttled after every attempt.
    pub failed: u64,
    /// From the first request to the last answer.
    pub elapsed: Duration,
    /// Latency of each delivering request, request written to last body byte.
    pub latencies: Vec<Duration>,
    /// What stopped the epoch, verbatim (a wrong answer, a broken connection).
    pub first_error: Option<String>,
}

impl EpochOutcome {
    /// Objects delivered per second.
    pub fn objects_per_s(&self) -> f64 {
        if self.elapsed.is_zero() {
            0.0
        } else {
            self.objects as f64 / self.elapsed.as_secs_f64()
        }
    }
}

/// What one request came to.
enum Answer {
    Delivered { bytes: u64 },
    Throttled { retry_after: Option<Duration> },
}

struct Shared {
    spec: EpochSpec,
    order: Vec<u64>,
    next: AtomicU64,
    abort: AtomicBool,
    first_error: std::sync::Mutex<Option<String>>,
}

impl Shared {
    fn fail(&self, message: String) {
        self.abort.store(true, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert(message);
    }
}

#[derive(Default)]
struct Tally {
    objects: u64,
    bytes: u64,
    requests: u64,
    throttled: u64,
    failed: u64,
    latencies: Vec<Duration>,
}

/// Sends `req` and reads the answer: the object's bytes, checked against `object` as they
/// arrive, or a throttle. `scratch` holds the expected bytes of each chunk.
async fn read_object(
    conn: &mut Connection,
    req: Request<Empty<Bytes>>,
    object: &GeneratedObject,
    scratch: &mut Vec<u8>,
) -> Result<Answer, String> {
    let resp = conn.send(req).await?;
    let (parts, mut body) = resp.into_parts();
    if parts.status == StatusCode::SERVICE_UNAVAILABLE {
        while let Some(frame) = body.frame().await {
            frame.map_err(|e| format!("the 503's body broke off: {e}"))?;
        }
        let retry_after = parts
            .headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        return Ok(Answer::Throttled { retry_after });
    }
    let mut offset = 0u64;
    let mut text = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            format!(
                "the body broke off after {offset} bytes (status {}): {e}",
                parts.status
            )
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if parts.status != StatusCode::OK {
            text.extend_from_slice(&data[..data.len().min(512 - text.len().min(512))]);
            continue;
        }
        let end = offset + data.len() as u64;
        if end > object.size {
            return Err(format!(
                "{} bytes or more, the object has {}",
                end, object.size
            ));
        }
        scratch.resize(data.len(), 0);
        object.fill(offset, scratch);
        if scratch[..] != data[..] {
            let at = scratch.iter().zip(data.iter()).position(|(a, b)| a != b);
            return Err(format!(
                "a wrong byte at offset {}",
                offset + at.unwrap_or(0) as u64
            ));
        }
        offset = end;
    }
    if parts.status != StatusCode::OK {
        return Err(format!(
            "status {}: {}",
            parts.status,
            String::from_utf8_lossy(&text)
        ));
    }
    if offset != object.size {
        return Err(format!("{offset} bytes, the object has {}", object.size));
    }
    Ok(Answer::Delivered { bytes: offset })
}

/// One object, asked until it is delivered or its attempts are spent.
async fn one_object(
    shared: &Shared,
    endpoint: &Endpoint,
    conn: &mut Option<Connection>,
    index: u64,
    tally: &mut Tally,
    scratch: &mut Vec<u8>,
    rng: &mut fastrand::Rng,
) -> Result<(), String> {
    let set = &shared.spec.set;
    let object = set.object(index);
    let target = endpoint.target(&object.bucket, &object.key)?;
    let retry = shared.spec.retry;
    for attempt in 0..retry.attempts.max(1) {
        if !conn.as_ref().is_some_and(Connection::is_open) {
            *conn = Some(Connection::to(&target).await?);
        }
        let Some(c) = conn.as_mut() else {
            return Err("no connection".into());
        };
        let req = target.get(None)?;
        let start = Instant::now();
        tally.requests += 1;
        let answer = match tokio::time::timeout(
            REQUEST_TIMEOUT,
            read_object(c, req, &object, scratch),
        )
        .await
        {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                *conn = None;
                return Err(format!("GET {}: {e}", target.url()));
            }
            Err(_) => {
                *conn = None;
                return Err(format!(
                    "GET {}: no complete answer within {REQUEST_TIMEOUT:?}",
                    target.url()
                ));
            }
        };
        match answer {
            Answer::Delivered { bytes } => {
                tally.latencies.push(start.elapsed());
                tally.objects += 1;
                tally.bytes += bytes;
                return Ok(());
            }
            Answer::Throttled { retry_after } => {
                tally.throttled += 1;
                if attempt + 1 < retry.attempts {
                    tokio::time::sleep(retry.backoff(attempt, retry_after, rng)).await;
                }
            }
        }
    }
    tally.failed += 1;
    Ok(())
}

/// Runs one epoch as `spec` says: every object of the set read whole once.
///
/// Connections are opened before the clock starts; one that cannot be opened is the
/// epoch's error.
pub async fn run_epoch(spec: EpochSpec) -> EpochOutcome {
    let order = spec.order.indexes(spec.set.count);
    let connections = spec.connections.max(1);
    let shared = Arc::new(Shared {
        order,
        spec,
        next: AtomicU64::new(0),
        abort: AtomicBool::new(false),
        first_error: std::sync::Mutex::new(None),
    });
    let mut opened = Vec::with_capacity(connections);
    for i in 0..connections {
        let endpoints = &shared.spec.endpoints;
        let Some(endpoint) = endpoints.get(i % endpoints.len().max(1)) else {
            shared.fail("an epoch with no endpoint".into());
            break;
        };
        let connect = match endpoint.target(&shared.spec.set.bucket, "x") {
            Ok(t) => t.connect,
            Err(e) => {
                shared.fail(e);
                break;
            }
        };
        match Connection::open(&connect).await {
            Ok(c) => opened.push((endpoint.clone(), Some(c))),
            Err(e) => {
                shared.fail(e);
                break;
            }
        }
    }
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(opened.len());
    for (i, (endpoint, conn)) in opened.into_iter().enumerate() {
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = conn;
            let mut tally = Tally::default();
            let mut scratch = Vec::new();
            let mut rng = fastrand::Rng::with_seed(i as u64);
            let mut last = None;
            while !shared.abort.load(Ordering::Relaxed) {
                let n = shared.next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(&index) = shared.order.get(n) else {
                    break;
                };
                let done = one_object(
                    &shared,
                    &endpoint,
                    &mut conn,
                    index,
                    &mut tally,
                    &mut scratch,
                    &mut rng,
                )
                .await;
                if let Err(e) = done {
                    shared.fail(e);
                    break;
                }
                last = Some(Instant::now());
            }
            (tally, last)
        }));
    }
    let mut outcome = EpochOutcome::default();
    let mut last = start;
    for task in tasks {
        if let Ok((t, at)) = task.await {
            outcome.objects += t.objects;
            outcome.bytes += t.bytes;
            outcome.requests += t.requests;
            outcome.throttled += t.throttled;
            outcome.failed += t.failed;
            outcome.latencies.extend(t.latencies);
            if let Some(at) = at {
                last = last.max(at);
            }
        }
    }
    outcome.elapsed = last.saturating_duration_since(start);
    outcome.first_error = shared
        .first_error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shuffled_order_is_a_permutation_and_the_same_every_time() {
        let shuffled = Order::Shuffled { seed: 9 }.indexes(1000);
        assert_eq!(shuffled, Order::Shuffled { seed: 9 }.indexes(1000));
        assert_ne!(shuffled, Order::Sequential.indexes(1000));
        let mut sorted = shuffled.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, Order::Sequential.indexes(1000));
    }

    #[test]
    fn a_throttle_backs_off_within_the_cap_and_honours_retry_after() {
        let retry = ThrottleRetry::default();
        let mut rng = fastrand::Rng::with_seed(1);
        for attempt in 0..20 {
            let wait = retry.backoff(attempt, None, &mut rng);
            assert!(wait <= retry.cap, "{wait:?}");
            assert!(wait <= retry.base * (1 << attempt.min(16)), "{wait:?}");
        }
        let after = retry.backoff(0, Some(Duration::from_secs(1)), &mut rng);
        assert_eq!(after, Duration::from_secs(1));
        let capped = retry.backoff(0, Some(Duration::from_secs(60)), &mut rng);
        assert_eq!(capped, retry.cap);
    }
}
