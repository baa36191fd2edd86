//! The origins a worker fetches from, one per backend, and the metadata cache in front
//! of them.
//!
//! A block names its object by backend (S3 or Azure), namespace and path; [`Origins`]
//! (from talon-protocols) turns that into a request on the right origin client.
//! [`StatCache`] answers "what
//! is this object's size and version" from memory for a configurable TTL (and caches
//! "not found" for a shorter one), so a hot object's metadata reaches the origin at
//! most once per TTL; concurrent misses for one object share one HEAD.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use talon_core::ObjectId;
use talon_protocols::ErrorKind;
use talon_protocols::origin::ObjectInfo;
pub use talon_protocols::origin::Origins;
use tokio::sync::watch;

use crate::error::{Result, WorkerError};

type StatOutcome = std::result::Result<ObjectInfo, Arc<WorkerError>>;

#[derive(Debug)]
enum Entry {
    Ready { at: Instant, outcome: StatOutcome },
    Pending(watch::Receiver<Option<StatOutcome>>),
}

/// Object metadata with a TTL, shared fetches, and negative caching of not-found.
#[derive(Debug)]
pub struct StatCache {
    origins: Arc<Origins>,
    ttl: Duration,
    negative_ttl: Duration,
    entries: Mutex<HashMap<ObjectId, Entry>>,
}

impl StatCache {
    /// A cache answering from memory for `ttl` (and `negative_ttl` for not-found).
    pub fn new(origins: Arc<Origins>, ttl: Duration, negative_ttl: Duration) -> StatCache {
        StatCache {
            origins,
            ttl,
            negative_ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The object's metadata: cached, or fetched with one HEAD shared by every caller
    /// that asks meanwhile.
    ///
    /// # Errors
    /// The origin's error (not-found is cached for the negative TTL; other failures are
    /// not cached).
    pub async fn stat(&self, object: &ObjectId) -> Result<ObjectInfo> {
        loop {
            let action = {
                let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
                match entries.get(object) {
                    Some(Entry::Ready { at, outcome }) => {
                        let ttl = if outcome.is_ok() {
                            self.ttl
                        } else {
                            self.negative_ttl
                        };
                        if at.elapsed() < ttl {
                            return outcome.clone().map_err(WorkerError::Shared);
                        }
                        None
                    }
                    Some(Entry::Pending(rx)) => Some(rx.clone()),
                    None => None,
                }
                .map(Err)
                .unwrap_or_else(|| {
                    let (tx, rx) = watch::channel(None);
                    entries.insert(object.clone(), Entry::Pending(rx));
                    Ok(tx)
                })
            };
            match action {
                Err(mut rx) => {
                    let outcome = rx.wait_for(Option::is_some).await.map(|v| v.clone());
                    match outcome {
                        Ok(Some(outcome)) => return outcome.map_err(WorkerError::Shared),
                        // The fetching task went away; try again.
                        _ => continue,
                    }
                }
                Ok(tx) => {
                    let outcome = self.fetch(object).await;
                    let shared: StatOutcome = outcome.map_err(Arc::new);
                    {
                        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
                        let cacheable = match &shared {
                            Ok(_) => true,
                            Err(e) => e.frame_code() == talon_core::ErrorCode::NotFound,
                        };
                        if cacheable {
                            entries.insert(
                                object.clone(),
                                Entry::Ready {
                                    at: Instant::now(),
                                    outcome: shared.clone(),
                                },
                            );
                        } else {
                            entries.remove(object);
                        }
                    }
                    let _ = tx.send(Some(shared.clone()));
                    return shared.map_err(WorkerError::Shared);
                }
            }
        }
    }

    async fn fetch(&self, object: &ObjectId) -> Result<ObjectInfo> {
        let (client, bucket, key) = self.origins.route(object).map_err(WorkerError::Origin)?;
        client.head(&bucket, &key).await.map_err(|e| {
            if e.kind() == ErrorKind::NoSuchBucket {
                WorkerError::Origin(talon_protocols::Error::new(
                    ErrorKind::NoSuchKey,
                    e.message().to_owned(),
                ))
            } else {
                WorkerError::Origin(e)
            }
        })
    }

    /// Forgets an object's metadata (its version changed at the origin).
    pub fn invalidate(&self, object: &ObjectId) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(entries.get(object), Some(Entry::Ready { .. })) {
            entries.remove(object);
        }
    }
}
