//! Deterministic generated objects: content that is a pure function of bucket, key and
//! seed, computed at any offset without storing a byte, so a stub can serve objects of
//! many GiB for free and any client can check SHA-256 on its own.
//!
//! The content is the little-endian bytes of a counter-mode SplitMix64 stream:
//! word `i` is `splitmix64(stream_key + (i + 1) * 0x9E3779B97F4A7C15)`, where
//! `stream_key` is the first 8 bytes (little-endian) of
//! `SHA-256("talon-generated-v1\0" + bucket + "/" + key + "\0" + seed)`. A Python
//! implementation in `tests/sdk/generated.py` checks the same definition.

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// Domain separator of the content and ETag hashes; bump to change every object.
const DOMAIN: &str = "talon-generated-v1";
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// A generated object: its identity and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedObject {
    /// Bucket (container).
    pub bucket: String,
    /// Key (blob name).
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// Seed; the same bucket and key with another seed is other content.
    pub seed: u64,
    stream_key: u64,
}

fn identity_bytes(bucket: &str, key: &str, seed: u64) -> String {
    format!("{DOMAIN}\0{bucket}/{key}\0{seed}")
}

fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl GeneratedObject {
    /// Defines a generated object.
    pub fn new(
        bucket: impl Into<String>,
        key: impl Into<String>,
        size: u64,
        seed: u64,
    ) -> GeneratedObject {
        let (bucket, key) = (bucket.into(), key.into());
        let digest = Sha256::digest(identity_bytes(&bucket, &key, seed).as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        GeneratedObject {
            bucket,
            key,
            size,
            seed,
            stream_key: u64::from_le_bytes(first),
        }
    }

    /// The quoted entity tag: a digest of identity and size.
    pub fn etag(&self) -> String {
        let text = format!(
            "{}\0{}",
            identity_bytes(&self.bucket, &self.key, self.seed),
            self.size
        );
        let digest = Sha256::digest(text.as_bytes());
        format!("\"{}\"", hex::encode(&digest[..16]))
    }

    /// A fixed modification time, so that restarting a stub with the same objects keeps
    /// their versions (and a cache's blocks) valid.
    pub fn last_modified(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_735_689_600) // 2025-01-01T00:00:00Z
    }

    fn word(&self, index: u64) -> u64 {
        splitmix64(
            self.stream_key
                .wrapping_add(index.wrapping_add(1).wrapping_mul(GOLDEN_GAMMA)),
        )
    }

    /// Fills `buf` with the bytes at `offset..offset + buf.len()`. Bytes past the end of
    /// the object are not defined by the object; callers must not ask for them.
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        let mut pos = offset;
        let mut out = 0;
        while out < buf.len() {
            let word = self.word(pos / 8).to_le_bytes();
            let within = (pos % 8) as usize;
            let n = (8 - within).min(buf.len() - out);
            buf[out..out + n].copy_from_slice(&word[within..within + n]);
            out += n;
            pos += n as u64;
        }
    }

    /// SHA-256 of the whole object, hex (reads it all; for tests).
    pub fn sha256_hex(&self) -> String {
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut offset = 0;
        while offset < self.size {
            let n = (self.size - offset).min(buf.len() as u64) as usize;
            self.fill(offset, &mut buf[..n]);
            hasher.update(&buf[..n]);
            offset += n as u64;
        }
        hex::encode(hasher.finalize())
    }
}

/// Parses a size: plain bytes or a number with `KiB`, `MiB`, `GiB`, `TiB`.
pub use talon_core::parse_byte_size as parse_size;

impl FromStr for GeneratedObject {
    type Err = String;

    /// Parses `BUCKET/KEY=SIZE[,SEED]`.
    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let (path, rest) = spec
            .split_once('=')
            .ok_or_else(|| format!("'{spec}' is not BUCKET/KEY=SIZE[,SEED]"))?;
        let (bucket, key) = path
            .split_once('/')
            .filter(|(b, k)| !b.is_empty() && !k.is_empty())
            .ok_or_else(|| format!("'{path}' is not BUCKET/KEY"))?;
        let (size, seed) = match rest.split_once(',') {
            Some((size, seed)) => (
                size,
                seed.trim()
                    .parse::<u64>()
                    .map_err(|_| format!("seed '{seed}' is not a number"))?,
            ),
            None => (rest, 0),
        };
        Ok(GeneratedObject::new(bucket, key, parse_size(size)?, seed))
    }
}

/// Most objects one [`GeneratedSet`] may name (each costs the stub about a hundred
/// bytes of index).
pub const MAX_SET_OBJECTS: u64 = 10_000_000;

/// A dataset of generated objects (`--generate-set`): `count` objects named `prefix`
/// followed by a 7-digit index (`train/0000000` …), each of a size drawn from
/// `min_size..=max_size` by its index, the same every time; for benches of many small
/// objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedSet {
    /// Bucket (container).
    pub bucket: String,
    /// What every key starts with.
    pub prefix: String,
    /// How many objects.
    pub count: u64,
    /// Smallest size, bytes.
    pub min_size: u64,
    /// Largest size, bytes.
    pub max_size: u64,
    /// Seed of every object's content and of the sizes.
    pub seed: u64,
}

impl GeneratedSet {
    /// The `i`th object's key.
    pub fn key(&self, i: u64) -> String {
        format!("{}{i:07}", self.prefix)
    }

    /// The `i`th object's size.
    pub fn size(&self, i: u64) -> u64 {
        let span = self.max_size - self.min_size + 1;
        self.min_size + splitmix64(self.seed ^ i.wrapping_add(1).wrapping_mul(GOLDEN_GAMMA)) % span
    }

    /// The `i`th object.
    pub fn object(&self, i: u64) -> GeneratedObject {
        GeneratedObject::new(self.bucket.clone(), self.key(i), self.size(i), self.seed)
    }

    /// Every object, in key order.
    pub fn objects(&self) -> impl Iterator<Item = GeneratedObject> + '_ {
        (0..self.count).map(|i| self.object(i))
    }
}

impl FromStr for GeneratedSet {
    type Err = String;

    /// Parses `BUCKET/PREFIX=COUNT,MIN-MAX[,SEED]` (sizes in bytes or with
    /// KiB/MiB/GiB/TiB), e.g. `data/train/=1000000,4KiB-256KiB,7`.
    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let form = "BUCKET/PREFIX=COUNT,MIN-MAX[,SEED]";
        let (path, rest) = spec
            .split_once('=')
            .ok_or_else(|| format!("'{spec}' is not {form}"))?;
        let (bucket, prefix) = path
            .split_once('/')
            .filter(|(b, _)| !b.is_empty())
            .ok_or_else(|| format!("'{path}' is not BUCKET/PREFIX"))?;
        let mut parts = rest.split(',');
        let count: u64 = parts
            .next()
            .unwrap_or("")
            .trim()
            .parse()
            .map_err(|_| format!("'{spec}': the count is not a number ({form})"))?;
        if count == 0 || count > MAX_SET_OBJECTS {
            return Err(format!("'{spec}': from 1 to {MAX_SET_OBJECTS} objects"));
        }
        let sizes = parts
            .next()
            .ok_or_else(|| format!("'{spec}' names no sizes ({form})"))?;
        let (min, max) = sizes
            .split_once('-')
            .ok_or_else(|| format!("'{sizes}' is not MIN-MAX"))?;
        let (min_size, max_size) = (parse_size(min.trim())?, parse_size(max.trim())?);
        if min_size > max_size {
            return Err(format!(
                "'{sizes}': the smallest size is larger than the largest"
            ));
        }
        let seed = match parts.next() {
            Some(seed) => seed
                .trim()
                .parse()
                .map_err(|_| format!("seed '{seed}' is not a number"))?,
            None => 0,
        };
        if parts.next().is_some() {
            return Err(format!("'{spec}' is not {form}"));
        }
        Ok(GeneratedSet {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            count,
            min_size,
            max_size,
            seed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_names_its_objects_in_order_with_sizes_in_range_every_time() {
        let set: GeneratedSet = "data/train/=1000,4KiB-256KiB,7".parse().expect("a set");
        assert_eq!(
            (set.count, set.min_size, set.max_size, set.seed),
            (1000, 4096, 262_144, 7)
        );
        let objects: Vec<GeneratedObject> = set.objects().collect();
        assert_eq!(objects[0].key, "train/0000000");
        assert_eq!(objects[999].key, "train/0000999");
        assert!(objects.windows(2).all(|w| w[0].key < w[1].key));
        assert!(objects.iter().all(|o| (4096..=262_144).contains(&o.size)));
        let distinct: std::collections::BTreeSet<u64> = objects.iter().map(|o| o.size).collect();
        assert!(distinct.len() > 900, "sizes spread: {}", distinct.len());
        let again: GeneratedSet = "data/train/=1000,4KiB-256KiB,7".parse().expect("a set");
        assert_eq!(again.object(123), objects[123]);
        for bad in [
            "data/train/",
            "/train/=10,1-2",
            "data/train/=0,1-2",
            "data/train/=10000001,1-2",
            "data/train/=10,2-1",
            "data/train/=10,1",
            "data/train/=10,1-2,x",
            "data/train/=10,1-2,3,4",
        ] {
            assert!(bad.parse::<GeneratedSet>().is_err(), "{bad}");
        }
    }

    #[test]
    fn fill_is_random_access() {
        let g = GeneratedObject::new("b", "k", 1 << 20, 7);
        let mut whole = vec![0u8; 1000];
        g.fill(0, &mut whole);
        for (start, len) in [
            (0usize, 1usize),
            (3, 10),
            (7, 9),
            (8, 8),
            (123, 456),
            (999, 1),
        ] {
            let mut part = vec![0u8; len];
            g.fill(start as u64, &mut part);
            assert_eq!(part, whole[start..start + len], "{start}+{len}");
        }
    }

    #[test]
    fn content_depends_on_every_identity_field() {
        let bytes = |g: GeneratedObject| {
            let mut b = [0u8; 32];
            g.fill(0, &mut b);
            b
        };
        let base = bytes(GeneratedObject::new("b", "k", 10, 0));
        assert_ne!(base, bytes(GeneratedObject::new("b", "k2", 10, 0)));
        assert_ne!(base, bytes(GeneratedObject::new("b2", "k", 10, 0)));
        assert_ne!(base, bytes(GeneratedObject::new("b", "k", 10, 1)));
        assert_eq!(
            base,
            bytes(GeneratedObject::new("b", "k", 99, 0)),
            "size does not change content"
        );
        assert_ne!(
            GeneratedObject::new("b", "k", 10, 0).etag(),
            GeneratedObject::new("b", "k", 11, 0).etag()
        );
    }

    /// Golden values shared with tests/sdk/generated.py: if the definition drifts, both
    /// fail.
    #[test]
    fn golden_digest() {
        let g = GeneratedObject::new("bench", "golden.bin", 1000, 42);
        assert_eq!(g.sha256_hex(), GOLDEN_SHA256);
        assert_eq!(g.etag(), GOLDEN_ETAG);
    }

    /// SHA-256 of `bench/golden.bin` (1000 bytes, seed 42).
    const GOLDEN_SHA256: &str = "6fc2c36d2b4f3d65f71c5a55987c3ae1573184711794f91c1768f9521f01883c";
    const GOLDEN_ETAG: &str = "\"68ce525e6e526b149aea9f49abaf8573\"";

    #[test]
    fn past_four_gib() {
        let g = GeneratedObject::new("b", "big", 6 << 30, 0);
        let mut a = [0u8; 16];
        g.fill((1 << 32) - 8, &mut a);
        let mut b = [0u8; 8];
        g.fill(1 << 32, &mut b);
        assert_eq!(a[8..], b);
    }

    #[test]
    fn specs_and_sizes_parse() {
        let g: GeneratedObject = "bench/dir/x.bin=64MiB,9".parse().expect("spec");
        assert_eq!(
            (g.bucket.as_str(), g.key.as_str(), g.size, g.seed),
            ("bench", "dir/x.bin", 64 << 20, 9)
        );
        let g: GeneratedObject = "b/k=100".parse().expect("spec");
        assert_eq!((g.size, g.seed), (100, 0));
        assert!("nokey=1".parse::<GeneratedObject>().is_err());
        assert!("b/k=1XB".parse::<GeneratedObject>().is_err());
        assert_eq!(parse_size("5GiB"), Ok(5 << 30));
        assert!(parse_size("99999999999TiB").is_err());
    }
}
