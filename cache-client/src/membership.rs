//! The membership snapshot: fetched from the coordinator, refreshed in the
//! background (the last good one kept), the workers' endpoints and local sockets,
//! the cluster's invalidations and freshness rules, and the circuit reports sent back.

use super::*;

/// Every endpoint a member may be reached at (its data plane, and its local socket
/// where it offers one), with the member's id, for the pool.
pub(crate) fn pool_members(members: &MembersResponse) -> Vec<(Endpoint, String)> {
    members
        .members
        .iter()
        .flat_map(|m| {
            let local = (!m.local.socket.is_empty())
                .then(|| (Endpoint::Local(m.local.socket.clone().into()), m.id.clone()));
            std::iter::once((Endpoint::Tcp(m.addr.clone()), m.id.clone())).chain(local)
        })
        .collect()
}

/// The local socket of each member that runs where `here` says this process runs.
pub(crate) fn local_routes(
    members: &MembersResponse,
    here: Option<&str>,
) -> HashMap<String, Endpoint> {
    let Some(here) = here else {
        return HashMap::new();
    };
    members
        .members
        .iter()
        .filter_map(|m| {
            let path = m.local.path_on(here)?.to_owned();
            Some((m.addr.clone(), Endpoint::Local(path)))
        })
        .collect()
}

/// A name for this client in the coordinator's member view: the process id and a
/// random suffix (two clients in one process, or two hosts' processes with one id, do
/// not collide).
pub(crate) fn reader_id() -> String {
    let mut suffix = [0u8; 4];
    let _ = getrandom::getrandom(&mut suffix);
    let suffix: String = suffix.iter().map(|b| format!("{b:02x}")).collect();
    format!("reader-{}-{suffix}", std::process::id())
}

/// Tells the coordinator this client's circuits, for its member view. Only once some
/// worker has failed this client (before that there is nothing to say, and a healthy
/// cluster's readers send nothing); from then on every refresh period, so that a
/// circuit that closed again is seen to close. A failed report is only logged.
pub(crate) async fn report_circuits(inner: &Inner) {
    let views = inner.health.views();
    if views.is_empty() {
        return;
    }
    let report = talon_coordinator_client::api::CircuitsReport {
        workers: views
            .into_iter()
            .map(|v| talon_coordinator_client::api::WorkerCircuit {
                addr: v.addr,
                state: v.state.name().to_owned(),
                consecutive_failures: v.consecutive_failures,
                opened: v.opened,
                deadlines_missed: v.deadlines_missed,
            })
            .collect(),
    };
    if let Err(e) = inner
        .coordinator
        .report_circuits(&inner.reader_id, &report)
        .await
    {
        tracing::debug!(error = %e, "reporting circuits to the coordinator failed");
    }
}

/// Takes the invalidations and the freshness rules a membership answer lists.
pub(crate) fn take_invalidations(
    invalidations: &talon_metadata_cache::Invalidations,
    freshness: &talon_metadata_cache::FreshnessRules,
    members: &MembersResponse,
) {
    let new = invalidations.update(
        members
            .invalidations
            .iter()
            .map(|i| (i.prefix.as_str(), i.at_unix_ms)),
    );
    if new > 0 {
        tracing::info!(new, "cluster invalidations received");
    }
    let rules = members
        .freshness
        .iter()
        .map(|r| (r.prefix.as_str(), r.max_staleness_ms));
    if freshness.update(rules) {
        tracing::info!(rules = ?members.freshness, "cluster freshness rules changed");
    }
}

pub(crate) async fn refresh(inner: &Inner) {
    match inner.coordinator.members().await.and_then(|members| {
        let placement = members.checked_placement()?;
        Ok((placement, members))
    }) {
        Ok((placement, members)) => {
            take_invalidations(&inner.invalidations, &inner.freshness, &members);
            let placement = Arc::new(placement);
            if placement.is_empty()
                && !inner
                    .placement
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_empty()
            {
                // A coordinator that just restarted knows nobody until the next round of
                // heartbeats: keep the last good snapshot rather than forget the cluster.
                tracing::debug!("the coordinator lists no workers; keeping the last snapshot");
                return;
            }
            let changed = placement.epoch()
                != inner
                    .placement
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .epoch();
            // Rebuilt every time: a local socket dropped after a failure is tried again.
            let routes = local_routes(&members, inner.here.as_deref());
            inner.pool.set_members(&pool_members(&members));
            if changed {
                let addrs: Vec<&str> = placement
                    .members()
                    .iter()
                    .map(|m| m.addr.as_str())
                    .collect();
                inner.health.retain(&addrs);
                inner.hedging.retain(&addrs);
                let addrs = placement.members().len();
                tracing::info!(
                    epoch = placement.epoch(),
                    workers = addrs,
                    local = routes.len(),
                    "membership changed"
                );
                *inner.placement.write().unwrap_or_else(|p| p.into_inner()) = placement;
            }
            *inner
                .local_routes
                .write()
                .unwrap_or_else(|p| p.into_inner()) = Arc::new(routes);
        }
        Err(e @ talon_coordinator_client::error::CoordinatorError::PlacementVersion(_)) => {
            tracing::warn!(error = %e, "membership refused; keeping the last snapshot")
        }
        Err(e) => {
            tracing::debug!(error = %e, "membership refresh failed; keeping the last snapshot")
        }
    }
}

impl CacheClient {
    /// The epoch of the membership snapshot in use.
    pub fn epoch(&self) -> u64 {
        self.placement().epoch()
    }

    pub(crate) fn placement(&self) -> Arc<RendezvousPlacement> {
        self.inner
            .placement
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Fetches the membership now (after the coordinator reported a change, or a worker
    /// failed). Keeps the old snapshot if the coordinator cannot be reached.
    pub async fn refresh_membership(&self) {
        refresh(&self.inner).await;
    }

    /// Refreshes the membership in the background after a read found no worker to
    /// answer it: at most once per refresh period however many reads fail (a hung
    /// worker fails every piece it owns, and the coordinator must not pay for each).
    pub(crate) fn spawn_refresh(&self) {
        let now = u64::try_from(self.inner.created.elapsed().as_millis()).unwrap_or(u64::MAX);
        let period = u64::try_from(self.inner.config.membership_refresh.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let last = self.inner.last_forced_refresh_ms.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < period
            || self
                .inner
                .last_forced_refresh_ms
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            if let Some(inner) = inner.upgrade() {
                refresh(&inner).await;
            }
        });
    }

    /// The members of the membership snapshot in use: `(id, data-plane address)`.
    pub fn members(&self) -> Vec<(String, String)> {
        self.placement()
            .members()
            .iter()
            .map(|m| (m.id.clone(), m.addr.clone()))
            .collect()
    }

    /// The cluster's invalidations as this client last heard them (each membership
    /// poll, every [`CacheClientConfig::membership_refresh`]): what a gateway's own
    /// metadata and listings must not answer.
    pub fn invalidations(&self) -> Arc<talon_metadata_cache::Invalidations> {
        self.inner.invalidations.clone()
    }

    /// The cluster's per-prefix freshness as this client last heard it (each
    /// membership poll): the bound a gateway applies under each prefix.
    pub fn freshness_rules(&self) -> Arc<talon_metadata_cache::FreshnessRules> {
        self.inner.freshness.clone()
    }
}
