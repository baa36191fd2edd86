//! Per-prefix freshness: for objects under a prefix, another staleness bound than the
//! process's own, or none (`immutable`), the same in every gateway and worker (the
//! coordinator hands the rules out; `talon freshness`). The longest matching prefix
//! wins; the list given with each heartbeat (or membership) replaces the last.

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The bound an `immutable` prefix gets: far past any other, yet within what a Stat's
/// max age can say on the wire (a `u32` of milliseconds, 49 days).
pub const IMMUTABLE: Duration = Duration::from_secs(30 * 24 * 3600);

/// The per-prefix freshness rules in force in this process.
#[derive(Debug, Default)]
pub struct FreshnessRules {
    /// Whether any rule is in force: the lookup path reads only this when none is.
    any: AtomicBool,
    /// (key-path prefix, bound), longest prefix first.
    rules: RwLock<Vec<(String, Duration)>>,
}

impl FreshnessRules {
    /// Takes the cluster's rules: `(key-path prefix, bound in ms, None for immutable)`.
    /// Returns whether they changed.
    pub fn update<'a>(&self, listed: impl IntoIterator<Item = (&'a str, Option<u64>)>) -> bool {
        let mut next: Vec<(String, Duration)> = listed
            .into_iter()
            .map(|(prefix, ms)| {
                let bound = ms.map_or(IMMUTABLE, |ms| Duration::from_millis(ms).min(IMMUTABLE));
                (prefix.to_owned(), bound)
            })
            .collect();
        next.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        let mut rules = self.rules.write().unwrap_or_else(|p| p.into_inner());
        if *rules == next {
            return false;
        }
        self.any.store(!next.is_empty(), Ordering::Release);
        *rules = next;
        true
    }

    /// The staleness bound for `key_path` (made only if a rule is in force): the
    /// longest matching rule's, else `default`.
    pub fn bound(&self, key_path: impl FnOnce() -> String, default: Duration) -> Duration {
        if !self.any.load(Ordering::Acquire) {
            return default;
        }
        let key_path = key_path();
        let rules = self.rules.read().unwrap_or_else(|p| p.into_inner());
        rules
            .iter()
            .find(|(prefix, _)| key_path.starts_with(prefix.as_str()))
            .map_or(default, |(_, bound)| *bound)
    }

    /// The longest bound any rule in force gives, if any rule is.
    pub fn longest(&self) -> Option<Duration> {
        let rules = self.rules.read().unwrap_or_else(|p| p.into_inner());
        rules.iter().map(|(_, bound)| *bound).max()
    }

    /// How many rules are in force.
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
    fn the_longest_matching_prefix_gives_the_bound() {
        let rules = FreshnessRules::default();
        let t = Duration::from_secs(5);
        assert_eq!(rules.bound(|| "s3/b/imagenet/1".into(), t), t);
        assert!(rules.update([("s3/b/", Some(60_000)), ("s3/b/imagenet/", None)]));
        assert_eq!(rules.bound(|| "s3/b/imagenet/1".into(), t), IMMUTABLE);
        assert_eq!(
            rules.bound(|| "s3/b/logs/1".into(), t),
            Duration::from_secs(60)
        );
        assert_eq!(rules.bound(|| "s3/c/x".into(), t), t);
        assert_eq!(rules.longest(), Some(IMMUTABLE));
        assert!(!rules.update([("s3/b/imagenet/", None), ("s3/b/", Some(60_000))]));
        assert!(rules.update([]));
        assert!(rules.is_empty());
        assert_eq!(rules.bound(|| "s3/b/imagenet/1".into(), t), t);
    }
}
