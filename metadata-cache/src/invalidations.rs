//! Invalidations: prefixes whose entries learned before a moment must not be answered
//! (`talon invalidate`, handed out by the coordinator to every worker and gateway).
//!
//! An invalidation counts from when this process first heard of it, not from the
//! coordinator's clock: a clock behind the coordinator's could otherwise let an entry
//! learned between the two moments through. The list given with each heartbeat (or
//! membership) replaces the last; one no longer given is forgotten.

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// The invalidations in force in this process.
#[derive(Debug, Default)]
pub struct Invalidations {
    /// Whether any is in force: the lookup path reads only this when none is.
    any: AtomicBool,
    /// (key-path prefix, the coordinator's time of it, when this process heard of it).
    rules: RwLock<Vec<(String, u64, Instant)>>,
}

impl Invalidations {
    /// Takes the cluster's current list: `(key-path prefix, milliseconds since the Unix
    /// epoch at the coordinator)`. New ones count from now; known ones keep their
    /// moment; those not listed are forgotten. Returns how many are new.
    pub fn update<'a>(&self, listed: impl IntoIterator<Item = (&'a str, u64)>) -> usize {
        let now = Instant::now();
        let mut rules = self.rules.write().unwrap_or_else(|p| p.into_inner());
        let mut next = Vec::new();
        let mut new = 0;
        for (prefix, at) in listed {
            let heard = rules
                .iter()
                .find(|(p, a, _)| p == prefix && *a == at)
                .map_or_else(
                    || {
                        new += 1;
                        now
                    },
                    |(_, _, heard)| *heard,
                );
            next.push((prefix.to_owned(), at, heard));
        }
        self.any.store(!next.is_empty(), Ordering::Release);
        *rules = next;
        new
    }

    /// When this process last heard of an invalidation covering `key_path` (made only
    /// if one is in force): what was learned then or before must be asked again.
    pub fn since(&self, key_path: impl FnOnce() -> String) -> Option<Instant> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let key_path = key_path();
        let rules = self.rules.read().unwrap_or_else(|p| p.into_inner());
        rules
            .iter()
            .filter(|(prefix, _, _)| key_path.starts_with(prefix.as_str()))
            .map(|(_, _, heard)| *heard)
            .max()
    }

    /// Whether an entry of `key_path` learned at `learned` is invalidated.
    pub fn invalidated(&self, key_path: impl FnOnce() -> String, learned: Instant) -> bool {
        self.since(key_path).is_some_and(|heard| learned <= heard)
    }

    /// Whether a listing of `prefix` (a key path) learned at `learned` may list
    /// something an invalidation covers: the two prefixes overlap.
    pub fn overlaps(&self, prefix: &str, learned: Instant) -> bool {
        if !self.any.load(Ordering::Acquire) {
            return false;
        }
        let rules = self.rules.read().unwrap_or_else(|p| p.into_inner());
        rules.iter().any(|(rule, _, heard)| {
            learned <= *heard && (prefix.starts_with(rule.as_str()) || rule.starts_with(prefix))
        })
    }

    /// How many are in force.
    pub fn len(&self) -> usize {
        self.rules.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_learned_before_a_matching_invalidation_is_invalidated() {
        let invalidations = Invalidations::default();
        let before = Instant::now();
        assert!(!invalidations.invalidated(|| "s3/b/train/1".into(), before));
        assert_eq!(invalidations.update([("s3/b/train/", 1_000)]), 1);
        assert!(invalidations.invalidated(|| "s3/b/train/1".into(), before));
        assert!(!invalidations.invalidated(|| "s3/b/test/1".into(), before));
        assert!(!invalidations.invalidated(|| "s3/c/train/1".into(), before));
        // Learned after it was heard of: answered.
        let after = Instant::now() + std::time::Duration::from_millis(1);
        assert!(!invalidations.invalidated(|| "s3/b/train/1".into(), after));
        // Listings: the page's prefix and the invalidated one overlap either way.
        assert!(invalidations.overlaps("s3/b/", before));
        assert!(invalidations.overlaps("s3/b/train/x", before));
        assert!(!invalidations.overlaps("s3/b/test/", before));
    }

    #[test]
    fn the_list_given_replaces_the_last_and_keeps_known_moments() {
        let invalidations = Invalidations::default();
        let early = Instant::now();
        assert_eq!(invalidations.update([("s3/b/x/", 1)]), 1);
        let between = Instant::now() + std::time::Duration::from_millis(1);
        // The same one again keeps its moment (an entry learned since is answered);
        // another is new.
        assert_eq!(invalidations.update([("s3/b/x/", 1), ("s3/b/y/", 2)]), 1);
        assert!(!invalidations.invalidated(|| "s3/b/x/1".into(), between));
        assert!(invalidations.invalidated(|| "s3/b/x/1".into(), early));
        assert_eq!(invalidations.len(), 2);
        // No longer listed: forgotten.
        assert_eq!(invalidations.update([]), 0);
        assert!(invalidations.is_empty());
        assert!(!invalidations.invalidated(|| "s3/b/x/1".into(), early));
    }
}
