//! The cluster's per-prefix freshness (`talon freshness`, `PUT /v1/freshness`, the admin
//! role): for objects under a prefix, a staleness bound other than the gateways' own T,
//! or none at all (`immutable`). Handed to every worker with each heartbeat answer and
//! to every gateway with the membership it polls, so all of them apply the same bound.
//! One [`SharedDocument`]: in memory, or one etcd key followed by every coordinator.

use std::sync::Arc;

use crate::etcd::Etcd;
use crate::shared_document::{ClusterDocument, Document, SharedDocument};
use talon_coordinator_client::api::{
    FreshnessRequest, FreshnessRule, FreshnessView, MAX_FRESHNESS_RULES, cluster_prefix_problem,
};
use talon_coordinator_client::error::CoordinatorError;

impl Document for FreshnessView {
    fn version(&self) -> u64 {
        self.version
    }
}

/// The cluster's freshness rules, as this coordinator knows them.
#[derive(Debug)]
pub struct ClusterFreshness {
    doc: Arc<SharedDocument<FreshnessView>>,
}

impl Default for ClusterFreshness {
    fn default() -> Self {
        ClusterFreshness {
            doc: Arc::new(SharedDocument::in_memory("freshness rules")),
        }
    }
}

impl ClusterDocument for ClusterFreshness {
    type Doc = FreshnessView;
    fn document(&self) -> &Arc<SharedDocument<FreshnessView>> {
        &self.doc
    }
}

/// Why `req` cannot be taken, or `None`.
fn request_problem(req: &FreshnessRequest) -> Option<String> {
    if req.rules.len() > MAX_FRESHNESS_RULES {
        return Some(format!("at most {MAX_FRESHNESS_RULES} freshness rules"));
    }
    for (i, rule) in req.rules.iter().enumerate() {
        if let Some(problem) = cluster_prefix_problem(&rule.prefix, "freshness") {
            return Some(problem);
        }
        if req.rules[..i].iter().any(|r| r.prefix == rule.prefix) {
            return Some(format!("the prefix {:?} is given twice", rule.prefix));
        }
    }
    None
}

impl ClusterFreshness {
    /// Rules kept in `etcd` under `<prefix>freshness/` (`prefix` ends in `/`).
    pub fn shared(etcd: Arc<Etcd>, prefix: &str) -> ClusterFreshness {
        ClusterFreshness {
            doc: Arc::new(SharedDocument::shared(
                etcd,
                format!("{prefix}freshness/current"),
                "freshness rules",
            )),
        }
    }

    /// The rules and their version.
    pub fn get(&self) -> FreshnessView {
        self.doc.get()
    }

    /// The rules alone, for a heartbeat or membership answer.
    pub fn rules(&self) -> Vec<FreshnessRule> {
        self.doc.get().rules
    }

    /// Replaces the rules (in etcd first, when shared); the new list.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidRequest`] for a prefix naming no bucket, one given
    /// twice, or too many; [`CoordinatorError::Conflict`] when `expect_version` no longer
    /// holds or a concurrent change won; [`CoordinatorError::StateStore`] when etcd cannot
    /// be reached. None changes anything.
    pub async fn set(&self, req: &FreshnessRequest) -> Result<FreshnessView, CoordinatorError> {
        if let Some(problem) = request_problem(req) {
            return Err(CoordinatorError::InvalidRequest(problem));
        }
        let next = self
            .doc
            .replace(req.expect_version, |version| FreshnessView {
                rules: req.rules.clone(),
                version,
            })
            .await?;
        tracing::info!(rules = ?next.rules, version = next.version, "cluster freshness set");
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn rule(prefix: &str, ms: Option<u64>) -> FreshnessRule {
        FreshnessRule {
            prefix: prefix.into(),
            max_staleness_ms: ms,
        }
    }

    #[tokio::test]
    async fn rules_are_replaced_whole_and_bad_ones_change_nothing() {
        let cluster = ClusterFreshness::default();
        let set = |rules: Vec<FreshnessRule>, expect: Option<u64>| FreshnessRequest {
            rules,
            expect_version: expect,
        };
        let v1 = cluster
            .set(&set(
                vec![
                    rule("s3/data/imagenet/", None),
                    rule("s3/data/logs/", Some(60_000)),
                ],
                Some(0),
            ))
            .await
            .unwrap();
        assert_eq!((v1.version, v1.rules.len()), (1, 2));
        for bad in [
            set(vec![rule("s3/", None)], None),
            set(vec![rule("s3/b/x/", None), rule("s3/b/x/", Some(1))], None),
            set(vec![rule("s3/b/x/", None)], Some(0)),
        ] {
            assert!(cluster.set(&bad).await.is_err(), "{bad:?}");
        }
        assert_eq!(cluster.get(), v1, "the refusals changed nothing");
        assert!(
            cluster
                .set(&set(Vec::new(), Some(1)))
                .await
                .unwrap()
                .rules
                .is_empty()
        );
    }
}
