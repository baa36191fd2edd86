//! Golden placement vectors: fixed member sets and keys with their owners,
//! fallback order, epochs and member hashes.
//!
//! [`render`] is the single source of the vectors. The committed file
//! `coordinator/tests/vectors/placement_v2.txt` is its output, produced by
//! [`GENERATE_COMMAND`]; the `golden` integration test fails when the file
//! and the generator disagree, so placement and epochs can never drift
//! silently between versions. Another implementation can check itself
//! against the file alone (its format is described in the file's header).

use std::fmt::Write as _;

use sha2::{Digest, Sha256};
use talon_core::{BlockId, ObjectId, ObjectVersion};

use crate::epoch::placement_epoch;
use crate::placement::{
    PLACEMENT_VERSION, PlacementMember, RendezvousPlacement, member_hash, member_seed,
};

/// The command that regenerates the committed vector file, run from the
/// workspace root.
pub const GENERATE_COMMAND: &str = "cargo run -q -p talon-coordinator --example gen_placement_vectors > coordinator/tests/vectors/placement_v2.txt";

/// How many fallbacks each `locate` vector lists (or all members, if fewer).
pub const TOP_K: usize = 4;

/// Keys per member set.
pub const KEYS_PER_SET: u32 = 24;

/// A named member set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSet {
    /// Unique name.
    pub name: &'static str,
    /// The members, in the order the generator lists them (not sorted).
    pub members: Vec<PlacementMember>,
}

/// The deterministic key number `i` of the vectors: SHA-256 of
/// `"talon/placement-vector/" || decimal(i)`.
pub fn vector_key(i: u32) -> [u8; 32] {
    Sha256::digest(format!("talon/placement-vector/{i}")).into()
}

fn equal(n: usize, prefix: &str) -> Vec<PlacementMember> {
    (0..n)
        .map(|i| {
            PlacementMember::new(
                format!("{prefix}{i:02}"),
                format!("10.0.{}.{}:7101", i / 250, i % 250 + 1),
                1,
            )
        })
        .collect()
}

/// The member sets: empty, one worker, three, eight, a weighted five (in a
/// shuffled order), and 32.
pub fn member_sets() -> Vec<MemberSet> {
    let weighted = [("w-c", 3), ("w-a", 1), ("w-e", 8), ("w-b", 2), ("w-d", 4)]
        .into_iter()
        .map(|(id, w)| PlacementMember::new(id, format!("{id}.talon.local:7101"), w))
        .collect();
    vec![
        MemberSet {
            name: "empty",
            members: Vec::new(),
        },
        MemberSet {
            name: "one",
            members: vec![PlacementMember::new("solo", "127.0.0.1:7101", 1)],
        },
        MemberSet {
            name: "three",
            members: equal(3, "worker-"),
        },
        MemberSet {
            name: "eight",
            members: equal(8, "w"),
        },
        MemberSet {
            name: "weighted",
            members: weighted,
        },
        MemberSet {
            name: "thirty-two",
            members: equal(32, "node"),
        },
    ]
}

/// Real blocks, to tie placement to `BlockId::placement_key`.
///
/// # Errors
/// Never in practice: the names are valid constants.
pub fn blocks() -> Result<Vec<BlockId>, talon_core::Error> {
    let mib = 1u64 << 20;
    let s3 = ObjectId::s3("my-bucket", "data/part-0001.parquet")?;
    let az = ObjectId::azure("myaccount", "mycontainer", "dir/blob.bin")?;
    let etag = ObjectVersion::new("\"9b2cf535f27731c974343645a3985328\"")?;
    let version = ObjectVersion::new("0x8DC1234567890AB")?;
    Ok(vec![
        BlockId::new(s3.clone(), etag.clone(), 0, 256 * mib)?,
        BlockId::new(s3.clone(), etag.clone(), 256 * mib, 256 * mib)?,
        BlockId::new(s3, etag, 4096 * mib, 256 * mib)?,
        BlockId::new(az.clone(), version.clone(), 0, 4 * mib)?,
        BlockId::new(az, version, 12 * mib, 4 * mib)?,
    ])
}

fn member_list(members: &[PlacementMember]) -> String {
    if members.is_empty() {
        return "-".into();
    }
    members
        .iter()
        .map(|m| format!("{}@{}*{}", m.id, m.addr, m.weight))
        .collect::<Vec<_>>()
        .join(",")
}

fn ids(members: &[&PlacementMember]) -> String {
    if members.is_empty() {
        return "-".into();
    }
    members
        .iter()
        .map(|m| m.id.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The committed file's text.
///
/// # Errors
/// Only if [`blocks`] fails, which it does not.
pub fn render() -> Result<String, talon_core::Error> {
    let mut out = String::new();
    let w = &mut out;
    // Writing to a String cannot fail.
    let _ = writeln!(
        w,
        "# Talon placement vectors v{PLACEMENT_VERSION}: weighted rendezvous placement and membership epochs."
    );
    let _ = writeln!(
        w,
        "# GENERATED, do not edit. Regenerate from the workspace root with:"
    );
    let _ = writeln!(w, "#   {GENERATE_COMMAND}");
    let _ = writeln!(w, "#");
    let _ = writeln!(
        w,
        "# One vector per line, fields separated by one TAB; '#' lines are comments."
    );
    let _ = writeln!(
        w,
        "#   set     <set>  <epoch: 16 hex>  <members: id@addr*weight, comma-separated, or ->"
    );
    let _ = writeln!(
        w,
        "#   locate  <set>  <placement key: 64 hex>  <owner, then fallbacks: up to {TOP_K} ids, comma-separated, or ->"
    );
    let _ = writeln!(
        w,
        "#   block   <set>  <key path>  <version>  <block offset>  <block size>  <placement key: 64 hex>  <owner id>"
    );
    let _ = writeln!(
        w,
        "#   seed    <member id>  <seed: first 8 bytes of SHA-256(\"talon/placement/v2\" || 00 || id), 16 hex>"
    );
    let _ = writeln!(
        w,
        "#   hash    <placement key: 64 hex>  <member id>  <h: fmix64(first 8 bytes of key XOR seed), 16 hex>"
    );
    let _ = writeln!(
        w,
        "# Keys are SHA-256(\"talon/placement-vector/\" || i) for i = 0..{KEYS_PER_SET}."
    );
    let sets = member_sets();
    let blocks = blocks()?;
    for set in &sets {
        let placement = RendezvousPlacement::new(set.members.clone());
        let _ = writeln!(w, "# set {}: {} members", set.name, placement.len());
        let _ = writeln!(
            w,
            "set\t{}\t{:016x}\t{}",
            set.name,
            placement_epoch(&set.members),
            member_list(&set.members)
        );
        for i in 0..KEYS_PER_SET {
            let key = vector_key(i);
            let top = placement.locate_top_k_key(&key, TOP_K);
            let _ = writeln!(
                w,
                "locate\t{}\t{}\t{}",
                set.name,
                hex::encode(key),
                ids(&top)
            );
        }
        for block in &blocks {
            let owner = placement.locate(block).map_or("-", |m| m.id.as_str());
            let _ = writeln!(
                w,
                "block\t{}\t{}\t{}\t{}\t{}\t{}\t{owner}",
                set.name,
                block.object(),
                block.version(),
                block.block_offset(),
                block.block_size(),
                hex::encode(block.placement_key()),
            );
        }
    }
    let _ = writeln!(w, "# member seeds, computed once per membership");
    for id in ["solo", "w00", "w-e", "node31", "worker-00"] {
        let _ = writeln!(w, "seed\t{id}\t{:016x}", member_seed(id));
    }
    let _ = writeln!(w, "# member hashes, the exact input of the score");
    for i in 0..4 {
        let key = vector_key(i);
        for id in ["solo", "w00", "w-e", "node31"] {
            let _ = writeln!(
                w,
                "hash\t{}\t{id}\t{:016x}",
                hex::encode(key),
                member_hash(&key, id)
            );
        }
    }
    Ok(out)
}
