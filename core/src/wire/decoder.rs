//! [`FrameDecoder`]: an incremental, sans-IO decoder for a stream of frames.

use super::message::MAX_INGEST_META_LEN;
use super::{FrameHeader, HEADER_LEN, IngestMeta, Message, MessageType};
use crate::error::Error;

/// A complete, decoded control frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The frame's header.
    pub header: FrameHeader,
    /// The decoded payload.
    pub message: Message,
}

/// What kind of bulk frame a [`BulkStart`] opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BulkKind {
    /// A ReadRangeReply: the data is the bytes read.
    ReadRangeReply,
    /// An Ingest request: the data is to be written where `IngestMeta` says.
    /// Its range has been validated against `len`.
    Ingest(IngestMeta),
}

/// The start of a bulk frame, whose data follows as [`Event::BulkData`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkStart {
    /// The frame's header.
    pub header: FrameHeader,
    /// ReadRangeReply or Ingest, with the Ingest's metadata.
    pub kind: BulkKind,
    /// Data bytes that follow, in bytes.
    pub len: u32,
}

/// One step of decoding, from [`FrameDecoder::decode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// A complete control frame (everything but ReadRangeReply and Ingest).
    Frame(Frame),
    /// A ReadRangeReply or Ingest begins; its `len` data bytes follow as
    /// [`BulkData`](Self::BulkData) events, then [`BulkEnd`](Self::BulkEnd).
    BulkStart(BulkStart),
    /// The next data bytes of the current bulk frame, borrowed from the
    /// input (never copied).
    BulkData(&'a [u8]),
    /// The current bulk frame's data is complete.
    BulkEnd,
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Collecting a 16-byte header.
    Header,
    /// Collecting a control payload.
    Control(FrameHeader),
    /// Collecting an Ingest's `u16` metadata length.
    IngestMetaLen(FrameHeader),
    /// Collecting an Ingest's metadata.
    IngestMeta(FrameHeader, u16),
    /// Passing through bulk data.
    Bulk { remaining: u32 },
    /// An error was returned; the stream is out of sync.
    Failed,
}

/// Decodes a byte stream of frames fed in arbitrary chunks.
///
/// Control frames come out whole as [`Event::Frame`]. Bulk frames
/// (ReadRangeReply, Ingest) are streamed: [`Event::BulkStart`], then the data
/// as [`Event::BulkData`] slices of the caller's input, then
/// [`Event::BulkEnd`], so memory stays bounded whatever the read size.
///
/// The decoder buffers only a partial header or control payload, so it never
/// holds more than [`MAX_CONTROL_PAYLOAD`](super::MAX_CONTROL_PAYLOAD) bytes,
/// and checks each header's payload cap before buffering its payload. It
/// never panics. After returning an error it stays failed
/// ([`Error::DecoderFailed`]): the connection must be closed.
///
/// ```
/// use talon_core::wire::{Event, FrameDecoder, Message};
///
/// let bytes = Message::Ping { nonce: 7 }.encode(1)?;
/// let mut decoder = FrameDecoder::new();
/// let mut input = &bytes[..];
/// let mut pings = 0;
/// while let Some(event) = decoder.decode(&mut input)? {
///     if let Event::Frame(frame) = event {
///         assert_eq!(frame.message, Message::Ping { nonce: 7 });
///         pings += 1;
///     }
/// }
/// assert_eq!(pings, 1);
/// assert!(input.is_empty() && decoder.is_idle());
/// # Ok::<(), talon_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    state: State,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    /// A decoder expecting a frame header.
    pub fn new() -> Self {
        Self {
            buf: Vec::new(),
            state: State::Header,
        }
    }

    /// Consumes bytes from the front of `input` and returns the next event,
    /// or `Ok(None)` once `input` is exhausted without completing one (the
    /// partial frame is kept for the next call). Call it in a loop until it
    /// returns `None`, then read more.
    ///
    /// Errors with any header or payload decode error; afterwards every call
    /// returns [`Error::DecoderFailed`].
    pub fn decode<'a>(&mut self, input: &mut &'a [u8]) -> Result<Option<Event<'a>>, Error> {
        let result = self.step(input);
        if result.is_err() {
            self.state = State::Failed;
            self.buf = Vec::new();
        }
        result
    }

    /// Whether the decoder is between frames with nothing buffered, i.e.
    /// whether the peer closing the stream now would be a clean end rather
    /// than a truncated frame.
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Header) && self.buf.is_empty()
    }

    /// Data bytes of the current bulk frame not yet passed through, or `None`
    /// outside a bulk frame's data.
    pub fn bulk_remaining(&self) -> Option<u32> {
        match self.state {
            State::Bulk { remaining } => Some(remaining),
            _ => None,
        }
    }

    /// Counts `n` data bytes of the current bulk frame as consumed by the caller
    /// outside the decoder (moved from the socket to a file with `splice`, say), so
    /// that the next [`decode`](Self::decode) continues after them. Returns `false`
    /// and changes nothing when not inside a bulk frame's data or when `n` exceeds
    /// what remains.
    pub fn skip_bulk(&mut self, n: u32) -> bool {
        match self.state {
            State::Bulk { remaining } if n <= remaining => {
                self.state = State::Bulk {
                    remaining: remaining - n,
                };
                true
            }
            _ => false,
        }
    }

    fn step<'a>(&mut self, input: &mut &'a [u8]) -> Result<Option<Event<'a>>, Error> {
        loop {
            match self.state {
                State::Failed => return Err(Error::DecoderFailed),
                State::Header => {
                    let Some(bytes) = self.fill(HEADER_LEN, input) else {
                        return Ok(None);
                    };
                    let mut raw = [0u8; HEADER_LEN];
                    raw.copy_from_slice(bytes);
                    self.buf.clear();
                    let header = FrameHeader::decode(&raw)?;
                    match header.message_type() {
                        MessageType::ReadRangeReply => {
                            let len = header.payload_len();
                            self.state = State::Bulk { remaining: len };
                            return Ok(Some(Event::BulkStart(BulkStart {
                                header,
                                kind: BulkKind::ReadRangeReply,
                                len,
                            })));
                        }
                        MessageType::Ingest => {
                            if header.payload_len() < 2 {
                                return Err(Error::Malformed {
                                    message_type: MessageType::Ingest,
                                    reason: "payload ends inside a field",
                                });
                            }
                            self.state = State::IngestMetaLen(header);
                        }
                        _ => self.state = State::Control(header),
                    }
                }
                State::Control(header) => {
                    let Some(payload) = self.fill(header.payload_len() as usize, input) else {
                        return Ok(None);
                    };
                    let message = Message::decode(&header, payload)?;
                    self.buf.clear();
                    self.state = State::Header;
                    return Ok(Some(Event::Frame(Frame { header, message })));
                }
                State::IngestMetaLen(header) => {
                    let Some(bytes) = self.fill(2, input) else {
                        return Ok(None);
                    };
                    let meta_len = u16::from_be_bytes([bytes[0], bytes[1]]);
                    self.buf.clear();
                    if u32::from(meta_len) > MAX_INGEST_META_LEN {
                        return Err(Error::Malformed {
                            message_type: MessageType::Ingest,
                            reason: "ingest metadata longer than 8190 bytes",
                        });
                    }
                    if u32::from(meta_len) > header.payload_len() - 2 {
                        return Err(Error::Malformed {
                            message_type: MessageType::Ingest,
                            reason: "payload ends inside a field",
                        });
                    }
                    self.state = State::IngestMeta(header, meta_len);
                }
                State::IngestMeta(header, meta_len) => {
                    let Some(bytes) = self.fill(usize::from(meta_len), input) else {
                        return Ok(None);
                    };
                    let meta = IngestMeta::decode(bytes)?;
                    self.buf.clear();
                    let len = header.payload_len() - 2 - u32::from(meta_len);
                    meta.validate(u64::from(len))?;
                    self.state = State::Bulk { remaining: len };
                    return Ok(Some(Event::BulkStart(BulkStart {
                        header,
                        kind: BulkKind::Ingest(meta),
                        len,
                    })));
                }
                State::Bulk { remaining: 0 } => {
                    self.state = State::Header;
                    return Ok(Some(Event::BulkEnd));
                }
                State::Bulk { remaining } => {
                    if input.is_empty() {
                        return Ok(None);
                    }
                    let n = input.len().min(remaining as usize);
                    let (data, rest) = input.split_at(n);
                    *input = rest;
                    // n <= remaining, which is a u32.
                    self.state = State::Bulk {
                        remaining: remaining - n as u32,
                    };
                    return Ok(Some(Event::BulkData(data)));
                }
            }
        }
    }

    /// Moves bytes from `input` into the buffer until it holds `want` bytes;
    /// returns them once it does. Copies no more than needed, so the buffer
    /// never exceeds the largest `want` (a header or a capped payload).
    fn fill(&mut self, want: usize, input: &mut &[u8]) -> Option<&[u8]> {
        let need = want.saturating_sub(self.buf.len());
        let n = need.min(input.len());
        let (head, rest) = input.split_at(n);
        self.buf.extend_from_slice(head);
        *input = rest;
        (self.buf.len() == want).then_some(&self.buf[..])
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::identity::{BlockId, ObjectId, ObjectVersion};
    use crate::wire::{ErrorCode, ErrorReply, IngestRequest, MAX_CONTROL_PAYLOAD};

    fn ingest() -> IngestRequest {
        IngestRequest {
            meta: IngestMeta {
                block: BlockId::new(
                    ObjectId::azure("acct", "cont", "blob").unwrap(),
                    ObjectVersion::new("0x8D").unwrap(),
                    4096,
                    4096,
                )
                .unwrap(),
                object_size: 10_000,
                offset: 100,
            },
            data: (0..=255).cycle().take(3000).collect(),
        }
    }

    /// Feeds `bytes` in chunks of `chunk` bytes and reassembles messages.
    fn decode_all(bytes: &[u8], chunk: usize) -> Vec<(u32, Message)> {
        let mut decoder = FrameDecoder::new();
        let mut out = Vec::new();
        let mut bulk: Option<(BulkStart, Vec<u8>)> = None;
        for piece in bytes.chunks(chunk) {
            let mut input = piece;
            while let Some(event) = decoder.decode(&mut input).unwrap() {
                match event {
                    Event::Frame(f) => out.push((f.header.request_id(), f.message)),
                    Event::BulkStart(start) => bulk = Some((start, Vec::new())),
                    Event::BulkData(d) => bulk.as_mut().unwrap().1.extend_from_slice(d),
                    Event::BulkEnd => {
                        let (start, data) = bulk.take().unwrap();
                        assert_eq!(data.len(), start.len as usize);
                        let msg = match start.kind {
                            BulkKind::ReadRangeReply => Message::ReadRangeReply(data),
                            BulkKind::Ingest(meta) => Message::Ingest(IngestRequest { meta, data }),
                        };
                        out.push((start.header.request_id(), msg));
                    }
                }
            }
            assert!(input.is_empty());
        }
        assert!(decoder.is_idle());
        out
    }

    #[test]
    fn reassembles_any_chunking() {
        let msgs = vec![
            (1, Message::Ping { nonce: 1 }),
            (2, Message::ReadRangeReply(vec![7; 1000])),
            (3, Message::ReadRangeReply(Vec::new())),
            (4, Message::Ingest(ingest())),
            (
                5,
                Message::Error(ErrorReply::new(ErrorCode::Timeout, "slow")),
            ),
        ];
        let mut bytes = Vec::new();
        for (id, m) in &msgs {
            bytes.extend(m.encode(*id).unwrap());
        }
        for chunk in [1, 2, 3, 15, 16, 17, 100, bytes.len()] {
            assert_eq!(decode_all(&bytes, chunk), msgs, "chunk {chunk}");
        }
    }

    #[test]
    fn bulk_bytes_moved_outside_the_decoder_are_skipped() {
        let mut bytes = Message::Ingest(ingest()).encode(4).unwrap();
        let ping = Message::Ping { nonce: 8 }.encode(5).unwrap();
        bytes.extend_from_slice(&ping);
        let mut decoder = FrameDecoder::new();
        assert_eq!(decoder.bulk_remaining(), None);
        assert!(!decoder.skip_bulk(0), "nothing to skip between frames");
        // The header and metadata, then stop: the data "goes elsewhere".
        let data_len = ingest().data.len() as u32;
        let meta_end = bytes.len() - ping.len() - data_len as usize;
        let mut input = &bytes[..meta_end];
        assert!(matches!(
            decoder.decode(&mut input).unwrap(),
            Some(Event::BulkStart(_))
        ));
        assert_eq!(decoder.bulk_remaining(), Some(data_len));
        assert!(!decoder.skip_bulk(data_len + 1), "more than remains");
        assert_eq!(decoder.bulk_remaining(), Some(data_len));
        assert!(decoder.skip_bulk(data_len));
        let mut rest = &bytes[meta_end + data_len as usize..];
        assert_eq!(decoder.decode(&mut rest).unwrap(), Some(Event::BulkEnd));
        assert!(matches!(
            decoder.decode(&mut rest).unwrap(),
            Some(Event::Frame(Frame {
                message: Message::Ping { nonce: 8 },
                ..
            }))
        ));
        assert!(decoder.is_idle());
    }

    #[test]
    fn bulk_data_is_borrowed_from_input() {
        let bytes = Message::ReadRangeReply(vec![1, 2, 3]).encode(9).unwrap();
        let mut decoder = FrameDecoder::new();
        let mut input = &bytes[..];
        let start = decoder.decode(&mut input).unwrap();
        assert!(matches!(
            start,
            Some(Event::BulkStart(BulkStart { len: 3, .. }))
        ));
        let Some(Event::BulkData(data)) = decoder.decode(&mut input).unwrap() else {
            panic!("expected data");
        };
        assert_eq!(data, &[1, 2, 3]);
        assert_eq!(data.as_ptr(), bytes[16..].as_ptr());
        assert!(!decoder.is_idle());
        assert_eq!(decoder.decode(&mut input), Ok(Some(Event::BulkEnd)));
        assert_eq!(decoder.decode(&mut input), Ok(None));
        assert!(decoder.is_idle());
    }

    #[test]
    fn partial_frames_are_not_idle() {
        let bytes = Message::Ping { nonce: 1 }.encode(1).unwrap();
        let mut decoder = FrameDecoder::new();
        let mut input = &bytes[..20];
        assert_eq!(decoder.decode(&mut input), Ok(None));
        assert!(!decoder.is_idle());
        let mut rest = &bytes[20..];
        assert!(matches!(
            decoder.decode(&mut rest),
            Ok(Some(Event::Frame(_)))
        ));
        assert!(decoder.is_idle());
    }

    #[test]
    fn errors_poison_the_decoder() {
        let mut bytes = Message::Ping { nonce: 1 }.encode(1).unwrap();
        bytes[0] = b'X';
        let mut decoder = FrameDecoder::new();
        let mut input = &bytes[..];
        assert!(matches!(
            decoder.decode(&mut input),
            Err(Error::BadMagic(_))
        ));
        let good = Message::Ping { nonce: 1 }.encode(1).unwrap();
        let mut input = &good[..];
        assert_eq!(decoder.decode(&mut input), Err(Error::DecoderFailed));
    }

    #[test]
    fn oversized_payload_is_rejected_before_buffering() {
        let header = FrameHeader::new(MessageType::Stat, super::super::Flags::NONE, 1, 100)
            .unwrap()
            .encode();
        let mut bytes = header.to_vec();
        bytes[12..16].copy_from_slice(&(MAX_CONTROL_PAYLOAD + 1).to_be_bytes());
        let mut decoder = FrameDecoder::new();
        let mut input = &bytes[..];
        assert!(matches!(
            decoder.decode(&mut input),
            Err(Error::PayloadTooLarge { .. })
        ));
    }

    #[test]
    fn ingest_with_bad_meta_length_is_rejected() {
        let mut bytes = Message::Ingest(ingest()).encode(1).unwrap();
        // Claim more metadata than the payload holds.
        let payload_len = u32::from_be_bytes(bytes[12..16].try_into().unwrap());
        bytes[12..16].copy_from_slice(&10u32.to_be_bytes());
        let mut decoder = FrameDecoder::new();
        let mut input = &bytes[..];
        assert!(matches!(
            decoder.decode(&mut input),
            Err(Error::Malformed { .. })
        ));
        assert!(payload_len > 10);
    }
}
