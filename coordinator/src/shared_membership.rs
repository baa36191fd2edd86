//! Membership shared by several coordinators through etcd (`--state etcd://…`), so that
//! any of them serves the cluster and any can be killed.
//!
//! - **Each member is one key**, `<prefix>members/<id>`, whose value is its
//!   [`MemberRecord`] (instance, address, weight, zone, live or draining, …), bound to
//!   a lease of the expiry window. A registration is a compare-and-put transaction on
//!   the key (absent, or unchanged since it was read, and held by the same instance),
//!   so two coordinators never bind one id to two instances.
//! - **Liveness is the lease.** A heartbeat, to whichever coordinator, renews the
//!   member's lease; a worker that stops heartbeating loses its key when the lease
//!   runs out, once, in etcd, and every coordinator sees that delete.
//! - **Every coordinator mirrors the keys** into its own [`Membership`] with a watch
//!   (after a full read, and again after any break), and answers reads from it. The
//!   epoch is a hash of the placement set ([`talon_coordinator_client::epoch`]), so coordinators holding
//!   the same members answer the same epoch without agreeing on anything else.
//! - **What stays local**: the statistics a worker reports with its heartbeats
//!   (bytes cached, hits, the time of its last heartbeat) and the readers' circuit
//!   reports are those this coordinator received; they are soft and per process.
//!
//! When etcd cannot be reached, registrations, heartbeats and drains are answered 503
//! (nothing changed; a worker retries on its next beat) and reads are answered from the
//! last mirrored state.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

use tokio::sync::watch;

use crate::etcd::{Etcd, Expect, WatchEvent};
use crate::membership::{MemberRecord, Membership};
use talon_coordinator_client::api::{
    HeartbeatRequest, HeartbeatResponse, MemberState, RegisterRequest,
};
use talon_coordinator_client::error::CoordinatorError;

/// The etcd-backed side of one coordinator's membership.
#[derive(Debug)]
pub struct SharedMembership {
    etcd: Arc<Etcd>,
    /// `<prefix>members/`.
    members_prefix: String,
    local: Arc<Membership>,
    /// Each member's lease, as the mirror last saw it.
    leases: Mutex<HashMap<String, i64>>,
}

fn bound_elsewhere(id: &str) -> CoordinatorError {
    CoordinatorError::Conflict(format!(
        "worker id {id:?} is held by another running worker instance"
    ))
}

impl SharedMembership {
    /// Membership in `etcd` under keys starting with `prefix` (ending in `/`), mirrored
    /// into `local` (made with [`Membership::mirror`]).
    pub fn new(etcd: Arc<Etcd>, prefix: &str, local: Arc<Membership>) -> SharedMembership {
        SharedMembership {
            etcd,
            members_prefix: format!("{prefix}members/"),
            local,
            leases: Mutex::new(HashMap::new()),
        }
    }

    fn key(&self, id: &str) -> Vec<u8> {
        format!("{}{id}", self.members_prefix).into_bytes()
    }

    fn leases(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The member id a key names, if it is one of ours.
    fn id_of(&self, key: &[u8]) -> Option<String> {
        let key = std::str::from_utf8(key).ok()?;
        let id = key.strip_prefix(&self.members_prefix)?;
        (!id.is_empty()).then(|| id.to_owned())
    }

    /// Registers (or re-registers) a worker in etcd, then in the local mirror.
    /// Returns the epoch.
    ///
    /// # Errors
    /// [`CoordinatorError::InvalidRegistration`] for invalid input,
    /// [`CoordinatorError::Conflict`] when another instance holds the id, the
    /// membership is full or a concurrent registration won, and
    /// [`CoordinatorError::StateStore`] when etcd cannot be reached; none changes
    /// anything.
    pub async fn register(
        &self,
        req: &RegisterRequest,
        now: Instant,
    ) -> Result<u64, CoordinatorError> {
        if let Err(e) = req.validate() {
            self.local.record_rejected_registration();
            return Err(e);
        }
        let key = self.key(&req.id);
        let existing = self.etcd.get(&key).await?;
        let expect = match &existing {
            Some(kv) => {
                let held: Option<MemberRecord> = serde_json::from_slice(&kv.value).ok();
                if held.is_some_and(|h| h.instance != req.instance) {
                    self.local.record_rejected_registration();
                    return Err(bound_elsewhere(&req.id));
                }
                Expect::ModRevision(kv.mod_revision)
            }
            None => {
                if self.local.len() >= self.local.max_members() {
                    self.local.record_rejected_registration();
                    return Err(CoordinatorError::Conflict(format!(
                        "the membership is full ({} members)",
                        self.local.max_members()
                    )));
                }
                Expect::Absent
            }
        };
        let record = MemberRecord::registered(req);
        let value = serde_json::to_vec(&record)
            .map_err(|e| CoordinatorError::StateStore(format!("encoding a member: {e}")))?;
        let lease = self.etcd.grant(self.local.expiry()).await?;
        if !self.etcd.put_if(&key, &value, lease, expect).await? {
            let _ = self.etcd.revoke(lease).await;
            return Err(CoordinatorError::Conflict(format!(
                "a concurrent registration of {:?} changed it first; register again",
                req.id
            )));
        }
        if let Some(old) = existing.filter(|kv| kv.lease != 0 && kv.lease != lease) {
            // The key moved to the new lease; the old one holds nothing now.
            let _ = self.etcd.revoke(old.lease).await;
        }
        self.leases().insert(req.id.clone(), lease);
        self.local.record_registration();
        Ok(self.local.upsert(&req.id, record, now))
    }

    /// The member's lease and record, from the mirror or else from etcd (a member
    /// another coordinator registered a moment ago may not have reached the mirror).
    async fn lease_of(&self, id: &str, now: Instant) -> Result<Option<i64>, CoordinatorError> {
        let known = self.leases().get(id).copied();
        if let Some(lease) = known
            && self.local.record(id).is_some()
        {
            return Ok(Some(lease));
        }
        let Some(kv) = self.etcd.get(&self.key(id)).await? else {
            return Ok(None);
        };
        if let Ok(record) = serde_json::from_slice::<MemberRecord>(&kv.value) {
            self.local.upsert(id, record, now);
        }
        self.leases().insert(id.to_owned(), kv.lease);
        Ok(Some(kv.lease))
    }

    /// Records a heartbeat: renews the member's lease in etcd, then takes its
    /// statistics locally. A heartbeat that says draining marks the member draining in
    /// etcd first.
    ///
    /// # Errors
    /// [`CoordinatorError::UnknownWorker`] when the member's key or lease is gone (it
    /// must register again), [`CoordinatorError::StateStore`] when etcd cannot be
    /// reached, and what [`Membership::heartbeat`] refuses.
    pub async fn heartbeat(
        &self,
        id: &str,
        stats: &HeartbeatRequest,
        now: Instant,
    ) -> Result<HeartbeatResponse, CoordinatorError> {
        let Some(lease) = self.lease_of(id, now).await? else {
            self.local.remove_expired(id);
            return Err(CoordinatorError::UnknownWorker(id.to_owned()));
        };
        if !self.etcd.keep_alive(lease).await? {
            self.leases().remove(id);
            self.local.remove_expired(id);
            return Err(CoordinatorError::UnknownWorker(id.to_owned()));
        }
        if stats.draining {
            self.set_draining(id, Some(&stats.instance), now).await?;
        }
        self.local.heartbeat(id, stats, now)
    }

    /// Takes a member out of placement in etcd, then locally. Returns the epoch.
    ///
    /// # Errors
    /// As [`Membership::drain`], and [`CoordinatorError::StateStore`].
    pub async fn drain(
        &self,
        id: &str,
        instance: Option<&str>,
        now: Instant,
    ) -> Result<u64, CoordinatorError> {
        self.set_draining(id, instance, now).await?;
        self.local.drain(id, instance)
    }

    async fn set_draining(
        &self,
        id: &str,
        instance: Option<&str>,
        now: Instant,
    ) -> Result<(), CoordinatorError> {
        let key = self.key(id);
        // A few tries: another coordinator may change the key between read and write.
        for _ in 0..3 {
            let Some(kv) = self.etcd.get(&key).await? else {
                self.local.remove_expired(id);
                return Err(CoordinatorError::UnknownWorker(id.to_owned()));
            };
            let mut record: MemberRecord = serde_json::from_slice(&kv.value)
                .map_err(|e| CoordinatorError::StateStore(format!("member {id} in etcd: {e}")))?;
            if instance.is_some_and(|i| i != record.instance) {
                return Err(bound_elsewhere(id));
            }
            if record.state == MemberState::Draining {
                self.local.upsert(id, record, now);
                return Ok(());
            }
            record.state = MemberState::Draining;
            let value = serde_json::to_vec(&record)
                .map_err(|e| CoordinatorError::StateStore(format!("encoding a member: {e}")))?;
            // Lease 0 keeps the key's lease.
            // The local mirror takes the change from the caller's local drain (which
            // counts it) or from the watch, whichever comes first.
            if self
                .etcd
                .put_if(&key, &value, 0, Expect::ModRevision(kv.mod_revision))
                .await?
            {
                return Ok(());
            }
        }
        Err(CoordinatorError::Conflict(format!(
            "member {id:?} kept changing; drain again"
        )))
    }

    /// Reads every member from etcd into the local mirror once (before the coordinator
    /// says it is ready).
    ///
    /// # Errors
    /// [`CoordinatorError::StateStore`] when etcd cannot be reached.
    pub async fn load(&self) -> Result<usize, CoordinatorError> {
        let (kvs, _) = self.etcd.list(self.members_prefix.as_bytes()).await?;
        let now = Instant::now();
        let mut n = 0;
        for kv in kvs {
            let Some(id) = self.id_of(&kv.key) else {
                continue;
            };
            if let Ok(record) = serde_json::from_slice::<MemberRecord>(&kv.value) {
                self.local.upsert(&id, record, now);
                self.leases().insert(id, kv.lease);
                n += 1;
            }
        }
        Ok(n)
    }

    /// Mirrors etcd into the local membership until `stop`: reads every member, then
    /// follows the watch; after a break, reads everything again.
    pub async fn mirror(self: Arc<Self>, stop: watch::Receiver<bool>) {
        self.etcd
            .follow(
                self.members_prefix.as_bytes(),
                stop,
                |kvs| {
                    let now = Instant::now();
                    let mut ids = Vec::with_capacity(kvs.len());
                    for kv in kvs {
                        let Some(id) = self.id_of(&kv.key) else {
                            continue;
                        };
                        if let Ok(record) = serde_json::from_slice::<MemberRecord>(&kv.value) {
                            self.local.upsert(&id, record, now);
                            self.leases().insert(id.clone(), kv.lease);
                            ids.push(id);
                        }
                    }
                    self.local.retain_only(&ids);
                },
                |event| match event {
                    WatchEvent::Put(kv) => {
                        let Some(id) = self.id_of(&kv.key) else {
                            return;
                        };
                        if let Ok(record) = serde_json::from_slice::<MemberRecord>(&kv.value) {
                            self.local.upsert(&id, record, Instant::now());
                            if kv.lease != 0 {
                                self.leases().insert(id, kv.lease);
                            }
                        }
                    }
                    WatchEvent::Delete(key) => {
                        let Some(id) = self.id_of(&key) else { return };
                        self.leases().remove(&id);
                        self.local.remove_expired(&id);
                    }
                },
            )
            .await;
    }
}
