//! `talon-coordinator-client`: what a worker, a cache client or a gateway needs to talk
//! to the coordinator and to place blocks by its membership, without linking the
//! coordinator's server.
//!
//! It owns the admin API's JSON bodies and their validation ([`api`]), the typed
//! [`client`] of that API (requests signed with the cluster [`secret`]), weighted
//! rendezvous [`placement`], the co-located fast path's discovery ([`local_endpoint`]) of a `BlockId` over the live workers with its golden
//! [`vectors`], the membership [`epoch`], and the API's one error type ([`error`]).
//!
//! It does not own membership itself, the HTTP server or its metrics: those are
//! `talon-coordinator`'s, which re-exports these modules under their old paths.

pub mod api;
pub mod client;
pub mod epoch;
pub mod error;
pub mod local_endpoint;
pub mod placement;
pub mod secret;
pub mod vectors;
pub mod zones;

pub use crate::error::CoordinatorError;
