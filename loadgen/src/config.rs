//! What a load run does: the target, the workload shape and the pacing.

use std::time::Duration;
use talon_core::cluster_auth::ClusterSecret;

use talon_core::ObjectId;
use talon_core::wire::MAX_READ_LEN;

use crate::error::{LoadError, Result};

/// Longest duration, warmup or timeout accepted: one week.
pub const MAX_SPAN: Duration = Duration::from_secs(7 * 24 * 3600);

/// Lowest `--rate` accepted, requests per second.
pub const MIN_RATE: f64 = 0.001;

/// Highest `--rate` accepted, requests per second.
pub const MAX_RATE: f64 = 1e9;

/// What the load generator talks to.
#[derive(Debug, Clone)]
pub enum Target {
    /// A Talon worker's data plane, over the binary wire protocol.
    Wire {
        /// `HOST:PORT` of the data plane.
        addr: String,
        /// The object read (it must exist at the worker's origin).
        object: ObjectId,
        /// The cluster secret: each connection authenticates (the Hello exchange)
        /// before the measured requests.
        secret: ClusterSecret,
    },
    /// Any HTTP/1.1 server answering `Range` requests for one URL (nginx,
    /// an origin, the gateway), for comparison. One request in flight per
    /// connection: HTTP pipelining is not used.
    Http {
        /// `http://host[:port]/path`.
        url: String,
    },
}

impl Target {
    /// `talon-wire` or `http/1.1`.
    pub fn protocol(&self) -> &'static str {
        match self {
            Self::Wire { .. } => "talon-wire",
            Self::Http { .. } => "http/1.1",
        }
    }

    /// A short human name: the address or URL.
    pub fn describe(&self) -> String {
        match self {
            Self::Wire { addr, object, .. } => format!("{addr} {}", object.key_path()),
            Self::Http { url } => url.clone(),
        }
    }
}

/// Everything one load run needs. Build it, then call
/// [`validate`](Self::validate) (which [`run`](crate::run) also does).
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// What to load.
    pub target: Target,
    /// A name for the target in the report (e.g. `talon-worker/tokio`,
    /// `nginx`); defaults to the address.
    pub label: Option<String>,
    /// Block size the object is cut into, in bytes (a power of two; for the
    /// worker it must be a multiple of its page size).
    pub block_size: u64,
    /// Reads fall in the first `blocks` blocks of the object.
    pub blocks: u64,
    /// Offsets are multiples of this many bytes (a power of two).
    pub align: u64,
    /// Bytes per request.
    pub range_size: u32,
    /// Connections, all opened before the clock starts.
    pub conns: usize,
    /// Requests in flight per connection (pipelined; wire protocol only).
    pub depth: usize,
    /// Length of the measured window.
    pub duration: Duration,
    /// Load applied before the measured window; its requests are not sampled.
    pub warmup: Duration,
    /// Constant offered rate in requests per second across all connections;
    /// `None` runs closed loop (each connection keeps `depth` in flight).
    pub rate: Option<f64>,
    /// Server processes whose CPU and RSS are sampled across the window.
    pub server_pids: Vec<u32>,
    /// Also sample the children of `server_pids` (nginx's workers).
    pub server_children: bool,
    /// Before the clock starts, read every byte of the chosen blocks once
    /// (makes a worker's pages present; not measured).
    pub prefetch: bool,
    /// Seed of the offset generator (connection `i` uses `seed + i`).
    pub seed: u64,
    /// Limit on opening one connection.
    pub connect_timeout: Duration,
    /// After the window, how long replies to requests already sent are
    /// awaited; a request still unanswered then is an error.
    pub drain_timeout: Duration,
    /// Print a progress line on stderr once a second.
    pub progress: bool,
}

impl LoadConfig {
    /// A closed-loop configuration with the documented defaults (4 MiB
    /// blocks, one block, 4 KiB alignment, 64 KiB ranges, one connection at
    /// depth 1, 10 s after a 3 s warmup).
    pub fn new(target: Target) -> Self {
        Self {
            target,
            label: None,
            block_size: 4 << 20,
            blocks: 1,
            align: 4096,
            range_size: 64 << 10,
            conns: 1,
            depth: 1,
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(3),
            rate: None,
            server_pids: Vec::new(),
            server_children: false,
            prefetch: false,
            seed: 1,
            connect_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(10),
            progress: false,
        }
    }

    /// The label for reports.
    pub fn label(&self) -> String {
        self.label.clone().unwrap_or_else(|| match &self.target {
            Target::Wire { addr, .. } => format!("talon-worker {addr}"),
            Target::Http { url } => url.clone(),
        })
    }

    /// Checks the flags against each other. Errors with
    /// [`LoadError::Config`] naming the flag.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(LoadError::Config(m));
        if self.conns == 0 {
            return bad("--conns must be at least 1".into());
        }
        if self.depth == 0 {
            return bad("--depth must be at least 1".into());
        }
        if matches!(self.target, Target::Http { .. }) && self.depth != 1 {
            return bad(format!(
                "--depth {} with --http: HTTP/1.1 mode keeps one request in flight per \
                 connection (no pipelining); use --depth 1 and more --conns",
                self.depth
            ));
        }
        if self.range_size == 0 || self.range_size > MAX_READ_LEN {
            return bad(format!(
                "--range-size {} must be between 1 and {MAX_READ_LEN} bytes",
                self.range_size
            ));
        }
        if !self.block_size.is_power_of_two() {
            return bad(format!(
                "--block-size {} must be a power of two",
                self.block_size
            ));
        }
        if u64::from(self.range_size) > self.block_size {
            return bad(format!(
                "--range-size {} is larger than --block-size {}",
                self.range_size, self.block_size
            ));
        }
        if self.blocks == 0 {
            return bad("--blocks must be at least 1".into());
        }
        if !self.align.is_power_of_two() {
            return bad(format!("--align {} must be a power of two", self.align));
        }
        if self.duration.is_zero() {
            return bad("--duration must be more than 0 seconds".into());
        }
        for (flag, d) in [
            ("--duration", self.duration),
            ("--warmup", self.warmup),
            ("--drain-timeout", self.drain_timeout),
            ("--connect-timeout", self.connect_timeout),
        ] {
            if d > MAX_SPAN {
                return bad(format!(
                    "{flag} {} s is longer than the {} s a run may last",
                    d.as_secs(),
                    MAX_SPAN.as_secs()
                ));
            }
        }
        if let Some(rate) = self.rate
            && !(rate.is_finite() && (MIN_RATE..=MAX_RATE).contains(&rate))
        {
            return bad(format!(
                "--rate {rate} must be between {MIN_RATE} and {MAX_RATE} requests per second"
            ));
        }
        if let Target::Http { url } = &self.target {
            crate::http::HttpTarget::parse(url)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire() -> LoadConfig {
        LoadConfig::new(Target::Wire {
            addr: "127.0.0.1:1".into(),
            object: ObjectId::s3("b", "k").unwrap_or_else(|e| panic!("{e}")),
            secret: ClusterSecret::new(b"a test cluster secret").unwrap_or_else(|e| panic!("{e}")),
        })
    }

    #[test]
    fn defaults_are_valid() {
        assert!(wire().validate().is_ok());
    }

    #[test]
    fn rejections_name_the_flag() {
        type Mutation = Box<dyn Fn(&mut LoadConfig)>;
        let cases: Vec<(Mutation, &str)> = vec![
            (Box::new(|c| c.conns = 0), "--conns"),
            (Box::new(|c| c.depth = 0), "--depth"),
            (Box::new(|c| c.range_size = 0), "--range-size"),
            (Box::new(|c| c.block_size = 3 << 20), "--block-size"),
            (Box::new(|c| c.range_size = 8 << 20), "--range-size"),
            (Box::new(|c| c.blocks = 0), "--blocks"),
            (Box::new(|c| c.align = 3000), "--align"),
            (Box::new(|c| c.duration = Duration::ZERO), "--duration"),
            (Box::new(|c| c.rate = Some(0.0)), "--rate"),
            (Box::new(|c| c.rate = Some(f64::NAN)), "--rate"),
            (Box::new(|c| c.rate = Some(1e-300)), "--rate"),
            (Box::new(|c| c.warmup = Duration::MAX), "--warmup"),
            (
                Box::new(|c| c.duration = Duration::from_secs(u64::MAX)),
                "--duration",
            ),
        ];
        for (mutate, flag) in cases {
            let mut c = wire();
            mutate(&mut c);
            let err = c
                .validate()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(flag), "{flag}: {err}");
        }
    }

    #[test]
    fn http_refuses_depth() {
        let mut c = LoadConfig::new(Target::Http {
            url: "http://127.0.0.1:8080/x".into(),
        });
        assert!(c.validate().is_ok());
        c.depth = 16;
        let err = c
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("one request in flight"), "{err}");
    }
}
