//! How a cache client behaves ([`CacheClientConfig`]) and how one read goes
//! ([`ReadOptions`]).

use super::*;

/// How a cache client behaves.
#[derive(Debug, Clone)]
pub struct CacheClientConfig {
    /// The coordinator's base URL.
    pub coordinator_url: String,
    /// Block geometry. Where the coordinator publishes the cluster's
    /// ([`ClusterGeometry`](talon_coordinator_client::api::ClusterGeometry)), the block
    /// size must equal it ([`connect`](CacheClient::connect) refuses another), or is
    /// taken from it with [`Self::take_cluster_block_size`].
    pub geometry: BlockGeometry,
    /// Use the block size the coordinator publishes instead of `geometry`'s (which
    /// stays where it publishes none). `false`: `geometry` was given, and a cluster
    /// of another block size is refused.
    pub take_cluster_block_size: bool,
    /// Connections kept per worker for reads (requests pipelined on them in turn).
    pub connections_per_worker: usize,
    /// Connections per worker for stats, at most ([`crate::connection::Lane`]): a
    /// worker answers a connection's requests in order and a stat may wait for the
    /// origin, so stats have connections of their own, and another is opened while
    /// every open one is held up by an origin round trip.
    pub stat_connections_per_worker: usize,
    /// Each piece's deadlines: connect, first byte and stall on the worker hop, the
    /// workers' share, and what the origin has left ([`DeadlineBudget`]).
    pub deadlines: DeadlineBudget,
    /// When a worker's circuit opens and for how long ([`HealthConfig`]).
    pub health: HealthConfig,
    /// When a piece whose first byte is late is asked of the next owner too
    /// ([`HedgeConfig`]; off by default).
    pub hedge: HedgeConfig,
    /// When a block's reads are spread over its first owners instead of its owner
    /// alone ([`HotBlockConfig`]; off by default).
    pub hot_blocks: HotBlockConfig,
    /// Workers tried per piece (the owner, then the next in rendezvous order).
    pub attempts: usize,
    /// Largest piece one request asks for, in bytes.
    pub max_request_bytes: u64,
    /// Pieces in flight per read (the stream's memory bound is this times the piece
    /// size).
    pub read_window: usize,
    /// Pieces past a sequential reader's window whose owners are asked to fill them
    /// now, holding nothing here (`crate::read_ahead`); 0: none.
    pub read_ahead_pieces: usize,
    /// Bytes of fetched pieces all reads of this client together may hold, from before
    /// the request to a worker until the last copy of the bytes is dropped (for the
    /// gateway: written to the client's socket): one budget for the process, so readers
    /// that stop reading slow the reads behind them instead of growing the process
    /// (SEC-07). A piece waits for its share before it is requested.
    pub max_buffered_bytes: u64,
    /// Bytes of that budget the reads of one [`ReaderId`] may hold together, so that a
    /// few readers that stop reading cannot hold all of it (reads without a reader use
    /// the whole budget only).
    pub max_buffered_bytes_per_reader: u64,
    /// How long a read's first piece may wait for room in the read budget (the whole
    /// budget, and its reader's share) before the read is refused with
    /// [`CacheClientError::Overloaded`]: before its response has started a reader can
    /// still be told to come back, where a wait would only hold its connection. The
    /// pieces after the first wait as long as it takes (their response has started).
    pub admission_wait: Duration,
    /// How often the membership snapshot is refreshed.
    pub membership_refresh: Duration,
    /// Read from the origin when every worker failed; `None` to report the failure.
    pub origin_fallback: Option<Origins>,
    /// The cluster secret: every worker connection starts with the Hello exchange, and
    /// coordinator calls are signed with it.
    pub cluster_secret: ClusterSecret,
    /// The role this client claims ([`Role::Reader`] unless it ingests).
    pub role: Role,
    /// This reader's zone (its failure domain, as workers declare theirs): a hot
    /// block's reads go to its home in this zone when it has one there (empty: no
    /// preference).
    pub zone: String,
    /// Ask workers on this host over their local socket, where they hand over the
    /// block file's descriptor for cached reads (the co-located fast path). `false`
    /// reads every worker over TCP.
    pub local_reads: bool,
    /// How long a handed-over block file is read again without asking its worker, and
    /// how many are held ([`HeldFilesConfig`]; local reads only).
    pub held_files: HeldFilesConfig,
}

impl CacheClientConfig {
    /// Defaults for a coordinator at `coordinator_url`, the given geometry and the
    /// cluster's secret, as a reader.
    pub fn new(
        coordinator_url: impl Into<String>,
        geometry: BlockGeometry,
        cluster_secret: ClusterSecret,
    ) -> CacheClientConfig {
        CacheClientConfig {
            cluster_secret,
            role: Role::Reader,
            coordinator_url: coordinator_url.into(),
            geometry,
            take_cluster_block_size: false,
            connections_per_worker: 2,
            stat_connections_per_worker: 16,
            deadlines: DeadlineBudget::default(),
            health: HealthConfig::default(),
            hedge: HedgeConfig::default(),
            hot_blocks: HotBlockConfig::default(),
            zone: String::new(),
            attempts: 3,
            // 2 MiB: with the default window of 4, one response holds at most 8 MiB ahead
            // of its client, plus the piece being written (docs/BENCHMARKS.md, slow
            // consumer); 4 MiB pieces held twice that for no measured gain.
            max_request_bytes: 2 << 20,
            read_window: 4,
            // With the window's 4, twelve 2 MiB fills in flight for one cold reader; the
            // workers bound theirs per object (8) and in all (32).
            read_ahead_pieces: 8,
            max_buffered_bytes: 1 << 30,
            max_buffered_bytes_per_reader: 128 << 20,
            admission_wait: Duration::from_secs(2),
            membership_refresh: Duration::from_secs(1),
            origin_fallback: None,
            local_reads: true,
            held_files: HeldFilesConfig::default(),
        }
    }
}

/// How one read goes: whose it is, and whether it may fall back to the origin.
#[derive(Debug, Clone, Copy)]
pub struct ReadOptions {
    /// Whose read it is (the read budget's shares); `None` for the client's own.
    pub reader: Option<ReaderId>,
    /// Whether a piece (or a stat) that no worker can answer is read from the origin
    /// instead, pinned to the version; it needs the client's
    /// [`origin_fallback`](CacheClientConfig::origin_fallback) origins as well. A
    /// reader that promises "the cache or an error" (the gateway's `cache-only` route)
    /// says no.
    pub origin_fallback: bool,
    /// Whether the caller only hands the bytes to the kernel — writes them untouched to
    /// a plain (not TLS) socket, digesting or collecting none of them — so that pieces
    /// may be served from a read-only mapping of a held block file
    /// ([`HeldFilesConfig::map_files`]), copied once. Such bytes must not be read in
    /// user space: a file truncated behind its worker's back faults there (`SIGBUS`).
    pub kernel_copies_only: bool,
}

impl Default for ReadOptions {
    fn default() -> ReadOptions {
        ReadOptions {
            reader: None,
            origin_fallback: true,
            kernel_copies_only: false,
        }
    }
}
