//! The membership epoch: a 64-bit fingerprint of the set of workers in
//! placement.
//!
//! The epoch is a pure function of the set of `(id, addr, weight)` of the
//! members in placement (live, not draining), so every coordinator that sees
//! the same set reports the same epoch, and a reader can tell from the epoch
//! alone whether its placement is current. It changes exactly when placement
//! would change: a join, a drain, an expiry, or a new address or weight.
//! Heartbeats, statistics, zones and a re-registration with the same values
//! leave it alone.
//!
//! # Encoding (version 1)
//!
//! Members are sorted by id (then address and weight) and deduplicated by id
//! as [`RendezvousPlacement`] does;
//! every integer is big-endian:
//!
//! ```text
//! "talon/epoch/v1"                  14 bytes ASCII, domain separation
//! count: u32                        number of members
//! for each member:
//!     id:   len u32, then UTF-8
//!     addr: len u32, then UTF-8
//!     weight: u32
//! ```
//!
//! The epoch is the first 8 bytes (big-endian u64) of SHA-256 of that
//! encoding. The empty set has epoch 0, and a non-empty set whose hash
//! happens to be 0 gets 1 instead, so 0 always means "no workers". Frozen
//! by the golden vectors, like the placement scoring.

use sha2::{Digest, Sha256};

use crate::placement::{PlacementMember, RendezvousPlacement};

/// Domain separation prefix of the epoch encoding.
const EPOCH_DOMAIN: &[u8; 14] = b"talon/epoch/v1";

/// The epoch of the empty member set.
pub const EMPTY_EPOCH: u64 = 0;

/// The epoch of a set of placement members, in any order (see the
/// [module docs](self)).
pub fn placement_epoch(members: &[PlacementMember]) -> u64 {
    let canonical = RendezvousPlacement::new(members.to_vec());
    let members = canonical.members();
    if members.is_empty() {
        return EMPTY_EPOCH;
    }
    let mut hasher = Sha256::new();
    hasher.update(EPOCH_DOMAIN);
    hasher.update(len_u32(members.len()).to_be_bytes());
    for m in members {
        for field in [m.id.as_str(), m.addr.as_str()] {
            hasher.update(len_u32(field.len()).to_be_bytes());
            hasher.update(field.as_bytes());
        }
        hasher.update(m.weight.to_be_bytes());
    }
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    match u64::from_be_bytes(first) {
        EMPTY_EPOCH => 1,
        epoch => epoch,
    }
}

/// Lengths here are of ids, addresses and member counts, all far below
/// `u32::MAX`; saturate rather than wrap if one ever is not.
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn m(id: &str, addr: &str, weight: u32) -> PlacementMember {
        PlacementMember::new(id, addr, weight)
    }

    #[test]
    fn empty_set_is_zero() {
        assert_eq!(placement_epoch(&[]), 0);
        // Weight-0 members are not in placement.
        assert_eq!(placement_epoch(&[m("a", "h:1", 0)]), 0);
    }

    #[test]
    fn order_does_not_matter() {
        let a = [m("a", "h:1", 1), m("b", "h:2", 2), m("c", "h:3", 1)];
        let b = [m("c", "h:3", 1), m("a", "h:1", 1), m("b", "h:2", 2)];
        assert_eq!(placement_epoch(&a), placement_epoch(&b));
        assert_ne!(placement_epoch(&a), 0);
    }

    #[test]
    fn every_field_matters() {
        let base = [m("a", "h:1", 1), m("b", "h:2", 1)];
        let e = placement_epoch(&base);
        let variants: [&[PlacementMember]; 6] = [
            &[m("a", "h:1", 1)],
            &[m("a", "h:1", 1), m("b", "h:2", 2)],
            &[m("a", "h:1", 1), m("b", "h:3", 1)],
            &[m("a", "h:1", 1), m("c", "h:2", 1)],
            &[m("a", "h:1", 1), m("b", "h:2", 1), m("c", "h:3", 1)],
            // Same concatenated bytes, split differently.
            &[m("a", "h:1", 1), m("bh", ":2", 1)],
        ];
        for v in variants {
            assert_ne!(placement_epoch(v), e, "{v:?}");
        }
    }

    #[test]
    fn matches_the_documented_encoding() {
        let set = [m("w2", "10.0.0.2:7101", 3), m("w1", "10.0.0.1:7101", 1)];
        let mut enc = b"talon/epoch/v1".to_vec();
        enc.extend_from_slice(&2u32.to_be_bytes());
        for (id, addr, w) in [("w1", "10.0.0.1:7101", 1u32), ("w2", "10.0.0.2:7101", 3)] {
            enc.extend_from_slice(&(id.len() as u32).to_be_bytes());
            enc.extend_from_slice(id.as_bytes());
            enc.extend_from_slice(&(addr.len() as u32).to_be_bytes());
            enc.extend_from_slice(addr.as_bytes());
            enc.extend_from_slice(&w.to_be_bytes());
        }
        let d = Sha256::digest(&enc);
        let expected = u64::from_be_bytes(d[..8].try_into().unwrap());
        assert_eq!(placement_epoch(&set), expected);
        assert_eq!(RendezvousPlacement::new(set.to_vec()).epoch(), expected);
    }
}
