//! The read budget: how many bytes of fetched pieces a cache client's reads may hold
//! before their readers take them (SEC-07), and each reader's share of it.
//!
//! One budget for the process keeps memory bounded whatever the readers do. On its own
//! it lets a few readers that stop reading hold all of it, so every other reader waits
//! until the write-stall timeout cuts them. Each reader therefore has a share: a piece
//! first waits for room in its reader's share, then for room in the whole budget, so a
//! reader at its share queues behind its own pieces and not in front of everyone
//! else's. Readers without an identity use the whole budget only.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Who a read is for, so that one reader cannot hold the whole read budget: the network
/// address of the client a gateway serves. IPv4-mapped IPv6 addresses count as their
/// IPv4 address, and IPv6 addresses by their /64 prefix (one host may use many
/// addresses of its /64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReaderId(IpAddr);

impl ReaderId {
    /// The reader at `addr`.
    pub fn from_ip(addr: IpAddr) -> ReaderId {
        ReaderId(match addr {
            IpAddr::V4(v4) => IpAddr::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
            },
        })
    }
}

/// A piece's hold on the budget; dropping it gives the bytes back.
pub(crate) struct Held {
    // Field order is drop order: the whole budget first, so a piece woken by the
    // reader's share finds the total's room already back.
    _total: OwnedSemaphorePermit,
    _share: Option<ShareHeld>,
}

/// A hold on one reader's share (or a wait for one); the last one gone forgets the
/// reader.
struct ShareHeld {
    permit: Option<OwnedSemaphorePermit>,
    reader: ReaderId,
    budget: Arc<ReadBudget>,
}

impl Drop for ShareHeld {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut shares = self.budget.lock();
        if let Some(share) = shares.get_mut(&self.reader) {
            share.holds -= 1;
            if share.holds == 0 {
                shares.remove(&self.reader);
            }
        }
    }
}

/// One reader's share: its room, and the holds and waits on it.
struct Share {
    room: Arc<Semaphore>,
    holds: usize,
}

/// The process's budget of buffered piece bytes, in KiB permits, and the readers'
/// shares of it.
pub(crate) struct ReadBudget {
    total: Arc<Semaphore>,
    total_kib: u32,
    share_kib: u32,
    /// Readers with pieces held or waiting; an entry goes when its last hold does.
    shares: Mutex<HashMap<ReaderId, Share>>,
    /// Holds granted so far.
    grants: AtomicU64,
}

impl ReadBudget {
    /// A budget of `total_bytes`, of which one reader may hold `share_bytes` (at most
    /// the total; both at least 1 KiB).
    pub(crate) fn new(total_bytes: u64, share_bytes: u64) -> Arc<ReadBudget> {
        let total_kib = kib(total_bytes).max(1);
        let share_kib = kib(share_bytes).clamp(1, total_kib);
        Arc::new(ReadBudget {
            total: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
            share_kib,
            shares: Mutex::new(HashMap::new()),
            grants: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ReaderId, Share>> {
        self.shares.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for room for `bytes` in `reader`'s share, then in the whole budget. A piece
    /// larger than the share (or the budget) takes all of it.
    ///
    /// # Errors
    /// `None` only when the budget was closed (never, today).
    pub(crate) async fn hold(
        self: &Arc<Self>,
        reader: Option<ReaderId>,
        bytes: u64,
    ) -> Option<Held> {
        let want = kib(bytes).max(1);
        let share = match reader {
            None => None,
            Some(reader) => {
                // The hold is counted before the wait, so a cancelled wait still
                // forgets the reader when it is dropped.
                let room = {
                    let mut shares = self.lock();
                    let share = shares.entry(reader).or_insert_with(|| Share {
                        room: Arc::new(Semaphore::new(self.share_kib as usize)),
                        holds: 0,
                    });
                    share.holds += 1;
                    share.room.clone()
                };
                let mut held = ShareHeld {
                    permit: None,
                    reader,
                    budget: self.clone(),
                };
                held.permit = Some(
                    room.acquire_many_owned(want.min(self.share_kib))
                        .await
                        .ok()?,
                );
                Some(held)
            }
        };
        let total = self
            .total
            .clone()
            .acquire_many_owned(want.min(self.total_kib))
            .await
            .ok()?;
        self.grants.fetch_add(1, Ordering::Relaxed);
        Some(Held {
            _total: total,
            _share: share,
        })
    }

    /// Readers with pieces held or waiting.
    #[cfg(test)]
    fn readers(&self) -> usize {
        self.lock().len()
    }

    /// Holds granted since the budget was made.
    pub(crate) fn grants(&self) -> u64 {
        self.grants.load(Ordering::Relaxed)
    }

    /// Bytes held now, in whole KiB as held: by everyone, or by `reader`.
    pub(crate) fn held_bytes(&self, reader: Option<ReaderId>) -> u64 {
        let free_kib = match reader {
            None => self.total.available_permits() as u64,
            Some(reader) => match self.lock().get(&reader) {
                None => u64::from(self.share_kib),
                Some(share) => share.room.available_permits() as u64,
            },
        };
        let of = match reader {
            None => self.total_kib,
            Some(_) => self.share_kib,
        };
        (u64::from(of).saturating_sub(free_kib)) << 10
    }
}

/// Bytes as whole KiB permits, rounded up, saturating.
fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use futures_util::FutureExt;

    use super::*;

    #[tokio::test]
    async fn the_whole_budget_held_by_others_makes_a_new_reader_wait() {
        let budget = ReadBudget::new(4 << 20, 512 << 10);
        let mut held = Vec::new();
        for i in 2..10 {
            held.push(
                budget
                    .hold(reader(&format!("10.0.0.{i}")), 512 << 10)
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(budget.held_bytes(None), 4 << 20);
        let next = budget.hold(reader("10.0.0.1"), 256 << 10);
        tokio::pin!(next);
        assert!(next.as_mut().now_or_never().is_none());
        drop(held.pop());
        next.await.unwrap();
    }

    fn reader(s: &str) -> Option<ReaderId> {
        Some(ReaderId::from_ip(s.parse().unwrap()))
    }

    #[tokio::test]
    async fn a_reader_at_its_share_waits_while_another_is_served() {
        let budget = ReadBudget::new(8 << 10, 2 << 10);
        let a1 = budget.hold(reader("10.0.0.1"), 2 << 10).await.unwrap();
        // A's share is full: A's next piece waits even though the budget has room...
        let a2 = budget.hold(reader("10.0.0.1"), 1 << 10);
        tokio::pin!(a2);
        assert!(a2.as_mut().now_or_never().is_none());
        // ... and B is served from the rest.
        let b = budget.hold(reader("10.0.0.2"), 2 << 10).await.unwrap();
        drop(a1);
        let a2 = a2.await.unwrap();
        drop((a2, b));
        assert_eq!(
            budget.readers(),
            0,
            "readers with nothing held are forgotten"
        );
        assert_eq!(budget.total.available_permits(), 8);
    }

    #[tokio::test]
    async fn readers_without_an_identity_use_the_whole_budget() {
        let budget = ReadBudget::new(4 << 10, 1 << 10);
        let held = budget.hold(None, 4 << 10).await.unwrap();
        let more = budget.hold(None, 1 << 10);
        tokio::pin!(more);
        assert!(more.as_mut().now_or_never().is_none());
        drop(held);
        more.await.unwrap();
    }

    #[tokio::test]
    async fn a_cancelled_wait_forgets_the_reader() {
        let budget = ReadBudget::new(4 << 10, 1 << 10);
        let held = budget.hold(reader("10.0.0.1"), 1 << 10).await.unwrap();
        {
            let waiting = budget.hold(reader("10.0.0.1"), 1 << 10);
            tokio::pin!(waiting);
            assert!(waiting.as_mut().now_or_never().is_none());
        }
        drop(held);
        assert_eq!(budget.readers(), 0);
    }

    #[test]
    fn ipv6_readers_count_by_their_64_prefix_and_mapped_ipv4_as_ipv4() {
        assert_eq!(
            ReaderId::from_ip("2001:db8:1:2::1".parse().unwrap()),
            ReaderId::from_ip("2001:db8:1:2:ffff::9".parse().unwrap())
        );
        assert_ne!(
            ReaderId::from_ip("2001:db8:1:2::1".parse().unwrap()),
            ReaderId::from_ip("2001:db8:1:3::1".parse().unwrap())
        );
        assert_eq!(
            ReaderId::from_ip("::ffff:10.0.0.1".parse().unwrap()),
            ReaderId::from_ip("10.0.0.1".parse().unwrap())
        );
    }
}
