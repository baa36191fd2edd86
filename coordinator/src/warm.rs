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
//! [`WarmJobs`] is one coordinator's view of the jobs. With etcd
//! (`crate::shared_warm`), a job's [`WarmPlan`] and every finished task are written
//! there, and every coordinator builds the same tasks from the plan and records the same
//! finished ones, so a worker collects its tasks from whichever coordinator it
//! heartbeats to, and a job outlives the coordinator that started it. Which tasks are
//! out, and to whom, stays with the coordinator that handed them.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use talon_core::{BlockId, ObjectId, ObjectVersion};

use talon_coordinator_client::api::{
    WARM_TASK_TIMEOUT_MS, WARM_TASKS_PER_WORKER, WarmJobView, WarmState, WarmTask, WarmTaskDone,
};
use talon_coordinator_client::error::CoordinatorError;
use talon_coordinator_client::placement::RendezvousPlacement;

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

/// What a job warms: the objects taken (in listing order, within the budget) and the
/// block size. The same plan gives the same tasks, numbered the same, on every
/// coordinator ([`WarmJobs::add`]), which is what lets several coordinators share a job
/// through etcd (`crate::shared_warm`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmPlan {
    /// What the job was asked to warm (a source URL, or "N objects").
    pub source: String,
    /// Bytes per block (a power of two).
    pub block_size: u64,
    /// The objects taken.
    pub objects: Vec<ListedObject>,
    /// Objects listed but left out because the budget would have been passed.
    pub over_budget: u64,
}

impl WarmPlan {
    /// Takes `listed` in order until `budget_bytes` (0: no budget) would be passed.
    ///
    /// # Errors
    /// A message when the block size is not a power of two or the job would hold more
    /// than [`MAX_BLOCKS_PER_JOB`] blocks.
    pub fn new(
        source: &str,
        listed: Vec<ListedObject>,
        block_size: u64,
        budget_bytes: u64,
    ) -> Result<WarmPlan, String> {
        if !block_size.is_power_of_two() {
            return Err(format!("block size {block_size} is not a power of two"));
        }
        let (mut bytes, mut blocks, mut over_budget) = (0u64, 0u64, 0u64);
        let mut objects = Vec::with_capacity(listed.len());
        for o in listed {
            if budget_bytes > 0 && bytes.saturating_add(o.size) > budget_bytes {
                over_budget += 1;
                continue;
            }
            bytes += o.size;
            blocks += o.size.div_ceil(block_size);
            if blocks > MAX_BLOCKS_PER_JOB as u64 {
                return Err(format!(
                    "the job has more than {MAX_BLOCKS_PER_JOB} blocks; warm a narrower prefix or set a budget"
                ));
            }
            objects.push(o);
        }
        Ok(WarmPlan {
            source: source.to_owned(),
            block_size,
            objects,
            over_budget,
        })
    }
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
    /// Bytes per block of its tasks.
    block_size: u64,
    state: WarmState,
    /// When it was started, by the wall clock (it may have been started elsewhere).
    started: SystemTime,
    /// How long it ran, once it is no longer running.
    ran: Option<Duration>,
    /// Every task; a task's id is its index.
    tasks: Vec<Task>,
    /// Which tasks are done, by id.
    done: Vec<bool>,
    /// Blocks left per object.
    blocks_left: Vec<u32>,
    bytes: u64,
    bytes_done: u64,
    blocks_done: u64,
    objects_done: u64,
    over_budget: u64,
    errors: u64,
    first_error: Option<String>,
    /// Queued task ids by the worker (id) that owns their block; a done task is
    /// skipped when its turn comes.
    queued: HashMap<String, VecDeque<u64>>,
    /// Tasks out, by task id: the worker and when it took it.
    out: HashMap<u64, (String, Instant)>,
}

impl Job {
    fn elapsed(&self) -> Duration {
        self.ran.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(self.started)
                .unwrap_or_default()
        })
    }

    fn view(&self, id: u64) -> WarmJobView {
        WarmJobView {
            id,
            source: self.source.clone(),
            block_size: self.block_size,
            state: self.state,
            objects: self.blocks_left.len() as u64,
            objects_done: self.objects_done,
            bytes: self.bytes,
            bytes_done: self.bytes_done,
            blocks: self.tasks.len() as u64,
            blocks_done: self.blocks_done,
            objects_over_budget: self.over_budget,
            errors: self.errors,
            first_error: self.first_error.clone(),
            elapsed_ms: u64::try_from(self.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    }

    fn stop(&mut self, state: WarmState) {
        if self.state == WarmState::Running {
            self.ran = Some(self.elapsed());
            self.state = state;
            self.queued.clear();
            self.out.clear();
        }
    }

    fn finish_if_done(&mut self) {
        if self.blocks_done == self.tasks.len() as u64 {
            self.stop(WarmState::Done);
        }
    }

    /// Marks task `d.task` done; false when it is unknown or done already.
    fn mark_done(&mut self, d: &WarmTaskDone) -> bool {
        let Ok(at) = usize::try_from(d.task) else {
            return false;
        };
        match self.done.get_mut(at) {
            Some(done) if !*done => *done = true,
            _ => return false,
        }
        self.out.remove(&d.task);
        let task = &self.tasks[at];
        self.blocks_done += 1;
        match &d.error {
            None => self.bytes_done += d.bytes.min(task.len),
            Some(e) => {
                self.errors += 1;
                if self.first_error.is_none() {
                    self.first_error = Some(format!("{}: {e}", task.wire.key_path));
                }
            }
        }
        if let Some(left) = self.blocks_left.get_mut(task.object) {
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.objects_done += 1;
            }
        }
        true
    }
}

/// Every warm job this coordinator knows: those it started, and (with etcd) those the
/// other coordinators started, mirrored.
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

    /// Starts a job of `plan` under the next free id, each block queued for its owner
    /// in `placement`, and forgets the oldest finished jobs past [`MAX_JOBS`]. Returns
    /// the job's view.
    ///
    /// # Errors
    /// A message when a block of the plan cannot be named.
    pub fn start(
        &self,
        plan: &WarmPlan,
        placement: &RendezvousPlacement,
    ) -> Result<WarmJobView, String> {
        // Taken under the lock, so two jobs started at once get two ids.
        let id = {
            let mut jobs = self.lock();
            jobs.next_id += 1;
            jobs.next_id
        };
        let view = self.add(id, plan, SystemTime::now(), WarmState::Running, placement)?;
        for old in self.finished_past_limit() {
            self.remove(old);
        }
        Ok(view)
    }

    /// Adds job `id` of `plan`, started at `started`, in `state`; when running, each
    /// block is queued for its owner in `placement`. A job already known is left as it
    /// is. Returns the job's view.
    ///
    /// # Errors
    /// A message when a block of the plan cannot be named.
    pub fn add(
        &self,
        id: u64,
        plan: &WarmPlan,
        started: SystemTime,
        state: WarmState,
        placement: &RendezvousPlacement,
    ) -> Result<WarmJobView, String> {
        if let Some(known) = self.view(id) {
            return Ok(known);
        }
        let mut job = Job {
            source: plan.source.clone(),
            block_size: plan.block_size,
            state: WarmState::Running,
            started,
            ran: None,
            tasks: Vec::new(),
            done: Vec::new(),
            blocks_left: Vec::with_capacity(plan.objects.len()),
            bytes: 0,
            bytes_done: 0,
            blocks_done: 0,
            objects_done: 0,
            over_budget: plan.over_budget,
            errors: 0,
            first_error: None,
            queued: HashMap::new(),
            out: HashMap::new(),
        };
        let block_size = plan.block_size;
        for (index, o) in plan.objects.iter().enumerate() {
            let mut blocks = 0u32;
            let mut offset = 0u64;
            while offset < o.size {
                let block = BlockId::new(o.id.clone(), o.version.clone(), offset, block_size)
                    .map_err(|e| e.to_string())?;
                let task = Task {
                    wire: WarmTask {
                        job: id,
                        task: job.tasks.len() as u64,
                        key_path: o.id.key_path(),
                        version: o.version.as_str().to_owned(),
                        object_size: o.size,
                        block_offset: offset,
                        block_size,
                    },
                    object: index,
                    len: block.len_in(o.size),
                    block,
                };
                if state == WarmState::Running {
                    let owner = owner_of(placement, &task.block).unwrap_or_default();
                    job.queued
                        .entry(owner)
                        .or_default()
                        .push_back(task.wire.task);
                }
                job.tasks.push(task);
                blocks += 1;
                offset += block_size;
            }
            job.bytes += o.size;
            if blocks == 0 {
                job.objects_done += 1;
            }
            job.blocks_left.push(blocks);
        }
        job.done = vec![false; job.tasks.len()];
        job.finish_if_done();
        if state != WarmState::Running {
            job.stop(state);
        }
        let view = job.view(id);
        let mut jobs = self.lock();
        jobs.next_id = jobs.next_id.max(id);
        jobs.jobs.insert(id, job);
        drop(jobs);
        tracing::info!(
            id,
            source = plan.source,
            objects = view.objects,
            bytes = view.bytes,
            blocks = view.blocks,
            "warm job added"
        );
        Ok(view)
    }

    /// The finished jobs past [`MAX_JOBS`], oldest first: those to forget.
    pub fn finished_past_limit(&self) -> Vec<u64> {
        let jobs = self.lock();
        let excess = jobs.jobs.len().saturating_sub(MAX_JOBS);
        jobs.jobs
            .iter()
            .filter(|(_, j)| j.state != WarmState::Running)
            .map(|(id, _)| *id)
            .take(excess)
            .collect()
    }

    /// Forgets job `id`.
    pub fn remove(&self, id: u64) {
        self.lock().jobs.remove(&id);
    }

    /// Forgets every job not in `ids`.
    pub fn retain_only(&self, ids: &[u64]) {
        self.lock().jobs.retain(|id, _| ids.contains(id));
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
            .map(|j| j.out.values().filter(|(w, _)| w == worker).count())
            .sum();
        for job in jobs.jobs.values_mut() {
            if job.state != WarmState::Running {
                continue;
            }
            // Tasks that timed out, and queues of workers that left: to the owner now.
            let mut requeue: Vec<u64> = job
                .out
                .iter()
                .filter(|(_, (_, at))| now.saturating_duration_since(*at) >= timeout)
                .map(|(id, _)| *id)
                .collect();
            for id in &requeue {
                job.out.remove(id);
            }
            let gone: Vec<String> = job
                .queued
                .keys()
                .filter(|w| !placement.members().iter().any(|m| &m.id == *w))
                .cloned()
                .collect();
            for w in gone {
                requeue.extend(job.queued.remove(&w).unwrap_or_default());
            }
            for id in requeue {
                let Some(task) = usize::try_from(id).ok().and_then(|i| job.tasks.get(i)) else {
                    continue;
                };
                let owner = owner_of(placement, &task.block).unwrap_or_default();
                job.queued.entry(owner).or_default().push_back(id);
            }
            while out_here < WARM_TASKS_PER_WORKER {
                let Some(id) = job.queued.get_mut(worker).and_then(VecDeque::pop_front) else {
                    break;
                };
                let Some(task) = usize::try_from(id)
                    .ok()
                    .filter(|&i| !job.done.get(i).copied().unwrap_or(true))
                    .map(|i| &job.tasks[i])
                else {
                    continue;
                };
                handed.push(task.wire.clone());
                job.out.insert(id, (worker.to_owned(), now));
                out_here += 1;
            }
        }
        handed
    }

    /// Of worker `worker`'s reports, those of tasks out to it now (not handed again
    /// elsewhere, not cancelled, not done): the ones to record. Changes nothing.
    pub fn accept(&self, worker: &str, done: &[WarmTaskDone]) -> Vec<WarmTaskDone> {
        let jobs = self.lock();
        done.iter()
            .filter(|d| {
                jobs.jobs
                    .get(&d.job)
                    .and_then(|j| j.out.get(&d.task))
                    .is_some_and(|(w, _)| w == worker)
            })
            .cloned()
            .collect()
    }

    /// Records finished tasks (accepted here or elsewhere). A task already recorded, or
    /// of a job not running, is ignored, so a report applies once however often it
    /// arrives.
    pub fn record(&self, done: &[WarmTaskDone]) {
        let mut jobs = self.lock();
        for d in done {
            let Some(job) = jobs.jobs.get_mut(&d.job) else {
                continue;
            };
            if job.state == WarmState::Running && job.mark_done(d) {
                job.finish_if_done();
            }
        }
    }

    /// Records worker `worker`'s reports of finished tasks. A report of a task not out
    /// to that worker (already handed again elsewhere, or cancelled) is ignored.
    pub fn complete(&self, worker: &str, done: &[WarmTaskDone]) {
        if !done.is_empty() {
            self.record(&self.accept(worker, done));
        }
    }

    /// Cancels job `id`: its queued tasks are dropped (the blocks filled stay cached).
    pub fn cancel(&self, id: u64) -> Option<WarmJobView> {
        let mut jobs = self.lock();
        let job = jobs.jobs.get_mut(&id)?;
        if job.state == WarmState::Running {
            job.stop(WarmState::Cancelled);
            tracing::info!(id, "warm job cancelled");
        }
        Some(job.view(id))
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
        self.lock().jobs.get(&id).map(|j| j.view(id))
    }

    /// Every job's view, oldest first.
    pub fn list(&self) -> Vec<WarmJobView> {
        self.lock().jobs.iter().map(|(id, j)| j.view(*id)).collect()
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
            .map_err(|e| match e.kind() {
                // The caller's mistake, not a passing failure: no 503 to retry.
                talon_protocols::ErrorKind::NoSuchBucket => {
                    bad(&format!("{bucket} does not exist at the origin"))
                }
                _ => CoordinatorError::StateStore(format!("listing {source} at the origin: {e}")),
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
    use talon_coordinator_client::placement::PlacementMember;

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

    fn plan(objects: Vec<ListedObject>, budget: u64) -> WarmPlan {
        WarmPlan::new("s3://b/data/", objects, 1024, budget).unwrap_or_else(|e| panic!("{e}"))
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
            .start(&plan(objects(5, 2560), 0), &p)
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
            .start(&plan(objects(5, 2560), 0), &p)
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
            .start(&plan(objects(10, 1000), 3500), &p)
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
            .start(&plan(objects(8, 1024), 0), &before)
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
            .start(&plan(objects(1, 10), 0), &after)
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
