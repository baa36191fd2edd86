//! Weighted rendezvous (highest-random-weight) placement of blocks on workers.
//!
//! Every reader computes placement locally from the same member list, so the
//! scoring below is part of Talon's compatibility surface: it is frozen by the
//! golden vectors in `coordinator/tests/vectors/placement_v1.txt` (see
//! [`crate::vectors`]), and changing it would move every cached block.
//!
//! # Scoring (version 1)
//!
//! For a 32-byte placement key `K` (from [`BlockId::placement_key`]) and a
//! member with id `I` and weight `w`:
//!
//! ```text
//! h     = first 8 bytes, big-endian u64, of SHA-256(K || 0x00 || I as UTF-8)
//! u     = ((h >> 12) + 0.5) / 2^52          strictly inside (0, 1), exact in f64
//! score = w / -ln(u)
//! ```
//!
//! The member with the highest score owns the block; equal scores are broken
//! by the smaller id (byte order). [`RendezvousPlacement::locate_top_k`]
//! orders members the same way, so its list is the owner followed by the
//! fallbacks a reader tries when the owner is down.
//!
//! This is the logarithmic method for weighted rendezvous hashing: with
//! `u` uniform, `-ln(u) / w` is exponential with rate `w`, so a member wins a
//! share of keys exactly proportional to its weight. Only the top 52 bits of
//! `h` are used, so `u` is computed without rounding and can never reach 0
//! or 1. The natural logarithm comes from the platform's math library; it is
//! accurate to within an ulp everywhere Rust runs, so two platforms could
//! only disagree on a key whose two best scores are within an ulp of each
//! other.
//!
//! # Properties
//!
//! - A member's score for a key does not depend on the other members, so when
//!   a member leaves, only the blocks it owned move, and when one joins, only
//!   the blocks it now wins move (to it): about `w / Σw` of them.
//! - Input order never matters: members are sorted by id, and duplicate ids
//!   keep the smallest `(addr, weight)` entry.

use sha2::{Digest, Sha256};
use talon_core::BlockId;

/// A worker as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PlacementMember {
    /// Unique worker id.
    pub id: String,
    /// The worker's data-plane address (`host:port`).
    pub addr: String,
    /// Relative share of blocks, proportional to capacity. A member of weight
    /// 0 gets no share and is left out of placement.
    pub weight: u32,
}

impl PlacementMember {
    /// A member with the given id, address and weight.
    pub fn new(id: impl Into<String>, addr: impl Into<String>, weight: u32) -> Self {
        Self {
            id: id.into(),
            addr: addr.into(),
            weight,
        }
    }
}

/// Weighted rendezvous hashing over a fixed set of members; see the
/// [module docs](self) for the exact scoring.
///
/// Cheap to build (one sort); rebuild it whenever the membership epoch
/// changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RendezvousPlacement {
    members: Vec<PlacementMember>,
}

impl RendezvousPlacement {
    /// Placement over `members`, sorted by id (input order never matters).
    /// Members of weight 0 are left out; of several members with the same id,
    /// the one with the smallest `(addr, weight)` is kept. An empty set is
    /// allowed and locates nothing.
    pub fn new(mut members: Vec<PlacementMember>) -> Self {
        members.retain(|m| m.weight > 0);
        members.sort();
        members.dedup_by(|later, earlier| later.id == earlier.id);
        Self { members }
    }

    /// The members, sorted by id.
    pub fn members(&self) -> &[PlacementMember] {
        &self.members
    }

    /// Whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// How many members there are.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// The membership epoch of this member set (see [`crate::epoch`]).
    pub fn epoch(&self) -> u64 {
        crate::epoch::placement_epoch(&self.members)
    }

    /// The owner of `block`, or `None` when there are no members.
    pub fn locate(&self, block: &BlockId) -> Option<&PlacementMember> {
        self.locate_key(&block.placement_key())
    }

    /// The owner of the block with this placement key.
    pub fn locate_key(&self, key: &[u8; 32]) -> Option<&PlacementMember> {
        let prefix = key_prefix(key);
        let mut best: Option<(f64, &PlacementMember)> = None;
        for member in &self.members {
            let s = score_with(&prefix, member);
            // Members are sorted by id, so keeping the earlier one on a tie
            // breaks ties by the smaller id.
            if best.is_none_or(|(b, _)| s > b) {
                best = Some((s, member));
            }
        }
        best.map(|(_, m)| m)
    }

    /// Up to `k` distinct members for `block`, best first: the owner, then
    /// the fallbacks in the order a reader should try them.
    pub fn locate_top_k(&self, block: &BlockId, k: usize) -> Vec<&PlacementMember> {
        self.locate_top_k_key(&block.placement_key(), k)
    }

    /// [`locate_top_k`](Self::locate_top_k) for a placement key.
    pub fn locate_top_k_key(&self, key: &[u8; 32], k: usize) -> Vec<&PlacementMember> {
        let k = k.min(self.members.len());
        if k == 0 {
            return Vec::new();
        }
        let prefix = key_prefix(key);
        // (score, index): the index order is the id order, so comparing
        // indexes breaks ties by id.
        let mut scored: Vec<(f64, usize)> = self
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| (score_with(&prefix, m), i))
            .collect();
        let better = |a: &(f64, usize), b: &(f64, usize)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if k < scored.len() {
            scored.select_nth_unstable_by(k - 1, better);
            scored.truncate(k);
        }
        scored.sort_unstable_by(better);
        scored.into_iter().map(|(_, i)| &self.members[i]).collect()
    }
}

/// The hash input shared by every member for one key: `K || 0x00`.
fn key_prefix(key: &[u8; 32]) -> Sha256 {
    let mut hasher = Sha256::new();
    hasher.update(key);
    hasher.update([0u8]);
    hasher
}

fn hash_with(prefix: &Sha256, id: &str) -> u64 {
    let mut hasher = prefix.clone();
    hasher.update(id.as_bytes());
    let digest = hasher.finalize();
    let mut h = [0u8; 8];
    h.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(h)
}

fn score_with(prefix: &Sha256, member: &PlacementMember) -> f64 {
    score_from_hash(hash_with(prefix, &member.id), member.weight)
}

/// `h` of the [module docs](self): the first 8 bytes (big-endian) of
/// SHA-256(key || 0x00 || id), the exact input of a member's score.
pub fn member_hash(key: &[u8; 32], id: &str) -> u64 {
    hash_with(&key_prefix(key), id)
}

/// `w / -ln(u)` with `u = ((h >> 12) + 0.5) / 2^52`.
fn score_from_hash(h: u64, weight: u32) -> f64 {
    // (h >> 12) < 2^52, so the sum and the division by a power of two are exact.
    let u = ((h >> 12) as f64 + 0.5) / (1u64 << 52) as f64;
    f64::from(weight) / -u.ln()
}

/// A member's score for a placement key, as defined in the [module docs](self).
/// Exposed for the golden vectors and for tests of other implementations.
pub fn score(key: &[u8; 32], member: &PlacementMember) -> f64 {
    score_with(&key_prefix(key), member)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<PlacementMember> {
        (0..n)
            .map(|i| PlacementMember::new(format!("w{i:03}"), format!("10.0.0.{i}:7101"), 1))
            .collect()
    }

    fn key(i: u64) -> [u8; 32] {
        Sha256::digest(i.to_be_bytes()).into()
    }

    #[test]
    fn u_stays_strictly_inside_the_unit_interval() {
        for h in [0, 1, 4095, 4096, u64::MAX - 4096, u64::MAX] {
            let s = score_from_hash(h, 1);
            assert!(s.is_finite() && s > 0.0, "h={h} score={s}");
        }
        assert!(score_from_hash(u64::MAX, 1) > score_from_hash(u64::MAX - (1 << 12), 1));
        assert!(score_from_hash(0, 1) < score_from_hash(1 << 12, 1));
        assert_eq!(
            score_from_hash(1 << 40, 3),
            3.0 * score_from_hash(1 << 40, 1)
        );
    }

    #[test]
    fn score_matches_the_documented_formula() {
        let k = key(7);
        let m = PlacementMember::new("worker-a", "127.0.0.1:1", 5);
        let mut input = k.to_vec();
        input.push(0);
        input.extend_from_slice(b"worker-a");
        let d = Sha256::digest(&input);
        let h = u64::from_be_bytes(d[..8].try_into().unwrap());
        let u = ((h >> 12) as f64 + 0.5) / 4503599627370496.0;
        assert_eq!(score(&k, &m), 5.0 / -u.ln());
    }

    #[test]
    fn empty_placement_locates_nothing() {
        let p = RendezvousPlacement::new(Vec::new());
        assert!(p.is_empty());
        assert_eq!(p.locate_key(&key(1)), None);
        assert!(p.locate_top_k_key(&key(1), 3).is_empty());
    }

    #[test]
    fn input_order_and_duplicates_do_not_matter() {
        let mut ms = members(10);
        let a = RendezvousPlacement::new(ms.clone());
        ms.reverse();
        ms.push(PlacementMember::new("w003", "zz:1", 9));
        ms.push(PlacementMember::new("zero", "10.0.0.99:1", 0));
        let b = RendezvousPlacement::new(ms);
        assert_eq!(a, b);
        assert_eq!(a.len(), 10);
        for i in 0..200 {
            assert_eq!(a.locate_key(&key(i)), b.locate_key(&key(i)));
        }
    }

    #[test]
    fn top_k_is_distinct_ordered_and_starts_with_the_owner() {
        let p = RendezvousPlacement::new(members(16));
        for i in 0..500 {
            let k = key(i);
            let top = p.locate_top_k_key(&k, 5);
            assert_eq!(top.len(), 5);
            assert_eq!(Some(top[0]), p.locate_key(&k));
            for pair in top.windows(2) {
                assert!(score(&k, pair[0]) >= score(&k, pair[1]));
                assert_ne!(pair[0].id, pair[1].id);
            }
            // The full ranking agrees with its own prefix.
            let all = p.locate_top_k_key(&k, 100);
            assert_eq!(all.len(), 16);
            assert_eq!(&all[..5], &top[..]);
        }
        assert!(p.locate_top_k_key(&key(1), 0).is_empty());
    }

    #[test]
    fn ranking_is_score_descending_then_id() {
        let p = RendezvousPlacement::new(members(3));
        let k = key(3);
        let top = p.locate_top_k_key(&k, 3);
        let mut expected: Vec<&PlacementMember> = p.members().iter().collect();
        expected.sort_by(|a, b| {
            score(&k, b)
                .total_cmp(&score(&k, a))
                .then_with(|| a.id.cmp(&b.id))
        });
        assert_eq!(top, expected);
    }
}
