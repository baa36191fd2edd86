//! The cluster's pinned prefixes: one list, set through the API (`PUT /v1/pins`, the
//! admin role), handed to every worker with each heartbeat answer, which pins them
//! beside its own `--pin`s within its `--pin-share` (`talon_worker::block_store`).
//!
//! In memory by default; with etcd (`--state etcd://…`) the list is one key,
//! `<prefix>pins/current`, changed by compare-and-put and followed by every
//! coordinator, so any of them may set it and all hand out the same.

use std::sync::Arc;

use crate::etcd::Etcd;
use crate::shared_document::{ClusterDocument, Document, SharedDocument};
use talon_coordinator_client::api::{MAX_PINS, PinsRequest, PinsView, pin_prefix_problem};
use talon_coordinator_client::error::CoordinatorError;

impl Document for PinsView {
    fn version(&self) -> u64 {
        self.version
    }
}

/// The cluster's pins, as this coordinator knows them.
#[derive(Debug)]
pub struct ClusterPins {
    doc: Arc<SharedDocument<PinsView>>,
}

impl Default for ClusterPins {
    fn default() -> Self {
        ClusterPins {
            doc: Arc::new(SharedDocument::in_memory("pins")),
        }
    }
}

impl ClusterDocument for ClusterPins {
    type Doc = PinsView;
    fn document(&self) -> &Arc<SharedDocument<PinsView>> {
        &self.doc
    }
}

/// Why `req` cannot be taken, or `None`.
fn request_problem(req: &PinsRequest) -> Option<String> {
    if req.prefixes.len() > MAX_PINS {
        return Some(format!("at most {MAX_PINS} pinned prefixes"));
    }
    req.prefixes.iter().find_map(|p| pin_prefix_problem(p))
}

/// Refuses a prefix in `added` whose bucket (container) the origin does not have, or
/// whose Azure account is not the origin's: such a pin keeps nothing, and a typo would
/// otherwise be accepted silently. One listing of at most one key per prefix; an origin
/// that cannot answer does not block the change (logged).
///
/// # Errors
/// [`CoordinatorError::InvalidRequest`] naming the prefix and the missing bucket.
pub async fn check_pinned_buckets(
    origins: &talon_protocols::origin::Origins,
    added: &[&str],
) -> Result<(), CoordinatorError> {
    for prefix in added {
        let bad = |why: String| CoordinatorError::InvalidRequest(format!("pin {prefix}: {why}"));
        let mut parts = prefix.splitn(4, '/');
        let (client, bucket) = match (parts.next(), parts.next(), parts.next()) {
            (Some("s3"), Some(bucket), _) => match &origins.s3 {
                Some(client) => (client, bucket),
                None => return Err(bad("no S3 origin is configured".into())),
            },
            (Some("az"), Some(account), Some(container)) => match &origins.azure {
                Some((ours, _)) if ours != account => {
                    return Err(bad(format!("the Azure origin's account is {ours}")));
                }
                Some((_, client)) => (client, container),
                None => return Err(bad("no Azure origin is configured".into())),
            },
            _ => continue, // the prefix's own form was checked before
        };
        match client.list(bucket, "", None, None, Some(1)).await {
            Err(e) if e.kind() == talon_protocols::ErrorKind::NoSuchBucket => {
                return Err(bad(format!("{bucket} does not exist at the origin")));
            }
            Err(e) => {
                tracing::warn!(%prefix, error = %e, "could not ask the origin for a pinned prefix's bucket")
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

impl ClusterPins {
    /// Pins kept in `etcd` under `<prefix>pins/` (`prefix` ends in `/`).
    pub fn shared(etcd: Arc<Etcd>, prefix: &str) -> ClusterPins {
        ClusterPins {
            doc: Arc::new(SharedDocument::shared(
                etcd,
                format!("{prefix}pins/current"),
                "pins",
            )),
        }
    }

    /// The list.
    pub fn get(&self) -> PinsView {
        self.doc.get()
    }

    /// The prefixes alone, for a heartbeat answer.
    pub fn prefixes(&self) -> Vec<String> {
        self.doc.get().prefixes
    }

    /// Replaces the list (in etcd first, when shared); the new list.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidRequest`] for a prefix that cannot be pinned or too
    /// many, [`CoordinatorError::Conflict`] when `expect_version` no longer holds or a
    /// concurrent change won, [`CoordinatorError::StateStore`] when etcd cannot be
    /// reached; none changes anything.
    pub async fn set(&self, req: &PinsRequest) -> Result<PinsView, CoordinatorError> {
        if let Some(problem) = request_problem(req) {
            return Err(CoordinatorError::InvalidRequest(problem));
        }
        let next = self
            .doc
            .replace(req.expect_version, |version| PinsView {
                prefixes: req.prefixes.clone(),
                version,
            })
            .await?;
        tracing::info!(prefixes = ?next.prefixes, version = next.version, "cluster pins set");
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(prefixes: &[&str], expect_version: Option<u64>) -> PinsRequest {
        PinsRequest {
            prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
            expect_version,
        }
    }

    #[tokio::test]
    async fn the_list_is_replaced_whole_and_a_stale_or_bad_one_changes_nothing() {
        let pins = ClusterPins::default();
        assert_eq!(pins.get(), PinsView::default());
        let v1 = pins
            .set(&request(&["s3/b/keep/", "az/acct/c/models/"], Some(0)))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v1.version, 1);
        for (bad, code) in [
            (request(&["s3/b/x/"], Some(0)), 409),
            (request(&["gs/b/x"], None), 400),
            (request(&["s3//x"], None), 400),
            (request(&["az/acct/"], None), 400),
            (request(&["s3/b/\n"], None), 400),
        ] {
            let refused = pins
                .set(&bad)
                .await
                .err()
                .unwrap_or_else(|| panic!("{bad:?}"));
            assert_eq!(refused.status_code(), code, "{bad:?}: {refused}");
        }
        let many: Vec<String> = (0..=MAX_PINS).map(|i| format!("s3/b/{i}/")).collect();
        let refused = pins
            .set(&PinsRequest {
                prefixes: many,
                expect_version: None,
            })
            .await
            .err()
            .unwrap_or_else(|| panic!("too many accepted"));
        assert_eq!(refused.status_code(), 400);
        assert_eq!(pins.get(), v1, "the refusals changed nothing");
        let v2 = pins
            .set(&request(&[], Some(1)))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v2.prefixes.len(), v2.version), (0, 2));
    }
}
