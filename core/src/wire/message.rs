//! Message payloads and the whole-frame codec.

use std::ops::Range;

use super::fields::{Reader, Writer};
use super::{
    ErrorCode, FrameHeader, HEADER_LEN, MAX_CONTENT_TYPE_LEN, MAX_CONTROL_PAYLOAD,
    MAX_ERROR_MESSAGE_LEN, MAX_INGEST_DATA_LEN, MAX_READ_LEN, MessageType,
};
use crate::cluster_auth::{Nonce, Proof, Role};
use crate::error::{Error, NameField, NameProblem};
use crate::identity::{Backend, BlockId, ObjectId, ObjectVersion};
use crate::wire::Flags;

/// Stat request: the object's metadata, optionally only if its current
/// version is `expected_version` (otherwise the worker answers
/// [`ErrorCode::VersionMismatch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatRequest {
    /// The object asked about.
    pub object: ObjectId,
    /// The version the requester pinned, if any.
    pub expected_version: Option<ObjectVersion>,
    /// The oldest answer the requester accepts, milliseconds: metadata the worker
    /// learned from the origin longer ago than this is revalidated first. `None`: the
    /// worker's own TTL decides. A trailing field, sent only when set, so a worker from
    /// before it still decodes requests without one (upgrade workers first).
    pub max_age_ms: Option<u32>,
    /// The bytes of the object's first block the requester reads next, if any: a
    /// worker that must ask the origin may then learn the metadata from a GET of those
    /// bytes, keeping them, instead of a HEAD (one origin request for a cold read, not
    /// two). A trailing field after `max_age_ms`, sent only with it.
    pub first_read: Option<FirstRead>,
}

/// Bytes of an object's first block a reader is about to ask for
/// ([`StatRequest::first_read`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstRead {
    /// The reader's block size, a power of two: the first block is bytes
    /// `[0, block_size)` of every version.
    pub block_size: u64,
    /// First byte wanted.
    pub start: u64,
    /// One past the last byte wanted (the object may be shorter):
    /// `start < end <= block_size` and `end - start <= MAX_READ_LEN`.
    pub end: u64,
}

impl FirstRead {
    /// Checks the invariants above.
    ///
    /// # Errors
    /// [`Error::Malformed`] naming the broken one.
    pub fn validate(&self) -> Result<(), Error> {
        let reason = if !self.block_size.is_power_of_two() {
            Some("first read: the block size must be a power of two")
        } else if self.start >= self.end || self.end > self.block_size {
            Some("first read: the range must be non-empty and within the first block")
        } else if self.end - self.start > u64::from(MAX_READ_LEN) {
            Some("first read: longer than one read")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(Error::Malformed {
                message_type: MessageType::Stat,
                reason,
            }),
            None => Ok(()),
        }
    }
}

/// Stat reply: the object's metadata as the origin reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatReply {
    /// Object size in bytes.
    pub size: u64,
    /// The origin's ETag or version id.
    pub version: ObjectVersion,
    /// Last modification time, Unix milliseconds (negative before 1970).
    pub last_modified_ms: i64,
    /// MIME type, at most [`MAX_CONTENT_TYPE_LEN`] bytes, no control
    /// characters (it becomes an HTTP header value); may be empty.
    pub content_type: String,
    /// The object's other headers, or word that they must be asked of the
    /// origin.
    pub headers: ObjectHeaders,
    /// How long ago the worker learned this from the origin, milliseconds, when the
    /// request said how old an answer it accepts (`max_age_ms`); `None` otherwise, and
    /// from a worker from before the field. A trailing field, sent only when set.
    pub age_ms: Option<u32>,
}

/// Longest `content_md5` a [`StatReply`] carries, in bytes (an MD5 in
/// base64 is 24).
pub const MAX_CONTENT_MD5_LEN: usize = 64;

/// Longest content header value (`Content-Encoding`, ...) a [`StatReply`]
/// carries, in bytes.
pub const MAX_CONTENT_HEADER_LEN: usize = 1024;

/// The headers of an object a reader must give back besides its size,
/// version, time and type. Every string is empty when the origin gave none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderSet {
    /// Base64 MD5 of the whole content (`Content-MD5`), at most
    /// [`MAX_CONTENT_MD5_LEN`] bytes.
    pub content_md5: String,
    /// The whole content's S3 flexible checksum as `<algorithm>:<base64>`, the
    /// algorithm as in its header name (`x-amz-checksum-<algorithm>`: `crc32`,
    /// `crc32c`, `crc64nvme`, `sha1`, `sha256`), at most
    /// [`MAX_CONTENT_MD5_LEN`] bytes; full-object checksums only.
    pub checksum: String,
    /// `Content-Encoding` (S3 `Content-Encoding`, Azure
    /// `x-ms-blob-content-encoding` on writes).
    pub content_encoding: String,
    /// `Content-Language`.
    pub content_language: String,
    /// `Content-Disposition`.
    pub content_disposition: String,
    /// `Cache-Control`.
    pub cache_control: String,
    /// User metadata (`x-amz-meta-*`, `x-ms-meta-*`): names lower-case HTTP
    /// tokens without the protocol's prefix, sorted and unique.
    pub user_metadata: Vec<(String, String)>,
}

/// An object's [`HeaderSet`], as a [`StatReply`] carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectHeaders {
    /// All of them. Values have no control characters but tab (they become
    /// HTTP header values); content headers are at most
    /// [`MAX_CONTENT_HEADER_LEN`] bytes.
    /// (Boxed: a [`Message`] stays small for the frames that carry no headers.)
    Carried(Box<HeaderSet>),
    /// They cannot travel in a frame (too large for one, or values that are
    /// not header-safe text): whoever needs them asks the origin. Headers are
    /// carried whole or not at all, never in part.
    AskOrigin,
}

impl HeaderSet {
    /// Bytes these headers hold on the heap (approximately: the strings' lengths and
    /// each metadata pair's own size), for caches' byte bounds.
    pub fn heap_bytes(&self) -> usize {
        let strings = [
            &self.content_md5,
            &self.checksum,
            &self.content_encoding,
            &self.content_language,
            &self.content_disposition,
            &self.cache_control,
        ];
        strings.iter().map(|s| s.len()).sum::<usize>()
            + self
                .user_metadata
                .iter()
                .map(|(n, v)| n.len() + v.len() + std::mem::size_of::<(String, String)>())
                .sum::<usize>()
    }
}

impl Default for ObjectHeaders {
    fn default() -> Self {
        Self::from(HeaderSet::default())
    }
}

impl From<HeaderSet> for ObjectHeaders {
    fn from(set: HeaderSet) -> Self {
        Self::Carried(Box::new(set))
    }
}

impl ObjectHeaders {
    /// The origin's headers as a frame carries them: metadata names
    /// lower-cased and sorted; [`AskOrigin`](Self::AskOrigin) if any would
    /// be refused by the codec (a metadata name that is not an HTTP token,
    /// two names that differ only in case, a control character, an
    /// over-long value, an MD5 that is not base64).
    pub fn from_origin(mut set: HeaderSet) -> Self {
        for (name, _) in &mut set.user_metadata {
            name.make_ascii_lowercase();
        }
        set.user_metadata.sort();
        match validate_header_set(&set) {
            Ok(()) => Self::from(set),
            Err(_) => Self::AskOrigin,
        }
    }
}

impl StatReply {
    /// Payload bytes this reply encodes to.
    pub fn encoded_len(&self) -> usize {
        let headers = match &self.headers {
            ObjectHeaders::AskOrigin => 0,
            ObjectHeaders::Carried(set) => {
                content_headers(set)
                    .iter()
                    .map(|(_, v)| 2 + v.len())
                    .sum::<usize>()
                    + 2
                    + set
                        .user_metadata
                        .iter()
                        .map(|(n, v)| 4 + n.len() + v.len())
                        .sum::<usize>()
            }
        };
        let age = if self.age_ms.is_some() { 4 } else { 0 };
        8 + 2 + self.version.as_str().len() + 8 + 2 + self.content_type.len() + 1 + headers + age
    }

    /// This reply, with its headers replaced by [`ObjectHeaders::AskOrigin`]
    /// when the whole would not fit the [`MAX_CONTROL_PAYLOAD`] of a
    /// StatReply frame. Never drops part of them: a reader sees all or is
    /// told to ask the origin.
    pub fn fitted_to_frame(mut self) -> Self {
        if self.encoded_len() > MAX_CONTROL_PAYLOAD as usize {
            self.headers = ObjectHeaders::AskOrigin;
        }
        self
    }
}

/// The content headers of a set, in wire order, with their field names.
fn content_headers(set: &HeaderSet) -> [(NameField, &str); 6] {
    [
        (NameField::ContentMd5, set.content_md5.as_str()),
        (NameField::Checksum, set.checksum.as_str()),
        (NameField::ContentHeader, set.content_encoding.as_str()),
        (NameField::ContentHeader, set.content_language.as_str()),
        (NameField::ContentHeader, set.content_disposition.as_str()),
        (NameField::ContentHeader, set.cache_control.as_str()),
    ]
}

/// ReadRange request: `len` bytes at `offset` within `block`, i.e. object
/// bytes `block.block_offset() + offset ..` of an object of `object_size`
/// bytes. The range must lie within the block and the object, and `len` be
/// at most [`MAX_READ_LEN`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRangeRequest {
    /// The block read.
    pub block: BlockId,
    /// Size of the whole object in bytes (sizes the block's page bitmap).
    pub object_size: u64,
    /// First byte to read, relative to the block's start.
    pub offset: u64,
    /// Bytes to read; the reply carries exactly this many.
    pub len: u32,
}

impl ReadRangeRequest {
    /// Checks the invariants in the type docs; encode and decode both call
    /// it. Errors with [`Error::PayloadTooLarge`] if `len` exceeds
    /// [`MAX_READ_LEN`], [`Error::Malformed`] if the range crosses the end of
    /// the block and [`Error::RangeNotSatisfiable`] if it crosses the end of
    /// the object.
    pub fn validate(&self) -> Result<(), Error> {
        if self.len > MAX_READ_LEN {
            return Err(Error::PayloadTooLarge {
                message_type: MessageType::ReadRangeReply,
                len: u64::from(self.len),
                max: MAX_READ_LEN,
            });
        }
        check_block_range(
            MessageType::ReadRange,
            &self.block,
            self.object_size,
            self.offset,
            u64::from(self.len),
        )
    }

    /// The requested bytes in object coordinates (valid once
    /// [`validate`](Self::validate) passed; saturates otherwise).
    pub fn object_range(&self) -> Range<u64> {
        let start = self.block.block_offset().saturating_add(self.offset);
        start..start.saturating_add(u64::from(self.len))
    }
}

/// The metadata part of an Ingest request: which bytes of which block the
/// data that follows is. `offset` is relative to the block's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestMeta {
    /// The block written.
    pub block: BlockId,
    /// Size of the whole object in bytes.
    pub object_size: u64,
    /// Where the data starts, relative to the block's start.
    pub offset: u64,
}

impl IngestMeta {
    /// Checks that `data_len` bytes at `offset` fit the block and the object
    /// and that `data_len` is at most [`MAX_INGEST_DATA_LEN`]; errors like
    /// [`ReadRangeRequest::validate`].
    pub fn validate(&self, data_len: u64) -> Result<(), Error> {
        if data_len > u64::from(MAX_INGEST_DATA_LEN) {
            return Err(Error::PayloadTooLarge {
                message_type: MessageType::Ingest,
                len: data_len,
                max: MAX_INGEST_DATA_LEN,
            });
        }
        check_block_range(
            MessageType::Ingest,
            &self.block,
            self.object_size,
            self.offset,
            data_len,
        )
    }

    /// Decodes the metadata bytes of an Ingest payload (the `meta length`
    /// bytes after the `u16` length field). A worker that reads Ingest frames
    /// itself reads the header, the `u16`, these bytes, and then has
    /// `payload_len - 2 - meta_len` data bytes to move (e.g. with `splice`);
    /// it must still call [`validate`](Self::validate) with that length.
    pub fn decode(meta: &[u8]) -> Result<Self, Error> {
        let mut r = Reader::new(meta, MessageType::Ingest);
        let block = read_block(&mut r)?;
        let object_size = r.u64()?;
        let offset = r.u64()?;
        r.finish()?;
        Ok(Self {
            block,
            object_size,
            offset,
        })
    }

    fn encode(&self, out: &mut Vec<u8>) -> Result<(), Error> {
        let mut w = Writer::new(out);
        write_block(&mut w, &self.block, MessageType::Ingest)?;
        w.u64(self.object_size);
        w.u64(self.offset);
        Ok(())
    }
}

/// Longest Ingest metadata, in bytes: the `u16` length field and the
/// metadata together fit [`MAX_CONTROL_PAYLOAD`].
pub(crate) const MAX_INGEST_META_LEN: u32 = MAX_CONTROL_PAYLOAD - 2;

/// Ingest request: write `data` into the block at `meta.offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestRequest {
    /// Which bytes of which block.
    pub meta: IngestMeta,
    /// The bytes, at most [`MAX_INGEST_DATA_LEN`].
    pub data: Vec<u8>,
}

/// Ingest reply: the bytes at `offset` (relative to the block) of length
/// `len` are durable and marked present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IngestAck {
    /// The ingest's offset within the block.
    pub offset: u64,
    /// Bytes ingested.
    pub len: u32,
}

/// ReadRange reply on the local socket: `len` bytes at `offset` (block coordinates)
/// are present and verified in the block file whose descriptor travels with the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHandoff {
    /// The read's offset within the block, which is its offset in the block file.
    pub offset: u64,
    /// Bytes to read.
    pub len: u32,
    /// Whether the worker fetched bytes from the origin to answer (a fill).
    pub from_origin: bool,
}

/// Error reply: why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReply {
    /// Machine-readable reason.
    pub code: ErrorCode,
    /// Human-readable detail for logs, at most [`MAX_ERROR_MESSAGE_LEN`]
    /// bytes of UTF-8.
    pub message: String,
}

impl ErrorReply {
    /// An error reply whose message is cut at a character boundary to fit
    /// [`MAX_ERROR_MESSAGE_LEN`], so it always encodes.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.len() > MAX_ERROR_MESSAGE_LEN {
            let mut end = MAX_ERROR_MESSAGE_LEN;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        Self { code, message }
    }
}

impl From<&Error> for ErrorReply {
    /// The reply a worker sends for a request it could not decode or accept.
    fn from(err: &Error) -> Self {
        Self::new(err.code(), err.to_string())
    }
}

/// What a worker did with a Prefetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PrefetchOutcome {
    /// Every page asked for was already present: nothing to do.
    Present = 0,
    /// A fill of the pages not present started in the background (or one already
    /// under way covers them).
    Started = 1,
    /// The worker has as many background fills as its bounds allow (for this object,
    /// or in all); the reader's own ReadRange will fill the pages.
    Declined = 2,
}

impl PrefetchOutcome {
    /// The outcome with this wire value.
    pub const fn from_u8(value: u8) -> Option<Self> {
        match value {
            0 => Some(Self::Present),
            1 => Some(Self::Started),
            2 => Some(Self::Declined),
            _ => None,
        }
    }

    /// The wire value.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// The name used in metrics labels.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Present => "present",
            Self::Started => "started",
            Self::Declined => "declined",
        }
    }
}

/// Every version-1 message, with its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Liveness probe.
    Ping {
        /// Echoed in the Pong.
        nonce: u64,
    },
    /// Reply to a Ping.
    Pong {
        /// The Ping's nonce.
        nonce: u64,
    },
    /// Object metadata request.
    Stat(StatRequest),
    /// Object metadata.
    StatReply(StatReply),
    /// Read bytes of one block.
    ReadRange(ReadRangeRequest),
    /// The bytes read, exactly as many as requested.
    ReadRangeReply(Vec<u8>),
    /// Write bytes of one block.
    Ingest(IngestRequest),
    /// The write is durable.
    IngestAck(IngestAck),
    /// Opens the Hello exchange.
    Hello {
        /// The Hello exchange's version ([`HELLO_VERSION`](crate::cluster_auth::HELLO_VERSION)).
        version: u8,
        /// The role the peer claims.
        role: Role,
        /// The peer's fresh nonce.
        nonce: Nonce,
    },
    /// The worker's answer to Hello.
    HelloReply {
        /// The worker's fresh nonce.
        nonce: Nonce,
        /// The worker's proof over both nonces, the role and its id.
        proof: Proof,
        /// The worker's member id (empty for a worker outside any membership), at most
        /// [`MAX_HELLO_WORKER_ID_LEN`](crate::cluster_auth::MAX_HELLO_WORKER_ID_LEN)
        /// bytes. A peer that dialled a member refuses any other id.
        worker: String,
    },
    /// The peer's proof over both nonces, the role and the worker's id.
    HelloProof {
        /// The proof.
        proof: Proof,
    },
    /// The peer is authenticated.
    Welcome,
    /// Read the bytes from the descriptor that comes with this frame (local socket).
    FileHandoff(FileHandoff),
    /// Make bytes of one block present without sending them.
    Prefetch(ReadRangeRequest),
    /// What the worker did with a Prefetch.
    PrefetchAck(PrefetchOutcome),
    /// A request failed.
    Error(ErrorReply),
}

impl Message {
    /// The message's wire type.
    pub fn message_type(&self) -> MessageType {
        match self {
            Self::Ping { .. } => MessageType::Ping,
            Self::Pong { .. } => MessageType::Pong,
            Self::Stat(_) => MessageType::Stat,
            Self::StatReply(_) => MessageType::StatReply,
            Self::ReadRange(_) => MessageType::ReadRange,
            Self::ReadRangeReply(_) => MessageType::ReadRangeReply,
            Self::Ingest(_) => MessageType::Ingest,
            Self::IngestAck(_) => MessageType::IngestAck,
            Self::Hello { .. } => MessageType::Hello,
            Self::HelloReply { .. } => MessageType::HelloReply,
            Self::HelloProof { .. } => MessageType::HelloProof,
            Self::Welcome => MessageType::Welcome,
            Self::FileHandoff(_) => MessageType::FileHandoff,
            Self::Prefetch(_) => MessageType::Prefetch,
            Self::PrefetchAck(_) => MessageType::PrefetchAck,
            Self::Error(_) => MessageType::Error,
        }
    }

    /// The whole frame (header and payload) with no flags besides ERROR on
    /// error replies. Errors like [`encode_into`](Self::encode_into).
    pub fn encode(&self, request_id: u32) -> Result<Vec<u8>, Error> {
        let payload_hint = match self {
            Self::ReadRangeReply(data) => data.len(),
            Self::Ingest(ingest) => 256 + ingest.data.len(),
            _ => 256,
        };
        let mut out = Vec::with_capacity(HEADER_LEN + payload_hint);
        self.encode_into(request_id, Flags::NONE, &mut out)?;
        Ok(out)
    }

    /// Appends the whole frame to `out`. `flags` may carry
    /// [`Flags::END_OF_STREAM`]; [`Flags::ERROR`] is set from the message
    /// type whatever `flags` says.
    ///
    /// Errors, leaving `out` as it was, if a field breaks its limits: an
    /// invalid content type or over-long error message
    /// ([`Error::InvalidName`]), data over the type's cap
    /// ([`Error::PayloadTooLarge`]) or a range outside its block or object.
    pub fn encode_into(
        &self,
        request_id: u32,
        flags: Flags,
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        let start = out.len();
        let result = self.encode_frame(request_id, flags, out);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn encode_frame(&self, request_id: u32, flags: Flags, out: &mut Vec<u8>) -> Result<(), Error> {
        let ty = self.message_type();
        let flags = if ty == MessageType::Error {
            flags | Flags::ERROR
        } else {
            flags.without(Flags::ERROR)
        };
        if let Self::Ingest(ingest) = self {
            let data_len = data_len_u32(ty, ingest.data.len(), MAX_INGEST_DATA_LEN)?;
            encode_ingest_prefix_with(request_id, flags, &ingest.meta, data_len, out)?;
            out.extend_from_slice(&ingest.data);
            return Ok(());
        }
        let start = out.len();
        out.extend_from_slice(&[0; HEADER_LEN]);
        self.encode_payload(&mut Writer::new(out))?;
        let len = out.len() - start - HEADER_LEN;
        let len = data_len_u32(ty, len, ty.max_payload_len())?;
        let header = FrameHeader::new(ty, flags, request_id, len)?;
        out[start..start + HEADER_LEN].copy_from_slice(&header.encode());
        Ok(())
    }

    fn encode_payload(&self, w: &mut Writer<'_>) -> Result<(), Error> {
        let ty = self.message_type();
        match self {
            Self::Ping { nonce } | Self::Pong { nonce } => w.u64(*nonce),
            Self::Stat(req) => {
                write_object(w, &req.object, ty)?;
                match &req.expected_version {
                    Some(version) => {
                        w.u8(1);
                        w.str(version.as_str(), ty)?;
                    }
                    None => w.u8(0),
                }
                match (req.max_age_ms, &req.first_read) {
                    (None, None) => {}
                    (Some(max_age), None) => w.u32(max_age),
                    (Some(max_age), Some(first)) => {
                        first.validate()?;
                        w.u32(max_age);
                        w.u64(first.block_size);
                        w.u64(first.start);
                        w.u64(first.end);
                    }
                    (None, Some(_)) => {
                        return Err(Error::Malformed {
                            message_type: MessageType::Stat,
                            reason: "a first read is sent only with a max age",
                        });
                    }
                }
            }
            Self::StatReply(reply) => {
                validate_content_type(&reply.content_type)?;
                w.u64(reply.size);
                w.str(reply.version.as_str(), ty)?;
                w.i64(reply.last_modified_ms);
                w.str(&reply.content_type, ty)?;
                match &reply.headers {
                    ObjectHeaders::AskOrigin => w.u8(1),
                    ObjectHeaders::Carried(set) => {
                        validate_header_set(set)?;
                        let count = u16::try_from(set.user_metadata.len())
                            .map_err(|_| invalid(NameField::MetadataName, NameProblem::TooMany))?;
                        w.u8(0);
                        for (_, value) in content_headers(set) {
                            w.str(value, ty)?;
                        }
                        w.u16(count);
                        for (name, value) in &set.user_metadata {
                            w.str(name, ty)?;
                            w.str(value, ty)?;
                        }
                    }
                }
                if let Some(age) = reply.age_ms {
                    w.u32(age);
                }
            }
            Self::ReadRange(req) | Self::Prefetch(req) => {
                req.validate()?;
                write_block(w, &req.block, ty)?;
                w.u64(req.object_size);
                w.u64(req.offset);
                w.u32(req.len);
            }
            Self::ReadRangeReply(data) => {
                data_len_u32(ty, data.len(), MAX_READ_LEN)?;
                w.bytes(data);
            }
            // Encoded by `encode_frame` so it shares `encode_ingest_prefix`.
            Self::Ingest(_) => {}
            Self::IngestAck(ack) => {
                w.u64(ack.offset);
                w.u32(ack.len);
            }
            Self::FileHandoff(handoff) => {
                w.u64(handoff.offset);
                w.u32(handoff.len);
                w.u8(u8::from(handoff.from_origin));
            }
            Self::PrefetchAck(outcome) => w.u8(outcome.as_u8()),
            Self::Hello {
                version,
                role,
                nonce,
            } => {
                w.u8(*version);
                w.u8(role.as_u8());
                w.bytes(nonce);
            }
            Self::HelloReply {
                nonce,
                proof,
                worker,
            } => {
                if worker.len() > crate::cluster_auth::MAX_HELLO_WORKER_ID_LEN {
                    return Err(Error::Malformed {
                        message_type: MessageType::HelloReply,
                        reason: "worker id longer than 128 bytes",
                    });
                }
                w.bytes(nonce);
                w.bytes(proof);
                w.str(worker, MessageType::HelloReply)?;
            }
            Self::HelloProof { proof } => w.bytes(proof),
            Self::Welcome => {}
            Self::Error(err) => {
                if err.message.len() > MAX_ERROR_MESSAGE_LEN {
                    return Err(Error::InvalidName {
                        field: NameField::ErrorMessage,
                        problem: NameProblem::TooLong {
                            len: err.message.len(),
                            max: MAX_ERROR_MESSAGE_LEN,
                        },
                    });
                }
                w.u16(err.code.as_u16());
                w.str(&err.message, ty)?;
            }
        }
        Ok(())
    }

    /// Decodes a payload under an already decoded header. Errors with
    /// [`Error::Malformed`] if `payload` is not exactly
    /// `header.payload_len()` bytes, a field is truncated or trailing bytes
    /// remain, and with the validation errors of the ids and ranges inside.
    /// Never panics; allocates in proportion to `payload.len()` (every value it builds
    /// consumes payload bytes: at most a few dozen bytes of memory per byte read).
    pub fn decode(header: &FrameHeader, payload: &[u8]) -> Result<Self, Error> {
        let ty = header.message_type();
        if payload.len() != header.payload_len() as usize {
            return Err(Error::Malformed {
                message_type: ty,
                reason: "payload length differs from the header",
            });
        }
        let mut r = Reader::new(payload, ty);
        let message = match ty {
            MessageType::Ping => Self::Ping { nonce: r.u64()? },
            MessageType::Pong => Self::Pong { nonce: r.u64()? },
            MessageType::Stat => {
                let object = read_object(&mut r)?;
                let expected_version = match r.u8()? {
                    0 => None,
                    1 => Some(read_version(&mut r)?),
                    _ => return Err(r.malformed("version flag must be 0 or 1")),
                };
                let max_age_ms = if r.remaining() == 0 {
                    None
                } else {
                    Some(r.u32()?)
                };
                let first_read = if r.remaining() == 0 {
                    None
                } else {
                    let first = FirstRead {
                        block_size: r.u64()?,
                        start: r.u64()?,
                        end: r.u64()?,
                    };
                    first.validate()?;
                    Some(first)
                };
                Self::Stat(StatRequest {
                    object,
                    expected_version,
                    max_age_ms,
                    first_read,
                })
            }
            MessageType::StatReply => {
                let size = r.u64()?;
                let version = read_version(&mut r)?;
                let last_modified_ms = r.i64()?;
                let content_type = r.string()?;
                validate_content_type(&content_type)?;
                // A worker from before the headers section ends its reply here: it
                // carried no headers, so the reader must ask the origin for them.
                let headers = if r.remaining() == 0 {
                    ObjectHeaders::AskOrigin
                } else {
                    match r.u8()? {
                        0 => {
                            let mut set = HeaderSet {
                                content_md5: r.string()?,
                                checksum: r.string()?,
                                content_encoding: r.string()?,
                                content_language: r.string()?,
                                content_disposition: r.string()?,
                                cache_control: r.string()?,
                                user_metadata: Vec::new(),
                            };
                            // No capacity from the count: each pair takes at least
                            // four payload bytes, so the vector stays within them.
                            let count = r.u16()?;
                            if usize::from(count) * 4 > r.remaining() {
                                return Err(r.malformed("more metadata pairs than bytes"));
                            }
                            for _ in 0..count {
                                set.user_metadata.push((r.string()?, r.string()?));
                            }
                            validate_header_set(&set)?;
                            ObjectHeaders::from(set)
                        }
                        1 => ObjectHeaders::AskOrigin,
                        _ => return Err(r.malformed("headers flag must be 0 or 1")),
                    }
                };
                let age_ms = if r.remaining() == 0 {
                    None
                } else {
                    Some(r.u32()?)
                };
                Self::StatReply(StatReply {
                    size,
                    version,
                    last_modified_ms,
                    content_type,
                    headers,
                    age_ms,
                })
            }
            MessageType::ReadRange | MessageType::Prefetch => {
                let req = ReadRangeRequest {
                    block: read_block(&mut r)?,
                    object_size: r.u64()?,
                    offset: r.u64()?,
                    len: r.u32()?,
                };
                req.validate()?;
                if ty == MessageType::Prefetch {
                    Self::Prefetch(req)
                } else {
                    Self::ReadRange(req)
                }
            }
            MessageType::ReadRangeReply => Self::ReadRangeReply(r.rest().to_vec()),
            MessageType::Ingest => {
                let meta_len = r.u16()?;
                if u32::from(meta_len) > MAX_INGEST_META_LEN {
                    return Err(r.malformed("ingest metadata longer than 8190 bytes"));
                }
                let meta = IngestMeta::decode(r.take(usize::from(meta_len))?)?;
                let data = r.rest();
                meta.validate(data.len() as u64)?;
                Self::Ingest(IngestRequest {
                    meta,
                    data: data.to_vec(),
                })
            }
            MessageType::IngestAck => Self::IngestAck(IngestAck {
                offset: r.u64()?,
                len: r.u32()?,
            }),
            MessageType::FileHandoff => Self::FileHandoff(FileHandoff {
                offset: r.u64()?,
                len: r.u32()?,
                from_origin: match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(r.malformed("from-origin flag must be 0 or 1")),
                },
            }),
            MessageType::PrefetchAck => Self::PrefetchAck(
                PrefetchOutcome::from_u8(r.u8()?)
                    .ok_or_else(|| r.malformed("prefetch outcome must be 0, 1 or 2"))?,
            ),
            MessageType::Hello => {
                let version = r.u8()?;
                let role = Role::from_u8(r.u8()?).ok_or_else(|| r.malformed("unknown role"))?;
                Self::Hello {
                    version,
                    role,
                    nonce: r.array()?,
                }
            }
            MessageType::HelloReply => {
                let nonce = r.array()?;
                let proof = r.array()?;
                let worker = r.string()?;
                if worker.len() > crate::cluster_auth::MAX_HELLO_WORKER_ID_LEN {
                    return Err(r.malformed("worker id longer than 128 bytes"));
                }
                Self::HelloReply {
                    nonce,
                    proof,
                    worker,
                }
            }
            MessageType::HelloProof => Self::HelloProof { proof: r.array()? },
            MessageType::Welcome => Self::Welcome,
            MessageType::Error => {
                let code = ErrorCode::from_u16(r.u16()?);
                let message = r.string()?;
                if message.len() > MAX_ERROR_MESSAGE_LEN {
                    return Err(r.malformed("error message too long"));
                }
                Self::Error(ErrorReply { code, message })
            }
        };
        r.finish()?;
        Ok(message)
    }
}

/// The 16-byte header of a ReadRangeReply carrying `len` bytes, and nothing
/// else: the worker writes it and then sends exactly `len` bytes of the block
/// file (e.g. with `sendfile`). Errors with [`Error::PayloadTooLarge`] if
/// `len` exceeds [`MAX_READ_LEN`].
pub fn encode_read_range_reply_header(
    request_id: u32,
    len: u32,
    from_origin: bool,
) -> Result<[u8; HEADER_LEN], Error> {
    let flags = if from_origin {
        Flags::FROM_ORIGIN
    } else {
        Flags::NONE
    };
    FrameHeader::new(MessageType::ReadRangeReply, flags, request_id, len).map(|h| h.encode())
}

/// Appends the start of an Ingest frame to `out`: the header, the metadata
/// length and the metadata, so that exactly `data_len` raw bytes must follow
/// (e.g. with `sendfile` or `splice`). Errors, leaving `out` as it was, if
/// [`IngestMeta::validate`] rejects `data_len`.
pub fn encode_ingest_prefix(
    request_id: u32,
    meta: &IngestMeta,
    data_len: u32,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    encode_ingest_prefix_with(request_id, Flags::NONE, meta, data_len, out)
}

fn encode_ingest_prefix_with(
    request_id: u32,
    flags: Flags,
    meta: &IngestMeta,
    data_len: u32,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let ty = MessageType::Ingest;
    meta.validate(u64::from(data_len))?;
    let mut meta_bytes = Vec::with_capacity(128);
    meta.encode(&mut meta_bytes)?;
    let meta_len = u16::try_from(meta_bytes.len())
        .ok()
        .filter(|len| u32::from(*len) <= MAX_INGEST_META_LEN)
        .ok_or(Error::Malformed {
            message_type: ty,
            reason: "ingest metadata longer than 8190 bytes",
        })?;
    let payload_len = 2 + u32::from(meta_len) + data_len;
    let header = FrameHeader::new(ty, flags, request_id, payload_len)?;
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(&meta_len.to_be_bytes());
    out.extend_from_slice(&meta_bytes);
    Ok(())
}

fn data_len_u32(ty: MessageType, len: usize, max: u32) -> Result<u32, Error> {
    u32::try_from(len)
        .ok()
        .filter(|len| *len <= max)
        .ok_or(Error::PayloadTooLarge {
            message_type: ty,
            len: len as u64,
            max,
        })
}

/// `len` bytes at `offset` of `block` must lie within the block and within
/// an object of `object_size` bytes.
fn check_block_range(
    ty: MessageType,
    block: &BlockId,
    object_size: u64,
    offset: u64,
    len: u64,
) -> Result<(), Error> {
    let end_in_block = offset
        .checked_add(len)
        .filter(|end| *end <= block.block_size())
        .ok_or(Error::Malformed {
            message_type: ty,
            reason: "range reaches past the end of the block",
        })?;
    // offset < block_size here, and block_offset is aligned, so this only
    // overflows when the range ends exactly at 2^64.
    let start = block.block_offset() + offset;
    let end = block.block_offset().checked_add(end_in_block);
    match end {
        Some(end) if end <= object_size => Ok(()),
        _ => Err(Error::RangeNotSatisfiable {
            start,
            end: end.unwrap_or(u64::MAX),
            size: object_size,
        }),
    }
}

fn validate_content_type(content_type: &str) -> Result<(), Error> {
    validate_header_value(NameField::ContentType, content_type, MAX_CONTENT_TYPE_LEN)
}

/// A value that becomes an HTTP header: at most `max` bytes, no control
/// characters but tab.
fn validate_header_value(field: NameField, value: &str, max: usize) -> Result<(), Error> {
    if value.len() > max {
        let problem = NameProblem::TooLong {
            len: value.len(),
            max,
        };
        return Err(Error::InvalidName { field, problem });
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        let problem = NameProblem::ContainsControl;
        return Err(Error::InvalidName { field, problem });
    }
    Ok(())
}

fn validate_header_set(set: &HeaderSet) -> Result<(), Error> {
    validate_content_md5(&set.content_md5)?;
    validate_checksum(&set.checksum)?;
    for (field, value) in content_headers(set).into_iter().skip(2) {
        validate_header_value(field, value, MAX_CONTENT_HEADER_LEN)?;
    }
    validate_user_metadata(&set.user_metadata)
}

fn invalid(field: NameField, problem: NameProblem) -> Error {
    Error::InvalidName { field, problem }
}

fn validate_content_md5(md5: &str) -> Result<(), Error> {
    let field = NameField::ContentMd5;
    if md5.len() > MAX_CONTENT_MD5_LEN {
        let problem = NameProblem::TooLong {
            len: md5.len(),
            max: MAX_CONTENT_MD5_LEN,
        };
        return Err(invalid(field, problem));
    }
    if !md5
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
    {
        return Err(invalid(field, NameProblem::NotBase64));
    }
    Ok(())
}

fn validate_checksum(checksum: &str) -> Result<(), Error> {
    if checksum.is_empty() {
        return Ok(());
    }
    let field = NameField::Checksum;
    if checksum.len() > MAX_CONTENT_MD5_LEN {
        let problem = NameProblem::TooLong {
            len: checksum.len(),
            max: MAX_CONTENT_MD5_LEN,
        };
        return Err(invalid(field, problem));
    }
    let well_formed = checksum.split_once(':').is_some_and(|(alg, value)| {
        !alg.is_empty()
            && alg
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && !value.is_empty()
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
    });
    if well_formed {
        Ok(())
    } else {
        Err(invalid(field, NameProblem::NotBase64))
    }
}

/// Whether `b` may appear in an HTTP header name (RFC 9110 `tchar`), lower case.
fn is_lower_token_byte(b: u8) -> bool {
    b.is_ascii_lowercase()
        || b.is_ascii_digit()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

fn validate_user_metadata(pairs: &[(String, String)]) -> Result<(), Error> {
    let mut previous: Option<&str> = None;
    for (name, value) in pairs {
        let field = NameField::MetadataName;
        if name.is_empty() {
            return Err(invalid(field, NameProblem::Empty));
        }
        if !name.bytes().all(is_lower_token_byte) {
            return Err(invalid(field, NameProblem::NotAToken));
        }
        if previous.is_some_and(|p| p >= name.as_str()) {
            return Err(invalid(field, NameProblem::NotSorted));
        }
        previous = Some(name);
        validate_header_value(NameField::MetadataValue, value, usize::MAX)?;
    }
    Ok(())
}

fn write_object(w: &mut Writer<'_>, object: &ObjectId, ty: MessageType) -> Result<(), Error> {
    w.u8(object.backend().tag());
    for name in object.names() {
        w.str(name, ty)?;
    }
    Ok(())
}

fn read_object(r: &mut Reader<'_>) -> Result<ObjectId, Error> {
    let tag = r.u8()?;
    let backend = Backend::from_tag(tag).ok_or_else(|| r.malformed("unknown backend tag"))?;
    let mut names = [""; 3];
    for name in names.iter_mut().take(ObjectId::name_count(backend)) {
        *name = r.text()?;
    }
    ObjectId::from_names(backend, &names)
}

fn read_version(r: &mut Reader<'_>) -> Result<ObjectVersion, Error> {
    ObjectVersion::new(r.string()?)
}

fn write_block(w: &mut Writer<'_>, block: &BlockId, ty: MessageType) -> Result<(), Error> {
    write_object(w, block.object(), ty)?;
    w.str(block.version().as_str(), ty)?;
    w.u64(block.block_offset());
    w.u64(block.block_size());
    Ok(())
}

fn read_block(r: &mut Reader<'_>) -> Result<BlockId, Error> {
    let object = read_object(r)?;
    let version = read_version(r)?;
    let block_offset = r.u64()?;
    let block_size = r.u64()?;
    BlockId::new(object, version, block_offset, block_size)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::identity::{MAX_NAMESPACE_LEN, MAX_PATH_LEN, MAX_VERSION_LEN};

    fn block(offset: u64, size: u64) -> BlockId {
        BlockId::new(
            ObjectId::s3("bucket", "dir/obj").unwrap(),
            ObjectVersion::new("\"etag\"").unwrap(),
            offset,
            size,
        )
        .unwrap()
    }

    fn round_trip(msg: &Message) -> Vec<u8> {
        let bytes = msg.encode(42).unwrap();
        let header = FrameHeader::decode(bytes[..HEADER_LEN].try_into().unwrap()).unwrap();
        assert_eq!(header.request_id(), 42);
        assert_eq!(header.payload_len() as usize, bytes.len() - HEADER_LEN);
        assert_eq!(header.message_type(), msg.message_type());
        assert_eq!(
            &Message::decode(&header, &bytes[HEADER_LEN..]).unwrap(),
            msg
        );
        bytes
    }

    #[test]
    fn ping_layout() {
        let bytes = round_trip(&Message::Ping {
            nonce: 0x0102_0304_0506_0708,
        });
        assert_eq!(&bytes[HEADER_LEN..], &[1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn read_range_layout() {
        let req = ReadRangeRequest {
            block: block(1 << 20, 1 << 20),
            object_size: 3 << 20,
            offset: 4096,
            len: 65536,
        };
        let bytes = round_trip(&Message::ReadRange(req.clone()));
        let mut expected = vec![1u8];
        for s in ["bucket", "dir/obj", "\"etag\""] {
            expected.extend_from_slice(&(s.len() as u16).to_be_bytes());
            expected.extend_from_slice(s.as_bytes());
        }
        for v in [1u64 << 20, 1 << 20, 3 << 20, 4096] {
            expected.extend_from_slice(&v.to_be_bytes());
        }
        expected.extend_from_slice(&65536u32.to_be_bytes());
        assert_eq!(&bytes[HEADER_LEN..], &expected[..]);
        assert_eq!(
            req.object_range(),
            (1 << 20) + 4096..(1 << 20) + 4096 + 65536
        );
    }

    #[test]
    fn every_message_round_trips() {
        let az = ObjectId::azure("acct", "cont", "a/b").unwrap();
        let msgs = [
            Message::Pong { nonce: 7 },
            Message::Stat(StatRequest {
                object: az.clone(),
                expected_version: None,
                max_age_ms: None,
                first_read: None,
            }),
            Message::Stat(StatRequest {
                object: az,
                expected_version: Some(ObjectVersion::new("v1").unwrap()),
                max_age_ms: None,
                first_read: None,
            }),
            Message::StatReply(StatReply {
                size: u64::MAX,
                version: ObjectVersion::new("v").unwrap(),
                last_modified_ms: -1,
                content_type: String::new(),
                headers: ObjectHeaders::AskOrigin,
                age_ms: None,
            }),
            Message::StatReply(StatReply {
                size: 3,
                version: ObjectVersion::new("v").unwrap(),
                last_modified_ms: 1,
                content_type: "text/plain".into(),
                headers: ObjectHeaders::from(HeaderSet {
                    content_md5: "rL0Y20zC+Fzt72VPzMSk2A==".into(),
                    checksum: "crc32:NhCmhg==".into(),
                    content_encoding: "br".into(),
                    content_language: "sk".into(),
                    content_disposition: "inline; filename=\"späť.txt\"".into(),
                    cache_control: "no-cache".into(),
                    user_metadata: vec![
                        ("colour".into(), "blue \tgreen".into()),
                        ("owner".into(), "tālon".into()),
                    ],
                }),
                age_ms: None,
            }),
            Message::ReadRangeReply(vec![9; 100]),
            Message::ReadRangeReply(Vec::new()),
            Message::Ingest(IngestRequest {
                meta: IngestMeta {
                    block: block(0, 1024),
                    object_size: 1000,
                    offset: 512,
                },
                data: vec![1; 488],
            }),
            Message::IngestAck(IngestAck {
                offset: 512,
                len: 488,
            }),
            Message::Error(ErrorReply::new(ErrorCode::Unknown(1234), "späť")),
        ];
        for msg in &msgs {
            round_trip(msg);
        }
    }

    #[test]
    fn largest_valid_ids_fit_their_caps() {
        let object = ObjectId::azure(
            "a".repeat(MAX_NAMESPACE_LEN),
            "c".repeat(MAX_NAMESPACE_LEN),
            "p".repeat(MAX_PATH_LEN),
        )
        .unwrap();
        let version = ObjectVersion::new("v".repeat(MAX_VERSION_LEN)).unwrap();
        let block = BlockId::new(object.clone(), version.clone(), 0, 1 << 30).unwrap();
        let msgs = [
            Message::Stat(StatRequest {
                object,
                expected_version: Some(version.clone()),
                max_age_ms: None,
                first_read: None,
            }),
            Message::ReadRange(ReadRangeRequest {
                block: block.clone(),
                object_size: u64::MAX,
                offset: 0,
                len: MAX_READ_LEN,
            }),
            Message::StatReply(StatReply {
                size: 0,
                version,
                last_modified_ms: i64::MIN,
                content_type: "t".repeat(MAX_CONTENT_TYPE_LEN),
                headers: ObjectHeaders::from(HeaderSet {
                    content_md5: "m".repeat(MAX_CONTENT_MD5_LEN),
                    checksum: format!("sha256:{}", "c".repeat(MAX_CONTENT_MD5_LEN - 7)),
                    content_encoding: "e".repeat(MAX_CONTENT_HEADER_LEN),
                    content_language: "l".repeat(MAX_CONTENT_HEADER_LEN),
                    content_disposition: "d".repeat(MAX_CONTENT_HEADER_LEN),
                    cache_control: "c".repeat(MAX_CONTENT_HEADER_LEN),
                    user_metadata: Vec::new(),
                }),
                age_ms: None,
            }),
            Message::Error(ErrorReply::new(ErrorCode::Internal, "é".repeat(5000))),
        ];
        for msg in &msgs {
            round_trip(msg);
        }
        let mut prefix = Vec::new();
        let meta = IngestMeta {
            block,
            object_size: u64::MAX,
            offset: 0,
        };
        encode_ingest_prefix(1, &meta, MAX_INGEST_DATA_LEN, &mut prefix).unwrap();
        assert!(prefix.len() <= HEADER_LEN + MAX_CONTROL_PAYLOAD as usize);
    }

    #[test]
    fn error_reply_truncates_at_char_boundary() {
        let e = ErrorReply::new(ErrorCode::Internal, "é".repeat(5000));
        assert!(e.message.len() <= MAX_ERROR_MESSAGE_LEN);
        assert_eq!(e.message.len(), MAX_ERROR_MESSAGE_LEN); // 4092 is even
        let e = ErrorReply::new(ErrorCode::Internal, format!("x{}", "é".repeat(5000)));
        assert_eq!(e.message.len(), MAX_ERROR_MESSAGE_LEN - 1);
        let too_long = Message::Error(ErrorReply {
            code: ErrorCode::Internal,
            message: "x".repeat(MAX_ERROR_MESSAGE_LEN + 1),
        });
        assert!(matches!(
            too_long.encode(1),
            Err(Error::InvalidName {
                field: NameField::ErrorMessage,
                ..
            })
        ));
        let reply = ErrorReply::from(&Error::UnsupportedVersion(9));
        assert_eq!(reply.code, ErrorCode::Unsupported);
        assert!(reply.message.contains("version 9"));
    }

    #[test]
    fn error_frames_carry_the_error_flag_and_eos_passes_through() {
        let mut out = vec![0xAA];
        Message::Error(ErrorReply::new(ErrorCode::NotFound, "gone"))
            .encode_into(5, Flags::END_OF_STREAM, &mut out)
            .unwrap();
        assert_eq!(out[0], 0xAA, "appends");
        let header = FrameHeader::decode(out[1..17].try_into().unwrap()).unwrap();
        assert!(header.flags().contains(Flags::ERROR));
        assert!(header.is_end_of_stream());
        assert_eq!(&out[17..19], &[0, 1]);

        // ERROR is dropped from non-error messages.
        let bytes = {
            let mut v = Vec::new();
            Message::Ping { nonce: 1 }
                .encode_into(1, Flags::ERROR, &mut v)
                .unwrap();
            v
        };
        let header = FrameHeader::decode(bytes[..16].try_into().unwrap()).unwrap();
        assert_eq!(header.flags(), Flags::NONE);
    }

    fn stat_with(user_metadata: Vec<(String, String)>) -> StatReply {
        StatReply {
            size: 10,
            version: ObjectVersion::new("\"e\"").unwrap(),
            last_modified_ms: 5,
            content_type: "text/plain".into(),
            headers: ObjectHeaders::from(HeaderSet {
                content_md5: "XUFAKrxLKna5cZ2REBfFkg==".into(),
                content_encoding: "gzip".into(),
                user_metadata,
                ..HeaderSet::default()
            }),
            age_ms: None,
        }
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn stat_reply_encoded_len_is_exact() {
        let ask = StatReply {
            headers: ObjectHeaders::AskOrigin,
            ..stat_with(Vec::new())
        };
        let aged = StatReply {
            age_ms: Some(u32::MAX),
            ..stat_with(pairs(&[("a", "1")]))
        };
        for reply in [
            ask,
            aged,
            stat_with(Vec::new()),
            stat_with(pairs(&[("a", "1"), ("b", "xyz")])),
        ] {
            let bytes = round_trip(&Message::StatReply(reply.clone()));
            assert_eq!(bytes.len() - HEADER_LEN, reply.encoded_len());
        }
    }

    #[test]
    fn headers_too_large_for_a_frame_are_flagged_never_cut() {
        let big: Vec<(String, String)> = (0..100)
            .map(|i| (format!("k{i:03}"), "v".repeat(100)))
            .collect();
        let reply = stat_with(big);
        assert!(reply.encoded_len() > MAX_CONTROL_PAYLOAD as usize);
        assert!(matches!(
            Message::StatReply(reply.clone()).encode(1),
            Err(Error::PayloadTooLarge { .. })
        ));
        let fitted = reply.fitted_to_frame();
        assert_eq!(fitted.headers, ObjectHeaders::AskOrigin);
        round_trip(&Message::StatReply(fitted));

        let small = stat_with(pairs(&[("k", "v")]));
        assert_eq!(small.clone().fitted_to_frame(), small);
    }

    /// A StatReply payload written field by field, bypassing the encoder's checks.
    fn forged_stat(md5: &str, encoding: &str, metadata: &[(String, String)]) -> Vec<u8> {
        let mut payload = Vec::new();
        let mut w = Writer::new(&mut payload);
        let ty = MessageType::StatReply;
        w.u64(10);
        w.str("\"e\"", ty).unwrap();
        w.i64(5);
        w.str("", ty).unwrap();
        w.u8(0);
        for value in [md5, "", encoding, "", "", ""] {
            w.str(value, ty).unwrap();
        }
        w.u16(metadata.len() as u16);
        for (n, v) in metadata {
            w.str(n, ty).unwrap();
            w.str(v, ty).unwrap();
        }
        payload
    }

    fn decode_stat(payload: &[u8]) -> Result<Message, Error> {
        let header =
            FrameHeader::new(MessageType::StatReply, Flags::NONE, 1, payload.len() as u32).unwrap();
        Message::decode(&header, payload)
    }

    #[test]
    fn bad_headers_are_neither_encoded_nor_decoded() {
        use NameField::{ContentHeader, ContentMd5, MetadataName, MetadataValue};
        use NameProblem::{ContainsControl, Empty, NotAToken, NotBase64, NotSorted};
        /// Content-MD5, Content-Encoding, metadata, and the error they earn.
        type Case<'a> = (
            &'a str,
            &'a str,
            &'a [(&'a str, &'a str)],
            NameField,
            NameProblem,
        );
        let cases: [Case<'_>; 8] = [
            ("", "", &[("Upper", "v")], MetadataName, NotAToken),
            ("", "", &[("a b", "v")], MetadataName, NotAToken),
            ("", "", &[("", "v")], MetadataName, Empty),
            ("", "", &[("b", "v"), ("a", "v")], MetadataName, NotSorted),
            ("", "", &[("a", "v"), ("a", "w")], MetadataName, NotSorted),
            ("", "", &[("a", "x\r\ny")], MetadataValue, ContainsControl),
            ("not base64!", "", &[], ContentMd5, NotBase64),
            (
                "",
                "gzip\r\nSet-Cookie: x",
                &[],
                ContentHeader,
                ContainsControl,
            ),
        ];
        for (md5, encoding, metadata, field, problem) in cases {
            let metadata = pairs(metadata);
            let reply = StatReply {
                headers: ObjectHeaders::from(HeaderSet {
                    content_md5: md5.into(),
                    content_encoding: encoding.into(),
                    user_metadata: metadata.clone(),
                    ..HeaderSet::default()
                }),
                ..stat_with(Vec::new())
            };
            let expected = Error::InvalidName { field, problem };
            assert_eq!(
                Message::StatReply(reply).encode(1),
                Err(expected.clone()),
                "{metadata:?}"
            );
            assert_eq!(
                decode_stat(&forged_stat(md5, encoding, &metadata)),
                Err(expected),
                "the decoder refuses the same fields"
            );
        }
    }

    #[test]
    fn origin_headers_are_carried_whole_or_not_at_all() {
        let from = |encoding: &str, metadata: &[(&str, &str)]| {
            ObjectHeaders::from_origin(HeaderSet {
                content_encoding: encoding.into(),
                user_metadata: pairs(metadata),
                ..HeaderSet::default()
            })
        };
        assert_eq!(
            from("gzip", &[("Owner", "talon"), ("colour", "blue")]),
            ObjectHeaders::from(HeaderSet {
                content_encoding: "gzip".into(),
                user_metadata: pairs(&[("colour", "blue"), ("owner", "talon")]),
                ..HeaderSet::default()
            })
        );
        assert_eq!(
            from("", &[("a", "ok"), ("b", "bell\u{7}")]),
            ObjectHeaders::AskOrigin
        );
        assert_eq!(
            from("", &[("a", "1"), ("A", "2")]),
            ObjectHeaders::AskOrigin
        );
        assert_eq!(
            from(&"x".repeat(MAX_CONTENT_HEADER_LEN + 1), &[]),
            ObjectHeaders::AskOrigin
        );
        assert_eq!(from("", &[]), ObjectHeaders::default());
    }

    #[test]
    fn a_reply_from_before_the_headers_section_asks_the_origin() {
        // The shape workers sent before headers travelled: content type, then the end.
        let mut payload = Vec::new();
        let mut w = Writer::new(&mut payload);
        let ty = MessageType::StatReply;
        w.u64(10);
        w.str("\"e\"", ty).unwrap();
        w.i64(5);
        w.str("text/plain", ty).unwrap();
        match decode_stat(&payload).unwrap() {
            Message::StatReply(reply) => {
                assert_eq!(reply.headers, ObjectHeaders::AskOrigin);
                assert_eq!(reply.content_type, "text/plain");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn more_metadata_pairs_than_bytes_is_malformed() {
        let mut payload = forged_stat("", "", &[]);
        let count_at = payload.len() - 2;
        payload[count_at..].copy_from_slice(&u16::MAX.to_be_bytes());
        assert!(matches!(
            decode_stat(&payload),
            Err(Error::Malformed { .. })
        ));
    }

    #[test]
    fn unknown_headers_flag_is_malformed() {
        let mut payload = forged_stat("", "", &[]);
        let flag_at = 8 + 2 + 3 + 8 + 2;
        assert_eq!(payload[flag_at], 0);
        payload[flag_at] = 2;
        assert!(matches!(
            decode_stat(&payload),
            Err(Error::Malformed { .. })
        ));
    }

    #[test]
    fn invalid_messages_are_not_encoded() {
        let mut out = vec![1, 2, 3];
        let bad_ct = Message::StatReply(StatReply {
            size: 1,
            version: ObjectVersion::new("v").unwrap(),
            last_modified_ms: 0,
            content_type: "text/html\r\nSet-Cookie: x".to_owned(),
            headers: ObjectHeaders::default(),
            age_ms: None,
        });
        assert!(matches!(
            bad_ct.encode_into(1, Flags::NONE, &mut out),
            Err(Error::InvalidName {
                field: NameField::ContentType,
                problem: NameProblem::ContainsControl
            })
        ));
        assert_eq!(out, vec![1, 2, 3], "failed encode leaves the buffer alone");

        let past_block = Message::ReadRange(ReadRangeRequest {
            block: block(0, 1024),
            object_size: 10_000,
            offset: 1000,
            len: 25,
        });
        assert!(matches!(past_block.encode(1), Err(Error::Malformed { .. })));
        let past_object = Message::ReadRange(ReadRangeRequest {
            block: block(1024, 1024),
            object_size: 1500,
            offset: 400,
            len: 100,
        });
        assert_eq!(
            past_object.encode(1),
            Err(Error::RangeNotSatisfiable {
                start: 1424,
                end: 1524,
                size: 1500
            })
        );
        let too_long = Message::ReadRange(ReadRangeRequest {
            block: block(0, 1 << 31),
            object_size: u64::MAX,
            offset: 0,
            len: MAX_READ_LEN + 1,
        });
        assert!(matches!(
            too_long.encode(1),
            Err(Error::PayloadTooLarge { .. })
        ));
        let ingest = Message::Ingest(IngestRequest {
            meta: IngestMeta {
                block: block(0, 1024),
                object_size: 100,
                offset: 0,
            },
            data: vec![0; 101],
        });
        assert!(matches!(
            ingest.encode(1),
            Err(Error::RangeNotSatisfiable { .. })
        ));
    }

    #[test]
    fn range_ending_at_two_to_the_64_is_rejected_not_overflowed() {
        let top = BlockId::new(
            ObjectId::s3("b", "k").unwrap(),
            ObjectVersion::new("v").unwrap(),
            u64::MAX - 1023,
            1024,
        )
        .unwrap();
        let ok = ReadRangeRequest {
            block: top.clone(),
            object_size: u64::MAX,
            offset: 0,
            len: 1023,
        };
        assert_eq!(ok.validate(), Ok(()));
        let past = ReadRangeRequest { len: 1024, ..ok };
        assert_eq!(
            past.validate(),
            Err(Error::RangeNotSatisfiable {
                start: u64::MAX - 1023,
                end: u64::MAX,
                size: u64::MAX
            })
        );
    }

    #[test]
    fn a_first_read_travels_only_with_a_max_age_and_only_within_the_first_block() {
        let stat = |max_age_ms, first_read| {
            Message::Stat(StatRequest {
                object: ObjectId::s3("b", "k").unwrap(),
                expected_version: None,
                max_age_ms,
                first_read,
            })
        };
        let first = FirstRead {
            block_size: 1 << 20,
            start: 100,
            end: 70_000,
        };
        let sent = stat(Some(1000), Some(first));
        let bytes = sent.encode(3).unwrap();
        let header = FrameHeader::decode(bytes[..HEADER_LEN].try_into().unwrap()).unwrap();
        assert_eq!(
            Message::decode(&header, &bytes[HEADER_LEN..]).unwrap(),
            sent
        );
        assert!(stat(None, Some(first)).encode(3).is_err());
        for bad in [
            FirstRead {
                block_size: 1000,
                ..first
            },
            FirstRead {
                start: 70_000,
                ..first
            },
            FirstRead {
                end: (1 << 20) + 1,
                ..first
            },
            FirstRead {
                block_size: 1 << 30,
                start: 0,
                end: u64::from(MAX_READ_LEN) + 1,
            },
        ] {
            assert!(stat(Some(1000), Some(bad)).encode(3).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn decode_rejects_bad_payloads() {
        let header = |ty, len| FrameHeader::new(ty, Flags::NONE, 0, len).unwrap();
        // Length mismatch with the header.
        assert!(Message::decode(&header(MessageType::Ping, 8), &[0; 7]).is_err());
        // Truncated and trailing.
        assert!(Message::decode(&header(MessageType::Ping, 4), &[0; 4]).is_err());
        let ack = header(MessageType::IngestAck, 12);
        assert!(Message::decode(&ack, &[0; 12]).is_ok());
        let mut stat = Message::Stat(StatRequest {
            object: ObjectId::s3("b", "k").unwrap(),
            expected_version: None,
            max_age_ms: Some(1000),
            first_read: Some(FirstRead {
                block_size: 1 << 20,
                start: 0,
                end: 4096,
            }),
        })
        .encode(0)
        .unwrap();
        stat.push(0);
        let h = header(MessageType::Stat, (stat.len() - 16) as u32);
        assert_eq!(
            Message::decode(&h, &stat[16..]),
            Err(Error::Malformed {
                message_type: MessageType::Stat,
                reason: "trailing bytes after the last field"
            })
        );
        // Version flag other than 0/1 (the max age, the first read and the extra byte
        // dropped).
        stat.truncate(stat.len() - 29);
        let last = stat.len() - 1;
        stat[last] = 2;
        let h = header(MessageType::Stat, (stat.len() - 16) as u32);
        assert!(matches!(
            Message::decode(&h, &stat[16..]),
            Err(Error::Malformed { .. })
        ));
        // Unknown backend tag, and an id that breaks the key-path rules.
        let payload = [9, 0, 1, b'b', 0, 1, b'k', 0];
        let h = header(MessageType::Stat, payload.len() as u32);
        assert!(matches!(
            Message::decode(&h, &payload),
            Err(Error::Malformed { .. })
        ));
        let payload = [1, 0, 1, b'b', 0, 2, b'.', b'.', 0];
        let h = header(MessageType::Stat, payload.len() as u32);
        assert_eq!(
            Message::decode(&h, &payload),
            Err(Error::InvalidName {
                field: NameField::Path,
                problem: NameProblem::DotSegment
            })
        );
        // An unknown error code survives as Unknown.
        let payload = [0x12, 0x34, 0, 0];
        let h = FrameHeader::new(MessageType::Error, Flags::ERROR, 0, 4).unwrap();
        assert_eq!(
            Message::decode(&h, &payload),
            Ok(Message::Error(ErrorReply {
                code: ErrorCode::Unknown(0x1234),
                message: String::new()
            }))
        );
    }

    #[test]
    fn read_range_reply_header_is_header_only() {
        let h = encode_read_range_reply_header(7, 65536, false).unwrap();
        let decoded = FrameHeader::decode(&h).unwrap();
        assert_eq!(decoded.message_type(), MessageType::ReadRangeReply);
        assert_eq!(decoded.request_id(), 7);
        assert_eq!(decoded.payload_len(), 65536);
        let mut full = h.to_vec();
        full.extend_from_slice(&[5; 65536]);
        assert_eq!(
            full,
            Message::ReadRangeReply(vec![5; 65536]).encode(7).unwrap()
        );
        assert!(encode_read_range_reply_header(7, MAX_READ_LEN + 1, false).is_err());
    }

    #[test]
    fn ingest_prefix_plus_data_is_the_full_frame() {
        let meta = IngestMeta {
            block: block(0, 1024),
            object_size: 4096,
            offset: 256,
        };
        let data = vec![3u8; 512];
        let mut prefix = Vec::new();
        encode_ingest_prefix(9, &meta, 512, &mut prefix).unwrap();
        let full = Message::Ingest(IngestRequest {
            meta: meta.clone(),
            data: data.clone(),
        })
        .encode(9)
        .unwrap();
        assert_eq!(&full[..prefix.len()], &prefix[..]);
        assert_eq!(&full[prefix.len()..], &data[..]);
        let meta_len = u16::from_be_bytes([prefix[16], prefix[17]]) as usize;
        assert_eq!(prefix.len(), 18 + meta_len);
        assert_eq!(IngestMeta::decode(&prefix[18..]), Ok(meta));
    }
}
