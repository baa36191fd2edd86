//! `talon-origin-stub`: one origin server that speaks both the S3 and the Azure Blob REST
//! APIs over the same objects, used by Talon's tests, demos and benches in place of a
//! cloud object store.
//!
//! It owns the serving side: listeners, routing of each protocol's operations onto one
//! [`store::ObjectStore`] (a folder on disk plus deterministic [`generated`] objects),
//! authentication of clients when credentials are configured, injectable [`faults`],
//! and [`metrics`] that let a test prove what reached the origin. Everything about the
//! protocols themselves — parsing, XML, signatures, error codes — comes from
//! `talon-protocols`; this crate does not define protocol behaviour of its own.
//!
//! Start one in-process with [`start`], or run the `talon-origin-stub` binary.

pub mod admin;
pub mod azure;
pub mod backend;
pub mod body;
pub mod cli;
pub mod faults;
pub mod front;
pub mod generated;
pub mod metrics;
pub mod s3;
pub mod server;
pub mod store;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use talon_protocols::access::AnonymousAccess;
use talon_protocols::azure::auth::AzureIdentity;
use talon_protocols::azure::request::AzureAddressing;
use talon_protocols::azure::shared_key::AccountKey;
use talon_protocols::s3::auth::S3Identities;
use talon_protocols::s3::request::S3Addressing;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::faults::{FaultConfig, Faults};
use crate::front::StubState;
use crate::generated::GeneratedObject;
use crate::metrics::Metrics;
use crate::store::ObjectStore;

/// The account name the Azure emulators use, and the stub's default.
pub const DEFAULT_AZURE_ACCOUNT: &str = "devstoreaccount1";
/// The well-known key of the Azure emulators (public, for local use only).
pub const EMULATOR_AZURE_KEY: &str = talon_protocols::azure::shared_key::EMULATOR_ACCOUNT_KEY;

/// How to run a stub.
#[derive(Debug, Clone)]
pub struct StubConfig {
    /// The data folder; `None` uses a temporary folder removed at shutdown.
    pub data_dir: Option<PathBuf>,
    /// Generated objects.
    pub generated: Vec<GeneratedObject>,
    /// S3 listener address; `None` disables the S3 front.
    pub s3_listen: Option<SocketAddr>,
    /// Azure listener address; `None` disables the Azure front.
    pub azure_listen: Option<SocketAddr>,
    /// Admin listener address; `None` disables it.
    pub admin_listen: Option<SocketAddr>,
    /// S3 addressing (path-style, or virtual-hosted under a domain).
    pub s3_addressing: S3Addressing,
    /// Azure addressing (emulator path-style, or account host names under a domain).
    pub azure_addressing: AzureAddressing,
    /// The region S3 reports.
    pub region: String,
    /// S3 credentials (access key → secret); empty for anonymous access.
    pub s3_credentials: BTreeMap<String, String>,
    /// The Azure account name.
    pub azure_account: String,
    /// The Azure account key; `None` for anonymous access.
    pub azure_key: Option<AccountKey>,
    /// Initial faults.
    pub faults: FaultConfig,
    /// Most concurrent connections per listener.
    pub max_connections: usize,
    /// When set, changing faults (`PUT /admin/faults`) needs `Authorization: Bearer
    /// <token>`; reading metrics and faults stays open.
    pub admin_token: Option<String>,
}

impl Default for StubConfig {
    fn default() -> Self {
        let loopback = |port| Some(SocketAddr::from(([127, 0, 0, 1], port)));
        StubConfig {
            data_dir: None,
            generated: Vec::new(),
            s3_listen: loopback(0),
            azure_listen: loopback(0),
            admin_listen: loopback(0),
            s3_addressing: S3Addressing::PathStyle,
            azure_addressing: AzureAddressing::PathStyle,
            region: "us-east-1".into(),
            s3_credentials: BTreeMap::new(),
            azure_account: DEFAULT_AZURE_ACCOUNT.into(),
            azure_key: None,
            faults: FaultConfig::default(),
            max_connections: 4096,
            admin_token: None,
        }
    }
}

/// Why a stub could not start.
#[derive(Debug, thiserror::Error)]
pub enum StubError {
    /// A listener could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The data folder could not be prepared.
    #[error("cannot use the data folder {path}: {source}")]
    DataDir {
        /// The folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The fault settings are invalid.
    #[error("invalid faults: {0}")]
    Faults(String),
}

/// A running stub.
#[derive(Debug)]
pub struct RunningStub {
    /// Where the S3 front listens.
    pub s3_addr: Option<SocketAddr>,
    /// Where the Azure front listens.
    pub azure_addr: Option<SocketAddr>,
    /// Where the admin endpoints listen.
    pub admin_addr: Option<SocketAddr>,
    state: Arc<StubState>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    _temp_dir: Option<tempfile::TempDir>,
}

impl RunningStub {
    /// `http://addr` of the S3 front.
    pub fn s3_url(&self) -> Option<String> {
        self.s3_addr.map(|a| format!("http://{a}"))
    }

    /// The Azure account's base URL (`http://addr/<account>`).
    pub fn azure_url(&self) -> Option<String> {
        self.azure_addr
            .map(|a| format!("http://{a}/{}", self.state.azure_identity.account))
    }

    /// `http://addr` of the admin endpoints.
    pub fn admin_url(&self) -> Option<String> {
        self.admin_addr.map(|a| format!("http://{a}"))
    }

    /// The counters, for in-process tests.
    pub fn metrics(&self) -> &Metrics {
        &self.state.metrics
    }

    /// The live fault settings.
    pub fn faults(&self) -> &Faults {
        &self.state.faults
    }

    /// The data folder.
    pub fn data_dir(&self) -> &std::path::Path {
        self.state.store.root()
    }

    /// Stops accepting, drains in-flight requests (bounded), and returns.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

async fn bind(addr: Option<SocketAddr>) -> Result<Option<TcpListener>, StubError> {
    match addr {
        None => Ok(None),
        Some(addr) => TcpListener::bind(addr)
            .await
            .map(Some)
            .map_err(|source| StubError::Bind { addr, source }),
    }
}

/// Starts a stub: binds every configured listener (port 0 picks a free port) and serves
/// until [`RunningStub::shutdown`].
///
/// # Errors
/// [`StubError`] when a listener cannot bind or the data folder cannot be used.
pub async fn start(mut config: StubConfig) -> Result<RunningStub, StubError> {
    config.faults.validate().map_err(StubError::Faults)?;
    let (root, temp_dir) = match &config.data_dir {
        Some(dir) => (dir.clone(), None),
        None => {
            let temp = tempfile::Builder::new()
                .prefix("talon-origin-stub-")
                .tempdir()
                .map_err(|source| StubError::DataDir {
                    path: std::env::temp_dir(),
                    source,
                })?;
            (temp.path().to_owned(), Some(temp))
        }
    };
    if root.is_file() {
        return Err(StubError::DataDir {
            path: root.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                "it is a file, not a folder: give a folder (made if missing)",
            ),
        });
    }
    std::fs::create_dir_all(&root).map_err(|source| StubError::DataDir {
        path: root.clone(),
        source,
    })?;
    let store =
        // Taken, not copied: a generated dataset may hold millions of objects.
        ObjectStore::new(&root, std::mem::take(&mut config.generated)).map_err(|source| StubError::DataDir {
            path: root.clone(),
            source,
        })?;
    let s3 = bind(config.s3_listen).await?;
    let azure = bind(config.azure_listen).await?;
    let admin = bind(config.admin_listen).await?;
    let local = |l: &Option<TcpListener>| l.as_ref().and_then(|l| l.local_addr().ok());
    let (s3_addr, azure_addr, admin_addr) = (local(&s3), local(&azure), local(&admin));
    let state = Arc::new(StubState {
        store: Arc::new(store),
        faults: Faults::new(config.faults.clone()),
        metrics: Arc::new(Metrics::default()),
        region: config.region.clone(),
        s3_addressing: config.s3_addressing.clone(),
        azure_addressing: config.azure_addressing.clone(),
        s3_identities: config.s3_credentials.iter().fold(
            S3Identities {
                // A stub without credentials is a local test origin: open to everything.
                anonymous: if config.s3_credentials.is_empty() {
                    AnonymousAccess::ReadWrite
                } else {
                    AnonymousAccess::Refused
                },
                regions: vec![config.region.clone()],
                ..S3Identities::default()
            },
            |ids, (key, secret)| ids.with_unrestricted_key(key, secret),
        ),
        azure_identity: AzureIdentity::unrestricted(
            config.azure_account.clone(),
            config.azure_key.clone(),
            if config.azure_key.is_none() {
                AnonymousAccess::ReadWrite
            } else {
                AnonymousAccess::Refused
            },
        ),
        azure_endpoint: azure_addr
            .map(|a| format!("http://{a}/{}", config.azure_account))
            .unwrap_or_default(),
    });
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let max = config.max_connections;
    if let Some(listener) = s3 {
        let st = state.clone();
        let handler = move |req, peer| s3::handle(st.clone(), req, peer);
        let front = Some(talon_core::Backend::S3);
        tasks.push(server::spawn(
            listener,
            handler,
            shutdown_rx.clone(),
            max,
            front,
        ));
    }
    if let Some(listener) = azure {
        let st = state.clone();
        let handler = move |req, peer| azure::handle(st.clone(), req, peer);
        let front = Some(talon_core::Backend::Azure);
        tasks.push(server::spawn(
            listener,
            handler,
            shutdown_rx.clone(),
            max,
            front,
        ));
    }
    if let Some(listener) = admin {
        let st = state.clone();
        let token = config.admin_token.clone();
        let handler = move |req, _peer| admin::handle(st.clone(), token.clone(), req);
        tasks.push(server::spawn(
            listener,
            handler,
            shutdown_rx.clone(),
            64,
            None,
        ));
    }
    Ok(RunningStub {
        s3_addr,
        azure_addr,
        admin_addr,
        state,
        shutdown,
        tasks,
        _temp_dir: temp_dir,
    })
}
