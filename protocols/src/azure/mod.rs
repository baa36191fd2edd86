//! The Azure Blob REST protocol: requests, Shared Key, SAS and XML.

pub mod auth;
pub mod copy_source;
pub mod request;
pub mod sas;
pub mod server;
pub mod shared_key;
pub mod xml;

/// The account name of the Azure storage emulators (Azurite), used as a default.
pub const EMULATOR_ACCOUNT: &str = "devstoreaccount1";
