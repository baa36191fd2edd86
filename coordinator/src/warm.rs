//! Warm jobs: fill the cache with a dataset before a job reads it, on the workers, without
//! the bytes going anywhere else.
//!
//! `POST /v1/warm` names a prefix at the origin (`s3://BUCKET/PREFIX`,
//! `az://ACCOUNT/CONTAINER/PREFIX`). The coordinator lists it at the origin, takes the
//! objects in listing order until the job's byte budget, splits each into blocks at
//! the cluster's block size, and queues each block for its owner (rendezvous
//! placement over the live members). Workers collect their tasks with their heartbeats
//! (at most [`WARM_TASKS_PER_WORKER`] out at once, so a worker's origin concurrency
//! for warming is bounded), fill each whole block from the origin pinned to the
//! listed version, and report it with their next heartbeat. A task out for longer
//! than [`WARM_TASK_TIMEOUT_MS`], or queued for a worker that left, is queued again
//! for the block's owner now. Cancelling drops the queued tasks; the blocks filled
//! stay cached.
//!
//! Jobs live in this coordinator's memory: with several coordinators (etcd), a job is
//! served by the one that started it, and the workers that heartbeat elsewhere do not
//! collect its tasks until they heartbeat here (workers heartbeat to one coordinator
//! URL). Pinning is not built: warmed blocks are evicted like any other.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use talon_core::{BlockId, ObjectId, ObjectVersion};

use crate::api::{
    WARM_TASK_TIMEOUT_MS, WARM_TASKS_PER_WORKER, WarmJobView, WarmState, WarmTask, WarmTaskDone,
};
use crate::error::CoordinatorError;
use crate::placement::RendezvousPlacement;

/// Most jobs kept (finished ones are dropped oldest first past this).
pub const MAX_JOBS: usize = 64;

/// Most blocks one job may hold.
pub const MAX_BLOCKS_PER_JOB: usize = 1 << 20;

/// An object a job warms, as the origin listed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    /// The object.
    pub id: ObjectId,
    /// Its size in bytes.
    pub size: u64,
    /// Its version (ETag) when listed.
    pub version: ObjectVersion,
}

#[derive(Debug, Clone)]
struct Task {
    wire: WarmTask,
    /// Index of its object in the job.
    object: usize,
    /// Bytes of the block.
    len: u64,
    block: BlockId,
}

#[derive(Debug)]
struct Job {
    source: String,
    state: WarmState,
    started: Instant,
    /// Blocks left per object.
    blocks_left: Vec<u32>,
    bytes: u64,
    bytes_done: u64,
    blocks: u64,
    blocks_done: u64,
    objects_done: u64,
    over_budget: u64,
    errors: u64,
    first_error: Option<String>,
    /// Queued tasks by the worker (id) that owns their block.
    queued: HashMap<String, VecDeque<Task>>,
    /// Tasks out, by task id: the worker and when it took it.
    out: HashMap<u64, (Task, String, Instant)>,
}

impl Job {
    fn view(&self, id: u64, now: Instant) -> WarmJobView {
        WarmJobView {
            id,
            source: self.source.clone(),
            state: self.state,
            objects: self.blocks_left.len() as u64,
            objects_done: self.objects_done,
            bytes: self.bytes,
            bytes_done: self.bytes_done,
            blocks: self.blocks,
            blocks_done: self.blocks_done,
            objects_over_budget: self.over_budget,
            errors: self.errors,
            first_error: self.first_error.clone(),
            elapsed_ms: u64::try_from(now.saturating_duration_since(self.started).as_millis())
                .unwrap_or(u64::MAX),
        }
    }

    fn finish_if_done(&mut self) {
        if self.state == WarmState::Running && self.blocks_done == self.blocks {
            self.state = WarmState::Done;
        }
    }
}

/// Every warm job of this coordinator.
#[derive(Debug, Default)]
pub struct WarmJobs {
    inner: Mutex<Jobs>,
}

#[derive(Debug, Default)]
struct Jobs {
    next_id: u64,
    jobs: BTreeMap<u64, Job>,
}

fn owner_of(placement: &RendezvousPlacement, block: &BlockId) -> Option<String> {
    placement.locate(block).map(|m| m.id.clone())
}

impl WarmJobs {
    fn lock(&self) -> std::sync::MutexGuard<'_, Jobs> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a job over `objects` (in listing order) with blocks of `block_size`,
    /// taking objects until `budget_bytes` (0: all) would be passed, each block queued
    /// for its owner in `placement`. Returns the job's view.
    ///
    /// # Errors
    /// A message when the block size is not a power of two or the job is too large.
    pub fn start(
        &self,
        source: &str,
        objects: &[ListedObject],
        block_size: u64,
        budget_bytes: u64,
        placement: &RendezvousPlacement,
    ) -> Result<WarmJobView, String> {
        if !block_size.is_power_of_two() {
            return Err(format!("block size {block_size} is not a power of two"));
        }
        let now = Instant::now();
        let mut job = Job {
            source: source.to_owned(),
            state: WarmState::Running,
            started: now,
            blocks_left: Vec::new(),
            bytes: 0,
            bytes_done: 0,
            blocks: 0,
            blocks_done: 0,
            objects_done: 0,
            over_budget: 0,
            errors: 0,
            first_error: None,
            queued: HashMap::new(),
            out: HashMap::new(),
        };
        let mut next_task = 0u64;
        let mut jobs = self.lock();
        let id = jobs.next_id + 1;
        for o in objects {
            if budget_bytes > 0 && job.bytes.saturating_add(o.size) > budget_bytes {
                job.over_budget += 1;
                continue;
            }
            let index = job.blocks_left.len();
            let mut blocks = 0u32;
            let mut offset = 0u64;
            while offset < o.size {
                let block = BlockId::new(o.id.clone(), o.version.clone(), offset, block_size)
                    .map_err(|e| e.to_string())?;
                let len = block.len_in(o.size);
                let task = Task {
                    wire: WarmTask {
                        job: id,
                        task: next_task,
                        key_path: o.id.key_path(),
                        version: o.version.as_str().to_owned(),
                        object_size: o.size,
                        block_offset: offset,
                        block_size,
                    },
                    object: index,
                    len,
                    block,
                };
                next_task += 1;
                let owner = owner_of(placement, &task.block).unwrap_or_default();
                job.queued.entry(owner).or_default().push_back(task);
                blocks += 1;
                offset += block_size;
            }
            job.bytes += o.size;
            job.blocks += u64::from(blocks);
            if blocks == 0 {
                job.objects_done += 1;
            }
            job.blocks_left.push(blocks);
            if job.blocks > MAX_BLOCKS_PER_JOB as u64 {
                return Err(format!(
                    "the job has more than {MAX_BLOCKS_PER_JOB} blocks; warm a narrower prefix or set a budget"
                ));
            }
        }
        job.finish_if_done();
        jobs.next_id = id;
        let view = job.view(id, now);
        jobs.jobs.insert(id, job);
        // Forget the oldest finished jobs past the limit.
        while jobs.jobs.len() > MAX_JOBS {
            let Some(old) = jobs
                .jobs
                .iter()
                .find(|(_, j)| j.state != WarmState::Running)
                .map(|(id, _)| *id)
            else {
                break;
            };
            jobs.jobs.remove(&old);
        }
        tracing::info!(
            id,
            source,
            objects = view.objects,
            bytes = view.bytes,
            blocks = view.blocks,
            "warm job started"
        );
        Ok(view)
    }

    /// Hands worker `worker` the tasks it may take now (its queue, up to
    /// [`WARM_TASKS_PER_WORKER`] out at once), after queueing again the tasks that
    /// timed out and those of workers no longer in `placement`.
    pub fn take(&self, worker: &str, placement: &RendezvousPlacement) -> Vec<WarmTask> {
        let now = Instant::now();
        let timeout = Duration::from_millis(WARM_TASK_TIMEOUT_MS);
        let mut jobs = self.lock();
        let mut handed = Vec::new();
        let mut out_here: usize = jobs
            .jobs
            .values()
            .map(|j| j.out.values().filter(|(_, w, _)| w == worker).count())
            .sum();
        for job in jobs.jobs.values_mut() {
            if job.state != WarmState::Running {
                continue;
            }
            // Tasks that timed out, and queues of workers that left: to the owner now.
            let stale: Vec<u64> = job
                .out
                .iter()
                .filter(|(_, (_, _, at))| now.saturating_duration_since(*at) >= timeout)
                .map(|(id, _)| *id)
                .collect();
            let mut requeue: Vec<Task> = stale
                .iter()
                .filter_map(|id| job.out.remove(id))
                .map(|(t, _, _)| t)
                .collect();
            let gone: Vec<String> = job
                .queued
                .keys()
                .filter(|w| !placement.members().iter().any(|m| &m.id == *w))
                .cloned()
                .collect();
            for w in gone {
                requeue.extend(job.queued.remove(&w).unwrap_or_default());
            }
            for task in requeue {
                let owner = owner_of(placement, &task.block).unwrap_or_default();
                job.queued.entry(owner).or_default().push_back(task);
            }
            while out_here < WARM_TASKS_PER_WORKER {
                let Some(task) = job.queued.get_mut(worker).and_then(VecDeque::pop_front) else {
                    break;
                };
                handed.push(task.wire.clone());
                job.out
                    .insert(task.wire.task, (task, worker.to_owned(), now));
                out_here += 1;
            }
        }
        handed
    }

    /// Records worker `worker`'s reports of finished tasks. A report of a task not out
    /// to that worker (already handed again elsewhere, or cancelled) is ignored.
    pub fn complete(&self, worker: &str, done: &[WarmTaskDone]) {
        if done.is_empty() {
            return;
        }
        let mut jobs = self.lock();
        for d in done {
            let Some(job) = jobs.jobs.get_mut(&d.job) else {
                continue;
            };
            match job.out.get(&d.task) {
                Some((_, w, _)) if w == worker => {}
                _ => continue,
            }
            let Some((task, _, _)) = job.out.remove(&d.task) else {
                continue;
            };
            job.blocks_done += 1;
            match &d.error {
                None => job.bytes_done += d.bytes.min(task.len),
                Some(e) => {
                    job.errors += 1;
                    if job.first_error.is_none() {
                        job.first_error = Some(format!("{}: {e}", task.wire.key_path));
                    }
                }
            }
            if let Some(left) = job.blocks_left.get_mut(task.object) {
                *left = left.saturating_sub(1);
                if *left == 0 {
                    job.objects_done += 1;
                }
            }
            job.finish_if_done();
        }
    }

    /// Cancels job `id`: its queued tasks are dropped (the blocks filled stay cached).
    pub fn cancel(&self, id: u64) -> Option<WarmJobView> {
        let mut jobs = self.lock();
        let job = jobs.jobs.get_mut(&id)?;
        if job.state == WarmState::Running {
            job.state = WarmState::Cancelled;
            job.queued.clear();
            job.out.clear();
            tracing::info!(id, "warm job cancelled");
        }
        Some(job.view(id, Instant::now()))
    }

    /// Whether some job is still running (and so may have tasks to hand out).
    pub fn any_running(&self) -> bool {
        self.lock()
            .jobs
            .values()
            .any(|j| j.state == WarmState::Running)
    }

    /// Job `id`'s view.
    pub fn view(&self, id: u64) -> Option<WarmJobView> {
        self.lock()
            .jobs
            .get(&id)
            .map(|j| j.view(id, Instant::now()))
    }

    /// Every job's view, oldest first.
    pub fn list(&self) -> Vec<WarmJobView> {
        let now = Instant::now();
        self.lock()
            .jobs
            .iter()
            .map(|(id, j)| j.view(*id, now))
            .collect()
    }
}

/// Makes a listed key an object of the listed bucket (container); `None` for a key a
/// block cannot name.
type NameToObject = Box<dyn Fn(&str) -> Option<ObjectId> + Send + Sync>;

/// Asks the origin for the size and version of each object named (key paths: a list
/// file's lines), in order.
///
/// # Errors
/// [`CoordinatorError::InvalidRequest`] for a name that is not a key path or names an
/// origin this coordinator has not, or an object the origin does not have;
/// [`CoordinatorError::StateStore`] for another origin error (503: try again).
pub async fn head_objects(
    origins: &talon_protocols::origin::Origins,
    names: &[String],
) -> Result<Vec<ListedObject>, CoordinatorError> {
    let mut objects = Vec::with_capacity(names.len());
    for name in names {
        let bad =
            |why: String| CoordinatorError::InvalidRequest(format!("warm object {name:?}: {why}"));
        let id = ObjectId::from_key_path(name).map_err(|e| bad(e.to_string()))?;
        let (client, bucket, key) = origins.route(&id).map_err(|e| bad(e.to_string()))?;
        let info = client.head(&bucket, &key).await.map_err(|e| {
            if e.kind() == talon_protocols::ErrorKind::NoSuchKey {
                bad("the origin has no such object".into())
            } else {
                CoordinatorError::StateStore(format!("asking the origin for {name}: {e}"))
            }
        })?;
        let version = ObjectVersion::from_etag(&info.etag).map_err(|e| bad(e.to_string()))?;
        objects.push(ListedObject {
            id,
            size: info.size,
            version,
        });
    }
    Ok(objects)
}

/// Most objects a job lists.
pub const MAX_LISTED_OBJECTS: usize = 1_000_000;

/// Lists every object under `source` (`s3://BUCKET/PREFIX`, `az://ACCOUNT/CONTAINER/PREFIX`)
/// at the origin, page by page.
///
/// # Errors
/// [`CoordinatorError::InvalidRequest`] for a source that is not one of those, names an
/// origin this coordinator has not, or lists more than [`MAX_LISTED_OBJECTS`];
/// [`CoordinatorError::StateStore`] for the origin's own error (503: try again).
pub async fn list_source(
    origins: &talon_protocols::origin::Origins,
    source: &str,
) -> Result<Vec<ListedObject>, CoordinatorError> {
    let bad =
        |why: &str| CoordinatorError::InvalidRequest(format!("warm source {source:?}: {why}"));
    let (client, bucket, prefix, object_id): (_, String, String, NameToObject) =
        if let Some(rest) = source.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let client = origins
                .s3
                .as_ref()
                .ok_or_else(|| bad("no S3 origin is configured"))?;
            let b = bucket.to_owned();
            (
                client,
                b.clone(),
                prefix.to_owned(),
                Box::new(move |key| ObjectId::s3(b.clone(), key).ok()),
            )
        } else if let Some(rest) = source.strip_prefix("az://") {
            let mut parts = rest.splitn(3, '/');
            let (account, container) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let prefix = parts.next().unwrap_or("");
            let (ours, client) = origins
                .azure
                .as_ref()
                .ok_or_else(|| bad("no Azure origin is configured"))?;
            if account != ours {
                return Err(bad(&format!("the Azure origin's account is {ours}")));
            }
            let (a, c) = (account.to_owned(), container.to_owned());
            (
                client,
                c.clone(),
                prefix.to_owned(),
                Box::new(move |blob| ObjectId::azure(a.clone(), c.clone(), blob).ok()),
            )
        } else {
            return Err(bad(
                "expected s3://BUCKET/PREFIX or az://ACCOUNT/CONTAINER/PREFIX",
            ));
        };
    if bucket.is_empty() {
        return Err(bad("no bucket"));
    }
    let mut objects = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = client
            .list(&bucket, &prefix, None, token.as_deref(), Some(1000))
            .await
            .map_err(|e| {
                CoordinatorError::StateStore(format!("listing {source} at the origin: {e}"))
            })?;
        for entry in page.objects {
            // Keys a block cannot name (folder markers, empty segments) pass through
            // the gateway uncached anyway.
            let (Some(id), Ok(version)) =
                (object_id(&entry.key), ObjectVersion::from_etag(&entry.etag))
            else {
                continue;
            };
            objects.push(ListedObject {
                id,
                size: entry.size,
                version,
            });
        }
        if objects.len() > MAX_LISTED_OBJECTS {
            return Err(bad(&format!(
                "more than {MAX_LISTED_OBJECTS} objects; warm a narrower prefix"
            )));
        }
        match page.next_token {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => return Ok(objects),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::PlacementMember;

    fn placement(ids: &[&str]) -> RendezvousPlacement {
        RendezvousPlacement::new(
            ids.iter()
                .map(|id| PlacementMember::new(*id, format!("{id}:1"), 1))
                .collect(),
        )
    }

    fn objects(n: usize, size: u64) -> Vec<ListedObject> {
        (0..n)
            .map(|i| ListedObject {
                id: ObjectId::s3("b", format!("data/{i}")).unwrap_or_else(|e| panic!("{e}")),
                size,
                version: ObjectVersion::from_etag("\"v\"").unwrap_or_else(|e| panic!("{e}")),
            })
            .collect()
    }

    fn run_to_end(jobs: &WarmJobs, p: &RendezvousPlacement, ids: &[&str]) -> usize {
        let mut rounds = 0;
        loop {
            let mut any = false;
            for w in ids {
                let tasks = jobs.take(w, p);
                assert!(tasks.len() <= WARM_TASKS_PER_WORKER);
                any |= !tasks.is_empty();
                let done: Vec<WarmTaskDone> = tasks
                    .iter()
                    .map(|t| WarmTaskDone {
                        job: t.job,
                        task: t.task,
                        bytes: (t.object_size - t.block_offset).min(t.block_size),
                        error: None,
                    })
                    .collect();
                jobs.complete(w, &done);
            }
            rounds += 1;
            if !any {
                return rounds;
            }
        }
    }

    #[test]
    fn every_block_goes_to_its_owner_and_the_job_ends_with_every_byte() {
        let p = placement(&["a", "b", "c"]);
        let jobs = WarmJobs::default();
        // Five objects of 2.5 blocks: 15 blocks.
        let view = jobs
            .start("s3://b/data/", &objects(5, 2560), 1024, 0, &p)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((view.objects, view.blocks, view.bytes), (5, 15, 12_800));
        // A task is handed only to its block's owner.
        for w in ["a", "b", "c"] {
            for t in jobs.take(w, &p) {
                let block = BlockId::new(
                    ObjectId::from_key_path(&t.key_path).unwrap_or_else(|e| panic!("{e}")),
                    ObjectVersion::from_etag(&t.version).unwrap_or_else(|e| panic!("{e}")),
                    t.block_offset,
                    t.block_size,
                )
                .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(p.locate(&block).map(|m| m.id.as_str()), Some(w));
            }
        }
        let jobs = WarmJobs::default();
        let id = jobs
            .start("s3://b/data/", &objects(5, 2560), 1024, 0, &p)
            .unwrap_or_else(|e| panic!("{e}"))
            .id;
        run_to_end(&jobs, &p, &["a", "b", "c"]);
        let v = jobs.view(id).unwrap_or_else(|| panic!("no job"));
        assert_eq!(v.state, WarmState::Done);
        assert_eq!(
            (v.objects_done, v.blocks_done, v.bytes_done),
            (5, 15, 12_800)
        );
    }

    #[test]
    fn the_budget_leaves_objects_out_and_cancel_drops_the_rest() {
        let p = placement(&["a"]);
        let jobs = WarmJobs::default();
        let v = jobs
            .start("s3://b/data/", &objects(10, 1000), 1024, 3500, &p)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v.objects, v.bytes, v.objects_over_budget), (3, 3000, 7));
        let first = jobs.take("a", &p);
        assert_eq!(first.len(), 3);
        let v = jobs.cancel(v.id).unwrap_or_else(|| panic!("no job"));
        assert_eq!(v.state, WarmState::Cancelled);
        assert!(
            jobs.take("a", &p).is_empty(),
            "nothing handed out after a cancel"
        );
        // A late report of a cancelled job changes nothing.
        jobs.complete(
            "a",
            &[WarmTaskDone {
                job: v.id,
                task: first[0].task,
                bytes: 1000,
                error: None,
            }],
        );
        assert_eq!(jobs.view(v.id).map(|v| v.bytes_done), Some(0));
    }

    #[test]
    fn a_departed_workers_tasks_go_to_the_new_owner_and_reports_from_others_are_ignored() {
        let before = placement(&["a", "b"]);
        let jobs = WarmJobs::default();
        let id = jobs
            .start("s3://b/data/", &objects(8, 1024), 1024, 0, &before)
            .unwrap_or_else(|e| panic!("{e}"))
            .id;
        let after = placement(&["a"]);
        // b left before taking anything: everything is a's now.
        let rounds = run_to_end(&jobs, &after, &["a"]);
        assert!(rounds >= 2);
        assert_eq!(jobs.view(id).map(|v| v.state), Some(WarmState::Done));
        // A report from a worker the task was not handed to is ignored.
        let jobs = WarmJobs::default();
        let id = jobs
            .start("s3://b/data/", &objects(1, 10), 1024, 0, &after)
            .unwrap_or_else(|e| panic!("{e}"))
            .id;
        let t = jobs.take("a", &after);
        jobs.complete(
            "b",
            &[WarmTaskDone {
                job: id,
                task: t[0].task,
                bytes: 10,
                error: None,
            }],
        );
        assert_eq!(jobs.view(id).map(|v| v.blocks_done), Some(0));
    }
}
