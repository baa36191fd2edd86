//! Weighted rendezvous (highest-random-weight) placement of blocks on workers.
//!
//! Every reader computes placement locally from the same member list, so the
//! scoring below is part of Talon's compatibility surface: it is frozen by the
//! golden vectors in `coordinator/tests/vectors/placement_v2.txt` (see
//! [`crate::vectors`]), and changing it would move every cached block. The
//! scoring has a version, [`PLACEMENT_VERSION`]; readers of two versions
//! would disagree on every block's owner, so a cluster never mixes them: a
//! worker reports the version it was built with when it registers, the
//! coordinator refuses one that differs, and a cache client refuses a
//! membership that names another version.
//!
//! # Scoring (version 2)
//!
//! For a 32-byte placement key `K` (from [`BlockId::placement_key`], itself a
//! SHA-256 output, so already uniform) and a member with id `I` and weight `w`:
//!
//! ```text
//! seed  = first 8 bytes, big-endian u64, of SHA-256("talon/placement/v2" || 0x00 || I as UTF-8)
//! k     = first 8 bytes, big-endian u64, of K
//! h     = fmix64(k XOR seed)                 MurmurHash3's 64-bit finalizer, below
//! u     = ((h >> 12) + 0.5) / 2^52           strictly inside (0, 1), exact in f64
//! score = w / -ln(u)
//!
//! fmix64(x): x ^= x >> 33; x *= 0xff51afd7ed558ccd; x ^= x >> 33;
//!            x *= 0xc4ceb9fe1a85ec53; x ^= x >> 33     (multiplications mod 2^64)
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
//! Version 1 computed `h` as SHA-256(K || 0x00 || I) for every member: one
//! SHA-256 per member per lookup, 18.5 µs at 256 members. Version 2 hashes
//! each id once, when the membership is built, and a lookup only mixes one
//! 64-bit word per member.
//!
//! # How a lookup avoids a logarithm per member
//!
//! Among members of equal weight the score grows with `h`, so the owner is
//! found by comparing integers within each weight class and computing the
//! score (one `ln`) only for each class's best `h` — for `locate_top_k(k)`,
//! each class's best `k`. The winners are exactly those of scoring every
//! member: a member that is not among the `k` best of its class has `k`
//! members ranked above it. A fleet of equal workers has one class, so a
//! lookup is one pass of multiply-and-compare and one logarithm.
//!
//! # Properties
//!
//! - A member's score for a key does not depend on the other members, so when
//!   a member leaves, only the blocks it owned move, and when one joins, only
//!   the blocks it now wins move (to it): about `w / Σw` of them.
//! - Input order never matters: members are sorted by id, and duplicate ids
//!   keep the smallest `(addr, weight)` entry.

use std::ops::Range;

use sha2::{Digest, Sha256};
use talon_core::BlockId;

use crate::error::CoordinatorError;

/// The version of the scoring in the [module docs](self). Readers of two
/// versions place every block differently: a cluster runs one.
pub const PLACEMENT_VERSION: u32 = 2;

/// Whether a worker or a membership that reports `version` may join this process's
/// cluster: only [`PLACEMENT_VERSION`] may.
///
/// # Errors
/// [`CoordinatorError::PlacementVersion`] for any other version.
pub fn check_placement_version(version: u32) -> Result<(), CoordinatorError> {
    if version == PLACEMENT_VERSION {
        Ok(())
    } else {
        Err(CoordinatorError::PlacementVersion(version))
    }
}

/// The domain of a member's seed (version 2).
const SEED_DOMAIN: &[u8] = b"talon/placement/v2";

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
    /// Its failure domain (empty: none said). Not part of the scoring nor of the
    /// epoch: it only orders a hot block's homes ([`crate::zones`]).
    pub zone: String,
}

impl PlacementMember {
    /// A member with the given id, address and weight, in no zone.
    pub fn new(id: impl Into<String>, addr: impl Into<String>, weight: u32) -> Self {
        Self {
            id: id.into(),
            addr: addr.into(),
            weight,
            zone: String::new(),
        }
    }

    /// The same member in `zone`.
    pub fn in_zone(mut self, zone: impl Into<String>) -> Self {
        self.zone = zone.into();
        self
    }
}

/// Weighted rendezvous hashing over a fixed set of members; see the
/// [module docs](self) for the exact scoring.
///
/// Cheap to build (one sort and one SHA-256 per member); rebuild it whenever
/// the membership epoch changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RendezvousPlacement {
    members: Vec<PlacementMember>,
    /// The members' seeds, grouped by weight class, in id order within a class.
    seeds: Vec<u64>,
    /// For each entry of `seeds`, the member's index in `members`.
    member_of: Vec<usize>,
    classes: Vec<WeightClass>,
}

/// The members of one weight, as a range of `seeds` and `member_of`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WeightClass {
    weight: u32,
    range: Range<usize>,
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
        // Stable: id order is kept within each class.
        let mut by_class: Vec<usize> = (0..members.len()).collect();
        by_class.sort_by_key(|&i| members[i].weight);
        let seeds = by_class
            .iter()
            .map(|&i| member_seed(&members[i].id))
            .collect();
        let mut classes: Vec<WeightClass> = Vec::new();
        for (at, &i) in by_class.iter().enumerate() {
            let weight = members[i].weight;
            match classes.last_mut() {
                Some(class) if class.weight == weight => class.range.end = at + 1,
                _ => classes.push(WeightClass {
                    weight,
                    range: at..at + 1,
                }),
            }
        }
        Self {
            members,
            seeds,
            member_of: by_class,
            classes,
        }
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
        let k = key_word(key);
        // (score, member index)
        let mut best: Option<(f64, usize)> = None;
        for class in &self.classes {
            let seeds = &self.seeds[class.range.clone()];
            let Some((&first, rest)) = seeds.split_first() else {
                continue;
            };
            let (mut top_h, mut top_at) = (fmix64(k ^ first), 0);
            for (at, &seed) in rest.iter().enumerate() {
                let h = fmix64(k ^ seed);
                // Strictly greater: on equal h the earlier (smaller id) stays.
                if h > top_h {
                    (top_h, top_at) = (h, at + 1);
                }
            }
            let candidate = (
                score_from_hash(top_h, class.weight),
                self.member_of[class.range.start + top_at],
            );
            if best.is_none_or(|b| ranking(&candidate, &b).is_lt()) {
                best = Some(candidate);
            }
        }
        best.map(|(_, i)| &self.members[i])
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
        let word = key_word(key);
        // (score, member index) of each class's best k.
        let mut candidates: Vec<(f64, usize)> = Vec::with_capacity(k * self.classes.len());
        // (h, position in the class), best first.
        let mut class_top: Vec<(u64, usize)> = Vec::with_capacity(k);
        for class in &self.classes {
            class_top.clear();
            for (at, &seed) in self.seeds[class.range.clone()].iter().enumerate() {
                let h = fmix64(word ^ seed);
                if class_top.len() == k {
                    if class_top.last().is_some_and(|&(t, _)| h <= t) {
                        continue;
                    }
                    class_top.pop();
                }
                // Bubble in from the end, stopping after every equal h: positions
                // grow, so the earlier (smaller id) ranks first.
                class_top.push((h, at));
                let mut slot = class_top.len() - 1;
                while slot > 0 && class_top[slot - 1].0 < h {
                    class_top.swap(slot - 1, slot);
                    slot -= 1;
                }
            }
            candidates.extend(class_top.iter().map(|&(h, at)| {
                (
                    score_from_hash(h, class.weight),
                    self.member_of[class.range.start + at],
                )
            }));
        }
        candidates.sort_unstable_by(ranking);
        candidates
            .into_iter()
            .take(k)
            .map(|(_, i)| &self.members[i])
            .collect()
    }
}

/// The ranking of `(score, member index)` pairs, best first: the higher score, then
/// the smaller id (member indexes follow id order).
fn ranking(a: &(f64, usize), b: &(f64, usize)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// `k` of the [module docs](self): the placement key's first 8 bytes.
fn key_word(key: &[u8; 32]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&key[..8]);
    u64::from_be_bytes(word)
}

/// MurmurHash3's 64-bit finalizer: a bijection whose every output bit depends on
/// every input bit, which turns `k XOR seed` into an independent-looking `h` per
/// member.
fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

/// A member's seed (version 2): the first 8 bytes (big-endian) of
/// SHA-256("talon/placement/v2" || 0x00 || id). Computed once per membership.
pub fn member_seed(id: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(SEED_DOMAIN);
    hasher.update([0u8]);
    hasher.update(id.as_bytes());
    key_word(&hasher.finalize().into())
}

/// `h` of the [module docs](self) for one member and key:
/// `fmix64(k XOR seed(id))`, the exact input of the member's score.
pub fn member_hash(key: &[u8; 32], id: &str) -> u64 {
    fmix64(key_word(key) ^ member_seed(id))
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
    score_from_hash(member_hash(key, &member.id), member.weight)
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
        // Written out from the module docs, independently of the code above.
        let seed_digest = Sha256::digest(b"talon/placement/v2\0worker-a");
        let seed = u64::from_be_bytes(seed_digest[..8].try_into().unwrap());
        let mut x = u64::from_be_bytes(k[..8].try_into().unwrap()) ^ seed;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51afd7ed558ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ceb9fe1a85ec53);
        x ^= x >> 33;
        assert_eq!(member_seed("worker-a"), seed);
        assert_eq!(member_hash(&k, "worker-a"), x);
        let u = ((x >> 12) as f64 + 0.5) / 4503599627370496.0;
        assert_eq!(score(&k, &m), 5.0 / -u.ln());
    }

    /// Every member scored, ranked by score then id: what the class-pruned lookups
    /// must answer.
    fn brute_force<'a>(p: &'a RendezvousPlacement, k: &[u8; 32]) -> Vec<&'a PlacementMember> {
        let mut all: Vec<&PlacementMember> = p.members().iter().collect();
        all.sort_by(|a, b| score(k, b).total_cmp(&score(k, a)).then(a.id.cmp(&b.id)));
        all
    }

    #[test]
    fn pruned_lookups_equal_scoring_every_member() {
        let sets: Vec<Vec<PlacementMember>> = vec![
            // One class, several classes, every weight distinct, and the bench's mix.
            members(40),
            (0..40)
                .map(|i| PlacementMember::new(format!("m{i}"), "h:1", 1 + (i % 3) as u32))
                .collect(),
            (0..25)
                .map(|i| PlacementMember::new(format!("d{i}"), "h:1", 1 + i as u32 * 37))
                .collect(),
            (0..256)
                .map(|i| PlacementMember::new(format!("worker-{i:03}"), "h:1", 1 + (i % 4) as u32))
                .collect(),
        ];
        for set in sets {
            let p = RendezvousPlacement::new(set);
            for i in 0..400 {
                let k = key(i);
                let expected = brute_force(&p, &k);
                assert_eq!(p.locate_key(&k), expected.first().copied());
                for top in [1, 2, 3, 7, p.len(), p.len() + 3] {
                    let want: Vec<_> = expected.iter().copied().take(top).collect();
                    assert_eq!(p.locate_top_k_key(&k, top), want, "key {i}, k {top}");
                }
            }
        }
    }

    #[test]
    fn equal_members_share_keys_evenly_at_256() {
        // 256 equal members, 256,000 keys: 1,000 expected each (sd about 31.6).
        let p = RendezvousPlacement::new(members(256));
        let mut owned = std::collections::HashMap::<&str, u32>::new();
        let mut second = std::collections::HashMap::<(usize, usize), u32>::new();
        let index = |m: &PlacementMember| p.members().iter().position(|x| x.id == m.id).unwrap();
        for i in 0..256_000 {
            let top = p.locate_top_k_key(&key(i), 2);
            *owned.entry(top[0].id.as_str()).or_default() += 1;
            // The runner-up relative to the owner: independent choices make every
            // distance 1..=255 equally likely.
            let d = (index(top[1]) + 256 - index(top[0])) % 256;
            *second.entry((d / 32, 0)).or_default() += 1;
        }
        assert_eq!(owned.len(), 256);
        for (id, n) in &owned {
            assert!((820..1180).contains(n), "{id} owns {n} of 256,000 keys");
        }
        // Eight buckets of distances (the first holds 31 of the 255): no member pair
        // is correlated enough to skew them.
        for ((bucket, _), n) in &second {
            let expected = 256_000.0 * if *bucket == 0 { 31.0 } else { 32.0 } / 255.0;
            let r = f64::from(*n) / expected;
            assert!((0.97..1.03).contains(&r), "distance bucket {bucket}: {n}");
        }
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
