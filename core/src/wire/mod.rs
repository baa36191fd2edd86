//! The worker wire protocol, version 1: a sans-IO codec for the binary
//! frames that the cache-client and workers exchange over TCP.
//!
//! # Frames
//!
//! Every frame is a 16-byte header followed by `payload_len` payload bytes.
//! All integers in headers and payloads are big-endian.
//!
//! | offset | size | field | value |
//! |---|---|---|---|
//! | 0 | 2 | magic | `0x544C` (`"TL"`) |
//! | 2 | 1 | version | `1` |
//! | 3 | 1 | message type | see [`MessageType`] |
//! | 4 | 2 | flags | bit 0 [`Flags::END_OF_STREAM`], bit 1 [`Flags::ERROR`], bit 2 [`Flags::FROM_ORIGIN`] (ReadRangeReply only); other bits rejected |
//! | 6 | 2 | reserved | must be `0` |
//! | 8 | 4 | request id | chosen by the requester, echoed in the reply |
//! | 12 | 4 | payload length | bytes after the header, at most the type's cap |
//!
//! [`FrameHeader::decode`] checks the payload length against the message
//! type's cap ([`MessageType::max_payload_len`]) before a reader allocates
//! anything for the payload.
//!
//! # Messages
//!
//! Requests have types `0x01..=0x7F`, replies `0x80..=0xFF`. Strings are a
//! `u16` byte length followed by that many bytes of UTF-8.
//!
//! | type | message | payload | cap (bytes) |
//! |---|---|---|---|
//! | `0x01` | Ping | nonce `u64` | 8 |
//! | `0x81` | Pong | nonce `u64` (the ping's) | 8 |
//! | `0x02` | Stat | object id, has-version `u8` (0/1), \[expected version string\] | 8 KiB |
//! | `0x82` | StatReply | size `u64`, version string, last modified `i64` (Unix ms), content type string, headers (below) | 8 KiB |
//! | `0x03` | ReadRange | block id, object size `u64`, offset in block `u64`, len `u32` | 8 KiB |
//! | `0x83` | ReadRangeReply | exactly `len` raw bytes | 1 GiB |
//! | `0x04` | Ingest | meta length `u16`, meta (block id, object size `u64`, offset in block `u64`), raw bytes to the end | 64 MiB + 8 KiB |
//! | `0x84` | IngestAck | offset in block `u64`, len `u32` | 12 |
//! | `0x05` | Hello | Hello version `u8` (2), role `u8` ([`Role`](crate::cluster_auth::Role)), peer nonce 16 bytes | 256 |
//! | `0x85` | HelloReply | worker nonce 16 bytes, worker proof 32 bytes, worker id string (at most 128 bytes; empty outside a membership) | 256 |
//! | `0x06` | HelloProof | peer proof 32 bytes | 256 |
//! | `0x86` | Welcome | empty | 256 |
//! | `0x87` | FileHandoff | offset in block `u64`, len `u32`, from origin `u8` (0/1); one descriptor rides with it (local socket only, below) | 13 |
//! | `0x08` | Prefetch | as ReadRange | 8 KiB |
//! | `0x88` | PrefetchAck | outcome `u8` ([`PrefetchOutcome`]: 0 present, 1 started, 2 declined) | 1 |
//! | `0xFF` | Error | code `u16` ([`ErrorCode`]), message string; ERROR flag set | 4 KiB |
//!
//! An *object id* is a backend tag `u8` (1 = S3, 2 = Azure) followed by its
//! names as strings (S3: bucket, path; Azure: account, container, path), each
//! validated as in [`ObjectId`](crate::ObjectId). A *block id* is an object
//! id, the version string, block offset `u64` and block size `u64`.
//!
//! A StatReply's *headers* are a flag `u8`: 1 = ask the origin (they did not
//! fit, or are not header-safe), nothing follows; 0 = carried, followed by
//! six strings (Content-MD5, the flexible checksum as `<algorithm>:<base64>`,
//! Content-Encoding, Content-Language,
//! Content-Disposition, Cache-Control; empty when absent), a `u16` count and
//! that many (name, value) string pairs of user metadata, names sorted. A
//! reply that ends after the content type (from a worker that predates the
//! headers) decodes as "ask the origin".
//!
//! # Conversation
//!
//! A connection starts with the Hello exchange (the cluster secret's challenge and
//! response, [`crate::cluster_auth`]): the peer sends Hello, the worker answers
//! HelloReply with its nonce, its id and its proof, the peer checks that the id is the
//! worker it dialled and sends HelloProof, the worker answers Welcome. The peer may pipeline requests right after HelloProof. Any other frame
//! before a verified HelloProof, or a wrong proof, is answered with an Error frame
//! ([`ErrorCode::Unauthenticated`]) and the connection is closed; a request the peer's
//! role may not make is answered [`ErrorCode::Forbidden`].
//!
//! A connection carries requests one way and replies the other. Requests may
//! be pipelined; replies come back in request order and echo the request id.
//! A request either gets its reply type or an Error frame, never a short
//! payload: a worker that fails after sending a ReadRangeReply header must
//! close the connection. The ReadRangeReply payload is raw bytes so a worker
//! can `sendfile` it after writing [`encode_read_range_reply_header`]; an
//! Ingest's data likewise follows [`encode_ingest_prefix`] as raw bytes.
//! END_OF_STREAM on a frame says its sender will send nothing more on this
//! connection (for example a draining worker's last reply).
//!
//! # The local socket
//!
//! A worker may also listen on a Unix socket for readers on its own host (the
//! co-located fast path). The conversation is the same, with one more answer to
//! ReadRange: a FileHandoff frame, sent with `SCM_RIGHTS` carrying one read-only
//! descriptor of the block file (its bytes are at block offsets). It says that `len`
//! bytes from `offset` are present and verified in that file, and the reader reads
//! them itself. The worker may still answer a ReadRange there with a ReadRangeReply
//! (bytes it could not cache) or an Error. Present pages are never rewritten and an
//! evicted file is only unlinked, so the descriptor's bytes stay those of the block.
//! FileHandoff on a TCP connection is a protocol error.
//!
//! A Prefetch asks a worker to make a block range present, as a ReadRange would, without
//! sending its bytes: the worker answers at once with a PrefetchAck saying whether the
//! pages were present, a fill started in the background, or the worker declined (at its
//! bound of background fills). A reader sends it for the pieces ahead of a sequential
//! read, so they are filled in parallel before it asks for them; the ReadRange that
//! follows finds them present or joins their fill.
//!
//! ReadRange and Ingest carry the object size so a worker can size the
//! block's [`PresentBitmap`](crate::PresentBitmap) and check the range
//! without asking the origin first.

mod decoder;
mod fields;
mod message;

use std::fmt;
use std::ops::BitOr;

pub use decoder::{BulkKind, BulkStart, Event, Frame, FrameDecoder};
pub use message::{
    ErrorReply, FileHandoff, FirstRead, HeaderSet, IngestAck, IngestMeta, IngestRequest,
    MAX_CONTENT_HEADER_LEN, MAX_CONTENT_MD5_LEN, Message, ObjectHeaders, PrefetchOutcome,
    ReadRangeRequest, StatReply, StatRequest, encode_ingest_prefix, encode_read_range_reply_header,
};

use crate::error::Error;

/// First two bytes of every frame: `"TL"`.
pub const MAGIC: u16 = 0x544C;

/// The protocol version this crate speaks.
pub const VERSION: u8 = 1;

/// Length of a frame header in bytes.
pub const HEADER_LEN: usize = 16;

/// Cap on small control payloads (Stat, StatReply, ReadRange requests, and
/// the metadata part of an Ingest), in bytes.
pub const MAX_CONTROL_PAYLOAD: u32 = 8 * 1024;

/// Cap on Ping and Pong payloads (one `u64` nonce), in bytes.
pub const MAX_PING_PAYLOAD: u32 = 8;

/// Cap on an Error reply payload, in bytes.
pub const MAX_ERROR_PAYLOAD: u32 = 4 * 1024;

/// Longest error message an Error reply carries, in bytes of UTF-8
/// ([`MAX_ERROR_PAYLOAD`] less the code and the length prefix).
pub const MAX_ERROR_MESSAGE_LEN: usize = MAX_ERROR_PAYLOAD as usize - 4;

/// Longest content type a StatReply carries, in bytes.
pub const MAX_CONTENT_TYPE_LEN: usize = 1024;

/// Most bytes one ReadRange may ask for, and so the cap on a ReadRangeReply
/// payload: 1 GiB. Larger spans are split into several requests.
pub const MAX_READ_LEN: u32 = 1 << 30;

/// Most data bytes one Ingest may carry: 64 MiB.
pub const MAX_INGEST_DATA_LEN: u32 = 64 << 20;

/// Cap on an Ingest payload: metadata plus data, in bytes.
pub const MAX_INGEST_PAYLOAD: u32 = MAX_INGEST_DATA_LEN + MAX_CONTROL_PAYLOAD;

/// Size of an IngestAck payload, in bytes.
pub const INGEST_ACK_PAYLOAD: u32 = 12;

/// Size of a FileHandoff payload, in bytes.
pub const FILE_HANDOFF_PAYLOAD: u32 = 13;

/// Size of a PrefetchAck payload, in bytes.
pub const PREFETCH_ACK_PAYLOAD: u32 = 1;

/// Cap on the payloads of the Hello exchange (Hello, HelloReply, HelloProof,
/// Welcome), in bytes: a HelloReply's nonce, proof and worker id fit.
pub const MAX_HELLO_PAYLOAD: u32 = 256;

/// The kind of a frame; requests are `0x01..=0x7F`, replies `0x80..=0xFF`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageType {
    /// Liveness probe carrying a nonce.
    Ping = 0x01,
    /// Object metadata request.
    Stat = 0x02,
    /// Read bytes of one block.
    ReadRange = 0x03,
    /// Push bytes of one block into a worker's cache.
    Ingest = 0x04,
    /// Opens the Hello exchange: version, role, the peer's nonce.
    Hello = 0x05,
    /// Ends the Hello exchange: the peer's proof.
    HelloProof = 0x06,
    /// Make bytes of one block present without sending them (a fill ahead of a reader).
    Prefetch = 0x08,
    /// Reply to Ping with the same nonce.
    Pong = 0x81,
    /// Object metadata.
    StatReply = 0x82,
    /// The requested bytes, raw.
    ReadRangeReply = 0x83,
    /// The ingested bytes are durable and present.
    IngestAck = 0x84,
    /// Reply to Hello: the worker's nonce and proof.
    HelloReply = 0x85,
    /// Reply to HelloProof: the peer is authenticated.
    Welcome = 0x86,
    /// Reply to ReadRange on the local socket: read these bytes from the block file
    /// whose descriptor comes with this frame.
    FileHandoff = 0x87,
    /// Reply to Prefetch: what the worker did ([`PrefetchOutcome`]).
    PrefetchAck = 0x88,
    /// A request failed; carries an [`ErrorCode`] and a message.
    Error = 0xFF,
}

impl MessageType {
    /// Every message type, in wire-value order.
    pub const ALL: [Self; 16] = [
        Self::Ping,
        Self::Stat,
        Self::ReadRange,
        Self::Ingest,
        Self::Hello,
        Self::HelloProof,
        Self::Prefetch,
        Self::Pong,
        Self::StatReply,
        Self::ReadRangeReply,
        Self::IngestAck,
        Self::HelloReply,
        Self::Welcome,
        Self::FileHandoff,
        Self::PrefetchAck,
        Self::Error,
    ];

    /// The type with this wire value. Errors with
    /// [`Error::UnknownMessageType`].
    pub const fn from_u8(value: u8) -> Result<Self, Error> {
        Ok(match value {
            0x01 => Self::Ping,
            0x02 => Self::Stat,
            0x03 => Self::ReadRange,
            0x04 => Self::Ingest,
            0x05 => Self::Hello,
            0x06 => Self::HelloProof,
            0x08 => Self::Prefetch,
            0x81 => Self::Pong,
            0x82 => Self::StatReply,
            0x83 => Self::ReadRangeReply,
            0x84 => Self::IngestAck,
            0x85 => Self::HelloReply,
            0x86 => Self::Welcome,
            0x87 => Self::FileHandoff,
            0x88 => Self::PrefetchAck,
            0xFF => Self::Error,
            other => return Err(Error::UnknownMessageType(other)),
        })
    }

    /// The wire value.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// Whether the type is a request (sent to a worker).
    pub const fn is_request(self) -> bool {
        self.as_u8() < 0x80
    }

    /// Whether the payload is bulk data that a reader should stream rather
    /// than buffer (ReadRangeReply, Ingest).
    pub const fn is_bulk(self) -> bool {
        matches!(self, Self::ReadRangeReply | Self::Ingest)
    }

    /// The largest payload this type may carry, in bytes; checked when a
    /// header is decoded or built.
    pub const fn max_payload_len(self) -> u32 {
        match self {
            Self::Ping | Self::Pong => MAX_PING_PAYLOAD,
            Self::Stat | Self::StatReply | Self::ReadRange | Self::Prefetch => MAX_CONTROL_PAYLOAD,
            Self::ReadRangeReply => MAX_READ_LEN,
            Self::Ingest => MAX_INGEST_PAYLOAD,
            Self::IngestAck => INGEST_ACK_PAYLOAD,
            Self::FileHandoff => FILE_HANDOFF_PAYLOAD,
            Self::PrefetchAck => PREFETCH_ACK_PAYLOAD,
            Self::Hello | Self::HelloProof | Self::HelloReply | Self::Welcome => MAX_HELLO_PAYLOAD,
            Self::Error => MAX_ERROR_PAYLOAD,
        }
    }
}

/// Frame flags. [`END_OF_STREAM`](Self::END_OF_STREAM), [`ERROR`](Self::ERROR)
/// and [`FROM_ORIGIN`](Self::FROM_ORIGIN) exist in version 1; other bits are
/// rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u16);

impl Flags {
    /// No flags.
    pub const NONE: Self = Self(0);
    /// Bit 0: the sender sends no more frames on this connection.
    pub const END_OF_STREAM: Self = Self(1);
    /// Bit 1: the frame is an Error reply (set exactly on those).
    pub const ERROR: Self = Self(2);
    /// Bit 2, ReadRangeReply only: answering this request fetched bytes from
    /// the origin (a fill, or a pass-through the cache had no room for).
    /// Without it every byte came from pages already cached: a hit. Readers
    /// use it to count hits and fills; it never changes the payload.
    pub const FROM_ORIGIN: Self = Self(4);
    const KNOWN: u16 = Self::END_OF_STREAM.0 | Self::ERROR.0 | Self::FROM_ORIGIN.0;

    /// Flags from their wire value. Errors with [`Error::UnknownFlags`] if
    /// any undefined bit is set.
    pub const fn from_bits(bits: u16) -> Result<Self, Error> {
        if bits & !Self::KNOWN != 0 {
            return Err(Error::UnknownFlags(bits));
        }
        Ok(Self(bits))
    }

    /// The wire value.
    pub const fn bits(self) -> u16 {
        self.0
    }

    /// Whether every flag in `other` is set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// These flags without those in `other`.
    pub const fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }
}

impl BitOr for Flags {
    type Output = Self;

    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// A decoded, validated 16-byte frame header (layout in the
/// [module docs](self)).
///
/// Invariants: the ERROR flag is set iff the type is [`MessageType::Error`],
/// and `payload_len` is within the type's cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameHeader {
    message_type: MessageType,
    flags: Flags,
    request_id: u32,
    payload_len: u32,
}

impl FrameHeader {
    /// A header for a frame of `payload_len` bytes. Errors with
    /// [`Error::ErrorFlagMismatch`] if the ERROR flag does not match the type
    /// and [`Error::PayloadTooLarge`] if `payload_len` exceeds the cap.
    pub fn new(
        message_type: MessageType,
        flags: Flags,
        request_id: u32,
        payload_len: u32,
    ) -> Result<Self, Error> {
        if flags.contains(Flags::ERROR) != (message_type == MessageType::Error) {
            return Err(Error::ErrorFlagMismatch(message_type));
        }
        if flags.contains(Flags::FROM_ORIGIN) && message_type != MessageType::ReadRangeReply {
            return Err(Error::UnknownFlags(flags.bits()));
        }
        let max = message_type.max_payload_len();
        if payload_len > max {
            return Err(Error::PayloadTooLarge {
                message_type,
                len: u64::from(payload_len),
                max,
            });
        }
        Ok(Self {
            message_type,
            flags,
            request_id,
            payload_len,
        })
    }

    /// Decodes and validates a header: magic, version, type, flags, reserved
    /// field, ERROR-flag consistency and payload cap, in that order. Never
    /// panics; each failure is a distinct [`Error`] variant.
    pub fn decode(bytes: &[u8; HEADER_LEN]) -> Result<Self, Error> {
        let [
            m0,
            m1,
            version,
            ty,
            f0,
            f1,
            r0,
            r1,
            i0,
            i1,
            i2,
            i3,
            l0,
            l1,
            l2,
            l3,
        ] = *bytes;
        let magic = u16::from_be_bytes([m0, m1]);
        if magic != MAGIC {
            return Err(Error::BadMagic(magic));
        }
        if version != VERSION {
            return Err(Error::UnsupportedVersion(version));
        }
        let message_type = MessageType::from_u8(ty)?;
        let flags = Flags::from_bits(u16::from_be_bytes([f0, f1]))?;
        let reserved = u16::from_be_bytes([r0, r1]);
        if reserved != 0 {
            return Err(Error::ReservedNotZero(reserved));
        }
        Self::new(
            message_type,
            flags,
            u32::from_be_bytes([i0, i1, i2, i3]),
            u32::from_be_bytes([l0, l1, l2, l3]),
        )
    }

    /// The 16 wire bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..2].copy_from_slice(&MAGIC.to_be_bytes());
        out[2] = VERSION;
        out[3] = self.message_type.as_u8();
        out[4..6].copy_from_slice(&self.flags.bits().to_be_bytes());
        // 6..8: reserved, zero.
        out[8..12].copy_from_slice(&self.request_id.to_be_bytes());
        out[12..16].copy_from_slice(&self.payload_len.to_be_bytes());
        out
    }

    /// The frame's message type.
    pub fn message_type(&self) -> MessageType {
        self.message_type
    }

    /// The frame's flags.
    pub fn flags(&self) -> Flags {
        self.flags
    }

    /// Whether the sender will send nothing more on this connection.
    pub fn is_end_of_stream(&self) -> bool {
        self.flags.contains(Flags::END_OF_STREAM)
    }

    /// The request id (echoed from the request in replies).
    pub fn request_id(&self) -> u32 {
        self.request_id
    }

    /// Payload bytes following the header.
    pub fn payload_len(&self) -> u32 {
        self.payload_len
    }
}

/// Why a request failed, carried by an Error reply. The numeric values are
/// frozen. A code this build does not know decodes as
/// [`Unknown`](Self::Unknown) so newer workers can add codes; treat it like
/// [`Internal`](Self::Internal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// 1: the object (or that version of it) does not exist at the origin.
    NotFound,
    /// 2: the request was malformed or invalid.
    InvalidRequest,
    /// 3: the origin's current version differs from the one asked for.
    VersionMismatch,
    /// 4: the origin failed or answered unexpectedly.
    OriginError,
    /// 5: the worker cannot serve now (draining, overloaded); retry elsewhere.
    Unavailable,
    /// 6: the worker or the origin did not answer in time.
    Timeout,
    /// 7: a bug or local failure in the worker.
    Internal,
    /// 8: the range lies outside the object or block.
    RangeNotSatisfiable,
    /// 9: a payload or read exceeds a limit.
    TooLarge,
    /// 10: unknown protocol version or message type.
    Unsupported,
    /// 11: the origin refused the worker's credentials.
    AccessDenied,
    /// 12: the peer has not authenticated (no Hello, or a wrong proof); the
    /// connection is closed after this error.
    Unauthenticated,
    /// 13: the peer's role may not make this request (an Ingest from a reader).
    Forbidden,
    /// 14: the origin throttled the worker's fetch (S3 `SlowDown`, Azure `ServerBusy`)
    /// after the worker's own bounded retries. Not retried on another worker: that
    /// would multiply a throttled origin's load; the reader says so to its client
    /// (503 with `Retry-After`).
    OriginThrottled,
    /// Any other value, kept as received.
    Unknown(u16),
}

impl ErrorCode {
    /// The code for a wire value; values without a named variant become
    /// [`Unknown`](Self::Unknown).
    pub const fn from_u16(value: u16) -> Self {
        match value {
            1 => Self::NotFound,
            2 => Self::InvalidRequest,
            3 => Self::VersionMismatch,
            4 => Self::OriginError,
            5 => Self::Unavailable,
            6 => Self::Timeout,
            7 => Self::Internal,
            8 => Self::RangeNotSatisfiable,
            9 => Self::TooLarge,
            10 => Self::Unsupported,
            11 => Self::AccessDenied,
            12 => Self::Unauthenticated,
            13 => Self::Forbidden,
            14 => Self::OriginThrottled,
            other => Self::Unknown(other),
        }
    }

    /// The wire value. `Unknown(n)` encodes as `n`, so a code with a named
    /// variant wrapped in `Unknown` decodes back as that variant.
    pub const fn as_u16(self) -> u16 {
        match self {
            Self::NotFound => 1,
            Self::InvalidRequest => 2,
            Self::VersionMismatch => 3,
            Self::OriginError => 4,
            Self::Unavailable => 5,
            Self::Timeout => 6,
            Self::Internal => 7,
            Self::RangeNotSatisfiable => 8,
            Self::TooLarge => 9,
            Self::Unsupported => 10,
            Self::AccessDenied => 11,
            Self::Unauthenticated => 12,
            Self::Forbidden => 13,
            Self::OriginThrottled => 14,
            Self::Unknown(other) => other,
        }
    }

    /// Whether another worker (or the origin) may answer where this worker refused
    /// with this code: it was busy or draining, ran out of time, failed inside, or the
    /// origin failed it; a code this build does not know counts too. Not found, a
    /// version mismatch, a bad range or request, a limit, and refused credentials or
    /// roles are the answer wherever the request goes; a throttled origin is not asked
    /// again through another worker.
    pub const fn is_transient(self) -> bool {
        matches!(
            self,
            Self::Unavailable
                | Self::Timeout
                | Self::Internal
                | Self::OriginError
                | Self::Unknown(_)
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown(n) => write!(f, "unknown error code {n}"),
            named => fmt::Debug::fmt(named, f),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn transient_codes_are_the_ones_another_worker_may_answer() {
        let transient: Vec<u16> = (0..=15)
            .filter(|n| ErrorCode::from_u16(*n).is_transient())
            .collect();
        // OriginError, Unavailable, Timeout, Internal, and codes this build does not
        // know (0 and 15 here). Not OriginThrottled (14).
        assert_eq!(transient, [0, 4, 5, 6, 7, 15]);
    }

    #[test]
    fn header_layout_is_as_documented() {
        let h = FrameHeader::new(
            MessageType::ReadRange,
            Flags::END_OF_STREAM,
            0x0102_0304,
            0x0000_0a0b,
        )
        .unwrap();
        assert_eq!(
            h.encode(),
            [
                0x54, 0x4c, 1, 0x03, 0, 1, 0, 0, 1, 2, 3, 4, 0, 0, 0x0a, 0x0b
            ]
        );
        assert_eq!(FrameHeader::decode(&h.encode()), Ok(h));
        assert!(h.is_end_of_stream());
    }

    fn raw(ty: u8, flags: u16, reserved: u16, len: u32) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..2].copy_from_slice(&MAGIC.to_be_bytes());
        b[2] = VERSION;
        b[3] = ty;
        b[4..6].copy_from_slice(&flags.to_be_bytes());
        b[6..8].copy_from_slice(&reserved.to_be_bytes());
        b[12..16].copy_from_slice(&len.to_be_bytes());
        b
    }

    #[test]
    fn header_rejections_are_typed() {
        let mut bad_magic = raw(1, 0, 0, 8);
        bad_magic[0] = 0;
        assert_eq!(
            FrameHeader::decode(&bad_magic),
            Err(Error::BadMagic(0x004c))
        );
        let mut bad_version = raw(1, 0, 0, 8);
        bad_version[2] = 2;
        assert_eq!(
            FrameHeader::decode(&bad_version),
            Err(Error::UnsupportedVersion(2))
        );
        assert_eq!(
            FrameHeader::decode(&raw(0x07, 0, 0, 0)),
            Err(Error::UnknownMessageType(7))
        );
        assert_eq!(
            FrameHeader::decode(&raw(1, 4, 0, 8)),
            Err(Error::UnknownFlags(4))
        );
        assert_eq!(
            FrameHeader::decode(&raw(1, 0, 1, 8)),
            Err(Error::ReservedNotZero(1))
        );
        assert_eq!(
            FrameHeader::decode(&raw(1, 2, 0, 8)),
            Err(Error::ErrorFlagMismatch(MessageType::Ping))
        );
        assert_eq!(
            FrameHeader::decode(&raw(0xff, 0, 0, 8)),
            Err(Error::ErrorFlagMismatch(MessageType::Error))
        );
        assert_eq!(
            FrameHeader::decode(&raw(1, 0, 0, 9)),
            Err(Error::PayloadTooLarge {
                message_type: MessageType::Ping,
                len: 9,
                max: 8
            })
        );
        assert_eq!(
            FrameHeader::decode(&raw(0x83, 0, 0, u32::MAX)),
            Err(Error::PayloadTooLarge {
                message_type: MessageType::ReadRangeReply,
                len: u64::from(u32::MAX),
                max: MAX_READ_LEN
            })
        );
        assert!(FrameHeader::decode(&raw(0x83, 1, 0, MAX_READ_LEN)).is_ok());
        assert!(FrameHeader::decode(&raw(0xff, 3, 0, 0)).is_ok());
    }

    #[test]
    fn message_types_round_trip_and_partition() {
        for ty in MessageType::ALL {
            assert_eq!(MessageType::from_u8(ty.as_u8()), Ok(ty));
            assert_eq!(ty.is_request(), ty.as_u8() < 0x80);
        }
        let known: Vec<u8> = MessageType::ALL.iter().map(|t| t.as_u8()).collect();
        for v in 0..=u8::MAX {
            assert_eq!(MessageType::from_u8(v).is_ok(), known.contains(&v));
        }
        // Each request type's reply is the request type | 0x80 (0x07 is unused: its
        // place, 0x87, is ReadRange's other answer, FileHandoff).
        for req in MessageType::ALL.iter().filter(|t| t.is_request()) {
            assert!(MessageType::from_u8(req.as_u8() | 0x80).is_ok());
        }
        assert_eq!(
            MessageType::from_u8(MessageType::Prefetch.as_u8() | 0x80),
            Ok(MessageType::PrefetchAck)
        );
    }

    #[test]
    fn error_codes_are_stable() {
        let named = [
            (ErrorCode::NotFound, 1),
            (ErrorCode::InvalidRequest, 2),
            (ErrorCode::VersionMismatch, 3),
            (ErrorCode::OriginError, 4),
            (ErrorCode::Unavailable, 5),
            (ErrorCode::Timeout, 6),
            (ErrorCode::Internal, 7),
            (ErrorCode::RangeNotSatisfiable, 8),
            (ErrorCode::TooLarge, 9),
            (ErrorCode::Unsupported, 10),
            (ErrorCode::AccessDenied, 11),
            (ErrorCode::Unauthenticated, 12),
            (ErrorCode::Forbidden, 13),
            (ErrorCode::OriginThrottled, 14),
        ];
        for (code, value) in named {
            assert_eq!(code.as_u16(), value);
            assert_eq!(ErrorCode::from_u16(value), code);
        }
        assert_eq!(ErrorCode::from_u16(0), ErrorCode::Unknown(0));
        assert_eq!(ErrorCode::from_u16(999), ErrorCode::Unknown(999));
        assert_eq!(ErrorCode::Unknown(999).as_u16(), 999);
        assert_eq!(ErrorCode::Unknown(3).as_u16(), 3);
        assert_eq!(ErrorCode::Timeout.to_string(), "Timeout");
    }

    #[test]
    fn flags() {
        assert_eq!(Flags::from_bits(3).map(Flags::bits), Ok(3));
        assert_eq!(Flags::from_bits(0x8000), Err(Error::UnknownFlags(0x8000)));
        let both = Flags::END_OF_STREAM | Flags::ERROR;
        assert!(both.contains(Flags::ERROR));
        assert_eq!(both.without(Flags::ERROR), Flags::END_OF_STREAM);
    }
}
