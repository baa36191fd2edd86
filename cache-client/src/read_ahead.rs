//! Read-ahead: the pieces ahead of a sequential reader are filled before it asks for
//! them. A read's own window ([`CacheClientConfig::read_window`]) bounds the bytes it
//! holds, and so how many pieces are fetched from the origin at once for it; a cold
//! object read in order (a whole 1 GiB GET, a Parquet scan, `download_fileobj`'s
//! consecutive ranges) would otherwise be filled one window at a time. Here the owners
//! of the next [`CacheClientConfig::read_ahead_pieces`] pieces past the window are sent
//! a Prefetch (the worker fills them in the background, holding nothing in this
//! process), so that when the window gets there they are present or being filled.
//!
//! When it starts: a read starts reading ahead once one of its pieces was a fill (the
//! worker went to the origin for it), or at once when it continues where a read of the
//! same object version that was reading ahead ended (consecutive ranged GETs). Past
//! the last piece of a read that continues another, the pieces beyond its end are
//! prefetched too (the next ranged GET's). A read of cached bytes, or a random one,
//! sends nothing. A prefetch asks only the first owner, only when its circuit is closed,
//! and its answer (or failure) says nothing to any circuit: the reader's own request
//! for the piece is what counts. Workers bound their background fills per object and in
//! all, and decline beyond (`talon_worker::prefetch`).

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use talon_core::wire::{PrefetchOutcome, ReadRangeRequest};
use talon_core::{Message, ObjectId, ObjectVersion};

use crate::CacheClient;
use crate::connection::Answer;
use crate::read::Piece;

/// Object versions whose last read was reading ahead, remembered to tell that the next
/// read continues it.
const REMEMBERED_READS: usize = 4096;

/// How long after the last filled read a read still looks up whether it continues one:
/// past it (a workload of hits only) a read looks nothing up, at the cost of a slower
/// scan reading ahead again only from its next fill.
const LOOK_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// Prefetches sent and how workers answered them, since the client was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadAheadStats {
    /// Prefetches sent.
    pub sent: u64,
    /// Answered: every page was present already.
    pub present: u64,
    /// Answered: the worker started filling.
    pub started: u64,
    /// Answered: the worker was at its bound.
    pub declined: u64,
    /// No answer (a failure, a refusal); the reader fills the piece itself.
    pub failed: u64,
}

/// The client's read-ahead state: what recent reads ended where, and the counters.
pub(crate) struct ReadAhead {
    /// Pieces prefetched past a reading-ahead read's window; 0 turns read-ahead off.
    pieces: usize,
    /// A hash of (object, version) → where its last reading-ahead read ended.
    ends: quick_cache::sync::Cache<u64, u64>,
    /// When `ends` was last written, in milliseconds after `since` plus one (0: never):
    /// [`LOOK_FOR`] after it, a read looks nothing up (a clock read and an atomic load
    /// on the hit path).
    remembered_at: AtomicU64,
    since: Instant,
    sent: AtomicU64,
    present: AtomicU64,
    started: AtomicU64,
    declined: AtomicU64,
    failed: AtomicU64,
}

impl ReadAhead {
    pub(crate) fn new(pieces: usize) -> Self {
        Self {
            pieces,
            ends: quick_cache::sync::Cache::new(REMEMBERED_READS),
            remembered_at: AtomicU64::new(0),
            since: Instant::now(),
            sent: AtomicU64::new(0),
            present: AtomicU64::new(0),
            started: AtomicU64::new(0),
            declined: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    pub(crate) fn stats(&self) -> ReadAheadStats {
        ReadAheadStats {
            sent: self.sent.load(Ordering::Relaxed),
            present: self.present.load(Ordering::Relaxed),
            started: self.started.load(Ordering::Relaxed),
            declined: self.declined.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }

    fn count(&self, outcome: Option<PrefetchOutcome>) {
        let counter = match outcome {
            Some(PrefetchOutcome::Present) => &self.present,
            Some(PrefetchOutcome::Started) => &self.started,
            Some(PrefetchOutcome::Declined) => &self.declined,
            None => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The plan of one read of `range` (as `pieces`, its blocks'): `None` when
    /// read-ahead is off, or the read has no more pieces than its window and continues
    /// no reading-ahead read (nothing could be prefetched for it; such a read that
    /// fills is remembered with [`remember`](Self::remember)). `beyond` splits a range
    /// past the read's end into pieces, used only when the read continues another.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn plan(
        &self,
        object: &ObjectId,
        version: &ObjectVersion,
        range: std::ops::Range<u64>,
        pieces: &[Piece],
        window: usize,
        max_piece: u64,
        beyond: impl FnOnce(std::ops::Range<u64>) -> Vec<Piece>,
        object_size: u64,
    ) -> Option<ReadPlan> {
        if self.pieces == 0 {
            return None;
        }
        let looked_up = self.looking().then(|| version_key(object, version));
        let continues = looked_up.is_some_and(|key| self.ends.get(&key) == Some(range.start));
        if !continues && pieces.len() <= window {
            return None;
        }
        let key = looked_up.unwrap_or_else(|| version_key(object, version));
        let mut ahead = pieces.to_vec();
        if continues && range.end < object_size {
            let reach = max_piece.max(1).saturating_mul(self.pieces as u64);
            let end = object_size.min(range.end.saturating_add(reach));
            ahead.extend(beyond(range.end..end).into_iter().take(self.pieces));
        }
        if continues {
            self.remember_end(key, range.end);
        }
        Some(ReadPlan {
            key,
            end: range.end,
            pieces: ahead,
            own: pieces.len(),
            window,
            reading_ahead: AtomicBool::new(continues),
            next: AtomicUsize::new(0),
        })
    }

    /// Remembers that a read of this object version without a plan (no more pieces
    /// than its window) ended at `end` after a fill, so that a read continuing it reads
    /// ahead.
    pub(crate) fn remember(&self, object: &ObjectId, version: &ObjectVersion, end: u64) {
        if self.pieces > 0 {
            self.remember_end(version_key(object, version), end);
        }
    }

    fn remember_end(&self, key: u64, end: u64) {
        self.ends.insert(key, end);
        self.remembered_at
            .store(self.now_ms().saturating_add(1), Ordering::Relaxed);
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether a filled read was remembered within [`LOOK_FOR`].
    fn looking(&self) -> bool {
        let at = self.remembered_at.load(Ordering::Relaxed);
        at > 0 && self.now_ms() < at.saturating_add(LOOK_FOR.as_millis() as u64)
    }
}

/// A hash of an object version: the key of [`ReadAhead`]'s remembered reads (a
/// collision only makes a read prefetch a little it did not need).
fn version_key(object: &ObjectId, version: &ObjectVersion) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    object.hash(&mut h);
    version.hash(&mut h);
    h.finish()
}

/// One read's read-ahead: its pieces (then those past its end, when it continues
/// another read), and how far prefetches have been sent.
pub(crate) struct ReadPlan {
    key: u64,
    end: u64,
    pieces: Vec<Piece>,
    /// How many of `pieces` are the read's own (the rest lie past its end).
    own: usize,
    window: usize,
    reading_ahead: AtomicBool,
    /// The first piece not yet prefetched nor within the window's reach.
    next: AtomicUsize,
}

impl CacheClient {
    /// Tells the read's plan that its piece `index` was delivered (`filled`: the worker
    /// went to the origin for it), sending the prefetches that are now due: every
    /// piece up to `read_ahead_pieces` past the window, once the read is reading ahead.
    pub(crate) fn piece_delivered(
        &self,
        plan: &ReadPlan,
        object: &ObjectId,
        version: &ObjectVersion,
        object_size: u64,
        index: usize,
        filled: bool,
    ) {
        let read_ahead = &self.inner.read_ahead;
        if filled && !plan.reading_ahead.swap(true, Ordering::Relaxed) {
            // Remembered, so that a read that continues this one reads ahead at once.
            read_ahead.remember_end(plan.key, plan.end);
        }
        if !plan.reading_ahead.load(Ordering::Relaxed) {
            return;
        }
        // The window asks for the read's own pieces up to `index + window` itself.
        let from = (index + plan.window).min(plan.own);
        let to = (index + plan.window + read_ahead.pieces).min(plan.pieces.len());
        let start = plan.next.fetch_max(to, Ordering::Relaxed).max(from);
        for piece in plan.pieces.iter().take(to).skip(start) {
            self.prefetch(object, version, object_size, *piece);
        }
    }

    /// Sends a Prefetch for `piece` to its first owner, in the background.
    fn prefetch(&self, object: &ObjectId, version: &ObjectVersion, object_size: u64, piece: Piece) {
        let Ok((block, len)) = self.piece_request(object, version, piece) else {
            return;
        };
        let placement = self.placement();
        let Some(owner) = placement
            .locate_top_k_key(&block.placement_key(), 1)
            .first()
            .map(|m| m.addr.clone())
        else {
            return;
        };
        if !self.inner.health.is_closed(&owner) {
            return;
        }
        let request = Message::Prefetch(ReadRangeRequest {
            block,
            object_size,
            offset: piece.offset,
            len,
        });
        let me = self.clone();
        let until = Instant::now() + self.inner.config.deadlines.workers_share;
        me.inner.read_ahead.sent.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let outcome = match me.ask_worker(&owner, &request, until, None).await {
                Ok(Answer::Message(Message::PrefetchAck(outcome))) => Some(outcome),
                Ok(Answer::Message(Message::Error(e))) => {
                    tracing::debug!(worker = %owner, code = ?e.code, message = %e.message, "a prefetch was refused");
                    None
                }
                Ok(_) => {
                    tracing::debug!(worker = %owner, "a prefetch was answered with something else");
                    None
                }
                Err(e) => {
                    tracing::debug!(worker = %owner, error = %e, "a prefetch failed");
                    None
                }
            };
            me.inner.read_ahead.count(outcome);
        });
    }
}
