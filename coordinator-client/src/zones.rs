//! Zone-aware homes: which members hold a hot block, and which of them a reader in a
//! given zone asks first.
//!
//! A block's owner is its first member in rendezvous order, whatever the zones. A hot
//! block (one the cache client spreads, `talon_cache_client::hot_blocks`) has `k`
//! homes; with zones, [`homes`] chooses them to span as many zones as it can — the
//! owner, then the best-ranked member of each zone that holds no home yet, then the
//! best-ranked of the rest — looking at most `k * SEARCH_PER_HOME` members deep, so a
//! lookup stays bounded. [`reader_order`] then puts the homes in the reader's zone
//! first: a reader reads a replica in its own zone when the block has one there, and
//! otherwise the homes in rendezvous order. Members that say no zone form one zone
//! of their own (the empty one); a reader that says none has no preference.
//!
//! This is part of what readers must agree on, like the scoring: it is frozen by the
//! golden vectors in `coordinator/tests/vectors/zones_v1.txt` ([`render_vectors`]).

use crate::placement::{PlacementMember, RendezvousPlacement};
use crate::vectors::vector_key;

/// How many members deep, per home, [`homes`] looks for members of other zones.
pub const SEARCH_PER_HOME: usize = 4;

/// The `k` homes of the block with placement key `key`, spanning zones (see the
/// [module docs](self)); the first is always the owner. Fewer when there are fewer
/// members.
pub fn homes<'m>(
    placement: &'m RendezvousPlacement,
    key: &[u8; 32],
    k: usize,
) -> Vec<&'m PlacementMember> {
    if k == 0 {
        return Vec::new();
    }
    let ranked = placement.locate_top_k_key(key, k.saturating_mul(SEARCH_PER_HOME));
    let mut chosen: Vec<&PlacementMember> = Vec::with_capacity(k);
    let mut zones: Vec<&str> = Vec::with_capacity(k);
    // The owner, then the best of each zone not yet holding a home.
    for m in &ranked {
        if chosen.len() == k {
            break;
        }
        if chosen.is_empty() || !zones.contains(&m.zone.as_str()) {
            chosen.push(m);
            zones.push(&m.zone);
        }
    }
    // Then the best-ranked of the rest.
    for m in &ranked {
        if chosen.len() == k {
            break;
        }
        if !chosen.iter().any(|c| c.id == m.id) {
            chosen.push(m);
        }
    }
    chosen
}

/// `homes` in the order a reader in `zone` asks them: those in its zone first, each
/// group in the order given (rendezvous order from [`homes`]). A reader in no zone
/// (`""`) keeps the order.
pub fn reader_order<'m>(homes: &[&'m PlacementMember], zone: &str) -> Vec<&'m PlacementMember> {
    if zone.is_empty() {
        return homes.to_vec();
    }
    let (mut near, far): (Vec<_>, Vec<_>) = homes.iter().copied().partition(|m| m.zone == zone);
    near.extend(far);
    near
}

/// The command that regenerates the committed zone vectors.
pub const GENERATE_COMMAND: &str = "cargo run -q -p talon-coordinator --example gen_zone_vectors > coordinator/tests/vectors/zones_v1.txt";

/// Keys per member set in the vectors.
pub const KEYS: u32 = 12;

/// The member sets of the vectors: nine members in three even zones, and six in
/// lopsided zones (four in `a`, one in `b`, one in none).
pub fn member_sets() -> Vec<(&'static str, Vec<PlacementMember>)> {
    let even = (0..9)
        .map(|i| {
            PlacementMember::new(format!("z{i}"), format!("10.1.0.{}:7101", i + 1), 1)
                .in_zone(["a", "b", "c"][i % 3])
        })
        .collect();
    let lopsided = [
        ("l0", "a"),
        ("l1", "a"),
        ("l2", "b"),
        ("l3", "a"),
        ("l4", ""),
        ("l5", "a"),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (id, zone))| {
        PlacementMember::new(id, format!("10.2.0.{}:7101", i + 1), 1).in_zone(zone)
    })
    .collect();
    vec![("even", even), ("lopsided", lopsided)]
}

/// The vectors file: for each member set, key, `k` of 2 and 3 and reader zone (none,
/// `a`, `b`), the homes in the order that reader asks them.
pub fn render_vectors() -> String {
    let mut out = String::from(
        "# Talon zone vectors v1: the homes of a hot block across zones, in each reader's order.\n",
    );
    out.push_str("# GENERATED, do not edit. Regenerate from the workspace root with:\n");
    out.push_str(&format!("#   {GENERATE_COMMAND}\n#\n"));
    out.push_str("# One vector per line, fields separated by one TAB; '#' lines are comments.\n");
    out.push_str("#   member  <set>  <id>  <zone or ->\n");
    out.push_str(
        "#   homes   <set>  <placement key: 64 hex>  <k>  <reader zone or ->  <ids, comma-separated>\n",
    );
    out.push_str(
        "# Keys are the placement vectors' keys (SHA-256(\"talon/placement-vector/\" || i)).\n",
    );
    for (name, members) in member_sets() {
        for m in &members {
            let zone = if m.zone.is_empty() { "-" } else { &m.zone };
            out.push_str(&format!("member\t{name}\t{}\t{zone}\n", m.id));
        }
        let placement = RendezvousPlacement::new(members);
        for i in 0..KEYS {
            let key = vector_key(i);
            for k in [2usize, 3] {
                let chosen = homes(&placement, &key, k);
                for reader in ["", "a", "b"] {
                    let ids: Vec<&str> = reader_order(&chosen, reader)
                        .iter()
                        .map(|m| m.id.as_str())
                        .collect();
                    out.push_str(&format!(
                        "homes\t{name}\t{}\t{k}\t{}\t{}\n",
                        hex::encode(key),
                        if reader.is_empty() { "-" } else { reader },
                        ids.join(",")
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str) -> RendezvousPlacement {
        let members = member_sets()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, m)| m)
            .unwrap_or_default();
        RendezvousPlacement::new(members)
    }

    #[test]
    fn homes_start_with_the_owner_and_span_zones() {
        let p = set("even");
        for i in 0..KEYS {
            let key = vector_key(i);
            let h = homes(&p, &key, 3);
            assert_eq!(
                h[0].id,
                p.locate_key(&key).map(|m| m.id.clone()).unwrap_or_default()
            );
            let mut zones: Vec<&str> = h.iter().map(|m| m.zone.as_str()).collect();
            zones.sort_unstable();
            assert_eq!(zones, ["a", "b", "c"], "three homes, one per zone");
        }
    }

    #[test]
    fn without_zones_homes_are_the_top_k() {
        let members: Vec<PlacementMember> = (0..6)
            .map(|i| PlacementMember::new(format!("n{i}"), format!("h:{}", i + 1), 1))
            .collect();
        let p = RendezvousPlacement::new(members);
        for i in 0..KEYS {
            let key = vector_key(i);
            let ids = |v: Vec<&PlacementMember>| v.iter().map(|m| m.id.clone()).collect::<Vec<_>>();
            assert_eq!(ids(homes(&p, &key, 3)), ids(p.locate_top_k_key(&key, 3)));
        }
    }

    #[test]
    fn a_reader_asks_its_own_zone_first_and_else_keeps_the_order() {
        let p = set("lopsided");
        let key = vector_key(0);
        let h = homes(&p, &key, 3);
        let in_b = reader_order(&h, "b");
        if h.iter().any(|m| m.zone == "b") {
            assert_eq!(in_b[0].zone, "b");
        }
        assert_eq!(reader_order(&h, ""), h);
        assert_eq!(reader_order(&h, "nowhere"), h);
    }
}
