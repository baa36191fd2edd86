//! The gateway's error at its crate boundary (starting, configuring). Request failures
//! are `talon_protocols::Error`s answered in the client's protocol.

/// Why a gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Invalid configuration.
    #[error("configuration: {0}")]
    Config(String),
    /// A listener could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The cache cluster could not be reached.
    #[error("cache cluster: {0}")]
    Cache(String),
}
