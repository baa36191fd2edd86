//! The S3 REST protocol: requests, SigV4, `aws-chunked` bodies and XML.

pub mod chunked;
pub mod request;
pub mod sigv4;
pub mod xml;
