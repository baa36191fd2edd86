//! Placement moves as little as possible: removing a member moves only the keys it
//! owned, adding one moves about 1/(N+1) of the keys, all to the newcomer, and shares
//! follow weights.

#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use sha2::{Digest, Sha256};
use talon_coordinator_client::placement::{PlacementMember, RendezvousPlacement};

const KEYS: u64 = 20_000;

fn key(seed: u64, i: u64) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(seed.to_be_bytes());
    h.update(i.to_be_bytes());
    h.finalize().into()
}

fn workers(n: usize) -> Vec<PlacementMember> {
    (0..n)
        .map(|i| PlacementMember::new(format!("worker-{i}"), format!("10.1.0.{i}:7101"), 1))
        .collect()
}

fn owners(p: &RendezvousPlacement, seed: u64, keys: u64) -> Vec<String> {
    (0..keys)
        .map(|i| p.locate_key(&key(seed, i)).unwrap().id.clone())
        .collect()
}

#[test]
fn removing_a_member_moves_only_its_keys() {
    for n in [8, 16] {
        let all = workers(n);
        let before = owners(&RendezvousPlacement::new(all.clone()), 1, KEYS);
        for gone in [0, n / 2, n - 1] {
            let gone_id = all[gone].id.clone();
            let mut rest = all.clone();
            rest.remove(gone);
            let after = owners(&RendezvousPlacement::new(rest), 1, KEYS);
            let mut moved = 0;
            for (b, a) in before.iter().zip(&after) {
                if *b == gone_id {
                    assert_ne!(*a, gone_id);
                    moved += 1;
                } else {
                    assert_eq!(b, a, "a key not owned by {gone_id} moved");
                }
            }
            assert!(moved > 0, "{gone_id} owned nothing");
        }
    }
}

#[test]
fn adding_a_member_moves_about_one_share_all_to_it() {
    for n in [8, 16] {
        let base = workers(n);
        let before = owners(&RendezvousPlacement::new(base.clone()), 2, KEYS);
        let mut grown = base;
        grown.push(PlacementMember::new("newcomer", "10.1.1.1:7101", 1));
        let after = owners(&RendezvousPlacement::new(grown), 2, KEYS);
        let mut moved = 0u64;
        for (b, a) in before.iter().zip(&after) {
            if b != a {
                assert_eq!(a, "newcomer", "a key moved between old members");
                moved += 1;
            }
        }
        let expected = KEYS as f64 / (n as f64 + 1.0);
        let ratio = moved as f64 / expected;
        assert!(
            (0.5..1.5).contains(&ratio),
            "n={n}: {moved} moved, expected about {expected:.0}"
        );
    }
}

#[test]
fn shares_follow_weights() {
    let mut members = workers(8);
    members[3].weight = 2;
    let p = RendezvousPlacement::new(members);
    let mut counts = std::collections::HashMap::<String, u64>::new();
    for id in owners(&p, 3, KEYS) {
        *counts.entry(id).or_default() += 1;
    }
    // Total weight 9: the weight-2 member expects 2/9, each other 1/9.
    let heavy = counts["worker-3"] as f64;
    let light: f64 = counts
        .iter()
        .filter(|(id, _)| *id != "worker-3")
        .map(|(_, c)| *c as f64)
        .sum::<f64>()
        / 7.0;
    let ratio = heavy / light;
    assert!((1.6..2.4).contains(&ratio), "weight 2 got {ratio:.2}x");
    for (id, c) in &counts {
        let expected = KEYS as f64 * if id == "worker-3" { 2.0 } else { 1.0 } / 9.0;
        let r = *c as f64 / expected;
        assert!(
            (0.8..1.2).contains(&r),
            "{id}: {c} keys, expected {expected:.0}"
        );
    }
}

#[test]
fn top_k_fallbacks_survive_the_owner_leaving() {
    // When the owner leaves, the new owner is the old second choice.
    let all = workers(16);
    let full = RendezvousPlacement::new(all.clone());
    for i in 0..2000 {
        let k = key(4, i);
        let top = full.locate_top_k_key(&k, 3);
        let rest: Vec<PlacementMember> =
            all.iter().filter(|m| m.id != top[0].id).cloned().collect();
        let without = RendezvousPlacement::new(rest);
        let new_top = without.locate_top_k_key(&k, 2);
        assert_eq!(new_top[0].id, top[1].id);
        assert_eq!(new_top[1].id, top[2].id);
    }
}

fn member_set() -> impl Strategy<Value = Vec<PlacementMember>> {
    prop::collection::btree_map("[a-z0-9]{1,8}", 1u32..5, 2..12).prop_map(|m| {
        m.into_iter()
            .map(|(id, w)| {
                let addr = format!("{id}:7101");
                PlacementMember::new(id, addr, w)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_removal_moves_only_the_removed_members_keys(
        members in member_set(),
        pick in any::<prop::sample::Index>(),
        seed in any::<u64>(),
    ) {
        let gone = pick.index(members.len());
        let gone_id = members[gone].id.clone();
        let full = RendezvousPlacement::new(members.clone());
        let mut rest = members;
        rest.remove(gone);
        let smaller = RendezvousPlacement::new(rest);
        for i in 0..500 {
            let k = key(seed, i);
            let before = full.locate_key(&k).unwrap();
            let after = smaller.locate_key(&k).unwrap();
            if before.id != gone_id {
                prop_assert_eq!(&before.id, &after.id);
            }
        }
    }

    #[test]
    fn input_order_never_matters(members in member_set(), seed in any::<u64>()) {
        let forward = RendezvousPlacement::new(members.clone());
        let mut reversed = members;
        reversed.reverse();
        let backward = RendezvousPlacement::new(reversed);
        prop_assert_eq!(forward.epoch(), backward.epoch());
        for i in 0..200 {
            let k = key(seed, i);
            prop_assert_eq!(forward.locate_top_k_key(&k, 3), backward.locate_top_k_key(&k, 3));
        }
    }
}
