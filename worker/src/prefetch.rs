//! Fills started ahead of a reader (the wire's Prefetch): a reader that is reading an
//! object in order asks the owners of the pieces ahead of it to fill them now, so they
//! are fetched from the origin in parallel instead of one window at a time. A prefetch
//! is answered at once; its fill runs in the background through the same miss loader
//! as a read (single-flight: a reader that arrives meanwhile joins the fill), and its
//! pages are durable before they are called present, as a warm task's are. A prefetch
//! never fetches what it cannot keep (no room, a failing disk): it ends "not cached"
//! and the reader's own read goes to the origin as it would have.
//!
//! Background fills are bounded per worker and per object ([`PrefetchBounds`]); beyond
//! either the prefetch is declined and the reader's own read fills the pages when it
//! gets there. Origin requests stay under the loader's own bound as well.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use talon_core::ObjectId;
use talon_core::wire::{PrefetchOutcome, ReadRangeRequest};
use tokio::sync::Semaphore;

use crate::loader::{Durability, Loader, Prepared};

/// Default of [`PrefetchBounds::fills`]: 32 background fills per worker (2 MiB pieces:
/// 64 MiB being fetched ahead of readers at most).
pub const DEFAULT_PREFETCH_FILLS: usize = 32;

/// Default of [`PrefetchBounds::fills_per_object`]: 8 per object, so that one reader
/// cannot take every slot and a per-response origin bandwidth is multiplied by 8.
pub const DEFAULT_PREFETCH_FILLS_PER_OBJECT: usize = 8;

/// How many prefetch fills a worker runs at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefetchBounds {
    /// In all; 0 declines every prefetch.
    pub fills: usize,
    /// Of one object (every version together).
    pub fills_per_object: usize,
}

impl Default for PrefetchBounds {
    fn default() -> Self {
        Self {
            fills: DEFAULT_PREFETCH_FILLS,
            fills_per_object: DEFAULT_PREFETCH_FILLS_PER_OBJECT,
        }
    }
}

/// The prefetch fills running on this worker.
#[derive(Debug)]
pub struct Prefetches {
    bounds: PrefetchBounds,
    slots: Arc<Semaphore>,
    per_object: Mutex<HashMap<ObjectId, usize>>,
}

/// A prefetch fill's hold on its object's count, given back when dropped (when the fill
/// ends, or with its task if it never runs).
struct ObjectSlot {
    loader: Arc<Loader>,
    object: ObjectId,
}

impl Drop for ObjectSlot {
    fn drop(&mut self) {
        let mut running = self.loader.prefetches().lock();
        if let Some(n) = running.get_mut(&self.object) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                running.remove(&self.object);
            }
        }
    }
}

impl Prefetches {
    /// No fills running, within `bounds`.
    pub fn new(bounds: PrefetchBounds) -> Self {
        Self {
            bounds,
            slots: Arc::new(Semaphore::new(bounds.fills)),
            per_object: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectId, usize>> {
        self.per_object.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one more fill of `object`, unless it has its bound already; the count is
    /// given back by dropping the `ObjectSlot` made for it.
    fn take_object(&self, object: &ObjectId) -> bool {
        let mut running = self.lock();
        let n = running.entry(object.clone()).or_insert(0);
        if *n >= self.bounds.fills_per_object {
            if *n == 0 {
                running.remove(object);
            }
            return false;
        }
        *n += 1;
        true
    }
}

impl Loader {
    /// Answers a Prefetch: [`PrefetchOutcome::Present`] when every page of `req` is
    /// present and verified; [`PrefetchOutcome::Started`] when a background fill of it
    /// was started (it ends once the pages are durable, or fails, logged and counted);
    /// [`PrefetchOutcome::Declined`] at the worker's or the object's bound. Needs a
    /// Tokio runtime. `req` must be valid ([`ReadRangeRequest::validate`]).
    pub fn prefetch(self: &Arc<Self>, req: &ReadRangeRequest) -> PrefetchOutcome {
        let outcome = self.start_prefetch(req);
        self.metrics().prefetch(outcome.name());
        outcome
    }

    fn start_prefetch(self: &Arc<Self>, req: &ReadRangeRequest) -> PrefetchOutcome {
        if req.len == 0
            || self
                .store()
                .ready_for_read(&req.block, req.object_size, req.offset, u64::from(req.len))
                .is_some()
        {
            return PrefetchOutcome::Present;
        }
        let prefetches = self.prefetches();
        let Ok(slot) = prefetches.slots.clone().try_acquire_owned() else {
            return PrefetchOutcome::Declined;
        };
        if !prefetches.take_object(req.block.object()) {
            return PrefetchOutcome::Declined;
        }
        let object_slot = ObjectSlot {
            loader: self.clone(),
            object: req.block.object().clone(),
        };
        let (loader, req) = (self.clone(), req.clone());
        tokio::spawn(async move {
            let result = loader.prepare(&req, Durability::KeptOnly).await;
            let outcome = match result {
                Ok(Prepared::Cached { .. } | Prepared::Fetched(_)) => "filled",
                Ok(Prepared::PassThrough(_) | Prepared::NotKept) => "not_cached",
                Err(e) => {
                    tracing::debug!(block = %req.block, offset = req.offset, len = req.len, error = %e, "a prefetch's fill failed; the reader will fill the pages");
                    "failed"
                }
            };
            loader.metrics().prefetch(outcome);
            drop(object_slot);
            drop(slot);
        });
        PrefetchOutcome::Started
    }
}
