//! The admin API's JSON bodies, shared by the server, the [`client`](crate::client),
//! workers and cache-clients.
//!
//! Every route is under `/v1`:
//!
//! | route | body | answer |
//! |---|---|---|
//! | `POST /v1/workers/register` | [`RegisterRequest`] | [`RegisterResponse`]; 400 [`ErrorBody`] if invalid |
//! | `POST /v1/workers/{id}/heartbeat` | [`HeartbeatRequest`] | [`HeartbeatResponse`]; 404 if unknown |
//! | `POST /v1/workers/{id}/drain` | none | [`DrainResponse`]; 404 if unknown |
//! | `GET /v1/members` | | [`MembersResponse`] |
//! | `GET /v1/members/{id}` | | [`MemberInfo`]; 404 if unknown |
//! | `GET /v1/cluster` | | [`ClusterSummary`] |
//! | `POST /v1/readers/{id}/circuits` | [`CircuitsReport`] | [`CircuitsResponse`]; 400 if invalid |
//!
//! plus `GET /healthz`, `GET /readyz` and `GET /metrics` (Prometheus text).
//!
//! # The worker's side of the protocol
//!
//! A worker registers once, then heartbeats every `heartbeat_interval_ms`
//! from the [`RegisterResponse`]. A worker that has not heartbeated for
//! `expiry_ms` is dropped. When a heartbeat answers 404 the coordinator does
//! not know the worker (it expired, or the coordinator restarted and lost
//! its soft state): the worker must register again, then go on
//! heartbeating. [`CoordinatorClient::heartbeat_or_register`](crate::client::CoordinatorClient::heartbeat_or_register)
//! does exactly that. Membership is therefore rebuilt within one heartbeat
//! round after a coordinator restart.
//!
//! Draining is sticky: once a worker is draining (by `POST .../drain` or a
//! heartbeat with `"draining": true`), later heartbeats cannot undo it; only
//! a new registration makes it live again. The [`HeartbeatResponse`] carries
//! the member's state, so a worker drained by an operator learns it and can
//! report `"draining": true` after a coordinator restart.
//!
//! Epochs are u64 JSON numbers; parse them as 64-bit integers (JavaScript
//! numbers lose precision above 2^53).

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::error::CoordinatorError;
use crate::local_endpoint::LocalEndpoint;
use crate::placement::{PlacementMember, RendezvousPlacement, check_placement_version};

/// Longest worker id accepted, in bytes.
pub const MAX_ID_LEN: usize = 128;
/// Longest zone label accepted, in bytes.
pub const MAX_ZONE_LEN: usize = 128;
/// Longest data-plane address accepted, in bytes.
pub const MAX_ADDR_LEN: usize = 261;

/// `POST /v1/workers/register`: a worker announcing itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterRequest {
    /// Unique worker id: 1 to [`MAX_ID_LEN`] characters of `[A-Za-z0-9._-]`,
    /// not `.` or `..`.
    pub id: String,
    /// Data-plane address readers connect to: `ip:port`, `[ipv6]:port` or
    /// `hostname:port`, port not 0.
    pub addr: String,
    /// Relative share of blocks, at least 1, proportional to capacity.
    pub weight: u32,
    /// Failure-domain label (for example an availability zone); may be empty.
    #[serde(default)]
    pub zone: String,
    /// Cache capacity in bytes, for reporting.
    #[serde(default)]
    pub capacity_bytes: u64,
    /// The registering worker instance's identity (kept in its cache folder, so it
    /// survives restarts). The first registrant of an id binds it: while that member
    /// is listed, a registration, heartbeat or drain of the id with another instance
    /// is refused (409).
    #[serde(default)]
    pub instance: String,
    /// The data plane the worker serves on (`io_uring` or `tokio`), for operators:
    /// up to 32 characters of `[A-Za-z0-9._-]`; may be empty (an older worker).
    #[serde(default)]
    pub data_plane: String,
    /// The placement scoring the worker was built with
    /// ([`PLACEMENT_VERSION`](crate::placement::PLACEMENT_VERSION)); a worker that predates the field sends none and is
    /// read as version 1. The coordinator refuses any other version than its own:
    /// readers of two versions would place every block differently.
    #[serde(default = "placement_version_1")]
    pub placement_version: u32,
    /// The worker's local socket for readers on its host (empty: none).
    #[serde(default)]
    pub local: LocalEndpoint,
    /// The worker's page size in bytes (0: not said, an older worker). A coordinator
    /// that publishes a [`ClusterGeometry`] refuses another one (409).
    #[serde(default)]
    pub page_size: u64,
}

/// What a body without `placement_version` was built with: version 1, the
/// scoring before the field existed.
fn placement_version_1() -> u32 {
    1
}

/// Largest placement weight accepted: a worker cannot claim more than this many
/// shares of the blocks.
pub const MAX_WEIGHT: u32 = 10_000;

impl RegisterRequest {
    /// Checks every field; the error says which one is wrong and why.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidRegistration`], or
    /// [`CoordinatorError::PlacementVersion`] for a worker of another placement version.
    pub fn validate(&self) -> Result<(), CoordinatorError> {
        validate_id(&self.id)?;
        validate_addr(&self.addr)?;
        if self.weight == 0 || self.weight > MAX_WEIGHT {
            return Err(invalid(format!("weight must be 1 to {MAX_WEIGHT}")));
        }
        if self.instance.len() > MAX_ID_LEN || !self.instance.chars().all(is_label_char) {
            return Err(invalid(
                "instance must be up to 128 characters of [A-Za-z0-9._-]",
            ));
        }
        if self.data_plane.len() > 32 || !self.data_plane.chars().all(is_label_char) {
            return Err(invalid(
                "data_plane must be up to 32 characters of [A-Za-z0-9._-]",
            ));
        }
        validate_zone(&self.zone)?;
        self.local.validate()?;
        check_placement_version(self.placement_version)
    }

    /// The worker as placement sees it.
    pub fn placement_member(&self) -> PlacementMember {
        PlacementMember::new(self.id.clone(), self.addr.clone(), self.weight).in_zone(&self.zone)
    }
}

fn invalid(message: impl Into<String>) -> CoordinatorError {
    CoordinatorError::InvalidRegistration(message.into())
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Checks a worker id (see [`RegisterRequest::id`]).
///
/// # Errors
/// [`CoordinatorError::InvalidRegistration`].
pub fn validate_id(id: &str) -> Result<(), CoordinatorError> {
    if id.is_empty() {
        return Err(invalid("id must not be empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(invalid(format!(
            "id is {} bytes, at most {MAX_ID_LEN} allowed",
            id.len()
        )));
    }
    if let Some(c) = id.chars().find(|c| !is_label_char(*c)) {
        return Err(invalid(format!(
            "id {id:?} contains {c:?}; only A-Z, a-z, 0-9, '.', '_' and '-' are allowed"
        )));
    }
    if id == "." || id == ".." {
        return Err(invalid(format!("id must not be {id:?}")));
    }
    Ok(())
}

fn validate_zone(zone: &str) -> Result<(), CoordinatorError> {
    if zone.len() > MAX_ZONE_LEN {
        return Err(invalid(format!(
            "zone is {} bytes, at most {MAX_ZONE_LEN} allowed",
            zone.len()
        )));
    }
    if let Some(c) = zone.chars().find(|c| !is_label_char(*c)) {
        return Err(invalid(format!(
            "zone {zone:?} contains {c:?}; only A-Z, a-z, 0-9, '.', '_' and '-' are allowed"
        )));
    }
    Ok(())
}

/// Checks a data-plane address (see [`RegisterRequest::addr`]).
///
/// # Errors
/// [`CoordinatorError::InvalidRegistration`].
pub fn validate_addr(addr: &str) -> Result<(), CoordinatorError> {
    let bad = |why: &str| invalid(format!("addr {addr:?} is not host:port ({why})"));
    if addr.len() > MAX_ADDR_LEN {
        return Err(bad("too long"));
    }
    if let Ok(socket) = addr.parse::<SocketAddr>() {
        return if socket.port() == 0 {
            Err(bad("port 0"))
        } else {
            Ok(())
        };
    }
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(bad("no port"));
    };
    match port.parse::<u16>() {
        Ok(0) => return Err(bad("port 0")),
        Ok(_) => {}
        Err(_) => return Err(bad("port is not a number from 1 to 65535")),
    }
    if host.is_empty() || host.len() > 253 {
        return Err(bad("empty or overlong host"));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if !host.split('.').all(label_ok) {
        return Err(bad("host is neither an IP address nor a DNS name"));
    }
    Ok(())
}

/// The block and page size of a cluster whose coordinator is started without
/// `--block-size` / `--page-size` (256 MiB, 1 MiB): core's defaults.
pub use talon_core::{DEFAULT_BLOCK_SIZE, DEFAULT_PAGE_SIZE};

/// The cluster's geometry as its coordinator publishes it (in [`MembersResponse`]):
/// gateways and `talon warm` split objects into blocks of `block_size` bytes, and
/// workers keep presence in pages of `page_size` bytes. Every part takes it from the
/// coordinator; one started with other values refuses to run
/// ([`ClusterGeometry::block_size_for`], [`ClusterGeometry::page_size_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterGeometry {
    /// Bytes per block: a power of two.
    pub block_size: u64,
    /// Bytes per page: a power of two, at most `block_size`.
    pub page_size: u64,
}

impl Default for ClusterGeometry {
    fn default() -> Self {
        Self {
            block_size: DEFAULT_BLOCK_SIZE,
            page_size: DEFAULT_PAGE_SIZE,
        }
    }
}

impl ClusterGeometry {
    /// The block size a part started with `given` (its `--block-size`, if any) uses
    /// in a cluster that publishes `published` (none: a coordinator from before the
    /// field): the cluster's; `given` where the cluster says none; else the default.
    ///
    /// # Errors
    /// [`CoordinatorError::GeometryMismatch`] when `given` differs from the cluster's.
    pub fn block_size_for(
        published: Option<Self>,
        given: Option<u64>,
    ) -> Result<u64, CoordinatorError> {
        agree(
            "--block-size",
            published.map(|g| g.block_size),
            given,
            DEFAULT_BLOCK_SIZE,
        )
    }

    /// The page size a worker started with `given` (its `--page-size`, if any) uses;
    /// the same rule as [`Self::block_size_for`].
    ///
    /// # Errors
    /// [`CoordinatorError::GeometryMismatch`] when `given` differs from the cluster's.
    pub fn page_size_for(
        published: Option<Self>,
        given: Option<u64>,
    ) -> Result<u64, CoordinatorError> {
        agree(
            "--page-size",
            published.map(|g| g.page_size),
            given,
            DEFAULT_PAGE_SIZE,
        )
    }
}

/// The one rule of [`ClusterGeometry`]: the cluster's value wins, and a part told
/// another one refuses with both.
fn agree(
    flag: &str,
    cluster: Option<u64>,
    given: Option<u64>,
    default: u64,
) -> Result<u64, CoordinatorError> {
    match (cluster, given) {
        (Some(cluster), Some(given)) if cluster != given => {
            Err(CoordinatorError::GeometryMismatch(format!(
                "{flag} {given} bytes differs from the cluster's {cluster} bytes (the \
                 coordinator's {flag}): leave {flag} out to take the cluster's, or give both \
                 the same value"
            )))
        }
        (Some(cluster), _) => Ok(cluster),
        (None, Some(given)) => Ok(given),
        (None, None) => Ok(default),
    }
}

/// Answer to a registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterResponse {
    /// The membership epoch after the registration.
    pub epoch: u64,
    /// How often the worker should heartbeat, in milliseconds.
    pub heartbeat_interval_ms: u64,
    /// A worker that has not heartbeated for this long is dropped, in
    /// milliseconds.
    pub expiry_ms: u64,
}

/// `POST /v1/workers/{id}/heartbeat`: the worker is alive, with its latest
/// statistics. Every field defaults to 0 / false.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatRequest {
    /// Bytes currently cached.
    #[serde(default)]
    pub bytes_cached: u64,
    /// Cache capacity in bytes; 0 keeps the registered value.
    #[serde(default)]
    pub capacity_bytes: u64,
    /// Reads served from cache since the worker started.
    #[serde(default)]
    pub hits: u64,
    /// Reads that had to go to the origin since the worker started.
    #[serde(default)]
    pub misses: u64,
    /// The worker is shutting down: take it out of placement. Sticky.
    #[serde(default)]
    pub draining: bool,
    /// The heartbeating instance ([`RegisterRequest::instance`]).
    #[serde(default)]
    pub instance: String,
    /// Warm tasks finished since the last heartbeat ([`WarmTask`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warm_done: Vec<WarmTaskDone>,
}

/// `POST /v1/workers/{id}/drain` by the worker itself: its instance. An admin's drain
/// needs no body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainRequest {
    /// The draining instance ([`RegisterRequest::instance`]).
    #[serde(default)]
    pub instance: String,
}

/// Answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatResponse {
    /// The current membership epoch.
    pub epoch: u64,
    /// The member's state after the heartbeat.
    #[serde(default)]
    pub state: MemberState,
    /// Blocks to fill for warm jobs (a worker from before warm jobs ignores them; the
    /// coordinator hands them out again after [`WARM_TASK_TIMEOUT_MS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warm: Vec<WarmTask>,
    /// The cluster's pinned prefixes ([`PinsView`]), which the worker pins beside its
    /// own `--pin`s (empty: none; a coordinator from before cluster pins sends none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<String>,
    /// The cluster's invalidations of the last [`INVALIDATIONS_KEPT_MS`]
    /// ([`Invalidation`]); a coordinator from before them sends none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalidations: Vec<Invalidation>,
    /// The cluster's per-prefix freshness ([`FreshnessRule`]); none from a coordinator
    /// from before them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub freshness: Vec<FreshnessRule>,
}

/// The cluster's pinned prefixes (`GET /v1/pins`; `PUT /v1/pins` with a [`PinsRequest`]).
/// Every worker passes over the blocks of these objects in eviction while the pinned
/// blocks hold no more than its `--pin-share` of its capacity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinsView {
    /// Key-path prefixes: `s3/BUCKET/PREFIX` or `az/ACCOUNT/CONTAINER/PREFIX`.
    pub prefixes: Vec<String>,
    /// Raised by one at each change (0: never set).
    pub version: u64,
}

/// A new list of pinned prefixes, replacing the last.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinsRequest {
    /// The prefixes ([`pin_prefix_problem`] says which are accepted); empty unpins all.
    pub prefixes: Vec<String>,
    /// Refuse (409) unless the list is still at this version: a read-modify-write that
    /// loses no concurrent change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_version: Option<u64>,
}

/// One invalidation (`talon invalidate`, `POST /v1/invalidations`): object metadata
/// and listing pages under `prefix` learned before `at_unix_ms` are not answered again
/// by any gateway or worker; the next read asks the origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invalidation {
    /// A key-path prefix: `s3/BUCKET/PREFIX` or `az/ACCOUNT/CONTAINER/PREFIX`.
    pub prefix: String,
    /// When it was made, by the coordinator's clock: milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
}

/// `POST /v1/invalidations`: invalidate a prefix now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalidateRequest {
    /// As [`Invalidation::prefix`] ([`cluster_prefix_problem`] says which are accepted).
    pub prefix: String,
}

/// `GET /v1/invalidations` (and the answer to a `POST`): the invalidations of the last
/// [`INVALIDATIONS_KEPT_MS`], oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalidationsView {
    /// The invalidations.
    pub invalidations: Vec<Invalidation>,
    /// Raised by one at each invalidation (0: none yet).
    pub version: u64,
}

/// How long the coordinator hands an invalidation out: longer than any staleness bound
/// or metadata TTL it must outlive (what was learned before it is past any bound by then).
pub const INVALIDATIONS_KEPT_MS: u64 = 600_000;

/// Most invalidations held at once (the oldest go first).
pub const MAX_INVALIDATIONS: usize = 256;

/// How fresh what is learned under a prefix must be (`talon freshness`, `PUT
/// /v1/freshness`): every gateway and worker uses it instead of its own bound for the
/// objects (and listings) under the prefix; the longest matching prefix wins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreshnessRule {
    /// A key-path prefix: `s3/BUCKET/PREFIX` or `az/ACCOUNT/CONTAINER/PREFIX`.
    pub prefix: String,
    /// The staleness bound there, milliseconds; `None`: immutable (what is learned is
    /// answered until evicted or invalidated: the objects never change in place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_staleness_ms: Option<u64>,
}

/// `GET /v1/freshness`: the cluster's per-prefix freshness.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreshnessView {
    /// The rules.
    pub rules: Vec<FreshnessRule>,
    /// Raised by one at each change (0: never set).
    pub version: u64,
}

/// `PUT /v1/freshness`: a new list of rules, replacing the last.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreshnessRequest {
    /// The rules (prefixes as [`cluster_prefix_problem`] accepts); empty removes all.
    pub rules: Vec<FreshnessRule>,
    /// Refuse (409) unless the list is still at this version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_version: Option<u64>,
}

/// Most per-prefix freshness rules in the cluster.
pub const MAX_FRESHNESS_RULES: usize = 64;

/// Most pinned prefixes in the cluster.
pub const MAX_PINS: usize = 64;

/// Longest pinned prefix, in bytes.
pub const MAX_PIN_LEN: usize = 1024;

/// Why `prefix` cannot be pinned, or `None` when it can ([`cluster_prefix_problem`]).
pub fn pin_prefix_problem(prefix: &str) -> Option<String> {
    cluster_prefix_problem(prefix, "pin")
}

/// Why `prefix` cannot name objects of the cluster (a pin, an invalidation: `what`),
/// or `None` when it can: it must name a bucket (`s3/BUCKET/…`) or a container
/// (`az/ACCOUNT/CONTAINER/…`), at most [`MAX_PIN_LEN`] bytes, no control characters.
pub fn cluster_prefix_problem(prefix: &str, what: &str) -> Option<String> {
    if prefix.len() > MAX_PIN_LEN {
        return Some(format!("{what} prefix longer than {MAX_PIN_LEN} bytes"));
    }
    if prefix.chars().any(char::is_control) {
        return Some(format!("{what} prefix {prefix:?} has a control character"));
    }
    let names_a_bucket = match prefix.split_once('/') {
        Some(("s3", rest)) => rest.split_once('/').is_some_and(|(b, _)| !b.is_empty()),
        Some(("az", rest)) => {
            let mut parts = rest.splitn(3, '/');
            let (account, container) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            !account.is_empty() && !container.is_empty() && parts.next().is_some()
        }
        _ => false,
    };
    (!names_a_bucket).then(|| {
        format!(
            "{what} prefix {prefix:?}: expected s3/BUCKET/PREFIX or az/ACCOUNT/CONTAINER/PREFIX (a whole bucket: s3/BUCKET/)"
        )
    })
}

/// How long a warm task may stay out before the coordinator hands it out again.
pub const WARM_TASK_TIMEOUT_MS: u64 = 60_000;

/// Most warm tasks one worker holds at once.
pub const WARM_TASKS_PER_WORKER: usize = 4;

/// Longest warm source accepted, in bytes.
pub const MAX_WARM_SOURCE_LEN: usize = 2048;

/// One block a worker is asked to fill for a warm job: the whole block, from the
/// origin, pinned to `version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmTask {
    /// The job.
    pub job: u64,
    /// The task, unique within the job.
    pub task: u64,
    /// The object, as a key path (`s3/BUCKET/KEY`, `az/ACCOUNT/CONTAINER/BLOB`).
    pub key_path: String,
    /// The object's version (ETag) the block belongs to.
    pub version: String,
    /// The object's size in bytes.
    pub object_size: u64,
    /// The block's offset in the object.
    pub block_offset: u64,
    /// The cluster's block size.
    pub block_size: u64,
}

/// A worker's report of one [`WarmTask`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmTaskDone {
    /// The job.
    pub job: u64,
    /// The task.
    pub task: u64,
    /// Bytes of the block now cached.
    pub bytes: u64,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Most objects a warm request may name one by one ([`WarmRequest::objects`]).
pub const MAX_WARM_OBJECTS: usize = 10_000;

/// `POST /v1/warm`: warm every object under a prefix, or the objects named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmRequest {
    /// `s3://BUCKET/PREFIX` or `az://ACCOUNT/CONTAINER/PREFIX`; empty when `objects`
    /// names them instead.
    #[serde(default)]
    pub source: String,
    /// Objects as key paths (`s3/BUCKET/KEY`, `az/ACCOUNT/CONTAINER/BLOB`), each asked
    /// of the origin for its size and version (a list file); used when `source` is
    /// empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<String>,
    /// The cluster's block size (the gateways' `--block-size`).
    pub block_size: u64,
    /// Most bytes the job fills; objects past it are left out (0: no limit).
    #[serde(default)]
    pub budget_bytes: u64,
}

/// Where a warm job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WarmState {
    /// Blocks are being filled.
    Running,
    /// Every block was filled (or failed: see `errors`).
    Done,
    /// Cancelled; the blocks filled stay cached.
    Cancelled,
}

/// `GET /v1/warm/{id}` (and each entry of `GET /v1/warm`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmJobView {
    /// The job's id.
    pub id: u64,
    /// What it warms.
    pub source: String,
    /// The block size it fills by (0 from a coordinator from before the field).
    #[serde(default)]
    pub block_size: u64,
    /// Where it stands.
    pub state: WarmState,
    /// Objects listed under the source and taken (within the budget).
    pub objects: u64,
    /// Of those, objects whose every block is filled.
    pub objects_done: u64,
    /// Bytes of those objects.
    pub bytes: u64,
    /// Bytes filled so far.
    pub bytes_done: u64,
    /// Blocks to fill.
    pub blocks: u64,
    /// Blocks filled or failed.
    pub blocks_done: u64,
    /// Objects listed but left out because the budget was reached.
    pub objects_over_budget: u64,
    /// Blocks that failed, and the first error.
    pub errors: u64,
    /// The first error, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Milliseconds since the job started.
    pub elapsed_ms: u64,
}

/// `GET /v1/warm`: every job this coordinator runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmJobsResponse {
    /// The jobs, oldest first.
    pub jobs: Vec<WarmJobView>,
}

/// Answer to a drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainResponse {
    /// The membership epoch after the drain.
    pub epoch: u64,
}

/// Whether a member takes part in placement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberState {
    /// In placement.
    #[default]
    Live,
    /// Out of placement, still serving what it holds until it leaves.
    Draining,
}

impl MemberState {
    /// `live` or `draining`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Draining => "draining",
        }
    }
}

/// One member as `GET /v1/members` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberInfo {
    /// Worker id.
    pub id: String,
    /// Data-plane address.
    pub addr: String,
    /// Placement weight.
    pub weight: u32,
    /// Failure-domain label.
    pub zone: String,
    /// Live or draining.
    pub state: MemberState,
    /// Milliseconds since the last heartbeat (or the registration).
    pub last_heartbeat_ms_ago: u64,
    /// Bytes cached, as last reported.
    pub bytes_cached: u64,
    /// Capacity in bytes, as last reported.
    pub capacity_bytes: u64,
    /// Cache hits, as last reported.
    pub hits: u64,
    /// Cache misses, as last reported.
    pub misses: u64,
    /// The data plane it serves on (`io_uring`, `tokio`; empty if not said).
    #[serde(default)]
    pub data_plane: String,
    /// Its local socket for readers on its host (empty: none).
    #[serde(default)]
    pub local: LocalEndpoint,
    /// What the readers' circuits say about it (none reported: all zero).
    #[serde(default)]
    pub circuits: MemberCircuits,
}

/// What the readers' circuits say about one member: the sums over the readers whose
/// last [`CircuitsReport`] (within the coordinator's expiry window) named it. A reader
/// reports only once some worker has failed it, so `readers: 0` means no reader has
/// had trouble with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberCircuits {
    /// Readers that reported on it.
    pub readers: u32,
    /// Of those, the readers whose circuit for it is not closed (open or probing):
    /// they skip it.
    pub open: u32,
    /// Times those readers' circuits for it opened, summed.
    pub opened: u64,
    /// Deadlines it missed for those readers, summed.
    pub deadlines_missed: u64,
}

/// One reader's circuit for one worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerCircuit {
    /// The worker's data-plane address (as [`MemberInfo::addr`]).
    pub addr: String,
    /// `closed`, `open` or `probing`.
    pub state: String,
    /// Failures since its last success.
    pub consecutive_failures: u32,
    /// Times the circuit opened.
    pub opened: u64,
    /// Deadlines the worker missed.
    pub deadlines_missed: u64,
}

/// Most workers one [`CircuitsReport`] may name.
pub const MAX_REPORTED_WORKERS: usize = 4096;

/// `POST /v1/readers/{id}/circuits`: a reader's (a cache client's) circuits, each
/// report replacing that reader's last. The reader id has the alphabet of a worker id
/// ([`validate_id`]). Informational: placement does not change with it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CircuitsReport {
    /// The workers the reader has a circuit for.
    pub workers: Vec<WorkerCircuit>,
}

impl CircuitsReport {
    /// Checks the report's size and fields.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidRequest`].
    pub fn validate(&self) -> Result<(), CoordinatorError> {
        let bad = |why: String| CoordinatorError::InvalidRequest(why);
        if self.workers.len() > MAX_REPORTED_WORKERS {
            return Err(bad(format!(
                "a report names at most {MAX_REPORTED_WORKERS} workers"
            )));
        }
        for w in &self.workers {
            validate_addr(&w.addr).map_err(|e| bad(e.to_string()))?;
            if !matches!(w.state.as_str(), "closed" | "open" | "probing") {
                return Err(bad(format!(
                    "circuit state {:?} is not closed, open or probing",
                    w.state
                )));
            }
        }
        Ok(())
    }
}

/// The answer to a [`CircuitsReport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CircuitsResponse {
    /// The membership epoch.
    pub epoch: u64,
}

impl MemberInfo {
    /// The member as placement sees it.
    pub fn placement_member(&self) -> PlacementMember {
        PlacementMember::new(self.id.clone(), self.addr.clone(), self.weight).in_zone(&self.zone)
    }
}

/// `GET /v1/members`: every member, sorted by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembersResponse {
    /// The membership epoch.
    pub epoch: u64,
    /// The placement scoring every member and reader of this cluster uses
    /// ([`PLACEMENT_VERSION`](crate::placement::PLACEMENT_VERSION)); read as 1 from a coordinator that predates the field.
    #[serde(default = "placement_version_1")]
    pub placement_version: u32,
    /// Live and draining members, sorted by id.
    pub members: Vec<MemberInfo>,
    /// The cluster's invalidations of the last [`INVALIDATIONS_KEPT_MS`], which every
    /// gateway applies too (none from a coordinator from before them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalidations: Vec<Invalidation>,
    /// The cluster's per-prefix freshness, which every gateway applies too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub freshness: Vec<FreshnessRule>,
    /// The cluster's block and page size (none from a coordinator started without
    /// one, or from before the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geometry: Option<ClusterGeometry>,
}

impl MembersResponse {
    /// [`placement`](Self::placement), for a reader: refused when the membership
    /// uses another placement version than this process.
    ///
    /// # Errors
    /// [`CoordinatorError::PlacementVersion`].
    pub fn checked_placement(&self) -> Result<RendezvousPlacement, CoordinatorError> {
        check_placement_version(self.placement_version)?;
        Ok(self.placement())
    }

    /// Placement over the live members; its [`epoch`](RendezvousPlacement::epoch)
    /// equals [`Self::epoch`].
    pub fn placement(&self) -> RendezvousPlacement {
        RendezvousPlacement::new(
            self.members
                .iter()
                .filter(|m| m.state == MemberState::Live)
                .map(MemberInfo::placement_member)
                .collect(),
        )
    }

    /// The cluster totals of these members.
    pub fn cluster(&self) -> ClusterSummary {
        ClusterSummary::from_members(self.epoch, &self.members)
    }
}

/// `GET /v1/cluster`: totals over every member.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterSummary {
    /// The membership epoch.
    pub epoch: u64,
    /// Members, live and draining.
    pub workers: usize,
    /// Members in placement.
    pub live: usize,
    /// Members draining.
    pub draining: usize,
    /// Total capacity in bytes.
    pub capacity_bytes: u64,
    /// Total bytes cached.
    pub bytes_cached: u64,
    /// Total cache hits reported.
    pub hits: u64,
    /// Total cache misses reported.
    pub misses: u64,
    /// `hits / (hits + misses)`, 0 when nothing was read yet.
    pub hit_ratio: f64,
}

impl ClusterSummary {
    /// Totals over `members` at `epoch`.
    pub fn from_members(epoch: u64, members: &[MemberInfo]) -> Self {
        let live = members
            .iter()
            .filter(|m| m.state == MemberState::Live)
            .count();
        let sum = |f: fn(&MemberInfo) -> u64| members.iter().map(f).fold(0u64, u64::saturating_add);
        let hits = sum(|m| m.hits);
        let misses = sum(|m| m.misses);
        let reads = hits.saturating_add(misses);
        Self {
            epoch,
            workers: members.len(),
            live,
            draining: members.len() - live,
            capacity_bytes: sum(|m| m.capacity_bytes),
            bytes_cached: sum(|m| m.bytes_cached),
            hits,
            misses,
            hit_ratio: if reads == 0 {
                0.0
            } else {
                hits as f64 / reads as f64
            },
        }
    }
}

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::placement::PLACEMENT_VERSION;

    #[test]
    fn a_part_takes_the_clusters_geometry_and_refuses_another() {
        let cluster = Some(ClusterGeometry {
            block_size: 64 << 20,
            page_size: 1 << 20,
        });
        assert_eq!(
            ClusterGeometry::block_size_for(cluster, None).unwrap(),
            64 << 20
        );
        assert_eq!(
            ClusterGeometry::block_size_for(cluster, Some(64 << 20)).unwrap(),
            64 << 20
        );
        let e = ClusterGeometry::block_size_for(cluster, Some(256 << 20)).unwrap_err();
        assert!(matches!(e, CoordinatorError::GeometryMismatch(_)));
        assert_eq!(e.status_code(), 409);
        let text = e.to_string();
        assert!(
            text.contains("--block-size 268435456 bytes") && text.contains("cluster's 67108864"),
            "{text}"
        );
        let e = ClusterGeometry::page_size_for(cluster, Some(4096)).unwrap_err();
        assert!(e.to_string().contains("--page-size 4096 bytes"), "{e}");
        // A coordinator that publishes none: the part's own, else the default.
        assert_eq!(
            ClusterGeometry::block_size_for(None, Some(4096)).unwrap(),
            4096
        );
        assert_eq!(
            ClusterGeometry::block_size_for(None, None).unwrap(),
            DEFAULT_BLOCK_SIZE
        );
        assert_eq!(
            ClusterGeometry::page_size_for(None, None).unwrap(),
            DEFAULT_PAGE_SIZE
        );
    }

    fn reg(id: &str, addr: &str, weight: u32) -> RegisterRequest {
        RegisterRequest {
            id: id.into(),
            addr: addr.into(),
            weight,
            zone: "z1".into(),
            capacity_bytes: 1 << 30,
            instance: String::new(),
            data_plane: String::new(),
            local: LocalEndpoint::default(),
            placement_version: PLACEMENT_VERSION,
            page_size: 0,
        }
    }

    #[test]
    fn accepts_good_registrations() {
        for (id, addr) in [
            ("w1", "127.0.0.1:7101"),
            ("worker-01.rack_2", "[::1]:7101"),
            ("W", "worker-1.talon.svc.cluster.local:7101"),
            ("x..y", "localhost:1"),
            (&"a".repeat(MAX_ID_LEN), "10.0.0.1:65535"),
        ] {
            reg(id, addr, 1).validate().unwrap();
        }
    }

    #[test]
    fn rejects_bad_registrations() {
        let cases = [
            reg("", "127.0.0.1:1", 1),
            reg("a b", "127.0.0.1:1", 1),
            reg("a/b", "127.0.0.1:1", 1),
            reg("é", "127.0.0.1:1", 1),
            reg(".", "127.0.0.1:1", 1),
            reg("..", "127.0.0.1:1", 1),
            reg(&"a".repeat(MAX_ID_LEN + 1), "127.0.0.1:1", 1),
            reg("w", "127.0.0.1", 1),
            reg("w", "127.0.0.1:0", 1),
            reg("w", "127.0.0.1:70000", 1),
            reg("w", ":7101", 1),
            reg("w", "host name:7101", 1),
            reg("w", "-host:7101", 1),
            reg("w", "a..b:7101", 1),
            reg("w", "::1:7101", 1),
            reg("w", "", 1),
            reg("w", "127.0.0.1:1", 0),
        ];
        for c in cases {
            let err = c.validate().unwrap_err();
            assert!(
                matches!(err, CoordinatorError::InvalidRegistration(_)),
                "{c:?}: {err}"
            );
        }
        let mut bad_zone = reg("w", "127.0.0.1:1", 1);
        bad_zone.zone = "zone 1".into();
        assert!(bad_zone.validate().is_err());
    }

    #[test]
    fn json_shapes_match_the_documented_api() {
        let body = r#"{"id": "w1", "addr": "127.0.0.1:7101", "weight": 1, "zone": "z1", "capacity_bytes": 1073741824, "placement_version": 2}"#;
        let r: RegisterRequest = serde_json::from_str(body).unwrap();
        assert_eq!(r, reg("w1", "127.0.0.1:7101", 1));
        // A worker from before the field is a version-1 worker, and refused.
        let old = r#"{"id": "w1", "addr": "127.0.0.1:7101", "weight": 1}"#;
        let old: RegisterRequest = serde_json::from_str(old).unwrap();
        assert_eq!(old.placement_version, 1);
        let refused = old.validate().unwrap_err();
        assert!(
            matches!(refused, CoordinatorError::PlacementVersion(1)),
            "{refused}"
        );
        assert_eq!(refused.status_code(), 409);
        assert!(refused.to_string().contains("must not mix"), "{refused}");
        let members: MembersResponse =
            serde_json::from_str(r#"{"epoch": 3, "members": []}"#).unwrap();
        assert_eq!(members.placement_version, 1);
        assert!(matches!(
            members.checked_placement(),
            Err(CoordinatorError::PlacementVersion(1))
        ));
        let minimal: RegisterRequest =
            serde_json::from_str(r#"{"id": "w1", "addr": "h:1", "weight": 2}"#).unwrap();
        assert_eq!(minimal.zone, "");
        let hb: HeartbeatRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(hb, HeartbeatRequest::default());
        let info = MemberInfo {
            id: "w1".into(),
            addr: "h:1".into(),
            weight: 1,
            zone: "z".into(),
            state: MemberState::Draining,
            last_heartbeat_ms_ago: 5,
            bytes_cached: 1,
            capacity_bytes: 2,
            hits: 3,
            misses: 4,
            data_plane: "io_uring".into(),
            local: LocalEndpoint::default(),
            circuits: MemberCircuits::default(),
        };
        let v = serde_json::to_value(&info).unwrap();
        assert_eq!(v["state"], "draining");
        assert_eq!(v["last_heartbeat_ms_ago"], 5);
        assert_eq!(v["data_plane"], "io_uring");
        let hr: HeartbeatResponse = serde_json::from_str(r#"{"epoch": 7}"#).unwrap();
        assert_eq!(hr.state, MemberState::Live);
    }

    #[test]
    fn a_circuits_report_names_workers_by_address_and_says_a_known_state() {
        let circuit = |addr: &str, state: &str| WorkerCircuit {
            addr: addr.into(),
            state: state.into(),
            consecutive_failures: 3,
            opened: 1,
            deadlines_missed: 1,
        };
        let good = CircuitsReport {
            workers: vec![circuit("h:1", "open"), circuit("10.0.0.1:7", "probing")],
        };
        good.validate().unwrap();
        let json = serde_json::to_value(&good).unwrap();
        assert_eq!(json["workers"][0]["state"], "open");
        for bad in [
            CircuitsReport {
                workers: vec![circuit("h:1", "half-open")],
            },
            CircuitsReport {
                workers: vec![circuit("no-port", "open")],
            },
            CircuitsReport {
                workers: vec![circuit("h:1", "closed"); MAX_REPORTED_WORKERS + 1],
            },
        ] {
            assert!(matches!(
                bad.validate(),
                Err(CoordinatorError::InvalidRequest(_))
            ));
        }
        // A member view from a coordinator without circuits reads as none reported.
        let old: MemberInfo = serde_json::from_str(
            r#"{"id":"w","addr":"h:1","weight":1,"zone":"","state":"live","last_heartbeat_ms_ago":0,"bytes_cached":0,"capacity_bytes":0,"hits":0,"misses":0}"#,
        )
        .unwrap();
        assert_eq!(old.circuits, MemberCircuits::default());
    }

    #[test]
    fn cluster_totals() {
        let m = |id: &str, state, hits, misses| MemberInfo {
            id: id.into(),
            addr: "h:1".into(),
            weight: 1,
            zone: String::new(),
            state,
            last_heartbeat_ms_ago: 0,
            bytes_cached: 10,
            capacity_bytes: 100,
            hits,
            misses,
            data_plane: String::new(),
            local: LocalEndpoint::default(),
            circuits: MemberCircuits::default(),
        };
        let members = MembersResponse {
            epoch: 9,
            placement_version: PLACEMENT_VERSION,
            members: vec![
                m("a", MemberState::Live, 3, 1),
                m("b", MemberState::Draining, 0, 0),
            ],
            invalidations: Vec::new(),
            freshness: Vec::new(),
            geometry: None,
        };
        let c = members.cluster();
        assert_eq!((c.epoch, c.workers, c.live, c.draining), (9, 2, 1, 1));
        assert_eq!((c.capacity_bytes, c.bytes_cached), (200, 20));
        assert_eq!((c.hits, c.misses), (3, 1));
        assert_eq!(c.hit_ratio, 0.75);
        assert_eq!(members.placement().len(), 1);
        let empty = ClusterSummary::from_members(0, &[]);
        assert_eq!(empty.hit_ratio, 0.0);
    }
}
