//! The committed zone vectors (`tests/vectors/zones_v1.txt`) must be exactly what
//! `talon_coordinator_client::zones` generates: the homes of a hot block across zones and the
//! order a reader in each zone asks them are part of what every reader agrees on.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use talon_coordinator_client::zones::{GENERATE_COMMAND, render_vectors};

#[test]
fn committed_zone_vectors_match_the_generator() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/zones_v1.txt");
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| {
            panic!(
                "cannot read {}: {e}\nGenerate it with:\n  {GENERATE_COMMAND}",
                path.display()
            )
        })
        .replace("\r\n", "\n");
    let generated = render_vectors();
    if let Some((i, (g, c))) = generated
        .lines()
        .zip(committed.lines())
        .enumerate()
        .find(|(_, (g, c))| g != c)
    {
        panic!(
            "{} is out of date at line {}:\n  generated: {g}\n  committed: {c}\n\
             Readers of two versions would choose different homes for hot blocks; only \
             regenerate if that is intended:\n  {GENERATE_COMMAND}",
            path.display(),
            i + 1
        );
    }
    assert_eq!(generated.lines().count(), committed.lines().count());
}

#[test]
fn in_every_vector_a_reader_asks_a_home_in_its_zone_first_when_there_is_one() {
    let text = render_vectors();
    let mut zone_of = std::collections::HashMap::new();
    let mut checked = 0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('\t').collect();
        match f[0] {
            "member" => {
                zone_of.insert((f[1], f[2]), f[3]);
            }
            "homes" if f[4] != "-" => {
                let ids: Vec<&str> = f[5].split(',').collect();
                let zones: Vec<&str> = ids.iter().map(|id| zone_of[&(f[1], *id)]).collect();
                if zones.contains(&f[4]) {
                    assert_eq!(zones[0], f[4], "{line}");
                    checked += 1;
                }
            }
            _ => {}
        }
    }
    assert!(
        checked > 20,
        "only {checked} vectors had a home in the reader's zone"
    );
}
