//! The crate's single error type.
//!
//! Every fallible function in `talon-core` returns [`Error`]. Variants carry
//! the numbers that made the input invalid, never the (possibly huge or
//! hostile) input itself. [`Error::code`] maps each variant to the wire
//! [`ErrorCode`] a worker should answer with, so a decode failure turns into
//! an error frame without a hand-written table in every caller.

use std::fmt;

use crate::wire::{ErrorCode, MessageType};

/// Which name an [`Error::InvalidName`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NameField {
    /// An S3 bucket.
    Bucket,
    /// An Azure storage account.
    Account,
    /// An Azure container.
    Container,
    /// The object path (S3 key or Azure blob name).
    Path,
    /// An [`ObjectVersion`](crate::ObjectVersion) (ETag or version id).
    Version,
    /// The content type of a Stat reply.
    ContentType,
    /// The message of an error reply.
    ErrorMessage,
    /// The `Content-MD5` of a Stat reply.
    ContentMd5,
    /// The flexible checksum (`<algorithm>:<base64>`) of a Stat reply.
    Checksum,
    /// A content header (`Content-Encoding`, `Content-Language`,
    /// `Content-Disposition`, `Cache-Control`) of a Stat reply.
    ContentHeader,
    /// A user metadata name of a Stat reply.
    MetadataName,
    /// A user metadata value of a Stat reply.
    MetadataValue,
}

impl fmt::Display for NameField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Bucket => "bucket",
            Self::Account => "account",
            Self::Container => "container",
            Self::Path => "object path",
            Self::Version => "object version",
            Self::ContentType => "content type",
            Self::ErrorMessage => "error message",
            Self::ContentMd5 => "content MD5",
            Self::Checksum => "checksum",
            Self::ContentHeader => "content header",
            Self::MetadataName => "metadata name",
            Self::MetadataValue => "metadata value",
        })
    }
}

/// What is wrong with a name (see [`Error::InvalidName`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NameProblem {
    /// The name is empty.
    Empty,
    /// The name is longer than its limit, in bytes of UTF-8.
    TooLong {
        /// Length of the name in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// A bucket, account or container contains `/`.
    ContainsSlash,
    /// The name contains a NUL character.
    ContainsNul,
    /// The value contains a control character (content types become HTTP
    /// header values, where these are not allowed).
    ContainsControl,
    /// A path has a `.` or `..` segment.
    DotSegment,
    /// A content MD5 has characters outside base64.
    NotBase64,
    /// A metadata name is not a lower-case HTTP token.
    NotAToken,
    /// Metadata names are not sorted and unique.
    NotSorted,
    /// More metadata pairs than a frame can count (65,535).
    TooMany,
}

impl fmt::Display for NameProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("is empty"),
            Self::TooLong { len, max } => write!(f, "is {len} bytes long, the limit is {max}"),
            Self::ContainsSlash => f.write_str("contains `/`"),
            Self::ContainsNul => f.write_str("contains a NUL character"),
            Self::ContainsControl => f.write_str("contains a control character"),
            Self::DotSegment => f.write_str("has a `.` or `..` segment"),
            Self::NotBase64 => f.write_str("has characters outside base64"),
            Self::NotAToken => f.write_str("is not a lower-case HTTP token"),
            Self::NotSorted => f.write_str("is out of order or repeated"),
            Self::TooMany => f.write_str("has more than 65,535 entries"),
        }
    }
}

/// Everything that can go wrong in `talon-core`: invalid names and key paths,
/// invalid geometry or ranges, bitmap misuse or corrupt bitmap encodings, and
/// malformed wire frames.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A key path does not start with `s3/` or `az/`.
    #[error(
        "unknown backend in key path: expected `s3/<bucket>/<path>` or `az/<account>/<container>/<path>`"
    )]
    UnknownBackend,

    /// A bucket, account, container, path, version or other string is invalid.
    #[error("invalid {field}: {problem}")]
    InvalidName {
        /// Which name.
        field: NameField,
        /// What is wrong with it.
        problem: NameProblem,
    },

    /// Block and page sizes that cannot form a [`BlockGeometry`](crate::BlockGeometry).
    #[error("invalid block geometry (block {block_size} B, page {page_size} B): {reason}")]
    InvalidGeometry {
        /// Requested block size in bytes.
        block_size: u64,
        /// Requested page size in bytes.
        page_size: u64,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// A block offset or size that cannot identify a block (size not a power
    /// of two, or offset not a multiple of the size).
    #[error("invalid block (offset {block_offset}, size {block_size}): {reason}")]
    InvalidBlock {
        /// Offset of the block in its object, in bytes.
        block_offset: u64,
        /// Block size in bytes.
        block_size: u64,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// A byte range whose start lies after its end.
    #[error("invalid byte range {start}..{end}: start is after end")]
    InvalidRange {
        /// First byte of the range.
        start: u64,
        /// One past the last byte of the range.
        end: u64,
    },

    /// A byte range that reaches past the end of the object or block it
    /// addresses. Maps to [`ErrorCode::RangeNotSatisfiable`].
    #[error("byte range {start}..{end} is outside the {size} bytes available")]
    RangeNotSatisfiable {
        /// First byte of the range.
        start: u64,
        /// One past the last byte of the range.
        end: u64,
        /// Bytes available (object size, or bytes of the block that exist).
        size: u64,
    },

    /// A [`PresentBitmap`](crate::PresentBitmap) or block geometry with more
    /// pages than [`MAX_PAGES`](crate::bitmap::MAX_PAGES).
    #[error("{pages} pages requested, at most {max} are supported per block")]
    TooManyPages {
        /// Pages requested.
        pages: u64,
        /// The limit.
        max: u32,
    },

    /// A page or page range outside a bitmap.
    #[error("pages {start}..{end} are outside a bitmap of {pages} pages")]
    PageOutOfRange {
        /// First page asked for.
        start: u32,
        /// One past the last page asked for.
        end: u32,
        /// Pages in the bitmap.
        pages: u32,
    },

    /// A persisted bitmap encoding that is truncated, too long, or has bits
    /// set beyond its page count.
    #[error("corrupt bitmap encoding: {0}")]
    InvalidBitmap(&'static str),

    /// A frame header that does not start with the Talon magic.
    #[error("bad frame magic {0:#06x}, expected 0x544c (\"TL\")")]
    BadMagic(u16),

    /// A frame header with a protocol version this build does not speak.
    #[error("unsupported wire protocol version {0}, this build speaks version 1")]
    UnsupportedVersion(u8),

    /// A frame header with an unknown message type.
    #[error("unknown message type {0:#04x}")]
    UnknownMessageType(u8),

    /// A frame header with flag bits this version does not define.
    #[error("unknown frame flag bits {0:#06x}")]
    UnknownFlags(u16),

    /// A frame header whose reserved field is not zero.
    #[error("reserved header field is {0:#06x}, must be 0")]
    ReservedNotZero(u16),

    /// The ERROR flag is set on a frame that is not an error reply, or
    /// missing on one that is.
    #[error("the ERROR flag must be set on error replies and only on them ({0:?} frame)")]
    ErrorFlagMismatch(MessageType),

    /// A payload longer than its message type allows. Detected from the
    /// header alone, before anything is allocated for the payload.
    #[error("{message_type:?} payload of {len} bytes exceeds the {max}-byte limit")]
    PayloadTooLarge {
        /// The frame's message type.
        message_type: MessageType,
        /// Payload length claimed or attempted, in bytes.
        len: u64,
        /// The limit for this message type, in bytes.
        max: u32,
    },

    /// A payload whose content does not match its message type's layout.
    #[error("malformed {message_type:?} payload: {reason}")]
    Malformed {
        /// The frame's message type.
        message_type: MessageType,
        /// What was wrong.
        reason: &'static str,
    },

    /// A [`FrameDecoder`](crate::wire::FrameDecoder) was used again after it
    /// returned an error; the stream is out of sync and must be closed.
    #[error("frame decoder used after an earlier error; close the connection")]
    DecoderFailed,

    /// A cluster secret shorter than [`MIN_SECRET_LEN`](crate::cluster_auth::MIN_SECRET_LEN).
    #[error("the cluster secret has {len} bytes; at least {min} are needed")]
    SecretTooShort {
        /// Bytes given (without surrounding whitespace).
        len: usize,
        /// Bytes needed.
        min: usize,
    },
}

impl Error {
    /// The wire error code a worker should send when this error is caused by
    /// a peer's request: [`ErrorCode::RangeNotSatisfiable`] for ranges past
    /// the end, [`ErrorCode::TooLarge`] for oversized payloads,
    /// [`ErrorCode::Unsupported`] for unknown versions and message types,
    /// [`ErrorCode::Internal`] for local state (corrupt bitmaps, decoder
    /// misuse) and [`ErrorCode::InvalidRequest`] for everything else.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::RangeNotSatisfiable { .. } => ErrorCode::RangeNotSatisfiable,
            Self::PayloadTooLarge { .. } | Self::TooManyPages { .. } => ErrorCode::TooLarge,
            Self::UnsupportedVersion(_) | Self::UnknownMessageType(_) => ErrorCode::Unsupported,
            Self::InvalidBitmap(_)
            | Self::DecoderFailed
            | Self::InvalidGeometry { .. }
            | Self::SecretTooShort { .. } => ErrorCode::Internal,
            Self::UnknownBackend
            | Self::InvalidName { .. }
            | Self::InvalidBlock { .. }
            | Self::InvalidRange { .. }
            | Self::PageOutOfRange { .. }
            | Self::BadMagic(_)
            | Self::UnknownFlags(_)
            | Self::ReservedNotZero(_)
            | Self::ErrorFlagMismatch(_)
            | Self::Malformed { .. } => ErrorCode::InvalidRequest,
        }
    }
}

/// An error and its causes as one line, `a: b: c`, leaving out a cause whose text the
/// line already holds (an error that prints its source in its own message).
pub fn error_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let text = next.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = next.source();
    }
    line.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_the_documented_mapping() {
        let range = Error::RangeNotSatisfiable {
            start: 0,
            end: 10,
            size: 5,
        };
        assert_eq!(range.code(), ErrorCode::RangeNotSatisfiable);
        assert_eq!(Error::UnsupportedVersion(2).code(), ErrorCode::Unsupported);
        assert_eq!(Error::UnknownMessageType(9).code(), ErrorCode::Unsupported);
        assert_eq!(Error::BadMagic(1).code(), ErrorCode::InvalidRequest);
        assert_eq!(Error::InvalidBitmap("x").code(), ErrorCode::Internal);
        let big = Error::PayloadTooLarge {
            message_type: MessageType::Ping,
            len: 9,
            max: 8,
        };
        assert_eq!(big.code(), ErrorCode::TooLarge);
    }

    #[test]
    fn display_names_the_field_and_problem() {
        let e = Error::InvalidName {
            field: NameField::Path,
            problem: NameProblem::DotSegment,
        };
        assert_eq!(
            e.to_string(),
            "invalid object path: has a `.` or `..` segment"
        );
        let e = Error::InvalidName {
            field: NameField::Bucket,
            problem: NameProblem::TooLong { len: 300, max: 255 },
        };
        assert_eq!(
            e.to_string(),
            "invalid bucket: is 300 bytes long, the limit is 255"
        );
    }
}
