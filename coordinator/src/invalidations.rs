//! The cluster's invalidations (`talon invalidate`, `POST /v1/invalidations`, the admin
//! role): a prefix and when it was invalidated, handed to every worker with each
//! heartbeat answer and to every gateway with the membership it polls, which then
//! answer nothing under that prefix from what they learned before it.
//!
//! Kept for [`INVALIDATIONS_KEPT_MS`] (past any staleness bound: what was learned
//! before an invalidation is too old by then anyway), at most [`MAX_INVALIDATIONS`].
//! One [`SharedDocument`]: in memory, or one etcd key followed by every coordinator.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::etcd::Etcd;
use crate::shared_document::{ClusterDocument, Document, SharedDocument};
use talon_coordinator_client::api::{
    INVALIDATIONS_KEPT_MS, Invalidation, InvalidationsView, MAX_INVALIDATIONS,
    cluster_prefix_problem,
};
use talon_coordinator_client::error::CoordinatorError;

impl Document for InvalidationsView {
    fn version(&self) -> u64 {
        self.version
    }
}

/// Tries of a change that lost to a concurrent one (another coordinator's) before the
/// caller is told.
const CHANGE_TRIES: usize = 3;

/// The cluster's invalidations, as this coordinator knows them.
#[derive(Debug)]
pub struct ClusterInvalidations {
    doc: Arc<SharedDocument<InvalidationsView>>,
}

impl Default for ClusterInvalidations {
    fn default() -> Self {
        ClusterInvalidations {
            doc: Arc::new(SharedDocument::in_memory("invalidations")),
        }
    }
}

impl ClusterDocument for ClusterInvalidations {
    type Doc = InvalidationsView;
    fn document(&self) -> &Arc<SharedDocument<InvalidationsView>> {
        &self.doc
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The invalidations of `view` still handed out at `now_ms`.
fn current(view: &InvalidationsView, now_ms: u64) -> Vec<Invalidation> {
    view.invalidations
        .iter()
        .filter(|i| now_ms.saturating_sub(i.at_unix_ms) < INVALIDATIONS_KEPT_MS)
        .cloned()
        .collect()
}

impl ClusterInvalidations {
    /// Invalidations kept in `etcd` under `<prefix>invalidations/` (`prefix` ends in `/`).
    pub fn shared(etcd: Arc<Etcd>, prefix: &str) -> ClusterInvalidations {
        ClusterInvalidations {
            doc: Arc::new(SharedDocument::shared(
                etcd,
                format!("{prefix}invalidations/current"),
                "invalidations",
            )),
        }
    }

    /// The invalidations handed out now, oldest first.
    pub fn current(&self) -> Vec<Invalidation> {
        current(&self.doc.get(), unix_ms_now())
    }

    /// The document, for `GET /v1/invalidations`, without those no longer handed out.
    pub fn view(&self) -> InvalidationsView {
        let view = self.doc.get();
        InvalidationsView {
            invalidations: current(&view, unix_ms_now()),
            version: view.version,
        }
    }

    /// Invalidates `prefix` now (in etcd first, when shared); the invalidations after.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidRequest`] for a prefix that names no bucket or
    /// container; [`CoordinatorError::Conflict`] when other coordinators kept winning;
    /// [`CoordinatorError::StateStore`] when etcd cannot be reached.
    pub async fn invalidate(&self, prefix: &str) -> Result<InvalidationsView, CoordinatorError> {
        if let Some(problem) = cluster_prefix_problem(prefix, "invalidation") {
            return Err(CoordinatorError::InvalidRequest(problem));
        }
        let mut tries = 0;
        loop {
            let at_unix_ms = unix_ms_now();
            let changed = self
                .doc
                .change(|stored| {
                    let mut invalidations = current(stored, at_unix_ms);
                    invalidations.push(Invalidation {
                        prefix: prefix.to_owned(),
                        at_unix_ms,
                    });
                    let excess = invalidations.len().saturating_sub(MAX_INVALIDATIONS);
                    invalidations.drain(..excess);
                    Ok(InvalidationsView {
                        invalidations,
                        version: stored.version + 1,
                    })
                })
                .await;
            match changed {
                Ok(view) => {
                    tracing::info!(
                        prefix,
                        at_unix_ms,
                        version = view.version,
                        "prefix invalidated"
                    );
                    return Ok(view);
                }
                Err(CoordinatorError::Conflict(_)) if tries + 1 < CHANGE_TRIES => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn an_invalidation_is_kept_in_order_and_a_bad_prefix_changes_nothing() {
        let cluster = ClusterInvalidations::default();
        assert!(cluster.current().is_empty());
        let v1 = cluster.invalidate("s3/data/train/").await.unwrap();
        assert_eq!(v1.version, 1);
        let v2 = cluster.invalidate("az/acct/box/").await.unwrap();
        assert_eq!(v2.version, 2);
        let prefixes: Vec<String> = cluster.current().into_iter().map(|i| i.prefix).collect();
        assert_eq!(prefixes, ["s3/data/train/", "az/acct/box/"]);
        for bad in ["", "s3/", "gs/bucket/x", "s3/b/\u{7}"] {
            let e = cluster.invalidate(bad).await.unwrap_err();
            assert!(matches!(e, CoordinatorError::InvalidRequest(_)), "{bad:?}");
        }
        assert_eq!(cluster.view().version, 2, "the refusals changed nothing");
    }

    #[test]
    fn old_invalidations_are_no_longer_handed_out() {
        let view = InvalidationsView {
            invalidations: vec![
                Invalidation {
                    prefix: "s3/b/old/".into(),
                    at_unix_ms: 1_000,
                },
                Invalidation {
                    prefix: "s3/b/new/".into(),
                    at_unix_ms: 1_000 + INVALIDATIONS_KEPT_MS,
                },
            ],
            version: 2,
        };
        let now = 1_000 + INVALIDATIONS_KEPT_MS;
        let kept: Vec<String> = current(&view, now).into_iter().map(|i| i.prefix).collect();
        assert_eq!(kept, ["s3/b/new/"]);
    }
}
