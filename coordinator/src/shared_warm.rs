//! Warm jobs shared by several coordinators through etcd (`--state etcd://…`), so that a
//! job started on one coordinator is served by all of them and outlives the one that
//! started it.
//!
//! Under `<prefix>warm/`:
//! - `next-id`: the last job id given out, raised by compare-and-put, so ids are unique
//!   across coordinators;
//! - `jobs/<id>/objects/<n>`: the job's [`WarmPlan`] objects, in chunks of
//!   [`OBJECTS_PER_CHUNK`] (an etcd value stays well under its 1.5 MiB request limit),
//!   written before the head;
//! - `jobs/<id>/head`: the job's [`JobHead`] (source, block size, when it started,
//!   whether it was cancelled), written last: a job exists once its head does;
//! - `jobs/<id>/done/<writer>-<n>`: finished tasks, one key per batch a coordinator
//!   accepted from a worker's heartbeat.
//!
//! Every coordinator follows the prefix and keeps [`WarmJobs`] in step: a new head
//! builds the job's tasks from its plan (the same tasks, numbered the same, on every
//! coordinator) queued for their owners in the local placement, which is the same on
//! every coordinator holding the same members; each done batch is recorded (a task
//! counts once however many coordinators see it); a cancelled head stops the job; a
//! deleted head forgets it. A worker therefore collects its tasks from whichever
//! coordinator it heartbeats to, and after a coordinator dies the tasks it had handed
//! out time out and are handed again by the others.
//!
//! What stays local: which tasks are out and to whom. A report a coordinator cannot
//! write to etcd is dropped; its tasks time out and are handed again.
//! Not cleaned up: the objects of a job whose starter died between its chunks and its
//! head (no head, so no job; the keys stay until the prefix is deleted).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use talon_core::{ObjectId, ObjectVersion};
use tokio::sync::watch;

use crate::etcd::{Etcd, Expect, KeyValue, WatchEvent};
use crate::membership::Membership;
use crate::warm::{ListedObject, WarmJobs, WarmPlan};
use talon_coordinator_client::api::{WarmJobView, WarmState, WarmTaskDone};
use talon_coordinator_client::error::CoordinatorError;

/// Objects per `objects/<n>` key (about 200 bytes each: well under etcd's limit).
pub const OBJECTS_PER_CHUNK: usize = 2_000;

/// A job's head in etcd: what is not in its objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobHead {
    /// What was asked for.
    pub source: String,
    /// Bytes per block.
    pub block_size: u64,
    /// Objects left out by the budget.
    pub over_budget: u64,
    /// How many `objects/<n>` keys hold its objects.
    pub chunks: u32,
    /// When it started, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// Whether it was cancelled.
    pub cancelled: bool,
}

/// One listed object as stored: key path, version, size.
type StoredObject = (String, String, u64);

/// What a key under `<prefix>warm/jobs/` is.
#[derive(Debug, PartialEq, Eq)]
enum JobKey {
    Head(u64),
    Objects(u64, u32),
    Done(u64),
}

/// The etcd-backed side of one coordinator's warm jobs.
#[derive(Debug)]
pub struct SharedWarmJobs {
    etcd: Arc<Etcd>,
    /// `<prefix>warm/`.
    prefix: String,
    local: Arc<WarmJobs>,
    membership: Arc<Membership>,
    /// Names this coordinator's done batches apart from every other's.
    writer: String,
    batches: AtomicU64,
}

fn state_store(what: impl std::fmt::Display) -> CoordinatorError {
    CoordinatorError::StateStore(what.to_string())
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn stored(o: &ListedObject) -> StoredObject {
    (o.id.key_path(), o.version.as_str().to_owned(), o.size)
}

fn listed((key_path, version, size): StoredObject) -> Option<ListedObject> {
    Some(ListedObject {
        id: ObjectId::from_key_path(&key_path).ok()?,
        version: ObjectVersion::new(version).ok()?,
        size,
    })
}

/// One job's keys, gathered from a listing or from watch events before its head.
#[derive(Debug, Default)]
struct Gathered {
    head: Option<JobHead>,
    chunks: BTreeMap<u32, Vec<StoredObject>>,
    done: Vec<WarmTaskDone>,
}

impl SharedWarmJobs {
    /// Warm jobs in `etcd` under `<prefix>warm/` (`prefix` ends in `/`), kept in
    /// `local`, with tasks queued by the placement of `membership`.
    pub fn new(
        etcd: Arc<Etcd>,
        prefix: &str,
        local: Arc<WarmJobs>,
        membership: Arc<Membership>,
    ) -> SharedWarmJobs {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        SharedWarmJobs {
            etcd,
            prefix: format!("{prefix}warm/"),
            local,
            membership,
            writer: format!("{:x}{:x}", std::process::id(), nanos & 0xffff_ffff_ffff),
            batches: AtomicU64::new(0),
        }
    }

    fn job_prefix(&self, id: u64) -> String {
        format!("{}jobs/{id:020}/", self.prefix)
    }

    fn head_key(&self, id: u64) -> Vec<u8> {
        format!("{}head", self.job_prefix(id)).into_bytes()
    }

    fn parse_key(&self, key: &[u8]) -> Option<JobKey> {
        let key = std::str::from_utf8(key).ok()?;
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix("jobs/")?;
        let (id, what) = rest.split_once('/')?;
        let id: u64 = id.parse().ok()?;
        if what == "head" {
            Some(JobKey::Head(id))
        } else if let Some(n) = what.strip_prefix("objects/") {
            Some(JobKey::Objects(id, n.parse().ok()?))
        } else {
            what.starts_with("done/").then_some(JobKey::Done(id))
        }
    }

    /// A new job id, unique across the coordinators of this etcd prefix.
    async fn next_id(&self) -> Result<u64, CoordinatorError> {
        let key = format!("{}next-id", self.prefix).into_bytes();
        for _ in 0..8 {
            let current = self.etcd.get(&key).await?;
            let (last, expect) = match &current {
                Some(kv) => (
                    std::str::from_utf8(&kv.value)
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok())
                        .ok_or_else(|| state_store("warm next-id in etcd is not a number"))?,
                    Expect::ModRevision(kv.mod_revision),
                ),
                None => (0, Expect::Absent),
            };
            let id = last + 1;
            if self
                .etcd
                .put_if(&key, id.to_string().as_bytes(), 0, expect)
                .await?
            {
                return Ok(id);
            }
        }
        Err(CoordinatorError::Conflict(
            "warm job ids kept changing; start the job again".into(),
        ))
    }

    /// Writes job `plan` to etcd, then adds it here; returns its view.
    ///
    /// # Errors
    /// [`CoordinatorError::StateStore`] when etcd cannot be reached (nothing is
    /// started), [`CoordinatorError::InvalidRequest`] when a block cannot be named.
    pub async fn start(&self, plan: &WarmPlan) -> Result<WarmJobView, CoordinatorError> {
        let id = self.next_id().await?;
        let started = SystemTime::now();
        let chunks: Vec<&[ListedObject]> = plan.objects.chunks(OBJECTS_PER_CHUNK).collect();
        for (n, chunk) in chunks.iter().enumerate() {
            let value = serde_json::to_vec(&chunk.iter().map(stored).collect::<Vec<_>>())
                .map_err(state_store)?;
            let key = format!("{}objects/{n:06}", self.job_prefix(id));
            self.etcd.put(key.as_bytes(), &value).await?;
        }
        let head = JobHead {
            source: plan.source.clone(),
            block_size: plan.block_size,
            over_budget: plan.over_budget,
            chunks: u32::try_from(chunks.len()).unwrap_or(u32::MAX),
            started_unix_ms: unix_ms(started),
            cancelled: false,
        };
        let value = serde_json::to_vec(&head).map_err(state_store)?;
        if !self
            .etcd
            .put_if(&self.head_key(id), &value, 0, Expect::Absent)
            .await?
        {
            return Err(state_store(format!("warm job {id} already exists in etcd")));
        }
        let placement = self
            .membership
            .snapshot(std::time::Instant::now())
            .placement();
        let view = self
            .local
            .add(id, plan, started, WarmState::Running, &placement)
            .map_err(CoordinatorError::InvalidRequest)?;
        for old in self.local.finished_past_limit() {
            self.etcd
                .delete_prefix(self.job_prefix(old).as_bytes())
                .await?;
            self.local.remove(old);
        }
        Ok(view)
    }

    /// Writes worker `worker`'s reports of tasks out to it to etcd, then records them
    /// here. A report etcd does not take is dropped (its task times out and is handed
    /// again); the heartbeat still succeeds.
    pub async fn complete(&self, worker: &str, done: &[WarmTaskDone]) {
        if done.is_empty() {
            return;
        }
        let accepted = self.local.accept(worker, done);
        let mut by_job: BTreeMap<u64, Vec<WarmTaskDone>> = BTreeMap::new();
        for d in accepted {
            by_job.entry(d.job).or_default().push(d);
        }
        for (job, batch) in by_job {
            let n = self.batches.fetch_add(1, Ordering::Relaxed);
            let key = format!("{}done/{}-{n:012}", self.job_prefix(job), self.writer);
            let written = match serde_json::to_vec(&batch) {
                Ok(value) => self.etcd.put(key.as_bytes(), &value).await,
                Err(e) => Err(state_store(e)),
            };
            match written {
                Ok(()) => self.local.record(&batch),
                Err(e) => tracing::warn!(
                    job,
                    worker,
                    error = %e,
                    "could not record finished warm tasks in etcd; they will be handed again"
                ),
            }
        }
    }

    /// Cancels job `id` in etcd, then here; `None` for a job etcd does not hold.
    ///
    /// # Errors
    /// [`CoordinatorError::StateStore`] when etcd cannot be reached.
    pub async fn cancel(&self, id: u64) -> Result<Option<WarmJobView>, CoordinatorError> {
        let key = self.head_key(id);
        if self.local.view(id).is_none() {
            // Started elsewhere a moment ago and not mirrored yet: read etcd now.
            self.load().await?;
        }
        for _ in 0..3 {
            let Some(kv) = self.etcd.get(&key).await? else {
                return Ok(None);
            };
            let mut head: JobHead = serde_json::from_slice(&kv.value)
                .map_err(|e| state_store(format!("warm job {id} in etcd: {e}")))?;
            if head.cancelled
                || self
                    .local
                    .view(id)
                    .is_some_and(|v| v.state != WarmState::Running)
            {
                return Ok(self.local.view(id));
            }
            head.cancelled = true;
            let value = serde_json::to_vec(&head).map_err(state_store)?;
            if self
                .etcd
                .put_if(&key, &value, 0, Expect::ModRevision(kv.mod_revision))
                .await?
            {
                return Ok(self.local.cancel(id));
            }
        }
        Err(CoordinatorError::Conflict(format!(
            "warm job {id} kept changing; cancel again"
        )))
    }

    /// Builds the jobs of `gathered` (those with a head) here and records their done
    /// batches; returns the ids built or known.
    fn apply(&self, gathered: BTreeMap<u64, Gathered>) -> Vec<u64> {
        let placement = self
            .membership
            .snapshot(std::time::Instant::now())
            .placement();
        let mut ids = Vec::with_capacity(gathered.len());
        for (id, job) in gathered {
            let Some(head) = job.head else { continue };
            if self.local.view(id).is_none() {
                let objects: Option<Vec<ListedObject>> =
                    job.chunks.into_values().flatten().map(listed).collect();
                let Some(objects) = objects else {
                    tracing::warn!(id, "warm job in etcd names an object it cannot; skipped");
                    continue;
                };
                let plan = WarmPlan {
                    source: head.source.clone(),
                    block_size: head.block_size,
                    objects,
                    over_budget: head.over_budget,
                };
                let started = SystemTime::UNIX_EPOCH + Duration::from_millis(head.started_unix_ms);
                let state = if head.cancelled {
                    WarmState::Cancelled
                } else {
                    WarmState::Running
                };
                if let Err(e) = self.local.add(id, &plan, started, state, &placement) {
                    tracing::warn!(id, error = %e, "warm job in etcd cannot be built; skipped");
                    continue;
                }
            } else if head.cancelled {
                self.local.cancel(id);
            }
            self.local.record(&job.done);
            ids.push(id);
        }
        ids
    }

    fn gather(&self, gathered: &mut BTreeMap<u64, Gathered>, kv: &KeyValue) {
        match self.parse_key(&kv.key) {
            Some(JobKey::Head(id)) => {
                gathered.entry(id).or_default().head = serde_json::from_slice(&kv.value).ok();
            }
            Some(JobKey::Objects(id, n)) => {
                if let Ok(chunk) = serde_json::from_slice(&kv.value) {
                    gathered.entry(id).or_default().chunks.insert(n, chunk);
                }
            }
            Some(JobKey::Done(id)) => {
                if let Ok(batch) = serde_json::from_slice::<Vec<WarmTaskDone>>(&kv.value) {
                    gathered.entry(id).or_default().done.extend(batch);
                }
            }
            None => {}
        }
    }

    /// Reads every job from etcd into the local view once (before the coordinator says
    /// it is ready); returns how many.
    ///
    /// # Errors
    /// [`CoordinatorError::StateStore`] when etcd cannot be reached.
    pub async fn load(&self) -> Result<usize, CoordinatorError> {
        let (kvs, _) = self.etcd.list(self.prefix.as_bytes()).await?;
        Ok(self.replace_with(&kvs))
    }

    fn replace_with(&self, kvs: &[KeyValue]) -> usize {
        let mut gathered = BTreeMap::new();
        for kv in kvs {
            self.gather(&mut gathered, kv);
        }
        let ids = self.apply(gathered);
        self.local.retain_only(&ids);
        ids.len()
    }

    /// Follows etcd until `stop`, keeping the local view in step (see the module doc).
    pub async fn mirror(self: Arc<Self>, stop: watch::Receiver<bool>) {
        // Objects of jobs whose head has not come yet (it is written last).
        let pending: std::sync::Mutex<HashMap<u64, Gathered>> = Default::default();
        let pending_now = || pending.lock().unwrap_or_else(|p| p.into_inner());
        self.etcd
            .follow(
                self.prefix.as_bytes(),
                stop,
                |kvs| {
                    pending_now().clear();
                    self.replace_with(&kvs);
                },
                |event| match event {
                    WatchEvent::Put(kv) => match self.parse_key(&kv.key) {
                        Some(JobKey::Objects(id, _)) => {
                            let mut pending = pending_now();
                            let mut one = BTreeMap::new();
                            self.gather(&mut one, &kv);
                            if let Some(g) = one.remove(&id) {
                                pending.entry(id).or_default().chunks.extend(g.chunks);
                            }
                        }
                        Some(JobKey::Done(id)) => {
                            let mut one = BTreeMap::new();
                            self.gather(&mut one, &kv);
                            if let Some(g) = one.remove(&id) {
                                self.local.record(&g.done);
                            }
                        }
                        Some(JobKey::Head(id)) => {
                            let mut gathered = BTreeMap::new();
                            if let Some(p) = pending_now().remove(&id) {
                                gathered.insert(id, p);
                            }
                            self.gather(&mut gathered, &kv);
                            self.apply(gathered);
                        }
                        None => {}
                    },
                    WatchEvent::Delete(key) => {
                        if let Some(JobKey::Head(id)) = self.parse_key(&key) {
                            pending_now().remove(&id);
                            self.local.remove(id);
                        }
                    }
                },
            )
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_job_and_part() {
        let etcd =
            Arc::new(Etcd::new(&["127.0.0.1:1".into()], None).unwrap_or_else(|e| panic!("{e}")));
        let shared = SharedWarmJobs::new(
            etcd,
            "/t/",
            Arc::default(),
            Arc::new(Membership::new(Duration::from_secs(5))),
        );
        let head = shared.head_key(7);
        assert_eq!(head, b"/t/warm/jobs/00000000000000000007/head");
        assert_eq!(shared.parse_key(&head), Some(JobKey::Head(7)));
        assert_eq!(
            shared.parse_key(b"/t/warm/jobs/00000000000000000007/objects/000003"),
            Some(JobKey::Objects(7, 3))
        );
        assert_eq!(
            shared.parse_key(b"/t/warm/jobs/00000000000000000007/done/ab-000000000001"),
            Some(JobKey::Done(7))
        );
        assert_eq!(shared.parse_key(b"/t/warm/next-id"), None);
        assert_eq!(shared.parse_key(b"/t/members/w1"), None);
    }

    #[test]
    fn a_stored_object_reads_back_the_same() {
        let o = ListedObject {
            id: ObjectId::s3("b", "a/key with space").unwrap_or_else(|e| panic!("{e}")),
            version: ObjectVersion::from_etag("\"abc\"").unwrap_or_else(|e| panic!("{e}")),
            size: 12_345,
        };
        assert_eq!(listed(stored(&o)), Some(o));
    }
}
