//! What a gateway serves and how: fronts, routes, which origin each front reads,
//! client identities, limits.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use talon_protocols::access::AnonymousAccess;
use talon_protocols::azure::auth::AzureIdentity;
use talon_protocols::azure::request::AzureAddressing;
use talon_protocols::s3::auth::S3Identities;
use talon_protocols::s3::request::S3Addressing;

use crate::error::GatewayError;

/// How a front serves reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// Read through the cache; fall back to a conditional origin read only when the
    /// cache infrastructure fails.
    Cache,
    /// Read through the cache only; a failure of the cache is an error.
    CacheOnly,
    /// Straight to the origin; no cache.
    Origin,
}

impl Route {
    /// The name used in flags and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Route::Cache => "cache",
            Route::CacheOnly => "cache-only",
            Route::Origin => "origin",
        }
    }
}

impl std::str::FromStr for Route {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cache" => Ok(Route::Cache),
            "cache-only" => Ok(Route::CacheOnly),
            "origin" => Ok(Route::Origin),
            other => Err(format!(
                "unknown route '{other}' (cache, cache-only, origin)"
            )),
        }
    }
}

/// Which origin protocol a front reads and writes: the kind of object store, as every
/// part names it.
pub use talon_core::Backend;

/// The S3 front.
#[derive(Debug, Clone)]
pub struct S3Front {
    /// Listen address.
    pub listen: SocketAddr,
    /// Read route.
    pub route: Route,
    /// The origin this front reads and writes.
    pub backend: Backend,
    /// Path-style, or virtual-hosted under a domain (path-style always works).
    pub addressing: S3Addressing,
    /// The region reported by GetBucketLocation and HeadBucket.
    pub region: String,
}

/// The Azure Blob front.
#[derive(Debug, Clone)]
pub struct AzureFront {
    /// Listen address.
    pub listen: SocketAddr,
    /// Read route.
    pub route: Route,
    /// The origin this front reads and writes.
    pub backend: Backend,
    /// Emulator path-style, or account host names under a domain.
    pub addressing: AzureAddressing,
}

/// Protective limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Time until a response has started; an upload's body is bounded by
    /// [`Limits::upload_idle_timeout`] instead.
    pub request_deadline: Duration,
    /// Longest pause in an upload's body before the upload fails.
    pub upload_idle_timeout: Duration,
    /// Longest wait for a complete request head once a connection is ready for one:
    /// bounds a slowly sent header and an idle keep-alive connection alike.
    pub header_read_timeout: Duration,
    /// Longest time a response may make no progress towards the client before the
    /// connection is cut.
    pub write_stall_timeout: Duration,
    /// Total request header bytes accepted.
    pub max_header_bytes: usize,
    /// Largest upload accepted.
    pub max_upload_bytes: u64,
    /// Largest XML request body accepted.
    pub max_xml_bytes: usize,
    /// Most open connections per listener.
    pub max_connections: usize,
    /// Most open connections per listener from one client IP address.
    pub max_connections_per_peer: usize,
    /// Largest PutObject / Put Blob whose bytes are also pushed into the cache once the
    /// origin has stored them (write-through on a cache route, so the writer's next
    /// read is a hit); 0 turns it off. Copies kept for this are bounded all together by
    /// eight times this (a copy that does not fit is simply not kept).
    pub write_through_max_bytes: u64,
    /// Most objects whose metadata the gateway keeps (each kept until T after the
    /// origin said it, or evicted sooner by this bound: S3-FIFO, one at a time).
    pub metadata_entries: usize,
    /// About the most bytes that metadata holds (keys, ETags, headers, user metadata).
    pub metadata_bytes: u64,
    /// How many objects past a reader going through a listed prefix in key order are
    /// fetched into the cache ahead of it, and the most such fetches in flight at once
    /// ([`crate::listed_read_ahead`]); 0 (the default) fetches nothing ahead. Each
    /// object fetched ahead costs an origin request, spent on a guess where the
    /// reader stops.
    pub read_ahead_objects: usize,
    /// The largest object fetched ahead, bytes.
    pub read_ahead_object_max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_deadline: Duration::from_secs(60),
            upload_idle_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(10),
            write_stall_timeout: Duration::from_secs(30),
            max_header_bytes: 16 * 1024,
            max_upload_bytes: 5 << 30,
            max_xml_bytes: 2 << 20,
            max_connections: 4096,
            max_connections_per_peer: 512,
            write_through_max_bytes: 8 << 20,
            metadata_entries: 1_000_000,
            metadata_bytes: 512 << 20,
            read_ahead_objects: 0,
            read_ahead_object_max_bytes: 1 << 20,
        }
    }
}

impl Limits {
    /// What the fronts' listeners enforce.
    pub fn listener(&self) -> talon_listener::ListenerLimits {
        talon_listener::ListenerLimits {
            header_read_timeout: self.header_read_timeout,
            write_stall_timeout: self.write_stall_timeout,
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_peer,
            ..talon_listener::ListenerLimits::default()
        }
    }
}

/// The identities file's document: keys, their grants, public buckets
/// (`talon_protocols::access::identities_file` describes the format).
pub use talon_protocols::access::identities_file::{
    AzureAccount, GrantSpec, IdentitiesFile, S3Key,
};

/// Both fronts' identities.
#[derive(Debug, Clone)]
pub struct Identities {
    /// S3.
    pub s3: S3Identities,
    /// Azure.
    pub azure: AzureIdentity,
}

impl Identities {
    /// Reads an identities file.
    ///
    /// # Errors
    /// [`GatewayError::Config`] naming the file, when it cannot be read or parsed, a
    /// grant is wrong or a key is not base64.
    pub fn from_file(path: &Path) -> Result<Identities, GatewayError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| GatewayError::Config(format!("reading {}: {e}", path.display())))?;
        let file = IdentitiesFile::parse(&text).map_err(|e| {
            GatewayError::Config(format!("parsing {}: {}", path.display(), e.message()))
        })?;
        Identities::from_parts(file)
    }

    /// Builds identities from their parts.
    ///
    /// # Errors
    /// [`GatewayError::Config`] for a grant that is wrong or a key that is not base64.
    pub fn from_parts(file: IdentitiesFile) -> Result<Identities, GatewayError> {
        let built = file
            .build(talon_protocols::azure::EMULATOR_ACCOUNT)
            .map_err(|e| GatewayError::Config(format!("identities: {}", e.message())))?;
        Ok(Identities {
            s3: built.s3,
            azure: built.azure,
        })
    }

    /// Checks that every front that will listen can authenticate someone: a front with
    /// no credentials serves only when anonymous access was asked for explicitly.
    ///
    /// # Errors
    /// [`GatewayError::Config`] naming the front and what to configure.
    pub fn check_fronts(&self, s3_front: bool, azure_front: bool) -> Result<(), GatewayError> {
        let open = self.s3.anonymous != AnonymousAccess::Refused;
        if s3_front && self.s3.secrets.is_empty() && !open {
            return Err(GatewayError::Config(
                "the S3 front has no credentials: give S3 keys in the identities file, or allow anonymous access explicitly".into(),
            ));
        }
        let open = self.azure.anonymous != AnonymousAccess::Refused;
        if azure_front && self.azure.key.is_none() && !open {
            return Err(GatewayError::Config(
                "the Azure front has no account key: give one in the identities file, allow anonymous access explicitly, or turn the Azure front off".into(),
            ));
        }
        Ok(())
    }
}

impl Limits {
    /// The bounds the protocol servers hold every request on a front to.
    pub fn server_limits(&self) -> talon_protocols::server::ServerLimits {
        talon_protocols::server::ServerLimits {
            max_header_bytes: self.max_header_bytes,
            max_xml_bytes: self.max_xml_bytes,
            max_upload_bytes: self.max_upload_bytes,
            upload_idle_timeout: self.upload_idle_timeout,
            deadline: Some(self.request_deadline),
        }
    }
}
