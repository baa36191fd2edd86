//! `talon-worker`: one cache worker.
//!
//! It owns the block store on local disk ([`block_store`]: sparse block files, present
//! pages, checksums, one global byte budget with [`eviction`]), the miss path
//! ([`loader`]: origin fetches pinned to a version, single-flight, readahead, bounded and
//! retried; fills started ahead of sequential readers in [`prefetch`]), object metadata with a TTL ([`origins`]), the data plane ([`data_plane`]:
//! Layer 1 on io_uring rings or on Tokio; Layer 2 zero-copy in [`zero_copy`]), how many
//! blocks and connections fit under the open-files limit ([`descriptors`]), and its
//! [`metrics`].
//!
//! It does not own placement (the coordinator decides which worker owns a block and the
//! cache client asks that worker), the object-store protocols (talon-protocols), or the
//! wire format (talon-core).

pub mod block_store;
pub mod bulk_revalidation;
pub mod cli;
pub mod crash_points;
pub mod data_plane;
pub mod descriptors;
pub mod error;
pub mod eviction;
pub mod loader;
pub mod metrics;
pub mod origin_retry;
pub mod origins;
pub mod prefetch;
pub mod read_faults;
pub mod service;
pub mod sync_holds;
pub mod warm_tasks;
pub mod zero_copy;

pub use error::{Result, WorkerError};
pub use service::{RunningWorker, WorkerConfig, start};
