//! `cargo run --release --manifest-path bench/cache-choice/Cargo.toml -- [ENTRIES] [SECONDS] [THREADS,...]`
//!
//! For each candidate: the heap bytes per entry beyond the keys and values themselves
//! (a counting allocator, ENTRIES entries of 40-64-byte keys), then the nanoseconds per
//! `get` of a present key, each of THREADS threads reading random keys for SECONDS.
//! Prints a table and one JSON line per candidate.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicIsize, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: a pointer this allocator gave, with its layout.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// What a metadata entry holds besides its key: when the origin said it, and the
/// object's metadata behind an Arc (shared with readers).
#[derive(Clone)]
struct Value {
    _observed: Instant,
    _meta: Arc<[u8; 96]>,
}

trait Candidate: Send + Sync {
    fn name(&self) -> &'static str;
    fn insert(&self, k: String, v: Value);
    fn get(&self, k: &str) -> bool;
    /// Finishes deferred bookkeeping (moka's) before memory is counted.
    fn settle(&self) {}
}

struct Locked(Mutex<HashMap<String, Value>>);
impl Candidate for Locked {
    fn name(&self) -> &'static str {
        "HashMap behind one Mutex (today's)"
    }
    fn insert(&self, k: String, v: Value) {
        self.0.lock().unwrap().insert(k, v);
    }
    fn get(&self, k: &str) -> bool {
        self.0.lock().unwrap().get(k).cloned().is_some()
    }
}

struct Quick(quick_cache::sync::Cache<String, Value>);
impl Candidate for Quick {
    fn name(&self) -> &'static str {
        "quick_cache 0.6 (S3-FIFO, sharded)"
    }
    fn insert(&self, k: String, v: Value) {
        self.0.insert(k, v);
    }
    fn get(&self, k: &str) -> bool {
        self.0.get(k).is_some()
    }
}

struct Moka(moka::sync::Cache<String, Value>);
impl Candidate for Moka {
    fn name(&self) -> &'static str {
        "moka 0.12 sync (TinyLFU)"
    }
    fn insert(&self, k: String, v: Value) {
        self.0.insert(k, v);
    }
    fn get(&self, k: &str) -> bool {
        self.0.get(k).is_some()
    }
    fn settle(&self) {
        self.0.run_pending_tasks();
    }
}

fn key(i: u64) -> String {
    // 40-64 bytes, like s3/bucket/dataset/train/00042/sample-0004217.jpg
    format!("s3/datasets-bucket/imagenet/train/{:05}/sample-{i:09}.jpg", i % 1000)
}

fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut s = std::collections::hash_map::RandomState::new().build_hasher();
    s.write_u64(seed);
    let mut x = s.finish() | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let secs: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2.0);
    let threads: Vec<usize> = args
        .get(3)
        .map(|a| a.split(',').filter_map(|t| t.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2]);
    let meta = Arc::new([7u8; 96]);
    let now = Instant::now();
    let makers: Vec<Box<dyn Fn() -> Arc<dyn Candidate>>> = vec![
        Box::new(|| Arc::new(Locked(Mutex::new(HashMap::new())))),
        Box::new(move || Arc::new(Quick(quick_cache::sync::Cache::new(2 * n as usize)))),
        Box::new(move || Arc::new(Moka(moka::sync::Cache::new(2 * n)))),
    ];
    println!("| cache | heap bytes per entry beyond key and value | ns per hit, by threads |");
    println!("|---|---:|---|");
    for make in &makers {
        // Memory: the keys' own heap bytes are counted separately and taken off.
        let before = LIVE.load(Ordering::Relaxed);
        let c = make();
        let mut key_bytes = 0i64;
        for i in 0..n {
            let k = key(i);
            key_bytes += k.capacity() as i64;
            c.insert(
                k,
                Value {
                    _observed: now,
                    _meta: meta.clone(),
                },
            );
        }
        c.settle();
        let total = LIVE.load(Ordering::Relaxed) - before;
        let per_entry = (total as i64 - key_bytes) as f64 / n as f64;
        // Hits: every key is present (capacity 2n, so none is evicted; checked).
        let mut per_thread = Vec::new();
        for &t in &threads {
            let ops = Arc::new(AtomicU64::new(0));
            let misses = Arc::new(AtomicU64::new(0));
            let start = Instant::now();
            let handles: Vec<_> = (0..t)
                .map(|seed| {
                    let (c, ops, misses) = (c.clone(), ops.clone(), misses.clone());
                    std::thread::spawn(move || {
                        let mut next = rng(seed as u64 + 1);
                        let keys: Vec<String> = (0..4096).map(|_| key(next() % n)).collect();
                        let mut done = 0u64;
                        let deadline = Instant::now() + Duration::from_secs_f64(secs);
                        while Instant::now() < deadline {
                            for k in &keys {
                                if !c.get(k) {
                                    misses.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            done += keys.len() as u64;
                        }
                        ops.fetch_add(done, Ordering::Relaxed);
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            let elapsed = start.elapsed().as_secs_f64();
            let ns = elapsed * 1e9 * t as f64 / ops.load(Ordering::Relaxed) as f64;
            assert_eq!(misses.load(Ordering::Relaxed), 0, "{}: a key was evicted", c.name());
            per_thread.push((t, ns));
        }
        let shown: Vec<String> = per_thread.iter().map(|(t, ns)| format!("{t}: {ns:.0}")).collect();
        println!("| {} | {per_entry:.0} | {} |", c.name(), shown.join(", "));
        println!(
            "{{\"cache\": \"{}\", \"entries\": {n}, \"bytes_per_entry\": {per_entry:.1}, \"ns_per_hit\": {{{}}}}}",
            c.name(),
            per_thread
                .iter()
                .map(|(t, ns)| format!("\"{t}\": {ns:.1}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        drop(c);
    }
}
