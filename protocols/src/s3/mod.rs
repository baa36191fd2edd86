//! The S3 REST protocol: requests, SigV4 (and SigV2 verification), `aws-chunked` bodies
//! and XML.

pub mod auth;
pub mod chunked;
pub mod request;
pub mod server;
pub mod sigv2;
pub mod sigv4;
pub mod xml;
