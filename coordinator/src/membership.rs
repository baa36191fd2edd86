//! Membership as soft state: who the workers are, whether they are live or
//! draining, and what they last reported.
//!
//! Nothing here is persisted. Workers register and then heartbeat; a worker
//! whose last heartbeat (or registration) is at least the expiry window old
//! is dropped. After a coordinator restart every heartbeat answers "unknown
//! worker", each worker registers again, and membership is whole again after
//! one heartbeat round.
//!
//! With shared state (`--state etcd://…`, [`crate::shared_membership`]) this table is
//! each coordinator's mirror of etcd: the durable part of each member (its
//! [`MemberRecord`]) comes from etcd's watch, expiry is etcd's (a lease per member), and
//! only the reported statistics and the readers' circuit reports stay local.
//!
//! Time is passed in explicitly (`now`), so tests drive expiry without
//! sleeping. Every operation that takes `now` first drops the members that
//! are past the window, so what callers observe never depends on when the
//! background sweep (see [`crate::start`]) last ran.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use talon_coordinator_client::api::{
    CircuitsReport, ClusterSummary, HeartbeatRequest, HeartbeatResponse, MemberCircuits,
    MemberInfo, MemberState, MembersResponse, RegisterRequest,
};
use talon_coordinator_client::epoch::placement_epoch;
use talon_coordinator_client::error::CoordinatorError;
use talon_coordinator_client::placement::{PlacementMember, RendezvousPlacement};

/// Counts of membership events since the coordinator started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MembershipCounters {
    /// Accepted registrations (new members and re-registrations).
    pub registrations: u64,
    /// Rejected registrations (invalid input).
    pub rejected_registrations: u64,
    /// Accepted heartbeats.
    pub heartbeats: u64,
    /// Heartbeats from unknown workers (answered 404).
    pub unknown_heartbeats: u64,
    /// Members that went from live to draining.
    pub drains: u64,
    /// Members dropped for missing heartbeats.
    pub expirations: u64,
    /// Times the epoch changed.
    pub epoch_changes: u64,
}

#[derive(Debug, Clone)]
struct Member {
    /// The instance that registered the id ([`RegisterRequest::instance`]).
    instance: String,
    addr: String,
    weight: u32,
    zone: String,
    state: MemberState,
    last_seen: Instant,
    bytes_cached: u64,
    capacity_bytes: u64,
    hits: u64,
    misses: u64,
    data_plane: String,
    local: talon_coordinator_client::local_endpoint::LocalEndpoint,
}

/// What a member is, apart from what it reports: the part a shared state store holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemberRecord {
    /// The instance that registered the id.
    pub instance: String,
    /// Data-plane address.
    pub addr: String,
    /// Placement weight.
    pub weight: u32,
    /// Failure-domain label.
    pub zone: String,
    /// Live or draining.
    pub state: MemberState,
    /// Capacity in bytes, as registered.
    pub capacity_bytes: u64,
    /// The data plane it serves on.
    #[serde(default)]
    pub data_plane: String,
    /// Its local socket for readers on its host.
    #[serde(default)]
    pub local: talon_coordinator_client::local_endpoint::LocalEndpoint,
}

impl MemberRecord {
    /// A live member as `req` registers it.
    pub fn registered(req: &RegisterRequest) -> MemberRecord {
        MemberRecord {
            instance: req.instance.clone(),
            addr: req.addr.clone(),
            weight: req.weight,
            zone: req.zone.clone(),
            state: MemberState::Live,
            capacity_bytes: req.capacity_bytes,
            data_plane: req.data_plane.clone(),
            local: req.local.clone(),
        }
    }
}

/// Most readers whose circuit reports are kept at once.
pub const MAX_READERS: usize = 1024;

/// A reader's last circuit report and when it came.
#[derive(Debug)]
struct ReaderReport {
    at: Instant,
    report: CircuitsReport,
}

#[derive(Debug, Default)]
struct Inner {
    members: BTreeMap<String, Member>,
    /// Each reader's last circuit report, by reader id; dropped after the expiry window
    /// like a silent worker.
    readers: BTreeMap<String, ReaderReport>,
    epoch: u64,
    counters: MembershipCounters,
}

impl Inner {
    fn placement_members(&self) -> Vec<PlacementMember> {
        self.members
            .iter()
            .filter(|(_, m)| m.state == MemberState::Live)
            .map(|(id, m)| PlacementMember::new(id.clone(), m.addr.clone(), m.weight))
            .collect()
    }

    /// Recomputes the epoch after a change that may have touched placement.
    fn refresh_epoch(&mut self) {
        let epoch = placement_epoch(&self.placement_members());
        if epoch != self.epoch {
            tracing::info!(
                old = format_args!("{}", self.epoch),
                new = format_args!("{epoch}"),
                live = self
                    .members
                    .values()
                    .filter(|m| m.state == MemberState::Live)
                    .count(),
                "membership epoch changed"
            );
            self.epoch = epoch;
            self.counters.epoch_changes += 1;
        }
    }

    /// Drops members whose last heartbeat is at least `expiry` before `now`.
    fn expire(&mut self, expiry: Duration, now: Instant, members: bool) -> Vec<String> {
        self.readers
            .retain(|_, r| now.saturating_duration_since(r.at) < expiry);
        if !members {
            return Vec::new();
        }
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| now.saturating_duration_since(m.last_seen) >= expiry)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            if let Some(m) = self.members.remove(id) {
                tracing::warn!(
                    id = %id,
                    addr = %m.addr,
                    silent_ms = now.saturating_duration_since(m.last_seen).as_millis(),
                    "worker missed heartbeats and was dropped"
                );
            }
        }
        if !expired.is_empty() {
            self.counters.expirations += expired.len() as u64;
            self.refresh_epoch();
        }
        expired
    }
}

/// The in-memory member table, safe to share between threads.
#[derive(Debug)]
pub struct Membership {
    expiry: Duration,
    max_members: usize,
    /// False when a shared store expires members ([`Membership::mirror`]).
    expires_members: bool,
    inner: Mutex<Inner>,
}

impl Membership {
    /// An empty membership that drops members silent for `expiry`.
    pub fn new(expiry: Duration) -> Self {
        Self {
            expiry,
            max_members: usize::MAX,
            expires_members: true,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The same membership as a mirror of a shared store: members leave only when
    /// [`remove_expired`](Self::remove_expired) says so (the store's lease expired);
    /// readers' reports still expire here.
    pub fn mirror(mut self) -> Self {
        self.expires_members = false;
        self
    }

    /// The most members it holds at once.
    pub fn max_members(&self) -> usize {
        self.max_members
    }

    /// How many members it holds now.
    pub fn len(&self) -> usize {
        self.lock().members.len()
    }

    /// Whether it holds no member.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The durable part of member `id`, if it is one.
    pub fn record(&self, id: &str) -> Option<MemberRecord> {
        self.lock().members.get(id).map(|m| MemberRecord {
            instance: m.instance.clone(),
            addr: m.addr.clone(),
            weight: m.weight,
            zone: m.zone.clone(),
            state: m.state,
            capacity_bytes: m.capacity_bytes,
            data_plane: m.data_plane.clone(),
            local: m.local.clone(),
        })
    }

    /// Sets member `id` to `record` as the shared store holds it: added (live since
    /// `now`), or updated keeping its reported statistics when the same instance still
    /// holds it. Returns the epoch.
    pub fn upsert(&self, id: &str, record: MemberRecord, now: Instant) -> u64 {
        let mut inner = self.lock();
        let kept = inner
            .members
            .get(id)
            .filter(|m| m.instance == record.instance)
            .map(|m| (m.last_seen, m.bytes_cached, m.hits, m.misses));
        let (last_seen, bytes_cached, hits, misses) = kept.unwrap_or((now, 0, 0, 0));
        if kept.is_none() {
            tracing::info!(id, addr = %record.addr, zone = %record.zone, "worker joined (shared state)");
        }
        inner.members.insert(
            id.to_owned(),
            Member {
                instance: record.instance,
                addr: record.addr,
                weight: record.weight,
                zone: record.zone,
                state: record.state,
                last_seen,
                bytes_cached,
                capacity_bytes: record.capacity_bytes,
                hits,
                misses,
                data_plane: record.data_plane,
                local: record.local,
            },
        );
        inner.refresh_epoch();
        inner.epoch
    }

    /// Counts a registration the shared store accepted.
    pub fn record_registration(&self) {
        self.lock().counters.registrations += 1;
    }

    /// Drops member `id` because the shared store expired it; whether it was one.
    pub fn remove_expired(&self, id: &str) -> bool {
        let mut inner = self.lock();
        let Some(m) = inner.members.remove(id) else {
            return false;
        };
        tracing::warn!(id, addr = %m.addr, "worker missed heartbeats and was dropped (its lease expired)");
        inner.counters.expirations += 1;
        inner.refresh_epoch();
        true
    }

    /// Keeps only the members in `ids` (after a full read of the shared store); drops
    /// the rest as expired. Returns how many it dropped.
    pub fn retain_only(&self, ids: &[String]) -> usize {
        let gone: Vec<String> = self
            .lock()
            .members
            .keys()
            .filter(|id| !ids.contains(id))
            .cloned()
            .collect();
        gone.iter().filter(|id| self.remove_expired(id)).count()
    }

    /// The same membership, holding at most `max` members at once.
    pub fn with_max_members(mut self, max: usize) -> Self {
        self.max_members = max;
        self
    }

    /// The expiry window.
    pub fn expiry(&self) -> Duration {
        self.expiry
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The table stays consistent even if a holder panicked: every
        // mutation is a single assignment or map operation.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a worker, or updates it if the id is known (a worker that
    /// restarted, or re-registers after a 404). The member is live afterwards
    /// and its reported statistics start from zero. Returns the epoch.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidRegistration`] for invalid input, which
    /// changes nothing.
    pub fn register(&self, req: &RegisterRequest, now: Instant) -> Result<u64, CoordinatorError> {
        let mut inner = self.lock();
        inner.expire(self.expiry, now, self.expires_members);
        if let Err(e) = req.validate() {
            inner.counters.rejected_registrations += 1;
            return Err(e);
        }
        match inner.members.get(&req.id) {
            Some(existing) if existing.instance != req.instance => {
                inner.counters.rejected_registrations += 1;
                return Err(bound_elsewhere(&req.id));
            }
            None if inner.members.len() >= self.max_members => {
                inner.counters.rejected_registrations += 1;
                return Err(CoordinatorError::Conflict(format!(
                    "the membership is full ({} members)",
                    self.max_members
                )));
            }
            _ => {}
        }
        let member = Member {
            instance: req.instance.clone(),
            addr: req.addr.clone(),
            weight: req.weight,
            zone: req.zone.clone(),
            state: MemberState::Live,
            last_seen: now,
            bytes_cached: 0,
            capacity_bytes: req.capacity_bytes,
            hits: 0,
            misses: 0,
            data_plane: req.data_plane.clone(),
            local: req.local.clone(),
        };
        match inner.members.insert(req.id.clone(), member) {
            None => tracing::info!(
                id = %req.id, addr = %req.addr, weight = req.weight, zone = %req.zone,
                "worker joined"
            ),
            Some(old) => tracing::info!(
                id = %req.id, addr = %req.addr, weight = req.weight, zone = %req.zone,
                was = old.state.as_str(),
                "worker registered again"
            ),
        }
        inner.counters.registrations += 1;
        inner.refresh_epoch();
        Ok(inner.epoch)
    }

    /// Counts a registration rejected before it reached [`register`](Self::register)
    /// (a body that is not a registration at all).
    pub fn record_rejected_registration(&self) {
        self.lock().counters.rejected_registrations += 1;
    }

    /// Records a heartbeat with the worker's latest statistics. A heartbeat
    /// with `draining: true` takes a live member out of placement; draining
    /// is sticky (see [`talon_coordinator_client::api`]).
    ///
    /// # Errors
    /// [`CoordinatorError::UnknownWorker`] if `id` is not a member (it must
    /// register again).
    pub fn heartbeat(
        &self,
        id: &str,
        stats: &HeartbeatRequest,
        now: Instant,
    ) -> Result<HeartbeatResponse, CoordinatorError> {
        let mut inner = self.lock();
        inner.expire(self.expiry, now, self.expires_members);
        let Some(member) = inner.members.get_mut(id) else {
            inner.counters.unknown_heartbeats += 1;
            return Err(CoordinatorError::UnknownWorker(id.to_owned()));
        };
        if member.instance != stats.instance {
            return Err(bound_elsewhere(id));
        }
        member.last_seen = now;
        member.bytes_cached = stats.bytes_cached;
        if stats.capacity_bytes > 0 {
            member.capacity_bytes = stats.capacity_bytes;
        }
        member.hits = stats.hits;
        member.misses = stats.misses;
        let started_draining = stats.draining && member.state == MemberState::Live;
        if started_draining {
            member.state = MemberState::Draining;
        }
        let state = member.state;
        inner.counters.heartbeats += 1;
        if started_draining {
            tracing::info!(id, "worker reported draining");
            inner.counters.drains += 1;
            inner.refresh_epoch();
        }
        Ok(HeartbeatResponse {
            epoch: inner.epoch,
            state,
            warm: Vec::new(),
            pins: Vec::new(),
            invalidations: Vec::new(),
            freshness: Vec::new(),
        })
    }

    /// Takes a member out of placement; it stays listed (and keeps serving
    /// what it holds) until it stops heartbeating. Idempotent. Returns the
    /// epoch. `instance` is the caller's instance when a worker drains itself,
    /// `None` for an admin.
    ///
    /// # Errors
    /// [`CoordinatorError::UnknownWorker`] if `id` is not a member,
    /// [`CoordinatorError::Conflict`] if it is bound to another instance.
    pub fn drain(&self, id: &str, instance: Option<&str>) -> Result<u64, CoordinatorError> {
        let mut inner = self.lock();
        let Some(member) = inner.members.get_mut(id) else {
            return Err(CoordinatorError::UnknownWorker(id.to_owned()));
        };
        if instance.is_some_and(|i| i != member.instance) {
            return Err(bound_elsewhere(id));
        }
        if member.state == MemberState::Live {
            member.state = MemberState::Draining;
            tracing::info!(id, "worker drained");
            inner.counters.drains += 1;
            inner.refresh_epoch();
        }
        Ok(inner.epoch)
    }

    /// Drops every member whose last heartbeat is at least the expiry window
    /// before `now`; returns their ids.
    pub fn expire(&self, now: Instant) -> Vec<String> {
        self.lock().expire(self.expiry, now, self.expires_members)
    }

    /// Keeps `report` as reader `reader`'s circuits, replacing its last. Returns the
    /// epoch.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidRequest`] for a bad reader id or report;
    /// [`CoordinatorError::Conflict`] when [`MAX_READERS`] other readers have reported
    /// within the expiry window. Neither changes anything.
    pub fn report_circuits(
        &self,
        reader: &str,
        report: CircuitsReport,
        now: Instant,
    ) -> Result<u64, CoordinatorError> {
        talon_coordinator_client::api::validate_id(reader)
            .map_err(|e| CoordinatorError::InvalidRequest(format!("reader {e}")))?;
        report.validate()?;
        let mut inner = self.lock();
        inner.expire(self.expiry, now, self.expires_members);
        if inner.readers.len() >= MAX_READERS && !inner.readers.contains_key(reader) {
            return Err(CoordinatorError::Conflict(format!(
                "{MAX_READERS} readers already report their circuits"
            )));
        }
        inner
            .readers
            .insert(reader.to_owned(), ReaderReport { at: now, report });
        Ok(inner.epoch)
    }

    /// The current epoch (without expiring anything).
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Everything about the membership at `now`, after dropping expired
    /// members.
    pub fn snapshot(&self, now: Instant) -> MembershipSnapshot {
        let mut inner = self.lock();
        inner.expire(self.expiry, now, self.expires_members);
        let mut circuits: BTreeMap<&str, MemberCircuits> = BTreeMap::new();
        for reader in inner.readers.values() {
            for w in &reader.report.workers {
                let c = circuits.entry(w.addr.as_str()).or_default();
                c.readers += 1;
                c.open += u32::from(w.state != "closed");
                c.opened = c.opened.saturating_add(w.opened);
                c.deadlines_missed = c.deadlines_missed.saturating_add(w.deadlines_missed);
            }
        }
        let members = inner
            .members
            .iter()
            .map(|(id, m)| MemberInfo {
                id: id.clone(),
                addr: m.addr.clone(),
                weight: m.weight,
                zone: m.zone.clone(),
                state: m.state,
                last_heartbeat_ms_ago: u64::try_from(
                    now.saturating_duration_since(m.last_seen).as_millis(),
                )
                .unwrap_or(u64::MAX),
                bytes_cached: m.bytes_cached,
                capacity_bytes: m.capacity_bytes,
                hits: m.hits,
                misses: m.misses,
                data_plane: m.data_plane.clone(),
                local: m.local.clone(),
                circuits: circuits.get(m.addr.as_str()).copied().unwrap_or_default(),
            })
            .collect();
        MembershipSnapshot {
            epoch: inner.epoch,
            members,
            counters: inner.counters,
        }
    }
}

/// A consistent copy of the membership at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct MembershipSnapshot {
    /// The membership epoch.
    pub epoch: u64,
    /// Live and draining members, sorted by id.
    pub members: Vec<MemberInfo>,
    /// Event counts since start.
    pub counters: MembershipCounters,
}

impl MembershipSnapshot {
    /// One member by id.
    pub fn member(&self, id: &str) -> Option<&MemberInfo> {
        self.members
            .binary_search_by(|m| m.id.as_str().cmp(id))
            .ok()
            .map(|i| &self.members[i])
    }

    /// How many members are in `state`.
    pub fn count(&self, state: MemberState) -> usize {
        self.members.iter().filter(|m| m.state == state).count()
    }

    /// Placement over the live members.
    pub fn placement(&self) -> RendezvousPlacement {
        self.members_response().placement()
    }

    /// Cluster totals.
    pub fn cluster(&self) -> ClusterSummary {
        ClusterSummary::from_members(self.epoch, &self.members)
    }

    /// The `GET /v1/members` body.
    pub fn members_response(&self) -> MembersResponse {
        MembersResponse {
            epoch: self.epoch,
            placement_version: talon_coordinator_client::placement::PLACEMENT_VERSION,
            members: self.members.clone(),
            invalidations: Vec::new(),
            freshness: Vec::new(),
            geometry: None,
        }
    }
}

fn bound_elsewhere(id: &str) -> CoordinatorError {
    CoordinatorError::Conflict(format!(
        "worker id {id:?} is bound to another instance until that one stops heartbeating"
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const EXPIRY: Duration = Duration::from_secs(5);

    fn reg(id: &str, addr: &str, weight: u32) -> RegisterRequest {
        RegisterRequest {
            id: id.into(),
            addr: addr.into(),
            weight,
            zone: "z1".into(),
            capacity_bytes: 1000,
            instance: String::new(),
            data_plane: String::new(),
            local: Default::default(),
            placement_version: talon_coordinator_client::placement::PLACEMENT_VERSION,
            page_size: 0,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn register_then_list() {
        let m = Membership::new(EXPIRY);
        let t0 = Instant::now();
        assert_eq!(m.epoch(), 0);
        let e1 = m.register(&reg("b", "h:2", 1), t0).unwrap();
        let e2 = m.register(&reg("a", "h:1", 2), t0).unwrap();
        assert_ne!(e1, 0);
        assert_ne!(e1, e2);
        let snap = m.snapshot(t0 + ms(250));
        assert_eq!(snap.epoch, e2);
        let ids: Vec<&str> = snap.members.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        let a = snap.member("a").unwrap();
        assert_eq!(
            (a.weight, a.state, a.capacity_bytes),
            (2, MemberState::Live, 1000)
        );
        assert_eq!(a.last_heartbeat_ms_ago, 250);
        assert_eq!(snap.placement().epoch(), snap.epoch);
        assert_eq!(snap.counters.registrations, 2);
        assert!(snap.member("c").is_none());
    }

    #[test]
    fn invalid_registration_changes_nothing() {
        let m = Membership::new(EXPIRY);
        let t0 = Instant::now();
        m.register(&reg("a", "h:1", 1), t0).unwrap();
        let before = m.snapshot(t0);
        for bad in [reg("", "h:1", 1), reg("b", "nope", 1), reg("a", "h:1", 0)] {
            assert!(matches!(
                m.register(&bad, t0),
                Err(CoordinatorError::InvalidRegistration(_))
            ));
        }
        let after = m.snapshot(t0);
        assert_eq!(after.members, before.members);
        assert_eq!(after.epoch, before.epoch);
        assert_eq!(after.counters.rejected_registrations, 3);
    }

    #[test]
    fn heartbeats_and_stats_do_not_change_the_epoch() {
        let m = Membership::new(EXPIRY);
        let t0 = Instant::now();
        let e = m.register(&reg("a", "h:1", 1), t0).unwrap();
        let stats = HeartbeatRequest {
            bytes_cached: 10,
            capacity_bytes: 0,
            hits: 7,
            misses: 3,
            draining: false,
            instance: String::new(),
            warm_done: Vec::new(),
        };
        let r = m.heartbeat("a", &stats, t0 + ms(1000)).unwrap();
        assert_eq!(r.epoch, e);
        assert_eq!(r.state, MemberState::Live);
        // Same values again, and a different zone and capacity: no change.
        let mut again = reg("a", "h:1", 1);
        again.zone = "z2".into();
        again.capacity_bytes = 5;
        assert_eq!(m.register(&again, t0 + ms(1500)).unwrap(), e);
        let snap = m.snapshot(t0 + ms(1500));
        assert_eq!(snap.counters.epoch_changes, 1);
        let a = snap.member("a").unwrap();
        assert_eq!((a.zone.as_str(), a.capacity_bytes, a.hits), ("z2", 5, 0));
    }

    #[test]
    fn heartbeat_updates_stats_and_capacity() {
        let m = Membership::new(EXPIRY);
        let t0 = Instant::now();
        m.register(&reg("a", "h:1", 1), t0).unwrap();
        let stats = HeartbeatRequest {
            bytes_cached: 10,
            capacity_bytes: 2000,
            hits: 7,
            misses: 3,
            draining: false,
            instance: String::new(),
            warm_done: Vec::new(),
        };
        m.heartbeat("a", &stats, t0).unwrap();
        let a = m.snapshot(t0).members[0].clone();
        assert_eq!(
            (a.bytes_cached, a.capacity_bytes, a.hits, a.misses),
            (10, 2000, 7, 3)
        );
    }

    #[test]
    fn address_or_weight_change_changes_the_epoch() {
        let m = Membership::new(EXPIRY);
        let t0 = Instant::now();
        let e1 = m.register(&reg("a", "h:1", 1), t0).unwrap();
        let e2 = m.register(&reg("a", "h:9", 1), t0).unwrap();
        let e3 = m.register(&reg("a", "h:9", 4), t0).unwrap();
        let e4 = m.register(&reg("a", "h:1", 1), t0).unwrap();
        assert_ne!(e1, e2);
        assert_ne!(e2, e3);
        assert_eq!(e4, e1);
    }

    #[test]
    fn unknown_heartbeat_is_an_error() {
        let m = Membership::new(EXPIRY);
        let err = m
            .heartbeat("ghost", &HeartbeatRequest::default(), Instant::now())
            .unwrap_err();
        assert!(matches!(err, CoordinatorError::UnknownWorker(id) if id == "ghost"));
        assert!(matches!(
            m.drain("ghost", None),
            Err(CoordinatorError::UnknownWorker(_))
        ));
        assert_eq!(m.snapshot(Instant::now()).counters.unknown_heartbeats, 1);
    }

    #[test]
    fn drain_leaves_placement_but_stays_listed_and_is_sticky() {
        let m = Membership::new(EXPIRY);
        let t0 = Instant::now();
        let only_a = m.register(&reg("a", "h:1", 1), t0).unwrap();
        let both = m.register(&reg("b", "h:2", 1), t0).unwrap();
        let drained = m.drain("b", None).unwrap();
        assert_eq!(drained, only_a);
        assert_ne!(drained, both);
        assert_eq!(m.drain("b", None).unwrap(), drained, "idempotent");
        let r = m
            .heartbeat("b", &HeartbeatRequest::default(), t0 + ms(100))
            .unwrap();
        assert_eq!(
            r.state,
            MemberState::Draining,
            "heartbeat does not undo a drain"
        );
        let snap = m.snapshot(t0 + ms(100));
        assert_eq!(snap.count(MemberState::Draining), 1);
        assert_eq!(snap.member("b").unwrap().state, MemberState::Draining);
        let placement = snap.placement();
        assert_eq!(placement.len(), 1);
        assert_eq!(placement.members()[0].id, "a");
        assert_eq!(snap.counters.drains, 1);
        // A new registration brings it back.
        assert_eq!(m.register(&reg("b", "h:2", 1), t0 + ms(200)).unwrap(), both);
    }

    #[test]
    fn heartbeat_can_start_draining() {
        let m = Membership::new(EXPIRY);
        let t0 = Instant::now();
        m.register(&reg("a", "h:1", 1), t0).unwrap();
        let hb = HeartbeatRequest {
            draining: true,
            ..HeartbeatRequest::default()
        };
        let r = m.heartbeat("a", &hb, t0).unwrap();
        assert_eq!(r.state, MemberState::Draining);
        assert_eq!(r.epoch, 0);
    }

    #[test]
    fn expiry_drops_silent_members_exactly_at_the_window() {
        let m = Membership::new(EXPIRY);
        let t0 = Instant::now();
        m.register(&reg("a", "h:1", 1), t0).unwrap();
        m.register(&reg("b", "h:2", 1), t0).unwrap();
        let only_a = {
            let probe = Membership::new(EXPIRY);
            probe.register(&reg("a", "h:1", 1), t0).unwrap()
        };
        m.heartbeat("a", &HeartbeatRequest::default(), t0 + ms(3000))
            .unwrap();
        assert!(m.expire(t0 + EXPIRY - ms(1)).is_empty());
        assert_eq!(m.expire(t0 + EXPIRY), vec!["b".to_owned()]);
        assert_eq!(m.epoch(), only_a);
        let snap = m.snapshot(t0 + EXPIRY);
        assert_eq!(snap.members.len(), 1);
        assert_eq!(snap.counters.expirations, 1);
        // a heartbeated at +3s, so it lives until +8s.
        assert!(m.expire(t0 + ms(7999)).is_empty());
        assert_eq!(m.snapshot(t0 + ms(8000)).members.len(), 0);
        assert_eq!(m.epoch(), 0);
    }

    #[test]
    fn every_operation_sees_expiry_without_a_sweep() {
        let m = Membership::new(EXPIRY);
        let t0 = Instant::now();
        m.register(&reg("a", "h:1", 1), t0).unwrap();
        // No expire() call: the late heartbeat itself finds the member gone.
        assert!(matches!(
            m.heartbeat("a", &HeartbeatRequest::default(), t0 + EXPIRY),
            Err(CoordinatorError::UnknownWorker(_))
        ));
        assert_eq!(m.register(&reg("a", "h:1", 1), t0 + EXPIRY).unwrap(), {
            let probe = Membership::new(EXPIRY);
            probe.register(&reg("a", "h:1", 1), t0).unwrap()
        });
    }

    #[test]
    fn draining_members_expire_too() {
        let m = Membership::new(EXPIRY);
        let t0 = Instant::now();
        m.register(&reg("a", "h:1", 1), t0).unwrap();
        m.drain("a", None).unwrap();
        assert_eq!(m.expire(t0 + EXPIRY), vec!["a".to_owned()]);
        // Draining already took it out of placement: expiry moves no epoch.
        assert_eq!(m.snapshot(t0 + EXPIRY).counters.epoch_changes, 2);
    }

    #[test]
    fn equal_sets_give_equal_epochs_on_independent_coordinators() {
        let t0 = Instant::now();
        let one = Membership::new(EXPIRY);
        let two = Membership::new(Duration::from_secs(60));
        for id in ["a", "b", "c"] {
            one.register(&reg(id, &format!("{id}:1"), 1), t0).unwrap();
        }
        for id in ["c", "x", "a", "b"] {
            two.register(&reg(id, &format!("{id}:1"), 1), t0).unwrap();
        }
        assert_ne!(one.epoch(), two.epoch());
        two.drain("x", None).unwrap();
        assert_eq!(one.epoch(), two.epoch());
    }

    #[test]
    fn readers_circuits_show_on_the_member_they_name_until_they_go_quiet() {
        use talon_coordinator_client::api::WorkerCircuit;
        let m = Membership::new(EXPIRY);
        let t0 = Instant::now();
        m.register(&reg("a", "a:1", 1), t0).unwrap();
        m.register(&reg("b", "b:1", 1), t0).unwrap();
        let circuit = |addr: &str, state: &str, opened| WorkerCircuit {
            addr: addr.into(),
            state: state.into(),
            consecutive_failures: 0,
            opened,
            deadlines_missed: opened,
        };
        let report = |workers| CircuitsReport { workers };
        m.report_circuits("gw-1", report(vec![circuit("a:1", "open", 2)]), t0)
            .unwrap();
        m.report_circuits(
            "gw-2",
            report(vec![
                circuit("a:1", "closed", 1),
                circuit("gone:1", "open", 1),
            ]),
            t0 + ms(2000),
        )
        .unwrap();
        let snap = m.snapshot(t0 + ms(3000));
        assert_eq!(
            snap.member("a").unwrap().circuits,
            MemberCircuits {
                readers: 2,
                open: 1,
                opened: 3,
                deadlines_missed: 3
            }
        );
        assert_eq!(
            snap.member("b").unwrap().circuits,
            MemberCircuits::default()
        );
        // A newer report replaces the reader's last.
        m.report_circuits(
            "gw-1",
            report(vec![circuit("a:1", "closed", 2)]),
            t0 + ms(3000),
        )
        .unwrap();
        assert_eq!(
            m.snapshot(t0 + ms(3000)).member("a").unwrap().circuits.open,
            0
        );
        // A bad report or reader changes nothing.
        assert!(matches!(
            m.report_circuits("gw/1", report(vec![]), t0 + ms(3000)),
            Err(CoordinatorError::InvalidRequest(_))
        ));
        assert!(matches!(
            m.report_circuits(
                "gw-1",
                report(vec![circuit("a:1", "ajar", 9)]),
                t0 + ms(3000)
            ),
            Err(CoordinatorError::InvalidRequest(_))
        ));
        assert_eq!(
            m.snapshot(t0 + ms(3000))
                .member("a")
                .unwrap()
                .circuits
                .opened,
            3
        );
        // A reader silent for the expiry window is forgotten (the members heartbeat on).
        m.heartbeat("a", &HeartbeatRequest::default(), t0 + ms(4000))
            .unwrap();
        m.heartbeat("b", &HeartbeatRequest::default(), t0 + ms(4000))
            .unwrap();
        let later = m.snapshot(t0 + ms(2000) + EXPIRY);
        assert_eq!(
            later.member("a").unwrap().circuits,
            MemberCircuits {
                readers: 1,
                open: 0,
                opened: 2,
                deadlines_missed: 2
            },
            "gw-1's report only"
        );
    }

    #[test]
    fn the_number_of_reporting_readers_is_capped() {
        let m = Membership::new(EXPIRY);
        let t0 = Instant::now();
        for i in 0..MAX_READERS {
            m.report_circuits(&format!("r{i}"), CircuitsReport::default(), t0)
                .unwrap();
        }
        assert!(matches!(
            m.report_circuits("one-more", CircuitsReport::default(), t0),
            Err(CoordinatorError::Conflict(_))
        ));
        m.report_circuits("r0", CircuitsReport::default(), t0)
            .unwrap();
        m.report_circuits("one-more", CircuitsReport::default(), t0 + EXPIRY)
            .unwrap();
    }
}
