//! Conformance vectors: fixed inputs and their exact encodings, for the wire
//! protocol, key paths, placement keys and the bitmap encoding.
//!
//! [`vector_set`] is the single source of the vectors. The committed file
//! `core/tests/vectors/wire_v1.txt` is [`render`] of it, produced by
//! [`GENERATE_COMMAND`]; the `conformance` test regenerates it in-process,
//! fails if the committed file differs, and decodes every committed vector
//! back. Another implementation of the protocol can test itself against the
//! file alone (its format is described in the file's header).

use std::fmt::Write as _;

use crate::bitmap::PresentBitmap;
use crate::cluster_auth::{ClusterSecret, HELLO_VERSION, HelloSide, Nonce, Role};
use crate::error::Error;
use crate::identity::{BlockId, ObjectId, ObjectVersion};
use crate::wire::{
    ErrorCode, ErrorReply, FileHandoff, FirstRead, Flags, FrameHeader, HEADER_LEN, HeaderSet,
    IngestAck, IngestMeta, IngestRequest, MessageType, ObjectHeaders, PrefetchOutcome,
    ReadRangeRequest, StatReply, StatRequest, encode_read_range_reply_header,
};
use crate::{Message, Namespace};

/// The command that regenerates the committed vector file, run from the
/// workspace root.
pub const GENERATE_COMMAND: &str =
    "cargo run -q -p talon-core --example gen_wire_vectors > core/tests/vectors/wire_v1.txt";

/// One conformance vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vector {
    /// A whole frame (header and payload) that decodes to `message`.
    Frame {
        /// Unique name.
        name: &'static str,
        /// What the vector shows.
        description: &'static str,
        /// Request id in the header.
        request_id: u32,
        /// The message.
        message: Message,
        /// Flags beyond those the message type implies.
        flags: Flags,
        /// The exact frame bytes.
        bytes: Vec<u8>,
    },
    /// A frame header sent on its own (the ReadRangeReply header a worker
    /// writes before `sendfile`).
    Header {
        /// Unique name.
        name: &'static str,
        /// What the vector shows.
        description: &'static str,
        /// The decoded header.
        header: FrameHeader,
    },
    /// Bytes a decoder must reject with `error`.
    Reject {
        /// Unique name.
        name: &'static str,
        /// What is wrong with the bytes.
        description: &'static str,
        /// The bytes.
        bytes: Vec<u8>,
        /// The error this crate returns.
        error: Error,
    },
    /// A key path and the id it names.
    KeyPath {
        /// The id.
        object: ObjectId,
    },
    /// A block, its storage name and its placement key.
    Placement {
        /// The block.
        block: BlockId,
    },
    /// A bitmap and its persistent encoding.
    Bitmap {
        /// Unique name.
        name: &'static str,
        /// The bitmap.
        bitmap: PresentBitmap,
    },
}

impl Vector {
    /// The vector's unique name (the key path or block display for ids).
    pub fn name(&self) -> String {
        match self {
            Self::Frame { name, .. }
            | Self::Header { name, .. }
            | Self::Reject { name, .. }
            | Self::Bitmap { name, .. } => (*name).to_owned(),
            Self::KeyPath { object } => object.key_path(),
            Self::Placement { block } => block.to_string(),
        }
    }
}

/// Builds every vector. Fails only if this crate's own constructors reject
/// the fixed inputs, which the conformance test would catch.
pub fn vector_set() -> Result<Vec<Vector>, Error> {
    let mut v = Vec::new();
    frames(&mut v)?;
    rejects(&mut v)?;
    for key in [
        "s3/my-bucket/data/2024/part-0001.parquet",
        "s3/b/k",
        "s3/logs.example.com/année=2024/mois=05/événements 1.json",
        "s3/bucket/.hidden/..dots/a.b.c",
        "s3/b/folder/marker/",
        "s3/b//lead//double",
        "az/myaccount/mycontainer/dir/blob.bin",
        "az/a/c/x",
    ] {
        v.push(Vector::KeyPath {
            object: ObjectId::from_key_path(key)?,
        });
    }
    for (key, version, offset, size) in [
        (
            "s3/my-bucket/data/part-0001.parquet",
            "\"9b2cf535f27731c974343645a3985328\"",
            0,
            256 << 20,
        ),
        (
            "s3/my-bucket/data/part-0001.parquet",
            "\"9b2cf535f27731c974343645a3985328\"",
            256 << 20,
            256 << 20,
        ),
        (
            "s3/my-bucket/data/part-0001.parquet",
            "\"0000000000000000000000000000000-2\"",
            0,
            256 << 20,
        ),
        (
            "az/myaccount/mycontainer/dir/blob.bin",
            "0x8DC1234567890AB",
            5 << 30,
            1 << 30,
        ),
        ("s3/b/k", "v", u64::MAX - 1023, 1024),
    ] {
        let block = BlockId::new(
            ObjectId::from_key_path(key)?,
            ObjectVersion::new(version)?,
            offset,
            size,
        )?;
        v.push(Vector::Placement { block });
    }
    bitmaps(&mut v)?;
    Ok(v)
}

fn s3_block(offset: u64, size: u64) -> Result<BlockId, Error> {
    BlockId::new(
        ObjectId::s3("my-bucket", "data/part-0001.parquet")?,
        ObjectVersion::new("\"9b2cf535f27731c974343645a3985328\"")?,
        offset,
        size,
    )
}

fn az_block() -> Result<BlockId, Error> {
    BlockId::new(
        ObjectId::azure("myaccount", "mycontainer", "dir/blob.bin")?,
        ObjectVersion::new("0x8DC1234567890AB")?,
        0,
        1024,
    )
}

fn frame(
    v: &mut Vec<Vector>,
    name: &'static str,
    description: &'static str,
    request_id: u32,
    flags: Flags,
    message: Message,
) -> Result<(), Error> {
    let mut bytes = Vec::new();
    message.encode_into(request_id, flags, &mut bytes)?;
    v.push(Vector::Frame {
        name,
        description,
        request_id,
        message,
        flags,
        bytes,
    });
    Ok(())
}

fn frames(v: &mut Vec<Vector>) -> Result<(), Error> {
    let none = Flags::NONE;
    frame(
        v,
        "ping",
        "Ping, request id 1, nonce 0x0123456789abcdef",
        1,
        none,
        Message::Ping {
            nonce: 0x0123_4567_89ab_cdef,
        },
    )?;
    frame(
        v,
        "pong",
        "Pong echoing the ping's nonce, request id 1",
        1,
        none,
        Message::Pong {
            nonce: 0x0123_4567_89ab_cdef,
        },
    )?;
    frame(
        v,
        "pong_end_of_stream",
        "Pong with END_OF_STREAM: the worker is draining",
        2,
        Flags::END_OF_STREAM,
        Message::Pong { nonce: 0 },
    )?;
    frame(
        v,
        "stat_s3",
        "Stat of s3/my-bucket/data/part-0001.parquet, no version",
        3,
        none,
        Message::Stat(StatRequest {
            object: ObjectId::s3("my-bucket", "data/part-0001.parquet")?,
            expected_version: None,
            max_age_ms: None,
            first_read: None,
        }),
    )?;
    frame(
        v,
        "stat_azure_pinned",
        "Stat of az/myaccount/mycontainer/dir/blob.bin pinned to version 0x8DC1234567890AB",
        4,
        none,
        Message::Stat(StatRequest {
            object: ObjectId::azure("myaccount", "mycontainer", "dir/blob.bin")?,
            expected_version: Some(ObjectVersion::new("0x8DC1234567890AB")?),
            max_age_ms: None,
            first_read: None,
        }),
    )?;
    frame(
        v,
        "stat_reply",
        "StatReply: 5 GiB + 123 bytes, quoted ETag, 2024-05-01T12:00:00.250Z, application/vnd.apache.parquet",
        3,
        none,
        Message::StatReply(StatReply {
            size: (5 << 30) + 123,
            version: ObjectVersion::new("\"9b2cf535f27731c974343645a3985328\"")?,
            last_modified_ms: 1_714_564_800_250,
            content_type: "application/vnd.apache.parquet".to_owned(),
            headers: ObjectHeaders::default(),
            age_ms: None,
        }),
    )?;
    frame(
        v,
        "stat_reply_with_headers",
        "StatReply: 5 bytes, Content-MD5 and SHA-256 checksum of \"hello\", gzip, en, attachment, max-age=60, user metadata colour=blue and owner=talon",
        3,
        none,
        Message::StatReply(StatReply {
            size: 5,
            version: ObjectVersion::new("\"5d41402abc4b2a76b9719d911017c592\"")?,
            last_modified_ms: 1_714_564_800_000,
            content_type: "text/plain".to_owned(),
            headers: ObjectHeaders::from(HeaderSet {
                content_md5: "XUFAKrxLKna5cZ2REBfFkg==".to_owned(),
                checksum: "sha256:LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=".to_owned(),
                content_encoding: "gzip".to_owned(),
                content_language: "en".to_owned(),
                content_disposition: "attachment; filename=\"hello.txt\"".to_owned(),
                cache_control: "max-age=60".to_owned(),
                user_metadata: vec![
                    ("colour".to_owned(), "blue".to_owned()),
                    ("owner".to_owned(), "talon".to_owned()),
                ],
            }),
            age_ms: None,
        }),
    )?;
    frame(
        v,
        "stat_reply_headers_ask_origin",
        "StatReply whose headers could not travel in a frame: ask the origin",
        3,
        none,
        Message::StatReply(StatReply {
            size: 5,
            version: ObjectVersion::new("v1")?,
            last_modified_ms: 0,
            content_type: String::new(),
            headers: ObjectHeaders::AskOrigin,
            age_ms: None,
        }),
    )?;
    frame(
        v,
        "stat_max_age",
        "Stat of s3/my-bucket/data/part-0001.parquet accepting metadata learned at most 1500 ms ago",
        6,
        none,
        Message::Stat(StatRequest {
            object: ObjectId::s3("my-bucket", "data/part-0001.parquet")?,
            expected_version: None,
            max_age_ms: Some(1500),
            first_read: None,
        }),
    )?;
    frame(
        v,
        "stat_first_read",
        "Stat of s3/my-bucket/data/part-0001.parquet, max age 1500 ms, about to read bytes [0, 65536) of its first 64 MiB block",
        7,
        none,
        Message::Stat(StatRequest {
            object: ObjectId::s3("my-bucket", "data/part-0001.parquet")?,
            expected_version: None,
            max_age_ms: Some(1500),
            first_read: Some(FirstRead {
                block_size: 64 << 20,
                start: 0,
                end: 65_536,
            }),
        }),
    )?;
    frame(
        v,
        "stat_reply_with_age",
        "StatReply to a Stat with a max age: version v1 of 5 bytes, learned from the origin 250 ms ago",
        6,
        none,
        Message::StatReply(StatReply {
            size: 5,
            version: ObjectVersion::new("v1")?,
            last_modified_ms: 0,
            content_type: String::new(),
            headers: ObjectHeaders::default(),
            age_ms: Some(250),
        }),
    )?;
    frame(
        v,
        "read_range",
        "ReadRange: 64 KiB at offset 1 MiB within the 256 MiB block at 4 GiB of a 5 GiB + 123 byte object",
        5,
        none,
        Message::ReadRange(ReadRangeRequest {
            block: s3_block(4 << 30, 256 << 20)?,
            object_size: (5 << 30) + 123,
            offset: 1 << 20,
            len: 64 << 10,
        }),
    )?;
    frame(
        v,
        "read_range_reply",
        "ReadRangeReply carrying 16 bytes \"0123456789abcdef\"",
        5,
        none,
        Message::ReadRangeReply(b"0123456789abcdef".to_vec()),
    )?;
    frame(
        v,
        "ingest",
        "Ingest of 16 bytes at offset 512 of the 1 KiB block at 0 of a 1000-byte Azure blob",
        6,
        none,
        Message::Ingest(IngestRequest {
            meta: IngestMeta {
                block: az_block()?,
                object_size: 1000,
                offset: 512,
            },
            data: b"fedcba9876543210".to_vec(),
        }),
    )?;
    frame(
        v,
        "ingest_ack",
        "IngestAck: 16 bytes at offset 512 are durable",
        6,
        none,
        Message::IngestAck(IngestAck {
            offset: 512,
            len: 16,
        }),
    )?;
    frame(
        v,
        "file_handoff",
        "FileHandoff (local socket): 65536 bytes at offset 1048576, a fill; a descriptor rides with it",
        8,
        none,
        Message::FileHandoff(FileHandoff {
            offset: 1 << 20,
            len: 64 << 10,
            from_origin: true,
        }),
    )?;
    frame(
        v,
        "prefetch",
        "Prefetch: make 2 MiB at offset 2 MiB of the 256 MiB block at 4 GiB present, sending no bytes",
        9,
        none,
        Message::Prefetch(ReadRangeRequest {
            block: s3_block(4 << 30, 256 << 20)?,
            object_size: (5 << 30) + 123,
            offset: 2 << 20,
            len: 2 << 20,
        }),
    )?;
    for (name, description, outcome) in [
        (
            "prefetch_ack_present",
            "PrefetchAck: every page was present",
            PrefetchOutcome::Present,
        ),
        (
            "prefetch_ack_started",
            "PrefetchAck: a fill started in the background",
            PrefetchOutcome::Started,
        ),
        (
            "prefetch_ack_declined",
            "PrefetchAck: declined, at the worker's bound of background fills",
            PrefetchOutcome::Declined,
        ),
    ] {
        frame(v, name, description, 9, none, Message::PrefetchAck(outcome))?;
    }
    frame(
        v,
        "error_not_found",
        "Error reply NotFound (1) with a message; ERROR flag set",
        7,
        none,
        Message::Error(ErrorReply::new(
            ErrorCode::NotFound,
            "object not found at origin",
        )),
    )?;
    frame(
        v,
        "error_version_mismatch",
        "Error reply VersionMismatch (3)",
        8,
        none,
        Message::Error(ErrorReply::new(ErrorCode::VersionMismatch, "etag changed")),
    )?;
    frame(
        v,
        "error_unknown_code",
        "Error reply with code 999, unknown to v1 readers: decodes as Unknown(999)",
        9,
        none,
        Message::Error(ErrorReply::new(ErrorCode::Unknown(999), "")),
    )?;
    v.push(Vector::Header {
        name: "read_range_reply_header",
        description: "ReadRangeReply header alone, request id 5, 65536 payload bytes to follow (sendfile)",
        header: FrameHeader::decode(&encode_read_range_reply_header(5, 64 << 10, false)?)?,
    });
    hello_frames(v)?;
    v.push(Vector::Header {
        name: "read_range_reply_header_from_origin",
        description: "ReadRangeReply header with FROM_ORIGIN (the worker fetched bytes from the origin to answer), request id 6, 4096 payload bytes to follow",
        header: FrameHeader::decode(&encode_read_range_reply_header(6, 4096, true)?)?,
    });
    Ok(())
}

/// The secret the Hello vectors are computed with (as in a `--cluster-secret-file`).
pub const HELLO_VECTOR_SECRET: &[u8] = b"talon conformance cluster secret";
/// The peer's nonce in the Hello vectors.
pub const HELLO_VECTOR_PEER_NONCE: Nonce = *b"peer-nonce-16byt";
/// The worker's nonce in the Hello vectors.
pub const HELLO_VECTOR_WORKER_NONCE: Nonce = *b"worker-nonce-16b";
/// The worker's member id in the Hello vectors.
pub const HELLO_VECTOR_WORKER_ID: &str = "worker-7";

/// The Hello exchange of a reader, with proofs computed from [`HELLO_VECTOR_SECRET`],
/// the two nonces and [`HELLO_VECTOR_WORKER_ID`], so another implementation checks its
/// HMACs against them.
fn hello_frames(v: &mut Vec<Vector>) -> Result<(), Error> {
    let secret = ClusterSecret::new(HELLO_VECTOR_SECRET)?;
    let (peer, worker) = (HELLO_VECTOR_PEER_NONCE, HELLO_VECTOR_WORKER_NONCE);
    frame(
        v,
        "hello_reader",
        "Hello v2 from a reader (role 1), peer nonce \"peer-nonce-16byt\", request id 1",
        1,
        Flags::NONE,
        Message::Hello {
            version: HELLO_VERSION,
            role: Role::Reader,
            nonce: peer,
        },
    )?;
    frame(
        v,
        "hello_reply",
        "HelloReply: worker nonce \"worker-nonce-16b\", the worker proof for secret \"talon conformance cluster secret\" and worker id \"worker-7\"",
        1,
        Flags::NONE,
        Message::HelloReply {
            nonce: worker,
            proof: secret.hello_proof(
                HelloSide::Worker,
                Role::Reader,
                HELLO_VECTOR_WORKER_ID,
                &peer,
                &worker,
            ),
            worker: HELLO_VECTOR_WORKER_ID.to_owned(),
        },
    )?;
    frame(
        v,
        "hello_proof",
        "HelloProof: the peer proof over the same secret, role, nonces and worker id, request id 2",
        2,
        Flags::NONE,
        Message::HelloProof {
            proof: secret.hello_proof(
                HelloSide::Peer,
                Role::Reader,
                HELLO_VECTOR_WORKER_ID,
                &peer,
                &worker,
            ),
        },
    )?;
    frame(
        v,
        "welcome",
        "Welcome: the peer is authenticated, request id 2",
        2,
        Flags::NONE,
        Message::Welcome,
    )?;
    frame(
        v,
        "error_unauthenticated",
        "Error 12 (Unauthenticated): a request before the Hello exchange finished",
        7,
        Flags::END_OF_STREAM,
        Message::Error(ErrorReply {
            code: ErrorCode::Unauthenticated,
            message: "authenticate with Hello first".into(),
        }),
    )?;
    Ok(())
}

fn reject(
    v: &mut Vec<Vector>,
    name: &'static str,
    description: &'static str,
    bytes: Vec<u8>,
    error: Error,
) {
    v.push(Vector::Reject {
        name,
        description,
        bytes,
        error,
    });
}

fn rejects(v: &mut Vec<Vector>) -> Result<(), Error> {
    let ping = Message::Ping { nonce: 1 }.encode(1)?;
    let with = |offset: usize, bytes: &[u8]| {
        let mut out = ping.clone();
        out[offset..offset + bytes.len()].copy_from_slice(bytes);
        out
    };
    reject(
        v,
        "bad_magic",
        "magic is \"XL\"",
        with(0, b"XL"),
        Error::BadMagic(0x584c),
    );
    reject(
        v,
        "bad_version",
        "version 2",
        with(2, &[2]),
        Error::UnsupportedVersion(2),
    );
    reject(
        v,
        "unknown_type",
        "message type 0x07",
        with(3, &[7]),
        Error::UnknownMessageType(7),
    );
    reject(
        v,
        "unknown_flag",
        "flag bit 2 (FROM_ORIGIN) on a Ping: only a ReadRangeReply may carry it",
        with(4, &[0, 4]),
        Error::UnknownFlags(4),
    );
    reject(
        v,
        "undefined_flag",
        "flag bit 3 set: not defined in v1",
        with(4, &[0, 8]),
        Error::UnknownFlags(8),
    );
    reject(
        v,
        "reserved_not_zero",
        "reserved field 0x0001",
        with(6, &[0, 1]),
        Error::ReservedNotZero(1),
    );
    reject(
        v,
        "error_flag_on_ping",
        "ERROR flag on a Ping",
        with(4, &[0, 2]),
        Error::ErrorFlagMismatch(MessageType::Ping),
    );
    let mut too_large = ping[..HEADER_LEN].to_vec();
    too_large[12..16].copy_from_slice(&9u32.to_be_bytes());
    reject(
        v,
        "ping_too_large",
        "Ping header claiming 9 payload bytes (cap 8); rejected from the header alone",
        too_large,
        Error::PayloadTooLarge {
            message_type: MessageType::Ping,
            len: 9,
            max: 8,
        },
    );
    let mut huge = encode_read_range_reply_header(1, 1, false)?.to_vec();
    huge[12..16].copy_from_slice(&u32::MAX.to_be_bytes());
    reject(
        v,
        "read_range_reply_too_large",
        "ReadRangeReply header claiming 4 GiB - 1 bytes (cap 1 GiB)",
        huge,
        Error::PayloadTooLarge {
            message_type: MessageType::ReadRangeReply,
            len: u64::from(u32::MAX),
            max: crate::wire::MAX_READ_LEN,
        },
    );
    // A Stat whose path is "a/../b": valid framing, invalid id.
    let mut dot = Vec::new();
    dot.extend_from_slice(&[1, 0, 1, b'b', 0, 6]);
    dot.extend_from_slice(b"a/../b");
    dot.push(0);
    let mut stat = FrameHeader::new(MessageType::Stat, Flags::NONE, 1, dot.len() as u32)?
        .encode()
        .to_vec();
    stat.extend_from_slice(&dot);
    reject(
        v,
        "stat_dot_segment",
        "Stat of s3/b/a/../b: the path has a `..` segment",
        stat,
        Error::InvalidName {
            field: crate::error::NameField::Path,
            problem: crate::error::NameProblem::DotSegment,
        },
    );
    // A Stat of s3/b/k followed by one more payload byte (its length says so).
    let stat_and_a_byte = |max_age_ms, first_read| -> Result<Vec<u8>, Error> {
        let mut frame = Message::Stat(StatRequest {
            object: ObjectId::s3("b", "k")?,
            expected_version: None,
            max_age_ms,
            first_read,
        })
        .encode(1)?;
        let len = u32::from_be_bytes([frame[12], frame[13], frame[14], frame[15]]) + 1;
        frame[12..16].copy_from_slice(&len.to_be_bytes());
        frame.push(0);
        Ok(frame)
    };
    let first = FirstRead {
        block_size: 1 << 20,
        start: 0,
        end: 4096,
    };
    let trailing = stat_and_a_byte(Some(5000), Some(first))?;
    reject(
        v,
        "stat_trailing_byte",
        "Stat of s3/b/k, max age 5 s, first read [0, 4096), with one extra payload byte after the last field",
        trailing,
        Error::Malformed {
            message_type: MessageType::Stat,
            reason: "trailing bytes after the last field",
        },
    );
    let cut_first = stat_and_a_byte(Some(5000), None)?;
    reject(
        v,
        "stat_first_read_cut_short",
        "Stat of s3/b/k, max age 5 s, followed by one byte: a first read cut short",
        cut_first,
        Error::Malformed {
            message_type: MessageType::Stat,
            reason: "payload ends inside a field",
        },
    );
    let cut_age = stat_and_a_byte(None, None)?;
    reject(
        v,
        "stat_max_age_cut_short",
        "Stat of s3/b/k followed by one byte: a max age cut short",
        cut_age,
        Error::Malformed {
            message_type: MessageType::Stat,
            reason: "payload ends inside a field",
        },
    );
    let mut ack = Message::IngestAck(IngestAck { offset: 0, len: 0 }).encode(1)?;
    ack[15] = 11;
    ack.pop();
    reject(
        v,
        "ingest_ack_truncated",
        "IngestAck with 11 payload bytes: len field cut short",
        ack,
        Error::Malformed {
            message_type: MessageType::IngestAck,
            reason: "payload ends inside a field",
        },
    );
    let past = Message::ReadRange(ReadRangeRequest {
        block: s3_block(0, 1024)?,
        object_size: 1_000_000,
        offset: 1000,
        len: 24,
    })
    .encode(1)?;
    let mut past_block = past.clone();
    let last = past_block.len() - 1;
    past_block[last] = 25; // len 24 -> 25: crosses the block end
    reject(
        v,
        "read_range_past_block",
        "ReadRange of 25 bytes at offset 1000 of a 1024-byte block",
        past_block,
        Error::Malformed {
            message_type: MessageType::ReadRange,
            reason: "range reaches past the end of the block",
        },
    );
    Ok(())
}

fn bitmaps(v: &mut Vec<Vector>) -> Result<(), Error> {
    let mut ten = PresentBitmap::new(10)?;
    for page in [0, 3, 9] {
        ten.set(page)?;
    }
    v.push(Vector::Bitmap {
        name: "ten_pages",
        bitmap: ten,
    });
    v.push(Vector::Bitmap {
        name: "empty",
        bitmap: PresentBitmap::new(0)?,
    });
    let mut block = PresentBitmap::new(256)?;
    block.set_range(0..64)?;
    block.set_range(200..256)?;
    v.push(Vector::Bitmap {
        name: "default_block_256_pages",
        bitmap: block,
    });
    let mut big = PresentBitmap::new(1024)?;
    for page in (0..1024).step_by(3) {
        big.set(page)?;
    }
    v.push(Vector::Bitmap {
        name: "pages_1024_every_third",
        bitmap: big,
    });
    Ok(())
}

/// Renders vectors in the committed text format (described in the output's
/// header comment). Deterministic: the same vectors give the same text.
pub fn render(vectors: &[Vector]) -> String {
    let mut out = String::new();
    out.push_str(concat!(
        "# Talon conformance vectors: wire protocol v1, key paths, placement keys, bitmap encoding.\n",
        "# GENERATED, do not edit. Regenerate from the workspace root with:\n",
    ));
    let _ = writeln!(out, "#   {GENERATE_COMMAND}");
    out.push_str(concat!(
        "#\n",
        "# One vector per line, fields separated by one TAB; '#' lines are comments.\n",
        "#   frame   <name>  <hex: whole frame, 16-byte header + payload>\n",
        "#   header  <name>  <hex: a 16-byte header sent alone>\n",
        "#   reject  <name>  <hex: bytes a decoder must reject>\n",
        "#   key     <key path>  <backend: s3|az>  <names: bucket, path | account, container, path>\n",
        "#   block   <key path>  <version>  <block offset>  <block size>  <storage name: hex SHA-256>  <placement key: hex SHA-256, no version>\n",
        "#   bitmap  <name>  <page count>  <present pages, comma-separated, or ->  <hex: persistent encoding>\n",
        "#\n",
        "# Hello proofs: key = HMAC-SHA256(secret, \"talon cluster key v1\"); worker proof =\n",
        "# HMAC-SHA256(key, \"talon hello v1 worker\" || role || peer nonce || worker nonce); peer\n",
        "# proof = the same with the 21-byte label \"talon hello v1 peer\\0\\0\".\n",
    ));
    for vector in vectors {
        match vector {
            Vector::Frame {
                name,
                description,
                bytes,
                ..
            } => {
                let _ = writeln!(out, "# {name}: {description}");
                let _ = writeln!(out, "frame\t{name}\t{}", hex::encode(bytes));
            }
            Vector::Header {
                name,
                description,
                header,
            } => {
                let _ = writeln!(out, "# {name}: {description}");
                let _ = writeln!(out, "header\t{name}\t{}", hex::encode(header.encode()));
            }
            Vector::Reject {
                name,
                description,
                bytes,
                error,
            } => {
                let _ = writeln!(out, "# {name}: {description} -> {error}");
                let _ = writeln!(out, "reject\t{name}\t{}", hex::encode(bytes));
            }
            Vector::KeyPath { object } => {
                let _ = write!(out, "key\t{object}\t{}", object.backend());
                match object.namespace() {
                    Namespace::S3 { bucket } => {
                        let _ = write!(out, "\t{bucket}");
                    }
                    Namespace::Azure { account, container } => {
                        let _ = write!(out, "\t{account}\t{container}");
                    }
                }
                let _ = writeln!(out, "\t{}", object.path());
            }
            Vector::Placement { block } => {
                let _ = writeln!(
                    out,
                    "block\t{}\t{}\t{}\t{}\t{}\t{}",
                    block.object(),
                    block.version(),
                    block.block_offset(),
                    block.block_size(),
                    block.storage_name(),
                    hex::encode(block.placement_key())
                );
            }
            Vector::Bitmap { name, bitmap } => {
                let present: Vec<String> = (0..bitmap.pages())
                    .filter(|&p| bitmap.is_present(p).unwrap_or(false))
                    .map(|p| p.to_string())
                    .collect();
                let present = if present.is_empty() {
                    "-".to_owned()
                } else {
                    present.join(",")
                };
                let _ = writeln!(
                    out,
                    "bitmap\t{name}\t{}\t{present}\t{}",
                    bitmap.pages(),
                    hex::encode(bitmap.to_bytes())
                );
            }
        }
    }
    out
}
