//! Reading ranges: the ordered byte stream of [`CacheClient::read_range`], split at
//! block boundaries into pieces; each piece asked of its owners in rendezvous order
//! (hot blocks spread, circuits skipped, hedged when late), read from a handed-off
//! file on this host, and from the origin as the last resort.

use super::*;

/// A stream of the bytes of a range, in order.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes>> + Send + 'static>>;

/// Where one piece of a read came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceSource {
    /// Every byte was already cached on the worker.
    Hit,
    /// The worker fetched bytes from the origin to answer.
    Fill,
    /// The cache failed and the origin answered directly.
    Fallback,
}

/// A running tally of the pieces a read has delivered, by [`PieceSource`].
#[derive(Debug, Default)]
pub struct PieceSources {
    hits: std::sync::atomic::AtomicU64,
    fills: std::sync::atomic::AtomicU64,
    fallbacks: std::sync::atomic::AtomicU64,
}

impl PieceSources {
    fn count(&self, source: PieceSource) {
        let counter = match source {
            PieceSource::Hit => &self.hits,
            PieceSource::Fill => &self.fills,
            PieceSource::Fallback => &self.fallbacks,
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Pieces delivered from cached pages.
    pub fn hits(&self) -> u64 {
        self.hits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Pieces the workers filled from the origin.
    pub fn fills(&self) -> u64 {
        self.fills.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Pieces read from the origin after the cache failed.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A piece's bytes and its hold on the read budget, released together.
pub(crate) struct Budgeted {
    bytes: Bytes,
    _held: Held,
}

impl AsRef<[u8]> for Budgeted {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// The order a read of a hot block asks members in: one of its `homes` homes
/// ([`zones::homes`]: spanning zones) chosen by `turn` — among those in the reader's
/// `zone` when it has any there — then its other homes, those in the reader's zone
/// first, then the rest of `ranked` in rendezvous order.
pub(crate) fn hot_block_order<'m>(
    placement: &'m RendezvousPlacement,
    key: &[u8; 32],
    ranked: Vec<&'m PlacementMember>,
    homes: usize,
    turn: usize,
    zone: &str,
) -> Vec<&'m PlacementMember> {
    let ordered = zones::reader_order(&zones::homes(placement, key, homes), zone);
    let near = if zone.is_empty() {
        0
    } else {
        ordered.iter().take_while(|m| m.zone == zone).count()
    };
    let pool = if near > 0 { near } else { ordered.len() };
    let Some(&first) = ordered.get(turn % pool.max(1)) else {
        return ranked;
    };
    let mut out = Vec::with_capacity(ranked.len() + ordered.len());
    out.push(first);
    out.extend(ordered.iter().copied().filter(|m| m.id != first.id));
    let rest: Vec<&PlacementMember> = ranked
        .into_iter()
        .filter(|m| !out.iter().any(|o| o.id == m.id))
        .collect();
    out.extend(rest);
    out
}

/// The owners of one request in rendezvous order, handed out as the request gets to
/// them: the one place that decides which worker is asked next. A worker whose circuit
/// is open is skipped (and counted); a probe is claimed only for the worker about to
/// be asked, so a read that ends early never strands one. When every owner was
/// skipped and the read may not fall back to the origin, they are handed out again
/// with their circuits ignored: a slow answer beats an error.
pub(crate) struct OwnersToAsk<'m> {
    owners: Vec<&'m talon_coordinator_client::placement::PlacementMember>,
    next: usize,
    /// Owners handed out so far.
    asked: usize,
    circuits_ignored: bool,
    may_ignore_circuits: bool,
}

impl<'m> OwnersToAsk<'m> {
    /// Whether any owner is left to hand out (its circuit not looked at).
    fn has_more(&self) -> bool {
        self.next < self.owners.len()
    }

    fn next(&mut self, health: &WorkerHealth, skipped: &AtomicU64) -> Option<&'m str> {
        loop {
            if self.next == self.owners.len() {
                if self.asked > 0 || self.circuits_ignored || !self.may_ignore_circuits {
                    return None;
                }
                self.circuits_ignored = true;
                self.next = 0;
            }
            let member = *self.owners.get(self.next)?;
            self.next += 1;
            if !self.circuits_ignored && health.admit(&member.addr) == Admission::Skip {
                skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.asked += 1;
            return Some(member.addr.as_str());
        }
    }
}

/// One request's worth of a read: `len` bytes at `offset` in the block at `block_offset`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Piece {
    pub(crate) block_offset: u64,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

/// Reads a handed-off piece from the block file: from the page cache without blocking
/// when it is all there (`preadv2` with `RWF_NOWAIT`), the rest on the blocking pool
/// (a read from the disk must not hold a runtime thread). The buffer is not zeroed
/// first: the reads fill its spare capacity and its length grows by what they wrote
/// (zeroing it was 5.6% of the gateway's CPU at 1 MiB, docs/BENCHMARKS.md).
///
/// # Errors
/// [`CacheClientError::Unavailable`] when the file is shorter than the piece or
/// cannot be read: the piece is then asked of the next worker.
pub(crate) async fn read_handed_off(
    file: Arc<std::fs::File>,
    offset: u64,
    len: u32,
) -> Result<Bytes> {
    let len = len as usize;
    let mut buf: Vec<u8> = Vec::with_capacity(len);
    let unreadable = |e: std::io::Error| {
        CacheClientError::Unavailable(format!("reading a handed-off block file: {e}"))
    };
    let short = || unreadable(std::io::ErrorKind::UnexpectedEof.into());
    while buf.len() < len {
        match read_cached(&file, &mut buf, offset, len) {
            Ok(Some(0)) => return Err(short()),
            Ok(Some(_)) => {}
            // Not all in the page cache, or a filesystem without RWF_NOWAIT.
            Ok(None) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(unreadable(e)),
        }
    }
    if buf.len() < len {
        buf = tokio::task::spawn_blocking(move || {
            while buf.len() < len {
                let at = offset + buf.len() as u64;
                match rustix::io::pread(&*file, rustix::buffer::spare_capacity(&mut buf), at) {
                    Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(std::io::Error::from(e)),
                }
            }
            Ok(buf)
        })
        .await
        .map_err(|e| CacheClientError::Unavailable(format!("a disk task failed: {e}")))?
        .map_err(unreadable)?;
    }
    // `pread` above fills whatever spare capacity the buffer has, which `with_capacity`
    // only promises is at least `len`: the piece is its first `len` bytes.
    buf.truncate(len);
    Ok(Bytes::from(buf))
}

/// Appends to `buf` what of the file's bytes from `offset + buf.len()` the page cache
/// holds, until `buf` holds `len` bytes (or its capacity, if less), without blocking
/// (`preadv2` with `RWF_NOWAIT`): `Some(bytes read)` (0 at the end of the file), `None`
/// when the next bytes are not cached or the filesystem cannot read without blocking.
pub(crate) fn read_cached(
    file: &std::fs::File,
    buf: &mut Vec<u8>,
    offset: u64,
    len: usize,
) -> std::io::Result<Option<usize>> {
    use std::os::fd::AsRawFd;
    let at = libc::off_t::try_from(offset + buf.len() as u64)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let want = len.saturating_sub(buf.len());
    let spare = buf.spare_capacity_mut();
    let iov = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: spare.len().min(want),
    };
    // SAFETY: the one iovec spans `spare`, memory `buf` owns and nothing else touches
    // while the call runs; the kernel writes at most `iov_len` bytes into it and says
    // how many.
    let read = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, at, libc::RWF_NOWAIT) };
    match usize::try_from(read) {
        Ok(n) => {
            // SAFETY: the kernel initialised the first `n` bytes of the spare capacity
            // (n <= `iov_len` <= its length).
            unsafe { buf.set_len(buf.len() + n) };
            Ok(Some(n))
        }
        Err(_) => {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EOPNOTSUPP) => Ok(None),
                _ => Err(e),
            }
        }
    }
}

/// Whether `answer` ends a piece's search: all `want` bytes, or a refusal that holds
/// on any worker (not found, a version mismatch). A transient refusal, a cut answer or
/// a failure does not.
pub(crate) fn settles(answer: &Result<Answer>, want: u64) -> bool {
    match answer {
        Ok(Answer::Data { bytes, .. }) => bytes.len() as u64 == want,
        Ok(Answer::Message(Message::Error(e))) => !e.code.is_transient(),
        Ok(Answer::Message(_) | Answer::Partial { .. } | Answer::File { .. }) | Err(_) => false,
    }
}

/// Of two answers to one piece, the one to go on from: one that settles it, else a cut
/// answer with more bytes (kept, the rest asked elsewhere), else the first.
pub(crate) fn more_delivered<'m>(
    first: (&'m str, Result<Answer>),
    second: (&'m str, Result<Answer>),
    want: u64,
) -> (&'m str, Result<Answer>) {
    let delivered = |a: &Result<Answer>| match a {
        a if settles(a, want) => u64::MAX,
        Ok(Answer::Partial { bytes, .. }) if (bytes.len() as u64) < want => bytes.len() as u64,
        _ => 0,
    };
    if delivered(&second.1) > delivered(&first.1) {
        second
    } else {
        first
    }
}

pub(crate) fn answer_error(answer: Answer) -> CacheClientError {
    match answer {
        Answer::Message(Message::Error(e)) => CacheClientError::Refused {
            code: e.code,
            message: e.message,
        },
        Answer::Message(other) => {
            CacheClientError::Unavailable(format!("unexpected answer {:?}", other.message_type()))
        }
        Answer::Data { .. } | Answer::File { .. } | Answer::Partial { .. } => {
            CacheClientError::Unavailable("unexpected data".into())
        }
    }
}

impl CacheClient {
    /// The origins a read may fall back to: the client's, when it has them and the
    /// read allows it. The one place that decides whether a read that no worker can
    /// answer goes to the origin.
    pub(crate) fn fallback_origins(&self, options: ReadOptions) -> Option<&Origins> {
        if options.origin_fallback {
            self.inner.config.origin_fallback.as_ref()
        } else {
            None
        }
    }

    /// Bytes of fetched pieces held now by every read of this client (`None`) or by
    /// one reader's reads, in whole KiB: what the read budget counts.
    pub fn buffered_bytes(&self, reader: Option<ReaderId>) -> u64 {
        self.inner.budget.held_bytes(reader)
    }

    /// Pieces given room in the read budget since this client was made (each piece of
    /// every read, before it is requested): a counter for metrics, and a way to tell
    /// that reads have stopped moving.
    pub fn budget_grants(&self) -> u64 {
        self.inner.budget.grants()
    }

    /// The bytes `range` of an object of `object_size` bytes at `version`, as an ordered
    /// stream.
    ///
    /// # Errors
    /// [`CacheClientError::InvalidRequest`] for a range outside the object; the stream
    /// itself ends with an error (never early without one) when a piece cannot be read.
    pub fn read_range(
        &self,
        object: &ObjectId,
        version: &ObjectVersion,
        object_size: u64,
        range: Range<u64>,
    ) -> Result<ByteStream> {
        self.read_range_tracked(object, version, object_size, range)
            .map(|(stream, _)| stream)
    }

    /// [`read_range`](Self::read_range), plus a tally of where the pieces delivered so
    /// far came from: cache hits, fills (the worker fetched from the origin), or the
    /// origin directly after the cache failed. A reader uses it to label the read.
    ///
    /// # Errors
    /// As [`read_range`](Self::read_range).
    pub fn read_range_tracked(
        &self,
        object: &ObjectId,
        version: &ObjectVersion,
        object_size: u64,
        range: Range<u64>,
    ) -> Result<(ByteStream, Arc<PieceSources>)> {
        self.read_range_for(None, object, version, object_size, range)
    }

    /// [`read_range_tracked`](Self::read_range_tracked) on behalf of `reader`: its
    /// pieces count against that reader's share of the read budget as well as the
    /// whole budget
    /// ([`max_buffered_bytes_per_reader`](CacheClientConfig::max_buffered_bytes_per_reader)).
    ///
    /// # Errors
    /// As [`read_range`](Self::read_range).
    pub fn read_range_for(
        &self,
        reader: Option<ReaderId>,
        object: &ObjectId,
        version: &ObjectVersion,
        object_size: u64,
        range: Range<u64>,
    ) -> Result<(ByteStream, Arc<PieceSources>)> {
        let options = ReadOptions {
            reader,
            ..ReadOptions::default()
        };
        self.read_range_with(options, object, version, object_size, range)
    }

    /// [`read_range_for`](Self::read_range_for) with every choice of the read in
    /// `options`: its reader, and whether its pieces may fall back to the origin.
    ///
    /// # Errors
    /// As [`read_range`](Self::read_range).
    pub fn read_range_with(
        &self,
        options: ReadOptions,
        object: &ObjectId,
        version: &ObjectVersion,
        object_size: u64,
        range: Range<u64>,
    ) -> Result<(ByteStream, Arc<PieceSources>)> {
        let reader = options.reader;
        if range.start > range.end || range.end > object_size {
            return Err(CacheClientError::InvalidRequest(format!(
                "range {range:?} is outside an object of {object_size} bytes"
            )));
        }
        let pieces = self.pieces_of(range.clone(), object_size)?;
        let end = range.end;
        let window = self.inner.config.read_window.max(1);
        let plan = self
            .inner
            .read_ahead
            .plan(
                object,
                version,
                range,
                &pieces,
                window,
                self.inner.config.max_request_bytes,
                |beyond| self.pieces_of(beyond, object_size).unwrap_or_default(),
                object_size,
            )
            .map(Arc::new);
        let me = self.clone();
        let (object, version) = (object.clone(), version.clone());
        let sources = Arc::new(PieceSources::default());
        let tally = sources.clone();
        let budget = self.inner.budget.clone();
        let admission_wait = self.inner.config.admission_wait;
        let stream = futures_util::stream::iter(pieces.into_iter().enumerate())
            .map(move |(i, piece)| {
                let me = me.clone();
                let (object, version, tally) = (object.clone(), version.clone(), tally.clone());
                let (budget, plan) = (budget.clone(), plan.clone());
                async move {
                    let hold = budget.hold(reader, piece.len);
                    let held = if i == 0 {
                        tokio::time::timeout(admission_wait, hold)
                            .await
                            .map_err(|_| {
                                CacheClientError::Overloaded(format!(
                                    "no room in the read budget for {admission_wait:?}"
                                ))
                            })?
                    } else {
                        hold.await
                    }
                    .ok_or_else(|| CacheClientError::Unavailable("shutting down".into()))?;
                    let (bytes, source) = me
                        .read_piece(&object, &version, object_size, piece, options)
                        .await?;
                    tally.count(source);
                    let filled = source == PieceSource::Fill;
                    match &plan {
                        Some(plan) => {
                            me.piece_delivered(plan, &object, &version, object_size, i, filled);
                        }
                        None if filled => me.inner.read_ahead.remember(&object, &version, end),
                        None => {}
                    }
                    Ok((bytes, held))
                }
            })
            .buffered(window)
            // The share travels with the bytes and goes back when the last reference to
            // them is dropped: after the HTTP stack has written them, not when it was
            // handed them (a reader that never reads keeps its share).
            .map(|r: Result<(Bytes, Held)>| {
                r.map(|(bytes, held)| Bytes::from_owner(Budgeted { bytes, _held: held }))
            });
        Ok((Box::pin(stream), sources))
    }

    /// `range` of an object of `object_size` bytes as the pieces a read asks for: split
    /// at block boundaries, then into requests of at most
    /// [`max_request_bytes`](CacheClientConfig::max_request_bytes).
    ///
    /// # Errors
    /// [`CacheClientError::InvalidRequest`] for a range outside the object.
    pub(crate) fn pieces_of(&self, range: Range<u64>, object_size: u64) -> Result<Vec<Piece>> {
        let spans = self
            .inner
            .config
            .geometry
            .split_range(range, object_size)
            .map_err(|e| CacheClientError::InvalidRequest(e.to_string()))?;
        let max = self.inner.config.max_request_bytes.max(1);
        let mut pieces = Vec::new();
        for span in spans {
            let mut offset = span.offset_in_block;
            let end = span.offset_in_block + span.len;
            while offset < end {
                let len = (end - offset)
                    .min(max)
                    .min(u64::from(talon_core::wire::MAX_READ_LEN));
                pieces.push(Piece {
                    block_offset: span.block_offset,
                    offset,
                    len,
                });
                offset += len;
            }
        }
        Ok(pieces)
    }

    /// The block `piece` lies in and its length as a request asks for it.
    ///
    /// # Errors
    /// [`CacheClientError::InvalidRequest`] for a block the geometry cannot name, or a
    /// piece longer than a request may be.
    pub(crate) fn piece_request(
        &self,
        object: &ObjectId,
        version: &ObjectVersion,
        piece: Piece,
    ) -> Result<(BlockId, u32)> {
        let block = BlockId::new(
            object.clone(),
            version.clone(),
            piece.block_offset,
            self.inner.config.geometry.block_size(),
        )
        .map_err(|e| CacheClientError::InvalidRequest(e.to_string()))?;
        let len = u32::try_from(piece.len)
            .map_err(|_| CacheClientError::InvalidRequest("piece too large".into()))?;
        Ok((block, len))
    }

    /// The owners of a request, in rendezvous order, to be asked one at a time
    /// ([`OwnersToAsk`]).
    pub(crate) fn owners_to_ask<'m>(
        &self,
        owners: Vec<&'m talon_coordinator_client::placement::PlacementMember>,
        options: ReadOptions,
    ) -> OwnersToAsk<'m> {
        OwnersToAsk {
            owners,
            next: 0,
            asked: 0,
            circuits_ignored: false,
            may_ignore_circuits: self.fallback_origins(options).is_none(),
        }
    }

    /// The next owner `owners` says to ask, if any.
    pub(crate) fn next_owner<'m>(&self, owners: &mut OwnersToAsk<'m>) -> Option<&'m str> {
        owners.next(&self.inner.health, &self.inner.counters.skipped)
    }

    /// Tells the worker's circuit how a request went: any answer from the worker is a
    /// success (a refusal too: the worker is alive and said why), except a transient
    /// refusal; a broken connection or a missed deadline is a failure. A piece whose
    /// budget ran out before the worker's own deadlines says nothing of the worker.
    pub(crate) fn note_health(&self, addr: &str, answer: &Result<Answer>) {
        match answer {
            Err(CacheClientError::BudgetSpent(_)) => {}
            Ok(Answer::Partial { error, .. }) | Err(error) => self.worker_failed(
                addr,
                if matches!(error, CacheClientError::DeadlineExceeded(_)) {
                    Failure::Deadline
                } else {
                    Failure::Error
                },
            ),
            Ok(Answer::Message(Message::Error(e))) if e.code.is_transient() => {
                self.worker_failed(addr, Failure::Error)
            }
            Ok(_) => self.inner.health.succeeded(addr),
        }
    }

    /// Tells the worker's circuit of a failure; when that opens the circuit, the
    /// worker's connections are closed, so that every request still waiting on it
    /// (pieces not hedged, or queued behind a hung answer) moves on to the next owner
    /// now rather than at its own deadline.
    pub(crate) fn worker_failed(&self, addr: &str, failure: Failure) {
        if !self.inner.health.failed(addr, failure) {
            return;
        }
        let pool = &self.inner.pool;
        pool.poison_endpoint(&Endpoint::Tcp(addr.to_owned()));
        let local = self
            .inner
            .local_routes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(addr)
            .cloned();
        if let Some(local) = local {
            pool.poison_endpoint(&local);
        }
    }

    /// Asks the worker whose data plane is `addr`: over its local socket when it runs
    /// on this host and offers one, else (or when the local socket cannot be connected)
    /// over TCP. A worker that fails to answer on a connected local socket (a timeout,
    /// a cut connection) is not asked again over TCP: the caller moves on to the next
    /// worker, as it would after a TCP failure, rather than wait for the same worker twice.
    /// `started`, if given, is told when the answer begins.
    pub(crate) async fn ask_worker(
        &self,
        addr: &str,
        request: &Message,
        until: Instant,
        started: Option<oneshot::Sender<()>>,
    ) -> Result<Answer> {
        // A snapshot of the routes (one `Arc`), so the hot path clones no path.
        let routes = self
            .inner
            .local_routes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let hop = &self.inner.config.deadlines.worker;
        let lane = Lane::of(request);
        if let Some(local) = routes.get(addr) {
            match self.inner.pool.get(local, lane, until).await {
                Err(e @ CacheClientError::BudgetSpent(_)) => return Err(e),
                Ok(conn) => return conn.call(request, hop, until, started).await,
                Err(e) => {
                    tracing::warn!(worker = %addr, error = %e, "the worker's local socket cannot be reached; asking over TCP until the next membership refresh");
                    let mut routes = self
                        .inner
                        .local_routes
                        .write()
                        .unwrap_or_else(|p| p.into_inner());
                    let mut fewer = (**routes).clone();
                    fewer.remove(addr);
                    *routes = Arc::new(fewer);
                }
            }
        }
        let conn = self
            .inner
            .pool
            .get(&Endpoint::Tcp(addr.to_owned()), lane, until)
            .await?;
        conn.call(request, hop, until, started).await
    }

    /// Asks `addr` for the piece `request` names (`want` bytes) and returns the bytes in
    /// hand: a block file handed over is read here.
    pub(crate) async fn ask_bytes(
        &self,
        addr: &str,
        request: &Message,
        want: u64,
        until: Instant,
        started: Option<oneshot::Sender<()>>,
    ) -> Result<Answer> {
        let asked = match request {
            Message::ReadRange(r) => Some(r),
            _ => None,
        };
        match self.ask_worker(addr, request, until, started).await {
            Ok(Answer::File {
                file,
                offset,
                len,
                from_origin,
            }) if asked.is_some_and(|r| r.offset == offset) && u64::from(len) == want => {
                let file = Arc::new(file);
                if let Some(r) = asked {
                    self.inner
                        .held
                        .vouch(&r.block, &file, offset..offset + u64::from(len));
                }
                read_handed_off(file, offset, len)
                    .await
                    .map(|bytes| Answer::Data { bytes, from_origin })
            }
            other => other,
        }
    }

    /// [`ask_bytes`](Self::ask_bytes) as a future that owns what it needs, so that a
    /// hedge's loser can be left to finish on its own.
    pub(crate) fn ask_bytes_owned(
        &self,
        addr: &str,
        request: &Message,
        want: u64,
        until: Instant,
        started: Option<oneshot::Sender<()>>,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<Answer>> + Send + 'static>> {
        let (me, addr, request) = (self.clone(), addr.to_owned(), request.clone());
        Box::pin(async move { me.ask_bytes(&addr, &request, want, until, started).await })
    }

    /// Lets the request a hedge did not need finish in the background, so that its
    /// worker's circuit still hears how it went (a hung worker still misses its
    /// deadline and is skipped after, instead of being hedged around forever).
    pub(crate) fn finish_unneeded(
        &self,
        addr: &str,
        answer: Pin<Box<dyn std::future::Future<Output = Result<Answer>> + Send + 'static>>,
    ) {
        let (me, addr) = (self.clone(), addr.to_owned());
        tokio::spawn(async move {
            let answer = answer.await;
            me.note_health(&addr, &answer);
        });
    }

    /// Asks `addr` for a piece and returns the answer and who gave it. When hedging
    /// watches the piece ([`HedgeConfig`]) and its first byte is later than `addr`'s
    /// threshold, the next owner `owners` hands out is asked for it too, and the first
    /// answer that settles the piece wins; the other request finishes in the background.
    /// When neither settles it, the one that delivered more bytes is returned (its
    /// bytes are kept and the rest asked elsewhere). Every worker's circuit is told how
    /// its request went, and a worker that had not begun its answer when the next owner
    /// had finished is told of a failure (a latency outlier).
    pub(crate) async fn ask_piece<'m>(
        &self,
        addr: &'m str,
        owners: &mut OwnersToAsk<'m>,
        request: Message,
        want: u64,
        until: Instant,
    ) -> (&'m str, Result<Answer>) {
        let plan = if owners.has_more() {
            self.inner
                .hedging
                .plan(addr, self.inner.config.deadlines.worker.first_byte)
        } else {
            None
        };
        let Some(plan) = plan else {
            let answer = self.ask_bytes(addr, &request, want, until, None).await;
            self.note_health(addr, &answer);
            return (addr, answer);
        };
        let (tell, mut started) = oneshot::channel();
        let sent = Instant::now();
        let mut first = self.ask_bytes_owned(addr, &request, want, until, Some(tell));
        // With no threshold yet the piece is only watched (its latency learned); nor is
        // it hedged when the budget ends before the threshold (a hedge sent at the
        // deadline could only fail).
        let hedge_at = plan
            .after
            .map(|after| sent + after)
            .filter(|at| *at < until);
        tokio::select! {
            biased;
            began = &mut started => {
                if began.is_ok() {
                    plan.record(sent.elapsed());
                }
                let answer = first.await;
                self.note_health(addr, &answer);
                return (addr, answer);
            }
            answer = &mut first => {
                self.note_health(addr, &answer);
                return (addr, answer);
            }
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(
                hedge_at.unwrap_or(until),
            )), if hedge_at.is_some() => {}
        }
        // The first byte is late. From here on the sample is the time until the whole
        // answer, an upper bound of the first byte's, so that a worker slow for a while
        // raises its own threshold instead of being hedged on every piece.
        let late = |plan: &HedgePlan| plan.record(sent.elapsed());
        let second = if self.inner.hedging.try_spend() {
            self.next_owner(owners)
        } else {
            None
        };
        let Some(second) = second else {
            let answer = first.await;
            late(&plan);
            self.note_health(addr, &answer);
            return (addr, answer);
        };
        let counters = &self.inner.counters;
        counters.hedged.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(worker = %addr, next = %second, after = ?plan.after, "a piece's first byte is late; asking the next owner too");
        let mut hedge = self.ask_bytes_owned(second, &request, want, until, None);
        tokio::select! {
            answer = &mut first => {
                late(&plan);
                self.note_health(addr, &answer);
                if settles(&answer, want) {
                    self.finish_unneeded(second, hedge);
                    return (addr, answer);
                }
                let other = hedge.await;
                self.note_health(second, &other);
                if settles(&other, want) {
                    counters.hedges_won.fetch_add(1, Ordering::Relaxed);
                    return (second, other);
                }
                more_delivered((addr, answer), (second, other), want)
            }
            other = &mut hedge => {
                self.note_health(second, &other);
                if settles(&other, want) {
                    counters.hedges_won.fetch_add(1, Ordering::Relaxed);
                    if matches!(started.try_recv(), Err(oneshot::error::TryRecvError::Empty)) {
                        // A latency outlier: the next owner answered in full before this
                        // one began. It counts towards the worker's circuit like a
                        // failure (three in a row open it, so a frozen worker is skipped
                        // before its first deadline passes); its answer, when it comes,
                        // counts as the success it is.
                        self.worker_failed(addr, Failure::Error);
                    }
                    self.finish_unneeded(addr, first);
                    return (second, other);
                }
                let answer = first.await;
                late(&plan);
                self.note_health(addr, &answer);
                more_delivered((addr, answer), (second, other), want)
            }
        }
    }

    /// Reads one piece: from its owners in rendezvous order (skipping open circuits),
    /// each asked for what is still missing, then from the origin pinned to `version`.
    /// A worker's answer cut after some bytes keeps them: the next source is asked from
    /// the exact byte where it stopped. Every hop runs within the piece's
    /// [`DeadlineBudget`].
    pub(crate) async fn read_piece(
        &self,
        object: &ObjectId,
        version: &ObjectVersion,
        object_size: u64,
        piece: Piece,
        options: ReadOptions,
    ) -> Result<(Bytes, PieceSource)> {
        let started = Instant::now();
        let budget = self.inner.config.deadlines;
        let workers_until = started + budget.workers_share;
        let (block, len) = self.piece_request(object, version, piece)?;
        // Bytes a worker on this host vouched for within the hold are read from its held
        // file, before any owner is chosen: no request, and nothing said to a circuit, a
        // probe, hedge timing or the hot-block counts (an answer no worker gave must
        // not keep a dead worker's circuit closed).
        if let Some(bytes) =
            self.inner
                .held
                .read(&block, piece.offset, len, options.kernel_copies_only)
        {
            return Ok((bytes, PieceSource::Hit));
        }
        let placement = self.placement();
        let key = block.placement_key();
        let spread = self.inner.hot.owners();
        let attempts = self.inner.config.attempts.max(spread).max(1);
        let mut ranked = placement.locate_top_k_key(&key, attempts);
        // A hot block is read from its homes in turn (its reader's zone's first); the
        // rest stay behind them in rendezvous order, so a retry or a hedge goes to the
        // next of them. (Not counted when it has one owner: nowhere to spread it.)
        let homes = spread.min(ranked.len());
        if homes > 1
            && let Some(turn) = self
                .inner
                .hot
                .note_read(&key, piece.len, block.len_in(object_size))
        {
            let owner = ranked[0];
            ranked = hot_block_order(
                &placement,
                &key,
                ranked,
                homes,
                turn,
                &self.inner.config.zone,
            );
            if ranked[0].id != owner.id {
                self.inner.hot.count_spread();
            }
        }
        let mut owners = self.owners_to_ask(ranked, options);
        let counters = &self.inner.counters;
        // The bytes of the piece received so far, when an answer was cut.
        let mut kept = BytesMut::new();
        let mut filled = false;
        let mut last = CacheClientError::Unavailable("no live worker".into());
        loop {
            // Time first, so that no probe is claimed for a worker then not asked.
            if Instant::now() >= workers_until {
                last = CacheClientError::DeadlineExceeded(
                    "the workers' share of the piece's deadline budget ran out".into(),
                );
                break;
            }
            let Some(addr) = self.next_owner(&mut owners) else {
                break;
            };
            if owners.asked > 1 {
                counters.retries.fetch_add(1, Ordering::Relaxed);
            }
            let done = kept.len() as u64;
            let want = piece.len - done;
            let request = Message::ReadRange(ReadRangeRequest {
                block: block.clone(),
                object_size,
                offset: piece.offset + done,
                // Fits: checked above, and `want` only shrinks.
                len: want as u32,
            });
            let (addr, answer) = self
                .ask_piece(addr, &mut owners, request, want, workers_until)
                .await;
            match answer {
                Ok(Answer::Data { bytes, from_origin }) if bytes.len() as u64 == want => {
                    let source = if filled || from_origin {
                        PieceSource::Fill
                    } else {
                        PieceSource::Hit
                    };
                    if kept.is_empty() {
                        return Ok((bytes, source));
                    }
                    kept.extend_from_slice(&bytes);
                    return Ok((kept.freeze(), source));
                }
                Ok(Answer::Partial {
                    bytes,
                    from_origin,
                    error,
                }) if (bytes.len() as u64) < want => {
                    tracing::debug!(worker = %addr, kept = bytes.len(), of = want, error = %error, "a worker's answer was cut; asking for the rest elsewhere");
                    counters.resumed.fetch_add(1, Ordering::Relaxed);
                    counters
                        .kept_bytes
                        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    filled |= from_origin;
                    kept.extend_from_slice(&bytes);
                    last = error;
                }
                Ok(Answer::Data { bytes, .. } | Answer::Partial { bytes, .. }) => {
                    last = CacheClientError::Unavailable(format!(
                        "worker {addr} sent {} of {want} bytes",
                        bytes.len(),
                    ));
                }
                Ok(other) => match answer_error(other) {
                    e if e.is_transient() => {
                        tracing::debug!(worker = %addr, error = %e, "retrying a piece on the next worker");
                        last = e;
                    }
                    e => return Err(e),
                },
                Err(e) => {
                    tracing::debug!(worker = %addr, error = %e, "retrying a piece on the next worker");
                    last = e;
                }
            }
        }
        self.spawn_refresh();
        let Some(origins) = self.fallback_origins(options) else {
            return Err(last);
        };
        counters.fallbacks.fetch_add(1, Ordering::Relaxed);
        let done = kept.len() as u64;
        let start = piece.block_offset + piece.offset + done;
        let range = ByteRange {
            start,
            end: start + piece.len - done,
        };
        let until = tokio::time::Instant::from_std(started + budget.total);
        let rest =
            tokio::time::timeout_at(until, self.origin_range(origins, object, version, range))
                .await
                .map_err(|_| {
                    CacheClientError::DeadlineExceeded(
                        "the origin did not answer within the piece's deadline budget".into(),
                    )
                })??;
        if kept.is_empty() {
            return Ok((rest, PieceSource::Fallback));
        }
        kept.extend_from_slice(&rest);
        Ok((kept.freeze(), PieceSource::Fallback))
    }

    pub(crate) async fn origin_range(
        &self,
        origins: &Origins,
        object: &ObjectId,
        version: &ObjectVersion,
        range: ByteRange,
    ) -> Result<Bytes> {
        let (client, bucket, key) = origins.route(object)?;
        Ok(client
            .get_pinned_range(&bucket, &key, range, version.as_str())
            .await?)
    }
}

#[cfg(test)]
mod handed_off_tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Write as _;

    use super::*;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// A block file of 3 MiB and 5 bytes (written here, so in the page cache: the
    /// non-blocking read takes all of it), pieces read at odd offsets, the file's last
    /// bytes, and a piece past its end refused as unavailable (asked of the next worker).
    #[tokio::test]
    async fn a_handed_off_piece_is_its_bytes_and_a_short_file_is_unavailable() {
        let bytes = pattern(3 * 1024 * 1024 + 5);
        let mut file = unnamed_file();
        file.write_all(&bytes).unwrap();
        for (offset, len) in [
            (0, 4096),
            (1_048_581, 1_048_576),
            (3 * 1024 * 1024, 5),
            (7, 1),
        ] {
            let got = read_handed_off(Arc::new(file.try_clone().unwrap()), offset, len)
                .await
                .unwrap();
            let range = offset as usize..offset as usize + len as usize;
            assert!(got[..] == bytes[range], "piece at {offset} of {len}");
        }
        let past = read_handed_off(Arc::new(file.try_clone().unwrap()), 3 * 1024 * 1024, 6).await;
        assert!(
            matches!(past, Err(CacheClientError::Unavailable(_))),
            "{past:?}"
        );
    }

    /// An unnamed file in the temporary folder (removed once opened).
    fn unnamed_file() -> std::fs::File {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("handed-off-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        file
    }
}
