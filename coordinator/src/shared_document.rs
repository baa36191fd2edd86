//! One small versioned document of cluster state (the pins, the invalidations), set
//! through the API and handed to every worker and gateway.
//!
//! In memory by default; with etcd (`--state etcd://…`) the document is one key, changed
//! by compare-and-put and followed by every coordinator, so any of them may change it
//! and all hand out the same.

use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::etcd::{Etcd, Expect, WatchEvent};
use talon_coordinator_client::error::CoordinatorError;

/// A document kept by [`SharedDocument`].
pub trait Document: Serialize + DeserializeOwned + Clone + Default + Send + Sync {
    /// Raised by one at each change.
    fn version(&self) -> u64;
}

/// A part of the coordinator's state kept as one [`SharedDocument`]: the coordinator
/// loads it before it is ready and mirrors it while it runs.
pub trait ClusterDocument {
    /// What it keeps.
    type Doc: Document + 'static;
    /// Its document.
    fn document(&self) -> &Arc<SharedDocument<Self::Doc>>;
}

/// A document as this coordinator knows it.
#[derive(Debug)]
pub struct SharedDocument<T> {
    current: Mutex<T>,
    /// The etcd cluster and the key holding the document, when shared.
    shared: Option<(Arc<Etcd>, String)>,
    /// What it is, for messages ("pins").
    what: &'static str,
}

impl<T: Document> SharedDocument<T> {
    /// A document held in this process only.
    pub fn in_memory(what: &'static str) -> SharedDocument<T> {
        SharedDocument {
            current: Mutex::new(T::default()),
            shared: None,
            what,
        }
    }

    /// A document kept in `etcd` under `key`.
    pub fn shared(etcd: Arc<Etcd>, key: String, what: &'static str) -> SharedDocument<T> {
        SharedDocument {
            current: Mutex::new(T::default()),
            shared: Some((etcd, key)),
            what,
        }
    }

    fn now(&self) -> std::sync::MutexGuard<'_, T> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The document.
    pub fn get(&self) -> T {
        self.now().clone()
    }

    /// Replaces the document with what `change` makes of the stored one (in etcd first,
    /// when shared); the new document.
    ///
    /// # Errors
    /// `change`'s own error; [`CoordinatorError::Conflict`] when a concurrent change
    /// won; [`CoordinatorError::StateStore`] when etcd cannot be reached or holds
    /// something else. None changes anything.
    pub async fn change(
        &self,
        change: impl Fn(&T) -> Result<T, CoordinatorError>,
    ) -> Result<T, CoordinatorError> {
        let Some((etcd, key)) = &self.shared else {
            let mut now = self.now();
            let next = change(&now)?;
            *now = next.clone();
            return Ok(next);
        };
        let held = etcd.get(key.as_bytes()).await?;
        let (stored, expect) = match &held {
            Some(kv) => (
                serde_json::from_slice::<T>(&kv.value).map_err(|e| {
                    CoordinatorError::StateStore(format!("the {} in etcd: {e}", self.what))
                })?,
                Expect::ModRevision(kv.mod_revision),
            ),
            None => (T::default(), Expect::Absent),
        };
        let next = change(&stored)?;
        let value = serde_json::to_vec(&next).map_err(|e| {
            CoordinatorError::StateStore(format!("encoding the {}: {e}", self.what))
        })?;
        if !etcd.put_if(key.as_bytes(), &value, 0, expect).await? {
            return Err(CoordinatorError::Conflict(format!(
                "the {} changed (version {} was current); read them and try again",
                self.what,
                stored.version()
            )));
        }
        *self.now() = next.clone();
        Ok(next)
    }

    /// Replaces the document with `build(next version)`, refused unless the stored one
    /// is still at `expect_version` (when given): a read-modify-write that loses no
    /// concurrent change.
    ///
    /// # Errors
    /// As [`change`](Self::change); [`CoordinatorError::Conflict`] for a stale
    /// `expect_version`.
    pub async fn replace(
        &self,
        expect_version: Option<u64>,
        build: impl Fn(u64) -> T,
    ) -> Result<T, CoordinatorError> {
        self.change(|stored| {
            let now = stored.version();
            if let Some(v) = expect_version.filter(|v| *v != now) {
                return Err(CoordinatorError::Conflict(format!(
                    "the {} changed (version {now}, not {v}); read them and set them again",
                    self.what
                )));
            }
            Ok(build(now + 1))
        })
        .await
    }

    fn take(&self, value: &[u8]) {
        if let Ok(doc) = serde_json::from_slice::<T>(value) {
            *self.now() = doc;
        }
    }

    /// Reads the document from etcd once (before the coordinator says it is ready).
    ///
    /// # Errors
    /// [`CoordinatorError::StateStore`] when etcd cannot be reached.
    pub async fn load(&self) -> Result<(), CoordinatorError> {
        if let Some((etcd, key)) = &self.shared {
            match etcd.get(key.as_bytes()).await? {
                Some(kv) => self.take(&kv.value),
                None => *self.now() = T::default(),
            }
        }
        Ok(())
    }

    /// Follows the document in etcd until `stop` (nothing to do in memory).
    pub async fn mirror(self: Arc<Self>, stop: watch::Receiver<bool>) {
        let Some((etcd, key)) = &self.shared else {
            return;
        };
        etcd.follow(
            key.as_bytes(),
            stop,
            |kvs| match kvs.iter().find(|kv| kv.key == key.as_bytes()) {
                Some(kv) => self.take(&kv.value),
                None => *self.now() = T::default(),
            },
            |event| match event {
                WatchEvent::Put(kv) if kv.key == key.as_bytes() => self.take(&kv.value),
                WatchEvent::Delete(k) if k == key.as_bytes() => *self.now() = T::default(),
                _ => {}
            },
        )
        .await;
    }
}
