//! S3's flexible checksums (`x-amz-checksum-*`): CRC32, CRC32C, CRC64NVME, SHA-1 and
//! SHA-256, computed incrementally and written as base64 of the big-endian digest.
//!
//! The same values appear in request headers, in `aws-chunked` trailers and, when a client
//! asks with `x-amz-checksum-mode: ENABLED`, in GetObject/HeadObject answers for the whole
//! object (never for a range).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use crc::{CRC_32_ISCSI, CRC_32_ISO_HDLC, CRC_64_NVME, Crc, Table};
use sha1::Sha1;
use sha2::{Digest, Sha256};

static CRC32: Crc<u32, Table<16>> = Crc::<u32, Table<16>>::new(&CRC_32_ISO_HDLC);
static CRC32C: Crc<u32, Table<16>> = Crc::<u32, Table<16>>::new(&CRC_32_ISCSI);
static CRC64NVME: Crc<u64, Table<16>> = Crc::<u64, Table<16>>::new(&CRC_64_NVME);

/// A flexible-checksum algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ChecksumAlgorithm {
    /// CRC-32 (ISO-HDLC), botocore's default.
    Crc32,
    /// CRC-32C (Castagnoli).
    Crc32c,
    /// CRC-64/NVME, the default of the newest SDKs.
    Crc64Nvme,
    /// SHA-1.
    Sha1,
    /// SHA-256.
    Sha256,
}

impl ChecksumAlgorithm {
    /// All algorithms, in the order S3 documents them.
    pub const ALL: [ChecksumAlgorithm; 5] = [
        ChecksumAlgorithm::Crc32,
        ChecksumAlgorithm::Crc32c,
        ChecksumAlgorithm::Crc64Nvme,
        ChecksumAlgorithm::Sha1,
        ChecksumAlgorithm::Sha256,
    ];

    /// The name as `x-amz-checksum-algorithm` writes it: `CRC32`, `CRC64NVME`, ...
    pub fn name(self) -> &'static str {
        match self {
            ChecksumAlgorithm::Crc32 => "CRC32",
            ChecksumAlgorithm::Crc32c => "CRC32C",
            ChecksumAlgorithm::Crc64Nvme => "CRC64NVME",
            ChecksumAlgorithm::Sha1 => "SHA1",
            ChecksumAlgorithm::Sha256 => "SHA256",
        }
    }

    /// The header that carries the value: `x-amz-checksum-crc32`, ...
    pub fn header_name(self) -> &'static str {
        match self {
            ChecksumAlgorithm::Crc32 => "x-amz-checksum-crc32",
            ChecksumAlgorithm::Crc32c => "x-amz-checksum-crc32c",
            ChecksumAlgorithm::Crc64Nvme => "x-amz-checksum-crc64nvme",
            ChecksumAlgorithm::Sha1 => "x-amz-checksum-sha1",
            ChecksumAlgorithm::Sha256 => "x-amz-checksum-sha256",
        }
    }

    /// A checksum as an object's headers keep it (`HeaderSet::checksum`,
    /// [`crate::server`]): `crc32:VALUE`, the algorithm as its header's suffix.
    pub fn kept(self, value: &str) -> String {
        let name = self.header_name().trim_start_matches("x-amz-checksum-");
        format!("{name}:{value}")
    }

    /// Parses an algorithm name (`CRC32`, any case) or a header name (`x-amz-checksum-crc32`).
    pub fn parse(s: &str) -> Option<ChecksumAlgorithm> {
        let s = s.trim();
        let name = s.strip_prefix("x-amz-checksum-").unwrap_or(s);
        ChecksumAlgorithm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name))
    }

    /// A fresh incremental hasher for this algorithm.
    pub fn hasher(self) -> Checksummer {
        Checksummer::new(self)
    }
}

/// An incremental flexible-checksum computation.
pub struct Checksummer {
    algorithm: ChecksumAlgorithm,
    state: State,
}

enum State {
    Crc32(crc::Digest<'static, u32, Table<16>>),
    Crc64(crc::Digest<'static, u64, Table<16>>),
    Sha1(Sha1),
    Sha256(Sha256),
}

impl Checksummer {
    /// Starts a computation.
    pub fn new(algorithm: ChecksumAlgorithm) -> Checksummer {
        let state = match algorithm {
            ChecksumAlgorithm::Crc32 => State::Crc32(CRC32.digest()),
            ChecksumAlgorithm::Crc32c => State::Crc32(CRC32C.digest()),
            ChecksumAlgorithm::Crc64Nvme => State::Crc64(CRC64NVME.digest()),
            ChecksumAlgorithm::Sha1 => State::Sha1(Sha1::new()),
            ChecksumAlgorithm::Sha256 => State::Sha256(Sha256::new()),
        };
        Checksummer { algorithm, state }
    }

    /// The algorithm being computed.
    pub fn algorithm(&self) -> ChecksumAlgorithm {
        self.algorithm
    }

    /// Feeds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        match &mut self.state {
            State::Crc32(d) => d.update(bytes),
            State::Crc64(d) => d.update(bytes),
            State::Sha1(h) => h.update(bytes),
            State::Sha256(h) => h.update(bytes),
        }
    }

    /// The base64 value as it appears in `x-amz-checksum-*`.
    pub fn finalize(self) -> String {
        match self.state {
            State::Crc32(d) => BASE64.encode(d.finalize().to_be_bytes()),
            State::Crc64(d) => BASE64.encode(d.finalize().to_be_bytes()),
            State::Sha1(h) => BASE64.encode(h.finalize()),
            State::Sha256(h) => BASE64.encode(h.finalize()),
        }
    }
}

/// Computes one checksum of a whole buffer.
pub fn checksum(algorithm: ChecksumAlgorithm, bytes: &[u8]) -> String {
    let mut c = Checksummer::new(algorithm);
    c.update(bytes);
    c.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_of_hello_world() {
        // Values S3 documents and SDKs compute for "Hello world".
        let data = b"Hello world";
        assert_eq!(checksum(ChecksumAlgorithm::Crc32, data), "i9aeUg==");
        assert_eq!(checksum(ChecksumAlgorithm::Crc32c, data), "crUfeA==");
        assert_eq!(
            checksum(ChecksumAlgorithm::Sha1, data),
            "e1AsOh9IyGCa4hLN+2Od7jlnP14="
        );
        assert_eq!(
            checksum(ChecksumAlgorithm::Sha256, data),
            "ZOyIygCyaOW6GjVnihtTFtIS9PNmskdyMlNKiuyjfzw="
        );
    }

    #[test]
    fn crc_check_values_match_the_catalogue() {
        let check = b"123456789";
        assert_eq!(CRC32.checksum(check), 0xcbf4_3926);
        assert_eq!(CRC32C.checksum(check), 0xe306_9283);
        assert_eq!(CRC64NVME.checksum(check), 0xae8b_1486_0a79_9888);
    }

    #[test]
    fn incremental_equals_one_shot() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 251) as u8).collect();
        for alg in ChecksumAlgorithm::ALL {
            let mut c = alg.hasher();
            for chunk in data.chunks(777) {
                c.update(chunk);
            }
            assert_eq!(c.finalize(), checksum(alg, &data), "{alg:?}");
        }
    }

    #[test]
    fn names_parse_both_ways() {
        for alg in ChecksumAlgorithm::ALL {
            assert_eq!(ChecksumAlgorithm::parse(alg.name()), Some(alg));
            assert_eq!(ChecksumAlgorithm::parse(alg.header_name()), Some(alg));
        }
        assert_eq!(
            ChecksumAlgorithm::parse("crc32c"),
            Some(ChecksumAlgorithm::Crc32c)
        );
        assert_eq!(ChecksumAlgorithm::parse("md5"), None);
    }
}
