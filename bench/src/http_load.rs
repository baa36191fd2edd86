//! The gateway benches' HTTP client: written here, on hyper's
//! connection-level HTTP/1.1 client (`hyper::client::conn::http1`), not an
//! SDK.
//!
//! A closed loop of `concurrency` workers, each with its own keep-alive
//! connection opened before the clock starts, issues GETs of aligned ranges
//! of one object (S3 `Range` or Azure `x-ms-range`), signed the way the
//! SDKs sign them (SigV4 with the empty-payload hash, or Azure Shared Key),
//! and checks every response in full against the generated object
//! ([`crate::verify`]). One request is in flight per connection; there is
//! no HTTP pipelining (real clients do not use it).
//!
//! The first failed request (a transport error, or a response that fails
//! its check) stops the run: the outcome carries it verbatim, and the
//! benches then fail. Latency is from just before the request is written to
//! the last body byte.
//!
//! Also here: [`paced_read`], a deliberately slow consumer of one long
//! body, and [`control_request`], the one-shot requests the harness makes to
//! control endpoints (readiness, membership, faults).

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use talon_core::Backend;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use talon_origin_stub::generated::GeneratedObject;
use talon_protocols::azure::shared_key::{self, AccountKey, SharedKeyParts};
use talon_protocols::s3::sigv4::{S3Credentials, SignedBody, sign_request};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::harness_error::{HarnessError, HarnessResult};
use crate::tls::ClientTls;
use crate::verify::{ExpectedRanges, Received, StreamCheck, StreamVerdict, check_response};
use crate::watch::{Reading, Watched};
use talon_loadgen::procfs::ProcSample;

/// The Azure REST version the client announces (what current SDKs send).
pub const AZURE_VERSION: &str = "2025-01-05";

/// Longest a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest one request may take, headers to last byte, in a load run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A protocol's name in tables: `S3` or `Azure` (the bench's own presentation of
/// [`Backend`], whose [`Backend::name`] is the lower-case form flags and JSON use).
pub trait ProtocolLabel {
    /// `S3` or `Azure`.
    fn label(self) -> &'static str;
}

impl ProtocolLabel for Backend {
    fn label(self) -> &'static str {
        match self {
            Backend::S3 => "S3",
            Backend::Azure => "Azure",
        }
    }
}

/// How requests are authenticated.
#[derive(Clone)]
pub enum Auth {
    /// Unsigned.
    Anonymous,
    /// AWS SigV4 in the `Authorization` header, payload hash of the empty
    /// body (what the SDKs send for a GET over plain HTTP).
    SigV4 {
        /// The identity.
        credentials: S3Credentials,
        /// The signing region.
        region: String,
    },
    /// Azure Shared Key.
    SharedKey {
        /// The storage account.
        account: String,
        /// Its key.
        key: AccountKey,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Auth {
    /// `anonymous`, `sigv4` or `shared-key`.
    pub fn name(&self) -> &'static str {
        match self {
            Auth::Anonymous => "anonymous",
            Auth::SigV4 { .. } => "sigv4",
            Auth::SharedKey { .. } => "shared-key",
        }
    }
}

/// One object behind one HTTP endpoint, and how to ask for it.
#[derive(Debug, Clone)]
pub struct ObjectTarget {
    /// The protocol.
    pub protocol: Backend,
    /// `host:port` connected to.
    pub connect: String,
    /// The `Host` header.
    pub authority: String,
    /// The path as sent (percent-encoded).
    pub path: String,
    /// The path of the object's bucket or container, under which
    /// [`get_key`](Self::get_key) names other objects.
    pub container_path: String,
    /// How requests are signed.
    pub auth: Auth,
    /// Whether the endpoint speaks HTTPS (its URL's scheme).
    pub https: bool,
    /// The TLS client for an HTTPS endpoint ([`over_tls`](Self::over_tls)).
    pub tls: Option<ClientTls>,
}

/// A base URL's parts: `(https, authority, path prefix)`.
fn split_base(url: &str) -> HarnessResult<(bool, String, String)> {
    let uri: Uri = url
        .parse()
        .map_err(|e| HarnessError::Config(format!("'{url}' is not a URL: {e}")))?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => {
            return Err(HarnessError::Config(format!(
                "'{url}': only http:// and https:// endpoints are supported"
            )));
        }
    };
    let authority = uri
        .authority()
        .ok_or_else(|| HarnessError::Config(format!("'{url}' has no host")))?
        .as_str()
        .to_owned();
    let path = uri.path().trim_end_matches('/').to_owned();
    Ok((https, authority, path))
}

impl ObjectTarget {
    /// An S3 object, path-style under the endpoint `base` (`http://host:port`, or
    /// `https://` with [`over_tls`](Self::over_tls)).
    ///
    /// # Errors
    /// [`HarnessError::Config`] for a URL that is not `http(s)://host:port`.
    pub fn s3(base: &str, bucket: &str, key: &str, auth: Auth) -> HarnessResult<ObjectTarget> {
        let (https, authority, prefix) = split_base(base)?;
        let container_path = format!(
            "{prefix}/{}",
            talon_protocols::uri_encoding::encode_path(bucket)
        );
        Ok(ObjectTarget {
            protocol: Backend::S3,
            connect: authority.clone(),
            authority,
            path: format!(
                "{container_path}/{}",
                talon_protocols::uri_encoding::encode_path(key)
            ),
            container_path,
            auth,
            https,
            tls: None,
        })
    }

    /// An Azure blob under the account URL `account_url`
    /// (`http://host:port/ACCOUNT`, emulator-style; or `https://` with
    /// [`over_tls`](Self::over_tls)).
    ///
    /// # Errors
    /// [`HarnessError::Config`] for a URL that is not `http(s)://host:port/…`.
    pub fn azure(
        account_url: &str,
        container: &str,
        blob: &str,
        auth: Auth,
    ) -> HarnessResult<ObjectTarget> {
        let (https, authority, prefix) = split_base(account_url)?;
        let container_path = format!(
            "{prefix}/{}",
            talon_protocols::uri_encoding::encode_path(container)
        );
        Ok(ObjectTarget {
            protocol: Backend::Azure,
            connect: authority.clone(),
            authority,
            path: format!(
                "{container_path}/{}",
                talon_protocols::uri_encoding::encode_path(blob)
            ),
            container_path,
            auth,
            https,
            tls: None,
        })
    }

    /// The same target, its connections made with `tls` (an `https://` endpoint
    /// needs it).
    pub fn over_tls(self, tls: ClientTls) -> ObjectTarget {
        ObjectTarget {
            tls: Some(tls),
            ..self
        }
    }

    /// The object's URL.
    pub fn url(&self) -> String {
        self.url_of(&self.path)
    }

    fn url_of(&self, path: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.authority)
    }

    /// A signed GET of `range` (the whole object for `None`).
    ///
    /// # Errors
    /// A message when signing fails or a header cannot be built.
    pub fn get(&self, range: Option<Range<u64>>) -> Result<Request<Empty<Bytes>>, String> {
        self.get_path(&self.path, range)
    }

    /// A signed GET of `range` of the object `key` in the same bucket or container
    /// (the target's own object for `None`).
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub fn get_key(
        &self,
        key: Option<&str>,
        range: Option<Range<u64>>,
    ) -> Result<Request<Empty<Bytes>>, String> {
        match key {
            None => self.get(range),
            Some(key) => {
                let path = format!(
                    "{}/{}",
                    self.container_path,
                    talon_protocols::uri_encoding::encode_path(key)
                );
                self.get_path(&path, range)
            }
        }
    }

    fn get_path(
        &self,
        path: &str,
        range: Option<Range<u64>>,
    ) -> Result<Request<Empty<Bytes>>, String> {
        let range_value = range.map(|r| format!("bytes={}-{}", r.start, r.end.saturating_sub(1)));
        let mut headers: Vec<(String, String)> = Vec::with_capacity(6);
        let now = SystemTime::now();
        match self.protocol {
            Backend::S3 => {
                if let Some(v) = &range_value {
                    headers.push(("range".into(), v.clone()));
                }
            }
            Backend::Azure => {
                headers.push(("x-ms-version".into(), AZURE_VERSION.into()));
                headers.push((
                    "x-ms-date".into(),
                    talon_protocols::dates::format_http_date(now),
                ));
                if let Some(v) = &range_value {
                    headers.push(("x-ms-range".into(), v.clone()));
                }
            }
        }
        match &self.auth {
            Auth::Anonymous => {}
            Auth::SigV4 {
                credentials,
                region,
            } => {
                let mut to_sign: Vec<(&str, &str)> = vec![("host", self.authority.as_str())];
                to_sign.extend(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                let signed = sign_request(
                    "GET",
                    &self.url_of(path),
                    &to_sign,
                    SignedBody::Bytes(&[]),
                    credentials,
                    region,
                    now,
                )
                .map_err(|e| format!("signing the request: {}", e.message()))?;
                headers.extend(signed);
            }
            Auth::SharedKey { account, key } => {
                let map = header_map(&headers)?;
                let parts = SharedKeyParts {
                    method: "GET",
                    raw_path: path,
                    raw_query: "",
                    headers: &map,
                };
                headers.push((
                    "authorization".into(),
                    shared_key::authorization(&parts, account, key),
                ));
            }
        }
        let mut b = Request::builder()
            .method(Method::GET)
            .uri(path)
            .header(http::header::HOST, self.authority.as_str());
        for (k, v) in &headers {
            b = b.header(k.as_str(), v.as_str());
        }
        b.body(Empty::new())
            .map_err(|e| format!("building the request: {e}"))
    }
}

fn header_map(pairs: &[(String, String)]) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (k, v) in pairs {
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("{k}: {e}"))?;
        let value = HeaderValue::from_str(v).map_err(|e| format!("{k}: {e}"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// One keep-alive HTTP/1.1 connection.
pub struct Connection {
    sender: SendRequest<Empty<Bytes>>,
    driver: JoinHandle<()>,
}

impl Connection {
    /// Connects to `addr` (`host:port`), plain HTTP.
    ///
    /// # Errors
    /// A message naming the address when the connection or the handshake
    /// fails or takes longer than 5 s.
    pub async fn open(addr: &str) -> Result<Connection, String> {
        Connection::http(addr, tcp(addr).await?).await
    }

    /// Connects to `target`'s endpoint, over TLS when it is `https://`.
    ///
    /// # Errors
    /// As [`open`](Self::open); also a failed TLS handshake, or an `https://`
    /// target without a TLS client.
    pub async fn to(target: &ObjectTarget) -> Result<Connection, String> {
        let addr = target.connect.as_str();
        if !target.https {
            return Connection::open(addr).await;
        }
        let Some(tls) = &target.tls else {
            return Err(format!(
                "{}: an https:// endpoint needs a TLS client (ObjectTarget::over_tls)",
                target.url()
            ));
        };
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, tls.handshake(addr, tcp(addr).await?))
            .await
            .map_err(|_| format!("the TLS handshake with {addr} timed out"))??;
        Connection::http(addr, stream).await
    }

    /// The HTTP/1.1 handshake over an open stream, its driver spawned.
    async fn http<S>(addr: &str, stream: S) -> Result<Connection, String>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP handshake with {addr}: {e}"))?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Connection { sender, driver })
    }

    /// Whether the connection can still carry a request.
    pub fn is_open(&self) -> bool {
        !self.sender.is_closed()
    }

    /// Sends a request and returns the response head; the body follows.
    ///
    /// # Errors
    /// A message when the connection fails before the response starts.
    pub async fn send(&mut self, req: Request<Empty<Bytes>>) -> Result<Response<Incoming>, String> {
        self.sender
            .ready()
            .await
            .map_err(|e| format!("connection not ready: {e}"))?;
        self.sender
            .send_request(req)
            .await
            .map_err(|e| format!("sending the request: {e}"))
    }
}

/// A TCP connection to `addr` with Nagle off, in at most [`CONNECT_TIMEOUT`].
async fn tcp(addr: &str) -> Result<TcpStream, String> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| format!("connecting to {addr} timed out"))?
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// A whole response, read and hashed.
#[derive(Debug)]
pub struct Fetched {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// Body, in the chunks it arrived in.
    pub body: Vec<Bytes>,
    /// SHA-256 of the body.
    pub sha256: [u8; 32],
    /// Body bytes.
    pub bytes: u64,
}

/// Sends `req` on `conn` and reads the whole body, hashing it.
///
/// # Errors
/// A message when the connection fails or the body breaks off.
pub async fn fetch(conn: &mut Connection, req: Request<Empty<Bytes>>) -> Result<Fetched, String> {
    let resp = conn.send(req).await?;
    let (parts, mut body) = resp.into_parts();
    let mut hasher = Sha256::new();
    let mut chunks = Vec::new();
    let mut bytes = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            format!(
                "the body broke off after {bytes} bytes (status {}): {e}",
                parts.status
            )
        })?;
        if let Ok(data) = frame.into_data() {
            hasher.update(&data);
            bytes += data.len() as u64;
            chunks.push(data);
        }
    }
    Ok(Fetched {
        status: parts.status,
        headers: parts.headers,
        body: chunks,
        sha256: hasher.finalize().into(),
        bytes,
    })
}

/// Which ranges a run reads.
#[derive(Debug, Clone, Copy)]
pub enum Pick {
    /// Uniformly random aligned ranges; worker `i` seeds its generator with
    /// `seed + i`.
    Random {
        /// The seed.
        seed: u64,
    },
    /// Every range once, in order (with the run's length in requests set
    /// to the number of ranges): warming a cache.
    EachOnce,
}

/// How long a run lasts.
#[derive(Debug, Clone, Copy)]
pub enum Length {
    /// Run `warmup` unmeasured, then measure for `window`. A request counts
    /// when it completes inside the window.
    Window {
        /// Run but not measured.
        warmup: Duration,
        /// Measured.
        window: Duration,
    },
    /// Exactly this many requests, all measured, from the moment every
    /// connection is open to the last completion.
    Requests(u64),
}

/// What a run does.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// The object and endpoint.
    pub target: Arc<ObjectTarget>,
    /// The ranges and what they must hold.
    pub expected: Arc<ExpectedRanges>,
    /// Workers, each with one connection and one request in flight.
    pub concurrency: usize,
    /// Which ranges.
    pub pick: Pick,
    /// How long.
    pub length: Length,
    /// Processes whose CPU is read at the edges of the measured window.
    pub watch: Vec<(String, Watched)>,
}

/// CPU of one watched set across the measured window.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CpuFigures {
    /// The set's name.
    pub name: String,
    /// User-mode CPU, seconds.
    pub user_s: f64,
    /// Kernel-mode CPU, seconds.
    pub kernel_s: f64,
    /// Resident memory at the end of the window, bytes.
    pub rss_bytes: u64,
}

impl CpuFigures {
    /// User plus kernel seconds.
    pub fn total_s(&self) -> f64 {
        self.user_s + self.kernel_s
    }
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct LoadOutcome {
    /// Latency of every measured request.
    pub latencies: Vec<Duration>,
    /// Measured requests.
    pub requests: u64,
    /// Their body bytes.
    pub bytes: u64,
    /// The measured time.
    pub elapsed: Duration,
    /// Requests that failed (the run stops at the first).
    pub errors: u64,
    /// The first failure, verbatim.
    pub first_error: Option<String>,
    /// CPU of the watched sets in the window.
    pub cpu: Vec<CpuFigures>,
    /// This process's CPU in the window.
    pub client_cpu: Option<CpuFigures>,
}

impl LoadOutcome {
    /// Measured requests per second.
    pub fn rps(&self) -> f64 {
        per_second(self.requests as f64, self.elapsed)
    }

    /// Measured MiB per second.
    pub fn mib_per_s(&self) -> f64 {
        per_second(crate::summary::mib(self.bytes), self.elapsed)
    }
}

fn per_second(x: f64, d: Duration) -> f64 {
    if d.is_zero() {
        0.0
    } else {
        x / d.as_secs_f64()
    }
}

struct Shared {
    spec: LoadSpec,
    abort: AtomicBool,
    tickets: AtomicU64,
    first_error: std::sync::Mutex<Option<String>>,
    errors: AtomicU64,
}

impl Shared {
    fn fail(&self, message: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.abort.store(true, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(message);
        }
    }
}

/// A worker's measured requests.
#[derive(Default)]
struct WorkerTally {
    latencies: Vec<Duration>,
    bytes: u64,
    last_completion: Option<Instant>,
}

/// One request: sign, send, read, check. Returns the latency and bytes.
async fn one_request(
    shared: &Shared,
    conn: &mut Option<Connection>,
    k: usize,
) -> Result<(Duration, u64), String> {
    let spec = &shared.spec;
    if !conn.as_ref().is_some_and(Connection::is_open) {
        *conn = Some(Connection::to(&spec.target).await?);
    }
    let Some(c) = conn.as_mut() else {
        return Err("no connection".into());
    };
    let expect = spec.expected.expect_range(k);
    let range = (!spec.expected.is_whole()).then(|| expect.range.clone());
    let req = spec.target.get_key(expect.key.as_deref(), range)?;
    let url = || match &expect.key {
        Some(key) => format!(
            "{}/{}",
            spec.target.url_of(&spec.target.container_path),
            talon_protocols::uri_encoding::encode_path(key)
        ),
        None => spec.target.url(),
    };
    let start = Instant::now();
    let fetched = match tokio::time::timeout(REQUEST_TIMEOUT, fetch(c, req)).await {
        Ok(Ok(f)) => f,
        Ok(Err(e)) => {
            *conn = None;
            return Err(format!("GET {} range {:?}: {e}", url(), expect.range));
        }
        Err(_) => {
            *conn = None;
            return Err(format!(
                "GET {} range {:?}: no complete answer within {REQUEST_TIMEOUT:?}",
                url(),
                expect.range
            ));
        }
    };
    let latency = start.elapsed();
    check_response(
        &expect,
        &Received {
            status: fetched.status,
            headers: &fetched.headers,
            body: &fetched.body,
            sha256: fetched.sha256,
        },
    )
    .map_err(|e| {
        format!(
            "GET {} bytes {}-{}: {e}",
            url(),
            expect.range.start,
            expect.range.end - 1
        )
    })?;
    Ok((latency, fetched.bytes))
}

fn sample_all(watch: &[(String, Watched)]) -> Vec<Reading> {
    watch.iter().map(|(_, w)| w.read()).collect()
}

fn cpu_between(
    watch: &[(String, Watched)],
    before: Vec<Reading>,
    after: Vec<Reading>,
) -> Vec<CpuFigures> {
    watch
        .iter()
        .zip(before.iter().zip(&after))
        .map(|((name, _), (b, a))| {
            let (user, kernel) = a.cpu_since(b);
            CpuFigures {
                name: name.clone(),
                user_s: user.as_secs_f64(),
                kernel_s: kernel.as_secs_f64(),
                rss_bytes: a.rss_bytes(),
            }
        })
        .collect()
}

fn client_cpu(before: Option<ProcSample>, after: Option<ProcSample>) -> Option<CpuFigures> {
    let (b, a) = (before?, after?);
    let (user, kernel) = a.cpu_since(&b);
    Some(CpuFigures {
        name: "client".into(),
        user_s: user.as_secs_f64(),
        kernel_s: kernel.as_secs_f64(),
        rss_bytes: a.rss_bytes,
    })
}

/// Runs a closed loop as `spec` says and returns what it measured.
///
/// Connections are opened before the clock starts; a connection that
/// cannot be opened is the run's first (and only) error.
pub async fn run_load(spec: LoadSpec) -> LoadOutcome {
    let concurrency = spec.concurrency.max(1);
    let ranges = spec.expected.len().max(1);
    let shared = Arc::new(Shared {
        spec,
        abort: AtomicBool::new(false),
        tickets: AtomicU64::new(0),
        first_error: std::sync::Mutex::new(None),
        errors: AtomicU64::new(0),
    });
    let mut conns = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        match Connection::to(&shared.spec.target).await {
            Ok(c) => conns.push(Some(c)),
            Err(e) => {
                shared.fail(e);
                break;
            }
        }
    }
    let start = Instant::now();
    let (window_start, window_end, count) = match shared.spec.length {
        Length::Window { warmup, window } => {
            (start + warmup, Some(start + warmup + window), u64::MAX)
        }
        Length::Requests(n) => (start, None, n),
    };
    let mut workers = Vec::with_capacity(conns.len());
    for (i, conn) in conns.into_iter().enumerate() {
        let shared = shared.clone();
        workers.push(tokio::spawn(async move {
            let mut conn = conn;
            let mut tally = WorkerTally::default();
            let mut rng = match shared.spec.pick {
                Pick::Random { seed } => fastrand::Rng::with_seed(seed.wrapping_add(i as u64)),
                Pick::EachOnce => fastrand::Rng::with_seed(0),
            };
            loop {
                if shared.abort.load(Ordering::Relaxed) {
                    break;
                }
                if window_end.is_some_and(|end| Instant::now() >= end) {
                    break;
                }
                let ticket = shared.tickets.fetch_add(1, Ordering::Relaxed);
                if ticket >= count {
                    break;
                }
                let k = match shared.spec.pick {
                    Pick::Random { .. } => rng.usize(..ranges),
                    Pick::EachOnce => (ticket % ranges as u64) as usize,
                };
                match one_request(&shared, &mut conn, k).await {
                    Ok((latency, bytes)) => {
                        let done = Instant::now();
                        let measured =
                            done >= window_start && window_end.is_none_or(|end| done < end);
                        if measured {
                            tally.latencies.push(latency);
                            tally.bytes += bytes;
                            tally.last_completion = Some(done);
                        }
                    }
                    Err(e) => {
                        shared.fail(e);
                        break;
                    }
                }
            }
            tally
        }));
    }
    // CPU is read at the window's edges: on the clock for a timed window,
    // around the whole run for a counted one.
    let watch = shared.spec.watch.clone();
    let mut edges = None;
    if let Some(end) = window_end {
        tokio::time::sleep_until(window_start).await;
        let before = (sample_all(&watch), talon_loadgen::procfs::sample_self());
        tokio::time::sleep_until(end).await;
        edges = Some((
            before,
            (sample_all(&watch), talon_loadgen::procfs::sample_self()),
        ));
    }
    let before_run = (sample_all(&watch), talon_loadgen::procfs::sample_self());
    let mut latencies = Vec::new();
    let mut bytes = 0;
    let mut last = start;
    for w in workers {
        if let Ok(t) = w.await {
            latencies.extend(t.latencies);
            bytes += t.bytes;
            if let Some(l) = t.last_completion {
                last = last.max(l);
            }
        }
    }
    let ((before, client_before), (after, client_after)) = match edges {
        Some(e) => e,
        None => (
            before_run,
            (sample_all(&watch), talon_loadgen::procfs::sample_self()),
        ),
    };
    let elapsed = match shared.spec.length {
        Length::Window { window, .. } => window,
        Length::Requests(_) => last.saturating_duration_since(start),
    };
    let first_error = shared
        .first_error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    LoadOutcome {
        requests: latencies.len() as u64,
        latencies,
        bytes,
        elapsed,
        errors: shared.errors.load(Ordering::Relaxed),
        first_error,
        cpu: cpu_between(&watch, before, after),
        client_cpu: client_cpu(client_before, client_after),
    }
}

/// What a slow consumer received.
#[derive(Debug, Clone)]
pub struct SlowRead {
    /// Bytes received and checked.
    pub verdict: StreamVerdict,
    /// Whether the whole body arrived before the time limit.
    pub complete: bool,
    /// How long it read.
    pub elapsed: Duration,
}

/// GETs the whole of `object` from `target` and reads the body at no more
/// than `rate` bytes per second for at most `limit`, checking every byte.
/// `progress` is called after each chunk with the bytes received so far.
///
/// The status must be 200 and `Content-Length` the object's size; a body
/// read to its end must be exactly that long. When `limit` passes first,
/// the connection is dropped and what arrived is checked as a prefix.
///
/// # Errors
/// A message, quoting the response where there is one, for a failed
/// connection, a wrong status or length, or a wrong byte.
pub async fn paced_read(
    target: &ObjectTarget,
    object: &GeneratedObject,
    rate: u64,
    limit: Duration,
    mut progress: impl FnMut(u64),
) -> Result<SlowRead, String> {
    let mut conn = Connection::to(target).await?;
    let req = target.get(None)?;
    let resp = conn.send(req).await?;
    let (parts, mut body) = resp.into_parts();
    let length = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if parts.status != StatusCode::OK || length != Some(object.size) {
        let mut quoted = Vec::new();
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(d) = frame.into_data() {
                quoted.extend_from_slice(&d);
            }
            if quoted.len() > 2048 {
                break;
            }
        }
        return Err(format!(
            "GET {}: status {} with Content-Length {length:?} where 200 with {} was \
             expected; headers {:?}; body starts: {}",
            target.url(),
            parts.status,
            object.size,
            parts.headers,
            String::from_utf8_lossy(&quoted[..quoted.len().min(2048)])
        ));
    }
    let start = Instant::now();
    let deadline = start + limit;
    let mut check = StreamCheck::new(object.clone(), 0);
    let rate = rate.max(1) as f64;
    let mut complete = false;
    loop {
        // Pace: the next read waits until the bytes so far are due.
        let due = start + Duration::from_secs_f64(check.received() as f64 / rate);
        if due >= deadline {
            break;
        }
        tokio::time::sleep_until(due).await;
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => break,
            Ok(None) => {
                complete = true;
                break;
            }
            Ok(Some(Err(e))) => {
                return Err(format!(
                    "GET {}: the body broke off after {} bytes: {e}",
                    target.url(),
                    check.received()
                ));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            check.update(&data);
            progress(check.received());
        }
    }
    let elapsed = start.elapsed();
    drop(body);
    drop(conn);
    if complete && check.received() != object.size {
        return Err(format!(
            "GET {}: the body ended after {} of {} bytes",
            target.url(),
            check.received(),
            object.size
        ));
    }
    let verdict = check
        .finish()
        .map_err(|e| format!("GET {}: {e}", target.url()))?;
    Ok(SlowRead {
        verdict,
        complete,
        elapsed,
    })
}

/// A one-shot request to a control endpoint (`/readyz`, `/v1/members`,
/// `/admin/faults`) with an optional JSON body; returns the status and the
/// body as text.
///
/// # Errors
/// [`HarnessError::Control`] when the URL is bad, the server cannot be
/// reached, or it does not answer within 5 s.
pub async fn control_request(
    method: Method,
    url: &str,
    json_body: Option<String>,
) -> HarnessResult<(StatusCode, String)> {
    let fail = |why: String| HarnessError::Control(format!("{method} {url}: {why}"));
    let (https, authority, _) = split_base(url)?;
    if https {
        return Err(fail("control endpoints are plain HTTP".into()));
    }
    let uri: Uri = url.parse().map_err(|e| fail(format!("{e}")))?;
    let path = uri
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
    let exchange = async {
        let stream = TcpStream::connect(&authority)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let (mut sender, conn) = http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream))
            .await
            .map_err(|e| fail(e.to_string()))?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut b = Request::builder()
            .method(method.clone())
            .uri(path.as_str())
            .header(http::header::HOST, authority.as_str());
        if json_body.is_some() {
            b = b.header(http::header::CONTENT_TYPE, "application/json");
        }
        if uri.path() == "/admin/faults" && method != Method::GET {
            // The stubs this process starts take the cluster secret as their admin token.
            b = b.header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", crate::deployment::cluster_secret()),
            );
        }
        if uri.path().starts_with("/v1/") {
            // The coordinator's API: signed with the deployment's cluster secret.
            let secret = talon_core::cluster_auth::ClusterSecret::new(
                crate::deployment::cluster_secret().as_bytes(),
            )
            .map_err(|e| fail(e.to_string()))?;
            let role = if method == Method::GET {
                talon_core::cluster_auth::Role::Reader
            } else {
                talon_core::cluster_auth::Role::Admin
            };
            let value = talon_core::cluster_auth::api_auth_header(
                &secret,
                role,
                method.as_str(),
                uri.path(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
                json_body.as_deref().unwrap_or("").as_bytes(),
            );
            b = b.header("x-talon-auth", value);
        }
        let req = b
            .body(Full::new(Bytes::from(
                json_body.clone().unwrap_or_default(),
            )))
            .map_err(|e| fail(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| fail(e.to_string()))?
            .to_bytes();
        driver.abort();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| fail("no answer within 5 s".into()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> S3Credentials {
        S3Credentials {
            access_key: "AK".into(),
            secret_key: "SK".into(),
            session_token: None,
        }
    }

    #[test]
    fn s3_requests_carry_the_range_and_a_sigv4_signature() {
        let t = ObjectTarget::s3(
            "http://127.0.0.1:9000",
            "bench",
            "dir/obj.bin",
            Auth::SigV4 {
                credentials: creds(),
                region: "us-east-1".into(),
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.url(), "http://127.0.0.1:9000/bench/dir/obj.bin");
        let req = t.get(Some(1024..2048)).unwrap_or_else(|e| panic!("{e}"));
        let h = req.headers();
        assert_eq!(h["range"], "bytes=1024-2047");
        assert_eq!(h["host"], "127.0.0.1:9000");
        assert_eq!(
            h["x-amz-content-sha256"],
            talon_protocols::s3::sigv4::EMPTY_SHA256
        );
        let auth = h["authorization"].to_str().unwrap_or_default();
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AK/"),
            "{auth}"
        );
        assert!(auth.contains("range"), "the range is signed: {auth}");
    }

    /// An Azure target signing with the emulator's account key, and the key.
    fn azure_target() -> (ObjectTarget, AccountKey) {
        let key = AccountKey::from_base64(talon_origin_stub::EMULATOR_AZURE_KEY)
            .unwrap_or_else(|e| panic!("{}", e.message()));
        let t = ObjectTarget::azure(
            "http://127.0.0.1:10000/devstoreaccount1",
            "bench",
            "obj.bin",
            Auth::SharedKey {
                account: "devstoreaccount1".into(),
                key: key.clone(),
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        (t, key)
    }

    /// Whether the server-side Shared Key check accepts `req`'s signature for `raw_path`.
    fn shared_key_verifies(req: &Request<Empty<Bytes>>, raw_path: &str, key: &AccountKey) -> bool {
        let (account, signature) = shared_key::parse_authorization(req.headers())
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no Shared Key header"));
        let parts = SharedKeyParts {
            method: "GET",
            raw_path,
            raw_query: "",
            headers: req.headers(),
        };
        shared_key::verify(
            &parts,
            "devstoreaccount1",
            key,
            &account,
            &signature,
            std::time::SystemTime::now(),
        )
        .is_ok()
    }

    #[test]
    fn azure_requests_carry_x_ms_range_and_a_shared_key_that_verifies() {
        let (t, key) = azure_target();
        assert_eq!(t.path, "/devstoreaccount1/bench/obj.bin");
        let req = t.get(Some(0..10)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(req.headers()["x-ms-range"], "bytes=0-9");
        assert!(
            shared_key_verifies(&req, &t.path, &key),
            "the server-side check accepts the client's signature"
        );
    }

    #[test]
    fn another_key_is_asked_for_in_the_same_container_and_signed_for_its_own_path() {
        let (t, key) = azure_target();
        let req = t
            .get_key(Some("small/0000007"), None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(req.uri().path(), "/devstoreaccount1/bench/small/0000007");
        assert!(!req.headers().contains_key("x-ms-range"));
        assert!(shared_key_verifies(
            &req,
            "/devstoreaccount1/bench/small/0000007",
            &key
        ));
        assert!(
            !shared_key_verifies(&req, &t.path, &key),
            "the signature is the other object's, not the target's"
        );
        let own = t
            .get_key(None, Some(0..10))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(own.uri().path(), t.path);
    }

    #[test]
    fn bad_urls_are_refused_and_https_needs_a_tls_client() {
        assert!(ObjectTarget::s3("ftp://x", "b", "k", Auth::Anonymous).is_err());
        assert!(ObjectTarget::s3("not a url", "b", "k", Auth::Anonymous).is_err());
        let t = ObjectTarget::s3("https://127.0.0.1:1", "b", "k", Auth::Anonymous)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.url(), "https://127.0.0.1:1/b/k");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let refused = rt.block_on(Connection::to(&t)).err().unwrap_or_default();
        assert!(refused.contains("needs a TLS client"), "{refused}");
    }
}
