//! [`ObjectInfo`] as a cache holds a million of them: 48 bytes inline and, for the
//! common object (an MD5 ETag, a usual content type, no other headers), nothing on the
//! heap, where an [`ObjectInfo`] is 240 bytes inline (six header strings and an optional
//! content type, held even when empty) plus its ETag and content type on the heap.
//!
//! The conversion is exact both ways ([`CompactInfo::from_info`], [`CompactInfo::to_info`]):
//! what the cache gives back is what was put in.

use std::time::{Duration, UNIX_EPOCH};

use super::ObjectInfo;
use talon_core::wire::HeaderSet;

/// Content types stored as an index instead of a string (the stores' defaults first).
const USUAL_CONTENT_TYPES: [&str; 8] = [
    "application/octet-stream",
    "binary/octet-stream",
    "image/jpeg",
    "image/png",
    "text/plain",
    "application/json",
    "application/x-parquet",
    "application/vnd.apache.parquet",
];

/// `modified_nanos` of an object without a modification time.
const NO_TIME: u32 = u32::MAX;

/// `content_type` of a type held as text (in [`Extra`]).
const OTHER_TYPE: u8 = u8::MAX;

/// The 16 bytes of a quoted 32-digit lower-case hex ETag (S3's MD5 of a single-part
/// object), or `None` for any other.
fn hex_etag(etag: &str) -> Option<[u8; 16]> {
    let hex = etag
        .strip_prefix('"')?
        .strip_suffix('"')
        .filter(|h| h.len() == 32 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))?;
    let digit = |b: u8| {
        if b.is_ascii_digit() {
            b - b'0'
        } else {
            b - b'a' + 10
        }
    };
    let mut bytes = [0u8; 16];
    for (byte, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
        *byte = (digit(pair[0]) << 4) | digit(pair[1]);
    }
    Some(bytes)
}

/// What the common object does not have, held apart: an ETag that is not MD5 hex, a
/// content type that is not usual, any other header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Extra {
    etag: Option<Box<str>>,
    content_type: Option<Box<str>>,
    headers: HeaderSet,
}

impl Extra {
    fn held_bytes(&self) -> usize {
        std::mem::size_of::<Extra>()
            + self.etag.as_deref().map_or(0, str::len)
            + self.content_type.as_deref().map_or(0, str::len)
            + self.headers.heap_bytes()
    }
}

/// [`ObjectInfo`] in the form a metadata cache keeps (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactInfo {
    size: u64,
    /// Seconds since the Unix epoch of the last modification (with `modified_nanos`).
    modified_secs: u64,
    /// The ETag as MD5 hex bytes, unless `extra` holds it as text.
    etag_hex: [u8; 16],
    /// Only for an object that is not the common one.
    extra: Option<Box<Extra>>,
    /// Nanoseconds of the last modification; [`NO_TIME`] when the origin gave none (or
    /// one before the epoch, which no store gives).
    modified_nanos: u32,
    /// 0: no content type; `i + 1`: [`USUAL_CONTENT_TYPES`]`[i]`; [`OTHER_TYPE`]: the
    /// one in `extra`.
    content_type: u8,
}

impl CompactInfo {
    /// The compact form of `info`.
    pub fn from_info(info: &ObjectInfo) -> CompactInfo {
        let mut extra = Extra::default();
        let etag_hex = hex_etag(&info.etag).unwrap_or_else(|| {
            extra.etag = Some(info.etag.as_str().into());
            [0; 16]
        });
        let content_type = match info.content_type.as_deref() {
            None => 0,
            Some(t) => match USUAL_CONTENT_TYPES.iter().position(|u| *u == t) {
                Some(i) => i as u8 + 1,
                None => {
                    extra.content_type = Some(t.into());
                    OTHER_TYPE
                }
            },
        };
        extra.headers.clone_from(&info.headers);
        let modified = info
            .last_modified
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok());
        CompactInfo {
            size: info.size,
            modified_secs: modified.map_or(0, |d| d.as_secs()),
            modified_nanos: modified.map_or(NO_TIME, |d| d.subsec_nanos()),
            etag_hex,
            extra: (extra != Extra::default()).then(|| Box::new(extra)),
            content_type,
        }
    }

    /// The [`ObjectInfo`] this was made from.
    pub fn to_info(&self) -> ObjectInfo {
        let extra = self.extra.as_deref();
        let etag = match extra.and_then(|e| e.etag.as_deref()) {
            Some(text) => text.to_owned(),
            None => {
                const DIGITS: &[u8; 16] = b"0123456789abcdef";
                let mut s = String::with_capacity(34);
                s.push('"');
                for b in self.etag_hex {
                    s.push(char::from(DIGITS[usize::from(b >> 4)]));
                    s.push(char::from(DIGITS[usize::from(b & 15)]));
                }
                s.push('"');
                s
            }
        };
        ObjectInfo {
            size: self.size,
            etag,
            last_modified: (self.modified_nanos != NO_TIME)
                .then(|| UNIX_EPOCH + Duration::new(self.modified_secs, self.modified_nanos)),
            content_type: match self.content_type {
                0 => None,
                OTHER_TYPE => extra
                    .and_then(|e| e.content_type.as_deref())
                    .map(str::to_owned),
                i => USUAL_CONTENT_TYPES
                    .get(usize::from(i - 1))
                    .map(|t| (*t).to_owned()),
            },
            headers: extra.map(|e| e.headers.clone()).unwrap_or_default(),
        }
    }

    /// The object's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes this holds, inline and on the heap (for caches' byte bounds).
    pub fn held_bytes(&self) -> u64 {
        let extra = self.extra.as_deref().map_or(0, Extra::held_bytes);
        (std::mem::size_of::<CompactInfo>() + extra) as u64
    }
}

impl From<&ObjectInfo> for CompactInfo {
    fn from(info: &ObjectInfo) -> CompactInfo {
        CompactInfo::from_info(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(etag: &str, content_type: Option<&str>, headers: HeaderSet) -> ObjectInfo {
        ObjectInfo {
            size: 1234,
            etag: etag.to_owned(),
            last_modified: Some(UNIX_EPOCH + Duration::new(1_735_689_600, 123)),
            content_type: content_type.map(str::to_owned),
            headers,
        }
    }

    #[test]
    fn every_object_info_comes_back_exactly() {
        let with_headers = HeaderSet {
            content_md5: "1B2M2Y8AsgTpgAmY7PhCfg==".into(),
            cache_control: "max-age=60".into(),
            user_metadata: vec![("owner".into(), "ml".into())],
            ..HeaderSet::default()
        };
        let cases = [
            info(
                "\"0123456789abcdef0123456789abcdef\"",
                Some("binary/octet-stream"),
                HeaderSet::default(),
            ),
            // Upper-case hex, a multipart tag, Azure's, an unquoted one, an empty one.
            info(
                "\"0123456789ABCDEF0123456789ABCDEF\"",
                None,
                HeaderSet::default(),
            ),
            info(
                "\"0123456789abcdef0123456789abcdef-12\"",
                Some("text/csv"),
                with_headers.clone(),
            ),
            info(
                "\"0x8DCBA9876543210\"",
                Some("application/octet-stream"),
                HeaderSet::default(),
            ),
            info("0123456789abcdef0123456789abcdef", Some(""), with_headers),
            info("", None, HeaderSet::default()),
        ];
        for case in cases {
            assert_eq!(CompactInfo::from_info(&case).to_info(), case);
        }
        let undated = ObjectInfo {
            last_modified: None,
            ..info("\"e\"", None, HeaderSet::default())
        };
        assert_eq!(CompactInfo::from_info(&undated).to_info(), undated);
    }

    #[test]
    fn the_common_object_holds_nothing_on_the_heap() {
        assert!(
            std::mem::size_of::<CompactInfo>() <= 48,
            "{}",
            std::mem::size_of::<CompactInfo>()
        );
        let common = info(
            "\"0123456789abcdef0123456789abcdef\"",
            Some("application/octet-stream"),
            HeaderSet::default(),
        );
        let compact = CompactInfo::from_info(&common);
        assert_eq!(
            compact.held_bytes(),
            std::mem::size_of::<CompactInfo>() as u64
        );
        assert!(compact.held_bytes() * 3 < common.held_bytes());
    }
}
