//! Hot blocks: a block this client reads faster than a threshold is spread over its
//! top-k owners instead of all landing on its first owner.
//!
//! Rendezvous placement gives each block one owner, so a block every reader wants
//! (a model's first shard, a table's footer) puts its whole load on one worker, and
//! when that worker is sick every read of it pays a retry. [`HotBlocks`] counts the
//! bytes read of each block in one-second windows and, once a block has been read
//! more than [`HotBlockConfig::reads_per_second`] times its length in a window (this
//! one or the last), hands its reads to its first [`HotBlockConfig::owners`] owners
//! in turn. Each extra owner costs one fill of the block from the origin (pinned to
//! the same version, so never a different byte) and its space on that worker's disk.
//!
//! Counting is by bytes relative to the block's length, so one reader streaming a
//! block in small ranges reads it once, not once per range. The counters live in a
//! fixed table of atomics (no lock, no allocation on the read path, a bounded memory
//! of [`SLOTS`] words): two candidate slots per block, and a block that finds both
//! held by busier blocks is not counted, so a hot block is never pushed out by cold
//! ones. A block that is not counted is simply treated as not hot.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Counter slots (a power of two): 32 KiB per client.
pub const SLOTS: usize = 4096;

/// The counting window.
pub const WINDOW: Duration = Duration::from_secs(1);

/// Units a whole-block read counts in a slot: a read of `bytes` counts
/// `ceil(bytes * UNITS_PER_BLOCK / block_len)`.
const UNITS_PER_BLOCK: u64 = 64;

/// The largest count a slot holds (16 bits).
const MAX_COUNT: u64 = 0xFFFF;

/// When reads are spread over more than one owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotBlockConfig {
    /// Owners a hot block's reads are spread over, in rendezvous order (1: never
    /// spread).
    pub owners: usize,
    /// A block is hot once this client read it more than this many times its length
    /// within one second; it stays hot through the next second. At most 1023.
    pub reads_per_second: u32,
}

impl HotBlockConfig {
    /// Never spread: every read goes to the block's first owner.
    pub const OFF: HotBlockConfig = HotBlockConfig {
        owners: 1,
        reads_per_second: 0,
    };

    /// The gateway's default: a block read more than 8 times a second through one
    /// gateway is served by its first two owners.
    pub const TWO_OWNERS: HotBlockConfig = HotBlockConfig {
        owners: 2,
        reads_per_second: 8,
    };

    /// Whether any block is ever spread.
    pub fn enabled(&self) -> bool {
        self.owners > 1 && self.reads_per_second > 0
    }

    /// The slot count at which a block is hot.
    fn threshold_units(&self) -> u64 {
        (u64::from(self.reads_per_second) * UNITS_PER_BLOCK).clamp(1, MAX_COUNT)
    }
}

impl Default for HotBlockConfig {
    /// Off: a library user turns spreading on; the gateway does by default.
    fn default() -> HotBlockConfig {
        HotBlockConfig::OFF
    }
}

/// One slot, packed in a `u64`: the block's tag (32 bits), whether it was hot in the
/// window before (1), the window it counts (15, wrapping) and its count (16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    tag: u32,
    hot_before: bool,
    window: u16,
    count: u16,
}

const WINDOW_MASK: u64 = 0x7FFF;

impl Slot {
    fn unpack(word: u64) -> Slot {
        Slot {
            tag: (word >> 32) as u32,
            hot_before: (word >> 31) & 1 == 1,
            window: ((word >> 16) & WINDOW_MASK) as u16,
            count: (word & MAX_COUNT) as u16,
        }
    }

    fn pack(self) -> u64 {
        (u64::from(self.tag) << 32)
            | (u64::from(self.hot_before) << 31)
            | ((u64::from(self.window) & WINDOW_MASK) << 16)
            | u64::from(self.count)
    }

    /// This slot's count as seen in `window`: its own in that window, 0 otherwise.
    fn count_in(self, window: u16) -> u64 {
        if self.window == window {
            u64::from(self.count)
        } else {
            0
        }
    }

    /// Whether the block was hot in the window before `window`.
    fn was_hot_before(self, window: u16, threshold: u64) -> bool {
        if self.window == window {
            self.hot_before
        } else {
            self.window == previous(window) && u64::from(self.count) > threshold
        }
    }

    /// How strongly this slot's block holds it against another block in `window`:
    /// its count there, or past the threshold when it was hot in the window before
    /// (so a hot block keeps its slot, and its standing, across the turn of a window).
    fn hold(self, window: u16, threshold: u64) -> u64 {
        if self.was_hot_before(window, threshold) {
            threshold + 1
        } else {
            self.count_in(window)
        }
    }
}

fn previous(window: u16) -> u16 {
    ((u64::from(window) + WINDOW_MASK) & WINDOW_MASK) as u16
}

/// The read counters of one client, and whose turn a hot block's next read is.
#[derive(Debug)]
pub struct HotBlocks {
    config: HotBlockConfig,
    slots: Box<[AtomicU64]>,
    /// Turns handed out to hot reads, so consecutive ones go to different owners.
    turn: AtomicU64,
    /// Hot reads sent to an owner other than the first.
    spread: AtomicU64,
    created: Instant,
}

impl HotBlocks {
    /// Counters for `config` (none are kept when it is off).
    pub fn new(config: HotBlockConfig) -> HotBlocks {
        let slots = if config.enabled() { SLOTS } else { 0 };
        HotBlocks {
            config,
            slots: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            turn: AtomicU64::new(0),
            spread: AtomicU64::new(0),
            created: Instant::now(),
        }
    }

    /// How many owners hot blocks are spread over (1 when spreading is off).
    pub fn owners(&self) -> usize {
        if self.config.enabled() {
            self.config.owners
        } else {
            1
        }
    }

    /// Notes a read of `bytes` of the block with placement key `key` and `block_len`
    /// bytes, now. `None` unless the block is hot; for a hot block, this read's turn
    /// among its [`owners`](Self::owners) homes (0 to `owners - 1`, in turn).
    pub fn note_read(&self, key: &[u8; 32], bytes: u64, block_len: u64) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let window = self.created.elapsed().as_secs() / WINDOW.as_secs().max(1);
        self.note_read_in(key, bytes, block_len, window)
    }

    /// [`note_read`](Self::note_read) in the given window (windows count from 0, one
    /// per [`WINDOW`]); for simulations, which run on their own clock.
    pub fn note_read_in(
        &self,
        key: &[u8; 32],
        bytes: u64,
        block_len: u64,
        window: u64,
    ) -> Option<usize> {
        if !self.config.enabled() || self.slots.is_empty() {
            return None;
        }
        if !self.count(key, bytes, block_len, (window & WINDOW_MASK) as u16) {
            return None;
        }
        Some((self.turn.fetch_add(1, Ordering::Relaxed) % self.config.owners as u64) as usize)
    }

    /// Counts a hot read sent to a home other than the block's owner.
    pub fn count_spread(&self) {
        self.spread.fetch_add(1, Ordering::Relaxed);
    }

    /// Hot reads sent to a home other than the block's owner.
    pub fn spread(&self) -> u64 {
        self.spread.load(Ordering::Relaxed)
    }

    /// Adds the read to the block's slot; whether the block is hot.
    fn count(&self, key: &[u8; 32], bytes: u64, block_len: u64, window: u16) -> bool {
        let threshold = self.config.threshold_units();
        let units = bytes
            .saturating_mul(UNITS_PER_BLOCK)
            .div_ceil(block_len.max(1))
            .clamp(1, MAX_COUNT);
        let word = u64::from_le_bytes(key[..8].try_into().unwrap_or([0; 8]));
        let tag = u32::from_le_bytes(key[8..12].try_into().unwrap_or([0; 4]));
        let first = (word as usize) & (self.slots.len() - 1);
        let candidates = [first, first ^ 1];
        // Up to a few tries: another read of a block in the same slot may win a race.
        for _ in 0..4 {
            let seen =
                candidates.map(|at| (at, Slot::unpack(self.slots[at].load(Ordering::Relaxed))));
            let (at, old, fresh) = match seen.iter().find(|(_, s)| s.tag == tag && s.pack() != 0) {
                Some(&(at, old)) => (at, old, false),
                None => {
                    // The candidate held least; taken only when that is at most half
                    // of what makes a block hot, so a hot or warming block keeps its
                    // slot and two blocks do not take one slot from each other in turn.
                    let &(at, old) = seen
                        .iter()
                        .min_by_key(|(_, s)| s.hold(window, threshold))
                        .unwrap_or(&seen[0]);
                    if old.hold(window, threshold) > threshold / 2 {
                        return false;
                    }
                    (at, old, true)
                }
            };
            let new = if fresh {
                Slot {
                    tag,
                    hot_before: false,
                    window,
                    count: units as u16,
                }
            } else {
                Slot {
                    tag,
                    hot_before: old.was_hot_before(window, threshold),
                    window,
                    count: (old.count_in(window) + units).min(MAX_COUNT) as u16,
                }
            };
            if self.slots[at]
                .compare_exchange(old.pack(), new.pack(), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return new.hot_before || u64::from(new.count) > threshold;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: u64 = 4 << 20;

    fn key(n: u64) -> [u8; 32] {
        let mut k = [0u8; 32];
        k[..8].copy_from_slice(&n.to_le_bytes());
        k[8..16].copy_from_slice(&n.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
        k
    }

    #[test]
    fn slots_round_trip() {
        let s = Slot {
            tag: 0xDEAD_BEEF,
            hot_before: true,
            window: 0x7ABC,
            count: 0xFFFF,
        };
        assert_eq!(Slot::unpack(s.pack()), s);
    }

    #[test]
    fn off_never_spreads() {
        let hot = HotBlocks::new(HotBlockConfig::OFF);
        assert_eq!(hot.owners(), 1);
        for _ in 0..1000 {
            assert_eq!(hot.note_read_in(&key(1), BLOCK, BLOCK, 0), None);
        }
        assert_eq!(hot.spread(), 0);
    }

    #[test]
    fn a_block_read_past_the_threshold_takes_turns_over_its_owners() {
        let hot = HotBlocks::new(HotBlockConfig {
            owners: 2,
            reads_per_second: 4,
        });
        // Four whole reads are not more than four: all to the owner.
        for _ in 0..4 {
            assert_eq!(hot.note_read_in(&key(7), BLOCK, BLOCK, 10), None);
        }
        let turns: Vec<Option<usize>> = (0..6)
            .map(|_| hot.note_read_in(&key(7), BLOCK, BLOCK, 10))
            .collect();
        assert_eq!(
            turns.iter().filter(|&&t| t == Some(0)).count(),
            3,
            "{turns:?}"
        );
        assert_eq!(
            turns.iter().filter(|&&t| t == Some(1)).count(),
            3,
            "{turns:?}"
        );
        // Another block in the same window is not hot.
        assert_eq!(hot.note_read_in(&key(8), BLOCK, BLOCK, 10), None);
    }

    #[test]
    fn small_ranges_count_by_bytes_so_one_streaming_reader_is_not_hot() {
        let hot = HotBlocks::new(HotBlockConfig {
            owners: 2,
            reads_per_second: 2,
        });
        // One pass over the block in 64 KiB ranges is one read of it.
        for _ in 0..64 {
            assert_eq!(hot.note_read_in(&key(3), 64 << 10, BLOCK, 0), None);
        }
        // A small object (its block is 1 KiB long) read whole three times is hot.
        let small = key(4);
        assert_eq!(hot.note_read_in(&small, 1024, 1024, 0), None);
        assert_eq!(hot.note_read_in(&small, 1024, 1024, 0), None);
        let third = hot.note_read_in(&small, 1024, 1024, 0);
        let fourth = hot.note_read_in(&small, 1024, 1024, 0);
        assert_eq!(
            (third, fourth),
            (Some(0), Some(1)),
            "the two hot reads go to both owners"
        );
    }

    #[test]
    fn hot_lasts_one_more_window_then_cools() {
        let hot = HotBlocks::new(HotBlockConfig {
            owners: 2,
            reads_per_second: 1,
        });
        for _ in 0..3 {
            hot.note_read_in(&key(5), BLOCK, BLOCK, 100);
        }
        // The next window: hot from the first read on.
        let next: Vec<Option<usize>> = (0..2)
            .map(|_| hot.note_read_in(&key(5), BLOCK, BLOCK, 101))
            .collect();
        assert!(next.iter().all(Option::is_some), "{next:?}");
        // Two windows on, after one quiet window: cold again.
        assert_eq!(hot.note_read_in(&key(5), BLOCK, BLOCK, 103), None);
    }

    #[test]
    fn cold_blocks_do_not_push_a_hot_one_out() {
        let hot = HotBlocks::new(HotBlockConfig {
            owners: 2,
            reads_per_second: 1,
        });
        let hot_key = key(9);
        for _ in 0..2 {
            hot.note_read_in(&hot_key, BLOCK, BLOCK, 0);
        }
        // Blocks that land on the hot block's slots (same low bits), each read once.
        let slots = SLOTS as u64;
        for n in 1..50u64 {
            let mut k = key(9 + n * slots);
            k[8..12].copy_from_slice(&(n as u32).to_le_bytes());
            assert_eq!(hot.note_read_in(&k, BLOCK, BLOCK, 0), None);
        }
        assert!(
            hot.note_read_in(&hot_key, BLOCK, BLOCK, 0).is_some(),
            "the hot block is still counted and spread"
        );
    }

    #[test]
    fn concurrent_reads_are_all_counted_or_refused_without_panicking() {
        let hot = std::sync::Arc::new(HotBlocks::new(HotBlockConfig::TWO_OWNERS));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let hot = hot.clone();
                std::thread::spawn(move || {
                    (0..10_000)
                        .map(|i| hot.note_read_in(&key(i % 3), BLOCK, BLOCK, 0))
                        .filter(|&t| t == Some(1))
                        .count()
                })
            })
            .collect();
        let spread: usize = threads
            .into_iter()
            .map(|t| t.join().expect("a counting thread panicked"))
            .sum();
        // 40,000 reads of three blocks in one window: nearly half go to the second owner.
        assert!(spread > 15_000, "{spread}");
    }
}
