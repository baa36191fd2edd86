//! `talon-protocols`: everything a Talon process needs to know about the S3 and Azure
//! Blob REST protocols, written once and shared by the origin stub, the gateway and the
//! worker's miss path.
//!
//! It owns request parsing (addressing, operations, ranges, conditional headers, listing
//! parameters), the XML bodies and error codes of both protocols and the single table
//! that maps an [`ErrorKind`] to each protocol's code and status, authentication in both
//! directions (verifying SigV4, Shared Key and SAS; signing outgoing requests), flexible
//! checksums and `aws-chunked` bodies, and the [`origin::OriginClient`]. For every
//! server that speaks either protocol (the gateway's fronts and the origin stub) it
//! owns upload verification ([`upload`]) and how answers and error answers are written
//! ([`answer`]).
//!
//! It does not own HTTP servers, routing or storage: the parsing and signing modules do
//! no I/O and hold no runtime; only [`origin`] performs network calls.

pub mod access;
pub mod answer;
pub mod azure;
pub mod block_staging;
pub mod checksum;
pub mod conditional;
pub mod content_headers;
pub mod dates;
pub mod error;
pub mod expect_continue;
pub mod listing;
pub mod multipart;
pub mod multipart_blocks;
pub mod names;
pub mod origin;
pub mod origin_spec;
pub mod range;
pub mod relay;
pub mod s3;
pub mod server;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod upload;
pub mod uri_encoding;
pub mod xml;

pub use error::{Error, ErrorKind, Result};
