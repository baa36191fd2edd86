//! Who gets a place on the data plane, and when.
//!
//! A connection that has not proved the cluster secret yet is kept apart from those
//! that have: it needs a place in a pool of its own
//! ([`DataPlaneConfig::max_unauthenticated`]) for no longer than
//! [`DataPlaneConfig::hello_timeout`]; only once its Hello proof is verified does it
//! wait for one of the [`DataPlaneConfig::max_connections`] places, and only then is it
//! welcomed. So connections that never say Hello cannot hold the places gateways need
//! (the red-team review's RT-11: a few hundred such connections a second kept every
//! worker slot, and route `cache` quietly read the origin while `cache-only` answered
//! 503). Once the pool is half full, an address holding
//! [`DataPlaneConfig::max_unauthenticated_per_peer`] of its places gets no more, so a
//! few addresses cannot fill it; below that, a burst from one address (a load
//! generator, gateways behind one NAT address) is let in whole. A connection over the
//! pool, or over its address's share of a crowded pool, is closed at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::DataPlaneConfig;

/// The places of one data plane (all its rings together).
#[derive(Debug)]
pub(crate) struct Admission {
    arriving: Arc<Semaphore>,
    /// The pool's size.
    pool: usize,
    per_peer: usize,
    peers: Mutex<HashMap<IpAddr, usize>>,
    authenticated: Arc<Semaphore>,
}

/// A connection's place while it says Hello; given back when dropped.
#[derive(Debug)]
pub(crate) struct Arriving {
    admission: Arc<Admission>,
    peer: Option<IpAddr>,
    _place: OwnedSemaphorePermit,
}

impl Admission {
    pub(crate) fn new(config: &DataPlaneConfig) -> Arc<Admission> {
        let pool = config.max_unauthenticated.max(1);
        Arc::new(Admission {
            arriving: Arc::new(Semaphore::new(pool)),
            pool,
            per_peer: config.max_unauthenticated_per_peer.max(1),
            peers: Mutex::new(HashMap::new()),
            authenticated: Arc::new(Semaphore::new(config.max_connections.max(1))),
        })
    }

    /// A place for a new connection from `peer` (`None`: the local socket, which only
    /// this worker's user can reach) to say Hello; `None` when the pool is full, or half
    /// full with the peer holding its share (the caller closes the connection at once).
    pub(crate) fn arrive(self: &Arc<Self>, peer: Option<IpAddr>) -> Option<Arriving> {
        let place = self.arriving.clone().try_acquire_owned().ok()?;
        if let Some(ip) = peer {
            let crowded = self.arriving.available_permits() < self.pool / 2;
            let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            let n = peers.entry(ip).or_default();
            if crowded && *n >= self.per_peer {
                return None;
            }
            *n += 1;
        }
        Some(Arriving {
            admission: self.clone(),
            peer,
            _place: place,
        })
    }
}

impl Arriving {
    /// Trades this connection's Hello place for one of the plane's places, once its
    /// proof is verified: waits while every place is taken (a secret holder's
    /// connection is never refused for want of room, it waits its turn), with the
    /// Hello place given back first.
    pub(crate) async fn authenticated(self) -> Option<OwnedSemaphorePermit> {
        let places = self.admission.authenticated.clone();
        drop(self);
        places.acquire_owned().await.ok()
    }
}

impl Drop for Arriving {
    fn drop(&mut self) {
        if let Some(ip) = self.peer {
            let mut peers = self
                .admission
                .peers
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(n) = peers.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    peers.remove(&ip);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_crowded_pool_caps_each_address_and_a_full_one_everyone() {
        let config = DataPlaneConfig {
            max_unauthenticated: 8,
            max_unauthenticated_per_peer: 2,
            ..DataPlaneConfig::default()
        };
        let admission = Admission::new(&config);
        let (a, b): (IpAddr, IpAddr) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        // Below half full, one address may take more than its share.
        let mut held: Vec<Arriving> = (0..4).map(|_| admission.arrive(Some(a)).unwrap()).collect();
        // Half full: that address gets no more; another still does, up to its share.
        assert!(
            admission.arrive(Some(a)).is_none(),
            "over its share, crowded"
        );
        held.push(admission.arrive(Some(b)).unwrap());
        held.push(admission.arrive(Some(b)).unwrap());
        assert!(
            admission.arrive(Some(b)).is_none(),
            "over its share, crowded"
        );
        held.push(admission.arrive(None).unwrap());
        held.push(admission.arrive(None).unwrap());
        assert!(
            admission.arrive(None).is_none(),
            "over the pool, locally too"
        );
        held.clear();
        assert!(admission.arrive(Some(a)).is_some(), "places came back");
    }
}
