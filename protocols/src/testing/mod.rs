//! Test support for every [`ObjectBackend`](crate::server::ObjectBackend) (feature
//! `testing`, never in a shipped binary; the in-memory backend also serves this crate's
//! own unit tests of the servers): the one conformance suite that drives the S3
//! and Azure Blob servers through HTTP ([`suite`]), an in-memory backend that is the
//! interface's reference implementation ([`memory`]), and a way to serve any backend
//! with the two servers on loopback ([`serve`]). The suite runs unchanged against the
//! in-memory backend (here), the origin stub's store (`origin-stub/tests`) and the
//! gateway's backend (`gateway/tests`).

pub mod memory;
#[cfg(feature = "testing")]
pub mod serve;
pub mod suite;
