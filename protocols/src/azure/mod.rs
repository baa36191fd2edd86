//! The Azure Blob REST protocol: requests, Shared Key, SAS and XML.

pub mod auth;
pub mod request;
pub mod sas;
pub mod shared_key;
pub mod xml;
