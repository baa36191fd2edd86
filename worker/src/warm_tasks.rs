//! Warm tasks: blocks the coordinator asks this worker to fill for a warm job (handed
//! out with heartbeat answers; `talon_coordinator::warm`). Each fills one whole block
//! from the origin into the block store, pinned to the listed version, through the
//! same miss loader as a read (so concurrent reads of the block share the fill), and
//! its outcome goes back with the next heartbeat. The coordinator bounds how many a
//! worker holds at once; nothing here queues.

use std::sync::{Arc, Mutex};

use talon_coordinator_client::api::{WarmTask, WarmTaskDone};
use talon_core::wire::ReadRangeRequest;
use talon_core::{BlockId, ObjectId, ObjectVersion};

use crate::loader::{Durability, Loader, Prepared};

/// The outcomes of finished tasks, until a heartbeat carries them.
#[derive(Debug, Default)]
pub struct WarmReports {
    done: Mutex<Vec<WarmTaskDone>>,
}

impl WarmReports {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<WarmTaskDone>> {
        self.done.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The reports to send with this heartbeat.
    pub fn take(&self) -> Vec<WarmTaskDone> {
        std::mem::take(&mut *self.lock())
    }

    /// Reports a heartbeat did not deliver, to send with the next one.
    pub fn give_back(&self, mut reports: Vec<WarmTaskDone>) {
        reports.append(&mut self.lock());
        *self.lock() = reports;
    }

    /// Starts filling each of `tasks` in the background.
    pub fn start(self: &Arc<Self>, loader: &Arc<Loader>, tasks: Vec<WarmTask>) {
        for task in tasks {
            let (reports, loader) = (self.clone(), loader.clone());
            tokio::spawn(async move {
                let outcome = fill(&loader, &task).await;
                if let Err(e) = &outcome {
                    tracing::warn!(job = task.job, object = %task.key_path, offset = task.block_offset, error = %e, "a warm task failed");
                }
                reports.lock().push(WarmTaskDone {
                    job: task.job,
                    task: task.task,
                    bytes: *outcome.as_ref().unwrap_or(&0),
                    error: outcome.err(),
                });
            });
        }
    }
}

/// Fills the task's whole block; the bytes now cached.
async fn fill(loader: &Loader, task: &WarmTask) -> Result<u64, String> {
    let object = ObjectId::from_key_path(&task.key_path).map_err(|e| e.to_string())?;
    let version = ObjectVersion::from_etag(&task.version).map_err(|e| e.to_string())?;
    let block = BlockId::new(object, version, task.block_offset, task.block_size)
        .map_err(|e| e.to_string())?;
    let len = block.len_in(task.object_size);
    let req = ReadRangeRequest {
        block,
        object_size: task.object_size,
        offset: 0,
        len: u32::try_from(len).map_err(|_| format!("a block of {len} bytes is too large"))?,
    };
    match loader
        .prepare(&req, Durability::BeforeAnswer)
        .await
        .map_err(|e| e.to_string())?
    {
        // `Fetched` is only answered to write-behind reads; it would mean being written.
        Prepared::Cached { .. } | Prepared::Fetched(_) => Ok(len),
        Prepared::PassThrough(_) | Prepared::NotKept => {
            Err("not cached: the worker has no room for it".into())
        }
    }
}
