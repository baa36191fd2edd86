//! The committed golden vectors (`tests/vectors/placement_v2.txt`) must be exactly what
//! `talon_coordinator_client::vectors` generates, and every committed line must hold when checked
//! directly against `RendezvousPlacement`, the epoch and `BlockId::placement_key`.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::PathBuf;

use talon_coordinator_client::epoch::placement_epoch;
use talon_coordinator_client::placement::{
    PlacementMember, RendezvousPlacement, member_hash, member_seed,
};
use talon_coordinator_client::vectors::{
    GENERATE_COMMAND, KEYS_PER_SET, TOP_K, member_sets, render,
};
use talon_core::{BlockId, ObjectId, ObjectVersion};

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/placement_v2.txt")
}

fn committed() -> String {
    let path = committed_path();
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| {
            panic!(
                "cannot read {}: {e}\nGenerate it from the workspace root with:\n  {GENERATE_COMMAND}",
                path.display()
            )
        })
        .replace("\r\n", "\n")
}

#[test]
fn committed_vectors_match_the_generator() {
    let generated = render().unwrap();
    let committed = committed();
    if generated == committed {
        return;
    }
    let detail = match generated
        .lines()
        .zip(committed.lines())
        .enumerate()
        .find(|(_, (g, c))| g != c)
    {
        Some((i, (g, c))) => format!(
            "first difference at line {}:\n  generated: {g}\n  committed: {c}",
            i + 1
        ),
        None => format!(
            "one is a prefix of the other ({} generated lines, {} committed)",
            generated.lines().count(),
            committed.lines().count()
        ),
    };
    panic!(
        "{} is out of date: placement scoring, the epoch encoding or the vector set changed.\n\
         {detail}\nA change to scoring or the epoch moves every cached block and splits a \
         mixed-version cluster; only regenerate if that is intended (or only vectors were \
         added), from the workspace root with:\n  {GENERATE_COMMAND}",
        committed_path().display()
    );
}

fn parse_members(field: &str) -> Vec<PlacementMember> {
    if field == "-" {
        return Vec::new();
    }
    field
        .split(',')
        .map(|m| {
            let (id, rest) = m.split_once('@').unwrap();
            let (addr, weight) = rest.rsplit_once('*').unwrap();
            PlacementMember::new(id, addr, weight.parse().unwrap())
        })
        .collect()
}

fn key_from_hex(s: &str) -> [u8; 32] {
    hex::decode(s).unwrap().try_into().unwrap()
}

fn id_list(top: &[&PlacementMember]) -> String {
    if top.is_empty() {
        "-".into()
    } else {
        top.iter()
            .map(|m| m.id.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[test]
fn committed_vectors_hold() {
    let text = committed();
    let mut sets: HashMap<String, RendezvousPlacement> = HashMap::new();
    let (mut locates, mut blocks, mut hashes, mut seeds) = (0, 0, 0, 0);
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let f: Vec<&str> = line.split('\t').collect();
        match f[0] {
            "set" => {
                let members = parse_members(f[3]);
                let epoch = u64::from_str_radix(f[2], 16).unwrap();
                assert_eq!(placement_epoch(&members), epoch, "{line}");
                // Order independence: the reversed list has the same epoch.
                let mut reversed = members.clone();
                reversed.reverse();
                assert_eq!(placement_epoch(&reversed), epoch, "{line}");
                let placement = RendezvousPlacement::new(members);
                assert_eq!(placement.epoch(), epoch);
                sets.insert(f[1].to_owned(), placement);
            }
            "locate" => {
                let placement = &sets[f[1]];
                let key = key_from_hex(f[2]);
                let top = placement.locate_top_k_key(&key, TOP_K);
                assert_eq!(id_list(&top), f[3], "{line}");
                assert_eq!(
                    placement.locate_key(&key).map(|m| m.id.as_str()),
                    top.first().map(|m| m.id.as_str())
                );
                locates += 1;
            }
            "block" => {
                let block = BlockId::new(
                    ObjectId::from_key_path(f[2]).unwrap(),
                    ObjectVersion::new(f[3]).unwrap(),
                    f[4].parse().unwrap(),
                    f[5].parse().unwrap(),
                )
                .unwrap();
                assert_eq!(hex::encode(block.placement_key()), f[6], "{line}");
                let owner = sets[f[1]].locate(&block).map_or("-", |m| m.id.as_str());
                assert_eq!(owner, f[7], "{line}");
                blocks += 1;
            }
            "seed" => {
                assert_eq!(format!("{:016x}", member_seed(f[1])), f[2], "{line}");
                seeds += 1;
            }
            "hash" => {
                let key = key_from_hex(f[1]);
                assert_eq!(format!("{:016x}", member_hash(&key, f[2])), f[3], "{line}");
                hashes += 1;
            }
            other => panic!("unknown vector kind {other:?} in {line:?}"),
        }
    }
    assert_eq!(sets.len(), member_sets().len());
    assert_eq!(locates, sets.len() * KEYS_PER_SET as usize);
    assert!(blocks > 0 && hashes > 0 && seeds > 0);
}

#[test]
fn vectors_cover_weights_and_an_empty_set() {
    let text = committed();
    assert!(text.contains("locate\tempty\t") && text.contains("\t-\n"));
    // The heaviest member of the weighted set owns the most of its keys.
    let owners: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("locate\tweighted\t"))
        .filter_map(|l| l.rsplit('\t').next()?.split(',').next())
        .collect();
    let heavy = owners.iter().filter(|o| **o == "w-e").count();
    let light = owners.iter().filter(|o| **o == "w-a").count();
    assert!(
        heavy > light,
        "w-e (weight 8) {heavy}, w-a (weight 1) {light}"
    );
}
