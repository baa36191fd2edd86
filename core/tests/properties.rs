//! Property tests over the public API: round trips, range-splitting
//! invariants, a model check of the bitmap, and "decoding arbitrary bytes
//! returns a value or an error, never panics" for every decoder.

#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use talon_core::bitmap::{MAX_PAGES, encoded_len};
use talon_core::wire::{
    BulkKind, ErrorReply, Event, FirstRead, Flags, FrameDecoder, FrameHeader, HEADER_LEN,
    HeaderSet, IngestAck, IngestMeta, IngestRequest, MAX_READ_LEN, MessageType, ObjectHeaders,
    ReadRangeRequest, StatReply, StatRequest,
};
use talon_core::{
    BlockGeometry, BlockId, ErrorCode, Message, ObjectId, ObjectVersion, PresentBitmap,
};

// ---------- strategies ----------

fn namespace() -> impl Strategy<Value = String> {
    "[a-z0-9.-]{1,12}"
}

fn path() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 _.=é-]{1,8}(/[a-zA-Z0-9 _.=é-]{1,8}){0,4}".prop_filter("no dot segments", |p| {
        p.split('/').all(|s| s != "." && s != "..")
    })
}

fn object() -> impl Strategy<Value = ObjectId> {
    prop_oneof![
        (namespace(), path()).prop_map(|(b, p)| ObjectId::s3(b, p).unwrap()),
        (namespace(), namespace(), path()).prop_map(|(a, c, p)| ObjectId::azure(a, c, p).unwrap()),
    ]
}

fn version() -> impl Strategy<Value = ObjectVersion> {
    "[ -~]{1,40}".prop_map(|v| ObjectVersion::new(v).unwrap())
}

/// A block of size 2^exp at an aligned offset anywhere in u64.
fn block(min_exp: u32) -> impl Strategy<Value = BlockId> {
    (object(), version(), min_exp..=40u32, any::<u64>()).prop_map(|(o, v, exp, raw)| {
        let size = 1u64 << exp;
        BlockId::new(o, v, raw & !(size - 1), size).unwrap()
    })
}

/// `(offset, len)` within `block` whose object range does not end at 2^64,
/// and an object size that contains it.
fn range_in(block: &BlockId, max_len: u64, raw: (u64, u64, u64)) -> (u64, u64, u64) {
    let size = block.block_size();
    let offset = raw.0 & (size - 1);
    let room = (size - offset).min(max_len);
    let mut len = raw.1 % (room + 1);
    let end = loop {
        match (block.block_offset() + offset).checked_add(len) {
            Some(end) => break end,
            None => len -= 1,
        }
    };
    (offset, len, end.saturating_add(raw.2 % 1_000_000))
}

fn read_range() -> impl Strategy<Value = ReadRangeRequest> {
    (block(0), any::<(u64, u64, u64)>()).prop_map(|(block, raw)| {
        let (offset, len, object_size) = range_in(&block, u64::from(MAX_READ_LEN), raw);
        ReadRangeRequest {
            block,
            object_size,
            offset,
            len: len as u32,
        }
    })
}

fn ingest() -> impl Strategy<Value = IngestRequest> {
    (
        block(0),
        any::<(u64, u64, u64)>(),
        prop::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(block, raw, bytes)| {
            let (offset, len, object_size) = range_in(&block, bytes.len() as u64, raw);
            IngestRequest {
                meta: IngestMeta {
                    block,
                    object_size,
                    offset,
                },
                data: bytes[..len as usize].to_vec(),
            }
        })
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        any::<u64>().prop_map(|nonce| Message::Ping { nonce }),
        any::<u64>().prop_map(|nonce| Message::Pong { nonce }),
        (
            object(),
            prop::option::of(version()),
            prop::option::of(any::<u32>()),
            prop::option::of((12u32..40, any::<u64>(), 1u64..=u64::from(MAX_READ_LEN)))
        )
            .prop_map(|(object, expected_version, max_age_ms, first)| {
                // A first read travels only with a max age, within the first block.
                let first_read = first
                    .filter(|_| max_age_ms.is_some())
                    .map(|(exp, start, len)| {
                        let block_size = 1u64 << exp;
                        let start = start % block_size;
                        FirstRead {
                            block_size,
                            start,
                            end: start.saturating_add(len).min(block_size),
                        }
                    });
                Message::Stat(StatRequest {
                    object,
                    expected_version,
                    max_age_ms,
                    first_read,
                })
            }),
        (
            any::<u64>(),
            version(),
            any::<i64>(),
            "[ -~\t]{0,40}|\\PC{0,20}",
            prop::option::of((
                "[A-Za-z0-9+/=]{0,24}",
                "|(crc32|sha256):[A-Za-z0-9+/=]{1,44}",
                prop::collection::vec("[ -~\t]{0,12}|\\PC{0,6}", 4),
                prop::collection::btree_map("[a-z0-9_.-]{1,12}", "[ -~\t]{0,20}|\\PC{0,8}", 0..5),
            )),
            prop::option::of(any::<u32>()),
        )
            .prop_map(
                |(size, version, last_modified_ms, content_type, headers, age_ms)| {
                    Message::StatReply(StatReply {
                        size,
                        version,
                        last_modified_ms,
                        content_type,
                        headers: match headers {
                            Some((content_md5, checksum, content, metadata)) => {
                                ObjectHeaders::from(HeaderSet {
                                    content_md5,
                                    checksum,
                                    content_encoding: content[0].clone(),
                                    content_language: content[1].clone(),
                                    content_disposition: content[2].clone(),
                                    cache_control: content[3].clone(),
                                    user_metadata: metadata.into_iter().collect(),
                                })
                            }
                            None => ObjectHeaders::AskOrigin,
                        },
                        age_ms,
                    })
                }
            ),
        read_range().prop_map(Message::ReadRange),
        prop::collection::vec(any::<u8>(), 0..300).prop_map(Message::ReadRangeReply),
        ingest().prop_map(Message::Ingest),
        (any::<u64>(), any::<u32>())
            .prop_map(|(offset, len)| Message::IngestAck(IngestAck { offset, len })),
        (any::<u16>(), ".{0,60}").prop_map(|(code, message)| {
            Message::Error(ErrorReply {
                code: ErrorCode::from_u16(code),
                message,
            })
        }),
    ]
}

fn flags() -> impl Strategy<Value = Flags> {
    prop_oneof![Just(Flags::NONE), Just(Flags::END_OF_STREAM)]
}

/// Encoded frames mutated: byte overwrites and an optional truncation, so
/// decoders see mostly-valid input and reach their deeper checks.
fn mutated_frames() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec((message(), flags()), 1..4),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        any::<Option<prop::sample::Index>>(),
    )
        .prop_map(|(msgs, edits, cut)| {
            let mut bytes = Vec::new();
            for (i, (m, f)) in msgs.iter().enumerate() {
                m.encode_into(i as u32, *f, &mut bytes).unwrap();
            }
            for (at, b) in edits {
                let i = at.index(bytes.len());
                bytes[i] = b;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            bytes
        })
}

/// Feeds `bytes` to a fresh decoder in the given chunk sizes, reassembling
/// bulk frames. Stops at the first error.
fn feed(
    bytes: &[u8],
    chunks: &[usize],
) -> Result<(Vec<(FrameHeader, Message)>, bool), talon_core::Error> {
    let mut decoder = FrameDecoder::new();
    let mut out = Vec::new();
    let mut bulk: Option<(talon_core::wire::BulkStart, Vec<u8>)> = None;
    let mut rest = bytes;
    let mut sizes = chunks.iter().copied().cycle();
    while !rest.is_empty() {
        let n = sizes.next().unwrap_or(1).clamp(1, rest.len());
        let (mut input, tail) = rest.split_at(n);
        rest = tail;
        while let Some(event) = decoder.decode(&mut input)? {
            match event {
                Event::Frame(f) => out.push((f.header, f.message)),
                Event::BulkStart(start) => {
                    assert!(bulk.is_none());
                    bulk = Some((start, Vec::new()));
                }
                Event::BulkData(d) => {
                    let (start, data) = bulk.as_mut().unwrap();
                    data.extend_from_slice(d);
                    assert!(data.len() <= start.len as usize);
                }
                Event::BulkEnd => {
                    let (start, data) = bulk.take().unwrap();
                    assert_eq!(data.len(), start.len as usize);
                    let msg = match start.kind {
                        BulkKind::ReadRangeReply => Message::ReadRangeReply(data),
                        BulkKind::Ingest(meta) => Message::Ingest(IngestRequest { meta, data }),
                    };
                    out.push((start.header, msg));
                }
            }
        }
        assert!(input.is_empty(), "decoder returned None with input left");
    }
    Ok((out, decoder.is_idle()))
}

// ---------- identity ----------

proptest! {
    #[test]
    fn key_path_round_trips(id in object()) {
        let key = id.key_path();
        prop_assert_eq!(&key, &id.to_string());
        prop_assert_eq!(ObjectId::from_key_path(&key).unwrap(), id);
    }

    #[test]
    fn accepted_key_paths_are_canonical(input in "(s3|az|gs)?(/[a-z./]{0,6}){0,5}|.{0,30}") {
        // Never panics; whatever parses prints back exactly as given.
        if let Ok(id) = ObjectId::from_key_path(&input) {
            prop_assert_eq!(id.key_path(), input);
        }
    }

    #[test]
    fn placement_keys_separate_blocks_that_look_alike(
        names in prop::collection::vec("[ab/]{0,3}", 4),
        versions in prop::collection::vec("[ab]{1,2}", 2),
        offsets in prop::collection::vec(0u64..3, 2),
    ) {
        // A tiny alphabet makes concatenation-ambiguous pairs likely.
        let make = |i: usize| -> Option<BlockId> {
            let object = if i == 0 {
                ObjectId::s3(names[0].clone(), names[1].clone()).ok()?
            } else {
                ObjectId::azure(names[0].clone(), names[2].clone(), names[3].clone()).ok()
                    .or_else(|| ObjectId::s3(names[2].clone(), names[3].clone()).ok())?
            };
            BlockId::new(object, ObjectVersion::new(versions[i].clone()).ok()?, offsets[i] * 4, 4).ok()
        };
        if let (Some(a), Some(b)) = (make(0), make(1)) {
            prop_assert_eq!(a == b, a.storage_name() == b.storage_name());
            // Placement leaves the version out: equal keys exactly for the same
            // block of the same object, whatever the versions.
            let same_place = a.object() == b.object()
                && a.block_offset() == b.block_offset()
                && a.block_size() == b.block_size();
            prop_assert_eq!(same_place, a.placement_key() == b.placement_key());
            prop_assert_eq!(a.storage_name().len(), 64);
        }
    }
}

// ---------- block math ----------

fn geometry() -> impl Strategy<Value = BlockGeometry> {
    (0u32..=62, 0u32..=20).prop_map(|(block_exp, pages_exp)| {
        let page_exp = block_exp.saturating_sub(pages_exp);
        BlockGeometry::new(1 << block_exp, 1 << page_exp).unwrap()
    })
}

fn small_geometry() -> impl Strategy<Value = BlockGeometry> {
    (0u32..=12, 0u32..=6).prop_map(|(block_exp, pages_exp)| {
        BlockGeometry::new(1 << block_exp, 1 << block_exp.saturating_sub(pages_exp)).unwrap()
    })
}

/// An object size (often near u64::MAX) and a range within it.
fn sized_range() -> impl Strategy<Value = (u64, u64, u64)> {
    prop_oneof![any::<u64>(), u64::MAX - 100_000..=u64::MAX, 0u64..100_000]
        .prop_flat_map(|size| (Just(size), 0..=size))
        .prop_flat_map(|(size, start)| {
            // Keep the number of spans small for tiny blocks.
            let max_end = start.saturating_add(1 << 12).min(size);
            (Just(size), Just(start), start..=max_end)
        })
}

proptest! {
    #[test]
    fn split_covers_exactly_and_respects_blocks_and_pages(
        geo in geometry(),
        (size, start, end) in sized_range(),
    ) {
        let spans = geo.split_range(start..end, size).unwrap();
        let hint = spans.size_hint();
        let spans: Vec<_> = spans.collect();
        prop_assert_eq!(hint, (spans.len(), Some(spans.len())));
        let mut next = start;
        for s in &spans {
            prop_assert!(s.len > 0);
            prop_assert_eq!(s.block_offset % geo.block_size(), 0);
            prop_assert!(s.offset_in_block + s.len <= geo.block_size());
            prop_assert_eq!(s.object_range().start, next);
            next = s.object_range().end;
            let ps = geo.page_size();
            prop_assert_eq!(u64::from(s.pages.start), s.offset_in_block / ps);
            prop_assert_eq!(u64::from(s.pages.end), (s.offset_in_block + s.len).div_ceil(ps));
            prop_assert!(s.pages.end <= geo.page_count(s.block_offset, size).unwrap());
            prop_assert_eq!(geo.page_range(s.offset_in_block, s.len).unwrap(), s.pages.clone());
            // The span's bytes lie within its pages' bytes.
            let block_len = geo.block_len(s.block_offset, size).unwrap();
            let bytes = geo.page_bytes(s.pages.clone(), block_len);
            prop_assert!(bytes.start <= s.offset_in_block && s.block_range().end <= bytes.end);
        }
        prop_assert_eq!(next, end);
    }

    #[test]
    fn out_of_bounds_ranges_are_rejected(geo in geometry(), size in any::<u64>(), a in any::<u64>(), b in any::<u64>()) {
        let res = geo.split_range(a..b, size);
        prop_assert_eq!(res.is_ok(), a <= b && b <= size);
    }

    #[test]
    fn blocks_partition_small_objects(geo in small_geometry(), size in 0u64..20_000) {
        let mut total = 0;
        for i in 0..geo.block_count(size) {
            let off = i * geo.block_size();
            let len = geo.block_len(off, size).unwrap();
            prop_assert!(len > 0);
            prop_assert_eq!(u64::from(geo.page_count(off, size).unwrap()), len.div_ceil(geo.page_size()));
            total += len;
        }
        prop_assert_eq!(total, size);
        let past = geo.block_count(size) * geo.block_size();
        prop_assert_eq!(geo.page_count(past, size).unwrap(), 0);
    }
}

// ---------- bitmap ----------

#[derive(Debug, Clone)]
enum Op {
    Set(u32),
    Clear(u32),
    SetRange(u32, u32),
    ClearRange(u32, u32),
}

fn ops(pages: u32) -> impl Strategy<Value = Vec<Op>> {
    let p = pages + 2; // sometimes out of range
    prop::collection::vec(
        prop_oneof![
            (0..p).prop_map(Op::Set),
            (0..p).prop_map(Op::Clear),
            (0..p, 0..p).prop_map(|(a, b)| Op::SetRange(a, b)),
            (0..p, 0..p).prop_map(|(a, b)| Op::ClearRange(a, b)),
        ],
        0..40,
    )
}

proptest! {
    #[test]
    fn bitmap_matches_a_model(
        (pages, ops) in (0u32..300).prop_flat_map(|n| (Just(n), ops(n))),
        queries in prop::collection::vec((0u32..310, 0u32..310), 10),
    ) {
        let mut bitmap = PresentBitmap::new(pages).unwrap();
        let mut model = vec![false; pages as usize];
        for op in ops {
            let (range, value) = match op {
                Op::Set(p) => (p..p + 1, true),
                Op::Clear(p) => (p..p + 1, false),
                Op::SetRange(a, b) => (a..b, true),
                Op::ClearRange(a, b) => (a..b, false),
            };
            let valid = range.start <= range.end && range.end <= pages;
            let res = if value { bitmap.set_range(range.clone()) } else { bitmap.clear_range(range.clone()) };
            prop_assert_eq!(res.is_ok(), valid);
            if valid {
                model[range.start as usize..range.end as usize].fill(value);
            }
        }
        prop_assert_eq!(bitmap.count_present() as usize, model.iter().filter(|b| **b).count());
        prop_assert_eq!(bitmap.is_complete(), model.iter().all(|b| *b));
        for p in 0..pages {
            prop_assert_eq!(bitmap.is_present(p).unwrap(), model[p as usize]);
        }
        for (a, b) in queries {
            let expected = (a <= b && b <= pages).then(|| model[a as usize..b as usize].iter().all(|x| *x));
            prop_assert_eq!(bitmap.all_present(a..b).ok(), expected);
            // first_absent_run from `a`: first absent page, then maximal.
            let first = (a..pages).find(|&p| !model[p as usize]);
            let expected_run = first.map(|s| {
                let e = (s..pages).find(|&p| model[p as usize]).unwrap_or(pages);
                s..e
            });
            prop_assert_eq!(bitmap.first_absent_run(a), expected_run);
        }
        let bytes = bitmap.to_bytes();
        prop_assert_eq!(bytes.len(), encoded_len(pages));
        prop_assert_eq!(PresentBitmap::from_bytes(pages, &bytes).unwrap(), bitmap);
    }

    #[test]
    fn bitmap_decode_of_arbitrary_bytes_is_canonical(bytes in prop::collection::vec(any::<u8>(), 0..80), pages in prop::option::of(0u32..600)) {
        // Often a page count that matches the length, so the body checks run.
        let pages = pages.unwrap_or((bytes.len() * 8) as u32);
        if let Ok(bitmap) = PresentBitmap::from_bytes(pages, &bytes) {
            prop_assert!(bitmap.pages() <= MAX_PAGES);
            prop_assert_eq!(bitmap.to_bytes(), bytes);
        }
    }
}

// ---------- wire ----------

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_message_round_trips(msg in message(), request_id in any::<u32>(), flags in flags()) {
        let mut bytes = Vec::new();
        msg.encode_into(request_id, flags, &mut bytes).unwrap();
        let header = FrameHeader::decode(bytes[..HEADER_LEN].try_into().unwrap()).unwrap();
        prop_assert_eq!(header.request_id(), request_id);
        prop_assert_eq!(header.message_type(), msg.message_type());
        prop_assert_eq!(header.is_end_of_stream(), flags.contains(Flags::END_OF_STREAM));
        prop_assert_eq!(header.flags().contains(Flags::ERROR), matches!(msg, Message::Error(_)));
        prop_assert_eq!(header.payload_len() as usize, bytes.len() - HEADER_LEN);
        prop_assert_eq!(Message::decode(&header, &bytes[HEADER_LEN..]).unwrap(), msg);
    }

    #[test]
    fn frame_decoder_reassembles_any_chunking(
        msgs in prop::collection::vec((message(), flags()), 0..6),
        chunks in prop::collection::vec(1usize..40, 1..8),
    ) {
        let mut bytes = Vec::new();
        for (i, (m, f)) in msgs.iter().enumerate() {
            m.encode_into(i as u32, *f, &mut bytes).unwrap();
        }
        let (decoded, idle) = feed(&bytes, &chunks).unwrap();
        prop_assert!(idle);
        prop_assert_eq!(decoded.len(), msgs.len());
        for (i, ((header, m), (expected, f))) in decoded.iter().zip(&msgs).enumerate() {
            prop_assert_eq!(header.request_id(), i as u32);
            prop_assert_eq!(header.is_end_of_stream(), f.contains(Flags::END_OF_STREAM));
            prop_assert_eq!(m, expected);
        }
    }

    #[test]
    fn header_decode_never_panics_and_is_canonical(raw in any::<[u8; 16]>(), valid_prefix in any::<bool>()) {
        let mut raw = raw;
        if valid_prefix {
            raw[..3].copy_from_slice(&[0x54, 0x4c, 1]);
        }
        if let Ok(header) = FrameHeader::decode(&raw) {
            prop_assert_eq!(header.encode(), raw);
            prop_assert!(header.payload_len() <= header.message_type().max_payload_len());
        }
    }

    #[test]
    fn message_decode_never_panics_and_is_canonical(
        ty in prop::sample::select(MessageType::ALL.to_vec()),
        payload in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..20),
            prop::collection::vec(any::<u8>(), 0..200),
        ],
        eos in any::<bool>(),
    ) {
        let flags = if ty == MessageType::Error { Flags::ERROR } else { Flags::NONE };
        let flags = if eos { flags | Flags::END_OF_STREAM } else { flags };
        let Ok(header) = FrameHeader::new(ty, flags, 3, payload.len() as u32) else {
            return Ok(()); // over the cap: rejected before the payload
        };
        if let Ok(msg) = Message::decode(&header, &payload) {
            let mut again = Vec::new();
            msg.encode_into(3, header.flags(), &mut again).unwrap();
            prop_assert_eq!(&again[..HEADER_LEN], &header.encode()[..]);
            prop_assert_eq!(&again[HEADER_LEN..], &payload[..]);
        }
    }

    #[test]
    fn mutated_frames_decode_to_values_or_errors(bytes in mutated_frames(), chunks in prop::collection::vec(1usize..50, 1..5)) {
        // Whole-frame decode of the first frame.
        if bytes.len() >= HEADER_LEN
            && let Ok(header) = FrameHeader::decode(bytes[..HEADER_LEN].try_into().unwrap())
        {
            let end = (HEADER_LEN + header.payload_len() as usize).min(bytes.len());
            let _ = Message::decode(&header, &bytes[HEADER_LEN..end]);
        }
        // Streaming decode: frames decoded are canonical re-encodings.
        if let Ok((frames, _)) = feed(&bytes, &chunks) {
            let mut again = Vec::new();
            for (header, msg) in &frames {
                msg.encode_into(header.request_id(), header.flags(), &mut again).unwrap();
            }
            prop_assert!(bytes.starts_with(&again));
        }
    }

    #[test]
    fn frame_decoder_survives_arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..600),
        chunks in prop::collection::vec(1usize..64, 1..5),
        prefix in any::<bool>(),
    ) {
        let mut bytes = bytes;
        if prefix && bytes.len() >= 3 {
            bytes[..3].copy_from_slice(&[0x54, 0x4c, 1]);
        }
        let _ = feed(&bytes, &chunks);
    }
}
